#pragma once
// BoundedQueue<T>: a blocking multi-producer multi-consumer FIFO holding at most
// `capacity` items — the back-pressure between QueueDataset's readers and the workers.
// Thread-safe. Lifecycle: open -> Close() (producers are done; consumers drain what is
// queued) or Cancel() (drop everything; every blocked call returns at once).
// An optional depth observer sees the number of queued items after every change (under the
// queue's lock, so the last value it sees is the queue's depth): a metrics gauge.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

#include "common/check.h"

namespace fleetps::data {

template <typename T>
class BoundedQueue {
 public:
  // `on_depth` (may be empty) is called with the depth after each push, pop and Cancel; it
  // must be quick and must not call back into the queue.
  explicit BoundedQueue(size_t capacity, std::function<void(size_t depth)> on_depth = {})
      : capacity_(capacity), on_depth_(std::move(on_depth)) {
    FLEETPS_CHECK_GE(capacity, 1u);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // Blocks while full. False (item dropped) once the queue is closed or cancelled.
  bool Push(T item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [this] { return items_.size() < capacity_ || closed_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    if (on_depth_) on_depth_(items_.size());
    not_empty_.notify_one();
    return true;
  }

  // Blocks while empty and open. False when closed and drained, or cancelled.
  bool Pop(T* item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [this] { return !items_.empty() || closed_; });
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    if (on_depth_) on_depth_(items_.size());
    not_full_.notify_one();
    return true;
  }

  // No more pushes; queued items can still be popped.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  // Close() and drop the queued items.
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    items_.clear();
    if (on_depth_) on_depth_(0);
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  const size_t capacity_;
  const std::function<void(size_t)> on_depth_;
  std::mutex mu_;
  // Guarded by mu_:
  std::deque<T> items_;
  bool closed_ = false;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
};

}  // namespace fleetps::data
