#pragma once
// The model as a layer graph: the `network:` section of a trainer YAML, or the graph a
// built-in `model_type` expands to (graph_models.cc). This file is the description only —
// names, shapes, parameter layout; trainer/graph runs it.
//
//   network:
//     inputs:                                  # views of the activation row (below)
//       - {name: emb, kind: embedding}         # [slots, k]: each slot's pooled embedding
//       - {name: dense, kind: dense}           # [dense_input_dim]
//     layers:                                  # any order; each names its inputs
//       - {name: flat, op: flatten, inputs: [emb]}
//       - {name: x, op: concat, inputs: [flat, dense]}
//       - {name: h, op: fc, inputs: [x], size: 64, activation: relu}
//       - {name: logit, op: fc, inputs: [h], size: 1}
//     outputs:
//       - {name: ctr, input: logit, loss: sigmoid_cross_entropy, label: click}
//
// Several outputs (multi-task models: MMoE, ESMM) each name the data label they learn
// (`label_slots` of the data section); the job's loss is the weighted sum of their mean
// losses, and each output's AUC is reported against its label.
//
// Shapes are per example (the batch is implicit): [d] or [n, k]. Every layer's parameters
// sit in ONE flat float vector (the job's dense table), layers in declaration order, each
// op's own parameters in the order its schema lists them (graph_ops.cc); the gradient
// vector has the same layout. BuildGraph checks everything — unknown op or key, arity,
// shapes, dangling or cyclic inputs, duplicate names, layers that feed no output — and
// every error names file:line, the layer and what was expected.
//
// The activation row the inputs read (what the trainer's embedding pooling builds):
//   [slot 0 block | ... | slot S-1 block | dense features]
// a slot block being [embed_w | embedding] when the graph reads `embed_w`, else the
// embedding (slot_dims[s] or sparse_feature_dim floats).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps::graph {

// Per-example dims, outermost first: [d] or [n, k].
using Shape = std::vector<size_t>;
size_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[26, 9]"

// A layer's parameters besides name/op/inputs/outputs: numbers, lists of numbers or words.
struct AttrValue {
  std::vector<double> numbers = {};  // a number is a list of one
  std::string text = {};             // a word (is_text)
  bool is_text = false;
  bool is_list = false;
};

class Attrs {
 public:
  void Set(const std::string& key, AttrValue value) { values_[key] = std::move(value); }
  void SetNumber(const std::string& key, double v) { values_[key] = AttrValue{.numbers = {v}}; }
  void SetText(const std::string& key, std::string v) {
    values_[key] = AttrValue{.text = std::move(v), .is_text = true};
  }
  void SetList(const std::string& key, std::vector<double> v) {
    values_[key] = AttrValue{.numbers = std::move(v), .is_list = true};
  }
  bool Has(const std::string& key) const { return values_.count(key) > 0; }
  const std::map<std::string, AttrValue>& values() const { return values_; }

  // Typed reads: `fallback` when absent; InvalidArgument naming the key when present with
  // the wrong type or out of [lo, hi].
  StatusOr<int64_t> Int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const;
  StatusOr<double> Float(const std::string& key, double fallback) const;
  StatusOr<std::string> Text(const std::string& key, const std::string& fallback) const;
  StatusOr<std::vector<int64_t>> Ints(const std::string& key) const;  // empty when absent
  // A word that must be one of `choices`.
  StatusOr<std::string> Choice(const std::string& key, const std::vector<std::string>& choices) const;

 private:
  std::map<std::string, AttrValue> values_;
};

// What an input reads from the activation row.
enum class InputKind : uint8_t {
  kRow = 0,           // the whole row [width]: PaddleRec rank/dnn's concat of every slot and the dense features
  kEmbedding = 1,     // [slots, k]: each pooled slot's embedding ([sum of widths] when slot_dims differ)
  kEmbedW = 2,        // [slots]: each pooled slot's first-order weight (the rows gain an embed_w column)
  kDense = 3,         // [dense_input_dim]: the dense features
  kSequence = 4,      // [max_len, k]: one slot's first max_len ids' embeddings, zero rows after its length
  kSequenceMask = 5,  // [max_len]: 1 for the sequence slot's real positions, 0 after them
};

// How a pooled slot's ids become one vector (Paddle's sequence_pool types).
enum class Pooling : uint8_t {
  kSum = 0,   // the sum of the rows
  kMean = 1,  // the sum / n
  kSqrt = 2,  // the sum / sqrt(n)
  kMax = 3,   // the element-wise max (the gradient goes to the row that gave each max)
};

// How the activation row holds one slot: pooled ([embed_w |] embedding, pooled), or as a
// sequence ([max_len x width] embeddings, then [max_len] mask).
struct SlotRead {
  Pooling pooling = Pooling::kSum;
  size_t max_len = 0;  // > 0: a sequence slot
  bool sequence() const { return max_len > 0; }
};

enum class LossKind : uint8_t {
  kSigmoidCrossEntropy = 0,  // input [1]: p(label) = sigmoid(logit)
  kSoftmaxCrossEntropy = 1,  // input [2]: (no, yes) logits, p(label) = softmax[1]
  // input [1]: p(label) itself, a probability (a sigmoid, an fc with activation sigmoid, or
  // a multiply of probabilities, as ESMM's pCTCVR = pCTR x pCVR); Paddle's log_loss:
  // -y log(p + eps) - (1 - y) log(1 - p + eps), eps = 1e-4.
  kLogLoss = 2,
};
std::string_view LossName(LossKind kind);  // "sigmoid_cross_entropy" | "softmax_cross_entropy" | "log_loss"
// Floats per example a loss reads: 2 for softmax_cross_entropy, else 1.
size_t LossWidth(LossKind kind);

struct GraphInput {
  std::string name;
  InputKind kind = InputKind::kDense;
  std::string where;  // "file:line" of its entry
  // embedding, embed_w: the slots read (`slots`, 0-based; empty = every pooled slot) and
  // their pooling (`pooling`, default sum).
  std::vector<size_t> slots = {};
  Pooling pooling = Pooling::kSum;
  // sequence, sequence_mask: the slot (`slot`) and, for sequence, `max_len`.
  size_t slot = 0;
  size_t max_len = 0;
};

struct GraphLayer {
  std::string name;
  std::string op;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;  // the tensors it makes: {name} unless the YAML lists `outputs`
  Attrs attrs;
  std::string where;
};

struct GraphOutput {
  std::string name;
  std::string input;
  LossKind loss = LossKind::kSigmoidCrossEntropy;
  // The data's label it is trained on (a name of the data's label_slots); empty = the
  // data's only label (an error when the data has several).
  std::string label = {};
  double weight = 1.0;  // the job's loss is the weighted sum of the outputs' mean losses
  std::string where;
};

// The graph as written, before shapes are known.
struct GraphSpec {
  std::vector<GraphInput> inputs;
  std::vector<GraphLayer> layers;
  std::vector<GraphOutput> outputs;
  std::string where;  // "file:line" of the section
};

// Reads a `network:` map (ctx names it). Checks the structure and keys; shapes are checked
// by BuildGraph once the slots are known.
StatusOr<GraphSpec> ParseGraphSpec(const YAML::Node& node, const config::YamlContext& ctx);

// The shapes the inputs read, from the job's slots.
struct RowShape {
  std::vector<size_t> slot_widths;  // embedding floats per slot (empty: no sparse slots)
  size_t dense_dim = 0;
  std::vector<std::string> labels = {"click"};  // the data's labels (label_slots), in column order
};

// A layer with its shapes resolved.
struct ResolvedLayer {
  GraphLayer spec;
  std::vector<size_t> inputs;   // tensor ids
  std::vector<size_t> outputs;  // tensor ids
  std::vector<Shape> params;    // each parameter's shape, in the op's order
  size_t param_offset = 0;      // in the flat vector
  size_t num_params = 0;
};

struct Tensor {
  std::string name;
  Shape shape;
  size_t size = 0;  // floats per example
};

// A checked graph: tensors (inputs first, then layer outputs in declaration order), layers
// in declaration order, and an execution order.
class Graph {
 public:
  const GraphSpec& spec() const { return spec_; }
  const RowShape& row() const { return row_; }
  std::span<const Tensor> tensors() const { return tensors_; }
  std::span<const ResolvedLayer> layers() const { return layers_; }
  // Layer indices in an order where every layer comes after the producers of its inputs.
  std::span<const size_t> order() const { return order_; }
  size_t num_params() const { return num_params_; }
  // True when an input reads embed_w: the sparse rows are then [embed_w | embedding].
  bool reads_embed_w() const { return reads_embed_w_; }
  // How the row holds slot s (pooled with which pooling, or a sequence).
  const SlotRead& slot_read(size_t s) const { return slot_reads_[s]; }
  std::span<const SlotRead> slot_reads() const { return slot_reads_; }
  // Floats of slot s's block in the activation row, where it starts, and the whole row.
  size_t slot_block(size_t s) const;
  size_t slot_offset(size_t s) const { return slot_offsets_[s]; }
  size_t row_width() const { return slot_offsets_.back() + row_.dense_dim; }
  // The tensor id of the graph input `i` and of output `o`'s logits.
  size_t input_tensor(size_t i) const { return i; }
  size_t num_outputs() const { return output_tensors_.size(); }
  size_t output_tensor(size_t o) const { return output_tensors_[o]; }
  // The column of output o's label in the data's labels (row().labels).
  size_t output_label(size_t o) const { return output_labels_[o]; }

 private:
  friend StatusOr<std::shared_ptr<const Graph>> BuildGraph(GraphSpec spec, const RowShape& row);
  GraphSpec spec_;
  RowShape row_;
  std::vector<Tensor> tensors_;
  std::vector<ResolvedLayer> layers_;
  std::vector<size_t> order_;
  std::vector<size_t> output_tensors_;
  std::vector<size_t> output_labels_;
  size_t num_params_ = 0;
  bool reads_embed_w_ = false;
  std::vector<SlotRead> slot_reads_;  // per slot
  std::vector<size_t> slot_offsets_;  // per slot + 1
};

StatusOr<std::shared_ptr<const Graph>> BuildGraph(GraphSpec spec, const RowShape& row);

// The shape of an input over `row` and the slots' reads ("kind embedding needs sparse slots", …).
StatusOr<Shape> InputShape(const GraphInput& input, const RowShape& row, std::span<const SlotRead> reads);
// The slots an embedding or embed_w input reads: its `slots`, or every pooled slot.
std::vector<size_t> InputSlots(const GraphInput& input, std::span<const SlotRead> reads);

}  // namespace fleetps::graph
