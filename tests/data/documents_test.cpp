// Document boundaries for text and JSONL inputs, and the tokenizer round trip.
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "support/scratch_dir.h"
#include "data/tiny_tokenizer.h"

#include <filesystem>
#include <fstream>

#include "tessel/core/check.h"
#include "tessel/data/documents.h"
#include "tessel/data/tokenizer.h"

using namespace tessel::data;
namespace fs = std::filesystem;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-docs") {}
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  }
};

std::vector<std::string> read_all(const std::vector<std::string>& files, DocumentReaderOptions o) {
  std::vector<std::string> docs;
  for_each_document(files, o, [&](const std::string& d) { docs.push_back(d); });
  return docs;
}

TEST(Documents, TextBoundaries) {
  Scratch s;
  const auto a = s.file("a.txt", "one\ntwo\n\nthree\n\n\nfour\n");
  const auto f = s.file("f", "first fortune\nline 2\n%\nsecond\n%\n");
  EXPECT_EQ(read_all({a}, {"auto", "blank", "text"}), (std::vector<std::string>{"one\ntwo", "three", "four"}));
  EXPECT_EQ(read_all({a}, {"auto", "file", "text"}), (std::vector<std::string>{"one\ntwo\n\nthree\n\n\nfour"}));
  EXPECT_EQ(read_all({f}, {"text", "percent", "text"}),
            (std::vector<std::string>{"first fortune\nline 2", "second"}));
}

TEST(Documents, JsonlTextFieldAndErrorsNameTheLine) {
  Scratch s;
  const auto j = s.file("d.jsonl", "{\"text\": \"hello\\nworld\", \"id\": 1}\n\n{\"text\": \"caf\\u00e9\"}\n");
  EXPECT_EQ(read_all({j}, {}), (std::vector<std::string>{"hello\nworld", "café"}));
  const auto bad = s.file("bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  try {
    read_all({bad}, {});
    FAIL();
  } catch (const tessel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_all({s.dir + "/missing.txt"}, {}), tessel::Error);
  EXPECT_THROW(read_all({j}, {"xml", "blank", "text"}), tessel::Error);
}

TEST(Documents, MalformedJsonlLineIsNamedWithoutTheParserText) {
  Scratch s;
  const auto bad = s.file("broken.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  std::string err;
  try {
    read_all({bad}, {});
  } catch (const tessel::Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find(bad + ":2: not a JSON object (syntax error at byte 23 of 23)"), std::string::npos) << err;
  EXPECT_EQ(err.find("json.exception"), std::string::npos) << err;
}

TEST(Documents, JsonlNumberPastTheRangeOfADoubleIsNamed) {
  Scratch s;
  const auto bad = s.file("huge.jsonl", "{\"text\": \"ok\", \"score\": -2e999}\n");
  const std::string err = tessel::testing::error_of([&] { read_all({bad}, {}); });
  EXPECT_NE(err.find(bad + ":1: not a JSON object (a number past the range of a double '-2e999')"), std::string::npos)
      << err;
}

TEST(Tokenizer, TrainsBpeWithByteFallbackAndRoundTrips) {
  Scratch s;
  tessel::testing::train_tiny_tokenizer(s.dir, 320);
  Tokenizer tok(s.dir + "/tok.model");
  EXPECT_EQ(tok.vocab_size(), 320);
  EXPECT_GE(tok.eos_id(), 0);
  for (const std::string t : {"the model trains", "loss falls 1234", "unseen: naïve café — 東京"}) {
    const auto ids = tok.encode(t);
    for (int64_t id : ids) ASSERT_TRUE(id >= 0 && id < 320);
    EXPECT_EQ(tok.decode(ids), t);  // byte fallback: no unknown tokens even for unseen characters
  }
  EXPECT_THROW(Tokenizer(s.dir + "/none.model"), tessel::Error);
}

}  // namespace
