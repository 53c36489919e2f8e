#include "tessel/kernels/workspace.h"

namespace tessel::kernels {

namespace {
thread_local WorkspaceSupplyScope::Supply* t_supply = nullptr;
}

WorkspaceSupplyScope::WorkspaceSupplyScope(const std::vector<Tensor>& views) : mine_{&views, 0}, previous_(t_supply) {
  t_supply = &mine_;
}
WorkspaceSupplyScope::~WorkspaceSupplyScope() { t_supply = previous_; }

Tensor kernel_workspace(const Shape& shape, DType dtype) {
  if (!t_supply) {
    MemoryCategoryScope scratch(MemoryCategory::workspace);
    return Tensor::empty(shape, dtype, Device::cpu);
  }
  const std::vector<Tensor>& views = *t_supply->views;
  TESSEL_CHECK(t_supply->next < views.size(),
               "kernel workspace: the kernel asked for {}{} beyond the {} tensors its launcher allocated (the "
               "workspace plan and the kernel are out of step)",
               dtype_name(dtype), shape_str(shape), views.size());
  const Tensor& t = views[t_supply->next++];
  TESSEL_CHECK(t.shape() == shape && t.dtype() == dtype,
               "kernel workspace: the kernel asked for {}{} where its launcher allocated {} (the workspace plan and "
               "the kernel are out of step)",
               dtype_name(dtype), shape_str(shape), t.str());
  return t;
}

std::vector<Tensor> borrow_all(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (const Tensor& t : tensors) views.push_back(t.borrow());
  return views;
}

}  // namespace tessel::kernels
