#include "model_loading.h"

#include <cstdio>
#include <filesystem>

#include "tessel/core/paths.h"
#include "tessel/ckpt/checkpoint.h"

namespace tessel::app {

namespace fs = std::filesystem;

void load_first_valid_checkpoint(const std::string& ckpt, const std::function<void(const std::string&)>& load) {
  TESSEL_CHECK(is_directory_path(ckpt), "--ckpt '{}' is not a directory", ckpt);
  std::vector<std::string> dirs;
  if (path_exists((fs::path(ckpt) / "metadata.json").string())) {
    dirs.push_back(ckpt);
  } else {
    const auto names = ckpt::checkpoint_candidates(ckpt);
    TESSEL_CHECK(!names.empty(), "--ckpt '{}' holds no checkpoint (expected step_* directories or metadata.json)",
                 ckpt);
    for (const auto& n : names) dirs.push_back((fs::path(ckpt) / n).string());
  }
  std::string errors;
  for (const auto& d : dirs) {
    try {
      load(d);
      return;
    } catch (const Error& e) {
      if (dirs.size() == 1) throw;
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", d.c_str(), e.what());
      errors += std::string("\n  ") + e.what();
    }
  }
  TESSEL_FAIL("no loadable checkpoint in '{}':{}", ckpt, errors);
}

LoadedModel load_model_from_checkpoint(const std::string& ckpt, const std::vector<std::string>& overrides) {
  LoadedModel lm;
  load_first_valid_checkpoint(ckpt, [&](const std::string& d) {
    const ckpt::CheckpointMetadata md = ckpt::read_checkpoint_metadata(d);  // damaged: skipped
    LoadedModel candidate;
    candidate.config = train::Config::from_yaml_text(md.config, overrides, d + "/metadata.json");
    candidate.model = std::make_unique<nn::Model>(candidate.config.model);
    ckpt::NamedTensors state;  // the MoE expert biases steer routing; FP8 delayed scales
    candidate.step = ckpt::load_checkpoint(d, candidate.model->params(), nullptr, false, &state).step;
    for (const auto& name : candidate.model->load_state_tensors(state))
      std::fprintf(stderr, "warning: checkpoint %s has no %s: it starts afresh\n", d.c_str(), name.c_str());
    candidate.checkpoint_dir = d;
    lm = std::move(candidate);
  });
  return lm;
}

}  // namespace tessel::app
