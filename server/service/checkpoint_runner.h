#pragma once
// CheckpointRunner: save, load and shrink over one server's tables (docs/STORAGE.md).
//
// Every piece of table work runs on the executor lane that owns it (a sparse shard's lane,
// a dense table's lane), so rows keep one owner thread. Pieces whose lanes share a thread
// run one after another, each posted when the previous one ends, so requests for other
// shards on that thread are served in between (a save holds up a shard for the time of
// that shard's file only). Filesystem work outside the tables (PART, MANIFEST, CURRENT,
// verifying checksums, locks) also runs on lanes, never on the caller's (io) thread.
//
//  - SavePart: phase 1 of a save. Writes this server's files of the chosen tables under
//    DIR/<version>.tmp/server-<i>/, then its PART, holding DIR's lock file of this server
//    (DirLock, ServerLockName(i)): a second save into DIR on this server meanwhile is
//    refused (Busy, naming the holder).
//  - Commit: phase 2, on server 0 once every server finished phase 1 (CommitCheckpoint),
//    holding the lock files of all servers of the save.
//  - Load: opens DIR's manifest, checks every table it names against the configured one
//    (kind and dim; for Full content also optimizer and accessor; accessor for all), checks
//    that the files this server will read are distinct regular files and verifies the size
//    and CRC of each (reading at most the manifest's size), and only then replaces each
//    table's rows with the rows it owns (Delta checkpoints are merged instead). When the
//    checkpoint was saved by as many servers with as many shards as now, shard s reads only
//    its own file; otherwise every file of the table is read and filtered by PlaceKey.
//    Tables configured but absent from the checkpoint are left alone.
//  - Shrink: RowAccessor shrink rules on every shard of the chosen tables.
//
// After-save changes (Delta/Base clear Changed and delta_score, Batch ages unseen_days)
// belong to the committed checkpoint, so they are applied only once it has committed:
// SavePart writes the rows unchanged (marking them, SparseTable::SaveShard) and keeps the
// save as this server's pending save; they are applied (SparseTable::ApplySaveEffects) when
// this server settles it and DIR/CURRENT names its version, and dropped when it does not. A
// server settles its pending save: on server 0, at the end of that save's Commit; on every
// server, at the start of its next SavePart, Load and Shrink, and on FinishSave. Whoever
// reads the affected state (a save, a shrink) therefore sees the changes of every committed
// save before it. A failed or abandoned save leaves rows as they were: the next delta still
// holds them. A server keeps one pending save: a SavePart with after-save changes settles
// the previous one first, dropping it if it has not committed yet (a save interleaved with
// another's phases); SavePart in mode Checkpoint, Shrink and FinishSave keep a pending save
// that has not committed (its commit may still come); Load drops it (rows are replaced).
//
// Commands (SavePart, Commit, Load, Shrink, FinishSave) run one at a time per server, in
// arrival order (a lock refusal is answered at once, before queueing).
//
// Completion callbacks run on a lane thread, once. Thread-safety: all methods are
// thread-safe; LoadSync must not be called from a lane thread. The tables and executors
// outlive the runner; operations in flight when the executors stop are dropped.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/executor.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "schemas/checkpoint_generated.h"
#include "server/table/table_set.h"

namespace fleetps::server {

struct SaveSpec {
  std::string dir;
  std::string version;  // IsValidVersionName
  disk::SaveMode mode = disk::SaveMode::Checkpoint;
  std::optional<uint32_t> table_id;  // empty: every table
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

// How far a save's part or a load has got (CheckpointRunner::SetProgress).
struct CheckpointProgress {
  std::string what;    // "saving DIR" or "loading DIR"
  size_t done = 0;     // pieces finished: files written (save); a shard's or a dense table's files read (load)
  size_t total = 0;    // pieces in all
  uint64_t rows = 0;   // sparse rows written or loaded by the finished pieces
  double seconds = 0;  // since the pieces began
};

class CheckpointRunner {
 public:
  // The lane of a sparse table's shard and of a dense table (the service's mapping).
  using SparseLaneFn = std::function<size_t(uint32_t table_id, uint32_t shard)>;
  using DenseLaneFn = std::function<size_t(uint32_t table_id)>;

  CheckpointRunner(TableSet& tables, ExecutorPool& executors, SparseLaneFn sparse_lane, DenseLaneFn dense_lane,
                   uint32_t server_index, uint32_t num_servers, std::string fleetps_version);

  // Phase 1 (see the class comment). Busy when DIR's lock file of this server is held.
  void SavePart(const SaveSpec& spec, std::function<void(StatusOr<SaveOutcome>)> done);
  // Phase 2, server 0 only; then settles server 0's pending save when it is this one. Busy
  // when a lock file of DIR is held (a part of another save is being written).
  void Commit(const std::string& dir, const std::string& version, disk::SaveMode mode,
              std::function<void(StatusOr<SaveOutcome>)> done);
  // Settles this server's pending save now when it is (dir, version): its after-save
  // changes are applied when DIR/CURRENT names the version, dropped otherwise. OK, with
  // nothing done, when this server has no pending save or another one. Optional: for a
  // caller that knows the commit's outcome (e.g. a client's "finish" after Commit); without
  // it the changes are settled by the server's next SavePart, Load or Shrink.
  void FinishSave(const std::string& dir, const std::string& version, std::function<void(Status)> done);
  void Load(const std::string& dir, std::function<void(StatusOr<LoadOutcome>)> done);
  void Shrink(std::optional<uint32_t> table_id, std::function<void(StatusOr<ShrinkOutcome>)> done);

  // Load, waiting for the result (start-up, before the server listens).
  StatusOr<LoadOutcome> LoadSync(const std::string& dir);

  // `progress` hears of every piece of a save's phase 1 and of a load's rows as it ends
  // well (progress on a terminal, log lines): on the piece's lane thread, one call at a time
  // per operation. Set before the first command.
  void SetProgress(std::function<void(const CheckpointProgress&)> progress) { progress_ = std::move(progress); }

  // A piece of work and the lane it must run on.
  struct LaneTask {
    size_t lane;
    std::function<Status()> run;
  };
  // Runs the tasks as described in the class comment; done(first error, or OK) once all ran.
  void RunSequenced(std::vector<LaneTask> tasks, std::function<void(Status)> done);

 private:
  // Wraps each of `tasks` so that progress_ hears of it when it ends well; rows_of(i) reads
  // task i's sparse rows on its lane after it ran. Nothing without progress_.
  void TrackProgress(std::vector<LaneTask>& tasks, const std::string& what,
                     std::function<uint64_t(size_t task)> rows_of) const;

  struct LoadPlan;
  static std::string Str(const flatbuffers::String* s);             // "" for null
  static disk::AccessorKind AccessorOf(const TableOptions& table);  // its rows' layout on disk
  // Builds what Load does after the manifest is read: checks and the file list.
  StatusOr<std::shared_ptr<LoadPlan>> PlanLoad(const std::string& dir);
  // Load, inside its command, once the pending save is settled.
  void LoadSettled(const std::string& dir, std::function<void(StatusOr<LoadOutcome>)> done);
  // Loads the rows of one sparse table that belong to the shards in `shards` from `files`
  // (`aligned`: the shard's own file, LoadPlan::Table). Memory is reserved per file for the
  // rows its bytes can hold at most, however many the manifest claims.
  Status LoadSparse(const LoadPlan& plan, uint32_t table_id, const std::vector<uint32_t>& shards, bool aligned,
                    const std::vector<const disk::FileEntry*>& files, uint64_t* rows);
  Status LoadDense(const LoadPlan& plan, uint32_t table_id, const std::vector<const disk::FileEntry*>& files);

  // A save whose after-save changes wait for its commit (class comment).
  struct PendingSave {
    std::string dir;
    std::string version;
    disk::SaveMode mode = disk::SaveMode::Checkpoint;
    std::vector<uint32_t> tables;  // sparse tables with after-save changes in this mode
  };
  // What Settle does with a pending save whose version DIR/CURRENT does not name.
  enum class Uncommitted : uint8_t { kKeep, kDrop };

  // Runs `command` on lane 0 after every command enqueued before it has called
  // EndCommand(); `command` must call EndCommand() once, when it is done.
  void Enqueue(std::function<void()> command) EXCLUDES(mu_);
  void EndCommand() EXCLUDES(mu_);
  // Inside a command: settles the pending save (only when it is `only`, if given).
  void Settle(Uncommitted uncommitted, std::optional<std::pair<std::string, std::string>> only,
              std::function<void(Status)> done) EXCLUDES(mu_);

  TableSet& tables_;
  ExecutorPool& executors_;
  const SparseLaneFn sparse_lane_;
  const DenseLaneFn dense_lane_;
  const uint32_t server_index_;
  const uint32_t num_servers_;
  const std::string fleetps_version_;

  std::function<void(const CheckpointProgress&)> progress_;  // set before use, then read-only
  Mutex mu_;                                                 // guards the members below
  bool command_running_ GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> waiting_ GUARDED_BY(mu_);  // commands after the running one
  std::optional<PendingSave> pending_ GUARDED_BY(mu_);         // read and written by the running command
};

}  // namespace fleetps::server
