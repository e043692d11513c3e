#pragma once
// DenseTable: this server's slice of a dense parameter vector.
//
// The table is a flat vector of options.dim floats (across all servers) split into
// contiguous slices by DenseSliceBegin (common/sharding.h); this server holds the global
// offsets [begin(), end()). Each weight has its own optimizer element state; the optimizer's
// shared state (Adam's beta powers) is one block for the whole slice and advances once per
// Push call, so a trainer pushes its whole slice once per step.
//
// Initial values come from the initializer with key = global offset and column = 0, so any
// split over servers gives the same vector.
//
// Thread-safety: none; a dense table has one owner (one executor) that makes every call.
// Not copyable.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/table_options.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "schemas/checkpoint_generated.h"
#include "server/checkpoint/checkpoint_file.h"

namespace fleetps::server {

class DenseTable {
 public:
  // InvalidArgument (naming the table and the field) unless options.kind is dense, dim >= 1,
  // server_index < num_servers and the optimizer and initializer options are valid.
  static StatusOr<std::unique_ptr<DenseTable>> Create(const TableOptions& options, uint32_t server_index,
                                                      uint32_t num_servers);
  DenseTable(const DenseTable&) = delete;
  DenseTable& operator=(const DenseTable&) = delete;

  const TableOptions& options() const { return options_; }
  // This server's slice of global offsets, [begin(), end()); may be empty when the table has
  // fewer floats than there are servers.
  uint64_t begin() const { return begin_; }
  uint64_t end() const { return end_; }
  // RAM held by the slice: weights plus optimizer state, bytes.
  uint64_t MemoryBytes() const;

  // All three take a global range [global_offset, global_offset + count) that must lie in
  // [begin(), end()); InvalidArgument naming the table, the range and the slice otherwise.
  // count == 0 is a no-op.

  // Copies the weights of the range to out[0, count).
  Status Pull(uint64_t global_offset, uint64_t count, float* out) const;
  // Applies grads[0, count) to the range with the optimizer (one optimizer step).
  Status Push(uint64_t global_offset, uint64_t count, const float* grads);
  // Overwrites the range with values[0, count) (trainer 0's initial parameters), resets the
  // range's optimizer state and restarts the shared state (Adam's bias correction).
  Status SetParams(uint64_t global_offset, uint64_t count, const float* values);
  // The optimizer state given with the parameters (a trainer's replica that steps the dense
  // rule itself): element_state, count x the optimizer's element_state_size() floats
  // (weight-major), and shared_state, its shared_state_size() floats. InvalidArgument naming
  // the table and both sizes when they are not the optimizer's; nothing changes then.
  struct OptimizerStateView {
    std::span<const float> element_state;
    std::span<const float> shared_state;
  };
  Status SetParams(uint64_t global_offset, uint64_t count, const float* values, OptimizerStateView state);
  // The range's element state to element_out (count x element_state_size() floats) and the
  // slice's shared state to shared_out (shared_state_size() floats).
  Status PullState(uint64_t global_offset, uint64_t count, float* element_out, float* shared_out) const;
  // True once the slice holds parameters someone gave it: SetParams or a checkpoint load
  // (LoadBlock). A job's initial push leaves such a slice alone (PushDenseParam if_unset).
  bool has_params() const { return has_params_; }
  // GEO: adds delta[0, count) to the range's weights; no optimizer, state untouched.
  Status AddDelta(uint64_t global_offset, uint64_t count, const float* delta);
  // Sync mode: trainer `trainer_id` of `trainers` contributes grads[0, count) for the range
  // to step `step` (0 = unnumbered). Once every trainer has contributed every float of the
  // slice (in any number of pieces), their average is applied as one optimizer step and the
  // round restarts. InvalidArgument (nothing accumulated) when the range is outside the
  // slice, trainer_id >= trainers, trainers is 0, above kMaxSyncTrainers or differs from
  // the round's, or (unnumbered) the trainer already sent part of the range this round.
  // Numbered pushes keep the trainers and the table in lockstep across a lost push or a
  // restart from a checkpoint: a push for a newer step than the round's abandons the round
  // (its gradients are dropped, and reported); a push for a step already over (applied or
  // abandoned) or a re-sent copy (a range this trainer already sent for this step) is
  // reported stale and not counted.
  struct SyncPushResult {
    bool applied = false;             // this call completed the step
    bool stale = false;               // a step already over, or a re-sent copy: nothing accumulated
    uint64_t abandoned_step = 0;      // the round this call abandoned, 0 = none
    uint32_t abandoned_trainers = 0;  // trainers whose gradients it held
  };
  StatusOr<SyncPushResult> PushSync(uint32_t trainer_id, uint32_t trainers, uint64_t step, uint64_t global_offset,
                                    uint64_t count, const float* grads);
  static constexpr uint32_t kMaxSyncTrainers = 1u << 16;
  // Trainers that have sent their whole slice in the current sync round.
  uint32_t sync_trainers_complete() const { return sync_.complete; }
  // Checks a range without touching anything (the same check every call above makes), so a
  // caller can refuse a request before allocating for it.
  Status CheckRange(uint64_t global_offset, uint64_t count) const {
    uint64_t local = 0;
    return Locate(global_offset, count, &local);
  }

  const optimizer::Optimizer& optimizer() const { return *optimizer_; }

  // Checkpoints. Save writes the slice to a DenseSlice file at `path` (fsynced): weights,
  // and for Checkpoint/Batch modes also the optimizer state. Dense tables have no change
  // tracking: a Delta save writes every weight, like Base.
  StatusOr<FileDigest> Save(disk::SaveMode mode, const std::string& path) const;
  // Restarts the optimizer state of the whole slice (before loading weights-only blocks).
  void ResetOptimizerState();
  // Copies the part of a saved block that overlaps this slice: weights and, when `full`,
  // element state; the block's shared state when it has one and `take_shared_state`. The
  // optimizer must be the saving one for full blocks (the caller checks the manifest);
  // Corruption when the block's state sizes do not match it.
  Status LoadBlock(const disk::DenseSliceBlock& block, bool full, bool take_shared_state);

 private:
  DenseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
             std::unique_ptr<optimizer::Optimizer> optimizer);

  // OK when the range lies in the slice; sets *local to its offset inside the slice.
  Status Locate(uint64_t global_offset, uint64_t count, uint64_t* local) const;

  const TableOptions options_;
  const uint32_t server_index_;
  const uint32_t num_servers_;
  const uint64_t begin_;
  const uint64_t end_;
  const std::unique_ptr<optimizer::Optimizer> optimizer_;
  std::vector<float> weights_;        // end_ - begin_ floats
  std::vector<float> element_state_;  // element_state_size() floats per weight
  std::vector<float> shared_state_;   // shared_state_size() floats for the slice
  bool has_params_ = false;           // see has_params()

  // The sync round under way (PushSync).
  struct SyncRound {
    uint32_t trainers = 0;      // of this round; 0 when no push is pending
    uint64_t step = 0;          // of this round; 0 when unnumbered or none is pending
    uint64_t last_applied = 0;  // the newest numbered step applied
    uint32_t complete = 0;      // trainers whose ranges cover the slice
    std::vector<float> sum;     // the slice's gradient sum
    // Per trainer: the ranges received, begin -> end (global offsets, disjoint), and their
    // float count.
    struct Received {
      std::map<uint64_t, uint64_t> ranges;
      uint64_t floats = 0;
    };
    std::map<uint32_t, Received> received;
  };
  SyncRound sync_;
};

}  // namespace fleetps::server
