#pragma once
// BarrierManager: named barriers for trainers, answered asynchronously.
//
// A barrier `name` completes when `participants` distinct trainer ids have arrived;
// every waiter's callback then gets the barrier's generation (1 for the first time it
// completes, 2 for the second, ...). A waiter whose deadline passes gets TimedOut, and
// leaves the barrier. No thread blocks: callbacks are invoked by Arrive() (on the
// completing arrival) or by ExpireDeadlines() (called periodically by the owner).
// Thread-safety: all methods are thread-safe; callbacks run without the lock held.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace fleetps::server {

class BarrierManager {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kMaxParticipants = 1u << 16;
  static constexpr size_t kMaxBarriers = 4096;
  static constexpr uint64_t kMaxWaitingBytes = 64ull << 20;
  struct Result {
    uint64_t generation = 0;  // completions of this barrier so far, this one included
    std::vector<double> sum;  // element-wise sum of every participant's values
    bool all_done = false;    // every participant arrived with done = true
  };
  using Callback = std::function<void(StatusOr<Result> result)>;

  // `values` (possibly empty) must have the same length for every participant of one
  // round, otherwise every waiter of the round gets InvalidArgument.
  void Arrive(const std::string& name, uint32_t trainer_id, uint32_t participants, Clock::time_point deadline,
              std::vector<double> values, bool done, Callback callback) EXCLUDES(mu_);
  // Fails every waiter whose deadline is <= now with TimedOut.
  void ExpireDeadlines(Clock::time_point now) EXCLUDES(mu_);
  // Fails every waiter with Aborted (server stopping).
  void AbortAll(const std::string& why) EXCLUDES(mu_);
  // While set (non-empty), the job cannot complete a barrier (a trainer is gone): every
  // waiter is failed with Aborted(why) now, and so is every later arrival until cleared
  // with an empty string.
  void SetJobFailure(const std::string& why) EXCLUDES(mu_);
  size_t waiting() const EXCLUDES(mu_);

 private:
  struct Waiter {
    uint32_t trainer_id;
    Clock::time_point deadline;
    std::vector<double> values;
    bool done;
    Callback callback;
  };
  struct Barrier {
    uint32_t participants = 0;
    uint64_t generation = 0;
    std::vector<Waiter> waiters;
    Clock::time_point last_used;
  };
  // "arrived: 0, 2; missing: 1 (of 3)" for a barrier's current round.
  static std::string Roll(const Barrier& b, uint32_t participants);
  // Makes room for one more barrier name; false when every barrier has waiters.
  bool MakeRoom() REQUIRES(mu_);
  // InvalidArgument naming the barrier when an arrival's ids cannot belong to a round.
  static Status CheckArrival(const std::string& name, uint32_t trainer_id, uint32_t participants);
  // The values of a released round summed, and every waiter of it answered.
  static void Release(const std::string& name, uint64_t generation, std::vector<Waiter>& released);

  mutable Mutex mu_;  // guards the members below
  std::map<std::string, Barrier> barriers_ GUARDED_BY(mu_);
  uint64_t waiting_bytes_ GUARDED_BY(mu_) = 0;
  std::string job_failure_ GUARDED_BY(mu_);
};

// MetricBoard: the latest metric vector of each trainer under a name, summed on demand
// (MetricReport). Bounded: at most kMaxNames names (the least recently reported one is
// forgotten first) and kMaxBytes of values in total; a report is held only while the
// connection it came on is open (Forget), so a peer that leaves takes its reports along.
// Thread-safe.
class MetricBoard {
 public:
  static constexpr size_t kMaxNames = 1024;
  static constexpr uint64_t kMaxBytes = 64ull << 20;
  // Stores `values` as trainer_id's latest under `name`, reported on connection `owner`;
  // returns the element-wise sum of the latest values of every trainer under `name` and
  // how many there are. InvalidArgument when the length differs from the other trainers'.
  StatusOr<std::pair<std::vector<double>, uint32_t>> Report(const std::string& name, uint32_t trainer_id,
                                                            std::vector<double> values, uint64_t owner) EXCLUDES(mu_);
  // Drops every report whose latest came on connection `owner` (it closed).
  void Forget(uint64_t owner) EXCLUDES(mu_);

 private:
  struct Latest {
    std::vector<double> values;
    uint64_t owner = 0;  // the connection it came on
  };
  struct Board {
    std::map<uint32_t, Latest> latest;  // trainer id -> its latest report
    uint64_t last_report = 0;           // tick of the latest report
  };
  static uint64_t Bytes(const Board& b);

  Mutex mu_;  // guards the members below
  std::map<std::string, Board> boards_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;  // values held, all boards
  uint64_t tick_ GUARDED_BY(mu_) = 0;
};

}  // namespace fleetps::server
