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
// Keys fleetps adds (all optional): `model_type`, `output`, `init_seed`, `input_dim`.
// PaddleRec slot_dnn's spellings are read too: `emb_dim` for sparse_feature_dim and
// `layer_sizes` for fc_sizes (when both spellings are given they must agree).
// ParseModelOptions reads the keys of ModelOptionKeys() and leaves the others of the map
// (slot_num for the data reader, PaddleRec keys fleetps ignores) to its caller:
// ParseTrainerYaml checks the whole map for unknown keys. The `optimizer` map is read by
// ParseOptimizer (common/config/optimizer_config.h), which checks its keys.

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/config/table_options.h"
#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps {

enum class ModelType : uint8_t {
  kMlp = 0,     // dense features only: input_dim -> fc_sizes -> output
  kCtrDnn = 1,  // PaddleRec rank/dnn: sum-pooled slot embeddings ++ dense features -> fc_sizes -> output
};

// The output layer and its loss; either way the model predicts one click probability.
enum class OutputKind : uint8_t {
  kSoftmax2 = 0,  // 2 logits, softmax cross-entropy (PaddleRec rank/dnn); p(click) = softmax[1]
  kSigmoid = 1,   // 1 logit, sigmoid binary cross-entropy; p(click) = sigmoid(logit)
};

struct ModelOptions {
  // `model_type`: mlp | ctr_dnn (case-insensitive). PaddleRec names the model by its
  // Python file (runner.model_path), so fleetps reads the name from
  // hyper_parameters.model_type; default ctr_dnn, which is PaddleRec's rank/dnn.
  ModelType type = ModelType::kCtrDnn;

  // ctr_dnn only.
  uint32_t sparse_feature_dim = 9;  // `sparse_feature_dim` (or `emb_dim`): embedding width per slot, >= 1
  // Sparse slots fed to the embedding. YAML `sparse_inputs_slots` is PaddleRec's count,
  // which includes the label slot: sparse_inputs_slots: 27 -> 26 sparse slots. >= 1.
  uint32_t num_sparse_slots = 26;
  uint32_t dense_input_dim = 13;  // `dense_input_dim`: dense features per example, >= 0

  // mlp only.
  uint32_t input_dim = 32;  // `input_dim`: dense features per example, >= 1

  // `fc_sizes` (or `layer_sizes`): hidden layer widths, each >= 1, ReLU after each; may be
  // empty (a linear model). Default: PaddleRec rank/dnn's.
  std::vector<uint32_t> fc_sizes = {512, 256, 128, 32};
  OutputKind output = OutputKind::kSoftmax2;  // `output`: softmax2 | sigmoid
  uint64_t init_seed = 0;  // `init_seed`: seed of the deterministic dense parameter init

  // `optimizer`: {class (or name): SGD | Adagrad | Adam (case-insensitive), learning_rate
  // (> 0), beta1, beta2 (in [0, 1)), epsilon (> 0), initial_accumulator (>= 0),
  // weight_bounds}; defaults as in OptimizerOptions. Read by config::ParseOptimizer, the
  // same reader as the pserver YAML's tables[i].optimizer.
  OptimizerOptions optimizer;
};

// Width of the dense network's input row: num_sparse_slots * sparse_feature_dim +
// dense_input_dim for ctr_dnn, input_dim for mlp.
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
