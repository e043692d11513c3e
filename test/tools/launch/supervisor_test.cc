// fleetps-launch's supervision with small shell processes: a clean end, a failing process
// stopping the others, a heter worker started again, SIGKILL for one that ignores SIGTERM,
// and nothing left behind.
#include "tools/launch/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "test/support/process.h"

namespace fleetps::launch {
namespace {

ProcessSpec Shell(Role role, uint32_t index, const std::string& script, const std::string& dir) {
  ProcessSpec s;
  s.role = role;
  s.local_index = index;
  s.endpoint = "127.0.0.1:0";
  s.argv = {"/bin/sh", "-c", script};
  s.env = {{"ROLE_INDEX", std::to_string(index)}};
  const char* log = role == Role::kServer ? "serverlog." : role == Role::kWorker ? "workerlog." : "heterlog.";
  s.log_path = dir + "/" + log + std::to_string(index);
  return s;
}

// True when `pid` is gone or a zombie (its process no longer runs).
bool Gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || line.substr(close + 2, 1) == "Z";
}

// Gone(pid) within `limit`: a process sent SIGKILL dies when the kernel next schedules it,
// and an orphan's zombie is reaped by init, neither at once on a loaded machine.
bool GoneWithin(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!Gone(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

struct Run {
  std::string dir = testing::MakeTempDir("supervisor");
  std::string stream_path = dir + "/stream.out", message_path = dir + "/messages.out";
  int code = -1;
  std::vector<pid_t> pids;
  uint32_t heter_restarts = 0;

  void Go(LaunchPlan plan, std::chrono::milliseconds kill_grace = std::chrono::milliseconds(5000)) {
    plan.log_dir = dir;
    SupervisorOptions o;
    o.stop_wait = std::chrono::milliseconds(0);
    o.kill_grace = kill_grace;
    o.heter_restarts = heter_restarts;
    o.stream_fd = ::open(stream_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    o.message_fd = ::open(message_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    {
      Supervisor sup(std::move(plan), o);
      REQUIRE(sup.Start().ok());
      pids = sup.pids();
      code = sup.Wait();
    }
    ::close(o.stream_fd);
    ::close(o.message_fd);
  }
  std::string Messages() const { return testing::ReadFile(message_path); }
};

TEST_CASE("Workers that exit 0 end the job with 0; a server still running is stopped; worker 0 is streamed") {
  Run run;
  LaunchPlan plan;
  plan.processes = {Shell(Role::kServer, 0, "echo server up; exec sleep 60", run.dir),
                    // Worker 0 ends only after the server has written its line: otherwise the
                    // server can be stopped before its shell ever runs `echo`.
                    Shell(Role::kWorker, 0,
                          "while [ ! -s '" + run.dir +
                              "/serverlog.0' ]; do sleep 0.01; done; "
                              "echo worker $ROLE_INDEX says hi; echo done",
                          run.dir),
                    Shell(Role::kWorker, 1, "echo worker $ROLE_INDEX here", run.dir)};
  run.Go(std::move(plan));
  INFO(run.Messages());
  CHECK(run.code == 0);
  CHECK(testing::ReadFile(run.stream_path) == "worker 0 says hi\ndone\n");
  CHECK(testing::ReadFile(run.dir + "/workerlog.1") == "worker 1 here\n");
  CHECK(testing::ReadFile(run.dir + "/serverlog.0") == "server up\n");
  CHECK_THAT(run.Messages(), Catch::Contains("started server 0 (pid ") &&
                                 Catch::Contains("stopping 1 process(es): the workers have finished"));
  for (pid_t p : run.pids) CHECK(Gone(p));
}

TEST_CASE("A node without workers (multi-node): its servers run until they exit by themselves") {
  Run run;
  LaunchPlan plan;
  // The servers of a pserver-only node: they end when the job's trainers (elsewhere) have.
  plan.processes = {Shell(Role::kServer, 0, "sleep 0.5; echo job ended", run.dir),
                    Shell(Role::kServer, 1, "sleep 0.7; echo job ended", run.dir)};
  run.Go(std::move(plan));
  const std::string messages = run.Messages();
  INFO(messages);
  CHECK(run.code == 0);
  CHECK_THAT(messages, !Catch::Contains("stopping") && Catch::Contains("every process exited 0"));
  CHECK(testing::ReadFile(run.dir + "/serverlog.0") == "job ended\n");
  CHECK(testing::ReadFile(run.dir + "/serverlog.1") == "job ended\n");
}

TEST_CASE("When the job ends, the launcher reports each process's CPU time and peak memory, and the sum by role") {
  Run run;
  LaunchPlan plan;
  // Worker 0 spins in its shell for a fraction of a second of CPU; worker 1 exits at once.
  plan.processes = {Shell(Role::kServer, 0, "exec sleep 60", run.dir),
                    Shell(Role::kWorker, 0, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done", run.dir),
                    Shell(Role::kWorker, 1, "exit 0", run.dir)};
  run.Go(std::move(plan));
  const std::string messages = run.Messages();
  INFO(messages);
  REQUIRE(run.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(messages, m,
                            std::regex(R"(worker 0 \(pid \d+\): ([0-9.]+) s CPU \(user ([0-9.]+), system ([0-9.]+)\), )"
                                       R"(max RSS ([0-9.]+) MiB)")));
  const double cpu = std::stod(m[1]), user = std::stod(m[2]), sys = std::stod(m[3]), rss = std::stod(m[4]);
  CHECK(cpu > 0.05);  // the loop's CPU, not wall time: the job sleeps in no worker
  CHECK(std::abs(cpu - user - sys) < 0.011);
  CHECK(rss > 0.1);
  REQUIRE(std::regex_search(messages, m, std::regex(R"(worker 1 \(pid \d+\): ([0-9.]+) s CPU)")));
  CHECK(std::stod(m[1]) < cpu);
  // The server was stopped by the launcher and is reported too; the role sums follow.
  CHECK_THAT(messages, Catch::Contains("server 0 (pid "));
  REQUIRE(std::regex_search(messages, m, std::regex(R"(CPU seconds by role: server ([0-9.]+); worker ([0-9.]+)\n)")));
  CHECK(std::stod(m[2]) >= cpu - 0.011);
}

TEST_CASE("A failing worker stops every other process; the launcher exits with its code and its log's tail") {
  Run run;
  LaunchPlan plan;
  plan.processes = {Shell(Role::kServer, 0, "exec sleep 60", run.dir),
                    Shell(Role::kWorker, 0, "exec sleep 60", run.dir),
                    Shell(Role::kWorker, 1, "echo reading data; echo 'bad line 7' >&2; exit 3", run.dir)};
  run.Go(std::move(plan));
  const std::string messages = run.Messages();
  INFO(messages);
  CHECK(run.code == 3);
  CHECK_THAT(messages, Catch::Contains("worker 1 (pid ") && Catch::Contains("exited with code 3") &&
                           Catch::Contains("workerlog.1") && Catch::Contains("  | bad line 7") &&
                           Catch::Contains("stopping 2 process(es): worker 1 failed"));
  for (pid_t p : run.pids) CHECK(Gone(p));
}

TEST_CASE("On a stop the workers get SIGTERM first; the servers only once the workers are gone") {
  Run run;
  const std::string order = run.dir + "/order";
  // A worker that takes 300 ms to stop (a trainer pushing what it trained), and a server that
  // stops at once: in order, the server's line comes after the worker's.
  const std::string worker =
      "trap 'sleep 0.3; echo worker >> " + order + "; exit 0' TERM; while true; do sleep 0.05; done";
  const std::string server = "trap 'echo server >> " + order + "; exit 0' TERM; while true; do sleep 0.05; done";
  LaunchPlan plan;
  plan.processes = {Shell(Role::kServer, 0, server, run.dir), Shell(Role::kWorker, 0, worker, run.dir),
                    Shell(Role::kWorker, 1, "sleep 0.5; exit 3", run.dir)};
  run.Go(std::move(plan));
  INFO(run.Messages());
  CHECK(run.code == 3);
  CHECK(testing::ReadFile(order) == "worker\nserver\n");
  for (pid_t p : run.pids) CHECK(Gone(p));
}

TEST_CASE("A process killed by a signal fails the job with 128 + signal") {
  Run run;
  LaunchPlan plan;
  plan.processes = {Shell(Role::kServer, 0, "exec sleep 60", run.dir), Shell(Role::kWorker, 0, "kill -9 $$", run.dir)};
  run.Go(std::move(plan));
  INFO(run.Messages());
  CHECK(run.code == 128 + SIGKILL);
  CHECK_THAT(run.Messages(), Catch::Contains("worker 0") && Catch::Contains("was killed by signal 9"));
}

TEST_CASE("A heter worker that dies is started again while the workers run; its log is appended to") {
  Run run;
  run.heter_restarts = 1;
  LaunchPlan plan;
  // The first run dies of SIGKILL; the second serves until the launcher stops it.
  const std::string died = "'" + run.dir + "/died'";
  plan.processes = {
      Shell(Role::kHeterWorker, 0,
            "if [ -e " + died +
                " ]; then echo second run; exec sleep 60; fi; "
                "touch " +
                died + "; echo first run; kill -9 $$",
            run.dir),
      // The worker ends once the second run has logged: the restart comes first.
      Shell(Role::kWorker, 0, "while ! grep -q 'second run' '" + run.dir + "/heterlog.0'; do sleep 0.01; done; exit 0",
            run.dir)};
  run.Go(std::move(plan));
  const std::string messages = run.Messages();
  INFO(messages);
  CHECK(run.code == 0);
  CHECK(std::regex_search(messages, std::regex(R"(heter worker 0 \(pid \d+\) was killed by signal 9 \(Killed\); )"
                                               R"(started again as pid \d+ \(restart 1 of 1\))")));
  CHECK(testing::ReadFile(run.dir + "/heterlog.0") ==
        "first run\nfleetps-launch: heter worker 0 was killed by signal 9 (Killed); started again (restart 1)\n"
        "second run\n");
  for (pid_t p : run.pids) CHECK(Gone(p));
}

TEST_CASE("A heter worker fails the job once its restarts are used, or at once with exit code 1 or 2") {
  const bool config_error = GENERATE(false, true);
  Run run;
  run.heter_restarts = 1;
  LaunchPlan plan;
  plan.processes = {Shell(Role::kHeterWorker, 0, config_error ? "echo bad yaml >&2; exit 2" : "kill -9 $$", run.dir),
                    Shell(Role::kWorker, 0, "exec sleep 60", run.dir)};
  run.Go(std::move(plan));
  const std::string messages = run.Messages();
  INFO(messages);
  if (config_error) {
    CHECK(run.code == 2);
    CHECK_THAT(messages, !Catch::Contains("started again"));
  } else {
    CHECK(run.code == 128 + SIGKILL);
    CHECK_THAT(messages, Catch::Contains("(restart 1 of 1)") &&
                             Catch::Contains("the job failed: heter worker 0 was killed by signal 9"));
  }
  for (pid_t p : run.pids) CHECK(Gone(p));
}

TEST_CASE("A process that ignores SIGTERM is killed after the grace period; its children go with it") {
  Run run;
  LaunchPlan plan;
  // The server ignores SIGTERM and leaves a grandchild in its process group.
  plan.processes = {
      Shell(Role::kServer, 0, "trap '' TERM; sleep 60 & echo $! > " + run.dir + "/grandchild; wait", run.dir),
      Shell(Role::kWorker, 0, "sleep 0.5; exit 1", run.dir)};
  run.Go(std::move(plan), std::chrono::milliseconds(200));
  INFO(run.Messages());
  CHECK(run.code == 1);
  CHECK_THAT(run.Messages(), Catch::Contains("did not stop within 0.2 s of SIGTERM: SIGKILL"));
  for (pid_t p : run.pids) CHECK(Gone(p));
  const pid_t grandchild = std::stoi(testing::ReadFile(run.dir + "/grandchild"));
  CHECK(GoneWithin(grandchild, std::chrono::milliseconds(10000)));
}

TEST_CASE("A program that cannot be run fails the job with 127 and says why in its log") {
  Run run;
  LaunchPlan plan;
  ProcessSpec s = Shell(Role::kWorker, 0, "", run.dir);
  s.argv = {run.dir + "/no-such-trainer"};
  plan.processes = {s};
  run.Go(std::move(plan));
  CHECK(run.code == 127);
  CHECK_THAT(run.Messages(), Catch::Contains("cannot run " + run.dir + "/no-such-trainer: No such file"));
}

TEST_CASE("Children do not inherit the launcher's role variables, only their own") {
  Run run;
  ::setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:1,127.0.0.1:2", 1);
  ::setenv("FLEETPS_KEEP_ME", "kept", 1);
  LaunchPlan plan;
  ProcessSpec s =
      Shell(Role::kWorker, 0, "echo \"[$PADDLE_TRAINER_ENDPOINTS][$FLEETPS_KEEP_ME][$TRAINING_ROLE]\"", run.dir);
  s.env["TRAINING_ROLE"] = "TRAINER";
  plan.processes = {s};
  run.Go(std::move(plan));
  ::unsetenv("PADDLE_TRAINER_ENDPOINTS");
  ::unsetenv("FLEETPS_KEEP_ME");
  CHECK(run.code == 0);
  CHECK(testing::ReadFile(run.dir + "/workerlog.0") == "[][kept][TRAINER]\n");
}

// The pids listed in `path`, one a complete line each.
std::vector<pid_t> ReadPids(const std::string& path) {
  std::istringstream in(testing::ReadFile(path));
  std::vector<pid_t> pids;
  std::string line;
  while (std::getline(in, line) && !in.eof()) pids.push_back(std::stoi(line));
  return pids;
}

TEST_CASE("kill -9 of fleetps-launch ends every process of the job, also those a wrapper script forked") {
  const std::string dir = testing::MakeTempDir("launch_kill9");
  const std::string pids = dir + "/pids";
  // Rank 0 runs its program through exec; rank 1 is a wrapper that forks a background job
  // and a shell with a child of its own, then waits. Each process writes its pid.
  testing::WriteFile(dir + "/wrapper.sh", "echo $$ >> " + pids + "\n" +
                                              "if [ \"$PADDLE_TRAINER_ID\" = 0 ]; then exec sleep 1000; fi\n" +
                                              "sleep 1000 & echo $! >> " + pids + "\n" + "sh -c 'echo $$ >> " + pids +
                                              "; sleep 1000 & echo $! >> " + pids + "; wait' &\n" + "wait\n");
  testing::ChildProcess launcher;
  REQUIRE(launcher.Start({testing::BinaryPath("tools/launch/fleetps-launch"), "--nproc_per_node", "2", "--log_dir",
                          dir + "/log", "/bin/sh", dir + "/wrapper.sh"},
                         {}, dir + "/launcher.out"));
  // Rank 0, and rank 1 with its background sleep, its shell and that shell's sleep.
  constexpr size_t kTree = 5;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ReadPids(pids).size() < kTree && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<pid_t> tree = ReadPids(pids);
  INFO(testing::ReadFile(dir + "/launcher.out"));
  REQUIRE(tree.size() == kTree);
  launcher.Signal(SIGKILL);
  CHECK(launcher.Wait(std::chrono::seconds(10)) == 128 + SIGKILL);
  // "Gone" within a generous bound: the processes die when the kernel next runs them.
  for (pid_t p : tree) {
    INFO("pid " << p);
    if (!GoneWithin(p, std::chrono::milliseconds(30000))) {
      FAIL_CHECK("outlived the launcher");
      ::kill(p, SIGKILL);  // still running, so still that process: leave nothing behind
    }
  }
}

}  // namespace
}  // namespace fleetps::launch
