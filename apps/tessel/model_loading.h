#pragma once
// Rebuilds the model a checkpoint was trained with (from the resolved config it stores) and loads it.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/nn/model.h"
#include "tessel/train/config.h"

namespace tessel::app {

struct LoadedModel {
  train::Config config;
  std::unique_ptr<nn::Model> model;
  int64_t step = 0;
  std::string checkpoint_dir;
};

// Calls load(dir) on the checkpoints of ckpt in loading order (ckpt itself when it is one step_*
// directory, else its step_* directories, `latest` first) until one returns without a tessel::Error;
// a failing one is skipped with a warning (a lone step directory's error is thrown as it is).
// Throws naming every error when none loads.
void load_first_valid_checkpoint(const std::string& ckpt, const std::function<void(const std::string&)>& load);

// ckpt: a checkpoint.dir (its newest valid checkpoint is used) or one step_* directory.
LoadedModel load_model_from_checkpoint(const std::string& ckpt, const std::vector<std::string>& overrides);

}  // namespace tessel::app
