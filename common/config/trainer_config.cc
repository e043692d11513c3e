#include "common/config/trainer_config.h"

#include <algorithm>
#include <cmath>

#include "common/config/trainer_config_sections.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {

std::string_view SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kAsync: return "async";
    case SyncMode::kSync: return "sync";
    case SyncMode::kGeo: return "geo";
    case SyncMode::kHeter: return "heter";
    case SyncMode::kCollective: return "collective";
    case SyncMode::kGpuBox: return "gpubox";
  }
  return "?";
}

bool SyncModeFromName(std::string_view name, SyncMode* mode) {
  for (SyncMode m : {SyncMode::kAsync, SyncMode::kSync, SyncMode::kGeo, SyncMode::kHeter, SyncMode::kCollective,
                     SyncMode::kGpuBox}) {
    if (name == SyncModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

std::string_view CollectiveBackendName(CollectiveBackend backend) {
  switch (backend) {
    case CollectiveBackend::kAuto: return "auto";
    case CollectiveBackend::kGloo: return "gloo";
    case CollectiveBackend::kNccl: return "nccl";
  }
  return "?";
}

float DataParallelLearningRate(const DataParallelOptions& c, const OptimizerOptions& dense, uint64_t step,
                               uint32_t world) {
  LrScaling scaling = c.lr_scaling;
  if (scaling == LrScaling::kAuto) scaling = dense.kind == OptimizerKind::kSgd ? LrScaling::kLinear : LrScaling::kSqrt;
  float lr = dense.learning_rate;
  if (scaling == LrScaling::kLinear) lr *= static_cast<float>(world);
  if (scaling == LrScaling::kSqrt) lr *= std::sqrt(static_cast<float>(world));
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    lr *= static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  }
  return lr;
}

bool ParseCollectiveBackend(std::string_view name, CollectiveBackend* backend) {
  for (CollectiveBackend b : {CollectiveBackend::kAuto, CollectiveBackend::kGloo, CollectiveBackend::kNccl}) {
    if (name == CollectiveBackendName(b)) {
      *backend = b;
      return true;
    }
  }
  return false;
}

namespace {

// Floats of an MLP in -> widths[0] -> ... -> widths.back() (weights and biases).
uint64_t MlpParamCount(uint64_t in, const std::vector<uint32_t>& widths) {
  uint64_t total = 0;
  for (uint32_t out : widths) {
    total += in * out + out;
    in = out;
  }
  return total;
}

}  // namespace

// Must agree with model::DenseNet::FromOptions(model).num_params() (model_registry_test
// checks every model type).
uint64_t DenseParamCount(const ModelOptions& model) {
  const uint64_t in = DenseInputDim(model);
  const uint64_t logits = model.output == OutputKind::kSoftmax2 ? 2 : 1;
  std::vector<uint32_t> with_output = model.fc_sizes;
  with_output.push_back(static_cast<uint32_t>(logits));
  const uint64_t mlp = MlpParamCount(in, with_output);
  const uint64_t dense = model.dense_input_dim;
  switch (model.type) {
    case ModelType::kMlp:
    case ModelType::kCtrDnn: return mlp;
    case ModelType::kWideDeep:  // + the wide weights of the dense features
      return mlp + dense;
    case ModelType::kDeepFm:  // + first-order weights and FM embeddings of the dense features
      return mlp + dense + dense * model.sparse_feature_dim;
    case ModelType::kDcn: {
      const uint64_t cross = model.cross_type == CrossType::kV1 ? 2 * in : in * in + in;
      const uint64_t deep = MlpParamCount(in, model.fc_sizes);
      const uint64_t joined = in + (model.fc_sizes.empty() ? 0 : model.fc_sizes.back());
      return model.cross_num * cross + deep + joined * logits + logits;
    }
    case ModelType::kDlrm: {
      const uint64_t bottom = MlpParamCount(dense, model.bot_layer_sizes);
      const uint64_t vectors = uint64_t{model.num_sparse_slots} + 1;
      const uint64_t top_in = model.sparse_feature_dim + vectors * (vectors - 1) / 2;
      return bottom + MlpParamCount(top_in, model.top_layer_sizes);
    }
  }
  return mlp;
}

std::vector<TableOptions> JobTables(const TrainerOptions& o) {
  std::vector<TableOptions> tables;
  if (HasSparseSlots(o.model)) tables.push_back(o.sparse_table);
  tables.push_back(o.dense_table);
  return tables;
}

bool IsJobYaml(const std::string& text) {
  auto root = LoadYamlString(text);
  return root.ok() && root->IsMap() && (*root)["hyper_parameters"];
}

namespace {

// Keys of PaddleRec's `hyper_parameters:` map that fleetps accepts and ignores.
std::vector<std::string> PaddleRecIgnoredHyperParameterKeys() {
  return {
      // The vocabulary of Paddle's fixed-size embedding (dict_dim in slot_dnn); fleetps's
      // sparse tables are hash tables that take any uint64 key.
      "sparse_feature_number",
      "dict_dim",
      // Paddle: 1 puts the embedding on the pservers; fleetps's always lives there.
      "distributed_embedding",
      // PaddleRec rank/dcn's regularization and Paddle-graph switches, which fleetps's dcn
      // does not have: the L2 penalty of the cross weights, batch norm in the MLP (off in
      // PaddleRec's configs), gradient clipping by norm, and Paddle's sparse-gradient flag.
      "l2_reg_cross",
      "dnn_use_bn",
      "clip_by_norm",
      "is_sparse",
  };
}

// Every `hyper_parameters:` key fleetps reads: the model's and the data reader's shapes.
std::vector<std::string> HyperParameterKeys() {
  std::vector<std::string> keys = ModelOptionKeys();
  for (auto& k : DataShapeKeys()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  return keys;
}

// The tables derived from the model; fleetps.* may override ids, names, shards, optimizer.
void DeriveTables(TrainerOptions* out) {
  TrainerOptions& o = *out;
  o.sparse_table.id = 0;
  o.sparse_table.name = "embedding";
  o.sparse_table.kind = TableKind::kSparse;
  o.sparse_table.dim = SparseRowDim(o.model);
  o.sparse_table.shards = 8;
  o.sparse_table.optimizer = o.model.optimizer;
  o.sparse_table.initializer.kind = InitializerKind::kUniform;
  o.sparse_table.initializer.min = -0.01f;
  o.sparse_table.initializer.max = 0.01f;
  o.sparse_table.initializer.seed = o.model.init_seed;
  o.dense_table.id = 1;
  o.dense_table.name = "dense";
  o.dense_table.kind = TableKind::kDense;
  o.dense_table.dim = DenseParamCount(o.model);
  o.dense_table.shards = 1;
  o.dense_table.optimizer = o.model.optimizer;
  o.dense_table.initializer.kind = InitializerKind::kZeros;
}

// The data reader's shapes (runner and hyper_parameters) against the model's inputs.
Status CheckDataMatchesModel(const YAML::Node& root, const YamlContext& ctx, const TrainerOptions& o) {
  if (HasSparseSlots(o.model) && o.data.sparse_slots.size() != o.model.num_sparse_slots) {
    return ctx.Error(root["hyper_parameters"], "the data has " + std::to_string(o.data.sparse_slots.size()) +
                                                   " sparse slots but the model " +
                                                   std::to_string(o.model.num_sparse_slots) +
                                                   " (check sparse_inputs_slots / slot_num / sparse_slots)");
  }
  if (HasSparseSlots(o.model) && o.data.dense_dim != o.model.dense_input_dim) {
    return ctx.Error(root["hyper_parameters"], "the data has " + std::to_string(o.data.dense_dim) +
                                                   " dense features but the model " +
                                                   std::to_string(o.model.dense_input_dim));
  }
  if (o.model.type == ModelType::kMlp && o.data.dense_dim != o.model.input_dim) {
    return ctx.Error(root["hyper_parameters"], "the mlp model reads " + std::to_string(o.model.input_dim) +
                                                   " dense inputs (input_dim) but the data has " +
                                                   std::to_string(o.data.dense_dim) + " (dense_input_dim)");
  }
  return Status::OK();
}

}  // namespace

StatusOr<TrainerOptions> ParseTrainerYaml(const std::string& text, const std::string& file_name) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlString(text, file_name));
  YamlContext ctx{file_name, ""};
  if (!root.IsMap()) return ctx.Error(root, "expected a map with 'runner' and 'hyper_parameters'");
  RETURN_IF_ERROR(RejectUnknownKeys(root, {"runner", "hyper_parameters", "fleetps"}, ctx));
  if (!root["hyper_parameters"]) return ctx.Error(root, "missing required section 'hyper_parameters' (the model)");
  // Unknown keys first: a misspelt key is the likeliest cause of any later error.
  RETURN_IF_ERROR(RejectUnknownKeys(root["runner"], RunnerKeys(), ctx.Child("runner"), PaddleRecIgnoredRunnerKeys()));
  RETURN_IF_ERROR(RejectUnknownKeys(root["hyper_parameters"], HyperParameterKeys(), ctx.Child("hyper_parameters"),
                                    PaddleRecIgnoredHyperParameterKeys()));
  TrainerOptions o;
  o.config_path = file_name;
  RETURN_IF_ERROR(ParseModelOptions(root["hyper_parameters"], ctx.Child("hyper_parameters"), &o.model));
  RETURN_IF_ERROR(ParsePaddleRecDataOptions(root, ctx, &o.data));
  if (root["runner"]) RETURN_IF_ERROR(ParseRunnerSection(root["runner"], ctx.Child("runner"), file_name, &o));
  DeriveTables(&o);
  const YAML::Node ext = root["fleetps"];
  const YamlContext ectx = ctx.Child("fleetps");
  if (ext) RETURN_IF_ERROR(ParseFleetpsSection(ext, ectx, &o));
  if (o.sparse_table.id == o.dense_table.id) {
    return ectx.Error(ext, "fleetps.sparse_table.id and fleetps.dense_table.id must differ");
  }
  for (const auto& t : JobTables(o)) {
    Status st = ValidateTable(t);
    if (!st.ok()) return Status::InvalidArgument(file_name + ": " + st.message());
  }
  RETURN_IF_ERROR(CheckDataMatchesModel(root, ctx, o));
  return o;
}

StatusOr<TrainerOptions> LoadTrainerYaml(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  return ParseTrainerYaml(text, path);
}

}  // namespace fleetps::config
