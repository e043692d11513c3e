// Checkpoint directory helpers: request path confinement (ConfineCheckpointPath) and the
// per-server lock files (DirLock).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/dir_lock.h"
#include "test/support/process.h"

namespace fleetps::server {
namespace {

namespace fs = std::filesystem;

// The error of a refused request (fails the test when it was accepted).
std::string Refusal(const std::string& root, const std::string& requested) {
  auto confined = ConfineCheckpointPath(root, requested);
  CAPTURE(root, requested);
  REQUIRE_FALSE(confined.ok());
  CHECK(confined.status().IsInvalidArgument());
  return confined.status().message();
}

TEST_CASE("ConfineCheckpointPath: relative paths below the root are accepted, normalised", "[checkpoint]") {
  const std::string root = testing::MakeTempDir("confine");
  auto ok = [&](const std::string& requested) {
    auto confined = ConfineCheckpointPath(root, requested);
    CAPTURE(requested);
    REQUIRE(confined.ok());
    return *confined;
  };
  CHECK(ok("ckpt") == root + "/ckpt");
  CHECK(ok("jobs/a/day1") == root + "/jobs/a/day1");  // need not exist yet
  CHECK(ok("a//b/./c/") == root + "/a/b/c");
  CHECK(ok("./a") == root + "/a");
  CHECK(ok("a/.") == root + "/a");
  CHECK(ok("...") == root + "/...");  // a name, not a parent
  CHECK(ok("a..b/..c") == root + "/a..b/..c");
  // The root's own spelling: a trailing '/' or "." components do not matter.
  CHECK(*ConfineCheckpointPath(root + "/", "x") == root + "/x");
  CHECK(*ConfineCheckpointPath(root + "/./", "x") == root + "/x");
  // A symlink that stays inside the root is fine.
  fs::create_directories(root + "/real/inner");
  fs::create_directory_symlink(root + "/real", root + "/alias");
  CHECK(ok("alias/inner") == root + "/alias/inner");
  // So is a root that is itself a symlink.
  const std::string link_root = testing::MakeTempDir("confine_link") + "/root";
  fs::create_directory_symlink(root, link_root);
  CHECK(*ConfineCheckpointPath(link_root, "ckpt") == link_root + "/ckpt");
}

TEST_CASE("ConfineCheckpointPath: refuses absolute paths, '..', NUL, the root itself, empty", "[checkpoint]") {
  const std::string root = testing::MakeTempDir("confine_bad");
  CHECK(Refusal(root, "").find("empty") != std::string::npos);
  CHECK(Refusal(root, "/etc").find("absolute") != std::string::npos);
  Refusal(root, "//etc/passwd");
  Refusal(root, root + "/inside");  // absolute even when it points inside
  for (const char* dotdot : {"..", "../x", "a/../b", "a/..", "a/b/../../..", "a/./../../x", "../", "x/../../.."}) {
    CHECK(Refusal(root, dotdot).find("'..'") != std::string::npos);
  }
  CHECK(Refusal(root, std::string("a\0/../../etc", 12)).find("NUL") != std::string::npos);
  CHECK(Refusal(root, std::string("ckpt\0", 5)).find("NUL") != std::string::npos);
  CHECK(Refusal(root, ".").find("root itself") != std::string::npos);
  Refusal(root, "./");
  Refusal(root, "a/b/.././..");  // ".." refused before anything else
}

TEST_CASE("ConfineCheckpointPath: a symlink that leaves the root is refused", "[checkpoint]") {
  const std::string root = testing::MakeTempDir("confine_sym");
  const std::string outside = testing::MakeTempDir("confine_outside");
  fs::create_directory_symlink(outside, root + "/escape");
  fs::create_directory_symlink("../", root + "/up");  // relative target
  fs::create_directories(root + "/a");
  fs::create_directory_symlink("/", root + "/a/slash");
  fs::create_directory_symlink(root, root + "/self");
  CHECK(Refusal(root, "escape").find("outside the checkpoint root") != std::string::npos);
  Refusal(root, "escape/ckpt");
  Refusal(root, "escape/deeper/not/yet/there");
  Refusal(root, "up/x");
  Refusal(root, "a/slash/etc");
  Refusal(root, "self");  // the root itself, through a link
  // A dangling link whose target would be outside.
  fs::create_symlink(outside + "/missing", root + "/dangling");
  Refusal(root, "dangling/x");
}

TEST_CASE("ConfineCheckpointPath: an empty root disables remote saves and loads", "[checkpoint]") {
  const std::string msg = Refusal("", "ckpt");
  CHECK(msg.find("disabled") != std::string::npos);
  CHECK(msg.find("server.checkpoint_root") != std::string::npos);
  CHECK(msg.find("server.save_dir") != std::string::npos);
}

TEST_CASE("DirLock: one holder at a time; the refusal names the directory and the holder", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("dirlock");
  CHECK(ServerLockName(3) == ".lock-server-00003");
  auto first = DirLock::Acquire(dir, ServerLockName(0), "part of save v1 on pserver 0");
  REQUIRE(first.ok());
  CHECK((*first)->path() == dir + "/.lock-server-00000");
  auto second = DirLock::Acquire(dir, ServerLockName(0), "part of save v2 on pserver 0");
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().IsBusy());
  const std::string& msg = second.status().message();
  CHECK(msg.find("checkpoint directory " + dir) != std::string::npos);
  CHECK(msg.find(".lock-server-00000") != std::string::npos);
  CHECK(msg.find("part of save v1 on pserver 0") != std::string::npos);
  CHECK(msg.find("pid " + std::to_string(getpid())) != std::string::npos);
  // Another server's lock file is independent.
  CHECK(DirLock::Acquire(dir, ServerLockName(1), "part of save v1 on pserver 1").ok());
  first->reset();
  auto third = DirLock::Acquire(dir, ServerLockName(0), "part of save v2 on pserver 0");
  REQUIRE(third.ok());
  // No directory.
  CHECK(DirLock::Acquire(dir + "/missing", ServerLockName(0), "x").status().IsNotFound());
}

TEST_CASE("DirLock: another process's lock refuses; its death releases it", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("dirlock_proc");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(ready[0]);
    auto lock = DirLock::Acquire(dir, ServerLockName(0), "a child process");
    const char c = lock.ok() ? '1' : '0';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();  // until killed: the lock is never released by the process itself
    _exit(0);
  }
  close(ready[1]);
  // The child goes whatever happens below.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{child};
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  REQUIRE(c == '1');
  auto refused = DirLock::Acquire(dir, ServerLockName(0), "the parent");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().IsBusy());
  CHECK(refused.status().message().find("pid " + std::to_string(child) + " ") != std::string::npos);
  CHECK(refused.status().message().find("a child process") != std::string::npos);
  kill(child, SIGKILL);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  reaper.pid = 0;
  CHECK(DirLock::Acquire(dir, ServerLockName(0), "the parent").ok());
}

}  // namespace
}  // namespace fleetps::server
