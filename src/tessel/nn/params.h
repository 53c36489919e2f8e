#pragma once
// ParamStore: every parameter of a model in one flat fp32 buffer, with its fp32 gradient in a second
// flat buffer of the same layout, and (for bf16 compute) a flat bf16 copy refreshed after each update.
// Parameters registered one after another are adjacent, so a fused QKV or gate/up weight is a plain
// view over its parts. Initial values are drawn from Philox keyed by (seed, name, global element
// index): a shard holds exactly the values of the unsharded tensor.
//
// Sharded masters (the distributed optimizer in bf16 runs, as Megatron-LM's): the store holds the
// fp32 masters of its shard of the flat range only (shard(): flat_shard.h, packed), with the whole
// bf16 copy and the whole fp32 gradients: 2 + 4 + 4/dp bytes per parameter before the moments. The
// parameters compute reads in fp32 (norm weights, biases, the embedding table unless
// precision.fp32_embedding is off, the MoE router: mark_f32_compute) keep a whole fp32 copy
// besides, packed in flat order (f32_at); the trainer gathers both copies from the shards after
// each step. (FP8 Linears quantise the bf16 copy.)
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/flat_shard.h"

namespace tessel::nn {

class Fp8State;

enum class Init { normal, ones, zeros };

// Whether a parameter (or an FP8 slot named after its Linear) belongs to a routed expert: the MoE
// block names them "<layer>.mlp.experts.<e>.*" (the shared expert is "shared_experts", not matched).
inline bool is_routed_expert_name(const std::string& name) { return name.find(".experts.") != std::string::npos; }

struct ParamSpec {
  std::string name;
  Shape shape;
  Init init;
  float std;          // for Init::normal
  bool weight_decay;  // false for norms and biases
  int64_t offset;     // elements into the flat buffers
  int64_t numel;
  Shape global_shape;  // the unsharded tensor (= shape unless tensor-parallel)
  Shape slice_begin;   // where this shard starts in the global tensor, per dimension
  // A copy of a parameter another pipeline stage owns (the tied embedding on the last stage): kept
  // equal by summing both gradients, counted once in the gradient norm, saved once.
  bool tied_copy = false;
  // Key/value heads replicated over tensor parallelism (tp > num_query_groups): `replicas` ranks hold
  // this same slice, this one is number `replica`. Each sees other query heads' share of the
  // gradient, summed over those ranks (Model::reduce_tensor_parallel_grads); replica 0 counts in the norm.
  int replicas = 1;
  int replica = 0;
  // A routed expert's parameter under expert parallelism: other expert-parallel ranks hold other
  // experts, so its gradient sums over the expert-data-parallel group, not the data-parallel one.
  bool expert = false;
  // Read in fp32 by the forward and backward (not through the compute copy). With sharded masters
  // its fp32 values are kept whole at f32_offset of the packed fp32 copy.
  bool f32_compute = false;
  int64_t f32_offset = -1;
};

// This rank's place in a group sharding the fp32 masters and the optimizer state (the distributed
// optimizer's; size 1: it holds all of it).
using MasterShard = ShardGroup;

class ParamStore {
 public:
  explicit ParamStore(DType compute) : compute_(compute) {}
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Registers a parameter; returns its offset. Only before finalize(). O(1) amortised (indexed by
  // name and offset), so a model of many layers sets up in linear time.
  int64_t add(const std::string& name, const Shape& shape, Init init, float std, bool weight_decay);
  // Registers shard `part` of `parts` equal slices along dimension `dim` of a tensor whose global
  // shape is `global_shape` (tensor parallelism). Its values are drawn exactly as the unsharded
  // tensor holds them at the same global indices.
  int64_t add_shard(const std::string& name, const Shape& global_shape, int dim, int part, int parts, Init init,
                    float std, bool weight_decay);
  void mark_tied_copy(int64_t offset);
  void set_replica(int64_t offset, int replicas, int replica);
  void mark_expert_range(int64_t begin, int64_t end);  // every parameter registered in [begin, end)
  void mark_f32_compute(int64_t offset);
  // Allocates the flat buffers: fp32 parameters and gradients, plus the compute copy. `shard` and
  // `expert_shard` are the distributed optimizer's groups (flat_shard.h: the replicated parameters
  // over the first, routed experts under expert parallelism over the second); with either of size
  // > 1 in a bf16 run the store keeps the fp32 masters of this rank's shard only (see above). Refuses
  // with the size in GiB, before allocating, when they exceed the machine's memory.
  void finalize(MasterShard shard = {}, MasterShard expert_shard = {});
  void initialize(uint64_t seed);
  // Elements of the flat range each of `parts` ranks owns: equal contiguous blocks (the last ones
  // shorter or empty), the distributed optimizer's shards.
  static std::vector<int64_t> shard_counts(int64_t numel, int parts);

  DType compute_dtype() const { return compute_; }
  int64_t numel() const { return total_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& spec(const std::string& name) const;

  // Views at an element offset (a parameter, or several adjacent ones fused). param_at, param,
  // params_flat and params_data are the fp32 masters of the whole range: refused when sharded.
  Tensor param_at(int64_t offset, const Shape& shape) const;
  Tensor grad_at(int64_t offset, const Shape& shape);  // not const: gradients are written through it
  Tensor compute_at(int64_t offset, const Shape& shape) const;  // f32 params or their bf16 copy
  // The fp32 values of parameters marked f32_compute (the masters unless they are sharded).
  Tensor f32_at(int64_t offset, const Shape& shape) const;
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name);

  // The flat buffers as tensors on their device (what kernels and collectives take), and as host
  // pointers (cpu only: checkpoints, tests).
  const Tensor& params_flat() const {
    if (sharded_) refuse_whole_masters(-1, "params_flat");
    return params_;
  }
  const Tensor& grads_flat() const { return grads_; }
  float* params_data() const {
    if (sharded_) refuse_whole_masters(-1, "params_data");
    return params_.data<float>();
  }
  float* grads_data() { return grads_.data<float>(); }
  const float* grads_data() const { return grads_.data<float>(); }
  void zero_grads();
  void refresh_compute_copy();  // call after every change to the fp32 parameters (not when sharded)

  // The distributed optimizer's shard of this rank (all of the range when there is none): what
  // the optimizer updates, and where it keeps it packed (flat_shard.h).
  const FlatShard& shard() const { return shard_; }
  // The masters this rank holds: sharded, the fp32 values of shard() packed (element 0 is its local
  // element 0); else the whole flat fp32 parameters.
  bool masters_sharded() const { return sharded_; }
  const Tensor& masters() const { return sharded_ ? masters_ : params_; }
  // Sharded: the packed fp32 copy of the f32_compute parameters (flat order), where unit u of
  // shard() starts in it, and the elements of that unit's part inside each rank's block of the unit
  // (contiguous in the packed order: what each rank contributes to the unit's all-gather).
  const Tensor& f32_copy() const { return f32_copy_; }
  int64_t f32_copy_unit_begin(size_t unit) const;
  std::vector<int64_t> f32_copy_counts(size_t unit = 0) const;
  // Writes a parameter's values (fp32, its shape, on the store's device or host memory): its master (the part this rank holds),
  // its compute copy and its fp32 copy. Then call mark_updated().
  void set_values(const ParamSpec& s, const Tensor& values);
  // Counts changes of the parameters (refresh_compute_copy, mark_updated): caches of derived forms
  // (FP8 weights) compare it with the version they were made from.
  void mark_updated() { ++version_; }
  uint64_t version() const { return version_; }
  // The FP8 state Linears registered from now on quantise with (null: they compute in compute_dtype).
  void set_fp8(Fp8State* fp8) { fp8_ = fp8; }
  Fp8State* fp8() { return fp8_; }
  const Fp8State* fp8() const { return fp8_; }

 private:
  DType compute_;
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> by_name_;  // spec index of each name
  std::unordered_map<int64_t, size_t> by_offset_;    // spec index of the first parameter at each offset
  ParamSpec& spec_at_offset(int64_t offset, const char* caller);
  int64_t total_ = 0;
  bool finalized_ = false;
  uint64_t version_ = 0;
  Fp8State* fp8_ = nullptr;
  Tensor params_, grads_, compute_copy_;
  // Sharded masters (see above).
  bool sharded_ = false;
  FlatShard shard_;
  Tensor masters_, f32_copy_;
  int64_t f32_total_ = 0;
  std::vector<int64_t> f32_unit_begin_;            // per unit of shard_, computed at finalize
  std::vector<std::vector<int64_t>> f32_counts_;  // f32_copy_counts(unit), computed at finalize
  [[noreturn]] void refuse_whole_masters(int64_t offset, const char* what) const;
};

// Draws the initial values of parameter `spec` for the slice rows [row_begin, row_begin + rows) and
// columns [col_begin, col_begin + cols) of its global [R, C] shape (1-D tensors are [1, C]); the
// indices are global (spec.global_shape).
void init_param_slice(const ParamSpec& spec, uint64_t seed, int64_t row_begin, int64_t rows, int64_t col_begin,
                      int64_t cols, float* out);

// All-reduces (sum) over `group` the gradients of the parameters selected(spec) picks, packed into
// one message (a communication buffer on the gradients' device).
template <class Pred>
void sum_grads(ParamStore& ps, comm::Communicator& group, Pred selected) {
  int64_t n = 0;
  for (const auto& s : ps.specs())
    if (selected(s)) n += s.numel;
  if (n == 0) return;
  Tensor packed;
  {
    MemoryCategoryScope tag(MemoryCategory::communication);
    packed = Tensor::empty({n}, DType::f32, ps.grads_flat().device());
  }
  auto each = [&](auto copy) {
    int64_t at = 0;
    for (const auto& s : ps.specs())
      if (selected(s)) {
        copy(packed.slice(0, at, at + s.numel), ps.grads_flat().slice(0, s.offset, s.offset + s.numel));
        at += s.numel;
      }
  };
  each([](Tensor part, const Tensor& grad) { part.copy_from(grad); });
  group.all_reduce(packed.device_ptr(), n, DType::f32, comm::ReduceOp::sum);
  each([](const Tensor& part, Tensor grad) { grad.copy_from(part); });
}

}  // namespace tessel::nn
