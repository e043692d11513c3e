// dropout: in a training step y = x * m / (1 - rate), each m ~ Bernoulli(1 - rate) drawn from
// the step's seed (Paddle's upscale_in_train); in inference y = x. Any shape; no parameters.
// The scaled mask m / (1 - rate) is kept in scratch for the backward pass: dx += dy * it.

#include <algorithm>

#include "common/sharding.h"
#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {
namespace {

class DropoutKernel : public OpKernel {
 public:
  DropoutKernel(size_t n, double rate) : n_(n), rate_(rate), scale_(static_cast<float>(1.0 / (1.0 - rate))) {}
  size_t ScratchFloats(size_t batch) const override { return batch * n_; }

  void Forward(const OpArgs& a) const override {
    const std::span<const float> x = a.inputs[0];
    const std::span<float> y = a.outputs[0], mask = a.scratch;
    if (!a.training || rate_ == 0) {
      std::ranges::copy(x, y.begin());
      std::ranges::fill(mask, 1.0f);
      return;
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = static_cast<double>(MixKey(a.seed + i) >> 11) * 0x1.0p-53;
      mask[i] = u < rate_ ? 0.0f : scale_;
      y[i] = x[i] * mask[i];
    }
  }

  void Backward(const OpArgs& a, const OpGrads& g) const override {
    if (g.input_grads[0].empty()) return;
    const std::span<const float> dy = g.output_grads[0];
    for (size_t i = 0; i < dy.size(); ++i) g.input_grads[0][i] += dy[i] * a.scratch[i];
  }

 private:
  size_t n_;
  double rate_;
  float scale_;
};

}  // namespace

std::unique_ptr<OpKernel> MakeDropoutKernel(const KernelContext& ctx) {
  return std::make_unique<DropoutKernel>(fleetps::graph::NumElements(ctx.input_shapes[0]),
                                         ctx.layer.spec.attrs.Float("rate", 0.5).value());
}

}  // namespace fleetps::trainer::graph
