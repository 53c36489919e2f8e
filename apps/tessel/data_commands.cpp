// tessel train-tokenizer and tessel preprocess: from text (or JSONL) to a tokenizer and a
// Megatron-format indexed dataset.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "option_checks.h"
#include "tessel/core/check.h"
#include "tessel/core/paths.h"
#include "tessel/data/documents.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/data/tokenizer.h"

namespace tessel::app {
namespace {

namespace fs = std::filesystem;

// The files a command writes from `prefix` (PREFIX.model, PREFIX.bin, ...): the prefix must name a
// file (not end in a separator), its directory is created, and no input may be one of the outputs
// (the command would overwrite what it reads).
std::vector<std::string> output_paths(const std::string& command, const std::string& option, const std::string& prefix,
                                      const std::vector<std::string>& suffixes, const std::vector<std::string>& inputs) {
  TESSEL_CHECK(!prefix.empty() && !fs::path(prefix).filename().empty(),
               "{}: {} '{}' must name a file prefix (PREFIX{} ...), not a directory", command, option, prefix,
               suffixes.front());
  std::vector<std::string> outputs;
  for (const std::string& s : suffixes) {
    outputs.push_back(prefix + s);
    for (const std::string& in : inputs)
      TESSEL_CHECK(!(path_is_or_is_under(outputs.back(), in) && path_is_or_is_under(in, outputs.back())),
                   "{}: the output '{}' is the input '{}'; writing it would destroy what is read. Choose another {}",
                   command, outputs.back(), in, option);
  }
  const fs::path parent = fs::path(prefix).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  TESSEL_CHECK(!ec && is_directory_path(parent.empty() ? "." : parent.string()),
               "{}: cannot create the directory '{}' of {} '{}'{}", command, parent.string(), option, prefix,
               ec ? ": " + ec.message() : "");
  return outputs;
}

struct TokenizerOptions {
  std::vector<std::string> inputs;
  data::DocumentReaderOptions reader;
  data::TokenizerTrainOptions train;
};

int run_train_tokenizer(TokenizerOptions& o) {
  output_paths("train-tokenizer", "--model-prefix", o.train.model_prefix, {".model", ".vocab"}, o.inputs);
  // SentencePiece reads sentences line by line: write the documents' lines to one corpus file.
  const std::string corpus = std::filesystem::temp_directory_path() / ("tessel-corpus-" + std::to_string(::getpid()) + ".txt");
  int64_t docs, usable_lines = 0;
  try {
    std::ofstream out(corpus);
    docs = data::for_each_document(o.inputs, o.reader, [&](const std::string& d) {
      out << d << "\n";
      for (size_t at = 0; at <= d.size();) {
        const size_t end = std::min(d.find('\n', at), d.size());
        usable_lines += end > at && end - at <= size_t(data::kTokenizerMaxLineBytes);  // blank lines teach nothing
        at = end + 1;
      }
    });
    TESSEL_CHECK(out.good(), "cannot write the temporary corpus {}", corpus);
  } catch (...) {
    std::filesystem::remove(corpus);
    throw;
  }
  if (docs == 0 || usable_lines == 0) std::filesystem::remove(corpus);
  TESSEL_CHECK(docs > 0, "train-tokenizer: the inputs hold no documents");
  TESSEL_CHECK(usable_lines > 0,
               "train-tokenizer: every line of the inputs is longer than {} bytes, and SentencePiece trains on lines "
               "no longer than that",
               data::kTokenizerMaxLineBytes);
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
  std::vector<std::string> read = o.inputs;
  read.push_back(o.tokenizer);
  const std::vector<std::string> outputs =
      output_paths("preprocess", "--output-prefix", o.output_prefix, {".bin", ".idx"}, read);
  for (const std::string& out : outputs)
    TESSEL_CHECK(!is_directory_path(out), "preprocess: the output '{}' is a directory", out);
  const data::Tokenizer tok(o.tokenizer);
  const int64_t eos = tok.eos_id();
  TESSEL_CHECK(eos >= 0, "tokenizer '{}' has no end-of-document token", o.tokenizer);
  // Written under a temporary prefix and renamed at the end: an interrupted run leaves no half
  // dataset, and a run that fails leaves nothing.
  const std::string tmp = o.output_prefix + ".tmp-" + std::to_string(::getpid());
  const auto remove_temporaries = [&] {
    std::error_code ec;
    fs::remove(tmp + ".bin", ec);
    fs::remove(tmp + ".idx", ec);
  };
  data::IndexedDatasetBuilder b(tmp, data::dtype_for_vocab(tok.vocab_size()));
  try {
    data::for_each_document(o.inputs, o.reader, [&](const std::string& doc) {
      std::vector<int64_t> ids = tok.encode(doc);
      ids.push_back(eos);
      b.add_document(ids);
    });
    TESSEL_CHECK(b.documents() > 0, "preprocess: the inputs hold no documents");
    b.finalize();
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::error_code ec;
      fs::rename(tmp + (i == 0 ? ".bin" : ".idx"), outputs[i], ec);
      TESSEL_CHECK(!ec, "preprocess: cannot write '{}' (--output-prefix): {}", outputs[i], ec.message());
    }
  } catch (...) {
    remove_temporaries();
    throw;
  }
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
