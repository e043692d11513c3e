#pragma once
// ParamSync: how a trainer's worker threads read and update parameters in one training
// mode. One instance per trainer, shared by its workers; `worker` identifies the
// calling thread (0 .. threads-1).
//
//   Direct (local mode, sync mode): pull sparse rows and the dense vector every step,
//     push gradients and wait for the acknowledgement. In sync mode the dense gradient
//     is accumulated on the servers until every worker of every trainer pushed, then
//     their average is applied once; EndStep() is the per-step barrier.
//   Async: pulls sparse rows directly; dense parameters come from a snapshot that a
//     background communicator refreshes; pushes go to the communicator, which merges
//     gradients (summed per key, dense averaged over steps) and sends in the background.
//   Geo: workers train local copies (sparse rows cached on first use, the dense vector)
//     with the local optimizer rule; every geo_step steps the trainer pushes the deltas
//     since the last exchange (scaled by 1/trainers) and refreshes its copies. The other
//     workers keep training during an exchange; their progress is kept on top of the
//     refreshed values and sent with the next one.
//
// Thread-safety: every method may be called concurrently by the workers.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "trainer/client/ps_client.h"

namespace fleetps::trainer {

// One step's gradients. shows/clicks are empty, or (CTR tables) one per key: how often the
// key occurs in the batch, and in its clicked examples.
struct StepGrads {
  std::span<const uint64_t> keys;        // unique
  std::span<const float> key_grads;      // keys.size() * dim
  std::span<const float> shows;
  std::span<const float> clicks;
  std::span<const float> dense_grads;    // the dense table's size
};

class ParamSync {
 public:
  virtual ~ParamSync() = default;

  // Rows of `keys` (unique) into rows[keys.size() * dim].
  virtual Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) = 0;
  // The dense parameters to use for the next step.
  virtual Status DenseParams(uint32_t worker, std::vector<float>* params) = 0;
  virtual Status Push(uint32_t worker, const StepGrads& grads) = 0;
  // Sync mode: called by every worker once per step, also by workers without data
  // (`out_of_data`); returns true when every worker of every trainer is out of data.
  // Other modes return out_of_data.
  virtual StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) { return out_of_data; }
  // Sends everything pending and waits for it (end of a pass).
  virtual Status Flush() = 0;
};

// Creates the ParamSync for options.sync_mode (Direct for local training).
// `client` outlives the result.
StatusOr<std::unique_ptr<ParamSync>> MakeParamSync(const config::TrainerOptions& options, PsClient& client,
                                                  uint32_t worker_threads);

}  // namespace fleetps::trainer
