#pragma once
// SparseMerge: sparse gradients summed per key, in the order the keys arrive, with their
// CTR show/click counts. PsClient::PushSparse sums a push's repeated keys with one; the
// async communicator's merge windows (fleetps.max_merge_steps, trainer/runtime/
// async_sync.cc) and a GPU-PS worker's merge buffer (heter_trainer/gpups/gpups_sync.cc) are
// each one, over several steps.
// Thread-safety: none; the owner serialises calls.

#include <cstdint>
#include <span>
#include <vector>

#include "common/key_index.h"

namespace fleetps::trainer {

class SparseMerge {
 public:
  explicit SparseMerge(uint32_t dim = 0) : dim_(dim) {}

  // Adds one step: keys (a key may repeat), key_grads [keys.size() * dim], and shows/clicks
  // (one per key, or both empty).
  void Add(std::span<const uint64_t> keys, std::span<const float> key_grads, std::span<const float> shows,
           std::span<const float> clicks);
  // Empties it for reuse, its buffers' capacity kept.
  void Clear();

  uint32_t dim() const { return dim_; }
  uint32_t steps() const { return steps_; }
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.size() == 0; }
  std::span<const uint64_t> keys() const { return keys_.keys(); }
  std::span<const float> grads() const { return grads_; }
  // Empty when no step carried show/click counts.
  std::span<const float> shows() const { return shows_; }
  std::span<const float> clicks() const { return clicks_; }

 private:
  uint32_t dim_;
  KeyIndex keys_;               // -> row of grads_
  std::vector<uint32_t> rows_;  // Add's scratch: the row of each key of the step
  std::vector<float> grads_, shows_, clicks_;
  uint32_t steps_ = 0;
};

}  // namespace fleetps::trainer
