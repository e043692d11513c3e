#pragma once
// Initializer: the initial value of a parameter, a pure function of (seed, key, column).
//
// Every server computes the same value for the same (table, key, column) whatever the
// number of servers or shards, the arrival order or which trainer asked first, so a key
// reads the same before and after a re-shard, and a value that was never stored can be
// recomputed anywhere. Sparse rows use key = feature id and column = index in the row;
// dense tables use key = global float index and column = 0.
//
// Randomness is counter-based: Bits(counter) = MixKey(MixKey(MixKey(seed) ^ key) +
// counter * 0x9e3779b97f4a7c15), i.e. output `counter + 1` of a splitmix64 stream seeded
// per (seed, key). Do not change it: a row that was never stored is recomputed on every pull,
// so a new formula would change values that trainers have already seen.
//   uniform:  min + u * (max - min), u = top 53 bits / 2^53, in double, result in [min, max)
//   gaussian: mean + stddev * sqrt(-2 ln u1) * cos(2 pi u2) (Box-Muller), u1 in (0, 1] from
//             counter 2*column, u2 in [0, 1) from counter 2*column + 1, in double
//   zeros:    0;   constant: value
// The double-precision libm calls (log, cos) are deterministic for one build; all servers of a
// cluster run the same build.
//
// Thread-safety: immutable after Create; copyable.

#include <cstdint>

#include "common/config/table_options.h"
#include "common/status.h"

namespace fleetps::server {

class Initializer {
 public:
  // InvalidArgument naming the field unless: uniform min < max, both finite; gaussian mean
  // finite, stddev finite and >= 0; constant value finite.
  static StatusOr<Initializer> Create(const InitializerOptions& options);

  const InitializerOptions& options() const { return options_; }

  // The initial value of (key, column).
  float Value(uint64_t key, uint64_t column) const;
  // out[c] = Value(key, c) for c in [0, n).
  void FillRow(uint64_t key, float* out, uint32_t n) const;

 private:
  explicit Initializer(const InitializerOptions& options);

  // The per-(seed, key) stream state, and the value of `column` from it.
  uint64_t Stream(uint64_t key) const;
  float ValueFromStream(uint64_t stream, uint64_t column) const;

  InitializerOptions options_;
  uint64_t seed_mix_;  // MixKey(options_.seed)
};

}  // namespace fleetps::server
