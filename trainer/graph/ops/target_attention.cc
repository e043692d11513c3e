// target_attention: DIN's activation unit, a target's attention over a behaviour sequence.
//   inputs: the sequence S [L, k], its mask m [L] (1 real, 0 padding), the target t [k] -> y [k]
//   for each real position l (m_l > 0.5):
//     x_l = [t, s_l, t - s_l, t * s_l]                                   [4k]
//     h_0 = x_l,  h_i = act(h_{i-1} W_i + b_i)   for each hidden width (act: sigmoid | relu)
//     a_l = c (h_last W_o + b_o)                 c = 1, or 1 / sqrt(k) with scale: true
//     w_l = a_l   (softmax: false, DIN's paper)  or  exp(a_l) / sum_{real j} exp(a_j)  (true)
//   y = sum_{real l} w_l s_l.
// Padded positions take no part: their rows are never read, so nothing there (not even a NaN)
// changes y or a gradient, and an example without real positions gives y = 0. hidden: the
// widths, default [80, 40]; [] makes a_l linear in x_l.
// Parameters: the MLP's layers in order (the hidden ones, then the output of width 1), each
// W [in x out] row-major then b [out]; init W ~ U(-a, a), a = sqrt(6 / (in + out)), b = 0 (as fc).
// PaddleRec's DIN is hidden [80, 40], sigmoid (its dygraph net: relu), softmax: true, scale:
// true, with the MLP's input ordered [s, t, s - t, s * t] (the same unit up to a permutation and
// a sign of W_1's row blocks).
//
// The real positions of the whole batch are gathered into R rows, so the MLP costs what the
// real lengths need, not L; its products run on the CPU dense backend.
// Backward, per example (dy [k]) and real position l:
//   dw_l = dy . s_l,   ds_l += w_l dy,
//   da_l = c dw_l   or   c w_l (dw_l - sum_j w_j dw_j)   (softmax),
//   the MLP backward gives dW_i, db_i and dx_l = [dx_t, dx_s, dx_d, dx_p] (blocks of k), and
//   dt += dx_t + dx_d + dx_p * s_l,   ds_l += dx_s - dx_d + dx_p * t.
// The mask gets no gradient.
// Scratch, per (example, position): x_l [4k], each hidden layer's output, a_l, w_l, and one
// row of the widest hidden layer for the backward pass.

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class TargetAttentionKernel : public OpKernel {
 public:
  TargetAttentionKernel(const Shape& seq, const std::vector<size_t>& hidden, bool relu, bool softmax, bool scale,
                        const dense::CpuGemm* gemm)
      : len_(seq[0]),
        k_(seq[1]),
        relu_(relu),
        softmax_(softmax),
        scale_(scale ? 1.0f / std::sqrt(static_cast<float>(seq[1])) : 1.0f),
        gemm_(gemm) {
    widths_.push_back(4 * k_);
    widths_.insert(widths_.end(), hidden.begin(), hidden.end());
    widths_.push_back(1);
    size_t offset = 0, floats = 0;
    for (size_t i = 0; i + 1 < widths_.size(); ++i) {
      offsets_.push_back(offset);
      offset += widths_[i] * widths_[i + 1] + widths_[i + 1];
    }
    for (size_t width : hidden) {
      hidden_at_.push_back(floats);
      floats += width;
      widest_ = std::max(widest_, width);
    }
    hidden_floats_ = floats;
    per_row_ = 4 * k_ + floats + 2 + widest_;
  }

  size_t ScratchFloats(size_t batch) const override { return batch * len_ * per_row_; }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    std::ranges::fill(params, 0.0f);
    for (size_t i = 0; i < layers(); ++i) {
      const size_t in = widths_[i], out = widths_[i + 1];
      const float limit = std::sqrt(6.0f / static_cast<float>(in + out));
      for (float& v : params.subspan(offsets_[i], in * out)) v = rng->Next(-limit, limit);
    }
  }

  void Forward(const OpArgs& a) const override {
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const float* seq = a.inputs[0].data();
    const float* target = a.inputs[2].data();
    size_t rows = 0;
    ForEachReal(a, [&](size_t b, size_t l) {
      float* x = s.x + rows++ * 4 * k_;
      const float* t = target + b * k_;
      const float* sl = seq + (b * len_ + l) * k_;
      for (size_t j = 0; j < k_; ++j) {
        x[j] = t[j];
        x[k_ + j] = sl[j];
        x[2 * k_ + j] = t[j] - sl[j];
        x[3 * k_ + j] = t[j] * sl[j];
      }
    });
    MlpForward(a.params.data(), s, rows);
    // The weights and y, one example at a time (its real positions are consecutive rows).
    float* y = a.outputs[0].data();
    std::fill(y, y + a.batch * k_, 0.0f);
    size_t r = 0;
    for (size_t b = 0; b < a.batch; ++b) {
      const size_t begin = r;
      const float* m = a.inputs[1].data() + b * len_;
      for (size_t l = 0; l < len_; ++l) r += m[l] > 0.5f ? 1 : 0;
      Weights(s.score + begin, s.weight + begin, r - begin);
      size_t row = begin;
      for (size_t l = 0; l < len_; ++l) {
        if (!(m[l] > 0.5f)) continue;
        const float w = s.weight[row++];
        const float* sl = seq + (b * len_ + l) * k_;
        for (size_t j = 0; j < k_; ++j) y[b * k_ + j] += w * sl[j];
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    std::ranges::fill(g.param_grads, 0.0f);
    if (a.batch == 0) return;
    const Buffers s = Carve(a.scratch, a.batch);
    const float* seq = a.inputs[0].data();
    const float* target = a.inputs[2].data();
    const float* dy = g.output_grads[0].data();
    const std::span<float> dseq = g.input_grads[0];
    const std::span<float> dtarget = g.input_grads[2];
    // d(score) into the score rows: dw_l, then through the softmax and the scale.
    size_t r = 0;
    for (size_t b = 0; b < a.batch; ++b) {
      const size_t begin = r;
      const float* m = a.inputs[1].data() + b * len_;
      const float* dyb = dy + b * k_;
      for (size_t l = 0; l < len_; ++l) {
        if (!(m[l] > 0.5f)) continue;
        const float* sl = seq + (b * len_ + l) * k_;
        float dot = 0;
        for (size_t j = 0; j < k_; ++j) dot += dyb[j] * sl[j];
        s.score[r] = dot;
        if (!dseq.empty()) {
          float* ds = dseq.data() + (b * len_ + l) * k_;
          for (size_t j = 0; j < k_; ++j) ds[j] += s.weight[r] * dyb[j];
        }
        ++r;
      }
      float mean = 0;  // sum_j w_j dw_j
      if (softmax_) {
        for (size_t i = begin; i < r; ++i) mean += s.weight[i] * s.score[i];
      }
      for (size_t i = begin; i < r; ++i) {
        s.score[i] = scale_ * (softmax_ ? s.weight[i] * (s.score[i] - mean) : s.score[i]);
      }
    }
    const size_t rows = r;
    const bool inputs = !dseq.empty() || !dtarget.empty();
    MlpBackward(a.params.data(), g.param_grads.data(), s, rows, inputs);
    if (!inputs) return;
    r = 0;
    ForEachReal(a, [&](size_t b, size_t l) {
      const float* dx = s.x + r++ * 4 * k_;
      const float* t = target + b * k_;
      const float* sl = seq + (b * len_ + l) * k_;
      if (!dtarget.empty()) {
        float* dt = dtarget.data() + b * k_;
        for (size_t j = 0; j < k_; ++j) dt[j] += dx[j] + dx[2 * k_ + j] + dx[3 * k_ + j] * sl[j];
      }
      if (!dseq.empty()) {
        float* ds = dseq.data() + (b * len_ + l) * k_;
        for (size_t j = 0; j < k_; ++j) ds[j] += dx[k_ + j] - dx[2 * k_ + j] + dx[3 * k_ + j] * t[j];
      }
    });
  }

 private:
  // Each region holds batch * L rows; the first R (the real positions) are used.
  struct Buffers {
    size_t rows;    // batch * L
    float* x;       // [rows x 4k]: the MLP's input; its gradient in Backward
    float* hidden;  // hidden layer i's output [rows x width_i] at rows * hidden_at_[i]; in Backward
                    // the gradient of its pre-activation
    float* score;   // [rows]: a_l; its gradient in Backward
    float* weight;  // [rows]: w_l
    float* row;     // [rows x widest]: the backward pass's dh
  };

  size_t layers() const { return widths_.size() - 1; }

  Buffers Carve(std::span<float> scratch, size_t batch) const {
    const size_t rows = batch * len_;
    float* p = scratch.data();
    Buffers s{};
    s.rows = rows;
    s.x = std::exchange(p, p + rows * 4 * k_);
    s.hidden = p;
    p += rows * hidden_floats_;
    s.score = std::exchange(p, p + rows);
    s.weight = std::exchange(p, p + rows);
    s.row = p;
    return s;
  }

  // f(b, l) for each real position, in row order.
  template <typename F>
  void ForEachReal(const OpArgs& a, F f) const {
    const float* mask = a.inputs[1].data();
    for (size_t b = 0; b < a.batch; ++b) {
      for (size_t l = 0; l < len_; ++l) {
        if (mask[b * len_ + l] > 0.5f) f(b, l);
      }
    }
  }

  // The layer-i output buffer: a hidden layer's, or the scores.
  float* Hidden(const Buffers& s, size_t i) const { return s.hidden + s.rows * hidden_at_[i]; }
  float* Output(const Buffers& s, size_t i) const { return i + 1 < layers() ? Hidden(s, i) : s.score; }
  const float* Input(const Buffers& s, size_t i) const { return i == 0 ? s.x : Hidden(s, i - 1); }

  void MlpForward(const float* params, const Buffers& s, size_t rows) const {
    if (rows == 0) return;
    for (size_t i = 0; i < layers(); ++i) {
      const size_t in = widths_[i], out = widths_[i + 1];
      const float* w = params + offsets_[i];
      const bool last = i + 1 == layers();
      float* y = Output(s, i);
      gemm_->Gemm(dense::Op::kN, dense::Op::kN, rows, out, in, Input(s, i), in, w, out, 0.0f, y, out,
                  {.bias = w + in * out, .relu = !last && relu_});
      if (last) {
        for (size_t r = 0; r < rows; ++r) y[r] *= scale_;
      } else if (!relu_) {
        for (size_t j = 0; j < rows * out; ++j) y[j] = 1.0f / (1.0f + std::exp(-y[j]));
      }
    }
  }

  // From d(score) in s.score: every layer's dW and db, and (when inputs) dx in s.x.
  void MlpBackward(const float* params, float* grads, const Buffers& s, size_t rows, bool inputs) const {
    if (rows == 0) return;
    for (size_t i = layers(); i-- > 0;) {
      const size_t in = widths_[i], out = widths_[i + 1];
      const float* dz = Output(s, i);  // the gradient of the layer's pre-activation
      float* dw = grads + offsets_[i];
      gemm_->Gemm(dense::Op::kT, dense::Op::kN, in, out, rows, Input(s, i), in, dz, out, 0.0f, dw, out);
      float* db = dw + in * out;
      for (size_t r = 0; r < rows; ++r) {
        for (size_t j = 0; j < out; ++j) db[j] += dz[r * out + j];
      }
      const float* w = params + offsets_[i];
      if (i == 0) {
        if (inputs) gemm_->Gemm(dense::Op::kN, dense::Op::kT, rows, in, out, dz, out, w, out, 0.0f, s.x, in);
        break;
      }
      // dh = dz W^T, then through the activation, in place of the layer's input.
      gemm_->Gemm(dense::Op::kN, dense::Op::kT, rows, in, out, dz, out, w, out, 0.0f, s.row, in);
      float* h = Hidden(s, i - 1);
      for (size_t j = 0; j < rows * in; ++j) {
        h[j] = relu_ ? (h[j] > 0.0f ? s.row[j] : 0.0f) : s.row[j] * h[j] * (1.0f - h[j]);
      }
    }
  }

  // One example's weights from its n scores.
  void Weights(const float* score, float* weight, size_t n) const {
    if (!softmax_) {
      std::copy(score, score + n, weight);
      return;
    }
    if (n == 0) return;
    const float top = *std::max_element(score, score + n);
    float total = 0;
    for (size_t i = 0; i < n; ++i) total += (weight[i] = std::exp(score[i] - top));
    for (size_t i = 0; i < n; ++i) weight[i] /= total;
  }

  size_t len_, k_;
  bool relu_, softmax_;
  float scale_;
  const dense::CpuGemm* gemm_;
  std::vector<size_t> widths_;     // 4k, the hidden widths, 1
  std::vector<size_t> offsets_;    // each layer's W in the parameters
  std::vector<size_t> hidden_at_;  // each hidden layer's floats per row before it
  size_t hidden_floats_ = 0;       // the hidden layers' widths, summed
  size_t widest_ = 1;
  size_t per_row_ = 0;
};

}  // namespace

std::unique_ptr<OpKernel> MakeTargetAttentionKernel(const KernelContext& ctx) {
  const auto& attrs = ctx.layer.spec.attrs;
  std::vector<size_t> hidden = {80, 40};
  if (attrs.Has("hidden")) {
    hidden.clear();
    const std::vector<int64_t> widths = attrs.Ints("hidden").value();
    for (int64_t w : widths) hidden.push_back(static_cast<size_t>(w));
  }
  const bool relu = attrs.Text("activation", "sigmoid").value() == "relu";
  const bool softmax = attrs.Text("softmax", "false").value() == "true";
  const bool scale = attrs.Text("scale", "false").value() == "true";
  return std::make_unique<TargetAttentionKernel>(ctx.input_shapes[0], hidden, relu, softmax, scale, ctx.gemm);
}

}  // namespace fleetps::trainer::graph
