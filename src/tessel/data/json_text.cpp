#include "tessel/data/json_text.h"

#include <algorithm>

#include <fmt/format.h>

namespace tessel::data {

std::optional<nlohmann::json> parse_json(std::string_view text, std::string& problem) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The parser's own text quotes the offending bytes back; the position is what a user can act on.
    problem = fmt::format("syntax error at byte {} of {}", std::min<size_t>(e.byte, text.size()), text.size());
  } catch (const nlohmann::json::out_of_range& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'": keep the number, shortened.
    const std::string what = e.what();
    const size_t quote = what.find('\'');
    std::string number = quote == std::string::npos ? std::string() : what.substr(quote);
    if (number.size() > 40) number = number.substr(0, 37) + "...";
    problem = fmt::format("a number past the range of a double {}", number);
  }
  return std::nullopt;
}

}  // namespace tessel::data
