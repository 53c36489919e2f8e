// `tessel train` end to end: bit-exact resume, clean stop on SIGTERM, and bad input that loses nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

TEST(TrainCli, SigtermSavesAndExitsCleanly) {
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
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto steps = metric_values(d / "run/metrics.jsonl", "step");
  ASSERT_GE(steps.size(), 3u);
  std::ifstream latest(d / "ck/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, fmt::format("step_{:08d}", int64_t(steps.back())));  // the last finished step was saved
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
