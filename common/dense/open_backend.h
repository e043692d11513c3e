#pragma once
// The dense backend of a role that runs the dense layers on a CPU (cpu-trainer, the
// heter-trainer's CPU device, a GPU-PS node's host twin): created from fleetps.dense, logged
// at start, self-checked and exported as a metric, so that an operator sees what runs:
//
//   <role>: dense layers on oneDNN 2.6.3, kernel family avx512_bf16 (brg:avx512_core_bf16),
//           bf16 products with fp32 accumulation and fp32 weights, 1 thread(s) per product;
//           self-check 231.4 GFLOP/s per core
//   fleetps_dense_backend_info{backend="oneDNN 2.6.3",kernel_family="avx512_bf16",
//                              kernel="brg:avx512_core_bf16",precision="bf16"} 1
//
// The self-check warns (naming the cause and the fix) when a product runs far below what
// the kernel family gives (RunGemmSelfCheck).

#include <memory>
#include <string>

#include "common/dense/cpu_gemm.h"
#include "common/metrics/registry.h"
#include "common/status.h"

namespace fleetps::dense {

// Errors as CpuGemm::Create (bf16 on a CPU without bf16 units). registry may be null.
StatusOr<std::shared_ptr<const CpuGemm>> OpenDenseBackend(const CpuGemmOptions& options, const std::string& role,
                                                          metrics::Registry* registry);

}  // namespace fleetps::dense
