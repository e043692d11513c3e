// CheckpointRunner's load path (checkpoint_runner.h, "Load").
#include "server/service/checkpoint_runner.h"

#include <algorithm>
#include <exception>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
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

// ---- load ---------------------------------------------------------------------------

struct CheckpointRunner::LoadPlan {
  explicit LoadPlan(Checkpoint c) : checkpoint(std::move(c)) {}
  Checkpoint checkpoint;
  bool full = true;
  bool merge = false;
  struct Table {
    uint32_t id = 0;
    bool dense = false;
    bool aligned = false;                       // same servers and shards as saved: shard s reads file (me, s)
    std::vector<const disk::FileEntry*> files;  // what this server reads
  };
  std::vector<Table> tables;
};

StatusOr<std::shared_ptr<CheckpointRunner::LoadPlan>> CheckpointRunner::PlanLoad(const std::string& dir) {
  ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  auto plan = std::make_shared<LoadPlan>(std::move(checkpoint));
  const auto& m = plan->checkpoint.manifest();
  plan->full = m.content() == disk::RowContent::Full;
  plan->merge = m.mode() == disk::SaveMode::Delta;
  const std::string where = "checkpoint " + plan->checkpoint.version_dir();
  for (const auto* t : *m.tables()) {
    const std::string saved = "'" + Str(t->name()) + "' (id " + std::to_string(t->id()) + ")";
    const TableOptions* opts = tables_.options(t->id());
    if (opts == nullptr) {
      return Status::InvalidArgument(where + " has table " + saved +
                                     ", which this server does not have (tables: " + tables_.Describe() + ")");
    }
    const std::string here = TableLabel(*opts);
    auto mismatch = [&](const std::string& what, const std::string& then, const std::string& now) {
      return Status::InvalidArgument(where + ": table " + saved + " was saved with " + what + " " + then + ", but " +
                                     here + " has " + now + " (load it into a server configured like the saver)");
    };
    if (Str(t->name()) != opts->name) return mismatch("name", Str(t->name()), opts->name);
    if (t->dense() != (opts->kind == TableKind::kDense)) {
      return mismatch("kind", t->dense() ? "dense" : "sparse", opts->kind == TableKind::kDense ? "dense" : "sparse");
    }
    if (t->dim() != opts->dim)
      return mismatch(t->dense() ? "size" : "dim", std::to_string(t->dim()), std::to_string(opts->dim));
    if (t->accessor() != AccessorOf(*opts)) {
      return mismatch("accessor", disk::EnumNameAccessorKind(t->accessor()),
                      disk::EnumNameAccessorKind(AccessorOf(*opts)));
    }
    const optimizer::Optimizer& opt =
        t->dense() ? tables_.dense(t->id())->optimizer() : tables_.sparse(t->id())->optimizer();
    if (plan->full && (t->optimizer() != static_cast<uint8_t>(opts->optimizer.kind) ||
                       t->shared_state_floats() != opt.shared_state_size() ||
                       t->element_state_floats() != opt.element_state_size())) {
      return mismatch("optimizer", std::to_string(t->optimizer()),
                      std::to_string(static_cast<int>(opts->optimizer.kind)) + " (0 sgd, 1 adagrad, 2 adam)");
    }
    LoadPlan::Table table;
    table.id = t->id();
    table.dense = t->dense();
    if (t->dense()) {
      const DenseTable* d = tables_.dense(t->id());
      for (const auto* f : *t->files()) {
        if (f->slice_begin() < d->end() && d->begin() < f->slice_end()) table.files.push_back(f);
      }
    } else {
      const SparseTable* s = tables_.sparse(t->id());
      table.aligned = m.num_servers() == num_servers_ && t->shards() == s->num_shards();
      for (const auto* f : *t->files()) {
        if (!table.aligned || f->server() == server_index_) table.files.push_back(f);
      }
    }
    plan->tables.push_back(std::move(table));
  }
  return plan;
}

Status CheckpointRunner::LoadSparse(const LoadPlan& plan, uint32_t table_id, const std::vector<uint32_t>& shards,
                                    bool aligned, const std::vector<const disk::FileEntry*>& files, uint64_t* rows) {
  SparseTable* table = tables_.sparse(table_id);
  const RowAccessor& accessor = table->accessor();
  const uint32_t num_shards = table->num_shards();
  std::vector<uint8_t> wanted(num_shards, 0);
  for (uint32_t s : shards) wanted[s] = 1;
  struct Pending {
    std::vector<uint64_t> keys;
    std::vector<uint8_t> flags;
    std::vector<const float*> payloads;
  };
  std::vector<Pending> pending(num_shards);
  // The fewest bytes a row takes in a file: its key, its flags byte and the shortest payload.
  const uint64_t min_row_bytes =
      sizeof(uint64_t) + sizeof(uint8_t) + sizeof(float) * accessor.PayloadFloats(plan.full, 0);
  for (const disk::FileEntry* f : files) {
    const std::string path = plan.checkpoint.FilePath(*f);
    ASSIGN_OR_RETURN(auto reader, BlockFileReader::Open(path, disk::FileKind::SparseRows, f->bytes()));
    // Room for the file's rows before they come: the manifest's count, but never more than
    // the bytes on disk can hold, whatever the manifest claims. Unaligned, this server's
    // shards take about their even share of the file.
    uint64_t expected = std::min(f->rows(), reader->file_bytes() / min_row_bytes);
    if (!aligned) expected = expected / num_servers_ / num_shards;
    for (uint32_t s : shards) table->ReserveShard(s, static_cast<size_t>(expected + expected / 8));
    uint64_t file_rows = 0;
    while (true) {
      ASSIGN_OR_RETURN(const disk::SparseRowBlock* block, NextSparseBlock(*reader));
      if (block == nullptr) break;
      const size_t n = block->keys()->size();
      const uint64_t* keys = block->keys()->data();
      const uint8_t* flags = block->flags()->data();
      const float* values = block->values()->data();
      const size_t total = block->values()->size();
      size_t offset = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint32_t len = accessor.PayloadFloats(plan.full, flags[i]);
        if (len > total - offset) {
          return Status::Corruption(path + ": row payloads overrun the block's values (row " + std::to_string(i) +
                                    " of " + std::to_string(n) + ")");
        }
        const KeyPlacement place = PlaceKey(keys[i], num_servers_, num_shards);
        if (place.server == server_index_ && wanted[place.shard]) {
          Pending& p = pending[place.shard];
          p.keys.push_back(keys[i]);
          p.flags.push_back(flags[i]);
          p.payloads.push_back(values + offset);
        }
        offset += len;
      }
      if (offset != total) {
        return Status::Corruption(path + ": the block's values hold " + std::to_string(total - offset) +
                                  " floats more than its rows' payloads");
      }
      file_rows += n;
      // Payloads point into the block: store them before reading the next one.
      for (uint32_t s : shards) {
        Pending& p = pending[s];
        if (p.keys.empty()) continue;
        RETURN_IF_ERROR(
            table->LoadRows(s, p.keys.data(), p.flags.data(), p.payloads.data(), p.keys.size(), plan.full, plan.merge));
        *rows += p.keys.size();
        p.keys.clear();
        p.flags.clear();
        p.payloads.clear();
      }
    }
    if (file_rows != f->rows()) {
      return Status::Corruption(path + ": " + std::to_string(file_rows) + " rows, the manifest says " +
                                std::to_string(f->rows()) + " (the manifest is wrong)");
    }
    if (reader->digest().bytes != f->bytes() || reader->digest().crc32c != f->crc32c()) {
      return Status::Corruption(path +
                                ": changed while it was being loaded (size or CRC differ from the "
                                "manifest); the table is partly loaded, load again");
    }
  }
  return Status::OK();
}

Status CheckpointRunner::LoadDense(const LoadPlan& plan, uint32_t table_id,
                                   const std::vector<const disk::FileEntry*>& files) {
  DenseTable* table = tables_.dense(table_id);
  if (table->begin() == table->end()) return Status::OK();
  if (!plan.full) table->ResetOptimizerState();
  for (const disk::FileEntry* f : files) {
    const std::string path = plan.checkpoint.FilePath(*f);
    ASSIGN_OR_RETURN(auto reader, BlockFileReader::Open(path, disk::FileKind::DenseSlice, f->bytes()));
    const bool take_shared = f->slice_begin() <= table->begin() && table->begin() < f->slice_end();
    while (true) {
      ASSIGN_OR_RETURN(const disk::DenseSliceBlock* block, NextDenseBlock(*reader));
      if (block == nullptr) break;
      RETURN_IF_ERROR(table->LoadBlock(*block, plan.full, take_shared).WithContext(path));
    }
  }
  return Status::OK();
}

void CheckpointRunner::Load(const std::string& dir, std::function<void(StatusOr<LoadOutcome>)> reply) {
  Enqueue([this, dir, reply] {
    // The command ends before the reply.
    auto done = [this, reply](StatusOr<LoadOutcome> result) {
      EndCommand();
      reply(std::move(result));
    };
    // Rows are about to be replaced: a pending save that has not committed is dropped.
    Settle(Uncommitted::kDrop, std::nullopt, [this, dir, done](Status settled) {
      if (!settled.ok()) return done(settled.WithContext("load of " + dir + " refused, nothing loaded"));
      LoadSettled(dir, done);
    });
  });
}

void CheckpointRunner::LoadSettled(const std::string& dir, std::function<void(StatusOr<LoadOutcome>)> done) {
  auto planned = PlanLoad(dir);
  if (!planned.ok()) return done(planned.status().WithContext("load of " + dir + " refused, nothing changed"));
  std::shared_ptr<LoadPlan> plan = std::move(planned).value();
  // Pass 1: every file this server reads, checked against the manifest, before any row
  // changes: each a distinct regular file of the recorded size and CRC.
  std::vector<const disk::FileEntry*> files;
  for (const auto& t : plan->tables) files.insert(files.end(), t.files.begin(), t.files.end());
  if (Status distinct = plan->checkpoint.CheckDistinctFiles(files); !distinct.ok()) {
    return done(distinct.WithContext("load of " + dir + " refused, nothing changed"));
  }
  std::vector<LaneTask> verify;
  size_t lane = 0;
  for (const disk::FileEntry* f : files) {
    verify.push_back({lane++, [plan, f] { return plan->checkpoint.VerifyFile(*f); }});
  }
  RunSequenced(std::move(verify), [this, plan, dir, done](Status st) {
    if (!st.ok()) return done(st.WithContext("load of " + dir + " refused, nothing changed"));
    // Pass 2: replace (or merge) the rows.
    const size_t threads = executors_.num_threads();
    auto rows = std::make_shared<std::vector<uint64_t>>();
    std::vector<LaneTask> tasks;
    auto slots = std::make_shared<std::vector<std::optional<size_t>>>();  // task -> its slot in rows (sparse)
    const bool replace = !plan->merge;
    for (const auto& t : plan->tables) {
      if (t.dense) {
        const uint32_t id = t.id;
        auto files = t.files;
        tasks.push_back({dense_lane_(id), [this, plan, id, files] { return LoadDense(*plan, id, files); }});
        slots->push_back(std::nullopt);
        continue;
      }
      SparseTable* table = tables_.sparse(t.id);
      // Shards grouped per task: aligned, one shard and its own file per task; otherwise
      // one task per executor thread reads every file once for all the shards it owns.
      std::map<size_t, std::vector<uint32_t>> groups;
      for (uint32_t s = 0; s < table->num_shards(); ++s) {
        groups[t.aligned ? s : sparse_lane_(t.id, s) % threads].push_back(s);
      }
      for (auto& [key, shards] : groups) {
        std::vector<const disk::FileEntry*> files;
        for (const disk::FileEntry* f : t.files) {
          if (!t.aligned || f->shard() == shards[0]) files.push_back(f);
        }
        const size_t slot = rows->size();
        rows->push_back(0);
        slots->push_back(slot);
        const uint32_t id = t.id;
        tasks.push_back({sparse_lane_(id, shards[0]),
                         [this, plan, table, id, shards, files, rows, slot, replace, aligned = t.aligned]() -> Status {
                           if (replace) {
                             for (uint32_t s : shards) RETURN_IF_ERROR(table->ClearShard(s));
                           }
                           return LoadSparse(*plan, id, shards, aligned, files, &(*rows)[slot]);
                         }});
      }
    }
    TrackProgress(tasks, "loading " + dir, [rows, slots](size_t i) -> uint64_t {
      return (*slots)[i] ? (*rows)[*(*slots)[i]] : 0;  // written by task i, on this thread
    });
    RunSequenced(std::move(tasks), [plan, rows, dir, done](Status st) {
      if (!st.ok()) return done(st.WithContext("load of " + dir + " failed part-way; tables may be partly loaded"));
      LoadOutcome outcome;
      for (uint64_t r : *rows) outcome.rows += r;
      outcome.version = Str(plan->checkpoint.manifest().version());
      outcome.mode = plan->checkpoint.manifest().mode();
      done(outcome);
    });
  });
}

StatusOr<LoadOutcome> CheckpointRunner::LoadSync(const std::string& dir) {
  std::promise<StatusOr<LoadOutcome>> promise;
  auto future = promise.get_future();
  Load(dir, [&promise](StatusOr<LoadOutcome> result) { promise.set_value(std::move(result)); });
  return future.get();
}

}  // namespace fleetps::server
