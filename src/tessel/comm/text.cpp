#include "tessel/comm/text.h"

#include <cstring>
#include <vector>

namespace tessel::comm {
namespace {

std::vector<int64_t> words_of(const std::string& text) {
  std::vector<int64_t> words((text.size() + 7) / 8, 0);
  if (!text.empty()) std::memcpy(words.data(), text.data(), text.size());
  return words;
}

std::string text_of(const std::vector<int64_t>& words, int64_t n) {
  return std::string(reinterpret_cast<const char*>(words.data()), size_t(n));
}

}  // namespace

// Two messages per text: the length (tag), then the words (tag + 1).
void send_text(Communicator& c, const std::string& text, int dst, int tag) {
  int64_t n = int64_t(text.size());
  c.send(&n, 1, DType::i64, dst, tag);
  const std::vector<int64_t> words = words_of(text);
  c.send(words.data(), int64_t(words.size()), DType::i64, dst, tag + 1);
}

std::string recv_text(Communicator& c, int src, int tag) {
  int64_t n = 0;
  c.recv(&n, 1, DType::i64, src, tag);
  std::vector<int64_t> words(size_t((n + 7) / 8), 0);
  c.recv(words.data(), int64_t(words.size()), DType::i64, src, tag + 1);
  return text_of(words, n);
}

std::string broadcast_text(Communicator& c, const std::string& text, int root) {
  int64_t n = int64_t(text.size());
  c.broadcast(&n, 1, DType::i64, root);
  std::vector<int64_t> words = c.rank() == root ? words_of(text) : std::vector<int64_t>(size_t((n + 7) / 8), 0);
  c.broadcast(words.data(), int64_t(words.size()), DType::i64, root);
  return text_of(words, n);
}

}  // namespace tessel::comm
