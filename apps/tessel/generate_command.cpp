// tessel generate --ckpt DIR --prompt TEXT: continues a prompt with a KV cache (greedy, or sampled
// with temperature / top-k / top-p and a seed).
#include <cstdio>

#include "commands.h"
#include "option_checks.h"
#include "model_loading.h"
#include "tessel/core/device.h"
#include "tessel/data/tokenizer.h"
#include "tessel/infer/sampler.h"

namespace tessel::app {
namespace {

struct GenerateOptions {
  std::string ckpt, prompt, tokenizer;
  int64_t max_new_tokens = 64;
  infer::SamplingOptions sampling;
  std::vector<std::string> sets;
};

int run_generate(const GenerateOptions& o) {
  o.sampling.validate();
  TESSEL_CHECK(o.max_new_tokens > 0, "--max-new-tokens must be > 0, got {}", o.max_new_tokens);
  LoadedModel lm = load_model_from_checkpoint(o.ckpt, o.sets);
  const std::string tok_path = o.tokenizer.empty() ? lm.config.data.tokenizer : o.tokenizer;
  TESSEL_CHECK(!tok_path.empty(), "the checkpoint's config names no data.tokenizer: pass --tokenizer MODEL");
  const data::Tokenizer tok(tok_path);
  data::check_model_vocab(tok, lm.config.model.vocab_size);
  const int64_t T = lm.config.model.seq_length;
  std::vector<int64_t> ids = tok.encode(o.prompt);
  TESSEL_CHECK(!ids.empty(), "the prompt encodes to no tokens");
  TESSEL_CHECK(int64_t(ids.size()) < T, "the prompt is {} tokens, longer than the context allows ({} = model.seq_length, "
               "leaving room for at least one new token)", ids.size(), T);
  nn::KVCache cache = lm.model->make_kv_cache();
  Tensor prompt = Tensor::empty({int64_t(ids.size())}, DType::i64);
  {
    const DeviceAccessScope upload;  // the prompt's ids to the device
    std::copy(ids.begin(), ids.end(), prompt.data<int64_t>());
  }
  Tensor logits = lm.model->decode(prompt, cache);
  std::vector<int64_t> out;
  const int64_t budget = std::min<int64_t>(o.max_new_tokens, T - int64_t(ids.size()));
  for (int64_t step = 0; step < budget; ++step) {
    // Only the tokenizer's ids: a padded model's extra rows are no tokens (the decoder refuses them).
    int64_t next = 0;
    {
      const DeviceAccessScope copy_to_host;  // the step's logits, sampled on the host
      next = infer::sample_token(logits.data<float>(), tok.vocab_size(), o.sampling, step);
    }
    if (next == tok.eos_id()) break;
    out.push_back(next);
    if (step + 1 == budget) break;
    Tensor t = Tensor::empty({1}, DType::i64);
    {
      const DeviceAccessScope upload;  // the sampled id to the device
      t.data<int64_t>()[0] = next;
    }
    logits = lm.model->decode(t, cache);
  }
  std::printf("%s%s\n", o.prompt.c_str(), tok.decode(out).empty() ? "" : (" " + tok.decode(out)).c_str());
  if (o.max_new_tokens > budget)
    std::fprintf(stderr, "note: stopped at the context length (model.seq_length %lld)\n", (long long)T);
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Continue a prompt with a trained checkpoint (KV cache)");
  cmd->add_option("--ckpt", o->ckpt, "checkpoint.dir or one step_* directory")->required();
  cmd->add_option("--prompt", o->prompt, "text to continue")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "SentencePiece model (default: the checkpoint's data.tokenizer)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "sample from the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "nucleus sampling threshold")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "sampling seed")->capture_default_str()->check(unsigned_64());
  cmd->add_option("--set", o->sets, "override a key of the checkpoint's config");
  return [o] { return run_generate(*o); };
}

}  // namespace tessel::app
