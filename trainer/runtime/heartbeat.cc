#include "trainer/runtime/heartbeat.h"

#include <spdlog/spdlog.h>

namespace fleetps::trainer {

Heartbeat::Heartbeat(std::string servers, Sender send, uint32_t trainer_id, std::chrono::milliseconds interval)
    : servers_(std::move(servers)), send_(std::move(send)), trainer_id_(trainer_id), interval_(interval) {
  thread_ = std::thread([this] { Loop(); });
}

Heartbeat::Heartbeat(PsClient& client, uint32_t trainer_id, uint32_t trainers, std::chrono::milliseconds interval)
    : Heartbeat(
          "the pservers",
          [&client, trainer_id, trainers](bool finished, bool failed, const std::string& reason,
                                          std::chrono::milliseconds timeout) {
            return client.Heartbeat(trainer_id, trainers, finished, failed, reason, timeout);
          },
          trainer_id, interval) {}

Heartbeat::~Heartbeat() { StopThread(); }

void Heartbeat::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    auto gone = send_(false, false, "", interval_);
    if (!gone.ok()) {
      spdlog::warn("trainer {}: heartbeat to {} failed: {}", trainer_id_, servers_, gone.status().ToString());
    } else if (!gone->empty()) {
      std::string ids;
      for (uint32_t id : *gone) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      spdlog::error("trainer {}: {} count trainer(s) {} as gone (no heartbeat within "
                    "server.trainer_lease_s); the job cannot complete",
                    trainer_id_, servers_, ids);
    }
    lock.lock();
    cv_.wait_for(lock, interval_, [this] { return stop_; });
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
  auto sent = send_(true, !job.ok(), job.ok() ? "" : job.ToString(), std::chrono::milliseconds(2000));
  if (!sent.ok()) {
    spdlog::warn("trainer {}: final heartbeat to {} failed: {}", trainer_id_, servers_, sent.status().ToString());
  }
}

}  // namespace fleetps::trainer
