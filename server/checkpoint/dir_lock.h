#pragma once
// DirLock: one save at a time per checkpoint directory (docs/STORAGE.md).
//
// Each pserver has its own lock file in DIR, ServerLockName(i) (".lock-server-<i>"), held
// with flock(2) LOCK_EX while that server writes its part of a save into DIR; a commit holds
// the lock files of every server of the save, so it never removes the temporary files of a
// part that is being written. Parts of one save on different servers take different files
// and run in parallel. The holder writes what it is (pid, host, operation, since when) into
// the file, and a refused caller quotes it.
//
// The kernel drops the lock when the holder exits, however it exits, so a crashed save never
// leaves DIR locked; the lock file itself stays (an empty or stale description is harmless).
// On NFS, flock is emulated with byte-range locks, which also exclude other machines.
//
// Thread-safety: a DirLock is owned by one caller; distinct DirLock objects (also in one
// process, each with its own open file) exclude each other. Not copyable.

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace fleetps::server {

// ".lock-server-00003": server i's lock file in a checkpoint directory.
std::string ServerLockName(uint32_t server);

class DirLock {
 public:
  // Takes DIR/`name` (created when absent) without waiting and writes `purpose` with this
  // process's pid and host into it. Busy when it is held: the message names DIR, the lock
  // file and what its holder wrote. NotFound when DIR does not exist; IOError otherwise.
  static StatusOr<std::unique_ptr<DirLock>> Acquire(const std::string& dir, const std::string& name,
                                                    const std::string& purpose);
  // Unlocks.
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  DirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;  // open, flock-ed
};

}  // namespace fleetps::server
