#pragma once
// The feature-interaction layers of the ranking models (trainer/model/*_model.cc), each with
// an explicit forward and backward pass, beside FullyConnected (layers.h):
//
//   FmSecondOrder    deepfm: the factorization machine's pairwise term over F fields
//   CrossLayer       dcn: one layer of the cross network, v1 (a weight vector) or v2 (a matrix)
//   DotInteraction   dlrm: the dot products of every pair of n vectors
//
// Conventions as in layers.h: row-major matrices, a batch is `batch` rows, parameters are
// views by offset into one flat vector and their gradients sit at the same offsets of a
// flat gradient vector, which Backward OVERWRITES for its own range. Input gradients are
// ADDED to (`+=`), since the models feed one input to several parts.
// Thread-safety: const and stateless; concurrent calls are safe.

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "common/config/model_config.h"
#include "trainer/model/layers.h"

namespace fleetps::trainer::model {

// Factorization machine second-order term (Rendle 2010) over F fields of k floats:
//   y[b] = 1/2 sum_f ((sum_i e[b,i,f])^2 - sum_i e[b,i,f]^2) = sum_{i<j} <e_i, e_j>
// e: [batch x F x k] (example b's field i at e[(b F + i) k ...]), y: [batch].
class FmSecondOrder {
 public:
  FmSecondOrder(size_t fields, size_t k);
  size_t fields() const { return fields_; }
  size_t k() const { return k_; }

  void Forward(std::span<const float> e, size_t batch, std::span<float> y) const;
  // de[b,i,:] += dy[b] (sum_j e[b,j,:] - e[b,i,:]).
  void Backward(std::span<const float> e, std::span<const float> dy, size_t batch, std::span<float> de) const;

 private:
  size_t fields_;
  size_t k_;
};

// One cross layer over d-wide rows, x0 the network's input and x the previous layer's output:
//   v1: y = x0 (x . w) + b + x,       w [d], b [d]       (d + d parameters)
//   v2: y = x0 * (x W + b) + x,       W [d x d] row-major (Paddle's Linear layout), b [d]
// with * element-wise. Parameters at params[offset, offset + num_params()): w (or W), then b.
// v2's products run on `gemm`, which must outlive the layer.
class CrossLayer {
 public:
  CrossLayer(CrossType type, size_t dim, size_t param_offset, const dense::CpuGemm* gemm);
  CrossType type() const { return type_; }
  size_t dim() const { return dim_; }
  size_t param_offset() const { return param_offset_; }
  size_t num_params() const { return (type_ == CrossType::kV1 ? dim_ : dim_ * dim_) + dim_; }

  // v1: w ~ U(-a, a) with a = sqrt(6 / (d + 1)); v2: Xavier-uniform W. Zero b.
  void InitParams(std::span<float> params, UniformRandom* rng) const;

  // y [batch x d]. inner: scratch kept for Backward: v1 [batch] (x . w), v2 [batch x d] (x W + b).
  void Forward(std::span<const float> params, std::span<const float> x0, std::span<const float> x, size_t batch,
               std::span<float> inner, std::span<float> y) const;
  // Given dy, overwrites this layer's parameter gradients, adds d(loss)/d(x0) to dx0 and
  // OVERWRITES dx = d(loss)/dx (dx must not alias dy).
  void Backward(std::span<const float> params, std::span<const float> x0, std::span<const float> x,
                std::span<const float> inner, std::span<const float> dy, size_t batch, std::span<float> param_grads,
                std::span<float> dx0, std::span<float> dx) const;

 private:
  CrossType type_;
  size_t dim_;
  size_t param_offset_;
  const dense::CpuGemm* gemm_;
};

// Pairwise dot products of n vectors of k floats: e [batch x n x k] ->
// y [batch x n(n-1)/2], pairs (i, j), i < j, in the order (0,1), (0,2), ..., (0,n-1), (1,2), ...
class DotInteraction {
 public:
  DotInteraction(size_t n, size_t k);
  size_t n() const { return n_; }
  size_t k() const { return k_; }
  size_t out_dim() const { return n_ * (n_ - 1) / 2; }

  void Forward(std::span<const float> e, size_t batch, std::span<float> y) const;
  // de[b,i,:] += sum_j dy[b,(i,j)] e[b,j,:].
  void Backward(std::span<const float> e, std::span<const float> dy, size_t batch, std::span<float> de) const;

 private:
  size_t n_;
  size_t k_;
};

// A stack of FullyConnected layers, ReLU after each but, when `relu_last` is false, the
// last: in -> widths[0] -> ... -> widths.back(). Parameters back to back from param_offset.
// The products run on `gemm`, which must outlive the Mlp.
// Its per-call memory is an MlpScratch, one per thread.
struct MlpScratch {
  std::vector<std::vector<float>> outputs;  // per layer [batch x width]
  std::vector<float> grad, next_grad;
};

class Mlp {
 public:
  Mlp() = default;
  Mlp(size_t in_dim, std::span<const uint32_t> widths, bool relu_last, size_t param_offset, const dense::CpuGemm* gemm);

  bool empty() const { return layers_.empty(); }
  size_t in_dim() const { return in_dim_; }
  size_t out_dim() const { return layers_.empty() ? in_dim_ : layers_.back().out_dim(); }
  size_t param_offset() const { return param_offset_; }
  size_t num_params() const { return num_params_; }
  std::span<const FullyConnected> layers() const { return layers_; }

  void InitParams(std::span<float> params, UniformRandom* rng) const;
  // Returns the output [batch x out_dim()] (a view into scratch; x itself when empty()).
  std::span<const float> Forward(std::span<const float> params, std::span<const float> x, size_t batch,
                                 MlpScratch* s) const;
  // dy: d(loss)/d(output) [batch x out_dim()]. Overwrites the layers' parameter gradients
  // and dx (unless empty; when the Mlp is empty, dx = dy). `ready(begin, end)`, when set,
  // is called as each layer's gradients become final, last layer first.
  void Backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy, size_t batch,
                std::span<float> param_grads, std::span<float> dx, MlpScratch* s,
                const std::function<void(size_t, size_t)>& ready = nullptr) const;

 private:
  size_t in_dim_ = 0;
  bool relu_last_ = false;
  size_t param_offset_ = 0;
  size_t num_params_ = 0;
  std::vector<FullyConnected> layers_;
};

}  // namespace fleetps::trainer::model
