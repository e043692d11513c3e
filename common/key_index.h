#pragma once
// KeyIndex: maps uint64 keys to dense indices 0..size()-1 in first-seen order — the
// de-duplication of a batch's keys, and the row numbering of the trainer's key caches.
//
// Open addressing with linear probing; a slot holds the key and its index, so a probe
// touches one cache line. The table doubles to stay at most half full; slots are placed
// by the top bits of MixKey (common/sharding.h), so sequential or strided ids spread out.
// A value type; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/sharding.h"

namespace fleetps {

class KeyIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // `expected`: keys to hold without growing.
  explicit KeyIndex(size_t expected = 0) {
    Allocate(expected);
    keys_.reserve(expected);
  }

  // Index of `key`, inserting it (as index size()) when new.
  uint32_t Insert(uint64_t key) {
    if ((keys_.size() + 1) * 2 > slots_.size()) Grow();
    Slot& slot = slots_[SlotOf(key)];
    if (slot.index == kNone) {
      FLEETPS_CHECK_LT(keys_.size(), size_t{kNone}) << "KeyIndex full";
      slot = Slot{key, static_cast<uint32_t>(keys_.size())};
      keys_.push_back(key);
    }
    return slot.index;
  }

  // index[i] = Insert(keys[i]) for every key, prefetching slots a few keys ahead.
  void InsertAll(std::span<const uint64_t> keys, uint32_t* index) {
    constexpr size_t kAhead = 8;
    if ((keys_.size() + keys.size()) * 2 > slots_.size()) Reserve(keys_.size() + keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i + kAhead < keys.size()) __builtin_prefetch(&slots_[Home(keys[i + kAhead])]);
      index[i] = Insert(keys[i]);
    }
  }

  // Index of `key`, or kNone.
  uint32_t Find(uint64_t key) const { return slots_[SlotOf(key)].index; }

  // Grows the table to hold `keys` keys without further growth.
  void Reserve(size_t keys) {
    if (keys * 2 <= slots_.size()) return;
    std::vector<uint64_t> old = std::move(keys_);
    Allocate(keys);
    keys_.reserve(keys);
    for (uint64_t key : old) Insert(key);
  }

  const std::vector<uint64_t>& keys() const { return keys_; }  // in index order
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }

  // Empties the index (keeping its capacity) and returns the keys it held, in index order.
  std::vector<uint64_t> TakeKeys() {
    if (keys_.size() * 8 >= slots_.size()) {
      // At least 1/8 of the slots in use: one sequential pass over the table costs less
      // than re-probing every key (a cache miss each).
      for (Slot& slot : slots_) slot.index = kNone;
    } else {
      // O(keys), not O(capacity). Positions first: freeing a slot would cut the probe
      // chains of the keys placed after it.
      std::vector<size_t> used;
      used.reserve(keys_.size());
      for (uint64_t key : keys_) used.push_back(SlotOf(key));
      for (size_t pos : used) slots_[pos].index = kNone;
    }
    return std::exchange(keys_, {});
  }
  // Empties the index, keeping its capacity and the key vector's.
  void Clear() {
    std::vector<uint64_t> keys = TakeKeys();
    keys.clear();
    keys_ = std::move(keys);
  }

 private:
  struct Slot {
    uint64_t key;
    uint32_t index;  // kNone: free
  };

  size_t Home(uint64_t key) const { return static_cast<size_t>(MixKey(key) >> shift_); }
  // The slot holding `key`, or the free slot where its probe ends.
  size_t SlotOf(uint64_t key) const {
    size_t pos = Home(key);
    while (slots_[pos].index != kNone && slots_[pos].key != key) pos = (pos + 1) & mask_;
    return pos;
  }

  // A free table for `keys` keys at most half full (at least 16 slots).
  void Allocate(size_t keys) {
    int bits = 4;
    while ((size_t{1} << bits) < keys * 2) ++bits;
    shift_ = 64 - bits;
    mask_ = (size_t{1} << bits) - 1;
    slots_.assign(size_t{1} << bits, Slot{0, kNone});
  }
  void Grow() { Reserve(slots_.size()); }  // doubles: size() + 1 keys would pass half full

  int shift_ = 60;
  size_t mask_ = 15;
  std::vector<Slot> slots_;
  std::vector<uint64_t> keys_;
};

}  // namespace fleetps
