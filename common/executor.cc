#include "common/executor.h"

#include <exception>

#include <spdlog/spdlog.h>

#include "common/check.h"

namespace fleetps {

ExecutorPool::ExecutorPool(size_t num_threads) : started_(static_cast<std::ptrdiff_t>(num_threads)) {
  FLEETPS_CHECK_GE(num_threads, 1u);
  for (size_t i = 0; i < num_threads; ++i) lanes_.push_back(std::make_unique<Lane>());
  for (auto& lane : lanes_) {
    lane->thread = std::thread([this, l = lane.get()] {
      started_.count_down();
      Run(l);
    });
  }
  started_.wait();
}

ExecutorPool::~ExecutorPool() { Stop(); }

void ExecutorPool::Post(size_t lane_index, std::function<void()> task) {
  Lane& lane = *lanes_[lane_index % lanes_.size()];
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    if (lane.stopping) return;
    lane.tasks.push_back(std::move(task));
  }
  lane.cv.notify_one();
}

void ExecutorPool::Run(Lane* lane) {
  std::deque<std::function<void()>> batch;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(lane->mu);
      lane->cv.wait(lock, [lane] { return lane->stopping || !lane->tasks.empty(); });
      if (lane->tasks.empty()) return;  // stopping and drained
      batch.swap(lane->tasks);
    }
    for (auto& task : batch) {
      // A task that throws (std::bad_alloc, a bug) must not end the process: log it and go
      // on. Tasks that answer a request hold a Responder, whose destructor still answers.
      try {
        task();
      } catch (const std::exception& e) {
        spdlog::error("executor lane task failed with an exception: {}", e.what());
      } catch (...) {
        spdlog::error("executor lane task failed with a non-standard exception");
      }
    }
    batch.clear();
  }
}

void ExecutorPool::Stop() {
  for (auto& lane : lanes_) {
    {
      std::lock_guard<std::mutex> lock(lane->mu);
      lane->stopping = true;
    }
    lane->cv.notify_all();
  }
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
  }
}

}  // namespace fleetps
