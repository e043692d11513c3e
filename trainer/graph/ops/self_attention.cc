// self_attention: AutoInt's interacting layer, multi-head attention across fields.
//   E [n, k] -> y [n, W], W = heads * head_dim; per head h (columns h * head_dim ...):
//     Q = E Wq, K = E Wk, V = E Wv                       each [n, W]
//     P_h = softmax_rows(Q_h K_h^T s)                    [n, n], s = 1 (AutoInt) or
//                                                         1 / sqrt(head_dim) with scale: true
//     O = [P_1 V_1 | ... | P_heads V_heads]              [n, W]
//     y = relu(O + E Wres)    (residual: true, the default)  or  relu(O)  (residual: false)
// Parameters: Wq, Wk, Wv, then Wres (residual only), each [k x W] row-major; init each
// U(-a, a), a = sqrt(6 / (k + W)). PaddleRec's AutoInt also puts a ReLU on Q, K, V and on
// E Wres and a layer norm after y; this op is the paper's layer (the layer norm is an op of
// its own).
//
// Backward per example, head and query row i (dO = dy masked by y > 0):
//   dP_ij = dO_i . V_j,   dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij'),
//   dQ_i += s sum_j dS_ij K_j,   dK_j += s dS_ij Q_i,   dV_j += P_ij dO_i;
//   dWq = E^T dQ (likewise K, V), dWres = E^T dO, dE += dQ Wq^T + dK Wk^T + dV Wv^T + dO Wres^T.
// Each head's products run on the dense backend (row stride W). Scratch: Q, K, V [batch n x
// W], P [batch x heads x n x n], dQ, dK, dV [batch n x W], and one [n x n].

#include <algorithm>
#include <cmath>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class SelfAttentionKernel : public OpKernel {
 public:
  SelfAttentionKernel(const Shape& in, size_t heads, size_t head_dim, bool residual, bool scale,
                      const dense::CpuGemm* gemm)
      : n_(in[0]),
        k_(in[1]),
        heads_(heads),
        head_dim_(head_dim),
        width_(heads * head_dim),
        residual_(residual),
        scale_(scale ? 1.0f / std::sqrt(static_cast<float>(head_dim)) : 1.0f),
        gemm_(gemm) {}

  size_t ScratchFloats(size_t batch) const override {
    return 6 * batch * n_ * width_ + batch * heads_ * n_ * n_ + n_ * n_;
  }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    const float limit = std::sqrt(6.0f / static_cast<float>(k_ + width_));
    for (float& v : params) v = rng->Next(-limit, limit);
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const size_t rows = a.batch * n_, kw = k_ * width_;
    const float* e = a.inputs[0].data();
    const float* w = a.params.data();
    for (size_t m = 0; m < 3; ++m) {
      gemm_->Gemm(dense::Op::kN, dense::Op::kN, rows, width_, k_, e, k_, w + m * kw, width_, 0.0f, s.qkv[m], width_);
    }
    float* y = a.outputs[0].data();
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t h = 0; h < heads_; ++h) Attend(s, b, h, y);
    }
    if (residual_) {
      gemm_->Gemm(dense::Op::kN, dense::Op::kN, rows, width_, k_, e, k_, w + 3 * kw, width_, 1.0f, y, width_,
                  {.relu = true});
    } else {
      for (float& v : a.outputs[0]) v = std::max(v, 0.0f);
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const size_t rows = a.batch * n_, kw = k_ * width_;
    const float* e = a.inputs[0].data();
    const float* w = a.params.data();
    float* dw = g.param_grads.data();
    const std::span<float> dy = g.output_grads[0];
    const std::span<const float> y = a.outputs[0];
    for (size_t j = 0; j < dy.size(); ++j) dy[j] = y[j] > 0.0f ? dy[j] : 0.0f;
    std::fill(s.dqkv[0], s.dqkv[0] + 3 * rows * width_, 0.0f);  // dQ, dK, dV are adjacent
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t h = 0; h < heads_; ++h) AttendBackward(s, b, h, dy.data());
    }
    const size_t mats = residual_ ? 4 : 3;
    for (size_t m = 0; m < mats; ++m) {
      const float* grad = m < 3 ? s.dqkv[m] : dy.data();
      gemm_->Gemm(dense::Op::kT, dense::Op::kN, k_, width_, rows, e, k_, grad, width_, 0.0f, dw + m * kw, width_);
    }
    if (g.input_grads[0].empty()) return;
    for (size_t m = 0; m < mats; ++m) {
      const float* grad = m < 3 ? s.dqkv[m] : dy.data();
      gemm_->Gemm(dense::Op::kN, dense::Op::kT, rows, k_, width_, grad, width_, w + m * kw, width_, 1.0f,
                  g.input_grads[0].data(), k_);
    }
  }

 private:
  struct Buffers {
    float* qkv[3];
    float* probs;
    float* dqkv[3];
    float* square;  // [n x n]: one head's dP / dS
  };

  Buffers Carve(std::span<float> scratch, size_t batch) const {
    const size_t mat = batch * n_ * width_;
    float* p = scratch.data();
    Buffers s{};
    for (float*& q : s.qkv) q = std::exchange(p, p + mat);
    s.probs = std::exchange(p, p + batch * heads_ * n_ * n_);
    for (float*& q : s.dqkv) q = std::exchange(p, p + mat);
    s.square = p;
    return s;
  }

  // P_h of example b (kept in scratch) and O's head-h columns, written to y: two products
  // over the head's columns (row stride width_) and a softmax per row.
  void Attend(const Buffers& s, size_t b, size_t h, float* y) const {
    const size_t base = b * n_ * width_ + h * head_dim_;
    float* probs = s.probs + (b * heads_ + h) * n_ * n_;
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, n_, n_, head_dim_, s.qkv[0] + base, width_, s.qkv[1] + base, width_, 0.0f,
                probs, n_);
    for (size_t i = 0; i < n_; ++i) {
      float* p = probs + i * n_;
      float top = -INFINITY;
      for (size_t j = 0; j < n_; ++j) top = std::max(top, p[j] *= scale_);
      float total = 0;
      for (size_t j = 0; j < n_; ++j) total += (p[j] = std::exp(p[j] - top));
      const float inv = 1.0f / total;
      for (size_t j = 0; j < n_; ++j) p[j] *= inv;
    }
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, n_, head_dim_, n_, probs, n_, s.qkv[2] + base, width_, 0.0f, y + base,
                width_);
  }

  // Adds head h's share of dQ, dK, dV for example b, from dO (dy, masked):
  //   dP = dO V^T, dS = P (dP - rowsum(P dP)) s, dQ += dS K, dK += dS^T Q, dV += P^T dO.
  void AttendBackward(const Buffers& s, size_t b, size_t h, const float* dy) const {
    const size_t base = b * n_ * width_ + h * head_dim_;
    const float* probs = s.probs + (b * heads_ + h) * n_ * n_;
    float* ds = s.square;
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, n_, n_, head_dim_, dy + base, width_, s.qkv[2] + base, width_, 0.0f, ds,
                n_);
    for (size_t i = 0; i < n_; ++i) {
      const float* p = probs + i * n_;
      float* d = ds + i * n_;
      float mean = 0;  // sum_j P_ij dP_ij
      for (size_t j = 0; j < n_; ++j) mean += p[j] * d[j];
      for (size_t j = 0; j < n_; ++j) d[j] = p[j] * (d[j] - mean) * scale_;
    }
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, n_, head_dim_, n_, ds, n_, s.qkv[1] + base, width_, 1.0f,
                s.dqkv[0] + base, width_);
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, n_, head_dim_, n_, ds, n_, s.qkv[0] + base, width_, 1.0f,
                s.dqkv[1] + base, width_);
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, n_, head_dim_, n_, probs, n_, dy + base, width_, 1.0f, s.dqkv[2] + base,
                width_);
  }

  size_t n_, k_, heads_, head_dim_, width_;
  bool residual_;
  float scale_;
  const dense::CpuGemm* gemm_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeSelfAttentionKernel(const KernelContext& ctx) {
  const auto& attrs = ctx.layer.spec.attrs;
  const auto heads = static_cast<size_t>(attrs.Int("heads", 1, 1, INT64_MAX).value());
  const auto head_dim = static_cast<size_t>(attrs.Int("head_dim", 1, 1, INT64_MAX).value());
  const bool residual = attrs.Text("residual", "true").value() == "true";
  const bool scale = attrs.Text("scale", "false").value() == "true";
  return std::make_unique<SelfAttentionKernel>(ctx.input_shapes[0], heads, head_dim, residual, scale, ctx.gemm);
}

}  // namespace fleetps::trainer::graph
