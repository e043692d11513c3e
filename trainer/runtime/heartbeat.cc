#include "trainer/runtime/heartbeat.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace fleetps::trainer {

Heartbeat::Heartbeat(std::string servers, Sender send, uint32_t trainer_id, std::chrono::milliseconds interval,
                     const StopRequest* stop)
    : servers_(std::move(servers)),
      send_(std::move(send)),
      trainer_id_(trainer_id),
      interval_(interval),
      stop_request_(stop) {
  thread_ = std::thread([this] { Loop(); });
}

Heartbeat::Heartbeat(PsClient& client, uint32_t trainer_id, uint32_t trainers, std::chrono::milliseconds interval,
                     const StopRequest* stop)
    : Heartbeat(
          "the pservers",
          [&client, trainer_id, trainers](const HeartbeatState& state, std::chrono::milliseconds timeout) {
            return client.Heartbeat(trainer_id, trainers, state, timeout);
          },
          trainer_id, interval, stop) {}

Heartbeat::~Heartbeat() { StopThread(); }

void Heartbeat::Loop() {
  // A stop request is looked for this often between heartbeats, and told at once.
  constexpr std::chrono::milliseconds kStopPoll{50};
  HeartbeatState state;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    auto gone = send_(state, interval_);
    if (!gone.ok()) {
      spdlog::warn("trainer {}: heartbeat to {} failed: {}", trainer_id_, servers_, gone.status().ToString());
    } else if (!gone->empty()) {
      std::string ids;
      for (uint32_t id : *gone) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      spdlog::error(
          "trainer {}: {} count trainer(s) {} as gone (no heartbeat within "
          "server.trainer_lease_s); the job cannot complete",
          trainer_id_, servers_, ids);
    }
    lock.lock();
    const auto next = std::chrono::steady_clock::now() + interval_;
    while (!stop_ && std::chrono::steady_clock::now() < next) {
      if (!state.stopping && StopRequest::Requested(stop_request_)) {
        state.stopping = true;
        state.reason = stop_request_->reason();
        break;
      }
      cv_.wait_until(lock, stop_request_ != nullptr && !state.stopping
                               ? std::min(next, std::chrono::steady_clock::now() + kStopPoll)
                               : next);
    }
  }
}

void Heartbeat::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::Finish(const Status& job) {
  StopThread();
  // Short: a pserver that is already gone must not hold the trainer's exit.
  HeartbeatState last;
  last.finished = true;
  last.failed = !job.ok();
  last.reason = job.ok() ? "" : job.ToString();
  auto sent = send_(last, std::chrono::milliseconds(2000));
  if (!sent.ok()) {
    spdlog::warn("trainer {}: final heartbeat to {} failed: {}", trainer_id_, servers_, sent.status().ToString());
  }
}

}  // namespace fleetps::trainer
