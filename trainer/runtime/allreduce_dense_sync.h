#pragma once
// AllreduceDenseSync: the heter-trainers' dense part averaged among themselves instead of
// through the pservers (fleetps.heter.dense_sync: allreduce). Every heter-trainer holds a
// replica of the dense parameters; the gradients of the micro-batches it computes add up
// locally, and every `interval` the heter-trainers run one round together:
//   1. an allreduce of the header [micro-batches, leaving, flush asked, parameters wanted]
//      — every rank, every round, whatever its load, so the rounds stay in step;
//   0. the first round in which some rank wants parameters (its first micro-batch, which
//      comes after trainer 0 has written the initial ones) starts the replicas: rank 0
//      pulls the pservers' dense parameters and broadcasts them;
//   2. when some rank had micro-batches: an allreduce of the summed gradients; every rank
//      applies one step of the dense optimizer with their mean (the async communicator's
//      merge window, spanning the heter-trainers), so the replicas stay bitwise equal;
//   3. when some rank was asked to flush (HeterFlush, or leaving): rank 0 writes the
//      replica to the pservers' dense table, where evaluation and saving read it, and one
//      more allreduce tells every rank whether that write worked;
//   4. when every rank is leaving, the rounds end.
// A rank that dies fails the others' next round within the communicator's timeout; from
// then on Push and Flush return that error.
// Thread-safety: PullSparse, DenseParams, DenseSnapshot, Push and Flush from any thread;
// the rounds run on a thread of their own.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::trainer {

class AllreduceDenseSync : public ParamSync {
 public:
  // Starts the rounds. `client` (the pservers) and `comm` (the heter-trainers) outlive the
  // result.
  static StatusOr<std::unique_ptr<AllreduceDenseSync>> Create(const config::TrainerOptions& options, PsClient& client,
                                                              collective::Communicator& comm,
                                                              std::chrono::milliseconds interval);
  ~AllreduceDenseSync() override;  // Leave()s

  Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) override;  // dense only
  // The replica; the first call waits for the round that starts the replicas.
  Status DenseParams(uint32_t worker, std::vector<float>* params) override;
  StatusOr<std::shared_ptr<const std::vector<float>>> DenseSnapshot(uint32_t worker) override;
  Status Push(uint32_t worker, const StepGrads& grads) override;  // dense gradients only
  // Returns once a round that began after the call has applied every gradient pushed
  // before it (on every rank) and rank 0 has written the replica to the pservers: that
  // write's status.
  Status Flush() override;
  // This rank stops pushing and takes part in the rounds until every rank leaves; the last
  // of them flushes. Returns that flush's status, or the first failed round's. Idempotent.
  Status Leave();
  // Ends this rank's rounds without the others (a heter-trainer that failed to start):
  // theirs fail within the communicator's timeout. Returns once the current round is over.
  void Abandon();

  // FNV-1a 64 of the replica's bytes, in hex: equal on every rank.
  std::string Checksum() const;
  uint64_t steps() const;  // optimizer steps applied (rounds with gradients)

 private:
  AllreduceDenseSync(const config::TrainerOptions& options, PsClient& client, collective::Communicator& comm,
                     std::chrono::milliseconds interval, std::unique_ptr<optimizer::Optimizer> optimizer);
  void RoundLoop();
  // One round; sets *all_left when every rank is leaving.
  Status Round(bool* all_left);
  // Rank 0's copy of the pservers' dense parameters to every rank's replica.
  Status StartReplicas();
  // Tells every rank how what rank 0 did for all of them (`mine` there; OK elsewhere) went:
  // *outcome. The returned status is the allreduce's own.
  Status ShareOutcome(const Status& mine, const std::string& what, Status* outcome);

  const config::TrainerOptions& o_;
  PsClient& client_;
  collective::Communicator& comm_;
  const std::chrono::milliseconds interval_;
  const std::unique_ptr<optimizer::Optimizer> optimizer_;

  // Owned by the round thread.
  std::vector<float> params_;  // the replica
  std::vector<float> state_;   // the dense optimizer's element state
  std::vector<float> shared_state_;
  std::vector<float> grads_;    // the round's gradient sum
  uint64_t written_steps_ = 0;  // steps_ when rank 0 last wrote the replica (the pservers' start)

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::shared_ptr<const std::vector<float>> snapshot_;  // params_ after the last round; null before
  bool wanted_ = false;                                 // a lane waits for the first snapshot
  std::vector<float> pending_;                          // gradients pushed since the last round began, summed
  uint64_t pending_count_ = 0;                          // micro-batches in pending_
  uint64_t flush_tickets_ = 0;                          // Flush calls so far
  uint64_t flushed_ticket_ = 0;                         // tickets answered by a finished flush round
  Status last_flush_;                                   // that round's write status
  bool leaving_ = false;
  bool abandoned_ = false;
  bool ended_ = false;  // the rounds are over (every rank left, or one failed)
  Status failed_;       // the first failed round
  uint64_t steps_ = 0;
  std::thread thread_;
};

}  // namespace fleetps::trainer
