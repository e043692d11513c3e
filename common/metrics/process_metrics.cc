#include "common/metrics/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fleetps::metrics {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The boot time (btime of /proc/stat), seconds since the epoch; 0 when unreadable.
uint64_t BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  uint64_t value = 0;
  while (in >> key) {
    if (key == "btime" && (in >> value)) return value;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

void Line(std::string* out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
}

}  // namespace

StatusOr<ProcStat> ParseProcStat(std::string_view line) {
  const auto close = line.rfind(')');
  if (close == std::string_view::npos)
    return Status::InvalidArgument("a /proc stat line without the ')' after its command");
  // Fields after the command, numbered as in proc(5): 3 = state, 14 = utime, 15 = stime,
  // 22 = starttime, 23 = vsize, 24 = rss.
  std::vector<std::string_view> fields;
  std::string_view rest = line.substr(close + 1);
  while (!rest.empty()) {
    const auto begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) break;
    rest.remove_prefix(begin);
    const auto end = rest.find(' ');
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  auto field = [&](int number, uint64_t* out) -> Status {
    const size_t at = static_cast<size_t>(number - 3);
    if (at >= fields.size()) {
      return Status::InvalidArgument("a /proc stat line with " + std::to_string(fields.size() + 2) + " fields: field " +
                                     std::to_string(number) + " is missing");
    }
    const auto f = fields[at];
    const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), *out);
    if (ec != std::errc() || end != f.data() + f.size()) {
      return Status::InvalidArgument("field " + std::to_string(number) + " of a /proc stat line is '" + std::string(f) +
                                     "', not a count");
    }
    return Status::OK();
  };
  ProcStat s;
  RETURN_IF_ERROR(field(14, &s.utime_ticks));
  RETURN_IF_ERROR(field(15, &s.stime_ticks));
  RETURN_IF_ERROR(field(22, &s.start_ticks));
  RETURN_IF_ERROR(field(23, &s.vsize_bytes));
  RETURN_IF_ERROR(field(24, &s.rss_pages));
  return s;
}

double ProcessCpuSeconds() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

ProcessSample SampleThisProcess() {
  ProcessSample out;
  out.cpu_seconds = ProcessCpuSeconds();
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const long page = ::sysconf(_SC_PAGESIZE);
  auto stat = ParseProcStat(ReadFirstLine("/proc/self/stat"));
  if (stat.ok() && ticks > 0) {
    out.resident_bytes = stat->rss_pages * static_cast<uint64_t>(page > 0 ? page : 4096);
    out.virtual_bytes = stat->vsize_bytes;
    out.start_time_seconds = static_cast<double>(BootTime()) + static_cast<double>(stat->start_ticks) / ticks;
  }
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    ++out.open_fds;
  }
  if (out.open_fds > 0) --out.open_fds;  // the iterator's own descriptor
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) out.max_fds = limit.rlim_cur;
  return out;
}

std::string FormatProcessMetrics(const ProcessSample& s) {
  std::string out;
  Line(&out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", s.cpu_seconds);
  Line(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
       static_cast<double>(s.resident_bytes));
  Line(&out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
       static_cast<double>(s.virtual_bytes));
  Line(&out, "process_open_fds", "gauge", "Number of open file descriptors.", static_cast<double>(s.open_fds));
  Line(&out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", static_cast<double>(s.max_fds));
  Line(&out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
       s.start_time_seconds);
  return out;
}

}  // namespace fleetps::metrics
