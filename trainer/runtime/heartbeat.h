#pragma once
// Heartbeat: keeps this trainer's lease on every pserver (server.trainer_lease_s) by
// sending a Heartbeat every `interval` from a background thread, and tells the pservers
// when the job has ended, so that they can exit by themselves once every trainer has.
// A failed heartbeat is only logged: a pserver that is down fails the training calls
// themselves, with their own deadlines. Thread-safety: Finish() from the owning thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "trainer/client/ps_client.h"

namespace fleetps::trainer {

class Heartbeat {
 public:
  // `client` outlives this object.
  Heartbeat(PsClient& client, uint32_t trainer_id, uint32_t trainers, std::chrono::milliseconds interval);
  ~Heartbeat();  // stops the thread; no final message unless Finish() was called
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Stops the periodic heartbeats and sends the final one: finished, and failed with
  // job.message() when the job failed.
  void Finish(const Status& job);

 private:
  void Loop();
  void StopThread();

  PsClient& client_;
  const uint32_t trainer_id_;
  const uint32_t trainers_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;  // guards stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fleetps::trainer
