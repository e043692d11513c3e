#pragma once
// Helpers of the CUDA DenseDevice (cuda_device.cc) shared with the GEMM timing. No CUDA
// header here.

#include <string>

#include "common/status.h"

namespace fleetps::heter::gpu {

// Checks that GPU `gpu` (an index among the visible devices) exists and can run this
// build's kernels. Unavailable otherwise, with a message saying why (cudaGetDeviceCount's
// error, no device visible, index out of range, no kernel image for its architecture)
// and how to run on the CPU instead. Returns the device for logs:
// "gpu 0 (NVIDIA H100 80GB HBM3, 132 SMs)".
StatusOr<std::string> ProbeCudaDevice(int gpu);

}  // namespace fleetps::heter::gpu
