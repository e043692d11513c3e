// The DenseModel of a layer graph (common/config/graph_spec.h): every model_type, built-in
// or the job's own `network:`, runs as a graph on trainer/graph's executor.

#include <memory>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/config/graph_models.h"
#include "trainer/graph/executor.h"
#include "trainer/model/dense_model.h"

namespace fleetps::trainer::model {
namespace {

using graph::GraphExecutor;

// The fc chain of a plain MLP graph (one input, fc layers each reading the previous one, ReLU
// between them, no activation on the last), for devices that run only that; empty otherwise.
std::vector<FullyConnected> MlpChain(const fleetps::graph::Graph& g, const dense::CpuGemm* gemm) {
  std::vector<FullyConnected> chain;
  const auto layers = g.layers();
  if (g.spec().inputs.size() != 1) return {};
  size_t prev = 0;  // the input tensor
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& layer = layers[l];
    const auto& attrs = layer.spec.attrs;
    const bool last = l + 1 == layers.size();
    const std::string act = attrs.Text("activation", "none").value();
    if (layer.spec.op != "fc" || layer.inputs != std::vector<size_t>{prev} || layer.params.size() != 2 ||
        attrs.Text("init", "xavier").value() != "xavier" || act != (last ? "none" : "relu")) {
      return {};
    }
    chain.emplace_back(layer.params[0][0], layer.params[0][1], layer.param_offset, gemm);
    prev = layer.outputs[0];
  }
  return chain;
}

class GraphModel : public DenseModel {
 public:
  GraphModel(const ModelOptions& o, const dense::CpuGemm* gemm)
      : type_(o.type), executor_(fleetps::graph::ModelGraph(o), gemm), mlp_(MlpChain(executor_.graph(), gemm)) {
    FLEETPS_CHECK_EQ(executor_.row_width(), DenseInputDim(o));
  }

  ModelType type() const override { return type_; }
  size_t in_dim() const override { return executor_.row_width(); }
  size_t num_params() const override { return executor_.num_params(); }
  size_t num_logits() const override { return executor_.num_logits(); }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<GraphScratch>(); }
  std::span<const FullyConnected> mlp_layers() const override { return mlp_; }

  void InitParams(std::span<float> params, UniformRandom* rng) const override { executor_.InitParams(params, rng); }

  void Forward(std::span<const float> params, std::span<const float> activations, size_t batch, Scratch* scratch,
               std::span<float> logits) const override {
    executor_.Forward(params, activations, batch, &static_cast<GraphScratch*>(scratch)->ws, logits);
  }

  void Backward(std::span<const float> params, std::span<const float> activations, size_t batch,
                std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                std::span<float> activation_grads, const GradsReady& ready) const override {
    executor_.Backward(params, activations, batch, logit_grads, &static_cast<GraphScratch*>(scratch)->ws, param_grads,
                       activation_grads, ready);
  }

 private:
  struct GraphScratch : Scratch {
    GraphExecutor::Workspace ws;
  };
  ModelType type_;
  GraphExecutor executor_;
  std::vector<FullyConnected> mlp_;
};

}  // namespace

std::unique_ptr<DenseModel> MakeGraphModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return std::make_unique<GraphModel>(options, gemm);
}

}  // namespace fleetps::trainer::model
