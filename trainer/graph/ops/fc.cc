// fc: y = act(x W + b), x the input flattened to [n], W [n x size] row-major (Paddle's Linear
// layout), b [size] (absent with bias: false). act: none | relu | sigmoid | tanh | gelu (erf
// form, Paddle's default). Parameters: W then b. init: xavier (W ~ U(-a, a), a =
// sqrt(6 / (n + size)); b = 0) | zeros. The products run on the CPU dense backend with the
// bias and ReLU fused into the forward product.

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

enum class Act { kNone, kRelu, kSigmoid, kTanh, kGelu };

Act ParseAct(const std::string& name) {
  if (name == "relu") return Act::kRelu;
  if (name == "sigmoid") return Act::kSigmoid;
  if (name == "tanh") return Act::kTanh;
  if (name == "gelu") return Act::kGelu;
  return Act::kNone;
}

class FcKernel : public OpKernel {
 public:
  explicit FcKernel(const KernelContext& ctx)
      : in_(fleetps::graph::NumElements(ctx.input_shapes[0])),
        out_(ctx.output_shapes[0][0]),
        bias_(ctx.layer.params.size() == 2),
        act_(ParseAct(ctx.layer.spec.attrs.Text("activation", "none").value())),
        zeros_(ctx.layer.spec.attrs.Text("init", "xavier").value() == "zeros"),
        gemm_(ctx.gemm) {}

  bool OverwritesInputGrads() const override { return true; }

  // gelu keeps its pre-activation for the backward pass.
  size_t ScratchFloats(size_t batch) const override { return act_ == Act::kGelu ? batch * out_ : 0; }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    std::ranges::fill(params, 0.0f);
    if (zeros_) return;
    const float limit = std::sqrt(6.0f / static_cast<float>(in_ + out_));
    for (float& v : params.first(in_ * out_)) v = rng->Next(-limit, limit);
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const float* w = a.params.data();
    std::span<float> y = a.outputs[0];
    if (out_ == 1) {  // a dot product per example: plain loops beat a library call
      const float bias = bias_ ? w[in_] : 0.0f;
      for (size_t b = 0; b < a.batch; ++b) {
        const float* x = a.inputs[0].data() + b * in_;
        float dot = 0;
        for (size_t i = 0; i < in_; ++i) dot += x[i] * w[i];
        y[b] = act_ == Act::kRelu ? std::max(dot + bias, 0.0f) : dot + bias;
      }
    } else {
      gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, out_, in_, a.inputs[0].data(), in_, w, out_, 0.0f, y.data(),
                  out_, {.bias = bias_ ? w + in_ * out_ : nullptr, .relu = act_ == Act::kRelu});
    }
    switch (act_) {
      case Act::kNone:
      case Act::kRelu: break;
      case Act::kSigmoid:
        for (float& v : y) v = 1.0f / (1.0f + std::exp(-v));
        break;
      case Act::kTanh:
        for (float& v : y) v = std::tanh(v);
        break;
      case Act::kGelu:
        std::copy(y.begin(), y.end(), a.scratch.begin());
        for (float& v : y) v = 0.5f * v * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
        break;
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::span<float> dy = g.output_grads[0];
    const std::span<const float> y = a.outputs[0];
    switch (act_) {
      case Act::kNone: break;
      case Act::kRelu:
        for (size_t i = 0; i < dy.size(); ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        break;
      case Act::kSigmoid:
        for (size_t i = 0; i < dy.size(); ++i) dy[i] *= y[i] * (1.0f - y[i]);
        break;
      case Act::kTanh:
        for (size_t i = 0; i < dy.size(); ++i) dy[i] *= 1.0f - y[i] * y[i];
        break;
      case Act::kGelu:
        for (size_t i = 0; i < dy.size(); ++i) {
          const float x = a.scratch[i];
          const float cdf = 0.5f * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2)));
          const float pdf = std::exp(-0.5f * x * x) * 0.3989422804014327f;
          dy[i] *= cdf + x * pdf;
        }
        break;
    }
    float* dw = g.param_grads.data();
    if (bias_) {
      float* db = dw + in_ * out_;
      std::fill(db, db + out_, 0.0f);
      for (size_t b = 0; b < a.batch; ++b) {
        const float* row = dy.data() + b * out_;
        for (size_t j = 0; j < out_; ++j) db[j] += row[j];
      }
    }
    if (a.batch == 0) {
      std::fill(dw, dw + in_ * out_, 0.0f);
      return;
    }
    const bool overwrite = !g.overwrite.empty() && g.overwrite[0];
    if (out_ == 1) {  // dW = sum of dy x, dx = dy w: loops, as Forward
      std::fill(dw, dw + in_, 0.0f);
      for (size_t b = 0; b < a.batch; ++b) {
        const float* x = a.inputs[0].data() + b * in_;
        for (size_t i = 0; i < in_; ++i) dw[i] += dy[b] * x[i];
      }
      if (g.input_grads[0].empty()) return;
      for (size_t b = 0; b < a.batch; ++b) {
        float* dx = g.input_grads[0].data() + b * in_;
        for (size_t i = 0; i < in_; ++i) dx[i] = (overwrite ? 0.0f : dx[i]) + dy[b] * a.params[i];
      }
      return;
    }
    // dW [in x out] = x^T dy; dx [batch x in] += dy W^T.
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, in_, out_, a.batch, a.inputs[0].data(), in_, dy.data(), out_, 0.0f, dw,
                out_);
    if (g.input_grads[0].empty()) return;
    const float beta = overwrite ? 0.0f : 1.0f;
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, in_, out_, dy.data(), out_, a.params.data(), out_, beta,
                g.input_grads[0].data(), in_);
  }

 private:
  size_t in_;
  size_t out_;
  bool bias_;
  Act act_;
  bool zeros_;
  const dense::CpuGemm* gemm_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeFcKernel(const KernelContext& ctx) { return std::make_unique<FcKernel>(ctx); }

}  // namespace fleetps::trainer::graph
