#pragma once
// DenseModel: the interface of one dense model — everything after the embedding/concat
// boundary of a ranking model, up to its logits. model::DenseNet (dense_net.h) wraps one
// and adds the loss; the trainers only ever see DenseNet.
//
// Input: the activation row EmbeddingPool builds, [batch x in_dim()]:
//   [slot 0 block | slot 1 block | ... | slot S-1 block | dense features]
// where a slot block is the sum of the slot's sparse rows (SlotLayout::row_dim floats; for
// wide_deep and deepfm [first-order weight | embedding], else the embedding). Output: the
// logits [batch x NumLogits(output)]; the click logit is the last column.
// Parameters: one flat float vector of num_params() floats (one pserver dense table), laid
// out by each model (its file says how); gradients in the same layout.
//
// Adding a model: a ModelType in common/config/model_config.h (name, SparseRowDim,
// DenseParamCount), a file <name>_model.cc here implementing this interface with a
// Make<Name>Model factory declared below, and one line in model_registry.cc. The
// model_registry test checks every registered model's gradients against finite
// differences and its size against config::DenseParamCount.
//
// Thread-safety: implementations are immutable after construction; per-call memory is a
// Scratch from NewScratch(), one per thread.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/model_config.h"
#include "trainer/model/layers.h"

namespace fleetps::trainer::model {

// Where the parts of an activation row are (from ModelOptions: num_sparse_slots,
// SparseRowDim, HasFirstOrderWeight, dense_input_dim).
// Blocks are row_dim floats each unless the options give per-slot widths (slot_dims).
struct SlotLayout {
  size_t num_slots = 0;
  size_t row_dim = 0;        // floats per sparse row (and per slot block without slot_dims)
  bool first_order = false;  // column 0 of a block is the first-order weight
  size_t dense_dim = 0;
  std::vector<size_t> block_offsets = {0};  // num_slots + 1: slot s's block [offsets[s], offsets[s + 1])

  static SlotLayout FromOptions(const ModelOptions& options);
  // Embedding floats per slot when all slots have the row's width (deepfm, dlrm).
  size_t embedding_dim() const { return row_dim - (first_order ? 1 : 0); }
  size_t block_offset(size_t slot) const { return block_offsets[slot]; }
  size_t dense_offset() const { return block_offsets.back(); }
  size_t width() const { return block_offsets.back() + dense_dim; }
};

class DenseModel {
 public:
  // Per-thread memory of a model's Forward and Backward; each model derives its own.
  class Scratch {
   public:
    virtual ~Scratch() = default;
  };
  // (begin, end): a range of the parameter gradient that is final (see DenseNet::GradsReady).
  using GradsReady = std::function<void(size_t begin, size_t end)>;

  virtual ~DenseModel() = default;

  virtual ModelType type() const = 0;
  virtual size_t in_dim() const = 0;
  virtual size_t num_params() const = 0;
  virtual size_t num_logits() const = 0;
  virtual std::unique_ptr<Scratch> NewScratch() const = 0;

  // Fills params (num_params() floats) from rng.
  virtual void InitParams(std::span<float> params, UniformRandom* rng) const = 0;

  // logits [batch x num_logits()] from activations [batch x in_dim()]; keeps in *scratch
  // what Backward needs.
  virtual void Forward(std::span<const float> params, std::span<const float> activations, size_t batch,
                       Scratch* scratch, std::span<float> logits) const = 0;

  // After a Forward with the same arguments and scratch: given d(loss)/d(logits),
  // overwrites param_grads (num_params() floats) and, unless it is empty, activation_grads
  // ([batch x in_dim()]). Calls ready (when set) for ranges of param_grads as they become
  // final; together the ranges cover all of it.
  virtual void Backward(std::span<const float> params, std::span<const float> activations, size_t batch,
                        std::span<const float> logit_grads, Scratch* scratch, std::span<float> param_grads,
                        std::span<float> activation_grads, const GradsReady& ready) const = 0;

  // The layers of a plain MLP model (mlp, ctr_dnn), for devices that implement only that
  // (the heter-trainer's CUDA device); empty for every other model.
  virtual std::span<const FullyConnected> mlp_layers() const { return {}; }
};

// The model of options.type (model_registry.cc), its matrix products on `gemm` (which must
// outlive it). CHECKs that the options are valid (config::ParseModelOptions has checked them).
std::unique_ptr<DenseModel> MakeDenseModel(const ModelOptions& options, const dense::CpuGemm* gemm);

// The registered implementations, one file each.
std::unique_ptr<DenseModel> MakeMlpModel(size_t in_dim, std::span<const uint32_t> hidden, OutputKind output,
                                         ModelType type, const dense::CpuGemm* gemm);
std::unique_ptr<DenseModel> MakeWideDeepModel(const ModelOptions& options, const dense::CpuGemm* gemm);
std::unique_ptr<DenseModel> MakeDeepFmModel(const ModelOptions& options, const dense::CpuGemm* gemm);
std::unique_ptr<DenseModel> MakeDcnModel(const ModelOptions& options, const dense::CpuGemm* gemm);
std::unique_ptr<DenseModel> MakeDlrmModel(const ModelOptions& options, const dense::CpuGemm* gemm);
// Any model_type as its layer graph (graph_model.cc; common/config/graph_models.h).
std::unique_ptr<DenseModel> MakeGraphModel(const ModelOptions& options, const dense::CpuGemm* gemm);

}  // namespace fleetps::trainer::model
