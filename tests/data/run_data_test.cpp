// A run's data setup (train::make_run_data): token ids checked against the tokenizer or the model,
// sample counts that overflow or whose index cannot fit in memory refused before allocating.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"
#include "support/error_of.h"
#include "data/numbered_dataset.h"
#include "data/tiny_tokenizer.h"

#include "tessel/core/check.h"
#include "tessel/train/data_setup.h"

using namespace tessel;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-run-data") {}
};

using tessel::testing::error_of;

train::Config run_config(const std::string& data_path, int64_t vocab_size) {
  train::Config c;
  c.model.vocab_size = vocab_size;
  c.model.seq_length = 8;
  c.train.train_iters = 2;
  c.train.global_batch_size = 2;
  c.data.path = data_path;
  c.data.split = std::string(1, '1');  // all documents train (a literal trips GCC 12's -Wrestrict here)
  return c;
}

TEST(RunData, WithoutTokenizerRefusesIdsPastModelVocab) {
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 70, 1, 3);
  EXPECT_NE(error_of([&] { train::make_run_data(run_config(prefix, 64)); })
                .find("dataset '" + prefix + "': token id 70 (sequence 1, position 3) is outside model.vocab_size: "
                      "ids must be in [0, 64)"),
            std::string::npos)
      << error_of([&] { train::make_run_data(run_config(prefix, 64)); });
  EXPECT_EQ(error_of([&] { train::make_run_data(run_config(prefix, 71)); }), "");
}

TEST(RunData, WithTokenizerRefusesIdsInThePaddedVocab) {
  // model.vocab_size 384 pads the tokenizer's 320 ids; id 330 is a padding row no text maps to, so a
  // dataset holding it was made with another tokenizer.
  Scratch s;
  const std::string tok = tessel::testing::train_tiny_tokenizer(s.dir, 320);
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 330, -1, 5);
  auto cfg = run_config(prefix, 384);
  cfg.data.tokenizer = tok;
  const auto run = train::make_run_data(cfg);
  std::string err;
  for (int64_t first = 0; first < 20 && err.empty(); first += 2) err = error_of([&] { run.train(first, 2); });
  EXPECT_NE(err.find("dataset '" + prefix + "': token id 330 (sequence "), std::string::npos) << err;
  EXPECT_NE(err.find(", position 5) is outside the vocabulary of tokenizer '" + tok + "': ids must be in [0, 320)"),
            std::string::npos)
      << err;
}

TEST(RunData, SampleCountsThatOverflowAreRefused) {
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 0, 0, 0);
  auto cfg = run_config(prefix, 64);
  cfg.train.train_iters = int64_t(1) << 62;
  cfg.train.global_batch_size = 4;
  EXPECT_NE(error_of([&] { train::make_run_data(cfg); })
                .find("train.train_iters 4611686018427387904 x train.global_batch_size 4 samples are more than a "
                      "64-bit count holds"),
            std::string::npos)
      << error_of([&] { train::make_run_data(cfg); });
}

// A split that holds no data said "this split" without saying which (a probe, 2026-12-04).
TEST(RunData, AnEmptySplitIsNamed) {
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 0, 0, 0);
  auto cfg = run_config(prefix, 64);
  cfg.data.split = "0,100,0";
  const std::string err = error_of([&] { train::make_run_data(cfg); });
  EXPECT_NE(err.find("the training split (data.split '0,100,0'; "), std::string::npos) << err;
  EXPECT_NE(err.find("documents [0, 0) of this split hold 0 tokens"), std::string::npos) << err;
}

TEST(RunData, SampleIndexLargerThanMemoryIsRefusedBeforeAllocating) {
  // 2^50 samples of 9 tokens from 80 tokens of data: 1.4e14 epochs, exabytes of index.
  Scratch s;
  const auto prefix = tessel::testing::write_numbered_dataset(s / "d", 0, 0, 0);
  auto cfg = run_config(prefix, 64);
  cfg.train.train_iters = int64_t(1) << 49;
  const std::string err = error_of([&] { train::make_run_data(cfg); });
  EXPECT_NE(err.find("dataset '" + prefix + "': "), std::string::npos) << err;
  EXPECT_NE(err.find(" samples of 9 tokens need a sample index of "), std::string::npos) << err;
  EXPECT_NE(err.find("GB of memory (fewer samples drawn from this split, or more data)"), std::string::npos) << err;
  EXPECT_NE(err.find("the training split (data.split '"), std::string::npos) << err;
  // A window count past 64 bits is refused as such.
  cfg.train.train_iters = int64_t(1) << 60;
  EXPECT_NE(error_of([&] { train::make_run_data(cfg); }).find("samples of 9 tokens are more tokens than a 64-bit count"),
            std::string::npos)
      << error_of([&] { train::make_run_data(cfg); });
}

}  // namespace
