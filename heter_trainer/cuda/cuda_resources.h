#pragma once
// RAII owners of the CUDA objects the heter-trainer uses: the current-device guard, a
// stream, an event, a cuBLAS handle, device memory and pinned (page-locked) host memory.
//
// Each is non-copyable and movable; a moved-from object owns nothing. Creation returns a
// StatusOr (the error seam of cuda_status.h), so a missing GPU or an exhausted device
// is a value. Each object remembers its device and releases itself with that device
// current (restoring the caller's afterwards), from any thread; failures while releasing
// are dropped, since a destructor cannot report them and the object is gone either way.
//
// Thread-safety: one object is used by one thread at a time. This header includes the
// CUDA headers: only sources of fleetps::heter_cuda include it.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "heter_trainer/cuda/cuda_status.h"

namespace fleetps::heter::gpu {

// Makes a device current for the calling thread for the guard's lifetime. A guard opened
// inside another one restores the device of the enclosing guard when it ends; the
// outermost guard of a thread leaves its device current. (The device a thread reports before
// its first guard may be one it never used, device 0 on a fresh thread, and since CUDA 12
// making a device current creates a context on it: restoring it would cost every process
// a context on GPU 0.) Every CUDA call of heter_trainer/cuda runs under a guard naming its
// device.
class DeviceGuard {
 public:
  static StatusOr<DeviceGuard> Enter(int device);

  DeviceGuard(DeviceGuard&& other) noexcept
      : previous_(std::exchange(other.previous_, -1)), open_(std::exchange(other.open_, false)) {}
  DeviceGuard& operator=(DeviceGuard&&) = delete;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();

 private:
  DeviceGuard(int previous, bool open) : previous_(previous), open_(open) {}
  int previous_;  // the device to restore; -1: none (outermost, or moved from)
  bool open_;     // counted among the thread's open guards (false once moved from)
};

// Sets how host threads wait for `device` (cudaSetDeviceFlags' schedule) for the whole
// process; kAuto leaves the runtime's choice. Call it before the device's first stream.
Status SetCudaWait(int device, config::CudaWait wait);

// A non-blocking stream (no implicit ordering with the legacy default stream).
class Stream {
 public:
  static StatusOr<Stream> Create(int device);

  Stream() = default;
  Stream(Stream&& other) noexcept { *this = std::move(other); }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { Reset(); }

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Waits for everything queued so far; the first asynchronous error surfaces here.
  Status Synchronize() const;

 private:
  void Reset();
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
};

// An event, with timing (for measurements) or without (for ordering only).
class Event {
 public:
  static StatusOr<Event> Create(int device, bool timing);

  Event() = default;
  Event(Event&& other) noexcept { *this = std::move(other); }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { Reset(); }

  cudaEvent_t get() const { return event_; }
  Status Record(cudaStream_t stream) const;
  Status Synchronize() const;
  // Milliseconds between two recorded, completed timing events.
  static StatusOr<float> ElapsedMs(const Event& start, const Event& stop);

 private:
  void Reset();
  int device_ = -1;
  cudaEvent_t event_ = nullptr;
};

// Runs `release` with `device` current. Failures are dropped: callers are destructors.
template <typename Release>
void ReleaseOn(int device, Release release) {
  StatusOr<DeviceGuard> guard = DeviceGuard::Enter(device);
  release();
}

// A cuBLAS handle bound to one stream (cublas.cc: only targets that link cuBLAS use it): every call made with it is queued on that stream.
// The stream must outlive the handle. Math mode is plain FP32 (no TF32 tensor-op
// shortcut), so products agree with the CPU BLAS to float rounding.
class CublasHandle {
 public:
  static StatusOr<CublasHandle> Create(const Stream& stream);

  CublasHandle() = default;
  CublasHandle(CublasHandle&& other) noexcept { *this = std::move(other); }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() { Reset(); }

  cublasHandle_t get() const { return handle_; }

 private:
  void Reset();
  int device_ = -1;
  cublasHandle_t handle_ = nullptr;
};

// Untyped allocation primitives behind the typed buffers below.
Status AllocateDeviceBytes(int device, size_t bytes, void** ptr);
void FreeDeviceBytes(int device, void* ptr);
Status AllocatePinnedBytes(size_t bytes, void** ptr);
void FreePinnedBytes(void* ptr);

// `count` elements of T in device memory (uninitialised).
template <typename T>
class DeviceBuffer {
 public:
  static StatusOr<DeviceBuffer> Allocate(int device, size_t count) {
    void* ptr = nullptr;
    RETURN_IF_ERROR(AllocateDeviceBytes(device, count * sizeof(T), &ptr));
    return DeviceBuffer(device, static_cast<T*>(ptr), count);
  }

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      device_ = std::exchange(other.device_, -1);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  DeviceBuffer(int device, T* data, size_t size) : device_(device), data_(data), size_(size) {}
  void Reset() {
    if (data_ != nullptr) FreeDeviceBytes(device_, data_);
    device_ = -1;
    data_ = nullptr;
    size_ = 0;
  }
  int device_ = -1;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// `count` elements of T in pinned host memory (uninitialised): the staging area that lets
// cudaMemcpyAsync run asynchronously with respect to the host.
template <typename T>
class PinnedBuffer {
 public:
  static StatusOr<PinnedBuffer> Allocate(size_t count) {
    void* ptr = nullptr;
    RETURN_IF_ERROR(AllocatePinnedBytes(count * sizeof(T), &ptr));
    return PinnedBuffer(static_cast<T*>(ptr), count);
  }

  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }

  T* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<T> span() const { return {data_, size_}; }

 private:
  PinnedBuffer(T* data, size_t size) : data_(data), size_(size) {}
  void Reset() {
    if (data_ != nullptr) FreePinnedBytes(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fleetps::heter::gpu
