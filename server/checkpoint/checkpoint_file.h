#pragma once
// Checkpoint files (schemas/checkpoint.fbs): a 16-byte FileHeader, then blocks, each an
// 8-byte BlockHeader {length, crc32c} and `length` bytes of one FlatBuffer. This header
// is the only code that reads or writes those bytes; it also holds the filesystem helpers
// the checkpoint code needs (POSIX, errors as IOError naming the path).
//
// Every reader here opens only regular files: a path whose last component is a symbolic
// link, or that names a FIFO, a device, a socket or a directory, is refused with a
// Corruption naming it and what it is (fleetps writes regular files only; a FIFO or a link
// to /dev/zero would otherwise block the reader, or feed it without end). Opening never
// blocks (O_NONBLOCK), and a reader reads at most the size the file had when it was opened
// (or the size the caller expects): a file that grows meanwhile is not read further.
//
// Writers are not atomic by themselves: callers write under a temporary name and rename
// (checkpoint_dir.h). Thread-safety: a writer or reader belongs to one thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "common/status.h"
#include "schemas/checkpoint_generated.h"

namespace fleetps::server {

constexpr uint64_t kCheckpointMagic = 0x54504b4353504c46ull;  // "FLPSCKPT" little-endian
constexpr uint32_t kCheckpointFormatVersion = 1;
// Largest block a reader accepts: bounds the memory a corrupt length can ask for.
constexpr uint32_t kMaxBlockBytes = 1u << 30;

// A whole file's size and CRC-32C.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

class BlockFileWriter {
 public:
  // Creates (truncates) `path` and writes the header.
  static StatusOr<std::unique_ptr<BlockFileWriter>> Create(const std::string& path, disk::FileKind kind);
  ~BlockFileWriter();  // closes; a file not Finish()ed stays incomplete on disk
  BlockFileWriter(const BlockFileWriter&) = delete;
  BlockFileWriter& operator=(const BlockFileWriter&) = delete;

  // Appends one block; 0 < n <= kMaxBlockBytes.
  Status Append(const uint8_t* payload, size_t n);
  // Flushes, fsyncs and closes the file; returns its size and CRC.
  StatusOr<FileDigest> Finish();
  const std::string& path() const { return path_; }

 private:
  BlockFileWriter(std::string path, int fd);
  Status Write(const void* data, size_t n);
  Status Flush();

  const std::string path_;
  int fd_;
  std::vector<uint8_t> buffer_;
  FileDigest digest_;
};

class BlockFileReader {
 public:
  // Opens `path` (a regular file, see above) and checks its header (magic, version, kind);
  // Corruption otherwise. With `expected_bytes` (the manifest's size of a data file) a file
  // of another size is refused at once (Corruption naming both sizes), and the reader never
  // reads past that size.
  static StatusOr<std::unique_ptr<BlockFileReader>> Open(const std::string& path, disk::FileKind kind,
                                                         std::optional<uint64_t> expected_bytes = std::nullopt);
  ~BlockFileReader();
  BlockFileReader(const BlockFileReader&) = delete;
  BlockFileReader& operator=(const BlockFileReader&) = delete;

  // The next block's payload, CRC checked, 8-byte aligned and valid until the next call; an
  // empty span at the end of the file. Corruption on a bad CRC, a truncated block or an
  // impossible length.
  StatusOr<std::span<const uint8_t>> Next();
  // Size and CRC of the bytes read so far (the whole file once Next() returned empty).
  const FileDigest& digest() const { return digest_; }
  const std::string& path() const { return path_; }
  // The bytes this reader reads at most: the file's size when it was opened.
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  BlockFileReader(std::string path, int fd);
  // Reads exactly n bytes; false at a clean end (file_bytes_ reached) before any byte.
  StatusOr<bool> ReadExactly(void* out, size_t n);

  const std::string path_;
  int fd_;
  uint64_t file_bytes_ = 0;      // the file's size when opened: the reader's end of file
  std::vector<uint64_t> block_;  // aligned storage of the current payload
  FileDigest digest_;
};

// Reads `path` (a regular file) through and returns its size and CRC-32C. With
// `expected_bytes`, a file of another size is refused before any byte is read (Corruption
// naming the file and both sizes); at most the size at open is read either way.
StatusOr<FileDigest> DigestFile(const std::string& path, std::optional<uint64_t> expected_bytes = std::nullopt);

// A verified single-block FlatBuffer file (manifests, parts), owning its bytes.
class FlatBufferFile {
 public:
  // Reads the one block of `path` (a file of `kind`) and verifies it as a T.
  template <typename T>
  static StatusOr<FlatBufferFile> Read(const std::string& path, disk::FileKind kind);
  template <typename T>
  const T* root() const {
    return flatbuffers::GetRoot<T>(storage_.data());
  }

 private:
  static StatusOr<FlatBufferFile> ReadBlock(const std::string& path, disk::FileKind kind);
  std::vector<uint64_t> storage_;
  size_t size_ = 0;
};

template <typename T>
StatusOr<FlatBufferFile> FlatBufferFile::Read(const std::string& path, disk::FileKind kind) {
  ASSIGN_OR_RETURN(FlatBufferFile file, ReadBlock(path, kind));
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(file.storage_.data()), file.size_);
  if (!verifier.VerifyBuffer<T>(nullptr)) {
    return Status::Corruption(path + ": the block fails FlatBuffers verification");
  }
  return file;
}

// Writes `payload` as the one block of a `kind` file at `path`, atomically: written to
// path + ".tmp", fsynced, renamed over `path`, directory fsynced.
Status WriteFlatBufferFileAtomic(const std::string& path, disk::FileKind kind,
                                 const flatbuffers::DetachedBuffer& payload);

// Filesystem helpers.
Status MakeDirs(const std::string& dir);
Status SyncDir(const std::string& dir);
Status RenamePath(const std::string& from, const std::string& to);
Status RemoveAll(const std::string& path);
bool PathExists(const std::string& path);
// Writes a small file atomically (tmp, fsync, rename, fsync directory).
Status WriteSmallFileAtomic(const std::string& path, const std::string& contents);
// A regular file of at most 1 MiB, whole.
StatusOr<std::string> ReadSmallFile(const std::string& path);
// Names of the entries of `dir` (not . or ..).
StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

}  // namespace fleetps::server
