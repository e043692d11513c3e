#pragma once
// ExecutorPool: a fixed set of worker threads, each draining its own FIFO queue.
//
// Work posted to lane i always runs on thread i % num_threads, in posting order, so a
// shard mapped to a lane has exactly one owner thread and needs no locks on its data
// (seastar-style sharding). Thread-safety: Post() is thread-safe.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fleetps {

class ExecutorPool {
 public:
  // Returns once every thread is running, so a process that announces it is ready after
  // building its pools starts no thread later (say, while it is out of file descriptors).
  explicit ExecutorPool(size_t num_threads);
  ~ExecutorPool();  // Stop()s
  ExecutorPool(const ExecutorPool&) = delete;
  ExecutorPool& operator=(const ExecutorPool&) = delete;

  size_t num_threads() const { return lanes_.size(); }
  // Runs `task` on the thread of `lane`. After Stop() tasks are dropped.
  void Post(size_t lane, std::function<void()> task);
  // Runs every task already posted, then joins the threads. Idempotent.
  void Stop();

 private:
  struct Lane {
    std::mutex mu;  // guards tasks, stopping
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    bool stopping = false;
    std::thread thread;
  };
  void Run(Lane* lane);

  std::latch started_;  // counted down by each thread as it starts
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace fleetps
