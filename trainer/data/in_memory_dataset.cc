#include "trainer/data/in_memory_dataset.h"

#include <algorithm>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/check.h"
#include "common/sharding.h"
#include "trainer/data/file_reader.h"

namespace fleetps::data {

namespace {

// A dataset's first records identity: random, so that no two datasets share one.
uint64_t RandomId() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

InMemoryDataset::InMemoryDataset(const config::DataOptions& options, std::vector<std::string> files, size_t batch_size,
                                 uint32_t trainer_id)
    : options_(options),
      files_(std::move(files)),
      batch_size_(batch_size),
      trainer_id_(trainer_id),
      format_(MakeLineFormat(options)),
      records_id_(RandomId()) {
  FLEETPS_CHECK_GE(batch_size_, 1u);
}

RecordBlock InMemoryDataset::EmptyBlock() const { return RecordBlock(options_.dense_dim, num_slots(), num_labels()); }

Status InMemoryDataset::LoadIntoMemory(const LoadProgressFn& on_file, const StopRequest* stop) {
  ReleaseMemory();
  progress_.Reset();
  // Blocks are collected per file so that their order does not depend on thread timing.
  std::vector<std::vector<RecordBlock>> file_blocks(files_.size());
  std::atomic<size_t> next_file{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  Status error;  // guarded by error_mu
  std::mutex progress_mu;
  size_t files_done = 0;  // guarded by progress_mu
  uint64_t examples = 0;  // guarded by progress_mu

  auto load_files = [&] {
    FileReader reader(*format_, options_.skip_bad_lines, &progress_);
    while (!failed) {
      const size_t i = next_file++;
      if (i >= files_.size()) return;
      std::vector<RecordBlock>& blocks = file_blocks[i];
      const auto close_block = [&blocks] { blocks.back().ShrinkToFit(); };
      if (StopRequest::Requested(stop)) return;  // the load's end reports it
      blocks.push_back(EmptyBlock());
      Status status = reader.ReadFile(files_[i], [&](const Example& example) {
        if (blocks.back().size() == kBlockRows) {
          close_block();
          if (StopRequest::Requested(stop)) return Status::Aborted("stop requested");
          blocks.push_back(EmptyBlock());
        }
        blocks.back().Append(example);
        return Status::OK();
      });
      close_block();
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.ok()) error = status;
        failed = true;
      } else if (on_file) {
        uint64_t file_examples = 0;
        for (const RecordBlock& block : blocks) file_examples += block.size();
        std::lock_guard<std::mutex> lock(progress_mu);
        examples += file_examples;
        on_file(++files_done, files_.size(), examples);
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t num_threads = std::min<size_t>(options_.thread_num, files_.size());
  for (size_t t = 0; t < num_threads; ++t) threads.emplace_back(load_files);
  for (auto& thread : threads) thread.join();
  if (StopRequest::Requested(stop) && (error.ok() || error.code() == StatusCode::kAborted)) {
    error = Status::Aborted(fmt::format("{} while loading data into memory ({} of {} files read); nothing was kept",
                                        stop->reason(), files_done, files_.size()));
  }
  if (!error.ok()) return error;

  std::vector<RecordBlock> blocks;
  for (auto& list : file_blocks) {
    for (auto& block : list) {
      if (!block.empty()) blocks.push_back(std::move(block));
    }
  }
  SetBlocks(std::move(blocks));
  return Status::OK();
}

void InMemoryDataset::SetBlocks(std::vector<RecordBlock> blocks) {
  ReleaseMemory();
  FLEETPS_CHECK_LT(blocks.size(), std::numeric_limits<uint32_t>::max());
  blocks_ = std::move(blocks);
  order_ = LoadOrder();
}

std::vector<InMemoryDataset::RowRef> InMemoryDataset::LoadOrder() const {
  size_t rows = 0;
  for (const auto& block : blocks_) rows += block.size();
  std::vector<RowRef> order;
  order.reserve(rows);
  for (uint32_t b = 0; b < blocks_.size(); ++b) {
    for (uint32_t r = 0; r < blocks_[b].size(); ++r) order.push_back(RowRef{b, r});
  }
  return order;
}

void InMemoryDataset::LocalShuffle(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(order_.begin(), order_.end(), rng);
}

void InMemoryDataset::SampleShard(uint32_t rank, uint32_t world, bool shuffle, uint64_t seed) {
  FLEETPS_CHECK_GE(world, 1u);
  FLEETPS_CHECK_LT(rank, world);
  ++records_id_;
  order_ = LoadOrder();
  if (shuffle) LocalShuffle(seed);
  const size_t n = order_.size();
  if (n == 0) return;
  const size_t share = (n + world - 1) / world;
  std::vector<RowRef> mine;
  mine.reserve(share);
  for (size_t i = 0; i < share; ++i) mine.push_back(order_[(rank + i * world) % n]);
  order_ = std::move(mine);
}

Status InMemoryDataset::GlobalShuffle(RecordTransport* transport, uint32_t trainers_num, uint64_t seed) {
  FLEETPS_CHECK_GE(trainers_num, 1u);
  std::mt19937_64 rng(MixKey(seed) ^ MixKey(trainer_id_));
  std::vector<RecordBlock> blocks = std::move(blocks_);
  ReleaseMemory();
  std::vector<RecordBlock> outgoing(trainers_num, EmptyBlock());
  for (RecordBlock& block : blocks) {
    for (size_t i = 0; i < block.size(); ++i) {
      const auto to = static_cast<uint32_t>(rng() % trainers_num);
      outgoing[to].AppendRecord(block, i);
      if (outgoing[to].size() == kBlockRows) {
        RETURN_IF_ERROR(transport->Send(to, std::exchange(outgoing[to], EmptyBlock())));
      }
    }
    block = RecordBlock();  // frees memory as records leave
  }
  for (uint32_t to = 0; to < trainers_num; ++to) {
    if (!outgoing[to].empty()) RETURN_IF_ERROR(transport->Send(to, std::move(outgoing[to])));
  }
  return Status::OK();
}

void InMemoryDataset::ReceiveRecords(uint32_t from, RecordBlock records) {
  FLEETPS_CHECK_EQ(records.dense_dim(), options_.dense_dim);
  FLEETPS_CHECK_EQ(records.num_slots(), options_.sparse_slots.size());
  FLEETPS_CHECK_EQ(records.num_labels(), num_labels());
  records.ShrinkToFit();
  std::lock_guard<std::mutex> lock(inbox_mu_);
  inbox_[from].push_back(std::move(records));
}

void InMemoryDataset::FinishGlobalShuffle(uint64_t seed) {
  std::map<uint32_t, std::vector<RecordBlock>> inbox;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox.swap(inbox_);
  }
  std::vector<RecordBlock> blocks;
  for (auto& [from, list] : inbox) {
    for (auto& block : list) blocks.push_back(std::move(block));
  }
  SetBlocks(std::move(blocks));
  LocalShuffle(seed);
}

void InMemoryDataset::ReleaseMemory() {
  ++records_id_;  // also SetBlocks' and GlobalShuffle's: both release the records first
  std::vector<RecordBlock>().swap(blocks_);
  std::vector<RowRef>().swap(order_);
}

size_t InMemoryDataset::MemoryBytes() const {
  size_t bytes = blocks_.capacity() * sizeof(RecordBlock) + order_.capacity() * sizeof(RowRef);
  for (const auto& block : blocks_) bytes += block.MemoryBytes();
  return bytes;
}

void InMemoryDataset::SetPassPart(uint32_t part, uint32_t parts) {
  parts_ = std::max<uint32_t>(parts, 1);
  part_ = std::min(part, parts_ - 1);
}

std::optional<uint64_t> InMemoryDataset::PassRecordsId() const {
  if (parts_ > 1) return std::nullopt;
  return records_id_;
}

Status InMemoryDataset::StartPass() {
  const size_t n = order_.size();
  cursor_ = n * part_ / parts_;
  pass_end_ = n * (part_ + 1) / parts_;
  return Status::OK();
}

StatusOr<bool> InMemoryDataset::NextBatch(Batch* batch) {
  const size_t begin = cursor_.fetch_add(batch_size_);
  const size_t pass_end = std::min(pass_end_, order_.size());
  if (begin >= pass_end) return false;
  const size_t end = std::min(pass_end, begin + batch_size_);
  if (batch->dense_dim == options_.dense_dim && batch->num_slots() == options_.sparse_slots.size() &&
      batch->num_labels == num_labels()) {
    batch->Clear();
  } else {
    *batch = Batch(options_.dense_dim, options_.sparse_slots.size(), num_labels());
  }
  batch->Reserve(end - begin);
  for (size_t i = begin; i < end; ++i) blocks_[order_[i].block].AppendToBatch(order_[i].row, batch);
  return true;
}

InProcessRecordTransport::InProcessRecordTransport(uint32_t self, std::vector<InMemoryDataset*> trainers)
    : self_(self), trainers_(std::move(trainers)) {
  FLEETPS_CHECK_LT(self_, trainers_.size());
}

Status InProcessRecordTransport::Send(uint32_t to, RecordBlock records) {
  FLEETPS_CHECK_LT(to, trainers_.size());
  trainers_[to]->ReceiveRecords(self_, std::move(records));
  return Status::OK();
}

}  // namespace fleetps::data
