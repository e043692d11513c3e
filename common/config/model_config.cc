#include "common/config/model_config.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>
#include <utility>

#include "common/config/optimizer_config.h"

namespace fleetps {

const std::vector<std::pair<std::string, ModelType>>& ModelTypeNames() {
  static const std::vector<std::pair<std::string, ModelType>> names = {
      {"mlp", ModelType::kMlp},         {"ctr_dnn", ModelType::kCtrDnn}, {"wide_deep", ModelType::kWideDeep},
      {"deepfm", ModelType::kDeepFm},   {"dcn", ModelType::kDcn},        {"dlrm", ModelType::kDlrm},
      {"network", ModelType::kNetwork},
  };
  return names;
}

std::string ModelTypeName(ModelType type) {
  for (const auto& [name, t] : ModelTypeNames()) {
    if (t == type) return name;
  }
  return "?";
}

bool HasSparseSlots(const ModelOptions& options) { return options.type != ModelType::kMlp; }

bool HasFirstOrderWeight(const ModelOptions& options) {
  if (options.type == ModelType::kNetwork) return options.graph != nullptr && options.graph->reads_embed_w();
  return options.type == ModelType::kWideDeep || options.type == ModelType::kDeepFm;
}

size_t SparseRowDim(const ModelOptions& options) {
  if (!HasSparseSlots(options)) return 0;
  return size_t{options.sparse_feature_dim} + (HasFirstOrderWeight(options) ? 1 : 0);
}

size_t SlotBlockDim(const ModelOptions& options, size_t slot) {
  if (options.graph != nullptr) return options.graph->slot_block(slot);
  if (options.slot_dims.empty()) return SparseRowDim(options);
  return size_t{options.slot_dims.at(slot)} + (HasFirstOrderWeight(options) ? 1 : 0);
}

size_t DenseInputDim(const ModelOptions& options) {
  if (options.graph != nullptr) return options.graph->row_width();
  if (options.type == ModelType::kMlp) return options.input_dim;
  size_t width = options.dense_input_dim;
  for (size_t s = 0; s < options.num_sparse_slots; ++s) width += SlotBlockDim(options, s);
  return width;
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
Status ReadChecked(const YAML::Node& map, const std::string& key, const YamlContext& ctx, Read read, Valid valid,
                   const std::string& expected, T* out) {
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
Status ReadEnumIgnoreCase(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
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
  return ctx.Child(key).Error(map[key],
                              "expected one of " + allowed + " (case-insensitive), got \"" + map[key].Scalar() + "\"");
}

// sparse_feature_dim, or its PaddleRec spelling emb_dim (both given: they must agree).
Status ReadEmbeddingWidth(const YAML::Node& hp, const YamlContext& ctx, ModelOptions* o) {
  const auto at_least_1 = [](uint32_t v) { return v >= 1; };
  RETURN_IF_ERROR(
      ReadChecked(hp, "sparse_feature_dim", ctx, ReadUint32, at_least_1, "an integer >= 1", &o->sparse_feature_dim));
  if (Present(hp, "emb_dim")) {
    uint32_t emb_dim = 0;
    RETURN_IF_ERROR(ReadChecked(hp, "emb_dim", ctx, ReadUint32, at_least_1, "an integer >= 1", &emb_dim));
    if (Present(hp, "sparse_feature_dim") && emb_dim != o->sparse_feature_dim) {
      return ctx.Child("emb_dim").Error(hp["emb_dim"], "is " + std::to_string(emb_dim) + " but sparse_feature_dim is " +
                                                           std::to_string(o->sparse_feature_dim) +
                                                           "; both name the embedding width, give one");
    }
    o->sparse_feature_dim = emb_dim;
  }
  return Status::OK();
}

// sparse_inputs_slots (PaddleRec counts the label slot), and dlrm's num_field, which must agree.
Status ReadSparseSlots(const YAML::Node& hp, const YamlContext& ctx, ModelOptions* o) {
  uint32_t paddle_slots = o->num_sparse_slots + 1;
  RETURN_IF_ERROR(ReadChecked(
      hp, "sparse_inputs_slots", ctx, ReadUint32, [](uint32_t v) { return v >= 2; },
      "an integer >= 2 (PaddleRec counts the label slot: 27 means 26 sparse slots)", &paddle_slots));
  o->num_sparse_slots = paddle_slots - 1;
  if (Present(hp, "num_field")) {  // PaddleRec dlrm's count of sparse slots: must agree
    uint32_t fields = 0;
    RETURN_IF_ERROR(ReadUint32(hp, "num_field", ctx, &fields));
    if (fields != o->num_sparse_slots) {
      return ctx.Child("num_field")
          .Error(hp["num_field"], "is " + std::to_string(fields) + " but the model has " +
                                      std::to_string(o->num_sparse_slots) + " sparse slots (sparse_inputs_slots - 1)");
    }
  }
  return Status::OK();
}

// Hidden layer widths from `key`, when present.
Status ReadLayerWidths(const YAML::Node& hp, const std::string& key, const YamlContext& ctx,
                       std::vector<uint32_t>* out) {
  std::vector<int64_t> widths;
  RETURN_IF_ERROR(ReadIntList(hp, key, ctx, &widths));
  if (!Present(hp, key)) return Status::OK();
  out->clear();
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1 || widths[i] > std::numeric_limits<int32_t>::max()) {
      return ctx.Child(key).Index(i).Error(
          hp[key][i], "expected a layer width in [1, 2147483647], got " + std::to_string(widths[i]));
    }
    out->push_back(static_cast<uint32_t>(widths[i]));
  }
  return Status::OK();
}

// fc_sizes, or its PaddleRec spelling layer_sizes (both given: they must agree).
Status ReadHiddenLayers(const YAML::Node& hp, const YamlContext& ctx, ModelOptions* o) {
  RETURN_IF_ERROR(ReadLayerWidths(hp, "fc_sizes", ctx, &o->fc_sizes));
  if (Present(hp, "layer_sizes")) {
    std::vector<uint32_t> layer_sizes;
    RETURN_IF_ERROR(ReadLayerWidths(hp, "layer_sizes", ctx, &layer_sizes));
    if (Present(hp, "fc_sizes") && layer_sizes != o->fc_sizes) {
      return ctx.Child("layer_sizes")
          .Error(hp["layer_sizes"], "differs from fc_sizes; both name the hidden layer widths, give one");
    }
    o->fc_sizes = std::move(layer_sizes);
  }
  return Status::OK();
}

// slot_dims, when present: one embedding width per sparse slot, for the models that concatenate slots.
Status ReadSlotDims(const YAML::Node& hp, const YamlContext& ctx, ModelOptions* o) {
  if (!Present(hp, "slot_dims")) return Status::OK();
  RETURN_IF_ERROR(ReadLayerWidths(hp, "slot_dims", ctx, &o->slot_dims));
  const YAML::Node node = hp["slot_dims"];
  if (o->type != ModelType::kCtrDnn && o->type != ModelType::kWideDeep && o->type != ModelType::kDcn) {
    return ctx.Child("slot_dims")
        .Error(node, "per-slot embedding widths are for ctr_dnn, wide_deep and dcn; " + ModelTypeName(o->type) +
                         " takes dot products between slots, which need one width");
  }
  if (o->slot_dims.size() != o->num_sparse_slots) {
    return ctx.Child("slot_dims")
        .Error(node, "has " + std::to_string(o->slot_dims.size()) + " widths but the model has " +
                         std::to_string(o->num_sparse_slots) + " sparse slots (sparse_inputs_slots - 1)");
  }
  for (size_t i = 0; i < o->slot_dims.size(); ++i) {
    if (o->slot_dims[i] > o->sparse_feature_dim) {
      return ctx.Child("slot_dims")
          .Index(i)
          .Error(node[i], "expected a width in [1, sparse_feature_dim = " + std::to_string(o->sparse_feature_dim) +
                              "] (the rows are sparse_feature_dim wide), got " + std::to_string(o->slot_dims[i]));
    }
  }
  return Status::OK();
}

// dlrm's MLPs: the top one ends with the output layer, the bottom one at the embedding width.
Status CheckDlrmLayers(const YAML::Node& hp, const YamlContext& ctx, ModelOptions* o) {
  // PaddleRec's top_layer_sizes ends with the output layer: its width picks the loss.
  const std::string top_key = "top_layer_sizes";
  const YAML::Node top_node = Present(hp, top_key) ? hp[top_key] : hp;
  if (o->top_layer_sizes.empty() || o->top_layer_sizes.back() > 2) {
    return ctx.Child(top_key).Error(top_node,
                                    "the last entry is dlrm's output layer: expected 1 (sigmoid) or 2 "
                                    "(softmax2), e.g. [512, 256, 2]");
  }
  const OutputKind from_top = o->top_layer_sizes.back() == 2 ? OutputKind::kSoftmax2 : OutputKind::kSigmoid;
  if (Present(hp, "output") && o->output != from_top) {
    return ctx.Child("output").Error(hp["output"], "disagrees with the last entry of top_layer_sizes (" +
                                                       std::to_string(o->top_layer_sizes.back()) +
                                                       "); give one of them");
  }
  o->output = from_top;
  const YAML::Node bot_node = Present(hp, "bot_layer_sizes") ? hp["bot_layer_sizes"] : hp;
  if (o->bot_layer_sizes.empty() || o->bot_layer_sizes.back() != o->sparse_feature_dim) {
    return ctx.Child("bot_layer_sizes")
        .Error(bot_node,
               "dlrm's bottom MLP must end at the embedding width: expected a non-empty list whose last "
               "entry is sparse_feature_dim (" +
                   std::to_string(o->sparse_feature_dim) + ")");
  }
  if (o->dense_input_dim == 0) {
    return ctx.Child("dense_input_dim")
        .Error(Present(hp, "dense_input_dim") ? hp["dense_input_dim"] : hp,
               "dlrm's bottom MLP reads the dense features: expected an integer >= 1");
  }
  return Status::OK();
}

}  // namespace

std::vector<std::string> ModelOptionKeys() {
  return {"model_type", "sparse_feature_dim", "emb_dim",         "sparse_inputs_slots", "dense_input_dim", "input_dim",
          "fc_sizes",   "layer_sizes",        "output",          "init_seed",           "optimizer",       "cross_num",
          "cross_type", "bot_layer_sizes",    "top_layer_sizes", "num_field",           "slot_dims"};
}

Status ParseModelOptions(const YAML::Node& hyper_parameters, const YamlContext& ctx, ModelOptions* options) {
  if (!hyper_parameters || hyper_parameters.IsNull()) return Status::OK();
  if (!hyper_parameters.IsMap()) return ctx.Error(hyper_parameters, "expected a map of model hyper-parameters");
  const YAML::Node& hp = hyper_parameters;
  ModelOptions o = *options;

  RETURN_IF_ERROR(ReadEnumIgnoreCase<ModelType>(hp, "model_type", ctx, ModelTypeNames(), &o.type));
  RETURN_IF_ERROR(ReadEmbeddingWidth(hp, ctx, &o));
  RETURN_IF_ERROR(ReadSparseSlots(hp, ctx, &o));
  RETURN_IF_ERROR(ReadUint32(hp, "dense_input_dim", ctx, &o.dense_input_dim));
  RETURN_IF_ERROR(ReadChecked(
      hp, "input_dim", ctx, ReadUint32, [](uint32_t v) { return v >= 1; }, "an integer >= 1", &o.input_dim));
  RETURN_IF_ERROR(ReadHiddenLayers(hp, ctx, &o));

  RETURN_IF_ERROR(ReadChecked(
      hp, "cross_num", ctx, ReadUint32, [](uint32_t v) { return v >= 1 && v <= 64; }, "an integer in [1, 64]",
      &o.cross_num));
  RETURN_IF_ERROR(ReadEnumIgnoreCase<CrossType>(hp, "cross_type", ctx, {{"v1", CrossType::kV1}, {"v2", CrossType::kV2}},
                                                &o.cross_type));
  RETURN_IF_ERROR(ReadLayerWidths(hp, "bot_layer_sizes", ctx, &o.bot_layer_sizes));
  RETURN_IF_ERROR(ReadLayerWidths(hp, "top_layer_sizes", ctx, &o.top_layer_sizes));

  RETURN_IF_ERROR(ReadEnumIgnoreCase<OutputKind>(
      hp, "output", ctx, {{"softmax2", OutputKind::kSoftmax2}, {"sigmoid", OutputKind::kSigmoid}}, &o.output));
  RETURN_IF_ERROR(ReadUint64(hp, "init_seed", ctx, &o.init_seed));
  if (Present(hp, "optimizer")) RETURN_IF_ERROR(ParseOptimizer(hp["optimizer"], ctx.Child("optimizer"), &o.optimizer));

  RETURN_IF_ERROR(ReadSlotDims(hp, ctx, &o));
  if (o.type == ModelType::kDlrm) RETURN_IF_ERROR(CheckDlrmLayers(hp, ctx, &o));

  *options = std::move(o);
  return Status::OK();
}

}  // namespace config
}  // namespace fleetps
