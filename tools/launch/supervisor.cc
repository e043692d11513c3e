#include "tools/launch/supervisor.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace fleetps::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string Describe(int status, int* code) {
  if (WIFEXITED(status)) {
    *code = WEXITSTATUS(status);
    return "exited with code " + std::to_string(*code);
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    *code = 128 + sig;
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  *code = 1;
  return "ended with status " + std::to_string(status);
}

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path, std::ios::binary);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "  | " + l + "\n";
  return out.empty() ? "  | (empty)\n" : out;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

std::string Fixed1(double x) { return Fixed(x, 1); }

double CpuSeconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

// The watchdog's pipe carries one int32 per message: a process group to watch (> 0) or to
// forget (< 0). Writes of 4 bytes to a pipe are atomic, so messages never interleave.
void Send(int lifeline, pid_t group) {
  const int32_t message = static_cast<int32_t>(group);
  if (lifeline >= 0) (void)!::write(lifeline, &message, sizeof(message));
}

// The watchdog's life, in the forked process (async-signal-safe calls only: the launcher
// may have threads). `groups` has room for `capacity` groups, allocated before the fork;
// every child has at most one registered group at a time, so children_.size() suffice.
[[noreturn]] void Watch(int in, pid_t* groups, size_t capacity) {
  size_t n = 0;
  while (true) {
    int32_t message = 0;
    const ssize_t r = ::read(in, &message, sizeof(message));
    if (r < 0 && errno == EINTR) continue;
    if (r != static_cast<ssize_t>(sizeof(message))) break;  // end of file: the launcher is gone
    if (message > 0 && n < capacity) groups[n++] = message;
    for (size_t i = 0; message < 0 && i < n; ++i) {
      if (groups[i] == -message) {
        groups[i] = groups[--n];
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

Supervisor::Supervisor(LaunchPlan plan, SupervisorOptions options) : options_(options), log_dir_(plan.log_dir) {
  for (auto& spec : plan.processes) {
    Child c;
    c.spec = std::move(spec);
    if (stream_child_ < 0 && c.spec.role == Role::kWorker) stream_child_ = static_cast<int>(children_.size());
    children_.push_back(std::move(c));
  }
}

Supervisor::~Supervisor() {
  for (auto& c : children_) {
    if (c.pid > 0 && !c.exited) {
      ::kill(-c.pid, SIGKILL);
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
    }
  }
  if (lifeline_ >= 0) ::close(lifeline_);  // the watchdog's end of file: it exits
  if (watchdog_ > 0) ::waitpid(watchdog_, nullptr, 0);
  if (stream_in_ >= 0) ::close(stream_in_);
  if (mask_set_) ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::vector<pid_t> Supervisor::pids() const {
  std::vector<pid_t> out;
  for (const auto& c : children_) out.push_back(c.pid);
  return out;
}

void Supervisor::Message(const std::string& text) const {
  if (options_.message_fd < 0) return;
  const std::string line = "fleetps-launch: " + text + "\n";
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(options_.message_fd, line.data() + off, line.size() - off);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) off += static_cast<size_t>(n);
  }
}

Status Supervisor::Start() {
  started_ = Clock::now();
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  if (::sigprocmask(SIG_BLOCK, &set, &old_mask_) != 0) {
    return Status::Internal(std::string("sigprocmask: ") + std::strerror(errno));
  }
  mask_set_ = true;
  // A closed stdout must not kill the launcher (and with it, through PDEATHSIG, the job).
  ::signal(SIGPIPE, SIG_IGN);
  // Processes the children leave behind are reparented to the launcher, which reaps them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  RETURN_IF_ERROR(StartWatchdog());
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  if (ec) {
    return Status::IOError("cannot create the log directory " + log_dir_ + ": " + ec.message() +
                           " (choose another with --log_dir)");
  }
  for (auto& c : children_) {
    if (auto st = StartChild(&c); !st.ok()) {
      StopAll("a process could not be started");
      return st;
    }
    Message("started " + c.spec.Name() + " (pid " + std::to_string(c.pid) + ") " + c.spec.argv.front() + " on " +
            c.spec.endpoint + ", log " + c.spec.log_path);
  }
  if (stream_child_ >= 0) {
    stream_in_ = ::open(children_[stream_child_].spec.log_path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  return Status::OK();
}

Status Supervisor::StartWatchdog() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Status::IOError(std::string("pipe for the watchdog: ") + std::strerror(errno));
  }
  std::vector<pid_t> groups(children_.size());
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    if (null_fd >= 0) ::close(null_fd);
    return Status::IOError(std::string("fork for the watchdog: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[1]);  // the launcher's end: its death must reach the watchdog as end of file
    ::setpgid(0, 0);  // out of the launcher's group: a signal to that group spares it
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(s, SIG_IGN);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    if (null_fd >= 0) {  // holds no terminal and none of the launcher's output pipes open
      for (int fd : {0, 1, 2}) ::dup2(null_fd, fd);
    }
    Watch(fds[0], groups.data(), groups.size());
  }
  ::close(fds[0]);
  if (null_fd >= 0) ::close(null_fd);
  watchdog_ = pid;
  lifeline_ = fds[1];
  return Status::OK();
}

Status Supervisor::StartChild(Child* c, bool append) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (IsRoleVariable(key) || c->spec.env.count(key) != 0) continue;
    env_strings.push_back(kv);
  }
  for (const auto& [k, v] : c->spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : c->spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string exec_error = "fleetps-launch: cannot run " + c->spec.argv.front() + ": ";

  const int log_fd =
      ::open(c->spec.log_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (log_fd < 0) {
    return Status::IOError("cannot create " + c->spec.log_path + ": " + std::strerror(errno));
  }
  if (append) {
    const std::string mark = "fleetps-launch: " + c->spec.Name() + " " + c->how + "; started again (restart " +
                             std::to_string(c->restarts) + ")\n";
    (void)!::write(log_fd, mark.data(), mark.size());
  }
  const pid_t parent = ::getpid();
  const int lifeline = lifeline_;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log_fd);
    return Status::IOError("fork for " + c->spec.Name() + ": " + std::strerror(err));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl took effect
    // Registered with the watchdog before exec: nothing this process starts escapes it.
    Send(lifeline, ::getpid());
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(2, exec_error.data(), exec_error.size());
    const char* reason = ::strerror(err);
    (void)!::write(2, reason, std::strlen(reason));
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no window in which a signal to the group misses it
  ::close(log_fd);
  c->pid = pid;
  return Status::OK();
}

void Supervisor::Collect(Child* c, int status, const rusage& usage) {
  // Whatever it left in its process group goes with it; then the watchdog may forget the
  // group (its id may be reused once empty).
  ::kill(-c->pid, SIGKILL);
  Send(lifeline_, -c->pid);
  c->exited = true;
  c->how = Describe(status, &c->code);
  if (c->restarts == 0) {
    c->usage = usage;
    return;
  }
  // The earlier runs' time, and the largest peak.
  timeradd(&c->usage.ru_utime, &usage.ru_utime, &c->usage.ru_utime);
  timeradd(&c->usage.ru_stime, &usage.ru_stime, &c->usage.ru_stime);
  c->usage.ru_maxrss = std::max(c->usage.ru_maxrss, usage.ru_maxrss);
}

bool Supervisor::Restartable(const Child& c) const {
  if (c.spec.role != Role::kHeterWorker || c.restarts >= options_.heter_restarts || c.code == 1 || c.code == 2) {
    return false;
  }
  for (const Child& w : children_) {
    if (w.spec.role == Role::kWorker && !w.exited) return true;  // the job goes on
  }
  return false;
}

void Supervisor::Reap() {
  while (true) {
    int status = 0;
    rusage usage{};
    const pid_t pid = ::wait4(-1, &status, WNOHANG, &usage);
    if (pid <= 0) return;
    if (pid == watchdog_) {  // someone killed it; the job runs on, less protected
      int code = 0;
      Message("the watchdog (pid " + std::to_string(pid) + ") " + Describe(status, &code) +
              ": what the processes started may now outlive a kill -9 of the launcher");
      watchdog_ = -1;
      continue;
    }
    for (size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      if (c.pid != pid) continue;
      Collect(&c, status, usage);
      if (c.code == 0 || c.signalled) continue;
      if (Restartable(c)) {
        ++c.restarts;
        const pid_t old_pid = c.pid;
        c.exited = false;
        if (StartChild(&c, /*append=*/true).ok()) {
          Message(c.spec.Name() + " (pid " + std::to_string(old_pid) + ") " + c.how + "; started again as pid " +
                  std::to_string(c.pid) + " (restart " + std::to_string(c.restarts) + " of " +
                  std::to_string(options_.heter_restarts) + "), log appended to " + c.spec.log_path);
          continue;
        }
        c.exited = true;
      }
      if (!failed_) failed_ = static_cast<int>(i);
    }
    // Not one of ours: an orphan reparented to this subreaper; reaped, nothing more.
  }
}

void Supervisor::Pump() {
  if (stream_in_ < 0 || options_.stream_fd < 0) return;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(stream_in_, buf, sizeof(buf));
    if (n <= 0) return;
    if (!stream_ok_) continue;  // keep draining so the offset follows the file
    ssize_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(options_.stream_fd, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        stream_ok_ = false;
        break;
      }
      off += w;
    }
  }
}

void Supervisor::StopAll(const std::string& why, bool servers_may_end) {
  const auto t0 = Clock::now();
  auto running = [this](auto pick) {
    size_t n = 0;
    for (const auto& c : children_) n += c.pid > 0 && !c.exited && pick(c);
    return n;
  };
  auto is_worker = [](const Child& c) { return c.spec.role == Role::kWorker; };
  auto any = [](const Child&) { return true; };
  const size_t total = running(any);
  if (total == 0) return;
  Message("stopping " + std::to_string(total) + " process(es): " + why);
  // The workers first: a trainer stopped by SIGTERM pushes what it trained, which needs its
  // pservers (and heter workers) up.
  Terminate(is_worker);
  if (servers_may_end && running(any) > 0) {
    // The servers and heter workers end by themselves once every trainer has ended (the
    // pservers after their final save, with periodic saves on).
    const auto deadline = Clock::now() + options_.stop_wait;
    while (running(any) > 0 && Clock::now() < deadline) WaitForChildren(std::chrono::milliseconds(50));
  }
  Terminate(any);
  Message("every process has stopped (" + Fixed1(Seconds(Clock::now() - t0)) + " s)");
}

template <typename Pick>
void Supervisor::Terminate(Pick pick) {
  bool any = false;
  for (auto& c : children_) {
    if (c.pid <= 0 || c.exited || !pick(c)) continue;
    c.signalled = true;
    ::kill(-c.pid, SIGTERM);
    any = true;
  }
  if (!any) return;
  const auto deadline = Clock::now() + options_.kill_grace;
  auto gone = [&] {
    for (const auto& c : children_) {
      if (c.pid > 0 && !c.exited && pick(c)) return false;
    }
    return true;
  };
  while (!gone() && Clock::now() < deadline) WaitForChildren(std::chrono::milliseconds(50));
  for (auto& c : children_) {
    if (c.pid <= 0 || c.exited || !pick(c)) continue;
    Message(c.spec.Name() + " (pid " + std::to_string(c.pid) + ") did not stop within " +
            Fixed1(Seconds(options_.kill_grace)) + " s of SIGTERM: SIGKILL");
    ::kill(-c.pid, SIGKILL);
    ::kill(c.pid, SIGKILL);
    int status = 0;
    rusage usage{};
    if (::wait4(c.pid, &status, 0, &usage) == c.pid) Collect(&c, status, usage);
  }
  Reap();
  Pump();
}

void Supervisor::WaitForChildren(std::chrono::milliseconds at_most) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at_most).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::sigtimedwait(&chld, nullptr, &ts);
  Reap();
  Pump();
}

void Supervisor::ReportFailure(const Child& c) {
  Message(c.spec.Name() + " (pid " + std::to_string(c.pid) + ", " + c.spec.endpoint + ") " + c.how + ". Last " +
          std::to_string(options_.tail_lines) + " lines of " + c.spec.log_path + ":\n" +
          Tail(c.spec.log_path, options_.tail_lines));
}

void Supervisor::ReportResources() const {
  std::string text = "CPU time and peak memory of each process:";
  double by_role[3] = {0, 0, 0};
  bool present[3] = {false, false, false};
  bool any = false;
  for (const Child& c : children_) {
    if (!c.exited) continue;
    const double user = CpuSeconds(c.usage.ru_utime), sys = CpuSeconds(c.usage.ru_stime);
    text += "\n  " + c.spec.Name() + " (pid " + std::to_string(c.pid) + "): " + Fixed(user + sys, 2) + " s CPU (user " +
            Fixed(user, 2) + ", system " + Fixed(sys, 2) + "), max RSS " +
            Fixed1(static_cast<double>(c.usage.ru_maxrss) / 1024.0) + " MiB";  // ru_maxrss: KiB
    by_role[static_cast<int>(c.spec.role)] += user + sys;
    present[static_cast<int>(c.spec.role)] = any = true;
  }
  if (!any) return;
  text += "\n  CPU seconds by role:";
  for (Role role : {Role::kServer, Role::kWorker, Role::kHeterWorker}) {
    if (present[static_cast<int>(role)])
      text += std::string(" ") + RoleName(role) + " " + Fixed(by_role[static_cast<int>(role)], 2) + ";";
  }
  text.pop_back();
  Message(text);
}

int Supervisor::Wait() {
  const int code = Supervise();
  ReportResources();
  return code;
}

int Supervisor::Supervise() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  std::optional<Clock::time_point> workers_done;
  while (true) {
    timespec ts{0, 100'000'000};
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      Pump();
      StopAll(std::string("the launcher received ") + ::strsignal(sig), /*servers_may_end=*/true);
      return 128 + sig;
    }
    Reap();
    Pump();
    if (failed_) {
      // One process's death often fails others within milliseconds (a rank's peers, the
      // trainers of a dead pserver): give them a moment, then name every process that has
      // ended with an error, so the cause is among those shown.
      const auto settle = Clock::now() + std::chrono::milliseconds(200);
      sigset_t chld;
      sigemptyset(&chld);
      sigaddset(&chld, SIGCHLD);
      while (Clock::now() < settle) {
        timespec wait{0, 20'000'000};
        ::sigtimedwait(&chld, nullptr, &wait);
        Reap();
      }
      Pump();
      std::string names;
      for (const Child& c : children_) {
        if (!c.exited || c.signalled || c.code == 0) continue;
        ReportFailure(c);
        names += (names.empty() ? "" : "; ") + c.spec.Name() + " " + c.how;
      }
      const Child& first = children_[*failed_];
      StopAll(first.spec.Name() + " failed");
      Message("the job failed: " + names);
      return first.code != 0 ? first.code : 1;
    }
    bool has_workers = false, workers_running = false, others_running = false;
    for (const auto& c : children_) {
      has_workers = has_workers || c.spec.role == Role::kWorker;
      if (c.exited) continue;
      (c.spec.role == Role::kWorker ? workers_running : others_running) = true;
    }
    if (workers_running) continue;
    if (!others_running) {
      Message("every process exited 0 (" + Fixed1(Seconds(Clock::now() - started_)) + " s)");
      return 0;
    }
    // A node without workers (the pservers' node of a multi-node job): its servers and heter
    // workers end by themselves when the job's trainers have ended.
    if (!has_workers) continue;
    if (!workers_done) {
      workers_done = Clock::now();
      Message("every worker exited 0; waiting up to " + Fixed1(Seconds(options_.stop_wait)) +
              " s for the servers to exit by themselves");
    }
    if (Clock::now() - *workers_done >= options_.stop_wait) {
      StopAll("the workers have finished");
      if (failed_) {  // one died of something else than the launcher's signal meanwhile
        ReportFailure(children_[*failed_]);
        return children_[*failed_].code;
      }
      return 0;
    }
  }
}

int RunLaunchPlan(LaunchPlan plan, SupervisorOptions options) {
  Supervisor supervisor(std::move(plan), options);
  if (auto st = supervisor.Start(); !st.ok()) {
    const std::string line = "fleetps-launch: " + st.ToString() + "\n";
    (void)!::write(options.message_fd >= 0 ? options.message_fd : 2, line.data(), line.size());
    return 2;
  }
  return supervisor.Wait();
}

}  // namespace fleetps::launch
