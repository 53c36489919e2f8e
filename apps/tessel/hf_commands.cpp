// tessel export-hf / import-hf: Hugging Face directories (config.json + safetensors) to and from
// tessel checkpoints.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "model_loading.h"
#include "tessel/core/paths.h"
#include "tessel/core/device.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/data/tokenizer.h"

namespace tessel::app {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string ckpt, out;
};

// An output directory for export-hf / import-hf: a directory or nothing yet, never a file.
void check_out_dir(const std::string& command, const std::string& out) {
  TESSEL_CHECK(!out.empty(), "{}: --out is empty; give the directory to write", command);
  TESSEL_CHECK(!path_exists(out) || is_directory_path(out), "{}: --out '{}' exists and is not a directory", command,
               out);
}

int run_export(const ExportOptions& o) {
  check_out_dir("export-hf", o.out);
  LoadedModel lm = load_model_from_checkpoint(o.ckpt, {});
  // Writing into the step directory read would replace its model.safetensors (later loads then skip
  // it as altered); writing into a checkpoint.dir would mix Hugging Face files with its steps.
  TESSEL_CHECK(!path_is_or_is_under(o.out, lm.checkpoint_dir),
               "export-hf: --out '{}' is inside the checkpoint '{}' it reads; writing there would replace its files. "
               "Choose a directory outside it",
               o.out, lm.checkpoint_dir);
  TESSEL_CHECK(!path_is_or_is_under(o.out, o.ckpt),
               "export-hf: --out '{}' is inside --ckpt '{}'; choose a directory outside the checkpoints", o.out, o.ckpt);
  TESSEL_CHECK(ckpt::list_checkpoints(o.out).empty() && !path_exists((fs::path(o.out) / "metadata.json").string()),
               "export-hf: --out '{}' is or holds a tessel checkpoint; choose a directory without one", o.out);
  const std::string flavour = ckpt::export_hf(lm.config.model, lm.model->params(), o.out, lm.model->state_tensors());
  if (!lm.config.data.tokenizer.empty() && path_exists(lm.config.data.tokenizer))
    fs::copy_file(lm.config.data.tokenizer, fs::path(o.out) / "tokenizer.model", fs::copy_options::overwrite_existing);
  std::printf("exported %s (step %lld) to %s: config.json, model.safetensors (%s naming)\n", lm.checkpoint_dir.c_str(),
              (long long)lm.step, o.out.c_str(), flavour.c_str());
  return 0;
}

struct ImportOptions {
  std::string hf, out;
  std::vector<std::string> sets;
};

int run_import(const ImportOptions& o) {
  check_out_dir("import-hf", o.out);
  TESSEL_CHECK(ckpt::list_checkpoints(o.out).empty(),
               "import-hf: '{}' already holds checkpoints; choose an empty --out so nothing is overwritten", o.out);
  const ckpt::HfImport imp = ckpt::import_hf(o.hf);
  for (const auto& w : imp.warnings) std::fprintf(stderr, "warning: import-hf: %s\n", w.c_str());
  std::vector<std::string> sets = ckpt::model_overrides(imp.model);
  sets.insert(sets.end(), o.sets.begin(), o.sets.end());
  train::Config cfg = train::Config::from_yaml_text("", sets, o.hf + "/config.json");
  // The directory's SentencePiece model (export-hf writes one) is kept beside the checkpoint and
  // named as its data.tokenizer, so generate and eval find it without --tokenizer.
  const fs::path hf_tokenizer = fs::path(o.hf) / "tokenizer.model";
  if (cfg.data.tokenizer.empty() && is_regular_file_path(hf_tokenizer.string())) {
    // Only a SentencePiece model of this vocabulary (a Hugging Face directory may hold another kind).
    std::string unusable;
    try {
      data::check_model_vocab(data::Tokenizer(hf_tokenizer.string()), cfg.model.vocab_size);
    } catch (const Error& e) {
      unusable = e.what();
    }
    if (!unusable.empty()) {
      std::fprintf(stderr, "warning: import-hf: '%s' is not kept as the checkpoint's tokenizer: %s\n",
                   hf_tokenizer.c_str(), unusable.c_str());
    } else {
      std::error_code ec;
      fs::create_directories(o.out, ec);
      const fs::path kept = fs::absolute(fs::path(o.out) / "tokenizer.model", ec).lexically_normal();
      if (!ec && !(path_is_or_is_under(kept.string(), hf_tokenizer.string()) &&
                   path_is_or_is_under(hf_tokenizer.string(), kept.string())))  // --out is --hf: already there
        fs::copy_file(hf_tokenizer, kept, fs::copy_options::overwrite_existing, ec);
      TESSEL_CHECK(!ec, "import-hf: cannot copy '{}' into --out '{}': {}", hf_tokenizer.string(), o.out, ec.message());
      cfg.data.tokenizer = kept.string();  // absolute: generate and eval run from anywhere
    }
  }
  nn::Model model(cfg.model);
  auto& ps = model.params();
  for (const auto& w : ckpt::copy_into(imp, model))
    std::fprintf(stderr, "warning: import-hf: '%s': %s\n", o.hf.c_str(), w.c_str());
  optim::AdamW opt(ps, {});
  std::string where;
  {
    const DeviceAccessScope host_copy;  // the fresh moments, read on the host by the save
    where = ckpt::save_checkpoint(o.out, ps, ckpt::FullOptimizerState{opt.exp_avg_data(), opt.exp_avg_sq_data(), opt.steps_taken()},
                                  {0, 0, uint64_t(cfg.train.seed)}, cfg.to_yaml(), 1, nullptr, true, nullptr,
                                  model.state_tensors());
  }
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
  auto* cmd = app.add_subcommand(
      "import-hf", "Read a Hugging Face Llama, Mixtral, GPT-2 or DeepSeek-V3 directory into a tessel checkpoint");
  cmd->add_option("--hf", o->hf, "directory with config.json and model.safetensors (or a sharded index)")->required();
  cmd->add_option("--out", o->out, "checkpoint directory to create (use as checkpoint.dir)")->required();
  cmd->add_option("--set", o->sets, "override a config key of the imported model, e.g. model.seq_length=1024");
  return [o] { return run_import(*o); };
}

}  // namespace tessel::app
