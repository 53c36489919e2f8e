#pragma once
// UTF-8 well-formedness (The Unicode Standard, section 3.9, table 3-7 "Well-Formed UTF-8 Byte
// Sequences"): shortest forms only (no overlong encodings such as C0 80 for U+0000), no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. Text a YAML or JSON writer must carry as it was read.
#include <cstdint>
#include <string_view>

namespace tessel {

// The byte offset of the first byte of s that does not begin or continue a well-formed sequence,
// or -1 when all of s is well-formed UTF-8.
int64_t invalid_utf8_at(std::string_view s);

}  // namespace tessel
