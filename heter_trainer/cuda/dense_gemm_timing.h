#pragma once
// The time of a dense step's matrix products alone on a GPU, for benchmarks: what the
// step time of the CUDA DenseDevice is compared with. No CUDA header here, so plain C++
// callers (bench/) can include it; it is defined only in builds with CUDA
// (FLEETPS_HAVE_CUDA in fleetps/config.h), in fleetps::heter_cuda.

#include <cstddef>

#include "common/status.h"
#include "trainer/model/dense_net.h"

namespace fleetps::heter {

// Mean milliseconds, over `iterations` (after one untimed warm-up), of the cuBLAS calls a
// training step of `net` with activation gradients makes for `batch` rows: per layer the
// forward product, and backward the weight-gradient and input-gradient products (the
// first layer's input gradient included), on GPU `gpu`. Measured with CUDA events on a
// stream and cuBLAS handle of its own, on zero-filled device buffers; no copies, bias,
// activation or loss kernels. Unavailable when the GPU cannot be used (as MakeCudaDevice);
// InvalidArgument for batch 0 or iterations < 1.
StatusOr<double> TimeDenseGemms(const trainer::model::DenseNet& net, size_t batch, int iterations, int gpu);

}  // namespace fleetps::heter
