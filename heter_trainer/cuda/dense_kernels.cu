// Kernels of a DenseNet step. Grid-stride loops over size_t indices, so any size runs on
// a capped grid; reductions use a fixed order (no atomics), so a step is deterministic.

#include "heter_trainer/cuda/dense_kernels.h"

#include <algorithm>

#include "heter_trainer/cuda/kernel_launch.h"
#include "trainer/model/loss_rules.h"

namespace fleetps::heter::gpu {
namespace {

namespace loss_rules = trainer::model::loss_rules;

constexpr int kThreads = 256;           // threads per block of the 1-D kernels (a power of two)
constexpr size_t kMaxBlocks = 1 << 16;  // grid cap of the grid-stride kernels
constexpr int kBiasBlockX = 32;         // columns per bias-gradient block (one warp: coalesced rows)
constexpr int kBiasBlockY = 8;          // rows summed in parallel per bias-gradient block
constexpr size_t kBiasRowsPerBlock = 256;
constexpr size_t kMaxBiasRowBlocks = 1024;

unsigned Blocks(size_t n, size_t cap = kMaxBlocks) {
  return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, cap));
}

__device__ size_t GlobalIndex() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

template <bool kRelu>
__global__ void BiasActivationKernel(float* y, const float* bias, size_t n, size_t cols) {
  for (size_t k = GlobalIndex(); k < n; k += GridStride()) {
    const float v = y[k] + bias[k % cols];
    // As std::max(v, 0.0f) on the CPU: (v < 0) ? 0 : v.
    y[k] = kRelu && v < 0.0f ? 0.0f : v;
  }
}

__global__ void ReluBackwardKernel(const float* y, float* dy, size_t n) {
  for (size_t k = GlobalIndex(); k < n; k += GridStride()) dy[k] = y[k] > 0.0f ? dy[k] : 0.0f;
}

// Column sums of the rows [blockIdx.y * rows_per_block, +rows_per_block) of dy, for the
// kBiasBlockX columns of this block: out[blockIdx.y * cols + col]. The warp reads
// consecutive columns of a row (coalesced); kBiasBlockY rows at a time, summed at the end
// in shared memory in a fixed order.
__global__ void ColumnSumKernel(const float* dy, size_t rows, size_t cols, size_t rows_per_block, float* out) {
  __shared__ float partial[kBiasBlockY][kBiasBlockX];
  const size_t col = static_cast<size_t>(blockIdx.x) * kBiasBlockX + threadIdx.x;
  const size_t begin = static_cast<size_t>(blockIdx.y) * rows_per_block;
  // The last row blocks may start at or past `rows` (rows_per_block is rounded up).
  const size_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
  float sum = 0.0f;
  if (col < cols) {
    for (size_t r = begin + threadIdx.y; r < end; r += kBiasBlockY) sum += dy[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < kBiasBlockY; ++k) total += partial[k][threadIdx.x];
    out[static_cast<size_t>(blockIdx.y) * cols + col] = total;
  }
}

// db[j] = sum over the row blocks b of partial[b * cols + j], b in order.
__global__ void SumRowBlocksKernel(const float* partial, size_t row_blocks, size_t cols, float* db) {
  for (size_t j = GlobalIndex(); j < cols; j += GridStride()) {
    float total = 0.0f;
    for (size_t b = 0; b < row_blocks; ++b) total += partial[b * cols + j];
    db[j] = total;
  }
}

// Sums `value` over the block (blockDim.x == kThreads); the result is valid in thread 0.
__device__ double BlockSum(double value) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// loss.cc's BinaryCrossEntropy per example, in the same definition (loss_rules.h). Each
// block leaves its loss sum in block_sums[blockIdx.x].
template <int kWidth>
__global__ void CrossEntropyKernel(const float* logits, const float* labels, size_t batch, float inv_batch,
                                   float* probs, float* logit_grads, double* block_sums) {
  double sum = 0.0;
  for (size_t i = GlobalIndex(); i < batch; i += GridStride()) {
    const float z = loss_rules::LogOdds(logits, kWidth, i);
    const float y = labels[i];
    sum += loss_rules::ExampleLoss(z, y);
    const float p = loss_rules::Sigmoid(z);
    probs[i] = p;
    loss_rules::WriteLogitGrads(loss_rules::LogOddsGrad(p, y, inv_batch), kWidth, i, logit_grads);
  }
  const double block_sum = BlockSum(sum);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = block_sum;
}

// One block: *mean_loss = (sum of block_sums[0, blocks)) / batch, rounded to float once.
__global__ void MeanLossKernel(const double* block_sums, unsigned blocks, size_t batch, float* mean_loss) {
  double sum = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) sum += block_sums[b];
  const double total = BlockSum(sum);
  if (threadIdx.x == 0) *mean_loss = static_cast<float>(total / static_cast<double>(batch));
}

template <int kWidth>
__global__ void PredictKernel(const float* logits, size_t batch, float* probs) {
  for (size_t i = GlobalIndex(); i < batch; i += GridStride()) {
    probs[i] = loss_rules::Sigmoid(loss_rules::LogOdds(logits, kWidth, i));
  }
}

size_t BiasRowBlocks(size_t rows) {
  return std::min((rows + kBiasRowsPerBlock - 1) / kBiasRowsPerBlock, kMaxBiasRowBlocks);
}

}  // namespace

cudaError_t LaunchBiasActivation(float* y, const float* bias, size_t rows, size_t cols, bool relu,
                                 cudaStream_t stream) {
  const size_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  auto* kernel = relu ? BiasActivationKernel<true> : BiasActivationKernel<false>;
  return LaunchKernel(kernel, Blocks(n), kThreads, stream, y, bias, n, cols);
}

cudaError_t LaunchReluBackward(const float* y, float* dy, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return LaunchKernel(ReluBackwardKernel, Blocks(n), kThreads, stream, y, dy, n);
}

size_t BiasGradScratchFloats(size_t rows, size_t cols) {
  const size_t row_blocks = BiasRowBlocks(rows);
  return row_blocks > 1 ? row_blocks * cols : 0;
}

cudaError_t LaunchBiasGrad(const float* dy, size_t rows, size_t cols, float* db, float* scratch, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) return cudaMemsetAsync(db, 0, cols * sizeof(float), stream);
  const size_t row_blocks = BiasRowBlocks(rows);
  const size_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
  const dim3 grid(static_cast<unsigned>((cols + kBiasBlockX - 1) / kBiasBlockX), static_cast<unsigned>(row_blocks));
  const dim3 block(kBiasBlockX, kBiasBlockY);
  // One row block writes db directly; several leave partial sums for SumRowBlocksKernel.
  const cudaError_t error =
      LaunchKernel(ColumnSumKernel, grid, block, stream, dy, rows, cols, rows_per_block, row_blocks > 1 ? scratch : db);
  if (error != cudaSuccess || row_blocks == 1) return error;
  return LaunchKernel(SumRowBlocksKernel, Blocks(cols), kThreads, stream, scratch, row_blocks, cols, db);
}

cudaError_t LaunchCrossEntropy(const float* logits, const float* labels, size_t batch, int width, float* probs,
                               float* logit_grads, double* block_sums, float* mean_loss, cudaStream_t stream) {
  if (width != 1 && width != 2) return cudaErrorInvalidValue;
  if (batch == 0) return cudaMemsetAsync(mean_loss, 0, sizeof(float), stream);
  const unsigned blocks = Blocks(batch, kMaxLossBlocks);
  const float inv_batch = 1.0f / static_cast<float>(batch);
  auto* kernel = width == 2 ? CrossEntropyKernel<2> : CrossEntropyKernel<1>;
  const cudaError_t error =
      LaunchKernel(kernel, blocks, kThreads, stream, logits, labels, batch, inv_batch, probs, logit_grads, block_sums);
  if (error != cudaSuccess) return error;
  return LaunchKernel(MeanLossKernel, 1, kThreads, stream, block_sums, blocks, batch, mean_loss);
}

cudaError_t LaunchPredict(const float* logits, size_t batch, int width, float* probs, cudaStream_t stream) {
  if (width != 1 && width != 2) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  auto* kernel = width == 2 ? PredictKernel<2> : PredictKernel<1>;
  return LaunchKernel(kernel, Blocks(batch), kThreads, stream, logits, batch, probs);
}

cudaError_t ProbeKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, ReluBackwardKernel);
}

}  // namespace fleetps::heter::gpu
