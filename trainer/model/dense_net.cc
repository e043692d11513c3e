#include "trainer/model/dense_net.h"

#include <utility>

#include "common/check.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {

DenseNet::DenseNet(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output,
                   std::shared_ptr<const dense::CpuGemm> gemm)
    : gemm_(gemm ? std::move(gemm) : dense::CpuGemm::Fp32()),
      model_(MakeMlpModel(in_dim, hidden_sizes, output, ModelType::kMlp, gemm_.get())),
      output_(output) {
  FLEETPS_CHECK_EQ(model_->num_logits(), NumLogits(output));
}

DenseNet::DenseNet(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm)
    : gemm_(gemm ? std::move(gemm) : dense::CpuGemm::Fp32()),
      model_(MakeDenseModel(options, gemm_.get())),
      output_(options.output) {
  FLEETPS_CHECK_EQ(model_->num_logits(), NumLogits(output_));
}

DenseNet DenseNet::FromOptions(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm) {
  return DenseNet(options, std::move(gemm));
}

void DenseNet::InitParams(std::span<float> params, uint64_t seed) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  UniformRandom rng(seed);
  model_->InitParams(params, &rng);
}

void DenseNet::RunModel(std::span<const float> params, std::span<const float> activations, size_t batch,
                        Workspace* ws) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  FLEETPS_CHECK_EQ(activations.size(), batch * in_dim());
  if (ws->owner_ != model_.get()) {
    ws->scratch_ = model_->NewScratch();
    ws->owner_ = model_.get();
  }
  ws->logits_.resize(batch * model_->num_logits());
  model_->Forward(params, activations, batch, ws->scratch_.get(), ws->logits_);
  ws->predictions_.resize(batch);
}

std::span<const float> DenseNet::Forward(std::span<const float> params, std::span<const float> activations,
                                         size_t batch, Workspace* ws) const {
  RunModel(params, activations, batch, ws);
  PredictProbabilities(output_, ws->logits_, ws->predictions_);
  return ws->predictions_;
}

float DenseNet::ForwardBackward(std::span<const float> params, std::span<const float> activations,
                                std::span<const float> labels, size_t batch, std::span<float> param_grads,
                                std::span<float> activation_grads, Workspace* ws, const GradsReady& grads_ready) const {
  FLEETPS_CHECK_EQ(labels.size(), batch);
  FLEETPS_CHECK_EQ(param_grads.size(), num_params());
  FLEETPS_CHECK(activation_grads.empty() || activation_grads.size() == batch * in_dim())
      << "activation_grads has " << activation_grads.size() << " floats";
  RunModel(params, activations, batch, ws);
  ws->logit_grads_.resize(ws->logits_.size());
  const float loss = CrossEntropy(output_, ws->logits_, labels, ws->predictions_, ws->logit_grads_);
  model_->Backward(params, activations, batch, ws->logit_grads_, ws->scratch_.get(), param_grads, activation_grads,
                   grads_ready);
  return loss;
}

}  // namespace fleetps::trainer::model
