#pragma once
// Where an online job (runner.days) picks up after a restart, as PaddleRec's online trainer
// does: trainer 0 records each committed checkpoint of the job in MODEL/donefile.txt, and a
// job started again over the same model_save_path loads the newest one into the pservers and
// trains from the pass after it.
//
// MODEL/donefile.txt is Paddle's fleet_util donefile: a line per checkpoint,
// "DAY\tKEY\tPATH\tPASS\t0", the newest last. KEY is the save's Unix time (Paddle's
// xbox_base_key); PASS is the pass after which the checkpoint was saved (checkpoint-PASS), or
// -1 for the day's end (DAY/checkpoint: the day is complete).

#include <cstdint>
#include <optional>
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"

namespace fleetps::trainer {

inline constexpr char kOnlineDonefile[] = "donefile.txt";

// One line of the donefile.
struct OnlineSave {
  std::string day;
  int64_t pass = -1;  // -1: the day's end
  std::string path;   // the checkpoint's directory, as saved (what Load takes)
};

// The first pass an online job trains: days[day_index], pass `pass`; day_index ==
// days.size(): every configured pass is already trained.
struct OnlinePosition {
  size_t day_index = 0;
  uint32_t pass = 1;
};

// The newest line of `model_dir`/donefile.txt; nullopt when there is no such file or it holds
// no line. InvalidArgument naming file:line for a line that is not DAY, KEY, PATH, PASS,
// tab-separated (and how to start over); IOError when it cannot be read.
StatusOr<std::optional<OnlineSave>> ReadLastOnlineSave(const std::string& model_dir);

// Adds `save` as the newest line of `model_dir`/donefile.txt (the directory is created),
// with `unix_time` as its KEY; an older line of the same day and pass is dropped. The file
// is replaced whole (written beside it, then renamed), so a reader never sees half a line.
Status RecordOnlineSave(const std::string& model_dir, const OnlineSave& save, int64_t unix_time);

// The configured start (start_pass on the first day) or, when later, the pass after `last`
// in `online.days`. Days compare as numbers when both are digits (YYYYMMDD), else as text.
OnlinePosition OnlineStartAfter(const config::OnlineOptions& online, const std::optional<OnlineSave>& last);

}  // namespace fleetps::trainer
