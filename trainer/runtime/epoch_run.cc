#include "trainer/runtime/epoch_run.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "common/metrics/process_metrics.h"

namespace fleetps::trainer {

using Clock = std::chrono::steady_clock;

namespace {

// ", ctcvr auc 0.81234" for each output after the first (the log lines' auc is the first's).
std::string OtherOutputs(const model::OutputMetrics& m) {
  std::string text;
  for (size_t o = 1; o < m.size(); ++o) text += fmt::format(", {} auc {:.5f}", m.name(o), m.output(o).Auc());
  return text;
}

}  // namespace

EpochRun::EpochRun(EpochContext context, uint32_t epoch, data::Dataset& dataset)
    : context_(std::move(context)),
      epoch_(epoch),
      dataset_(dataset),
      start_(Clock::now()),
      cpu_start_(metrics::ProcessCpuSeconds()),
      states_(context_.options.worker_threads),
      epoch_metrics_(context_.steps.net()),
      interval_metrics_(context_.steps.net()),
      interval_start_(start_) {
  context_.series.epoch.Set(epoch);
  shown_.epoch = epoch;
  shown_.epochs = context_.options.epochs;
  shown_.expected = context_.expected;
}

Status EpochRun::Run(uint32_t passes, const std::function<void(uint32_t pass)>& set_part, PassLifecycle* lifecycle) {
  const auto& o = context_.options;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    std::string where = "trainer " + std::to_string(o.trainer_id) + " epoch " + std::to_string(epoch_);
    if (passes > 1) where += " pass " + std::to_string(pass + 1) + "/" + std::to_string(passes);
    if (set_part) set_part(pass);
    auto pass_start = Clock::now();
    if (lifecycle != nullptr) {
      const Status begun = lifecycle->BeginPass(dataset_, context_.stop);
      pass_sync_seconds_ += SecondsSince(pass_start);
      if (begun.code() == StatusCode::kAborted && stop_requested()) {
        // Nothing of this pass was trained: the epoch ends with its Flush, as a pass cut short.
        spdlog::info("{} begin_pass: {}", where, begun.message());
        break;
      }
      RETURN_IF_ERROR(begun.WithContext(where + " begin_pass"));
    }
    RETURN_IF_ERROR(dataset_.StartPass());
    std::vector<std::thread> workers;
    for (uint32_t w = 0; w < o.worker_threads; ++w) {
      workers.emplace_back([this, w] { context_.loop.RunWorker(*this, w); });
    }
    for (auto& t : workers) t.join();
    context_.progress.Clear();
    dataset_.EndPass();
    RETURN_IF_ERROR(first_error_.WithContext(where));
    // The last pass, and a pass a stop request cut short, end with the epoch's Flush below.
    if (pass + 1 == passes || stop_requested()) break;
    pass_start = Clock::now();
    RETURN_IF_ERROR(context_.sync.Flush().WithContext(where + " end_pass"));
    pass_sync_seconds_ += SecondsSince(pass_start);
  }
  const auto flush_start = Clock::now();
  RETURN_IF_ERROR(context_.sync.Flush());
  pass_sync_seconds_ += SecondsSince(flush_start);
  return context_.loop.EndEpoch();
}

PassReport EpochRun::Report() const {
  PassReport report;
  report.epoch = epoch_;
  report.seconds = SecondsSince(start_);
  report.cpu_seconds = metrics::ProcessCpuSeconds() - cpu_start_;
  report.examples = examples_;
  report.examples_per_sec = report.examples / std::max(report.seconds, 1e-9);
  for (const auto& s : states_) {
    report.dense_compute_sec += s.times.dense;
    report.read_sec += s.times.read;
    report.pull_sec += s.times.pull;
    report.push_sec += s.times.push;
    report.end_step_sec += s.times.end_step;
    report.prefetch_wait_sec += s.times.prefetch_wait;
  }
  report.pass_sync_sec = pass_sync_seconds_;
  report.skipped_lines = dataset_.stats().bad_lines;
  report.curve = curve_;
  return report;
}

StatusOr<bool> EpochRun::NextBatch(data::Batch* batch, StepTimes& times) {
  const auto t0 = Clock::now();
  auto has = dataset_.NextBatch(batch);
  times.read += SecondsSince(t0);
  RETURN_IF_ERROR(has.status());
  return *has && !batch->empty();
}

StatusOr<bool> EpochRun::EndStep(uint32_t worker, bool out_of_data) {
  const auto t0 = Clock::now();
  auto all_done = context_.sync.EndStep(worker, out_of_data);
  states_[worker].times.end_step += SecondsSince(t0);
  return all_done;
}

void EpochRun::Fail(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = st;
    failed_ = true;
  }
  context_.sync.Abort(st);  // the other workers may be waiting for this one's step
}

void EpochRun::Record(const StepResult& step, const data::Batch& batch) {
  const auto& o = context_.options;
  auto& series = context_.series;
  const uint64_t so_far = examples_ += batch.size();
  const uint64_t step_number = ++steps_;
  series.examples.Increment(static_cast<double>(batch.size()));
  series.steps.Increment();
  std::unique_lock<std::mutex> lock(mu_);
  epoch_metrics_.Add(step.predictions, batch.labels);
  interval_metrics_.Add(step.predictions, batch.labels);
  interval_loss_ += step.loss;
  ++interval_batches_;
  interval_examples_ += batch.size();
  if (context_.progress.enabled()) {
    shown_.examples = so_far;
    shown_.seconds = SecondsSince(start_);
    context_.progress.Update(FormatTrainingProgress(shown_));
  }
  if (step_number % o.print_interval != 0) return;
  const double secs = SecondsSince(interval_start_);
  CurvePoint point;
  point.epoch = epoch_;
  point.step = step_number;
  point.examples = context_.examples_before + so_far;
  point.loss = interval_loss_ / interval_batches_;
  point.auc = interval_metrics_.output(0).Auc();
  point.examples_per_sec = interval_examples_ / std::max(secs, 1e-9);
  curve_.push_back(point);
  shown_.loss = point.loss;
  shown_.auc = point.auc;
  series.loss.Set(point.loss);
  series.auc.Set(point.auc);
  for (size_t i = 0; i < series.output_auc.size(); ++i) series.output_auc[i].Set(interval_metrics_.output(i).Auc());
  series.rate.Set(point.examples_per_sec);
  const std::string line = fmt::format(
      "trainer {} epoch {} step {}: loss {:.5f} auc {:.5f}{} ({} examples, {:.0f} examples/s)", o.trainer_id, epoch_,
      step_number, point.loss, point.auc, OtherOutputs(interval_metrics_), interval_examples_, point.examples_per_sec);
  const std::vector<double> cumulative = epoch_metrics_.State();
  interval_metrics_.Reset();
  interval_loss_ = 0;
  interval_batches_ = 0;
  interval_examples_ = 0;
  interval_start_ = Clock::now();
  lock.unlock();
  if (context_.progress.enabled()) return;  // the status line shows it
  if (!context_.cluster_metric) {
    spdlog::info("{}", line);
    return;
  }
  // The epoch so far on every trainer: each reports its cumulative buckets to server 0
  // and gets back the sum of everyone's latest report (no waiting).
  auto global = context_.client.ReportMetric("auc-epoch-" + std::to_string(epoch_), o.trainer_id, cumulative);
  if (global.ok()) {
    model::OutputMetrics merged(context_.steps.net());
    merged.MergeState(global->sum);
    spdlog::info("{}; epoch so far, {}/{} trainers: auc {:.5f} loss {:.5f}{}", line, global->reporters, o.trainers_num,
                 merged.output(0).Auc(), merged.output(0).MeanLoss(), OtherOutputs(merged));
  } else {
    spdlog::info("{} (cluster metric unavailable: {})", line, global.status().ToString());
  }
}

}  // namespace fleetps::trainer
