#pragma once
// Rebuilds the model a checkpoint was trained with (from the resolved config it stores) and loads it.
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

// ckpt: a checkpoint.dir (its newest valid checkpoint is used) or one step_* directory.
LoadedModel load_model_from_checkpoint(const std::string& ckpt, const std::vector<std::string>& overrides);

}  // namespace tessel::app
