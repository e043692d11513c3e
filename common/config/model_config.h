#pragma once
// Model hyper-parameters, read from the `hyper_parameters:` map of a trainer config in
// PaddleRec's layout (models/rank/dnn/config.yaml), e.g.
//
//   hyper_parameters:
//     optimizer: {class: Adam, learning_rate: 0.001, strategy: async}
//     sparse_inputs_slots: 27        # PaddleRec counts the label slot: 26 sparse slots
//     sparse_feature_dim: 9
//     dense_input_dim: 13
//     fc_sizes: [512, 256, 128, 32]
//
// The ranking models of PaddleRec's models/rank (wide_deep, deepfm, dcn, dlrm) read their
// own keys with PaddleRec's names: dcn `cross_num`, dlrm `bot_layer_sizes`,
// `top_layer_sizes` and `num_field` (checked against the slot count). Per-slot embedding
// widths: `slot_dims`. Each model_type expands to a layer graph (common/config/graph_models.cc);
// a model of one's own is a `network:` section (model_type network, docs/MODELS.md).
//
// Keys fleetps adds (all optional): `model_type`, `output`, `init_seed`, `input_dim`,
// `cross_type` (dcn).
// PaddleRec slot_dnn's spellings are read too: `emb_dim` for sparse_feature_dim and
// `layer_sizes` for fc_sizes (when both spellings are given they must agree).
// ParseModelOptions reads the keys of ModelOptionKeys() and leaves the others of the map
// (slot_num for the data reader, PaddleRec keys fleetps ignores) to its caller:
// ParseTrainerYaml checks the whole map for unknown keys. The `optimizer` map is read by
// ParseOptimizer (common/config/optimizer_config.h), which checks its keys.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/config/graph_spec.h"
#include "common/config/table_options.h"
#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps {

// Every model but mlp reads sparse slots: each slot's ids are looked up in the sparse table
// and sum-pooled into one block of SparseRowDim floats; the blocks and then the dense
// features form the activation row the dense part (model::DenseNet) reads.
enum class ModelType : uint8_t {
  kMlp = 0,       // dense features only: input_dim -> fc_sizes -> output
  kCtrDnn = 1,    // PaddleRec rank/dnn: sum-pooled slot embeddings ++ dense features -> fc_sizes -> output
  kWideDeep = 2,  // PaddleRec rank/wide_deep: wide (linear) part + deep MLP, summed into the logit
  kDeepFm = 3,    // PaddleRec rank/deepfm: first-order weights + FM second-order term + deep MLP
  kDcn = 4,       // PaddleRec rank/dcn: cross network beside the MLP, joined by the output layer
  kDlrm = 5,      // PaddleRec rank/dlrm: bottom MLP, pairwise dot interactions, top MLP
  kNetwork = 6,   // the job's own layer graph (the `network:` section, graph_spec.h)
};

// (name, type) of every model, in enum order: the `model_type` values.
const std::vector<std::pair<std::string, ModelType>>& ModelTypeNames();
std::string ModelTypeName(ModelType type);

// The cross layer of dcn (Wang et al. 2017 / 2020).
enum class CrossType : uint8_t {
  kV1 = 0,  // x_{l+1} = x0 (x_l . w_l) + b_l + x_l: a weight vector per layer (PaddleRec's dcn)
  kV2 = 1,  // x_{l+1} = x0 * (x_l W_l + b_l) + x_l: a full-rank matrix per layer (DCN-V2)
};

// The output layer and its loss; either way the model predicts one click probability.
enum class OutputKind : uint8_t {
  kSoftmax2 = 0,  // 2 logits, softmax cross-entropy (PaddleRec rank/dnn); p(click) = softmax[1]
  kSigmoid = 1,   // 1 logit, sigmoid binary cross-entropy; p(click) = sigmoid(logit)
};

struct ModelOptions {
  // `model_type`: mlp | ctr_dnn | wide_deep | deepfm | dcn | dlrm (case-insensitive). PaddleRec names the model by its
  // Python file (runner.model_path), so fleetps reads the name from
  // hyper_parameters.model_type; default ctr_dnn, which is PaddleRec's rank/dnn.
  ModelType type = ModelType::kCtrDnn;

  // The models with sparse slots (all but mlp).
  // `sparse_feature_dim` (or `emb_dim`): embedding width per slot, >= 1 (wide_deep and
  // deepfm add a first-order weight in front of it: SparseRowDim).
  uint32_t sparse_feature_dim = 9;
  // `slot_dims`: per-slot embedding widths, one per sparse slot, each in [1,
  // sparse_feature_dim]; empty = sparse_feature_dim for every slot. Slot s pools the first
  // slot_dims[s] embedding floats of its rows (the table's rows stay sparse_feature_dim
  // wide). ctr_dnn, wide_deep and dcn only: deepfm and dlrm take dot products between slots,
  // which need one width.
  std::vector<uint32_t> slot_dims;
  // Sparse slots fed to the embedding. YAML `sparse_inputs_slots` is PaddleRec's count,
  // which includes the label slot: sparse_inputs_slots: 27 -> 26 sparse slots. >= 1.
  uint32_t num_sparse_slots = 26;
  uint32_t dense_input_dim = 13;  // `dense_input_dim`: dense features per example, >= 0

  // dcn only.
  uint32_t cross_num = 2;                 // `cross_num`: cross layers, >= 1
  CrossType cross_type = CrossType::kV1;  // `cross_type`: v1 | v2

  // dlrm only. `bot_layer_sizes`: the bottom MLP over the dense features (ReLU after each
  // layer); the last width must equal sparse_feature_dim. `top_layer_sizes`: the top MLP
  // over [bottom output | pairwise dots]; as in PaddleRec its last entry is the output
  // layer (2: softmax2, 1: sigmoid) and the entries before it are hidden widths.
  std::vector<uint32_t> bot_layer_sizes = {512, 256, 64, 16};
  std::vector<uint32_t> top_layer_sizes = {512, 256, 2};

  // mlp only.
  uint32_t input_dim = 32;  // `input_dim`: dense features per example, >= 1

  // `fc_sizes` (or `layer_sizes`): hidden layer widths, each >= 1, ReLU after each; may be
  // empty (a linear model). Default: PaddleRec rank/dnn's.
  std::vector<uint32_t> fc_sizes = {512, 256, 128, 32};
  OutputKind output = OutputKind::kSoftmax2;  // `output`: softmax2 | sigmoid
  uint64_t init_seed = 0;                     // `init_seed`: seed of the deterministic dense parameter init

  // The checked layer graph of a `network:` section (model_type network); null for the
  // built-in types, whose graph graph::ModelGraph expands from the keys above.
  std::shared_ptr<const graph::Graph> graph;
  // The data's labels, in column order (the data section's label_slots; ParseTrainerYaml
  // copies them here): the graph's outputs name the ones they learn.
  std::vector<std::string> labels = {"click"};

  // `optimizer`: {class (or name): SGD | Adagrad | Adam (case-insensitive), learning_rate
  // (> 0), beta1, beta2 (in [0, 1)), epsilon (> 0), initial_accumulator (>= 0),
  // weight_bounds}; defaults as in OptimizerOptions. Read by config::ParseOptimizer, the
  // same reader as the pserver YAML's tables[i].optimizer.
  OptimizerOptions optimizer;
};

// True for the models that read sparse slots (all but mlp).
bool HasSparseSlots(const ModelOptions& options);
// True for the models whose sparse rows start with a first-order weight (wide_deep: the
// wide weight; deepfm: the FM's first-order weight): the row is [w | embedding], with
// Paddle's CTR accessor embed_w | embedx.
bool HasFirstOrderWeight(const ModelOptions& options);
// Floats per sparse row and per pooled slot block: sparse_feature_dim, plus 1 for the
// first-order weight of wide_deep and deepfm. 0 for mlp.
size_t SparseRowDim(const ModelOptions& options);
// Floats of slot s's block in the activation row: its embedding width (slot_dims[s], or
// sparse_feature_dim) plus the first-order weight of wide_deep and deepfm.
size_t SlotBlockDim(const ModelOptions& options, size_t slot);
// Width of the dense network's input row: the sum of the slots' SlotBlockDim +
// dense_input_dim for the sparse models, input_dim for mlp.
size_t DenseInputDim(const ModelOptions& options);

namespace config {

// Reads `hyper_parameters` (a map; ctx names it, e.g. {"trainer.yaml", "hyper_parameters"})
// over the defaults already in *options. Errors name file:line, the key and the allowed
// values; on error *options is left unchanged.
Status ParseModelOptions(const YAML::Node& hyper_parameters, const YamlContext& ctx, ModelOptions* options);

// Every `hyper_parameters` key ParseModelOptions reads.
std::vector<std::string> ModelOptionKeys();

}  // namespace config
}  // namespace fleetps
