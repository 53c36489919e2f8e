// Fault specifications, the plan that fires them once, and the checkpoint damage they do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/core/check.h"
#include "tessel/resilience/faults.h"
#include "tessel/core/tensor.h"

namespace tessel::resilience {
namespace {

namespace fs = std::filesystem;

TEST(ParseFaults, KindsStepsAndRanks) {
  const auto f = parse_faults("nan@5:1, kill@8 disk-full@2:3", 4);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].kind, FaultKind::nan);
  EXPECT_EQ(f[0].step, 5);
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_EQ(f[1].kind, FaultKind::kill);
  EXPECT_EQ(f[1].rank, 0);  // rank 0 unless given
  EXPECT_EQ(f[2].kind, FaultKind::disk_full);
  EXPECT_TRUE(parse_faults("", 1).empty());
}

TEST(ParseFaults, RefusesWithTheItemAndWhatIsAllowed) {
  auto message = [](const std::string& spec) {
    try {
      parse_faults(spec, 2);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("flood@3").find("unknown kind 'flood' (allowed: nan, spike, kill, hang, sigterm, corrupt-checkpoint"),
            std::string::npos);
  EXPECT_NE(message("nan@0").find("'nan@0': the step must be >= 1"), std::string::npos);
  EXPECT_NE(message("nan@3:2").find("rank 2 is not in this run of 2 ranks"), std::string::npos);
  EXPECT_NE(message("nan-3").find("expected KIND@STEP or KIND@STEP:RANK"), std::string::npos);
  EXPECT_NE(message("nan@99999999999999999999").find("expected KIND@STEP or KIND@STEP:RANK"), std::string::npos);
}

TEST(FaultPlan, FiresOnceOnItsRankAndOnlyInTheFirstAttempt) {
  const auto faults = parse_faults("nan@5:1,corrupt-checkpoint@4:1", 2);
  FaultPlan mine(faults, 1, 0);
  EXPECT_FALSE(mine.take(FaultKind::nan, 4));
  EXPECT_TRUE(mine.take(FaultKind::nan, 5));
  EXPECT_FALSE(mine.take(FaultKind::nan, 5));  // once
  EXPECT_FALSE(mine.take(FaultKind::corrupt_checkpoint, 6));  // not due-aware: only its step
  EXPECT_TRUE(mine.take(FaultKind::corrupt_checkpoint, 6, true));  // the first save at or after step 4
  EXPECT_TRUE(FaultPlan(faults, 0, 0).empty());  // another rank's faults
  EXPECT_TRUE(FaultPlan(faults, 1, 1).empty());  // a restarted attempt
}

fs::path checkpoint_like_dir() {
  const fs::path d = fs::temp_directory_path() / ("tessel-fault-" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::ofstream(d / "model.safetensors", std::ios::binary) << std::string(4096, '\x11');
  std::ofstream(d / "small.safetensors", std::ios::binary) << std::string(64, '\x22');
  return d;
}

TEST(DamageCheckpoint, CorruptChangesTheLargestFilesCrcAndKeepsItsSize) {
  const fs::path d = checkpoint_like_dir();
  const auto [crc, size] = ckpt::file_crc(d / "model.safetensors");
  EXPECT_EQ(damage_checkpoint(d.string(), FaultKind::corrupt_checkpoint), (d / "model.safetensors").string());
  const auto [crc2, size2] = ckpt::file_crc(d / "model.safetensors");
  EXPECT_NE(crc, crc2);
  EXPECT_EQ(size, size2);
  EXPECT_EQ(ckpt::file_crc(d / "small.safetensors").second, 64);  // untouched
  fs::remove_all(d);
}

TEST(DamageCheckpoint, TruncateCutsTheLargestFileToHalf) {
  const fs::path d = checkpoint_like_dir();
  damage_checkpoint(d.string(), FaultKind::truncate_checkpoint);
  EXPECT_EQ(fs::file_size(d / "model.safetensors"), 2048u);
  fs::remove_all(d);
}

TEST(CorruptBatch, EveryTargetMovesHalfTheVocabularyAndTheOriginalStays) {
  data::Batch b{Tensor::zeros({1, 4}, DType::i64), Tensor::zeros({1, 4}, DType::i64)};
  int64_t* t = b.targets.data<int64_t>();
  for (int64_t v : {0, 1, 255, 511}) *t++ = v;
  const data::Batch c = corrupt_batch(b, 512);
  const int64_t* o = c.targets.data<int64_t>();
  EXPECT_EQ(o[0], 256);
  EXPECT_EQ(o[1], 257);
  EXPECT_EQ(o[2], 511);
  EXPECT_EQ(o[3], 255);
  EXPECT_EQ(b.targets.data<int64_t>()[0], 0);
}

}  // namespace
}  // namespace tessel::resilience
