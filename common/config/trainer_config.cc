#include "common/config/trainer_config.h"

#include <algorithm>
#include <cmath>

#include "common/config/graph_models.h"
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

// The graph's parameter count: model::DenseNet's flat vector and the pserver's dense table.
uint64_t DenseParamCount(const ModelOptions& model) { return graph::ModelGraph(model)->num_params(); }

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

// `network:` (the model as a layer graph): model_type is then `network` or absent.
Status ParseNetworkSection(const YAML::Node& root, const YamlContext& ctx, ModelOptions* model) {
  const YAML::Node hp = root["hyper_parameters"];
  const bool named = model->type == ModelType::kNetwork;
  if (!root["network"]) {
    if (named) {
      return ctx.Error(hp["model_type"],
                       "model_type network needs a 'network:' section (the layer graph, docs/MODELS.md)");
    }
    if (model->labels.size() > 1) {
      return ctx.Child("hyper_parameters.model_type")
          .Error(hp["model_type"] ? hp["model_type"] : hp,
                 "model_type " + ModelTypeName(model->type) + " learns one label and the data has " +
                     std::to_string(model->labels.size()) +
                     " (label_slots); keep one, or write the model as a network: section with one output per label "
                     "(configs/mmoe.yaml)");
    }
    return Status::OK();
  }
  if (!named && hp["model_type"]) {
    return ctx.Child("hyper_parameters.model_type")
        .Error(hp["model_type"], "is " + ModelTypeName(model->type) +
                                     " but the job also has a 'network:' section; give one (model_type: network, or "
                                     "drop the section)");
  }
  // The built-in models' layer keys would be silently unused: the layers are the graph's.
  for (const char* key : {"fc_sizes", "layer_sizes", "output", "cross_num", "cross_type", "bot_layer_sizes",
                          "top_layer_sizes", "input_dim"}) {
    if (hp[key]) {
      return ctx.Child(std::string("hyper_parameters.") + key)
          .Error(hp[key],
                 std::string("is a built-in model's key, and this job's model is its network: section; remove ") + key +
                     " (the graph's layers and outputs say it)");
    }
  }
  ASSIGN_OR_RETURN(graph::GraphSpec spec, graph::ParseGraphSpec(root["network"], ctx.Child("network")));
  model->type = ModelType::kNetwork;
  ASSIGN_OR_RETURN(model->graph, graph::BuildGraph(std::move(spec), graph::ModelRowShape(*model)));
  model->output = model->graph->spec().outputs[0].loss == graph::LossKind::kSoftmaxCrossEntropy ? OutputKind::kSoftmax2
                                                                                                : OutputKind::kSigmoid;
  return Status::OK();
}

}  // namespace

StatusOr<TrainerOptions> ParseTrainerYaml(const std::string& text, const std::string& file_name) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlString(text, file_name));
  YamlContext ctx{file_name, ""};
  if (!root.IsMap()) return ctx.Error(root, "expected a map with 'runner' and 'hyper_parameters'");
  RETURN_IF_ERROR(RejectUnknownKeys(root, {"runner", "hyper_parameters", "network", "fleetps"}, ctx));
  if (!root["hyper_parameters"]) return ctx.Error(root, "missing required section 'hyper_parameters' (the model)");
  // Unknown keys first: a misspelt key is the likeliest cause of any later error.
  RETURN_IF_ERROR(RejectUnknownKeys(root["runner"], RunnerKeys(), ctx.Child("runner"), PaddleRecIgnoredRunnerKeys()));
  RETURN_IF_ERROR(RejectUnknownKeys(root["hyper_parameters"], HyperParameterKeys(), ctx.Child("hyper_parameters"),
                                    PaddleRecIgnoredHyperParameterKeys()));
  TrainerOptions o;
  o.config_path = file_name;
  RETURN_IF_ERROR(ParseModelOptions(root["hyper_parameters"], ctx.Child("hyper_parameters"), &o.model));
  RETURN_IF_ERROR(ParsePaddleRecDataOptions(root, ctx, &o.data));
  o.model.labels = o.data.label_slots;
  RETURN_IF_ERROR(ParseNetworkSection(root, ctx, &o.model));
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
