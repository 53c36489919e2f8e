#include "tessel/core/paths.h"
#include "tessel/ckpt/checkpoint.h"

#include <unistd.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/checkpoint_reader.h"
#include "tessel/ckpt/host_copies.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/comm/text.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.safetensors";  // extra training state (FP8 scaling), when any

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  if (!is_directory_path(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos) out.push_back(name);
  }
  std::sort(out.rbegin(), out.rend());  // zero-padded: lexical order is step order
  return out;
}

std::string save_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                            const TrainState& state, const std::string& config_yaml, int64_t keep) {
  const DeviceAccessScope host_copy;  // a checkpoint save copies device memory to the host
  TESSEL_CHECK(opt.owns_all(), "save_checkpoint: the optimizer owns a shard; gather its moments (FullOptimizerState) first");
  return save_checkpoint(dir, params, FullOptimizerState{opt.exp_avg_data(), opt.exp_avg_sq_data(), opt.steps_taken()}, state,
                         config_yaml, keep);
}

namespace {

// The whole tensor of a (possibly) tensor-parallel parameter: shards are equal slices along one
// dimension, each rank's where its slice_begin says (replicated slices are written twice, equal),
// gathered over tp. Unsharded tensors are returned as views.
Tensor whole(const nn::ParamSpec& s, const float* local, comm::Communicator* tp) {
  const Tensor mine = Tensor::from_blob(const_cast<float*>(local), s.shape, DType::f32);
  if (s.shape == s.global_shape) return mine;
  TESSEL_CHECK(tp && tp->size() > 1, "checkpoint: '{}' is a tensor-parallel shard but no group was given", s.name);
  size_t dim = 0;
  while (s.shape[dim] == s.global_shape[dim]) ++dim;
  const int n = tp->size();
  std::vector<float> all(size_t(s.numel) * size_t(n));
  tp->all_gather(local, all.data(), s.numel, DType::f32);
  std::vector<int64_t> begins(static_cast<size_t>(n));
  tp->all_gather(&s.slice_begin[dim], begins.data(), 1, DType::i64);
  Tensor full = Tensor::empty(s.global_shape, DType::f32);
  for (int k = 0; k < n; ++k)
    full.slice(int64_t(dim), begins[size_t(k)], begins[size_t(k)] + s.shape[dim])
        .copy_from(Tensor::from_blob(all.data() + size_t(k) * size_t(s.numel), s.shape, DType::f32));
  return full;
}

using Named = NamedTensors;

// Pipeline stages hand their whole tensors to stage 0 (names as i32 code units, shapes as i64).
void send_named(comm::Communicator& pp, const Named& list) {
  int64_t n = int64_t(list.size());
  pp.send(&n, 1, DType::i64, 0, 0);
  for (const auto& [name, t] : list) {
    std::vector<int32_t> chars(name.begin(), name.end());
    std::vector<int64_t> head{int64_t(chars.size()), t.dim()};
    for (int64_t d : t.shape()) head.push_back(d);
    int64_t head_len = int64_t(head.size());
    pp.send(&head_len, 1, DType::i64, 0, 1);
    pp.send(head.data(), head_len, DType::i64, 0, 2);
    pp.send(chars.data(), int64_t(chars.size()), DType::i32, 0, 3);
    const Tensor c = t.is_contiguous() ? t : t.clone();
    pp.send(c.raw(), c.numel(), DType::f32, 0, 4);
  }
}

void recv_named(comm::Communicator& pp, int from, Named& out) {
  int64_t n = 0;
  pp.recv(&n, 1, DType::i64, from, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t head_len = 0;
    pp.recv(&head_len, 1, DType::i64, from, 1);
    std::vector<int64_t> head(static_cast<size_t>(head_len));
    pp.recv(head.data(), head_len, DType::i64, from, 2);
    std::vector<int32_t> chars(static_cast<size_t>(head[0]));
    pp.recv(chars.data(), head[0], DType::i32, from, 3);
    Tensor t = Tensor::empty(Shape(head.begin() + 2, head.end()), DType::f32);
    pp.recv(t.raw(), t.numel(), DType::f32, from, 4);
    out.emplace_back(std::string(chars.begin(), chars.end()), std::move(t));
  }
}

// Every rank's tensors on rank 0 of the group, in rank order (collective over the group: pipeline
// stages, or expert-parallel ranks).
void gather_stages(comm::Communicator* pp, Named& list) {
  if (!pp || pp->size() == 1) return;
  if (pp->rank() != 0) {
    send_named(*pp, list);
    list.clear();
    return;
  }
  for (int r = 1; r < pp->size(); ++r) recv_named(*pp, r, list);
}

}  // namespace

StagedSave stage_checkpoint(const std::string& dir, const nn::ParamStore& params, const FullOptimizerState& opt,
                            const TrainState& state, const std::string& config_yaml, int64_t keep,
                            comm::Communicator* tp, bool write, comm::Communicator* pp,
                            const NamedTensors& extra_state, comm::Communicator* ep, bool copy) {
  const DeviceAccessScope host_copy;  // a checkpoint save copies device memory to the host
  TESSEL_CHECK(keep > 0, "checkpoint.keep must be > 0, got {}", keep);
  // Whole tensors first (collective over tp, then over pp), then only the writer touches the disk.
  Named model_tensors, optim_tensors;
  // Expert parallelism: rank 0 of the group keeps everything, the others contribute their experts.
  const bool experts_only = ep && ep->size() > 1 && ep->rank() != 0;
  for (const auto& s : params.specs()) {
    const Tensor p = whole(s, (opt.masters ? opt.masters : params.params_data()) + s.offset, tp);
    const Tensor m = whole(s, opt.exp_avg + s.offset, tp);
    const Tensor v = whole(s, opt.exp_avg_sq + s.offset, tp);
    if (s.tied_copy) continue;  // the first stage saves the tied embedding
    if (experts_only && !s.expert) continue;
    model_tensors.emplace_back(s.name, p);
    optim_tensors.emplace_back("exp_avg." + s.name, m);
    optim_tensors.emplace_back("exp_avg_sq." + s.name, v);
  }
  Named extra = extra_state;
  if (experts_only)  // state of this rank's routed experts only (FP8 scaling of their Linears)
    extra.erase(std::remove_if(extra.begin(), extra.end(),
                               [](const auto& e) { return !nn::is_routed_expert_name(e.first); }),
                extra.end());
  gather_stages(ep, model_tensors);  // experts onto the group's rank 0 first, then the stages
  gather_stages(ep, optim_tensors);
  gather_stages(ep, extra);
  gather_stages(pp, model_tensors);
  gather_stages(pp, optim_tensors);
  gather_stages(pp, extra);
  if (!write) return {[] {}, [] { return std::string(); }};
  // The writer runs write(), then finish() reads what it left: shared, not captured twice.
  auto tmp = std::make_shared<std::string>();
  const int64_t optimizer_steps = opt.optimizer_steps;
  if (copy) {
    // Host copies of everything (views of the live buffers among them: unsharded parameters, the
    // moments), owned by the write.
    auto copies = std::make_shared<const std::array<HostCopies, 3>>(
        std::array<HostCopies, 3>{HostCopies(model_tensors), HostCopies(optim_tensors), HostCopies(extra)});
    return {[=] {
              *tmp = write_whole_checkpoint(dir, (*copies)[0].tensors(), (*copies)[1].tensors(),
                                            (*copies)[2].tensors(), state, optimizer_steps, config_yaml, keep, false);
            },
            [tmp] { return *tmp; }};
  }
  return {[=] {
            *tmp = write_whole_checkpoint(dir, model_tensors, optim_tensors, extra, state, optimizer_steps, config_yaml,
                                          keep, false);
          },
          [tmp] { return *tmp; }};
}

std::string save_checkpoint(const std::string& dir, const nn::ParamStore& params, const FullOptimizerState& opt,
                            const TrainState& state, const std::string& config_yaml, int64_t keep,
                            comm::Communicator* tp, bool write, comm::Communicator* pp,
                            const NamedTensors& extra_state, comm::Communicator* ep, bool publish) {
  StagedSave staged = stage_checkpoint(dir, params, opt, state, config_yaml, keep, tp, write, pp, extra_state, ep, false);
  staged.write();
  const std::string tmp = staged.finish();
  if (tmp.empty() || !publish) return tmp;
  return publish_checkpoint(dir, state.step, tmp, keep);
}

std::string write_whole_checkpoint(const std::string& dir, const NamedTensors& model_tensors,
                                   const NamedTensors& optim_tensors, const NamedTensors& extra, const TrainState& state,
                                   int64_t optimizer_steps, const std::string& config_yaml, int64_t keep, bool publish) {
  TESSEL_CHECK(keep > 0, "checkpoint.keep must be > 0, got {}", keep);
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : model_tensors) {
    nlohmann::json slice = nlohmann::json::array();
    for (int64_t d : t.shape()) slice.push_back({0, d});
    tensors[name] = {{"global_shape", t.shape()}, {"slice", slice}, {"file", kModelFile}};
  }
  fs::create_directories(dir);
  const fs::path tmp = temporary_step_dir(dir, state.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  const std::map<std::string, std::string> meta{{"format", kFormatWhole}};
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [f, list] : {std::pair{kModelFile, &model_tensors}, std::pair{kOptimFile, &optim_tensors},
                                std::pair{kStateFile, &extra}}) {
    if (list == &extra && extra.empty()) continue;
    const auto [crc, size] = write_safetensors((tmp / f).string(), meta, *list);
    fsync_path(tmp / f, false);
    files[f] = {{"crc32", crc}, {"bytes", size}};
  }
  const nlohmann::json md = {{"format", kFormatWhole},
                             {"step", state.step},
                             {"consumed_samples", state.consumed_samples},
                             {"lr_scale", state.lr_scale},
                             {"resilience", resilience_history_json(state.resilience)},
                             {"optimizer_steps", optimizer_steps},
                             {"seed", state.seed},
                             {"parallel", {{"tensor", 1}, {"pipeline", 1}, {"data", 1}, {"rank", 0}}},
                             {"files", files},
                             {"tensors", tensors},
                             {"config", config_yaml}};
  write_text_file(tmp / "metadata.json", md.dump(2) + "\n");
  fsync_path(tmp, true);
  return publish ? publish_checkpoint(dir, state.step, tmp, keep) : tmp.string();
}

namespace {

[[noreturn]] void model_mismatch(const std::string& msg) { throw ModelMismatch(msg); }

// The block of spec's tensor this rank holds: its tensor-parallel slice, all of it.
BlockRange local_block(const nn::ParamSpec& s) { return whole_box(s.slice_begin, s.shape); }

}  // namespace

TrainState load_checkpoint(const std::string& ckpt_dir, nn::ParamStore& params, optim::AdamW* opt, bool partial,
                           NamedTensors* extra_state) {
  const DeviceAccessScope host_copy;  // a checkpoint load copies host memory to the device
  CheckpointReader ck(ckpt_dir);
  const CheckpointMetadata& md = ck.metadata();
  // Check everything before copying anything, so a mismatch leaves the model untouched.
  for (const auto& s : params.specs()) {
    if (!md.global_shapes.count(s.name))
      model_mismatch(fmt::format("checkpoint '{}' has no tensor '{}': it was saved from another model", ckpt_dir, s.name));
    const Shape& saved = md.global_shapes.at(s.name);
    if (saved != s.global_shape)
      model_mismatch(fmt::format(
          "checkpoint '{}' holds '{}' as f32{}, but the model has f32{}: the checkpoint is of another model shape",
          ckpt_dir, s.name, shape_str(saved), shape_str(s.global_shape)));
  }
  if (!partial && md.global_shapes.size() != params.specs().size())
    model_mismatch(fmt::format("checkpoint '{}' holds {} tensors, the model has {}: it was saved from another model",
                               ckpt_dir, md.global_shapes.size(), params.specs().size()));
  if (opt)
    for (const auto& s : params.specs())
      for (const std::string& name : {"exp_avg." + s.name, "exp_avg_sq." + s.name}) {
        TESSEL_CHECK(ck.has(name), "checkpoint '{}': {} has no '{}'", ckpt_dir,
                     ck.distributed() ? "any rank's file" : kOptimFile, name);
        TESSEL_CHECK(ck.global_shape(name) == s.global_shape, "checkpoint '{}': '{}' is saved as f32{}, expected f32{}",
                     ckpt_dir, name, shape_str(ck.global_shape(name)), shape_str(s.global_shape));
      }

  // Read everything this rank needs before changing anything, so damage found while reading leaves
  // the model as it was (the loader then tries the previous checkpoint).
  std::vector<Tensor> values;
  values.reserve(params.specs().size());
  for (const auto& s : params.specs()) {
    Tensor v = Tensor::empty(s.shape, DType::f32);  // this rank's tensor-parallel slice
    ck.read(s.name, local_block(s), v.data<float>());
    values.push_back(std::move(v));
  }
  // Moments: each tensor's part the optimizer owns, at its place in the packed moments.
  std::vector<float> m, v;
  if (opt) {
    m.resize(size_t(opt->owned().local_numel()));
    v.resize(m.size());
    for (const auto& s : params.specs()) {
      const auto own = opt->owned().part_of(s);
      if (!own) continue;
      BlockRange part = local_block(s);
      part.flat_begin = own->flat_begin - s.offset;
      part.flat_end = own->flat_end - s.offset;
      ck.read("exp_avg." + s.name, part, m.data() + own->local_begin);
      ck.read("exp_avg_sq." + s.name, part, v.data() + own->local_begin);
    }
  }
  NamedTensors state;
  if (extra_state) state = ck.state();

  // The values of this rank's slice; set_values keeps the part of the masters a sharded store holds.
  for (size_t i = 0; i < values.size(); ++i) params.set_values(params.specs()[i], values[i]);
  params.mark_updated();
  if (opt) {
    std::copy(m.begin(), m.end(), opt->exp_avg_data());
    std::copy(v.begin(), v.end(), opt->exp_avg_sq_data());
    opt->set_steps_taken(md.optimizer_steps);
  }
  if (extra_state) *extra_state = std::move(state);
  return TrainState{md.step, md.consumed_samples, md.seed, md.crc32, md.lr_scale, md.resilience, ck.bytes_read()};
}

void check_loaded_range(const std::string& dir, const LoadedRange& r) {
  const auto step = [](int64_t s) { return s < 0 ? std::string("none") : fmt::format("step {}", s); };
  TESSEL_CHECK(r.min_step == r.max_step,
               "the ranks loaded different checkpoints from checkpoint.dir '{}' (from {} to {}): every rank must see "
               "the same directory (a shared file system) with the same readable checkpoints",
               dir, step(r.min_step), step(r.max_step));
  TESSEL_CHECK(r.min_crc == r.max_crc,
               "the ranks loaded {} from checkpoint.dir '{}' with different metadata.json contents (CRC-32 {:08x} "
               "and {:08x}): every rank must see the same directory",
               step(r.min_step), dir, r.min_crc, r.max_crc);
}

void check_ranks_loaded_same(comm::Communicator& world, const std::string& dir, const std::optional<TrainState>& st) {
  const int64_t step = st ? st->step : -1, crc = st ? int64_t(st->metadata_crc) : -1;
  int64_t v[4] = {step, crc, -step, -crc};  // one max-reduction gives both the maxima and the minima
  world.all_reduce(v, 4, DType::i64, comm::ReduceOp::max);
  check_loaded_range(dir, {-v[2], v[0], -v[3], v[1]});
}

std::vector<std::string> checkpoint_candidates(const std::string& dir) {
  auto candidates = list_checkpoints(dir);
  const fs::path latest = fs::path(dir) / "latest";
  if (!candidates.empty() && fs::exists(latest)) {
    std::string name = read_text_file(latest);
    name.erase(name.find_last_not_of(" \n\r\t") + 1);
    auto it = std::find(candidates.begin(), candidates.end(), name);
    if (it != candidates.end()) std::rotate(candidates.begin(), it, it + 1);
  }
  return candidates;
}

namespace {

// Whether every rank of world sees the same candidate list (a shared checkpoint directory).
bool ranks_see_same_candidates(comm::Communicator& world, const std::vector<std::string>& candidates) {
  std::string all;
  for (const auto& c : candidates) all += c + "\n";
  const int64_t crc = int64_t(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(all.data()), uInt(all.size())));
  int64_t v[4] = {int64_t(candidates.size()), crc, -int64_t(candidates.size()), -crc};
  world.all_reduce(v, 4, DType::i64, comm::ReduceOp::max);
  return v[0] == -v[2] && v[1] == -v[3];
}

}  // namespace

std::optional<TrainState> load_latest_checkpoint(const std::string& dir, nn::ParamStore& params, optim::AdamW* opt,
                                                 const std::function<void(const std::string&)>& warn, bool partial,
                                                 NamedTensors* extra_state, comm::Communicator* world) {
  const DeviceAccessScope host_copy;  // a checkpoint load copies host memory to the device
  const auto candidates = checkpoint_candidates(dir);
  // The ranks decide together when they can (a distributed checkpoint's damage may show on one
  // rank only); ranks that see different directories decide alone, and check_ranks_loaded_same
  // then names the disagreement.
  const bool together = world && world->size() > 1 && ranks_see_same_candidates(*world, candidates);
  if (candidates.empty()) return std::nullopt;
  std::string errors;
  for (const auto& c : candidates) {
    enum Outcome : int64_t { loaded = 0, damaged = 1, other_model = 2 };
    int64_t outcome = loaded;
    std::string msg;
    std::optional<TrainState> st;
    try {
      st = load_checkpoint((fs::path(dir) / c).string(), params, opt, partial, extra_state);
    } catch (const ModelMismatch& e) {
      if (!together) throw;  // a configuration error, not damage: do not fall back past it
      outcome = other_model;
      msg = e.what();
    } catch (const Error& e) {
      outcome = damaged;
      msg = e.what();
    }
    int64_t worst = outcome;
    if (together) world->all_reduce(&worst, 1, DType::i64, comm::ReduceOp::max);
    if (worst == loaded) return st;
    if (together) {
      // Every rank reports the reason the lowest rank that failed the worst way found.
      int64_t first = outcome == worst ? world->rank() : world->size();
      world->all_reduce(&first, 1, DType::i64, comm::ReduceOp::min);
      msg = comm::broadcast_text(*world, msg, int(first));
      if (int(first) != world->rank()) msg = fmt::format("(rank {}) {}", first, msg);
    }
    if (worst == other_model) throw ModelMismatch(msg);
    warn(fmt::format("skipping damaged checkpoint {}: {}", c, msg));
    errors += "\n  " + msg;
  }
  TESSEL_FAIL("no valid checkpoint in '{}' ({} found, all damaged):{}", dir, candidates.size(), errors);
}

}  // namespace tessel::ckpt
