#include "tessel/core/paths.h"
#include "tessel/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <unordered_map>

#include "tessel/core/check.h"

namespace tessel::data {

Tokenizer::Tokenizer(const std::string& model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(model_path) {
  TESSEL_CHECK(path_exists(model_path), "tokenizer model '{}' does not exist (train one with `tessel "
               "train-tokenizer`)", model_path);
  TESSEL_CHECK(!is_directory_path(model_path), "tokenizer model '{}' is a directory; give the "
               "SentencePiece .model file", model_path);
  const auto st = sp_->Load(model_path);
  TESSEL_CHECK(st.ok(), "tokenizer model '{}' could not be loaded: {}", model_path, st.ToString());
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  TESSEL_CHECK(st.ok(), "tokenizer '{}': encode failed: {}", path_, st.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> v;
  for (int64_t id : ids) {
    TESSEL_CHECK(id >= 0 && id < vocab_size(), "tokenizer '{}': id {} outside [0, {})", path_, id, vocab_size());
    v.push_back(int(id));
  }
  std::string text;
  const auto st = sp_->Decode(v, &text);
  TESSEL_CHECK(st.ok(), "tokenizer '{}': decode failed: {}", path_, st.ToString());
  return text;
}

int64_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int64_t Tokenizer::eos_id() const { return sp_->eos_id(); }
int64_t Tokenizer::bos_id() const { return sp_->bos_id(); }

void check_model_vocab(const Tokenizer& tok, int64_t model_vocab_size) {
  const int64_t v = tok.vocab_size(), padded = (v + 127) / 128 * 128;
  TESSEL_CHECK(model_vocab_size >= v && model_vocab_size <= padded,
               "model.vocab_size {} disagrees with the tokenizer '{}' ({} tokens): the model's vocabulary must be {} "
               "(or up to {}, padded to a multiple of 128)", model_vocab_size, tok.path(), v, v, padded);
}

void train_tokenizer(const TokenizerTrainOptions& o) {
  TESSEL_CHECK(!o.input_files.empty(), "train-tokenizer: no input files");
  std::string inputs;
  for (const auto& f : o.input_files) {
    TESSEL_CHECK(path_exists(f), "train-tokenizer: input '{}' does not exist", f);
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  TESSEL_CHECK(o.vocab_size >= 300 && o.vocab_size <= (int64_t(1) << 24),
               "train-tokenizer: --vocab-size {} must be from 300 (byte fallback's 256 bytes and the special tokens) "
               "to 16777216", o.vocab_size);
  // SentencePiece samples no fewer than 101 lines (its trainer_interface refuses 1..100).
  TESSEL_CHECK(o.max_sentences == 0 || o.max_sentences > 100,
               "train-tokenizer: --max-sentences {} must be 0 (every line) or more than 100", o.max_sentences);
  const std::unordered_map<std::string, std::string> args{
      {"input", inputs},
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", "bpe"},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"split_digits", "true"},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(o.threads)},
      {"max_sentence_length", std::to_string(kTokenizerMaxLineBytes)},
      {"minloglevel", "1"},
  };
  const auto st = sentencepiece::SentencePieceTrainer::Train(args);
  TESSEL_CHECK(st.ok(), "train-tokenizer: SentencePiece training failed: {}", st.ToString());
}

}  // namespace tessel::data
