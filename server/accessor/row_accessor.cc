#include "server/accessor/row_accessor.h"

#include <algorithm>
#include <cstring>

namespace fleetps::server {
namespace {

// Largest optimizer shared state (Adam: 2 beta powers); InitEmbedxState keeps a scratch
// copy on the stack.
constexpr uint32_t kMaxSharedFloats = 8;

}  // namespace

RowAccessor::RowAccessor(const AccessorOptions& options, uint32_t dim, const optimizer::Optimizer& optimizer)
    : options_(options),
      ctr_(options.kind == AccessorKind::kCtr),
      dim_(dim),
      optimizer_(optimizer),
      shared_floats_(optimizer.shared_state_size()),
      element_floats_(optimizer.element_state_size()),
      state_floats_(optimizer.StateSize(dim)),
      row_floats_(dim + optimizer.StateSize(dim) + 1 + (ctr_ ? uint32_t{kNumStats} : 0u)),
      create_weights_(ctr_ && options.embedx_threshold > 0 ? 1 : dim) {
  FLEETPS_CHECK_GE(dim, 1u);
  FLEETPS_CHECK_LE(shared_floats_, kMaxSharedFloats);
}

void RowAccessor::InitRow(float* row) const {
  std::fill(row + create_weights_, row + dim_, 0.0f);
  optimizer_.InitState(row + dim_, dim_);
  SetFlags(row, (ctr_ && create_weights_ == dim_ ? kExtended : 0) | kDirty);
  if (ctr_) std::fill(row + stats_offset(), row + stats_offset() + kNumStats, 0.0f);
}

bool RowAccessor::ApplyPush(float* row, const float* grad, float show, float click, bool delta) const {
  uint32_t flags = Flags(row);
  const uint32_t n = StoredWeights(flags);
  if (ctr_) {
    float* stats = row + stats_offset();
    stats[kShow] += show;
    stats[kClick] += click;
    stats[kDeltaScore] += Score(show, click);
    stats[kUnseenDays] = 0.0f;
  }
  if (delta) {
    for (uint32_t i = 0; i < n; ++i) row[i] += grad[i];
  } else {
    float* state = row + dim_;
    optimizer_.UpdateSpan(row, state + shared_floats_, state, grad, n);
  }
  SetFlags(row, flags | kChanged | kDirty);
  return ctr_ && (flags & kExtended) == 0 &&
         Score(row[stats_offset() + kShow], row[stats_offset() + kClick]) >= options_.embedx_threshold;
}

void RowAccessor::InitEmbedxState(float* row) const {
  if (dim_ == 1) return;
  float scratch[kMaxSharedFloats];
  float* state = row + dim_;
  optimizer_.InitSpanState(state + shared_floats_ + element_floats_, scratch, dim_ - 1);
}

void RowAccessor::Extend(float* row) const {
  InitEmbedxState(row);
  SetFlags(row, Flags(row) | kExtended);
}

bool RowAccessor::Shrink(float* row) const {
  if (!ctr_) return false;
  float* stats = row + stats_offset();
  stats[kShow] *= options_.show_click_decay_rate;
  stats[kClick] *= options_.show_click_decay_rate;
  return Score(stats[kShow], stats[kClick]) < options_.delete_threshold ||
         stats[kUnseenDays] > static_cast<float>(options_.delete_after_unseen_days);
}

bool RowAccessor::HasAfterSave(disk::SaveMode mode) const {
  return mode == disk::SaveMode::Delta || mode == disk::SaveMode::Base || (mode == disk::SaveMode::Batch && ctr_);
}

bool RowAccessor::MarkSaved(float* row) const {
  const uint32_t flags = Flags(row);
  if ((flags & kDirty) == 0) return false;
  SetFlags(row, flags & ~kDirty);
  return true;
}

bool RowAccessor::AfterSave(disk::SaveMode mode, float* row) const {
  switch (mode) {
    case disk::SaveMode::Delta:
    case disk::SaveMode::Base: {
      const uint32_t flags = Flags(row);
      bool changed = false;
      if ((flags & kChanged) != 0) {
        SetFlags(row, flags & ~kChanged);
        changed = true;
      }
      if (ctr_ && row[stats_offset() + kDeltaScore] != 0.0f) {
        row[stats_offset() + kDeltaScore] = 0.0f;
        changed = true;
      }
      return changed;
    }
    case disk::SaveMode::Batch:
      if (!ctr_) return false;
      row[stats_offset() + kUnseenDays] += 1.0f;
      return true;
    default: return false;
  }
}

uint32_t RowAccessor::PayloadFloats(bool full, uint32_t flags) const {
  const uint32_t n = StoredWeights(flags);
  if (!full) return n;
  return n + optimizer_.StateSize(n) + (ctr_ ? uint32_t{kNumStats} : 0u);
}

uint32_t RowAccessor::Encode(const float* row, bool full, float* out) const {
  const uint32_t n = StoredWeights(Flags(row));
  std::memcpy(out, row, n * sizeof(float));
  if (!full) return n;
  const uint32_t state = optimizer_.StateSize(n);
  std::memcpy(out + n, row + dim_, state * sizeof(float));
  uint32_t len = n + state;
  if (ctr_) {
    std::memcpy(out + len, row + stats_offset(), kNumStats * sizeof(float));
    len += kNumStats;
  }
  return len;
}

void RowAccessor::Decode(uint32_t flags, bool full, const float* payload, float* row) const {
  const uint32_t n = StoredWeights(flags);
  std::memcpy(row, payload, n * sizeof(float));
  std::fill(row + n, row + dim_, 0.0f);
  optimizer_.InitState(row + dim_, dim_);
  if (ctr_) std::fill(row + stats_offset(), row + stats_offset() + kNumStats, 0.0f);
  if (!full) {
    SetFlags(row, flags & kExtended);
    return;
  }
  const uint32_t state = optimizer_.StateSize(n);
  std::memcpy(row + dim_, payload + n, state * sizeof(float));
  if (ctr_) std::memcpy(row + stats_offset(), payload + n + state, kNumStats * sizeof(float));
  SetFlags(row, flags & (kChanged | kExtended));
}

void RowAccessor::MergeWeights(uint32_t flags, const float* payload, float* row) const {
  const uint32_t n = StoredWeights(flags);
  std::memcpy(row, payload, n * sizeof(float));
  if (ctr_ && (flags & kExtended) != 0 && !Extended(row)) Extend(row);
}

}  // namespace fleetps::server
