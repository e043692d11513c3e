#pragma once
// The heter-trainer composition root: the dense model, its device, the pserver client and
// the dense communicator, the cpu-trainer registry, the service and the RPC server.
// main() only parses options and runs a HeterApp; tests run the same App in-process.
//
// Lifecycle: Start() picks the device (HETER_DEVICE_TYPE; "auto" = a GPU when one is
// visible), connects to the pservers and checks the dense table's size, starts the device
// lanes and listens. WaitForShutdown() blocks until SIGINT/SIGTERM, or until every
// cpu-trainer of the job has finished or is gone (the heartbeats' registry, swept every
// 500 ms). A first signal while cpu-trainers are alive keeps serving those that say they
// are stopping until they have ended (net::StopWait: every process of a job stopped at
// once; their last micro-batches and HeterFlush are answered); a second one shuts down. Shutdown() stops accepting, drains, pushes the dense gradients still pending and
// tears down in reverse order. With fleetps.heter.dense_sync: allreduce, Start() also
// meets the other heter-trainers (Gloo, rendezvous on heter-trainer 0's allreduce_port)
// and Shutdown() takes part in their rounds until every heter-trainer has left.
// Thread-safety: Start/WaitForShutdown/Shutdown from one controlling thread;
// RequestShutdown() from anywhere.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/config/heter_config.h"
#include "common/net/security.h"
#include "common/status.h"
#include "common/net/trainer_registry.h"

namespace fleetps {
namespace metrics {
class Registry;
}
namespace net {
class AuthKey;
class HttpEndpoint;
class TlsContext;
class IoThreads;
class RpcServer;
}  // namespace net
namespace trainer {
class AllreduceDenseSync;
class ParamSync;
class PsClient;
namespace collective {
class Communicator;
}
namespace model {
class DenseNet;
}
}  // namespace trainer
}  // namespace fleetps

namespace fleetps::heter {

// heter-trainer's command line for the dense service, as given (empty / nullopt: not given).
struct HeterFlags {
  std::string config_path, endpoint, heter_trainers, servers, device, log_level;
  std::optional<uint32_t> trainers, lanes;
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
  std::optional<int> gpu;
};

// The heter-trainer's options from `flags` and the environment `env` (precedence: flags >
// environment > YAML > defaults, common/config/heter_config.h), validated; errors name the
// flag, variable or key at fault.
StatusOr<config::HeterTrainerOptions> ResolveHeterApp(const HeterFlags& flags, const config::EnvLookup& env);

class DenseDevice;
class HeterService;

class HeterApp {
 public:
  explicit HeterApp(config::HeterTrainerOptions options);
  ~HeterApp();  // Shutdown()s
  HeterApp(const HeterApp&) = delete;
  HeterApp& operator=(const HeterApp&) = delete;

  Status Start();
  uint16_t port() const;
  uint16_t metrics_port() const;    // the /metrics port (0: off)
  std::string MetricsText() const;  // the /metrics page (Prometheus text), served or not
  void WaitForShutdown(bool handle_signals);
  void RequestShutdown(const std::string& reason);
  void Shutdown();
  // 1 when it exited by itself because the cpu-trainers ended and some failed or were
  // gone; 0 otherwise.
  int exit_code() const;
  // True when an io thread runs a task posted now within `timeout`: the health check behind
  // the systemd watchdog (WatchdogSec=). False before Start() has finished and once
  // Shutdown() has begun.
  bool IoResponsive(std::chrono::milliseconds timeout);

 private:
  void SweepLoop();
  // The sweeper's part of a stop signal (sweeper thread).
  void OnStopSignal(int signo, const net::TrainerRegistry::Sweep& sweep);
  // dense_sync allreduce: meets the other heter-trainers; the replicas start from
  // heter-trainer 0's copy of the pservers' dense parameters at the first micro-batch.
  Status StartAllreduce(const net::ClusterSecurity& security);

  config::HeterTrainerOptions options_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<net::HttpEndpoint> metrics_http_;  // opt-in: options_.metrics_port
  std::unique_ptr<trainer::model::DenseNet> net_;
  std::unique_ptr<DenseDevice> device_;
  std::unique_ptr<trainer::PsClient> client_;
  std::unique_ptr<trainer::collective::Communicator> comm_;  // dense_sync allreduce only
  std::unique_ptr<trainer::ParamSync> dense_;
  trainer::AllreduceDenseSync* allreduce_ = nullptr;  // dense_, when it is one
  std::unique_ptr<net::TrainerRegistry> trainers_;
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<HeterService> service_;
  std::unique_ptr<net::RpcServer> rpc_;
  std::thread sweeper_;
  int signals_seen_ = 0;                    // sweeper thread only
  std::optional<net::StopWait> stop_wait_;  // sweeper thread only

  mutable std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  bool shutdown_requested_ = false;
  std::string shutdown_reason_;
  bool stopped_ = false;
  bool serving_ = false;  // Start() finished, Shutdown() not begun: io_ may be posted to
  bool started_ = false;  // Start() succeeded
  int exit_code_ = 0;
  int pending_signal_ = 0;  // a signal for the sweeper to handle
};

}  // namespace fleetps::heter
