// The feature-interaction ops of the ranking models.
//   fm               factorization machine's pairwise term over fields e [n, k] -> [1]:
//                    y = 1/2 sum_f ((sum_i e_if)^2 - sum_i e_if^2) = sum_{i<j} <e_i, e_j>;
//                    several inputs [n_j, k] are one set of fields, as if joined on axis 0
//   cross            one DCN cross layer over x0, x [d] -> [d]:
//                    v1: y = x0 (x . w) + b + x     parameters w [d], b [d]
//                    v2: y = x0 * (x W + b) + x     parameters W [d x d], b [d]
//                    init: v1 w ~ U(-a, a), a = sqrt(6 / (d + 1)); v2 W Xavier; b = 0
//                    v2 with `rank` r (low-rank DCN-v2): y = x0 * ((x V) U + b) + x,
//                    parameters V [d x r], U [r x d], b [d]; V, U Xavier (a = sqrt(6 /
//                    (d + r))), b = 0
//   dot_interaction  DLRM's dots of every pair of e [n, k] -> [n(n-1)/2], pairs (0,1), (0,2),
//                    ..., (0,n-1), (1,2), ...
//   dense_embedding  dense features as fields: x [d] -> [d, k], row j = x_j V_j; parameter
//                    V [d x k], init U(-0.01, 0.01) (the sparse rows' scale)

#include <algorithm>
#include <cmath>
#include <vector>
#include <cstdint>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

// The fields of all inputs together: input j holds n_j of them.
class FmKernel : public OpKernel {
 public:
  explicit FmKernel(std::span<const Shape> in) : k_(in[0][1]) {
    for (const Shape& s : in) n_.push_back(s[0]);
  }
  size_t ScratchFloats(size_t) const override { return k_; }

  void Forward(const OpArgs& a) const override {
    for (size_t b = 0; b < a.batch; ++b) {
      double total = 0;
      for (size_t f = 0; f < k_; ++f) {
        double sum = 0, squares = 0;
        for (size_t j = 0; j < n_.size(); ++j) {
          const float* e = a.inputs[j].data() + b * n_[j] * k_;
          for (size_t i = 0; i < n_[j]; ++i) {
            const double v = e[i * k_ + f];
            sum += v;
            squares += v * v;
          }
        }
        total += sum * sum - squares;
      }
      a.outputs[0][b] = static_cast<float>(0.5 * total);
    }
  }

  // de_i += dy (sum over every field e - e_i).
  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::span<float> sum = a.scratch.first(k_);
    for (size_t b = 0; b < a.batch; ++b) {
      const float dy = g.output_grads[0][b];
      std::ranges::fill(sum, 0.0f);
      for (size_t j = 0; j < n_.size(); ++j) {
        const float* e = a.inputs[j].data() + b * n_[j] * k_;
        for (size_t i = 0; i < n_[j]; ++i) {
          for (size_t f = 0; f < k_; ++f) sum[f] += e[i * k_ + f];
        }
      }
      for (size_t j = 0; j < n_.size(); ++j) {
        if (g.input_grads[j].empty()) continue;
        const float* e = a.inputs[j].data() + b * n_[j] * k_;
        float* de = g.input_grads[j].data() + b * n_[j] * k_;
        for (size_t i = 0; i < n_[j]; ++i) {
          for (size_t f = 0; f < k_; ++f) de[i * k_ + f] += dy * (sum[f] - e[i * k_ + f]);
        }
      }
    }
  }

 private:
  std::vector<size_t> n_;
  size_t k_;
};

class CrossKernel : public OpKernel {
 public:
  CrossKernel(size_t d, bool v2, const dense::CpuGemm* gemm) : d_(d), v2_(v2), gemm_(gemm) {}
  // inner (v1 [batch], v2 [batch x d]), then v2's d(inner) [batch x d].
  size_t ScratchFloats(size_t batch) const override { return v2_ ? 2 * batch * d_ : batch; }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    const size_t weights = params.size() - d_;
    const float limit = std::sqrt(6.0f / static_cast<float>(v2_ ? d_ + d_ : d_ + 1));
    for (float& v : params.first(weights)) v = rng->Next(-limit, limit);
    std::ranges::fill(params.subspan(weights), 0.0f);
  }

  void Forward(const OpArgs& a) const override {
    const float* w = a.params.data();
    const float* bias = w + (v2_ ? d_ * d_ : d_);
    const std::span<const float> x0 = a.inputs[0], x = a.inputs[1];
    std::span<float> y = a.outputs[0];
    if (!v2_) {
      for (size_t b = 0; b < a.batch; ++b) {
        const float* xr = x.data() + b * d_;
        const float* x0r = x0.data() + b * d_;
        float dot = 0;
        for (size_t j = 0; j < d_; ++j) dot += xr[j] * w[j];
        a.scratch[b] = dot;
        float* yr = y.data() + b * d_;
        for (size_t j = 0; j < d_; ++j) yr[j] = x0r[j] * dot + bias[j] + xr[j];
      }
      return;
    }
    if (a.batch == 0) return;
    float* inner = a.scratch.data();
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, d_, d_, x.data(), d_, w, d_, 0.0f, inner, d_, {.bias = bias});
    for (size_t i = 0; i < a.batch * d_; ++i) y[i] = x0[i] * inner[i] + x[i];
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const float* w = a.params.data();
    float* dw = g.param_grads.data();
    float* db = dw + (v2_ ? d_ * d_ : d_);
    std::ranges::fill(g.param_grads, 0.0f);
    const std::span<const float> x0 = a.inputs[0], x = a.inputs[1], dy = g.output_grads[0];
    const std::span<float> dx0 = g.input_grads[0], dx = g.input_grads[1];
    if (!v2_) {
      for (size_t b = 0; b < a.batch; ++b) {
        const float* gr = dy.data() + b * d_;
        for (size_t j = 0; j < d_; ++j) db[j] += gr[j];
        const float* x0r = x0.data() + b * d_;
        const float* xr = x.data() + b * d_;
        float g_x0 = 0;  // d(loss)/d(x . w) = dy . x0
        for (size_t j = 0; j < d_; ++j) g_x0 += gr[j] * x0r[j];
        for (size_t j = 0; j < d_; ++j) dw[j] += g_x0 * xr[j];
        if (!dx0.empty()) {
          for (size_t j = 0; j < d_; ++j) dx0[b * d_ + j] += gr[j] * a.scratch[b];
        }
        if (!dx.empty()) {
          for (size_t j = 0; j < d_; ++j) dx[b * d_ + j] += g_x0 * w[j] + gr[j];
        }
      }
      return;
    }
    if (a.batch == 0) return;
    const float* inner = a.scratch.data();
    float* dinner = a.scratch.data() + a.batch * d_;
    for (size_t i = 0; i < a.batch * d_; ++i) dinner[i] = dy[i] * x0[i];
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, d_, d_, a.batch, x.data(), d_, dinner, d_, 0.0f, dw, d_);
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t j = 0; j < d_; ++j) db[j] += dinner[b * d_ + j];
    }
    if (!dx0.empty()) {
      for (size_t i = 0; i < a.batch * d_; ++i) dx0[i] += dy[i] * inner[i];
    }
    if (!dx.empty()) {
      for (size_t i = 0; i < a.batch * d_; ++i) dx[i] += dy[i];
      gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, d_, d_, dinner, d_, w, d_, 1.0f, dx.data(), d_);
    }
  }

 private:
  size_t d_;
  bool v2_;
  const dense::CpuGemm* gemm_;
};

// Low-rank DCN-v2: h = x V [r], inner = h U + b [d], y = x0 * inner + x. Backward, with
// g = dy * x0: db = sum g, dU = h^T g, dh = g U^T, dV = x^T dh, dx0 += dy * inner,
// dx += dy + dh V^T.
class LowRankCrossKernel : public OpKernel {
 public:
  LowRankCrossKernel(size_t d, size_t r, const dense::CpuGemm* gemm) : d_(d), r_(r), gemm_(gemm) {}
  // h [batch x r], inner [batch x d], then the backward's g [batch x d] and dh [batch x r].
  size_t ScratchFloats(size_t batch) const override { return 2 * batch * (d_ + r_); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    const float limit = std::sqrt(6.0f / static_cast<float>(d_ + r_));  // the same for V and U
    for (float& v : params.first(2 * d_ * r_)) v = rng->Next(-limit, limit);
    std::ranges::fill(params.subspan(2 * d_ * r_), 0.0f);
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const float* v = a.params.data();
    const float* u = v + d_ * r_;
    const float* bias = u + r_ * d_;
    float* h = a.scratch.data();
    float* inner = h + a.batch * r_;
    const std::span<const float> x0 = a.inputs[0], x = a.inputs[1];
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, r_, d_, x.data(), d_, v, r_, 0.0f, h, r_);
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, d_, r_, h, r_, u, d_, 0.0f, inner, d_, {.bias = bias});
    for (size_t i = 0; i < a.batch * d_; ++i) a.outputs[0][i] = x0[i] * inner[i] + x[i];
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const float* v = a.params.data();
    const float* u = v + d_ * r_;
    float* dv = g.param_grads.data();
    float* du = dv + d_ * r_;
    float* db = du + r_ * d_;
    const float* h = a.scratch.data();
    const float* inner = h + a.batch * r_;
    float* gx0 = a.scratch.data() + a.batch * (r_ + d_);
    float* dh = gx0 + a.batch * d_;
    const std::span<const float> x0 = a.inputs[0], x = a.inputs[1], dy = g.output_grads[0];
    for (size_t i = 0; i < a.batch * d_; ++i) gx0[i] = dy[i] * x0[i];
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t j = 0; j < d_; ++j) db[j] += gx0[b * d_ + j];
    }
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, r_, d_, a.batch, h, r_, gx0, d_, 0.0f, du, d_);
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, r_, d_, gx0, d_, u, d_, 0.0f, dh, r_);
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, d_, r_, a.batch, x.data(), d_, dh, r_, 0.0f, dv, r_);
    const std::span<float> dx0 = g.input_grads[0], dx = g.input_grads[1];
    if (!dx0.empty()) {
      for (size_t i = 0; i < a.batch * d_; ++i) dx0[i] += dy[i] * inner[i];
    }
    if (!dx.empty()) {
      for (size_t i = 0; i < a.batch * d_; ++i) dx[i] += dy[i];
      gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, d_, r_, dh, r_, v, r_, 1.0f, dx.data(), d_);
    }
  }

 private:
  size_t d_, r_;
  const dense::CpuGemm* gemm_;
};

class DotInteractionKernel : public OpKernel {
 public:
  explicit DotInteractionKernel(const Shape& in) : n_(in[0]), k_(in[1]) {}

  void Forward(const OpArgs& a) const override {
    const size_t pairs = n_ * (n_ - 1) / 2;
    for (size_t b = 0; b < a.batch; ++b) {
      const float* e = a.inputs[0].data() + b * n_ * k_;
      float* y = a.outputs[0].data() + b * pairs;
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = i + 1; j < n_; ++j) {
          float dot = 0;
          for (size_t f = 0; f < k_; ++f) dot += e[i * k_ + f] * e[j * k_ + f];
          *y++ = dot;
        }
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    if (g.input_grads[0].empty()) return;
    const size_t pairs = n_ * (n_ - 1) / 2;
    for (size_t b = 0; b < a.batch; ++b) {
      const float* e = a.inputs[0].data() + b * n_ * k_;
      const float* dy = g.output_grads[0].data() + b * pairs;
      float* de = g.input_grads[0].data() + b * n_ * k_;
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = i + 1; j < n_; ++j) {
          const float gij = *dy++;
          for (size_t f = 0; f < k_; ++f) {
            de[i * k_ + f] += gij * e[j * k_ + f];
            de[j * k_ + f] += gij * e[i * k_ + f];
          }
        }
      }
    }
  }

 private:
  size_t n_, k_;
};

class DenseEmbeddingKernel : public OpKernel {
 public:
  DenseEmbeddingKernel(size_t d, size_t k) : d_(d), k_(k) {}

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    for (float& v : params) v = rng->Next(-0.01f, 0.01f);
  }

  void Forward(const OpArgs& a) const override {
    const float* v = a.params.data();
    for (size_t b = 0; b < a.batch; ++b) {
      const float* x = a.inputs[0].data() + b * d_;
      float* y = a.outputs[0].data() + b * d_ * k_;
      for (size_t j = 0; j < d_; ++j) {
        for (size_t f = 0; f < k_; ++f) y[j * k_ + f] = x[j] * v[j * k_ + f];
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const float* v = a.params.data();
    float* dv = g.param_grads.data();
    std::ranges::fill(g.param_grads, 0.0f);
    const std::span<float> dx = g.input_grads[0];
    for (size_t b = 0; b < a.batch; ++b) {
      const float* x = a.inputs[0].data() + b * d_;
      const float* dy = g.output_grads[0].data() + b * d_ * k_;
      for (size_t j = 0; j < d_; ++j) {
        float dot = 0;
        for (size_t f = 0; f < k_; ++f) {
          dv[j * k_ + f] += dy[j * k_ + f] * x[j];
          dot += dy[j * k_ + f] * v[j * k_ + f];
        }
        if (!dx.empty()) dx[b * d_ + j] += dot;
      }
    }
  }

 private:
  size_t d_, k_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeFmKernel(const KernelContext& ctx) {
  return std::make_unique<FmKernel>(ctx.input_shapes);
}
std::unique_ptr<OpKernel> MakeCrossKernel(const KernelContext& ctx) {
  const bool v2 = ctx.layer.spec.attrs.Text("type", "v1").value() == "v2";
  const int64_t rank = ctx.layer.spec.attrs.Int("rank", 0, 1, INT64_MAX).value();
  if (v2 && rank > 0) {
    return std::make_unique<LowRankCrossKernel>(ctx.input_shapes[0][0], static_cast<size_t>(rank), ctx.gemm);
  }
  return std::make_unique<CrossKernel>(ctx.input_shapes[0][0], v2, ctx.gemm);
}
std::unique_ptr<OpKernel> MakeDotInteractionKernel(const KernelContext& ctx) {
  return std::make_unique<DotInteractionKernel>(ctx.input_shapes[0]);
}
std::unique_ptr<OpKernel> MakeDenseEmbeddingKernel(const KernelContext& ctx) {
  return std::make_unique<DenseEmbeddingKernel>(ctx.input_shapes[0][0], ctx.output_shapes[0][1]);
}

}  // namespace fleetps::trainer::graph
