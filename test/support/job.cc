#include "test/support/job.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include "test/support/process.h"

namespace fleetps::testing {

bool GenerateData(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinaryPath("tools/datagen/fleetps-datagen"), "--out-dir", dir + "/data", "--seed",
                                   "11"};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess gen;
  return gen.Start(argv, {}, dir + "/datagen.log") && gen.Wait(std::chrono::seconds(60)) == 0;
}

bool WaitForLog(const std::string& path, const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ReadFile(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

double ReportTestAuc(const std::string& report_path) {
  const std::string text = ReadFile(report_path);
  const size_t test = text.find("\"test\": {");
  const size_t auc = test == std::string::npos ? test : text.find("\"auc\": ", test);
  if (auc == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  return std::stod(text.substr(auc + 7));
}

double ReportTestOutputAuc(const std::string& report_path, const std::string& output) {
  const std::string text = ReadFile(report_path);
  const size_t test = text.find("\"test\": {");
  const size_t name = test == std::string::npos ? test : text.find("{\"name\": \"" + output + "\"", test);
  const size_t auc = name == std::string::npos ? name : text.find("\"auc\": ", name);
  if (auc == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  return std::stod(text.substr(auc + 7));
}

size_t CountDataLines(const std::string& dir) {
  size_t lines = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string text = ReadFile(entry.path().string());
    lines += static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  }
  return lines;
}

}  // namespace fleetps::testing
