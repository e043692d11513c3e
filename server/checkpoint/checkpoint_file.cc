#include "server/checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "server/checkpoint/crc32c.h"

namespace fleetps::server {
namespace {

static_assert(sizeof(disk::FileHeader) == 16, "FileHeader is 16 bytes on disk");
static_assert(sizeof(disk::BlockHeader) == 8, "BlockHeader is 8 bytes on disk");

constexpr size_t kWriteBuffer = 1u << 20;

Status Errno(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

const char* KindName(disk::FileKind kind) { return disk::EnumNameFileKind(kind); }

// A file descriptor, closed when this goes.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

// Opens `path` for reading when it is a regular file (header comment): O_NOFOLLOW refuses a
// symbolic link as the last component, O_NONBLOCK keeps the open of a FIFO from waiting for
// a writer, and fstat of the opened descriptor (no window for a swap between a check and the
// open) refuses every other kind. Sets *size to the file's size.
StatusOr<UniqueFd> OpenRegularFile(const std::string& path, uint64_t* size, const char* missing_hint) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file" + missing_hint);
    if (errno == ELOOP) {
      return Status::Corruption(path +
                                " is a symbolic link; checkpoint files must be regular files (fleetps "
                                "never writes links: copy the file itself into the checkpoint)");
    }
    return Errno("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return Status::Corruption(path + " is " + FileTypeName(st.st_mode) +
                              ", not a regular file; refused (checkpoint files are regular files, and reading "
                              "this one could block or never end)");
  }
  // Linux ignores O_NONBLOCK for regular files; cleared all the same, for filesystems that do not.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) return Errno("cannot set the flags of", path);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

constexpr char kIncompleteHint[] = " (is the checkpoint complete?)";

// Corruption when a file's size is not the one its manifest records.
Status CheckSize(const std::string& path, uint64_t actual, std::optional<uint64_t> expected) {
  if (!expected || actual == *expected) return Status::OK();
  return Status::Corruption(path + ": " + std::to_string(actual) + " bytes, the manifest says " +
                            std::to_string(*expected) + " (truncated or replaced file)");
}

}  // namespace

// ---- BlockFileWriter ----------------------------------------------------------------

BlockFileWriter::BlockFileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
  buffer_.reserve(kWriteBuffer);
}

BlockFileWriter::~BlockFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<BlockFileWriter>> BlockFileWriter::Create(const std::string& path, disk::FileKind kind) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  std::unique_ptr<BlockFileWriter> writer(new BlockFileWriter(path, fd));
  const disk::FileHeader header(kCheckpointMagic, kCheckpointFormatVersion, kind);
  RETURN_IF_ERROR(writer->Write(&header, sizeof(header)));
  return writer;
}

Status BlockFileWriter::Write(const void* data, size_t n) {
  digest_.crc32c = Crc32cExtend(digest_.crc32c, data, n);
  digest_.bytes += n;
  const auto* p = static_cast<const uint8_t*>(data);
  if (buffer_.size() + n > kWriteBuffer) RETURN_IF_ERROR(Flush());
  if (n >= kWriteBuffer) {  // large payloads skip the buffer
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Errno("cannot write", path_);
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }
  buffer_.insert(buffer_.end(), p, p + n);
  return Status::OK();
}

Status BlockFileWriter::Flush() {
  const uint8_t* p = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno("cannot write", path_);
    p += w;
    n -= static_cast<size_t>(w);
  }
  buffer_.clear();
  return Status::OK();
}

Status BlockFileWriter::Append(const uint8_t* payload, size_t n) {
  if (fd_ < 0) return Status::Internal(path_ + ": append after Finish");
  if (n == 0 || n > kMaxBlockBytes) {
    return Status::InvalidArgument(path_ + ": block of " + std::to_string(n) + " bytes (must be in [1, 2^30])");
  }
  const disk::BlockHeader header(static_cast<uint32_t>(n), Crc32c(payload, n));
  RETURN_IF_ERROR(Write(&header, sizeof(header)));
  return Write(payload, n);
}

StatusOr<FileDigest> BlockFileWriter::Finish() {
  if (fd_ < 0) return Status::Internal(path_ + ": Finish twice");
  RETURN_IF_ERROR(Flush());
  if (::fsync(fd_) != 0) return Errno("cannot fsync", path_);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Errno("cannot close", path_);
  return digest_;
}

// ---- BlockFileReader ----------------------------------------------------------------

BlockFileReader::BlockFileReader(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

BlockFileReader::~BlockFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<BlockFileReader>> BlockFileReader::Open(const std::string& path, disk::FileKind kind,
                                                                 std::optional<uint64_t> expected_bytes) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, &size, kIncompleteHint));
  RETURN_IF_ERROR(CheckSize(path, size, expected_bytes));
  std::unique_ptr<BlockFileReader> reader(new BlockFileReader(path, fd.release()));
  reader->file_bytes_ = size;
  disk::FileHeader header;
  ASSIGN_OR_RETURN(bool got, reader->ReadExactly(&header, sizeof(header)));
  if (!got)
    return Status::Corruption(path + ": empty file (expected a fleetps checkpoint " + KindName(kind) + " file)");
  if (header.magic() != kCheckpointMagic) {
    return Status::Corruption(path + ": not a fleetps checkpoint file (bad magic)");
  }
  if (header.format_version() != kCheckpointFormatVersion) {
    return Status::Corruption(path + ": checkpoint format version " + std::to_string(header.format_version()) +
                              ", this build reads version " + std::to_string(kCheckpointFormatVersion));
  }
  if (header.kind() != kind) {
    return Status::Corruption(path + ": a " + KindName(header.kind()) + " file where a " + KindName(kind) +
                              " file was expected");
  }
  return reader;
}

StatusOr<bool> BlockFileReader::ReadExactly(void* out, size_t n) {
  // The end is file_bytes_, whatever follows it now.
  if (digest_.bytes == file_bytes_ && n > 0) return false;
  if (n > file_bytes_ - digest_.bytes) {
    return Status::Corruption(path_ + ": truncated at byte " + std::to_string(file_bytes_) + " (" + std::to_string(n) +
                              " bytes expected at byte " + std::to_string(digest_.bytes) + ")");
  }
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("cannot read", path_);
    if (r == 0) {
      if (got == 0) return false;
      return Status::Corruption(path_ + ": truncated at byte " + std::to_string(digest_.bytes + got));
    }
    got += static_cast<size_t>(r);
  }
  digest_.crc32c = Crc32cExtend(digest_.crc32c, out, n);
  digest_.bytes += n;
  return true;
}

StatusOr<std::span<const uint8_t>> BlockFileReader::Next() {
  disk::BlockHeader header;
  const uint64_t at = digest_.bytes;
  ASSIGN_OR_RETURN(bool got, ReadExactly(&header, sizeof(header)));
  if (!got) return std::span<const uint8_t>();
  const uint32_t n = header.length();
  if (n == 0 || n > kMaxBlockBytes) {
    return Status::Corruption(path_ + ": block at byte " + std::to_string(at) + " claims " + std::to_string(n) +
                              " bytes");
  }
  // Checked before allocating: a corrupt length must not make the reader reserve up to
  // kMaxBlockBytes for a file that cannot hold them.
  const uint64_t left = file_bytes_ > digest_.bytes ? file_bytes_ - digest_.bytes : 0;
  if (n > left) {
    return Status::Corruption(path_ + ": block at byte " + std::to_string(at) + " claims " + std::to_string(n) +
                              " bytes but only " + std::to_string(left) + " follow (truncated or corrupt file)");
  }
  block_.resize((n + 7) / 8);
  ASSIGN_OR_RETURN(bool full, ReadExactly(block_.data(), n));
  if (!full) return Status::Corruption(path_ + ": truncated block at byte " + std::to_string(at));
  const uint32_t crc = Crc32c(block_.data(), n);
  if (crc != header.crc32c()) {
    return Status::Corruption(path_ + ": checksum mismatch in the block at byte " + std::to_string(at) + " (stored " +
                              std::to_string(header.crc32c()) + ", computed " + std::to_string(crc) + ")");
  }
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(block_.data()), n);
}

StatusOr<FileDigest> DigestFile(const std::string& path, std::optional<uint64_t> expected_bytes) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, &size, kIncompleteHint));
  RETURN_IF_ERROR(CheckSize(path, size, expected_bytes));
  std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(size, 4u << 20)));
  FileDigest digest;
  while (digest.bytes < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - digest.bytes));
    const ssize_t r = ::read(fd.get(), buffer.data(), want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("cannot read", path);
    if (r == 0) {
      return Status::Corruption(path + ": truncated while it was read, at byte " + std::to_string(digest.bytes) +
                                " of " + std::to_string(size));
    }
    digest.crc32c = Crc32cExtend(digest.crc32c, buffer.data(), static_cast<size_t>(r));
    digest.bytes += static_cast<uint64_t>(r);
  }
  return digest;
}

// ---- FlatBufferFile -----------------------------------------------------------------

StatusOr<FlatBufferFile> FlatBufferFile::ReadBlock(const std::string& path, disk::FileKind kind) {
  ASSIGN_OR_RETURN(auto reader, BlockFileReader::Open(path, kind));
  ASSIGN_OR_RETURN(std::span<const uint8_t> block, reader->Next());
  if (block.empty()) return Status::Corruption(path + ": no block after the header");
  FlatBufferFile file;
  file.size_ = block.size();
  file.storage_.resize((block.size() + 7) / 8);
  std::memcpy(file.storage_.data(), block.data(), block.size());
  ASSIGN_OR_RETURN(std::span<const uint8_t> extra, reader->Next());
  if (!extra.empty()) return Status::Corruption(path + ": unexpected data after its block");
  return file;
}

Status WriteFlatBufferFileAtomic(const std::string& path, disk::FileKind kind,
                                 const flatbuffers::DetachedBuffer& payload) {
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(auto writer, BlockFileWriter::Create(tmp, kind));
  RETURN_IF_ERROR(writer->Append(payload.data(), payload.size()));
  RETURN_IF_ERROR(writer->Finish().status());
  RETURN_IF_ERROR(RenamePath(tmp, path));
  return SyncDir(std::filesystem::path(path).parent_path().string());
}

// ---- filesystem helpers -------------------------------------------------------------

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create directory " + dir + ": " + ec.message());
  return Status::OK();
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return Status::OK();
}

Status RenamePath(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return Errno("cannot rename " + from + " to", to);
  return Status::OK();
}

Status RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
  return Status::OK();
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status WriteSmallFileAtomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t w = ::write(fd, contents.data() + done, contents.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      Status st = Errno("cannot write", tmp);
      ::close(fd);
      return st;
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    Status st = Errno("cannot fsync", tmp);
    ::close(fd);
    return st;
  }
  if (::close(fd) != 0) return Errno("cannot close", tmp);
  RETURN_IF_ERROR(RenamePath(tmp, path));
  return SyncDir(std::filesystem::path(path).parent_path().string());
}

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, &size, ""));
  constexpr size_t kMaxBytes = 1u << 20;
  if (size > kMaxBytes) return Status::Corruption(path + ": larger than 1 MiB");
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t r = ::read(fd.get(), buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("cannot read", path);
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > kMaxBytes) return Status::Corruption(path + ": larger than 1 MiB");
  }
  return out;
}

StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  return names;
}

}  // namespace fleetps::server
