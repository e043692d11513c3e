#pragma once
// The standard process series of a Prometheus client (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_max_fds, process_start_time_seconds), read from /proc on each scrape, so every
// fleetps daemon's /metrics says what it costs in CPU and memory and how close it is to its
// descriptor limit, as dashboards built for any Prometheus client expect.
// Thread-safety: free functions; reading /proc/self is safe from any thread.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fleetps::metrics {

struct ProcessSample {
  double cpu_seconds = 0;  // user + system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;           // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

// The fields of a /proc/<pid>/stat line: utime, stime and starttime in clock ticks, vsize in
// bytes, rss in pages. The command name may hold spaces and parentheses; the fields after
// its last ')' are counted. InvalidArgument naming what is missing otherwise.
struct ProcStat {
  uint64_t utime_ticks = 0, stime_ticks = 0, start_ticks = 0, vsize_bytes = 0, rss_pages = 0;
};
StatusOr<ProcStat> ParseProcStat(std::string_view line);

// User + system CPU seconds of this process so far, every thread included (getrusage).
double ProcessCpuSeconds();

// This process now. Fields that cannot be read stay 0 (the exposition shows 0 rather
// than failing the scrape).
ProcessSample SampleThisProcess();

// `sample` in the text exposition format (HELP and TYPE lines included).
std::string FormatProcessMetrics(const ProcessSample& sample);

}  // namespace fleetps::metrics
