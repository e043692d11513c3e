#include "trainer/data/file_reader.h"

#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

// The lines of a data file, split at '\n' as std::getline splits them (a last line without
// one is a line), from its bytes: a plain file, or a gzip one (every member of a
// concatenation, as zcat reads it).
class LineReader {
 public:
  // A longer line ends the read (a file that is not line data, or a gzip bomb).
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  virtual ~LineReader() = default;
  // The next line into *line, without its '\n'; false at the end or on an error (status()).
  bool Next(std::string* line);
  // What ended the lines early, else OK.
  const Status& status() const { return error_; }

 protected:
  // Up to n bytes of the file into buf: how many, 0 at its end.
  virtual StatusOr<size_t> Read(char* buf, size_t n) = 0;

 private:
  std::vector<char> buffer_ = std::vector<char>(size_t{1} << 17);
  size_t pos_ = 0, end_ = 0;  // the unread bytes of buffer_
  Status error_;
};

bool LineReader::Next(std::string* line) {
  line->clear();
  bool any = false;
  while (true) {
    if (pos_ == end_) {
      StatusOr<size_t> n = Read(buffer_.data(), buffer_.size());
      if (!n.ok()) {
        error_ = n.status();
        return false;
      }
      if (*n == 0) return any;
      pos_ = 0;
      end_ = *n;
    }
    any = true;
    const char* begin = buffer_.data() + pos_;
    const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
    const size_t length = newline != nullptr ? static_cast<size_t>(newline - begin) : end_ - pos_;
    line->append(begin, length);
    pos_ += length;
    if (line->size() > kMaxLineBytes) {
      error_ = Status::InvalidArgument("a line longer than " + std::to_string(kMaxLineBytes >> 20) +
                                       " MiB: not a data file of this format");
      return false;
    }
    if (newline != nullptr) {
      ++pos_;
      return true;
    }
  }
}

// A plain file, read(2) from its descriptor.
class PlainFile : public LineReader {
 public:
  explicit PlainFile(int fd) : fd_(fd) {}
  ~PlainFile() override { ::close(fd_); }
  PlainFile(const PlainFile&) = delete;
  PlainFile& operator=(const PlainFile&) = delete;

 protected:
  StatusOr<size_t> Read(char* buf, size_t n) override {
    while (true) {
      const ssize_t got = ::read(fd_, buf, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return Status::IOError(std::string("read error: ") + std::strerror(errno));
    }
  }

 private:
  const int fd_;
};

// A file read through zlib: gzip data decompressed (every member of a concatenation, as
// zcat), other data as it is.
class ZlibFile : public LineReader {
 public:
  explicit ZlibFile(gzFile file) : file_(file) { gzbuffer(file_, size_t{1} << 17); }
  ~ZlibFile() override { gzclose(file_); }
  ZlibFile(const ZlibFile&) = delete;
  ZlibFile& operator=(const ZlibFile&) = delete;

 protected:
  StatusOr<size_t> Read(char* buf, size_t n) override {
    const int got = gzread(file_, buf, static_cast<unsigned>(n));
    if (got > 0) return static_cast<size_t>(got);
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    // Corrupt data (got < 0), or the file ends inside a gzip stream: gzread then ends the
    // data as at a clean end, and only gzerror's Z_BUF_ERROR tells.
    if (got < 0 || code == Z_BUF_ERROR) {
      std::string_view what = message;  // "<fd:N>: what"
      if (const size_t colon = what.find(": "); colon != std::string_view::npos) what.remove_prefix(colon + 2);
      return Status::IOError("gzip: " + std::string(what) + " (a corrupt or truncated .gz file)");
    }
    return size_t{0};
  }

 private:
  gzFile file_;
};

// Opens `path` for its lines. A regular file that starts with gzip's magic bytes (1f 8b),
// whatever its name, goes through zlib, any other regular file is read as it is; a stream
// that cannot be peeked at without consuming it (a pipe, `<(zcat ...)`) goes through zlib,
// which tells gzip from text itself and passes text through.
StatusOr<std::unique_ptr<LineReader>> OpenLines(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": cannot open data file: " + std::strerror(errno));
  struct stat st {};
  unsigned char magic[2] = {0, 0};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool gzip = regular && ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (regular && !gzip) return std::unique_ptr<LineReader>(std::make_unique<PlainFile>(fd));
  gzFile file = gzdopen(fd, "rb");
  if (file == nullptr) {
    ::close(fd);
    return Status::IOError(path + ": cannot open data file (zlib)");
  }
  return std::unique_ptr<LineReader>(std::make_unique<ZlibFile>(file));
}

}  // namespace

FileReader::FileReader(const LineFormat& format, bool skip_bad_lines, ReadProgress* progress)
    : format_(format), skip_bad_lines_(skip_bad_lines), progress_(progress) {}

Status FileReader::ReadFile(const std::string& path, const Sink& sink) {
  ASSIGN_OR_RETURN(const std::unique_ptr<LineReader> lines, OpenLines(path));
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
