#pragma once
// The pserver composition root: owns the io threads, the executor pool, the tables,
// the service and the RPC server, and wires them together. main() only parses options
// and runs an App; tests run the same App in-process.
//
// Lifecycle: Start() creates tables, loads options.load_dir when set (before listening, so
// no trainer sees initial values), listens, and on server 0 with save_interval_s starts the
// periodic saver (a thread that saves every table to save_dir through the same two-phase
// Save requests a trainer sends); WaitForShutdown() blocks until SIGINT/
// SIGTERM or a Stop request; Shutdown() stops accepting, drains in-flight requests (up
// to drain_timeout_ms), aborts barrier waiters, and tears down in reverse order.
// Thread-safety: Start/WaitForShutdown/Shutdown from one controlling thread;
// RequestShutdown() from anywhere.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/config/server_config.h"
#include "common/mutex.h"
#include "common/net/security.h"
#include "common/status.h"
#include "common/net/trainer_registry.h"
#include "common/thread_annotations.h"

namespace fleetps {
class ExecutorPool;
class ProgressReporter;
namespace net {
class AuthKey;
class IoThreads;
class RpcServer;
struct RpcClientOptions;
}  // namespace net
}  // namespace fleetps

namespace fleetps::server {

class PsService;
class ServerMetrics;
class TableSet;

class App {
 public:
  explicit App(config::ServerOptions options);
  ~App();  // Shutdown()s
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  Status Start();
  uint16_t port() const;          // the bound port (useful with port 0)
  uint16_t metrics_port() const;  // the /metrics port (0: off)
  // Blocks until a shutdown is requested; with handle_signals, SIGINT/SIGTERM request one.
  void WaitForShutdown(bool handle_signals) EXCLUDES(mu_);
  void RequestShutdown(const std::string& reason) EXCLUDES(mu_);
  // True when an io thread runs a task posted now within `timeout`: the service still makes
  // progress (the systemd watchdog's check). False before Start and after Shutdown.
  bool IoResponsive(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  void Shutdown() EXCLUDES(mu_);

  const config::ServerOptions& options() const { return options_; }
  // The process exit code: 1 when the server exited by itself because the job's trainers
  // ended and some failed or were gone; 0 otherwise.
  int exit_code() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return exit_code_;
  }
  TableSet& tables() { return *tables_; }

 private:
  // The steps of Start(), in its order: the metrics endpoint (when metrics_port is set), the
  // checkpoint given by --load (before listening, so no trainer sees initial values), the
  // RPC server, and the log line that says what is served.
  Status ServeMetrics();
  Status LoadAtStart();
  Status StartRpcServer();
  void LogListening() const;

  void ArmBarrierSweep();  // io thread only
  // SIGINT or SIGTERM, handled by the sweep (io thread only). A shutdown, but first:
  // - when the job's trainers have all ended unclean with periodic saves on, pserver 0 makes
  //   its final save and the others wait for it, as when no signal came (an ordered stop
  //   signals the pservers right after the trainers);
  // - while trainers are alive, the server serves those that say they are stopping until
  //   they have ended (a stop of every process at once: their last pushes land, and the
  //   final save follows): net::StopWait.
  // A second signal ends a wait; one during a shutdown already under way (a long final
  // save, a drain) ends the process at once, by that signal.
  void OnStopSignal(int signo);
  void ArmSignals();  // SIGINT and SIGTERM to pending_signal_, for the sweep
  void CheckSignalWait(std::chrono::steady_clock::time_point now);  // the sweep, while signal_wait_
  // Every 500 ms: trainers past their lease are gone (barriers fail while one is); once
  // every trainer has ended and exit_when_trainers_gone, the server shuts down (after the
  // final save, when the job ended unclean and periodic saves are on).
  net::TrainerRegistry::Sweep SweepTrainers(std::chrono::steady_clock::time_point now);
  // The periodic saver's thread: every save_interval_s until Shutdown, one save.
  void PeriodicSaveLoop();
  // Saves every table of every server to save_dir (phase 1 on all, commit on server 0).
  Status SaveEverywhere();
  // Server 0, in Shutdown, when the job ended unclean with periodic saves on: one more save,
  // then Stop to the other servers, which wait for it (SweepTrainers).
  void FinalSave();
  // The options of this server's own admin requests to the servers (Save, Stop).
  net::RpcClientOptions AdminClientOptions() const;

  config::ServerOptions options_;
  net::ClusterSecurity security_;  // the shared secret and server.tls, when configured
  // The running save's or load's progress line or log lines; fed from the lanes, so it
  // outlives executors_.
  Mutex progress_mu_;  // guards progress_
  std::unique_ptr<ProgressReporter> progress_ GUARDED_BY(progress_mu_);
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<ExecutorPool> executors_;
  std::unique_ptr<TableSet> tables_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<net::RpcServer> rpc_;

  std::unique_ptr<ServerMetrics> metrics_;  // outlives rpc_ (its on_reply hook)

  mutable Mutex mu_;                         // guards the members below up to cv_
  bool started_ GUARDED_BY(mu_) = false;     // Start() has finished: serving
  bool io_stopped_ GUARDED_BY(mu_) = false;  // Shutdown() is tearing the io threads down
  bool shutdown_requested_ GUARDED_BY(mu_) = false;
  std::string shutdown_reason_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
  bool saver_stop_ GUARDED_BY(mu_) = false;  // tells the periodic saver to end
  int exit_code_ GUARDED_BY(mu_) = 0;
  bool final_save_ GUARDED_BY(mu_) = false;   // server 0: FinalSave() before the drain
  std::condition_variable cv_;                // waits on mu_: shutdown_requested_, saver_stop_
  uint64_t sweeps_ = 0;                       // io thread only
  std::atomic<int> pending_signal_{0};        // set by the signal handler, taken by the sweep
  int signals_ = 0;                           // io thread only: stop signals handled
  std::optional<net::StopWait> signal_wait_;  // io thread only: after a first signal, while trainers stop
  // io thread only: a server other than 0 waits for server 0's final save until then.
  std::optional<std::chrono::steady_clock::time_point> final_save_deadline_;
  std::thread saver_;

  struct Timers;
  std::unique_ptr<Timers> timers_;  // barrier deadline sweep + signal set
};

}  // namespace fleetps::server
