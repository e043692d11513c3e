#pragma once
// TrainerRegistry: which trainers of the job are alive, finished or gone, from their
// heartbeats (HeartbeatRequest, sent by every trainer to every pserver every few seconds
// and once more when it ends).
//
// A trainer is gone when nothing was heard from it for `lease`: a trainer that has been
// heard from and then falls silent (killed, partitioned), or one of the job's
// `trainers` ids that never showed up within `lease` of the first heartbeat. A gone
// trainer that heartbeats again is alive again. The job has ended when every id in
// [0, trainers) is finished or gone (the pserver may then exit by itself). With lease 0
// nobody is ever gone, and the job ends only when every trainer said it finished.
// Thread-safety: all methods are thread-safe.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/net/rpc_server.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace fleetps::net {

class TrainerRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kMaxTrainers = 1u << 16;

  explicit TrainerRegistry(std::chrono::milliseconds lease) : lease_(lease) {}

  // Records a heartbeat of trainer `id` of `trainers`; `finished` once it has ended
  // (`failed` with `reason` when it ended with an error); `stopping` while a stop request
  // ends its training. Returns the ids counted as gone.
  // InvalidArgument when trainers is 0 or above kMaxTrainers, id >= trainers, or trainers
  // differs from the first heartbeat's (PADDLE_TRAINERS_NUM differs between trainers).
  StatusOr<std::vector<uint32_t>> Heartbeat(uint32_t id, uint32_t trainers, bool finished, bool failed,
                                            const std::string& reason, Clock::time_point now, bool stopping = false)
      EXCLUDES(mu_);

  struct Sweep {
    std::vector<uint32_t> newly_gone;  // gone since the previous sweep
    std::vector<uint32_t> gone;        // every trainer counted as gone now
    bool ended = false;                // every trainer finished or gone (and at least one heartbeat)
    bool clean = false;                // ended, and every trainer finished without failing
    std::vector<uint32_t> training;    // alive (heard from, not finished, not gone), not stopping
    std::vector<uint32_t> stopping;    // alive, and said it is stopping
    std::string summary;               // "trainers finished: 0, 1; failed: -; gone: 2 (no heartbeat for 60 s)"
  };
  // Marks trainers silent for longer than the lease as gone.
  Sweep Expire(Clock::time_point now) EXCLUDES(mu_);
  std::vector<uint32_t> gone() const EXCLUDES(mu_);

 private:
  struct Entry {
    Clock::time_point last_seen;
    bool seen = false;
    bool finished = false;
    bool failed = false;
    bool gone = false;
    bool stopping = false;
  };
  std::vector<uint32_t> GoneLocked() const REQUIRES(mu_);

  const std::chrono::milliseconds lease_;
  mutable Mutex mu_;                       // guards the members below
  uint32_t trainers_ GUARDED_BY(mu_) = 0;  // 0 until the first heartbeat
  Clock::time_point first_heartbeat_ GUARDED_BY(mu_);
  std::vector<Entry> entries_ GUARDED_BY(mu_);  // trainers_ entries
};

// After a stop signal, a server (a pserver, a heter-trainer) keeps serving the trainers whose
// heartbeat says they are stopping until they have ended, so that their last requests land
// (every process of a job stopped at once). A trainer still training `grace` after the
// signal is not waited for (the server was stopped alone); stopping ones at most `limit`.
class StopWait {
 public:
  using Clock = TrainerRegistry::Clock;
  // A trainer's heartbeat says it is stopping as soon as its own signal comes.
  static constexpr std::chrono::seconds kGrace{2};
  static constexpr std::chrono::seconds kLimit{300};
  StopWait(std::string signal, Clock::time_point now, std::chrono::seconds grace = kGrace,
           std::chrono::seconds limit = kLimit)
      : signal_(std::move(signal)), grace_end_(now + grace), limit_(limit), end_(now + limit) {}

  // Whether `sweep` holds trainers to wait for; the log line that says so.
  static bool Needed(const TrainerRegistry::Sweep& sweep) { return !sweep.training.empty() || !sweep.stopping.empty(); }
  std::string Describe(const TrainerRegistry::Sweep& sweep) const;
  // Empty while the server should keep serving; else the reason to shut down now
  // ("SIGTERM: the stopping trainers have ended").
  std::optional<std::string> Over(const TrainerRegistry::Sweep& sweep, Clock::time_point now) const;

 private:
  std::string signal_;
  Clock::time_point grace_end_;
  std::chrono::seconds limit_;
  Clock::time_point end_;
};

// Answers a Heartbeat request (schemas/ps.fbs) from `registry`: the pservers' and the
// heter-trainers' handler. With a shared secret configured, only from an authenticated
// peer (Authorized, common/net/handler_util.h).
void AnswerHeartbeat(TrainerRegistry& registry, const Request& req, const Responder& responder);

}  // namespace fleetps::net
