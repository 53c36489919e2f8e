// tessel-checkpoint-2 in one process: the pieces a rank writes load back exactly (parameters,
// moments, optimizer steps, extra state), consolidate to the whole-tensor form with the same values,
// and damage to a piece's description or a missing piece is named and skipped. The pieces of many
// ranks and their resharding are tested end to end under mpirun (distributed_checkpoint_test.sh).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/error_of.h"
#include "support/host_access.h"
#include "support/scratch_dir.h"
#include "checkpoint_fixtures.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <cstdlib>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/checkpoint_reader.h"
#include "tessel/ckpt/distributed_checkpoint.h"
#include "tessel/nn/model.h"

using namespace tessel;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

nn::ModelConfig cfg(int64_t hidden = 32) { return tessel::testing::tiny_checkpoint_model(hidden); }

struct Scratch : tessel::testing::CheckpointScratch {
  Scratch() : CheckpointScratch("tessel-dckpt") {}
};

using tessel::testing::perturb;
using tessel::testing::host_values;

const ckpt::NamedTensors kState = [] {
  const tessel::testing::HostAccess host;
  Tensor h = Tensor::empty({3}, DType::f32);
  for (int i = 0; i < 3; ++i) h.data<float>()[i] = 0.25f * float(i + 1);
  return ckpt::NamedTensors{{"model.layers.0.fp8.amax_history", h}};
}();

std::string save(const std::string& dir, nn::Model& m, optim::AdamW& opt, int64_t step) {
  auto world = comm::make_local_communicator();
  return ckpt::save_distributed_checkpoint(dir, m.params(), opt, {step, 8 * step, 1}, "model: {}\n", 3, *world, kState,
                                           {{"world", 1}});
}

TEST(DistributedCheckpoint, OneRankSavesEveryTensorOnceAndLoadsItBack) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  perturb(a, oa, 0.5f);
  const std::string where = save(s.dir, a, oa, 2);
  EXPECT_EQ(where, s.dir + "/step_00000002");
  EXPECT_TRUE(fs::exists(where + "/rank_00000.safetensors"));
  EXPECT_FALSE(fs::exists(where + "/model.safetensors"));
  const json md = json::parse(std::ifstream(where + "/metadata.json"));
  EXPECT_EQ(md["format"], "tessel-checkpoint-2");
  // One piece per parameter and moment (tied copies excluded), and one per state tensor.
  EXPECT_EQ(md["pieces"].size(), 3 * a.params().specs().size() + 1);

  nn::Model b(cfg());
  b.params().initialize(2);
  optim::AdamW ob(b.params(), {});
  ckpt::NamedTensors state;
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [](const std::string& w) { FAIL() << w; },
                                               false, &state);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->step, 2);
  EXPECT_EQ(st->consumed_samples, 16);
  const int64_t n = a.params().numel();
  EXPECT_EQ(host_values([&] { return b.params().params_data(); }, n), host_values([&] { return a.params().params_data(); }, n));
  EXPECT_EQ(host_values([&] { return ob.exp_avg_data(); }, n), host_values([&] { return oa.exp_avg_data(); }, n));
  EXPECT_EQ(host_values([&] { return ob.exp_avg_sq_data(); }, n), host_values([&] { return oa.exp_avg_sq_data(); }, n));
  EXPECT_EQ(ob.steps_taken(), 1);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "model.layers.0.fp8.amax_history");
  EXPECT_EQ(host_values([&] { return state[0].second.data<float>(); }, 3), host_values([&] { return kState[0].second.data<float>(); }, 3));
}

// block_crc32s against zlib's CRC-32 of each run and of the whole buffer.
TEST(DistributedCheckpoint, BlockCrcsAreTheCrcsOfEachRun) {
  std::vector<unsigned char> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  const ckpt::BlockCrcs c = ckpt::block_crc32s(bytes.data(), bytes.size(), 256);
  ASSERT_EQ(c.blocks.size(), 4u);
  for (size_t b = 0; b < 4; ++b)
    EXPECT_EQ(c.blocks[b], ckpt::bytes_crc32(bytes.data() + 256 * b, b < 3 ? 256 : 1000 - 768)) << "block " << b;
  EXPECT_EQ(c.whole, ckpt::bytes_crc32(bytes.data(), bytes.size()));
  const ckpt::BlockCrcs one = ckpt::block_crc32s(bytes.data(), bytes.size(), 1000);  // one block: none listed
  EXPECT_TRUE(one.blocks.empty());
  EXPECT_EQ(one.whole, c.whole);
}

// The writer lists block CRC-32s for every value and moment piece longer than a block (64 bytes
// here), none for state; the checkpoint loads back exactly; half of a piece reads about half of it.
TEST(DistributedCheckpoint, LargePiecesAreSavedWithBlockCrcsAndLoadBack) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  perturb(a, oa, 0.5f);
  std::string where;
  {
    struct BlockBytes {  // set for this save only, even if it throws
      BlockBytes() { ::setenv("TESSEL_TEST_CKPT_CRC_BLOCK_BYTES", "64", 1); }
      ~BlockBytes() { ::unsetenv("TESSEL_TEST_CKPT_CRC_BLOCK_BYTES"); }
    } block_bytes;
    where = save(s.dir, a, oa, 2);
  }
  const json md = json::parse(std::ifstream(where + "/metadata.json"));
  int with_blocks = 0;
  std::string big;  // a piece of many blocks
  for (const json& p : md["pieces"]) {
    const int64_t bytes = 4 * (p["flat"][1].get<int64_t>() - p["flat"][0].get<int64_t>());
    const bool state = p["key"].get<std::string>().rfind("state.", 0) == 0;
    if (state || bytes <= 64) {
      EXPECT_FALSE(p.contains("crc32_blocks")) << p["key"];
      continue;
    }
    ASSERT_TRUE(p.contains("crc32_blocks")) << p["key"];
    EXPECT_EQ(p["crc32_blocks"]["bytes"], 64);
    EXPECT_EQ(int64_t(p["crc32_blocks"]["crc32"].size()), (bytes + 63) / 64) << p["key"];
    ++with_blocks;
    if (bytes >= 64 * 16) big = p["key"];
  }
  EXPECT_GT(with_blocks, 0);
  ASSERT_FALSE(big.empty());

  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [](const std::string& w) { FAIL() << w; });
  ASSERT_TRUE(st.has_value());
  const int64_t n = a.params().numel();
  EXPECT_EQ(host_values([&] { return b.params().params_data(); }, n), host_values([&] { return a.params().params_data(); }, n));
  EXPECT_EQ(host_values([&] { return ob.exp_avg_data(); }, n), host_values([&] { return oa.exp_avg_data(); }, n));
  EXPECT_EQ(host_values([&] { return ob.exp_avg_sq_data(); }, n), host_values([&] { return oa.exp_avg_sq_data(); }, n));

  ckpt::CheckpointReader r(where);
  const Shape shape = r.global_shape(big);
  ckpt::BlockRange half = ckpt::whole_box(Shape(shape.size(), 0), shape);
  half.flat_end /= 2;
  std::vector<float> got(size_t(half.flat_end));
  r.read(big, half, got.data());
  EXPECT_LE(r.bytes_read(), 4 * half.flat_end + 64);
  EXPECT_GE(r.bytes_read(), 4 * half.flat_end);
  const Tensor whole = r.read_whole(big);
  const tessel::testing::HostAccess host;
  EXPECT_EQ(got, std::vector<float>(whole.data<float>(), whole.data<float>() + half.flat_end));
}

TEST(DistributedCheckpoint, ConsolidatesToWholeTensorsWithTheSameValues) {
  Scratch s, out;
  nn::Model a(cfg());
  a.params().initialize(3);
  optim::AdamW oa(a.params(), {});
  perturb(a, oa, 0.25f);
  const std::string where = save(s.dir, a, oa, 4);
  const std::string whole = ckpt::consolidate_checkpoint(where, out.dir);
  EXPECT_EQ(whole, out.dir + "/step_00000004");
  ckpt::CheckpointReader r(whole);
  EXPECT_FALSE(r.distributed());
  EXPECT_EQ(r.metadata().config, "model: {}\n");
  EXPECT_EQ(r.metadata().consumed_samples, 32);
  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  ckpt::NamedTensors state;
  ckpt::load_checkpoint(whole, b.params(), &ob, false, &state);
  const int64_t n = a.params().numel();
  EXPECT_EQ(host_values([&] { return b.params().params_data(); }, n), host_values([&] { return a.params().params_data(); }, n));
  EXPECT_EQ(host_values([&] { return ob.exp_avg_sq_data(); }, n), host_values([&] { return oa.exp_avg_sq_data(); }, n));
  EXPECT_EQ(state.size(), 1u);
}

// Saves steps 1 and 2, edits step 2's metadata.json, loads: the load must fall back to step 1.
std::string load_after_editing_step2(const std::function<void(json&)>& edit) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  save(s.dir, a, oa, 1);
  perturb(a, oa, 0.5f);
  save(s.dir, a, oa, 2);
  const fs::path md_path = fs::path(s.dir) / "step_00000002" / "metadata.json";
  json md = json::parse(std::ifstream(md_path));
  edit(md);
  std::ofstream(md_path, std::ios::trunc) << md.dump(1);
  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  std::string warning;
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [&](const std::string& w) { warning += w; });
  EXPECT_TRUE(st.has_value() && st->step == 1) << warning;
  return warning;
}

json& piece_of(json& md, const std::string& key) {
  for (json& p : md["pieces"])
    if (p["key"] == key) return p;
  throw std::runtime_error("no piece " + key);
}

TEST(DistributedCheckpoint, APieceMissingOrOutsideItsTensorIsDamage) {
  EXPECT_HAS(load_after_editing_step2([](json& m) {
               auto& list = m["pieces"];
               for (size_t i = 0; i < list.size(); ++i)
                 if (list[i]["key"] == "exp_avg.model.norm.weight") list.erase(i);
             }),
             "has no 'exp_avg.model.norm.weight'");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight")["flat"] = {0, 16}; }),
             "metadata.json's pieces of 'model.norm.weight' hold 16 elements, the tensor [32] has 32");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight")["begin"] = {20}; }),
             "pieces[");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight")["begin"] = {20}; }),
             "('model.norm.weight') does not fit its tensor of shape [32]: dimension 0 spans [20, 52) of 32");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight")["file"] = "rank_00009.safetensors"; }),
             "is in 'rank_00009.safetensors', which 'files' does not list");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["pieces"] = json::array(); }), "lists no pieces");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight").erase("crc32"); }),
             "metadata.json has no key 'pieces[");
  EXPECT_HAS(load_after_editing_step2([](json& m) { piece_of(m, "model.norm.weight")["shape"] = {0, int64_t(1) << 62, 4}; }),
             "has more elements than fit in 64 bits");
  EXPECT_HAS(load_after_editing_step2([](json& m) { m["files"]["rank_00000.safetensors"]["bytes"] = 7; }),
             "rank_00000.safetensors is truncated or altered");
}

// A hand-made checkpoint of one [4, 6] tensor t (element value = its row-major global index) in
// two pieces of two files: rank 0 holds rows 0-1 whole, rank 1 rows `row1` and `row1 + 1` (with
// row1 = 2 the pieces tile the tensor). The reader assembles any box or part of one from both.
// block_bytes > 0: each piece also lists the CRC-32 of each run of that many bytes (crc32_blocks).
void write_two_piece_checkpoint(const std::string& dir, int64_t row1, int64_t block_bytes = 0) {
  const tessel::testing::HostAccess host;
  const auto piece = [&](const std::string& file, int64_t row0) {
    Tensor t = Tensor::empty({12}, DType::f32);
    for (int64_t i = 0; i < 12; ++i) t.data<float>()[i] = float(row0 * 6 + i);
    ckpt::write_safetensors(dir + "/" + file, {}, {{"t", t}});
    const auto [crc, bytes] = ckpt::file_crc(dir + "/" + file);
    json p{{"key", "t"}, {"file", file}, {"global_shape", {4, 6}}, {"begin", {row0, 0}},
           {"shape", {2, 6}}, {"flat", {0, 12}}, {"crc32", ckpt::bytes_crc32(t.raw(), t.nbytes())}};
    if (block_bytes > 0) {
      json crcs = json::array();
      const auto* raw = static_cast<const char*>(t.raw());
      for (int64_t at = 0; at < int64_t(t.nbytes()); at += block_bytes)
        crcs.push_back(ckpt::bytes_crc32(raw + at, size_t(std::min(block_bytes, int64_t(t.nbytes()) - at))));
      p["crc32_blocks"] = {{"bytes", block_bytes}, {"crc32", crcs}};
    }
    return std::make_pair(json{{"crc32", crc}, {"bytes", bytes}}, p);
  };
  const auto [f0, p0] = piece("rank_00000.safetensors", 0);
  const auto [f1, p1] = piece("rank_00001.safetensors", row1);
  const json md = {{"format", "tessel-checkpoint-2"}, {"step", 1}, {"consumed_samples", 0}, {"optimizer_steps", 0},
                   {"seed", 0}, {"config", ""},
                   {"files", {{"rank_00000.safetensors", f0}, {"rank_00001.safetensors", f1}}},
                   {"tensors", {{"t", {{"global_shape", {4, 6}}}}}}, {"pieces", {p0, p1}}};
  std::ofstream(dir + "/metadata.json") << md.dump();
}

TEST(DistributedCheckpoint, TheReaderAssemblesBoxesFromPieces) {
  Scratch s;
  write_two_piece_checkpoint(s.dir, 2);
  ckpt::CheckpointReader r(s.dir);
  // Columns 1-3 of rows 1-2 (a tensor-parallel slice crossing both pieces).
  std::vector<float> got(6);
  r.read("t", ckpt::whole_box({1, 1}, {2, 3}), got.data());
  EXPECT_EQ(got, (std::vector<float>{7, 8, 9, 13, 14, 15}));
  // Elements 2-4 of that box only (a distributed-optimizer shard of it).
  std::vector<float> part(3);
  r.read("t", {{1, 1}, {2, 3}, 2, 5}, part.data());
  EXPECT_EQ(part, (std::vector<float>{9, 13, 14}));
  const Tensor whole = r.read_whole("t");
  const tessel::testing::HostAccess host;
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(whole.data<float>()[i], float(i));
}

// With per-block CRC-32s a rank reads only the blocks that hold what it asks for: 8-byte blocks (two
// elements) of two 48-byte pieces.
TEST(DistributedCheckpoint, APieceWithBlockCrcsIsReadOnlyWhereNeeded) {
  Scratch s;
  write_two_piece_checkpoint(s.dir, 2, 8);
  ckpt::CheckpointReader r(s.dir);
  // Elements 2-4 of the box of rows 1-2, columns 1-3: t[1][3], t[2][1], t[2][2]. From rank 0's piece
  // (rows 0-1) the span of the boxes' overlap, its elements 7-9: blocks 3 and 4; from rank 1's (rows
  // 2-3) elements 1-3: blocks 0 and 1. 32 of the 96 bytes.
  std::vector<float> part(3);
  r.read("t", {{1, 1}, {2, 3}, 2, 5}, part.data());
  EXPECT_EQ(part, (std::vector<float>{9, 13, 14}));
  EXPECT_EQ(r.bytes_read(), 32);
  // A shard of rank 1's own box (a distributed-optimizer shard, the layout unchanged): elements 5-6,
  // blocks 2 and 3.
  std::vector<float> shard(2);
  r.read("t", {{2, 0}, {2, 6}, 5, 7}, shard.data());
  EXPECT_EQ(shard, (std::vector<float>{17, 18}));
  EXPECT_EQ(r.bytes_read(), 32 + 16);
  const Tensor whole = r.read_whole("t");
  EXPECT_EQ(r.bytes_read(), 32 + 16 + 96);
  const tessel::testing::HostAccess host;
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(whole.data<float>()[i], float(i));
}

// Damage in a block nobody reads goes unnoticed by that read (each rank verifies what it reads); in a
// block that is read it is named, with the block.
TEST(DistributedCheckpoint, ADamagedBlockIsNamedWhenRead) {
  Scratch s;
  write_two_piece_checkpoint(s.dir, 2, 8);
  {
    std::fstream io(fs::path(s.dir) / "rank_00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-48, std::ios::end);  // the piece's first byte: block 0
    io.put('\x7f');
  }
  ckpt::CheckpointReader r(s.dir);
  std::vector<float> row1(6);
  r.read("t", ckpt::whole_box({1, 0}, {1, 6}), row1.data());  // elements 6-11: blocks 3-5
  EXPECT_EQ(row1, (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_HAS(tessel::testing::error_of([&] { r.read_whole("t"); }),
             "rank_00000.safetensors is corrupted: block 0 of its piece 't' has CRC-32 ");
}

TEST(DistributedCheckpoint, BlockCrcsThatDoNotFitThePieceAreDamage) {
  const auto reader_error = [](const std::function<void(json&)>& edit) {
    Scratch s;
    write_two_piece_checkpoint(s.dir, 2, 8);
    json md = json::parse(std::ifstream(s.dir + "/metadata.json"));
    edit(md);
    std::ofstream(s.dir + "/metadata.json", std::ios::trunc) << md.dump();
    return tessel::testing::error_of([&] { ckpt::CheckpointReader r(s.dir); });
  };
  EXPECT_HAS(reader_error([](json& m) { m["pieces"][0]["crc32_blocks"]["crc32"].erase(5); }),
             "metadata.json has 5 block CRC-32s for the piece 't' in rank_00000.safetensors, whose 48 bytes make 6 "
             "blocks of 8");
  EXPECT_HAS(reader_error([](json& m) { m["pieces"][1]["crc32_blocks"]["bytes"] = 6; }),
             "metadata.json key 'pieces[1].crc32_blocks.bytes' must be a positive multiple of 4 bytes, got 6");
  EXPECT_HAS(reader_error([](json& m) { m["pieces"][1]["crc32_blocks"]["crc32"][2] = -1; }),
             "metadata.json key 'pieces[1].crc32_blocks.crc32' must be an integer in [0, 2^32), got number -1");
  // Blocks whose CRCs do not make the piece's: one of the two would go unchecked by reads of the other.
  EXPECT_HAS(reader_error([](json& m) { m["pieces"][0]["crc32_blocks"]["crc32"][1] = 12345; }),
             "metadata.json's block CRC-32s of the piece 't' in rank_00000.safetensors make ");
}

TEST(DistributedCheckpoint, PiecesThatOverlapAndLeaveAGapAreDamage) {
  Scratch s;
  write_two_piece_checkpoint(s.dir, 1);  // rows 0-1 and 1-2: 24 elements in all, row 3 in none
  ckpt::CheckpointReader r(s.dir);
  std::vector<float> row0(6);
  r.read("t", ckpt::whole_box({0, 0}, {1, 6}), row0.data());  // what is there reads
  EXPECT_EQ(row0, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_HAS(tessel::testing::error_of([&] { r.read_whole("t"); }),
             "metadata.json's pieces of 't' cover only 18 of the 24 elements asked for (the box at [0, 0] of shape "
             "[4, 6], elements [0, 24))");
}

TEST(DistributedCheckpoint, ARankFileDamagedIsNamed) {
  Scratch s;
  nn::Model a(cfg());
  a.params().initialize(1);
  optim::AdamW oa(a.params(), {});
  save(s.dir, a, oa, 1);
  save(s.dir, a, oa, 2);
  const fs::path f = fs::path(s.dir) / "step_00000002" / "rank_00000.safetensors";
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-100, std::ios::end);  // in a moment's piece (the last piece, the state, is not read here)
    io.put('\x7f');
  }
  nn::Model b(cfg());
  optim::AdamW ob(b.params(), {});
  std::string warning;
  const auto st = ckpt::load_latest_checkpoint(s.dir, b.params(), &ob, [&](const std::string& w) { warning += w; });
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->step, 1);
  EXPECT_HAS(warning, "rank_00000.safetensors is corrupted: its piece '");
}

TEST(DistributedCheckpoint, AnotherModelIsRefusedNotSkipped) {
  Scratch s;
  nn::Model small(cfg(32)), large(cfg(48));
  optim::AdamW os(small.params(), {}), ol(large.params(), {});
  save(s.dir, small, os, 1);
  EXPECT_HAS(tessel::testing::error_of([&] {
               ckpt::load_latest_checkpoint(s.dir, large.params(), &ol, [](const std::string& w) { FAIL() << w; });
             }),
             "the checkpoint is of another model shape");
}

}  // namespace
