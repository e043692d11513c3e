// The plain stepping style (step_loop.h): read a batch, step, end the step.

#include "trainer/runtime/epoch_run.h"
#include "trainer/runtime/step_loop.h"

namespace fleetps::trainer {
namespace {

class PlainLoop : public StepLoop {
 public:
  void RunWorker(EpochRun& run, uint32_t worker) override {
    WorkerState& ws = run.state(worker);
    data::Batch batch;
    bool done = false;
    while (!done && !run.failed()) {
      // After a stop request this worker is out of data: sync mode's EndStep still meets the others.
      StatusOr<bool> got = false;
      if (!run.stop_requested()) got = run.NextBatch(&batch, ws.times);
      Status st = got.status();
      if (st.ok() && *got) {
        auto step = run.steps().Step(worker, batch, ws);
        st = step.status();
        if (st.ok()) run.Record(*step, batch);
      }
      if (st.ok()) {
        // Sync mode keeps every worker stepping until all are out of data.
        auto all_done = run.EndStep(worker, !*got);
        st = all_done.status();
        done = st.ok() && *all_done;
      }
      if (!st.ok()) run.Fail(st);
    }
  }
};

}  // namespace

std::unique_ptr<StepLoop> MakePlainLoop() { return std::make_unique<PlainLoop>(); }

}  // namespace fleetps::trainer
