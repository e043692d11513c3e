#include "trainer/data/file_reader.h"

#include <zlib.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
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
// one is a line). Its bytes are read(2) from its descriptor: as they are, or, when they
// start with gzip's magic bytes (1f 8b, whatever the file's name), inflated (every member of
// a concatenation, as zcat). Told apart from the first bytes read, so a pipe loses none.
// Truncated or corrupt gzip data, and data after the last member that is not another
// member, are errors: nothing is dropped quietly (zcat warns of such "trailing garbage").
class DataFile {
 public:
  // A longer line ends the read (a file that is not line data, or a gzip bomb).
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  explicit DataFile(int fd) : fd_(fd) {}
  ~DataFile() {
    if (inflating_) inflateEnd(&stream_);
    ::close(fd_);
  }
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  // The next line into *line, without its '\n'; false at the end or on an error (status()).
  bool Next(std::string* line);
  // What ended the lines early, else OK.
  const Status& status() const { return error_; }

 private:
  // Up to n bytes of the file's data (inflated when gzip) into buf: how many, 0 at its end.
  StatusOr<size_t> Read(char* buf, size_t n) {
    if (!started_) {
      started_ = true;
      // Enough bytes to tell gzip from text (fewer only at the end of the file).
      while (in_end_ < 2 && !eof_) RETURN_IF_ERROR(Fill());
      if (IsMember()) {
        if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) return Status::Internal("gzip: inflateInit2 failed");
        inflating_ = true;
      }
    }
    return inflating_ ? Inflate(buf, n) : Copy(buf, n);
  }

  static constexpr size_t kInput = size_t{1} << 17;

  // Up to n bytes of the file into `to`: how many, 0 at its end (then eof_).
  StatusOr<size_t> ReadFd(char* to, size_t n) {
    if (n == 0) return size_t{0};
    while (true) {
      const ssize_t got = ::read(fd_, to, n);
      if (got >= 0) {
        eof_ = got == 0;
        return static_cast<size_t>(got);
      }
      if (errno != EINTR) return Status::IOError(std::string("read error: ") + std::strerror(errno));
    }
  }

  // More raw bytes after the unread ones, moved to the front of in_.
  Status Fill() {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
    ASSIGN_OR_RETURN(const size_t got, ReadFd(in_.data() + in_end_, in_.size() - in_end_));
    in_end_ += got;
    return Status::OK();
  }

  // Whether the unread bytes start a gzip member.
  bool IsMember() const {
    return in_end_ - in_pos_ >= 2 && static_cast<unsigned char>(in_[in_pos_]) == 0x1f &&
           static_cast<unsigned char>(in_[in_pos_ + 1]) == 0x8b;
  }

  // Plain data: the bytes read while telling it from gzip, then straight from the file.
  StatusOr<size_t> Copy(char* buf, size_t n) {
    if (in_pos_ == in_end_) return eof_ ? size_t{0} : ReadFd(buf, n);
    const size_t m = std::min(n, in_end_ - in_pos_);
    std::memcpy(buf, in_.data() + in_pos_, m);
    in_pos_ += m;
    return m;
  }

  StatusOr<size_t> Inflate(char* buf, size_t n) {
    while (true) {
      if (in_pos_ == in_end_ && !eof_) RETURN_IF_ERROR(Fill());
      if (member_ended_) {
        if (in_pos_ == in_end_) return size_t{0};  // the file ends after a whole member
        if (in_end_ - in_pos_ < 2 && !eof_) {
          RETURN_IF_ERROR(Fill());
          continue;
        }
        if (!IsMember()) {
          return Status::InvalidArgument(
              "gzip: the bytes after the last compressed member are not gzip (trailing data, which zcat "
              "would warn of and drop)");
        }
        inflateReset(&stream_);
        member_ended_ = false;
      }
      stream_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
      stream_.avail_in = static_cast<uInt>(in_end_ - in_pos_);
      stream_.next_out = reinterpret_cast<Bytef*>(buf);
      stream_.avail_out = static_cast<uInt>(n);
      const int ret = inflate(&stream_, Z_NO_FLUSH);
      in_pos_ = in_end_ - stream_.avail_in;
      const size_t produced = n - stream_.avail_out;
      if (ret == Z_STREAM_END) {
        member_ended_ = true;
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        return Status::IOError(std::string("gzip: ") + (stream_.msg != nullptr ? stream_.msg : "inflate failed") +
                               " (a corrupt .gz file)");
      } else if (produced == 0 && in_pos_ == in_end_ && eof_) {
        return Status::IOError("gzip: unexpected end of file (a truncated .gz file)");
      }
      if (produced > 0) return produced;
    }
  }

  const int fd_;
  std::vector<char> buffer_ = std::vector<char>(size_t{1} << 17);  // Next's: the file's data
  size_t pos_ = 0, end_ = 0;                                       // its unread bytes
  Status error_;
  std::vector<char> in_ = std::vector<char>(kInput);
  size_t in_pos_ = 0, in_end_ = 0;  // the unread raw bytes of in_
  bool eof_ = false;
  bool started_ = false;
  bool inflating_ = false;     // gzip data, stream_ initialised
  bool member_ended_ = false;  // stream_ ended a member: the next bytes must start another
  z_stream stream_{};
};

bool DataFile::Next(std::string* line) {
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

StatusOr<std::unique_ptr<DataFile>> OpenDataFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": cannot open data file: " + std::strerror(errno));
  return std::make_unique<DataFile>(fd);
}

}  // namespace

FileReader::FileReader(const LineFormat& format, bool skip_bad_lines, ReadProgress* progress)
    : format_(format), skip_bad_lines_(skip_bad_lines), progress_(progress) {}

Status FileReader::ReadFile(const std::string& path, const Sink& sink) {
  ASSIGN_OR_RETURN(const std::unique_ptr<DataFile> lines, OpenDataFile(path));
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
