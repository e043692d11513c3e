#include "server/checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

namespace fleetps::server {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What the holder wrote (one line), or a placeholder when it has not written yet.
std::string HolderOf(int fd) {
  char buf[1024];
  ssize_t n;
  do {
    n = pread(fd, buf, sizeof(buf) - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return "an unknown holder (the lock file is empty)";
  std::string text(buf, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  for (char& c : text) {
    if (c == '\n' || c == '\0') c = ' ';
  }
  return text;
}

}  // namespace

std::string ServerLockName(uint32_t server) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), ".lock-server-%05u", server);
  return buf;
}

StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(const std::string& dir, const std::string& name,
                                                    const std::string& purpose) {
  const std::string path = dir + "/" + name;
  int fd;
  do {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("checkpoint directory " + dir + " does not exist");
    return Status::IOError("cannot open the lock file " + path + ": " + ErrnoText());
  }
  int r;
  do {
    r = flock(fd, LOCK_EX | LOCK_NB);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    const int err = errno;
    std::string holder = err == EWOULDBLOCK ? HolderOf(fd) : std::string();
    close(fd);
    if (err == EWOULDBLOCK) {
      return Status::Busy("checkpoint directory " + dir + " is in use by another save: " + path + " is held by " +
                          holder + " (one save per directory at a time; retry when it is done)");
    }
    errno = err;
    return Status::IOError("cannot lock " + path + ": " + ErrnoText());
  }
  std::unique_ptr<DirLock> lock(new DirLock(path, fd));
  // The description is for the message of a refused caller only: failing to write it does
  // not fail the lock.
  const std::string text =
      "pid " + std::to_string(getpid()) + " on host " + HostName() + ", " + purpose + ", since " + UtcNow() + "\n";
  if (ftruncate(fd, 0) == 0) {
    ssize_t w;
    do {
      w = pwrite(fd, text.data(), text.size(), 0);
    } while (w < 0 && errno == EINTR);
  }
  return lock;
}

DirLock::~DirLock() {
  flock(fd_, LOCK_UN);
  close(fd_);
}

}  // namespace fleetps::server
