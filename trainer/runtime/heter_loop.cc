// The heter stepping style (step_loop.h): each worker keeps up to fleetps.heter.inflight
// micro-batches in flight at the heter-trainers. It reads, pulls and pools the next ones
// while earlier ones are computed remotely, and on each answer back-propagates into the
// embeddings and pushes the sparse gradients.

#include <atomic>
#include <chrono>
#include <deque>
#include <future>

#include "trainer/runtime/epoch_run.h"
#include "trainer/runtime/step_loop.h"

namespace fleetps::trainer {
namespace {

// One micro-batch from its read to its sparse push. The request's spans point into batch
// and state, so a slot is reused only after its answer arrived.
struct InFlight {
  data::Batch batch;
  WorkerState state;
  std::future<StatusOr<HeterStep>> reply;
};

class HeterLoop : public StepLoop {
 public:
  HeterLoop(HeterClient& heter, uint32_t inflight) : heter_(heter), depth_(std::max<uint32_t>(inflight, 1)) {}

  void RunWorker(EpochRun& run, uint32_t w) override {
    std::deque<std::unique_ptr<InFlight>> pending, free;
    bool out_of_data = false;
    while (true) {
      if (run.stop_requested()) out_of_data = true;  // the micro-batches in flight still finish
      if (!out_of_data && !run.failed() && pending.size() < depth_) {
        std::unique_ptr<InFlight> slot;
        if (free.empty()) {
          slot = std::make_unique<InFlight>();
        } else {
          slot = std::move(free.front());
          free.pop_front();
        }
        auto got = run.NextBatch(&slot->batch, run.state(w).times);
        Status st = got.status();
        if (st.ok() && *got) {
          st = Send(run, w, *slot);
          if (st.ok()) {
            pending.push_back(std::move(slot));
            continue;
          }
        } else if (st.ok()) {
          out_of_data = true;
        }
        if (!st.ok()) run.Fail(st);
        free.push_back(std::move(slot));
      }
      if (pending.empty()) break;
      // The oldest answer; after a failure the rest are still awaited (they hold spans
      // into their slots) but nothing new is sent.
      std::unique_ptr<InFlight> slot = std::move(pending.front());
      pending.pop_front();
      auto step = Receive(run, w, *slot);
      if (!step.ok()) {
        run.Fail(step.status());
      } else if (!run.failed()) {
        run.Record(*step, slot->batch);
      }
      run.state(w).times.TakeFrom(slot->state.times);
      free.push_back(std::move(slot));
    }
  }

  Status EndEpoch() override { return heter_.Flush().WithContext("flushing the heter-trainers' dense gradients"); }

 private:
  // First half of a step: the batch's activations, sent to a heter-trainer.
  Status Send(EpochRun& run, uint32_t w, InFlight& f) {
    RETURN_IF_ERROR(run.steps().Prepare(w, f.batch, f.state));
    f.reply =
        heter_.Train(next_batch_id_++, static_cast<uint32_t>(f.batch.size()), f.state.activations, f.batch.labels);
    return Status::OK();
  }

  // Second half: the heter-trainer's answer back-propagated into the embeddings and the
  // sparse gradients pushed.
  StatusOr<StepResult> Receive(EpochRun& run, uint32_t w, InFlight& f) {
    WorkerState& s = f.state;
    const auto t0 = std::chrono::steady_clock::now();
    auto answer = f.reply.get();
    s.times.dense += SecondsSince(t0);
    RETURN_IF_ERROR(answer.status());
    s.predictions.assign(answer->predictions.begin(), answer->predictions.end());
    RETURN_IF_ERROR(run.steps().PushGrads(w, f.batch, s, answer->activation_grads, {}));
    return StepResult{answer->loss, s.predictions};
  }

  HeterClient& heter_;
  const size_t depth_;
  std::atomic<uint64_t> next_batch_id_{0};
};

}  // namespace

std::unique_ptr<StepLoop> MakeHeterLoop(HeterClient& heter, uint32_t inflight) {
  return std::make_unique<HeterLoop>(heter, inflight);
}

}  // namespace fleetps::trainer
