// The op schemas: arity, keys, output and parameter shapes. One entry per op; the kernel of
// op X is trainer/graph/ops/X (its header comment gives the maths).

#include "common/config/graph_ops.h"

#include <algorithm>
#include <climits>

namespace fleetps::graph {
namespace {

constexpr int64_t kMaxWidth = int64_t{1} << 24;

Status Expect(bool ok, const std::string& what) { return ok ? Status::OK() : Status::InvalidArgument(what); }

StatusOr<OpSignature> InferFc(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(int64_t size, a.Int("size", 0, 1, kMaxWidth));
  if (size == 0) return Status::InvalidArgument("missing key 'size' (the output width)");
  RETURN_IF_ERROR(a.Choice("activation", {"none", "relu", "sigmoid", "tanh", "gelu"}).status());
  RETURN_IF_ERROR(a.Choice("init", {"xavier", "zeros"}).status());
  ASSIGN_OR_RETURN(std::string bias, a.Choice("bias", {"true", "false"}));
  const size_t n = NumElements(in[0]);
  const auto out = static_cast<size_t>(size);
  OpSignature sig{.outputs = {{out}}, .params = {{n, out}}};
  if (bias == "true") sig.params.push_back({out});
  return sig;
}

StatusOr<OpSignature> InferConcat(const Attrs& a, std::span<const Shape> in) {
  const size_t rank = in[0].size();
  ASSIGN_OR_RETURN(int64_t axis, a.Int("axis", -1, -1, 1));
  if (axis == -1) axis = static_cast<int64_t>(rank) - 1;
  RETURN_IF_ERROR(Expect(static_cast<size_t>(axis) < rank, "'axis' " + std::to_string(axis) +
                                                               " does not exist in rank-" + std::to_string(rank) +
                                                               " inputs (use -1, the last, or 0)"));
  Shape out = in[0];
  out[static_cast<size_t>(axis)] = 0;
  for (const Shape& s : in) {
    if (s.size() != rank) {
      return Status::InvalidArgument("inputs of different ranks; flatten the [n, k] ones first (op: flatten)");
    }
    for (size_t d = 0; d < rank; ++d) {
      if (d != static_cast<size_t>(axis) && s[d] != in[0][d]) {
        return Status::InvalidArgument("the inputs differ in dim " + std::to_string(d) + ", not only along axis " +
                                       std::to_string(axis));
      }
    }
    out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
  }
  return OpSignature{.outputs = {out}, .params = {}};
}

StatusOr<OpSignature> InferFlatten(const Attrs&, std::span<const Shape> in) {
  return OpSignature{.outputs = {{NumElements(in[0])}}, .params = {}};
}

StatusOr<OpSignature> InferReshape(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("shape"));
  if (dims.empty() || dims.size() > 2) return Status::InvalidArgument("'shape' must list 1 or 2 dims, e.g. [1, 16]");
  Shape out(dims.begin(), dims.end());
  RETURN_IF_ERROR(Expect(NumElements(out) == NumElements(in[0]),
                         "'shape' " + ShapeString(out) + " holds " + std::to_string(NumElements(out)) +
                             " floats, the input " + std::to_string(NumElements(in[0])) + "; they must match"));
  return OpSignature{.outputs = {out}, .params = {}};
}

StatusOr<OpSignature> InferSplit(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.Ints("sizes"));
  if (sizes.size() < 2) return Status::InvalidArgument("'sizes' must list 2 or more widths along the last axis");
  OpSignature sig;
  size_t sum = 0;
  for (int64_t s : sizes) {
    RETURN_IF_ERROR(Expect(s > 0, "'sizes' must be > 0"));
    Shape out = in[0];
    out.back() = static_cast<size_t>(s);
    sig.outputs.push_back(out);
    sum += static_cast<size_t>(s);
  }
  RETURN_IF_ERROR(Expect(sum == in[0].back(), "'sizes' add up to " + std::to_string(sum) + ", the last dim is " +
                                                  std::to_string(in[0].back())));
  return sig;
}

StatusOr<OpSignature> InferElementwise(const Attrs&, std::span<const Shape> in) {
  for (const Shape& s : in) RETURN_IF_ERROR(Expect(s == in[0], "the inputs must have one shape"));
  return OpSignature{.outputs = {in[0]}, .params = {}};
}

StatusOr<OpSignature> InferReduce(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(int64_t axis, a.Int("axis", -1, -1, 1));
  if (axis == -1) return OpSignature{.outputs = {{1}}, .params = {}};
  RETURN_IF_ERROR(Expect(in[0].size() == 2, "'axis' needs an [n, k] input"));
  return OpSignature{.outputs = {{in[0][axis == 0 ? 1 : 0]}}, .params = {}};
}

// fm over the fields of every input together (as if joined along axis 0).
StatusOr<OpSignature> InferFm(const Attrs&, std::span<const Shape> in) {
  for (const Shape& s : in) {
    RETURN_IF_ERROR(Expect(s.size() == 2 && s[1] == in[0].back(),
                           "needs fields [n, k] of one width k (embedding inputs, dense_embedding results)"));
  }
  return OpSignature{.outputs = {{1}}, .params = {}};
}

StatusOr<OpSignature> InferCross(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(std::string type, a.Choice("type", {"v1", "v2"}));
  ASSIGN_OR_RETURN(int64_t rank, a.Int("rank", 0, 1, kMaxWidth));
  RETURN_IF_ERROR(Expect(rank == 0 || type == "v2", "'rank' (low-rank DCN-v2) needs type v2"));
  RETURN_IF_ERROR(Expect(in[0].size() == 1 && in[1] == in[0], "needs x0 and x of one shape [d]"));
  const size_t d = in[0][0];
  OpSignature sig{.outputs = {{d}}, .params = {}};
  if (rank > 0) {  // V [d x r], U [r x d]
    const auto r = static_cast<size_t>(rank);
    sig.params.push_back({d, r});
    sig.params.push_back({r, d});
  } else {
    sig.params.push_back(type == "v1" ? Shape{d} : Shape{d, d});
  }
  sig.params.push_back({d});
  return sig;
}

StatusOr<OpSignature> InferDot(const Attrs&, std::span<const Shape> in) {
  RETURN_IF_ERROR(Expect(in[0].size() == 2 && in[0][0] >= 2, "needs n >= 2 vectors [n, k]"));
  const size_t n = in[0][0];
  return OpSignature{.outputs = {{n * (n - 1) / 2}}, .params = {}};
}

// cin: fields X0 [m, D]; layer_sizes [H1, ...]; out [sum H_k]; W_k [H_k x H_{k-1} x m] (H_0 = m).
StatusOr<OpSignature> InferCin(const Attrs& a, std::span<const Shape> in) {
  RETURN_IF_ERROR(a.Choice("activation", {"none", "relu"}).status());
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.Ints("layer_sizes"));
  if (sizes.empty()) {
    return Status::InvalidArgument("missing key 'layer_sizes' (the feature maps of each CIN layer, e.g. [128, 128])");
  }
  RETURN_IF_ERROR(Expect(in[0].size() == 2, "needs fields [m, D] (e.g. an embedding input)"));
  const size_t m = in[0][0];
  OpSignature sig{.outputs = {{0}}, .params = {}};
  size_t prev = m;
  for (int64_t h : sizes) {
    RETURN_IF_ERROR(Expect(h >= 1 && h <= kMaxWidth, "'layer_sizes' must be in [1, " + std::to_string(kMaxWidth) +
                                                         "], got " + std::to_string(h)));
    const auto size = static_cast<size_t>(h);
    sig.params.push_back({size, prev, m});
    sig.outputs[0][0] += size;
    prev = size;
  }
  return sig;
}

// self_attention: fields E [n, k] -> [n, heads * head_dim]; Wq, Wk, Wv (, Wres) [k x heads * head_dim].
StatusOr<OpSignature> InferSelfAttention(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(int64_t heads, a.Int("heads", 0, 1, kMaxWidth));
  if (heads == 0) return Status::InvalidArgument("missing key 'heads' (the number of attention heads)");
  ASSIGN_OR_RETURN(int64_t head_dim, a.Int("head_dim", 0, 1, kMaxWidth));
  if (head_dim == 0) return Status::InvalidArgument("missing key 'head_dim' (the width of each head)");
  ASSIGN_OR_RETURN(std::string residual, a.Choice("residual", {"true", "false"}));
  RETURN_IF_ERROR(a.Choice("scale", {"false", "true"}).status());
  RETURN_IF_ERROR(Expect(in[0].size() == 2, "needs fields [n, k] (e.g. an embedding input)"));
  RETURN_IF_ERROR(Expect(heads * head_dim <= kMaxWidth, "heads * head_dim must be <= " + std::to_string(kMaxWidth)));
  const size_t n = in[0][0], k = in[0][1];
  const auto width = static_cast<size_t>(heads * head_dim);
  OpSignature sig{.outputs = {{n, width}}, .params = {{k, width}, {k, width}, {k, width}}};
  if (residual == "true") sig.params.push_back({k, width});
  return sig;
}

// moe: experts [e, d] and gate input x (flattened to [g]) -> [d]; Wg [g x e], bg [e].
StatusOr<OpSignature> InferMoe(const Attrs&, std::span<const Shape> in) {
  RETURN_IF_ERROR(
      Expect(in[0].size() == 2,
             "the first input must be the experts [e, d] (concat the expert outputs and reshape to [e, d])"));
  const size_t e = in[0][0], d = in[0][1];
  const size_t g = NumElements(in[1]);
  return OpSignature{.outputs = {{d}}, .params = {{g, e}, {e}}};
}

StatusOr<OpSignature> InferDenseEmbedding(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(int64_t dim, a.Int("dim", 0, 1, kMaxWidth));
  if (dim == 0) return Status::InvalidArgument("missing key 'dim' (the embedding width)");
  RETURN_IF_ERROR(Expect(in[0].size() == 1, "needs dense features [d]"));
  const size_t d = in[0][0];
  const auto k = static_cast<size_t>(dim);
  return OpSignature{.outputs = {{d, k}}, .params = {{d, k}}};
}

// dropout: one input, its shape; `rate` in [0, 1).
StatusOr<OpSignature> InferDropout(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(double rate, a.Float("rate", 0.5));
  RETURN_IF_ERROR(Expect(rate >= 0 && rate < 1, "'rate' must be in [0, 1) (the share of values dropped)"));
  return OpSignature{.outputs = {in[0]}, .params = {}};
}

// relu, sigmoid, tanh, gelu: one input, its shape.
StatusOr<OpSignature> InferActivation(const Attrs&, std::span<const Shape> in) {
  return OpSignature{.outputs = {in[0]}, .params = {}};
}

StatusOr<OpSignature> InferLayerNorm(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(double epsilon, a.Float("epsilon", 1e-5));
  RETURN_IF_ERROR(Expect(epsilon > 0 && epsilon < 1, "'epsilon' must be in (0, 1)"));
  const size_t k = in[0].back();
  return OpSignature{.outputs = {in[0]}, .params = {{k}, {k}}};
}

// The sequence ops' first two inputs: a behaviour sequence [L, k] and its mask [L].
Status CheckSequence(std::span<const Shape> in) {
  RETURN_IF_ERROR(Expect(in[0].size() == 2, "the first input must be a sequence [L, k] (positions x embedding), got " +
                                                ShapeString(in[0])));
  const Shape mask = {in[0][0]};
  return Expect(in[1] == mask, "the second input must be the sequence's mask " + ShapeString(mask) +
                                   " (1 real, 0 padding), got " + ShapeString(in[1]));
}

// target_attention: sequence [L, k], mask [L], target [k] -> [k]; the attention MLP's layers
// (the hidden widths, then 1) each W [in x out] and b [out], in_0 = 4k.
StatusOr<OpSignature> InferTargetAttention(const Attrs& a, std::span<const Shape> in) {
  RETURN_IF_ERROR(a.Choice("activation", {"sigmoid", "relu"}).status());
  RETURN_IF_ERROR(a.Choice("softmax", {"false", "true"}).status());
  RETURN_IF_ERROR(a.Choice("scale", {"false", "true"}).status());
  ASSIGN_OR_RETURN(std::vector<int64_t> hidden, a.Ints("hidden"));
  if (!a.Has("hidden")) hidden = {80, 40};
  RETURN_IF_ERROR(CheckSequence(in));
  const size_t k = in[0][1];
  RETURN_IF_ERROR(Expect(in[2] == Shape{k}, "the third input must be the target " + ShapeString({k}) +
                                                " (one embedding of the sequence's width), got " + ShapeString(in[2])));
  OpSignature sig{.outputs = {{k}}, .params = {}};
  size_t prev = 4 * k;
  for (int64_t width : hidden) {
    RETURN_IF_ERROR(
        Expect(width >= 1 && width <= kMaxWidth,
               "'hidden' widths must be in [1, " + std::to_string(kMaxWidth) + "], got " + std::to_string(width)));
    const auto out = static_cast<size_t>(width);
    sig.params.push_back({prev, out});
    sig.params.push_back({out});
    prev = out;
  }
  sig.params.push_back({prev, 1});
  sig.params.push_back({1});
  return sig;
}

// gru: sequence [L, k], mask [L] -> [h] (or [L, h] with sequences: true); W [k x 3h],
// U [h x 3h], b [3h], bhn [h].
StatusOr<OpSignature> InferGru(const Attrs& a, std::span<const Shape> in) {
  ASSIGN_OR_RETURN(int64_t hidden, a.Int("hidden", 0, 1, kMaxWidth / 3));
  if (hidden == 0) return Status::InvalidArgument("missing key 'hidden' (the width of the GRU's state)");
  ASSIGN_OR_RETURN(std::string sequences, a.Choice("sequences", {"false", "true"}));
  RETURN_IF_ERROR(CheckSequence(in));
  const size_t len = in[0][0], k = in[0][1];
  const auto h = static_cast<size_t>(hidden);
  OpSignature sig{.outputs = {}, .params = {{k, 3 * h}, {h, 3 * h}, {3 * h}, {h}}};
  sig.outputs.push_back(sequences == "true" ? Shape{len, h} : Shape{h});
  return sig;
}

}  // namespace

const std::vector<OpSchema>& OpSchemas() {
  static const std::vector<OpSchema> schemas = {
      {.name = "fc", .keys = {"size", "activation", "bias", "init"}, .infer = InferFc},
      {.name = "concat", .min_inputs = 2, .max_inputs = SIZE_MAX, .keys = {"axis"}, .infer = InferConcat},
      {.name = "flatten", .keys = {}, .infer = InferFlatten},
      {.name = "reshape", .keys = {"shape"}, .infer = InferReshape},
      {.name = "split", .keys = {"sizes"}, .infer = InferSplit, .outputs = 0},
      {.name = "add", .min_inputs = 2, .max_inputs = SIZE_MAX, .keys = {}, .infer = InferElementwise},
      {.name = "multiply", .min_inputs = 2, .max_inputs = 2, .keys = {}, .infer = InferElementwise},
      {.name = "reduce_sum", .keys = {"axis"}, .infer = InferReduce},
      {.name = "reduce_mean", .keys = {"axis"}, .infer = InferReduce},
      {.name = "fm", .max_inputs = SIZE_MAX, .keys = {}, .infer = InferFm},
      {.name = "cross", .min_inputs = 2, .max_inputs = 2, .keys = {"type", "rank"}, .infer = InferCross},
      {.name = "dot_interaction", .keys = {}, .infer = InferDot},
      {.name = "cin", .keys = {"layer_sizes", "activation"}, .infer = InferCin},
      {.name = "self_attention", .keys = {"heads", "head_dim", "residual", "scale"}, .infer = InferSelfAttention},
      {.name = "moe", .min_inputs = 2, .max_inputs = 2, .keys = {}, .infer = InferMoe},
      {.name = "dense_embedding", .keys = {"dim"}, .infer = InferDenseEmbedding},
      {.name = "relu", .keys = {}, .infer = InferActivation},
      {.name = "sigmoid", .keys = {}, .infer = InferActivation},
      {.name = "tanh", .keys = {}, .infer = InferActivation},
      {.name = "gelu", .keys = {}, .infer = InferActivation},
      {.name = "dropout", .keys = {"rate"}, .infer = InferDropout},
      {.name = "layer_norm", .keys = {"epsilon"}, .infer = InferLayerNorm},
      {.name = "target_attention",
       .min_inputs = 3,
       .max_inputs = 3,
       .keys = {"hidden", "activation", "softmax", "scale"},
       .infer = InferTargetAttention},
      {.name = "gru", .min_inputs = 2, .max_inputs = 2, .keys = {"hidden", "sequences"}, .infer = InferGru},
  };
  return schemas;
}

const OpSchema* FindOpSchema(const std::string& name) {
  const std::vector<OpSchema>& all = OpSchemas();
  const auto it = std::find_if(all.begin(), all.end(), [&](const OpSchema& s) { return s.name == name; });
  return it == all.end() ? nullptr : &*it;
}

std::vector<std::string> OpNames() {
  std::vector<std::string> names;
  for (const OpSchema& s : OpSchemas()) names.push_back(s.name);
  return names;
}

}  // namespace fleetps::graph
