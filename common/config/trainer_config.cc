#include "common/config/trainer_config.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/config/heter_config.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {

std::string_view SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kAsync: return "async";
    case SyncMode::kSync: return "sync";
    case SyncMode::kGeo: return "geo";
    case SyncMode::kHeter: return "heter";
    case SyncMode::kCollective: return "collective";
    case SyncMode::kGpuBox: return "gpubox";
  }
  return "?";
}

bool SyncModeFromName(std::string_view name, SyncMode* mode) {
  for (SyncMode m : {SyncMode::kAsync, SyncMode::kSync, SyncMode::kGeo, SyncMode::kHeter, SyncMode::kCollective,
                     SyncMode::kGpuBox}) {
    if (name == SyncModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

std::string_view CollectiveBackendName(CollectiveBackend backend) {
  switch (backend) {
    case CollectiveBackend::kAuto: return "auto";
    case CollectiveBackend::kGloo: return "gloo";
    case CollectiveBackend::kNccl: return "nccl";
  }
  return "?";
}

float DataParallelLearningRate(const DataParallelOptions& c, const OptimizerOptions& dense, uint64_t step,
                               uint32_t world) {
  LrScaling scaling = c.lr_scaling;
  if (scaling == LrScaling::kAuto) scaling = dense.kind == OptimizerKind::kSgd ? LrScaling::kLinear : LrScaling::kSqrt;
  float lr = dense.learning_rate;
  if (scaling == LrScaling::kLinear) lr *= static_cast<float>(world);
  if (scaling == LrScaling::kSqrt) lr *= std::sqrt(static_cast<float>(world));
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    lr *= static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  }
  return lr;
}

bool ParseCollectiveBackend(std::string_view name, CollectiveBackend* backend) {
  for (CollectiveBackend b : {CollectiveBackend::kAuto, CollectiveBackend::kGloo, CollectiveBackend::kNccl}) {
    if (name == CollectiveBackendName(b)) {
      *backend = b;
      return true;
    }
  }
  return false;
}

namespace {

// Floats of an MLP in -> widths[0] -> ... -> widths.back() (weights and biases).
uint64_t MlpParamCount(uint64_t in, const std::vector<uint32_t>& widths) {
  uint64_t total = 0;
  for (uint32_t out : widths) {
    total += in * out + out;
    in = out;
  }
  return total;
}

}  // namespace

// Must agree with model::DenseNet::FromOptions(model).num_params() (model_registry_test
// checks every model type).
uint64_t DenseParamCount(const ModelOptions& model) {
  const uint64_t in = DenseInputDim(model);
  const uint64_t logits = model.output == OutputKind::kSoftmax2 ? 2 : 1;
  std::vector<uint32_t> with_output = model.fc_sizes;
  with_output.push_back(static_cast<uint32_t>(logits));
  const uint64_t mlp = MlpParamCount(in, with_output);
  const uint64_t dense = model.dense_input_dim;
  switch (model.type) {
    case ModelType::kMlp:
    case ModelType::kCtrDnn:
      return mlp;
    case ModelType::kWideDeep:  // + the wide weights of the dense features
      return mlp + dense;
    case ModelType::kDeepFm:  // + first-order weights and FM embeddings of the dense features
      return mlp + dense + dense * model.sparse_feature_dim;
    case ModelType::kDcn: {
      const uint64_t cross = model.cross_type == CrossType::kV1 ? 2 * in : in * in + in;
      const uint64_t deep = MlpParamCount(in, model.fc_sizes);
      const uint64_t joined = in + (model.fc_sizes.empty() ? 0 : model.fc_sizes.back());
      return model.cross_num * cross + deep + joined * logits + logits;
    }
    case ModelType::kDlrm: {
      const uint64_t bottom = MlpParamCount(dense, model.bot_layer_sizes);
      const uint64_t vectors = uint64_t{model.num_sparse_slots} + 1;
      const uint64_t top_in = model.sparse_feature_dim + vectors * (vectors - 1) / 2;
      return bottom + MlpParamCount(top_in, model.top_layer_sizes);
    }
  }
  return mlp;
}

std::vector<TableOptions> JobTables(const TrainerOptions& o) {
  std::vector<TableOptions> tables;
  if (HasSparseSlots(o.model)) tables.push_back(o.sparse_table);
  tables.push_back(o.dense_table);
  return tables;
}

bool IsJobYaml(const std::string& text) {
  auto root = LoadYamlString(text);
  return root.ok() && root->IsMap() && (*root)["hyper_parameters"];
}

namespace {

// Keys of PaddleRec's `runner:` map that fleetps accepts and ignores, so PaddleRec configs
// load as they are. Each configures PaddleRec machinery fleetps does not have or replaces;
// a key with a fleetps meaning is not listed here (it is read, or it is an error).
std::vector<std::string> PaddleRecIgnoredRunnerKeys() {
  return {
      // Python readers and model files: fleetps parses runner.data_format natively and
      // builds hyper_parameters.model_type.
      "train_reader_path", "infer_reader_path", "pipe_command", "model_path",
      // Device and metric switches: cpu-trainer runs on the CPU and always reports AUC.
      "use_gpu", "use_auc",
      // Paddle DataLoader and dataset debugging knobs: fleetps's readers use thread_num.
      "num_workers", "dataset_debug", "infer_reader_type",
      // PaddleRec's infer loops over the models saved per epoch; fleetps scores the one
      // model at infer_load_path.
      "infer_start_epoch", "infer_end_epoch",
      // Paddle inference-model export (feed/fetch variable names); fleetps saves checkpoints.
      "use_inference", "save_inference_feed_varnames", "save_inference_fetch_varnames",
      // Dygraph-to-static conversion's starting weights (config_to_static.yaml); a fleetps
      // job starts from a checkpoint with `pserver --load` (server.load_dir).
      "model_init_path",
  };
}

// Keys of PaddleRec's `hyper_parameters:` map that fleetps accepts and ignores.
std::vector<std::string> PaddleRecIgnoredHyperParameterKeys() {
  return {
      // The vocabulary of Paddle's fixed-size embedding (dict_dim in slot_dnn); fleetps's
      // sparse tables are hash tables that take any uint64 key.
      "sparse_feature_number", "dict_dim",
      // Paddle: 1 puts the embedding on the pservers; fleetps's always lives there.
      "distributed_embedding",
      // PaddleRec rank/dcn's regularization and Paddle-graph switches, which fleetps's dcn
      // does not have: the L2 penalty of the cross weights, batch norm in the MLP (off in
      // PaddleRec's configs), gradient clipping by norm, and Paddle's sparse-gradient flag.
      "l2_reg_cross", "dnn_use_bn", "clip_by_norm", "is_sparse",
  };
}

// Every `runner:` key fleetps reads: the trainer's own and the data reader's.
std::vector<std::string> RunnerKeys() {
  std::vector<std::string> keys = {"sync_mode",       "geo_step",        "epochs",        "print_interval",
                                   "thread_num",      "model_save_path", "infer_load_path", "days",
                                   "pass_per_day",    "data_donefile",   "data_sleep_second", "train_thread_num",
                                   "start_day",       "end_day",         "checkpoint_per_pass", "start_pass"};
  for (auto& k : DataOptionKeys()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  return keys;
}

constexpr size_t kMaxDays = 100000;  // ExpandDays' bound, so no text can expand without end

// The expansions of one word of a days text (ExpandDays), appended to `out` (at most
// kMaxDays in all). `depth`: the brace groups expanded around this word (at most 32).
Status ExpandWord(const std::string& word, const std::string& text, std::vector<std::string>* out, int depth = 0) {
  auto error = [&](const std::string& why) {
    return Status::InvalidArgument("days '" + text.substr(0, 200) + (text.size() > 200 ? "...'" : "'") + ": " + why);
  };
  if (depth > 32) return error("more than 32 brace groups in one word");
  const size_t open = word.find('{');
  if (open == std::string::npos) {
    if (word.find('}') != std::string::npos) return error("a '}' without its '{'");
    if (out->size() >= kMaxDays) return error("more than " + std::to_string(kMaxDays) + " days");
    out->push_back(word);
    return Status::OK();
  }
  size_t close = open, level = 0;
  std::vector<size_t> commas;  // the group's own, outside nested groups
  for (; close < word.size(); ++close) {
    if (word[close] == '{') ++level;
    if (word[close] == '}' && --level == 0) break;
    if (word[close] == ',' && level == 1) commas.push_back(close);
  }
  if (close == word.size()) return error("a '{' without its '}'");
  const std::string prefix = word.substr(0, open), suffix = word.substr(close + 1);
  const std::string body = word.substr(open + 1, close - open - 1);
  std::vector<std::string> alternatives;
  if (!commas.empty()) {
    size_t from = open + 1;
    for (size_t c : commas) {
      alternatives.push_back(word.substr(from, c - from));
      from = c + 1;
    }
    alternatives.push_back(word.substr(from, close - from));
  } else {
    const size_t dots = body.find("..");
    auto integer = [](const std::string& t) {
      return !t.empty() && t.size() <= 18 &&
             std::all_of(t.begin() + (t[0] == '-' ? 1 : 0), t.end(), [](char c) { return std::isdigit(c) != 0; }) &&
             t != "-";
    };
    if (dots == std::string::npos || !integer(body.substr(0, dots)) || !integer(body.substr(dots + 2))) {
      return error("'{" + body + "}' is neither a list {a,b,...} nor a range {first..last}");
    }
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    const long long first = std::stoll(a), last = std::stoll(b);
    if (std::llabs(last - first) >= static_cast<long long>(kMaxDays)) {
      return error("'{" + body + "}' spans more than " + std::to_string(kMaxDays) + " days");
    }
    // bash pads to the wider end when either end has a leading zero.
    auto padded = [](const std::string& t) { return t.size() > 1 && t[t[0] == '-' ? 1 : 0] == '0'; };
    const size_t width = padded(a) || padded(b) ? std::max(a.size(), b.size()) : 0;
    const long long step = first <= last ? 1 : -1;
    for (long long v = first;; v += step) {
      std::string digits = std::to_string(std::llabs(v));
      const size_t sign = v < 0 ? 1 : 0;
      if (digits.size() + sign < width) digits.insert(0, width - digits.size() - sign, '0');
      alternatives.push_back((v < 0 ? "-" : "") + digits);
      if (v == last) break;
    }
  }
  for (const auto& alternative : alternatives) {
    RETURN_IF_ERROR(ExpandWord(prefix + alternative + suffix, text, out, depth + 1));
  }
  return Status::OK();
}

// A YYYYMMDD day as a calendar date; nullopt for anything else.
std::optional<std::chrono::year_month_day> ParseDate(const std::string& day) {
  if (day.size() != 8 || !std::all_of(day.begin(), day.end(), [](char c) { return std::isdigit(c) != 0; })) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(std::stoi(day.substr(0, 4))),
                                         std::chrono::month(static_cast<unsigned>(std::stoi(day.substr(4, 2)))),
                                         std::chrono::day(static_cast<unsigned>(std::stoi(day.substr(6, 2))))};
  if (!date.ok()) return std::nullopt;
  return date;
}

// runner.days, or start_day and end_day (YYYYMMDD, inclusive: calendar dates).
Status ParseDays(const YAML::Node& runner, const YamlContext& rctx, std::vector<std::string>* out) {
  const YAML::Node days = runner["days"];
  std::string start, end;
  RETURN_IF_ERROR(ReadString(runner, "start_day", rctx, &start));
  RETURN_IF_ERROR(ReadString(runner, "end_day", rctx, &end));
  if (!start.empty() || !end.empty()) {
    const char* key = start.empty() ? "end_day" : "start_day";
    if (days && !days.IsNull()) return rctx.Child("days").Error(days, "give days or start_day and end_day, not both");
    if (start.empty() || end.empty()) return rctx.Child(key).Error(runner[key], "needs both start_day and end_day");
    const auto first = ParseDate(start), last = ParseDate(end);
    if (!first) return rctx.Child("start_day").Error(runner["start_day"], "'" + start + "' is not a YYYYMMDD date");
    if (!last) return rctx.Child("end_day").Error(runner["end_day"], "'" + end + "' is not a YYYYMMDD date");
    const std::chrono::sys_days from{*first}, to{*last};
    if (to < from) return rctx.Child("end_day").Error(runner["end_day"], "is before start_day " + start);
    if ((to - from).count() >= static_cast<long>(kMaxDays)) {
      return rctx.Child("end_day").Error(runner["end_day"], "more than " + std::to_string(kMaxDays) + " days");
    }
    for (std::chrono::sys_days d = from; d <= to; d += std::chrono::days(1)) {
      const std::chrono::year_month_day ymd{d};
      char text[16];
      std::snprintf(text, sizeof(text), "%04d%02u%02u", static_cast<int>(ymd.year()),
                    static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
      out->push_back(text);
    }
    return Status::OK();
  }
  if (!days || days.IsNull()) return Status::OK();
  std::vector<std::string> words;
  if (days.IsSequence()) {
    RETURN_IF_ERROR(ReadStringList(runner, "days", rctx, &words));
  } else {
    words.emplace_back();
    RETURN_IF_ERROR(ReadString(runner, "days", rctx, &words.back()));
  }
  for (const auto& w : words) {
    auto expanded = ExpandDays(w);
    if (!expanded.ok()) return rctx.Child("days").Error(days, expanded.status().message());
    out->insert(out->end(), expanded->begin(), expanded->end());
  }
  if (out->empty()) return rctx.Child("days").Error(days, "names no day");
  // A brace range counts numbers: {20191230..20200102} passes through 20191231 and 20191299.
  for (const auto& day : *out) {
    const bool dated = day.size() == 8 && std::all_of(day.begin(), day.end(), [](char c) { return std::isdigit(c); }) &&
                       day >= "19700101" && day <= "21001231";
    if (dated && !ParseDate(day)) {
      return rctx.Child("days").Error(days, "'" + day + "' is not a calendar date (a brace range counts numbers, not "
                                            "days: give a range of dates as start_day and end_day)");
    }
  }
  return Status::OK();
}

// runner.days (or start_day and end_day), pass_per_day, data_donefile, data_sleep_second.
Status ParseOnline(const YAML::Node& runner, const YamlContext& rctx, OnlineOptions* o) {
  RETURN_IF_ERROR(ParseDays(runner, rctx, &o->days));
  RETURN_IF_ERROR(ReadUint32(runner, "pass_per_day", rctx, &o->pass_per_day));
  RETURN_IF_ERROR(ReadString(runner, "data_donefile", rctx, &o->data_donefile));
  RETURN_IF_ERROR(ReadUint32(runner, "data_sleep_second", rctx, &o->data_sleep_second));
  RETURN_IF_ERROR(ReadUint32(runner, "checkpoint_per_pass", rctx, &o->checkpoint_per_pass));
  RETURN_IF_ERROR(ReadUint32(runner, "start_pass", rctx, &o->start_pass));
  if (o->pass_per_day == 0) return rctx.Child("pass_per_day").Error(runner["pass_per_day"], "must be >= 1");
  if (o->start_pass == 0 || o->start_pass > o->pass_per_day) {
    return rctx.Child("start_pass").Error(runner["start_pass"],
                                          "must be in [1, pass_per_day = " + std::to_string(o->pass_per_day) + "]");
  }
  if (o->data_sleep_second == 0) {
    return rctx.Child("data_sleep_second").Error(runner["data_sleep_second"], "must be >= 1");
  }
  if (o->data_donefile.find('/') != std::string::npos) {
    return rctx.Child("data_donefile").Error(runner["data_donefile"],
                                             "a file name in each of the pass's data directories, not a path");
  }
  return Status::OK();
}

// Every `hyper_parameters:` key fleetps reads: the model's and the data reader's shapes.
std::vector<std::string> HyperParameterKeys() {
  std::vector<std::string> keys = ModelOptionKeys();
  for (auto& k : DataShapeKeys()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  return keys;
}

// fleetps.sparse_table / fleetps.dense_table: overrides of the derived tables.
Status ParseTableOverride(const YAML::Node& node, const YamlContext& ctx, bool dense, TableOptions* t) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  std::vector<std::string> keys = {"id", "name", "optimizer", "initializer"};
  if (!dense) keys.insert(keys.end(), {"shards", "create_on_pull", "accessor", "memory_budget_bytes"});
  RETURN_IF_ERROR(RejectUnknownKeys(node, keys, ctx));
  RETURN_IF_ERROR(ReadUint32(node, "id", ctx, &t->id));
  RETURN_IF_ERROR(ReadString(node, "name", ctx, &t->name));
  if (!dense) {
    RETURN_IF_ERROR(ReadUint32(node, "shards", ctx, &t->shards));
    RETURN_IF_ERROR(ReadBool(node, "create_on_pull", ctx, &t->create_on_pull));
    RETURN_IF_ERROR(ReadUint64(node, "memory_budget_bytes", ctx, &t->memory_budget_bytes));
    if (node["accessor"]) RETURN_IF_ERROR(ParseAccessor(node["accessor"], ctx.Child("accessor"), &t->accessor));
  }
  if (node["optimizer"]) RETURN_IF_ERROR(ParseOptimizer(node["optimizer"], ctx.Child("optimizer"), &t->optimizer));
  if (node["initializer"]) {
    RETURN_IF_ERROR(ParseInitializer(node["initializer"], ctx.Child("initializer"), &t->initializer));
  }
  return Status::OK();
}

// `cuda_wait` of a map (fleetps.heter, fleetps.gpups), when present.
Status ReadCudaWait(const YAML::Node& map, const YamlContext& ctx, CudaWait* out) {
  return ReadChoice(map, "cuda_wait", ctx,
                    {{"auto", CudaWait::kAuto},
                     {"spin", CudaWait::kSpin},
                     {"yield", CudaWait::kYield},
                     {"block", CudaWait::kBlock}},
                    out);
}

// fleetps.dense: the CPU dense backend.
Status ParseDense(const YAML::Node& node, const YamlContext& ctx, dense::CpuGemmOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(node, {"precision", "max_isa"}, ctx));
  RETURN_IF_ERROR(ReadChoice(node, "precision", ctx, {{"fp32", dense::Precision::kFp32}, {"bf16", dense::Precision::kBf16}},
                             &out->precision));
  using Isa = std::optional<dense::IsaLevel>;
  return ReadChoice<Isa>(node, "max_isa", ctx,
                         {{"auto", std::nullopt},
                          {"generic", dense::IsaLevel::kGeneric},
                          {"avx2", dense::IsaLevel::kAvx2},
                          {"avx512", dense::IsaLevel::kAvx512},
                          {"avx512_bf16", dense::IsaLevel::kAvx512Bf16},
                          {"amx", dense::IsaLevel::kAmx}},
                         &out->max_isa);
}

// fleetps.heter: heterogeneous training.
Status ParseHeter(const YAML::Node& node, const YamlContext& ctx, HeterOptions* h) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(
      node,
      {"route", "inflight", "timeout_ms", "failover", "failover_probe_ms", "lanes", "dense_sync", "allreduce_port",
       "allreduce_interval_ms", "cuda_wait"},
      ctx));
  RETURN_IF_ERROR(ReadChoice(node, "route", ctx,
                             {{"round_robin", HeterRoute::kRoundRobin}, {"trainer_id", HeterRoute::kTrainerId}},
                             &h->route));
  RETURN_IF_ERROR(ReadUint32(node, "inflight", ctx, &h->inflight));
  RETURN_IF_ERROR(ReadUint32(node, "timeout_ms", ctx, &h->timeout_ms));
  RETURN_IF_ERROR(ReadBool(node, "failover", ctx, &h->failover));
  RETURN_IF_ERROR(ReadUint32(node, "failover_probe_ms", ctx, &h->failover_probe_ms));
  if (h->failover_probe_ms < 100 || h->failover_probe_ms > 600000) {
    return ctx.Child("failover_probe_ms").Error(node["failover_probe_ms"], "must be in [100, 600000]");
  }
  RETURN_IF_ERROR(ReadUint32(node, "lanes", ctx, &h->lanes));
  RETURN_IF_ERROR(ReadCudaWait(node, ctx, &h->cuda_wait));
  if (h->inflight == 0 || h->inflight > 64) return ctx.Child("inflight").Error(node["inflight"], "must be in [1, 64]");
  if (h->lanes == 0 || h->lanes > 64) return ctx.Child("lanes").Error(node["lanes"], "must be in [1, 64]");
  if (h->timeout_ms < 100) return ctx.Child("timeout_ms").Error(node["timeout_ms"], "must be >= 100");
  RETURN_IF_ERROR(ReadChoice(node, "dense_sync", ctx,
                             {{"pserver", HeterDenseSync::kPserver}, {"allreduce", HeterDenseSync::kAllreduce}},
                             &h->dense_sync));
  uint32_t port = h->allreduce_port;
  RETURN_IF_ERROR(ReadUint32(node, "allreduce_port", ctx, &port));
  if (port > 65535) return ctx.Child("allreduce_port").Error(node["allreduce_port"], "must be a port, [1, 65535]");
  h->allreduce_port = static_cast<uint16_t>(port);
  RETURN_IF_ERROR(ReadUint32(node, "allreduce_interval_ms", ctx, &h->allreduce_interval_ms));
  if (h->allreduce_interval_ms == 0 || h->allreduce_interval_ms > 60000) {
    return ctx.Child("allreduce_interval_ms").Error(node["allreduce_interval_ms"], "must be in [1, 60000]");
  }
  if (h->dense_sync == HeterDenseSync::kAllreduce && h->failover) {
    return ctx.Child("failover").Error(node["failover"],
                                       "failover needs dense_sync: pserver (with allreduce the heter-trainers "
                                       "all-reduce among themselves, so losing one stops the others)");
  }
  if (h->dense_sync == HeterDenseSync::kAllreduce && h->allreduce_port == 0) {
    return ctx.Child("allreduce_port").Error(node["dense_sync"],
                                             "dense_sync allreduce needs allreduce_port: a free port on heter-trainer "
                                             "0's host for the heter-trainers' rendezvous");
  }
  return Status::OK();
}

// fleetps.collective: data-parallel training.
Status ParseCollective(const YAML::Node& node, const YamlContext& ctx, DataParallelOptions* c) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(
      RejectUnknownKeys(node, {"fuse_grad_size_in_MB", "lr_scaling", "warmup_steps", "overlap", "drop_last",
                               "timeout_ms", "backend", "store_budget_bytes"},
                        ctx));
  std::string backend(CollectiveBackendName(c->backend));
  RETURN_IF_ERROR(ReadString(node, "backend", ctx, &backend));
  if (!ParseCollectiveBackend(backend, &c->backend)) {
    return ctx.Child("backend").Error(node["backend"], "unknown backend '" + backend + "' (use auto, gloo or nccl)");
  }
  RETURN_IF_ERROR(ReadUint32(node, "fuse_grad_size_in_MB", ctx, &c->fuse_grad_size_mb));
  RETURN_IF_ERROR(
      ReadChoice(node, "lr_scaling", ctx,
                 {{"auto", LrScaling::kAuto}, {"linear", LrScaling::kLinear}, {"sqrt", LrScaling::kSqrt},
                  {"none", LrScaling::kNone}},
                 &c->lr_scaling));
  RETURN_IF_ERROR(ReadUint32(node, "warmup_steps", ctx, &c->warmup_steps));
  RETURN_IF_ERROR(ReadBool(node, "overlap", ctx, &c->overlap));
  RETURN_IF_ERROR(ReadBool(node, "drop_last", ctx, &c->drop_last));
  RETURN_IF_ERROR(ReadUint32(node, "timeout_ms", ctx, &c->timeout_ms));
  RETURN_IF_ERROR(ReadUint64(node, "store_budget_bytes", ctx, &c->store_budget_bytes));
  if (c->store_budget_bytes != 0 && c->store_budget_bytes < 4096) {
    return ctx.Child("store_budget_bytes").Error(node["store_budget_bytes"], "must be 0 (auto) or >= 4096");
  }
  if (c->fuse_grad_size_mb == 0 || c->fuse_grad_size_mb > 1024) {
    return ctx.Child("fuse_grad_size_in_MB").Error(node["fuse_grad_size_in_MB"], "must be in [1, 1024]");
  }
  if (c->timeout_ms < 100) return ctx.Child("timeout_ms").Error(node["timeout_ms"], "must be >= 100");
  return Status::OK();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandDays(const std::string& text) {
  std::vector<std::string> days;
  std::string word;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || std::isspace(static_cast<unsigned char>(text[i]))) {
      if (!word.empty()) RETURN_IF_ERROR(ExpandWord(word, text, &days));
      word.clear();
    } else {
      word.push_back(text[i]);
    }
  }
  return days;
}

std::string OnlinePassPath(std::string path, const std::string& day, uint32_t pass) {
  const std::pair<std::string, std::string> fields[] = {{"{day}", day}, {"{pass}", std::to_string(pass)}};
  for (const auto& [field, value] : fields) {
    for (size_t at = path.find(field); at != std::string::npos; at = path.find(field, at + value.size())) {
      path.replace(at, field.size(), value);
    }
  }
  return path;
}

StatusOr<TrainerOptions> ParseTrainerYaml(const std::string& text, const std::string& file_name) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlString(text, file_name));
  YamlContext ctx{file_name, ""};
  if (!root.IsMap()) return ctx.Error(root, "expected a map with 'runner' and 'hyper_parameters'");
  RETURN_IF_ERROR(RejectUnknownKeys(root, {"runner", "hyper_parameters", "fleetps"}, ctx));
  if (!root["hyper_parameters"]) return ctx.Error(root, "missing required section 'hyper_parameters' (the model)");
  // Unknown keys first: a misspelt key is the likeliest cause of any later error.
  RETURN_IF_ERROR(RejectUnknownKeys(root["runner"], RunnerKeys(), ctx.Child("runner"), PaddleRecIgnoredRunnerKeys()));
  RETURN_IF_ERROR(RejectUnknownKeys(root["hyper_parameters"], HyperParameterKeys(), ctx.Child("hyper_parameters"),
                                    PaddleRecIgnoredHyperParameterKeys()));
  TrainerOptions o;
  o.config_path = file_name;
  RETURN_IF_ERROR(ParseModelOptions(root["hyper_parameters"], ctx.Child("hyper_parameters"), &o.model));
  RETURN_IF_ERROR(ParsePaddleRecDataOptions(root, ctx, &o.data));

  const YAML::Node runner = root["runner"];
  const YamlContext rctx = ctx.Child("runner");
  if (runner) {
    if (!runner.IsMap()) return rctx.Error(runner, "expected a map");
    std::string mode = "async";
    RETURN_IF_ERROR(ReadString(runner, "sync_mode", rctx, &mode));
    if (!SyncModeFromName(mode, &o.sync_mode)) {
      return rctx.Child("sync_mode").Error(runner["sync_mode"],
                                           "unknown sync_mode '" + mode + "' (use async, sync, geo, heter, collective or gpubox)");
    }
    RETURN_IF_ERROR(ReadUint32(runner, "geo_step", rctx, &o.geo_step));
    RETURN_IF_ERROR(ReadUint32(runner, "epochs", rctx, &o.epochs));
    RETURN_IF_ERROR(ReadUint32(runner, "print_interval", rctx, &o.print_interval));
    RETURN_IF_ERROR(ReadUint32(runner, "thread_num", rctx, &o.worker_threads));
    if (!runner["thread_num"]) {  // PaddleRec's online configs spell it train_thread_num
      RETURN_IF_ERROR(ReadUint32(runner, "train_thread_num", rctx, &o.worker_threads));
    }
    RETURN_IF_ERROR(ParseOnline(runner, rctx, &o.online));
    RETURN_IF_ERROR(ReadString(runner, "model_save_path", rctx, &o.model_save_path));
    RETURN_IF_ERROR(ReadString(runner, "infer_load_path", rctx, &o.infer_load_path));
    // Like the data paths, model paths are relative to the YAML file's directory; made
    // absolute, since the pservers resolve them too (below their checkpoint root).
    const std::filesystem::path base = std::filesystem::absolute(file_name).parent_path();
    for (std::string* p : {&o.model_save_path, &o.infer_load_path}) {
      if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (base / *p).lexically_normal().string();
    }
    if (o.infer_load_path.empty()) o.infer_load_path = o.model_save_path;
    if (o.geo_step == 0) return rctx.Child("geo_step").Error(runner["geo_step"], "must be >= 1");
    if (o.epochs == 0) return rctx.Child("epochs").Error(runner["epochs"], "must be >= 1");
    if (o.print_interval == 0) return rctx.Child("print_interval").Error(runner["print_interval"], "must be >= 1");
    if (o.worker_threads == 0 || o.worker_threads > 256) {
      return rctx.Child("thread_num").Error(runner["thread_num"], "must be in [1, 256]");
    }
  }

  // Tables derived from the model; fleetps.* may override ids, names, shards, optimizer.
  o.sparse_table.id = 0;
  o.sparse_table.name = "embedding";
  o.sparse_table.kind = TableKind::kSparse;
  o.sparse_table.dim = SparseRowDim(o.model);
  o.sparse_table.shards = 8;
  o.sparse_table.optimizer = o.model.optimizer;
  o.sparse_table.initializer.kind = InitializerKind::kUniform;
  o.sparse_table.initializer.min = -0.01f;
  o.sparse_table.initializer.max = 0.01f;
  o.sparse_table.initializer.seed = o.model.init_seed;
  o.dense_table.id = 1;
  o.dense_table.name = "dense";
  o.dense_table.kind = TableKind::kDense;
  o.dense_table.dim = DenseParamCount(o.model);
  o.dense_table.shards = 1;
  o.dense_table.optimizer = o.model.optimizer;
  o.dense_table.initializer.kind = InitializerKind::kZeros;

  const YAML::Node ext = root["fleetps"];
  const YamlContext ectx = ctx.Child("fleetps");
  if (ext) {
    if (!ext.IsMap()) return ectx.Error(ext, "expected a map");
    RETURN_IF_ERROR(RejectUnknownKeys(ext,
                                      {"sparse_table", "dense_table", "stop_servers_at_end", "barrier_timeout_ms",
                                       "dense_pull_interval", "max_merge_steps", "local_shards", "log_level",
                                       "save_every_epoch", "server", "heter", "collective", "gpups", "dense", "prefetch"},
                                      ectx));
    if (ext["sparse_table"]) {
      RETURN_IF_ERROR(ParseTableOverride(ext["sparse_table"], ectx.Child("sparse_table"), false, &o.sparse_table));
    }
    if (ext["dense_table"]) {
      RETURN_IF_ERROR(ParseTableOverride(ext["dense_table"], ectx.Child("dense_table"), true, &o.dense_table));
    }
    RETURN_IF_ERROR(ReadBool(ext, "stop_servers_at_end", ectx, &o.stop_servers_at_end));
    RETURN_IF_ERROR(ReadUint32(ext, "barrier_timeout_ms", ectx, &o.barrier_timeout_ms));
    RETURN_IF_ERROR(ReadUint32(ext, "dense_pull_interval", ectx, &o.dense_pull_interval));
    RETURN_IF_ERROR(ReadUint32(ext, "max_merge_steps", ectx, &o.max_merge_steps));
    RETURN_IF_ERROR(ReadUint32(ext, "local_shards", ectx, &o.local_shards));
    RETURN_IF_ERROR(ReadString(ext, "log_level", ectx, &o.log_level));
    RETURN_IF_ERROR(ReadBool(ext, "save_every_epoch", ectx, &o.save_every_epoch));
    if (ext["heter"]) RETURN_IF_ERROR(ParseHeter(ext["heter"], ectx.Child("heter"), &o.heter));
    if (ext["collective"]) {
      RETURN_IF_ERROR(ParseCollective(ext["collective"], ectx.Child("collective"), &o.collective));
    }
    if (ext["gpups"]) {
      const YAML::Node g = ext["gpups"];
      const YamlContext gctx = ectx.Child("gpups");
      if (!g.IsMap()) return gctx.Error(g, "expected a map");
      RETURN_IF_ERROR(
          RejectUnknownKeys(g, {"cuda_wait", "device_memory_mb", "merge", "passes_per_epoch", "prefetch", "workers_per_device"},
                            gctx));
      RETURN_IF_ERROR(ReadUint64(g, "device_memory_mb", gctx, &o.gpups.device_memory_mb));
      RETURN_IF_ERROR(ReadUint32(g, "passes_per_epoch", gctx, &o.gpups.passes_per_epoch));
      if (o.gpups.passes_per_epoch == 0) {
        return gctx.Child("passes_per_epoch").Error(g["passes_per_epoch"], "must be >= 1");
      }
      RETURN_IF_ERROR(ReadUint32(g, "workers_per_device", gctx, &o.gpups.workers_per_device));
      if (o.gpups.workers_per_device == 0 || o.gpups.workers_per_device > 64) {
        return gctx.Child("workers_per_device").Error(g["workers_per_device"], "must be 1 to 64");
      }
      RETURN_IF_ERROR(ReadChoice(g, "merge", gctx, {{"add", false}, {"average", true}}, &o.gpups.average_merge));
      RETURN_IF_ERROR(ReadChoice<std::optional<bool>>(
          g, "prefetch", gctx, {{"auto", std::nullopt}, {"true", true}, {"false", false}}, &o.gpups.prefetch));
      RETURN_IF_ERROR(ReadCudaWait(g, gctx, &o.gpups.cuda_wait));
    }
    if (ext["dense"]) RETURN_IF_ERROR(ParseDense(ext["dense"], ectx.Child("dense"), &o.dense));
    RETURN_IF_ERROR(ReadChoice<std::optional<bool>>(
        ext, "prefetch", ectx, {{"auto", std::nullopt}, {"true", true}, {"false", false}}, &o.prefetch));
    if (ext["server"]) {
      // The pservers' options (ParseServerYaml reads them from this file); checked here too
      // so that a trainer, local mode included, refuses a config its pservers would refuse.
      ServerOptions unused;
      RETURN_IF_ERROR(ParseServerSection(ext["server"], ectx.Child("server"), &unused));
    }
    if (o.dense_pull_interval == 0 || o.max_merge_steps == 0) {
      return ectx.Error(ext, "dense_pull_interval and max_merge_steps must be >= 1");
    }
  }
  if (o.sparse_table.id == o.dense_table.id) {
    return ectx.Error(ext, "fleetps.sparse_table.id and fleetps.dense_table.id must differ");
  }
  for (const auto& t : JobTables(o)) {
    Status st = ValidateTable(t);
    if (!st.ok()) return Status::InvalidArgument(file_name + ": " + st.message());
  }
  if (HasSparseSlots(o.model) && o.data.sparse_slots.size() != o.model.num_sparse_slots) {
    return ctx.Error(root["hyper_parameters"],
                     "the data has " + std::to_string(o.data.sparse_slots.size()) + " sparse slots but the model " +
                         std::to_string(o.model.num_sparse_slots) +
                         " (check sparse_inputs_slots / slot_num / sparse_slots)");
  }
  if (HasSparseSlots(o.model) && o.data.dense_dim != o.model.dense_input_dim) {
    return ctx.Error(root["hyper_parameters"], "the data has " + std::to_string(o.data.dense_dim) +
                                                   " dense features but the model " +
                                                   std::to_string(o.model.dense_input_dim));
  }
  if (o.model.type == ModelType::kMlp && o.data.dense_dim != o.model.input_dim) {
    return ctx.Error(root["hyper_parameters"], "the mlp model reads " + std::to_string(o.model.input_dim) +
                                                   " dense inputs (input_dim) but the data has " +
                                                   std::to_string(o.data.dense_dim) + " (dense_input_dim)");
  }
  return o;
}

StatusOr<TrainerOptions> LoadTrainerYaml(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  return ParseTrainerYaml(text, path);
}

Status ApplyTrainerEnv(const EnvLookup& env, TrainerOptions* o) {
  if (auto role = env("TRAINING_ROLE"); role && *role != "TRAINER") {
    return Status::InvalidArgument("TRAINING_ROLE=" + *role + " but this is a trainer (expected TRAINER)");
  }
  auto read_u32 = [&](const char* name, uint32_t* out) -> Status {
    auto v = env(name);
    if (!v) return Status::OK();
    try {
      size_t pos = 0;
      const unsigned long x = std::stoul(*v, &pos);
      if (pos != v->size() || x > UINT32_MAX) throw std::invalid_argument("range");
      *out = static_cast<uint32_t>(x);
    } catch (const std::exception&) {
      return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not a non-negative integer");
    }
    return Status::OK();
  };
  RETURN_IF_ERROR(read_u32("PADDLE_TRAINERS_NUM", &o->trainers_num));
  RETURN_IF_ERROR(read_u32("PADDLE_TRAINER_ID", &o->trainer_id));
  if (auto list = env("PADDLE_PSERVERS_IP_PORT_LIST"); list && !list->empty()) {
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext("PADDLE_PSERVERS_IP_PORT_LIST");
    o->pservers = *eps;
  }
  if (auto level = env("FLEETPS_LOG_LEVEL")) o->log_level = *level;
  if (auto list = env("PADDLE_TRAINER_ENDPOINTS"); list && !list->empty()) {
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext("PADDLE_TRAINER_ENDPOINTS");
    o->trainer_endpoints = *eps;
    if (!env("PADDLE_TRAINERS_NUM")) o->trainers_num = static_cast<uint32_t>(eps->size());
    // In gpubox mode the endpoints name the nodes whose devices all-reduce the dense part.
    if (eps->size() > 1 && o->sync_mode != SyncMode::kGpuBox) o->sync_mode = SyncMode::kCollective;
    if (auto current = env("PADDLE_CURRENT_ENDPOINT"); current && !current->empty()) {
      auto self = net::ParseEndpoint(*current);
      if (!self.ok()) return self.status().WithContext("PADDLE_CURRENT_ENDPOINT");
      auto it = std::find(eps->begin(), eps->end(), *self);
      if (it == eps->end()) {
        return Status::InvalidArgument("PADDLE_CURRENT_ENDPOINT=" + *current + " is not in PADDLE_TRAINER_ENDPOINTS");
      }
      if (!env("PADDLE_TRAINER_ID")) o->trainer_id = static_cast<uint32_t>(it - eps->begin());
      if (o->trainer_id != static_cast<uint32_t>(it - eps->begin())) {
        return Status::InvalidArgument("PADDLE_CURRENT_ENDPOINT=" + *current + " is entry " +
                                       std::to_string(it - eps->begin()) + " of PADDLE_TRAINER_ENDPOINTS but "
                                       "PADDLE_TRAINER_ID=" + std::to_string(o->trainer_id));
      }
    }
  }
  if (auto v = env("FLAGS_selected_gpus"); v && !v->empty()) {
    ASSIGN_OR_RETURN(auto devices, ParseUintList(*v, "FLAGS_selected_gpus"));
    o->gpups.devices.assign(devices.begin(), devices.end());
    o->collective.gpu = o->gpups.devices.front();
  }
  if (auto v = env("PADDLE_DISTRI_BACKEND"); v && !v->empty()) {
    if (!ParseCollectiveBackend(*v, &o->collective.backend)) {
      return Status::InvalidArgument("PADDLE_DISTRI_BACKEND=" + *v + ": use auto, gloo or nccl");
    }
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> device, HeterDeviceEnv(env));
  if (device) o->gpups.device = *device;
  if (o->gpubox_mode()) return Status::OK();  // a GPU-PS trainer has no heter stage
  return ApplyHeterEndpointsEnv(env, o);
}

StatusOr<const char*> HeterTrainerListEnv(const EnvLookup& env) {
  return EnvNameOrAlias(env, "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "PADDLE_HETER_TRAINER_IP_PORT_LIST");
}

StatusOr<std::optional<std::string>> HeterDeviceEnv(const EnvLookup& env) {
  ASSIGN_OR_RETURN(const char* name, EnvNameOrAlias(env, "HETER_DEVICE_TYPE", "PADDLE_HETER_TRAINER_DEVICE"));
  if (name == nullptr) return std::optional<std::string>();
  return env(name);
}

Status ApplyHeterEndpointsEnv(const EnvLookup& env, TrainerOptions* o) {
  ASSIGN_OR_RETURN(const char* all, HeterTrainerListEnv(env));
  for (const char* name : {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", all}) {
    if (name == nullptr) continue;
    auto list = env(name);
    if (!list || list->empty()) continue;
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext(name);
    o->heter_trainers = *eps;
    o->sync_mode = SyncMode::kHeter;
    break;
  }
  return Status::OK();
}

Status ValidateTrainerOptions(const TrainerOptions& o) {
  if (o.online.enabled() && o.epochs != 1) {
    return Status::InvalidArgument("an online job (runner.days) trains each pass's data once: leave out runner.epochs "
                                   "and --epochs (got " + std::to_string(o.epochs) + ")");
  }
  if (o.trainers_num == 0) return Status::InvalidArgument("PADDLE_TRAINERS_NUM must be >= 1");
  if (o.trainer_id >= o.trainers_num) {
    return Status::InvalidArgument("PADDLE_TRAINER_ID=" + std::to_string(o.trainer_id) +
                                   " must be below PADDLE_TRAINERS_NUM=" + std::to_string(o.trainers_num));
  }
  if (o.heter_mode() && o.heter_trainers.empty()) {
    return Status::InvalidArgument(
        "sync_mode heter needs the heter-trainers' endpoints: set PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST "
        "(or --heter-trainers)");
  }
  if (o.heter_mode() && o.local()) {
    return Status::InvalidArgument(
        "heterogeneous training needs pservers (PADDLE_PSERVERS_IP_PORT_LIST): the heter-trainers push the dense "
        "gradients to them");
  }
  if (o.gpubox_mode()) {
    if (o.local()) {
      return Status::InvalidArgument(
          "sync_mode gpubox pulls each pass's rows from pservers and writes them back: set "
          "PADDLE_PSERVERS_IP_PORT_LIST");
    }
    if (o.model.type != ModelType::kCtrDnn) {
      return Status::InvalidArgument("sync_mode gpubox trains sparse embeddings: use the ctr_dnn model");
    }
    if (o.gpups.devices.empty() || o.gpups.devices.size() > 64) {
      return Status::InvalidArgument("FLAGS_selected_gpus must name 1 to 64 devices");
    }
    if (o.gpups.passes_per_epoch > 1 && o.data.dataset != DatasetKind::kInMemory) {
      return Status::InvalidArgument("fleetps.gpups.passes_per_epoch " + std::to_string(o.gpups.passes_per_epoch) +
                                     " splits the records in memory into passes: set runner.reader_type: "
                                     "InMemoryDataset (or passes_per_epoch: 1)");
    }
    if (o.gpups.device != "gpu" && o.gpups.device != "cpu" && o.gpups.device != "auto") {
      return Status::InvalidArgument("HETER_DEVICE_TYPE='" + o.gpups.device + "': use gpu or cpu");
    }
    const bool single = o.trainer_endpoints.empty() && o.trainers_num == 1;
    if (!single && o.trainer_endpoints.size() != o.trainers_num) {
      return Status::InvalidArgument("sync_mode gpubox with " + std::to_string(o.trainers_num) +
                                     " trainers all-reduces the dense part across the nodes: "
                                     "PADDLE_TRAINER_ENDPOINTS must name one endpoint per trainer (it names " +
                                     std::to_string(o.trainer_endpoints.size()) + ")");
    }
    return Status::OK();
  }
  if (o.collective_mode()) {
    // No endpoints: a single, non-distributed run (world size 1).
    const bool single = o.trainer_endpoints.empty() && o.trainers_num == 1;
    if (!single && o.trainer_endpoints.size() != o.trainers_num) {
      return Status::InvalidArgument("collective training: PADDLE_TRAINER_ENDPOINTS names " +
                                     std::to_string(o.trainer_endpoints.size()) + " ranks but PADDLE_TRAINERS_NUM=" +
                                     std::to_string(o.trainers_num));
    }
    if (o.worker_threads != 1) {
      return Status::InvalidArgument("collective training runs one worker thread per rank (runner.thread_num is " +
                                     std::to_string(o.worker_threads) + "); start more ranks instead");
    }
    if (o.local() && HasSparseSlots(o.model)) {
      return Status::InvalidArgument(
          ModelTypeName(o.model.type) + " in collective mode keeps its embeddings on pservers (the hybrid): set "
          "PADDLE_PSERVERS_IP_PORT_LIST, or train an mlp");
    }
    return Status::OK();
  }
  if (o.local() && o.trainers_num > 1) {
    return Status::InvalidArgument("PADDLE_TRAINERS_NUM=" + std::to_string(o.trainers_num) +
                                   " needs PADDLE_PSERVERS_IP_PORT_LIST (local training has one trainer)");
  }
  return Status::OK();
}

}  // namespace fleetps::config
