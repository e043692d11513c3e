#pragma once
// DenseReplica: the dense parameters of GPU-PS pass mode for the workers of one process —
// one copy of the parameters and of the optimizer state, shared by the process's workers,
// each a rank of a local group (trainer/collective/local_group.h) whose processes are joined
// by an inner communicator.
//
// A step, as CollectiveSync's: every worker hands in its dense gradient (Push) and joins the
// step's allreduce (EndStep), also a worker out of data, which adds nothing; the sum is
// divided by the ranks that had data; the learning rate is scaled and warmed up as
// fleetps.collective says. Then each worker applies the optimizer to its own slice of the
// parameters, so that the optimizer's arithmetic and memory traffic are spent once per
// process instead of once per worker, and no worker copies a whole replica of its own. A
// worker's next DenseParams waits until every slice of the step is applied. Every process
// applies the same sum with the same rule, so the processes' replicas stay bitwise equal, and
// equal to what one replica per rank (CollectiveSync) gives. With fewer workers than
// `apply_threads`, helper threads of the replica step parts of each worker's slice with it,
// so one worker does not run the whole optimizer alone.
//
// Thread-safety: worker w calls DenseParams, Push and EndStep on its own thread, the workers
// at once; params() between steps; Abort from any thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/executor.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"

namespace fleetps::heter {

class DenseReplica {
 public:
  // The least parameters a helper is given (a smaller slice is stepped by its worker alone).
  static constexpr size_t kMinPart = size_t{1} << 14;
  // Threads that apply a step's optimizer together, workers and helpers: one per two cores
  // (the workers' prefetch helpers and the devices' lanes run beside them), at most 4.
  static size_t DefaultApplyThreads();

  // `comms[w]`: worker w's communicator (rank trainer_id * workers + w of a local group),
  // outliving the result. `params`: the starting parameters, the same on every rank (rank
  // 0's broadcast). `state`: the optimizer state to resume (state() of an earlier replica, as
  // the pservers' dense table kept it), empty: a fresh one. `apply_threads`: workers and
  // helpers stepping the optimizer (helpers when it exceeds the workers). InvalidArgument for
  // a bad dense optimizer, or a state of the wrong size.
  static StatusOr<std::unique_ptr<DenseReplica>> Create(const config::TrainerOptions& options,
                                                        std::vector<trainer::collective::Communicator*> comms,
                                                        std::vector<float> params,
                                                        trainer::PsClient::DenseState state = {},
                                                        size_t apply_threads = DefaultApplyThreads());

  // The parameters of worker's next step: the replica once every slice of the last step is
  // applied (TimedOut after fleetps.collective.timeout_ms, or Abort's status).
  Status DenseParams(uint32_t worker, std::vector<float>* params);
  // The same, the replica itself: no slice changes before every worker's EndStep of the step,
  // so the worker may read it until its own EndStep.
  StatusOr<std::span<const float>> DenseParamsView(uint32_t worker);
  // Where worker may write its dense gradient of the step for Push (no copy then): its
  // buffer, free from its last EndStep to its next Push. Empty for an unknown worker.
  std::span<float> GradsBuffer(uint32_t worker);
  // worker's dense gradient of this step (the replica's size; in GradsBuffer or elsewhere).
  Status Push(uint32_t worker, std::span<const float> grads);
  // The step's allreduce, joined by every rank every step; then worker's slice of the
  // replica stepped. True when every rank is out of data (nothing applied), or, with
  // drop_last, when one is.
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data);
  // Ends waits in DenseParams with `why` (the local group's waits end by its own Abort).
  void Abort(const Status& why);

  // The replica and its optimizer state, when no step is under way.
  const std::vector<float>& params() const { return params_; }
  trainer::PsClient::DenseState state() const;
  uint64_t steps() const;  // optimizer steps applied
  size_t helper_threads() const { return helpers_ ? helpers_->num_threads() : 0; }

 private:
  // A contiguous part of a worker's slice, stepped by the worker or a helper.
  struct Part {
    size_t lo = 0, hi = 0;
    std::vector<float> shared_state;  // its copy of the rule's shared state (Adam's powers)
    std::vector<float> grads;         // the step's mean gradient of the part
  };
  struct Member {
    trainer::collective::Communicator* comm;
    std::vector<Part> parts;                          // its slice of the parameters; parts[0] its own
    std::vector<float> buffer;                        // [had data (1 float) | the step's gradient]
    bool has_grads = false;                           // pushed this step
    std::unique_ptr<optimizer::Optimizer> optimizer;  // the rule at the current rate
    uint64_t applied = 0;                             // steps it has applied to its slice
  };

  DenseReplica(const config::TrainerOptions& options, std::vector<float> params);
  Status CheckWorker(uint32_t worker) const;  // InvalidArgument for a worker it does not have
  // The dense rate of step `step` (scaling, warm-up), as CollectiveSync's.

  const config::TrainerOptions& o_;
  std::vector<float> params_;
  std::vector<float> state_;  // the rule's element state, weight-major: a slice is contiguous
  std::vector<Member> members_;
  std::unique_ptr<ExecutorPool> helpers_;  // null when every worker steps its slice alone

  mutable std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  uint64_t slices_applied_ = 0;  // over all members and steps
  Status aborted_;
};

}  // namespace fleetps::heter
