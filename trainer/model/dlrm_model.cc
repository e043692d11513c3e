// dlrm (PaddleRec rank/dlrm, Naumov et al. 2019):
//   z      = bottom MLP(dense features), ReLU after every layer, |z| = k (the embedding width)
//   dots   = <u_i, u_j> for every pair i < j of u = (z, slot 0 embedding, ..., slot S-1)
//   logits = top MLP([z | dots]) (ReLU after every layer but the last, the output layer)
// Parameters: the bottom MLP, then the top MLP (each as mlp_model.cc lays an MLP out).

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "trainer/model/dense_model.h"
#include "trainer/model/interactions.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

class DlrmModel : public DenseModel {
 public:
  DlrmModel(const ModelOptions& o, const dense::CpuGemm* gemm)
      : layout_(SlotLayout::FromOptions(o)), k_(layout_.row_dim), dots_(layout_.num_slots + 1, k_) {
    FLEETPS_CHECK(o.slot_dims.empty()) << "one embedding width for every slot";
    FLEETPS_CHECK(!layout_.first_order && layout_.dense_dim > 0);
    bottom_ = Mlp(layout_.dense_dim, o.bot_layer_sizes, /*relu_last=*/true, 0, gemm);
    FLEETPS_CHECK_EQ(bottom_.out_dim(), k_) << "bot_layer_sizes must end at sparse_feature_dim";
    top_ = Mlp(k_ + dots_.out_dim(), o.top_layer_sizes, /*relu_last=*/false, bottom_.num_params(), gemm);
    logits_ = top_.out_dim();
    FLEETPS_CHECK_EQ(logits_, NumLogits(o.output)) << "top_layer_sizes must end at the output width";
  }

  ModelType type() const override { return ModelType::kDlrm; }
  size_t in_dim() const override { return layout_.width(); }
  size_t num_params() const override { return bottom_.num_params() + top_.num_params(); }
  size_t num_logits() const override { return logits_; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<DlrmScratch>(); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    bottom_.InitParams(params, rng);
    top_.InitParams(params, rng);
  }

  void Forward(std::span<const float> params, std::span<const float> a, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    auto* s = static_cast<DlrmScratch*>(scratch);
    const size_t width = layout_.width();
    const size_t n = dots_.n();
    s->dense.resize(batch * layout_.dense_dim);
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(a.data() + b * width + layout_.dense_offset(), layout_.dense_dim,
                  s->dense.data() + b * layout_.dense_dim);
    }
    const std::span<const float> z = bottom_.Forward(params, s->dense, batch, &s->bottom);
    s->vectors.resize(batch * n * k_);
    for (size_t b = 0; b < batch; ++b) {
      float* out = s->vectors.data() + b * n * k_;
      std::copy_n(z.data() + b * k_, k_, out);
      std::copy_n(a.data() + b * width, layout_.num_slots * k_, out + k_);
    }
    const size_t top_in = top_.in_dim();
    s->dots.resize(batch * dots_.out_dim());
    dots_.Forward(s->vectors, batch, s->dots);
    s->top_in.resize(batch * top_in);
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(z.data() + b * k_, k_, s->top_in.data() + b * top_in);
      std::copy_n(s->dots.data() + b * dots_.out_dim(), dots_.out_dim(), s->top_in.data() + b * top_in + k_);
    }
    const std::span<const float> out = top_.Forward(params, s->top_in, batch, &s->top);
    std::copy(out.begin(), out.end(), logits.begin());
  }

  void Backward(std::span<const float> params, std::span<const float> a, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    auto* s = static_cast<DlrmScratch*>(scratch);
    const size_t width = layout_.width();
    const size_t n = dots_.n();
    const size_t top_in = top_.in_dim();
    s->top_in_grads.resize(batch * top_in);
    top_.Backward(params, s->top_in, logit_grads, batch, param_grads, s->top_in_grads, &s->top, ready);
    s->dot_grads.resize(batch * dots_.out_dim());
    s->vector_grads.assign(batch * n * k_, 0.0f);
    for (size_t b = 0; b < batch; ++b) {
      const float* g = s->top_in_grads.data() + b * top_in;
      std::copy_n(g, k_, s->vector_grads.data() + b * n * k_);  // z feeds the top MLP directly
      std::copy_n(g + k_, dots_.out_dim(), s->dot_grads.data() + b * dots_.out_dim());
    }
    dots_.Backward(s->vectors, s->dot_grads, batch, s->vector_grads);
    s->z_grads.resize(batch * k_);
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(s->vector_grads.data() + b * n * k_, k_, s->z_grads.data() + b * k_);
    }
    const bool want_inputs = !activation_grads.empty();
    s->dense_grads.resize(want_inputs ? batch * layout_.dense_dim : 0);
    bottom_.Backward(params, s->dense, s->z_grads, batch, param_grads, s->dense_grads, &s->bottom, ready);
    if (!want_inputs) return;
    for (size_t b = 0; b < batch; ++b) {
      float* row = activation_grads.data() + b * width;
      std::copy_n(s->vector_grads.data() + b * n * k_ + k_, layout_.num_slots * k_, row);
      std::copy_n(s->dense_grads.data() + b * layout_.dense_dim, layout_.dense_dim, row + layout_.dense_offset());
    }
  }

 private:
  struct DlrmScratch : Scratch {
    MlpScratch bottom, top;
    std::vector<float> dense, dense_grads;     // [batch x dense_dim]
    std::vector<float> vectors, vector_grads;  // [batch x n x k]
    std::vector<float> dots, dot_grads;        // [batch x n(n-1)/2]
    std::vector<float> top_in, top_in_grads;   // [batch x (k + dots)]
    std::vector<float> z_grads;                // [batch x k]
  };
  SlotLayout layout_;
  size_t k_;
  DotInteraction dots_;
  Mlp bottom_;
  Mlp top_;
  size_t logits_ = 0;
};

}  // namespace

std::unique_ptr<DenseModel> MakeDlrmModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return std::make_unique<DlrmModel>(options, gemm);
}

}  // namespace fleetps::trainer::model
