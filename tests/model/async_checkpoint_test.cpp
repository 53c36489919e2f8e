// Asynchronous saves (checkpoint.async_save): a staged save with copies writes the values of the
// moment it was staged, whatever training does to the parameters meanwhile, on a background thread
// whose error reaches the thread that waits for it.
#include <gtest/gtest.h>

#include <stdexcept>

#include "checkpoint_fixtures.h"
#include "support/host_access.h"
#include "tessel/ckpt/background_write.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/nn/model.h"

using namespace tessel;

namespace {

struct Scratch : tessel::testing::CheckpointScratch {
  Scratch() : CheckpointScratch("tessel-async-ckpt") {}
};

TEST(AsyncCheckpoint, AStagedCopyWritesTheStateOfItsStageNotOfTheWrite) {
  Scratch s;
  nn::Model a(tessel::testing::tiny_checkpoint_model(32));
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  tessel::testing::perturb(a, oa, 0.5f);
  const auto staged_values = tessel::testing::snapshot(a);
  ckpt::FullOptimizerState moments{};
  {
    const tessel::testing::HostAccess host;  // the moments' addresses (the stage reads them under its own scope)
    moments = {oa.exp_avg_data(), oa.exp_avg_sq_data(), oa.steps_taken()};
  }
  ckpt::StagedSave staged =
      ckpt::stage_checkpoint(s.dir, a.params(), moments, {1, 16, 1}, "model: {}\n", 2, nullptr, true, nullptr, {},
                             nullptr, /*copy=*/true);
  tessel::testing::perturb(a, oa, 0.25f);  // training goes on before the writer runs
  ASSERT_NE(tessel::testing::snapshot(a), staged_values);
  {
    ckpt::BackgroundWrite writer(staged.write);
    writer.wait();
  }
  ckpt::publish_checkpoint(s.dir, 1, staged.finish(), 2);
  nn::Model b(tessel::testing::tiny_checkpoint_model(32));
  b.params().initialize(2);
  optim::AdamW ob(b.params(), {});
  ASSERT_TRUE(ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [](const std::string&) { FAIL(); }));
  EXPECT_EQ(tessel::testing::snapshot(b), staged_values);
}

TEST(BackgroundWrite, RunsOnceAndHandsItsErrorToTheWaiter) {
  int runs = 0;
  {
    ckpt::BackgroundWrite ok([&] { ++runs; });
    ok.wait();
    EXPECT_TRUE(ok.done());
  }
  EXPECT_EQ(runs, 1);
  ckpt::BackgroundWrite failing([] { throw std::runtime_error("cannot write 'x': No space left on device"); });
  EXPECT_THROW(failing.wait(), std::runtime_error);
  EXPECT_NO_THROW(failing.wait());  // reported once
}

}  // namespace
