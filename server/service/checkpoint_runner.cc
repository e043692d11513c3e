#include "server/service/checkpoint_runner.h"

#include <algorithm>
#include <exception>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/sharding.h"
#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/dir_lock.h"
#include "server/checkpoint/row_file.h"
#include "server/table/table_common.h"

namespace fleetps::server {
namespace {

const char* ModeName(disk::SaveMode mode) { return disk::EnumNameSaveMode(mode); }

}  // namespace

std::string CheckpointRunner::Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

disk::AccessorKind CheckpointRunner::AccessorOf(const TableOptions& t) {
  return t.accessor.kind == AccessorKind::kCtr ? disk::AccessorKind::Ctr : disk::AccessorKind::Plain;
}

CheckpointRunner::CheckpointRunner(TableSet& tables, ExecutorPool& executors, SparseLaneFn sparse_lane,
                                   DenseLaneFn dense_lane, uint32_t server_index, uint32_t num_servers,
                                   std::string fleetps_version)
    : tables_(tables),
      executors_(executors),
      sparse_lane_(std::move(sparse_lane)),
      dense_lane_(std::move(dense_lane)),
      server_index_(server_index),
      num_servers_(num_servers),
      fleetps_version_(std::move(fleetps_version)) {}

// ---- sequencing ---------------------------------------------------------------------

namespace {

struct Sequence {
  std::vector<std::vector<CheckpointRunner::LaneTask>> groups;  // one per executor thread
  std::atomic<size_t> remaining{0};                             // groups not finished
  std::atomic<bool> failed{false};
  Mutex mu;  // guards error
  Status error GUARDED_BY(mu);
  std::function<void(Status)> done;
};

void RunNext(ExecutorPool& executors, const std::shared_ptr<Sequence>& seq, size_t group, size_t index) {
  const size_t lane = seq->groups[group][index].lane;
  executors.Post(lane, [&executors, seq, group, index] {
    if (!seq->failed.load()) {  // after a failure the rest is skipped
      Status st;
      try {  // a task that throws (bad_alloc) fails the sequence; it must still end
        st = seq->groups[group][index].run();
      } catch (const std::exception& e) {
        st = Status::Internal(std::string("a storage task failed with an exception: ") + e.what());
      }
      if (!st.ok()) {
        MutexLock lock(seq->mu);
        if (seq->error.ok()) seq->error = st;
        seq->failed = true;
      }
    }
    if (index + 1 < seq->groups[group].size()) return RunNext(executors, seq, group, index + 1);
    if (seq->remaining.fetch_sub(1) != 1) return;
    Status error;
    {
      MutexLock lock(seq->mu);
      error = seq->error;
    }
    seq->done(error);
  });
}

}  // namespace

void CheckpointRunner::RunSequenced(std::vector<LaneTask> tasks, std::function<void(Status)> done) {
  if (tasks.empty()) {
    executors_.Post(0, [done = std::move(done)] { done(Status::OK()); });
    return;
  }
  auto seq = std::make_shared<Sequence>();
  const size_t threads = executors_.num_threads();
  seq->groups.resize(threads);
  for (LaneTask& task : tasks) seq->groups[task.lane % threads].push_back(std::move(task));
  seq->groups.erase(std::remove_if(seq->groups.begin(), seq->groups.end(), [](const auto& g) { return g.empty(); }),
                    seq->groups.end());
  seq->remaining = seq->groups.size();
  seq->done = std::move(done);
  for (size_t g = 0; g < seq->groups.size(); ++g) RunNext(executors_, seq, g, 0);
}

void CheckpointRunner::TrackProgress(std::vector<LaneTask>& tasks, const std::string& what,
                                     std::function<uint64_t(size_t)> rows_of) const {
  if (!progress_ || tasks.empty()) return;
  struct Tally {
    Mutex mu;  // guards the members below; held while progress_ runs (one call at a time)
    size_t done GUARDED_BY(mu) = 0;
    uint64_t rows GUARDED_BY(mu) = 0;
  };
  auto tally = std::make_shared<Tally>();
  const auto start = std::chrono::steady_clock::now();
  const size_t total = tasks.size();
  for (size_t i = 0; i < total; ++i) {
    tasks[i].run = [run = std::move(tasks[i].run), tally, start, total, what, rows_of, i,
                    progress = progress_]() -> Status {
      RETURN_IF_ERROR(run());
      const uint64_t rows = rows_of(i);
      MutexLock lock(tally->mu);
      tally->rows += rows;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress(CheckpointProgress{what, ++tally->done, total, tally->rows, seconds});
      return Status::OK();
    };
  }
}

// ---- commands and pending saves --------------------------------------------------------

namespace {

// What a command holds until it ends: its lock files and its place in the command queue.
// Shared by the command's callbacks; End() runs once, whichever callback reaches it.
struct CommandScope {
  std::vector<std::unique_ptr<DirLock>> locks;
  std::function<void()> end_command;
  void End() {
    locks.clear();
    if (end_command) {
      auto end = std::move(end_command);
      end_command = nullptr;
      end();
    }
  }
};

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

void CheckpointRunner::Enqueue(std::function<void()> command) {
  {
    MutexLock lock(mu_);
    if (command_running_) {
      waiting_.push_back(std::move(command));
      return;
    }
    command_running_ = true;
  }
  executors_.Post(0, std::move(command));
}

void CheckpointRunner::EndCommand() {
  std::function<void()> next;
  {
    MutexLock lock(mu_);
    if (waiting_.empty()) {
      command_running_ = false;
      return;
    }
    next = std::move(waiting_.front());
    waiting_.pop_front();
  }
  executors_.Post(0, std::move(next));
}

void CheckpointRunner::Settle(Uncommitted uncommitted, std::optional<std::pair<std::string, std::string>> only,
                              std::function<void(Status)> done) {
  std::optional<PendingSave> pending;
  {
    MutexLock lock(mu_);
    if (pending_ && (!only || (pending_->dir == only->first && pending_->version == only->second))) {
      pending = pending_;
    }
  }
  if (!pending) return done(Status::OK());
  const std::string what = "the after-save changes (mode " + std::string(ModeName(pending->mode)) + ") of " +
                           pending->dir + "/" + pending->version + " on pserver " + std::to_string(server_index_);
  // Committed when CURRENT names the version; CURRENT is replaced last by a commit.
  auto current = ReadSmallFile(pending->dir + "/" + kCurrentFile);
  const bool committed = current.ok() && Trimmed(*current) == pending->version;
  if (!committed) {
    if (uncommitted == Uncommitted::kKeep) return done(Status::OK());
    {
      MutexLock lock(mu_);
      pending_.reset();
    }
    if (!current.ok() && !current.status().IsNotFound()) {
      spdlog::warn("{} dropped: cannot read {}/CURRENT ({}); rows keep their state", what, pending->dir,
                   current.status().ToString());
    } else {
      spdlog::info("{} dropped: that save was not committed; rows keep their state", what);
    }
    return done(Status::OK());
  }
  {
    MutexLock lock(mu_);
    pending_.reset();
  }
  auto changed = std::make_shared<std::atomic<uint64_t>>(0);
  std::vector<LaneTask> tasks;
  for (uint32_t id : pending->tables) {
    SparseTable* t = tables_.sparse(id);
    if (t == nullptr) continue;
    for (uint32_t s = 0; s < t->num_shards(); ++s) {
      tasks.push_back({sparse_lane_(id, s), [t, s, changed, mode = pending->mode]() -> Status {
                         ASSIGN_OR_RETURN(uint64_t n, t->ApplySaveEffects(s, mode));
                         *changed += n;
                         return Status::OK();
                       }});
    }
  }
  RunSequenced(std::move(tasks), [what, changed, done](Status st) {
    if (!st.ok()) return done(st.WithContext("applying " + what + " (partly applied)"));
    spdlog::info("applied {} to {} rows", what, changed->load());
    done(Status::OK());
  });
}

void CheckpointRunner::FinishSave(const std::string& dir, const std::string& version,
                                  std::function<void(Status)> done) {
  Enqueue([this, dir, version, done] {
    Settle(Uncommitted::kDrop, std::make_pair(dir, version), [this, done](Status st) {
      EndCommand();
      done(st);
    });
  });
}

// ---- save ---------------------------------------------------------------------------

// Long: a save's checks, then its steps in order (lock, settle the pending save, the tables'
// files on their lanes, PART), each the continuation of the one before.
void CheckpointRunner::SavePart(const SaveSpec& spec, std::function<void(StatusOr<SaveOutcome>)> done) {
  const std::string where = "save of " + spec.dir + " (version " + spec.version + ", mode " + ModeName(spec.mode) +
                            ") on pserver " + std::to_string(server_index_);
  if (spec.dir.empty()) return done(Status::InvalidArgument(where + ": empty directory"));
  if (!IsValidVersionName(spec.version)) {
    return done(Status::InvalidArgument(where + ": '" + spec.version + "' is not a valid version name"));
  }
  if (static_cast<uint8_t>(spec.mode) > static_cast<uint8_t>(disk::SaveMode::Batch)) {
    return done(Status::InvalidArgument(where + ": unknown mode (use 0 checkpoint, 1 delta, 2 base, 3 batch)"));
  }
  std::vector<uint32_t> ids;
  if (spec.table_id) {
    if (tables_.options(*spec.table_id) == nullptr) {
      return done(Status::NotFound(where + ": no table with id " + std::to_string(*spec.table_id) +
                                   " (tables: " + tables_.Describe() + ")"));
    }
    ids.push_back(*spec.table_id);
  } else {
    for (const auto& [id, t] : tables_.all()) ids.push_back(id);
  }
  // Sparse tables whose rows this save changes once committed.
  std::vector<uint32_t> after_save;
  for (uint32_t id : ids) {
    if (SparseTable* t = tables_.sparse(id); t != nullptr && t->accessor().HasAfterSave(spec.mode)) {
      after_save.push_back(id);
    }
  }
  const std::string server_dir = TmpVersionDir(spec.dir, spec.version) + "/" + ServerDirName(server_index_);

  // Results, one slot per file; each slot is written by one task, read after all ended.
  struct FileResult {
    uint32_t table_id = 0;
    uint32_t shard = 0;
    std::string name;
    uint64_t rows = 0;
    FileDigest digest;
    uint64_t slice_begin = 0, slice_end = 0;
  };
  auto results = std::make_shared<std::vector<FileResult>>();
  std::vector<LaneTask> tasks;
  for (uint32_t id : ids) {
    if (SparseTable* t = tables_.sparse(id)) {
      for (uint32_t s = 0; s < t->num_shards(); ++s) {
        results->push_back(FileResult{id, s, SparseFileName(id, s), 0, {}, 0, 0});
      }
    } else {
      DenseTable* d = tables_.dense(id);
      results->push_back(FileResult{id, 0, DenseFileName(id), 0, {}, d->begin(), d->end()});
    }
  }
  for (size_t i = 0; i < results->size(); ++i) {
    const FileResult& r = (*results)[i];
    const std::string path = server_dir + "/" + r.name;
    if (SparseTable* t = tables_.sparse(r.table_id)) {
      const uint32_t s = r.shard;
      tasks.push_back({sparse_lane_(r.table_id, s), [t, s, path, results, i, mode = spec.mode]() -> Status {
                         ASSIGN_OR_RETURN(ShardSaveResult saved, t->SaveShard(s, mode, path));
                         (*results)[i].rows = saved.rows;
                         (*results)[i].digest = saved.file;
                         return Status::OK();
                       }});
    } else {
      DenseTable* d = tables_.dense(r.table_id);
      tasks.push_back({dense_lane_(r.table_id), [d, path, results, i, mode = spec.mode]() -> Status {
                         ASSIGN_OR_RETURN(FileDigest digest, d->Save(mode, path));
                         (*results)[i].rows = d->end() - d->begin();
                         (*results)[i].digest = digest;
                         return Status::OK();
                       }});
    }
  }

  TrackProgress(tasks, "saving " + spec.dir, [this, results](size_t i) -> uint64_t {
    const FileResult& r = (*results)[i];
    return tables_.sparse(r.table_id) != nullptr ? r.rows : 0;
  });

  auto scope = std::make_shared<CommandScope>();
  // Every way out of the command: lock released and next command started before the reply.
  auto reply = [scope, done](StatusOr<SaveOutcome> result) {
    scope->End();
    done(std::move(result));
  };

  auto finish = [this, spec, server_dir, results, ids, after_save, where, reply](Status st) {
    if (!st.ok()) return reply(st.WithContext(where));
    flatbuffers::FlatBufferBuilder fbb(4096);
    std::vector<flatbuffers::Offset<disk::TableEntry>> entries;
    SaveOutcome outcome;
    for (uint32_t id : ids) {
      const TableOptions& opts = *tables_.options(id);
      std::vector<flatbuffers::Offset<disk::FileEntry>> files;
      uint64_t rows = 0;
      for (const FileResult& r : *results) {
        if (r.table_id != id) continue;
        files.push_back(disk::CreateFileEntry(fbb, fbb.CreateString(r.name), server_index_, r.shard, r.rows,
                                              r.digest.bytes, r.digest.crc32c, r.slice_begin, r.slice_end));
        rows += r.rows;
        outcome.bytes += r.digest.bytes;
      }
      uint32_t shared = 0, element = 0, shards = opts.shards;
      if (SparseTable* t = tables_.sparse(id)) {
        shared = t->optimizer().shared_state_size();
        element = t->optimizer().element_state_size();
        shards = t->num_shards();
        outcome.rows += rows;
      } else {
        shared = tables_.dense(id)->optimizer().shared_state_size();
        element = tables_.dense(id)->optimizer().element_state_size();
      }
      entries.push_back(disk::CreateTableEntry(fbb, id, fbb.CreateString(opts.name), opts.kind == TableKind::kDense,
                                               opts.dim, shards, static_cast<uint8_t>(opts.optimizer.kind), shared,
                                               element, AccessorOf(opts), rows, fbb.CreateVector(files)));
    }
    fbb.Finish(disk::CreateCheckpointPart(fbb, fbb.CreateString(spec.version), spec.mode, server_index_, num_servers_,
                                          fbb.CreateVector(entries)));
    Status written = WriteFlatBufferFileAtomic(server_dir + "/" + kPartFile, disk::FileKind::Part, fbb.Release());
    if (!written.ok()) return reply(written.WithContext(where));
    if (!after_save.empty()) {
      MutexLock lock(mu_);
      pending_ = PendingSave{spec.dir, spec.version, spec.mode, after_save};
    }
    reply(outcome);
  };

  // The lock is taken and the directory prepared on a lane (filesystem calls stay off the
  // io threads); a held lock is refused at once. Then, in the command queue: the previous
  // pending save is settled and the files are written.
  executors_.Post(0, [this, spec, server_dir, where, tasks = std::move(tasks), finish, reply, scope,
                      has_after_save = !after_save.empty(), done]() mutable {
    if (Status st = MakeDirs(spec.dir); !st.ok()) return done(st.WithContext(where));
    auto lock = DirLock::Acquire(spec.dir, ServerLockName(server_index_),
                                 "part of save " + spec.version + " (mode " + ModeName(spec.mode) + ") on pserver " +
                                     std::to_string(server_index_));
    if (!lock.ok()) return done(lock.status().WithContext(where));
    scope->locks.push_back(std::move(lock).value());
    Enqueue([this, spec, server_dir, where, tasks = std::move(tasks), finish, reply, scope, has_after_save]() mutable {
      scope->end_command = [this] { EndCommand(); };
      if (PathExists(spec.dir + "/" + spec.version)) {
        return reply(Status::InvalidArgument(where + ": " + spec.dir + "/" + spec.version +
                                             " is already a committed checkpoint; use a new version name"));
      }
      Status st = RemoveAll(server_dir);  // leftovers of an earlier attempt with this version
      if (st.ok()) st = MakeDirs(server_dir);
      if (!st.ok()) return reply(st.WithContext(where));
      // One pending save per server: a save that marks rows settles the previous one first.
      Settle(has_after_save ? Uncommitted::kDrop : Uncommitted::kKeep, std::nullopt,
             [this, tasks = std::move(tasks), finish, reply, where](Status settled) mutable {
               if (!settled.ok()) return reply(settled.WithContext(where));
               RunSequenced(std::move(tasks), finish);
             });
    });
  });
}

void CheckpointRunner::Commit(const std::string& dir, const std::string& version, disk::SaveMode mode,
                              std::function<void(StatusOr<SaveOutcome>)> done) {
  executors_.Post(0, [this, dir, version, mode, done] {
    const std::string where = "commit of " + dir + "/" + version;
    auto scope = std::make_shared<CommandScope>();
    // Every server's lock file: no part (of another save) is being written while the
    // commit removes abandoned temporary directories.
    if (IsValidVersionName(version)) {
      for (uint32_t s = 0; s < num_servers_; ++s) {
        auto lock = DirLock::Acquire(dir, ServerLockName(s),
                                     "commit of save " + version + " by pserver " + std::to_string(server_index_));
        if (!lock.ok()) {
          if (lock.status().IsNotFound()) break;  // no DIR: CommitCheckpoint says what is missing
          return done(lock.status().WithContext(where));
        }
        scope->locks.push_back(std::move(lock).value());
      }
    }
    Enqueue([this, dir, version, mode, done, scope, where] {
      scope->end_command = [this] { EndCommand(); };
      auto summary = CommitCheckpoint(dir, version, num_servers_, mode, fleetps_version_);
      scope->locks.clear();
      if (!summary.ok()) {
        scope->End();
        return done(summary.status());
      }
      spdlog::info("checkpoint {}/{} committed: mode {}, {} servers, {} sparse rows, {} bytes", dir, version,
                   ModeName(mode), num_servers_, summary->rows, summary->bytes);
      const SaveOutcome outcome{summary->rows, summary->bytes};
      Settle(Uncommitted::kKeep, std::make_pair(dir, version), [scope, done, outcome, where](Status st) {
        // The checkpoint is committed whatever happens here; a failure leaves rows as they
        // were (some with their changes).
        if (!st.ok()) spdlog::error("{}: {}", where, st.ToString());
        scope->End();
        done(outcome);
      });
    });
  });
}

// ---- shrink -------------------------------------------------------------------------

void CheckpointRunner::Shrink(std::optional<uint32_t> table_id, std::function<void(StatusOr<ShrinkOutcome>)> done) {
  std::vector<uint32_t> ids;
  if (table_id) {
    if (tables_.sparse(*table_id) == nullptr) {
      return done(Status::NotFound("Shrink: no sparse table with id " + std::to_string(*table_id) +
                                   " (tables: " + tables_.Describe() + ")"));
    }
    ids.push_back(*table_id);
  } else {
    for (const auto& [id, t] : tables_.all()) {
      if (t.kind == TableKind::kSparse) ids.push_back(id);
    }
  }
  struct Counts {
    std::atomic<uint64_t> deleted{0};
    std::atomic<uint64_t> rows{0};
  };
  auto counts = std::make_shared<Counts>();
  std::vector<LaneTask> tasks;
  for (uint32_t id : ids) {
    SparseTable* t = tables_.sparse(id);
    for (uint32_t s = 0; s < t->num_shards(); ++s) {
      tasks.push_back({sparse_lane_(id, s), [t, s, counts]() -> Status {
                         ASSIGN_OR_RETURN(uint64_t deleted, t->ShrinkShard(s));
                         counts->deleted += deleted;
                         counts->rows += t->Stats(s).rows;
                         return Status::OK();
                       }});
    }
  }
  // A committed batch save's unseen_days come first; a pending save that has not committed
  // stays pending (shrink does not touch what its changes depend on).
  Enqueue([this, tasks = std::move(tasks), counts, done]() mutable {
    Settle(Uncommitted::kKeep, std::nullopt, [this, tasks = std::move(tasks), counts, done](Status settled) mutable {
      if (!settled.ok()) {
        EndCommand();
        return done(settled.WithContext("Shrink"));
      }
      RunSequenced(std::move(tasks), [this, counts, done](Status st) {
        EndCommand();
        if (!st.ok()) return done(st);
        done(ShrinkOutcome{counts->deleted.load(), counts->rows.load()});
      });
    });
  });
}

}  // namespace fleetps::server
