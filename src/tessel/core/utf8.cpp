#include "tessel/core/utf8.h"

namespace tessel {

int64_t invalid_utf8_at(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: the sequence's length and the range its second byte must fall in (table 3-7).
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      if (b == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
      if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      if (b == 0xF0) lo = 0x90;  // no overlong 4-byte forms
      if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return int64_t(i);  // a continuation byte without a lead, C0, C1 or F5..FF
    }
    for (size_t k = 1; k < n; ++k) {
      if (i + k >= s.size()) return int64_t(i);  // cut short
      const unsigned char c = byte(i + k);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return int64_t(i);
    }
    i += n;
  }
  return -1;
}

}  // namespace tessel
