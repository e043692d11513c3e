#pragma once
// CheckpointRunner: save, load and shrink over one server's tables (docs/STORAGE.md).
//
// Every piece of table work runs on the executor lane that owns it (a sparse shard's lane,
// a dense table's lane), so rows keep one owner thread. Pieces whose lanes share a thread
// run one after another, each posted when the previous one ends, so requests for other
// shards on that thread are served in between (a save holds up a shard for the time of
// that shard's file only). Filesystem work outside the tables (PART, MANIFEST, CURRENT,
// verifying checksums) also runs on lanes, never on the caller's (io) thread.
//
//  - SavePart: phase 1 of a save. Writes this server's files of the chosen tables under
//    DIR/<version>.tmp/server-<i>/, then its PART.
//  - Commit: phase 2, on server 0 once every server finished phase 1 (CommitCheckpoint).
//  - Load: opens DIR's manifest, checks every table it names against the configured one
//    (kind and dim; for Full content also optimizer and accessor; accessor for all), verifies
//    the size and CRC of every file this server will read, and only then replaces each
//    table's rows with the rows it owns (Delta checkpoints are merged instead). When the
//    checkpoint was saved by as many servers with as many shards as now, shard s reads only
//    its own file; otherwise every file of the table is read and filtered by PlaceKey.
//    Tables configured but absent from the checkpoint are left alone.
//  - Shrink: RowAccessor shrink rules on every shard of the chosen tables.
//
// Completion callbacks run on a lane thread, once. Thread-safety: all methods are
// thread-safe; LoadSync must not be called from a lane thread. The tables and executors
// outlive the runner; operations in flight when the executors stop are dropped.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/executor.h"
#include "common/status.h"
#include "schemas/checkpoint_generated.h"
#include "server/table/table_set.h"

namespace fleetps::server {

struct SaveSpec {
  std::string dir;
  std::string version;                // IsValidVersionName
  disk::SaveMode mode = disk::SaveMode::Checkpoint;
  std::optional<uint32_t> table_id;   // empty: every table
};

struct SaveOutcome {
  uint64_t rows = 0;   // sparse rows written
  uint64_t bytes = 0;  // file bytes written
};

struct LoadOutcome {
  uint64_t rows = 0;  // sparse rows this server took
  std::string version;
  disk::SaveMode mode = disk::SaveMode::Checkpoint;
};

struct ShrinkOutcome {
  uint64_t deleted = 0;  // rows deleted on this server
  uint64_t rows = 0;     // rows left in the shrunk tables
};

class CheckpointRunner {
 public:
  // The lane of a sparse table's shard and of a dense table (the service's mapping).
  using SparseLaneFn = std::function<size_t(uint32_t table_id, uint32_t shard)>;
  using DenseLaneFn = std::function<size_t(uint32_t table_id)>;

  CheckpointRunner(TableSet& tables, ExecutorPool& executors, SparseLaneFn sparse_lane, DenseLaneFn dense_lane,
                   uint32_t server_index, uint32_t num_servers, std::string fleetps_version);

  void SavePart(const SaveSpec& spec, std::function<void(StatusOr<SaveOutcome>)> done);
  void Commit(const std::string& dir, const std::string& version, disk::SaveMode mode,
              std::function<void(StatusOr<SaveOutcome>)> done);
  void Load(const std::string& dir, std::function<void(StatusOr<LoadOutcome>)> done);
  void Shrink(std::optional<uint32_t> table_id, std::function<void(StatusOr<ShrinkOutcome>)> done);

  // Load, waiting for the result (start-up, before the server listens).
  StatusOr<LoadOutcome> LoadSync(const std::string& dir);

  // A piece of work and the lane it must run on.
  struct LaneTask {
    size_t lane;
    std::function<Status()> run;
  };
  // Runs the tasks as described in the class comment; done(first error, or OK) once all ran.
  void RunSequenced(std::vector<LaneTask> tasks, std::function<void(Status)> done);

 private:
  struct LoadPlan;
  // Builds what Load does after the manifest is read: checks and the file list.
  StatusOr<std::shared_ptr<LoadPlan>> PlanLoad(const std::string& dir);
  // Loads the rows of one sparse table that belong to the shards in `shards` from `files`.
  Status LoadSparse(const LoadPlan& plan, uint32_t table_id, const std::vector<uint32_t>& shards,
                    const std::vector<const disk::FileEntry*>& files, uint64_t* rows);
  Status LoadDense(const LoadPlan& plan, uint32_t table_id, const std::vector<const disk::FileEntry*>& files);

  TableSet& tables_;
  ExecutorPool& executors_;
  const SparseLaneFn sparse_lane_;
  const DenseLaneFn dense_lane_;
  const uint32_t server_index_;
  const uint32_t num_servers_;
  const std::string fleetps_version_;
};

}  // namespace fleetps::server
