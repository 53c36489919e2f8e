// The training step on the meta device against the same step run on the cpu (in strict mode: no
// host access to device memory outside kernels and explicit copies), for every rank of several
// layouts: the peak of the cpu allocator over setup and two steps, each category's share at that
// moment and where in the step it occurs, the kernel calls (calls, FLOPs, bytes per op family) and
// the collectives per group must be equal, byte for byte; so must the reserve of the pool and each
// category's share at its peak, against the cpu run again outside strict mode (where blocks go back
// in program order). The cpu run is set up over a meta world of the same rank (collectives move
// nothing, so no other process is needed; the real multi-process comparison is
// tests/mpi/meta_step_test.cpp). Independently of both, the GEMM FLOPs are checked against
// 6 x tokens x the weights' elements (8 x with recompute).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "support/error_of.h"
#include "support/tiny_configs.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/data/batch.h"
#include "tessel/nn/alike_calls.h"
#include "tessel/nn/moe.h"
#include "tessel/train/dry_run.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

constexpr int kSteps = 2;
constexpr const char* kAllDense = "model.moe_first_dense_layers=5";  // 4 layers + the MTP module's

StepMeasurement measure(const Config& cfg, int world, int rank, Device device,
                        nn::MoeRoutingTrace* routing = nullptr) {
  auto w = comm::make_meta_communicator(rank, world, device);
  comm::ParallelState groups(*w, cfg.parallel_sizes());
  return measure_training_step(cfg, groups, device, kSteps, routing);
}

void expect_equal(const StepMeasurement& meta, const StepMeasurement& cpu, const std::string& where) {
  EXPECT_EQ(meta.peak_bytes, cpu.peak_bytes) << where;
  EXPECT_EQ(meta.peak_bytes_by_category, cpu.peak_bytes_by_category) << where;
  EXPECT_EQ(meta.peak_requested_bytes_by_category, cpu.peak_requested_bytes_by_category) << where;
  EXPECT_EQ(meta.peak_at, cpu.peak_at) << where;
  ASSERT_EQ(meta.ops.size(), cpu.ops.size()) << where;
  for (const auto& [op, t] : cpu.ops) {
    ASSERT_TRUE(meta.ops.count(op)) << where << ": " << op;
    const kernels::OpTotals& m = meta.ops.at(op);
    EXPECT_EQ(m.calls, t.calls) << where << ": " << op;
    EXPECT_EQ(m.flops, t.flops) << where << ": " << op;
    EXPECT_EQ(m.bytes_read, t.bytes_read) << where << ": " << op;
    EXPECT_EQ(m.bytes_written, t.bytes_written) << where << ": " << op;
  }
  ASSERT_EQ(meta.comm_by_group.size(), cpu.comm_by_group.size()) << where;
  for (const auto& [group, kinds] : cpu.comm_by_group)
    for (const auto& [kind, c] : kinds) {
      EXPECT_EQ(meta.comm_by_group.at(group).at(kind).calls, c.calls) << where << ": " << group << " " << kind;
      EXPECT_EQ(meta.comm_by_group.at(group).at(kind).bytes, c.bytes) << where << ": " << group << " " << kind;
    }
}

struct Layout {
  const char* name;
  const char* yaml;
  int world;
  std::vector<std::string> sets;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class MetaStep : public ::testing::TestWithParam<Layout> {};

TEST_P(MetaStep, EveryRankMatchesTheCpuStepByteForByte) {
  const Layout& l = GetParam();
  const Config cfg = Config::from_yaml_text(l.yaml, l.sets);
  for (int rank = 0; rank < l.world; ++rank) {
    // MoE: the meta run replays the cpu run's routing (the real token counts per expert).
    nn::MoeRoutingTrace routing(nn::MoeRoutingTrace::Mode::record);
    // The cpu run in strict mode: every touch of device memory outside a kernel or an explicit
    // copy would throw, naming the tensor.
    set_strict_cpu(true);
    const StepMeasurement cpu = measure(cfg, l.world, rank, Device::cpu, &routing);
    set_strict_cpu(false);
    routing.set_mode(nn::MoeRoutingTrace::Mode::replay);
    const StepMeasurement meta = measure(cfg, l.world, rank, Device::meta, &routing);
    if (cfg.model.is_moe_layer(cfg.model.num_layers - 1)) {
      EXPECT_GT(routing.calls(), 0u) << l.name;
    }
    const std::string where = fmt::format("{} rank {}", l.name, rank);
    expect_equal(meta, cpu, where);
    // The pool's reserve, against the cpu run as a real run has it: blocks go back to the pool where
    // the program frees them (in strict mode, as the kernel queue reaches the free: timing). A run of
    // its own, whose routing under expert parallelism differs (the meta world's all-to-all moves no
    // tokens), so replayed on meta again.
    nn::MoeRoutingTrace pooled_routing(nn::MoeRoutingTrace::Mode::record);
    const StepMeasurement pooled = measure(cfg, l.world, rank, Device::cpu, &pooled_routing);
    pooled_routing.set_mode(nn::MoeRoutingTrace::Mode::replay);
    const StepMeasurement meta_pooled = measure(cfg, l.world, rank, Device::meta, &pooled_routing);
    EXPECT_EQ(meta_pooled.peak_bytes, pooled.peak_bytes) << where;
    EXPECT_EQ(meta_pooled.peak_reserved_bytes, pooled.peak_reserved_bytes) << where;
    EXPECT_EQ(meta_pooled.peak_reserved_bytes_by_category, pooled.peak_reserved_bytes_by_category) << where;
    EXPECT_GE(pooled.peak_reserved_bytes, pooled.peak_bytes) << where;
    // Hardware profiles price memory-bound ops by these names and refuse any other (op_log.h).
    for (const auto& [op, t] : cpu.ops) EXPECT_TRUE(kernels::is_op_family(op)) << l.name << ": " << op << " is not in kOpFamilies";
    EXPECT_GT(cpu.peak_bytes_by_category[size_t(MemoryCategory::activations)], 0) << l.name;
    EXPECT_GT(cpu.flops, 0) << l.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MetaStep,
    ::testing::Values(
        Layout{"llama_one_rank", testing::kTinyLlamaYaml, 1, {}},
        Layout{"llama_fp32", testing::kTinyLlamaYaml, 1, {"precision.compute=fp32"}},
        Layout{"llama_recompute", testing::kTinyLlamaYaml, 1, {"model.recompute=true"}},
        Layout{"llama_tp2", testing::kTinyLlamaYaml, 2, {"parallel.tensor_model_parallel_size=2"}},
        Layout{"llama_tp2_sp", testing::kTinyLlamaYaml, 2, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}},
        Layout{"llama_pp2", testing::kTinyLlamaYaml, 2, {"parallel.pipeline_model_parallel_size=2"}},
        Layout{"llama_pp2_vpp2", testing::kTinyLlamaYaml, 2,
               {"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"}},
        Layout{"llama_dp2_zero", testing::kTinyLlamaYaml, 2, {"parallel.use_distributed_optimizer=true"}},
        Layout{"llama_tp2_pp2_dp2_zero", testing::kTinyLlamaYaml, 8,
               {"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                "parallel.use_distributed_optimizer=true"}},
        Layout{"gpt2_one_rank", testing::kTinyGpt2Yaml, 1, {}},
        Layout{"gpt2_tp2_sp", testing::kTinyGpt2Yaml, 2, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}},
        Layout{"gpt2_pp2_dp2_tied", testing::kTinyGpt2Yaml, 4, {"parallel.pipeline_model_parallel_size=2"}},
        // DeepSeek-V3-tiny's attention and multi-token prediction, its layers (and MTP's) all dense.
        Layout{"dsv3_mla_mtp", testing::kTinyDeepSeekYaml, 1, {kAllDense}},
        Layout{"dsv3_mla_mtp_tp2_sp_pp2", testing::kTinyDeepSeekYaml, 4,
               {kAllDense, "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "parallel.pipeline_model_parallel_size=2"}},
        Layout{"dsv3_mla_mtp_recompute_dp2_zero", testing::kTinyDeepSeekYaml, 2,
               {kAllDense, "model.recompute=true", "parallel.use_distributed_optimizer=true"}},
        // MoE: the routed experts' token counts come from the cpu run's routing, replayed.
        Layout{"mixtral_one_rank", testing::kTinyMixtralYaml, 1, {}},
        Layout{"mixtral_ep2_dp2_zero", testing::kTinyMixtralYaml, 2,
               {"parallel.expert_model_parallel_size=2", "parallel.use_distributed_optimizer=true"}},
        Layout{"mixtral_tp2_sp_expert_tp_ep2", testing::kTinyMixtralYaml, 4,
               {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "parallel.expert_tensor_parallel_size=2", "parallel.expert_model_parallel_size=2"}},
        Layout{"mixtral_capacity_probs_pp2", testing::kTinyMixtralYaml, 2,
               {"model.moe_expert_capacity_factor=1.0", "parallel.pipeline_model_parallel_size=2"}},
        Layout{"dsv3_tiny_pp2_ep2_recompute", testing::kTinyDeepSeekYaml, 4,
               {"parallel.pipeline_model_parallel_size=2", "parallel.expert_model_parallel_size=2",
                "model.recompute=true"}},
        // FP8: block scaling (row and column tiles, 128 x 128 weight blocks, the fused writers),
        // delayed scaling (amax histories reduced over tp) and current scaling.
        Layout{"llama_fp8_block", testing::kTinyLlamaYaml, 1, {"precision.fp8.recipe=block"}},
        Layout{"llama_fp8_delayed_tp2_sp", testing::kTinyLlamaYaml, 2,
               {"precision.fp8.recipe=delayed", "parallel.tensor_model_parallel_size=2",
                "parallel.sequence_parallel=true"}},
        Layout{"gpt2_fp8_current_dp2_zero", testing::kTinyGpt2Yaml, 2,
               {"precision.fp8.recipe=current", "parallel.use_distributed_optimizer=true"}},
        Layout{"dsv3_tiny_fp8_block_pp2_ep2", testing::kTinyDeepSeekYaml, 4,
               {"precision.fp8.recipe=block", "parallel.pipeline_model_parallel_size=2",
                "parallel.expert_model_parallel_size=2"}},
        // Context parallelism: ring attention (its transfers) and the sequence chunks.
        Layout{"llama_cp2", testing::kTinyLlamaYaml, 2, {"parallel.context_parallel_size=2"}},
        Layout{"gpt2_cp2_tp2_sp", testing::kTinyGpt2Yaml, 4,
               {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                "parallel.sequence_parallel=true"}},
        Layout{"dsv3_tiny_cp2_ep2", testing::kTinyDeepSeekYaml, 2,
               {"parallel.context_parallel_size=2", "parallel.expert_model_parallel_size=2"}}),
    [](const auto& info) { return std::string(info.param.name); });

// `tessel plan calibrate` fits each op family's cost from the kernels' own times: with timing on,
// every kernel call of a cpu step is timed, those whose result the host reads as they return
// (cross-entropy, the gradient norm's sum of squares, FP8 amaxes, the MoE auxiliary losses)
// included, in strict mode too. MoE with MLA and MTP, the three FP8 recipes, vocabulary-parallel
// cross-entropy under tp, ring attention under cp.
TEST(OpTiming, EveryKernelCallOfACpuStepIsTimed) {
  const std::vector<std::tuple<const char*, int, std::vector<std::string>>> layouts = {
      {testing::kTinyDeepSeekYaml, 1, {}},
      {testing::kTinyMixtralYaml, 1, {"model.moe_router_load_balancing_type=seq_aux_loss", "model.moe_z_loss_coeff=0.001"}},
      {testing::kTinyLlamaYaml, 1, {"precision.fp8.recipe=delayed"}},
      {testing::kTinyLlamaYaml, 1, {"precision.fp8.recipe=block"}},
      {testing::kTinyGpt2Yaml, 1, {"precision.fp8.recipe=current"}},
      {testing::kTinyLlamaYaml, 2, {"parallel.tensor_model_parallel_size=2"}},
      {testing::kTinyLlamaYaml, 2, {"parallel.context_parallel_size=2"}},  // ring attention
  };
  for (const auto& [yaml, world, sets] : layouts) {
    const Config cfg = Config::from_yaml_text(yaml, sets);
    const std::string where = fmt::format("{}", fmt::join(sets, " "));
    auto w = comm::make_meta_communicator(0, world, Device::cpu);
    comm::ParallelState groups(*w, cfg.parallel_sizes());
    const StepMeasurement m = [&] {
      const kernels::OpTimingScope timed;  // on for this measurement only, even if it throws
      return measure_training_step(cfg, groups, Device::cpu, 1, nullptr, true);
    }();
    ASSERT_FALSE(m.op_records.empty()) << where;
    std::set<std::string> untimed;
    for (const kernels::OpRecord& r : m.op_records)
      if (r.seconds < 0) untimed.insert(std::string(r.op));
    EXPECT_TRUE(untimed.empty()) << where << ": untimed " << fmt::format("{}", fmt::join(untimed, ", "));
  }
}

// A meta run that runs three of each row of alike experts (nn/alike_calls.h; the planner's
// shortcut) measures what running all of them does, over two steps (the FP8 weights quantised again):
// the peak, its categories and phase, every op family's calls, FLOPs and bytes, every group's
// collectives. The run of all of them is the one the cpu run is compared with above.
TEST(MetaStep, AlikeExpertsRunOnceMeasureWhatRunningEveryExpertDoes) {
  const std::vector<std::pair<const char*, std::vector<std::string>>> layouts{
      {testing::kTinyMixtralYaml, {}},
      // 30 rows x top-2 over 8 experts: rows of 8 and 7 copies.
      {testing::kTinyMixtralYaml, {"model.seq_length=30", "model.recompute=true"}},
      {testing::kTinyMixtralYaml,
       {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
        "parallel.expert_tensor_parallel_size=2"}},
      {testing::kTinyMixtralYaml, {"parallel.tensor_model_parallel_size=2", "parallel.expert_tensor_parallel_size=2"}},
      {testing::kTinyDeepSeekYaml, {"precision.fp8.recipe=block", "model.recompute=true"}},
      {testing::kTinyDeepSeekYaml, {"precision.fp8.recipe=delayed", "parallel.expert_model_parallel_size=2"}}};
  for (const auto& [yaml, sets] : layouts) {
    const Config cfg = Config::from_yaml_text(yaml, sets);
    const int world = int(cfg.parallel.tensor_model_parallel_size * cfg.parallel.expert_model_parallel_size);
    const StepMeasurement every = measure(cfg, world, 0, Device::meta);
    const nn::AlikeCallsOnceScope once(true);
    const StepMeasurement alike = measure(cfg, world, 0, Device::meta);
    expect_equal(alike, every, fmt::format("{}", fmt::join(sets, " ")));
  }
}

// GEMM FLOPs of one rank without parallelism, from the sizes alone: every 2-D weight but the
// embedding table is one GEMM per token forward (2 FLOPs per weight) and two backward; recompute
// runs the layers' forward again. The embedding is a lookup, the tied head a GEMM over it.
double gemm_flops_from_sizes(const Config& cfg, bool recompute) {
  Trainer t(cfg, nullptr);
  double layer = 0, head = 0;
  for (const nn::ParamSpec& s : t.model().params().specs()) {
    if (s.shape.size() != 2 || s.name == "model.embed_tokens.weight" || s.name == "model.embed_positions.weight") continue;
    (s.name.rfind("model.layers.", 0) == 0 ? layer : head) += double(s.numel);
  }
  if (cfg.model.tie_embeddings) head += double(cfg.model.vocab_size * cfg.model.hidden_size);
  const double tokens = double(cfg.train.global_batch_size * cfg.model.seq_length);
  return kSteps * tokens * (2.0 * (recompute ? 4 : 3) * layer + 6.0 * head);
}

TEST(MetaStep, GemmFlopsEqualSixTimesTokensTimesWeights) {
  for (const auto& [yaml, sets] : std::vector<std::pair<const char*, std::vector<std::string>>>{
           {testing::kTinyLlamaYaml, {}}, {testing::kTinyLlamaYaml, {"model.recompute=true"}}, {testing::kTinyGpt2Yaml, {}}}) {
    const Config cfg = Config::from_yaml_text(yaml, sets);
    const StepMeasurement meta = measure(cfg, 1, 0, Device::meta);
    EXPECT_DOUBLE_EQ(meta.ops.at("gemm").flops, gemm_flops_from_sizes(cfg, cfg.model.recompute)) << yaml;
  }
}

// Strict cpu mode: host code reaches a cpu tensor's data only inside a DeviceAccessScope (what
// kernels' dispatch points and explicit copies open); memory wrapped from the host stays reachable.
TEST(StrictCpu, AHostAccessOutsideAKernelIsRefusedNamingTheTensor) {
  set_strict_cpu(true);
  const Tensor t = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_EQ(tessel::testing::error_of([&] { (void)t.data<float>(); }),
            "f32[2, 3] was read or written by host code outside a kernel (strict cpu mode, TESSEL_DEVICE=cpu-strict): "
            "device memory is reached through a kernel's dispatch point or an explicit copy");
  {
    const DeviceAccessScope kernel;
    EXPECT_EQ(t.data<float>()[5], 0.0f);
  }
  float host[2] = {1.0f, 2.0f};
  EXPECT_EQ(Tensor::from_blob(host, {2}, DType::f32).data<float>()[1], 2.0f);
  EXPECT_EQ(t.slice(1, 2, 3).slice(0, 1, 2).item(), 0.0);  // item(): an explicit copy of one value
  set_strict_cpu(false);
  EXPECT_EQ(t.data<float>()[0], 0.0f);
}

// Without a recording the meta device routes in balance: every expert gets N k / E token copies of
// each micro-batch, so each expert's gate/up GEMM (weight [2 x 96, 64]) runs on exactly that many
// rows, forward and for the input gradient. And the whole dry run of a MoE model runs its step.
TEST(MetaStep, BalancedRoutingGivesEveryExpertItsShare) {
  const Config cfg = Config::from_yaml_text(testing::kTinyMixtralYaml, {});
  {
    DefaultDeviceScope on(Device::meta);
    kernels::op_log().clear();
    kernels::op_log().set_enabled(true);
    Trainer t(cfg, nullptr);
    const Shape shape{cfg.train.micro_batch_size, cfg.model.seq_length};
    const std::vector<data::Batch> mbs(size_t(cfg.grad_accumulation_steps()),
                                       data::Batch{Tensor::zeros(shape, DType::i64), Tensor::zeros(shape, DType::i64)});
    t.step(mbs, 0);
    kernels::op_log().set_enabled(false);
  }
  const int64_t copies = cfg.train.micro_batch_size * cfg.model.seq_length * cfg.model.moe_router_topk /
                         cfg.model.num_experts;
  int64_t expert_gemms = 0;
  for (const kernels::OpRecord& r : kernels::op_log().records())
    if (r.op == "gemm" && r.operands.shapes()[1] == Shape({2 * cfg.model.ffn_hidden_size, cfg.model.hidden_size})) {
      ++expert_gemms;
      EXPECT_EQ(r.operands.shape(0)[0], copies);
    }
  kernels::op_log().clear();
  EXPECT_EQ(expert_gemms, cfg.model.num_layers * cfg.model.num_experts * cfg.grad_accumulation_steps() * 2);
  const DryRunResult r = dry_run(cfg, 2, 1);  // dp 2
  ASSERT_TRUE(r.roles.at(0).step_ran);
  EXPECT_GT(r.roles.at(0).step.peak_bytes, r.roles.at(0).model_state_bytes);
}

// The expert-parallel rank that holds expert 0 sees the skew: with expert 0 taking S times its share
// and the other experts the rest evenly, its experts' FLOPs are (S + (E/ep - 1) x (E - S) / (E - 1))
// / (E/ep) times the balanced ones, and the other ranks' (E - S) / (E - 1) times.
TEST(MetaStep, SkewedRoutingLoadsTheRankOfExpertZero) {
  const Config cfg = Config::from_yaml_text(testing::kTinyMixtralYaml,
                                            {"parallel.expert_model_parallel_size=4", "train.global_batch_size=8"});
  const double S = 3, E = double(cfg.model.num_experts), per_rank = E / 4;
  const DryRunResult balanced = dry_run(cfg, 4, 1);
  const DryRunResult skewed = dry_run(cfg, 4, 1, S);
  ASSERT_EQ(balanced.roles.size(), 1u);
  ASSERT_EQ(skewed.roles.size(), 2u);
  EXPECT_EQ(skewed.roles[0].ranks, std::vector<int>({0}));
  EXPECT_EQ(skewed.roles[1].ranks, std::vector<int>({1, 2, 3}));
  EXPECT_EQ(skewed.roles[0].role, "pipeline stage 0 of 1, expert-parallel rank 0 (hot expert)");
  const auto swiglu = [](const DryRunRole& r) { return r.step.ops.at("swiglu_fwd").flops; };
  const double hot = swiglu(skewed.roles[0]) / swiglu(balanced.roles[0]);
  const double cold = swiglu(skewed.roles[1]) / swiglu(balanced.roles[0]);
  // Within the rounding of 64 copies per MoE call (one copy more or less per expert).
  EXPECT_NEAR(hot, (S + (per_rank - 1) * (E - S) / (E - 1)) / per_rank, 0.06);
  EXPECT_NEAR(cold, (E - S) / (E - 1), 0.06);
  // Exactly what the meta routing gives the ranks' experts (rank 1: experts 2 and 3).
  const int64_t copies = cfg.model.seq_length * cfg.train.micro_batch_size, k = cfg.model.moe_router_topk;
  const std::vector<int32_t> routed = nn::meta_routing(copies, k, int64_t(E), S);
  const auto share = [&](int first, int last) {
    int64_t n = 0;
    for (int32_t e : routed) n += e >= first && e <= last;
    return double(n) / (double(copies * k) * per_rank / E);
  };
  EXPECT_NEAR(hot, share(0, 1), 1e-12);
  EXPECT_NEAR(cold, share(2, 3), 1e-12);
  const auto a2a = [](const DryRunRole& r) { return r.step.comm_by_group.at("ep").at("all_to_all").bytes; };
  EXPECT_GT(a2a(skewed.roles[0]), a2a(balanced.roles[0]));
  EXPECT_LT(a2a(skewed.roles[1]), a2a(balanced.roles[0]));
  EXPECT_GT(skewed.roles[0].step.peak_bytes, skewed.roles[1].step.peak_bytes);
}

TEST(MetaStep, MetaRoutingPutsTheSkewOnExpertZeroAndKeepsEveryTokensExpertsDistinct) {
  const int64_t N = 64, k = 2, E = 8;
  EXPECT_EQ(nn::meta_routing(N, k, E, 1.0)[13], 13 % E);  // balanced: copy c to expert c mod E
  for (const auto& [n, kk, e] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 2, 8}, {30, 2, 8}, {7, 3, 5}, {4096, 8, 256}}) {
    std::vector<int64_t> listed(size_t(e), 0);
    for (const int32_t x : nn::meta_routing(n, kk, e, 1.0)) ++listed[size_t(x)];
    EXPECT_EQ(nn::meta_balanced_counts(n, kk, e), listed) << n << " x " << kk << " over " << e;
  }
  const std::vector<int32_t> r = nn::meta_routing(N, k, E, 2.5);
  std::vector<int64_t> count(size_t(E), 0);
  for (int64_t t = 0; t < N; ++t) {
    EXPECT_NE(r[size_t(t * k)], r[size_t(t * k + 1)]) << "token " << t;
    for (int64_t j = 0; j < k; ++j) ++count[size_t(r[size_t(t * k + j)])];
  }
  EXPECT_EQ(count[0], 40);  // 2.5 x 64 x 2 / 8
  for (int64_t e = 1; e < E; ++e) EXPECT_NEAR(double(count[size_t(e)]), (128.0 - 40.0) / 7.0, 1.0) << "expert " << e;
}

TEST(MetaStep, ASkewThatCannotExistIsRefusedWithTheLimit) {
  const Config moe = Config::from_yaml_text(testing::kTinyMixtralYaml, {});
  EXPECT_EQ(testing::error_of([&] { dry_run(moe, 1, 0, 5.0); }),
            "--expert-skew 5: at most 4 = model.num_experts 8 / model.moe_router_topk 2 (expert 0 takes at most one "
            "copy of each token)");
  EXPECT_EQ(testing::error_of([&] { dry_run(moe, 1, 0, 0.5); }),
            "expert skew must be a number >= 1 (1: balanced routing), got 0.5");
  const Config dense = Config::from_yaml_text(testing::kTinyLlamaYaml, {});
  EXPECT_EQ(testing::error_of([&] { dry_run(dense, 1, 0, 2.0); }),
            "--expert-skew 2: the model has no experts (model.num_experts 0)");
}

}  // namespace
}  // namespace tessel::train

namespace tessel::train {
namespace {

// A pipeline stage's peak does not grow with the micro-batches beyond those in flight: only the
// step's data (every micro-batch's tokens and targets, i64) is held whole. Before the executor freed
// each send's buffer once a later receive proved it delivered, stage 0 also held one activation
// ([micro-batch x seq, hidden] f32) per micro-batch until the step ended.
TEST(MetaStep, APipelineStagePeakHoldsOnlyTheStepsDataPerExtraMicroBatch) {
  const auto stage0_peak = [](int64_t micro_batches) {
    const Config cfg = Config::from_yaml_text(
        testing::kTinyLlamaYaml, {"parallel.pipeline_model_parallel_size=2", "train.micro_batch_size=1",
                                  fmt::format("train.global_batch_size={}", micro_batches)});
    auto w = comm::make_meta_communicator(0, 2);
    comm::ParallelState groups(*w, cfg.parallel_sizes());
    return measure_training_step(cfg, groups, Device::meta, 1).peak_requested_bytes;
  };
  const int64_t seq = Config::from_yaml_text(testing::kTinyLlamaYaml, {}).model.seq_length;
  EXPECT_EQ(stage0_peak(16) - stage0_peak(4), 12 * 2 * seq * 8);  // 12 more micro-batches of tokens + targets
}

}  // namespace
}  // namespace tessel::train
