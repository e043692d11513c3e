// The ops that only move floats:
//   concat   inputs joined along `axis` (default the last): [n, k1] + [n, k2] -> [n, k1 + k2],
//            or along axis 0: [n1, k] + [n2, k] -> [n1 + n2, k]
//   flatten  [n, k] -> [n k];  reshape: the same floats under another shape
//   split    one input cut along its last axis into `sizes` (the inverse of concat)
// No parameters. Backward adds each piece of the gradient back where its floats came from.

#include <algorithm>

#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

// Views a tensor of `shape` as [batch * outer x inner], cut before `axis`.
size_t Outer(const Shape& shape, size_t axis) {
  size_t n = 1;
  for (size_t d = 0; d < axis; ++d) n *= shape[d];
  return n;
}
size_t Inner(const Shape& shape, size_t axis) {
  size_t n = 1;
  for (size_t d = axis; d < shape.size(); ++d) n *= shape[d];
  return n;
}

// Pieces side by side: `whole` rows are the pieces' rows joined, for concat and split alike.
class JoinKernel : public OpKernel {
 public:
  JoinKernel(std::span<const Shape> pieces, size_t axis, bool split) : split_(split) {
    outer_ = Outer(pieces[0], axis);
    for (const Shape& s : pieces) widths_.push_back(Inner(s, axis));
    for (size_t w : widths_) total_ += w;
  }

  void Forward(const OpArgs& a) const override {
    const size_t rows = a.batch * outer_;
    for (size_t r = 0; r < rows; ++r) {
      size_t at = 0;
      for (size_t p = 0; p < widths_.size(); ++p) {
        const size_t w = widths_[p];
        // Loops, not memmove calls: pieces are often a few floats (a logit, a slot's field).
        if (split_) {
          const float* from = a.inputs[0].data() + r * total_ + at;
          float* to = a.outputs[p].data() + r * w;
          for (size_t j = 0; j < w; ++j) to[j] = from[j];
        } else {
          const float* from = a.inputs[p].data() + r * w;
          float* to = a.outputs[0].data() + r * total_ + at;
          for (size_t j = 0; j < w; ++j) to[j] = from[j];
        }
        at += w;
      }
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    const size_t rows = a.batch * outer_;
    if (split_ && g.input_grads[0].empty()) return;
    for (size_t r = 0; r < rows; ++r) {
      size_t at = 0;
      for (size_t p = 0; p < widths_.size(); ++p) {
        const size_t w = widths_[p];
        if (split_) {
          const float* dy = g.output_grads[p].data() + r * w;
          float* dx = g.input_grads[0].data() + r * total_ + at;
          for (size_t j = 0; j < w; ++j) dx[j] += dy[j];
        } else if (!g.input_grads[p].empty()) {
          const float* dy = g.output_grads[0].data() + r * total_ + at;
          float* dx = g.input_grads[p].data() + r * w;
          for (size_t j = 0; j < w; ++j) dx[j] += dy[j];
        }
        at += w;
      }
    }
  }

 private:
  bool split_;
  size_t outer_ = 1;
  std::vector<size_t> widths_;
  size_t total_ = 0;
};

class CopyKernel : public OpKernel {
 public:
  void Forward(const OpArgs& a) const override { std::ranges::copy(a.inputs[0], a.outputs[0].begin()); }
  void Backward(const OpArgs&, const OpGrads& g) const override {
    if (g.input_grads[0].empty()) return;
    const std::span<const float> dy = g.output_grads[0];
    for (size_t i = 0; i < dy.size(); ++i) g.input_grads[0][i] += dy[i];
  }
};

}  // namespace

std::unique_ptr<OpKernel> MakeConcatKernel(const KernelContext& ctx) {
  const Shape& out = ctx.output_shapes[0];
  int64_t axis = ctx.layer.spec.attrs.Int("axis", -1, -1, 1).value();
  if (axis < 0) axis = static_cast<int64_t>(out.size()) - 1;
  return std::make_unique<JoinKernel>(ctx.input_shapes, static_cast<size_t>(axis), /*split=*/false);
}

std::unique_ptr<OpKernel> MakeCopyKernel(const KernelContext&) { return std::make_unique<CopyKernel>(); }

std::unique_ptr<OpKernel> MakeSplitKernel(const KernelContext& ctx) {
  return std::make_unique<JoinKernel>(ctx.output_shapes, ctx.input_shapes[0].size() - 1, /*split=*/true);
}

}  // namespace fleetps::trainer::graph
