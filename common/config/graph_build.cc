// BuildGraph: names to tensors, an execution order, shapes and the parameter layout, with
// an error naming file:line and the layer for every way a graph can be wrong.

#include <algorithm>
#include <map>
#include <utility>

#include "common/config/graph_ops.h"
#include "common/config/graph_spec.h"

namespace fleetps::graph {
namespace {

Status LayerError(const GraphLayer& layer, const std::string& what) {
  return Status::InvalidArgument(layer.where + ": layer '" + layer.name + "' (" + layer.op + "): " + what);
}

// Every name the graph defines: the inputs, then each layer's outputs.
class Names {
 public:
  // `who` says what defines it: "input 'emb'", "layer 'h'", "output 'a' of layer 's'".
  Status Define(const std::string& name, size_t tensor, const std::string& where, const std::string& who) {
    const auto [it, inserted] = ids_.emplace(name, Definition{tensor, where, who});
    if (!inserted) {
      return Status::InvalidArgument(where + ": " + who + ": the name is taken by " + it->second.who + " at " +
                                     it->second.where + "; give each input and layer output its own name");
    }
    all_.push_back(name);
    return Status::OK();
  }
  StatusOr<size_t> Find(const std::string& name, const std::string& where, const std::string& who) const {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second.tensor;
    const std::string close = config::ClosestMatch(name, all_);
    return Status::InvalidArgument(where + ": " + who + " reads '" + name +
                                   "', which is neither an input nor a layer's output" +
                                   (close.empty() ? "" : " (did you mean '" + close + "'?)"));
  }

 private:
  struct Definition {
    size_t tensor;
    std::string where;
    std::string who;
  };
  std::map<std::string, Definition> ids_;
  std::vector<std::string> all_;
};

// The layers left once no layer is ready all wait on one another: walking from one of them
// to the producer of an input still pending must come back to a layer already seen. The
// error names that cycle, "a reads b, b reads a".
Status CycleError(const std::vector<ResolvedLayer>& layers, const std::vector<int>& producer,
                  const std::vector<bool>& done) {
  std::vector<size_t> path = {static_cast<size_t>(std::find(done.begin(), done.end(), false) - done.begin())};
  std::vector<std::string> via;  // via[i]: the tensor path[i] reads from path[i + 1]
  while (true) {
    const ResolvedLayer& layer = layers[path.back()];
    for (size_t i = 0; i < layer.inputs.size(); ++i) {
      const int p = producer[layer.inputs[i]];
      if (p >= 0 && !done[static_cast<size_t>(p)]) {
        path.push_back(static_cast<size_t>(p));
        via.push_back(layer.spec.inputs[i]);
        break;
      }
    }
    const auto seen = std::find(path.begin(), path.end() - 1, path.back());
    if (seen == path.end() - 1) continue;
    const size_t start = static_cast<size_t>(seen - path.begin());
    std::string cycle;
    for (size_t i = start; i + 1 < path.size(); ++i) {
      cycle += (i == start ? "" : ", ") + layers[path[i]].spec.name + " reads " + via[i];
    }
    return LayerError(layers[path[start]].spec, "its inputs form a cycle (" + cycle +
                                                    "); a layer cannot depend on its own result: make one of "
                                                    "them read a graph input or another layer");
  }
}

// Kahn's algorithm, stable in declaration order; a cycle is an error naming its layers.
StatusOr<std::vector<size_t>> ExecutionOrder(const std::vector<ResolvedLayer>& layers,
                                             const std::vector<int>& producer) {
  const size_t n = layers.size();
  std::vector<size_t> pending(n, 0);
  std::vector<std::vector<size_t>> consumers(n);
  for (size_t l = 0; l < n; ++l) {
    for (size_t t : layers[l].inputs) {
      if (producer[t] < 0) continue;
      ++pending[l];
      consumers[static_cast<size_t>(producer[t])].push_back(l);
    }
  }
  std::vector<size_t> order;
  std::vector<bool> done(n, false);
  while (order.size() < n) {
    size_t next = n;
    for (size_t l = 0; l < n && next == n; ++l) {
      if (!done[l] && pending[l] == 0) next = l;
    }
    if (next == n) return CycleError(layers, producer, done);
    done[next] = true;
    order.push_back(next);
    for (size_t c : consumers[next]) --pending[c];
  }
  return order;
}

Status InferShapes(const std::vector<size_t>& order, std::vector<ResolvedLayer>* layers, std::vector<Tensor>* tensors) {
  for (size_t l : order) {
    ResolvedLayer& layer = (*layers)[l];
    const OpSchema& schema = *FindOpSchema(layer.spec.op);
    const size_t arity = layer.inputs.size();
    if (arity < schema.min_inputs || arity > schema.max_inputs) {
      const std::string want = schema.min_inputs == schema.max_inputs ? std::to_string(schema.min_inputs)
                               : schema.max_inputs == SIZE_MAX
                                   ? "at least " + std::to_string(schema.min_inputs)
                                   : std::to_string(schema.min_inputs) + " to " + std::to_string(schema.max_inputs);
      return LayerError(layer.spec, "takes " + want + (schema.max_inputs == 1 ? " input" : " inputs") + ", got " +
                                        std::to_string(arity) + " (its 'inputs' list)");
    }
    std::vector<Shape> in;
    for (size_t t : layer.inputs) in.push_back((*tensors)[t].shape);
    StatusOr<OpSignature> sig = schema.infer(layer.spec.attrs, in);
    if (!sig.ok()) {
      std::string shapes;
      for (size_t i = 0; i < in.size(); ++i) {
        shapes += (i ? ", " : "") + layer.spec.inputs[i] + " " + ShapeString(in[i]);
      }
      return LayerError(layer.spec, sig.status().message() + " (inputs: " + shapes + ")");
    }
    if (sig->outputs.size() != layer.outputs.size()) {
      return LayerError(layer.spec, "makes " + std::to_string(sig->outputs.size()) + " tensors; list " +
                                        std::to_string(sig->outputs.size()) + " names under 'outputs'");
    }
    for (size_t o = 0; o < sig->outputs.size(); ++o) {
      Tensor& t = (*tensors)[layer.outputs[o]];
      t.shape = sig->outputs[o];
      t.size = NumElements(t.shape);
      if (t.size == 0) return LayerError(layer.spec, "output '" + t.name + "' would be empty");
    }
    layer.params = std::move(sig->params);
    layer.num_params = 0;
    for (const Shape& p : layer.params) layer.num_params += NumElements(p);
  }
  return Status::OK();
}

// Layers whose results reach no output would train nothing and are a mistake.
Status CheckAllUsed(const std::vector<ResolvedLayer>& layers, const std::vector<int>& producer,
                    const std::vector<size_t>& output_tensors) {
  std::vector<bool> used(producer.size(), false);
  std::vector<size_t> stack = output_tensors;
  while (!stack.empty()) {
    const size_t t = stack.back();
    stack.pop_back();
    if (used[t]) continue;
    used[t] = true;
    if (producer[t] >= 0) {
      for (size_t in : layers[static_cast<size_t>(producer[t])].inputs) stack.push_back(in);
    }
  }
  for (const ResolvedLayer& layer : layers) {
    const bool any = std::any_of(layer.outputs.begin(), layer.outputs.end(), [&](size_t t) { return used[t]; });
    if (!any) return LayerError(layer.spec, "feeds no output; remove it or use its result");
  }
  return Status::OK();
}

// True when tensor t holds a probability: a sigmoid's, an fc's with activation sigmoid, or
// a multiply's of probabilities.
bool IsProbability(std::span<const ResolvedLayer> layers, const std::vector<int>& producer, size_t t) {
  if (producer[t] < 0) return false;
  const ResolvedLayer& layer = layers[static_cast<size_t>(producer[t])];
  if (layer.spec.op == "sigmoid") return true;
  if (layer.spec.op == "fc") {
    const StatusOr<std::string> activation = layer.spec.attrs.Text("activation", "none");
    return activation.ok() && *activation == "sigmoid";
  }
  if (layer.spec.op != "multiply") return false;
  return std::all_of(layer.inputs.begin(), layer.inputs.end(),
                     [&](size_t in) { return IsProbability(layers, producer, in); });
}

std::string OutputError(const GraphOutput& out, const std::string& what) {
  return out.where + ": output '" + out.name + "': " + what;
}

// The column of out's label among the data's labels.
StatusOr<size_t> OutputLabel(const GraphOutput& out, const std::vector<std::string>& labels) {
  std::string names;
  for (const std::string& l : labels) names += (names.empty() ? "" : ", ") + l;
  if (out.label.empty()) {
    if (labels.size() == 1) return size_t{0};
    return Status::InvalidArgument(OutputError(out, "the data has " + std::to_string(labels.size()) + " labels (" +
                                                        names +
                                                        "); name the one this output learns with label: <name>"));
  }
  const auto it = std::find(labels.begin(), labels.end(), out.label);
  if (it == labels.end()) {
    return Status::InvalidArgument(
        OutputError(out, "unknown label '" + out.label + "'; the data's labels are " + names +
                             " (the data section's label_slot / label_slots: add it there or pick one of those)"));
  }
  return static_cast<size_t>(it - labels.begin());
}

Status InputError(const GraphInput& in, const std::string& what) {
  return Status::InvalidArgument(in.where + ": input '" + in.name + "': " + what);
}

struct ResolvedOutput {
  size_t tensor = 0;
  size_t label = 0;
};

// Each output's tensor (of the shape its loss reads) and label column.
StatusOr<std::vector<ResolvedOutput>> ResolveOutputs(const GraphSpec& spec, const Graph& graph, const Names& names,
                                                     const std::vector<int>& producer) {
  std::map<std::string, std::string> output_names;
  std::vector<ResolvedOutput> outputs;
  for (const GraphOutput& out : spec.outputs) {
    if (!output_names.emplace(out.name, out.where).second) {
      return Status::InvalidArgument(OutputError(out, "is defined twice (first at " + output_names[out.name] + ")"));
    }
    ResolvedOutput r;
    ASSIGN_OR_RETURN(r.tensor, names.Find(out.input, out.where, "output '" + out.name + "'"));
    if (producer[r.tensor] < 0) {
      return Status::InvalidArgument(
          OutputError(out, "reads the graph input '" + out.input + "'; an output reads a layer's result"));
    }
    const Shape& shape = graph.tensors()[r.tensor].shape;
    const Shape want{LossWidth(out.loss)};
    if (shape != want) {
      const std::string fix = out.loss == LossKind::kLogLoss
                                  ? "(log_loss reads one probability per example)"
                                  : "(end the graph with an fc of size " + std::to_string(want[0]) + ")";
      return Status::InvalidArgument(
          OutputError(out, std::string(LossName(out.loss)) + " needs " +
                               (out.loss == LossKind::kLogLoss ? "a probability" : "logits") + " of shape " +
                               ShapeString(want) + ", '" + out.input + "' is " + ShapeString(shape) + " " + fix));
    }
    if (out.loss == LossKind::kLogLoss && !IsProbability(graph.layers(), producer, r.tensor)) {
      return Status::InvalidArgument(OutputError(
          out, "log_loss needs a probability, and '" + out.input +
                   "' is not one; feed it a sigmoid (op sigmoid, or fc with activation: sigmoid) or a multiply of "
                   "sigmoids, or use sigmoid_cross_entropy on the logit"));
    }
    ASSIGN_OR_RETURN(r.label, OutputLabel(out, graph.row().labels));
    outputs.push_back(r);
  }
  return outputs;
}

// How the row holds each slot: a sequence for a `sequence` input's slot, else pooled with the
// pooling of the embedding / embed_w inputs that read it (which must agree: the row holds
// one block per slot).
Status ResolveSlotReads(const GraphSpec& spec, const RowShape& row, std::vector<SlotRead>* reads) {
  const size_t n = row.slot_widths.size();
  reads->assign(n, SlotRead{});
  std::vector<std::string> owner(n);  // the input that set the slot's read
  const auto check_slot = [&](const GraphInput& in, size_t s) {
    return s < n ? Status::OK()
                 : InputError(in, "slot " + std::to_string(s) + " does not exist (the job has " + std::to_string(n) +
                                      " sparse slots, 0 to " + std::to_string(n == 0 ? 0 : n - 1) + ")");
  };
  for (const GraphInput& in : spec.inputs) {
    if (in.kind != InputKind::kSequence) continue;
    RETURN_IF_ERROR(check_slot(in, in.slot));
    if ((*reads)[in.slot].sequence()) {
      return InputError(in, "slot " + std::to_string(in.slot) + " is already a sequence of input '" + owner[in.slot] +
                                "'; read one slot as one sequence");
    }
    (*reads)[in.slot].max_len = in.max_len;
    owner[in.slot] = in.name;
  }
  for (const GraphInput& in : spec.inputs) {
    if (in.kind == InputKind::kSequenceMask) {
      RETURN_IF_ERROR(check_slot(in, in.slot));
      if (!(*reads)[in.slot].sequence()) {
        return InputError(
            in, "slot " + std::to_string(in.slot) + " is not a sequence slot (add an input of kind sequence for it)");
      }
    }
    if (in.kind != InputKind::kEmbedding && in.kind != InputKind::kEmbedW) continue;
    std::vector<bool> listed(n, false);
    for (size_t s : in.slots) {
      RETURN_IF_ERROR(check_slot(in, s));
      if (listed[s]) return InputError(in, "slot " + std::to_string(s) + " is listed twice");
      listed[s] = true;
      if ((*reads)[s].sequence()) {
        return InputError(in, "slot " + std::to_string(s) + " is a sequence of input '" + owner[s] +
                                  "'; a pooled input cannot read it too");
      }
    }
    for (size_t s : InputSlots(in, *reads)) {
      if (!owner[s].empty() && (*reads)[s].pooling != in.pooling) {
        return InputError(in, "slot " + std::to_string(s) + " is pooled another way by input '" + owner[s] +
                                  "'; the inputs reading one slot must agree on `pooling`");
      }
      (*reads)[s].pooling = in.pooling;
      owner[s] = in.name;
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::shared_ptr<const Graph>> BuildGraph(GraphSpec spec, const RowShape& row) {
  auto graph = std::make_shared<Graph>();
  graph->row_ = row;
  graph->reads_embed_w_ = std::any_of(spec.inputs.begin(), spec.inputs.end(),
                                      [](const GraphInput& in) { return in.kind == InputKind::kEmbedW; });
  RETURN_IF_ERROR(ResolveSlotReads(spec, row, &graph->slot_reads_));
  graph->slot_offsets_ = {0};
  for (size_t s = 0; s < row.slot_widths.size(); ++s) {
    graph->slot_offsets_.push_back(graph->slot_offsets_.back() + graph->slot_block(s));
  }
  Names names;
  std::vector<int> producer;  // per tensor: its layer, -1 for an input
  for (const GraphInput& in : spec.inputs) {
    StatusOr<Shape> shape = InputShape(in, row, graph->slot_reads_);
    if (!shape.ok()) return InputError(in, shape.status().message());
    if (in.kind == InputKind::kRow) *shape = Shape{graph->row_width()};
    RETURN_IF_ERROR(names.Define(in.name, graph->tensors_.size(), in.where, "input '" + in.name + "'"));
    graph->tensors_.push_back(Tensor{in.name, *shape, NumElements(*shape)});
    producer.push_back(-1);
  }
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    ResolvedLayer layer;
    layer.spec = spec.layers[l];
    for (const std::string& out : layer.spec.outputs) {
      const std::string who =
          out == layer.spec.name ? "layer '" + out + "'" : "output '" + out + "' of layer '" + layer.spec.name + "'";
      RETURN_IF_ERROR(names.Define(out, graph->tensors_.size(), layer.spec.where, who));
      layer.outputs.push_back(graph->tensors_.size());
      graph->tensors_.push_back(Tensor{out, {}, 0});
      producer.push_back(static_cast<int>(l));
    }
    graph->layers_.push_back(std::move(layer));
  }
  for (ResolvedLayer& layer : graph->layers_) {
    for (const std::string& in : layer.spec.inputs) {
      ASSIGN_OR_RETURN(size_t t, names.Find(in, layer.spec.where, "layer '" + layer.spec.name + "'"));
      if (producer[t] >= 0 && &graph->layers_[static_cast<size_t>(producer[t])] == &layer) {
        return LayerError(layer.spec,
                          "reads its own output '" + in + "'; read a graph input or another layer's output instead");
      }
      layer.inputs.push_back(t);
    }
  }
  ASSIGN_OR_RETURN(graph->order_, ExecutionOrder(graph->layers_, producer));
  RETURN_IF_ERROR(InferShapes(graph->order_, &graph->layers_, &graph->tensors_));
  for (ResolvedLayer& layer : graph->layers_) {
    layer.param_offset = graph->num_params_;
    graph->num_params_ += layer.num_params;
  }

  ASSIGN_OR_RETURN(std::vector<ResolvedOutput> outputs, ResolveOutputs(spec, *graph, names, producer));
  for (const ResolvedOutput& out : outputs) {
    graph->output_tensors_.push_back(out.tensor);
    graph->output_labels_.push_back(out.label);
  }
  RETURN_IF_ERROR(CheckAllUsed(graph->layers_, producer, graph->output_tensors_));
  graph->spec_ = std::move(spec);
  return std::shared_ptr<const Graph>(std::move(graph));
}

}  // namespace fleetps::graph
