#pragma once
// InMemoryDataset: loads this trainer's files into memory once, shuffles them (locally, or
// globally across trainers) and serves any number of passes of batches to worker threads.
//
// Records are stored row by row in RecordBlocks (up to kBlockRows records each, spare
// capacity dropped) plus an order index of 8 bytes per record that shuffles permute;
// NextBatch gathers a batch's records from the blocks into a columnar Batch. Loading is
// deterministic (blocks follow the file list order whatever the thread timing), so a
// shuffle with a given seed always gives the same order for the same files (and the same
// standard library).
//
// Thread-safety: LoadIntoMemory, the shuffles, ReleaseMemory, StartPass and EndPass are
// driver-thread calls, never concurrent with each other or with a pass; NextBatch is for
// the pass's workers; ReceiveRecords may be called from any thread at any time (while other
// trainers shuffle), its records stay aside until FinishGlobalShuffle.
//
// Global shuffle, on each of trainers_num trainers:
//   GlobalShuffle(transport, ...)   every record goes to a random trainer; memory is emptied
//   <barrier: every trainer has finished GlobalShuffle>   (the caller's job)
//   FinishGlobalShuffle(seed)       the received records become the data, shuffled

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config/data_config.h"
#include "common/stop_request.h"
#include "trainer/data/dataset.h"
#include "trainer/data/line_format.h"
#include "trainer/data/record_block.h"
#include "trainer/data/record_transport.h"

namespace fleetps::data {

class InMemoryDataset : public Dataset {
 public:
  static constexpr size_t kBlockRows = 4096;  // records per stored / shipped block

  // `files`: this trainer's files (ListTrainerFiles). `batch_size` >= 1: examples per batch.
  // `trainer_id` seeds the global shuffle's destinations differently on each trainer.
  InMemoryDataset(const config::DataOptions& options, std::vector<std::string> files, size_t batch_size,
                  uint32_t trainer_id = 0);
  InMemoryDataset(const InMemoryDataset&) = delete;
  InMemoryDataset& operator=(const InMemoryDataset&) = delete;

  // After each file read: files read so far, files in all, examples so far. Called from the
  // loading threads (one at a time).
  using LoadProgressFn = std::function<void(size_t files_done, size_t files, uint64_t examples)>;

  // Replaces the records in memory with the files' records, parsed by options.thread_num
  // threads; `on_file` (may be empty) hears of each file read. On error nothing is kept and
  // the first error is returned. A request on `stop` (may be null) ends the load within a
  // block of records: Aborted, nothing kept.
  Status LoadIntoMemory(const LoadProgressFn& on_file = {}, const StopRequest* stop = nullptr);

  // Permutes the record order with a generator seeded by `seed`.
  void LocalShuffle(uint64_t seed);

  // DistributedBatchSampler (DataOptions::sampler): restores the load order of every record
  // in memory, permutes it as LocalShuffle(seed) does when `shuffle`, pads it by repeating its
  // first records (cyclically) to a multiple of `world`, and keeps positions rank,
  // rank + world, ...: ceil(records / world) of them. Every rank that loaded the same files
  // and passes the same seed gets a disjoint share (but for the padding) of equal size.
  // The records stay in memory: the next call samples from all of them again.
  void SampleShard(uint32_t rank, uint32_t world, bool shuffle, uint64_t seed);

  // Sends every record in memory to trainer dest ~ uniform[0, trainers_num) (seeded by
  // `seed` and this trainer's id) through `transport`, in blocks of at most kBlockRows, and
  // empties memory as it goes. On a transport error the unsent records are lost (load
  // again).
  Status GlobalShuffle(RecordTransport* transport, uint32_t trainers_num, uint64_t seed);
  // Takes records sent to this trainer by trainer `from`. Thread-safe.
  void ReceiveRecords(uint32_t from, RecordBlock records);
  // Makes the received records the data (ordered by sender, then arrival) and
  // LocalShuffle(seed)s them. Call once every trainer's GlobalShuffle has returned.
  void FinishGlobalShuffle(uint64_t seed);

  // Frees the records in memory.
  void ReleaseMemory();

  uint32_t dense_dim() const { return options_.dense_dim; }
  uint32_t num_slots() const { return static_cast<uint32_t>(options_.sparse_slots.size()); }
  uint32_t num_labels() const { return options_.num_labels(); }
  size_t size() const { return order_.size(); }  // records in memory
  size_t MemoryBytes() const;                    // heap bytes of the records and the index

  // Restricts the passes that follow to part `part` of `parts` consecutive ranges of the
  // records in their order at StartPass (GPU-PS sub-passes: fleetps.gpups.passes_per_epoch);
  // the parts' sizes differ by at most one record. (0, 1), the default, is every record.
  void SetPassPart(uint32_t part, uint32_t parts);

  // The same while every pass reads every record in memory and none was loaded, exchanged
  // or resampled since (a reorder keeps it); nullopt while passes read parts of the records.
  std::optional<uint64_t> PassRecordsId() const override;

  Status StartPass() override;  // rewinds over the records (of the part) in their current order
  StatusOr<bool> NextBatch(Batch* batch) override;
  void EndPass() override {}
  ReadStats stats() const override { return progress_.Snapshot(); }

 private:
  struct RowRef {
    uint32_t block;
    uint32_t row;
  };

  // Replaces the data with `blocks`, in order.
  void SetBlocks(std::vector<RecordBlock> blocks);
  // Every record of blocks_, in block order.
  std::vector<RowRef> LoadOrder() const;
  RecordBlock EmptyBlock() const;

  const config::DataOptions options_;
  const std::vector<std::string> files_;
  const size_t batch_size_;
  const uint32_t trainer_id_;
  const std::unique_ptr<const LineFormat> format_;
  ReadProgress progress_;

  std::vector<RecordBlock> blocks_;
  std::vector<RowRef> order_;
  uint32_t part_ = 0, parts_ = 1;  // SetPassPart
  uint64_t records_id_;            // changes whenever the records in order_ do (PassRecordsId)
  size_t pass_end_ = 0;            // end in order_ of the running pass
  std::atomic<size_t> cursor_{0};  // next position in order_ of the running pass

  std::mutex inbox_mu_;
  std::map<uint32_t, std::vector<RecordBlock>> inbox_;  // sender -> blocks in arrival order; guarded by inbox_mu_
};

// Delivers records by calling ReceiveRecords on the destination's dataset in this process:
// for tests, and for a single trainer (trainers = {&dataset}).
class InProcessRecordTransport : public RecordTransport {
 public:
  // `self`: the sending trainer's id. `trainers[k]` is trainer k's dataset; the datasets
  // outlive the transport (they belong to the test or the trainer App).
  InProcessRecordTransport(uint32_t self, std::vector<InMemoryDataset*> trainers);

  Status Send(uint32_t to, RecordBlock records) override;

 private:
  const uint32_t self_;
  const std::vector<InMemoryDataset*> trainers_;
};

}  // namespace fleetps::data
