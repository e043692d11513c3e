// The prefetching stepping style (step_loop.h): a helper thread reads step k+1's batch and
// prepares it (de-duplication, pull, pooling) while the worker runs step k, in two slots.
// The pull waits for step k's push when that push updates the rows it reads
// (Prefetching::NextPushUpdatesRows).

#include <algorithm>
#include <array>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "trainer/runtime/epoch_run.h"
#include "trainer/runtime/step_loop.h"

namespace fleetps::trainer {
namespace {

// One step of a worker, prepared by its helper thread.
struct Prefetched {
  data::Batch batch;
  WorkerState state;
  Status status;     // of the read or the preparation
  bool got = false;  // a batch was read
};

class PrefetchLoop : public StepLoop {
 public:
  explicit PrefetchLoop(const Prefetching& prefetching) : prefetching_(prefetching) {}

  void RunWorker(EpochRun& run, uint32_t w) override {
    WorkerState& ws = run.state(w);
    std::array<Prefetched, 2> slots;
    std::mutex m;
    std::condition_variable cv;
    uint64_t prepared = 0;  // steps the helper has prepared
    uint64_t finished = 0;  // steps the worker is done with: their slots are free again
    uint64_t may_pull = 0;  // the last step the helper may pull for
    bool stop = false;
    auto advance = [&](uint64_t& counter, uint64_t to) {
      {
        std::lock_guard<std::mutex> lock(m);
        counter = std::max(counter, to);
      }
      cv.notify_all();
    };
    auto wait_until = [&](auto ready) {  // false once stopped
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return stop || ready(); });
      return !stop;
    };
    std::thread helper([&] {
      for (uint64_t k = 0;; ++k) {
        Prefetched& p = slots[k % 2];
        if (!wait_until([&] { return finished + 1 >= k; })) return;  // step k - 2 freed the slot
        auto got = run.NextBatch(&p.batch, p.state.times);
        p.status = got.status();
        p.got = p.status.ok() && *got;
        if (p.got) {
          if (!wait_until([&] { return may_pull >= k; })) return;
          p.status = run.steps().Prepare(w, p.batch, p.state);
        }
        const bool last = !p.got || !p.status.ok();
        advance(prepared, k + 1);
        if (last) return;
      }
    });
    bool out_of_data = false, done = false;
    for (uint64_t k = 0; !done && !run.failed(); ++k) {
      Status st;
      bool got = false;
      if (run.stop_requested()) out_of_data = true;  // a batch the helper prepared is not trained
      if (!out_of_data) {
        const auto t0 = std::chrono::steady_clock::now();
        wait_until([&] { return prepared > k; });  // only this thread stops the helper
        ws.times.prefetch_wait += SecondsSince(t0);
        Prefetched& p = slots[k % 2];
        st = p.status;
        got = st.ok() && p.got;
        out_of_data = !got;
        if (got) {
          if (!prefetching_.NextPushUpdatesRows(w)) advance(may_pull, k + 1);
          auto step = run.steps().Finish(w, p.batch, p.state);
          advance(may_pull, k + 1);
          st = step.status();
          if (st.ok()) run.Record(*step, p.batch);
        }
        ws.times.TakeFrom(p.state.times);
        advance(finished, k + 1);
      }
      if (st.ok()) {
        auto all_done = run.EndStep(w, !got);
        st = all_done.status();
        done = st.ok() && *all_done;
      }
      if (!st.ok()) run.Fail(st);
    }
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    helper.join();
  }

 private:
  const Prefetching& prefetching_;
};

}  // namespace

std::unique_ptr<StepLoop> MakePrefetchLoop(const Prefetching& prefetching) {
  return std::make_unique<PrefetchLoop>(prefetching);
}

}  // namespace fleetps::trainer
