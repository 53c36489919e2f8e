#pragma once
// Questions about a path that a user typed (a config value, a command-line argument), answered
// without throwing: std::filesystem's throwing forms raise filesystem_error for a name the system
// refuses outright (longer than NAME_MAX, a component under a file), which is bad input like any
// other and must reach the user as a tessel::Error naming the setting. A path that cannot be
// examined is neither an existing file nor a directory.
#include <filesystem>
#include <string>
#include <system_error>

namespace tessel {

inline bool path_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

inline bool is_directory_path(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

inline bool is_regular_file_path(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// Whether `inner` names `outer` or something under it, after resolving both (symbolic links, "..",
// a relative path against the working directory; parts that do not exist yet are taken as written).
// A command that writes `inner` while it reads `outer` would overwrite its own input.
inline bool path_is_or_is_under(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  const auto resolved = [&ec](const std::string& p) {
    const std::filesystem::path abs = std::filesystem::absolute(p, ec);
    return ec ? abs : std::filesystem::weakly_canonical(abs, ec);
  };
  const std::filesystem::path a = resolved(inner);
  if (ec) return false;
  const std::filesystem::path b = resolved(outer);
  if (ec) return false;
  const std::filesystem::path rel = a.lexically_relative(b);  // "." when equal, "../x" when outside
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace tessel
