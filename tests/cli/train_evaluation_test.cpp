// Evaluation during training changes nothing that training computes: the same run with
// train.eval_interval set and without it logs the same loss and gradient norm at every step, bit for
// bit. The reference is the run without evaluation, so an evaluation that leaks into the training
// state (FP8 delayed scaling's amax histories, MoE routing statistics and expert biases, cached
// quantised weights) fails here at the first step after the leak.
#include <gtest/gtest.h>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

struct StepLog {
  std::vector<double> loss, grad_norm;
};

StepLog train(const std::string& config_and_sets, bool evaluate) {
  TempDir d;
  const std::string eval = evaluate ? " --set train.eval_interval=1 --set train.eval_iters=2" : "";
  const auto r = run_tessel("train " + config_and_sets + " --set log.dir=run" + eval, d.path(), 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  StepLog log{metric_values(d / "run/metrics.jsonl", "loss"), metric_values(d / "run/metrics.jsonl", "grad_norm")};
  if (evaluate) {
    EXPECT_EQ(metric_values(d / "run/metrics.jsonl", "eval_loss").size(), log.loss.size()) << "one evaluation per step";
  }
  return log;
}

void expect_same_training(const std::string& config_and_sets, size_t steps) {
  const StepLog plain = train(config_and_sets, false), evaluated = train(config_and_sets, true);
  ASSERT_EQ(plain.loss.size(), steps);
  ASSERT_EQ(plain.grad_norm.size(), steps);
  ASSERT_EQ(evaluated.loss.size(), steps);
  ASSERT_EQ(evaluated.grad_norm.size(), steps);
  for (size_t s = 0; s < steps; ++s) {
    EXPECT_EQ(evaluated.loss[s], plain.loss[s]) << "loss at step " << s + 1;
    EXPECT_EQ(evaluated.grad_norm[s], plain.grad_norm[s]) << "grad norm at step " << s + 1;
  }
}

// A short amax history, so a leaked evaluation amax sets a scale within the run.
const std::string kFp8Delayed =
    " --set precision.compute=bf16 --set precision.fp8.recipe=delayed --set precision.fp8.amax_history_len=4";

// The norms and the MLP activation write their Linears' inputs as FP8 (fused producers, whose amaxes
// the Linear records), the attention output is quantised by o_proj itself.
TEST(TrainEvaluation, Fp8DelayedScalingTrainsAlikeWithAndWithoutEvaluation) {
  expect_same_training(config("synthetic.yaml") + " --set train.train_iters=6" + kFp8Delayed, 6);
}

TEST(TrainEvaluation, Fp8DelayedScalingWithoutFusedCastsTrainsAlikeWithAndWithoutEvaluation) {
  expect_same_training(
      config("synthetic.yaml") + " --set train.train_iters=6 --set precision.fp8.fused_casts=false" + kFp8Delayed, 6);
}

// MoE with auxiliary-loss-free balancing (expert biases updated from the step's routing counts),
// MLA and multi-token prediction, in FP8.
TEST(TrainEvaluation, DeepSeekV3TinyTrainsAlikeWithAndWithoutEvaluation) {
  expect_same_training(config("deepseek-v3-tiny.yaml") + " --set train.train_iters=4" + kFp8Delayed, 4);
}

}  // namespace
