// gru: DIEN's interest extractor, a GRU over a behaviour sequence.
//   inputs: the sequence X [L, k] and its mask m [L] (1 real, 0 padding) -> the final state
//   [h], or with sequences: true every step's state [L, h] (padded positions' rows zero).
//   h_0 = 0; at a real position l (m_l > 0.5), with h the state before it:
//     z  = sigmoid(x_l Wz + bz + h Uz)
//     r  = sigmoid(x_l Wr + br + h Ur)
//     n  = tanh(x_l Wn + bn + r * (h Un + bhn))
//     h' = (1 - z) * n + z * h
//   and at a padded position h' = h (the state is carried). Padded rows of X enter no result:
//   any finite values there (the trainer's are zeros) change neither y nor a gradient, and
//   their gradient is zero. An example without real positions gives zeros.
// This is the reset-after form of cuDNN, PyTorch and paddle.nn.GRU: their input bias is b, the
// z and r parts of their hidden bias fold into bz and br, its n part is bhn (their gate order
// is r, z, n).
// Parameters: W [k x 3h] and U [h x 3h] row-major, each's columns the z, r, n blocks; b [3h]
// (bz, br, bn); bhn [h]. Init W ~ U(-a, a), a = sqrt(6 / (k + 3h)), U likewise with h for k;
// b = bhn = 0.
//
// The input projection of every position, G = X W + b [batch L x 3h], is one product on the
// CPU dense backend; the recurrence runs step by step over the whole batch, one product
// h U [batch x 3h] a step (skipped where no example has a real position).
// Backward through time, dh the gradient of the state (dy for the final state; with sequences:
// true, each real step's output row is added as the step is reached), at a real step:
//   dn = dh (1 - z),  dz = dh (h - n),
//   dgn = dn (1 - n^2),  dgz = dz z (1 - z),  dgr = dgn (h Un + bhn) r (1 - r),
//   dG = [dgz, dgr, dgn],  dP = [dgz, dgr, dgn r]   (P = h U, the step's product)
//   dU += h^T dP,  dbhn += dgn r,  dh <- dh z + dP U^T;
// at a padded step dh passes unchanged. Then dW = X^T dG, db = sum of dG, dX += dG W^T. The
// mask gets no gradient.
// Scratch: the gates z, r, n [batch L x 3h] (dG in Backward), h Un + bhn [batch L x h], the
// states [batch L x h], dh [batch x h], the step's product [batch x 3h] and a zero state [h].

#include <algorithm>
#include <cmath>
#include <utility>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class GruKernel : public OpKernel {
 public:
  GruKernel(const Shape& seq, size_t hidden, bool sequences, const dense::CpuGemm* gemm)
      : len_(seq[0]), k_(seq[1]), h_(hidden), sequences_(sequences), gemm_(gemm) {}

  size_t ScratchFloats(size_t batch) const override { return batch * len_ * 5 * h_ + batch * 4 * h_ + h_; }

  static float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    std::ranges::fill(params, 0.0f);
    const float w_limit = std::sqrt(6.0f / static_cast<float>(k_ + 3 * h_));
    const float u_limit = std::sqrt(6.0f / static_cast<float>(h_ + 3 * h_));
    for (float& v : params.first(k_ * 3 * h_)) v = rng->Next(-w_limit, w_limit);
    for (float& v : params.subspan(k_ * 3 * h_, h_ * 3 * h_)) v = rng->Next(-u_limit, u_limit);
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const Blocks<const float> p = Split(a.params.data());
    const size_t h3 = 3 * h_;
    const float* mask = a.inputs[1].data();
    std::fill(s.zero, s.zero + h_, 0.0f);
    gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch * len_, h3, k_, a.inputs[0].data(), k_, p.w, h3, 0.0f, s.gates,
                h3, {.bias = p.b});
    for (size_t l = 0; l < len_; ++l) {
      const bool any = AnyReal(mask, a.batch, l);
      if (any && l > 0) {
        gemm_->Gemm(dense::Op::kN, dense::Op::kN, a.batch, h3, h_, s.states + (l - 1) * h_, len_ * h_, p.u, h3, 0.0f,
                    s.step, h3);
      } else if (any) {
        std::fill(s.step, s.step + a.batch * h3, 0.0f);
      }
      for (size_t b = 0; b < a.batch; ++b) {
        const size_t at = b * len_ + l;
        const float* prev = l > 0 ? s.states + (at - 1) * h_ : s.zero;
        float* state = s.states + at * h_;
        if (!(mask[at] > 0.5f)) {
          std::copy(prev, prev + h_, state);
          continue;
        }
        float* gz = s.gates + at * h3;
        float* gr = gz + h_;
        float* gn = gz + 2 * h_;
        float* hn = s.hn + at * h_;
        const float* step = s.step + b * h3;
        for (size_t j = 0; j < h_; ++j) {
          const float z = Sigmoid(gz[j] + step[j]);
          const float r = Sigmoid(gr[j] + step[h_ + j]);
          hn[j] = step[2 * h_ + j] + p.bhn[j];
          const float n = std::tanh(gn[j] + r * hn[j]);
          state[j] = (1.0f - z) * n + z * prev[j];
          gz[j] = z;
          gr[j] = r;
          gn[j] = n;
        }
      }
    }
    float* y = a.outputs[0].data();
    for (size_t b = 0; b < a.batch; ++b) {
      if (!sequences_) {
        const float* last = s.states + ((b + 1) * len_ - 1) * h_;
        std::copy(last, last + h_, y + b * h_);
        continue;
      }
      for (size_t l = 0; l < len_; ++l) {
        const size_t at = b * len_ + l;
        float* row = y + at * h_;
        if (mask[at] > 0.5f) {
          std::copy(s.states + at * h_, s.states + (at + 1) * h_, row);
        } else {
          std::fill(row, row + h_, 0.0f);
        }
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const Blocks<const float> p = Split(a.params.data());
    const Blocks<float> dp = Split(g.param_grads.data());
    const size_t h3 = 3 * h_, rows = a.batch * len_;
    const float* mask = a.inputs[1].data();
    const float* dy = g.output_grads[0].data();
    if (sequences_) {
      std::fill(s.dh, s.dh + a.batch * h_, 0.0f);
    } else {
      std::copy(dy, dy + a.batch * h_, s.dh);
    }
    for (size_t l = len_; l-- > 0;) {
      bool any = false;
      for (size_t b = 0; b < a.batch; ++b) any = StepBackward(s, dp.bhn, mask, dy, b, l) || any;
      if (!any || l == 0) continue;
      // dU += h^T dP; dh += dP U^T (a padded example's dP row is zero).
      gemm_->Gemm(dense::Op::kT, dense::Op::kN, h_, h3, a.batch, s.states + (l - 1) * h_, len_ * h_, s.step, h3, 1.0f,
                  dp.u, h3);
      gemm_->Gemm(dense::Op::kN, dense::Op::kT, a.batch, h_, h3, s.step, h3, p.u, h3, 1.0f, s.dh, h_);
    }
    // dW = X^T dG, db = the column sums of dG, dX += dG W^T.
    const float* x = a.inputs[0].data();
    gemm_->Gemm(dense::Op::kT, dense::Op::kN, k_, h3, rows, x, k_, s.gates, h3, 0.0f, dp.w, h3);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < h3; ++j) dp.b[j] += s.gates[r * h3 + j];
    }
    if (g.input_grads[0].empty()) return;
    gemm_->Gemm(dense::Op::kN, dense::Op::kT, rows, k_, h3, s.gates, h3, p.w, h3, 1.0f, g.input_grads[0].data(), k_);
  }

 private:
  struct Buffers {
    float* gates;   // [batch L x 3h]: z, r, n; dG in Backward
    float* hn;      // [batch L x h]: h Un + bhn
    float* states;  // [batch L x h]: the state after each step (carried over padded ones)
    float* dh;      // [batch x h]
    float* step;    // [batch x 3h]: h U in Forward, dP in Backward
    float* zero;    // [h]: the initial state
  };

  // The parameters' (or their gradients') blocks.
  template <typename T>
  struct Blocks {
    T* w;
    T* u;
    T* b;
    T* bhn;
  };

  Buffers Carve(std::span<float> scratch, size_t batch) const {
    const size_t rows = batch * len_;
    float* p = scratch.data();
    Buffers s{};
    s.gates = std::exchange(p, p + rows * 3 * h_);
    s.hn = std::exchange(p, p + rows * h_);
    s.states = std::exchange(p, p + rows * h_);
    s.dh = std::exchange(p, p + batch * h_);
    s.step = std::exchange(p, p + batch * 3 * h_);
    s.zero = p;
    return s;
  }

  template <typename T>
  Blocks<T> Split(T* p) const {
    const size_t h3 = 3 * h_;
    return Blocks<T>{.w = p, .u = p + k_ * h3, .b = p + (k_ + h_) * h3, .bhn = p + (k_ + h_ + 1) * h3};
  }

  bool AnyReal(const float* mask, size_t batch, size_t l) const {
    for (size_t b = 0; b < batch; ++b) {
      if (mask[b * len_ + l] > 0.5f) return true;
    }
    return false;
  }

  // Example b's step l backward: dG into its gates row, dP into its step row, dbhn, and dh
  // through the direct path z * h. Returns whether the position is real.
  bool StepBackward(const Buffers& s, float* dbhn, const float* mask, const float* dy, size_t b, size_t l) const {
    const size_t h3 = 3 * h_, at = b * len_ + l;
    float* dgz = s.gates + at * h3;
    float* dstep = s.step + b * h3;
    if (!(mask[at] > 0.5f)) {
      std::fill(dgz, dgz + h3, 0.0f);
      std::fill(dstep, dstep + h3, 0.0f);
      return false;
    }
    float* dh = s.dh + b * h_;
    if (sequences_) {
      for (size_t j = 0; j < h_; ++j) dh[j] += dy[at * h_ + j];
    }
    const float* prev = l > 0 ? s.states + (at - 1) * h_ : s.zero;
    const float* hn = s.hn + at * h_;
    for (size_t j = 0; j < h_; ++j) {
      const float z = dgz[j], r = dgz[h_ + j], n = dgz[2 * h_ + j];
      const float dgn = dh[j] * (1.0f - z) * (1.0f - n * n);
      const float dgzj = dh[j] * (prev[j] - n) * z * (1.0f - z);
      const float dgr = dgn * hn[j] * r * (1.0f - r);
      dgz[j] = dgzj;
      dgz[h_ + j] = dgr;
      dgz[2 * h_ + j] = dgn;
      dstep[j] = dgzj;
      dstep[h_ + j] = dgr;
      dstep[2 * h_ + j] = dgn * r;
      dbhn[j] += dgn * r;
      dh[j] *= z;
    }
    return true;
  }

  size_t len_, k_, h_;
  bool sequences_;
  const dense::CpuGemm* gemm_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeGruKernel(const KernelContext& ctx) {
  const auto& attrs = ctx.layer.spec.attrs;
  const auto hidden = static_cast<size_t>(attrs.Int("hidden", 1, 1, INT64_MAX).value());
  const bool sequences = attrs.Text("sequences", "false").value() == "true";
  return std::make_unique<GruKernel>(ctx.input_shapes[0], hidden, sequences, ctx.gemm);
}

}  // namespace fleetps::trainer::graph
