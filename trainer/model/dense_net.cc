#include "trainer/model/dense_net.h"

#include <utility>

#include "common/check.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {

DenseNet::DenseNet(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output)
    : in_dim_(in_dim), output_(output) {
  size_t width = in_dim;
  for (size_t out : hidden_sizes) {
    layers_.emplace_back(width, out, num_params_);
    num_params_ += layers_.back().num_params();
    width = out;
  }
  layers_.emplace_back(width, NumLogits(output), num_params_);
  num_params_ += layers_.back().num_params();
}

DenseNet DenseNet::FromOptions(const ModelOptions& options) {
  return DenseNet(DenseInputDim(options), options.fc_sizes, options.output);
}

void DenseNet::InitParams(std::span<float> params, uint64_t seed) const {
  FLEETPS_CHECK_EQ(params.size(), num_params_);
  UniformRandom rng(seed);
  for (const FullyConnected& layer : layers_) layer.InitParams(params, &rng);
}

void DenseNet::RunLayers(std::span<const float> params, std::span<const float> activations, size_t batch,
                         Workspace* ws) const {
  FLEETPS_CHECK_EQ(params.size(), num_params_);
  FLEETPS_CHECK_EQ(activations.size(), batch * in_dim_);
  ws->outputs_.resize(layers_.size());
  std::span<const float> x = activations;
  for (size_t l = 0; l < layers_.size(); ++l) {
    std::vector<float>& y = ws->outputs_[l];
    y.resize(batch * layers_[l].out_dim());
    layers_[l].Forward(params, x, batch, y);
    if (l + 1 < layers_.size()) ReluForward(y);
    x = y;
  }
  ws->predictions_.resize(batch);
}

std::span<const float> DenseNet::Forward(std::span<const float> params, std::span<const float> activations,
                                         size_t batch, Workspace* ws) const {
  RunLayers(params, activations, batch, ws);
  PredictProbabilities(output_, ws->outputs_.back(), ws->predictions_);
  return ws->predictions_;
}

float DenseNet::ForwardBackward(std::span<const float> params, std::span<const float> activations,
                                std::span<const float> labels, size_t batch, std::span<float> param_grads,
                                std::span<float> activation_grads, Workspace* ws,
                                const GradsReady& grads_ready) const {
  FLEETPS_CHECK_EQ(labels.size(), batch);
  FLEETPS_CHECK_EQ(param_grads.size(), num_params_);
  FLEETPS_CHECK(activation_grads.empty() || activation_grads.size() == batch * in_dim_)
      << "activation_grads has " << activation_grads.size() << " floats";
  RunLayers(params, activations, batch, ws);
  ws->grad_.resize(ws->outputs_.back().size());
  const float loss = CrossEntropy(output_, ws->outputs_.back(), labels, ws->predictions_, ws->grad_);

  for (size_t l = layers_.size(); l-- > 0;) {
    const FullyConnected& layer = layers_[l];
    auto ready = [&] {
      if (grads_ready) grads_ready(layer.param_offset(), layer.param_offset() + layer.num_params());
    };
    if (l == 0) {
      layer.Backward(params, activations, ws->grad_, batch, param_grads, activation_grads);
      ready();
      break;
    }
    // The input of layer l is the ReLU output of layer l - 1.
    const std::vector<float>& x = ws->outputs_[l - 1];
    ws->next_grad_.resize(x.size());
    layer.Backward(params, x, ws->grad_, batch, param_grads, ws->next_grad_);
    ready();
    ReluBackward(x, ws->next_grad_);
    std::swap(ws->grad_, ws->next_grad_);
  }
  return loss;
}

}  // namespace fleetps::trainer::model
