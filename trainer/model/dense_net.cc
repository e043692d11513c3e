#include "trainer/model/dense_net.h"

#include <utility>

#include "common/check.h"
#include "common/config/graph_models.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {
namespace {

ModelOptions MlpOptions(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output) {
  FLEETPS_CHECK_GE(in_dim, 1u);
  ModelOptions o;
  o.type = ModelType::kMlp;
  o.input_dim = static_cast<uint32_t>(in_dim);
  o.fc_sizes = hidden_sizes;
  o.output = output;
  return o;
}

// The fc chain of a plain MLP graph (one input, fc layers each reading the previous one with
// a bias and the Xavier init, ReLU between them, none after the last), for devices that run
// only that; empty for any other graph.
std::vector<FullyConnected> MlpChain(const fleetps::graph::Graph& g, const dense::CpuGemm* gemm) {
  std::vector<FullyConnected> chain;
  const auto layers = g.layers();
  if (g.spec().inputs.size() != 1 || g.num_outputs() != 1 || g.row().labels.size() != 1 || layers.empty() ||
      g.output_tensor(0) != layers.back().outputs[0]) {
    return {};
  }
  size_t prev = 0;  // the input tensor
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& layer = layers[l];
    const auto& attrs = layer.spec.attrs;
    const bool last = l + 1 == layers.size();
    if (layer.spec.op != "fc" || layer.inputs != std::vector<size_t>{prev} || layer.params.size() != 2 ||
        attrs.Text("init", "xavier").value() != "xavier" ||
        attrs.Text("activation", "none").value() != (last ? "none" : "relu")) {
      return {};
    }
    chain.emplace_back(layer.params[0][0], layer.params[0][1], layer.param_offset, gemm);
    prev = layer.outputs[0];
  }
  return chain;
}

}  // namespace

DenseNet::DenseNet(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output,
                   std::shared_ptr<const dense::CpuGemm> gemm)
    : DenseNet(MlpOptions(in_dim, hidden_sizes, output), std::move(gemm)) {}

DenseNet::DenseNet(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm)
    : gemm_(gemm ? std::move(gemm) : dense::CpuGemm::Fp32()),
      executor_(std::make_shared<const graph::GraphExecutor>(fleetps::graph::ModelGraph(options), gemm_.get())),
      mlp_(std::make_shared<const std::vector<FullyConnected>>(MlpChain(executor_->graph(), gemm_.get()))),
      type_(options.type),
      output_(options.output) {
  FLEETPS_CHECK_EQ(executor_->row_width(), DenseInputDim(options));
}

DenseNet DenseNet::FromOptions(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm) {
  return DenseNet(options, std::move(gemm));
}

void DenseNet::InitParams(std::span<float> params, uint64_t seed) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  UniformRandom rng(seed);
  executor_->InitParams(params, &rng);
}

void DenseNet::RunModel(std::span<const float> params, std::span<const float> activations, size_t batch, Workspace* ws,
                        bool training) const {
  FLEETPS_CHECK_EQ(params.size(), num_params());
  FLEETPS_CHECK_EQ(activations.size(), batch * in_dim());
  ws->logits_.resize(batch * executor_->num_logits());
  executor_->Forward(params, activations, batch, &ws->graph_, ws->logits_, training);
  ws->predictions_.resize(batch * num_outputs());
  ws->column_.resize(batch);
}

std::span<const float> DenseNet::OutputInputs(const Workspace& ws, size_t o, size_t batch) const {
  const auto kind = graph().spec().outputs[o].loss;
  return std::span<const float>(ws.logits_)
      .subspan(batch * executor_->logit_offset(o), batch * fleetps::graph::LossWidth(kind));
}

void DenseNet::SetPredictions(size_t o, size_t batch, Workspace* ws) const {
  const size_t outputs = num_outputs();
  for (size_t i = 0; i < batch; ++i) ws->predictions_[i * outputs + o] = ws->column_[i];
}

std::span<const float> DenseNet::Forward(std::span<const float> params, std::span<const float> activations,
                                         size_t batch, Workspace* ws) const {
  RunModel(params, activations, batch, ws, /*training=*/false);
  for (size_t o = 0; o < num_outputs(); ++o) {
    PredictOutput(graph().spec().outputs[o].loss, OutputInputs(*ws, o, batch), ws->column_);
    SetPredictions(o, batch, ws);
  }
  return ws->predictions_;
}

float DenseNet::ForwardBackward(std::span<const float> params, std::span<const float> activations,
                                std::span<const float> labels, size_t batch, std::span<float> param_grads,
                                std::span<float> activation_grads, Workspace* ws, const GradsReady& grads_ready) const {
  const size_t num_labels = graph().row().labels.size();
  FLEETPS_CHECK_EQ(labels.size(), batch * num_labels);
  FLEETPS_CHECK_EQ(param_grads.size(), num_params());
  FLEETPS_CHECK(activation_grads.empty() || activation_grads.size() == batch * in_dim())
      << "activation_grads has " << activation_grads.size() << " floats";
  RunModel(params, activations, batch, ws, /*training=*/true);
  ws->logit_grads_.resize(ws->logits_.size());
  ws->labels_.resize(batch);
  float loss = 0.0f;
  for (size_t o = 0; o < num_outputs(); ++o) {
    const fleetps::graph::GraphOutput& out = graph().spec().outputs[o];
    const size_t column = graph().output_label(o);
    for (size_t i = 0; i < batch; ++i) ws->labels_[i] = labels[i * num_labels + column];
    const std::span<const float> in = OutputInputs(*ws, o, batch);
    const std::span<float> grads =
        std::span<float>(ws->logit_grads_).subspan(batch * executor_->logit_offset(o), in.size());
    const auto weight = static_cast<float>(out.weight);
    loss += weight * OutputLoss(out.loss, in, ws->labels_, ws->column_, grads);
    if (weight != 1.0f) {
      for (float& g : grads) g *= weight;
    }
    SetPredictions(o, batch, ws);
  }
  executor_->Backward(params, activations, batch, ws->logit_grads_, &ws->graph_, param_grads, activation_grads,
                      grads_ready);
  return loss;
}

}  // namespace fleetps::trainer::model
