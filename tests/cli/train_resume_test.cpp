// `tessel train` end to end: bit-exact resume, resume with another batch size, stop on SIGTERM (exit
// 75), one run per checkpoint.dir, damaged metadata skipped, and bad input that loses nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

const std::string kSmall =
    " --set train.train_iters=8 --set train.lr_warmup_iters=2 --set model.num_layers=2 --set log.interval=1";

// Also with state beside parameters and moments: the MoE expert biases of auxiliary-loss-free
// balancing and FP8 delayed scaling's amax histories travel in the checkpoint's state.safetensors.
class TrainResume : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainResume, ResumeIsBitExact) {
  TempDir d;
  const std::string cfg = config("synthetic.yaml") + GetParam();
  ASSERT_EQ(run_tessel("train " + cfg + kSmall + " --set log.dir=a --set checkpoint.dir=ca", d.path()).exit_code, 0);
  const auto half = run_tessel("train " + cfg + kSmall + " --set log.dir=b --set checkpoint.dir=cb --set train.exit_interval=3",
                               d.path());
  ASSERT_EQ(half.exit_code, 0) << half.output;
  EXPECT_NE(half.output.find("saving and exiting"), std::string::npos) << half.output;
  EXPECT_EQ(metric_values(d / "b/metrics.jsonl", "loss").size(), 3u);
  const auto rest = run_tessel("train " + cfg + kSmall + " --set log.dir=b --set checkpoint.dir=cb", d.path());
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("resumed from checkpoint.dir cb at step 3"), std::string::npos) << rest.output;
  const auto straight = metric_values(d / "a/metrics.jsonl", "loss");
  const auto resumed = metric_values(d / "b/metrics.jsonl", "loss");
  ASSERT_EQ(straight.size(), 8u);
  ASSERT_EQ(resumed.size(), 8u);
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(straight[i], resumed[i]) << "step " << i + 1;  // bit-exact
  EXPECT_EQ(metric_values(d / "a/metrics.jsonl", "grad_norm"), metric_values(d / "b/metrics.jsonl", "grad_norm"));
  EXPECT_LT(straight.back(), straight.front());
  if (GetParam().find("num_experts") != std::string::npos) {
    EXPECT_TRUE(std::filesystem::exists(d / "cb/step_00000003/state.safetensors"));
    EXPECT_EQ(metric_values(d / "a/metrics.jsonl", "moe_aux_loss"), metric_values(d / "b/metrics.jsonl", "moe_aux_loss"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, TrainResume,
    ::testing::Values(std::string(),
                      std::string(" --set model.arch=mixtral --set model.num_experts=4 --set model.moe_router_topk=2"
                                  " --set model.moe_router_score_function=sigmoid --set model.moe_router_enable_expert_bias=true"
                                  " --set model.moe_router_bias_update_rate=0.05"
                                  " --set model.moe_router_load_balancing_type=seq_aux_loss --set model.moe_aux_loss_coeff=0.01"
                                  " --set model.moe_shared_expert_intermediate_size=32 --set model.moe_router_num_groups=2"
                                  " --set model.moe_first_dense_layers=1"),
                      std::string(" --set precision.fp8.recipe=delayed --set precision.compute=bf16")),
    [](const auto& info) { return info.index == 0 ? std::string("dense") : info.index == 1 ? "moe" : "fp8"; });

// checkpoint.async_save: the host copies the background writes read are allocated before the first
// step, by a staging that is dropped (it leaves nothing in checkpoint.dir), so no save inside the
// training loop allocates them; a run that will not save in the background (its only saves are at
// the end or at train.exit_interval) allocates nothing.
TEST(TrainCli, AsynchronousSavesAllocateTheirHostCopiesBeforeTraining) {
  for (const char* distributed : {"false", "true"}) {
    TempDir d;
    const std::string args = "train " + config("synthetic.yaml") + kSmall +
                             " --set checkpoint.dir=ck --set checkpoint.async_save=true --set checkpoint.distributed=" +
                             distributed;
    const auto r = run_tessel(args + " --set train.train_iters=5 --set checkpoint.interval=2", d.path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t prepared = r.output.find("asynchronous saves: ");
    ASSERT_NE(prepared, std::string::npos) << r.output;
    EXPECT_LT(prepared, r.output.find("step     1/5")) << r.output;
    EXPECT_NE(r.output.find("saving the checkpoint of step 2 in the background"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("saving the checkpoint of step 4 in the background"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("of host copies)"), std::string::npos) << "a save in the loop allocated:\n" << r.output;
    std::set<std::string> entries;
    for (const auto& e : std::filesystem::directory_iterator(d / "ck")) entries.insert(e.path().filename().string());
    EXPECT_EQ(entries, (std::set<std::string>{".lock", "latest", "step_00000002", "step_00000004", "step_00000005"}));
    // Saved only at the end (synchronously): nothing to prepare.
    const auto once = run_tessel(args + " --set train.train_iters=2 --set checkpoint.interval=2 --set log.dir=once"
                                        " --set checkpoint.dir=ck-once", d.path());
    ASSERT_EQ(once.exit_code, 0) << once.output;
    EXPECT_EQ(once.output.find("asynchronous saves: "), std::string::npos) << once.output;
    // Nor a run that exits (saving synchronously) before its first background save.
    const auto exits = run_tessel(args + " --set train.train_iters=6 --set checkpoint.interval=4 --set log.dir=exits"
                                         " --set train.exit_interval=3 --set checkpoint.dir=ck-exits", d.path());
    ASSERT_EQ(exits.exit_code, 0) << exits.output;
    EXPECT_NE(exits.output.find("saving and exiting"), std::string::npos) << exits.output;
    EXPECT_EQ(exits.output.find("asynchronous saves: "), std::string::npos) << exits.output;
  }
}

// Also: while it runs, a second run on the same checkpoint.dir is refused naming the holder's PID.
TEST(TrainCli, SigtermSavesAndExitsForRequeueWhileASecondRunIsRefused) {
  TempDir d;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (chdir(d.path().c_str()) != 0) _exit(99);
    setenv("OMP_NUM_THREADS", "2", 1);
    execl(TESSEL_BIN, TESSEL_BIN, "train", config("synthetic.yaml").c_str(), "--set", "train.train_iters=100000",
          "--set", "log.dir=run", "--set", "checkpoint.dir=ck", "--set", "model.num_layers=1", static_cast<char*>(nullptr));
    _exit(98);
  }
  // Wait for a few steps of progress, then ask it to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metric_values(d / "run/metrics.jsonl", "loss").size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto second = run_tessel("train " + config("synthetic.yaml") + kSmall + " --set log.dir=run2 --set checkpoint.dir=ck",
                                 d.path());
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.output.find(fmt::format("checkpoint.dir 'ck' is in use by another run (PID {}", pid)),
            std::string::npos)
      << second.output;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75);  // README: stopped by a signal after saving, to be requeued
  const auto steps = metric_values(d / "run/metrics.jsonl", "step");
  ASSERT_GE(steps.size(), 3u);
  std::ifstream latest(d / "ck/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, fmt::format("step_{:08d}", int64_t(steps.back())));  // the last finished step was saved
  EXPECT_FALSE(std::filesystem::exists(d / "run2"));  // refused before writing anything
}

// A resume with another train.global_batch_size continues at the next unseen sample. Checked through
// the losses: the first step after resuming with batch 32 sees samples [48, 80) under the step-3
// parameters; a resume with batch 16 and lr 0 (parameters left unchanged) sees [48, 64) and [64, 80)
// under the same parameters, so its two losses average to the same value (equal token counts).
TEST(TrainCli, ResumeWithAnotherGlobalBatchContinuesAtTheNextSample) {
  TempDir d;
  const std::string cfg =
      config("synthetic.yaml") + " --set model.num_layers=1 --set log.interval=1 --set train.lr_warmup_iters=1";
  const auto first = run_tessel("train " + cfg + " --set train.train_iters=8 --set train.exit_interval=3"
                                " --set log.dir=a --set checkpoint.dir=ck", d.path());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::filesystem::copy(d / "ck", d / "ck16", std::filesystem::copy_options::recursive);
  std::filesystem::remove(d / "ck16/.lock");
  const auto wide = run_tessel("train " + cfg + " --set train.train_iters=4 --set train.global_batch_size=32"
                               " --set log.dir=a --set checkpoint.dir=ck", d.path());
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_NE(wide.output.find("resumed from checkpoint.dir ck at step 3 (48 samples consumed)"), std::string::npos)
      << wide.output;
  const auto narrow = run_tessel("train " + cfg + " --set train.train_iters=5 --set train.lr=0 --set train.min_lr=0"
                                 " --set log.dir=b --set checkpoint.dir=ck16", d.path());
  ASSERT_EQ(narrow.exit_code, 0) << narrow.output;
  const auto wide_loss = metric_values(d / "a/metrics.jsonl", "loss");
  const auto narrow_loss = metric_values(d / "b/metrics.jsonl", "loss");
  ASSERT_EQ(wide_loss.size(), 4u);
  ASSERT_EQ(narrow_loss.size(), 2u);  // steps 4 and 5 (a fresh log.dir)
  EXPECT_NEAR(wide_loss[3], (narrow_loss[0] + narrow_loss[1]) / 2, 1e-6);
  EXPECT_EQ(metric_values(d / "a/metrics.jsonl", "consumed_samples"), (std::vector<double>{16, 32, 48, 80}));
  const auto md = nlohmann::json::parse(std::ifstream(d / "ck/step_00000004/metadata.json"));
  EXPECT_EQ(md.at("consumed_samples").get<int64_t>(), 3 * 16 + 32);
}

// A damaged metadata.json (no `step`) is named and skipped for the previous checkpoint by train and by
// the commands that load a model (export-hf here); a dead run's temporary save is removed at start.
TEST(TrainCli, DamagedMetadataFallsBackAndStaleSavesAreRemoved) {
  TempDir d;
  const std::string cfg = config("synthetic.yaml") +
                          " --set model.num_layers=1 --set train.lr_warmup_iters=1 --set log.dir=a"
                          " --set checkpoint.dir=ck --set checkpoint.interval=1 --set checkpoint.keep=3";
  ASSERT_EQ(run_tessel("train " + cfg + " --set train.train_iters=2", d.path()).exit_code, 0);
  const auto md_path = d / "ck/step_00000002/metadata.json";
  auto md = nlohmann::json::parse(std::ifstream(md_path));
  md.erase("step");
  std::ofstream(md_path, std::ios::trunc) << md.dump();
  const auto exported = run_tessel("export-hf --ckpt ck --out hf", d.path());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("metadata.json has no key 'step'"), std::string::npos) << exported.output;

  const pid_t dead = fork();  // a PID that no longer runs, as a killed save's would be
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string stale = fmt::format("ck/step_00000009.tmp-{}", dead);
  std::filesystem::create_directories(d / stale);
  std::ofstream(d / (stale + "/model.safetensors")) << "partial";
  const auto resumed = run_tessel("train " + cfg + " --set train.train_iters=3", d.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("removed " + stale + ", left by an interrupted save"), std::string::npos)
      << resumed.output;
  EXPECT_FALSE(std::filesystem::exists(d / stale));
  EXPECT_NE(resumed.output.find("skipping damaged checkpoint step_00000002"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("metadata.json has no key 'step'"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from checkpoint.dir ck at step 1"), std::string::npos) << resumed.output;
}

TEST(TrainCli, BadConfigKeyFailsAndKeepsTheCheckpoint) {
  TempDir d;
  const std::string cfg = config("synthetic.yaml");
  ASSERT_EQ(run_tessel("train " + cfg + kSmall + " --set train.train_iters=2 --set log.dir=a --set checkpoint.dir=ck",
                       d.path())
                .exit_code,
            0);
  const auto before = std::filesystem::last_write_time(d / "ck/step_00000002/model.safetensors");
  const auto bad = run_tessel("train " + cfg + " --set model.num_layerz=3 --set checkpoint.dir=ck", d.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("model.num_layerz"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("num_layers"), std::string::npos) << bad.output;
  EXPECT_EQ(std::filesystem::last_write_time(d / "ck/step_00000002/model.safetensors"), before);
  // A checkpoint of another model shape is refused by name; nothing is overwritten.
  const auto other = run_tessel("train " + cfg + kSmall + " --set model.hidden_size=64 --set log.dir=b --set checkpoint.dir=ck",
                                d.path());
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("another model shape"), std::string::npos) << other.output;
  EXPECT_EQ(std::filesystem::last_write_time(d / "ck/step_00000002/model.safetensors"), before);
  const auto nofile = run_tessel("train /nonexistent.yaml", d.path());
  EXPECT_NE(nofile.exit_code, 0);
  EXPECT_NE(nofile.output.find("nonexistent.yaml"), std::string::npos) << nofile.output;
}

TEST(BenchCli, LastLineIsJson) {
  TempDir d;
  const auto r = run_tessel("bench " + config("bench/llama-tiny.yaml") +
                                " --steps 1 --warmup 0 --set model.num_layers=1 --set train.micro_batch_size=1 --profile",
                            d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string last = r.output.substr(r.output.find_last_of('\n', r.output.size() - 2) + 1);
  const auto j = nlohmann::json::parse(last);
  for (const char* k : {"tokens_per_s", "step_s", "mfu", "peak_rss_mb"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  }
  EXPECT_NE(r.output.find("gemm_fwd"), std::string::npos);  // the --profile table
}

}  // namespace
