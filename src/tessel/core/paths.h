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

}  // namespace tessel
