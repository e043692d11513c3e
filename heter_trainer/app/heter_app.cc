#include "heter_trainer/app/heter_app.h"

#include <algorithm>
#include <csignal>
#include <functional>
#include <future>
#include <utility>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/dense/open_backend.h"
#include "common/metrics/registry.h"
#include "common/net/http_endpoint.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_server.h"
#include "common/net/security.h"
#include "heter_trainer/device/dense_device.h"
#include "heter_trainer/device/nccl_backend.h"
#include "heter_trainer/service/heter_service.h"
#include "common/net/trainer_registry.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/model/dense_net.h"
#include "trainer/runtime/allreduce_dense_sync.h"
#include "trainer/runtime/job.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::heter {

namespace asio = boost::asio;

HeterApp::HeterApp(config::HeterTrainerOptions options) : options_(std::move(options)) {}

HeterApp::~HeterApp() { Shutdown(); }

namespace {

// The device HETER_DEVICE_TYPE asks for, and the net it runs (*net); auto: the GPU when one
// is usable and runs the model, else the CPU, saying why in the log. On the CPU the net's
// products run on the backend fleetps.dense configures; a CUDA device computes fp32.
StatusOr<std::unique_ptr<DenseDevice>> OpenDevice(const config::HeterTrainerOptions& o, const std::string& self,
                                                  metrics::Registry* registry,
                                                  std::unique_ptr<trainer::model::DenseNet>* net) {
  if (o.device != "cpu") {
    *net = std::make_unique<trainer::model::DenseNet>(trainer::model::DenseNet::FromOptions(o.job.model));
    StatusOr<std::unique_ptr<DenseDevice>> gpu = MakeCudaDevice(**net, o.gpus.front(), o.job.heter.cuda_wait);
    if (gpu.ok()) RETURN_IF_ERROR(RequireFp32OnCuda(o.job.dense.precision, "the heter-trainer"));
    if (gpu.ok() && o.gpus.size() > 1) {
      spdlog::warn(
          "heter-trainer: FLAGS_selected_gpus names {} GPUs; a heter-trainer drives one, GPU {}: start one "
          "heter-trainer per GPU (fleetps-launch --heter_worker_num N --gpus ... gives each its own)",
          o.gpus.size(), o.gpus.front());
    }
    if (gpu.ok() || o.device != "auto") return gpu;
    const auto log = gpu.status().IsUnavailable() ? spdlog::level::info : spdlog::level::warn;
    spdlog::log(log, "heter-trainer: HETER_DEVICE_TYPE auto: the dense part runs on the CPU ({})",
                gpu.status().message());
  }
  ASSIGN_OR_RETURN(auto gemm, dense::OpenDenseBackend(o.job.dense, self, registry));
  *net = std::make_unique<trainer::model::DenseNet>(trainer::model::DenseNet::FromOptions(o.job.model, gemm));
  return MakeCpuDevice(**net);
}

}  // namespace

Status HeterApp::Start() {
  const auto& job = options_.job;
  const std::string self = "heter-trainer " + std::to_string(options_.server.index);
  registry_ = std::make_unique<metrics::Registry>();
  ASSIGN_OR_RETURN(device_, OpenDevice(options_, self, registry_.get(), &net_));

  // The pservers, with the cluster's secret and TLS when it has them.
  ASSIGN_OR_RETURN(const net::ClusterSecurity security,
                   net::ClusterSecurity::Load(options_.server.auth_secret_file, options_.server.tls));
  trainer::PsClientOptions client_options = trainer::JobClientOptions(job, trainer::TrainerRpcOptions{});
  client_options.rpc.auth_key = security.auth_key;
  client_options.rpc.tls = security.tls;
  ASSIGN_OR_RETURN(client_, trainer::PsClient::Connect(client_options));
  ASSIGN_OR_RETURN(auto dense, client_->Table(job.dense_table.id));
  if (!dense.dense || dense.dim != net_->num_params()) {
    return Status::InvalidArgument("pserver table " + std::to_string(dense.id) + " ('" + dense.name + "') has " +
                                   std::to_string(dense.dim) + " floats but the model has " +
                                   std::to_string(net_->num_params()) +
                                   " dense parameters (start the pservers with the same job YAML)");
  }
  if (job.heter.dense_sync == config::HeterDenseSync::kAllreduce) {
    RETURN_IF_ERROR(StartAllreduce(security).WithContext(self));
  } else {
    dense_ = trainer::MakeAsyncSync(job, *client_, trainer::AsyncParts::kDenseOnly);
  }
  trainers_ = std::make_unique<net::TrainerRegistry>(std::chrono::seconds(options_.server.trainer_lease_s));

  service_ = std::make_unique<HeterService>(options_, *net_, *device_, *dense_, *trainers_);
  service_->SetMetrics(HeterMetrics::In(*registry_));
  RETURN_IF_ERROR(service_->Start());
  if (options_.metrics_port != 0) {
    const std::string host = options_.metrics_bind.empty() ? config::BindHost(options_.server) : options_.metrics_bind;
    ASSIGN_OR_RETURN(metrics_http_,
                     trainer::ServeTrainerMetrics(*registry_, host, options_.metrics_port,
                                                  "--metrics-port / FLEETPS_HETER_METRICS_PORT, --metrics-bind / "
                                                  "FLEETPS_HETER_METRICS_BIND"));
  }
  io_ = std::make_unique<net::IoThreads>(options_.server.io_threads);
  net::RpcServerOptions rpc_options = config::RpcServerOptionsOf(options_.server);
  rpc_options.auth_key = security.auth_key;
  rpc_options.tls = security.tls;
  rpc_options.payload_allocator = service_->PayloadAllocator();  // page-locked micro-batches on a GPU
  rpc_ = std::make_unique<net::RpcServer>(
      *io_, rpc_options,
      [svc = service_.get()](net::Request req, net::Responder resp) { svc->Handle(std::move(req), std::move(resp)); });
  RETURN_IF_ERROR(rpc_->Start().WithContext(self));
  spdlog::info(
      "{}/{} (stage {} of {}) listening on {}:{} (endpoint {}{}): dense part of model {} ({} parameters) "
      "on {}, {} lanes; serving {} cpu-trainer(s), pushing to {} pserver(s)",
      self, options_.server.endpoints.size(), options_.stage_id, options_.stage_num, rpc_options.host, rpc_->port(),
      options_.server.self().ToString(), security.tls ? ", TLS" : "", ModelTypeName(net_->type()), net_->num_params(),
      device_->Describe(), job.heter.lanes, job.trainers_num, job.pservers.size());
  sweeper_ = std::thread([this] { SweepLoop(); });
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = true;
  started_ = true;
  return Status::OK();
}

Status HeterApp::StartAllreduce(const net::ClusterSecurity& security) {
  const auto& job = options_.job;
  trainer::collective::CollectiveOptions co;
  co.rank = options_.server.index;
  // Rank 0 serves the rendezvous on allreduce_port; every rank's transport listens on its
  // own host.
  for (const auto& endpoint : options_.server.endpoints)
    co.endpoints.push_back({endpoint.host, job.heter.allreduce_port});
  if (job.heter.allreduce_port == options_.server.endpoints.front().port) {
    return Status::InvalidArgument("fleetps.heter.allreduce_port " + std::to_string(job.heter.allreduce_port) +
                                   " is heter-trainer 0's own port: choose another free port");
  }
  co.prefix = "fleetps-heter-dense";
  co.timeout = std::chrono::milliseconds(job.collective.timeout_ms);
  co.store_budget_bytes = job.collective.store_budget_bytes;
  co.auth_key = security.auth_key;
  co.tls = security.tls;
  // The replicas are in host memory: Gloo, unless fleetps.collective.backend asks for NCCL
  // on a GPU device (several heter-trainers sharing a GPU cannot use NCCL).
  std::string reason = "the replicas are in host memory (fleetps.collective.backend: nccl for NCCL on the GPU)";
  if (job.collective.backend == config::CollectiveBackend::kNccl) {
    if (device_->type() != DeviceType::kGpu) {
      return Status::InvalidArgument(
          "fleetps.collective.backend nccl averages the dense replicas on the heter-trainers' GPUs, but this one "
          "runs on the CPU (HETER_DEVICE_TYPE): use HETER_DEVICE_TYPE=gpu, or backend gloo");
    }
    config::DataParallelOptions backend = job.collective;
    backend.gpu = options_.gpus.front();
    ASSIGN_OR_RETURN(comm_, trainer::collective::MakeRankCommunicator(backend, co, BuildNcclBackend(), &reason));
  } else {
    ASSIGN_OR_RETURN(comm_, trainer::collective::MakeGlooCommunicator(co));
  }
  ASSIGN_OR_RETURN(auto sync, trainer::AllreduceDenseSync::Create(
                                  job, *client_, *comm_, std::chrono::milliseconds(job.heter.allreduce_interval_ms)));
  allreduce_ = sync.get();
  dense_ = std::move(sync);
  spdlog::info("heter-trainer {}: dense parameters averaged among {} heter-trainer(s) every {} ms ({}: {})",
               options_.server.index, comm_->size(), job.heter.allreduce_interval_ms, comm_->backend(), reason);
  return Status::OK();
}

bool HeterApp::IoResponsive(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!serving_) return false;
  }
  // The watchdog is stopped (Notifier::Stopping) before Shutdown tears io_ down.
  auto ran = std::make_shared<std::promise<void>>();
  auto future = ran->get_future();
  boost::asio::post(io_->context(), [ran] { ran->set_value(); });
  return future.wait_for(timeout) == std::future_status::ready;
}

uint16_t HeterApp::port() const { return rpc_ ? rpc_->port() : 0; }

uint16_t HeterApp::metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }

int HeterApp::exit_code() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_code_;
}

std::string HeterApp::MetricsText() const { return registry_ ? registry_->Serialize() : std::string(); }

void HeterApp::SweepLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutdown_requested_) {
    // Every 500 ms; every 50 ms while stopping trainers are served.
    cv_.wait_for(lock, std::chrono::milliseconds(stop_wait_ ? 50 : 500),
                 [this] { return shutdown_requested_ || pending_signal_ != 0; });
    if (shutdown_requested_) break;
    const int signo = std::exchange(pending_signal_, 0);
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    const auto sweep = trainers_->Expire(now);
    for (uint32_t id : sweep.newly_gone) {
      spdlog::error("heter-trainer {}: cpu-trainer {} is gone: no heartbeat for {} s (server.trainer_lease_s)",
                    options_.server.index, id, options_.server.trainer_lease_s);
    }
    if (sweep.ended && options_.server.exit_when_trainers_gone) {
      bool first = false;
      {
        std::lock_guard<std::mutex> guard(mu_);
        first = !shutdown_requested_;
        if (first) exit_code_ = sweep.clean ? 0 : 1;
      }
      if (first) {
        spdlog::log(sweep.clean ? spdlog::level::info : spdlog::level::err,
                    "heter-trainer {}: every cpu-trainer has ended ({}); exiting", options_.server.index,
                    sweep.summary);
        RequestShutdown("every cpu-trainer has ended: " + sweep.summary);
      }
    } else if (signo != 0) {
      OnStopSignal(signo, sweep);
    } else if (stop_wait_) {
      if (const std::optional<std::string> why = stop_wait_->Over(sweep, now)) RequestShutdown(*why);
    }
    lock.lock();
  }
}

void HeterApp::OnStopSignal(int signo, const net::TrainerRegistry::Sweep& sweep) {
  const std::string name = signo == SIGINT ? "SIGINT" : "SIGTERM";
  if (++signals_seen_ > 1 || !net::StopWait::Needed(sweep)) {
    RequestShutdown(signals_seen_ > 1 ? "a second " + name : name);
    return;
  }
  stop_wait_.emplace(name, std::chrono::steady_clock::now());
  spdlog::warn("heter-trainer {}: {}", options_.server.index, stop_wait_->Describe(sweep));
}

void HeterApp::RequestShutdown(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_requested_) return;
    shutdown_requested_ = true;
    shutdown_reason_ = reason;
  }
  cv_.notify_all();
}

namespace {

// Hands every SIGINT / SIGTERM to `on_signal` (on an io thread) until `signals` is cancelled.
void ArmSignals(std::shared_ptr<asio::signal_set> signals, std::function<void(int)> on_signal) {
  signals->async_wait([signals, on_signal](boost::system::error_code ec, int signo) {
    if (ec) return;
    on_signal(signo);
    ArmSignals(signals, on_signal);
  });
}

}  // namespace

void HeterApp::WaitForShutdown(bool handle_signals) {
  std::shared_ptr<asio::signal_set> signals;
  if (handle_signals && io_) {
    signals = std::make_shared<asio::signal_set>(io_->context(), SIGINT, SIGTERM);
    ArmSignals(signals, [this](int signo) {  // the sweeper handles it
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_signal_ = signo;
      }
      cv_.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return shutdown_requested_; });
  }
  if (signals) {
    boost::system::error_code ignored;
    signals->cancel(ignored);
    // The handler may still be queued on an io thread; it only reads `this`, which lives on.
  }
}

void HeterApp::Shutdown() {
  bool start_succeeded = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    start_succeeded = started_;
    stopped_ = true;
    serving_ = false;
    shutdown_requested_ = true;
  }
  cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  if (rpc_) {
    spdlog::info("heter-trainer {} shutting down ({}): draining {} in-flight requests", options_.server.index,
                 shutdown_reason_.empty() ? "shutdown" : shutdown_reason_, rpc_->in_flight());
    rpc_->StopAccepting();
    if (!rpc_->Drain(std::chrono::milliseconds(options_.server.drain_timeout_ms))) {
      spdlog::warn("heter-trainer {}: {} requests still in flight; closing anyway", options_.server.index,
                   rpc_->in_flight());
      // Their lanes may wait for room in the dense communicator behind a push to a pserver
      // that is gone: closing the pserver connections ends that push (lost, as the dense
      // gradients not yet pushed are), so the lanes and the final push end now.
      if (client_ && !allreduce_) {
        spdlog::warn("heter-trainer {}: closing the pserver connections: the dense gradients not yet pushed are lost",
                     options_.server.index);
        client_->Close();
      }
    }
  }
  if (service_) service_->Stop();
  if (allreduce_ && !start_succeeded) {
    // Start() failed after meeting the others: leave their rounds at once (they fail theirs
    // within fleetps.collective.timeout_ms) rather than wait for the job to end.
    allreduce_->Abandon();
  } else if (allreduce_) {
    // The rounds go on until every heter-trainer has left; the last one writes the replica
    // (the pservers may be gone already: then nothing is left to train and nothing lost).
    if (Status st = allreduce_->Leave(); !st.ok()) {
      spdlog::warn("heter-trainer {}: final dense allreduce: {}", options_.server.index, st.ToString());
    }
    spdlog::info("heter-trainer {}: dense replica after {} allreduce steps: checksum {}", options_.server.index,
                 allreduce_->steps(), allreduce_->Checksum());
  } else if (dense_) {
    // Dense gradients accepted since the last HeterFlush. The pservers may be gone already
    // (the job ended): then there is nothing left to train and nothing to lose. Bounded by
    // the drain timeout: a pserver that is gone would hold the stop for its whole deadline.
    auto flush = std::async(std::launch::async, [this] { return dense_->Flush(); });
    const std::chrono::milliseconds limit(options_.server.drain_timeout_ms);
    if (flush.wait_for(limit) == std::future_status::timeout) {
      spdlog::warn(
          "heter-trainer {}: the final dense push did not finish within {} ms (server.drain_timeout_ms); "
          "closing the pserver connections: the dense gradients not yet pushed are lost",
          options_.server.index, limit.count());
      client_->Close();
    }
    if (Status st = flush.get(); !st.ok()) {
      spdlog::warn("heter-trainer {}: final dense push: {}", options_.server.index, st.ToString());
    }
  }
  if (rpc_) rpc_->Stop();
  if (io_) io_->Stop();
  metrics_http_.reset();
  const bool started = rpc_ != nullptr;
  const uint64_t steps = service_ ? service_->steps() : 0;
  rpc_.reset();
  service_.reset();
  allreduce_ = nullptr;
  dense_.reset();
  comm_.reset();
  client_.reset();
  if (started) spdlog::info("heter-trainer {}: {} micro-batches trained; stopped", options_.server.index, steps);
}

StatusOr<config::HeterTrainerOptions> ResolveHeterApp(const HeterFlags& f, const config::EnvLookup& env) {
  ASSIGN_OR_RETURN(config::HeterTrainerOptions o, config::LoadHeterTrainerYaml(f.config_path));
  RETURN_IF_ERROR(config::ApplyHeterTrainerEnv(env, &o));
  if (!f.heter_trainers.empty()) {
    auto eps = net::ParseEndpointList(f.heter_trainers);
    if (!eps.ok()) return eps.status().WithContext("--heter-trainers");
    o.server.endpoints = *eps;
    o.server.index = 0;
  }
  if (!f.endpoint.empty()) {
    auto self = net::ParseEndpoint(f.endpoint);
    if (!self.ok()) return self.status().WithContext("--endpoint");
    if (o.server.endpoints.empty()) o.server.endpoints = {*self};
    auto it = std::find(o.server.endpoints.begin(), o.server.endpoints.end(), *self);
    if (it == o.server.endpoints.end()) {
      return Status::InvalidArgument("--endpoint " + self->ToString() + " is not among the heter-trainers");
    }
    o.server.index = static_cast<uint32_t>(it - o.server.endpoints.begin());
  }
  if (!f.servers.empty()) {
    auto eps = net::ParseEndpointList(f.servers);
    if (!eps.ok()) return eps.status().WithContext("--servers");
    o.job.pservers = *eps;
  }
  if (f.trainers) o.job.trainers_num = *f.trainers;
  if (!f.device.empty()) o.device = f.device;
  if (f.gpu) o.gpus = {*f.gpu};
  if (f.lanes) o.job.heter.lanes = *f.lanes;
  if (f.metrics_port) o.metrics_port = *f.metrics_port;
  if (f.metrics_bind) o.metrics_bind = *f.metrics_bind;
  if (!f.log_level.empty()) o.job.log_level = f.log_level;
  RETURN_IF_ERROR(config::ValidateHeterTrainerOptions(o));
  return o;
}

}  // namespace fleetps::heter
