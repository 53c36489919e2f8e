// tessel eval --ckpt DIR --data PREFIX: the loss of a checkpoint on a dataset, as one JSON line
// {"loss": ..., "tokens": ..., "samples": ..., "step": ...}. Windows of seq_length + 1 tokens over the
// documents in index order (the first --max-samples of them), so the figure is reproducible anywhere.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_loading.h"
#include "option_checks.h"
#include "tessel/data/gpt_dataset.h"

namespace tessel::app {
namespace {

struct EvalOptions {
  std::string ckpt, data;
  int64_t max_samples = 0;
  int64_t batch = 8;
  std::vector<std::string> sets;
};

int run_eval(const EvalOptions& o) {
  for (const std::string& set : o.sets)
    TESSEL_CHECK(set.rfind("data.path=", 0) != 0,
                 "eval: --set {} is not used: the dataset evaluated is --data ({})", set, o.data);
  LoadedModel lm = load_model_from_checkpoint(o.ckpt, o.sets);
  const auto& m = lm.config.model;
  auto ds = std::make_shared<const data::IndexedDataset>(o.data);
  const int64_t mx = ds->max_token();
  TESSEL_CHECK(mx < m.vocab_size, "dataset '{}' holds token id {}, outside the checkpoint's model.vocab_size {}",
               o.data, mx, m.vocab_size);
  auto src = std::make_shared<const data::OrderedWindows>(ds, m.seq_length);
  int64_t samples = src->size();  // one pass in document order: every token predicted once
  TESSEL_CHECK(samples > 0, "dataset '{}' has fewer tokens than one window of seq_length + 1 = {}", o.data,
               m.seq_length + 1);
  if (o.max_samples > 0) samples = std::min(samples, o.max_samples);
  data::BatchLoader loader(src, m.seq_length);
  double loss = 0;
  int64_t tokens = 0;
  for (int64_t first = 0; first < samples; first += o.batch) {
    const auto b = loader.get(first, std::min(o.batch, samples - first));
    loss += lm.model->loss_sum(b.tokens, b.targets);
    tokens += b.targets.numel();
  }
  TESSEL_CHECK(std::isfinite(loss), "eval: the loss over {} tokens of '{}' is not finite ({}): checkpoint {} computes "
               "NaN or infinite logits (non-finite weights?)", tokens, o.data, loss, lm.checkpoint_dir);
  const nlohmann::json j = {{"loss", loss / double(tokens)}, {"tokens", tokens}, {"samples", samples},
                            {"step", lm.step}, {"checkpoint", lm.checkpoint_dir}, {"data", o.data}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

Action add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand("eval", "Loss of a checkpoint on an indexed dataset (one JSON line)");
  cmd->add_option("--ckpt", o->ckpt, "checkpoint.dir (its latest valid checkpoint) or one step_* directory")
      ->required();
  cmd->add_option("--data", o->data, "dataset prefix (PREFIX.bin / PREFIX.idx)")->required();
  cmd->add_option("--max-samples", o->max_samples, "evaluate at most this many windows (0: all)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  cmd->add_option("--batch", o->batch, "windows per forward pass")->capture_default_str()->check(integer_at_least(1));
  cmd->add_option("--set", o->sets, "override a key of the checkpoint's config, e.g. precision.compute=fp32");
  return [o] { return run_eval(*o); };
}

}  // namespace tessel::app
