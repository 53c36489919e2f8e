#pragma once
// JSON text from a user's file, parsed without letting nlohmann's exceptions out. nlohmann refuses
// text in two ways: a syntax error (parse_error, which carries its byte) and a number literal past
// the range of a double, such as 1e400 (out_of_range.406, which does not). Readers that caught
// parse_error alone let the second escape raw (found by fuzzing the safetensors header). Used by
// the JSONL documents reader here and by the checkpoint readers in ckpt/.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tessel::data {

// The parsed value, or nullopt with `problem` set to what is wrong, for the caller's message:
// "syntax error at byte B of N" or "a number past the range of a double '1e400'".
std::optional<nlohmann::json> parse_json(std::string_view text, std::string& problem);

}  // namespace tessel::data
