// From text to a trained model through the CLI: train-tokenizer, preprocess, train with evaluation,
// and the data errors a user can make.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

void write_corpus(const std::string& path) {
  std::ofstream out(path);
  const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
  for (int d = 0; d < 400; ++d) {
    for (int l = 0; l < 3; ++l) out << words[(d + l) % 8] << " " << words[(d * 3 + l) % 8] << " " << d << "\n";
    out << "%\n";
  }
}

const std::string kModel =
    " --set model.num_layers=1 --set model.hidden_size=32 --set model.num_attention_heads=2"
    " --set model.num_query_groups=2 --set model.ffn_hidden_size=64 --set model.seq_length=32"
    " --set train.micro_batch_size=4 --set train.global_batch_size=4 --set train.train_iters=6"
    " --set train.lr_warmup_iters=1 --set train.eval_interval=3 --set train.eval_iters=2 --set log.dir=run"
    " --set data.split=90,10,0";

TEST(DataPipelineCli, TokenizerPreprocessTrainEval) {
  TempDir d;
  write_corpus(d / "corpus.txt");
  auto r = run_tessel("train-tokenizer --input corpus.txt --doc-boundary percent --model-prefix tok --vocab-size 300",
                      d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel("preprocess --input corpus.txt --doc-boundary percent --tokenizer tok.model --output-prefix data/c",
                 d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("400 documents"), std::string::npos) << r.output;
  r = run_tessel("train " + config("synthetic.yaml") + kModel +
                     " --set model.vocab_size=300 --set data.path=data/c --set data.tokenizer=tok.model"
                     " --set checkpoint.dir=ck",
                 d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // eval: one JSON line; generate: the prompt continued, and a prompt longer than the context refused.
  r = run_tessel("eval --ckpt ck --data data/c --max-samples 8", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_GT(ev.at("loss").get<double>(), 0.0);
  EXPECT_EQ(ev.at("tokens").get<int64_t>(), 8 * 32);
  EXPECT_EQ(ev.at("step").get<int64_t>(), 6);
  r = run_tessel("generate --ckpt ck --prompt 'alpha beta' --max-new-tokens 5 --seed 1", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("alpha beta", 0), 0u) << r.output;
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "gamma ";
  r = run_tessel("generate --ckpt ck --prompt '" + long_prompt + "'", d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("longer than the context"), std::string::npos) << r.output;
  EXPECT_EQ(metric_values(d / "run/metrics.jsonl", "loss").size(), 6u);
  const auto evals = metric_values(d / "run/metrics.jsonl", "eval_loss");
  ASSERT_EQ(evals.size(), 2u);  // at steps 3 and 6
  for (double e : evals) EXPECT_TRUE(e > 0 && e < 10);

  // A tokenizer whose vocabulary disagrees with model.vocab_size.
  r = run_tessel("train " + config("synthetic.yaml") + kModel +
                     " --set model.vocab_size=1000 --set data.path=data/c --set data.tokenizer=tok.model",
                 d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("disagrees with the tokenizer"), std::string::npos) << r.output;
  // A dataset whose .idx is missing, and one whose .bin disagrees with its index.
  r = run_tessel("train " + config("synthetic.yaml") + kModel + " --set model.vocab_size=300 --set data.path=data/none",
                 d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("data/none.idx is missing"), std::string::npos) << r.output;
  std::filesystem::copy_file(d / "data/c.idx", d / "data/t.idx");
  std::filesystem::copy_file(d / "data/c.bin", d / "data/t.bin");
  std::filesystem::resize_file(d / "data/t.bin", std::filesystem::file_size(d / "data/t.bin") - 2);
  r = run_tessel("train " + config("synthetic.yaml") + kModel + " --set model.vocab_size=300 --set data.path=data/t",
                 d.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("but its index describes"), std::string::npos) << r.output;
}

// Found by a probe (2026-12-04): the commands overwrote their own input when an output path named
// it, a failed preprocess left its temporary files, and SentencePiece's own checks reached the user
// as its internals.
TEST(DataPipelineCli, OutputsNeverOverwriteInputsAndFailuresLeaveNothing) {
  TempDir d;
  write_corpus(d / "corpus.txt");
  std::filesystem::copy_file(d / "corpus.txt", d / "text.model");
  auto r = run_tessel("train-tokenizer --input text.model --doc-boundary percent --model-prefix text --vocab-size 300",
                      d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("train-tokenizer: the output 'text.model' is the input 'text.model'; writing it would "
                          "destroy what is read. Choose another --model-prefix"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(std::filesystem::file_size(d / "text.model"), std::filesystem::file_size(d / "corpus.txt"));
  r = run_tessel("train-tokenizer --input corpus.txt --model-prefix tok --vocab-size 300 --max-sentences 1", d.path());
  EXPECT_NE(r.output.find("--max-sentences 1 must be 0 (every line) or more than 100"), std::string::npos) << r.output;
  r = run_tessel("train-tokenizer --input corpus.txt --model-prefix out/ --vocab-size 300", d.path());
  EXPECT_NE(r.output.find("--model-prefix 'out/' must name a file prefix"), std::string::npos) << r.output;
  {
    const std::string line(20000, 'x');
    std::ofstream(d / "long.txt") << line << "\n\n" << line << "\n";  // a blank line is no usable line
  }
  r = run_tessel("train-tokenizer --input long.txt --doc-boundary file --model-prefix tok --vocab-size 300", d.path());
  EXPECT_NE(r.output.find("every line of the inputs is longer than 16384 bytes"), std::string::npos) << r.output;
  // Into a directory that does not exist yet: created, as preprocess does.
  r = run_tessel("train-tokenizer --input corpus.txt --doc-boundary percent --model-prefix new/dir/tok --vocab-size 300",
                 d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  r = run_tessel("preprocess --input corpus.txt --tokenizer new/dir/tok.model --output-prefix c", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto size = std::filesystem::file_size(d / "c.bin");
  r = run_tessel("preprocess --input c.bin --format text --tokenizer new/dir/tok.model --output-prefix c", d.path());
  EXPECT_NE(r.output.find("preprocess: the output 'c.bin' is the input 'c.bin'"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::file_size(d / "c.bin"), size);
  std::filesystem::create_directory(d / "dir.bin");
  r = run_tessel("preprocess --input corpus.txt --tokenizer new/dir/tok.model --output-prefix dir", d.path());
  EXPECT_NE(r.output.find("preprocess: the output 'dir.bin' is a directory"), std::string::npos) << r.output;
  r = run_tessel("preprocess --input corpus.txt --tokenizer new/dir/tok.model --output-prefix x --format xml",
                 d.path());
  EXPECT_NE(r.exit_code, 0);
  r = run_tessel("preprocess --input missing.txt --tokenizer new/dir/tok.model --output-prefix x", d.path());
  EXPECT_NE(r.exit_code, 0);
  for (const auto& e : std::filesystem::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

}  // namespace
