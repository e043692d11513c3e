#pragma once
// Runs the processes of a LaunchPlan to the end, as fleetrun does, and makes sure none
// outlives the launcher, nor anything they started:
//  - each process gets its own process group (a Ctrl-C at the terminal reaches the
//    launcher, which stops the job in order) and PR_SET_PDEATHSIG(SIGKILL), so it dies
//    with the launcher even when the launcher is killed with -9; the launcher is a
//    child subreaper, so processes they leave behind are reparented to it and reaped;
//  - the parent-death signal reaches only the launcher's own children, not what a wrapper
//    script forked, so a watchdog process holds the rest: forked by Start() before the
//    children, in a process group of its own and deaf to SIGINT/SIGTERM/SIGHUP, it reads
//    the children's process groups from a pipe whose write end only the launcher holds
//    (each child registers its group itself, between fork and exec, so nothing it starts
//    can exist unregistered; the launcher unregisters a group once it has killed it). When
//    that pipe reaches end of file the launcher is gone, however it died (kill -9 included),
//    and the watchdog SIGKILLs every group still registered, then exits. A descendant that
//    leaves its process group (setsid, a shell with job control) is out of reach;
//  - whatever a process leaves in its group when it exits is SIGKILLed then;
//  - stdout and stderr go to the process's log file; the first local worker's log is
//    copied to the launcher's stdout as it grows;
//  - when every worker has exited 0, the servers and heter workers get stop_wait to exit
//    by themselves, then SIGTERM, then SIGKILL after kill_grace; exit code 0. On a node
//    that runs no worker (multi-node), they run until they exit by themselves (they do once
//    the job's trainers have ended) or the launcher is signalled;
//  - a heter worker that fails while workers still run, killed by a signal or with an exit
//    code other than 1 (a cpu-trainer failed) and 2 (a bad configuration), is started
//    again, its log appended to, up to heter_restarts times: with fleetps.heter.failover
//    the cpu-trainers take it back (the rule of the systemd unit's Restart=on-failure);
//  - when any other process fails (non-zero exit or a signal it was not sent by the launcher),
//    the launcher waits 200 ms for the failures it causes, names every process that has
//    failed with the tail of its log, stops the others (SIGTERM to each process group,
//    SIGKILL after kill_grace; the workers first, whose graceful stop pushes to the servers)
//    and returns the first failure's exit code (128+signal when killed by one);
//    SIGINT/SIGTERM/SIGHUP to the launcher stop everything likewise, but the servers and heter
//    workers get stop_wait to exit by themselves after the workers (the pservers save once
//    more then, with periodic saves on);
//  - when the job has ended, each process's CPU time (user + system, its own children
//    included) and peak resident memory, from wait4's rusage, and the CPU time summed by
//    role: what a job cost, and how the roles share the machine.
// Thread-safety: one thread. Start() blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP in the calling
// thread (they are taken synchronously with sigtimedwait); the destructor restores the mask.

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/launch/launch_plan.h"

namespace fleetps::launch {

struct SupervisorOptions {
  std::chrono::milliseconds stop_wait{5000};   // after the workers: servers may exit by themselves
  std::chrono::milliseconds kill_grace{5000};  // SIGTERM -> SIGKILL
  int stream_fd = 1;                           // where the first worker's output is copied; -1: nowhere
  int message_fd = 2;                          // the launcher's own messages ("fleetps-launch: ...")
  size_t tail_lines = 30;                      // lines of a failing process's log to print
  uint32_t heter_restarts = 0;                 // times each heter worker may be started again
};

class Supervisor {
 public:
  Supervisor(LaunchPlan plan, SupervisorOptions options);
  ~Supervisor();  // SIGKILLs whatever still runs, restores the signal mask
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the watchdog, creates the log directory and starts every process of the plan
  // (servers first). On an error (a log file cannot be created, fork fails) the processes
  // already started are stopped.
  Status Start();
  // Blocks until the job has ended and every process is gone; returns the exit code.
  int Wait();
  // The pid of each process of the plan, in plan order (-1: not started).
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    ProcessSpec spec;
    pid_t pid = -1;
    bool exited = false;
    bool signalled = false;  // the launcher sent it SIGTERM/SIGKILL
    int code = 0;            // exit code, or 128 + signal
    std::string how;         // "exited with code 3", "was killed by signal 9 (Killed)"
    rusage usage{};          // valid once exited; with restarts, summed over every run
    uint32_t restarts = 0;
  };
  int Supervise();  // Wait without the resource report
  // Forks the watchdog (see the header comment).
  Status StartWatchdog();
  // Forks and execs c's program; `append`: after a restart, its log is appended to.
  Status StartChild(Child* c, bool append = false);
  // Whether the failed child c is to be started again (see the header comment).
  bool Restartable(const Child& c) const;
  void Reap();  // collects every exited child (and reparented orphans) without blocking
  void Pump();  // copies the streamed worker's new output
  // Stops every running process: SIGTERM to its group, SIGKILL after kill_grace; the
  // workers first, then (with servers_may_end, after up to stop_wait for them to exit by
  // themselves) the servers and heter workers.
  void StopAll(const std::string& why, bool servers_may_end = false);
  // SIGTERM to the running children `pick` selects; SIGKILL to those left after kill_grace.
  template <typename Pick>
  void Terminate(Pick pick);
  // Waits for a SIGCHLD at most `at_most`, then reaps and pumps.
  void WaitForChildren(std::chrono::milliseconds at_most);
  void ReportFailure(const Child& c);
  void ReportResources() const;
  // Records c's end; SIGKILLs what it left in its process group and unregisters the group.
  void Collect(Child* c, int status, const rusage& usage);
  void Message(const std::string& text) const;

  SupervisorOptions options_;
  std::string log_dir_;
  std::vector<Child> children_;
  int stream_child_ = -1;      // index into children_ of the streamed worker
  int stream_in_ = -1;         // read side of its log
  bool stream_ok_ = true;      // false once stream_fd stopped taking output
  std::optional<int> failed_;  // index of the first failed child
  pid_t watchdog_ = -1;
  int lifeline_ = -1;  // write end of the watchdog's pipe (close-on-exec)
  sigset_t old_mask_;
  bool mask_set_ = false;
  std::chrono::steady_clock::time_point started_;
};

// Runs the plan: Start, then Wait. Returns the process exit code (2 when it cannot start).
int RunLaunchPlan(LaunchPlan plan, SupervisorOptions options);

}  // namespace fleetps::launch
