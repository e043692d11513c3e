#pragma once
// GraphExecutor: runs a checked layer graph (common/config/graph_spec.h) forward and
// backward on the CPU, over the activation row the trainer's embedding pooling builds:
//
//   row [batch x row_width] -> the inputs' views -> layers in execution order -> logits
//   d(loss)/d(logits) -> layers in reverse -> param_grads, d(loss)/d(row)
//
// Memory: a Workspace, one per thread, holds every tensor's values and gradients, the
// layers' scratch and the argument lists, planned once per batch size (growing only when
// a larger batch comes): no allocation in a step.
// Thread-safety: immutable after construction; concurrent calls with separate Workspaces.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "common/config/graph_spec.h"
#include "trainer/graph/ops/op_kernel.h"

namespace fleetps::trainer::graph {

class GraphExecutor {
 public:
  // Movable, not copyable (its spans point into its own arena).
  class Workspace {
   public:
    Workspace() = default;
    Workspace(Workspace&&) = default;
    Workspace& operator=(Workspace&&) = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

   private:
    friend class GraphExecutor;
    size_t batch = SIZE_MAX;  // the batch the spans below are planned for
    uint64_t steps = 0;       // training Forwards so far (the dropout masks' seeds)
    std::vector<float> arena;
    std::vector<std::span<float>> values, grads;                                    // per tensor
    std::vector<std::span<float>> scratch;                                          // per layer
    std::vector<std::vector<std::span<const float>>> inputs;                        // per layer
    std::vector<std::vector<std::span<float>>> outputs, output_grads, input_grads;  // per layer
    std::vector<std::vector<std::span<float>>> input_grads_none;  // per layer: inputs' grads without the row's
  };

  GraphExecutor(std::shared_ptr<const fleetps::graph::Graph> graph, const dense::CpuGemm* gemm);

  const fleetps::graph::Graph& graph() const { return *graph_; }
  size_t row_width() const { return row_width_; }
  size_t num_params() const { return graph_->num_params(); }
  // Floats per example of all outputs' logits; the logits of a batch are laid out output
  // after output: output o's [batch x width(o)] block starts at batch x logit_offset(o).
  size_t num_logits() const { return logit_offsets_.back(); }
  size_t logit_offset(size_t o) const { return logit_offsets_[o]; }

  // Each layer's InitParams in declaration order, one rng for all.
  void InitParams(std::span<float> params, UniformRandom* rng) const;

  // logits (batch x num_logits() floats, laid out as above) from row [batch x row_width()]. `training`: a training step
  // (dropout drops, with a mask drawn from the workspace's step count) rather than inference.
  void Forward(std::span<const float> params, std::span<const float> row, size_t batch, Workspace* ws,
               std::span<float> logits, bool training = false) const;

  // After a Forward with the same arguments and workspace: overwrites param_grads and,
  // unless empty, row_grads ([batch x row_width()]). `ready(begin, end)` is called for each
  // layer's parameter range as it becomes final (reverse execution order).
  void Backward(std::span<const float> params, std::span<const float> row, size_t batch,
                std::span<const float> logit_grads, Workspace* ws, std::span<float> param_grads,
                std::span<float> row_grads, const std::function<void(size_t, size_t)>& ready) const;

 private:
  // A run of floats of the row that an input reads, in the input's order.
  struct Segment {
    size_t offset;
    size_t length;
  };
  static std::vector<Segment> InputSegments(const fleetps::graph::Graph& g, const fleetps::graph::GraphInput& in);

  void Plan(size_t batch, Workspace* ws) const;
  void GatherInputs(std::span<const float> row, size_t batch, Workspace* ws) const;
  void ScatterInputGrads(size_t batch, const Workspace& ws, std::span<float> row_grads) const;

  std::shared_ptr<const fleetps::graph::Graph> graph_;
  size_t row_width_;
  std::vector<size_t> logit_offsets_;                 // per output + 1
  std::vector<std::unique_ptr<OpKernel>> kernels_;    // per layer
  std::vector<std::vector<Segment>> segments_;        // per graph input
  std::vector<std::pair<size_t, size_t>> row_reads_;  // (layer, input) pairs that read a row input
  std::vector<std::vector<uint8_t>> overwrite_;       // per layer, per input: its kernel writes the gradient
  std::vector<bool> written_;                         // per tensor: its gradient is written, not added to
  bool row_written_ = false;                          // the row's gradient is written by its only reader
  // Per tensor: needs a gradient when the row needs one / when it does not.
  std::vector<bool> grad_with_row_, grad_without_row_;
};

}  // namespace fleetps::trainer::graph
