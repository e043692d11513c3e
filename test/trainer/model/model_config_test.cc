// Tests of common/config/model_config (kept with the model tests whose options it parses).
#include "common/config/model_config.h"

#include <catch2/catch.hpp>

#include <string>

namespace fleetps::config {
namespace {

const std::string kPaddleRecDir = FLEETPS_SOURCE_DIR "/../shared/data/paddlerec/rank_dnn/";

// Parses the `hyper_parameters` map of a YAML document.
Status ParseText(const std::string& text, ModelOptions* options) {
  StatusOr<YAML::Node> root = LoadYamlString(text, "test.yaml");
  REQUIRE(root.ok());
  return ParseModelOptions((*root)["hyper_parameters"], YamlContext{"test.yaml", "hyper_parameters"}, options);
}

TEST_CASE("ModelOptions from PaddleRec rank/dnn config.yaml", "[model_config]") {
  const std::string path = kPaddleRecDir + "config.yaml";
  StatusOr<YAML::Node> root = LoadYamlFile(path);
  REQUIRE(root.ok());
  ModelOptions options;
  const Status status = ParseModelOptions((*root)["hyper_parameters"], YamlContext{path, "hyper_parameters"}, &options);
  REQUIRE(status.ok());
  CHECK(options.type == ModelType::kCtrDnn);
  CHECK(options.sparse_feature_dim == 9);
  CHECK(options.num_sparse_slots == 26);  // sparse_inputs_slots: 27 counts the label
  CHECK(options.dense_input_dim == 13);
  CHECK(options.fc_sizes == std::vector<uint32_t>{512, 256, 128, 32});
  CHECK(options.output == OutputKind::kSoftmax2);
  CHECK(options.optimizer.kind == OptimizerKind::kAdam);
  CHECK(options.optimizer.learning_rate == 0.001f);
  CHECK(DenseInputDim(options) == 26 * 9 + 13);
}

TEST_CASE("ModelOptions from PaddleRec rank/dnn config_cpups.yaml", "[model_config]") {
  const std::string path = kPaddleRecDir + "config_cpups.yaml";
  StatusOr<YAML::Node> root = LoadYamlFile(path);
  REQUIRE(root.ok());
  ModelOptions options;
  REQUIRE(ParseModelOptions((*root)["hyper_parameters"], YamlContext{path, "hyper_parameters"}, &options).ok());
  CHECK(options.sparse_feature_dim == 10);
  CHECK(options.fc_sizes == std::vector<uint32_t>{400, 400, 400});
  CHECK(options.optimizer.learning_rate == 0.0001f);
}

TEST_CASE("ModelOptions for an mlp with every fleetps key", "[model_config]") {
  ModelOptions options;
  const Status status = ParseText(R"(
hyper_parameters:
  model_type: MLP
  input_dim: 16
  fc_sizes: []
  output: Sigmoid
  init_seed: 77
  optimizer: {class: adagrad, learning_rate: 5e-2, epsilon: 1e-6, initial_accumulator: 0.1}
)",
                                  &options);
  REQUIRE(status.ok());
  CHECK(options.type == ModelType::kMlp);
  CHECK(options.input_dim == 16);
  CHECK(options.fc_sizes.empty());
  CHECK(options.output == OutputKind::kSigmoid);
  CHECK(options.init_seed == 77);
  CHECK(options.optimizer.kind == OptimizerKind::kAdagrad);
  CHECK(options.optimizer.learning_rate == 0.05f);
  CHECK(options.optimizer.epsilon == 1e-6f);
  CHECK(options.optimizer.initial_accumulator == 0.1f);
  CHECK(DenseInputDim(options) == 16);
}

TEST_CASE("ModelOptions of PaddleRec's ranking models", "[model_config]") {
  ModelOptions options;
  REQUIRE(ParseText("hyper_parameters:\n  model_type: DeepFM\n  sparse_feature_dim: 8\n", &options).ok());
  CHECK(options.type == ModelType::kDeepFm);
  CHECK(SparseRowDim(options) == 9);  // first-order weight + 8
  CHECK(DenseInputDim(options) == 26 * 9 + 13);

  options = ModelOptions{};
  REQUIRE(ParseText("hyper_parameters:\n  model_type: dcn\n  cross_num: 3\n  cross_type: v2\n", &options).ok());
  CHECK(options.type == ModelType::kDcn);
  CHECK(options.cross_num == 3);
  CHECK(options.cross_type == CrossType::kV2);
  CHECK(SparseRowDim(options) == 9);

  options = ModelOptions{};
  REQUIRE(ParseText("hyper_parameters:\n  model_type: wide_deep\n  sparse_inputs_slots: 4\n  sparse_feature_dim: 8\n"
                    "  dense_input_dim: 2\n  slot_dims: [8, 2, 4]\n",
                    &options)
              .ok());
  CHECK(options.slot_dims == std::vector<uint32_t>{8, 2, 4});
  CHECK(SparseRowDim(options) == 9);
  CHECK(SlotBlockDim(options, 1) == 3);
  CHECK(DenseInputDim(options) == 9 + 3 + 5 + 2);

  // PaddleRec rank/dlrm's config.yaml: the output width comes from top_layer_sizes.
  options = ModelOptions{};
  REQUIRE(ParseText("hyper_parameters:\n  model_type: dlrm\n  sparse_feature_dim: 16\n"
                    "  bot_layer_sizes: [512, 256, 64, 16]\n  top_layer_sizes: [512, 256, 1]\n",
                    &options)
              .ok());
  CHECK(options.type == ModelType::kDlrm);
  CHECK(options.output == OutputKind::kSigmoid);
  CHECK(options.bot_layer_sizes == std::vector<uint32_t>{512, 256, 64, 16});
  CHECK(options.top_layer_sizes == std::vector<uint32_t>{512, 256, 1});
  CHECK(DenseInputDim(options) == 26 * 16 + 13);
}

TEST_CASE("ModelOptions defaults when keys are absent", "[model_config]") {
  ModelOptions options;
  REQUIRE(ParseText("hyper_parameters:\n  optimizer: {class: SGD}\n", &options).ok());
  CHECK(options.type == ModelType::kCtrDnn);
  CHECK(options.optimizer.kind == OptimizerKind::kSgd);
  CHECK(options.optimizer.learning_rate == OptimizerOptions{}.learning_rate);
  REQUIRE(ParseText("other: 1\n", &options).ok());  // no hyper_parameters at all
  CHECK(DenseInputDim(options) == 26 * 9 + 13);
}

TEST_CASE("ModelOptions errors name file, line, key and the allowed values", "[model_config]") {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"hyper_parameters:\n  optimizer:\n    class: Momentum\n",
       "test.yaml:3: hyper_parameters.optimizer.class: expected one of sgd, adagrad, adam (case-insensitive), "
       "got \"Momentum\""},
      {"hyper_parameters:\n  optimizer: {class: adam, learning_rte: 0.1}\n",
       "test.yaml:2:28: unknown key 'learning_rte' under 'hyper_parameters.optimizer' (did you mean 'learning_rate'?)"},
      {"hyper_parameters:\n  optimizer: {learning_rate: -1}\n",
       "test.yaml:2: hyper_parameters.optimizer.learning_rate: expected a number > 0, got \"-1\""},
      {"hyper_parameters:\n  optimizer: {beta1: 1}\n",
       "hyper_parameters.optimizer.beta1: expected a number in [0, 1), got \"1\""},
      {"hyper_parameters:\n  optimizer: adam\n", "test.yaml:2: hyper_parameters.optimizer: expected a map"},
      {"hyper_parameters:\n  model_type: xdeepfm\n",
       "test.yaml:2: hyper_parameters.model_type: expected one of mlp, ctr_dnn, wide_deep, deepfm, dcn, dlrm, network "
       "(case-insensitive), got \"xdeepfm\""},
      {"hyper_parameters:\n  model_type: deepfm\n  sparse_inputs_slots: 3\n  slot_dims: [4, 4]\n",
       "test.yaml:4: hyper_parameters.slot_dims: per-slot embedding widths are for ctr_dnn, wide_deep and dcn; deepfm"},
      {"hyper_parameters:\n  sparse_inputs_slots: 3\n  slot_dims: [4, 4, 4]\n",
       "test.yaml:3: hyper_parameters.slot_dims: has 3 widths but the model has 2 sparse slots"},
      {"hyper_parameters:\n  sparse_inputs_slots: 3\n  sparse_feature_dim: 8\n  slot_dims: [4, 9]\n",
       "hyper_parameters.slot_dims[1]: expected a width in [1, sparse_feature_dim = 8]"},
      {"hyper_parameters:\n  model_type: dcn\n  cross_num: 0\n",
       "test.yaml:3: hyper_parameters.cross_num: expected an integer in [1, 64], got \"0\""},
      {"hyper_parameters:\n  model_type: dcn\n  cross_type: v3\n",
       "test.yaml:3: hyper_parameters.cross_type: expected one of v1, v2 (case-insensitive), got \"v3\""},
      {"hyper_parameters:\n  model_type: dlrm\n  sparse_feature_dim: 16\n  bot_layer_sizes: [64, 8]\n",
       "test.yaml:4: hyper_parameters.bot_layer_sizes: dlrm's bottom MLP must end at the embedding width"},
      {"hyper_parameters:\n  model_type: dlrm\n  sparse_feature_dim: 16\n  bot_layer_sizes: [16]\n"
       "  top_layer_sizes: [64, 32]\n",
       "test.yaml:5: hyper_parameters.top_layer_sizes: the last entry is dlrm's output layer: expected 1 (sigmoid) "
       "or 2 (softmax2)"},
      {"hyper_parameters:\n  output: softmax\n",
       "hyper_parameters.output: expected one of softmax2, sigmoid (case-insensitive), got \"softmax\""},
      {"hyper_parameters:\n  dense_input_dim: 13\n  sparse_inputs_slots: 1\n",
       "test.yaml:3: hyper_parameters.sparse_inputs_slots: expected an integer >= 2 (PaddleRec counts the label "
       "slot: 27 means 26 sparse slots), got \"1\""},
      {"hyper_parameters:\n  sparse_feature_dim: 0\n",
       "hyper_parameters.sparse_feature_dim: expected an integer >= 1, got \"0\""},
      {"hyper_parameters:\n  sparse_feature_dim: nine\n", "hyper_parameters.sparse_feature_dim: expected an integer"},
      {"hyper_parameters:\n  dense_input_dim: -13\n", "hyper_parameters.dense_input_dim: expected an integer"},
      {"hyper_parameters:\n  fc_sizes: [512, 0, 32]\n",
       "test.yaml:2: hyper_parameters.fc_sizes[1]: expected a layer width in [1, 2147483647], got 0"},
      {"hyper_parameters:\n  fc_sizes: 512\n", "hyper_parameters.fc_sizes: expected a list of integers"},
      {"hyper_parameters:\n  input_dim: 0\n", "hyper_parameters.input_dim: expected an integer >= 1, got \"0\""},
      {"hyper_parameters: [1, 2]\n", "test.yaml:1: hyper_parameters: expected a map"},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    ModelOptions options;
    options.sparse_feature_dim = 5;
    const Status status = ParseText(c.yaml, &options);
    REQUIRE(status.IsInvalidArgument());
    CHECK_THAT(status.message(), Catch::Contains(c.message));
    CHECK(options.sparse_feature_dim == 5);  // unchanged on error
    CHECK(options.num_sparse_slots == ModelOptions{}.num_sparse_slots);
  }
}

}  // namespace
}  // namespace fleetps::config
