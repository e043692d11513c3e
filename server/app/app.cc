#include "server/app/app.h"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <future>

#include "common/executor.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "common/progress.h"
#include "common/stop_request.h"
#include "schemas/ps_generated.h"
#include "server/app/server_metrics.h"
#include "server/service/ps_service.h"

namespace fleetps::server {

namespace asio = boost::asio;

namespace {

// How long a server other than 0 waits for server 0's final save (SweepTrainers).
constexpr std::chrono::seconds kFinalSaveWait{300};

}  // namespace

struct App::Timers {
  explicit Timers(asio::io_context& io) : sweep(io), signals(io) {}
  asio::steady_timer sweep;
  asio::signal_set signals;
};

App::App(config::ServerOptions options) : options_(std::move(options)) {}

App::~App() { Shutdown(); }

Status App::Start() {
  RETURN_IF_ERROR(config::ValidateServerOptions(options_));
  ASSIGN_OR_RETURN(tables_, TableSet::Create(options_));
  io_ = std::make_unique<net::IoThreads>(options_.io_threads);
  executors_ = std::make_unique<ExecutorPool>(static_cast<size_t>(options_.shard_threads));
  service_ = std::make_unique<PsService>(options_, *tables_, *executors_,
                                         [this](const std::string& reason) { RequestShutdown(reason); });
  service_->checkpoints().SetProgress(
      [this, who = "pserver " + std::to_string(options_.index) + ": "](const CheckpointProgress& p) {
        MutexLock lock(progress_mu_);
        if (p.done == 1 || progress_ == nullptr) progress_ = std::make_unique<ProgressReporter>();  // a new operation
        const bool saving = p.what.rfind("saving", 0) == 0;
        progress_->Update(
            WorkProgress{who + p.what, p.done, p.total, saving ? "files" : "parts", p.rows, "rows", p.seconds});
        if (p.done == p.total) progress_.reset();  // erases the line; the outcome is logged by its caller
      });
  metrics_ = std::make_unique<ServerMetrics>(options_.index, options_.self().ToString());
  RETURN_IF_ERROR(ServeMetrics());
  RETURN_IF_ERROR(LoadAtStart());
  RETURN_IF_ERROR(StartRpcServer());

  metrics_->SetSources({service_.get(), rpc_.get()});
  {
    MutexLock lock(mu_);
    started_ = true;
  }

  // Barrier deadlines are swept every 50 ms.
  timers_ = std::make_unique<Timers>(io_->context());
  asio::post(io_->context(), [this] { ArmBarrierSweep(); });

  LogListening();
  if (options_.index == 0 && options_.save_interval_s > 0 && !options_.save_dir.empty()) {
    spdlog::info("pserver 0: saving every table to {} every {} s (mode {})", options_.save_dir,
                 options_.save_interval_s, options_.save_mode);
    saver_ = std::thread([this] { PeriodicSaveLoop(); });
  }
  return Status::OK();
}

Status App::ServeMetrics() {
  if (options_.metrics_port == 0) return Status::OK();
  // Up before the load, so /healthz answers and /readyz says why it is not ready yet.
  net::HttpEndpointOptions http;
  http.host = config::BindHost(options_);
  http.port = options_.metrics_port;
  RETURN_IF_ERROR(metrics_
                      ->Serve(
                          std::move(http), [this] { return IoResponsive(std::chrono::seconds(1)); },
                          [this]() -> std::string {
                            MutexLock lock(mu_);
                            if (stopped_ || shutdown_requested_) return "shutting down";
                            if (!started_)
                              return options_.load_dir.empty() ? "starting" : "loading checkpoint " + options_.load_dir;
                            return "";
                          })
                      .WithContext("pserver " + std::to_string(options_.index)));
  spdlog::info("pserver {}: metrics on http://{}:{}/metrics (/healthz, /readyz)", options_.index,
               config::BindHost(options_), metrics_->port());
  return Status::OK();
}

Status App::LoadAtStart() {
  if (options_.load_dir.empty()) return Status::OK();
  // Before listening: no trainer sees the initial values of a server started with --load.
  const auto started = std::chrono::steady_clock::now();
  auto loaded = service_->checkpoints().LoadSync(options_.load_dir);
  if (!loaded.ok()) {
    return loaded.status().WithContext("pserver " + std::to_string(options_.index) + ": --load " + options_.load_dir);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("pserver {}: loaded checkpoint {} (version {}, mode {}): {} sparse rows in {:.2f} s", options_.index,
               options_.load_dir, loaded->version, disk::EnumNameSaveMode(loaded->mode), loaded->rows, seconds);
  metrics_->SetStartupLoad(seconds, loaded->rows);
  return Status::OK();
}

Status App::StartRpcServer() {
  net::RpcServerOptions rpc_options = config::RpcServerOptionsOf(options_);
  ASSIGN_OR_RETURN(security_, net::ClusterSecurity::Load(options_.auth_secret_file, options_.tls));
  rpc_options.auth_key = security_.auth_key;
  rpc_options.tls = security_.tls;
  rpc_options.on_reply = [m = metrics_.get()](const net::ReplyInfo& reply) { m->OnReply(reply); };
  rpc_options.on_connection_closed = [svc = service_.get()](uint64_t id) { svc->ConnectionClosed(id); };
  rpc_ = std::make_unique<net::RpcServer>(
      *io_, rpc_options,
      [svc = service_.get()](net::Request req, net::Responder resp) { svc->Handle(std::move(req), std::move(resp)); });
  return rpc_->Start().WithContext("pserver " + std::to_string(options_.index));
}

void App::LogListening() const {
  std::string tables;
  for (const auto& t : options_.tables) {
    if (!tables.empty()) tables += ", ";
    tables += t.name + "(id " + std::to_string(t.id) + ", " +
              (t.kind == TableKind::kSparse
                   ? "sparse dim " + std::to_string(t.dim) + ", " + std::to_string(t.shards) + " shards"
                   : "dense size " + std::to_string(t.dim)) +
              ")";
  }
  spdlog::info("pserver {}/{} listening on {}:{} (endpoint {}{}{}), io_threads={}, shard_threads={}, tables: {}",
               options_.index, options_.endpoints.size(), config::BindHost(options_), rpc_->port(),
               options_.self().ToString(), security_.tls ? ", TLS" : "",
               security_.auth_key ? ", shared-secret auth" : "", options_.io_threads, options_.shard_threads, tables);
}

bool App::IoResponsive(std::chrono::milliseconds timeout) {
  {
    // Callers (the watchdog, /healthz) are stopped before Shutdown tears io_ down.
    MutexLock lock(mu_);
    if (!started_ || io_stopped_) return false;
  }
  auto ran = std::make_shared<std::promise<void>>();
  auto future = ran->get_future();
  asio::post(io_->context(), [ran] { ran->set_value(); });
  return future.wait_for(timeout) == std::future_status::ready;
}

void App::PeriodicSaveLoop() {
  const auto interval = std::chrono::seconds(options_.save_interval_s);
  for (;;) {
    {
      UniqueLock lock(mu_);
      const auto stop = [this]() REQUIRES(mu_) { return saver_stop_ || shutdown_requested_; };
      if (cv_.wait_for(lock.native(), interval, stop)) return;
    }
    const auto started = std::chrono::steady_clock::now();
    Status st = SaveEverywhere();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (st.ok()) {
      spdlog::info("periodic save to {} done in {:.1f} s", options_.save_dir, seconds);
    } else {
      spdlog::error("periodic save to {} failed after {:.1f} s (the previous checkpoint is intact): {}",
                    options_.save_dir, seconds, st.ToString());
    }
  }
}

Status App::SaveEverywhere() {
  // The same requests a trainer's PsClient::Save sends, so every server (this one included)
  // runs the save on its own shard lanes.
  const auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string version = "auto-" + std::to_string(now_ms);
  auto request = [&](bool commit) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto path = fbb.CreateString(options_.save_dir);
    auto v = fbb.CreateString(version);
    fbb.Finish(wire::CreateSaveRequest(fbb, path, v, static_cast<disk::SaveMode>(options_.save_mode), 0, true, commit));
    return fbb.Release();
  };
  std::vector<std::unique_ptr<net::RpcClient>> clients;
  for (const auto& ep : options_.endpoints) {
    clients.push_back(std::make_unique<net::RpcClient>(*io_, ep, AdminClientOptions()));
    RETURN_IF_ERROR(clients.back()->Connect());
  }
  const auto type = static_cast<uint16_t>(wire::MessageType::Save);
  std::vector<std::promise<Status>> done(clients.size());
  for (size_t i = 0; i < clients.size(); ++i) {
    clients[i]->Call(type, request(false), [p = &done[i]](StatusOr<net::Reply> r) { p->set_value(r.status()); });
  }
  Status first;
  for (auto& p : done) {
    Status st = p.get_future().get();
    if (first.ok() && !st.ok()) first = st;
  }
  if (first.ok()) first = clients[0]->CallSync(type, request(true)).status();
  for (auto& c : clients) c->Close();
  return first;
}

net::RpcClientOptions App::AdminClientOptions() const {
  net::RpcClientOptions rpc_options;
  rpc_options.connect_timeout = std::chrono::milliseconds(10000);
  rpc_options.auth_key = security_.auth_key;  // Save and Stop are admin operations
  rpc_options.tls = security_.tls;
  return rpc_options;
}

void App::FinalSave() {
  const auto started = std::chrono::steady_clock::now();
  const Status saved = SaveEverywhere();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (saved.ok()) {
    spdlog::info(
        "pserver 0: final save to {} done in {:.1f} s: it holds every update the servers accepted "
        "(pserver --resume {} loads it)",
        options_.save_dir, seconds, options_.save_dir);
  } else {
    spdlog::error("pserver 0: final save to {} failed after {:.1f} s (the previous checkpoint is intact): {}",
                  options_.save_dir, seconds, saved.ToString());
    MutexLock lock(mu_);
    exit_code_ = 1;
  }
  // The other servers wait for this; each is told even when the save failed.
  const std::string reason = saved.ok() ? "pserver 0's final save is done" : "pserver 0's final save failed";
  for (size_t i = 1; i < options_.endpoints.size(); ++i) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateStopRequest(fbb, fbb.CreateString(reason)));
    net::RpcClient client(*io_, options_.endpoints[i], AdminClientOptions());
    Status st = client.Connect();
    if (st.ok()) st = client.CallSync(static_cast<uint16_t>(wire::MessageType::Stop), fbb.Release()).status();
    if (!st.ok()) spdlog::warn("pserver 0: could not stop pserver {} after the final save: {}", i, st.ToString());
    client.Close();
  }
}

void App::ArmBarrierSweep() {
  timers_->sweep.expires_after(std::chrono::milliseconds(50));
  timers_->sweep.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    const auto now = std::chrono::steady_clock::now();
    service_->barriers().ExpireDeadlines(now);
    if (++sweeps_ % 10 == 0) SweepTrainers(now);
    if (const int signo = pending_signal_.exchange(0)) OnStopSignal(signo);
    if (signal_wait_) CheckSignalWait(now);
    ArmBarrierSweep();
  });
}

net::TrainerRegistry::Sweep App::SweepTrainers(std::chrono::steady_clock::time_point now) {
  const net::TrainerRegistry::Sweep sweep = service_->trainers().Expire(now);
  for (uint32_t id : sweep.newly_gone) {
    spdlog::error(
        "pserver {}: trainer {} is gone: no heartbeat for {} s (server.trainer_lease_s); barriers fail "
        "until it is back",
        options_.index, id, options_.trainer_lease_s);
  }
  const auto& gone = sweep.gone;
  std::string failure;
  for (uint32_t id : gone) failure += (failure.empty() ? "trainer " : ", ") + std::to_string(id);
  if (!failure.empty()) {
    failure += fmt::format(" {} gone (no heartbeat for {} s on pserver {}); the job cannot complete",
                           gone.size() == 1 ? "is" : "are", options_.trainer_lease_s, options_.index);
  }
  service_->barriers().SetJobFailure(failure);
  if (!sweep.ended || !options_.exit_when_trainers_gone) {
    final_save_deadline_.reset();  // a trainer is back
    return sweep;
  }
  // A job that ended unclean (a trainer failed, was stopped or is gone) saved no model at its
  // end. With periodic saves on, the servers save once more before they exit, so that
  // --resume finds every update they accepted: server 0 saves, then stops the others, which
  // wait for it (at most kFinalSaveWait: server 0 may be gone too).
  const bool final_save = !sweep.clean && options_.save_interval_s > 0 && !options_.save_dir.empty();
  if (final_save && options_.index != 0) {
    if (!final_save_deadline_) {
      final_save_deadline_ = now + kFinalSaveWait;
      {
        MutexLock lock(mu_);
        exit_code_ = 1;
      }
      spdlog::error("pserver {}: every trainer has ended ({}); waiting for pserver 0's final save to {} (at most {} s)",
                    options_.index, sweep.summary, options_.save_dir, kFinalSaveWait.count());
    } else if (now >= *final_save_deadline_) {
      spdlog::error(
          "pserver {}: pserver 0 did not stop this server within {} s of the job's end: exiting without its "
          "final save",
          options_.index, kFinalSaveWait.count());
      RequestShutdown("no final save from pserver 0");
    }
    return sweep;
  }
  {
    MutexLock lock(mu_);
    if (shutdown_requested_) return sweep;
    exit_code_ = sweep.clean ? 0 : 1;
    final_save_ = final_save;
  }
  spdlog::log(sweep.clean ? spdlog::level::info : spdlog::level::err, "pserver {}: every trainer has ended ({}); {}",
              options_.index, sweep.summary,
              final_save ? "saving to " + options_.save_dir + ", stopping the other pservers, then exiting"
                         : std::string("exiting"));
  RequestShutdown("every trainer has ended: " + sweep.summary);
  return sweep;
}

void App::ArmSignals() {
  timers_->signals.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    pending_signal_ = signo;
    ArmSignals();
  });
}

void App::OnStopSignal(int signo) {
  const std::string name = signo == SIGINT ? "SIGINT" : "SIGTERM";
  if (++signals_ > 1) {
    bool stopping = false;
    {
      MutexLock lock(mu_);
      stopping = shutdown_requested_;
    }
    if (stopping) {
      spdlog::error(
          "pserver {}: a second {} during the shutdown: exiting at once (a save under way is abandoned; "
          "the last committed checkpoint stays)",
          options_.index, name);
      StopSignals::ExitBySignal(signo);
    }
    RequestShutdown("a second " + name);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  const net::TrainerRegistry::Sweep sweep = SweepTrainers(now);  // the job may just have ended: its final save first
  if (final_save_deadline_) {
    spdlog::warn("pserver {}: {}: waiting for pserver 0's final save first (send it again to exit at once)",
                 options_.index, name);
    return;
  }
  if (!net::StopWait::Needed(sweep)) {
    RequestShutdown(name);
    return;
  }
  signal_wait_.emplace(name, now);
  spdlog::warn("pserver {}: {}", options_.index, signal_wait_->Describe(sweep));
}

void App::CheckSignalWait(std::chrono::steady_clock::time_point now) {
  const net::TrainerRegistry::Sweep sweep = SweepTrainers(now);
  bool requested = false;
  {
    MutexLock lock(mu_);
    requested = shutdown_requested_;
  }
  if (requested || final_save_deadline_) {  // the job's end took over (its final save)
    signal_wait_.reset();
    return;
  }
  if (const std::optional<std::string> why = signal_wait_->Over(sweep, now)) {
    RequestShutdown(*why);
    signal_wait_.reset();
  }
}

uint16_t App::port() const { return rpc_ ? rpc_->port() : 0; }
uint16_t App::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

void App::RequestShutdown(const std::string& reason) {
  {
    MutexLock lock(mu_);
    if (shutdown_requested_) return;
    shutdown_requested_ = true;
    shutdown_reason_ = reason;
  }
  cv_.notify_all();
}

void App::WaitForShutdown(bool handle_signals) {
  if (handle_signals && timers_) {
    timers_->signals.add(SIGINT);
    timers_->signals.add(SIGTERM);
    ArmSignals();
  }
  UniqueLock lock(mu_);
  cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return shutdown_requested_; });
}

void App::Shutdown() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    saver_stop_ = true;
  }
  cv_.notify_all();
  if (saver_.joinable()) saver_.join();  // a save in progress finishes first
  bool final_save = false;
  {
    MutexLock lock(mu_);
    final_save = final_save_;
  }
  if (final_save && rpc_) FinalSave();  // before the drain: this server takes its part of the save
  if (rpc_) {
    std::string reason;  // under mu_: a Stop request on an io thread may be setting it now
    {
      MutexLock lock(mu_);
      reason = shutdown_reason_.empty() ? "shutdown" : shutdown_reason_;
    }
    spdlog::info("pserver {} shutting down ({}): draining {} in-flight requests", options_.index, reason,
                 rpc_->in_flight());
    rpc_->StopAccepting();
    service_->barriers().AbortAll("pserver " + std::to_string(options_.index) + " is shutting down");
    if (!rpc_->Drain(std::chrono::milliseconds(options_.drain_timeout_ms))) {
      spdlog::warn("pserver {}: {} requests still in flight after {} ms; closing anyway", options_.index,
                   rpc_->in_flight(), options_.drain_timeout_ms);
    }
    rpc_->Stop();
  }
  if (metrics_) {  // the scrapes read the service and the io threads: end them first
    metrics_->SetSources({});
    metrics_->StopServing();
  }
  {
    MutexLock lock(mu_);
    io_stopped_ = true;
  }
  if (executors_) executors_->Stop();
  if (io_) io_->Stop();  // no handler runs after this; pending ones are destroyed with io_
  timers_.reset();
  rpc_.reset();
  service_.reset();
  executors_.reset();
  io_.reset();
  tables_.reset();
  spdlog::info("pserver {} stopped", options_.index);
}

}  // namespace fleetps::server
