#include "common/config/trainer_config.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/config/trainer_config_sections.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {

// Keys of PaddleRec's `runner:` map that fleetps accepts and ignores, so PaddleRec configs
// load as they are. Each configures PaddleRec machinery fleetps does not have or replaces;
// a key with a fleetps meaning is not listed here (it is read, or it is an error).
std::vector<std::string> PaddleRecIgnoredRunnerKeys() {
  return {
      // Python readers and model files: fleetps parses runner.data_format natively and
      // builds hyper_parameters.model_type.
      "train_reader_path",
      "infer_reader_path",
      "pipe_command",
      "model_path",
      // Device and metric switches: cpu-trainer runs on the CPU and always reports AUC.
      "use_gpu",
      "use_auc",
      // Paddle DataLoader and dataset debugging knobs: fleetps's readers use thread_num.
      "num_workers",
      "dataset_debug",
      "infer_reader_type",
      // PaddleRec's infer loops over the models saved per epoch; fleetps scores the one
      // model at infer_load_path.
      "infer_start_epoch",
      "infer_end_epoch",
      // Paddle inference-model export (feed/fetch variable names); fleetps saves checkpoints.
      "use_inference",
      "save_inference_feed_varnames",
      "save_inference_fetch_varnames",
      // Dygraph-to-static conversion's starting weights (config_to_static.yaml); a fleetps
      // job starts from a checkpoint with `pserver --load` (server.load_dir).
      "model_init_path",
  };
}

// Every `runner:` key fleetps reads: the trainer's own and the data reader's.
std::vector<std::string> RunnerKeys() {
  std::vector<std::string> keys = {
      "sync_mode",         "geo_step",         "epochs",    "print_interval", "thread_num",
      "model_save_path",   "infer_load_path",  "days",      "pass_per_day",   "data_donefile",
      "data_sleep_second", "train_thread_num", "start_day", "end_day",        "checkpoint_per_pass",
      "start_pass"};
  for (auto& k : DataOptionKeys()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  return keys;
}

namespace {

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
      return rctx.Child("days").Error(days, "'" + day +
                                                "' is not a calendar date (a brace range counts numbers, not "
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
    return rctx.Child("start_pass")
        .Error(runner["start_pass"], "must be in [1, pass_per_day = " + std::to_string(o->pass_per_day) + "]");
  }
  if (o->data_sleep_second == 0) {
    return rctx.Child("data_sleep_second").Error(runner["data_sleep_second"], "must be >= 1");
  }
  if (o->data_donefile.find('/') != std::string::npos) {
    return rctx.Child("data_donefile")
        .Error(runner["data_donefile"], "a file name in each of the pass's data directories, not a path");
  }
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

// `runner:`: the trainer's own keys; the data reader's are read by ParsePaddleRecDataOptions.
Status ParseRunnerSection(const YAML::Node& runner, const YamlContext& rctx, const std::string& file_name,
                          TrainerOptions* out) {
  TrainerOptions& o = *out;
  if (!runner.IsMap()) return rctx.Error(runner, "expected a map");
  std::string mode = "async";
  RETURN_IF_ERROR(ReadString(runner, "sync_mode", rctx, &mode));
  if (!SyncModeFromName(mode, &o.sync_mode)) {
    return rctx.Child("sync_mode")
        .Error(runner["sync_mode"],
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
  return Status::OK();
}

}  // namespace fleetps::config
