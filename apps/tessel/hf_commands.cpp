// tessel export-hf / import-hf: Hugging Face directories (config.json + safetensors) to and from
// tessel checkpoints.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "model_loading.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"

namespace tessel::app {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string ckpt, out;
};

int run_export(const ExportOptions& o) {
  LoadedModel lm = load_model_from_checkpoint(o.ckpt, {});
  ckpt::export_hf(lm.config.model, lm.model->params(), o.out);
  if (!lm.config.data.tokenizer.empty() && fs::exists(lm.config.data.tokenizer))
    fs::copy_file(lm.config.data.tokenizer, fs::path(o.out) / "tokenizer.model", fs::copy_options::overwrite_existing);
  std::printf("exported %s (step %lld) to %s: config.json, model.safetensors (%s naming)\n", lm.checkpoint_dir.c_str(),
              (long long)lm.step, o.out.c_str(), lm.config.model.num_experts > 0 ? "Hugging Face Mixtral"
              : lm.config.model.is_llama()   ? "Hugging Face Llama"
                                             : "GPT-2");
  return 0;
}

struct ImportOptions {
  std::string hf, out;
  std::vector<std::string> sets;
};

int run_import(const ImportOptions& o) {
  TESSEL_CHECK(ckpt::list_checkpoints(o.out).empty(),
               "import-hf: '{}' already holds checkpoints; choose an empty --out so nothing is overwritten", o.out);
  const ckpt::HfImport imp = ckpt::import_hf(o.hf);
  const auto& m = imp.model;
  std::vector<std::string> sets = {
      "model.arch=" + m.arch,
      "model.num_layers=" + std::to_string(m.num_layers),
      "model.hidden_size=" + std::to_string(m.hidden_size),
      "model.num_attention_heads=" + std::to_string(m.num_attention_heads),
      "model.num_query_groups=" + std::to_string(m.num_query_groups),
      "model.ffn_hidden_size=" + std::to_string(m.ffn_hidden_size),
      "model.vocab_size=" + std::to_string(m.vocab_size),
      "model.seq_length=" + std::to_string(m.seq_length),
      "model.norm_epsilon=" + fmt::format("{}", m.norm_epsilon),
      "model.rotary_base=" + fmt::format("{}", m.rotary_base),
      std::string("model.tie_embeddings=") + (m.tie_embeddings ? "true" : "false"),
  };
  if (m.num_experts > 0)  // Mixtral
    sets.insert(sets.end(), {"model.num_experts=" + std::to_string(m.num_experts),
                             "model.moe_router_topk=" + std::to_string(m.moe_router_topk),
                             "model.moe_ffn_hidden_size=" + std::to_string(m.moe_ffn_hidden_size),
                             "model.moe_router_load_balancing_type=" + m.moe_router_load_balancing_type,
                             "model.moe_aux_loss_coeff=" + fmt::format("{}", m.moe_aux_loss_coeff)});
  sets.insert(sets.end(), o.sets.begin(), o.sets.end());
  const train::Config cfg = train::Config::from_yaml_text("", sets, o.hf + "/config.json");
  nn::Model model(cfg.model);
  auto& ps = model.params();
  TESSEL_CHECK(imp.tensors.size() == ps.specs().size(), "import-hf: '{}' holds {} tensors, a {} model of this shape has {}",
               o.hf, imp.tensors.size(), cfg.model.arch, ps.specs().size());
  for (const auto& [name, t] : imp.tensors) {
    const auto& spec = ps.spec(name);
    TESSEL_CHECK(t.shape() == spec.shape, "import-hf: '{}' is {} in '{}', the config implies {}", name, t.str(), o.hf,
                 shape_str(spec.shape));
    ps.param(name).copy_from(t);
  }
  ps.refresh_compute_copy();
  optim::AdamW opt(ps, {});
  const std::string where = ckpt::save_checkpoint(o.out, ps, opt, {0, 0, uint64_t(cfg.train.seed)}, cfg.to_yaml(), 1);
  std::printf("imported %s (%s, %.2fM parameters) into %s\n", o.hf.c_str(), cfg.model.arch.c_str(),
              double(ps.numel()) / 1e6, where.c_str());
  return 0;
}

}  // namespace

Action add_export_hf_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export-hf", "Write a checkpoint as a Hugging Face directory (config.json + safetensors)");
  cmd->add_option("--ckpt", o->ckpt, "checkpoint.dir or one step_* directory")->required();
  cmd->add_option("--out", o->out, "output directory")->required();
  return [o] { return run_export(*o); };
}

Action add_import_hf_command(CLI::App& app) {
  auto o = std::make_shared<ImportOptions>();
  auto* cmd = app.add_subcommand("import-hf", "Read a Hugging Face Llama or GPT-2 directory into a tessel checkpoint");
  cmd->add_option("--hf", o->hf, "directory with config.json and model.safetensors (or a sharded index)")->required();
  cmd->add_option("--out", o->out, "checkpoint directory to create (use as checkpoint.dir)")->required();
  cmd->add_option("--set", o->sets, "override a config key of the imported model, e.g. model.seq_length=1024");
  return [o] { return run_import(*o); };
}

}  // namespace tessel::app
