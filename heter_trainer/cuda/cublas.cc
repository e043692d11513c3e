// The cuBLAS parts of the CUDA seam (cuda_status.h, cuda_resources.h): what only targets that
// link cuBLAS use, kept apart so that the NCCL backend links the CUDA runtime alone.

#include <cublas_v2.h>

#include <string>
#include <utility>

#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"

namespace fleetps::heter::gpu {

Status CublasStatus(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::OK();
  std::string message =
      CallSite(call, file, line) + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED || status == CUBLAS_STATUS_NOT_INITIALIZED) {
    return Status::Unavailable(std::move(message));
  }
  return Status::Internal(std::move(message));
}

StatusOr<CublasHandle> CublasHandle::Create(const Stream& stream) {
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(stream.device()));
  CublasHandle handle;
  RETURN_IF_CUBLAS_ERROR(cublasCreate(&handle.handle_));
  handle.device_ = stream.device();  // from here on the destructor frees the handle
  RETURN_IF_CUBLAS_ERROR(cublasSetStream(handle.handle_, stream.get()));
  // Plain FP32: TF32 tensor ops would round the GEMM inputs to 10-bit mantissas, and the
  // device would no longer agree with its CPU twin.
  RETURN_IF_CUBLAS_ERROR(cublasSetMathMode(handle.handle_, CUBLAS_DEFAULT_MATH));
  return handle;
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void CublasHandle::Reset() {
  if (handle_ != nullptr) ReleaseOn(device_, [this] { cublasDestroy(handle_); });
  device_ = -1;
  handle_ = nullptr;
}

}  // namespace fleetps::heter::gpu
