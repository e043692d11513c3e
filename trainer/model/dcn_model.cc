// dcn (PaddleRec rank/dcn, Wang et al. 2017; v2 2020): a cross network and an MLP side by
// side over the same input x0 = the activation row, joined by the output layer:
//   x_{l+1} = cross_l(x0, x_l), l < cross_num        (interactions.h CrossLayer, v1 or v2)
//   h       = MLP(x0), ReLU after every fc_sizes layer (absent when fc_sizes is empty)
//   logits  = [x_L | h] W_out + b_out
// Parameters: the cross layers in order, then the MLP, then W_out [(d + |h|) x logits], b_out.

#include <algorithm>
#include <vector>

#include "trainer/model/dense_model.h"
#include "trainer/model/interactions.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

class DcnModel : public DenseModel {
 public:
  DcnModel(const ModelOptions& o, const dense::CpuGemm* gemm)
      : d_(DenseInputDim(o)), logits_(NumLogits(o.output)), output_(1, 1, 0, gemm) {
    size_t offset = 0;
    for (uint32_t l = 0; l < o.cross_num; ++l) {
      cross_.emplace_back(o.cross_type, d_, offset, gemm);
      offset += cross_.back().num_params();
    }
    deep_ = Mlp(d_, o.fc_sizes, /*relu_last=*/true, offset, gemm);
    offset += deep_.num_params();
    joined_ = d_ + (deep_.empty() ? 0 : deep_.out_dim());
    output_ = FullyConnected(joined_, logits_, offset, gemm);
    num_params_ = offset + output_.num_params();
  }

  ModelType type() const override { return ModelType::kDcn; }
  size_t in_dim() const override { return d_; }
  size_t num_params() const override { return num_params_; }
  size_t num_logits() const override { return logits_; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<DcnScratch>(); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override {
    for (const CrossLayer& layer : cross_) layer.InitParams(params, rng);
    deep_.InitParams(params, rng);
    output_.InitParams(params, rng);
  }

  void Forward(std::span<const float> params, std::span<const float> x0, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    auto* s = static_cast<DcnScratch*>(scratch);
    s->xs.resize(cross_.size());
    s->inner.resize(cross_.size());
    std::span<const float> x = x0;
    for (size_t l = 0; l < cross_.size(); ++l) {
      s->xs[l].resize(batch * d_);
      s->inner[l].resize(cross_[l].type() == CrossType::kV1 ? batch : batch * d_);
      cross_[l].Forward(params, x0, x, batch, s->inner[l], s->xs[l]);
      x = s->xs[l];
    }
    s->joined.resize(batch * joined_);
    const std::span<const float> h =
        deep_.empty() ? std::span<const float>() : deep_.Forward(params, x0, batch, &s->deep);
    const size_t hw = joined_ - d_;
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(x.data() + b * d_, d_, s->joined.data() + b * joined_);
      if (hw > 0) std::copy_n(h.data() + b * hw, hw, s->joined.data() + b * joined_ + d_);
    }
    output_.Forward(params, s->joined, batch, logits);
  }

  void Backward(std::span<const float> params, std::span<const float> x0, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    auto* s = static_cast<DcnScratch*>(scratch);
    s->joined_grads.resize(batch * joined_);
    output_.Backward(params, s->joined, logit_grads, batch, param_grads, s->joined_grads);
    if (ready) ready(output_.param_offset(), output_.param_offset() + output_.num_params());
    const size_t hw = joined_ - d_;
    s->g.resize(batch * d_);
    s->dh.resize(batch * hw);
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(s->joined_grads.data() + b * joined_, d_, s->g.data() + b * d_);
      if (hw > 0) std::copy_n(s->joined_grads.data() + b * joined_ + d_, hw, s->dh.data() + b * hw);
    }
    // dx0 collects what reaches x0 directly: the MLP's input gradient and every cross
    // layer's x0 term; the chain through x_l ends in s->g, x_0's own gradient.
    s->dx0.assign(batch * d_, 0.0f);
    if (!deep_.empty()) deep_.Backward(params, x0, s->dh, batch, param_grads, s->dx0, &s->deep, ready);
    s->next.resize(batch * d_);
    for (size_t l = cross_.size(); l-- > 0;) {
      const std::span<const float> x = l == 0 ? x0 : std::span<const float>(s->xs[l - 1]);
      cross_[l].Backward(params, x0, x, s->inner[l], s->g, batch, param_grads, s->dx0, s->next);
      std::swap(s->g, s->next);
      if (ready) ready(cross_[l].param_offset(), cross_[l].param_offset() + cross_[l].num_params());
    }
    if (activation_grads.empty()) return;
    for (size_t i = 0; i < batch * d_; ++i) activation_grads[i] = s->dx0[i] + s->g[i];
  }

 private:
  struct DcnScratch : Scratch {
    std::vector<std::vector<float>> xs, inner;  // per cross layer: output, inner term
    MlpScratch deep;
    std::vector<float> joined, joined_grads;  // [batch x joined]
    std::vector<float> g, next, dx0, dh;
  };
  size_t d_;
  size_t logits_;
  std::vector<CrossLayer> cross_;
  Mlp deep_;
  size_t joined_ = 0;
  FullyConnected output_;
  size_t num_params_ = 0;
};

}  // namespace

std::unique_ptr<DenseModel> MakeDcnModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return std::make_unique<DcnModel>(options, gemm);
}

}  // namespace fleetps::trainer::model
