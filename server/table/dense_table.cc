#include "server/table/dense_table.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/sharding.h"
#include "server/table/table_common.h"

namespace fleetps::server {

StatusOr<std::unique_ptr<DenseTable>> DenseTable::Create(const TableOptions& options, uint32_t server_index,
                                                         uint32_t num_servers) {
  ASSIGN_OR_RETURN(TableParts parts, BuildTableParts(options, TableKind::kDense, server_index, num_servers));
  auto table = std::unique_ptr<DenseTable>(
      new DenseTable(options, server_index, num_servers, std::move(parts.optimizer)));
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
                                   std::to_string(server_index_) + " of " + std::to_string(num_servers_) +
                                   ")");
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
  optimizer_->UpdateSpan(weights_.data() + local,
                         element_state_.data() + local * optimizer_->element_state_size(),
                         shared_state_.data(), grads, count);
  return Status::OK();
}

Status DenseTable::SetParams(uint64_t global_offset, uint64_t count, const float* values) {
  uint64_t local = 0;
  RETURN_IF_ERROR(Locate(global_offset, count, &local));
  if (count == 0) return Status::OK();
  std::copy_n(values, count, weights_.data() + local);
  optimizer_->InitSpanState(element_state_.data() + local * optimizer_->element_state_size(),
                            shared_state_.data(), count);
  return Status::OK();
}

}  // namespace fleetps::server
