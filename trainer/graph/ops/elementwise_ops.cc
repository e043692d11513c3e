// Element-wise ops and reductions; no parameters.
//   add          y = x_1 + ... + x_m (one shape)
//   multiply     y = a * b (element-wise, one shape)
//   reduce_sum   over everything -> [1], or over `axis` of an [n, k] input: 0 -> [k], 1 -> [n]
//   reduce_mean  the same divided by the count summed

#include <algorithm>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class AddKernel : public OpKernel {
 public:
  void Forward(const OpArgs& a) const override {
    std::span<float> y = a.outputs[0];
    std::ranges::copy(a.inputs[0], y.begin());
    for (size_t i = 1; i < a.inputs.size(); ++i) {
      for (size_t j = 0; j < y.size(); ++j) y[j] += a.inputs[i][j];
    }
  }
  void Backward(const OpArgs&, const OpGrads& g) const override {
    const std::span<const float> dy = g.output_grads[0];
    for (const std::span<float>& dx : g.input_grads) {
      if (dx.empty()) continue;
      for (size_t j = 0; j < dy.size(); ++j) dx[j] += dy[j];
    }
  }
};

class MultiplyKernel : public OpKernel {
 public:
  void Forward(const OpArgs& a) const override {
    for (size_t j = 0; j < a.outputs[0].size(); ++j) a.outputs[0][j] = a.inputs[0][j] * a.inputs[1][j];
  }
  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const std::span<const float> dy = g.output_grads[0];
    for (size_t i = 0; i < 2; ++i) {
      const std::span<float> dx = g.input_grads[i];
      if (dx.empty()) continue;
      const std::span<const float> other = a.inputs[1 - i];
      for (size_t j = 0; j < dy.size(); ++j) dx[j] += dy[j] * other[j];
    }
  }
};

// Input viewed as [batch x n x k]; axis -1 sums all n k, axis 0 sums over n, axis 1 over k.
class ReduceKernel : public OpKernel {
 public:
  ReduceKernel(const Shape& in, int64_t axis, bool mean) : axis_(axis) {
    n_ = in.size() == 2 ? in[0] : 1;
    k_ = in.size() == 2 ? in[1] : in[0];
    const size_t count = axis == -1 ? n_ * k_ : axis == 0 ? n_ : k_;
    scale_ = mean ? 1.0f / static_cast<float>(count) : 1.0f;
  }

  void Forward(const OpArgs& a) const override {
    const size_t out = OutWidth();
    std::ranges::fill(a.outputs[0], 0.0f);
    for (size_t b = 0; b < a.batch; ++b) {
      const float* x = a.inputs[0].data() + b * n_ * k_;
      float* y = a.outputs[0].data() + b * out;
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = 0; j < k_; ++j) y[Slot(i, j)] += x[i * k_ + j];
      }
      for (size_t o = 0; o < out; ++o) y[o] *= scale_;
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    if (g.input_grads[0].empty()) return;
    const size_t out = OutWidth();
    for (size_t b = 0; b < a.batch; ++b) {
      const float* dy = g.output_grads[0].data() + b * out;
      float* dx = g.input_grads[0].data() + b * n_ * k_;
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = 0; j < k_; ++j) dx[i * k_ + j] += dy[Slot(i, j)] * scale_;
      }
    }
  }

 private:
  size_t OutWidth() const { return axis_ == -1 ? 1 : axis_ == 0 ? k_ : n_; }
  size_t Slot(size_t i, size_t j) const { return axis_ == -1 ? 0 : axis_ == 0 ? j : i; }

  int64_t axis_;
  size_t n_ = 1;
  size_t k_ = 1;
  float scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<OpKernel> MakeAddKernel(const KernelContext&) { return std::make_unique<AddKernel>(); }
std::unique_ptr<OpKernel> MakeMultiplyKernel(const KernelContext&) { return std::make_unique<MultiplyKernel>(); }
std::unique_ptr<OpKernel> MakeReduceKernel(const KernelContext& ctx) {
  return std::make_unique<ReduceKernel>(ctx.input_shapes[0], ctx.layer.spec.attrs.Int("axis", -1, -1, 1).value(),
                                        ctx.layer.spec.op == "reduce_mean");
}

}  // namespace fleetps::trainer::graph
