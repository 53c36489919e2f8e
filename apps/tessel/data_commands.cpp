// tessel train-tokenizer and tessel preprocess: from text (or JSONL) to a tokenizer and a
// Megatron-format indexed dataset.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "option_checks.h"
#include "tessel/core/check.h"
#include "tessel/data/documents.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/data/tokenizer.h"

namespace tessel::app {
namespace {

struct TokenizerOptions {
  std::vector<std::string> inputs;
  data::DocumentReaderOptions reader;
  data::TokenizerTrainOptions train;
};

int run_train_tokenizer(TokenizerOptions& o) {
  // SentencePiece reads sentences line by line: write the documents' lines to one corpus file.
  const std::string corpus = std::filesystem::temp_directory_path() / ("tessel-corpus-" + std::to_string(::getpid()) + ".txt");
  int64_t docs;
  {
    std::ofstream out(corpus);
    docs = data::for_each_document(o.inputs, o.reader, [&](const std::string& d) { out << d << "\n"; });
    TESSEL_CHECK(out.good(), "cannot write the temporary corpus {}", corpus);
  }
  TESSEL_CHECK(docs > 0, "train-tokenizer: the inputs hold no documents");
  o.train.input_files = {corpus};
  try {
    data::train_tokenizer(o.train);
  } catch (...) {
    std::filesystem::remove(corpus);
    throw;
  }
  std::filesystem::remove(corpus);
  const data::Tokenizer tok(o.train.model_prefix + ".model");
  std::printf("trained a %lld-token BPE tokenizer on %lld documents: %s.model\n", (long long)tok.vocab_size(),
              (long long)docs, o.train.model_prefix.c_str());
  return 0;
}

struct PreprocessOptions {
  std::vector<std::string> inputs;
  data::DocumentReaderOptions reader;
  std::string output_prefix;
  std::string tokenizer;
};

int run_preprocess(const PreprocessOptions& o) {
  const data::Tokenizer tok(o.tokenizer);
  const auto parent = std::filesystem::path(o.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  // Written under a temporary prefix and renamed at the end: an interrupted run leaves no half dataset.
  const std::string tmp = o.output_prefix + ".tmp-" + std::to_string(::getpid());
  data::IndexedDatasetBuilder b(tmp, data::dtype_for_vocab(tok.vocab_size()));
  const int64_t eos = tok.eos_id();
  TESSEL_CHECK(eos >= 0, "tokenizer '{}' has no end-of-document token", o.tokenizer);
  data::for_each_document(o.inputs, o.reader, [&](const std::string& doc) {
    std::vector<int64_t> ids = tok.encode(doc);
    ids.push_back(eos);
    b.add_document(ids);
  });
  TESSEL_CHECK(b.documents() > 0, "preprocess: the inputs hold no documents");
  b.finalize();
  std::filesystem::rename(tmp + ".bin", o.output_prefix + ".bin");
  std::filesystem::rename(tmp + ".idx", o.output_prefix + ".idx");
  std::printf("wrote %s.bin/.idx: %lld documents, %lld tokens (EOS after each document), tokenizer vocab %lld\n",
              o.output_prefix.c_str(), (long long)b.documents(), (long long)b.tokens(), (long long)tok.vocab_size());
  return 0;
}

void add_reader_options(CLI::App* cmd, data::DocumentReaderOptions& r) {
  cmd->add_option("--format", r.format, "input format: auto (by extension), text, jsonl")->capture_default_str();
  cmd->add_option("--doc-boundary", r.boundary,
                  "text documents: file (one per file), blank (blank-line separated), percent (lines holding only %)")
      ->capture_default_str();
  cmd->add_option("--json-key", r.json_key, "JSONL field holding the text")->capture_default_str();
}

}  // namespace

Action add_train_tokenizer_command(CLI::App& app) {
  auto o = std::make_shared<TokenizerOptions>();
  auto* cmd = app.add_subcommand("train-tokenizer", "Train a SentencePiece BPE tokenizer (byte fallback) on text");
  cmd->add_option("--input", o->inputs, "text or JSONL files")->required()->expected(1, -1);
  cmd->add_option("--model-prefix", o->train.model_prefix, "writes PREFIX.model and PREFIX.vocab")->required();
  cmd->add_option("--vocab-size", o->train.vocab_size, "vocabulary size")->capture_default_str();
  cmd->add_option("--max-sentences", o->train.max_sentences, "lines sampled for training (0: all)")
      ->capture_default_str()
      ->check(integer_at_least(0));
  add_reader_options(cmd, o->reader);
  return [o] { return run_train_tokenizer(*o); };
}

Action add_preprocess_command(CLI::App& app) {
  auto o = std::make_shared<PreprocessOptions>();
  auto* cmd = app.add_subcommand("preprocess", "Tokenize text or JSONL into a Megatron-format indexed dataset");
  cmd->add_option("--input", o->inputs, "text or JSONL files")->required()->expected(1, -1);
  cmd->add_option("--output-prefix", o->output_prefix, "writes PREFIX.bin and PREFIX.idx")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "SentencePiece .model file")->required()->check(CLI::ExistingFile);
  add_reader_options(cmd, o->reader);
  return [o] { return run_preprocess(*o); };
}

}  // namespace tessel::app
