// cin: xDeepFM's Compressed Interaction Network over fields X0 [m, D] -> [H_1 + ... + H_L].
//   layer k = 1..L, X_{k-1} [H_{k-1}, D] (X_0 the input, H_0 = m):
//     Z_k[h, i, d] = X_{k-1}[h, d] X0[i, d]
//     X_k[h', d]   = act(sum_{h, i} W_k[h', h, i] Z_k[h, i, d])       (no bias)
//   y = [sum_d X_1[., d] | sum_d X_2[., d] | ... | sum_d X_L[., d]]
// act: none (PaddleRec's xDeepFM, the default) | relu. Every layer's maps reach the output
// (no split_half). Parameters: W_1 .. W_L, W_k [H_k x H_{k-1} x m] row-major (a 1x1
// convolution's filters with input channel h * m + i; PaddleRec's Conv2D orders them
// i * H_{k-1} + h, the last two dims swapped); init W_k ~ U(-a, a),
// a = sqrt(6 / (H_{k-1} m + H_k)).
//
// Each layer is one product per chunk of examples: with rows r = (example, d),
//   Z [rows x H_{k-1} m] (Z[r, h m + i] = X_{k-1}[r, h] X0[r, i]),  X_k [rows x H_k] = Z W_k^T.
// Z is rebuilt in the backward pass rather than kept; the chunk bounds it to kCinZFloats.
// Scratch: X0 transposed [rows x m], every X_k [rows x H_k], then Z and dZ (one chunk each),
// two gradient buffers [rows x max H] and dX0 [rows x m].

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

constexpr size_t kCinZFloats = size_t{1} << 20;  // Z's floats per chunk (4 MB)

class CinKernel : public OpKernel {
 public:
  CinKernel(const Shape& in, std::vector<size_t> sizes, bool relu, const dense::CpuGemm* gemm)
      : m_(in[0]), d_(in[1]), sizes_(std::move(sizes)), relu_(relu), gemm_(gemm) {
    size_t prev = m_;
    for (size_t h : sizes_) {
      w_offsets_.push_back(params_);
      out_offsets_.push_back(out_);
      params_ += h * prev * m_;
      out_ += h;
      max_h_ = std::max(max_h_, h);
      max_zcols_ = std::max(max_zcols_, prev * m_);
      prev = h;
    }
    chunk_ = std::max<size_t>(1, kCinZFloats / std::max<size_t>(1, d_ * max_zcols_));
  }

  size_t ScratchFloats(size_t batch) const override {
    const size_t rows = batch * d_;
    const size_t zrows = std::min(batch, chunk_) * d_;
    return rows * (2 * m_ + out_ + 2 * max_h_) + 2 * zrows * max_zcols_;
  }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    size_t prev = m_;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      const float limit = std::sqrt(6.0f / static_cast<float>(prev * m_ + sizes_[k]));
      for (float& v : params.subspan(w_offsets_[k], sizes_[k] * prev * m_)) v = rng->Next(-limit, limit);
      prev = sizes_[k];
    }
  }

  void Forward(const OpArgs& a) const override {
    const Buffers s = Carve(a.scratch, a.batch);
    const float* x0 = a.inputs[0].data();
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t i = 0; i < m_; ++i) {
        for (size_t d = 0; d < d_; ++d) s.x0t[(b * d_ + d) * m_ + i] = x0[(b * m_ + i) * d_ + d];
      }
    }
    for (size_t k = 0; k < sizes_.size(); ++k) {
      const size_t hp = k == 0 ? m_ : sizes_[k - 1], zcols = hp * m_;
      const float* prev = k == 0 ? s.x0t : Maps(s, k - 1);
      for (size_t b0 = 0; b0 < a.batch; b0 += chunk_) {
        const size_t r0 = b0 * d_, nr = (std::min(a.batch, b0 + chunk_) - b0) * d_;
        BuildZ(s.x0t, prev, hp, r0, nr, s.z);
        gemm_->Gemm(dense::Op::kN, dense::Op::kT, nr, sizes_[k], zcols, s.z, zcols, a.params.data() + w_offsets_[k],
                    zcols, 0.0f, Maps(s, k) + r0 * sizes_[k], sizes_[k], {.relu = relu_});
      }
      for (size_t b = 0; b < a.batch; ++b) {
        float* y = a.outputs[0].data() + b * out_ + out_offsets_[k];
        std::fill(y, y + sizes_[k], 0.0f);
        for (size_t d = 0; d < d_; ++d) {
          const float* row = Maps(s, k) + (b * d_ + d) * sizes_[k];
          for (size_t h = 0; h < sizes_[k]; ++h) y[h] += row[h];
        }
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const bool need_dx = !g.input_grads[0].empty();
    const size_t rows = a.batch * d_;
    if (need_dx) std::fill(s.dx0t, s.dx0t + rows * m_, 0.0f);
    float* grad = s.grad_a;  // d(loss)/d(X_k) [rows x H_k]
    float* grad_prev = s.grad_b;
    SpreadOutputGrad(g.output_grads[0], a.batch, sizes_.size() - 1, grad);
    for (size_t k = sizes_.size(); k-- > 0;) {
      if (k > 0) SpreadOutputGrad(g.output_grads[0], a.batch, k - 1, grad_prev);
      BackwardLayer(a, g, s, k, need_dx, grad, grad_prev);
      std::swap(grad, grad_prev);
    }
    if (!need_dx) return;
    float* dx0 = g.input_grads[0].data();
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t i = 0; i < m_; ++i) {
        for (size_t d = 0; d < d_; ++d) dx0[(b * m_ + i) * d_ + d] += s.dx0t[(b * d_ + d) * m_ + i];
      }
    }
  }

 private:
  struct Buffers {
    size_t rows;
    float* x0t;
    float* maps;  // X_1 .. X_L, each [rows x H_k]: Maps(s, k)
    float* z;
    float* dz;
    float* grad_a;
    float* grad_b;
    float* dx0t;
  };

  // The scratch split as the file comment lists it.
  Buffers Carve(std::span<float> scratch, size_t batch) const {
    const size_t rows = batch * d_, zfloats = std::min(batch, chunk_) * d_ * max_zcols_;
    float* next = scratch.data();
    const auto take = [&](size_t n) { return std::exchange(next, next + n); };
    Buffers s{};
    s.rows = rows;
    s.x0t = take(rows * m_);
    s.maps = take(rows * out_);
    s.z = take(zfloats);
    s.dz = take(zfloats);
    s.grad_a = take(rows * max_h_);
    s.grad_b = take(rows * max_h_);
    s.dx0t = take(rows * m_);
    return s;
  }

  // X_{k+1} [rows x H_{k+1}] (k from 0).
  float* Maps(const Buffers& s, size_t k) const { return s.maps + s.rows * out_offsets_[k]; }

  // Z rows [r0, r0 + nr) of a layer whose previous maps are prev [rows x hp].
  void BuildZ(const float* x0t, const float* prev, size_t hp, size_t r0, size_t nr, float* z) const {
    for (size_t r = r0; r < r0 + nr; ++r) {
      const float* x0r = x0t + r * m_;
      float* zr = z + (r - r0) * hp * m_;
      for (size_t h = 0; h < hp; ++h) {
        const float xp = prev[r * hp + h];
        for (size_t i = 0; i < m_; ++i) zr[h * m_ + i] = xp * x0r[i];
      }
    }
  }

  // grad [rows x H_k] = dy's block of layer k, the same for every d (y sums over d).
  void SpreadOutputGrad(std::span<const float> dy, size_t batch, size_t k, float* grad) const {
    const size_t h = sizes_[k];
    for (size_t b = 0; b < batch; ++b) {
      const float* src = dy.data() + b * out_ + out_offsets_[k];
      for (size_t d = 0; d < d_; ++d) std::copy(src, src + h, grad + (b * d_ + d) * h);
    }
  }

  // Layer k's dW_k, and its inputs' gradients: grad_prev += d/dX_{k-1} (k > 0), dX0 += d/dX0.
  void BackwardLayer(const OpArgs& a, const OpGrads& g, const Buffers& s, size_t k, bool need_dx, float* grad,
                     float* grad_prev) const {
    const size_t h = sizes_[k], hp = k == 0 ? m_ : sizes_[k - 1], zcols = hp * m_;
    const float* prev = k == 0 ? s.x0t : Maps(s, k - 1);
    const float* w = a.params.data() + w_offsets_[k];
    float* dw = g.param_grads.data() + w_offsets_[k];
    if (relu_) {
      const float* x = Maps(s, k);
      for (size_t j = 0; j < a.batch * d_ * h; ++j) grad[j] = x[j] > 0.0f ? grad[j] : 0.0f;
    }
    for (size_t b0 = 0; b0 < a.batch; b0 += chunk_) {
      const size_t r0 = b0 * d_, nr = (std::min(a.batch, b0 + chunk_) - b0) * d_;
      BuildZ(s.x0t, prev, hp, r0, nr, s.z);
      // dW_k [h x zcols] (+)= grad^T Z.
      gemm_->Gemm(dense::Op::kT, dense::Op::kN, h, zcols, nr, grad + r0 * h, h, s.z, zcols, b0 == 0 ? 0.0f : 1.0f, dw,
                  zcols);
      if (k == 0 && !need_dx) continue;
      gemm_->Gemm(dense::Op::kN, dense::Op::kN, nr, zcols, h, grad + r0 * h, h, w, zcols, 0.0f, s.dz, zcols);
      for (size_t r = r0; r < r0 + nr; ++r) {
        const float* dzr = s.dz + (r - r0) * zcols;
        const float* x0r = s.x0t + r * m_;
        const float* pr = prev + r * hp;
        // Z[h, i] = prev[h] x0[i]: d prev[h] = sum_i dZ[h, i] x0[i], d x0[i] = sum_h dZ[h, i] prev[h].
        float* dprev = k == 0 ? s.dx0t + r * m_ : grad_prev + r * hp;
        float* dx0r = s.dx0t + r * m_;
        for (size_t c = 0; c < hp; ++c) {
          float sum = 0;
          for (size_t i = 0; i < m_; ++i) {
            sum += dzr[c * m_ + i] * x0r[i];
            if (need_dx) dx0r[i] += dzr[c * m_ + i] * pr[c];
          }
          dprev[c] += sum;
        }
      }
    }
  }

  size_t m_, d_;
  std::vector<size_t> sizes_;
  bool relu_;
  const dense::CpuGemm* gemm_;
  std::vector<size_t> w_offsets_, out_offsets_;
  size_t params_ = 0, out_ = 0, max_h_ = 0, max_zcols_ = 0, chunk_ = 1;
};

}  // namespace

std::unique_ptr<OpKernel> MakeCinKernel(const KernelContext& ctx) {
  const auto& attrs = ctx.layer.spec.attrs;
  const std::vector<int64_t> layer_sizes = attrs.Ints("layer_sizes").value();
  std::vector<size_t> sizes(layer_sizes.begin(), layer_sizes.end());
  const bool relu = attrs.Text("activation", "none").value() == "relu";
  return std::make_unique<CinKernel>(ctx.input_shapes[0], std::move(sizes), relu, ctx.gemm);
}

}  // namespace fleetps::trainer::graph
