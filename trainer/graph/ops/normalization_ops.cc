// layer_norm: each vector along the last axis (k floats; an [n, k] input is n of them)
// normalized to mean 0, variance 1, then scaled and shifted per column:
//   mu = mean(x), var = mean((x - mu)^2) (biased), r = 1 / sqrt(var + epsilon)
//   xhat = (x - mu) r, y = gamma * xhat + beta
// Parameters gamma [k] (init 1) then beta [k] (init 0); key epsilon (default 1e-5).
// Backward: dgamma = sum dy xhat, dbeta = sum dy, and with g = dy gamma
//   dx += r (g - mean(g) - xhat mean(g xhat)).

#include <algorithm>
#include <cmath>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class LayerNormKernel : public OpKernel {
 public:
  LayerNormKernel(const Shape& in, double epsilon)
      : k_(in.back()), vectors_(fleetps::graph::NumElements(in) / in.back()), epsilon_(epsilon) {}

  // Each vector's mean, then each vector's 1 / sqrt(var + epsilon).
  size_t ScratchFloats(size_t batch) const override { return 2 * batch * vectors_; }

  void InitParams(std::span<float> params, UniformRandom*) const override {
    std::fill_n(params.begin(), k_, 1.0f);
    std::fill_n(params.begin() + static_cast<std::ptrdiff_t>(k_), k_, 0.0f);
  }

  void Forward(const OpArgs& a) const override {
    const size_t rows = a.batch * vectors_;
    const float* gamma = a.params.data();
    const float* beta = gamma + k_;
    float* mean = a.scratch.data();
    float* rstd = mean + rows;
    for (size_t r = 0; r < rows; ++r) {
      const float* x = a.inputs[0].data() + r * k_;
      float* y = a.outputs[0].data() + r * k_;
      double sum = 0;
      for (size_t j = 0; j < k_; ++j) sum += x[j];
      const double mu = sum / static_cast<double>(k_);
      double squares = 0;
      for (size_t j = 0; j < k_; ++j) squares += (x[j] - mu) * (x[j] - mu);
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(k_) + epsilon_);
      mean[r] = static_cast<float>(mu);
      rstd[r] = static_cast<float>(inv);
      for (size_t j = 0; j < k_; ++j) y[j] = gamma[j] * ((x[j] - mean[r]) * rstd[r]) + beta[j];
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const size_t rows = a.batch * vectors_;
    const float* gamma = a.params.data();
    float* dgamma = g.param_grads.data();
    float* dbeta = dgamma + k_;
    std::ranges::fill(g.param_grads, 0.0f);
    const float* mean = a.scratch.data();
    const float* rstd = mean + rows;
    const std::span<float> dx = g.input_grads[0];
    const auto n = static_cast<float>(k_);
    for (size_t r = 0; r < rows; ++r) {
      const float* x = a.inputs[0].data() + r * k_;
      const float* dy = g.output_grads[0].data() + r * k_;
      float sum_g = 0, sum_gx = 0;  // sum g, sum g xhat
      for (size_t j = 0; j < k_; ++j) {
        const float xhat = (x[j] - mean[r]) * rstd[r];
        dgamma[j] += dy[j] * xhat;
        dbeta[j] += dy[j];
        sum_g += dy[j] * gamma[j];
        sum_gx += dy[j] * gamma[j] * xhat;
      }
      if (dx.empty()) continue;
      float* dxr = dx.data() + r * k_;
      for (size_t j = 0; j < k_; ++j) {
        const float xhat = (x[j] - mean[r]) * rstd[r];
        dxr[j] += rstd[r] * (dy[j] * gamma[j] - sum_g / n - xhat * sum_gx / n);
      }
    }
  }

 private:
  size_t k_;
  size_t vectors_;  // per example
  double epsilon_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeLayerNormKernel(const KernelContext& ctx) {
  return std::make_unique<LayerNormKernel>(ctx.input_shapes[0], ctx.layer.spec.attrs.Float("epsilon", 1e-5).value());
}

}  // namespace fleetps::trainer::graph
