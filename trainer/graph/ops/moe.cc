// moe: the gated mix of MMoE / PLE. experts X [e, d] (the expert outputs, concatenated and
// reshaped to [e, d]) and a gate input x (flattened to [g]) -> y [d]:
//   gate = softmax(x Wg + bg)   [e]
//   y    = sum_i gate_i X_i
// Parameters: Wg [g x e] row-major (Paddle's Linear layout), then bg [e]; init Wg ~ U(-a, a),
// a = sqrt(6 / (g + e)), bg = 0 (PaddleRec's 0.1 gives the same softmax).
// Backward: dgate_i = dy . X_i, dlogit_i = gate_i (dgate_i - sum_j gate_j dgate_j);
//   dX_i += gate_i dy, dWg = x^T dlogit, dbg = sum over the batch of dlogit, dx += dlogit Wg^T.
// Scratch: gate [batch x e], dlogit [batch x e].

#include <algorithm>
#include <cmath>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class MoeKernel : public OpKernel {
 public:
  MoeKernel(const Shape& experts, size_t gate_in, const dense::CpuGemm* gemm)
      : e_(experts[0]), d_(experts[1]), g_(gate_in), gemm_(gemm) {}

  size_t ScratchFloats(size_t batch) const override { return 2 * batch * e_; }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    const float limit = std::sqrt(6.0f / static_cast<float>(g_ + e_));
    for (float& v : params.first(g_ * e_)) v = rng->Next(-limit, limit);
    std::ranges::fill(params.subspan(g_ * e_), 0.0f);
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const float* w = a.params.data();
    float* gate = a.scratch.data();
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, e_, g_, a.inputs[1].data(), g_, w, e_, 0.0f, gate, e_,
                {.bias = w + g_ * e_});
    for (size_t b = 0; b < a.batch; ++b) {
      float* p = gate + b * e_;
      const float top = *std::max_element(p, p + e_);
      float total = 0;
      for (size_t i = 0; i < e_; ++i) total += (p[i] = std::exp(p[i] - top));
      for (size_t i = 0; i < e_; ++i) p[i] /= total;
      const float* x = a.inputs[0].data() + b * e_ * d_;
      float* y = a.outputs[0].data() + b * d_;
      std::fill(y, y + d_, 0.0f);
      for (size_t i = 0; i < e_; ++i) {
        for (size_t j = 0; j < d_; ++j) y[j] += p[i] * x[i * d_ + j];
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const float* gate = a.scratch.data();
    float* dlogit = a.scratch.data() + a.batch * e_;
    const std::span<float> dx = g.input_grads[0];
    float* db = g.param_grads.data() + g_ * e_;
    for (size_t b = 0; b < a.batch; ++b) {
      const float* p = gate + b * e_;
      const float* x = a.inputs[0].data() + b * e_ * d_;
      const float* dy = g.output_grads[0].data() + b * d_;
      float* dl = dlogit + b * e_;
      float mean = 0;  // sum_i gate_i dgate_i
      for (size_t i = 0; i < e_; ++i) {
        float dot = 0;
        for (size_t j = 0; j < d_; ++j) dot += dy[j] * x[i * d_ + j];
        dl[i] = dot;
        mean += p[i] * dot;
      }
      for (size_t i = 0; i < e_; ++i) {
        dl[i] = p[i] * (dl[i] - mean);
        db[i] += dl[i];
      }
      if (dx.empty()) continue;
      float* dxr = dx.data() + b * e_ * d_;
      for (size_t i = 0; i < e_; ++i) {
        for (size_t j = 0; j < d_; ++j) dxr[i * d_ + j] += p[i] * dy[j];
      }
    }
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, g_, e_, a.batch, a.inputs[1].data(), g_, dlogit, e_, 0.0f,
                g.param_grads.data(), e_);
    if (g.input_grads[1].empty()) return;
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, g_, e_, dlogit, e_, a.params.data(), e_, 1.0f,
                g.input_grads[1].data(), g_);
  }

 private:
  size_t e_, d_, g_;
  const dense::CpuGemm* gemm_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeMoeKernel(const KernelContext& ctx) {
  return std::make_unique<MoeKernel>(ctx.input_shapes[0], fleetps::graph::NumElements(ctx.input_shapes[1]), ctx.gemm);
}

}  // namespace fleetps::trainer::graph
