#pragma once
// SentencePiece tokenizer: training (BPE with byte fallback, so any UTF-8 text encodes without
// unknown tokens) and encoding / decoding with a trained .model file.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessel::data {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);  // throws naming the file
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const;
  int64_t eos_id() const;
  int64_t bos_id() const;
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

// A model fits a tokenizer when its vocabulary holds every token id, padded at most to the next
// multiple of 128 (for tensor-parallel splits). Throws naming both sizes and the tokenizer otherwise
// (train, generate: one rule).
void check_model_vocab(const Tokenizer& tok, int64_t model_vocab_size);

// SentencePiece trains on lines of at most this many bytes and skips longer ones.
inline constexpr int64_t kTokenizerMaxLineBytes = 16384;

struct TokenizerTrainOptions {
  std::vector<std::string> input_files;  // plain text, one sentence per line
  std::string model_prefix;              // writes PREFIX.model and PREFIX.vocab
  int64_t vocab_size = 8000;
  int64_t max_sentences = 2000000;       // sampled from the input when it has more
  int threads = 2;
};
void train_tokenizer(const TokenizerTrainOptions& o);

}  // namespace tessel::data
