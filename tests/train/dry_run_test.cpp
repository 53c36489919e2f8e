// The dry run's model state on the meta device, checked two independent ways for several layouts:
// against the cpu allocator's accounting of the same Trainer really allocated (built on the cpu
// over a meta world of the same rank, so no other process is needed), and against the bytes the
// sizes imply (parameters x bytes per element, rounded to the pool's block size).
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "support/tiny_configs.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/core/block_pool.h"
#include "tessel/train/dry_run.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

int64_t block(int64_t bytes) { return int64_t(BlockPool::block_size(size_t(bytes))); }

MemoryStats::PerCategory cpu_model_state(const Config& cfg, int rank, int world) {
  auto w = comm::make_meta_communicator(rank, world);
  comm::ParallelState groups(*w, cfg.parallel_sizes());
  Allocator& cpu = allocator(Device::cpu);
  const MemoryStats before = cpu.stats();
  Trainer t(cfg, &groups);
  const MemoryStats after = cpu.stats();
  MemoryStats::PerCategory d{};
  for (int c = 0; c < kMemoryCategories; ++c) d[size_t(c)] = after.current[size_t(c)] - before.current[size_t(c)];
  return d;
}

struct Layout {
  const char* name;
  int world;
  std::vector<std::string> sets;
  int64_t optimizer_shard;  // ranks sharing one distributed-optimizer group (1: not sharded)
  // Under expert parallelism: the ranks sharing the routed experts' optimizer group (the ranks holding
  // the same experts); 0: no expert parallelism, every parameter in the one group above.
  int64_t expert_shard = 0;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class DryRunLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(DryRunLayouts, MetaModelStateEqualsTheCpuAllocationAndTheSizes) {
  const Layout& l = GetParam();
  const Config cfg = Config::from_yaml_text(testing::kTinyMixtralYaml, l.sets);
  const DryRunResult r = dry_run_model_state(cfg, l.world);
  ASSERT_EQ(int64_t(r.roles.size()), cfg.parallel.pipeline_model_parallel_size);
  int64_t ranks = 0;
  const int64_t pp = cfg.parallel.pipeline_model_parallel_size, tp = cfg.parallel.tensor_model_parallel_size;
  const auto& m = cfg.model;
  for (size_t stage = 0; stage < r.roles.size(); ++stage) {
    const DryRunRole& role = r.roles[stage];
    ranks += int64_t(role.ranks.size());
    EXPECT_EQ(role.model_state, cpu_model_state(cfg, role.evaluated_rank, l.world)) << role.role;
    // Gradients in fp32, Adam m and v over the owned share (ceil(n / shard); under expert
    // parallelism ceil(replicated / shard) + ceil(experts / expert_shard), as Megatron-LM shards
    // them). Parameters: fp32 masters + bf16 copy; with the distributed optimizer (bf16 run) the
    // masters of the owned share + the bf16 copy + a whole fp32 copy of what computes in fp32: the
    // embedding table (a vocabulary shard under tp), two RMSNorm weights and the router per layer,
    // the final norm.
    const int64_t n = role.local_parameters;
    const int64_t shard = l.optimizer_shard;
    const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    // This stage's routed experts: its layers x the rank's experts x gate, up and down (64 x 96).
    const int64_t experts =
        l.expert_shard ? m.num_layers / pp * (m.num_experts / cfg.parallel.expert_model_parallel_size) * 3 * 64 * 96
                       : 0;
    const int64_t owned = ceil_div(n - experts, shard) + (experts ? ceil_div(experts, l.expert_shard) : 0);
    const int64_t f32 = m.num_layers / pp * (2 * m.hidden_size + m.num_experts * m.hidden_size) +
                        (stage == 0 ? m.vocab_size / tp * m.hidden_size : 0) +
                        (stage + 1 == r.roles.size() ? m.hidden_size : 0);
    const bool sharded = shard > 1 || l.expert_shard > 1;
    const int64_t masters = sharded ? block(4 * owned) + block(4 * f32) : block(4 * n);
    EXPECT_EQ(role.model_state[size_t(MemoryCategory::parameters)], masters + block(2 * n)) << role.role;
    EXPECT_EQ(role.model_state[size_t(MemoryCategory::gradients)], block(4 * n)) << role.role;
    EXPECT_EQ(role.model_state[size_t(MemoryCategory::optimizer_state)], 2 * block(4 * owned)) << role.role;
    EXPECT_EQ(role.model_state_requested[size_t(MemoryCategory::parameters)],
              (sharded ? 4 * (owned + f32) : 4 * n) + 2 * n)
        << role.role;
    EXPECT_EQ(role.model_state_requested[size_t(MemoryCategory::gradients)], 4 * n) << role.role;
    EXPECT_EQ(role.model_state_requested[size_t(MemoryCategory::optimizer_state)], 8 * owned) << role.role;
  }
  EXPECT_EQ(ranks, l.world);
  // Mixtral-style: 4 layers of 8 experts of 3 x 64 x 96 weights, 2 of them active per token.
  const int64_t expert_params = 4 * 8 * 3 * 64 * 96;
  EXPECT_EQ(r.parameters_total - r.parameters_active_per_token, expert_params / 8 * 6);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DryRunLayouts,
    ::testing::Values(Layout{"one_rank", 1, {}, 1},
                      Layout{"tp2_pp2", 4, {"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2"}, 1},
                      Layout{"pp2_ep2_zero", 8,
                             {"parallel.pipeline_model_parallel_size=2", "parallel.expert_model_parallel_size=2",
                              "parallel.use_distributed_optimizer=true"},
                             4, 2},  // dp 4; experts over dp 4 / ep 2, the ranks holding the same experts
                      Layout{"tp2_dp4_zero", 8,
                             {"parallel.tensor_model_parallel_size=2", "parallel.use_distributed_optimizer=true"}, 4}),
    [](const auto& info) { return std::string(info.param.name); });

// The full-size configs at their layouts, against the published parameter counts: Llama 3 (Meta's
// model cards: 8.03B, 70.6B, 405.9B), Mixtral 8x7B (46.7B total, 12.9B active: Jiang et al. 2024),
// DeepSeek-V3 (671B total, 37B activated per token, without the 14B multi-token-prediction module:
// the technical report, section 1). Each set up on every pipeline stage in about a second at most.
struct FullSize {
  const char* config;
  int world;
  std::vector<std::string> sets;
  double total, active;  // published, in parameters
  double tolerance;      // relative: the published figures are rounded
};

void PrintTo(const FullSize& f, std::ostream* os) { *os << f.config; }

class DryRunFullSize : public ::testing::TestWithParam<FullSize> {};

TEST_P(DryRunFullSize, ParameterCountsMatchThePublishedOnes) {
  const FullSize& f = GetParam();
  const Config cfg = Config::load(std::string(TESSEL_CONFIG_DIR) + "/" + f.config, f.sets);
  const DryRunResult r = dry_run_model_state(cfg, f.world);
  EXPECT_NEAR(double(r.parameters_total), f.total, f.tolerance * f.total);
  EXPECT_NEAR(double(r.parameters_active_per_token), f.active, f.tolerance * f.active);
  EXPECT_EQ(int64_t(r.roles.size()), cfg.parallel.pipeline_model_parallel_size);
  for (const DryRunRole& role : r.roles) EXPECT_GT(role.model_state_requested_bytes, 0) << role.role;
}

INSTANTIATE_TEST_SUITE_P(
    Published, DryRunFullSize,
    ::testing::Values(FullSize{"llama3-8b.yaml", 8, {}, 8.03e9, 8.03e9, 0.005},
                      FullSize{"llama3-70b.yaml", 64, {}, 70.6e9, 70.6e9, 0.005},
                      FullSize{"llama3-405b.yaml", 16384, {}, 405.9e9, 405.9e9, 0.005},
                      FullSize{"mixtral-8x7b.yaml", 8, {}, 46.7e9, 12.9e9, 0.005},
                      // 37.55B active with the embedding: "37B" in the report, hence 2%.
                      FullSize{"deepseek-v3.yaml", 2048, {"model.mtp_num_layers=0"}, 671e9, 37e9, 0.02}),
    [](const auto& info) {
      std::string n = info.param.config;
      n = n.substr(0, n.find('.'));
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(DryRun, ALayoutThatCannotExistIsRefusedWithTheReason) {
  const Config cfg = Config::from_yaml_text(testing::kTinyMixtralYaml, {"parallel.pipeline_model_parallel_size=2"});
  EXPECT_EQ(tessel::testing::error_of([&] { dry_run_model_state(cfg, 3); }),
            "world size 3 is not divisible by tensor_model_parallel_size 1 x context_parallel_size 1 x "
            "pipeline_model_parallel_size 2 = 2 (data parallel is what remains)");
  const Config big_batch = Config::from_yaml_text(testing::kTinyMixtralYaml, {});
  EXPECT_EQ(tessel::testing::error_of([&] { dry_run_model_state(big_batch, 16); }),
            "train.global_batch_size 8 must be a multiple of train.micro_batch_size 1 x data-parallel size 16");
}

}  // namespace
}  // namespace tessel::train
