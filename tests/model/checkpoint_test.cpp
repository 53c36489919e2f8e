// Checkpoint save/load: round trip, damaged checkpoints named and skipped, another model refused.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"

#include <filesystem>
#include <fstream>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/nn/model.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

nn::ModelConfig cfg(int64_t hidden = 32) {
  nn::ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = hidden;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 40;
  c.vocab_size = 23;
  c.seq_length = 8;
  return c;
}

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-ckpt") {}
};

// Moves the model and optimizer state one (deterministic) update away.
void perturb(nn::Model& m, optim::AdamW& opt, float g) {
  for (int64_t i = 0; i < m.params().numel(); ++i) m.params().grads_data()[i] = g * float((i % 7) - 3);
  opt.step(1e-2);
}

std::vector<float> snapshot(const nn::Model& m) {
  return {m.params().params_data(), m.params().params_data() + m.params().numel()};
}

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

}  // namespace
