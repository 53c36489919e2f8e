#include "tessel/core/paths.h"
#include "tessel/train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "tessel/core/check.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/nn/stage_plan.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/train/config_yaml.h"

namespace tessel::train {
namespace {

// One entry per config key: how to read it from YAML and how to write it back.
struct Field {
  std::function<void(const YAML::Node&)> read;
  std::function<void(YAML::Emitter&)> write;
};
using Section = std::map<std::string, Field>;  // ordered, so errors list keys alphabetically

template <class T>
Field bind_field(T& ref, const std::string& key) {
  return {[&ref, key](const YAML::Node& n) { read_scalar(n, key, ref); }, [&ref](YAML::Emitter& e) { e << ref; }};
}

struct Schema {
  std::map<std::string, Section> sections;
  std::string compute_name;  // precision.compute as written

  explicit Schema(Config& c) {
    auto& m = sections["model"];
    m["arch"] = bind_field(c.model.arch, "model.arch");
    m["num_layers"] = bind_field(c.model.num_layers, "model.num_layers");
    m["hidden_size"] = bind_field(c.model.hidden_size, "model.hidden_size");
    m["num_attention_heads"] = bind_field(c.model.num_attention_heads, "model.num_attention_heads");
    m["num_query_groups"] = bind_field(c.model.num_query_groups, "model.num_query_groups");
    m["ffn_hidden_size"] = bind_field(c.model.ffn_hidden_size, "model.ffn_hidden_size");
    m["vocab_size"] = bind_field(c.model.vocab_size, "model.vocab_size");
    m["seq_length"] = bind_field(c.model.seq_length, "model.seq_length");
    m["norm_epsilon"] = bind_field(c.model.norm_epsilon, "model.norm_epsilon");
    m["rotary_base"] = bind_field(c.model.rotary_base, "model.rotary_base");
    m["tie_embeddings"] = bind_field(c.model.tie_embeddings, "model.tie_embeddings");
    m["init_method_std"] = bind_field(c.model.init_method_std, "model.init_method_std");
    m["recompute"] = bind_field(c.model.recompute, "model.recompute");
    m["moe_expert_capacity_factor"] = bind_field(c.model.moe_expert_capacity_factor, "model.moe_expert_capacity_factor");
    m["moe_token_drop_policy"] = bind_field(c.model.moe_token_drop_policy, "model.moe_token_drop_policy");
    m["mtp_num_layers"] = bind_field(c.model.mtp_num_layers, "model.mtp_num_layers");
    m["mtp_loss_scaling_factor"] = bind_field(c.model.mtp_loss_scaling_factor, "model.mtp_loss_scaling_factor");
    m["multi_latent_attention"] = bind_field(c.model.multi_latent_attention, "model.multi_latent_attention");
    m["q_lora_rank"] = bind_field(c.model.q_lora_rank, "model.q_lora_rank");
    m["kv_lora_rank"] = bind_field(c.model.kv_lora_rank, "model.kv_lora_rank");
    m["qk_head_dim"] = bind_field(c.model.qk_head_dim, "model.qk_head_dim");
    m["qk_pos_emb_head_dim"] = bind_field(c.model.qk_pos_emb_head_dim, "model.qk_pos_emb_head_dim");
    m["v_head_dim"] = bind_field(c.model.v_head_dim, "model.v_head_dim");
    m["num_experts"] = bind_field(c.model.num_experts, "model.num_experts");
    m["moe_router_topk"] = bind_field(c.model.moe_router_topk, "model.moe_router_topk");
    m["moe_ffn_hidden_size"] = bind_field(c.model.moe_ffn_hidden_size, "model.moe_ffn_hidden_size");
    m["moe_shared_expert_intermediate_size"] = bind_field(c.model.moe_shared_expert_intermediate_size, "model.moe_shared_expert_intermediate_size");
    m["moe_first_dense_layers"] = bind_field(c.model.moe_first_dense_layers, "model.moe_first_dense_layers");
    m["moe_router_score_function"] = bind_field(c.model.moe_router_score_function, "model.moe_router_score_function");
    m["moe_router_norm_topk_prob"] = bind_field(c.model.moe_router_norm_topk_prob, "model.moe_router_norm_topk_prob");
    m["moe_router_topk_scaling_factor"] = bind_field(c.model.moe_router_topk_scaling_factor, "model.moe_router_topk_scaling_factor");
    m["moe_router_num_groups"] = bind_field(c.model.moe_router_num_groups, "model.moe_router_num_groups");
    m["moe_router_group_topk"] = bind_field(c.model.moe_router_group_topk, "model.moe_router_group_topk");
    m["moe_router_enable_expert_bias"] = bind_field(c.model.moe_router_enable_expert_bias, "model.moe_router_enable_expert_bias");
    m["moe_router_bias_update_rate"] = bind_field(c.model.moe_router_bias_update_rate, "model.moe_router_bias_update_rate");
    m["moe_router_load_balancing_type"] = bind_field(c.model.moe_router_load_balancing_type, "model.moe_router_load_balancing_type");
    m["moe_aux_loss_coeff"] = bind_field(c.model.moe_aux_loss_coeff, "model.moe_aux_loss_coeff");
    m["moe_z_loss_coeff"] = bind_field(c.model.moe_z_loss_coeff, "model.moe_z_loss_coeff");

    auto& t = sections["train"];
    t["train_iters"] = bind_field(c.train.train_iters, "train.train_iters");
    t["micro_batch_size"] = bind_field(c.train.micro_batch_size, "train.micro_batch_size");
    t["global_batch_size"] = bind_field(c.train.global_batch_size, "train.global_batch_size");
    t["lr"] = bind_field(c.train.lr, "train.lr");
    t["min_lr"] = bind_field(c.train.min_lr, "train.min_lr");
    t["lr_warmup_iters"] = bind_field(c.train.lr_warmup_iters, "train.lr_warmup_iters");
    t["lr_decay_style"] = bind_field(c.train.lr_decay_style, "train.lr_decay_style");
    t["lr_wsd_decay_iters"] = bind_field(c.train.lr_wsd_decay_iters, "train.lr_wsd_decay_iters");
    t["weight_decay"] = bind_field(c.train.weight_decay, "train.weight_decay");
    t["clip_grad"] = bind_field(c.train.clip_grad, "train.clip_grad");
    t["adam_beta1"] = bind_field(c.train.adam_beta1, "train.adam_beta1");
    t["adam_beta2"] = bind_field(c.train.adam_beta2, "train.adam_beta2");
    t["adam_eps"] = bind_field(c.train.adam_eps, "train.adam_eps");
    t["seed"] = bind_field(c.train.seed, "train.seed");
    t["eval_interval"] = bind_field(c.train.eval_interval, "train.eval_interval");
    t["eval_iters"] = bind_field(c.train.eval_iters, "train.eval_iters");
    t["exit_interval"] = bind_field(c.train.exit_interval, "train.exit_interval");
    t["skip_train_iteration_range"] = bind_field(c.train.skip_train_iteration_range, "train.skip_train_iteration_range");

    auto& p = sections["parallel"];
    p["tensor_model_parallel_size"] = bind_field(c.parallel.tensor_model_parallel_size, "parallel.tensor_model_parallel_size");
    p["pipeline_model_parallel_size"] =
        bind_field(c.parallel.pipeline_model_parallel_size, "parallel.pipeline_model_parallel_size");
    p["virtual_pipeline_model_parallel_size"] =
        bind_field(c.parallel.virtual_pipeline_model_parallel_size, "parallel.virtual_pipeline_model_parallel_size");
    p["sequence_parallel"] = bind_field(c.parallel.sequence_parallel, "parallel.sequence_parallel");
    p["context_parallel_size"] = bind_field(c.parallel.context_parallel_size, "parallel.context_parallel_size");
    p["expert_model_parallel_size"] = bind_field(c.parallel.expert_model_parallel_size, "parallel.expert_model_parallel_size");
    p["expert_tensor_parallel_size"] =
        bind_field(c.parallel.expert_tensor_parallel_size, "parallel.expert_tensor_parallel_size");
    p["use_distributed_optimizer"] = bind_field(c.parallel.use_distributed_optimizer, "parallel.use_distributed_optimizer");
    p["pipeline_schedule"] = bind_field(c.parallel.pipeline_schedule, "parallel.pipeline_schedule");
    p["pipeline_layers_per_stage"] =
        bind_field(c.parallel.pipeline_layers_per_stage, "parallel.pipeline_layers_per_stage");
    p["ddp_bucket_size"] = bind_field(c.parallel.ddp_bucket_size, "parallel.ddp_bucket_size");
    p["overlap_grad_reduce"] = bind_field(c.parallel.overlap_grad_reduce, "parallel.overlap_grad_reduce");
    p["overlap_param_gather"] = bind_field(c.parallel.overlap_param_gather, "parallel.overlap_param_gather");
    p["overlap_p2p_comm"] = bind_field(c.parallel.overlap_p2p_comm, "parallel.overlap_p2p_comm");
    p["overlap_moe_expert_parallel_comm"] =
        bind_field(c.parallel.overlap_moe_expert_parallel_comm, "parallel.overlap_moe_expert_parallel_comm");
    p["auto"] = bind_field(c.parallel.auto_layout, "parallel.auto");
    p["auto_hardware"] = bind_field(c.parallel.auto_hardware, "parallel.auto_hardware");

    auto& pr = sections["precision"];
    pr["compute"] = bind_field(c.precision.compute, "precision.compute");
    pr["fp32_embedding"] = bind_field(c.precision.fp32_embedding, "precision.fp32_embedding");
    pr["fp8.recipe"] = bind_field(c.precision.fp8_recipe, "precision.fp8.recipe");
    pr["fp8.format"] = bind_field(c.precision.fp8_format, "precision.fp8.format");
    pr["fp8.amax_history_len"] = bind_field(c.precision.fp8_amax_history_len, "precision.fp8.amax_history_len");
    pr["fp8.amax_compute_algo"] = bind_field(c.precision.fp8_amax_compute_algo, "precision.fp8.amax_compute_algo");
    pr["fp8.margin"] = bind_field(c.precision.fp8_margin, "precision.fp8.margin");
    pr["fp8.power_of_2_scales"] = bind_field(c.precision.fp8_power_of_2_scales, "precision.fp8.power_of_2_scales");
    pr["fp8.first_last_layers_bf16"] =
        bind_field(c.precision.fp8_first_last_layers_bf16, "precision.fp8.first_last_layers_bf16");
    pr["fp8.num_layers_at_start_in_bf16"] =
        bind_field(c.precision.fp8_num_layers_at_start_in_bf16, "precision.fp8.num_layers_at_start_in_bf16");
    pr["fp8.num_layers_at_end_in_bf16"] =
        bind_field(c.precision.fp8_num_layers_at_end_in_bf16, "precision.fp8.num_layers_at_end_in_bf16");
    pr["fp8.fused_casts"] = bind_field(c.precision.fp8_fused_casts, "precision.fp8.fused_casts");

    auto& d = sections["data"];
    d["path"] = bind_field(c.data.path, "data.path");
    d["tokenizer"] = bind_field(c.data.tokenizer, "data.tokenizer");
    d["split"] = bind_field(c.data.split, "data.split");

    auto& ck = sections["checkpoint"];
    ck["dir"] = bind_field(c.checkpoint.dir, "checkpoint.dir");
    ck["interval"] = bind_field(c.checkpoint.interval, "checkpoint.interval");
    ck["keep"] = bind_field(c.checkpoint.keep, "checkpoint.keep");
    ck["distributed"] = bind_field(c.checkpoint.distributed, "checkpoint.distributed");
    ck["async_save"] = bind_field(c.checkpoint.async_save, "checkpoint.async_save");

    auto& l = sections["log"];
    l["dir"] = bind_field(c.log.dir, "log.dir");
    l["interval"] = bind_field(c.log.interval, "log.interval");
    l["pipeline_trace"] = bind_field(c.log.pipeline_trace, "log.pipeline_trace");

    auto& rs = sections["resilience"];
    rs["detect_nonfinite"] = bind_field(c.resilience.detect_nonfinite, "resilience.detect_nonfinite");
    rs["loss_spike_zscore"] = bind_field(c.resilience.loss_spike_zscore, "resilience.loss_spike_zscore");
    rs["grad_norm_spike_zscore"] = bind_field(c.resilience.grad_norm_spike_zscore, "resilience.grad_norm_spike_zscore");
    rs["spike_window"] = bind_field(c.resilience.spike_window, "resilience.spike_window");
    rs["snapshot_interval"] = bind_field(c.resilience.snapshot_interval, "resilience.snapshot_interval");
    rs["rewind_lr_scale"] = bind_field(c.resilience.rewind_lr_scale, "resilience.rewind_lr_scale");
    rs["max_rewinds"] = bind_field(c.resilience.max_rewinds, "resilience.max_rewinds");
    rs["rewind_window"] = bind_field(c.resilience.rewind_window, "resilience.rewind_window");
    rs["collective_timeout_s"] = bind_field(c.resilience.collective_timeout_s, "resilience.collective_timeout_s");
    rs["inject"] = bind_field(c.resilience.inject, "resilience.inject");
  }

  static std::string allowed(const std::map<std::string, Section>& s) {
    std::string out;
    for (const auto& [k, v] : s) out += (out.empty() ? "" : ", ") + k;
    return out;
  }
  static std::string allowed(const Section& s) {
    std::string out;
    for (const auto& [k, v] : s) out += (out.empty() ? "" : ", ") + k;
    return out;
  }

  Field& field(const std::string& section, const std::string& key, const std::string& origin) {
    auto s = sections.find(section);
    TESSEL_CHECK(s != sections.end(), "{}: unknown config section '{}' (allowed: {})", origin, section,
                 allowed(sections));
    auto f = s->second.find(key);
    TESSEL_CHECK(f != s->second.end(), "{}: unknown key '{}.{}' (allowed in '{}': {})", origin, section, key, section,
                 s->second.empty() ? std::string("none yet") : allowed(s->second));
    return f->second;
  }

  // Whether some key of `section` lies under `prefix` ("fp8." in precision): a nested map is read there.
  bool has_keys_under(const std::string& section, const std::string& prefix) const {
    const auto& keys = sections.at(section);
    const auto it = keys.lower_bound(prefix);
    return it != keys.end() && it->first.compare(0, prefix.size(), prefix) == 0;
  }

  // Reads a section's map; nested maps (precision.fp8) flatten to dotted keys. `seen` holds the
  // section's dotted keys read so far: "fp8: {recipe: x}" and "fp8.recipe: y" are the same key.
  void read_map(const std::string& section, const std::string& prefix, const YAML::Node& node,
                const std::string& origin, KeyLines& seen) {
    TESSEL_CHECK(node.IsMap(), "{}: '{}.{}' must be a mapping of keys", origin, section, prefix);
    for (const auto& kv : node) {
      TESSEL_CHECK(kv.first.IsScalar(), "{}: line {}: a key in section '{}' is not a plain name", origin,
                   kv.first.Mark().line + 1, section);
      const std::string key = prefix + kv.first.Scalar();
      seen.add(section + "." + key, kv.first);
      if (kv.second.IsMap() && has_keys_under(section, key + ".")) {
        read_map(section, key + ".", kv.second, origin, seen);
        continue;
      }
      Field& f = field(section, key, origin);  // throws naming an unknown key
      TESSEL_CHECK(kv.second.IsScalar(), "{}: '{}.{}' must be a single value", origin, section, key);
      f.read(kv.second);
    }
  }
};

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The config a parsed document and overrides describe, validated.
Config build_config(const YAML::Node& root, const std::vector<std::string>& overrides, const std::string& origin) {
  Config c;
  Schema schema(c);
  if (root && !root.IsNull()) {
    TESSEL_CHECK(root.IsMap(), "{}: the top level must be a mapping of sections (model, train, ...)", origin);
    KeyLines sections(origin), keys(origin);
    for (const auto& sec : root) {
      TESSEL_CHECK(sec.first.IsScalar(), "{}: line {}: a section name must be a plain name", origin,
                   sec.first.Mark().line + 1);
      const std::string name = sec.first.Scalar();
      TESSEL_CHECK(schema.sections.count(name), "{}: unknown config section '{}' (allowed: {})", origin, name,
                   Schema::allowed(schema.sections));
      sections.add(name, sec.first);
      if (!sec.second.IsNull()) schema.read_map(name, "", sec.second, origin, keys);
    }
  }
  for (const auto& ov : overrides) {
    const auto eq = ov.find('=');
    const auto dot = ov.find('.');
    TESSEL_CHECK(eq != std::string::npos && dot != std::string::npos && dot < eq,
                 "--set '{}': expected section.key=value (e.g. train.lr=1e-4)", ov);
    const std::string section = trim(ov.substr(0, dot)), key = trim(ov.substr(dot + 1, eq - dot - 1));
    const YAML::Node value = parse_config_yaml(ov.substr(eq + 1), "--set " + section + "." + key);
    TESSEL_CHECK(value.IsScalar(), "--set '{}': the value must be a single scalar", ov);
    schema.field(section, key, "--set").read(value);
  }
  c.model.compute = c.precision.compute == "bf16" ? DType::bf16 : DType::f32;
  c.model.fp32_embedding = c.precision.fp32_embedding;
  c.model.sequence_parallel = c.parallel.sequence_parallel;
  c.model.expert_tensor_parallel =
      c.parallel.tensor_model_parallel_size > 1 && c.parallel.expert_tensor_parallel_size != 1;
  c.model.fp8 = c.precision.fp8_recipe_parsed();
  c.validate();
  return c;
}

}  // namespace

Config Config::from_yaml_text(const std::string& yaml, const std::vector<std::string>& overrides,
                              const std::string& origin) {
  return build_config(parse_config_yaml(yaml, origin), overrides, origin);
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return build_config(YAML::Node(), overrides, "<defaults>");
  std::ifstream in(path);
  TESSEL_CHECK(!is_directory_path(path), "config file '{}' is a directory, not a YAML file", path);
  TESSEL_CHECK(in.good(), "cannot read config file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const YAML::Node root = parse_config_yaml(ss.str(), path);
  // Without a model section a run would train the built-in 2-layer toy model into runs/latest.
  TESSEL_CHECK(root && !root.IsNull(), "config file '{}' is empty (it needs at least a model section; see "
               "docs/configs.md)", path);
  TESSEL_CHECK(!root.IsMap() || (root["model"] && root["model"].IsMap() && root["model"].size() > 0),
               "config file '{}' has no model section (the built-in default is a 2-layer toy model; write the model "
               "you mean, see docs/configs.md)", path);
  return build_config(root, overrides, path);
}

nn::StagePlan Config::stage_plan(int pp_rank) const {
  const int pp = int(parallel.pipeline_model_parallel_size);
  if (pp == 1) return nn::whole_model_plan(model);
  const pipeline::Placement placement = pipeline::placement_of(parallel.pipeline_schedule);
  return nn::pipeline_plan(model, pp, parallel.chunks_per_rank(), pp_rank,
                           nn::parse_layer_list(parallel.pipeline_layers_per_stage, "parallel.pipeline_layers_per_stage"),
                           placement == pipeline::Placement::v_shape ? nn::ChunkOrder::v_shape
                           : placement == pipeline::Placement::dual  ? nn::ChunkOrder::dual
                                                                     : nn::ChunkOrder::interleaved);
}

int ParallelConfig::chunks_per_rank() const {
  return pipeline::chunks_per_rank(pipeline_schedule, int(virtual_pipeline_model_parallel_size));
}

void Config::validate() const {
  TESSEL_CHECK(precision.compute == "fp32" || precision.compute == "bf16",
               "precision.compute: '{}' is not supported (allowed: fp32, bf16)", precision.compute);
  const nn::Fp8Recipe fp8 = precision.fp8_recipe_parsed();  // throws naming the bad key
  if (fp8.enabled()) {
    TESSEL_CHECK(precision.fp8_num_layers_at_start_in_bf16 >= 0 && precision.fp8_num_layers_at_end_in_bf16 >= 0,
                 "precision.fp8.num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16 must be >= 0, got {} / {}",
                 precision.fp8_num_layers_at_start_in_bf16, precision.fp8_num_layers_at_end_in_bf16);
    // Every FP8 tensor keeps this many amaxes: 16x TransformerEngine's default of 1024.
    TESSEL_CHECK_RANGE("precision.fp8.amax_history_len", precision.fp8_amax_history_len, 1, 16384);
  }
  model.validate();
  // Ranks per dimension: bounded so that sizes stay within int and products within int64.
  constexpr int64_t kMaxRanks = int64_t(1) << 20;
  TESSEL_CHECK_RANGE("parallel.tensor_model_parallel_size", parallel.tensor_model_parallel_size, 1, kMaxRanks);
  TESSEL_CHECK_RANGE("parallel.pipeline_model_parallel_size", parallel.pipeline_model_parallel_size, 1, kMaxRanks);
  TESSEL_CHECK_RANGE("parallel.virtual_pipeline_model_parallel_size", parallel.virtual_pipeline_model_parallel_size,
                     1, kMaxRanks);
  TESSEL_CHECK_RANGE("parallel.context_parallel_size", parallel.context_parallel_size, 1, kMaxRanks);
  TESSEL_CHECK_RANGE("parallel.expert_model_parallel_size", parallel.expert_model_parallel_size, 1, kMaxRanks);
  const int64_t tp = parallel.tensor_model_parallel_size, etp = parallel.expert_tensor_parallel_size;
  TESSEL_CHECK(etp == 0 || etp == 1 || etp == tp,
               "parallel.expert_tensor_parallel_size {}: allowed 1 (experts replicated over tensor parallelism), "
               "tensor_model_parallel_size ({}: experts split like the MLP) or 0 (the same)", etp, tp);
  if (model.num_experts > 0 && tp > 1 && etp != 1) {
    TESSEL_CHECK(model.expert_ffn() % tp == 0 && model.moe_shared_expert_intermediate_size % tp == 0,
                 "experts split over tensor_model_parallel_size {}: model.moe_ffn_hidden_size ({}) and "
                 "moe_shared_expert_intermediate_size ({}) must divide by it (or set "
                 "parallel.expert_tensor_parallel_size=1 to replicate the experts)", tp, model.expert_ffn(),
                 model.moe_shared_expert_intermediate_size);
  }
  if (parallel.expert_model_parallel_size > 1) {
    TESSEL_CHECK(model.num_experts > 0 && model.num_experts % parallel.expert_model_parallel_size == 0,
                 "parallel.expert_model_parallel_size {} needs Mixture-of-Experts layers whose model.num_experts ({}) "
                 "it divides", parallel.expert_model_parallel_size, model.num_experts);
  }
  TESSEL_CHECK(pipeline::is_schedule_kind(parallel.pipeline_schedule),
               "parallel.pipeline_schedule: '{}' is not supported (allowed: {}; with "
               "virtual_pipeline_model_parallel_size > 1 1f1b runs interleaved)", parallel.pipeline_schedule,
               pipeline::schedule_kinds_text());
  TESSEL_CHECK(parallel.pipeline_schedule != "dualpipe" || parallel.pipeline_model_parallel_size % 2 == 0 ||
                   parallel.pipeline_model_parallel_size == 1,
               "parallel.pipeline_schedule dualpipe needs an even pipeline_model_parallel_size, got {} (dualpipev "
               "runs on any)", parallel.pipeline_model_parallel_size);
  const bool fixed_chunks = parallel.pipeline_schedule != "1f1b" && parallel.pipeline_schedule != "interleaved";
  TESSEL_CHECK(!fixed_chunks || parallel.virtual_pipeline_model_parallel_size == 1,
               "parallel.pipeline_schedule {} sets its own chunks per rank ({}); "
               "virtual_pipeline_model_parallel_size {} is for 1f1b / interleaved", parallel.pipeline_schedule,
               pipeline::chunks_per_rank(parallel.pipeline_schedule, 1), parallel.virtual_pipeline_model_parallel_size);
  TESSEL_CHECK(parallel.virtual_pipeline_model_parallel_size == 1 || parallel.pipeline_model_parallel_size > 1,
               "parallel.virtual_pipeline_model_parallel_size {} needs pipeline_model_parallel_size > 1",
               parallel.virtual_pipeline_model_parallel_size);
  if (parallel.pipeline_model_parallel_size > 1) {
    const auto explicit_layers =
        nn::parse_layer_list(parallel.pipeline_layers_per_stage, "parallel.pipeline_layers_per_stage");
    const int pp = int(parallel.pipeline_model_parallel_size);
    nn::layers_per_virtual_stage(model, pp, pipeline::stages_of(parallel.pipeline_schedule, pp,
                                                                int(parallel.virtual_pipeline_model_parallel_size)) / pp,
                                 explicit_layers);
  } else {
    TESSEL_CHECK(parallel.pipeline_layers_per_stage.empty(),
                 "parallel.pipeline_layers_per_stage is set but pipeline_model_parallel_size is 1");
  }
  TESSEL_CHECK(!parallel.sequence_parallel || parallel.tensor_model_parallel_size > 1,
               "parallel.sequence_parallel needs tensor_model_parallel_size > 1 (it splits the tensor-parallel "
               "region's sequence)");
  // Only context parallelism cuts sequences (into 2 x cp load-balanced chunks); without it any length runs.
  TESSEL_CHECK(parallel.context_parallel_size == 1 || model.seq_length % (2 * parallel.context_parallel_size) == 0,
               "model.seq_length {} must be divisible by 2 x parallel.context_parallel_size = {} (each rank holds two "
               "load-balanced chunks of every sequence)", model.seq_length, 2 * parallel.context_parallel_size);
  // Sequence parallelism splits a micro-batch's tokens on this rank over the tensor-parallel ranks:
  // checked here, not at the first forward (nn/sequence_parallel.cpp).
  if (parallel.sequence_parallel && parallel.tensor_model_parallel_size > 1 && parallel.context_parallel_size > 0 &&
      train.micro_batch_size > 0) {
    const int64_t tokens = train.micro_batch_size * (model.seq_length / parallel.context_parallel_size);
    TESSEL_CHECK(tokens % parallel.tensor_model_parallel_size == 0,
                 "parallel.sequence_parallel: {} tokens per micro-batch and rank (train.micro_batch_size x "
                 "model.seq_length / context_parallel_size) do not split over tensor_model_parallel_size {}",
                 tokens, parallel.tensor_model_parallel_size);
  }
  TESSEL_CHECK(parallel.ddp_bucket_size > 0, "parallel.ddp_bucket_size must be > 0, got {}", parallel.ddp_bucket_size);
  TESSEL_CHECK_MIN("train.train_iters", train.train_iters, 0);
  TESSEL_CHECK(train.micro_batch_size > 0, "train.micro_batch_size must be > 0, got {}", train.micro_batch_size);
  TESSEL_CHECK(train.global_batch_size > 0 && train.global_batch_size % train.micro_batch_size == 0,
               "train.global_batch_size ({}) must be a positive multiple of train.micro_batch_size ({})",
               train.global_batch_size, train.micro_batch_size);
  TESSEL_CHECK_MIN("train.lr", train.lr, 0.0);
  TESSEL_CHECK(train.adam_beta1 >= 0 && train.adam_beta1 < 1 && train.adam_beta2 >= 0 && train.adam_beta2 < 1,
               "train.adam_beta1/adam_beta2 must be in [0, 1), got {} / {}", train.adam_beta1, train.adam_beta2);
  TESSEL_CHECK(train.adam_eps > 0, "train.adam_eps must be > 0, got {}", train.adam_eps);
  TESSEL_CHECK_MIN("train.weight_decay", train.weight_decay, 0.0);
  TESSEL_CHECK(train.clip_grad >= 0, "train.clip_grad must be >= 0 (0: no clipping), got {}", train.clip_grad);
  TESSEL_CHECK_MIN("train.lr_warmup_iters", train.lr_warmup_iters, 0);
  TESSEL_CHECK_MIN("train.lr_wsd_decay_iters", train.lr_wsd_decay_iters, 0);
  optim::LrSchedule sched;
  sched.lr = train.lr;
  sched.min_lr = train.min_lr;
  sched.warmup_iters = train.lr_warmup_iters;
  sched.wsd_decay_iters = train.lr_wsd_decay_iters;
  // A warm-up longer than the run is allowed, as in Megatron-LM: the rate stays in warm-up (warnings()).
  sched.total_iters = std::max(train.train_iters, train.lr_warmup_iters);
  sched.style = train.lr_decay_style;
  sched.validate();
  TESSEL_CHECK_MIN("train.eval_interval", train.eval_interval, 0);
  TESSEL_CHECK(train.eval_interval == 0 || train.eval_iters >= 1,
               "train.eval_iters must be >= 1 when train.eval_interval is set ({}), got {}", train.eval_interval,
               train.eval_iters);
  TESSEL_CHECK_MIN("train.eval_iters", train.eval_iters, 0);
  TESSEL_CHECK(log.interval > 0, "log.interval must be > 0, got {}", log.interval);
  TESSEL_CHECK(train.exit_interval >= 0, "train.exit_interval must be >= 0, got {}", train.exit_interval);
  (void)train.skipped_iterations();  // throws on a malformed range
  TESSEL_CHECK(checkpoint.interval >= 0, "checkpoint.interval must be >= 0, got {}", checkpoint.interval);
  TESSEL_CHECK(checkpoint.keep > 0, "checkpoint.keep must be > 0, got {}", checkpoint.keep);
  const auto& rs = resilience;
  TESSEL_CHECK(rs.loss_spike_zscore >= 0 && rs.grad_norm_spike_zscore >= 0,
               "resilience.loss_spike_zscore and resilience.grad_norm_spike_zscore must be >= 0 (0: off), got {} and {}",
               rs.loss_spike_zscore, rs.grad_norm_spike_zscore);
  TESSEL_CHECK(rs.spike_window >= 2, "resilience.spike_window must be >= 2 steps, got {}", rs.spike_window);
  TESSEL_CHECK_MIN("resilience.snapshot_interval", rs.snapshot_interval, 0);
  TESSEL_CHECK(rs.rewind_lr_scale > 0 && rs.rewind_lr_scale <= 1, "resilience.rewind_lr_scale must be in (0, 1], got {}",
               rs.rewind_lr_scale);
  TESSEL_CHECK_MIN("resilience.max_rewinds", rs.max_rewinds, 0);
  TESSEL_CHECK(rs.rewind_window >= 1, "resilience.rewind_window must be >= 1 step, got {}", rs.rewind_window);
  TESSEL_CHECK(rs.collective_timeout_s == 0 || rs.collective_timeout_s >= 1,
               "resilience.collective_timeout_s must be 0 (no timeout) or >= 1 second, got {}", rs.collective_timeout_s);
  TESSEL_CHECK(data.tokenizer.empty() || !is_directory_path(data.tokenizer),
               "data.tokenizer '{}' is a directory; it should be a SentencePiece .model file (train-tokenizer "
               "writes PREFIX.model)", data.tokenizer);
}

bool Config::fuses_moe_pairs() const {
  return parallel.overlap_moe_expert_parallel_comm && parallel.expert_model_parallel_size > 1 &&
         model.num_experts > 0 && (parallel.pipeline_schedule == "dualpipe" || parallel.pipeline_schedule == "dualpipev");
}

std::vector<std::string> Config::warnings() const {
  std::vector<std::string> out;
  if (train.lr_warmup_iters > train.train_iters)
    out.push_back(fmt::format("train.lr_warmup_iters ({}) is longer than train.train_iters ({}): the learning rate "
                              "stays in warm-up and never reaches train.lr ({})",
                              train.lr_warmup_iters, train.train_iters, train.lr));
  // Settings that do nothing in this run (found by probing, 2026-12-04): each said once at start.
  if (checkpoint.dir.empty()) {
    const CheckpointConfig defaults;
    if (checkpoint.interval != defaults.interval)
      out.push_back(fmt::format("checkpoint.interval ({}) has no effect without checkpoint.dir: nothing is saved",
                                checkpoint.interval));
    if (checkpoint.async_save != defaults.async_save || checkpoint.distributed != defaults.distributed)
      out.push_back("checkpoint.async_save / checkpoint.distributed have no effect without checkpoint.dir: nothing "
                    "is saved");
    if (train.exit_interval > 0)
      out.push_back(fmt::format("train.exit_interval ({}) stops the run without checkpoint.dir: nothing is saved, so "
                                "it cannot resume where it stopped",
                                train.exit_interval));
  }
  if (!precision.fp32_embedding && precision.compute == "fp32")
    out.push_back("precision.fp32_embedding=false has no effect with precision.compute=fp32: the embedding is "
                  "looked up in fp32 either way");
  const nn::Fp8Recipe fp8 = precision.fp8_recipe_parsed();
  if (fp8.enabled() && fp8.bf16_layers_at_start + fp8.bf16_layers_at_end >= model.num_layers)
    out.push_back(fmt::format("precision.fp8.recipe={}: num_layers_at_start_in_bf16 ({}) + num_layers_at_end_in_bf16 "
                              "({}) cover all {} layers (precision.fp8.first_last_layers_bf16): no layer computes in FP8",
                              precision.fp8_recipe, fp8.bf16_layers_at_start, fp8.bf16_layers_at_end,
                              model.num_layers));
  if (train.lr == 0 && train.train_iters > 0)
    out.push_back("train.lr is 0: the weights do not change");
  if (train.eval_interval == 0 && train.eval_iters > 0)
    out.push_back(fmt::format("train.eval_iters ({}) has no effect with train.eval_interval 0: nothing is evaluated",
                              train.eval_iters));
  if ((resilience.loss_spike_zscore > 0 || resilience.grad_norm_spike_zscore > 0) &&
      resilience.spike_window >= train.train_iters && train.train_iters > 0)
    out.push_back(fmt::format("resilience.spike_window ({}) is not shorter than train.train_iters ({}): the spike "
                              "detectors never fill their window and never fire",
                              resilience.spike_window, train.train_iters));
  if (data.path.rfind("synthetic", 0) != 0) {
    data::DataBlend blend;
    try {
      blend = data::parse_data_path(data.path);
    } catch (const Error&) {
      // A malformed data.path is refused, with its reason, when the data is opened.
    }
    for (const auto& r : data::repeated_prefixes(blend)) {
      double weight = 0;
      std::vector<std::string> weights;
      for (size_t k : r.parts) {
        weight += blend.weights[k];
        weights.push_back(fmt::format("{}", blend.weights[k]));
      }
      out.push_back(fmt::format("data.path names the dataset '{}' {} times (weights {}): each part shuffles the same "
                                "documents on its own, so a sample can come again before one pass over the dataset "
                                "is through; name it once with weight {}",
                                r.prefix, r.parts.size(), fmt::join(weights, ", "), weight));
    }
  }
  if (parallel.overlap_moe_expert_parallel_comm && !fuses_moe_pairs())
    out.push_back("parallel.overlap_moe_expert_parallel_comm has no effect here: it overlaps the expert all-to-alls "
                  "inside the F&B pairs of parallel.pipeline_schedule dualpipe or dualpipev, with "
                  "parallel.expert_model_parallel_size > 1 and model.num_experts > 0");
  if (train.lr_decay_style == "wsd") {
    const int64_t stable = std::max(train.train_iters, train.lr_warmup_iters) - train.lr_warmup_iters;
    if (train.lr_wsd_decay_iters == 0)
      out.push_back("train.lr_decay_style=wsd with train.lr_wsd_decay_iters 0: the learning rate never decays");
    else if (stable > 0 && train.lr_wsd_decay_iters > stable)  // else the warm-up warning says it
      out.push_back(fmt::format("train.lr_wsd_decay_iters ({}) is longer than the {} steps after warm-up: the decay "
                                "starts before warm-up ends",
                                train.lr_wsd_decay_iters, stable));
  }
  return out;
}

std::string Config::to_yaml() const {
  Config copy = *this;
  Schema schema(copy);
  YAML::Emitter e;
  e << YAML::BeginMap;
  for (const auto& [section, fields] : schema.sections) {
    if (fields.empty()) continue;
    e << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const auto& [key, f] : fields) {
      // Injected faults belong to one invocation, not to the run: a config written next to the run or
      // into a checkpoint must not inject them again when it is reused.
      if (section == "resilience" && key == "inject") continue;
      e << YAML::Key << key << YAML::Value;
      f.write(e);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

nn::Fp8Recipe PrecisionConfig::fp8_recipe_parsed() const {
  nn::Fp8Recipe r = nn::Fp8Recipe::parse(fp8_recipe, fp8_format, fp8_amax_history_len, fp8_amax_compute_algo,
                                         fp8_margin, fp8_power_of_2_scales);
  if (r.enabled() && fp8_first_last_layers_bf16) {
    r.bf16_layers_at_start = fp8_num_layers_at_start_in_bf16;
    r.bf16_layers_at_end = fp8_num_layers_at_end_in_bf16;
  }
  r.fused_casts = fp8_fused_casts;
  return r;
}

std::vector<std::pair<int64_t, int64_t>> TrainConfig::skipped_iterations() const {
  std::string text = skip_train_iteration_range;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (std::string item; in >> item;) {
    const size_t dash = item.find('-');
    const std::string a = item.substr(0, dash), b = dash == std::string::npos ? a : item.substr(dash + 1);
    const bool digits = !a.empty() && !b.empty() && a.find_first_not_of("0123456789") == std::string::npos &&
                        b.find_first_not_of("0123456789") == std::string::npos && a.size() < 18 && b.size() < 18;
    TESSEL_CHECK(digits, "train.skip_train_iteration_range: '{}' is not an iteration or a range A-B of iterations", item);
    const int64_t first = std::stoll(a), last = std::stoll(b);
    TESSEL_CHECK(first >= 1 && last >= first,
                 "train.skip_train_iteration_range: '{}' must be iterations >= 1, first <= last", item);
    out.emplace_back(first, last);
  }
  return out;
}

bool TrainConfig::skips_iteration(int64_t iteration) const {
  if (skip_train_iteration_range.empty()) return false;
  for (const auto& [first, last] : skipped_iterations())
    if (iteration >= first && iteration <= last) return true;
  return false;
}

void Config::check_batch_splits(int64_t data_parallel) const {
  TESSEL_CHECK(train.global_batch_size % (train.micro_batch_size * data_parallel) == 0,
               "train.global_batch_size {} must be a multiple of train.micro_batch_size {} x data-parallel size {}",
               train.global_batch_size, train.micro_batch_size, data_parallel);
}

}  // namespace tessel::train
