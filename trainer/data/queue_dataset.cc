#include "trainer/data/queue_dataset.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "trainer/data/file_reader.h"

namespace fleetps::data {

QueueDataset::QueueDataset(const config::DataOptions& options, std::vector<std::string> files, size_t batch_size)
    : options_(options), files_(std::move(files)), batch_size_(batch_size), format_(MakeLineFormat(options)) {
  FLEETPS_CHECK_GE(batch_size_, 1u);
}

QueueDataset::~QueueDataset() { EndPass(); }

Status QueueDataset::StartPass() {
  FLEETPS_CHECK(readers_.empty()) << "StartPass while a pass is running; call EndPass first";
  queue_ = std::make_unique<BoundedQueue<Batch>>(options_.queue_capacity, on_depth_);
  next_file_ = 0;
  error_ = Status::OK();
  progress_.Reset();
  const size_t readers = std::min<size_t>(options_.thread_num, files_.size());
  running_readers_ = readers;
  if (readers == 0) queue_->Close();
  for (size_t i = 0; i < readers; ++i) readers_.emplace_back([this] { ReaderLoop(); });
  return Status::OK();
}

void QueueDataset::ReaderLoop() {
  const auto empty_batch = [this] {
    Batch batch(options_.dense_dim, options_.sparse_slots.size(), options_.num_labels());
    batch.Reserve(batch_size_);
    return batch;
  };
  Batch pending = empty_batch();  // this reader's batch being filled; may span files
  const auto push = [&] {
    return queue_->Push(std::exchange(pending, empty_batch())) ? Status::OK() : Status::Aborted("pass ended");
  };
  const FileReader::Sink sink = [&](const Example& example) {
    pending.Append(example);
    return pending.size() == batch_size_ ? push() : Status::OK();
  };

  FileReader reader(*format_, options_.skip_bad_lines, &progress_);
  Status status;
  while (status.ok()) {
    const size_t i = next_file_++;
    if (i >= files_.size()) break;
    status = reader.ReadFile(files_[i], sink);
  }
  if (status.ok() && !pending.empty()) status = push();
  if (!status.ok()) Fail(status);
  // The last reader out ends the pass for the consumers.
  if (--running_readers_ == 0) queue_->Close();
}

void QueueDataset::Fail(const Status& error) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.ok()) error_ = error;
  }
  queue_->Cancel();
}

StatusOr<bool> QueueDataset::NextBatch(Batch* batch) {
  FLEETPS_CHECK(queue_ != nullptr) << "NextBatch before StartPass";
  if (queue_->Pop(batch)) return true;
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!error_.ok()) return error_;
  return false;
}

void QueueDataset::EndPass() {
  if (queue_) queue_->Cancel();
  for (auto& reader : readers_) reader.join();
  readers_.clear();
}

}  // namespace fleetps::data
