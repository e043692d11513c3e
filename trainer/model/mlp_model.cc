// mlp and ctr_dnn (PaddleRec rank/dnn): one MLP over the whole activation row,
//   activations -> (FC -> ReLU) per hidden size -> FC -> logits.
// Parameters: layer l's W_l [in_l x out_l] then b_l, layers back to back from 0.

#include <vector>

#include "trainer/model/dense_model.h"
#include "trainer/model/interactions.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

class MlpModel : public DenseModel {
 public:
  MlpModel(size_t in_dim, std::span<const uint32_t> hidden, OutputKind output, ModelType type,
           const dense::CpuGemm* gemm)
      : type_(type), logits_(NumLogits(output)) {
    std::vector<uint32_t> widths(hidden.begin(), hidden.end());
    widths.push_back(static_cast<uint32_t>(logits_));
    mlp_ = Mlp(in_dim, widths, /*relu_last=*/false, 0, gemm);
  }

  ModelType type() const override { return type_; }
  size_t in_dim() const override { return mlp_.in_dim(); }
  size_t num_params() const override { return mlp_.num_params(); }
  size_t num_logits() const override { return logits_; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<MlpModelScratch>(); }
  std::span<const FullyConnected> mlp_layers() const override { return mlp_.layers(); }

  void InitParams(std::span<float> params, UniformRandom* rng) const override { mlp_.InitParams(params, rng); }

  void Forward(std::span<const float> params, std::span<const float> activations, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    auto* s = static_cast<MlpModelScratch*>(scratch);
    const std::span<const float> out = mlp_.Forward(params, activations, batch, &s->mlp);
    std::copy(out.begin(), out.end(), logits.begin());
  }

  void Backward(std::span<const float> params, std::span<const float> activations, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    auto* s = static_cast<MlpModelScratch*>(scratch);
    mlp_.Backward(params, activations, logit_grads, batch, param_grads, activation_grads, &s->mlp, ready);
  }

 private:
  struct MlpModelScratch : Scratch {
    MlpScratch mlp;
  };
  ModelType type_;
  size_t logits_;
  Mlp mlp_;
};

}  // namespace

std::unique_ptr<DenseModel> MakeMlpModel(size_t in_dim, std::span<const uint32_t> hidden, OutputKind output,
                                         ModelType type, const dense::CpuGemm* gemm) {
  return std::make_unique<MlpModel>(in_dim, hidden, output, type, gemm);
}

}  // namespace fleetps::trainer::model
