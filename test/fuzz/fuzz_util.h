#pragma once
// Helpers shared by the libFuzzer targets (docs/FUZZING.md): quiet logging, scratch
// directories, seed files, and the table set the service and checkpoint targets run on.
//
// Every target also writes its own seed corpus: when FLEETPS_FUZZ_SEEDS=DIR is set,
// LLVMFuzzerInitialize writes the seeds into DIR and exits (scripts/fuzz.sh does this
// before each run), so seeds always follow the current schemas and no corpus is committed.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/server_config.h"
#include "common/logging.h"
#include "common/status.h"

namespace fleetps::fuzz {

// Stops the run with a message: libFuzzer reports the abort as a crash and saves the input.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "FLEETPS FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Product logs off (a fuzzer produces millions of rejected inputs); FLEETPS_FUZZ_LOG=level
// turns them back on for a reproduction.
inline void QuietLogs() {
  LoggingOptions o;
  const char* level = std::getenv("FLEETPS_FUZZ_LOG");
  o.level = level != nullptr ? level : "off";
  o.name = "fuzz";
  if (!SetUpLogging(o).ok()) Fail("logging set-up failed");
}

// Scratch directories of this process, removed at exit.
inline std::vector<std::string>& ScratchDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

// A fresh directory under the system temp dir, unique to this process; removed at exit
// (a crashing run leaves it behind).
inline std::string ScratchDir(const std::string& name) {
  static const bool registered = [] {
    std::atexit([] {
      for (const auto& dir : ScratchDirs()) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    });
    return true;
  }();
  (void)registered;
  const std::string prefix = "fleetps_fuzz_" + name + "_";
  std::error_code ec;
  // Directories of earlier runs that crashed (their process is gone) are removed.
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
    const std::string base = e.path().filename().string();
    if (base.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(base.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
  }
  const auto dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  ScratchDirs().push_back(dir.string());
  return dir.string();
}

inline void WriteBytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) Fail("cannot write " + path);
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes seed files into the directory named by FLEETPS_FUZZ_SEEDS.
class SeedWriter {
 public:
  explicit SeedWriter(std::string dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }
  void Add(std::string_view bytes) {
    WriteBytes(dir_ + "/seed-" + std::to_string(count_++), bytes.data(), bytes.size());
  }
  void Add(const std::vector<uint8_t>& bytes) {
    Add(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  size_t count() const { return count_; }

 private:
  std::string dir_;
  size_t count_ = 0;
};

// When FLEETPS_FUZZ_SEEDS is set: runs `write` with a SeedWriter for that directory and
// exits. Call first thing in LLVMFuzzerInitialize.
template <typename F>
void MaybeWriteSeeds(const char* target, F write) {
  const char* dir = std::getenv("FLEETPS_FUZZ_SEEDS");
  if (dir == nullptr) return;
  SeedWriter seeds(dir);
  write(seeds);
  std::fprintf(stderr, "%s: wrote %zu seeds to %s\n", target, seeds.count(), dir);
  std::exit(0);
}

// Little-endian readers over the fuzz input that never read past its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();
    return static_cast<uint16_t>(lo | (U8() << 8));
  }
  uint32_t U32() {
    const uint32_t lo = U16();
    return lo | (static_cast<uint32_t>(U16()) << 16);
  }
  // The next n bytes (fewer at the end of the input).
  std::string_view Bytes(size_t n) {
    n = std::min(n, remaining());
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  std::string_view Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The tables the service and checkpoint targets run on: a sparse table with the CTR
// accessor, a plain sparse table and a dense table (ids 0, 1, 2), as a pserver config
// would declare them. `servers` > 1 makes this server 0 of a larger (absent) cluster, so
// half of all keys and half of the dense table belong elsewhere.
inline constexpr uint32_t kCtrTable = 0, kPlainTable = 1, kDenseTable = 2;
inline constexpr uint32_t kCtrDim = 8, kPlainDim = 4, kDenseSize = 64;

inline config::ServerOptions FuzzServerOptions(uint32_t servers, bool adam) {
  config::ServerOptions o;
  for (uint32_t s = 0; s < servers; ++s) o.endpoints.push_back({"127.0.0.1", static_cast<uint16_t>(18500 + s)});
  o.index = 0;
  o.bind_host = "127.0.0.1";
  o.io_threads = 1;
  o.shard_threads = 2;
  o.max_message_bytes = 1u << 20;
  o.max_inflight_bytes = 16u << 20;
  o.shuffle_buffer_bytes = 256u << 10;
  o.nonfinite_gradients = adam ? config::NonFinitePolicy::kSkip : config::NonFinitePolicy::kReject;
  o.source = "<fuzz>";

  TableOptions ctr;
  ctr.id = kCtrTable;
  ctr.name = "ctr_emb";
  ctr.dim = kCtrDim;
  ctr.shards = 3;
  ctr.optimizer.kind = OptimizerKind::kAdagrad;
  ctr.optimizer.learning_rate = 0.05f;
  ctr.optimizer.initial_accumulator = 0.1f;
  ctr.initializer.seed = 7;
  ctr.accessor.kind = AccessorKind::kCtr;
  ctr.accessor.embedx_threshold = 2.0f;

  TableOptions plain;
  plain.id = kPlainTable;
  plain.name = "plain_emb";
  plain.dim = kPlainDim;
  plain.shards = 2;
  plain.create_on_pull = true;
  plain.optimizer.kind = adam ? OptimizerKind::kAdam : OptimizerKind::kSgd;
  plain.optimizer.learning_rate = 0.1f;
  if (adam) {
    plain.optimizer.has_bounds = true;
    plain.optimizer.bound_min = -10.0f;
    plain.optimizer.bound_max = 10.0f;
  }
  plain.initializer.kind = InitializerKind::kGaussian;
  plain.initializer.seed = 3;

  TableOptions dense;
  dense.id = kDenseTable;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = kDenseSize;
  dense.optimizer.kind = adam ? OptimizerKind::kAdam : OptimizerKind::kAdagrad;
  dense.optimizer.learning_rate = 0.01f;
  dense.initializer.kind = InitializerKind::kUniform;

  o.tables = {ctr, plain, dense};
  return o;
}

}  // namespace fleetps::fuzz
