#include "common/config/graph_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <utility>

#include "common/config/graph_ops.h"

namespace fleetps::graph {

using config::YamlContext;

size_t NumElements(const Shape& shape) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

StatusOr<int64_t> Attrs::Int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const AttrValue& v = it->second;
  if (v.is_text || v.is_list || v.numbers.size() != 1 || v.numbers[0] != std::floor(v.numbers[0])) {
    return Status::InvalidArgument("'" + key + "' must be an integer");
  }
  const double x = v.numbers[0];
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
    return Status::InvalidArgument("'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                   "], got " + std::to_string(static_cast<int64_t>(x)));
  }
  return static_cast<int64_t>(x);
}

StatusOr<double> Attrs::Float(const std::string& key, double fallback) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second.is_text || it->second.is_list || it->second.numbers.size() != 1) {
    return Status::InvalidArgument("'" + key + "' must be a number");
  }
  return it->second.numbers[0];
}

StatusOr<std::string> Attrs::Text(const std::string& key, const std::string& fallback) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (!it->second.is_text) return Status::InvalidArgument("'" + key + "' must be a word");
  return it->second.text;
}

StatusOr<std::vector<int64_t>> Attrs::Ints(const std::string& key) const {
  std::vector<int64_t> out;
  const auto it = values_.find(key);
  if (it == values_.end()) return out;
  if (it->second.is_text) return Status::InvalidArgument("'" + key + "' must be a list of integers");
  for (double x : it->second.numbers) {
    if (x != std::floor(x) || x < 0) {
      return Status::InvalidArgument("'" + key + "' must be a list of integers >= 0");
    }
    out.push_back(static_cast<int64_t>(x));
  }
  return out;
}

StatusOr<std::string> Attrs::Choice(const std::string& key, const std::vector<std::string>& choices) const {
  ASSIGN_OR_RETURN(std::string word, Text(key, choices.front()));
  if (std::find(choices.begin(), choices.end(), word) != choices.end()) return word;
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return Status::InvalidArgument("unknown " + key + " '" + word + "' (use " + names + ")");
}

std::string_view LossName(LossKind kind) {
  switch (kind) {
    case LossKind::kSigmoidCrossEntropy: return "sigmoid_cross_entropy";
    case LossKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case LossKind::kLogLoss: return "log_loss";
  }
  return "?";
}

size_t LossWidth(LossKind kind) { return kind == LossKind::kSoftmaxCrossEntropy ? 2 : 1; }

size_t Graph::slot_block(size_t s) const {
  const SlotRead& read = slot_reads_[s];
  const size_t width = row_.slot_widths[s];
  if (read.sequence()) return read.max_len * (width + 1);
  return width + (reads_embed_w_ ? 1 : 0);
}

std::vector<size_t> InputSlots(const GraphInput& input, std::span<const SlotRead> reads) {
  if (!input.slots.empty()) return input.slots;
  std::vector<size_t> slots;
  for (size_t s = 0; s < reads.size(); ++s) {
    if (!reads[s].sequence()) slots.push_back(s);
  }
  return slots;
}

StatusOr<Shape> InputShape(const GraphInput& input, const RowShape& row, std::span<const SlotRead> reads) {
  const size_t slots = row.slot_widths.size();
  switch (input.kind) {
    case InputKind::kRow: {
      if (slots == 0 && row.dense_dim == 0) {
        return Status::InvalidArgument("the row is empty: the job has no slots and no dense features");
      }
      return Shape{0};  // BuildGraph sets the width once every slot's read is known
    }
    case InputKind::kEmbedding:
    case InputKind::kEmbedW: {
      const char* kind = input.kind == InputKind::kEmbedding ? "embedding" : "embed_w";
      if (slots == 0)
        return Status::InvalidArgument(std::string("kind ") + kind + " needs sparse slots and the job has none");
      const std::vector<size_t> read = InputSlots(input, reads);
      if (read.empty()) return Status::InvalidArgument("every slot is read as a sequence; list `slots` to pool");
      if (input.kind == InputKind::kEmbedW) return Shape{read.size()};
      const size_t first = row.slot_widths[read[0]];
      const bool one_width =
          std::all_of(read.begin(), read.end(), [&](size_t s) { return row.slot_widths[s] == first; });
      if (one_width) return Shape{read.size(), first};
      size_t sum = 0;
      for (size_t s : read) sum += row.slot_widths[s];
      return Shape{sum};
    }
    case InputKind::kDense:
      if (row.dense_dim == 0) {
        return Status::InvalidArgument("kind dense needs dense features and the job has none (dense_input_dim: 0)");
      }
      return Shape{row.dense_dim};
    case InputKind::kSequence: return Shape{input.max_len, row.slot_widths[input.slot]};
    case InputKind::kSequenceMask: return Shape{reads[input.slot].max_len};
  }
  return Status::InvalidArgument("unknown input kind");
}

namespace {

std::string Where(const YamlContext& ctx, const YAML::Node& node) { return ctx.Location(node); }

// A tensor or layer name: letters, digits, '_', '.', '-'; not starting with a digit.
Status ReadName(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::string* out) {
  RETURN_IF_ERROR(config::Require(map, key, ctx));
  RETURN_IF_ERROR(config::ReadString(map, key, ctx, out));
  const bool ok = !out->empty() && !std::isdigit(static_cast<unsigned char>((*out)[0])) &&
                  std::all_of(out->begin(), out->end(),
                              [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '.' || c == '-'; });
  if (!ok) {
    return ctx.Child(key).Error(map[key], "'" + *out + "' is not a name (letters, digits, _ . -; not a digit first)");
  }
  return Status::OK();
}

Status ReadNameList(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                    std::vector<std::string>* out) {
  const YAML::Node node = map[key];
  if (!node) return Status::OK();
  if (node.IsScalar()) {
    out->push_back(node.Scalar());
    return Status::OK();
  }
  return config::ReadStringList(map, key, ctx, out);
}

StatusOr<AttrValue> ReadAttr(const YAML::Node& node, const YamlContext& ctx) {
  const auto number = [](const std::string& s, double* x) {
    try {
      size_t used = 0;
      *x = std::stod(s, &used);
      return used == s.size();
    } catch (const std::exception&) {
      return false;
    }
  };
  AttrValue v;
  if (node.IsScalar()) {
    double x = 0;
    if (number(node.Scalar(), &x)) {
      v.numbers = {x};
    } else {
      v.text = node.Scalar();
      v.is_text = true;
    }
    return v;
  }
  if (node.IsSequence()) {
    v.is_list = true;
    for (size_t i = 0; i < node.size(); ++i) {
      double x = 0;
      if (!node[i].IsScalar() || !number(node[i].Scalar(), &x)) {
        return ctx.Index(i).Error(node[i], "expected a number");
      }
      v.numbers.push_back(x);
    }
    return v;
  }
  return ctx.Error(node, "expected a number, a word or a list of numbers");
}

// `status` (an error of the entry of `who`, e.g. "layer 'h'") with `who` named right after
// its "file:line[:column]: " prefix, so that every error of an entry says which one it is.
Status Naming(Status status, const YamlContext& ctx, const std::string& who) {
  if (status.ok()) return status;
  std::string message = status.message();
  if (message.rfind(ctx.file, 0) != 0) return Status::InvalidArgument(who + ": " + message);
  size_t at = ctx.file.size();
  while (at + 1 < message.size() && message[at] == ':' && std::isdigit(static_cast<unsigned char>(message[at + 1]))) {
    ++at;
    while (at < message.size() && std::isdigit(static_cast<unsigned char>(message[at]))) ++at;
  }
  if (message.compare(at, 2, ": ") != 0) return status;
  message.insert(at + 2, who + ": ");
  return Status::InvalidArgument(std::move(message));
}

// The keys of an input, per kind.
std::vector<std::string> InputKeys(InputKind kind) {
  switch (kind) {
    case InputKind::kEmbedding:
    case InputKind::kEmbedW: return {"name", "kind", "slots", "pooling"};
    case InputKind::kSequence: return {"name", "kind", "slot", "max_len"};
    case InputKind::kSequenceMask: return {"name", "kind", "slot"};
    case InputKind::kRow:
    case InputKind::kDense: break;
  }
  return {"name", "kind"};
}

// An input's keys beside name and kind: embedding/embed_w `slots` and `pooling`, sequence
// and sequence_mask `slot`, sequence `max_len`.
Status ParseInputKeys(const YAML::Node& node, const YamlContext& ctx, GraphInput* in) {
  std::vector<int64_t> slots;
  RETURN_IF_ERROR(config::ReadIntList(node, "slots", ctx, &slots));
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0) return ctx.Child("slots").Index(i).Error(node["slots"][i], "expected a slot index >= 0");
    in->slots.push_back(static_cast<size_t>(slots[i]));
  }
  RETURN_IF_ERROR(config::ReadChoice(node, "pooling", ctx,
                                     {std::pair<std::string_view, Pooling>{"sum", Pooling::kSum},
                                      {"mean", Pooling::kMean},
                                      {"sqrt", Pooling::kSqrt},
                                      {"max", Pooling::kMax}},
                                     &in->pooling));
  if (in->kind == InputKind::kSequence || in->kind == InputKind::kSequenceMask) {
    uint32_t slot = 0;
    if (!node["slot"]) return ctx.Error(node, "missing required key 'slot' (the sequence's slot, 0-based)");
    RETURN_IF_ERROR(config::ReadUint32(node, "slot", ctx, &slot));
    in->slot = slot;
  }
  if (in->kind == InputKind::kSequence) {
    uint32_t max_len = 0;
    if (!node["max_len"]) return ctx.Error(node, "missing required key 'max_len' (the positions kept, e.g. 50)");
    RETURN_IF_ERROR(config::ReadUint32(node, "max_len", ctx, &max_len));
    if (max_len < 1 || max_len > 4096) {
      return ctx.Child("max_len").Error(node["max_len"], "expected a length in [1, 4096]");
    }
    in->max_len = max_len;
  }
  return Status::OK();
}

Status ParseInput(const YAML::Node& node, const YamlContext& ctx, GraphInput* in) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map {name, kind}");
  RETURN_IF_ERROR(ReadName(node, "name", ctx, &in->name));
  const auto rest = [&]() -> Status {
    if (!node["kind"]) {
      return ctx.Error(node, "missing required key 'kind' (row, embedding, embed_w, dense, sequence or sequence_mask)");
    }
    RETURN_IF_ERROR(config::ReadChoice(node, "kind", ctx,
                                       {std::pair<std::string_view, InputKind>{"row", InputKind::kRow},
                                        {"embedding", InputKind::kEmbedding},
                                        {"embed_w", InputKind::kEmbedW},
                                        {"dense", InputKind::kDense},
                                        {"sequence", InputKind::kSequence},
                                        {"sequence_mask", InputKind::kSequenceMask}},
                                       &in->kind));
    RETURN_IF_ERROR(config::RejectUnknownKeys(node, InputKeys(in->kind), ctx));
    return ParseInputKeys(node, ctx, in);
  };
  RETURN_IF_ERROR(Naming(rest(), ctx, "input '" + in->name + "'"));
  in->where = Where(ctx, node);
  return Status::OK();
}

std::string OpList() {
  std::string known;
  for (const std::string& name : OpNames()) known += (known.empty() ? "" : ", ") + name;
  return known;
}

// A layer's entry once its name is read (ParseLayer names the layer in every error).
Status ParseLayerBody(const YAML::Node& node, const YamlContext& ctx, GraphLayer* layer) {
  if (!node["op"]) return ctx.Error(node, "missing required key 'op' (one of " + OpList() + ")");
  RETURN_IF_ERROR(config::ReadString(node, "op", ctx, &layer->op));
  const OpSchema* schema = FindOpSchema(layer->op);
  if (schema == nullptr) {
    const std::string close = config::ClosestMatch(layer->op, OpNames());
    return ctx.Child("op").Error(node["op"],
                                 "unknown op '" + layer->op + "' " +
                                     (close.empty() ? "(ops: " + OpList() + ")" : "(did you mean '" + close + "'?)"));
  }
  std::vector<std::string> keys = {"name", "op", "inputs", "outputs"};
  keys.insert(keys.end(), schema->keys.begin(), schema->keys.end());
  RETURN_IF_ERROR(config::RejectUnknownKeys(node, keys, ctx));
  if (!node["inputs"]) {
    return ctx.Error(node, "missing required key 'inputs' (the tensors op " + layer->op +
                               " reads: graph inputs or other layers' names)");
  }
  RETURN_IF_ERROR(ReadNameList(node, "inputs", ctx, &layer->inputs));
  RETURN_IF_ERROR(ReadNameList(node, "outputs", ctx, &layer->outputs));
  if (layer->outputs.empty()) {
    layer->outputs = {layer->name};
  } else if (schema->outputs != 0) {
    return ctx.Child("outputs").Error(node["outputs"], "op " + layer->op +
                                                           " makes one tensor, named by the layer's name; "
                                                           "remove 'outputs'");
  }
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    if (std::find(schema->keys.begin(), schema->keys.end(), key) == schema->keys.end()) continue;
    ASSIGN_OR_RETURN(AttrValue value, ReadAttr(entry.second, ctx.Child(key)));
    layer->attrs.Set(key, std::move(value));
  }
  return Status::OK();
}

Status ParseLayer(const YAML::Node& node, const YamlContext& ctx, GraphLayer* layer) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map {name, op, inputs, ...}");
  RETURN_IF_ERROR(ReadName(node, "name", ctx, &layer->name));
  layer->where = Where(ctx, node);
  return Naming(ParseLayerBody(node, ctx, layer), ctx, "layer '" + layer->name + "'");
}

Status ParseOutput(const YAML::Node& node, const YamlContext& ctx, GraphOutput* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map {name, input, loss, label}");
  RETURN_IF_ERROR(ReadName(node, "name", ctx, &out->name));
  const auto rest = [&]() -> Status {
    RETURN_IF_ERROR(config::RejectUnknownKeys(node, {"name", "input", "loss", "label", "weight"}, ctx));
    RETURN_IF_ERROR(ReadName(node, "input", ctx, &out->input));
    if (!node["loss"]) {
      return ctx.Error(node, "missing required key 'loss' (sigmoid_cross_entropy, softmax_cross_entropy or log_loss)");
    }
    RETURN_IF_ERROR(config::ReadChoice(
        node, "loss", ctx,
        {std::pair<std::string_view, LossKind>{"sigmoid_cross_entropy", LossKind::kSigmoidCrossEntropy},
         {"softmax_cross_entropy", LossKind::kSoftmaxCrossEntropy},
         {"log_loss", LossKind::kLogLoss}},
        &out->loss));
    RETURN_IF_ERROR(config::ReadString(node, "label", ctx, &out->label));
    RETURN_IF_ERROR(config::ReadDouble(node, "weight", ctx, &out->weight));
    if (!(out->weight > 0)) {
      return ctx.Child("weight").Error(node["weight"], "expected a weight > 0, got " + node["weight"].Scalar());
    }
    return Status::OK();
  };
  RETURN_IF_ERROR(Naming(rest(), ctx, "output '" + out->name + "'"));
  out->where = Where(ctx, node);
  return Status::OK();
}

template <typename T, typename Parse>
Status ParseList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, Parse parse,
                 std::vector<T>* out) {
  RETURN_IF_ERROR(config::Require(map, key, ctx));
  const YAML::Node node = map[key];
  const YamlContext child = ctx.Child(key);
  if (!node.IsSequence() || node.size() == 0) {
    return child.Error(node, "expected a non-empty list (a graph has at least one input, one layer and one output)");
  }
  for (size_t i = 0; i < node.size(); ++i) {
    T item;
    RETURN_IF_ERROR(parse(node[i], child.Index(i), &item));
    out->push_back(std::move(item));
  }
  return Status::OK();
}

}  // namespace

StatusOr<GraphSpec> ParseGraphSpec(const YAML::Node& node, const YamlContext& ctx) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map with inputs, layers and outputs");
  RETURN_IF_ERROR(config::RejectUnknownKeys(node, {"inputs", "layers", "outputs"}, ctx));
  GraphSpec spec;
  spec.where = Where(ctx, node);
  RETURN_IF_ERROR(ParseList(node, "inputs", ctx, ParseInput, &spec.inputs));
  RETURN_IF_ERROR(ParseList(node, "layers", ctx, ParseLayer, &spec.layers));
  RETURN_IF_ERROR(ParseList(node, "outputs", ctx, ParseOutput, &spec.outputs));
  return spec;
}

}  // namespace fleetps::graph
