#pragma once
// RowAccessor: what a stored sparse row holds, and the rules that create, update, shrink
// and (de)serialize it. Two kinds (TableOptions::accessor):
//  - plain (default): weights and optimizer state;
//  - ctr: Paddle's CtrCommonAccessor: adds show, click, unseen_days and delta_score, and
//    extends the embedding lazily.
//
// Row layout, row_floats() floats (in RAM, and verbatim in the RocksDB tier):
//   [0, dim)          weights: w[0] is embed_w, w[1, dim) is embedx
//   [dim, dim + S)    optimizer state, S = Optimizer::StateSize(dim) (shared state first,
//                     then the element state weight by weight)
//   [dim + S]         flags: RowFlag bits (schemas/checkpoint.fbs), plus the RAM-only kDirty
//                     bit, as a small integer held exactly in a float
//   CTR only, 4 more: show, click, unseen_days, delta_score
//
// CTR rules (score(show, click) = (show - click) * nonclk_coeff + click * click_coeff):
//  - A new row gets only embed_w from the initializer; embedx is zero and not updated until
//    the row is extended, which happens at the end of the first push after which the row's
//    score >= embedx_threshold: embedx then takes its initial values (the initializer's
//    columns 1..dim-1) and fresh optimizer state. With embedx_threshold <= 0 every row is
//    created extended. A pull of a not-yet-extended row returns zeros for embedx.
//  - A push adds its show/click to the row, adds score(push show, push click) to
//    delta_score, sets unseen_days = 0, then updates embed_w (and embedx once extended).
//  - Shrink: show *= show_click_decay_rate, click likewise; then the row is deleted when
//    score < delete_threshold or unseen_days > delete_after_unseen_days.
//  - After a save: Delta and Base clear the Changed flag and delta_score; Batch adds 1 to
//    unseen_days (AfterSave). Plain rows keep only the Changed flag.
// Every push (gradient or GEO delta) sets Changed.
//
// Save marks: the after-save changes belong to a committed checkpoint, so the table applies
// them only after the commit (SparseTable::SaveShard, ApplySaveEffects). kDirty tells which
// rows changed in between: InitRow, ApplyPush (and a Delta load's merge) set it, a save
// pass clears it (MarkSaved) on the rows it considered, and the after-save changes go only to
// rows without it (a row pushed after the save keeps its new state, as if the changes had
// been applied at the save and the push came after). kDirty never reaches a checkpoint or
// the wire: files carry SavedFlags.
//
// The initializer stays with the table: calls that need initial weights say which ones and
// the table writes them into the row first (see CreateWeights, ApplyPush).
//
// Thread-safety: immutable after construction; concurrent calls on different rows are safe.
// The optimizer outlives the accessor (both belong to the table).

#include <cstddef>
#include <cstdint>

#include "common/config/table_options.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "schemas/checkpoint_generated.h"

namespace fleetps::server {

class RowAccessor {
 public:
  // RowFlag bits (schemas/checkpoint.fbs).
  static constexpr uint32_t kChanged = static_cast<uint32_t>(disk::RowFlag::Changed);
  static constexpr uint32_t kExtended = static_cast<uint32_t>(disk::RowFlag::EmbedxExtended);
  // The flags a checkpoint carries (uint8 RowFlag bits).
  static constexpr uint32_t kSavedFlags = kChanged | kExtended;
  // RAM only, outside the uint8 of a saved flag: created or changed since the last save
  // pass that marked the row (see the class comment).
  static constexpr uint32_t kDirty = 1u << 8;
  // CTR statistics, at stats_offset() + Stat.
  enum Stat : uint32_t { kShow = 0, kClick = 1, kUnseenDays = 2, kDeltaScore = 3, kNumStats = 4 };

  // dim >= 1.
  RowAccessor(const AccessorOptions& options, uint32_t dim, const optimizer::Optimizer& optimizer);
  RowAccessor(const RowAccessor&) = delete;
  RowAccessor& operator=(const RowAccessor&) = delete;

  const AccessorOptions& options() const { return options_; }
  bool ctr() const { return ctr_; }
  uint32_t dim() const { return dim_; }
  uint32_t state_floats() const { return state_floats_; }
  uint32_t flags_offset() const { return dim_ + state_floats_; }
  uint32_t stats_offset() const { return dim_ + state_floats_ + 1; }
  uint32_t row_floats() const { return row_floats_; }

  // Every flag bit of a row, kDirty included.
  uint32_t Flags(const float* row) const { return static_cast<uint32_t>(row[flags_offset()]); }
  // The flags a checkpoint stores for the row.
  uint32_t SavedFlags(const float* row) const { return Flags(row) & kSavedFlags; }
  bool Dirty(const float* row) const { return (Flags(row) & kDirty) != 0; }
  void SetFlags(float* row, uint32_t flags) const { row[flags_offset()] = static_cast<float>(flags); }
  bool Extended(const float* row) const { return !ctr_ || (Flags(row) & kExtended) != 0; }
  // CTR statistic of a row (0 for plain rows).
  float StatOf(const float* row, Stat stat) const { return ctr_ ? row[stats_offset() + stat] : 0.0f; }

  float Score(float show, float click) const {
    return (show - click) * options_.nonclk_coeff + click * options_.click_coeff;
  }

  // Weights a new row takes from the initializer: dim, or 1 for CTR rows that start without
  // embedx. The weights a missing key reads as are those, followed by zeros.
  uint32_t CreateWeights() const { return create_weights_; }
  // Completes a new row whose first CreateWeights() weights the caller has written: zeros
  // the other weights, fresh optimizer state, zero statistics, flags kDirty (and Extended
  // when created whole).
  void InitRow(float* row) const;

  // Applies one push to a row: show/click (CTR), then either the optimizer on the
  // gradient (delta == false) or w += grad without optimizer (GEO delta), on w[0, dim) or,
  // for a CTR row without embedx, on w[0] only; sets Changed and kDirty. Returns true when
  // the row must be extended now: the caller then writes the initial values of w[1, dim) and calls
  // Extend(row).
  bool ApplyPush(float* row, const float* grad, float show, float click, bool delta) const;
  // Gives a row whose w[1, dim) the caller just initialized fresh embedx optimizer state and
  // the Extended flag.
  void Extend(float* row) const;

  // Decays a CTR row's show/click; true when the row must be deleted (see the class
  // comment). Plain rows: never deleted, unchanged.
  bool Shrink(float* row) const;
  // Whether a save in `mode` changes rows afterwards (AfterSave does something): Delta and
  // Base; Batch for CTR rows.
  bool HasAfterSave(disk::SaveMode mode) const;
  // The after-save changes of a committed save in `mode` (see the class comment), whatever
  // kDirty says (the table checks it); true when the row changed.
  bool AfterSave(disk::SaveMode mode, float* row) const;
  // A save pass considered the row: clears kDirty; true when the row changed.
  bool MarkSaved(float* row) const;

  // Checkpoint payloads (schemas/checkpoint.fbs SparseRowBlock). `full`: weights, optimizer
  // state and statistics; otherwise weights only.
  uint32_t PayloadFloats(bool full, uint32_t flags) const;
  // Writes the payload of `row` to out (at most row_floats() floats); returns its length.
  uint32_t Encode(const float* row, bool full, float* out) const;
  // Rebuilds a row from a payload of PayloadFloats(full, flags) floats. `flags` are the
  // saved flags (bits outside kSavedFlags are ignored); full payloads restore the row
  // exactly, weights-only ones get fresh optimizer state, zero statistics and Changed
  // cleared. kDirty is left clear.
  void Decode(uint32_t flags, bool full, const float* payload, float* row) const;
  // Merges a weights-only payload into an existing row (Delta load): its weights (and the
  // Extended flag, with fresh embedx state, when the saved row had embedx and this one not)
  // replace the row's; optimizer state and statistics stay.
  void MergeWeights(uint32_t flags, const float* payload, float* row) const;

 private:
  // Weights stored for a row with these flags: dim, or 1 for a CTR row without embedx.
  uint32_t StoredWeights(uint32_t flags) const { return (!ctr_ || (flags & kExtended) != 0) ? dim_ : 1; }
  // Fresh optimizer element state for weights [1, dim), leaving the row's shared state.
  void InitEmbedxState(float* row) const;

  const AccessorOptions options_;
  const bool ctr_;
  const uint32_t dim_;
  const optimizer::Optimizer& optimizer_;
  const uint32_t shared_floats_;
  const uint32_t element_floats_;
  const uint32_t state_floats_;
  const uint32_t row_floats_;
  const uint32_t create_weights_;
};

}  // namespace fleetps::server
