#pragma once
// DenseNet: everything after the embedding/concat boundary of a CTR model, forward and
// backward, as one unit:
//
//   activations [batch x in_dim] -> the model's layer graph -> logits -> loss
//
// The graph is the job's `network:` or the one its model_type expands to
// (common/config/graph_models.h: mlp, ctr_dnn, wide_deep, deepfm, dcn, dlrm); it runs on
// trainer/graph's executor. The activation row is what EmbeddingPool builds:
//   [slot 0 block | slot 1 block | ... | slot S-1 block | dense features]
// a slot block being [embed_w | embedding] when the graph reads embed_w (wide_deep, deepfm).
//
// In: the activation matrix (row-major) and the labels. Out: the mean loss over the
// batch, each output's probability per example, d(loss)/d(activations) [batch x in_dim]
// and d(mean loss)/d(params). It knows nothing of parameter servers or networks: the
// cpu-trainer runs it in its worker threads and the heter-trainer runs the same unit in
// another process.
//
// Parameter layout: ALL parameters live in ONE contiguous flat float vector of
// num_params() floats, which the parameter server stores as one dense table and which is
// pulled and pushed whole: the graph's layers in declaration order, each op's parameters
// as its schema lists them (an fc: W [in x out] row-major, then b [out]). Gradients use the
// same layout in a vector of the same size.
//
// Thread-safety: DenseNet is immutable after construction; all per-call memory is in a
// caller-owned Workspace, one per thread. Several threads may run it at once on the same
// parameter vector (Hogwild); keeping that vector consistent while others write it is
// the caller's business.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/config/model_config.h"
#include "trainer/graph/executor.h"
#include "trainer/model/layers.h"

namespace fleetps::trainer::model {

class DenseNet {
 public:
  // Per-thread scratch of Forward/ForwardBackward: layer outputs and gradient buffers,
  // grown on demand and reused across calls. Not shared between concurrent calls.
  class Workspace {
   public:
    // The predictions [batch x num_outputs()] of the latest Forward/ForwardBackward with
    // this workspace; valid until its next use.
    std::span<const float> predictions() const { return predictions_; }

   private:
    friend class DenseNet;
    graph::GraphExecutor::Workspace graph_;  // the executor's per-call memory
    std::vector<float> logits_;              // the outputs' inputs, output after output
    std::vector<float> logit_grads_;         // the same layout
    std::vector<float> predictions_;         // [batch x outputs]
    std::vector<float> column_, labels_;     // [batch]: one output's probabilities and labels
  };

  // An MLP (mlp / ctr_dnn): hidden_sizes may be empty (a linear model). CHECKs in_dim > 0
  // and sizes > 0. The matrix products run on `gemm`; none = fp32 with the CPU's best kernels.
  DenseNet(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output,
           std::shared_ptr<const dense::CpuGemm> gemm = nullptr);
  // The model of options (graph::ModelGraph), in_dim = DenseInputDim(options); products on
  // `gemm` as above (the roles pass the one fleetps.dense configures).
  static DenseNet FromOptions(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm = nullptr);

  size_t in_dim() const { return executor_->row_width(); }
  size_t num_params() const { return executor_->num_params(); }
  // The graph's outputs (1 for the built-in models), each predicting one of the data's
  // labels (num_labels() of them per example, graph().output_label(o) its column).
  size_t num_outputs() const { return executor_->graph().num_outputs(); }
  size_t num_labels() const { return executor_->graph().row().labels.size(); }
  OutputKind output() const { return output_; }
  ModelType type() const { return type_; }
  const fleetps::graph::Graph& graph() const { return executor_->graph(); }
  const dense::CpuGemm& gemm() const { return *gemm_; }
  // True for a plain MLP graph (mlp, ctr_dnn: fc layers in a chain, ReLU between them), the
  // only kind layers() describes.
  bool is_mlp() const { return !mlp_->empty(); }
  // The MLP's layers in order, with their offsets in the flat vector; empty for the other
  // models (devices that implement only the MLP refuse them).
  std::span<const FullyConnected> layers() const { return *mlp_; }

  // Fills params (num_params() floats), a pure function of seed: the MLP's Xavier-uniform
  // weights and zero biases; each model's file says its own.
  void InitParams(std::span<float> params, uint64_t seed) const;

  // Forward only. activations: [batch x in_dim]. Returns the predictions [batch x
  // num_outputs()] row-major: each output's probability of its label per example (a view
  // into *ws, valid until its next use).
  std::span<const float> Forward(std::span<const float> params, std::span<const float> activations, size_t batch,
                                 Workspace* ws) const;

  // Forward and backward for the loss: the weighted sum of each output's mean loss over the
  // batch; returns it. labels: [batch x num_labels()] row-major, in [0, 1]. Overwrites param_grads (num_params() floats) and
  // activation_grads ([batch x in_dim]; pass an empty span when the input needs no
  // gradient, which saves one matrix product). The predictions are left in
  // ws->predictions(). `grads_ready`, when set, is called after each layer's gradients are
  // final, with their range [begin, end) in param_grads — last layer first; the ranges
  // cover all of it — so that a caller can start sending them while earlier layers are
  // still being differentiated.
  using GradsReady = std::function<void(size_t begin, size_t end)>;
  float ForwardBackward(std::span<const float> params, std::span<const float> activations,
                        std::span<const float> labels, size_t batch, std::span<float> param_grads,
                        std::span<float> activation_grads, Workspace* ws,
                        const GradsReady& grads_ready = nullptr) const;

 private:
  DenseNet(const ModelOptions& options, std::shared_ptr<const dense::CpuGemm> gemm);
  // Runs the model (a training step or inference); leaves the logits in ws->logits_.
  void RunModel(std::span<const float> params, std::span<const float> activations, size_t batch, Workspace* ws,
                bool training) const;
  // Output o's logits (or probabilities) in ws->logits_.
  std::span<const float> OutputInputs(const Workspace& ws, size_t o, size_t batch) const;
  // Copies ws->column_ into output o's column of ws->predictions_.
  void SetPredictions(size_t o, size_t batch, Workspace* ws) const;

  std::shared_ptr<const dense::CpuGemm> gemm_;  // before executor_: its kernels point to it
  // Immutable, shared by copies of this net.
  std::shared_ptr<const graph::GraphExecutor> executor_;
  std::shared_ptr<const std::vector<FullyConnected>> mlp_;
  ModelType type_;
  OutputKind output_;
};

}  // namespace fleetps::trainer::model
