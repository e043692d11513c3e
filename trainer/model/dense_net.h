#pragma once
// DenseNet: everything after the embedding/concat boundary of a CTR model, forward and
// backward, as one unit:
//
//   activations [batch x in_dim] -> (FC -> ReLU) per hidden size -> FC -> logits -> loss
//
// In: the activation matrix (row-major) and the labels. Out: the mean loss over the
// batch, the click probability per example, d(mean loss)/d(activations) [batch x in_dim]
// and d(mean loss)/d(params). It knows nothing of parameter servers or networks: the
// cpu-trainer runs it in its worker threads and the heter-trainer runs the same unit in
// another process.
//
// Parameter layout: ALL parameters live in ONE contiguous flat float vector of
// num_params() floats, which the parameter server stores as one dense table and which is
// pulled and pushed whole. Layer l (0 = first) holds W_l [in_l x out_l] row-major and then
// b_l [out_l], layers back to back from offset 0, with in_0 = in_dim, out_l = hidden
// sizes in order, and the last layer's out = NumLogits(output) (2 for softmax2, 1 for
// sigmoid). Gradients use the same layout in a vector of the same size.
//
// Thread-safety: DenseNet is immutable after construction; all per-call memory is in a
// caller-owned Workspace, one per thread. Several threads may run it at once on the same
// parameter vector (Hogwild); keeping that vector consistent while others write it is
// the caller's business.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/config/model_config.h"
#include "trainer/model/layers.h"

namespace fleetps::trainer::model {

class DenseNet {
 public:
  // Per-thread scratch of Forward/ForwardBackward: layer outputs and gradient buffers,
  // grown on demand and reused across calls. Not shared between concurrent calls.
  class Workspace {
   public:
    // Click probability per example from the latest Forward/ForwardBackward with this
    // workspace; valid until its next use.
    std::span<const float> predictions() const { return predictions_; }

   private:
    friend class DenseNet;
    std::vector<std::vector<float>> outputs_;  // per layer [batch x out]: ReLU outputs, last = logits
    std::vector<float> grad_;                  // d(loss)/d(output of the layer being back-propagated)
    std::vector<float> next_grad_;             // d(loss)/d(its input)
    std::vector<float> predictions_;           // [batch]
  };

  // hidden_sizes may be empty (a linear model). CHECKs in_dim > 0 and sizes > 0.
  DenseNet(size_t in_dim, const std::vector<uint32_t>& hidden_sizes, OutputKind output);
  // in_dim = DenseInputDim(options), options.fc_sizes, options.output.
  static DenseNet FromOptions(const ModelOptions& options);

  size_t in_dim() const { return in_dim_; }
  size_t num_params() const { return num_params_; }
  OutputKind output() const { return output_; }
  // The layers in order, with their offsets in the flat vector.
  std::span<const FullyConnected> layers() const { return layers_; }

  // Fills params (num_params() floats): Xavier-uniform weights and zero biases, a pure
  // function of seed.
  void InitParams(std::span<float> params, uint64_t seed) const;

  // Forward only. activations: [batch x in_dim]. Returns the click probability per
  // example (a view into *ws, valid until its next use).
  std::span<const float> Forward(std::span<const float> params, std::span<const float> activations, size_t batch,
                                 Workspace* ws) const;

  // Forward and backward for the mean loss over the batch; returns that loss. labels:
  // [batch], click labels in [0, 1]. Overwrites param_grads (num_params() floats) and
  // activation_grads ([batch x in_dim]; pass an empty span when the input needs no
  // gradient, which saves one matrix product). The predictions are left in
  // ws->predictions(). `grads_ready`, when set, is called after each layer's gradients are
  // final, with their range [begin, end) in param_grads — last layer first — so that a
  // caller can start sending them while earlier layers are still being differentiated.
  using GradsReady = std::function<void(size_t begin, size_t end)>;
  float ForwardBackward(std::span<const float> params, std::span<const float> activations,
                        std::span<const float> labels, size_t batch, std::span<float> param_grads,
                        std::span<float> activation_grads, Workspace* ws,
                        const GradsReady& grads_ready = nullptr) const;

 private:
  // Runs the layers; leaves the logits in ws->outputs_.back().
  void RunLayers(std::span<const float> params, std::span<const float> activations, size_t batch,
                 Workspace* ws) const;

  size_t in_dim_;
  OutputKind output_;
  std::vector<FullyConnected> layers_;
  size_t num_params_ = 0;
};

}  // namespace fleetps::trainer::model
