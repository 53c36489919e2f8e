#include "tessel/ckpt/distributed_checkpoint.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <filesystem>
#include <map>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/checkpoint_reader.h"
#include "tessel/ckpt/host_copies.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/comm/text.h"
#include "tessel/core/fault_injection.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kTagList = 9101, kTagKeep = 9103, kTagFile = 9104;  // kTagList + 1: the list's words

// One piece this rank holds: values of the range `range` of tensor `key` (a view of its buffers).
struct LocalPiece {
  std::string key;
  Shape global_shape;
  BlockRange range;
  Tensor values;  // 1-D, range.flat_end - range.flat_begin elements
};

json describe(const LocalPiece& p) {
  return {{"key", p.key}, {"global_shape", p.global_shape}, {"begin", p.range.begin}, {"shape", p.range.shape},
          {"flat", {p.range.flat_begin, p.range.flat_end}}};
}

// What this rank holds: each parameter's fp32 masters and moments over its optimizer shard (the
// whole tensor-parallel slice when the optimizer owns everything), and its other training state.
std::vector<LocalPiece> local_pieces(const nn::ParamStore& params, const optim::AdamW& opt,
                                     const NamedTensors& extra_state) {
  // A sharded store holds masters for the optimizer's shard only, packed as the moments are.
  const float* masters = params.masters().data<float>();
  TESSEL_CHECK(!params.masters_sharded() || params.shard().same_ownership(opt.owned()),
               "distributed checkpoint: the masters' shard is {}, the optimizer's {}", params.shard().describe(),
               opt.owned().describe());
  std::vector<LocalPiece> out;
  for (const auto& s : params.specs()) {
    if (s.tied_copy) continue;  // the first stage's copy is the one saved
    const auto own = opt.owned().part_of(s);
    if (!own) continue;
    const int64_t b = own->flat_begin, e = own->flat_end;
    const BlockRange range{s.slice_begin, s.shape, b - s.offset, e - s.offset};
    const auto view = [&](const float* base, int64_t at) {
      return Tensor::from_blob(const_cast<float*>(base) + at, {e - b}, DType::f32);
    };
    out.push_back({s.name, s.global_shape, range, view(masters, params.masters_sharded() ? own->local_begin : b)});
    out.push_back({"exp_avg." + s.name, s.global_shape, range, view(opt.exp_avg_data(), own->local_begin)});
    out.push_back({"exp_avg_sq." + s.name, s.global_shape, range, view(opt.exp_avg_sq_data(), own->local_begin)});
  }
  for (const auto& [name, t] : extra_state) {
    const Tensor flat = (t.is_contiguous() ? t : t.clone()).reshape({t.numel()});
    out.push_back({"state." + name, t.shape(), whole_box(Shape(t.shape().size(), 0), t.shape()), flat});
  }
  return out;
}

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

// Bytes per CRC-32 block of a piece (metadata.json "crc32_blocks"): a rank resharding reads a piece's
// blocks that hold what it needs, not the whole piece. 16 MiB keeps metadata.json small (DeepSeek-V3's
// 8 TB of fp32 masters and moments: about 500,000 CRCs) and wastes at most two blocks per piece read
// in part. TESSEL_TEST_CKPT_CRC_BLOCK_BYTES=N (a positive multiple of 4) lets the tests' tiny models
// have pieces of many blocks (read at each save).
int64_t crc_block_bytes() {
  const char* v = std::getenv("TESSEL_TEST_CKPT_CRC_BLOCK_BYTES");
  if (!v || !*v) return int64_t(16) << 20;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  TESSEL_CHECK(end && *end == '\0' && n > 0 && n % 4 == 0,
               "TESSEL_TEST_CKPT_CRC_BLOCK_BYTES must be a positive multiple of 4 bytes, got '{}'", v);
  return int64_t(n);
}

}  // namespace

std::string save_distributed_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                                        const TrainState& state, const std::string& config_yaml, int64_t keep,
                                        comm::Communicator& world, const NamedTensors& extra_state,
                                        const std::vector<std::pair<std::string, int64_t>>& layout, bool publish) {
  TESSEL_CHECK(keep > 0, "checkpoint.keep must be > 0, got {}", keep);
  StagedSave staged = stage_distributed_checkpoint(dir, params, opt, state, config_yaml, world, extra_state, layout, false);
  staged.write();
  const std::string tmp = staged.finish();
  if (world.rank() == 0 && publish) publish_checkpoint(dir, state.step, tmp, keep);
  // Every rank returns once the checkpoint is published (the next save cannot overtake this one).
  int64_t done = 1;
  world.broadcast(&done, 1, DType::i64, 0);
  return publish ? (fs::path(dir) / step_name(state.step)).string() : tmp;  // tmp: rank 0's, "" elsewhere
}

StagedSave stage_distributed_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                                        const TrainState& state, const std::string& config_yaml,
                                        comm::Communicator& world, const NamedTensors& extra_state,
                                        const std::vector<std::pair<std::string, int64_t>>& layout, bool copy) {
  const DeviceAccessScope host_copy;  // a checkpoint save copies device memory to the host
  const int rank = world.rank(), n = world.size();
  // Rank 0 makes the temporary directory and names it (its PID) before any rank writes there.
  int64_t pid = ::getpid();
  if (rank == 0) {
    fs::create_directories(dir);
    fs::remove_all(temporary_step_dir(dir, state.step, pid));
    fs::create_directories(temporary_step_dir(dir, state.step, pid));
  }
  world.broadcast(&pid, 1, DType::i64, 0);
  const fs::path tmp = temporary_step_dir(dir, state.step, pid);

  // 1. Rank 0 learns every rank's pieces, one rank at a time, and picks for each distinct one (same
  // key, box and range) the lowest rank holding it as its writer; it keeps only the descriptions
  // and the pieces metadata.json will list.
  const std::vector<LocalPiece> mine = local_pieces(params, opt, extra_state);
  json my_list = json::array();
  const int64_t block_bytes = crc_block_bytes();
  for (const auto& p : mine) {
    json d = describe(p);
    // Other training state is always read whole; values and moments may be read in part.
    const bool partial_reads = p.key.rfind("state.", 0) != 0;
    const BlockCrcs crcs = block_crc32s(p.values.raw(), p.values.nbytes(),
                                        partial_reads ? size_t(block_bytes) : p.values.nbytes() + 1);
    d["crc32"] = crcs.whole;
    if (!crcs.blocks.empty()) d["crc32_blocks"] = {{"bytes", block_bytes}, {"crc32", crcs.blocks}};
    my_list.push_back(std::move(d));
  }
  std::vector<int32_t> keep_mine(mine.size(), 1);
  json pieces = json::array(), tensors = json::object();
  if (rank == 0) {
    std::map<std::string, int> writer;  // a piece's description (without its CRC) -> the rank writing it
    for (int r = 0; r < n; ++r) {
      const json list = r == 0 ? my_list : json::parse(comm::recv_text(world, r, kTagList));
      std::vector<int32_t> keep_r;
      for (const json& d : list) {
        json what = d;
        what.erase("crc32");  // replicas are equal; the description alone decides
        what.erase("crc32_blocks");
        const bool first = writer.emplace(what.dump(), r).second;
        keep_r.push_back(first ? 1 : 0);
        const std::string key = d.at("key");
        if (key.rfind("exp_avg", 0) != 0 && key.rfind("state.", 0) != 0)
          tensors[key] = {{"global_shape", d.at("global_shape")}};  // the parameters, by name
        if (first) {
          json piece = d;
          piece["file"] = rank_file_name(r);
          pieces.push_back(std::move(piece));
        }
      }
      if (r == 0)
        keep_mine = keep_r;
      else
        world.send(keep_r.data(), int64_t(keep_r.size()), DType::i32, r, kTagKeep);
    }
  } else {
    comm::send_text(world, my_list.dump(), 0, kTagList);
    world.recv(keep_mine.data(), int64_t(keep_mine.size()), DType::i32, 0, kTagKeep);
  }

  // 2. Every rank writes its file (if it writes any piece), fsyncs it and reports its size and CRC-32.
  NamedTensors pieces_to_write;
  for (size_t i = 0; i < mine.size(); ++i)
    if (keep_mine[i]) pieces_to_write.emplace_back(mine[i].key, mine[i].values);
  // With copy, host copies the write owns (the pieces are views of the live buffers).
  auto copies = copy ? std::make_shared<const HostCopies>(pieces_to_write) : nullptr;
  auto report = std::make_shared<std::array<int64_t, 3>>();  // wrote a file, its CRC-32, its size
  auto write = [to_write = copies ? NamedTensors() : pieces_to_write, copies, report, tmp, rank] {
    const NamedTensors& pieces = copies ? copies->tensors() : to_write;
    if (pieces.empty()) return;
    const fs::path file = tmp / rank_file_name(rank);
    const auto [crc, size] =
        write_safetensors(file.string(), {{"format", kFormatDistributed}, {"rank", std::to_string(rank)}}, pieces);
    fsync_path(file, false);
    *report = {1, int64_t(crc), size};
  };
  // 3. Rank 0 writes metadata.json once every file is complete.
  json parallel = json::object();
  for (const auto& [name, size] : layout) parallel[name] = size;
  const json md_base = {{"format", kFormatDistributed},
                        {"step", state.step},
                        {"consumed_samples", state.consumed_samples},
                        {"lr_scale", state.lr_scale},
                        {"resilience", resilience_history_json(state.resilience)},
                        {"optimizer_steps", opt.steps_taken()},
                        {"seed", state.seed},
                        {"parallel", parallel},
                        {"tensors", tensors},
                        {"pieces", pieces},
                        {"config", config_yaml}};
  auto finish = [report, tmp, rank, n, &world, md_base]() -> std::string {
    fault_point("checkpoint-save", rank);
    if (rank != 0) {
      world.send(report->data(), 3, DType::i64, 0, kTagFile);
      return "";
    }
    json files = json::object();
    for (int r = 0; r < n; ++r) {
      std::array<int64_t, 3> rep = *report;
      if (r > 0) world.recv(rep.data(), 3, DType::i64, r, kTagFile);
      if (!rep[0]) continue;
      // The file must be where rank 0 sees it (checkpoint.dir on a file system every rank shares).
      std::error_code ec;
      const auto size = fs::file_size(tmp / rank_file_name(r), ec);
      TESSEL_CHECK(!ec && int64_t(size) == rep[2], "distributed checkpoint: rank {} wrote {} ({} bytes) into '{}', "
                   "which rank 0 {}: checkpoint.dir must be one file system every rank shares", r, rank_file_name(r),
                   rep[2], tmp.string(), ec ? "cannot see" : fmt::format("sees with {} bytes", size));
      files[rank_file_name(r)] = {{"crc32", rep[1]}, {"bytes", rep[2]}};
    }
    json md = md_base;
    md["files"] = files;
    write_text_file(tmp / "metadata.json", md.dump(1) + "\n");
    fsync_path(tmp, true);
    return tmp.string();
  };
  return {write, finish};
}

std::string consolidate_checkpoint(const std::string& ckpt_dir, const std::string& out_dir) {
  const DeviceAccessScope host_copy;  // the consolidated tensors live on the host
  CheckpointReader ck(ckpt_dir);
  const CheckpointMetadata& md = ck.metadata();
  NamedTensors model, optim;
  for (const auto& [name, shape] : md.global_shapes) {
    model.emplace_back(name, ck.read_whole(name));
    optim.emplace_back("exp_avg." + name, ck.read_whole("exp_avg." + name));
    optim.emplace_back("exp_avg_sq." + name, ck.read_whole("exp_avg_sq." + name));
  }
  return write_whole_checkpoint(out_dir, model, optim, ck.state(),
                                {md.step, md.consumed_samples, md.seed, 0, md.lr_scale, md.resilience},
                                md.optimizer_steps, md.config, 1);
}

}  // namespace tessel::ckpt
