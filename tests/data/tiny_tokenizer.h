#pragma once
// A small SentencePiece model trained on a generated word list (about a second): for tests that
// need a real tokenizer file.
#include <fstream>
#include <string>

#include "tessel/data/tokenizer.h"

namespace tessel::testing {

// Writes DIR/corpus.txt, trains DIR/tok.model with vocab_size pieces and returns its path.
inline std::string train_tiny_tokenizer(const std::string& dir, int64_t vocab_size) {
  std::string text;
  const char* words[] = {"the", "model", "trains", "on", "text", "tokens", "loss", "falls", "quickly", "slowly"};
  for (int i = 0; i < 3000; ++i)
    text += std::string(words[i % 10]) + " " + words[(i * 7) % 10] + " " + words[(i * 3) % 10] + " " +
            std::to_string(i) + "\n";
  std::ofstream(dir + "/corpus.txt") << text;
  data::TokenizerTrainOptions o;
  o.input_files = {dir + "/corpus.txt"};
  o.model_prefix = dir + "/tok";
  o.vocab_size = vocab_size;
  data::train_tokenizer(o);
  return dir + "/tok.model";
}

}  // namespace tessel::testing
