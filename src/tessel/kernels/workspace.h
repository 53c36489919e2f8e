#pragma once
// Workspace of cpu kernels. A kernel that needs scratch (the GEMM's operand copies and oneDNN
// scratchpad, the FP8 emulation's decoded operands) asks kernel_workspace() for it, in a fixed
// order. Run from a dispatch point, the scratch was allocated there, on the launching thread, in
// that same order (a WorkspaceSupply), as a GPU framework allocates a kernel's workspace on the host
// at launch: the accounting then follows the host's program order whether the kernel runs at once
// or later on the cpu queue (core/device_queue.h), and the meta device allocates exactly the same.
// Called directly (a benchmark, a test), a kernel allocates its own.
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The next tensor of the supply installed on this thread (its shape and dtype checked against the
// request), or a new workspace tensor on the cpu when there is none.
Tensor kernel_workspace(const Shape& shape, DType dtype);

// Installs `views` (borrowed, in the kernel's order) as this thread's supply while it lives.
class WorkspaceSupplyScope {
 public:
  explicit WorkspaceSupplyScope(const std::vector<Tensor>& views);
  ~WorkspaceSupplyScope();
  WorkspaceSupplyScope(const WorkspaceSupplyScope&) = delete;
  WorkspaceSupplyScope& operator=(const WorkspaceSupplyScope&) = delete;

  struct Supply {
    const std::vector<Tensor>* views;
    size_t next;
  };

 private:
  Supply mine_;
  Supply* previous_;
};

std::vector<Tensor> borrow_all(const std::vector<Tensor>& tensors);  // Tensor::borrow of each

}  // namespace tessel::kernels
