#pragma once
// CollectiveSync: the ParamSync of collective (data-parallel) training. Every rank holds
// the whole dense model; each step the ranks' dense gradients are summed by allreduce (in
// buckets of fuse_grad_size_in_MB) and every rank applies the same optimizer step to its
// replica, so the replicas stay bitwise equal. In the hybrid (pservers given) the sparse
// embeddings live on the pservers and go through the async communicator, as in async mode.
//
//   GradsReady(range)      (optional, from DenseNet's backward hook) a layer's dense gradients
//                          are final: every bucket they complete is handed to the
//                          communication thread at once, so its allreduce overlaps the
//                          backward of the earlier layers (fleetps.collective.overlap)
//   Push(grads)            sparse part to the communicator; dense buckets not sent yet go now
//   EndStep(out_of_data)   waits for the step's allreduce, joined by every rank every step,
//                          also by a rank without data (it adds nothing): the mean is over
//                          the ranks that had data; with drop_last every rank stops as soon
//                          as one is out of data. Returns true when the pass is over for all.
// Buckets are sent in the same order on every rank (last bucket first), as collectives
// require. The first float of the reduced buffer counts the ranks that had data; bucket 0
// holds it together with the first layer's gradients, the last to be ready.
//   Flush()                sparse pushes, then the replica to the dense table of `client`
//                          (rank 0 in the hybrid, every rank's own in-process table
//                          otherwise), where evaluation and saving read it.
//
// Learning rate: the dense optimizer's rate x world size with lr_scaling linear, ramped
// linearly over warmup_steps. Thread-safety: one worker thread (collective mode runs one
// per rank) calls the methods; a communication thread of its own runs the allreduces.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
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
  // The dense part only, whatever the model: for a caller that keeps the sparse part
  // itself (GPU-PS pass mode's device tables). Pushes must carry no keys.
  static StatusOr<std::unique_ptr<CollectiveSync>> CreateDenseOnly(const config::TrainerOptions& options,
                                                                   PsClient& client, collective::Communicator& comm);
  ~CollectiveSync() override;

  // Start of training: every rank passes its own initial parameters; all end up with rank
  // 0's (broadcast), whatever they passed.
  Status SetInitialParams(std::vector<float> params);
  // FNV-1a 64 of the replica's bytes, in hex: equal on every rank when they agree.
  std::string Checksum() const;
  const std::vector<float>& params() const { return params_; }
  uint64_t steps() const { return steps_; }
  // Seconds EndStep spent waiting for allreduces to finish (communication not hidden).
  double comm_wait_seconds() const { return comm_wait_seconds_; }

  // grads[begin, end) of this step's dense gradient are final (DenseNet's backward hook).
  void GradsReady(std::span<const float> grads, size_t begin, size_t end);

  Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) override;
  Status DenseParams(uint32_t worker, std::vector<float>* params) override;
  Status Push(uint32_t worker, const StepGrads& grads) override;
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) override;
  Status Flush() override;

 private:
  CollectiveSync(const config::TrainerOptions& options, PsClient& client, collective::Communicator& comm,
                 std::unique_ptr<ParamSync> sparse);
  // The dense rate of step steps_ (scaling, warm-up).
  // Marks buffer_[begin, end) filled and hands every bucket now complete to the
  // communication thread, highest bucket first.
  void Filled(size_t begin, size_t end);
  void CommLoop();

  const config::TrainerOptions& o_;
  PsClient& client_;
  collective::Communicator& comm_;
  std::unique_ptr<ParamSync> sparse_;                // hybrid only
  std::vector<float> params_;                        // the replica
  std::unique_ptr<optimizer::Optimizer> optimizer_;  // the dense rule at the current rate
  std::vector<float> state_;                         // the dense optimizer's element state
  std::vector<float> shared_state_;                  // and its shared state (Adam's beta powers)
  // The step's reduce buffer: [had data (1 float) | dense gradient], in buckets.
  std::vector<float> buffer_;
  std::vector<std::pair<size_t, size_t>> buckets_;  // [begin, end) in buffer_, ascending
  std::vector<size_t> filled_;                      // per bucket: floats filled this step
  int next_bucket_ = -1;                            // highest bucket not handed out yet
  bool has_grads_ = false;                          // this step had data
  uint64_t steps_ = 0;                              // optimizer steps applied
  double comm_wait_seconds_ = 0;

  std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  std::deque<size_t> queue_;  // buckets to reduce, in order
  size_t reduced_ = 0;        // buckets reduced this step
  Status comm_error_;
  bool stopping_ = false;
  std::thread comm_thread_;
};

}  // namespace fleetps::trainer
