#include "trainer/client/sparse_merge.h"

namespace fleetps::trainer {

void SparseMerge::Add(std::span<const uint64_t> keys, std::span<const float> key_grads, std::span<const float> shows,
                      std::span<const float> clicks) {
  const bool stats = !shows.empty();
  rows_.resize(keys.size());
  keys_.InsertAll(keys, rows_.data());  // prefetches the slots ahead
  grads_.resize(keys_.size() * size_t{dim_}, 0.0f);
  if (stats) {
    shows_.resize(keys_.size(), 0.0f);
    clicks_.resize(keys_.size(), 0.0f);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* g = key_grads.data() + i * dim_;
    float* acc = grads_.data() + size_t{rows_[i]} * dim_;
    for (uint32_t j = 0; j < dim_; ++j) acc[j] += g[j];
    if (stats) {
      shows_[rows_[i]] += shows[i];
      clicks_[rows_[i]] += clicks[i];
    }
  }
  ++steps_;
}

void SparseMerge::Clear() {
  keys_.Clear();
  grads_.clear();
  shows_.clear();
  clicks_.clear();
  steps_ = 0;
}

}  // namespace fleetps::trainer
