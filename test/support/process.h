#pragma once
// Test support: child processes (the real pserver / cpu-trainer binaries) and free
// loopback ports, for integration and end-to-end tests.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fleetps::testing {

// The build tree the tests run from: FLEETPS_TEST_BINARY_DIR when set (a copy of the
// tree's binaries elsewhere, e.g. scripts/device_check.sh on a GPU machine), else the tree
// they were built in.
std::string BinaryDir();
// Path of a binary built by this tree, e.g. BinaryPath("server/pserver").
std::string BinaryPath(const std::string& relative);
// A fresh empty directory under BinaryDir()'s Testing/tmp. It is removed when the test case
// that made it ends with every assertion passed, and kept when the case fails (to be read);
// FLEETPS_KEEP_TEST_TMP=1 keeps every one. A directory made outside a test case, or by
// MakeRunTempDir (data shared by several cases), is removed when the whole run has passed.
std::string MakeTempDir(const std::string& prefix);
std::string MakeRunTempDir(const std::string& prefix);
void WriteFile(const std::string& path, const std::string& text);
std::string ReadFile(const std::string& path);

// Resident memory of a process, bytes (VmRSS of /proc/<pid>/status); 0 once it has exited.
uint64_t ResidentBytes(pid_t pid);

// Returns `n` distinct TCP ports that were free on 127.0.0.1 a moment ago.
// A base port such that base + each of `offsets` is free, taken from below Linux's ephemeral
// range (32768 up), so that no outgoing connection of a concurrent test can take one of them
// between this check and the bind of the process that uses it. For scripts that derive
// several ports from one base.
uint16_t FreePortBase(const std::vector<uint16_t>& offsets);
std::vector<uint16_t> FreePorts(int n);
// True once something accepts connections on 127.0.0.1:port (polls until timeout).
bool WaitForPort(uint16_t port, std::chrono::milliseconds timeout);

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();  // SIGKILLs a still-running child
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] with argv; `env` is added to the current environment. stdout and
  // stderr go to `log_path` (appended).
  bool Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_path);
  void Signal(int signo);
  // Waits for exit; returns the exit code, 128+signal when killed, -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool running();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

}  // namespace fleetps::testing
