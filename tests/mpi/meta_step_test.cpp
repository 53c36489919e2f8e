// The dry run's prediction for this rank against the real multi-process training step: every rank
// runs two steps of each layout that fits the world size on the cpu over MPI, measuring its
// allocator's peak by category, its pool's reserve, its kernel calls and its groups' collectives, then the same rank's
// step on the meta device over a meta world. They must be equal, byte for byte: the meta
// communicator (which moves nothing) must stage, count and split exactly as MPI does.
#include <gtest/gtest.h>

#include "mpi/mpi_world.h"
#include "support/tiny_configs.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/core/device.h"
#include "tessel/train/dry_run.h"

namespace tessel::train {
namespace {

using testing::world;

struct Layout {
  const char* name;
  int world;
  std::vector<std::string> sets;
  const char* yaml = testing::kTinyLlamaYaml;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all{
      {"tp2", 2, {"parallel.tensor_model_parallel_size=2"}},
      {"pp2", 2, {"parallel.pipeline_model_parallel_size=2"}},
      {"dp2_zero", 2, {"parallel.use_distributed_optimizer=true"}},
      {"tp2_sp_dp2", 4, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}},
      {"pp2_vpp2_dp2_zero", 4,
       {"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2",
        "parallel.use_distributed_optimizer=true"}},
      {"tp2_pp2_dp2_zero_recompute", 8,
       {"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
        "parallel.use_distributed_optimizer=true", "model.recompute=true"}},
      // The zero-bubble and V schedules: weight gradients deferred, two chunks a rank in a V.
      {"pp2_zb_h1", 2, {"parallel.pipeline_model_parallel_size=2", "parallel.pipeline_schedule=zb-h1"}},
      {"pp2_zb_v", 2, {"parallel.pipeline_model_parallel_size=2", "parallel.pipeline_schedule=zb-v"}},
      {"pp2_dualpipev", 2, {"parallel.pipeline_model_parallel_size=2", "parallel.pipeline_schedule=dualpipev"}},
      // MoE: each rank's meta step replays that rank's real routing. (Not expert parallelism: there
      // the rows a rank's experts receive depend on the other ranks' routing, which the meta
      // communicator assumes equal to this rank's.)
      {"mixtral_pp2", 2, {"parallel.pipeline_model_parallel_size=2"}, testing::kTinyMixtralYaml},
      {"fp8_delayed_tp2", 2, {"precision.fp8.recipe=delayed", "parallel.tensor_model_parallel_size=2"}},
      {"cp2", 2, {"parallel.context_parallel_size=2"}},
      {"gpt2_cp2_tp2_sp", 4,
       {"parallel.context_parallel_size=2", "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"},
       testing::kTinyGpt2Yaml},
      {"dsv3_tiny_fp8_block_pp2_dp2", 4, {"precision.fp8.recipe=block", "parallel.pipeline_model_parallel_size=2"},
       testing::kTinyDeepSeekYaml},
      {"dsv3_tiny_tp2_sp_dp2_zero", 4,
       {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
        "parallel.use_distributed_optimizer=true"},
       testing::kTinyDeepSeekYaml},
  };
  return all;
}

TEST(MetaStepMpi, EveryRankOfTheRealStepMatchesTheDryRun) {
  int ran = 0;
  for (const Layout& l : layouts()) {
    if (l.world != world().size()) continue;
    ++ran;
    SCOPED_TRACE(l.name);
    std::vector<std::string> sets = l.sets;
    sets.push_back("train.micro_batch_size=1");  // more micro-batches in flight per pipeline stage
    const Config cfg = Config::from_yaml_text(l.yaml, sets);
    nn::MoeRoutingTrace routing(nn::MoeRoutingTrace::Mode::record);
    comm::ParallelState real_groups(world(), cfg.parallel_sizes());
    const StepMeasurement cpu = measure_training_step(cfg, real_groups, Device::cpu, 2, &routing);
    routing.set_mode(nn::MoeRoutingTrace::Mode::replay);
    auto meta_world = comm::make_meta_communicator(world().rank(), world().size());
    comm::ParallelState meta_groups(*meta_world, cfg.parallel_sizes());
    const StepMeasurement meta = measure_training_step(cfg, meta_groups, Device::meta, 2, &routing);
    const std::string where = fmt::format("{} rank {}", l.name, world().rank());
    EXPECT_EQ(meta.peak_bytes, cpu.peak_bytes) << where;
    EXPECT_EQ(meta.peak_bytes_by_category, cpu.peak_bytes_by_category) << where;
    EXPECT_EQ(meta.peak_requested_bytes_by_category, cpu.peak_requested_bytes_by_category) << where;
    EXPECT_EQ(meta.peak_at, cpu.peak_at) << where;
    // The pool's reserve: the meta pool over made-up addresses takes the same blocks. (Not in the
    // strict run of this test: there blocks go back as the kernel queue reaches their free, a
    // second pool's, so the reserve depends on timing.)
    if (!strict_cpu()) {
      EXPECT_EQ(meta.peak_reserved_bytes, cpu.peak_reserved_bytes) << where;
      EXPECT_EQ(meta.peak_reserved_bytes_by_category, cpu.peak_reserved_bytes_by_category) << where;
      EXPECT_GE(cpu.peak_reserved_bytes, cpu.peak_bytes) << where;
    }
    EXPECT_EQ(meta.flops, cpu.flops) << where;
    for (const auto& [op, t] : cpu.ops) {
      EXPECT_EQ(meta.ops.at(op).calls, t.calls) << where << ": " << op;
      EXPECT_EQ(meta.ops.at(op).bytes_read + meta.ops.at(op).bytes_written, t.bytes_read + t.bytes_written)
          << where << ": " << op;
    }
    ASSERT_EQ(meta.comm_by_group.size(), cpu.comm_by_group.size()) << where;
    for (const auto& [group, kinds] : cpu.comm_by_group) {
      ASSERT_EQ(meta.comm_by_group.at(group).size(), kinds.size()) << where << ": " << group;
      for (const auto& [kind, c] : kinds) {
        EXPECT_EQ(meta.comm_by_group.at(group).at(kind).calls, c.calls) << where << ": " << group << " " << kind;
        EXPECT_EQ(meta.comm_by_group.at(group).at(kind).bytes, c.bytes) << where << ": " << group << " " << kind;
      }
    }
    world().barrier();
  }
  EXPECT_GT(ran, 0) << "no layout for " << world().size() << " ranks";
}

}  // namespace
}  // namespace tessel::train
