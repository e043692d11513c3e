#include "trainer/runtime/job.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/ip/address.hpp>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/config/graph_models.h"
#include "common/config/server_config.h"
#include "common/metrics/registry.h"
#include "common/progress.h"
#include "trainer/runtime/trainer.h"

namespace fleetps::trainer {
namespace {

// "local", "async", ..., "collective", or "hybrid" (collective with pservers).
std::string ModeName(const config::TrainerOptions& o) {
  if (o.collective_mode()) return o.local() ? "collective" : "hybrid";
  if (o.gpubox_mode()) return "gpubox";
  return o.local() ? "local" : std::string(config::SyncModeName(o.sync_mode));
}

// ", \"curve\": [...]": every print_interval steps (none: empty).
std::string CurveJson(const std::vector<CurvePoint>& curve) {
  if (curve.empty()) return "";
  std::string out = ", \"curve\": [";
  for (size_t i = 0; i < curve.size(); ++i) {
    const CurvePoint& p = curve[i];
    out += fmt::format(
        "{}{{\"epoch\": {}, \"step\": {}, \"examples\": {}, \"loss\": {:.6f}, \"auc\": {:.6f}, "
        "\"examples_per_sec\": {:.1f}}}",
        i ? ", " : "", p.epoch, p.step, p.examples, p.loss, p.auc, p.examples_per_sec);
  }
  return out + "]";
}

// ", \"outputs\": [...]": every output of the model (a single-output model: its one).
std::string OutputsJson(const std::vector<OutputReport>& outputs) {
  std::string out = ", \"outputs\": [";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputReport& m = outputs[i];
    out += fmt::format(
        "{}{{\"name\": \"{}\", \"label\": \"{}\", \"auc\": {:.6f}, \"loss\": {:.6f}, \"actual_ctr\": {:.6f}, "
        "\"predicted_ctr\": {:.6f}, \"copc\": {:.6f}}}",
        i ? ", " : "", m.name, m.label, m.auc, m.loss, m.actual_ctr, m.predicted_ctr, m.copc);
  }
  return out + "]";
}

std::string PassJson(const PassReport& r) {
  return fmt::format(
      "{{\"epoch\": {}, \"examples\": {}, \"loss\": {:.6f}, \"auc\": {:.6f}, \"actual_ctr\": {:.6f}, "
      "\"predicted_ctr\": {:.6f}, \"copc\": {:.6f}, \"mae\": {:.6f}, \"rmse\": {:.6f}, \"bucket_error\": {:.6f}, "
      "\"seconds\": {:.3f}, \"examples_per_sec\": {:.1f}, "
      "\"dense_compute_sec\": {:.3f}, \"read_sec\": {:.3f}, \"pull_sec\": {:.3f}, \"push_sec\": {:.3f}, "
      "\"end_step_sec\": {:.3f}, \"pass_sync_sec\": {:.3f}, \"prefetch_wait_sec\": {:.3f}, \"cpu_seconds\": {:.3f}, "
      "\"skipped_lines\": {}{}{}{}}}",
      r.epoch, r.examples, r.loss, r.auc, r.actual_ctr, r.predicted_ctr, r.copc, r.mae, r.rmse, r.bucket_error,
      r.seconds, r.examples_per_sec, r.dense_compute_sec, r.read_sec, r.pull_sec, r.push_sec, r.end_step_sec,
      r.pass_sync_sec, r.prefetch_wait_sec, r.cpu_seconds, r.skipped_lines,
      r.day.empty() ? "" : fmt::format(", \"day\": \"{}\", \"pass\": {}", r.day, r.pass), OutputsJson(r.outputs),
      CurveJson(r.curve));
}

// `text` as a JSON string literal.
std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// `stopped`: why a stop request ended the job early (its last epoch may be cut short).
Status WriteReport(const std::string& path, const config::TrainerOptions& o, const std::vector<PassReport>& epochs,
                   const PassReport* test, std::string_view stopped = {}) {
  if (path.empty()) return Status::OK();
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::IOError("cannot write report " + path);
  out << "{\"mode\": \"" << ModeName(o) << "\", \"trainer_id\": " << o.trainer_id
      << ", \"trainers\": " << o.trainers_num << ", \"threads\": " << o.worker_threads << ", \"epochs\": [";
  for (size_t i = 0; i < epochs.size(); ++i) out << (i ? ", " : "") << PassJson(epochs[i]);
  out << "], \"test\": " << (test ? PassJson(*test) : "null");
  if (!stopped.empty()) out << ", \"stopped\": " << JsonString(stopped);
  out << "}\n";
  return out.good() ? Status::OK() : Status::IOError("cannot write report " + path);
}

// "; per output: ctr (click) auc 0.71234 loss 0.51234, ctcvr (conversion) auc ..." for a
// model with several outputs; "" for one.
std::string OutputsLine(const std::vector<OutputReport>& outputs) {
  if (outputs.size() < 2) return "";
  std::string text = "; per output:";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputReport& m = outputs[i];
    text += fmt::format("{} {} ({}) auc {:.5f} loss {:.5f} copc {:.4f}", i ? "," : "", m.name, m.label, m.auc, m.loss,
                        m.copc);
  }
  return text;
}

void LogPass(const char* what, const config::TrainerOptions& o, const PassReport& r) {
  spdlog::info(
      "trainer {} {}: auc {:.5f} loss {:.5f} (all trainers; actual ctr {:.4f}, predicted {:.4f}, copc {:.4f}, mae "
      "{:.4f}, rmse {:.4f}, bucket error {:.4f}); this trainer: {} examples in {:.2f} s = {:.0f} examples/s, dense "
      "compute {:.2f} thread-s{}{}{}",
      o.trainer_id, what, r.auc, r.loss, r.actual_ctr, r.predicted_ctr, r.copc, r.mae, r.rmse, r.bucket_error,
      r.examples, r.seconds, r.examples_per_sec, r.dense_compute_sec,
      r.epoch == 0
          ? ""
          : fmt::format(
                " (read {:.2f}, pull {:.2f}, push {:.2f}, end of step {:.2f}{}; begin/end of pass "
                "{:.2f} s)",
                r.read_sec, r.pull_sec, r.push_sec, r.end_step_sec,
                r.prefetch_wait_sec > 0 ? fmt::format(", waiting for the prefetch {:.2f}", r.prefetch_wait_sec) : "",
                r.pass_sync_sec),
      r.skipped_lines ? fmt::format(", {} bad lines skipped", r.skipped_lines) : "", OutputsLine(r.outputs));
}

// Trainer 0 saves every table (sparse rows on the servers plus the dense parameters) in
// `mode` into `dir` (what: "the model", "day D's delta", ...); the others wait for it at
// barrier `barrier`.
Status SaveModelTo(const config::TrainerOptions& o, PsClient& client, Trainer& trainer, const std::string& dir,
                   uint32_t mode, const std::string& what, const std::string& barrier) {
  if (o.trainer_id == 0) {
    // The pservers write their parts; until they answer, the time spent (a terminal line, or a
    // log line every 10 s).
    StatusOr<SaveResult> result = [&] {
      ProgressReporter progress;
      ProgressTicker ticker(progress, "trainer 0: saving " + what + " to " + dir);
      return client.Save(dir, mode);
    }();
    ASSIGN_OR_RETURN(SaveResult saved, std::move(result));
    spdlog::info("trainer 0: saved {} to {} (version {}, {} sparse rows, {:.1f} MB)", what, dir, saved.version,
                 saved.rows, saved.bytes / 1e6);
  }
  return trainer.Barrier(barrier);
}

// The checkpoint of every table in model_save_path.
Status SaveModel(const config::TrainerOptions& o, PsClient& client, Trainer& trainer) {
  return SaveModelTo(o, client, trainer, o.model_save_path, kSaveCheckpoint, "the model", "model-saved");
}

}  // namespace

PsClientOptions JobClientOptions(const config::TrainerOptions& o, const TrainerRpcOptions& rpc) {
  PsClientOptions client;
  client.servers = o.pservers;
  client.rpc.request_timeout = rpc.request_timeout;
  client.rpc.connect_timeout = rpc.connect_timeout;
  client.rpc.admin_timeout = rpc.admin_timeout;
  client.rpc.keepalive_interval = rpc.keepalive_interval;
  client.barrier_margin = rpc.barrier_margin;
  return client;
}

HeterClientOptions JobHeterClientOptions(const config::TrainerOptions& o, const TrainerRpcOptions& rpc) {
  HeterClientOptions h;
  h.heter_trainers = o.heter_trainers;
  h.route_by_trainer_id = o.heter.route == config::HeterRoute::kTrainerId;
  h.failover = o.heter.failover;
  h.failover_probe_interval = std::chrono::milliseconds(o.heter.failover_probe_ms);
  h.trainer_id = o.trainer_id;
  h.trainers = o.trainers_num;
  h.input_width = static_cast<uint32_t>(DenseInputDim(o.model));
  h.dense_params = o.dense_table.dim;
  h.labels = static_cast<uint32_t>(o.model.labels.size());
  h.outputs = static_cast<uint32_t>(fleetps::graph::ModelGraph(o.model)->num_outputs());
  h.rpc.connect_timeout = rpc.connect_timeout;
  h.rpc.request_timeout = std::chrono::milliseconds(o.heter.timeout_ms);
  // A frozen heter-trainer is noticed within the micro-batch deadline.
  h.rpc.keepalive_interval = std::chrono::milliseconds(std::max<uint32_t>(o.heter.timeout_ms / 4, 50));
  return h;
}

namespace {

Status RunTrainer(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags, Trainer& trainer);

}  // namespace

Status RunTrainJob(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags, HeterClient* heter,
                   collective::Communicator* comm) {
  Trainer trainer(o, client, heter, comm, nullptr, flags.dense);
  return RunTrainer(o, client, flags, trainer);
}

Status RunTrainJob(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags,
                   std::unique_ptr<ParamSync> sync) {
  Trainer trainer(o, client, nullptr, nullptr, std::move(sync), flags.dense);
  return RunTrainer(o, client, flags, trainer);
}

namespace {

// The end of a job that a stop request cut short in `epoch`, after `examples` of it.
Status Stopped(const JobFlags& flags, uint32_t epoch, uint64_t examples) {
  return Status::Aborted(
      fmt::format("{} in epoch {}, after {} of its examples; the updates of every step trained "
                  "were written to the pservers",
                  flags.stop->reason(), epoch, examples));
}

// An online pass's data paths (the training paths with {day} and {pass} replaced), once
// each of them has the data_donefile when one is configured: in the directory a path names,
// or beside the file it names (polled every data_sleep_second; a stop request ends the
// wait, Aborted).
StatusOr<std::vector<std::string>> OnlinePassData(const config::TrainerOptions& o, const JobFlags& flags,
                                                  const std::string& day, uint32_t pass) {
  std::vector<std::string> paths;
  for (const auto& p : o.data.train_paths) paths.push_back(config::OnlinePassPath(p, day, pass));
  if (o.online.data_donefile.empty()) return paths;
  for (const auto& path : paths) {
    const auto donefile = [&] {  // looked for anew each time: a file may appear before its donefile
      std::error_code ec;
      const std::filesystem::path p(path);
      return (std::filesystem::is_regular_file(p, ec) ? p.parent_path() : p) / o.online.data_donefile;
    };
    std::filesystem::path done = donefile();
    const auto start = std::chrono::steady_clock::now();
    bool said = false;
    std::error_code ec;
    while (!std::filesystem::exists(done = donefile(), ec)) {
      if (!said) {
        spdlog::info(
            "trainer {} day {} pass {}: waiting for {} (the pass's data is complete once it is there; "
            "looking every {} s)",
            o.trainer_id, day, pass, done.string(), o.online.data_sleep_second);
        said = true;
      }
      const auto next = std::chrono::steady_clock::now() + std::chrono::seconds(o.online.data_sleep_second);
      while (std::chrono::steady_clock::now() < next) {
        if (StopRequest::Requested(flags.stop)) {
          return Status::Aborted(
              fmt::format("{} while waiting for {} (day {} pass {})", flags.stop->reason(), done.string(), day, pass));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (said) {
      spdlog::info("trainer {} day {} pass {}: {} is there after {:.0f} s", o.trainer_id, day, pass, done.string(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return paths;
}

// Online training (runner.days): each day's passes, each over its own data and followed by
// a delta save into model_save_path/DAY/delta-PASS; each day ends with a shrink and two
// saves, DAY/checkpoint (every row's full state; the day counts for unseen_days) and DAY/base
// (every row's weights; the next deltas are relative to it). `passes` gets each pass
// trained, one cut short by a stop request included.
// Long: the days and passes of an online job, each step the continuation of the one before.
Status TrainOnline(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags, Trainer& trainer,
                   std::vector<PassReport>& passes) {
  const bool saving = !o.model_save_path.empty();
  const bool templated = std::any_of(o.data.train_paths.begin(), o.data.train_paths.end(), [](const auto& p) {
    return p.find("{day}") != std::string::npos || p.find("{pass}") != std::string::npos;
  });
  if (!templated) {
    spdlog::warn(
        "trainer {}: online job without {{day}} or {{pass}} in its training paths: every pass reads the "
        "same data ({})",
        o.trainer_id, fmt::join(o.data.train_paths, ", "));
  }
  const OnlinePosition start = flags.online_start.value_or(OnlinePosition{0, o.online.start_pass});
  if (start.day_index >= o.online.days.size()) {
    spdlog::info("trainer {}: every pass of days {} is trained already ({}/{}): nothing to train", o.trainer_id,
                 fmt::join(o.online.days, " "), o.model_save_path, kOnlineDonefile);
  }
  // Trainer 0 records each committed checkpoint for a later run to resume from.
  const auto record = [&](const std::string& day, int64_t pass, const std::string& dir) -> Status {
    if (o.trainer_id != 0) return Status::OK();
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    return RecordOnlineSave(o.model_save_path, {day, pass, dir}, now.count())
        .WithContext("recording the checkpoint for a restart");
  };
  uint32_t index = 0;
  for (size_t d = start.day_index; d < o.online.days.size(); ++d) {
    const std::string& day = o.online.days[d];
    const uint32_t first = d == start.day_index ? start.pass : 1;
    for (uint32_t pass = first; pass <= o.online.pass_per_day; ++pass) {
      ++index;
      const std::string where = fmt::format("day {} pass {}", day, pass);
      if (trainer.stop_requested()) {
        return Status::Aborted(
            fmt::format("{} before {}; the updates of every pass trained were written to the "
                        "pservers",
                        flags.stop->reason(), where));
      }
      ASSIGN_OR_RETURN(auto paths, OnlinePassData(o, flags, day, pass));
      trainer.SetTrainPaths(std::move(paths));
      ASSIGN_OR_RETURN(PassReport r, trainer.TrainEpoch(index));
      r.day = day;
      r.pass = pass;
      passes.push_back(r);
      if (trainer.stop_requested()) {
        LogPass((where + " stopped").c_str(), o, r);
        return Status::Aborted(
            fmt::format("{} in {}, after {} of its examples; the updates of every step trained "
                        "were written to the pservers",
                        flags.stop->reason(), where, r.examples));
      }
      LogPass((where + " done").c_str(), o, r);
      if (saving) {
        RETURN_IF_ERROR(trainer.Barrier(fmt::format("day-{}-pass-{}-trained", day, pass)));  // every push is in
        RETURN_IF_ERROR(SaveModelTo(o, client, trainer, fmt::format("{}/{}/delta-{}", o.model_save_path, day, pass),
                                    kSaveDelta, where + "'s delta", fmt::format("day-{}-pass-{}-saved", day, pass)));
        const uint32_t every = o.online.checkpoint_per_pass;
        if (every > 0 && pass % every == 0 && pass < o.online.pass_per_day) {  // the day's end makes its own
          const std::string dir = fmt::format("{}/{}/checkpoint-{}", o.model_save_path, day, pass);
          RETURN_IF_ERROR(SaveModelTo(o, client, trainer, dir, kSaveCheckpoint, where + "'s checkpoint",
                                      fmt::format("day-{}-pass-{}-checkpoint-saved", day, pass)));
          RETURN_IF_ERROR(record(day, pass, dir));
        }
      }
    }
    if (!saving) continue;
    RETURN_IF_ERROR(trainer.Barrier(fmt::format("day-{}-trained", day)));
    if (o.trainer_id == 0) {
      ASSIGN_OR_RETURN(ShrinkResult shrunk, client.Shrink());
      spdlog::info("trainer 0: day {}: shrink deleted {} sparse rows ({} left)", day, shrunk.deleted, shrunk.rows);
    }
    const std::string dir = o.model_save_path + "/" + day;
    RETURN_IF_ERROR(SaveModelTo(o, client, trainer, dir + "/checkpoint", kSaveBatch, "day " + day + "'s checkpoint",
                                "day-" + day + "-checkpoint-saved"));
    RETURN_IF_ERROR(SaveModelTo(o, client, trainer, dir + "/base", kSaveBase, "day " + day + "'s base",
                                "day-" + day + "-base-saved"));
    // The day is complete once its base is there too.
    RETURN_IF_ERROR(record(day, -1, dir + "/checkpoint"));
  }
  return Status::OK();
}

}  // namespace

StatusOr<OnlinePosition> ResumeOnline(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags) {
  const OnlinePosition configured{0, o.online.start_pass};
  if (!o.online.enabled() || o.model_save_path.empty()) return configured;
  std::optional<OnlineSave> last;
  std::vector<double> choice(2, 0.0);
  if (o.trainer_id == 0) {
    ASSIGN_OR_RETURN(last, ReadLastOnlineSave(o.model_save_path));
    const OnlinePosition start = OnlineStartAfter(o.online, last);
    choice = {static_cast<double>(start.day_index), static_cast<double>(start.pass)};
  }
  // Every trainer of the job is starting. A trainer 0 restarted alone, beside trainers still
  // training, waits here and fails at the barrier's deadline without touching the pservers.
  if (o.trainers_num > 1) {
    ASSIGN_OR_RETURN(auto agreed,
                     client.Barrier("online-resume", o.trainer_id, o.trainers_num,
                                    std::chrono::milliseconds(o.barrier_timeout_ms), choice, false, flags.stop));
    choice = agreed.sum;  // trainer 0's: the others added zeros
  }
  const OnlinePosition start{static_cast<size_t>(choice[0]), static_cast<uint32_t>(choice[1])};
  // The others read the pservers only after the barrier 'start', which trainer 0 reaches
  // once the load is done.
  if (last) {
    const std::string what =
        fmt::format("{}/{}: day {} {}", o.model_save_path, kOnlineDonefile, last->day,
                    last->pass < 0 ? std::string("(complete)") : fmt::format("pass {}", last->pass));
    StatusOr<LoadResult> loaded = [&] {
      ProgressReporter progress;
      ProgressTicker ticker(progress, "trainer 0: resuming the online job from " + last->path);
      return client.Load(last->path);
    }();
    if (!loaded.ok()) {
      return loaded.status().WithContext("resuming the online job from " + what + " (" + last->path +
                                         "; remove the donefile to train from the first day)");
    }
    spdlog::info(
        "trainer 0: resumed the online job from its last checkpoint, {} ({}: {} sparse rows); training "
        "from {}",
        what, last->path, loaded->rows,
        start.day_index < o.online.days.size()
            ? fmt::format("day {} pass {}", o.online.days[start.day_index], start.pass)
            : std::string("nowhere: every configured pass is trained"));
  }
  return start;
}

namespace {

// The job's training and test passes; `epochs` gets each epoch trained, one cut short by a
// stop request included.
Status TrainAndTest(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags, Trainer& trainer,
                    std::vector<PassReport>& epochs) {
  trainer.SetMetrics(flags.metrics);
  trainer.SetStopRequest(flags.stop);
  RETURN_IF_ERROR(trainer.Start());
  if (flags.on_started) flags.on_started();
  spdlog::info("trainer {}/{}: {} training, {} worker threads, {}, model {} ({} dense parameters){}", o.trainer_id,
               o.trainers_num, ModeName(o), o.worker_threads,
               o.online.enabled() ? fmt::format("online: {} day(s) x {} pass(es), days {}", o.online.days.size(),
                                                o.online.pass_per_day, fmt::join(o.online.days, " "))
                                  : fmt::format("{} epochs", o.epochs),
               ModelTypeName(o.model.type), o.dense_table.dim,
               o.heter_mode()
                   ? fmt::format(", dense part on {} heter-trainer(s), {} micro-batches in flight per thread",
                                 o.heter_trainers.size(), o.heter.inflight)
               : o.sync_mode == config::SyncMode::kAsync && !o.local()
                   ? fmt::format(", prefetch helpers {} (fleetps.prefetch: {})", AsyncPrefetchOn(o) ? "on" : "off",
                                 o.prefetch ? (*o.prefetch ? "true" : "false") : "auto")
                   : "");
  if (o.online.enabled()) RETURN_IF_ERROR(TrainOnline(o, client, flags, trainer, epochs));
  for (uint32_t e = 1; e <= o.epochs && !o.online.enabled(); ++e) {
    if (trainer.stop_requested()) return Stopped(flags, e, 0);
    ASSIGN_OR_RETURN(PassReport r, trainer.TrainEpoch(e));
    if (trainer.stop_requested()) {
      LogPass(fmt::format("epoch {} stopped", e).c_str(), o, r);
      epochs.push_back(r);
      return Stopped(flags, e, r.examples);
    }
    LogPass(fmt::format("epoch {} done", e).c_str(), o, r);
    if (r.examples == 0) {
      spdlog::warn(
          "trainer {} epoch {}: trained no examples: its share of the training data ({}) holds no "
          "records (empty files, or fewer files than trainers with runner.split_file_list)",
          o.trainer_id, e, fmt::join(o.data.train_paths, ", "));
    }
    epochs.push_back(r);
    if (o.save_every_epoch && e < o.epochs && !o.model_save_path.empty()) {
      RETURN_IF_ERROR(trainer.Barrier(fmt::format("epoch-{}-saved", e)));  // every push is in
      RETURN_IF_ERROR(SaveModel(o, client, trainer));
    }
  }
  std::optional<PassReport> test;
  if (!o.data.test_paths.empty()) {
    RETURN_IF_ERROR(trainer.Barrier("trained"));  // every trainer's pushes are in
    ASSIGN_OR_RETURN(test, trainer.Evaluate(o.data.test_paths, flags.predictions_path));
    LogPass("test", o, *test);
  }
  RETURN_IF_ERROR(WriteReport(flags.report_path, o, epochs, test ? &*test : nullptr));
  RETURN_IF_ERROR(trainer.Barrier("finished"));
  // An online job's model is its last day's checkpoint and base.
  if (!o.model_save_path.empty() && !o.online.enabled()) RETURN_IF_ERROR(SaveModel(o, client, trainer));
  return Status::OK();
}

Status RunTrainer(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags, Trainer& trainer) {
  std::vector<PassReport> epochs;
  const Status st = TrainAndTest(o, client, flags, trainer, epochs);
  if (!st.ok() && trainer.stop_requested()) {  // what was trained stays on record
    if (const Status written = WriteReport(flags.report_path, o, epochs, nullptr, st.message()); !written.ok()) {
      spdlog::warn("trainer {}: {}", o.trainer_id, written.ToString());
    }
  }
  return st;
}

}  // namespace

std::string PerTrainerPath(std::string path, uint32_t trainer_id) {
  static const std::string kField = "{trainer_id}";
  for (size_t at = path.find(kField); at != std::string::npos; at = path.find(kField, at)) {
    path.replace(at, kField.size(), std::to_string(trainer_id));
  }
  return path;
}

StatusOr<std::optional<uint16_t>> TrainerMetricsPort(std::optional<uint16_t> flag, const config::EnvLookup& env) {
  if (flag) return flag;
  const std::optional<std::string> value = env("FLEETPS_TRAINER_METRICS_PORT");
  if (!value || value->empty()) return std::optional<uint16_t>();
  char* end = nullptr;
  const unsigned long port = std::strtoul(value->c_str(), &end, 10);
  if (!std::isdigit(static_cast<unsigned char>((*value)[0])) || *end != '\0' || port > 65535) {
    return Status::InvalidArgument("FLEETPS_TRAINER_METRICS_PORT='" + *value + "' is not a port number (0-65535)");
  }
  return std::optional<uint16_t>(static_cast<uint16_t>(port));
}

StatusOr<std::string> TrainerMetricsBind(const std::optional<std::string>& flag, const config::EnvLookup& env,
                                         const config::TrainerOptions& options) {
  std::string host, source;
  if (flag) {
    host = *flag;
    source = "--metrics-bind";
  } else if (auto v = env("FLEETPS_TRAINER_METRICS_BIND"); v && !v->empty()) {
    host = *v;
    source = "FLEETPS_TRAINER_METRICS_BIND";
  } else {
    config::ServerOptions self;  // the trainer's own address, as config::BindHost derives a pserver's
    if (options.trainer_id < options.trainer_endpoints.size()) {
      self.endpoints = {options.trainer_endpoints[options.trainer_id]};
    } else if (auto pod_ip = env("POD_IP"); pod_ip && !pod_ip->empty()) {
      self.endpoints = {{*pod_ip, 0}};
    } else {
      return std::string("127.0.0.1");
    }
    return config::BindHost(self);
  }
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (ec) {
    return Status::InvalidArgument(source + "='" + host + "' is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::)");
  }
  return host;
}

StatusOr<std::unique_ptr<net::HttpEndpoint>> ServeTrainerMetrics(metrics::Registry& registry, const std::string& host,
                                                                 uint16_t port, const std::string& what) {
  net::HttpEndpointOptions http;
  http.host = host;
  http.port = port;
  http.what = what;
  http.blocking_paths = {"/metrics"};  // the registry's lock: never make the probes wait for it
  auto endpoint = std::make_unique<net::HttpEndpoint>(std::move(http), [&registry](const std::string& path) {
    if (path == "/metrics") return net::HttpResponse{200, metrics::kTextFormatContentType, registry.Serialize()};
    if (path == "/healthz" || path == "/readyz") return net::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
    return net::HttpResponse{404, "text/plain; charset=utf-8",
                             "not found: " + path + " (try /metrics, /healthz, /readyz)\n"};
  });
  RETURN_IF_ERROR(endpoint->Start());
  spdlog::info("trainer metrics on http://{}:{}/metrics", host, endpoint->port());
  return endpoint;
}

// A pserver that is up answers Stop at once; one that has gone (it exits by itself once
// every trainer has ended) must not hold the end of the job for a whole request timeout.
constexpr std::chrono::milliseconds kStopAtEndTimeout{10000};

Status StopServersAtEnd(const config::TrainerOptions& o, PsClient& client) {
  if (o.trainer_id != 0 || o.local() || !o.stop_servers_at_end) return Status::OK();
  spdlog::info("trainer 0: all trainers finished; stopping the pservers");
  return client.StopServers("training finished", {.timeout = kStopAtEndTimeout, .gone_is_stopped = true});
}

Status RunInferJob(const config::TrainerOptions& o, PsClient& client, const JobFlags& flags) {
  if (o.data.test_paths.empty()) {
    return Status::InvalidArgument("infer needs test data: set runner.test_data_dir or pass --test-data");
  }
  if (o.infer_load_path.empty()) {
    return Status::InvalidArgument("infer needs a saved model: set runner.infer_load_path or pass --model");
  }
  StatusOr<LoadResult> result = [&] {
    ProgressReporter progress;
    ProgressTicker ticker(progress,
                          "trainer " + std::to_string(o.trainer_id) + ": loading the model " + o.infer_load_path);
    return client.Load(o.infer_load_path);
  }();
  ASSIGN_OR_RETURN(LoadResult loaded, std::move(result));
  spdlog::info("loaded model {} (version {}, {} sparse rows)", o.infer_load_path, loaded.version, loaded.rows);
  Trainer trainer(o, client, nullptr, nullptr, nullptr, flags.dense);
  ASSIGN_OR_RETURN(PassReport r, trainer.Evaluate(o.data.test_paths, flags.predictions_path));
  LogPass("infer", o, r);
  return WriteReport(flags.report_path, o, {}, &r);
}

}  // namespace fleetps::trainer
