#pragma once
// The element-wise and reduction kernels of a DenseNet step on a GPU; the matrix products
// are cuBLAS calls (dense_gemm.h). Each launcher queues its kernel on `stream` and returns
// the launch's error (asynchronous faults surface at the stream's next synchronisation).
// Matrices are row-major [rows x cols], as in trainer/model/layers.h, and the formulas are
// those of trainer/model/layers.cc and loss.cc, so that a GPU step matches the CPU one to
// float rounding.
//
// Thread-safety: stateless; concurrent launches on different streams are independent.
// This header includes the CUDA runtime header: only sources of fleetps::heter_cuda
// include it.

#include <cuda_runtime.h>

#include <cstddef>

namespace fleetps::heter::gpu {

// y[i][j] += bias[j], then, with `relu`, y = max(y, 0): the rest of an FC layer's forward
// after the product y = x W (and the ReLU between layers). y: [rows x cols].
cudaError_t LaunchBiasActivation(float* y, const float* bias, size_t rows, size_t cols, bool relu, cudaStream_t stream);

// dy[k] = y[k] > 0 ? dy[k] : 0 for k < n, y being the ReLU's output.
cudaError_t LaunchReluBackward(const float* y, float* dy, size_t n, cudaStream_t stream);

// Floats of scratch LaunchBiasGrad needs for a [rows x cols] gradient (0 when it needs none).
size_t BiasGradScratchFloats(size_t rows, size_t cols);

// db[j] = sum over i of dy[i][j] (the bias gradient of an FC layer). dy: [rows x cols];
// scratch: BiasGradScratchFloats(rows, cols) floats. Deterministic: a fixed summation
// order, no atomics.
cudaError_t LaunchBiasGrad(const float* dy, size_t rows, size_t cols, float* db, float* scratch, cudaStream_t stream);

// The most blocks LaunchCrossEntropy uses: the size of its block_sums scratch.
inline constexpr size_t kMaxLossBlocks = 256;

// The binary cross-entropy of loss.cc for logits [batch x width] (width 1: sigmoid,
// width 2: softmax over (no click, click), whose click log-odds is z1 - z0) and labels
// [batch]: writes probs [batch], logit_grads [batch x width] = d(mean loss)/d(logits) and
// *mean_loss (one float in device memory), the per-example losses summed in double on
// the device. block_sums: kMaxLossBlocks doubles of scratch.
cudaError_t LaunchCrossEntropy(const float* logits, const float* labels, size_t batch, int width, float* probs,
                               float* logit_grads, double* block_sums, float* mean_loss, cudaStream_t stream);

// Click probabilities only: probs [batch] from logits [batch x width].
cudaError_t LaunchPredict(const float* logits, size_t batch, int width, float* probs, cudaStream_t stream);

// Whether the current device can run these kernels: an error (cudaErrorNoKernelImageForDevice
// or similar) when this build has no code for its architecture (CMAKE_CUDA_ARCHITECTURES).
cudaError_t ProbeKernelImage();

}  // namespace fleetps::heter::gpu
