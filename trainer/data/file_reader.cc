#include "trainer/data/file_reader.h"

#include <fstream>
#include <utility>

#include <spdlog/spdlog.h>


namespace fleetps::data {

void ReadProgress::AddFile(uint64_t examples) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.files;
  stats_.examples += examples;
}

void ReadProgress::AddBadLine(const Status& error) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.bad_lines;
  if (stats_.first_bad_lines.size() < kLoggedBadLines) {
    stats_.first_bad_lines.push_back(error.message());
    spdlog::warn("skipping bad data line: {}", error.message());
  }
}

ReadStats ReadProgress::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ReadProgress::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = ReadStats{};
}

FileReader::FileReader(const LineFormat& format, bool skip_bad_lines, ReadProgress* progress)
    : format_(format), skip_bad_lines_(skip_bad_lines), progress_(progress) {}

Status FileReader::ReadFile(const std::string& path, const Sink& sink) {
  std::ifstream in(path);
  if (!in) return Status::IOError(path + ": cannot open data file");
  uint64_t line_no = 0;
  uint64_t examples = 0;
  while (std::getline(in, line_)) {
    ++line_no;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.find_first_not_of(" \t") == std::string::npos) continue;
    Status status = format_.Parse(line_, &example_);
    if (!status.ok()) {
      status = status.WithContext(path + ":" + std::to_string(line_no));
      if (!skip_bad_lines_) return status;
      progress_->AddBadLine(status);
      continue;
    }
    RETURN_IF_ERROR(sink(example_));
    ++examples;
  }
  if (in.bad()) return Status::IOError(path + ":" + std::to_string(line_no + 1) + ": read error");
  progress_->AddFile(examples);
  return Status::OK();
}

}  // namespace fleetps::data
