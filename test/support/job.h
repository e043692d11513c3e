#pragma once
// Test support for end-to-end jobs: generated data, waiting on a process's log, and the
// test AUC of a cpu-trainer --report file.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace fleetps::testing {

// The `hyper_parameters:` section of the small ctr_dnn the end-to-end jobs train on the
// generated data (26 slots x 8 + 13 dense features -> 64 -> 32 -> 2, Adam 0.002).
inline const std::string kSmallCtrDnnModel = R"(hyper_parameters:
  model_type: ctr_dnn
  optimizer: {class: Adam, learning_rate: 0.002}
  sparse_inputs_slots: 27
  sparse_feature_dim: 8
  dense_input_dim: 13
  fc_sizes: [64, 32]
)";

// Runs fleetps-datagen --out-dir DIR/data --seed 11 (plus `args`, e.g. --rows, --format);
// its output goes to DIR/datagen.log. False when it did not exit 0 within a minute.
bool GenerateData(const std::string& dir, const std::vector<std::string>& args);

// Waits until the file at `path` contains `text`; false after `timeout`.
bool WaitForLog(const std::string& path, const std::string& text, std::chrono::milliseconds timeout);

// The "test" AUC of a cpu-trainer --report file; NaN when it has none.
double ReportTestAuc(const std::string& report_path);
// The test AUC of the model output named `output` (the report's test "outputs" list); NaN
// when the report has none.
double ReportTestOutputAuc(const std::string& report_path, const std::string& output);

// Lines ('\n') in the files directly inside `dir` (a generated data split).
size_t CountDataLines(const std::string& dir);

}  // namespace fleetps::testing
