#include "server/app/app.h"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/executor.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_server.h"
#include "server/service/ps_service.h"

namespace fleetps::server {

namespace asio = boost::asio;

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
  net::RpcServerOptions rpc_options;
  rpc_options.host = options_.bind_host;
  rpc_options.port = options_.self().port;
  rpc_options.max_payload = options_.max_message_bytes;
  rpc_options.max_inflight_bytes = options_.max_inflight_bytes;
  rpc_ = std::make_unique<net::RpcServer>(
      *io_, rpc_options, [svc = service_.get()](net::Request req, net::Responder resp) {
        svc->Handle(std::move(req), std::move(resp));
      });
  RETURN_IF_ERROR(rpc_->Start().WithContext("pserver " + std::to_string(options_.index)));

  // Barrier deadlines are swept every 50 ms.
  timers_ = std::make_unique<Timers>(io_->context());
  asio::post(io_->context(), [this] { ArmBarrierSweep(); });

  std::string tables;
  for (const auto& t : options_.tables) {
    if (!tables.empty()) tables += ", ";
    tables += t.name + "(id " + std::to_string(t.id) + ", " +
              (t.kind == TableKind::kSparse ? "sparse dim " + std::to_string(t.dim) + ", " +
                                                  std::to_string(t.shards) + " shards"
                                            : "dense size " + std::to_string(t.dim)) +
              ")";
  }
  spdlog::info("pserver {}/{} listening on {}:{} (endpoint {}), io_threads={}, shard_threads={}, tables: {}",
               options_.index, options_.endpoints.size(), options_.bind_host, rpc_->port(),
               options_.self().ToString(), options_.io_threads, options_.shard_threads, tables);
  return Status::OK();
}

void App::ArmBarrierSweep() {
  timers_->sweep.expires_after(std::chrono::milliseconds(50));
  timers_->sweep.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    service_->barriers().ExpireDeadlines(std::chrono::steady_clock::now());
    ArmBarrierSweep();
  });
}

uint16_t App::port() const { return rpc_ ? rpc_->port() : 0; }

void App::RequestShutdown(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    timers_->signals.async_wait([this](boost::system::error_code ec, int signo) {
      if (!ec) RequestShutdown(signo == SIGINT ? "SIGINT" : "SIGTERM");
    });
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return shutdown_requested_; });
}

void App::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (rpc_) {
    spdlog::info("pserver {} shutting down ({}): draining {} in-flight requests", options_.index,
                 shutdown_reason_.empty() ? "shutdown" : shutdown_reason_, rpc_->in_flight());
    rpc_->StopAccepting();
    service_->barriers().AbortAll("pserver " + std::to_string(options_.index) + " is shutting down");
    if (!rpc_->Drain(std::chrono::milliseconds(options_.drain_timeout_ms))) {
      spdlog::warn("pserver {}: {} requests still in flight after {} ms; closing anyway", options_.index,
                   rpc_->in_flight(), options_.drain_timeout_ms);
    }
    rpc_->Stop();
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
