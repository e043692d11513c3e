#include "common/config/model_config.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>
#include <utility>

namespace fleetps {

size_t DenseInputDim(const ModelOptions& options) {
  if (options.type == ModelType::kMlp) return options.input_dim;
  return size_t{options.num_sparse_slots} * options.sparse_feature_dim + options.dense_input_dim;
}

namespace config {
namespace {

bool Present(const YAML::Node& map, const std::string& key) {
  const YAML::Node node = map[key];
  return node && !node.IsNull();
}

// Reads `key` with `read` (one of the yaml_util readers) and, when present, checks the
// value with `valid`; `expected` describes the allowed values for the error message.
template <typename T, typename Read, typename Valid>
Status ReadChecked(const YAML::Node& map, const std::string& key, const YamlContext& ctx, Read read,
                   Valid valid, const std::string& expected, T* out) {
  if (!Present(map, key)) return Status::OK();
  T value{};
  RETURN_IF_ERROR(read(map, key, ctx, &value));
  if (!valid(value)) {
    return ctx.Child(key).Error(map[key], "expected " + expected + ", got \"" + map[key].Scalar() + "\"");
  }
  *out = value;
  return Status::OK();
}

// Reads a case-insensitive name from `names` into *out.
template <typename E>
Status ReadEnum(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                const std::vector<std::pair<std::string, E>>& names, E* out) {
  if (!Present(map, key)) return Status::OK();
  std::string name;
  RETURN_IF_ERROR(ReadString(map, key, ctx, &name));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string allowed;
  for (const auto& [candidate, value] : names) {
    if (name == candidate) {
      *out = value;
      return Status::OK();
    }
    allowed += (allowed.empty() ? "" : ", ") + candidate;
  }
  return ctx.Child(key).Error(map[key], "expected one of " + allowed + " (case-insensitive), got \"" +
                                            map[key].Scalar() + "\"");
}

Status ParseOptimizer(const YAML::Node& node, const YamlContext& ctx, OptimizerOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map such as {class: Adam, learning_rate: 0.001}");
  RETURN_IF_ERROR(RejectUnknownKeys(node,
                                    {"class", "learning_rate", "beta1", "beta2", "epsilon", "initial_accumulator",
                                     "strategy", "adam_lazy_mode"},
                                    ctx));
  const auto positive = [](float v) { return v > 0.0f; };
  const auto non_negative = [](float v) { return v >= 0.0f; };
  const auto unit_interval = [](float v) { return v >= 0.0f && v < 1.0f; };
  RETURN_IF_ERROR(ReadEnum<OptimizerKind>(
      node, "class", ctx,
      {{"sgd", OptimizerKind::kSgd}, {"adagrad", OptimizerKind::kAdagrad}, {"adam", OptimizerKind::kAdam}},
      &out->kind));
  RETURN_IF_ERROR(ReadChecked(node, "learning_rate", ctx, ReadFloat, positive, "a number > 0", &out->learning_rate));
  RETURN_IF_ERROR(ReadChecked(node, "beta1", ctx, ReadFloat, unit_interval, "a number in [0, 1)", &out->beta1));
  RETURN_IF_ERROR(ReadChecked(node, "beta2", ctx, ReadFloat, unit_interval, "a number in [0, 1)", &out->beta2));
  RETURN_IF_ERROR(ReadChecked(node, "epsilon", ctx, ReadFloat, positive, "a number > 0", &out->epsilon));
  RETURN_IF_ERROR(ReadChecked(node, "initial_accumulator", ctx, ReadFloat, non_negative, "a number >= 0",
                              &out->initial_accumulator));
  return Status::OK();
}

}  // namespace

Status ParseModelOptions(const YAML::Node& hyper_parameters, const YamlContext& ctx, ModelOptions* options) {
  if (!hyper_parameters || hyper_parameters.IsNull()) return Status::OK();
  if (!hyper_parameters.IsMap()) return ctx.Error(hyper_parameters, "expected a map of model hyper-parameters");
  const YAML::Node& hp = hyper_parameters;
  ModelOptions o = *options;
  const auto at_least_1 = [](uint32_t v) { return v >= 1; };

  RETURN_IF_ERROR(ReadEnum<ModelType>(hp, "model_type", ctx,
                                      {{"mlp", ModelType::kMlp}, {"ctr_dnn", ModelType::kCtrDnn}}, &o.type));
  RETURN_IF_ERROR(ReadChecked(hp, "sparse_feature_dim", ctx, ReadUint32, at_least_1, "an integer >= 1",
                              &o.sparse_feature_dim));
  uint32_t paddle_slots = o.num_sparse_slots + 1;
  RETURN_IF_ERROR(ReadChecked(hp, "sparse_inputs_slots", ctx, ReadUint32, [](uint32_t v) { return v >= 2; },
                              "an integer >= 2 (PaddleRec counts the label slot: 27 means 26 sparse slots)",
                              &paddle_slots));
  o.num_sparse_slots = paddle_slots - 1;
  RETURN_IF_ERROR(ReadUint32(hp, "dense_input_dim", ctx, &o.dense_input_dim));
  RETURN_IF_ERROR(ReadChecked(hp, "input_dim", ctx, ReadUint32, at_least_1, "an integer >= 1", &o.input_dim));

  std::vector<int64_t> fc_sizes;
  RETURN_IF_ERROR(ReadIntList(hp, "fc_sizes", ctx, &fc_sizes));
  if (Present(hp, "fc_sizes")) {
    o.fc_sizes.clear();
    for (size_t i = 0; i < fc_sizes.size(); ++i) {
      if (fc_sizes[i] < 1 || fc_sizes[i] > std::numeric_limits<int32_t>::max()) {
        return ctx.Child("fc_sizes").Index(i).Error(
            hp["fc_sizes"][i], "expected a layer width in [1, 2147483647], got " + std::to_string(fc_sizes[i]));
      }
      o.fc_sizes.push_back(static_cast<uint32_t>(fc_sizes[i]));
    }
  }

  RETURN_IF_ERROR(ReadEnum<OutputKind>(hp, "output", ctx,
                                       {{"softmax2", OutputKind::kSoftmax2}, {"sigmoid", OutputKind::kSigmoid}},
                                       &o.output));
  RETURN_IF_ERROR(ReadUint64(hp, "init_seed", ctx, &o.init_seed));
  if (Present(hp, "optimizer")) RETURN_IF_ERROR(ParseOptimizer(hp["optimizer"], ctx.Child("optimizer"), &o.optimizer));

  *options = std::move(o);
  return Status::OK();
}

}  // namespace config
}  // namespace fleetps
