#pragma once
// StepLoop: how a worker thread steps through its batches in one epoch's pass, one style
// per file, chosen once when the Trainer starts:
//   plain_loop.cc     read a batch, step, end the step (every mode by default)
//   prefetch_loop.cc  a helper thread reads and prepares the next batch (de-duplication,
//                     pull, pooling) while the worker trains the current one (ParamSync's
//                     Prefetching capability: async with fleetps.prefetch, GPU-PS)
//   heter_loop.cc     up to fleetps.heter.inflight micro-batches in flight to the
//                     heter-trainers, each finished when its answer arrives
// A loop records every finished step in the EpochRun and reports its errors there; it
// returns when its worker is done with the pass.

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "trainer/client/heter_client.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::trainer {

class EpochRun;

class StepLoop {
 public:
  virtual ~StepLoop() = default;
  // Worker `worker`'s share of the pass under way in `run`.
  virtual void RunWorker(EpochRun& run, uint32_t worker) = 0;
  // After the epoch's last pass and the sync's Flush (heter mode: the heter-trainers flush
  // their dense gradients).
  virtual Status EndEpoch() { return Status::OK(); }
};

std::unique_ptr<StepLoop> MakePlainLoop();
// `prefetching`: the ParamSync's, outliving the loop.
std::unique_ptr<StepLoop> MakePrefetchLoop(const Prefetching& prefetching);
// `heter` outlives the loop; `inflight`: micro-batches per worker (fleetps.heter.inflight).
std::unique_ptr<StepLoop> MakeHeterLoop(HeterClient& heter, uint32_t inflight);

}  // namespace fleetps::trainer
