// Every graph op's CPU kernel (trainer/graph/ops) against central finite differences, driven
// directly through MakeKernel with the shapes its schema infers; small graphs the same way
// through the executor; and hand-computed forward values of the activation, layer_norm and
// low-rank cross ops.
//
// A kernel check: a batch of kBatch examples, objective f = sum over the outputs of
// output * fixed random weights; Backward's parameter and input gradients against central
// differences (model_test_util.h's CheckGradient, its tolerances). The same runs check the
// conventions of op_kernel.h: Backward OVERWRITES param_grads (they start at kStale) and ADDS
// to input_grads (they start at kPrefill); an empty input_grads[i] skips that input and
// changes nothing else. Outputs and scratch are NaN before every Forward, so a kernel that
// leaves an output unwritten or reads scratch it never wrote fails the check.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/config/graph_ops.h"
#include "common/config/graph_spec.h"
#include "test/trainer/model/model_test_util.h"
#include "trainer/graph/executor.h"
#include "trainer/graph/ops/op_kernel.h"

namespace fleetps::trainer::graph {
namespace {

using fleetps::graph::Attrs;
using fleetps::graph::GraphInput;
using fleetps::graph::GraphLayer;
using fleetps::graph::GraphOutput;
using fleetps::graph::GraphSpec;
using fleetps::graph::InputKind;
using fleetps::graph::NumElements;
using fleetps::graph::RowShape;
using model::testing::CheckGradient;
using model::testing::GradientCheckOptions;
using model::testing::GradientCheckResult;
using model::testing::RandomVector;
using model::testing::TestGemm;

constexpr size_t kBatch = 3;
constexpr float kPrefill = 0.375f;  // input gradients before Backward (it must add)
constexpr float kStale = 1234.5f;   // parameter gradients before Backward (it must overwrite)
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One op's kernel over buffers of its own. Inputs read tensors; two inputs may read one
// tensor (cross with x0 == x), which then collects both gradients in one buffer.
struct HarnessOptions {
  std::vector<size_t> tensor_of_input = {};  // empty: input i reads tensor i
  bool init_params = false;                  // the kernel's InitParams, else U(-1, 1)
  uint64_t seed = 1;
};

class KernelHarness {
 public:
  using Options = HarnessOptions;
  struct Grads {
    std::vector<float> params;
    std::vector<std::vector<float>> tensors;  // what Backward added, per tensor
  };

  KernelHarness(const std::string& op, Attrs attrs, std::vector<Shape> input_shapes, Options options = {})
      : in_shapes_(std::move(input_shapes)), tensor_of_input_(std::move(options.tensor_of_input)) {
    const fleetps::graph::OpSchema* schema = fleetps::graph::FindOpSchema(op);
    REQUIRE(schema != nullptr);
    StatusOr<fleetps::graph::OpSignature> sig = schema->infer(attrs, in_shapes_);
    INFO(op << ": " << sig.status().ToString());
    REQUIRE(sig.ok());
    if (tensor_of_input_.empty()) {
      tensor_of_input_.resize(in_shapes_.size());
      std::iota(tensor_of_input_.begin(), tensor_of_input_.end(), size_t{0});
    }
    REQUIRE(tensor_of_input_.size() == in_shapes_.size());
    const size_t tensors = *std::max_element(tensor_of_input_.begin(), tensor_of_input_.end()) + 1;
    tensors_.resize(tensors);
    grads_.resize(tensors);
    layer_.spec =
        GraphLayer{.name = op, .op = op, .inputs = {}, .outputs = {}, .attrs = std::move(attrs), .where = "ops_test"};
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      const size_t t = tensor_of_input_[i];
      const size_t size = kBatch * NumElements(in_shapes_[i]);
      REQUIRE((tensors_[t].empty() || tensors_[t].size() == size));
      if (tensors_[t].empty()) tensors_[t] = RandomVector(size, options.seed + 10 + t);
      grads_[t].resize(size);
      layer_.spec.inputs.push_back("in" + std::to_string(t));
      layer_.inputs.push_back(t);
    }
    out_shapes_ = sig->outputs;
    layer_.params = sig->params;
    for (const Shape& p : layer_.params) layer_.num_params += NumElements(p);
    for (size_t o = 0; o < out_shapes_.size(); ++o) {
      const size_t size = kBatch * NumElements(out_shapes_[o]);
      layer_.spec.outputs.push_back("out" + std::to_string(o));
      layer_.outputs.push_back(tensors + o);
      outputs_.emplace_back(size);
      output_grads_.emplace_back(size);
      weights_.push_back(RandomVector(size, options.seed + 100 + o));
    }
    kernel_ = MakeKernel(KernelContext{layer_, in_shapes_, out_shapes_, TestGemm()});
    params_.resize(layer_.num_params);
    if (options.init_params) {
      UniformRandom rng(options.seed);
      kernel_->InitParams(params_, &rng);
    } else {
      params_ = RandomVector(layer_.num_params, options.seed + 1);
    }
    param_grads_.resize(layer_.num_params);
    scratch_.resize(kernel_->ScratchFloats(kBatch));
    for (size_t t : tensor_of_input_) in_views_.emplace_back(tensors_[t]);
    for (size_t o = 0; o < outputs_.size(); ++o) {
      out_views_.emplace_back(outputs_[o]);
      out_grad_views_.emplace_back(output_grads_[o]);
    }
  }

  KernelHarness(const KernelHarness&) = delete;
  KernelHarness& operator=(const KernelHarness&) = delete;

  const ResolvedLayer& layer() const { return layer_; }
  std::span<const Shape> output_shapes() const { return out_shapes_; }
  size_t num_tensors() const { return tensors_.size(); }
  bool aliased() const { return tensors_.size() < tensor_of_input_.size(); }
  std::vector<float>& params() { return params_; }
  std::vector<float>& tensor(size_t t) { return tensors_[t]; }
  const std::vector<float>& output(size_t o) const { return outputs_[o]; }

  void Forward() {
    for (std::vector<float>& out : outputs_) std::ranges::fill(out, kNaN);
    std::ranges::fill(scratch_, kNaN);
    kernel_->Forward(Args());
  }

  // f = sum of outputs * weights, after a Forward.
  double Objective() {
    Forward();
    double f = 0;
    for (size_t o = 0; o < outputs_.size(); ++o) {
      for (size_t j = 0; j < outputs_[o].size(); ++j) f += double{outputs_[o][j]} * weights_[o][j];
    }
    return f;
  }

  // Forward, then Backward with d(f)/d(outputs) = the weights. Input `skip` (or every input
  // with skip_all) gets an empty gradient span.
  Grads Backward(size_t skip = SIZE_MAX, bool skip_all = false) {
    Forward();
    for (size_t o = 0; o < weights_.size(); ++o) std::ranges::copy(weights_[o], output_grads_[o].begin());
    std::ranges::fill(param_grads_, kStale);
    for (std::vector<float>& g : grads_) std::ranges::fill(g, kPrefill);
    std::vector<std::span<float>> input_grads;
    for (size_t i = 0; i < tensor_of_input_.size(); ++i) {
      const bool none = skip_all || i == skip;
      input_grads.push_back(none ? std::span<float>() : std::span<float>(grads_[tensor_of_input_[i]]));
    }
    kernel_->Backward(
        Args(), OpGrads{.output_grads = out_grad_views_, .param_grads = param_grads_, .input_grads = input_grads});
    Grads g{.params = param_grads_, .tensors = grads_};
    for (std::vector<float>& t : g.tensors) {
      for (float& v : t) v -= kPrefill;
    }
    return g;
  }

 private:
  OpArgs Args() {
    return OpArgs{.batch = kBatch, .params = params_, .inputs = in_views_, .outputs = out_views_, .scratch = scratch_};
  }

  std::vector<Shape> in_shapes_, out_shapes_;
  std::vector<size_t> tensor_of_input_;
  ResolvedLayer layer_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<std::vector<float>> tensors_, grads_, outputs_, output_grads_, weights_;
  std::vector<float> params_, param_grads_, scratch_;
  std::vector<std::span<const float>> in_views_;
  std::vector<std::span<float>> out_views_, out_grad_views_;
};

// The gradient checks of one harness (the file comment lists them). `nonzero`: the
// gradients must not all be 0 (false where they are, e.g. inputs under zero weights).
void CheckKernel(KernelHarness* h, const GradientCheckOptions& options = {}, bool nonzero = true) {
  const KernelHarness::Grads full = h->Backward();
  const auto f = [h] { return h->Objective(); };
  const auto check = [&](std::vector<float>* x, const std::vector<float>& analytic) {
    const GradientCheckResult r = CheckGradient(f, *x, analytic, options);
    CHECK(r.skipped <= x->size() / 4);
    if (nonzero) CHECK(r.max_gradient > 0);
  };
  if (!h->params().empty()) {
    INFO("parameter gradients of " << h->layer().spec.op);
    check(&h->params(), full.params);
  }
  for (size_t t = 0; t < h->num_tensors(); ++t) {
    INFO("gradient of input tensor " << t << " of " << h->layer().spec.op);
    check(&h->tensor(t), full.tensors[t]);
  }
  // Empty input gradients: the parameter gradients and the other inputs' are unchanged, the
  // skipped input's buffer untouched.
  INFO("with empty input gradients");
  CHECK(h->Backward(SIZE_MAX, /*skip_all=*/true).params == full.params);
  if (h->aliased()) return;
  for (size_t skip = 0; skip < h->num_tensors(); ++skip) {
    INFO("input " << skip << " skipped");
    const KernelHarness::Grads g = h->Backward(skip);
    CHECK(g.params == full.params);
    for (size_t t = 0; t < h->num_tensors(); ++t) {
      if (t != skip) CHECK(g.tensors[t] == full.tensors[t]);
    }
    CHECK(std::ranges::all_of(g.tensors[skip], [](float v) { return v == 0.0f; }));
  }
}

void CheckOp(const std::string& op, Attrs attrs, std::vector<Shape> inputs, const GradientCheckOptions& options = {},
             KernelHarness::Options harness = {}) {
  KernelHarness h(op, std::move(attrs), std::move(inputs), std::move(harness));
  CheckKernel(&h, options);
}

Attrs NumberKey(const std::string& key, double v) {
  Attrs a;
  a.SetNumber(key, v);
  return a;
}

Attrs ListKey(const std::string& key, std::vector<double> v) {
  Attrs a;
  a.SetList(key, std::move(v));
  return a;
}

Attrs FcKeys(size_t size, const std::string& activation, const std::string& bias = "true",
             const std::string& init = "xavier") {
  Attrs a;
  a.SetNumber("size", static_cast<double>(size));
  a.SetText("activation", activation);
  a.SetText("bias", bias);
  a.SetText("init", init);
  return a;
}

Attrs CrossKeys(const std::string& type, int rank = 0) {
  Attrs a;
  a.SetText("type", type);
  if (rank > 0) a.SetNumber("rank", rank);
  return a;
}

const GradientCheckOptions kKinks{.skip_kinks = true};

TEST_CASE("fc gradients: each activation, rank-1 and rank-2 inputs, no bias, zero init", "[graph][ops]") {
  for (const std::string act : {"none", "relu", "sigmoid", "tanh", "gelu"}) {
    SECTION("activation " + act + ", input [5]") {
      CheckOp("fc", FcKeys(3, act), {{5}}, act == "relu" ? kKinks : GradientCheckOptions{});
    }
    SECTION("activation " + act + ", input [2, 3]") {
      CheckOp("fc", FcKeys(4, act), {{2, 3}}, act == "relu" ? kKinks : GradientCheckOptions{});
    }
  }
  SECTION("bias false") { CheckOp("fc", FcKeys(3, "tanh", "false"), {{4}}); }
  SECTION("bias false, relu") { CheckOp("fc", FcKeys(2, "relu", "false"), {{2, 2}}, kKinks); }
  SECTION("init zeros") {
    KernelHarness h("fc", FcKeys(3, "sigmoid", "true", "zeros"), {{4}}, {.init_params = true});
    CHECK(std::ranges::all_of(h.params(), [](float v) { return v == 0.0f; }));
    // Zero weights: the input gradient is 0, the weights' is not.
    CheckKernel(&h, {}, /*nonzero=*/false);
    const KernelHarness::Grads g = h.Backward();
    CHECK(std::ranges::any_of(g.params, [](float v) { return v != 0.0f; }));
  }
  SECTION("init xavier") {
    KernelHarness h("fc", FcKeys(3, "none"), {{5}}, {.init_params = true});
    const float limit = std::sqrt(6.0f / 8.0f);
    for (size_t i = 0; i < h.params().size(); ++i) {
      if (i < 15) CHECK(std::fabs(h.params()[i]) <= limit);
      if (i >= 15) CHECK(h.params()[i] == 0.0f);
    }
  }
}

TEST_CASE("concat, flatten, reshape and split gradients", "[graph][ops]") {
  SECTION("concat rank-1") { CheckOp("concat", {}, {{3}, {2}}); }
  SECTION("concat rank-2 on the last axis (default)") { CheckOp("concat", {}, {{2, 3}, {2, 1}, {2, 2}}); }
  SECTION("concat rank-2, axis 1") { CheckOp("concat", NumberKey("axis", 1), {{2, 3}, {2, 1}}); }
  SECTION("concat rank-2, axis 0") { CheckOp("concat", NumberKey("axis", 0), {{2, 3}, {1, 3}}); }
  SECTION("concat axis 0 of rank-1") { CheckOp("concat", NumberKey("axis", 0), {{3}, {4}}); }
  SECTION("concat of one tensor twice") { CheckOp("concat", {}, {{2, 3}, {2, 3}}, {}, {.tensor_of_input = {0, 0}}); }
  SECTION("flatten") { CheckOp("flatten", {}, {{2, 3}}); }
  SECTION("reshape [6] -> [2, 3]") { CheckOp("reshape", ListKey("shape", {2, 3}), {{6}}); }
  SECTION("reshape [2, 3] -> [3, 2]") { CheckOp("reshape", ListKey("shape", {3, 2}), {{2, 3}}); }
  SECTION("split rank-1") { CheckOp("split", ListKey("sizes", {2, 3}), {{5}}); }
  SECTION("split rank-2") { CheckOp("split", ListKey("sizes", {1, 3, 1}), {{2, 5}}); }
}

TEST_CASE("add, multiply, reduce_sum and reduce_mean gradients", "[graph][ops]") {
  SECTION("add rank-1") { CheckOp("add", {}, {{4}, {4}}); }
  SECTION("add rank-2, three inputs") { CheckOp("add", {}, {{2, 3}, {2, 3}, {2, 3}}); }
  SECTION("add x + x") { CheckOp("add", {}, {{4}, {4}}, {}, {.tensor_of_input = {0, 0}}); }
  SECTION("multiply rank-1") { CheckOp("multiply", {}, {{4}, {4}}); }
  SECTION("multiply rank-2") { CheckOp("multiply", {}, {{2, 3}, {2, 3}}); }
  SECTION("multiply x * x") { CheckOp("multiply", {}, {{2, 3}, {2, 3}}, {}, {.tensor_of_input = {0, 0}}); }
  for (const std::string op : {"reduce_sum", "reduce_mean"}) {
    SECTION(op + " rank-1") { CheckOp(op, {}, {{5}}); }
    SECTION(op + " rank-2, axis -1") { CheckOp(op, NumberKey("axis", -1), {{3, 4}}); }
    SECTION(op + " rank-2, axis 0") { CheckOp(op, NumberKey("axis", 0), {{3, 4}}); }
    SECTION(op + " rank-2, axis 1") { CheckOp(op, NumberKey("axis", 1), {{3, 4}}); }
  }
}

TEST_CASE("fm, cross, dot_interaction and dense_embedding gradients", "[graph][ops]") {
  SECTION("fm") { CheckOp("fm", {}, {{4, 3}}); }
  for (const std::string type : {"v1", "v2"}) {
    SECTION("cross " + type) { CheckOp("cross", CrossKeys(type), {{5}, {5}}); }
    SECTION("cross " + type + ", x0 == x") {
      CheckOp("cross", CrossKeys(type), {{5}, {5}}, {}, {.tensor_of_input = {0, 0}});
    }
  }
  SECTION("dot_interaction") { CheckOp("dot_interaction", {}, {{4, 3}}); }
  SECTION("dot_interaction of two vectors") { CheckOp("dot_interaction", {}, {{2, 5}}); }
  SECTION("dense_embedding") { CheckOp("dense_embedding", NumberKey("dim", 3), {{4}}); }
}

// Graphs through the executor: f = sum of logits * random weights; the parameter and row
// gradients against central differences.
class GraphBuilder {
 public:
  void Input(const std::string& name, InputKind kind) {
    spec_.inputs.push_back(GraphInput{.name = name, .kind = kind, .where = "ops_test"});
  }
  void Layer(const std::string& name, const std::string& op, std::vector<std::string> inputs, Attrs attrs = {}) {
    spec_.layers.push_back(GraphLayer{.name = name,
                                      .op = op,
                                      .inputs = std::move(inputs),
                                      .outputs = {name},
                                      .attrs = std::move(attrs),
                                      .where = "ops_test"});
  }
  GraphSpec Take(const std::string& logit) {
    spec_.outputs.push_back(GraphOutput{.name = "click", .input = logit, .where = "ops_test"});
    return std::move(spec_);
  }

 private:
  GraphSpec spec_;
};

void CheckGraph(GraphSpec spec, const RowShape& row_shape, const GradientCheckOptions& options = {}) {
  StatusOr<std::shared_ptr<const fleetps::graph::Graph>> graph = fleetps::graph::BuildGraph(std::move(spec), row_shape);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  const GraphExecutor exec(*graph, TestGemm());
  std::vector<float> params = RandomVector(exec.num_params(), 21, -0.5f, 0.5f);
  std::vector<float> row = RandomVector(kBatch * exec.row_width(), 22);
  const std::vector<float> weights = RandomVector(kBatch * exec.num_logits(), 23);
  GraphExecutor::Workspace ws;
  std::vector<float> logits(weights.size());
  const auto f = [&] {
    exec.Forward(params, row, kBatch, &ws, logits);
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += double{logits[i]} * weights[i];
    return sum;
  };
  f();
  std::vector<float> param_grads(params.size(), kStale), row_grads(row.size(), kStale);
  exec.Backward(params, row, kBatch, weights, &ws, param_grads, row_grads, nullptr);
  {
    INFO("parameter gradients");
    CHECK(CheckGradient(f, params, param_grads, options).max_gradient > 0);
  }
  INFO("row gradients");
  CHECK(CheckGradient(f, row, row_grads, options).max_gradient > 0);
}

TEST_CASE("graphs through the executor: crosses of a tensor with itself, fields", "[graph][ops]") {
  const RowShape row{.slot_widths = {3, 3, 3}, .dense_dim = 4};
  SECTION("full-rank crosses with x0 == x") {
    GraphBuilder b;
    b.Input("dense", InputKind::kDense);
    b.Layer("c1", "cross", {"dense", "dense"}, CrossKeys("v1"));
    b.Layer("c2", "cross", {"c1", "c1"}, CrossKeys("v2"));
    b.Layer("h", "fc", {"c2"}, FcKeys(4, "relu"));
    b.Layer("logit", "fc", {"h"}, FcKeys(1, "none"));
    CheckGraph(b.Take("logit"), row, kKinks);
  }
  SECTION("embedding fields and dense features as fields, one tensor feeding several layers") {
    GraphBuilder b;
    b.Input("emb", InputKind::kEmbedding);                              // [3, 3]
    b.Input("dense", InputKind::kDense);                                // [4]
    b.Layer("de", "dense_embedding", {"dense"}, NumberKey("dim", 3));   // [4, 3]
    b.Layer("fields", "concat", {"emb", "de"}, NumberKey("axis", 0));   // [7, 3]
    b.Layer("fm", "fm", {"fields"});                                    // [1]
    b.Layer("dots", "dot_interaction", {"fields"});                     // [21]
    b.Layer("means", "reduce_mean", {"fields"}, NumberKey("axis", 1));  // [7]
    b.Layer("x", "concat", {"dots", "means", "dense"});                 // [32]
    b.Layer("deep", "fc", {"x"}, FcKeys(1, "tanh"));                    // [1]
    b.Layer("logit", "add", {"deep", "fm"});
    CheckGraph(b.Take("logit"), row);
  }
}

TEST_CASE("relu, sigmoid, tanh and gelu gradients", "[graph][ops]") {
  for (const std::string op : {"relu", "sigmoid", "tanh", "gelu"}) {
    const GradientCheckOptions options = op == "relu" ? kKinks : GradientCheckOptions{};
    SECTION(op + " rank-1") { CheckOp(op, {}, {{7}}, options); }
    SECTION(op + " rank-2") { CheckOp(op, {}, {{2, 3}}, options); }
  }
}

TEST_CASE("layer_norm gradients", "[graph][ops]") {
  SECTION("rank-1") { CheckOp("layer_norm", {}, {{6}}); }
  SECTION("rank-2: each row") { CheckOp("layer_norm", {}, {{3, 4}}); }
  SECTION("epsilon 0.1") { CheckOp("layer_norm", NumberKey("epsilon", 0.1), {{5}}); }
  SECTION("two columns") { CheckOp("layer_norm", {}, {{2, 2}}); }
}

TEST_CASE("low-rank cross gradients", "[graph][ops]") {
  for (int rank : {1, 2, 7}) {
    SECTION("cross v2 rank " + std::to_string(rank)) { CheckOp("cross", CrossKeys("v2", rank), {{5}, {5}}); }
    SECTION("cross v2 rank " + std::to_string(rank) + ", x0 == x") {
      CheckOp("cross", CrossKeys("v2", rank), {{5}, {5}}, {}, {.tensor_of_input = {0, 0}});
    }
  }
}

// Values by hand: a [1 x 5] batch of -2, -0.5, 0, 0.5, 2 through each activation.
TEST_CASE("relu, sigmoid, tanh and gelu forward values", "[graph][ops]") {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.5f, 2.0f};
  const auto run = [&](const std::string& op) {
    KernelHarness h(op, {}, {{5}});
    for (size_t b = 0; b < kBatch; ++b) std::ranges::copy(x, h.tensor(0).begin() + static_cast<std::ptrdiff_t>(b * 5));
    h.Forward();
    return std::vector<float>(h.output(0).begin(), h.output(0).begin() + 5);
  };
  const auto expect = [](const std::vector<float>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  };
  expect(run("relu"), {0, 0, 0, 0.5, 2});
  // 1 / (1 + e^2) = 0.11920292, 1 / (1 + e^0.5) = 0.37754067; sigmoid(-x) = 1 - sigmoid(x).
  expect(run("sigmoid"), {0.11920292, 0.37754067, 0.5, 0.62245933, 0.88079708});
  // (e^4 - 1) / (e^4 + 1) = 0.96402758, (e - 1) / (e + 1) = 0.46211716.
  expect(run("tanh"), {-0.96402758, -0.46211716, 0, 0.46211716, 0.96402758});
  // x Phi(x): Phi(-2) = 0.02275013, Phi(-0.5) = 0.30853754, Phi(x) = 1 - Phi(-x).
  expect(run("gelu"), {-2 * 0.02275013, -0.5 * 0.30853754, 0, 0.5 * 0.69146246, 2 * 0.97724987});
}

TEST_CASE("layer_norm forward values and initial parameters", "[graph][ops]") {
  SECTION("one vector, gamma and beta") {
    // x = 1 2 3 4: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25,
    // xhat = (x - 2.5) / sqrt(1.25 + 1e-5) = -1.3416355, -0.4472118, 0.4472118, 1.3416355.
    KernelHarness h("layer_norm", {}, {{4}});
    h.tensor(0) = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
    h.params() = {1, 2, 0.5f, -1, /*beta*/ 0, 0.5f, -1, 0.25f};
    h.Forward();
    const std::vector<double> want = {-1.3416355, 2 * -0.4472118 + 0.5, 0.5 * 0.4472118 - 1, -1.3416355 + 0.25};
    for (size_t b = 0; b < kBatch; ++b) {
      for (size_t j = 0; j < 4; ++j) CHECK(h.output(0)[b * 4 + j] == Approx(want[j]).margin(1e-6));
    }
  }
  SECTION("rows of [2, 2], epsilon 0.01") {
    // (1, 3): mean 2, variance 1, xhat = -+1 / sqrt(1.01) = -+0.99503719; (5, 5): xhat 0.
    KernelHarness h("layer_norm", NumberKey("epsilon", 0.01), {{2, 2}}, {.init_params = true});
    CHECK(h.params() == std::vector<float>{1, 1, 0, 0});  // gamma 1, beta 0
    h.tensor(0) = {1, 3, 5, 5, 1, 3, 5, 5, 1, 3, 5, 5};
    h.Forward();
    const std::vector<double> want = {-0.99503719, 0.99503719, 0, 0};
    for (size_t i = 0; i < h.output(0).size(); ++i) CHECK(h.output(0)[i] == Approx(want[i % 4]).margin(1e-6));
  }
}

TEST_CASE("low-rank cross: forward values, layout and init", "[graph][ops]") {
  SECTION("d 2, rank 1 by hand") {
    // V = [1; 2] (d x r), U = [0.5, -1] (r x d), b = (0.1, 0.2); x = (1, 3), x0 = (2, -1):
    // x V = 7, 7 U + b = (3.6, -6.8), y = x0 * (3.6, -6.8) + x = (8.2, 9.8).
    KernelHarness h("cross", CrossKeys("v2", 1), {{2}, {2}});
    REQUIRE(h.layer().params == std::vector<Shape>{{2, 1}, {1, 2}, {2}});
    h.params() = {1, 2, 0.5f, -1, 0.1f, 0.2f};
    h.tensor(0) = {2, -1, 2, -1, 0, 0};
    h.tensor(1) = {1, 3, 1, 3, 1, 3};
    h.Forward();
    const std::vector<double> want = {8.2, 9.8, 8.2, 9.8, 1, 3};  // x0 = 0: y = x
    for (size_t i = 0; i < want.size(); ++i) CHECK(h.output(0)[i] == Approx(want[i]).margin(1e-5));
  }
  SECTION("init: V and U Xavier, b zero") {
    KernelHarness h("cross", CrossKeys("v2", 3), {{8}, {8}}, {.init_params = true});
    REQUIRE(h.params().size() == 8 * 3 + 3 * 8 + 8);
    const float limit = std::sqrt(6.0f / 11.0f);
    for (size_t i = 0; i < h.params().size(); ++i) {
      if (i < 48) CHECK((std::fabs(h.params()[i]) <= limit && h.params()[i] != 0.0f));
      if (i >= 48) CHECK(h.params()[i] == 0.0f);
    }
  }
  SECTION("without rank, v2 keeps W [d x d], b [d]") {
    KernelHarness h("cross", CrossKeys("v2"), {{4}, {4}});
    CHECK(h.layer().params == std::vector<Shape>{{4, 4}, {4}});
  }
}

TEST_CASE("the new ops' keys are checked", "[graph][ops]") {
  const auto infer = [](const std::string& op, const Attrs& attrs, std::vector<Shape> in) {
    return fleetps::graph::FindOpSchema(op)->infer(attrs, in).status();
  };
  Attrs v1_rank = CrossKeys("v1");
  v1_rank.SetNumber("rank", 2);
  CHECK_THAT(infer("cross", v1_rank, {{4}, {4}}).message(), Catch::Contains("needs type v2"));
  Attrs zero_rank = CrossKeys("v2");
  zero_rank.SetNumber("rank", 0);
  CHECK_THAT(infer("cross", zero_rank, {{4}, {4}}).message(), Catch::Contains("'rank' must be in [1"));
  CHECK_THAT(infer("layer_norm", NumberKey("epsilon", 0), {{4}}).message(), Catch::Contains("epsilon"));
  CHECK(infer("layer_norm", NumberKey("epsilon", 1e-3), {{4}}).ok());
  for (const std::string op : {"relu", "sigmoid", "tanh", "gelu", "layer_norm"}) {
    const fleetps::graph::OpSchema* s = fleetps::graph::FindOpSchema(op);
    REQUIRE(s != nullptr);
    CHECK((s->min_inputs == 1 && s->max_inputs == 1));
  }
}

TEST_CASE("graphs of the new ops through the executor", "[graph][ops]") {
  const RowShape row{.slot_widths = {3, 3, 3}, .dense_dim = 4};
  SECTION("layer_norm, activations, low-rank cross with x0 == x") {
    GraphBuilder b;
    b.Input("emb", InputKind::kEmbedding);  // [3, 3]
    b.Input("dense", InputKind::kDense);    // [4]
    b.Layer("ln", "layer_norm", {"emb"});
    b.Layer("act", "gelu", {"ln"});
    b.Layer("flat", "flatten", {"act"});
    b.Layer("x", "concat", {"flat", "dense"});  // [13]
    b.Layer("c1", "cross", {"x", "x"}, CrossKeys("v2", 2));
    b.Layer("c2", "cross", {"x", "c1"}, CrossKeys("v2", 3));
    b.Layer("t", "tanh", {"c2"});
    b.Layer("s", "sigmoid", {"t"});
    b.Layer("logit", "fc", {"s"}, FcKeys(1, "none"));
    CheckGraph(b.Take("logit"), row);
  }
  SECTION("layer_norm and relu after full-rank crosses with x0 == x") {
    GraphBuilder b;
    b.Input("dense", InputKind::kDense);
    b.Layer("c1", "cross", {"dense", "dense"}, CrossKeys("v1"));
    b.Layer("c2", "cross", {"c1", "c1"}, CrossKeys("v2"));
    b.Layer("ln", "layer_norm", {"c2"});
    b.Layer("r", "relu", {"ln"});
    b.Layer("logit", "fc", {"r"}, FcKeys(1, "none"));
    CheckGraph(b.Take("logit"), row, kKinks);
  }
}

}  // namespace
}  // namespace fleetps::trainer::graph
