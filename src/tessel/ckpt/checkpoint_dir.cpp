#include "tessel/ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "tessel/core/check.h"

namespace tessel::ckpt {

namespace fs = std::filesystem;

namespace {

// The PID a temporary save entry's name ends with ("step_00000010.tmp-1234" -> 1234), if any.
std::optional<pid_t> save_owner(const std::string& name) {
  if (name.rfind("step_", 0) != 0 && name.rfind("latest", 0) != 0) return std::nullopt;
  for (const char* marker : {".tmp-", ".old-"}) {
    const size_t at = name.rfind(marker);
    if (at == std::string::npos) continue;
    const std::string digits = name.substr(at + std::strlen(marker));
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    return pid_t(std::stol(digits));
  }
  return std::nullopt;
}

// Whether pid is a live process. A killed process that no one has reaped yet (a zombie: under
// mpirun, a rank killed with its job whose parent has gone) still has a PID but runs nothing.
bool process_running(pid_t pid) {
  if (std::ifstream stat("/proc/" + std::to_string(pid) + "/stat"); stat.good()) {
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // "pid (comm) state ...": comm may hold spaces and parentheses
    return close == std::string::npos || close + 2 >= line.size() || (line[close + 2] != 'Z' && line[close + 2] != 'X');
  }
  if (fs::exists("/proc/self/stat")) return false;  // /proc is mounted and has no such process
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "cannot create checkpoint.dir '{}': {}", dir, ec.message());
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd_ >= 0, "cannot open the lock file '{}' of checkpoint.dir: {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    TESSEL_CHECK(err == EWOULDBLOCK, "cannot lock '{}' of checkpoint.dir: {}", path, std::strerror(err));
    std::string holder(buf, size_t(std::max<ssize_t>(n, 0)));
    holder.erase(holder.find_last_not_of(" \n") + 1);
    TESSEL_FAIL("checkpoint.dir '{}' is in use by another run (PID {}, holding {}): two runs on one directory would "
                "prune each other's checkpoints; wait for that run to end or set another checkpoint.dir",
                dir, holder.empty() ? "unknown" : holder, path);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // The PID only names the holder in messages: failing to record it does not stop the run.
  const bool recorded = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == ssize_t(pid.size());
  (void)recorded;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::vector<std::string> remove_stale_saves(const std::string& dir) {
  std::vector<std::string> stale;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto owner = save_owner(e.path().filename().string());
    if (owner && *owner != ::getpid() && !process_running(*owner)) stale.push_back(e.path().string());
  }
  for (const auto& p : stale) {
    fs::remove_all(p, ec);
    TESSEL_CHECK(!ec, "cannot remove '{}', left by an interrupted save: {}", p, ec.message());
  }
  return stale;
}

}  // namespace tessel::ckpt
