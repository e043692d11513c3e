#include "trainer/data/file_reader.h"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>
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

namespace {

// The lines of a data file, as std::getline splits them: a plain file, or one compressed
// with gzip (every member of a concatenation of them, as `zcat` reads it).
class LineSource {
 public:
  virtual ~LineSource() = default;
  // The next line into *line, without its '\n'; false at the end or on an error (status()).
  virtual bool Next(std::string* line) = 0;
  // What ended the lines early (IOError), else OK.
  virtual Status status() const = 0;
};

class PlainLines : public LineSource {
 public:
  explicit PlainLines(const std::string& path) : in_(path) {}
  bool is_open() const { return static_cast<bool>(in_); }
  bool Next(std::string* line) override { return static_cast<bool>(std::getline(in_, *line)); }
  Status status() const override { return in_.bad() ? Status::IOError("read error") : Status::OK(); }

 private:
  std::ifstream in_;
};

class GzipLines : public LineSource {
 public:
  explicit GzipLines(const std::string& path)
      : path_(path), file_(gzopen(path.c_str(), "rb")), buffer_(kBuffer) {
    if (file_ != nullptr) gzbuffer(file_, kBuffer);
  }
  ~GzipLines() override {
    if (file_ != nullptr) gzclose(file_);
  }
  GzipLines(const GzipLines&) = delete;
  GzipLines& operator=(const GzipLines&) = delete;
  bool is_open() const { return file_ != nullptr; }

  bool Next(std::string* line) override {
    line->clear();
    bool any = false;  // a last line without '\n' is a line
    while (true) {
      if (pos_ == end_) {
        const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
        int code = Z_OK;
        const char* message = n > 0 ? nullptr : gzerror(file_, &code);
        // Corrupt data (n < 0), or the file ends inside a gzip stream: gzread then ends the
        // data as at a clean end, and only gzerror's Z_BUF_ERROR tells.
        if (n < 0 || code == Z_BUF_ERROR) {
          std::string_view what = message;  // "path: what"
          if (what.starts_with(path_ + ": ")) what.remove_prefix(path_.size() + 2);
          error_ = Status::IOError("gzip: " + std::string(what) + " (a corrupt or truncated .gz file)");
          return false;
        }
        if (n == 0) return any;
        pos_ = 0;
        end_ = static_cast<size_t>(n);
      }
      any = true;
      const char* begin = buffer_.data() + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
      const size_t length = newline != nullptr ? static_cast<size_t>(newline - begin) : end_ - pos_;
      line->append(begin, length);
      pos_ += length;
      if (newline != nullptr) {
        ++pos_;
        return true;
      }
    }
  }
  Status status() const override { return error_; }

 private:
  static constexpr size_t kBuffer = size_t{1} << 17;
  const std::string path_;
  gzFile file_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;  // the unread bytes of buffer_
  Status error_;
};

// True when the file starts with gzip's magic bytes (1f 8b), whatever its name.
bool IsGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  return in.read(reinterpret_cast<char*>(magic), 2) && magic[0] == 0x1f && magic[1] == 0x8b;
}

StatusOr<std::unique_ptr<LineSource>> OpenLines(const std::string& path) {
  if (IsGzip(path)) {
    auto gz = std::make_unique<GzipLines>(path);
    if (!gz->is_open()) return Status::IOError(path + ": cannot open data file");
    return std::unique_ptr<LineSource>(std::move(gz));
  }
  auto plain = std::make_unique<PlainLines>(path);
  if (!plain->is_open()) return Status::IOError(path + ": cannot open data file");
  return std::unique_ptr<LineSource>(std::move(plain));
}

}  // namespace

FileReader::FileReader(const LineFormat& format, bool skip_bad_lines, ReadProgress* progress)
    : format_(format), skip_bad_lines_(skip_bad_lines), progress_(progress) {}

Status FileReader::ReadFile(const std::string& path, const Sink& sink) {
  ASSIGN_OR_RETURN(const std::unique_ptr<LineSource> lines, OpenLines(path));
  uint64_t line_no = 0;
  uint64_t examples = 0;
  while (lines->Next(&line_)) {
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
  RETURN_IF_ERROR(lines->status().WithContext(path + ":" + std::to_string(line_no + 1)));
  progress_->AddFile(examples);
  return Status::OK();
}

}  // namespace fleetps::data
