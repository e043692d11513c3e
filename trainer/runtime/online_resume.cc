#include "trainer/runtime/online_resume.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fleetps::trainer {
namespace {

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t begin = 0;
  for (size_t tab = line.find('\t'); tab != std::string::npos; tab = line.find('\t', begin)) {
    fields.push_back(line.substr(begin, tab - begin));
    begin = tab + 1;
  }
  fields.push_back(line.substr(begin));
  return fields;
}

bool ParseInt(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// a < b, days as numbers when both are digits.
bool DayBefore(const std::string& a, const std::string& b) {
  if (AllDigits(a) && AllDigits(b)) {
    const auto trim = [](const std::string& s) { return s.substr(std::min(s.find_first_not_of('0'), s.size())); };
    const std::string x = trim(a), y = trim(b);
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  }
  return a < b;
}

std::string DonefilePath(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / kOnlineDonefile).string();
}

StatusOr<std::vector<std::string>> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return lines;
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read " + path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  if (in.bad()) return Status::IOError("cannot read " + path);
  return lines;
}

}  // namespace

StatusOr<std::optional<OnlineSave>> ReadLastOnlineSave(const std::string& model_dir) {
  const std::string path = DonefilePath(model_dir);
  ASSIGN_OR_RETURN(auto lines, ReadLines(path));
  for (size_t n = lines.size(); n > 0; --n) {
    const std::string& line = lines[n - 1];
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto fields = SplitTabs(line);
    OnlineSave save;
    int64_t key = 0;
    if (fields.size() < 4 || fields[0].empty() || fields[2].empty() || !ParseInt(fields[1], &key) ||
        !ParseInt(fields[3], &save.pass) || save.pass < -1) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: not a checkpoint line ('DAY<tab>KEY<tab>PATH<tab>PASS', PASS -1 for a day's end): '{}'; fix or "
          "remove the line, or remove the file to train the online job from its first day",
          path, n, line));
    }
    save.day = fields[0];
    save.path = fields[2];
    return std::optional<OnlineSave>(std::move(save));
  }
  return std::optional<OnlineSave>();
}

Status RecordOnlineSave(const std::string& model_dir, const OnlineSave& save, int64_t unix_time) {
  const std::string path = DonefilePath(model_dir);
  std::error_code ec;
  std::filesystem::create_directories(model_dir, ec);
  if (ec) return Status::IOError("cannot create " + model_dir + ": " + ec.message());
  ASSIGN_OR_RETURN(auto lines, ReadLines(path));
  std::ostringstream text;
  for (const std::string& line : lines) {
    const auto fields = SplitTabs(line);
    int64_t pass = 0;
    const bool same = fields.size() >= 4 && fields[0] == save.day && ParseInt(fields[3], &pass) && pass == save.pass;
    if (!same && !line.empty()) text << line << '\n';
  }
  text << save.day << '\t' << unix_time << '\t' << save.path << '\t' << save.pass << "\t0\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text.str();
    out.flush();
    if (!out) return Status::IOError("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot replace " + path + ": " + ec.message());
  return Status::OK();
}

OnlinePosition OnlineStartAfter(const config::OnlineOptions& online, const std::optional<OnlineSave>& last) {
  OnlinePosition start{0, online.start_pass};
  if (!last) return start;
  // The pass after `last`, in the configured days.
  OnlinePosition next{online.days.size(), 1};
  for (size_t i = 0; i < online.days.size(); ++i) {
    const std::string& day = online.days[i];
    if (DayBefore(last->day, day)) {
      next = {i, 1};
      break;
    }
    if (day == last->day) {
      const bool day_done = last->pass < 0 || last->pass >= static_cast<int64_t>(online.pass_per_day);
      next = day_done ? OnlinePosition{i + 1, 1} : OnlinePosition{i, static_cast<uint32_t>(last->pass + 1)};
      break;
    }
  }
  const bool later = next.day_index > start.day_index || (next.day_index == start.day_index && next.pass > start.pass);
  return later ? next : start;
}

}  // namespace fleetps::trainer
