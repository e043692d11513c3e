#pragma once
// Test support for end-to-end jobs: generated data, waiting on a process's log, and the
// test AUC of a cpu-trainer --report file.

#include <chrono>
#include <string>
#include <vector>

namespace fleetps::testing {

// Runs fleetps-datagen --out-dir DIR/data --seed 11 (plus `args`, e.g. --rows, --format);
// its output goes to DIR/datagen.log. False when it did not exit 0 within a minute.
bool GenerateData(const std::string& dir, const std::vector<std::string>& args);

// Waits until the file at `path` contains `text`; false after `timeout`.
bool WaitForLog(const std::string& path, const std::string& text, std::chrono::milliseconds timeout);

// The "test" AUC of a cpu-trainer --report file; NaN when it has none.
double ReportTestAuc(const std::string& report_path);

}  // namespace fleetps::testing
