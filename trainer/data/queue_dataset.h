#pragma once
// QueueDataset: streams this trainer's files through reader threads into a bounded queue
// of batches that worker threads consume — memory stays at about
// (queue_capacity + thread_num) batches whatever the data size.
//
// Each pass re-reads every file. options.thread_num readers take files in turn from the
// list; a reader's batches may span its files and each reader's last batch may be partial.
// Batch order across readers is not deterministic. The first error (malformed line without
// skip_bad_lines, unreadable file) cancels the pass and NextBatch returns it to every
// worker. Thread-safety: see Dataset.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config/data_config.h"
#include "trainer/data/bounded_queue.h"
#include "trainer/data/dataset.h"
#include "trainer/data/line_format.h"

namespace fleetps::data {

class QueueDataset : public Dataset {
 public:
  // `files`: this trainer's files (ListTrainerFiles). `batch_size` >= 1: examples per batch
  // (options.batch_size for training, options.test_batch_size for evaluation).
  QueueDataset(const config::DataOptions& options, std::vector<std::string> files, size_t batch_size);
  ~QueueDataset() override;  // ends a running pass
  QueueDataset(const QueueDataset&) = delete;
  QueueDataset& operator=(const QueueDataset&) = delete;

  Status StartPass() override;
  StatusOr<bool> NextBatch(Batch* batch) override;
  void EndPass() override;
  ReadStats stats() const override { return progress_.Snapshot(); }

  // Sees the reader -> worker queue's depth (batches read and not yet taken by a worker)
  // after every change, from the reader and worker threads: see BoundedQueue. Set before
  // StartPass; applies from the next pass.
  void SetDepthObserver(std::function<void(size_t depth)> on_depth) { on_depth_ = std::move(on_depth); }

 private:
  void ReaderLoop();
  // Records the pass's first error and cancels the queue.
  void Fail(const Status& error);

  const config::DataOptions options_;
  const std::vector<std::string> files_;
  const size_t batch_size_;
  const std::unique_ptr<const LineFormat> format_;
  ReadProgress progress_;
  std::function<void(size_t)> on_depth_;  // driver thread; copied into each pass's queue

  // Pass state: (re)set by StartPass while no reader runs, then shared with the readers.
  std::unique_ptr<BoundedQueue<Batch>> queue_;
  std::atomic<size_t> next_file_{0};
  std::atomic<size_t> running_readers_{0};
  std::vector<std::thread> readers_;  // driver thread only
  std::mutex error_mu_;
  Status error_;  // guarded by error_mu_
};

}  // namespace fleetps::data
