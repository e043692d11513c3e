#pragma once
// HeterService: the heter-trainer's request handler (schemas/heter.fbs). It only decodes,
// checks and dispatches; the dense compute is a DenseDevice's, the dense parameters and
// gradient pushes a ParamSync's (the async communicator, dense table only).
//
//   HeterHello  answered at once: the job's shapes must match (else InvalidArgument)
//   HeterTrain  checked (widths, counts, finite values, labels in [0, 1]) and queued; one
//               thread per device lane takes micro-batches from the queue, refreshes the
//               lane's parameters when the communicator has a newer snapshot, runs forward,
//               loss and backward, checks that the loss, predictions and gradients are
//               finite, hands the dense gradient to the communicator and answers with the
//               loss, predictions and activation gradients. A forward_only micro-batch
//               (scoring) runs forward only: its answer has the predictions, loss 0 and no
//               activation gradients; nothing is pushed and no table changes
//   HeterFlush  on a control thread: every dense gradient accepted so far is pushed to
//               the pservers, then the parameters are refreshed
//   Heartbeat   the cpu-trainers' leases (net::TrainerRegistry): the heter-trainer exits when
//               every cpu-trainer has finished or is gone
// A malformed micro-batch gets an error reply naming the peer, trainer and batch; the
// service keeps serving. A device error fails that micro-batch only, and so do finite
// activations too large for the dense part (a loss or gradient that overflowed): that
// micro-batch's error says so, and none of its gradients reach the communicator.
// Thread-safety: Handle() is called from io threads concurrently; Start/Stop from one
// controlling thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/config/heter_config.h"
#include "common/executor.h"
#include "common/metrics/registry.h"
#include "common/net/rpc_server.h"
#include "common/status.h"
#include "heter_trainer/device/dense_device.h"
#include "common/net/trainer_registry.h"
#include "trainer/model/dense_net.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::heter {

// What the service measures (default handles measure nothing); HeterApp makes them in its
// registry and serves them on --metrics-port.
struct HeterMetrics {
  metrics::Counter micro_batches;   // micro-batches trained (forward_only ones are not)
  metrics::Counter examples;        // their rows
  metrics::Counter errors;          // micro-batches refused (malformed) or failed (device, overflow, push)
  metrics::Histogram step_seconds;  // a lane's forward + backward + hand-over, per micro-batch
  metrics::Gauge loss;              // the last micro-batch's mean log loss
  metrics::Gauge queued;            // micro-batches waiting for a lane

  static HeterMetrics In(metrics::Registry& registry);
};

class HeterService {
 public:
  // Everything passed in outlives the service.
  HeterService(const config::HeterTrainerOptions& options, const trainer::model::DenseNet& net, DenseDevice& device,
               trainer::ParamSync& dense, net::TrainerRegistry& trainers);
  ~HeterService();  // Stop()s
  HeterService(const HeterService&) = delete;
  HeterService& operator=(const HeterService&) = delete;

  // Before Start(): where to count micro-batches, examples, errors, step times.
  void SetMetrics(HeterMetrics metrics) { metrics_ = std::move(metrics); }
  // Creates one device lane per options.job.heter.lanes and starts their threads.
  Status Start();
  // Answers queued micro-batches Unavailable and joins the threads. Idempotent.
  void Stop();

  void Handle(net::Request request, net::Responder responder);
  // For RpcServerOptions::payload_allocator: micro-batches read into the device's
  // host_buffers(), which its lanes copy from without staging.
  std::function<std::shared_ptr<uint8_t[]>(uint32_t)> PayloadAllocator() const;

  uint64_t steps() const { return steps_.load(); }  // micro-batches trained

 private:
  struct Work {
    net::Request request;
    net::Responder responder;
  };
  void Hello(const net::Request& req, const net::Responder& responder);
  void Train(net::Request req, net::Responder responder);
  void Flush(const net::Request& req, const net::Responder& responder);
  void LaneLoop(uint32_t lane);
  // Runs one verified micro-batch on `lane`.
  void RunStep(uint32_t lane, const Work& work);

  const config::HeterTrainerOptions& options_;
  const trainer::model::DenseNet& net_;
  DenseDevice& device_;
  const std::shared_ptr<HostBufferPool> host_buffers_;  // device_'s
  trainer::ParamSync& dense_;
  net::TrainerRegistry& trainers_;

  // Per lane: the device lane, the snapshot its parameters came from, the step's parameter
  // gradients (its predictions and activation gradients go into the reply), in a block of the
  // device's host_buffers().
  struct Lane {
    std::unique_ptr<DenseLane> device;
    std::shared_ptr<const std::vector<float>> params;
    std::shared_ptr<uint8_t[]> param_grads_block;
    std::span<float> param_grads;
  };
  std::vector<Lane> lanes_;
  std::vector<std::thread> threads_;
  ExecutorPool control_{1};  // HeterFlush: waits for pushes to the pservers

  std::mutex mu_;  // guards queue_, stopping_
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::atomic<uint64_t> steps_{0};
  HeterMetrics metrics_;
};

}  // namespace fleetps::heter
