// invalid_utf8_at against a reference written another way: decode a sequence by its bit pattern,
// then accept it only if encoding the code point in shortest form gives back the same bytes and the
// code point is a scalar value (not a surrogate, at most U+10FFFF).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tessel/core/utf8.h"

namespace tessel {
namespace {

std::string encode(uint32_t cp) {  // shortest form
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

int64_t reference_invalid_at(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return int64_t(i);
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 0x2) return int64_t(i);
      cp = cp << 6 | (c & 0x3F);
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF || encode(cp) != s.substr(i, n)) return int64_t(i);
    i += n;
  }
  return -1;
}

TEST(Utf8, EveryScalarValueInShortestFormIsWellFormed) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    ASSERT_EQ(invalid_utf8_at(encode(cp)), -1) << std::hex << cp;
  }
}

TEST(Utf8, IllFormedSequencesAreFoundWhereTheyBegin) {
  EXPECT_EQ(invalid_utf8_at("ab\xC0\x80" "cd"), 2);       // overlong NUL
  EXPECT_EQ(invalid_utf8_at("\xE0\x80\x80"), 0);           // overlong 3-byte
  EXPECT_EQ(invalid_utf8_at("x\xF0\x80\x80\x80"), 1);      // overlong 4-byte
  EXPECT_EQ(invalid_utf8_at("\xED\xA0\x80"), 0);           // a surrogate, U+D800
  EXPECT_EQ(invalid_utf8_at("\xF4\x90\x80\x80"), 0);       // U+110000
  EXPECT_EQ(invalid_utf8_at("\xE2\x82"), 0);               // cut short
  EXPECT_EQ(invalid_utf8_at("ok\x80"), 2);                 // a lone continuation byte
  EXPECT_EQ(invalid_utf8_at("\xF8\x88\x80\x80\x80"), 0);   // a 5-byte form
  EXPECT_EQ(invalid_utf8_at("\xE2\x82\xAC \xF0\x9F\x98\x80"), -1);  // U+20AC, U+1F600
}

TEST(Utf8, RandomBytesAgreeWithTheReference) {
  std::mt19937 rng(5);
  // Bytes drawn mostly from the interesting ranges: ASCII, continuation bytes and lead bytes.
  const unsigned char pool[] = {0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  std::uniform_int_distribution<size_t> pick(0, sizeof(pool) - 1), len(0, 12);
  for (int trial = 0; trial < 200000; ++trial) {
    std::string s;
    for (size_t n = len(rng); n > 0; --n) s += char(pool[pick(rng)]);
    ASSERT_EQ(invalid_utf8_at(s), reference_invalid_at(s)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tessel
