#include "server/table/dense_table.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/sharding.h"
#include "server/checkpoint/row_file.h"
#include "server/table/table_common.h"

namespace fleetps::server {

StatusOr<std::unique_ptr<DenseTable>> DenseTable::Create(const TableOptions& options, uint32_t server_index,
                                                         uint32_t num_servers) {
  ASSIGN_OR_RETURN(TableParts parts, BuildTableParts(options, TableKind::kDense, server_index, num_servers));
  auto table =
      std::unique_ptr<DenseTable>(new DenseTable(options, server_index, num_servers, std::move(parts.optimizer)));
  for (uint64_t i = 0; i < table->weights_.size(); ++i) {
    table->weights_[i] = parts.initializer.Value(table->begin_ + i, 0);
  }
  return table;
}

DenseTable::DenseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
                       std::unique_ptr<optimizer::Optimizer> optimizer)
    : options_(options),
      server_index_(server_index),
      num_servers_(num_servers),
      begin_(DenseSliceBegin(options.dim, num_servers, server_index)),
      end_(DenseSliceBegin(options.dim, num_servers, server_index + 1)),
      optimizer_(std::move(optimizer)),
      weights_(end_ - begin_),
      element_state_(weights_.size() * optimizer_->element_state_size()),
      shared_state_(optimizer_->shared_state_size()) {
  optimizer_->InitSpanState(element_state_.data(), shared_state_.data(), weights_.size());
}

uint64_t DenseTable::MemoryBytes() const {
  return (weights_.size() + element_state_.size() + shared_state_.size()) * sizeof(float);
}

Status DenseTable::Locate(uint64_t global_offset, uint64_t count, uint64_t* local) const {
  // Written so that global_offset + count cannot overflow.
  if (global_offset < begin_ || global_offset > end_ || count > end_ - global_offset) {
    const uint64_t range_end = count > UINT64_MAX - global_offset ? UINT64_MAX : global_offset + count;
    return Status::InvalidArgument(TableLabel(options_) + ": range [" + std::to_string(global_offset) + ", " +
                                   std::to_string(range_end) + ") is outside this server's slice [" +
                                   std::to_string(begin_) + ", " + std::to_string(end_) + ") (server " +
                                   std::to_string(server_index_) + " of " + std::to_string(num_servers_) + ")");
  }
  *local = global_offset - begin_;
  return Status::OK();
}

Status DenseTable::Pull(uint64_t global_offset, uint64_t count, float* out) const {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  std::copy_n(weights_.data() + local, count, out);
  return Status::OK();
}

Status DenseTable::Push(uint64_t global_offset, uint64_t count, const float* grads) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  if (count == 0) return Status::OK();
  optimizer_->UpdateSpan(weights_.data() + local, element_state_.data() + local * optimizer_->element_state_size(),
                         shared_state_.data(), grads, count);
  return Status::OK();
}

Status DenseTable::SetParams(uint64_t global_offset, uint64_t count, const float* values) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  if (count == 0) return Status::OK();
  std::copy_n(values, count, weights_.data() + local);
  optimizer_->InitSpanState(element_state_.data() + local * optimizer_->element_state_size(), shared_state_.data(),
                            count);
  has_params_ = true;
  return Status::OK();
}

Status DenseTable::SetParams(uint64_t global_offset, uint64_t count, const float* values, OptimizerStateView state) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  const uint32_t es = optimizer_->element_state_size();
  if (state.element_state.size() != count * es || state.shared_state.size() != shared_state_.size()) {
    return Status::InvalidArgument(TableLabel(options_) + ": optimizer state of " +
                                   std::to_string(state.element_state.size()) + " + " +
                                   std::to_string(state.shared_state.size()) + " floats for " + std::to_string(count) +
                                   " parameters, but the table's dense optimizer keeps " + std::to_string(es) +
                                   " per parameter + " + std::to_string(shared_state_.size()) +
                                   " (the trainers and the pservers must configure the same dense_table "
                                   "optimizer)");
  }
  if (count == 0) return Status::OK();
  std::copy_n(values, count, weights_.data() + local);
  std::copy(state.element_state.begin(), state.element_state.end(), element_state_.data() + local * es);
  std::copy(state.shared_state.begin(), state.shared_state.end(), shared_state_.data());
  has_params_ = true;
  return Status::OK();
}

Status DenseTable::PullState(uint64_t global_offset, uint64_t count, float* element_out, float* shared_out) const {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  const uint32_t es = optimizer_->element_state_size();
  std::copy_n(element_state_.data() + local * es, count * es, element_out);
  std::copy(shared_state_.begin(), shared_state_.end(), shared_out);
  return Status::OK();
}

}  // namespace fleetps::server

namespace fleetps::server {

Status DenseTable::AddDelta(uint64_t global_offset, uint64_t count, const float* delta) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  float* w = weights_.data() + local;
  for (uint64_t i = 0; i < count; ++i) w[i] += delta[i];
  return Status::OK();
}

StatusOr<DenseTable::SyncPushResult> DenseTable::PushSync(uint32_t trainer_id, uint32_t trainers, uint64_t step,
                                                          uint64_t global_offset, uint64_t count, const float* grads) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  const std::string label = TableLabel(options_) + ": sync push from trainer " + std::to_string(trainer_id);
  if (trainers == 0 || trainers > kMaxSyncTrainers) {
    return Status::InvalidArgument(label + ": sync_trainers " + std::to_string(trainers) + " is not in [1, " +
                                   std::to_string(kMaxSyncTrainers) + "]");
  }
  if (trainer_id >= trainers) {
    return Status::InvalidArgument(label + ": trainer id is not below sync_trainers " + std::to_string(trainers) +
                                   " (PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM)");
  }
  SyncPushResult result;
  if (step != 0) {
    if (step <= sync_.last_applied || (sync_.step != 0 && step < sync_.step)) {
      result.stale = true;  // that step was applied (with this push in it) or abandoned
      return result;
    }
    if (sync_.step != 0 && step > sync_.step) {
      result.abandoned_step = sync_.step;
      result.abandoned_trainers = static_cast<uint32_t>(sync_.received.size());
      std::fill(sync_.sum.begin(), sync_.sum.end(), 0.0f);
      sync_.received.clear();
      sync_.trainers = 0;
      sync_.complete = 0;
    }
  }
  if (sync_.trainers != 0 && sync_.trainers != trainers) {
    return Status::InvalidArgument(label + " for " + std::to_string(trainers) + " trainers while " +
                                   std::to_string(sync_.trainers) +
                                   " are accumulating (PADDLE_TRAINERS_NUM differs between trainers)");
  }
  if (count == 0) return result;
  auto& mine = sync_.received[trainer_id];
  // The first range starting at or after global_offset, and the one before it.
  auto next = mine.ranges.lower_bound(global_offset);
  const bool overlaps_next = next != mine.ranges.end() && next->first < global_offset + count;
  const bool overlaps_prev = next != mine.ranges.begin() && std::prev(next)->second > global_offset;
  if (overlaps_next || overlaps_prev) {
    if (mine.floats == 0) sync_.received.erase(trainer_id);
    if (step != 0) {
      result.stale = true;
      return result;
    }
    return Status::InvalidArgument(label + ": range [" + std::to_string(global_offset) + ", " +
                                   std::to_string(global_offset + count) +
                                   ") was already pushed in this sync step (a duplicated or retried push); the "
                                   "step waits for the other trainers");
  }
  if (sync_.sum.empty()) sync_.sum.assign(weights_.size(), 0.0f);
  sync_.trainers = trainers;
  if (step != 0) sync_.step = step;
  mine.ranges.emplace(global_offset, global_offset + count);
  mine.floats += count;
  float* sum = sync_.sum.data() + local;
  for (uint64_t i = 0; i < count; ++i) sum[i] += grads[i];
  if (mine.floats == weights_.size()) ++sync_.complete;
  if (sync_.complete < trainers) return result;
  // Every trainer sent its whole slice: apply the average as one step.
  const float scale = 1.0f / static_cast<float>(trainers);
  for (float& v : sync_.sum) v *= scale;
  optimizer_->UpdateSpan(weights_.data(), element_state_.data(), shared_state_.data(), sync_.sum.data(),
                         weights_.size());
  std::fill(sync_.sum.begin(), sync_.sum.end(), 0.0f);  // kept for the next round
  sync_.received.clear();
  sync_.trainers = 0;
  sync_.complete = 0;
  if (sync_.step != 0) sync_.last_applied = sync_.step;
  sync_.step = 0;
  result.applied = true;
  return result;
}

StatusOr<FileDigest> DenseTable::Save(disk::SaveMode mode, const std::string& path) const {
  const bool full = mode == disk::SaveMode::Checkpoint || mode == disk::SaveMode::Batch;
  auto digest = WriteDenseSliceFile(
      path, begin_, weights_, full ? std::span<const float>(element_state_) : std::span<const float>(),
      optimizer_->element_state_size(), full ? std::span<const float>(shared_state_) : std::span<const float>());
  if (!digest.ok()) return digest.status().WithContext(TableLabel(options_) + ": save");
  return digest;
}

void DenseTable::ResetOptimizerState() {
  optimizer_->InitSpanState(element_state_.data(), shared_state_.data(), weights_.size());
}

Status DenseTable::LoadBlock(const disk::DenseSliceBlock& block, bool full, bool take_shared_state) {
  const std::string label = TableLabel(options_) + ": load";
  const uint64_t n = block.weights()->size();
  const uint64_t offset = block.offset();
  if (offset > options_.dim || n > options_.dim - offset) {
    return Status::Corruption(label + ": a saved block covers [" + std::to_string(offset) + ", +" + std::to_string(n) +
                              "), outside the table's " + std::to_string(options_.dim) + " floats");
  }
  const uint32_t es = optimizer_->element_state_size();
  if (full) {
    const uint64_t have = block.element_state() ? block.element_state()->size() : 0;
    if (have != n * es) {
      return Status::Corruption(label + ": a saved block has " + std::to_string(have) + " element-state floats for " +
                                std::to_string(n) + " weights, expected " + std::to_string(n * es));
    }
  }
  const uint64_t lo = std::max(offset, begin_), hi = std::min(offset + n, end_);
  if (lo < hi) {
    has_params_ = true;
    std::copy_n(block.weights()->data() + (lo - offset), hi - lo, weights_.data() + (lo - begin_));
    if (full && es > 0) {
      std::copy_n(block.element_state()->data() + (lo - offset) * es, (hi - lo) * es,
                  element_state_.data() + (lo - begin_) * es);
    }
  }
  if (full && take_shared_state && block.shared_state() != nullptr) {
    if (block.shared_state()->size() != shared_state_.size()) {
      return Status::Corruption(label + ": saved shared optimizer state has " +
                                std::to_string(block.shared_state()->size()) + " floats, expected " +
                                std::to_string(shared_state_.size()));
    }
    std::copy_n(block.shared_state()->data(), shared_state_.size(), shared_state_.data());
  }
  return Status::OK();
}

}  // namespace fleetps::server
