// The built-in model_types as graphs: PaddleRec's keys (fc_sizes, cross_num, bot_layer_sizes,
// ...) expand to the layers below. Parameter layouts (and the initial values drawn from
// init_seed) are the ones these models have always had, so dense tables and checkpoints
// written before the graph existed stay valid. configs/graphs/*.yaml write the same graphs
// out for users to copy.

#include "common/config/graph_models.h"

#include <string>
#include <utility>

#include "common/check.h"

namespace fleetps::graph {
namespace {

class SpecBuilder {
 public:
  void Input(const std::string& name, InputKind kind) {
    spec_.inputs.push_back(GraphInput{.name = name, .kind = kind, .where = Where()});
  }
  // Adds a layer and returns its output's name.
  std::string Layer(const std::string& name, const std::string& op, std::vector<std::string> inputs, Attrs attrs = {},
                    std::vector<std::string> outputs = {}) {
    if (outputs.empty()) outputs = {name};
    spec_.layers.push_back(GraphLayer{.name = name,
                                      .op = op,
                                      .inputs = std::move(inputs),
                                      .outputs = std::move(outputs),
                                      .attrs = std::move(attrs),
                                      .where = Where()});
    return name;
  }
  std::string Fc(const std::string& name, const std::string& input, size_t size, const std::string& activation) {
    Attrs a;
    a.SetNumber("size", static_cast<double>(size));
    a.SetText("activation", activation);
    return Layer(name, "fc", {input}, std::move(a));
  }
  // fc layers of `widths` over input, `activation` after each but the last, which gets `last`.
  std::string Stack(const std::string& prefix, const std::string& input, std::span<const uint32_t> widths,
                    const std::string& last) {
    std::string x = input;
    for (size_t i = 0; i < widths.size(); ++i) {
      x = Fc(prefix + std::to_string(i), x, widths[i], i + 1 == widths.size() ? last : "relu");
    }
    return x;
  }
  void Output(const std::string& input, OutputKind kind) {
    spec_.outputs.push_back(GraphOutput{
        .name = "click",
        .input = input,
        .loss = kind == OutputKind::kSigmoid ? LossKind::kSigmoidCrossEntropy : LossKind::kSoftmaxCrossEntropy,
        .label = "",
        .weight = 1.0,
        .where = Where()});
  }
  GraphSpec Take() { return std::move(spec_); }
  void set_model(std::string model) { model_ = std::move(model); }

 private:
  std::string Where() const { return "model_type " + model_; }
  GraphSpec spec_;
  std::string model_;
};

size_t Logits(OutputKind kind) { return kind == OutputKind::kSoftmax2 ? 2 : 1; }

// The deep MLP's logits [Logits] plus `extra` terms ([1] each) on the click logit (the last).
void AddToClickLogit(SpecBuilder* b, const std::string& deep, std::vector<std::string> extra, OutputKind kind) {
  if (kind == OutputKind::kSigmoid) {
    extra.insert(extra.begin(), deep);
    b->Output(b->Layer("logit", "add", std::move(extra)), kind);
    return;
  }
  Attrs sizes;
  sizes.SetList("sizes", {1, 1});
  b->Layer("deep_split", "split", {deep}, std::move(sizes), {"deep_no_click", "deep_click"});
  extra.insert(extra.begin(), "deep_click");
  const std::string click = b->Layer("click_logit", "add", std::move(extra));
  b->Output(b->Layer("logit", "concat", {"deep_no_click", click}), kind);
}

// The first-order part of wide_deep and deepfm: the slots' pooled embed_w, then w . dense.
std::vector<std::string> FirstOrder(SpecBuilder* b, const ModelOptions& o) {
  std::vector<std::string> terms = {b->Layer("first_order_sparse", "reduce_sum", {"embed_w"})};
  if (o.dense_input_dim > 0) {
    Attrs a;
    a.SetNumber("size", 1);
    a.SetText("bias", "false");
    a.SetText("init", "zeros");
    terms.push_back(b->Layer("first_order_dense", "fc", {"dense"}, std::move(a)));
  }
  return terms;
}

}  // namespace

GraphSpec ModelGraphSpec(const ModelOptions& o) {
  SpecBuilder b;
  b.set_model(ModelTypeName(o.type));
  const size_t logits = Logits(o.output);
  std::vector<uint32_t> deep_widths = o.fc_sizes;
  deep_widths.push_back(static_cast<uint32_t>(logits));
  switch (o.type) {
    case ModelType::kMlp:
      b.Input("dense", InputKind::kDense);
      b.Output(b.Stack("fc_", "dense", deep_widths, "none"), o.output);
      break;
    case ModelType::kCtrDnn:
      b.Input("row", InputKind::kRow);
      b.Output(b.Stack("fc_", "row", deep_widths, "none"), o.output);
      break;
    case ModelType::kWideDeep: {
      b.Input("row", InputKind::kRow);
      b.Input("embed_w", InputKind::kEmbedW);
      if (o.dense_input_dim > 0) b.Input("dense", InputKind::kDense);
      const std::string deep = b.Stack("fc_", "row", deep_widths, "none");
      AddToClickLogit(&b, deep, FirstOrder(&b, o), o.output);
      break;
    }
    case ModelType::kDeepFm: {
      b.Input("row", InputKind::kRow);
      b.Input("embed_w", InputKind::kEmbedW);
      b.Input("embedding", InputKind::kEmbedding);
      if (o.dense_input_dim > 0) b.Input("dense", InputKind::kDense);
      const std::string deep = b.Stack("fc_", "row", deep_widths, "none");
      std::vector<std::string> terms = FirstOrder(&b, o);
      std::vector<std::string> fields = {"embedding"};
      if (o.dense_input_dim > 0) {
        Attrs a;
        a.SetNumber("dim", o.sparse_feature_dim);
        fields.push_back(b.Layer("dense_fields", "dense_embedding", {"dense"}, std::move(a)));
      }
      terms.push_back(b.Layer("fm", "fm", std::move(fields)));
      AddToClickLogit(&b, deep, std::move(terms), o.output);
      break;
    }
    case ModelType::kDcn: {
      b.Input("row", InputKind::kRow);
      std::string x = "row";
      for (uint32_t l = 0; l < o.cross_num; ++l) {
        Attrs a;
        a.SetText("type", o.cross_type == CrossType::kV1 ? "v1" : "v2");
        x = b.Layer("cross_" + std::to_string(l), "cross", {"row", x}, std::move(a));
      }
      std::string joined = x;
      if (!o.fc_sizes.empty()) joined = b.Layer("joined", "concat", {x, b.Stack("fc_", "row", o.fc_sizes, "relu")});
      b.Output(b.Fc("logit", joined, logits, "none"), o.output);
      break;
    }
    case ModelType::kDlrm: {
      b.Input("embedding", InputKind::kEmbedding);
      b.Input("dense", InputKind::kDense);
      const std::string z = b.Stack("bottom_", "dense", o.bot_layer_sizes, "relu");
      Attrs shape;
      shape.SetList("shape", {1, static_cast<double>(o.sparse_feature_dim)});
      const std::string z_field = b.Layer("bottom_field", "reshape", {z}, std::move(shape));
      Attrs axis;
      axis.SetNumber("axis", 0);
      const std::string vectors = b.Layer("vectors", "concat", {z_field, "embedding"}, std::move(axis));
      const std::string dots = b.Layer("dots", "dot_interaction", {vectors});
      const std::string top_in = b.Layer("top_input", "concat", {z, dots});
      b.Output(b.Stack("top_", top_in, o.top_layer_sizes, "none"), o.output);
      break;
    }
    case ModelType::kNetwork:
      FLEETPS_CHECK(o.graph != nullptr) << "model_type network without a graph";
      return o.graph->spec();
  }
  return b.Take();
}

RowShape ModelRowShape(const ModelOptions& o) {
  RowShape row;
  row.labels = o.labels;
  if (o.type == ModelType::kMlp) {
    row.dense_dim = o.input_dim;
    return row;
  }
  for (size_t s = 0; s < o.num_sparse_slots; ++s) {
    row.slot_widths.push_back(o.slot_dims.empty() ? o.sparse_feature_dim : o.slot_dims[s]);
  }
  row.dense_dim = o.dense_input_dim;
  row.labels = o.labels;
  return row;
}

std::shared_ptr<const Graph> ModelGraph(const ModelOptions& o) {
  if (o.graph != nullptr) return o.graph;
  StatusOr<std::shared_ptr<const Graph>> graph = BuildGraph(ModelGraphSpec(o), ModelRowShape(o));
  FLEETPS_CHECK(graph.ok()) << "model_type " << ModelTypeName(o.type) << ": " << graph.status().message();
  return *graph;
}

}  // namespace fleetps::graph
