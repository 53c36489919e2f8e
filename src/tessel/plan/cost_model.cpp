#include "tessel/plan/cost_model.h"

#include <algorithm>
#include <array>

#include "tessel/core/check.h"

namespace tessel::plan {
namespace {

bool is_attention(std::string_view op, bool* backward) {
  // attention_fwd / attention_bwd, ring_attention_fwd / ring_attention_bwd
  const bool fwd = op == "attention_fwd" || op == "ring_attention_fwd";
  const bool bwd = op == "attention_bwd" || op == "ring_attention_bwd";
  *backward = bwd;
  return fwd || bwd;
}

}  // namespace

bool priced_by_compute(std::string_view op) {
  bool backward = false;
  return op == "gemm" || op == "fp8_gemm" || is_attention(op, &backward);
}

std::string_view compute_kind(const kernels::OpRecord& r) {
  if (r.op == "fp8_gemm") return "fp8_gemm";
  if (r.op == "gemm") {
    const kernels::OperandList& o = r.operands;
    TESSEL_CHECK(!o.empty() && (o.dtype(0) == DType::bf16 || o.dtype(0) == DType::f32),
                 "planner: a gemm of inputs {} has no profile entry (gemm.bf16 and gemm.f32 only)",
                 o.empty() ? "?" : std::string(dtype_name(o.dtype(0))));
    return o.dtype(0) == DType::bf16 ? "gemm.bf16" : "gemm.f32";
  }
  bool backward = false;
  if (is_attention(r.op, &backward)) return backward ? "attention_bwd" : "attention_fwd";
  return "";
}

namespace {

// efficiency_dims, written into `dims` (6 at most) without allocating: op_seconds runs once per
// kernel call of every layout a search estimates. Returns how many there are.
size_t efficiency_dims_into(const kernels::OpRecord& r, std::array<double, 6>& dims) {
  if (r.op == "gemm" || r.op == "fp8_gemm") {
    // Operands a, b, (bias), c: c is [M, N]; K is a's second dim, or its first when a is transposed.
    const kernels::OperandList& o = r.operands;
    TESSEL_CHECK(o.size() >= 3 && o.shape(0).size() == 2 && o.back_shape().size() == 2,
                 "planner: a {} record without 2-D operands", r.op);
    const std::span<const int64_t> a = o.shape(0), c = o.back_shape();
    const bool trans_a = !r.variant.empty() && r.variant[0] == 'T';
    dims = {double(c[0]), double(c[1]), double(trans_a ? a[0] : a[1])};
    return 3;
  }
  // Attention: q [B*T, H*Dh], k [B*T, G*Dh], v, ..., lse [B, H, T] (the first 3-D operand).
  const kernels::OperandList& o = r.operands;
  size_t lse = 0;
  while (lse < o.size() && o.shape(lse).size() != 3) ++lse;
  TESSEL_CHECK(lse < o.size() && o.size() >= 3, "planner: an {} record without its lse operand", r.op);
  const double B = double(o.shape(lse)[0]), H = double(o.shape(lse)[1]), T = double(o.shape(lse)[2]);
  const double Dh = double(o.shape(0)[1]) / H, G = double(o.shape(1)[1]) / Dh;
  const double Dv = double(o.shape(2)[1]) / G;
  dims = {B, T, H, G, Dh, Dv};
  return 6;
}

}  // namespace

std::vector<double> efficiency_dims(const kernels::OpRecord& r) {
  std::array<double, 6> dims{};
  const size_t n = efficiency_dims_into(r, dims);
  return {dims.begin(), dims.begin() + long(n)};
}

double op_seconds(const HardwareProfile& hw, const kernels::OpRecord& r) {
  const std::string_view kind = compute_kind(r);
  if (!kind.empty()) {
    const auto it = hw.compute.find(kind);
    TESSEL_CHECK(it != hw.compute.end(), "hardware profile {} has no compute entry '{}' (needed by {} calls)",
                 hw.source, kind, r.op);
    std::array<double, 6> dims{};
    const size_t n = efficiency_dims_into(r, dims);
    const double eff = it->second.efficiency.at(std::span<const double>(dims.data(), n), r.variant);
    TESSEL_CHECK(eff > 0, "hardware profile {}: compute.{} has efficiency 0 for {}", hw.source, kind, r.op);
    return hw.kernel_latency_s + hw.host_seconds_per_kernel + r.flops / (it->second.peak_flops * eff);
  }
  auto it = hw.memory.find(r.op);
  if (it == hw.memory.end()) it = hw.memory.find("default");
  TESSEL_CHECK(it != hw.memory.end(), "hardware profile {} has no memory efficiency for '{}' nor a default",
               hw.source, r.op);
  return hw.kernel_latency_s + hw.host_seconds_per_kernel + hw.memory_latency_s +
         double(r.bytes_read + r.bytes_written) / (hw.memory_bandwidth * it->second.efficiency);
}

std::string network_level(const HardwareProfile& hw, const std::string& group, const comm::ParallelSizes& s, int dp) {
  // Ranks are ordered tp-cp-dp-pp (comm/parallel_state.h): a group's members are `size` ranks
  // `stride` apart, spanning stride x (size - 1) + 1 consecutive ranks.
  const int64_t tp = s.tp, cp = s.cp, pp = s.pp;
  int64_t stride = 1, size = 1;
  if (group == "tp") size = tp;
  else if (group == "cp") stride = tp, size = cp;
  else if (group == "dp") stride = tp * cp, size = dp;
  // DualPipe's pair (pipeline ranks r and P-1-r): at most the pipeline group's span.
  else if (group == "pp" || group == "embedding" || group == "dualpipe_pair") stride = tp * cp * dp, size = pp;
  else if (group == "dp_cp") stride = tp, size = cp * dp;
  else if (group == "ep") stride = tp, size = s.ep;
  else if (group == "ep_dp") stride = tp * s.ep, size = cp * dp / s.ep;
  else if (group == "world" || group.empty()) stride = 1, size = tp * cp * dp * pp;
  else TESSEL_FAIL("planner: no network level for group '{}'", group);
  const int64_t span = stride * (size - 1) + 1;
  const std::string level = span <= hw.devices_per_node ? "intra_node" : "inter_node";
  TESSEL_CHECK(hw.networks.count(level),
               "hardware profile {} has no '{}' network level, and the {} group spans {} ranks (nodes of {})", hw.source,
               level, group, span, hw.devices_per_node);
  return level;
}

double collective_seconds(const HardwareProfile& hw, const std::string& level, const comm::CommRecord& r) {
  const int64_t n = r.group_size;
  if (n <= 1 || r.bytes == 0) return 0;
  std::string kind;
  double message = double(r.bytes);  // the payload this rank contributes (communicator.h)
  if (r.kind == "all_reduce") kind = "all_reduce";
  else if (r.kind == "all_gather") kind = "all_gather", message *= double(n);  // every rank's block
  else if (r.kind == "broadcast") kind = "all_gather";
  else if (r.kind == "reduce_scatter" || r.kind == "reduce") kind = "reduce_scatter";
  else if (r.kind == "all_to_all") kind = "all2all";
  else if (r.kind == "send") kind = "p2p";
  else TESSEL_FAIL("planner: collective kind '{}' has no cost model", r.kind);
  const auto net = hw.networks.find(level);
  TESSEL_CHECK(net != hw.networks.end(), "hardware profile {} has no '{}' network level", hw.source, level);
  const CollectiveProfile& c = net->second.ops.at(kind);
  const bool p2p = kind == "p2p";
  const double steps = p2p ? 1.0 : c.scale * double(n + int64_t(c.offset));
  const double bus = p2p ? message : message * c.scale * (double(n) + c.offset) / double(n);
  // A send is between two ranks whatever the size of the group it is made in (SimuMax prices p2p
  // at 2 as well).
  return c.fixed_latency_for(p2p ? 2 : n) + steps * c.latency_s + bus / (c.bandwidth * c.efficiency);
}

}  // namespace tessel::plan
