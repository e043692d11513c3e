#pragma once
// ShuffleMailbox: the pserver's side of InMemoryDataset's global shuffle (ShuffleSend /
// ShuffleFetch, schemas/ps.fbs).
//
// Trainers post blocks of records (opaque bytes here; the receiver parses them) for a
// receiving trainer in a numbered round; the receiver takes them in arrival order. A
// (round, receiver) box is complete once `senders` distinct trainers have posted their
// `last` block to it and it is empty; the receiver's fetch that sees this removes the box.
// The bytes held across all boxes are bounded by `capacity_bytes`: a post that would pass
// the bound is refused with Busy (the sender retries while receivers drain), except into
// an empty mailbox, so that one block larger than the bound still goes through. Before
// refusing, boxes untouched for `idle_expiry` (left behind by a trainer that died
// mid-shuffle) are dropped, so a failed job cannot block the next one's shuffles. The
// number of boxes is bounded too (kMaxBoxes, far above rounds x trainers of a live
// cluster), with the same idle expiry, so bare `last` markers cannot grow it without end.
// Thread-safety: all methods are thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace fleetps::server {

class ShuffleMailbox {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxBoxes = size_t{1} << 16;

  explicit ShuffleMailbox(uint64_t capacity_bytes, Clock::duration idle_expiry = std::chrono::minutes(10))
      : capacity_bytes_(capacity_bytes), idle_expiry_(idle_expiry) {}

  // Queues `block` from trainer `from` for trainer `to`. `last`: `from` has nothing more
  // for `to` in `round`. Busy when the mailbox is full; InvalidArgument when `from`
  // already posted its last block to (round, to). Returns the bytes held after the post.
  StatusOr<uint64_t> Post(uint64_t round, uint32_t from, uint32_t to, std::vector<uint8_t> block, bool last,
                          Clock::time_point now = Clock::now()) EXCLUDES(mu_);

  struct Mail {
    uint32_t from = 0;
    std::vector<uint8_t> block;
  };
  struct Taken {
    std::vector<Mail> mail;     // in arrival order
    uint32_t senders_done = 0;  // senders whose last block arrived
    bool complete = false;      // senders_done >= senders and nothing left: the box is gone
  };
  // Takes blocks for (round, to) while their total stays within max_bytes (at least one
  // block when any is waiting).
  Taken Take(uint64_t round, uint32_t to, uint32_t senders, uint64_t max_bytes, Clock::time_point now = Clock::now())
      EXCLUDES(mu_);

  uint64_t held_bytes() const EXCLUDES(mu_);

 private:
  struct Box {
    std::deque<Mail> mail;
    std::set<uint32_t> done;    // senders that posted their last block
    Clock::time_point touched;  // last Post or Take
  };

  // Drops the boxes untouched since now - idle_expiry_.
  void DropIdleLocked(Clock::time_point now) REQUIRES(mu_);

  const uint64_t capacity_bytes_;
  const Clock::duration idle_expiry_;
  mutable Mutex mu_;                                                    // guards everything below
  std::map<std::pair<uint64_t, uint32_t>, Box> boxes_ GUARDED_BY(mu_);  // (round, to) -> box
  uint64_t held_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace fleetps::server
