// The planner's parts against references computed here by hand: shape interpolation, the ring
// model of a collective, network levels, profile validation (tessel and SimuMax formats), and the
// assembly of a one-process step from the meta device's records re-priced independently.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "support/error_of.h"
#include "support/glibc_heap.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/device.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/gemm_primitive_census.h"
#include "tessel/plan/cost_model.h"
#include "tessel/plan/estimate.h"
#include "tessel/plan/hardware_profile.h"
#include "tessel/plan/planner_config.h"
#include "tessel/plan/search.h"
#include "tessel/train/dry_run.h"

using namespace tessel;
using namespace tessel::plan;
using tessel::testing::error_of;

namespace {

EfficiencyTable two_points() {
  EfficiencyTable t;
  t.fallback = 0.1;
  t.points = {{{256, 256, 256}, "NT", 0.4}, {{1024, 1024, 1024}, "NT", 0.8}, {{512, 512, 512}, "NN", 0.2}};
  return t;
}

TEST(EfficiencyTable, ExactPointsAreReturnedAsMeasured) {
  const EfficiencyTable t = two_points();
  EXPECT_DOUBLE_EQ(t.at({256, 256, 256}, "NT"), 0.4);
  EXPECT_DOUBLE_EQ(t.at({1024, 1024, 1024}, "NT"), 0.8);
  EXPECT_DOUBLE_EQ(t.at({512, 512, 512}, "NN"), 0.2);
}

TEST(EfficiencyTable, BetweenTwoPointsTheBlendLiesBetweenThemAndOnlyItsVariantCounts) {
  const EfficiencyTable t = two_points();
  // 512^3 lies midway (in log2 space) between the NT points: equal weights, the mean; the NN point
  // at exactly that shape is another variant and must not be taken.
  EXPECT_NEAR(t.at({512, 512, 512}, "NT"), 0.6, 1e-12);
  // Closer to 1024 (log2 distances sqrt(3 x 1.58^2) against sqrt(3 x 0.42^2)): nearer 0.8.
  const double e = t.at({768, 768, 768}, "NT");
  EXPECT_GT(e, 0.7);
  EXPECT_LT(e, 0.8);
  // A variant the table does not have: every point of the right arity counts (here the NN one).
  EXPECT_DOUBLE_EQ(t.at({512, 512, 512}, "TT"), 0.2);
  const EfficiencyTable empty{0.3, {}};
  EXPECT_DOUBLE_EQ(empty.at({1, 2, 3}, "NT"), 0.3);  // no points: the fallback
}

HardwareProfile simple_profile() {
  HardwareProfile hw;
  hw.name = hw.source = "test profile";
  hw.devices_per_node = 8;
  hw.memory_bandwidth = 100e9;
  hw.memory["default"].efficiency = 0.5;
  for (const std::string& k : kComputeOpKinds) hw.compute[k] = {1e12, EfficiencyTable{0.25, {}}};
  NetworkProfile net;
  for (const std::string& k : kCollectiveKinds) net.ops[k] = {100e9, 0.5, 2e-6, 10e-6, 1, -1};
  net.ops["all_reduce"].scale = 2;
  net.ops["p2p"].offset = 0;
  hw.networks["intra_node"] = net;
  return hw;
}

TEST(CollectiveCost, RingModelByHand) {
  const HardwareProfile hw = simple_profile();
  const double MiB = 1 << 20, bw = 100e9 * 0.5;
  comm::CommRecord r{"tp", "all_reduce", int64_t(MiB), 4, false, {}};
  // all_reduce over 4: 2 x 3 ring steps, bus bytes 2 x 3/4 of the message.
  EXPECT_NEAR(collective_seconds(hw, "intra_node", r), 10e-6 + 6 * 2e-6 + 1.5 * MiB / bw, 1e-15);
  // all_gather: the payload is this rank's block; the message is 4 of them, 3/4 of it moves.
  r.kind = "all_gather";
  EXPECT_NEAR(collective_seconds(hw, "intra_node", r), 10e-6 + 3 * 2e-6 + 3 * MiB / bw, 1e-15);
  r.kind = "send";  // p2p: one step, the whole message
  EXPECT_NEAR(collective_seconds(hw, "intra_node", r), 10e-6 + 2e-6 + MiB / bw, 1e-15);
  r.group_size = 1;
  EXPECT_EQ(collective_seconds(hw, "intra_node", r), 0.0);
  // A group size with a fixed latency of its own (SimuMax's fixed_latency_us_by_comm_num) pays that
  // instead of the op's: all-to-all over 2 moves half the message in one step.
  HardwareProfile sized = hw;
  sized.networks["intra_node"].ops["all2all"].fixed_latency_s_by_group_size = {{2, 40e-6}};
  r = {"ep", "all_to_all", int64_t(MiB), 2, false, {}};
  EXPECT_NEAR(collective_seconds(sized, "intra_node", r), 40e-6 + 2e-6 + 0.5 * MiB / bw, 1e-15);
  r.group_size = 4;  // not listed: the op's own fixed latency, 3 steps, 3/4 of the message
  EXPECT_NEAR(collective_seconds(sized, "intra_node", r), 10e-6 + 3 * 2e-6 + 0.75 * MiB / bw, 1e-15);
  // A send is between two ranks whatever its group's size: the fixed latency of a group of 2.
  sized.networks["intra_node"].ops["p2p"].fixed_latency_s_by_group_size = {{2, 30e-6}};
  r = {"pp", "send", int64_t(MiB), 8, false, {}};
  EXPECT_NEAR(collective_seconds(sized, "intra_node", r), 30e-6 + 2e-6 + MiB / bw, 1e-15);
}

TEST(CollectiveCost, GroupsSpanningNodesNeedTheInterNodeLevel) {
  const HardwareProfile hw = simple_profile();
  const comm::ParallelSizes s{8, 1, 2, 1};  // tp 8, pp 2, dp 2: 32 ranks, nodes of 8
  EXPECT_EQ(network_level(hw, "tp", s, 2), "intra_node");
  const std::string e = error_of([&] { network_level(hw, "dp", s, 2); });
  EXPECT_HAS(e, "has no 'inter_node' network level, and the dp group spans 9 ranks (nodes of 8)");
}

TEST(HardwareProfile, TesselFormatRoundTripsAndBadFieldsAreNamed) {
  HardwareProfile hw = simple_profile();
  hw.compute["gemm.bf16"].efficiency.points = {{{128, 256, 512}, "NT+acc", 0.5}};
  hw.host_seconds_per_kernel = 7e-6;
  const HardwareProfile back = hardware_profile_from_json_text(hardware_profile_to_json_text(hw), "round trip");
  EXPECT_EQ(back.compute.at("gemm.bf16").efficiency.at({128, 256, 512}, "NT+acc"), 0.5);
  EXPECT_NEAR(back.host_seconds_per_kernel, 7e-6, 1e-18);
  hw.host_seconds_per_kernel = 0;
  EXPECT_DOUBLE_EQ(back.networks.at("intra_node").ops.at("all_reduce").scale, 2.0);
  EXPECT_DOUBLE_EQ(back.memory_bandwidth, 100e9);

  std::string text = hardware_profile_to_json_text(hw);
  std::string unknown = text;
  unknown.replace(unknown.find("\"gemm.f32\""), 10, "\"matmul\"");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(unknown, "bad.json"); }),
             "compute op kind 'matmul' is not known; allowed: gemm.bf16, gemm.f32, fp8_gemm");
  std::string no_p2p = text;
  no_p2p.replace(no_p2p.find("\"p2p\""), 5, "\"ptp\"");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(no_p2p, "bad.json"); }),
             "networks.intra_node: collective 'ptp' is not known");
  std::string level = text;
  level.replace(level.find("\"intra_node\""), 12, "\"intranode\"");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(level, "bad.json"); }),
             "network level 'intranode' is not known; allowed: intra_node, inter_node");
  // A point no record could match (too few dims) or of no GEMM variant was read and never used.
  HardwareProfile bad = hw;
  bad.compute["gemm.bf16"].efficiency.points = {{{128, 256, 512}, "NT", 0.5}, {{128, 256}, "NT", 0.5}};
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(hardware_profile_to_json_text(bad), "bad.json"); }),
             "compute.gemm.bf16.points[1]: 'dims' must be an array of 3 sizes (M, N, K)");
  bad = hw;
  bad.compute["attention_fwd"].efficiency.points = {{{2, 192}, "", 0.5}};
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(hardware_profile_to_json_text(bad), "bad.json"); }),
             "compute.attention_fwd.points[0]: 'dims' must be an array of 6 sizes (batch, sequence, heads, key/value "
             "heads, head size, value head size)");
  bad = hw;
  bad.compute["gemm.bf16"].efficiency.points = {{{128, 256, 512}, "QQ", 0.5}};
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(hardware_profile_to_json_text(bad), "bad.json"); }),
             "compute.gemm.bf16.points[0]: variant 'QQ' is not a GEMM variant (NN, NT, TN or TT, with +acc when "
             "accumulating)");

  // Fixed latencies by group size round-trip; a key that is no group size is named.
  HardwareProfile sized = hw;
  sized.networks["intra_node"].ops["all2all"].fixed_latency_s_by_group_size = {{2, 51e-6}, {4, 19e-6}};
  const HardwareProfile sized_back =
      hardware_profile_from_json_text(hardware_profile_to_json_text(sized), "round trip");
  const CollectiveProfile& a2a = sized_back.networks.at("intra_node").ops.at("all2all");
  EXPECT_NEAR(a2a.fixed_latency_for(2), 51e-6, 1e-18);
  EXPECT_NEAR(a2a.fixed_latency_for(4), 19e-6, 1e-18);
  EXPECT_NEAR(a2a.fixed_latency_for(8), 10e-6, 1e-18);  // not listed: the op's fixed_latency_us
  nlohmann::json j = nlohmann::json::parse(text);
  j["networks"]["intra_node"]["all2all"]["fixed_latency_us_by_group_size"] = {{"one", 5.0}};
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(j.dump(), "bad.json"); }),
             "networks: intra_node: all2all: fixed_latency_us_by_group_size has the key 'one'; allowed: group sizes 1 "
             ".. 1048576");
  // Keys as SimuMax matches them: "02" would never be matched there; "1" is allowed and costs nothing.
  j["networks"]["intra_node"]["all2all"]["fixed_latency_us_by_group_size"] = {{"02", 5.0}};
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(j.dump(), "bad.json"); }),
             "fixed_latency_us_by_group_size has the key '02'; allowed: group sizes 1 .. 1048576");
  j["networks"]["intra_node"]["all2all"]["fixed_latency_us_by_group_size"] = {{"1", 5.0}, {"2", 6.0}};
  const CollectiveProfile one = hardware_profile_from_json_text(j.dump(), "ok.json").networks.at("intra_node").ops.at("all2all");
  EXPECT_EQ(one.fixed_latency_s_by_group_size.size(), 1u);
  EXPECT_NEAR(one.fixed_latency_for(2), 6e-6, 1e-18);
  // A memory efficiency for an op no kernel records (here a typo of gather_rows) was never read:
  // that op was priced at the default.
  j = nlohmann::json::parse(text);
  j["memory"]["efficiency"]["gather_row"] = 0.5;
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(j.dump(), "bad.json"); }),
             "memory.efficiency has an entry for 'gather_row', which no kernel records; allowed: default, adamw_update, "
             "add, add_gathered_rows,");
  // GEMMs and attention are priced by their compute entries: a memory efficiency for them was never read.
  j = nlohmann::json::parse(text);
  j["memory"]["efficiency"]["ring_attention_fwd"] = 0.5;
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(j.dump(), "bad.json"); }),
             "memory.efficiency has an entry for 'ring_attention_fwd', which is priced by its compute entry "
             "(gemm.bf16, gemm.f32, fp8_gemm, attention_fwd, attention_bwd), not by memory bandwidth");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(R"({"sys_name": "mine", "num_per_node": 8})", "x.json"); }),
             "hardware profile x.json is neither a tessel profile (it has no 'format': 'tessel-hardware-1') nor a "
             "SimuMax system (it has no 'accelerator')");
}

TEST(HardwareProfile, SimuMaxSystemReadsAsAProfile) {
  const std::string text = R"({"sys_name": "mini", "num_per_node": 4,
    "accelerator": {"mem_gbs": 80, "op": {
      "matmul": {"tflops": 1000, "efficient_factor": 0.5, "accurate_efficient_factor": {
        "b=1, m=4096, k=8192, n=1024, layout=TN, accumulate=False, out_dtype=bf16": 0.6,
        "b=1, m=1024, k=4096, n=8192, layout=NT, accumulate=True, out_dtype=bf16": 0.9,
        "b=1, m=1024, k=4096, n=8192, layout=NT, accumulate=True, out_dtype=fp32": 0.7,
        "b=1, m=64, k=64, n=64, layout=NT, accumulate=True, out_dtype=bf16": 0.05}},
      "sdp_fwd": {"tflops": 1000, "efficient_factor": 0.4, "accurate_efficient_factor": {
        "batch=1, seq_len=32768, head_num=8, kv_head_num=1, qk_head_dim=128, v_head_dim=128, qkv_contiguous=True": 1.2}},
      "sdp_bwd": {"tflops": 1000, "efficient_factor": 0.3}},
     "bandwidth": {"default": {"gbps": 8000, "efficient_factor": 0.5, "latency_us": 3}}},
    "networks": {"high_intra_node": {"bandwidth": {"gbps": 900, "efficient_factor": 1, "latency_us": 35},
      "op": {"all_reduce": {"scale": 2, "offset": -1, "efficient_factor": 0.7, "latency_us": 5},
             "all_gather": {"scale": 1, "offset": -1}, "reduce_scatter": {"scale": 1, "offset": -1},
             "p2p": {"scale": 1, "offset": 0},
             "all2all": {"scale": 1, "offset": -1, "fixed_latency_us": 0.0,
                         "fixed_latency_us_by_comm_num": {"2": 51.0, "4": 19.0}}}}}})";
  const HardwareProfile hw = hardware_profile_from_json_text(text, "mini.json");
  EXPECT_EQ(hw.devices_per_node, 4);
  // cuBLAS's column-major "TN" is tessel's row-major "NT"; "NT" with accumulation is "TN+acc".
  EXPECT_DOUBLE_EQ(hw.compute.at("gemm.bf16").efficiency.at({4096, 1024, 8192}, "NT"), 0.6);
  EXPECT_DOUBLE_EQ(hw.compute.at("gemm.bf16").efficiency.at({1024, 8192, 4096}, "TN+acc"), 0.7);
  // tessel accumulates into f32 (its matmul writes f32 only): a shape measured accumulating into
  // both dtypes is priced by its fp32 entry, and an accumulation into bf16 alone is no tessel
  // kernel, so a shape near it blends the fp32 entries.
  EXPECT_DOUBLE_EQ(hw.compute.at("gemm.bf16").efficiency.at({64, 64, 64}, "TN+acc"), 0.7);
  EXPECT_DOUBLE_EQ(hw.compute.at("gemm.f32").peak_flops, 0.5e15);
  // SimuMax counts a causal attention's FLOPs as if unmasked (its efficiencies reach 1.2 at 32k
  // tokens); tessel counts the work done, half of that: the efficiencies are halved.
  EXPECT_DOUBLE_EQ(hw.compute.at("attention_fwd").efficiency.at({1, 32768, 8, 1, 128, 128}, ""), 0.6);
  EXPECT_DOUBLE_EQ(hw.compute.at("attention_fwd").efficiency.fallback, 0.2);
  EXPECT_DOUBLE_EQ(hw.compute.at("attention_bwd").efficiency.fallback, 0.15);
  EXPECT_DOUBLE_EQ(hw.memory_latency_s, 3e-6);
  const CollectiveProfile& ag = hw.networks.at("intra_node").ops.at("all_gather");
  EXPECT_DOUBLE_EQ(ag.latency_s, 35e-6);  // the level's values where the op leaves them out
  EXPECT_DOUBLE_EQ(hw.networks.at("intra_node").ops.at("all_reduce").efficiency, 0.7);
  EXPECT_EQ(hw.networks.count("inter_node"), 0u);
  // SimuMax's fixed latency: the op's for the group size, else the op's fixed_latency_us.
  const CollectiveProfile& a2a = hw.networks.at("intra_node").ops.at("all2all");
  EXPECT_NEAR(a2a.fixed_latency_for(2), 51e-6, 1e-18);
  EXPECT_NEAR(a2a.fixed_latency_for(4), 19e-6, 1e-18);
  EXPECT_EQ(a2a.fixed_latency_for(8), 0.0);
  // An op without a fixed_latency_us of its own takes the level's, by group size where listed.
  std::string level_latency = text;
  const std::string level_bw = R"("bandwidth": {"gbps": 900, "efficient_factor": 1, "latency_us": 35})";
  level_latency.replace(level_latency.find(level_bw), level_bw.size(),
                        R"("bandwidth": {"gbps": 900, "efficient_factor": 1, "latency_us": 35, "fixed_latency": 7,
                            "fixed_latency_us_by_comm_num": {"2": 3}})");
  const HardwareProfile with_level = hardware_profile_from_json_text(level_latency, "mini.json");
  const CollectiveProfile& ag2 = with_level.networks.at("intra_node").ops.at("all_gather");
  EXPECT_NEAR(ag2.fixed_latency_for(2), 3e-6, 1e-18);
  EXPECT_NEAR(ag2.fixed_latency_for(4), 7e-6, 1e-18);
  EXPECT_NEAR(with_level.networks.at("intra_node").ops.at("all2all").fixed_latency_for(2), 51e-6, 1e-18);
  EXPECT_EQ(with_level.networks.at("intra_node").ops.at("all2all").fixed_latency_for(8), 0.0);
  // A PCIe system (SimuMax's a100_pcie.json) names its intra-node levels by the devices a group
  // spans; the whole node's (here 4x) is tessel's intra_node.
  std::string pcie = text;
  const std::string level = R"("high_intra_node": {"bandwidth": {"gbps": 900,)";
  pcie.replace(pcie.find(level), level.size(),
               R"("intra_with_pcie": true, "intra_node_pcie_2x": {"bandwidth": {"gbps": 64, "efficient_factor": 1},
      "op": {"all_reduce": {}, "all_gather": {}, "reduce_scatter": {}, "p2p": {}, "all2all": {}}},
    "intra_node_pcie_4x": {"bandwidth": {"gbps": 32,)");
  const HardwareProfile on_pcie = hardware_profile_from_json_text(pcie, "pcie.json");
  EXPECT_DOUBLE_EQ(on_pcie.networks.at("intra_node").ops.at("all_gather").bandwidth, 32e9);
  EXPECT_DOUBLE_EQ(on_pcie.networks.at("intra_node").ops.at("all_reduce").efficiency, 0.7);
  std::string no_node_level = pcie;
  no_node_level.replace(no_node_level.find("\"intra_node_pcie_4x\""), 20, "\"intra_node_pcie_3x\"");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(no_node_level, "pcie.json"); }),
             "networks has no 'intra_node_pcie_4x' level (intra_with_pcie: the level of a whole node of 4)");
  std::string not_boolean = pcie;
  not_boolean.replace(not_boolean.find("\"intra_with_pcie\": true"), 23, "\"intra_with_pcie\": 1");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(not_boolean, "pcie.json"); }),
             "networks.intra_with_pcie must be true or false, got 1");
  // A layout no GEMM has was read as no variant at all.
  std::string layout = text;
  layout.replace(layout.find("layout=TN"), 9, "layout=ZZ");
  EXPECT_HAS(error_of([&] { hardware_profile_from_json_text(layout, "mini.json"); }),
             "'layout=ZZ' is not a GEMM layout (NN, NT, TN or TT)");
}

train::Config tiny(const std::vector<std::string>& sets) {
  return train::Config::from_yaml_text(
      "model:\n  num_layers: 2\n  hidden_size: 64\n  num_attention_heads: 4\n  num_query_groups: 2\n"
      "  ffn_hidden_size: 128\n  vocab_size: 256\n  seq_length: 32\ntrain:\n  micro_batch_size: 2\n"
      "  global_batch_size: 4\n",
      sets);
}

// One process: the step is every kernel of the step back to back. Priced here independently with
// the profile's constant efficiencies: FLOPs / (peak x 0.25) for GEMMs and attention, bytes /
// (bandwidth x 0.5) for the rest.
TEST(Estimate, OneProcessStepIsEveryKernelOfTheStepPricedByTheProfile) {
  const HardwareProfile hw = simple_profile();
  const train::Config cfg = tiny({});
  const Estimate e = estimate_step(cfg, hw, 1);
  auto world = comm::make_meta_communicator(0, 1);
  comm::ParallelState groups(*world, cfg.parallel_sizes());
  const train::StepMeasurement m = train::measure_training_step(cfg, groups, Device::meta, 1, nullptr, true);
  double expected = 0;
  int priced = 0;
  for (const kernels::OpRecord& r : m.op_records) {
    if (std::string(r.phase.what) == "setup") continue;
    const bool compute = r.op == "gemm" || r.op == "attention_fwd" || r.op == "attention_bwd";
    expected += compute ? r.flops / (1e12 * 0.25) : double(r.bytes_read + r.bytes_written) / (100e9 * 0.5);
    ++priced;
  }
  EXPECT_GT(priced, 50);
  ASSERT_EQ(e.stages.size(), 1u);
  EXPECT_NEAR(e.step_s, expected, 1e-12 * expected);
  EXPECT_EQ(e.stages[0].peak_bytes, m.peak_requested_bytes);  // a gpu profile: the bytes requested
  EXPECT_NEAR(e.tokens_per_s, 4 * 32 / e.step_s, 1e-9 * e.tokens_per_s);
  // Both micro-batches ran: the per-micro-batch forward is half of all forward kernels.
  EXPECT_GT(e.stages[0].forward_s, 0);
  EXPECT_NEAR(e.stages[0].forward_s + e.stages[0].backward_s + e.stages[0].weight_s,
              (e.stages[0].pipeline_end_s) / 2, 1e-12);
  // The host's time per kernel call (a cpu profile's host_us_per_kernel) is paid once per call.
  HardwareProfile with_host = hw;
  with_host.host_seconds_per_kernel = 3e-6;
  const Estimate h = estimate_step(cfg, with_host, 1);
  EXPECT_NEAR(h.step_s, expected + priced * 3e-6, 1e-12 * expected);
}

// A cpu profile's reserve is what tessel's pool holds in a real cpu run of two steps: the planner's
// meta run (with its shortcuts) against the same steps run on the cpu, over a meta world of the same
// rank; dense layouts (MoE routing on meta is balanced, not the cpu run's).
TEST(Estimate, ACpuProfilesReserveIsWhatThePoolHoldsInARealRun) {
  HardwareProfile hw = simple_profile();
  hw.device = "cpu";
  hw.devices_per_node = 2;
  const std::vector<std::pair<int, std::vector<std::string>>> layouts = {
      {1, {"train.micro_batch_size=2", "train.global_batch_size=8", "model.recompute=true"}},  // 4 micro-batches
      {2, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}},
      {2, {"parallel.pipeline_model_parallel_size=2", "train.micro_batch_size=1", "train.global_batch_size=6"}},
      {2, {"parallel.use_distributed_optimizer=true", "model.hidden_size=128", "model.ffn_hidden_size=512"}},
      // llama-tiny's ZeRO-1 (bf16): a block freed and split in the first step leaves the second
      // step's largest request no fit, so the reserve grows by 16 MiB in the second step, then holds.
      {2, {"precision.compute=bf16", "parallel.use_distributed_optimizer=true", "train.global_batch_size=16"}}};
  for (const auto& [world_size, sets] : layouts) {
    const train::Config cfg = sets.front() == "precision.compute=bf16"
                                  ? train::Config::load(std::string(TESSEL_CONFIG_DIR) + "/bench/llama-tiny.yaml", sets)
                                  : tiny(sets);
    const Estimate e = estimate_step(cfg, hw, world_size);
    for (size_t stage = 0; stage < e.stages.size(); ++stage) {
      const StageEstimate& st = e.stages[stage];
      SCOPED_TRACE(fmt::format("{}: {}", fmt::join(sets, " "), st.role));
      auto world = comm::make_meta_communicator(st.ranks.front(), int(e.world), Device::cpu);
      comm::ParallelState groups(*world, cfg.parallel_sizes());
      // Outside strict mode (under TESSEL_DEVICE=cpu-strict too): there blocks go back to the pool
      // as the kernel queue reaches their free, so the reserve depends on timing.
      const bool strict = strict_cpu();
      set_strict_cpu(false);
      const size_t cached = kernels::gemm_cached_primitives();
      int64_t used = 0;
      const train::StepMeasurement cpu = [&] {
        const kernels::GemmPrimitiveCensus census;
        const train::StepMeasurement m = train::measure_training_step(cfg, groups, Device::cpu, 2);
        used = census.primitives();
        return m;
      }();
      set_strict_cpu(strict);
      // The primitives: those the cpu run's GEMMs used, the cache growing by as many where it held
      // none before (this process's first run; the later layouts share some of its problems).
      EXPECT_EQ(st.gemm_primitives, used);
      if (cached == 0) {
        EXPECT_EQ(int64_t(kernels::gemm_cached_primitives()), used);
      }
      if (tessel::testing::glibc_counts_the_heap()) {  // not under a sanitizer's allocator
        EXPECT_GT(st.gemm_primitive_bytes, st.gemm_primitives * 1000);
      }
      // The pool: the run's, byte for byte; the primitives come on top, outside it.
      EXPECT_EQ(st.peak_reserved_bytes - st.gemm_primitive_bytes, cpu.peak_reserved_bytes);
      EXPECT_EQ(st.peak_bytes - st.gemm_primitive_bytes, cpu.peak_bytes);
      EXPECT_GT(cpu.pool_free_bytes(), 0);  // the pool held free blocks at its peak
    }
  }
}

// A SimuMax model is planned with Megatron-LM's state layout (bf16, the distributed optimizer): per
// parameter 2 bytes of bf16 weights, 4 of fp32 gradients and 12 / dp of fp32 master and Adam moments,
// counted here from the model's shape. tessel files the master under parameters and Megatron under
// the optimizer, so their sum is compared; tessel's norms also keep their fp32 values whole (they
// compute in fp32; 4 bytes each). With precision.fp32_embedding on, the embedding table's whole fp32
// copy comes on top: 4 bytes per entry.
TEST(Estimate, ASimuMaxModelHoldsMegatronsModelStatePerParameter) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessel_planner_megatron_state_" + std::to_string(::getpid()) + ".json")).string();
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove_after{path};
  {
    std::ofstream f(path);
    f << R"({"model_type": "dense", "hidden_size": 64, "head_num": 4, "kv_head_num": 2, "head_size": 16,
             "intermediate_size": 128, "layer_num": 2, "vocab_size": 250})";
  }
  const int64_t h = 64, V = 256 /* padded to 128 */, kv = 2 * 16, ffn = 128, layers = 2, dp = 4;
  const int64_t per_layer = h * h + 2 * h * kv + h * h + 3 * h * ffn + 2 * h;
  const int64_t norms = 2 * h * layers + h;
  const int64_t P = 2 * V * h /* embedding, untied head */ + layers * per_layer + h;
  ASSERT_EQ(P % dp, 0);
  const auto state = [&](const std::string& fp32_embedding) {
    const train::Config cfg = load_plan_config(path, {"model.seq_length=32", "train.global_batch_size=4",
                                                      "precision.fp32_embedding=" + fp32_embedding});
    const Estimate e = estimate_step(cfg, simple_profile(), dp);
    return e.stages.at(0).peak_bytes_by_category;
  };
  const auto megatron = state("false");
  EXPECT_EQ(megatron[size_t(MemoryCategory::gradients)], 4 * P);
  EXPECT_EQ(megatron[size_t(MemoryCategory::parameters)] + megatron[size_t(MemoryCategory::optimizer_state)],
            2 * P + 12 * P / dp + 4 * norms);
  const auto fp32_table = state("true");
  EXPECT_EQ(fp32_table[size_t(MemoryCategory::parameters)] - megatron[size_t(MemoryCategory::parameters)], 4 * V * h);
  // Megatron pads the vocabulary (250) to a multiple of 128 x tp.
  for (const auto& [tp, padded] : {std::pair<int, int64_t>{2, 256}, {4, 512}}) {
    const train::Config cfg = load_plan_config(path, {"parallel.tensor_model_parallel_size=" + std::to_string(tp)});
    EXPECT_EQ(cfg.model.vocab_size, padded) << "tp " << tp;
    EXPECT_TRUE(cfg.parallel.sequence_parallel);
  }
}

// Twice the peak and the bandwidth, no latencies: exactly half the time.
TEST(Estimate, TwiceTheHardwareHalvesTheStep) {
  HardwareProfile hw = simple_profile(), fast = hw;
  for (auto& [k, c] : fast.compute) c.peak_flops *= 2;
  fast.memory_bandwidth *= 2;
  for (auto& [k, c] : fast.networks["intra_node"].ops) c.bandwidth *= 2, c.latency_s = 0, c.fixed_latency_s = 0;
  for (auto& [k, c] : hw.networks["intra_node"].ops) c.latency_s = 0, c.fixed_latency_s = 0;
  const train::Config cfg = tiny({"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2"});
  const Estimate slow = estimate_step(cfg, hw, 8), quick = estimate_step(cfg, fast, 8);
  EXPECT_NEAR(quick.step_s, slow.step_s / 2, 1e-12 * slow.step_s);
  ASSERT_EQ(slow.stages.size(), 2u);
  EXPECT_GT(slow.stages[0].exposed_comm_s.at("tp"), 0);
  EXPECT_GT(slow.stages[1].bubble_s, 0);  // the last stage waits for the first forward
}

TEST(Estimate, ImpossibleLayoutsAndMissingProfileEntriesAreNamed) {
  const HardwareProfile hw = simple_profile();
  EXPECT_HAS(error_of([&] { estimate_step(tiny({"parallel.tensor_model_parallel_size=2"}), hw, 3); }),
             "world size 3 is not divisible by tensor_model_parallel_size 2");
  HardwareProfile no_attention = hw;
  no_attention.compute.erase("attention_bwd");
  EXPECT_HAS(error_of([&] { estimate_step(tiny({}), no_attention, 1); }),
             "has no compute entry 'attention_bwd' (needed by attention_bwd calls)");
  // 16 ranks of data parallelism on nodes of 8 with no inter-node level.
  EXPECT_HAS(error_of([&] { estimate_step(tiny({"train.global_batch_size=32"}), hw, 16); }),
             "has no 'inter_node' network level, and the dp group spans 16 ranks (nodes of 8)");
}

}  // namespace

namespace {

// Every layout of the tiny model on `world` ranks of one node.
SearchResult search_tiny(int world, int64_t global_batch, double memory_gib = 0, int workers = 1) {
  HardwareProfile hw = simple_profile();
  hw.devices_per_node = world;
  SearchOptions o;
  o.world = world;
  o.global_batch = global_batch;
  o.memory_gib = memory_gib;
  o.workers = workers;
  return search_layouts([](const std::vector<std::string>& layout) { return tiny(layout); }, hw, o);
}

TEST(Search, RanksEveryFittingLayoutByTokensPerSecondAndEachEqualsItsOwnEstimate) {
  const SearchResult r = search_tiny(8, 8);
  ASSERT_GT(r.ranked.size(), 10u);
  EXPECT_EQ(int(r.ranked.size()) + [&] {
    int n = 0;
    for (const auto& [reason, count] : r.pruned) n += count;
    return n;
  }(), r.enumerated);
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_GE(r.ranked[i - 1].estimate.tokens_per_s, r.ranked[i].estimate.tokens_per_s);
  // The best layout, estimated on its own from its overrides, is what the search reported.
  const Candidate& best = r.ranked.front();
  HardwareProfile hw = simple_profile();
  hw.devices_per_node = 8;
  const Estimate again = estimate_step(tiny(best.overrides), hw, 8);
  EXPECT_DOUBLE_EQ(again.step_s, best.estimate.step_s);
  // tp 8 cannot split tiny's 4 attention heads: refused by the config, counted under its key.
  bool refused_tp = false;
  std::string reasons;
  for (const auto& [reason, count] : r.pruned) {
    refused_tp |= reason == "refused by model.num_attention_heads";
    reasons += reason + "; ";
  }
  EXPECT_TRUE(refused_tp) << reasons;
  // Nothing else is pruned: tp 4 replicates tiny's 2 key/value heads, which the meta device runs too.
  for (const auto& [reason, count] : r.pruned)
    EXPECT_TRUE(reason == "refused by model.num_attention_heads" ||
                reason == "global batch 8 does not split over data parallelism x the micro-batch")
        << reason;
}

// FP8 recipes asked for are tried in phase 2 on every refined structure (the configured one, none,
// only once), each layout as its own estimate; a recipe the config refuses is the caller's error.
// A search over the 2 devices of one node, `global_batch` sequences per step.
SearchOptions two_devices(HardwareProfile& hw, int64_t global_batch) {
  hw.devices_per_node = 2;
  SearchOptions o;
  o.world = 2;
  o.global_batch = global_batch;
  return o;
}

TEST(Search, TriesTheFp8RecipesAskedForAndRefusesAnUnknownOne) {
  HardwareProfile hw = simple_profile();
  SearchOptions o = two_devices(hw, 4);
  const auto load = [](const std::vector<std::string>& layout) { return tiny(layout); };
  const SearchResult plain = search_layouts(load, hw, o);
  o.fp8_recipes = {"block", "none", "block"};
  const SearchResult with = search_layouts(load, hw, o);
  int block = 0;
  for (const Candidate& c : with.ranked) {
    const bool is_block =
        std::find(c.overrides.begin(), c.overrides.end(), "precision.fp8.recipe=block") != c.overrides.end();
    EXPECT_EQ(std::find(c.overrides.begin(), c.overrides.end(), "precision.fp8.recipe=none"), c.overrides.end());
    EXPECT_EQ(is_block, c.layout.find(", fp8 block") != std::string::npos) << c.layout;
    if (!is_block) continue;
    ++block;
    EXPECT_DOUBLE_EQ(estimate_step(tiny(c.overrides), hw, 2).step_s, c.estimate.step_s) << c.layout;
  }
  // What the recipes add is the FP8 block layouts, each ranked or pruned: every refined layout
  // once more, and phase 1's micro-batch-1 point too.
  EXPECT_GT(block, 0);
  EXPECT_EQ(with.enumerated - plain.enumerated, block + [&] {
    int n = 0;
    for (const auto& [reason, count] : with.pruned) n += count;
    for (const auto& [reason, count] : plain.pruned) n -= count;
    return n;
  }());
  o.fp8_recipes = {"blok"};
  EXPECT_NE(tessel::testing::error_of([&] { search_layouts(load, hw, o); }).find("precision.fp8.recipe"),
            std::string::npos);
}

// Pipeline schedules asked for are tried in phase 2 on pipelined structures of one chunk per rank;
// each such layout is its own estimate, and ZB-H1 never takes longer than 1F1B on the same layout.
TEST(Search, TriesThePipelineSchedulesAskedForOnPipelinedLayouts) {
  HardwareProfile hw = simple_profile();
  SearchOptions o = two_devices(hw, 8);
  const auto load = [](std::vector<std::string> layout) {
    layout.insert(layout.begin(), "model.num_layers=4");
    return tiny(layout);
  };
  o.pipeline_schedules = {"zb-h1", "zb-v", "zb-h1"};
  const SearchResult r = search_layouts(load, hw, o);
  std::map<std::string, double> step_of;  // layout -> step
  for (const Candidate& c : r.ranked) step_of[c.layout] = c.estimate.step_s;
  int scheduled = 0, compared = 0;
  for (const Candidate& c : r.ranked)
    for (const std::string kind : {"zb-h1", "zb-v"}) {
      const bool asked = std::find(c.overrides.begin(), c.overrides.end(), "parallel.pipeline_schedule=" + kind) !=
                         c.overrides.end();
      EXPECT_EQ(asked, c.layout.size() > kind.size() + 2 && c.layout.ends_with(", " + kind)) << c.layout;
      if (!asked) continue;
      ++scheduled;
      EXPECT_NE(c.layout.find("pp 2, vpp 1"), std::string::npos) << c.layout;
      EXPECT_DOUBLE_EQ(estimate_step(load(c.overrides), hw, 2).step_s, c.estimate.step_s) << c.layout;
      if (kind == "zb-h1") {
        // (phase 2 skips the 1F1B point phase 1 covered: micro-batch 1 with recompute, where it fit without)
        const std::string plain = c.layout.substr(0, c.layout.size() - std::string(", zb-h1").size());
        if (!step_of.count(plain)) continue;
        ++compared;
        EXPECT_LE(c.estimate.step_s, step_of[plain] * (1 + 1e-12)) << c.layout;
      }
    }
  EXPECT_GT(scheduled, 0);
  EXPECT_GT(compared, 2);
  o.pipeline_schedules = {"zb-h3"};
  EXPECT_NE(tessel::testing::error_of([&] { search_layouts(load, hw, o); }).find("allowed: 1f1b, interleaved, zb-h1"),
            std::string::npos);
}

// The passes' time split by layer: each of a stage's layers has its own share, the shares and the
// rest add up to the stage's passes (F + B + W per micro-batch x the micro-batches), a middle stage
// spends nothing beyond its layers, and the last stage's head is the rest there.
TEST(Estimate, LayerTimesAndTheRestAddUpToThePasses) {
  HardwareProfile hw = simple_profile();
  hw.devices_per_node = 3;
  const train::Config cfg = tiny({"model.num_layers=6", "parallel.pipeline_model_parallel_size=3",
                                  "parallel.pipeline_layers_per_stage=1,2,3", "train.global_batch_size=6"});
  const Estimate e = estimate_step(cfg, hw, 3);
  ASSERT_EQ(e.stages.size(), 3u);
  const int64_t micro_batches = cfg.grad_accumulation_steps();
  for (size_t s = 0; s < 3; ++s) {
    const StageEstimate& st = e.stages[s];
    ASSERT_EQ(st.layer_s.size(), s + 1) << st.role;
    double sum = st.non_layer_s;
    for (const double t : st.layer_s) {
      EXPECT_GT(t, 0) << st.role;
      EXPECT_NEAR(t, e.stages[0].layer_s[0], 1e-12 * t) << st.role;  // the same layer everywhere
      sum += t;
    }
    EXPECT_NEAR(sum, double(micro_batches) * (st.forward_s + st.backward_s + st.weight_s), 1e-12 * sum) << st.role;
  }
  EXPECT_GT(e.stages[0].non_layer_s, 0);  // the embedding
  EXPECT_LT(e.stages[1].non_layer_s, 1e-12 * e.stages[1].layer_s[0]);  // nothing but rounding
  EXPECT_GT(e.stages[2].non_layer_s, e.stages[0].non_layer_s);  // the output head and loss
}

// Phase 3 tries uneven layer splits on the fastest pipelined layouts (one layer fewer on the last
// stage, or the first), each its own estimate. With a vocabulary that makes the output head weigh
// more than many layers (64 x 16,384 weights against a layer's 40,960), the pipeline waits on the
// last stage, so the fastest pp 2 layout moves a layer off it: 4,2 rather than 3,3.
// Phase 3 tries uneven layer splits on the fastest pipelined layouts: the one-layer moves and the
// split that balances the stages by their measured costs. A 16k vocabulary makes the last stage's
// output head and loss worth several layers. The reference: every split of the 6 layers over the
// stages, each estimated on its own with the best pipelined layout's other settings; the search's
// best must be as fast as the fastest of them.
TEST(Search, UnevenLayerSplitsFindTheFastestSplitOfThePipeline) {
  for (const int world : {2, 3}) {
    HardwareProfile hw = simple_profile();
    SearchOptions o = two_devices(hw, 6);
    hw.devices_per_node = o.world = world;
    const auto load = [](std::vector<std::string> layout) {
      layout.insert(layout.begin(), {"model.num_layers=6", "model.vocab_size=16384"});
      return tiny(layout);
    };
    const SearchResult r = search_layouts(load, hw, o);
    int uneven = 0;
    const Candidate* best = nullptr;  // the fastest pipelined layout
    const std::string pipelined = fmt::format("pp {}, vpp 1", world);
    for (const Candidate& c : r.ranked) {
      if (!best && c.layout.find(pipelined) != std::string::npos) best = &c;
      const size_t at = c.layout.find(", layers ");
      if (at == std::string::npos) continue;
      ++uneven;
      const size_t from = at + std::string(", layers ").size();
      const std::string split = c.layout.substr(from, c.layout.find(", ", from) - from);
      EXPECT_NE(std::find(c.overrides.begin(), c.overrides.end(), "parallel.pipeline_layers_per_stage=" + split),
                c.overrides.end())
          << c.layout;
      EXPECT_DOUBLE_EQ(estimate_step(load(c.overrides), hw, world).step_s, c.estimate.step_s) << c.layout;
    }
    EXPECT_GT(uneven, 0);
    ASSERT_NE(best, nullptr);
    ASSERT_NE(best->layout.find(", layers "), std::string::npos) << best->layout;  // the head outweighs a layer
    std::vector<std::string> others;  // the best layout's settings other than its split
    for (const std::string& s : best->overrides)
      if (s.rfind("parallel.pipeline_layers_per_stage=", 0) != 0) others.push_back(s);
    double fastest = 1e300;
    std::string fastest_split;
    for (int a = 1; a <= 5; ++a)
      for (int b = world == 3 ? 1 : 6 - a; b <= 6 - a; ++b) {
        const int c = 6 - a - b;
        if (world == 3 && c < 1) continue;
        const std::string split = world == 2 ? fmt::format("{},{}", a, b) : fmt::format("{},{},{}", a, b, c);
        std::vector<std::string> with = others;
        with.push_back("parallel.pipeline_layers_per_stage=" + split);
        const double t = estimate_step(load(with), hw, world).step_s;
        if (t < fastest) fastest = t, fastest_split = split;
      }
    EXPECT_LE(best->estimate.step_s, fastest * (1 + 1e-12))
        << best->layout << " against the fastest split " << fastest_split;
  }
}

TEST(Search, AMemoryLimitPrunesAndAModelThatFitsNowhereSaysSo) {
  const SearchResult all = search_tiny(2, 4);
  ASSERT_FALSE(all.ranked.empty());
  int64_t smallest = all.ranked.front().estimate.peak_bytes;
  for (const Candidate& c : all.ranked) smallest = std::min(smallest, c.estimate.peak_bytes);
  // Only the smallest fits.
  const SearchResult tight = search_tiny(2, 4, double(smallest) / double(int64_t(1) << 30) * 1.0000001);
  ASSERT_FALSE(tight.ranked.empty());
  EXPECT_LT(tight.ranked.size(), all.ranked.size());
  for (const Candidate& c : tight.ranked) EXPECT_LE(c.estimate.peak_bytes, smallest);
  const SearchResult none = search_tiny(2, 4, 1e-6);
  EXPECT_TRUE(none.ranked.empty());
  EXPECT_GT(none.pruned.at("peak memory over 1e-06 GiB"), 0);
}

}  // namespace

namespace {

// Running a few micro-batches for the rest, measuring one of equal stages for the others, and
// running three of a row of alike experts for all of them are shortcuts: each estimate must equal
// the one that runs every micro-batch and every expert on every stage.
void expect_shortcuts_exact(const std::string& config, const std::vector<std::string>& sets, int world,
                            const std::string& device = "gpu") {
  SCOPED_TRACE(config + " on " + std::to_string(world) + " ranks, " + device + " memory");
  const train::Config cfg = train::Config::load(std::string(TESSEL_CONFIG_DIR) + "/" + config, sets);
  HardwareProfile hw = simple_profile();
  hw.devices_per_node = world;
  hw.device = device;  // cpu: the pool's blocks; gpu: the bytes requested
  EstimateOptions every;
  every.every_micro_batch = true;
  every.every_expert = true;
  const Estimate full = estimate_step(cfg, hw, world, every);
  const Estimate fast = estimate_step(cfg, hw, world);
  EstimateOptions shared;
  shared.share_equal_stages = true;
  const Estimate fastest = estimate_step(cfg, hw, world, shared);
  ASSERT_EQ(full.stages.size(), fast.stages.size());
  for (const Estimate* e : {&fast, &fastest}) {
    EXPECT_NEAR(e->step_s, full.step_s, 1e-12 * full.step_s);
    EXPECT_EQ(e->peak_bytes, full.peak_bytes);
  }
  EXPECT_EQ(full.peak_reserved_bytes > 0, device == "cpu");
  for (size_t i = 0; i < full.stages.size(); ++i) {
    const StageEstimate &a = full.stages[i], &b = fast.stages[i], &c = fastest.stages[i];
    SCOPED_TRACE(a.role);
    EXPECT_EQ(b.peak_bytes, a.peak_bytes);
    EXPECT_EQ(b.peak_bytes_by_category, a.peak_bytes_by_category);
    EXPECT_GE(c.peak_bytes, a.peak_bytes);  // a shared stage's peak bounds its own
    EXPECT_EQ(b.peak_at, a.peak_at);
    for (const StageEstimate* x : {&b, &c}) {
      EXPECT_NEAR(x->step_s, a.step_s, 1e-12 * a.step_s);
      for (const auto& [group, t] : a.exposed_comm_s) EXPECT_NEAR(x->exposed_comm_s.at(group), t, 1e-12 * t) << group;
      for (const auto& [op, t] : a.kernel_s_by_op) EXPECT_NEAR(x->kernel_s_by_op.at(op), t, 1e-12 * t) << op;
      EXPECT_NEAR(x->compute_s, a.compute_s, 1e-12 * a.compute_s);
      EXPECT_NEAR(x->forward_s, a.forward_s, 1e-12 * a.forward_s);
      EXPECT_NEAR(x->bubble_s, a.bubble_s, 1e-12 * a.step_s);
      EXPECT_NEAR(x->flops, a.flops, 1e-12 * a.flops);
      EXPECT_EQ(x->ranks, a.ranks);
    }
  }
}

TEST(Estimate, FewMicroBatchesAndSharedStagesEqualTheFullMeasurement) {
  const std::vector<std::string> bf16{"precision.compute=bf16", "train.micro_batch_size=1"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // One process, 12 micro-batches.
  expect_shortcuts_exact("bench/llama-tiny.yaml", with(bf16, {"train.global_batch_size=12"}), 1);
  expect_shortcuts_exact("bench/llama-tiny.yaml", with(bf16, {"train.global_batch_size=12"}), 1, "cpu");
  // 1F1B over 4 stages (two middle ones alike), 16 micro-batches; and data parallelism with ZeRO.
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"model.num_layers=8", "parallel.pipeline_model_parallel_size=4",
                                     "train.global_batch_size=16"}),
                         4);
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"model.num_layers=8", "parallel.pipeline_model_parallel_size=4",
                                     "train.global_batch_size=16"}),
                         4, "cpu");
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"parallel.pipeline_model_parallel_size=2", "parallel.use_distributed_optimizer=true",
                                     "train.global_batch_size=24"}),
                         4);
  // Context parallelism, alone and with a pipeline (each micro-batch's chunks cut by its forward).
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"parallel.context_parallel_size=2", "train.global_batch_size=12"}), 2);
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"parallel.context_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                                     "train.global_batch_size=16"}),
                         4, "cpu");
  // Interleaved: 2 stages x 2 chunks, 12 micro-batches.
  expect_shortcuts_exact("bench/llama-tiny.yaml",
                         with(bf16, {"model.num_layers=8", "parallel.pipeline_model_parallel_size=2",
                                     "parallel.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=12"}),
                         2);
  // The zero-bubble and DualPipe schedules (deferred W's, a V, two copies per stage): 4 stages,
  // 16 micro-batches (DualPipe: each half of them standing for its own).
  for (const char* kind : {"zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe"})
    expect_shortcuts_exact("bench/llama-tiny.yaml",
                           with(bf16, {"model.num_layers=8", "parallel.pipeline_model_parallel_size=4",
                                       "train.global_batch_size=16", std::string("parallel.pipeline_schedule=") + kind}),
                           4);
  // MLA, MoE under expert parallelism, MTP on the last stage, a dense first layer, FP8 blocks.
  expect_shortcuts_exact("deepseek-v3-tiny.yaml",
                         {"train.micro_batch_size=1", "train.global_batch_size=10", "parallel.pipeline_model_parallel_size=2",
                          "parallel.expert_model_parallel_size=2"},
                         4);
  // Rows of alike experts: 8 experts of one row each with FP8 blocks (their cached weights), with
  // recompute (the first forward's saved activations dropped with the layer's scratch), pool blocks.
  expect_shortcuts_exact("deepseek-v3-tiny.yaml",
                         {"train.micro_batch_size=1", "train.global_batch_size=3", "model.recompute=true"}, 1, "cpu");
  // Experts split over tensor parallelism under sequence parallelism (their all-reduces), rows of
  // unequal counts (125 rows x top-2 over 8 experts per rank: 32, 32, then 31s), bf16.
  expect_shortcuts_exact("mixtral-tiny.yaml",
                         {"train.micro_batch_size=1", "train.global_batch_size=4", "model.seq_length=250",
                          "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                          "parallel.expert_tensor_parallel_size=2"},
                         2);
}

}  // namespace

namespace {

// parallel.overlap_moe_expert_parallel_comm under DualPipeV with expert parallelism: each fused pair
// hides its passes' expert all-to-alls behind the other pass's compute where collectives progress on
// their own (a GPU profile), and nothing where they do not (MPI on cpu ranks). What is hidden leaves
// the exposed "ep" time and the step, and is at most all of it.
TEST(Estimate, FusedPairsHideExpertAllToAllsWhereCollectivesProgress) {
  for (const std::string kind : {"dualpipev", "dualpipe"}) {
  SCOPED_TRACE(kind);
  const auto config = [&](bool fused) {
    return train::Config::load(std::string(TESSEL_CONFIG_DIR) + "/deepseek-v3-tiny.yaml",
                               {"train.micro_batch_size=1", "train.global_batch_size=16",
                                "parallel.pipeline_model_parallel_size=2", "parallel.expert_model_parallel_size=2",
                                "parallel.pipeline_schedule=" + kind,
                                std::string("parallel.overlap_moe_expert_parallel_comm=") + (fused ? "true" : "false")});
  };
  HardwareProfile hw = simple_profile();
  const Estimate plain = estimate_step(config(false), hw, 4), fused = estimate_step(config(true), hw, 4);
  ASSERT_EQ(fused.stages.size(), 2u);
  EXPECT_LT(fused.step_s, plain.step_s);
  for (size_t r = 0; r < 2; ++r) {
    const StageEstimate &a = plain.stages[r], &b = fused.stages[r];
    EXPECT_EQ(a.hidden_all_to_all_s, 0.0);
    EXPECT_GT(b.hidden_all_to_all_s, 0.0) << r;
    EXPECT_LE(b.hidden_all_to_all_s, a.exposed_comm_s.at("ep") * (1 + 1e-12)) << r;
    EXPECT_NEAR(b.exposed_comm_s.at("ep"), a.exposed_comm_s.at("ep") - b.hidden_all_to_all_s, 1e-12 * a.step_s);
    // The passes drawn by the estimate are the unfused ones less what was hidden.
    EXPECT_NEAR(b.pipeline_end_s - b.bubble_s, a.pipeline_end_s - a.bubble_s - b.hidden_all_to_all_s,
                1e-9 * a.step_s);
    EXPECT_EQ(b.peak_bytes, a.peak_bytes);
  }
  hw.async_progress = false;
  const Estimate cpu_plain = estimate_step(config(false), hw, 4), cpu_fused = estimate_step(config(true), hw, 4);
  EXPECT_EQ(cpu_fused.step_s, cpu_plain.step_s);
  EXPECT_EQ(cpu_fused.stages[0].hidden_all_to_all_s, 0.0);
  }
}

}  // namespace

namespace {

// The search's memory floor lies under every rank's estimated peak, and is not trivially 0.
TEST(Search, TheRoutedExpertFloorLiesUnderThePeakOfEveryLayout) {
  HardwareProfile hw = simple_profile();
  hw.devices_per_node = 4;
  for (const char* config : {"deepseek-v3-tiny.yaml", "mixtral-tiny.yaml"})
    for (const std::vector<std::string>& layout :
         std::vector<std::vector<std::string>>{{},
                                               {"parallel.expert_model_parallel_size=2"},
                                               {"parallel.pipeline_model_parallel_size=2"},
                                               {"parallel.tensor_model_parallel_size=2", "parallel.expert_tensor_parallel_size=1"},
                                               {"parallel.tensor_model_parallel_size=2", "precision.compute=bf16"}}) {
      std::vector<std::string> sets = layout;
      sets.insert(sets.end(), {"train.micro_batch_size=1", "train.global_batch_size=4"});
      const train::Config cfg = train::Config::load(std::string(TESSEL_CONFIG_DIR) + "/" + config, sets);
      const double floor = routed_expert_floor_gib(cfg);
      const Estimate e = estimate_step(cfg, hw, 4);
      SCOPED_TRACE(std::string(config) + " " + e.layout);
      EXPECT_GT(floor, 0);
      EXPECT_LT(floor, double(e.peak_bytes) / double(int64_t(1) << 30));
    }
  const train::Config dense = train::Config::load(std::string(TESSEL_CONFIG_DIR) + "/bench/llama-tiny.yaml", {});
  EXPECT_EQ(routed_expert_floor_gib(dense), 0);
}

}  // namespace

namespace {

// Layouts estimated in 3 worker processes rank exactly as in this one.
TEST(Search, WorkerProcessesGiveTheSameRanking) {
  const SearchResult one = search_tiny(8, 8), three = search_tiny(8, 8, 0, 3);
  EXPECT_EQ(three.enumerated, one.enumerated);
  EXPECT_EQ(three.pruned, one.pruned);
  ASSERT_EQ(three.ranked.size(), one.ranked.size());
  for (size_t i = 0; i < one.ranked.size(); ++i) {
    EXPECT_EQ(three.ranked[i].layout, one.ranked[i].layout);
    EXPECT_EQ(three.ranked[i].overrides, one.ranked[i].overrides);
    EXPECT_EQ(three.ranked[i].estimate.step_s, one.ranked[i].estimate.step_s);
    EXPECT_EQ(three.ranked[i].estimate.peak_bytes, one.ranked[i].estimate.peak_bytes);
  }
}

}  // namespace
