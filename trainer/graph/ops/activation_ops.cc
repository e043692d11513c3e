// The standalone element-wise activations, any input shape, no parameters:
//   relu     y = max(0, x)                       dx += dy [x > 0]
//   sigmoid  y = 1 / (1 + e^-x)                  dx += dy y (1 - y)
//   tanh     y = tanh(x)                         dx += dy (1 - y^2)
//   gelu     y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 (the erf form, as fc's)
//                                                dx += dy (Phi(x) + x phi(x))
// The same functions as fc's `activation` key, for where no fc precedes them.

#include <cmath>

#include "common/check.h"
#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

enum class ActivationFn { kRelu, kSigmoid, kTanh, kGelu };

ActivationFn ActivationOfOp(const std::string& op) {
  if (op == "relu") return ActivationFn::kRelu;
  if (op == "sigmoid") return ActivationFn::kSigmoid;
  if (op == "tanh") return ActivationFn::kTanh;
  FLEETPS_CHECK_EQ(op, "gelu") << "not an activation op";
  return ActivationFn::kGelu;
}

class ActivationKernel : public OpKernel {
 public:
  explicit ActivationKernel(ActivationFn fn) : fn_(fn) {}

  void Forward(const OpArgs& a) const override {
    const std::span<const float> x = a.inputs[0];
    const std::span<float> y = a.outputs[0];
    switch (fn_) {
      case ActivationFn::kRelu:
        for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        for (size_t i = 0; i < y.size(); ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
        break;
      case ActivationFn::kTanh:
        for (size_t i = 0; i < y.size(); ++i) y[i] = std::tanh(x[i]);
        break;
      case ActivationFn::kGelu:
        for (size_t i = 0; i < y.size(); ++i) {
          y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
        }
        break;
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const std::span<float> dx = g.input_grads[0];
    if (dx.empty()) return;
    const std::span<const float> x = a.inputs[0], y = a.outputs[0], dy = g.output_grads[0];
    switch (fn_) {
      case ActivationFn::kRelu:
        for (size_t i = 0; i < dx.size(); ++i) dx[i] += x[i] > 0.0f ? dy[i] : 0.0f;
        break;
      case ActivationFn::kSigmoid:
        for (size_t i = 0; i < dx.size(); ++i) dx[i] += dy[i] * y[i] * (1.0f - y[i]);
        break;
      case ActivationFn::kTanh:
        for (size_t i = 0; i < dx.size(); ++i) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
        break;
      case ActivationFn::kGelu:
        for (size_t i = 0; i < dx.size(); ++i) {
          const float cdf = 0.5f * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
          const float pdf = std::exp(-0.5f * x[i] * x[i]) * 0.3989422804014327f;
          dx[i] += dy[i] * (cdf + x[i] * pdf);
        }
        break;
    }
  }

 private:
  ActivationFn fn_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeActivationKernel(const KernelContext& ctx) {
  return std::make_unique<ActivationKernel>(ActivationOfOp(ctx.layer.spec.op));
}

}  // namespace fleetps::trainer::graph
