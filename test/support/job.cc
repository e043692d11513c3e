#include "test/support/job.h"

#include <cmath>
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

}  // namespace fleetps::testing
