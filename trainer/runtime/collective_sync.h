#pragma once
// CollectiveSync: the ParamSync of collective (data-parallel) training. Every rank holds
// the whole dense model; each step the ranks' dense gradients are summed by allreduce (in
// buckets of fuse_grad_size_in_MB) and every rank applies the same optimizer step to its
// replica, so the replicas stay bitwise equal. In the hybrid (pservers given) the sparse
// embeddings live on the pservers and go through the async communicator, as in async mode.
//
//   Push(grads)            sparse part to the communicator; dense part kept for EndStep
//   EndStep(out_of_data)   the step's allreduce, joined by every rank every step, also by a
//                          rank without data (it adds nothing): the mean is over the ranks
//                          that had data; with drop_last every rank stops as soon as one
//                          is out of data. Returns true when the pass is over for all.
//   Flush()                sparse pushes, then the replica to the dense table of `client`
//                          (rank 0 in the hybrid, every rank's own in-process table
//                          otherwise), where evaluation and saving read it.
//
// Learning rate: the dense optimizer's rate x world size with lr_scaling linear, ramped
// linearly over warmup_steps. Thread-safety: one worker thread (collective mode runs one
// per rank).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::trainer {

class CollectiveSync : public ParamSync {
 public:
  // `client` and `comm` outlive the result.
  static StatusOr<std::unique_ptr<CollectiveSync>> Create(const config::TrainerOptions& options, PsClient& client,
                                                          collective::Communicator& comm);

  // Start of training: every rank passes its own initial parameters; all end up with rank
  // 0's (broadcast), whatever they passed.
  Status SetInitialParams(std::vector<float> params);
  // FNV-1a 64 of the replica's bytes, in hex: equal on every rank when they agree.
  std::string Checksum() const;
  const std::vector<float>& params() const { return params_; }
  uint64_t steps() const { return steps_; }

  Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) override;
  Status DenseParams(uint32_t worker, std::vector<float>* params) override;
  Status Push(uint32_t worker, const StepGrads& grads) override;
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) override;
  Status Flush() override;

 private:
  CollectiveSync(const config::TrainerOptions& options, PsClient& client, collective::Communicator& comm,
                 std::unique_ptr<ParamSync> sparse);
  // The dense rate of step steps_ (scaling, warm-up).
  float LearningRate() const;

  const config::TrainerOptions& o_;
  PsClient& client_;
  collective::Communicator& comm_;
  std::unique_ptr<ParamSync> sparse_;  // hybrid only
  std::vector<float> params_;          // the replica
  std::vector<float> state_;           // the dense optimizer's element state
  std::vector<float> shared_state_;    // and its shared state (Adam's beta powers)
  std::vector<float> grads_;           // the step's dense gradient + 1 float: "had data"
  bool has_grads_ = false;
  uint64_t steps_ = 0;                 // optimizer steps applied
};

}  // namespace fleetps::trainer
