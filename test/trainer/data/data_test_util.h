#pragma once
// Helpers for the fleetps::data tests: paths of the PaddleRec samples, a scratch
// directory, and option sets for the three formats.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/check.h"
#include "common/config/data_config.h"
#include "common/config/yaml_util.h"
#include "trainer/data/batch.h"
#include "trainer/data/line_format.h"

namespace fleetps::data::testing {

inline const std::string kPaddleRecDir = FLEETPS_SOURCE_DIR "/../shared/data/paddlerec";
inline const std::string kRankDnnSample = kPaddleRecDir + "/rank_dnn/data/sample_data/train/sample_train.txt";
inline const std::string kSlotDnnSample = kPaddleRecDir + "/slot_dnn/data/demo_10";

// The lines of `path`; a missing file (the PaddleRec samples come from ../shared beside
// the checkout) stops the test binary with its path rather than failing on an empty vector.
inline std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  FLEETPS_CHECK(in.is_open()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    // pid + this: unique among live TempDirs of all test processes.
    path_ = std::filesystem::temp_directory_path() / ("fleetps_data_test_" + std::to_string(::getpid()) + "_" +
                                                      std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }

  // Writes `lines` (each followed by '\n') to path()/name and returns the file's path.
  std::string Write(const std::string& name, const std::vector<std::string>& lines) const {
    const auto file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file);
    for (const auto& line : lines) out << line << '\n';
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// Options from a YAML `data:` section (e.g. "data_format: slot_dnn"); aborts the test on
// an error, since these texts are fixed.
inline config::DataOptions OptionsFromYaml(const std::string& yaml) {
  auto node = config::LoadYamlString(yaml);
  FLEETPS_CHECK(node.ok()) << node.status().ToString();
  config::DataOptions options;
  const Status status = config::ParseDataOptions(*node, config::YamlContext{"<test>", "data"}, &options);
  FLEETPS_CHECK(status.ok()) << status.ToString();
  return options;
}

// PaddleRec defaults of each format.
inline std::vector<std::string> NumberedNames(int first, int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(std::to_string(first + i));
  return names;
}

inline config::DataOptions RankDnnOptions() { return OptionsFromYaml("data_format: rank_dnn"); }
inline config::DataOptions MultiSlotOptions() { return OptionsFromYaml("data_format: multislot"); }
inline config::DataOptions SlotDnnOptions() { return OptionsFromYaml("data_format: slot_dnn"); }
// rank_dnn with two label slots, click and conversion.
inline config::DataOptions TwoLabelOptions() { return OptionsFromYaml("label_slots: [click, conversion]"); }

// The labels WriteNumberedRankDnnFiles gives row `row`: label l is 1 when row % (3 * 2^l)
// == 0 (click every third row, a conversion on every other click, ...).
inline float NumberedLabel(uint64_t row, size_t l) { return row % (uint64_t{3} << l) == 0 ? 1.0f : 0.0f; }

// Writes `num_files` rank_dnn files of `rows_per_file` lines to dir/name_<k>.txt. Row i
// (counted across files) has id i in slot "1" (a unique key), labels NumberedLabel(i, l)
// (one per label slot of `options`, rank_dnn) and dense values i * 0.5 + j; the other
// slots hold i % 97. Returns the paths in order.
inline std::vector<std::string> WriteNumberedRankDnnFiles(const TempDir& dir, const std::string& name, int num_files,
                                                          int rows_per_file,
                                                          const config::DataOptions& options = RankDnnOptions()) {
  const auto format = MakeLineFormat(options);
  std::vector<std::string> paths;
  Example ex;
  uint64_t row = 0;
  for (int f = 0; f < num_files; ++f) {
    std::vector<std::string> lines;
    for (int r = 0; r < rows_per_file; ++r, ++row) {
      ex.Reset(options.sparse_slots.size(), options.num_labels());
      for (size_t l = 0; l < ex.labels.size(); ++l) ex.labels[l] = NumberedLabel(row, l);
      for (uint32_t j = 0; j < options.dense_dim; ++j) ex.dense.push_back(static_cast<float>(row) * 0.5f + j);
      ex.slots[0].push_back(row);
      for (size_t s = 1; s < ex.slots.size(); ++s) ex.slots[s].push_back(row % 97);
      format->Write(ex, &lines.emplace_back());
    }
    paths.push_back(dir.Write(name + "_" + std::to_string(f) + ".txt", lines));
  }
  return paths;
}

// The slot-0 id of every row of `batch`, appended to *keys.
inline void AppendKeys(const Batch& batch, std::vector<uint64_t>* keys) {
  for (size_t r = 0; r < batch.size(); ++r) keys->push_back(batch.Ids(0, r)[0]);
}

// Whether every row of a batch of WriteNumberedRankDnnFiles rows has its row's labels
// (its key is the row).
inline bool HasNumberedLabels(const Batch& batch) {
  for (size_t r = 0; r < batch.size(); ++r) {
    const auto labels = batch.Labels(r);
    for (size_t l = 0; l < labels.size(); ++l) {
      if (labels[l] != NumberedLabel(batch.Ids(0, r)[0], l)) return false;
    }
  }
  return true;
}

}  // namespace fleetps::data::testing
