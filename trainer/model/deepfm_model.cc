// deepfm (PaddleRec rank/deepfm): logit = deep MLP(activation row) + first order + FM,
//   first order = sum over slots of the pooled first-order weights (column 0 of each slot
//                 block: embed_w of Paddle's CTR accessor) + w_dense . dense
//   FM          = sum over pairs of fields of <v_i, v_j>, the fields being each slot's
//                 pooled embedding (columns 1.. of its block: embedx, zero until the CTR
//                 accessor extends a row) and each dense feature's x_j V_j
// added to the click logit (the last one). Parameters: the deep MLP (as mlp_model.cc), then
// w_dense [dense_dim], then V [dense_dim x k] row-major.

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "trainer/model/dense_model.h"
#include "trainer/model/interactions.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

class DeepFmModel : public DenseModel {
 public:
  DeepFmModel(const ModelOptions& o, const dense::CpuGemm* gemm)
      : layout_(SlotLayout::FromOptions(o)),
        logits_(NumLogits(o.output)),
        k_(layout_.embedding_dim()),
        fm_(layout_.num_slots + layout_.dense_dim, k_) {
    FLEETPS_CHECK(o.slot_dims.empty()) << "one embedding width for every slot";
    FLEETPS_CHECK(layout_.first_order);
    std::vector<uint32_t> widths = o.fc_sizes;
    widths.push_back(static_cast<uint32_t>(logits_));
    deep_ = Mlp(layout_.width(), widths, /*relu_last=*/false, 0, gemm);
    first_offset_ = deep_.num_params();
    v_offset_ = first_offset_ + layout_.dense_dim;
  }

  ModelType type() const override { return ModelType::kDeepFm; }
  size_t in_dim() const override { return layout_.width(); }
  size_t num_params() const override { return v_offset_ + layout_.dense_dim * k_; }
  size_t num_logits() const override { return logits_; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<DeepFmScratch>(); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    deep_.InitParams(params, rng);
    std::ranges::fill(params.subspan(first_offset_, layout_.dense_dim), 0.0f);
    // Dense fields' embeddings on the scale of the sparse rows' initializer.
    for (float& v : params.subspan(v_offset_, layout_.dense_dim * k_)) v = rng->Next(-0.01f, 0.01f);
  }

  void Forward(std::span<const float> params, std::span<const float> a, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    auto* s = static_cast<DeepFmScratch*>(scratch);
    const std::span<const float> deep = deep_.Forward(params, a, batch, &s->deep);
    std::copy(deep.begin(), deep.end(), logits.begin());
    GatherFields(params, a, batch, &s->fields);
    s->fm.resize(batch);
    fm_.Forward(s->fields, batch, s->fm);
    const float* w = params.data() + first_offset_;
    const size_t width = layout_.width();
    for (size_t b = 0; b < batch; ++b) {
      const float* row = a.data() + b * width;
      float first = 0;
      for (size_t slot = 0; slot < layout_.num_slots; ++slot) first += row[layout_.block_offset(slot)];
      const float* dense = row + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) first += w[j] * dense[j];
      logits[b * logits_ + logits_ - 1] += first + s->fm[b];
    }
  }

  void Backward(std::span<const float> params, std::span<const float> a, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    auto* s = static_cast<DeepFmScratch*>(scratch);
    const size_t width = layout_.width();
    const size_t fields = fm_.fields();
    s->g.resize(batch);
    for (size_t b = 0; b < batch; ++b) s->g[b] = logit_grads[b * logits_ + logits_ - 1];
    s->field_grads.assign(batch * fields * k_, 0.0f);
    fm_.Backward(s->fields, s->g, batch, s->field_grads);

    const float* w = params.data() + first_offset_;
    const float* v = params.data() + v_offset_;
    float* dw = param_grads.data() + first_offset_;
    float* dv = param_grads.data() + v_offset_;
    std::fill(dw, dw + (num_params() - first_offset_), 0.0f);
    for (size_t b = 0; b < batch; ++b) {
      const float* dense = a.data() + b * width + layout_.dense_offset();
      const float* de = s->field_grads.data() + (b * fields + layout_.num_slots) * k_;
      for (size_t j = 0; j < layout_.dense_dim; ++j) {
        dw[j] += s->g[b] * dense[j];
        for (size_t f = 0; f < k_; ++f) dv[j * k_ + f] += de[j * k_ + f] * dense[j];
      }
    }
    if (ready) ready(first_offset_, num_params());
    deep_.Backward(params, a, logit_grads, batch, param_grads, activation_grads, &s->deep, ready);
    if (activation_grads.empty()) return;
    for (size_t b = 0; b < batch; ++b) {
      float* row = activation_grads.data() + b * width;
      const float* de = s->field_grads.data() + b * fields * k_;
      for (size_t slot = 0; slot < layout_.num_slots; ++slot) {
        float* block = row + layout_.block_offset(slot);
        block[0] += s->g[b];
        for (size_t f = 0; f < k_; ++f) block[1 + f] += de[slot * k_ + f];
      }
      float* dx = row + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) {
        float dot = 0;  // d(FM)/dx_j = <dE_j, V_j>
        for (size_t f = 0; f < k_; ++f) dot += de[(layout_.num_slots + j) * k_ + f] * v[j * k_ + f];
        dx[j] += s->g[b] * w[j] + dot;
      }
    }
  }

 private:
  struct DeepFmScratch : Scratch {
    MlpScratch deep;
    std::vector<float> fields, field_grads;  // [batch x fields x k]
    std::vector<float> fm, g;                // [batch]
  };

  // fields [batch x (slots + dense) x k]: the slots' pooled embeddings, then x_j V_j.
  void GatherFields(std::span<const float> params, std::span<const float> a, size_t batch,
                    std::vector<float>* fields) const {
    const size_t n = fm_.fields();
    const size_t width = layout_.width();
    const float* v = params.data() + v_offset_;
    fields->resize(batch * n * k_);
    for (size_t b = 0; b < batch; ++b) {
      const float* row = a.data() + b * width;
      float* out = fields->data() + b * n * k_;
      for (size_t slot = 0; slot < layout_.num_slots; ++slot) {
        std::copy_n(row + layout_.block_offset(slot) + 1, k_, out + slot * k_);
      }
      const float* dense = row + layout_.dense_offset();
      for (size_t j = 0; j < layout_.dense_dim; ++j) {
        float* field = out + (layout_.num_slots + j) * k_;
        for (size_t f = 0; f < k_; ++f) field[f] = dense[j] * v[j * k_ + f];
      }
    }
  }

  SlotLayout layout_;
  size_t logits_;
  size_t k_;
  FmSecondOrder fm_;
  Mlp deep_;
  size_t first_offset_ = 0;
  size_t v_offset_ = 0;
};

}  // namespace

std::unique_ptr<DenseModel> MakeDeepFmModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return std::make_unique<DeepFmModel>(options, gemm);
}

}  // namespace fleetps::trainer::model
