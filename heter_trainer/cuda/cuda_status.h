#pragma once
// The one seam between CUDA / cuBLAS error codes and fleetps::Status. Every runtime and
// cuBLAS call of heter_trainer/cuda goes through RETURN_IF_CUDA_ERROR or
// RETURN_IF_CUBLAS_ERROR, so a failure comes back as a Status naming the call, where it
// was made and the library's own name and description of the error — never an abort.
//
// Codes: a missing or unusable GPU or driver and running out of device memory are
// Unavailable (the process can run on the CPU instead, or with smaller batches); any
// other failure is Internal.
//
// This header includes the CUDA headers: only sources of fleetps::heter_cuda include it.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace fleetps::heter::gpu {

// OK for cudaSuccess; otherwise "<call> failed at <file>:<line>: <name> (<description>)".
Status CudaStatus(cudaError_t error, const char* call, const char* file, int line);

// OK for CUBLAS_STATUS_SUCCESS; otherwise as CudaStatus, with cuBLAS's name and description
// (cublas.cc: only targets that link cuBLAS call it).
Status CublasStatus(cublasStatus_t status, const char* call, const char* file, int line);

// "<call> failed at <file>:<line>: ", the file from the repository root.
std::string CallSite(const char* call, const char* file, int line);

}  // namespace fleetps::heter::gpu

// Returns from the current function (which returns Status or StatusOr<T>) when the CUDA
// runtime call `call` fails: RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dst, src, n, kind, stream)).
#define RETURN_IF_CUDA_ERROR(call)                                                              \
  do {                                                                                          \
    const cudaError_t _fleetps_cuda_error = (call);                                             \
    if (_fleetps_cuda_error != cudaSuccess) {                                                   \
      return ::fleetps::heter::gpu::CudaStatus(_fleetps_cuda_error, #call, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)

// The same for a cuBLAS call: RETURN_IF_CUBLAS_ERROR(cublasSgemm(handle, ...)).
#define RETURN_IF_CUBLAS_ERROR(call)                                                                 \
  do {                                                                                               \
    const cublasStatus_t _fleetps_cublas_status = (call);                                            \
    if (_fleetps_cublas_status != CUBLAS_STATUS_SUCCESS) {                                           \
      return ::fleetps::heter::gpu::CublasStatus(_fleetps_cublas_status, #call, __FILE__, __LINE__); \
    }                                                                                                \
  } while (0)
