#pragma once
// Dataset: what a training loop consumes — passes of Batches shared by several worker
// threads. Implementations: QueueDataset (streams files every pass) and InMemoryDataset
// (loads once, shuffles). Lifecycle per pass, driven by one thread:
//   StartPass(); workers call NextBatch() until it returns false or an error; EndPass().

#include <cstdint>
#include <optional>

#include "common/status.h"
#include "trainer/data/batch.h"
#include "trainer/data/file_reader.h"

namespace fleetps::data {

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Begins a pass. Not thread-safe; the previous pass must have been ended.
  virtual Status StartPass() = 0;

  // Thread-safe, for the pass's workers. Stores the next batch in *batch (its buffers may be
  // reused) and returns true; returns false once the pass is complete, or the error that
  // ended it (e.g. a malformed line, an unreadable file) — every worker then sees that error.
  virtual StatusOr<bool> NextBatch(Batch* batch) = 0;

  // Ends the pass, also early (unread data is dropped): stops and joins what the pass
  // started. Not thread-safe; call once the workers have stopped calling NextBatch.
  virtual void EndPass() = 0;

  // Counters of the running / last pass (QueueDataset) or of the last load (InMemoryDataset).
  virtual ReadStats stats() const = 0;

  // Names the set of records the next pass reads: two passes that get the same value read the
  // same records (in any order), so they hold the same keys (GPU-PS begin_pass reuses the
  // last pass's keys then). nullopt when that is not known (files are read anew each pass).
  virtual std::optional<uint64_t> PassRecordsId() const { return std::nullopt; }
};

}  // namespace fleetps::data
