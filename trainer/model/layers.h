#pragma once
// Dense layers with explicit forward and backward passes; their matrix products run on the
// CPU dense backend (dense::CpuGemm: oneDNN, fp32 or bf16, kernels chosen from the CPU).
//
// Matrices are row-major [rows x cols]; a batch is `batch` rows. Layers own no memory:
// their parameters are views by offset into one flat parameter vector (DenseNet lays the
// layers out back to back), and their gradients sit at the same offsets of a flat gradient
// vector of the same size. Activations are caller buffers.
// Thread-safety: every function here is const and stateless; concurrent calls are safe.

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/dense/cpu_gemm.h"
#include "common/uniform_random.h"

namespace fleetps::trainer::model {

using fleetps::UniformRandom;

// Fully-connected layer y = x W + b, with
//   x [batch x in_dim], y [batch x out_dim],
//   W [in_dim x out_dim] row-major (Paddle's Linear layout) at params[offset, offset + in_dim * out_dim),
//   b [out_dim] right after W.
// Its products run on `gemm`, which must outlive the layer (the model holds it).
class FullyConnected {
 public:
  FullyConnected(size_t in_dim, size_t out_dim, size_t param_offset, const dense::CpuGemm* gemm);

  size_t in_dim() const { return in_dim_; }
  size_t out_dim() const { return out_dim_; }
  size_t param_offset() const { return param_offset_; }
  size_t num_params() const { return in_dim_ * out_dim_ + out_dim_; }

  // Xavier-uniform weights, U(-a, a) with a = sqrt(6 / (in_dim + out_dim)); zero bias.
  void InitParams(std::span<float> params, UniformRandom* rng) const;

  // y = x W + b, then max(y, 0) when `relu` (fused into the product). `params` is the whole
  // flat vector.
  void Forward(std::span<const float> params, std::span<const float> x, size_t batch, std::span<float> y,
               bool relu = false) const;

  // Given dy = dL/dy, overwrites this layer's dL/dW and dL/db in `param_grads` (the whole
  // flat gradient vector; other layers' entries are untouched) and writes dx = dL/dx,
  // unless dx is empty (the first layer of a net whose input needs no gradient).
  void Backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy, size_t batch,
                std::span<float> param_grads, std::span<float> dx) const;

 private:
  size_t in_dim_;
  size_t out_dim_;
  size_t param_offset_;
  const dense::CpuGemm* gemm_;
};

// x = max(x, 0), in place.
void ReluForward(std::span<float> x);

// dy = dy * (y > 0), in place, where y is ReluForward's output (y > 0 exactly where its
// input was > 0, so the output serves as the mask).
void ReluBackward(std::span<const float> y, std::span<float> dy);

}  // namespace fleetps::trainer::model
