#pragma once
// Heartbeat: keeps this trainer's lease on a set of servers — the pservers
// (server.trainer_lease_s) or the heter-trainers — by sending a Heartbeat every
// `interval` from a background thread, and tells them when the job has ended, so that
// they can exit by themselves once every trainer has. With a StopRequest, a request is
// told at once (`stopping`: a server stopped meanwhile keeps serving this trainer until it
// has ended). A failed heartbeat is only logged: a server that is down fails the training
// calls themselves, with their own deadlines.
// Thread-safety: Finish() from the owning thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/ps_client.h"

namespace fleetps::trainer {

class Heartbeat {
 public:
  // Sends one heartbeat to every server of the set and returns the trainers some server
  // counts as gone (PsClient::Heartbeat, HeterClient::Heartbeat).
  using Sender =
      std::function<StatusOr<std::vector<uint32_t>>(const HeartbeatState& state, std::chrono::milliseconds timeout)>;
  // `servers` names the set in logs ("the pservers"). `stop` (may be null) outlives this.
  Heartbeat(std::string servers, Sender send, uint32_t trainer_id, std::chrono::milliseconds interval,
            const StopRequest* stop = nullptr);
  // The pservers of `client`, which outlives this object.
  Heartbeat(PsClient& client, uint32_t trainer_id, uint32_t trainers, std::chrono::milliseconds interval,
            const StopRequest* stop = nullptr);
  ~Heartbeat();  // stops the thread; no final message unless Finish() was called
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Stops the periodic heartbeats and sends the final one: finished, and failed with
  // job.message() when the job failed.
  void Finish(const Status& job);

 private:
  void Loop();
  void StopThread();

  const std::string servers_;
  const Sender send_;
  const uint32_t trainer_id_;
  const std::chrono::milliseconds interval_;
  const StopRequest* const stop_request_;
  std::mutex mu_;  // guards stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fleetps::trainer
