#pragma once
// DenseDevice: where a heter-trainer runs the dense part of a model (model::DenseNet) —
// the CPU (the BLAS code cpu-trainer uses) or one CUDA GPU (cuBLAS GEMMs and fused
// kernels). Both compute the same thing: forward, the loss, and backward of the mean loss
// over a micro-batch, with the parameter layout of model::DenseNet.
//
// A device hands out lanes. A lane is one independent stream of work: its own scratch
// buffers (on a GPU: a CUDA stream, a cuBLAS handle, device buffers and pinned host
// staging buffers), so that several lanes driven by several threads overlap — on a GPU
// the copy of one lane's micro-batch to the device runs while another lane computes.
//
// Thread-safety: NewLane() is thread-safe; a lane is used by one thread at a time.
// Errors are values: every CUDA or cuBLAS failure becomes a Status naming the call and
// the error string; nothing here aborts on a device error.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "trainer/model/dense_net.h"

namespace fleetps::heter {

namespace model = ::fleetps::trainer::model;

enum class DeviceType : uint8_t { kCpu = 0, kGpu = 1 };
std::string_view DeviceTypeName(DeviceType type);
// "cpu" | "gpu"; false for anything else.
bool DeviceTypeFromName(std::string_view name, DeviceType* type);

// One micro-batch step's outputs, in caller memory (host).
struct DenseStepOutput {
  std::span<float> predictions;       // [batch x outputs]: each output's probability per example
  std::span<float> activation_grads;  // [batch x in_dim]: d(mean loss)/d(activations); empty = not wanted
  std::span<float> param_grads;       // [num_params]: d(mean loss)/d(params); empty = forward only
  // When set, a GPU lane writes the step's time on the device between its input copy and its
  // output copy (the GEMMs and kernels alone), in ms; the CPU lane leaves it alone.
  float* device_ms = nullptr;
};

class DenseLane {
 public:
  virtual ~DenseLane() = default;

  // Makes `params` (num_params floats, DenseNet layout) the parameters of the following
  // steps. The lane keeps its own copy (on a GPU: uploaded once here, not per step).
  virtual Status SetParams(std::span<const float> params) = 0;

  // Forward for `batch` rows of `activations` ([batch x in_dim]) with the parameters of
  // the latest SetParams, writing out.predictions. With out.param_grads non-empty also the
  // loss against `labels` ([batch x the data's labels]) and backward: param_grads and, when non-empty,
  // activation_grads; returns the mean loss. Forward only (param_grads empty): labels are
  // ignored and 0 is returned. Sizes are checked (CheckStepShapes): a mismatch is
  // InvalidArgument, not a crash.
  virtual StatusOr<float> Step(std::span<const float> activations, std::span<const float> labels, size_t batch,
                               const DenseStepOutput& out) = 0;
};

// Host memory that a device's lanes copy to and from directly (on a GPU: page-locked): a
// step whose input and output spans each lie within one block of it skips the lane's own
// staging copies. The heter-trainer reads micro-batches into it and builds its replies in it.
// Blocks come in power-of-two sizes (at least 64 KiB); a released block waits for the next
// Acquire of its size while the pool keeps less than `keep_bytes`, else it is freed, so the
// steady state allocates nothing. Thread-safe; outlives its blocks (SharedBlock sees to it).
class HostBufferPool {
 public:
  // `allocate(bytes)`: a block of the device's memory, or null (then ordinary memory, 64-byte
  // aligned); `free` returns such a block. Both null: ordinary memory only (the CPU).
  HostBufferPool(std::function<void*(size_t)> allocate, std::function<void(void*)> free,
                 size_t keep_bytes = size_t{1} << 30);
  ~HostBufferPool();
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  // A block of at least `bytes` bytes, 64-byte aligned; never null.
  uint8_t* Acquire(size_t bytes);
  // Returns a block Acquire(bytes) gave, with the same `bytes`.
  void Release(uint8_t* block, size_t bytes);
  // Blocks acquired and not yet released.
  size_t outstanding() const;

 private:
  static size_t SizeOf(size_t bytes);
  void Free(uint8_t* block, size_t size);

  const std::function<void*(size_t)> allocate_;
  const std::function<void(void*)> free_;
  const size_t keep_bytes_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<uint8_t*>> idle_;  // by block size
  size_t kept_ = 0;                               // bytes in idle_
  std::set<uint8_t*> ordinary_;                   // blocks of ordinary memory (allocate gave none)
  size_t outstanding_ = 0;
};

// A block of `pool` as a shared buffer, released to the pool with its last reference.
std::shared_ptr<uint8_t[]> SharedBlock(std::shared_ptr<HostBufferPool> pool, size_t bytes);

class DenseDevice {
 public:
  virtual ~DenseDevice() = default;
  virtual DeviceType type() const = 0;
  // For logs: "cpu" or "gpu 0 (NVIDIA H100 80GB HBM3, 132 SMs)".
  virtual std::string Describe() const = 0;
  virtual StatusOr<std::unique_ptr<DenseLane>> NewLane() = 0;
  // The memory this device's lanes copy to and from directly (the CPU's: ordinary memory,
  // recycled all the same).
  virtual std::shared_ptr<HostBufferPool> host_buffers() = 0;
};

// The shape checks every lane runs before a step: InvalidArgument naming what is wrong.
Status CheckStepShapes(const model::DenseNet& net, size_t params_size, std::span<const float> activations,
                       std::span<const float> labels, size_t batch, const DenseStepOutput& out);

// The CPU device: model::DenseNet over BLAS. `net` outlives the device.
std::unique_ptr<DenseDevice> MakeCpuDevice(const model::DenseNet& net);

// OK for fleetps.dense.precision fp32; otherwise InvalidArgument: `who`'s CUDA device
// computes the dense layers in fp32 (bf16 runs on CPU devices with AVX512-BF16 or AMX).
Status RequireFp32OnCuda(dense::Precision precision, const std::string& who);

// The CUDA device `gpu` (an index among the visible devices). `net` outlives the device.
// Unavailable when this build has no CUDA, or no GPU is visible, or `gpu` is out of
// range — with a message saying so and how to run on the CPU (HETER_DEVICE_TYPE=cpu);
// InvalidArgument for a model other than mlp and ctr_dnn (the CPU device runs every model).
// `wait`: how threads wait for the GPU, set for the process (kAuto leaves it as it is).
StatusOr<std::unique_ptr<DenseDevice>> MakeCudaDevice(const model::DenseNet& net, int gpu,
                                                      config::CudaWait wait = config::CudaWait::kAuto);

// The number of CUDA devices visible to this process (0 without CUDA or without a GPU).
int VisibleCudaDevices();

}  // namespace fleetps::heter
