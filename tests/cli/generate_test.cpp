// tessel generate on models that do not match their tokenizer or have diverged: a padded vocabulary's
// extra ids are never sampled, a tokenizer of another vocabulary is refused as train refuses it, NaN
// logits stop with the step named. The checkpoints are tiny models written by export_hf and read
// back with `tessel import-hf` (no training needed).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/host_access.h"
#include "cli/cli_support.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/nn/model.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

// A 300-token tokenizer in dir/tok.model.
void train_tokenizer(const TempDir& d) {
  {
    std::ofstream out(d / "corpus.txt");
    const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
    for (int i = 0; i < 400; ++i) out << words[i % 8] << " " << words[(i * 3) % 8] << " " << i << "\n%\n";
  }
  const auto r = run_tessel("train-tokenizer --input corpus.txt --doc-boundary percent --model-prefix tok "
                            "--vocab-size 300", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// A tiny random Llama of `vocab` tokens as checkpoint dir/NAME (via a Hugging Face export), with
// `poison` applied to its parameters first.
template <class F>
void make_checkpoint(const TempDir& d, const std::string& name, int64_t vocab, F&& poison) {
  nn::ModelConfig c;
  c.num_layers = 1, c.hidden_size = 32, c.num_attention_heads = 4, c.num_query_groups = 4;
  c.ffn_hidden_size = 48, c.vocab_size = vocab, c.seq_length = 64;
  nn::Model m(c);
  m.params().initialize(11);
  poison(m.params());
  ckpt::export_hf(c, m.params(), d / ("hf-" + name));
  const auto r = run_tessel("import-hf --hf hf-" + name + " --out " + name, d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

void make_checkpoint(const TempDir& d, const std::string& name, int64_t vocab) {
  make_checkpoint(d, name, vocab, [](nn::ParamStore&) {});
}

const std::string kGenerate = "generate --tokenizer tok.model --prompt 'alpha beta' --temperature 1 --seed 1 ";

TEST(GenerateCli, PaddedVocabularyIdsAreNeverSampled) {
  TempDir d;
  train_tokenizer(d);
  // 384 = 300 padded to a multiple of 128: ids 300..383 are no tokens. An untrained model's logits are
  // nearly uniform, so 40 draws over all 384 ids would pick one of them (p = 1 - (300/384)^40 > 0.9999).
  make_checkpoint(d, "padded", 384);
  const auto r = run_tessel(kGenerate + "--ckpt padded --max-new-tokens 40", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("alpha beta", 0), 0u) << r.output;
}

TEST(GenerateCli, ATokenizerOfAnotherVocabularyIsRefused) {
  TempDir d;
  train_tokenizer(d);
  make_checkpoint(d, "big", 1000);
  auto r = run_tessel(kGenerate + "--ckpt big", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.vocab_size 1000 disagrees with the tokenizer 'tok.model' (300 tokens)"),
            std::string::npos) << r.output;
  r = run_tessel("generate --ckpt big --tokenizer . --prompt x", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tokenizer model '.' is a directory"), std::string::npos) << r.output;
}

TEST(GenerateCli, NanLogitsStopNamingTheStep) {
  TempDir d;
  train_tokenizer(d);
  make_checkpoint(d, "nan", 300, [](nn::ParamStore& ps) {
    const HostAccess host;
    ps.param("model.norm.weight").data<float>()[0] = NAN;
  });
  for (const std::string temperature : {"0", "1"}) {
    const auto r = run_tessel("generate --ckpt nan --tokenizer tok.model --prompt 'alpha beta' --temperature " +
                                  temperature, d.path());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("logits contain NaN at step 0"), std::string::npos) << r.output;
  }
  // import-hf says so, naming the tensor; eval printed {"loss": null} and exited 0 (a probe, 2026-12-04).
  auto r = run_tessel("import-hf --hf hf-nan --out nan-again", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: import-hf: 'hf-nan': tensor 'model.norm.weight' holds 1 non-finite value (NaN or "
                          "infinity): the model cannot train, evaluate or generate from it"),
            std::string::npos)
      << r.output;
  r = run_tessel("preprocess --input corpus.txt --doc-boundary percent --tokenizer tok.model --output-prefix c",
                      d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel("eval --ckpt nan --data c --set data.path=other", d.path());
  EXPECT_NE(r.output.find("eval: --set data.path=other is not used: the dataset evaluated is --data (c)"),
            std::string::npos)
      << r.output;
  r = run_tessel("eval --ckpt nan --data c --max-samples 2", d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("eval: the loss over 128 tokens of 'c' is not finite (nan)"), std::string::npos) << r.output;
}

// Found by a probe (2026-12-04): values a sampler cannot mean were wrapped or used as they came, and
// export-hf into the checkpoint it read replaced that checkpoint's model.safetensors.
TEST(GenerateCli, OptionsAndOutputsThatWouldMeanSomethingElseAreRefused) {
  TempDir d;
  train_tokenizer(d);
  make_checkpoint(d, "ck", 300);
  for (const std::string seed : {"-1", "18446744073709551616"}) {
    const auto r = run_tessel("generate --ckpt ck --tokenizer tok.model --prompt alpha --seed " + seed, d.path());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--seed: must be an integer from 0 to 18446744073709551615 in plain decimal, got " + seed),
              std::string::npos)
        << r.output;
  }
  auto r = run_tessel("generate --ckpt ck --tokenizer tok.model --prompt alpha --temperature inf", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--temperature must be a finite number >= 0 (0 is greedy), got inf"), std::string::npos)
      << r.output;
  const std::string step = ckpt::list_checkpoints(d / "ck").at(0);
  r = run_tessel("export-hf --ckpt ck --out ck/" + step, d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("export-hf: --out 'ck/" + step + "' is inside the checkpoint"), std::string::npos) << r.output;
  r = run_tessel("export-hf --ckpt ck --out ck/hf", d.path());  // any step of it, not only the one read
  EXPECT_NE(r.output.find("export-hf: --out 'ck/hf' is inside --ckpt 'ck'"), std::string::npos) << r.output;
  make_checkpoint(d, "other", 300);
  r = run_tessel("export-hf --ckpt ck --out other", d.path());
  EXPECT_NE(r.output.find("export-hf: --out 'other' is or holds a tessel checkpoint"), std::string::npos) << r.output;
  { std::ofstream(d / "afile") << "x"; }
  r = run_tessel("export-hf --ckpt ck --out afile", d.path());
  EXPECT_NE(r.output.find("export-hf: --out 'afile' exists and is not a directory"), std::string::npos) << r.output;
  // The checkpoint still loads: nothing was written into it.
  r = run_tessel("generate --ckpt ck --tokenizer tok.model --prompt alpha --max-new-tokens 2 --seed 3", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("warning: skipping checkpoint"), std::string::npos) << r.output;
  r = run_tessel("export-hf --ckpt ck --out exported", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A Hugging Face directory's tokenizer.model (export-hf writes one) comes along on import: generate
  // needs no --tokenizer then.
  std::filesystem::copy_file(d / "tok.model", d / "exported/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  r = run_tessel("import-hf --hf exported --out again", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel("generate --ckpt again --prompt alpha --max-new-tokens 2 --seed 3", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("alpha", 0), 0u) << r.output;
  // Into the Hugging Face directory itself: the tokenizer is already there (copying it onto itself
  // failed with "File exists").
  r = run_tessel("import-hf --hf exported --out exported", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel("generate --ckpt exported --prompt alpha --max-new-tokens 2 --seed 3", d.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// An imported checkpoint took no step, so its seed fixed nothing: fine-tuning it under another seed
// was refused ("was trained with train.seed 1234"). A checkpoint that trained keeps the check.
TEST(GenerateCli, AnImportedCheckpointFineTunesUnderAnySeed) {
  TempDir d;
  make_checkpoint(d, "ck", 300);
  const std::string train = "train " + config("synthetic.yaml") +
                            " --set model.num_layers=1 --set model.hidden_size=32 --set model.num_attention_heads=4"
                            " --set model.num_query_groups=4 --set model.ffn_hidden_size=48 --set model.vocab_size=300"
                            " --set model.seq_length=64 --set train.micro_batch_size=1 --set train.global_batch_size=1"
                            " --set train.lr_warmup_iters=0 --set checkpoint.dir=ck --set checkpoint.interval=1"
                            " --set log.dir=run";
  auto r = run_tessel(train + " --set train.train_iters=1 --set train.seed=42", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel(train + " --set train.train_iters=2 --set train.seed=7", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("was trained with train.seed 42, the config says 7"), std::string::npos) << r.output;
}

}  // namespace
