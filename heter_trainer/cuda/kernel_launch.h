#pragma once
// Kernel launches that report their own error. This header is for .cu sources only.

#include <cuda_runtime.h>

#include <utility>

namespace fleetps::heter::gpu {

// Launches kernel<<<grid, block, 0, stream>>>(args...) and returns that launch's error.
// cudaGetLastError returns the last error of any runtime call on this thread, so an error
// an earlier call returned and its caller already handled (a cudaMalloc out of memory, say)
// would otherwise fail this launch too: it is cleared first. Sticky errors (a kernel fault)
// cannot be cleared and fail every launch after them, as they should.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  static_cast<void>(cudaGetLastError());
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

}  // namespace fleetps::heter::gpu
