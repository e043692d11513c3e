// wide_deep (PaddleRec rank/wide_deep): logit = deep MLP(activation row) + wide part,
//   wide = sum over slots of the pooled first-order weights (column 0 of each slot block:
//          the sum of the ids' wide weights, kept in the sparse rows) + w_dense . dense
// added to the click logit (the last one). Parameters: the deep MLP (as mlp_model.cc),
// then w_dense [dense_dim]. The wide bias is the MLP's output bias.

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "trainer/model/dense_model.h"
#include "trainer/model/interactions.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

class WideDeepModel : public DenseModel {
 public:
  WideDeepModel(const ModelOptions& o, const dense::CpuGemm* gemm)
      : layout_(SlotLayout::FromOptions(o)), logits_(NumLogits(o.output)) {
    FLEETPS_CHECK(layout_.first_order);
    std::vector<uint32_t> widths = o.fc_sizes;
    widths.push_back(static_cast<uint32_t>(logits_));
    deep_ = Mlp(layout_.width(), widths, /*relu_last=*/false, 0, gemm);
    wide_offset_ = deep_.num_params();
  }

  ModelType type() const override { return ModelType::kWideDeep; }
  size_t in_dim() const override { return layout_.width(); }
  size_t num_params() const override { return wide_offset_ + layout_.dense_dim; }
  size_t num_logits() const override { return logits_; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<WideDeepScratch>(); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    deep_.InitParams(params, rng);
    std::ranges::fill(params.subspan(wide_offset_, layout_.dense_dim), 0.0f);
  }

  void Forward(std::span<const float> params, std::span<const float> a, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    auto* s = static_cast<WideDeepScratch*>(scratch);
    const std::span<const float> deep = deep_.Forward(params, a, batch, &s->deep);
    std::copy(deep.begin(), deep.end(), logits.begin());
    const float* w = params.data() + wide_offset_;
    const size_t width = layout_.width();
    for (size_t b = 0; b < batch; ++b) {
      const float* row = a.data() + b * width;
      float wide = 0;
      for (size_t slot = 0; slot < layout_.num_slots; ++slot) wide += row[layout_.block_offset(slot)];
      const float* dense = row + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) wide += w[j] * dense[j];
      logits[b * logits_ + logits_ - 1] += wide;
    }
  }

  void Backward(std::span<const float> params, std::span<const float> a, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    auto* s = static_cast<WideDeepScratch*>(scratch);
    const float* w = params.data() + wide_offset_;
    float* dw = param_grads.data() + wide_offset_;
    std::fill(dw, dw + layout_.dense_dim, 0.0f);
    const size_t width = layout_.width();
    for (size_t b = 0; b < batch; ++b) {
      const float g = logit_grads[b * logits_ + logits_ - 1];
      const float* dense = a.data() + b * width + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) dw[j] += g * dense[j];
    }
    if (ready) ready(wide_offset_, num_params());
    deep_.Backward(params, a, logit_grads, batch, param_grads, activation_grads, &s->deep, ready);
    if (activation_grads.empty()) return;
    for (size_t b = 0; b < batch; ++b) {
      const float g = logit_grads[b * logits_ + logits_ - 1];
      float* row = activation_grads.data() + b * width;
      for (size_t slot = 0; slot < layout_.num_slots; ++slot) row[layout_.block_offset(slot)] += g;
      float* dense = row + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) dense[j] += g * w[j];
    }
  }

 private:
  struct WideDeepScratch : Scratch {
    MlpScratch deep;
  };
  SlotLayout layout_;
  size_t logits_;
  Mlp deep_;
  size_t wide_offset_ = 0;
};

}  // namespace

std::unique_ptr<DenseModel> MakeWideDeepModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return std::make_unique<WideDeepModel>(options, gemm);
}

}  // namespace fleetps::trainer::model
