#pragma once
// The checkpoint directory as a resource of one run: an exclusive lock (two runs on one directory
// would prune each other's checkpoints) and the cleanup of what interrupted saves left behind.
#include <string>
#include <vector>

namespace tessel::ckpt {

// Holds an exclusive flock on DIR/.lock (created with DIR) for its lifetime; the kernel releases it
// when the process dies. The file holds the holder's PID, named when a second run is refused.
class CheckpointDirLock {
 public:
  explicit CheckpointDirLock(const std::string& dir);  // throws naming dir and the holder's PID
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes the step_N.tmp-PID / step_N.old-PID directories and latest.tmp-PID files of saves whose
// process (PID) is no longer running, and never this process's. Returns the removed paths.
std::vector<std::string> remove_stale_saves(const std::string& dir);

}  // namespace tessel::ckpt
