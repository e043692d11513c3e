#pragma once
// PassTable: the sparse rows of one GPU-PS pass (begin_pass .. end_pass), held in device
// memory and sharded by key over the pass's devices (FLAGS_selected_gpus).
//
// A pass: Build() with the full rows the pservers hold for the pass's keys (PullRows:
// weights, optimizer state, flags, show/click); then any number of batched Pull() (the
// weights of a batch's keys, each looked up on the device that owns it) and Push() (one
// step of the table's sparse optimizer per key, through the same RowAccessor::ApplyPush the
// pservers run, CTR statistics and lazy embedx extension included, so a pass gives exactly
// the rows direct pushes would); then Export() (or ExportRange()) the rows the pass touched, with the rows
// they started from, for WriteRows; then Clear().
//
// Two implementations, one interface: MakeHostPassTable, the host-memory twin (one shard
// per device, plain C++ under a mutex per shard: the worker threads stand for the devices'
// kernels), and MakeCudaPassTable (open addressing in device memory, batched insert / find /
// update kernels; heter_trainer/cuda). Both refuse a pass that does not fit the memory
// budget of a device before allocating anything, naming the keys and bytes it needs.
//
// Keys are routed to devices with DeviceOfKey; a device holds its keys' rows in the
// RowAccessor layout (server/accessor/row_accessor.h).
// Thread-safety: Pull and Push may be called concurrently. The lookups of one shard run at
// once; its updates run one at a time and never beside a lookup of it, which therefore sees
// each row whole. Build, Export and Clear are driver-thread calls with no Pull/Push running.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/table_options.h"
#include "common/config/trainer_config.h"
#include "common/sharding.h"
#include "common/status.h"

namespace fleetps::heter {

// The device of a pass table of `devices` shards that owns `key`: the high half of the key's
// mix (the pservers use it modulo their count, so a server's keys spread over every device).
constexpr uint32_t DeviceOfKey(uint64_t key, uint32_t devices) {
  return static_cast<uint32_t>((MixKey(key) >> 32) % devices);
}

struct PassTableOptions {
  // The sparse table as the pservers hold it: dim, optimizer, accessor, initializer.
  TableOptions table;
  uint32_t devices = 1;              // shards, one per device (>= 1)
  std::vector<int> device_ids;       // CUDA device per shard (empty: 0, 1, ...); host twin: names only
  uint64_t device_memory_bytes = 0;  // budget per device; 0 = no limit (CUDA: free memory less a reserve)
  config::CudaWait cuda_wait = config::CudaWait::kAuto;  // CUDA: how threads wait for each device
};

// The rows a pass touched, for WriteRows. Row k (core_floats() floats each) belongs to keys[k].
struct PassRows {
  std::vector<uint64_t> keys;
  std::vector<float> begin;       // the rows as pulled (extended as the pass extended them)
  std::vector<float> end;         // the rows the pass ended with
  std::vector<uint8_t> extended;  // CTR tables: 1 when the row ends the pass extended; empty otherwise
  std::vector<float> shows;       // shows and clicks counted during the pass
  std::vector<float> clicks;
};

class PassTable {
 public:
  virtual ~PassTable() = default;

  virtual std::string device_name() const = 0;  // "host" | "cuda"
  virtual uint32_t devices() const = 0;
  virtual uint32_t dim() const = 0;
  // Floats a row carries on the wire (PullRows / WriteRows): weights + optimizer state.
  virtual uint32_t core_floats() const = 0;
  // Keys in the current pass.
  virtual uint64_t size() const = 0;
  // Device bytes a pass puts on one device per key it owns there.
  virtual uint64_t BytesPerKey() const = 0;

  // InvalidArgument naming the keys and bytes when a pass of `keys` would not fit the
  // budget of the device that owns the most of them (Build checks the same).
  virtual Status CheckFits(std::span<const uint64_t> keys) const = 0;
  // Starts a pass with `keys` (distinct) and their rows as PullRows gives them: rows
  // keys.size() x core_floats(), flags one per key, stats keys.size() x 2 (show, click) or
  // empty. Replaces any earlier pass. InvalidArgument, with nothing kept, when the pass
  // does not fit a device's budget (naming the keys and bytes) or the spans disagree.
  virtual Status Build(std::span<const uint64_t> keys, std::span<const float> rows, std::span<const uint8_t> flags,
                       std::span<const float> stats) = 0;
  // out[k * dim(), ...) = the weights of keys[k]. NotFound naming a key that is not in the pass.
  virtual Status Pull(std::span<const uint64_t> keys, float* out) = 0;
  // For each k in order: one push of grads[k * dim(), ...) with shows[k] and clicks[k] (each
  // span empty or one per key) on keys[k]'s row; keys distinct. NotFound naming a key not in
  // the pass, InvalidArgument naming a key given twice; the pushes routed before it are then
  // applied (the keys of the devices before its own, and those before it on its own), the
  // others not.
  virtual Status Push(std::span<const uint64_t> keys, std::span<const float> grads, std::span<const float> shows,
                      std::span<const float> clicks) = 0;
  // The rows pushed at least once among rows [first, first + count) of this pass, rows
  // numbered by device, then by insertion (0 .. size()), in that order; end_pass exports a
  // pass in such ranges, each written back while the next is exported.
  virtual Status ExportRange(uint64_t first, uint64_t count, PassRows* out) const = 0;
  // Every row pushed at least once in this pass.
  Status Export(PassRows* out) const { return ExportRange(0, size(), out); }
  // Frees the pass.
  virtual void Clear() = 0;
};

// The host-memory twin. InvalidArgument naming the field for a bad table.
StatusOr<std::unique_ptr<PassTable>> MakeHostPassTable(const PassTableOptions& options);
// The CUDA table (heter_trainer/cuda); in a build without CUDA, or without a usable GPU,
// Unavailable saying so and how to run on the host twin.
StatusOr<std::unique_ptr<PassTable>> MakeCudaPassTable(const PassTableOptions& options);

// Device-to-device copy bandwidth of CUDA device `device` in GB/s (bytes read + written per
// second, as a copy kernel's roofline for the table's gathers and updates); Unavailable
// without CUDA or a GPU. For benchmarks.
StatusOr<double> MeasureDeviceCopyGBps(int device);

}  // namespace fleetps::heter
