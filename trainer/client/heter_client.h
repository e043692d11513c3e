#pragma once
// HeterClient: a cpu-trainer's client of the heter-trainers of the next stage
// (heterogeneous training, schemas/heter.fbs).
//
// Train() sends one micro-batch's activations and labels to a heter-trainer — in turn
// (round robin) or always the same one (by trainer id) — and completes its future with
// the loss, predictions and activation gradients. Many micro-batches may be in flight at
// once over the pipelined connections; the caller bounds how many. Every call has a
// deadline (rpc.request_timeout): a heter-trainer that died or stopped answering fails
// the call with an error naming it (Unavailable or TimedOut). With failover, such a
// micro-batch is sent again to the next heter-trainer that is up, and the failed one is
// down: it gets no micro-batches, heartbeats or flushes until it answers HeterHello again
// (probed every failover_probe_interval, so a restarted heter-trainer rejoins); a call fails
// only when every heter-trainer is down.
// Thread-safety: all methods are thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/net/endpoint.h"
#include "common/net/rpc_client.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/client/heartbeat_state.h"

namespace fleetps::net {
class IoThreads;
}

namespace fleetps::trainer {

struct HeterClientOptions {
  std::vector<net::Endpoint> heter_trainers;  // the next stage, in order
  bool route_by_trainer_id = false;           // false: round robin
  bool failover = false;
  uint32_t trainer_id = 0;
  uint32_t trainers = 1;      // PADDLE_TRAINERS_NUM
  uint32_t input_width = 0;   // floats per activation row
  uint64_t dense_params = 0;  // floats of the dense table the model needs
  uint32_t labels = 1;        // labels per row (the data's label_slots)
  uint32_t outputs = 1;       // predictions per row (the model's outputs)
  int io_threads = 2;
  net::RpcClientOptions rpc;                                 // request_timeout: the deadline of a micro-batch
  std::chrono::milliseconds failover_probe_interval{10000};  // a down heter-trainer is probed this often
};

// One micro-batch's answer. The spans point into `reply`.
struct HeterStep {
  net::Reply reply;
  float loss = 0;
  std::span<const float> predictions;       // rows x outputs
  std::span<const float> activation_grads;  // rows x width; empty when forward_only
};

class HeterClient {
 public:
  // Connects to every heter-trainer (retrying until rpc.connect_timeout) and checks with
  // HeterHello that each serves this job (the same input width and dense size).
  static StatusOr<std::unique_ptr<HeterClient>> Connect(HeterClientOptions options);
  ~HeterClient();
  HeterClient(const HeterClient&) = delete;
  HeterClient& operator=(const HeterClient&) = delete;

  // Sends one micro-batch: activations [rows x input_width], labels [rows]. Both spans
  // must stay valid until the future is ready (a failover re-sends them). `forward_only`
  // (scoring): the heter-trainer computes the predictions only and changes nothing; the
  // answer's loss is 0 and its activation_grads empty.
  std::future<StatusOr<HeterStep>> Train(uint64_t batch_id, uint32_t rows, std::span<const float> activations,
                                         std::span<const float> labels, bool forward_only = false);
  // Every heter-trainer pushes its pending dense gradients to the pservers and waits for
  // them (HeterFlush). With failover, the down ones are skipped, and one that fails now is
  // marked down with a warning (what it had not pushed is lost with it), not an error.
  Status Flush();
  // This trainer's heartbeat to every heter-trainer (they exit when every cpu-trainer
  // has finished; with failover, to those that are up, but the final one, `finished`, to
  // all). Returns the trainers some heter-trainer counts as gone.
  StatusOr<std::vector<uint32_t>> Heartbeat(const HeartbeatState& state, std::chrono::milliseconds timeout);

  size_t size() const { return clients_.size(); }
  // "heter-trainer 0 (10.0.0.5:8600)"
  const std::string& name(size_t i) const { return clients_[i]->name(); }

 private:
  struct Call;  // one Train() from send to answer
  explicit HeterClient(HeterClientOptions options);
  Status Hello(size_t i);
  flatbuffers::DetachedBuffer HelloRequest() const;
  Status CheckHello(size_t i, const StatusOr<net::Reply>& reply) const;
  void Send(std::shared_ptr<Call> call, size_t target);
  void OnReply(std::shared_ptr<Call> call, size_t target, StatusOr<net::Reply> reply);
  // The heter-trainer of a fresh micro-batch: the routed one, or with failover the next one
  // that is up (the routed one when none is).
  size_t Route() EXCLUDES(mu_);
  // Failover: marks `failed` down and returns the next heter-trainer that is up, or -1.
  int NextLive(size_t failed) EXCLUDES(mu_);
  void MarkDownLocked(size_t i, std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // The down heter-trainers whose next probe is due, marked as being probed.
  std::vector<size_t> DueProbesLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // Sends HeterHello to heter-trainer i (down); when it answers, it is up again.
  void Probe(size_t i) EXCLUDES(mu_);
  // The heter-trainers that are up (all of them without failover).
  std::vector<size_t> UpTargets() EXCLUDES(mu_);

  // Failover state of a heter-trainer.
  struct Health {
    bool down = false;                               // failed a call: skipped until it answers HeterHello
    bool probing = false;                            // a HeterHello to it is under way
    std::chrono::steady_clock::time_point probe_at;  // when down: its next probe
  };

  const HeterClientOptions options_;
  std::unique_ptr<net::IoThreads> io_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::atomic<uint64_t> next_{0};
  Mutex mu_;  // guards health_
  std::vector<Health> health_ GUARDED_BY(mu_);
};

}  // namespace fleetps::trainer
