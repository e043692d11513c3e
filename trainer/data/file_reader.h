#pragma once
// FileReader: turns data files into Examples with a LineFormat — the part QueueDataset and
// InMemoryDataset share. ReadProgress: the counters of one load or pass, shared by its
// reader threads.

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/batch.h"
#include "trainer/data/line_format.h"

namespace fleetps::data {

struct ReadStats {
  uint64_t files = 0;                        // files read to the end
  uint64_t examples = 0;                     // lines parsed into examples
  uint64_t bad_lines = 0;                    // malformed lines skipped (skip_bad_lines)
  std::vector<std::string> first_bad_lines;  // "file:line: reason" of the first few skipped
};

// Thread-safe accumulator of ReadStats. Logs each of the first kLoggedBadLines skipped
// lines as a warning; later ones are only counted.
class ReadProgress {
 public:
  static constexpr size_t kLoggedBadLines = 5;

  void AddFile(uint64_t examples);
  // `error` is the line's error, already prefixed with "file:line: ".
  void AddBadLine(const Status& error);
  ReadStats Snapshot() const;
  void Reset();

 private:
  mutable std::mutex mu_;
  ReadStats stats_;  // guarded by mu_
};

// Reads data files line by line and hands each parsed example to a sink. One reader per
// thread (not thread-safe); `format` and `progress` must outlive it (the dataset owns them).
class FileReader {
 public:
  // Takes one example (valid during the call only); a non-OK Status (e.g. the pass was
  // cancelled) stops the read and is returned by ReadFile.
  using Sink = std::function<Status(const Example&)>;

  FileReader(const LineFormat& format, bool skip_bad_lines, ReadProgress* progress);

  // Parses every non-blank line of `path` (a trailing '\r' is dropped); a file that starts
  // with gzip's magic bytes is decompressed as it is read (all its members, as zcat; Paddle's
  // readers take .gz files alike), also from a pipe. A malformed line is skipped and
  // recorded in the progress when skip_bad_lines, otherwise it ends the read with
  // InvalidArgument "path:line: reason". IOError names an unreadable file, and a corrupt or
  // truncated gzip file with the line where its data ends; bytes after the last gzip member
  // that are not another member are an error too (zcat drops them with a warning).
  Status ReadFile(const std::string& path, const Sink& sink);

 private:
  const LineFormat& format_;
  const bool skip_bad_lines_;
  ReadProgress* const progress_;
  Example example_;   // reused parse target
  std::string line_;  // reused line buffer
};

}  // namespace fleetps::data
