#include "heter_trainer/cuda/cuda_resources.h"

namespace fleetps::heter::gpu {
namespace {

// The DeviceGuards open on this thread: only a nested guard restores a device (see the
// header). Per-thread state, as the CUDA runtime's current device is.
thread_local int open_guards = 0;

}  // namespace

StatusOr<DeviceGuard> DeviceGuard::Enter(int device) {
  int previous = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&previous));
  if (previous != device) RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  const bool nested = open_guards > 0;
  ++open_guards;
  return DeviceGuard(nested ? previous : -1, true);
}

DeviceGuard::~DeviceGuard() {
  if (!open_) return;
  --open_guards;
  if (previous_ < 0) return;
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) static_cast<void>(cudaSetDevice(previous_));
}

Status SetCudaWait(int device, config::CudaWait wait) {
  unsigned schedule = 0;
  switch (wait) {
    case config::CudaWait::kAuto: return Status::OK();
    case config::CudaWait::kSpin: schedule = cudaDeviceScheduleSpin; break;
    case config::CudaWait::kYield: schedule = cudaDeviceScheduleYield; break;
    case config::CudaWait::kBlock: schedule = cudaDeviceScheduleBlockingSync; break;
  }
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(device));
  RETURN_IF_CUDA_ERROR(cudaSetDeviceFlags(schedule));
  return Status::OK();
}

StatusOr<Stream> Stream::Create(int device) {
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(device));
  Stream stream;
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking));
  stream.device_ = device;
  return stream;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Status Stream::Synchronize() const {
  RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  return Status::OK();
}

void Stream::Reset() {
  if (stream_ != nullptr) ReleaseOn(device_, [this] { cudaStreamDestroy(stream_); });
  device_ = -1;
  stream_ = nullptr;
}

StatusOr<Event> Event::Create(int device, bool timing) {
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(device));
  Event event;
  RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&event.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  event.device_ = device;
  return event;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Status Event::Record(cudaStream_t stream) const {
  RETURN_IF_CUDA_ERROR(cudaEventRecord(event_, stream));
  return Status::OK();
}

Status Event::Synchronize() const {
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(event_));
  return Status::OK();
}

StatusOr<float> Event::ElapsedMs(const Event& start, const Event& stop) {
  float ms = 0.0f;
  RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, start.event_, stop.event_));
  return ms;
}

void Event::Reset() {
  if (event_ != nullptr) ReleaseOn(device_, [this] { cudaEventDestroy(event_); });
  device_ = -1;
  event_ = nullptr;
}

Status AllocateDeviceBytes(int device, size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return Status::OK();
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(device));
  const Status status = CudaStatus(cudaMalloc(ptr, bytes), "cudaMalloc", __FILE__, __LINE__);
  if (!status.ok()) {
    *ptr = nullptr;
    return status.WithContext("allocating " + std::to_string(bytes) + " bytes on gpu " + std::to_string(device));
  }
  return Status::OK();
}

void FreeDeviceBytes(int device, void* ptr) {
  ReleaseOn(device, [ptr] { cudaFree(ptr); });
}

Status AllocatePinnedBytes(size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return Status::OK();
  const Status status = CudaStatus(cudaMallocHost(ptr, bytes), "cudaMallocHost", __FILE__, __LINE__);
  if (!status.ok()) {
    *ptr = nullptr;
    return status.WithContext("allocating " + std::to_string(bytes) + " bytes of pinned host memory");
  }
  return Status::OK();
}

void FreePinnedBytes(void* ptr) { cudaFreeHost(ptr); }

}  // namespace fleetps::heter::gpu
