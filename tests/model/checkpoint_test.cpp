// Checkpoint save/load: round trip, damaged checkpoints named and skipped (files, and metadata.json
// with a missing or ill-typed key or an overflowing shape), another model refused, rank agreement.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/host_access.h"
#include "support/error_of.h"
#include "support/scratch_dir.h"
#include "checkpoint_fixtures.h"

#include <filesystem>
#include <fstream>
#include <functional>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/nn/model.h"

using namespace tessel;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

nn::ModelConfig cfg(int64_t hidden = 32) { return tessel::testing::tiny_checkpoint_model(hidden); }

struct Scratch : tessel::testing::CheckpointScratch {
  Scratch() : CheckpointScratch("tessel-ckpt") {}
};

using tessel::testing::perturb;
using tessel::testing::snapshot;

TEST(Checkpoint, RoundTripRestoresParamsMomentsAndState) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  perturb(a, oa, 0.5f);
  ckpt::save_checkpoint(s.dir, a.params(), oa, {1, 16, 1}, "model: {}\n", 2);
  nn::Model b(cfg());
  b.params().initialize(2);
  optim::AdamW ob(b.params(), {});
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [](const std::string&) { FAIL(); });
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->step, 1);
  EXPECT_EQ(st->consumed_samples, 16);
  EXPECT_EQ(snapshot(a), snapshot(b));
  EXPECT_EQ(ob.steps_taken(), 1);
  // The next update is identical (moments restored).
  perturb(a, oa, 0.25f);
  perturb(b, ob, 0.25f);
  EXPECT_EQ(snapshot(a), snapshot(b));
}

TEST(Checkpoint, DamagedLatestIsNamedAndThePreviousOneUsed) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (const bool truncate : {true, false}) {
    Scratch s;
    nn::Model a(cfg());
    a.params().initialize(1);
    optim::AdamW oa(a.params(), {});
    perturb(a, oa, 0.5f);
    ckpt::save_checkpoint(s.dir, a.params(), oa, {1, 8, 1}, "", 3);
    const auto at_step1 = snapshot(a);
    perturb(a, oa, 0.5f);
    ckpt::save_checkpoint(s.dir, a.params(), oa, {2, 16, 1}, "", 3);
    const fs::path damaged = fs::path(s.dir) / "step_00000002" / "model.safetensors";
    if (truncate) {
      fs::resize_file(damaged, fs::file_size(damaged) / 2);
    } else {
      std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-5, std::ios::end);
      f.put('\x7f');
    }
    nn::Model b(cfg());
    optim::AdamW ob(b.params(), {});
    std::string warning;
    const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [&](const std::string& w) { warning = w; });
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->step, 1);
    EXPECT_NE(warning.find("step_00000002"), std::string::npos) << warning;
    EXPECT_NE(warning.find(truncate ? "truncated" : "corrupted"), std::string::npos) << warning;
    EXPECT_EQ(snapshot(b), at_step1);
  }
}

TEST(Checkpoint, AnotherModelShapeIsRefusedAndNothingIsLoaded) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Scratch s;
  nn::Model a(cfg(32));
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  ckpt::save_checkpoint(s.dir, a.params(), oa, {1, 8, 1}, "", 3);
  nn::Model b(cfg(48));
  b.params().initialize(3);
  const auto before = snapshot(b);
  try {
    ckpt::load_latest_checkpoint(s.dir, b.params(), nullptr, [](const std::string&) {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model shape"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(snapshot(b), before);
}

TEST(Checkpoint, KeepsTheNewestKAndAllDamagedIsAnError) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  for (int64_t step = 1; step <= 4; ++step) ckpt::save_checkpoint(s.dir, a.params(), oa, {step, 0, 1}, "", 2);
  EXPECT_EQ(ckpt::list_checkpoints(s.dir), (std::vector<std::string>{"step_00000004", "step_00000003"}));
  for (const auto& c : ckpt::list_checkpoints(s.dir)) fs::remove(fs::path(s.dir) / c / "optimizer.safetensors");
  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  EXPECT_THROW(ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [](const std::string&) {}), Error);
  Scratch empty;
  EXPECT_FALSE(ckpt::load_latest_checkpoint(empty.dir, b.params(), &ob, [](const std::string&) {}).has_value());
}

// Saves step 1 and step 2, edits step 2's metadata.json with `edit` (metadata.json has no CRC of its
// own, so the edit alone is the damage), loads, and returns the warning; the load must use step 1.
std::string load_after_editing_step2(const std::function<void(json&)>& edit) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  ckpt::save_checkpoint(s.dir, a.params(), oa, {1, 8, 1}, "", 3);
  const std::vector<float> at_step1 = snapshot(a);
  {
    const tessel::testing::HostAccess host;
    for (int64_t i = 0; i < a.params().numel(); ++i) a.params().grads_data()[i] = 0.5f;
  }
  oa.step(1e-2);
  ckpt::save_checkpoint(s.dir, a.params(), oa, {2, 16, 1}, "", 3);
  const fs::path md_path = fs::path(s.dir) / "step_00000002" / "metadata.json";
  json md = json::parse(std::ifstream(md_path));
  edit(md);
  std::ofstream(md_path, std::ios::trunc) << md.dump(2);

  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  std::string warning;
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [&](const std::string& w) { warning += w; });
  EXPECT_TRUE(st.has_value());
  if (st) {
    EXPECT_EQ(st->step, 1);
    EXPECT_EQ(st->consumed_samples, 8);
  }
  EXPECT_EQ(snapshot(b), at_step1);
  EXPECT_NE(warning.find("skipping damaged checkpoint step_00000002"), std::string::npos) << warning;
  return warning;
}


TEST(CheckpointMetadata, TheRewindLearningRateFactorRoundTripsAndDefaultsToOne) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  ckpt::TrainState st{1, 8, 1};
  st.lr_scale = 0.25;
  ckpt::save_checkpoint(s.dir, a.params(), oa, st, "", 3);
  const auto loaded = ckpt::load_latest_checkpoint(s.dir, a.params(), &oa, [](const std::string&) { FAIL(); });
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->lr_scale, 0.25);
  // A checkpoint written before the key existed reads as 1.
  const fs::path md_path = fs::path(s.dir) / "step_00000001" / "metadata.json";
  json md = json::parse(std::ifstream(md_path));
  md.erase("lr_scale");
  std::ofstream(md_path, std::ios::trunc) << md.dump(2);
  const auto old = ckpt::load_latest_checkpoint(s.dir, a.params(), &oa, [](const std::string&) {});
  ASSERT_TRUE(old);
  EXPECT_EQ(old->lr_scale, 1.0);
}

// The resilience detectors' history (windows, counted rewinds) rides along, so a restart goes on
// with it; a checkpoint written before it reads as empty.
TEST(CheckpointMetadata, TheResilienceHistoryRoundTripsAndDefaultsToEmpty) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  ckpt::TrainState st{1, 8, 1};
  st.resilience = {{5.5, 5.25, 0.1 + 0.2}, {1.5, 2.0}, {3}};
  ckpt::save_checkpoint(s.dir, a.params(), oa, st, "", 3);
  const auto loaded = ckpt::load_latest_checkpoint(s.dir, a.params(), &oa, [](const std::string&) { FAIL(); });
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->resilience.loss_window, (std::vector<double>{5.5, 5.25, 0.1 + 0.2}));  // to the bit
  EXPECT_EQ(loaded->resilience.grad_norm_window, (std::vector<double>{1.5, 2.0}));
  EXPECT_EQ(loaded->resilience.rewind_steps, (std::vector<int64_t>{3}));
  const fs::path md_path = fs::path(s.dir) / "step_00000001" / "metadata.json";
  json md = json::parse(std::ifstream(md_path));
  md.erase("resilience");
  std::ofstream(md_path, std::ios::trunc) << md.dump(2);
  const auto old = ckpt::load_latest_checkpoint(s.dir, a.params(), &oa, [](const std::string&) {});
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->resilience.loss_window.empty() && old->resilience.grad_norm_window.empty() &&
              old->resilience.rewind_steps.empty());
}

TEST(CheckpointMetadata, MissingKeysAreDamage) {
  EXPECT_HAS(load_after_editing_step2([](json& m) { m.erase("step"); }), "metadata.json has no key 'step'");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m.erase("optimizer_steps"); }),
             "metadata.json has no key 'optimizer_steps'");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["files"]["model.safetensors"].erase("bytes"); }),
             "metadata.json has no key 'files.model.safetensors.bytes'");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["files"].erase("optimizer.safetensors"); }),
             "metadata.json does not list optimizer.safetensors");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["tensors"]["model.norm.weight"].erase("global_shape"); }),
             "metadata.json has no key 'tensors.model.norm.weight.global_shape'");
}

TEST(CheckpointMetadata, IllTypedKeysAreDamage) {
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["step"] = "2"; }),
             "metadata.json key 'step' must be an integer in [0, 2^63), got string \"2\"");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["optimizer_steps"] = 1.5; }),
             "metadata.json key 'optimizer_steps' must be an integer in [0, 2^63), got number 1.5");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["consumed_samples"] = -16; }),
             "metadata.json key 'consumed_samples' must be an integer in [0, 2^63), got number -16");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["seed"] = nullptr; }),
             "metadata.json key 'seed' must be an integer in [0, 2^64), got null null");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["files"] = json::array(); }),
             "metadata.json key 'files' must be an object, got array []");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["files"]["model.safetensors"]["crc32"] = int64_t(1) << 40; }),
             "metadata.json key 'files.model.safetensors.crc32' must be an integer in [0, 2^32), got number 1099511627776");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["config"] = 7; }),
             "metadata.json key 'config' must be a string, got number 7");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["lr_scale"] = 1.5; }),
             "metadata.json key 'lr_scale' must be a number in (0, 1], got number 1.5");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["lr_scale"] = 0; }),
             "metadata.json key 'lr_scale' must be a number in (0, 1], got number 0");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["resilience"]["loss_window"] = {1.0, "2"}; }),
             "metadata.json key 'resilience.loss_window' must hold finite numbers, got string \"2\"");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["resilience"]["grad_norm_window"] = 3; }),
             "metadata.json key 'resilience.grad_norm_window' must be a list of at most 1048576 values, got number 3");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["resilience"]["rewind_steps"] = {-4}; }),
             "metadata.json key 'resilience.rewind_steps' must be an integer in [0, 2^63), got number -4");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["resilience"].erase("rewind_steps"); }),
             "metadata.json has no key 'resilience.rewind_steps'");
  EXPECT_HAS(load_after_editing_step2([](json& m) {
               m["files"]["../step_00000001/model.safetensors"] = m["files"]["model.safetensors"];
             }),
             "metadata.json lists file '../step_00000001/model.safetensors', which is not a file name in the checkpoint "
             "directory");
}

TEST(CheckpointMetadata, ShapesThatOverflowOrDisagreeAreDamageNotAnotherModel) {
  // 2^62 x 4 elements do not fit in 64 bits.
  EXPECT_HAS(load_after_editing_step2([](json& m) {
               m["tensors"]["model.norm.weight"]["global_shape"] = {int64_t(1) << 62, 4};
             }),
             "metadata.json key 'tensors.model.norm.weight.global_shape' = [4611686018427387904,4] has more elements "
             "than fit in 64 bits");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["tensors"]["model.norm.weight"]["global_shape"] = {33}; }),
             "model.safetensors holds 'model.norm.weight' as f32[32], metadata.json says [33]");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["tensors"]["model.norm.weight"]["global_shape"] = {-32}; }),
             "metadata.json key 'tensors.model.norm.weight.global_shape' must be an integer in [0, 2^63), got number -32");
}

TEST(CheckpointMetadata, TextThatIsNotJsonIsDamage) {
  Scratch s;
  const fs::path d = fs::path(s.dir) / "step_00000001";
  fs::create_directories(d);
  std::ofstream(d / "metadata.json") << "{\"step\": 1,";
  try {
    ckpt::read_checkpoint_metadata(d.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "checkpoint '" + d.string() + "': metadata.json is not valid JSON (syntax error at byte");
  }
}

TEST(CheckpointMetadata, ANumberPastTheRangeOfADoubleIsDamage) {
  Scratch s;
  const fs::path d = fs::path(s.dir) / "step_00000001";
  fs::create_directories(d);
  std::ofstream(d / "metadata.json") << "{\"step\": 1e400}";
  EXPECT_HAS(tessel::testing::error_of([&] { ckpt::read_checkpoint_metadata(d.string()); }),
             "checkpoint '" + d.string() + "': metadata.json is not valid JSON (a number past the range of a double '1e400')");
}

TEST(CheckpointMetadata, AnIntactCheckpointOfAnotherModelIsStillRefused) {
  // The newest checkpoint is valid but of another shape: a configuration error, no fallback to step 1.
  Scratch s;
  nn::Model small(cfg(32)), large(cfg(48));
  optim::AdamW os(small.params(), {}), ol(large.params(), {});
  ckpt::save_checkpoint(s.dir, small.params(), os, {1, 8, 1}, "", 3);
  ckpt::save_checkpoint(s.dir, large.params(), ol, {2, 16, 1}, "", 3);
  nn::Model b(cfg(32));
  std::string warning;
  try {
    ckpt::load_latest_checkpoint(s.dir, b.params(), nullptr, [&](const std::string& w) { warning += w; });
    FAIL() << "expected an error";
  } catch (const ckpt::ModelMismatch& e) {
    EXPECT_HAS(std::string(e.what()), "step_00000002' holds 'model.embed_tokens.weight' as f32[23, 48], but the "
                                      "model has f32[23, 32]: the checkpoint is of another model shape");
  }
  EXPECT_EQ(warning, "");
}

TEST(CheckpointRanks, AgreementOfTheLoadedCheckpoint) {
  EXPECT_NO_THROW(ckpt::check_loaded_range("ck", {3, 3, 77, 77}));
  EXPECT_NO_THROW(ckpt::check_loaded_range("ck", {-1, -1, -1, -1}));  // no rank found one: a fresh start
  try {
    ckpt::check_loaded_range("ck", {-1, 3, -1, 77});  // one rank found none (no shared file system)
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "the ranks loaded different checkpoints from checkpoint.dir 'ck' (from none to "
                                      "step 3): every rank must see the same directory");
  }
  try {
    ckpt::check_loaded_range("ck", {3, 3, 0x10, 0xff});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "the ranks loaded step 3 from checkpoint.dir 'ck' with different metadata.json "
                                      "contents (CRC-32 00000010 and 000000ff)");
  }
  // The collective form on one rank: it agrees with itself.
  const auto local = comm::make_local_communicator();
  ckpt::TrainState st{5, 80, 1, 1234};
  EXPECT_NO_THROW(ckpt::check_ranks_loaded_same(*local, "ck", st));
  EXPECT_NO_THROW(ckpt::check_ranks_loaded_same(*local, "ck", std::nullopt));
}

}  // namespace
