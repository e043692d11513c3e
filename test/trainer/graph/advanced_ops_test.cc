// The cin, self_attention and moe ops: their schemas' shapes and errors, each kernel's
// forward against values worked out by hand and against a naive double-precision reference
// written here from the maths, every parameter and input gradient against central finite
// differences, and the three together in one graph on the executor.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/config/graph_ops.h"
#include "common/config/graph_spec.h"
#include "common/config/yaml_util.h"
#include "test/trainer/graph/graph_test_util.h"
#include "test/trainer/model/model_test_util.h"
#include "trainer/graph/executor.h"

// A namespace of its own: the helpers' names stay out of the other test files of a unity build.
namespace fleetps::trainer::graph::advanced_ops_test {
namespace {

using fleetps::graph::Attrs;
using fleetps::graph::Graph;
using fleetps::graph::GraphInput;
using fleetps::graph::GraphLayer;
using fleetps::graph::GraphOutput;
using fleetps::graph::GraphSpec;
using fleetps::graph::InputKind;
using fleetps::graph::RowShape;
using model::testing::CheckGradient;
using model::testing::GradientCheckOptions;
using model::testing::GradientCheckResult;
using model::testing::RandomVector;
using model::testing::TestGemm;
using testing::Built;
using testing::Layer;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Inputs `emb` ([slots, k]) and `dense` ([dense_dim]); `op` over `inputs`, then its sum as
// the logit.
StatusOr<std::shared_ptr<const Graph>> OneOpGraph(const std::string& op, Attrs attrs, std::vector<std::string> inputs,
                                                  const RowShape& row) {
  GraphSpec spec;
  spec.inputs = {GraphInput{.name = "emb", .kind = InputKind::kEmbedding, .where = "test"}};
  if (row.dense_dim > 0) spec.inputs.push_back(GraphInput{.name = "dense", .kind = InputKind::kDense, .where = "test"});
  return testing::OneOpGraph(std::move(spec), op, std::move(attrs), std::move(inputs), row);
}

RowShape Row(size_t slots, size_t width, size_t dense) {
  return RowShape{.slot_widths = std::vector<size_t>(slots, width), .dense_dim = dense};
}

std::string BuildError(const std::string& op, Attrs attrs, std::vector<std::string> inputs, const RowShape& row) {
  return testing::BuildMessage(OneOpGraph(op, std::move(attrs), std::move(inputs), row));
}

// The first layer of a graph as a bare kernel, on its own buffers: inputs, parameters and
// the objective sum(weights * y) all ours to set and perturb.
class Harness {
 public:
  Harness(std::shared_ptr<const Graph> graph, size_t batch, uint64_t seed) : graph_(std::move(graph)), batch_(batch) {
    const auto& layer = graph_->layers()[0];
    const auto tensors = graph_->tensors();
    for (size_t t : layer.inputs) in_shapes_.push_back(tensors[t].shape);
    out_shape_ = tensors[layer.outputs[0]].shape;
    kernel_ = MakeKernel(KernelContext{layer, in_shapes_, {&out_shape_, 1}, TestGemm()});
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      inputs.push_back(RandomVector(batch * fleetps::graph::NumElements(in_shapes_[i]), seed + i));
    }
    params = RandomVector(layer.num_params, seed + 10, -0.7f, 0.7f);
    weights = RandomVector(batch * fleetps::graph::NumElements(out_shape_), seed + 11);
    output.resize(weights.size());
    scratch.resize(kernel_->ScratchFloats(batch));
  }

  const OpKernel& kernel() const { return *kernel_; }
  size_t out_size() const { return fleetps::graph::NumElements(out_shape_); }

  // y from the current inputs and parameters; scratch and y start as NaN, so a read of
  // anything Forward did not write shows.
  void Forward() {
    std::ranges::fill(output, kNaN);
    std::ranges::fill(scratch, kNaN);
    kernel_->Forward(Args());
  }

  double Objective() {
    Forward();
    double sum = 0;
    for (size_t i = 0; i < output.size(); ++i) sum += double{weights[i]} * output[i];
    return sum;
  }

  // d(objective)/d(params) and, when with_inputs, d/d(inputs). The parameter gradient
  // starts as garbage (Backward overwrites it), the input gradients as 0.25 (Backward adds
  // to them; the 0.25 is taken off again).
  void Gradients(bool with_inputs, std::vector<float>* param_grads, std::vector<std::vector<float>>* input_grads) {
    Forward();
    std::vector<float> dy = weights;
    param_grads->assign(params.size(), 9.0f);
    input_grads->clear();
    std::vector<std::span<float>> in_spans;
    for (const auto& in : inputs) {
      input_grads->push_back(std::vector<float>(with_inputs ? in.size() : 0, 0.25f));
      in_spans.emplace_back(input_grads->back());
    }
    const std::span<float> dy_span(dy);
    kernel_->Backward(Args(),
                      OpGrads{.output_grads = {&dy_span, 1}, .param_grads = *param_grads, .input_grads = in_spans});
    for (auto& grad : *input_grads) {
      for (float& v : grad) v -= 0.25f;
    }
  }

  // Checks every parameter and input gradient; returns the largest gradient seen.
  double CheckAll(const GradientCheckOptions& options, size_t max_skipped = 0) {
    std::vector<float> pg;
    std::vector<std::vector<float>> ig;
    Gradients(true, &pg, &ig);
    const auto f = [&] { return Objective(); };
    double largest = 0;
    const auto check = [&](std::span<float> x, std::span<const float> analytic, const char* what) {
      INFO(what);
      const GradientCheckResult r = CheckGradient(f, x, analytic, options);
      CHECK(r.skipped <= max_skipped);
      largest = std::max(largest, r.max_gradient);
    };
    check(params, pg, "parameters");
    for (size_t i = 0; i < inputs.size(); ++i) check(inputs[i], ig[i], ("input " + std::to_string(i)).c_str());
    // Without input gradients: the same parameter gradient.
    std::vector<float> pg2;
    Gradients(false, &pg2, &ig);
    CHECK(pg2 == pg);
    return largest;
  }

  std::vector<std::vector<float>> inputs;
  std::vector<float> params;
  std::vector<float> weights;
  std::vector<float> output;
  std::vector<float> scratch;

 private:
  OpArgs Args() {
    in_views_.assign(inputs.begin(), inputs.end());
    out_view_ = output;
    return OpArgs{
        .batch = batch_, .params = params, .inputs = in_views_, .outputs = {&out_view_, 1}, .scratch = scratch};
  }

  std::shared_ptr<const Graph> graph_;
  size_t batch_;
  std::vector<Shape> in_shapes_;
  Shape out_shape_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<std::span<const float>> in_views_;
  std::span<float> out_view_;
};

void RequireNear(std::span<const float> got, std::span<const double> want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("entry " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

Attrs CinAttrs(std::vector<double> sizes, const std::string& activation) {
  Attrs a;
  a.SetList("layer_sizes", std::move(sizes));
  if (!activation.empty()) a.SetText("activation", activation);
  return a;
}

// cin from the definition, one example: x0 [m x dim], W_k [H_k x H_{k-1} x m].
std::vector<double> NaiveCin(const float* x0, const float* w, size_t m, size_t dim, const std::vector<size_t>& sizes,
                             bool relu) {
  std::vector<double> out, prev(x0, x0 + m * dim);
  size_t hp = m;
  for (size_t h : sizes) {
    std::vector<double> next(h * dim, 0.0);
    for (size_t o = 0; o < h; ++o) {
      for (size_t d = 0; d < dim; ++d) {
        double sum = 0;
        for (size_t p = 0; p < hp; ++p) {
          for (size_t i = 0; i < m; ++i) sum += double{w[(o * hp + p) * m + i]} * prev[p * dim + d] * x0[i * dim + d];
        }
        next[o * dim + d] = relu ? std::max(sum, 0.0) : sum;
      }
    }
    for (size_t o = 0; o < h; ++o) {
      double sum = 0;
      for (size_t d = 0; d < dim; ++d) sum += next[o * dim + d];
      out.push_back(sum);
    }
    w += h * hp * m;
    prev = std::move(next);
    hp = h;
  }
  return out;
}

TEST_CASE("cin: shapes and layout", "[graph][ops]") {
  const auto graph = Built(OneOpGraph("cin", CinAttrs({4, 3}, ""), {"emb"}, Row(5, 2, 0)));
  const auto& layer = graph->layers()[0];
  CHECK(graph->tensors()[layer.outputs[0]].shape == Shape{7});
  REQUIRE(layer.params.size() == 2);
  CHECK(layer.params[0] == Shape{4, 5, 5});
  CHECK(layer.params[1] == Shape{3, 4, 5});
  CHECK(layer.num_params == 4 * 5 * 5 + 3 * 4 * 5);
}

TEST_CASE("cin: errors", "[graph][ops]") {
  CHECK_THAT(BuildError("cin", {}, {"emb"}, Row(3, 2, 0)), Catch::Contains("missing key 'layer_sizes'"));
  CHECK_THAT(BuildError("cin", CinAttrs({4, 0}, ""), {"emb"}, Row(3, 2, 0)),
             Catch::Contains("'layer_sizes' must be in [1"));
  CHECK_THAT(BuildError("cin", CinAttrs({4}, "tanh"), {"emb"}, Row(3, 2, 0)),
             Catch::Contains("unknown activation 'tanh' (use none or relu)"));
  CHECK_THAT(BuildError("cin", CinAttrs({4}, ""), {"dense"}, Row(3, 2, 4)), Catch::Contains("needs fields [m, D]"));
  CHECK_THAT(BuildError("cin", CinAttrs({4}, ""), {"emb", "dense"}, Row(3, 2, 4)),
             Catch::Contains("takes 1 input, got 2"));
}

TEST_CASE("cin: forward by hand", "[graph][ops]") {
  // X0 = [[1, -1], [2, 0.5]] (m = 2 fields, D = 2); W_1 = [[[1, 0.5], [-1, 0.25]]], W_2 = [[[3, -1]]].
  // X_1[d] = sum_{h,i} W_1[h, i] X0[h, d] X0[i, d]: d = 0 -> 1 + 1 - 2 + 1 = 1,
  //   d = 1 -> 1 - 0.25 + 0.5 + 0.0625 = 1.3125; y_1 = 2.3125.
  // X_2[d] = X_1[d] (3 X0[0, d] - X0[1, d]): 1, -4.59375; y_2 = -3.59375 (relu: 1 + 0 = 1).
  for (const std::string act : {"none", "relu"}) {
    const auto graph = Built(OneOpGraph("cin", CinAttrs({1, 1}, act), {"emb"}, Row(2, 2, 0)));
    Harness h(graph, 1, 1);
    h.inputs[0] = {1, -1, 2, 0.5f};
    h.params = {1, 0.5f, -1, 0.25f, 3, -1};
    h.Forward();
    CHECK(h.output[0] == 2.3125f);
    CHECK(h.output[1] == (act == "relu" ? 1.0f : -3.59375f));
  }
}

TEST_CASE("cin: forward against the definition, gradients against finite differences", "[graph][ops]") {
  const size_t m = 4, dim = 3, batch = 3;
  for (const std::string act : {"none", "relu"}) {
    SECTION(act) {
      const std::vector<size_t> sizes = {3, 2, 2};
      const auto graph = Built(OneOpGraph("cin", CinAttrs({3, 2, 2}, act), {"emb"}, Row(m, dim, 0)));
      Harness h(graph, batch, 21);
      h.Forward();
      for (size_t b = 0; b < batch; ++b) {
        const std::vector<double> want =
            NaiveCin(h.inputs[0].data() + b * m * dim, h.params.data(), m, dim, sizes, act == "relu");
        RequireNear(std::span<const float>(h.output).subspan(b * h.out_size(), h.out_size()), want, 1e-5);
      }
      const double largest = h.CheckAll({.step = 2e-3, .abs_tol = 2e-3, .rel_tol = 1e-2, .skip_kinks = act == "relu"},
                                        act == "relu" ? 3 : 0);
      CHECK(largest > 0.1);
    }
  }
}

TEST_CASE("cin: batches larger than one product's chunk", "[graph][ops]") {
  // 1 << 20 floats per chunk of Z: m = 64 fields, D = 16, H = 64 -> Z has 64 * 64 * 16 floats
  // per example, a chunk 16 examples; 40 examples take three chunks.
  const size_t m = 64, dim = 16, batch = 40;
  const auto graph = Built(OneOpGraph("cin", CinAttrs({64, 8}, "relu"), {"emb"}, Row(m, dim, 0)));
  Harness h(graph, batch, 5);
  for (float& v : h.params) v *= 0.1f;
  h.Forward();
  for (size_t b : {size_t{0}, size_t{17}, size_t{39}}) {
    const std::vector<double> want = NaiveCin(h.inputs[0].data() + b * m * dim, h.params.data(), m, dim, {64, 8}, true);
    RequireNear(std::span<const float>(h.output).subspan(b * h.out_size(), h.out_size()), want, 1e-4);
  }
  // The parameter gradient summed over chunks equals the sum of one-example gradients.
  std::vector<float> pg, one_pg;
  std::vector<std::vector<float>> ig, one_ig;
  h.Gradients(true, &pg, &ig);
  std::vector<double> sum(pg.size(), 0.0);
  for (size_t b = 0; b < batch; ++b) {
    Harness one(graph, 1, 5);
    one.params = h.params;
    one.inputs[0].assign(h.inputs[0].begin() + b * m * dim, h.inputs[0].begin() + (b + 1) * m * dim);
    one.weights.assign(h.weights.begin() + b * h.out_size(), h.weights.begin() + (b + 1) * h.out_size());
    one.Gradients(true, &one_pg, &one_ig);
    for (size_t i = 0; i < pg.size(); ++i) sum[i] += one_pg[i];
    RequireNear(std::span<const float>(ig[0]).subspan(b * m * dim, m * dim),
                std::vector<double>(one_ig[0].begin(), one_ig[0].end()), 1e-4);
  }
  RequireNear(pg, sum, 1e-4);
}

Attrs AttentionAttrs(double heads, double head_dim, const std::string& residual, const std::string& scale) {
  Attrs a;
  a.SetNumber("heads", heads);
  a.SetNumber("head_dim", head_dim);
  if (!residual.empty()) a.SetText("residual", residual);
  if (!scale.empty()) a.SetText("scale", scale);
  return a;
}

// self_attention from the definition, one example: e [n x k]; Wq, Wk, Wv (, Wres) [k x W].
std::vector<double> NaiveAttention(const float* e, const float* w, size_t n, size_t k, size_t heads, size_t dh,
                                   bool residual, bool scale) {
  const size_t width = heads * dh;
  const auto project = [&](size_t m) {
    std::vector<double> out(n * width, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < width; ++c) {
        for (size_t f = 0; f < k; ++f) out[i * width + c] += double{e[i * k + f]} * w[m * k * width + f * width + c];
      }
    }
    return out;
  };
  const std::vector<double> q = project(0), key = project(1), v = project(2);
  std::vector<double> y = residual ? project(3) : std::vector<double>(n * width, 0.0);
  for (size_t h = 0; h < heads; ++h) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<double> p(n);
      double total = 0;
      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (size_t c = h * dh; c < (h + 1) * dh; ++c) dot += q[i * width + c] * key[j * width + c];
        total += p[j] = std::exp(scale ? dot / std::sqrt(static_cast<double>(dh)) : dot);
      }
      for (size_t j = 0; j < n; ++j) {
        for (size_t c = h * dh; c < (h + 1) * dh; ++c) y[i * width + c] += p[j] / total * v[j * width + c];
      }
    }
  }
  for (double& x : y) x = std::max(x, 0.0);
  return y;
}

TEST_CASE("self_attention: shapes and layout", "[graph][ops]") {
  for (const std::string residual : {"", "true", "false"}) {
    const auto graph = Built(OneOpGraph("self_attention", AttentionAttrs(2, 3, residual, ""), {"emb"}, Row(5, 4, 0)));
    const auto& layer = graph->layers()[0];
    CHECK(graph->tensors()[layer.outputs[0]].shape == Shape{5, 6});
    CHECK(layer.params.size() == (residual == "false" ? 3u : 4u));
    for (const Shape& p : layer.params) CHECK(p == Shape{4, 6});
  }
}

TEST_CASE("self_attention: errors", "[graph][ops]") {
  Attrs no_heads;
  no_heads.SetNumber("head_dim", 2);
  CHECK_THAT(BuildError("self_attention", no_heads, {"emb"}, Row(3, 2, 0)), Catch::Contains("missing key 'heads'"));
  Attrs no_dim;
  no_dim.SetNumber("heads", 2);
  CHECK_THAT(BuildError("self_attention", no_dim, {"emb"}, Row(3, 2, 0)), Catch::Contains("missing key 'head_dim'"));
  CHECK_THAT(BuildError("self_attention", AttentionAttrs(-1, 2, "", ""), {"emb"}, Row(3, 2, 0)),
             Catch::Contains("'heads' must be in [1"));
  CHECK_THAT(BuildError("self_attention", AttentionAttrs(1, 2, "yes", ""), {"emb"}, Row(3, 2, 0)),
             Catch::Contains("unknown residual 'yes' (use true or false)"));
  CHECK_THAT(BuildError("self_attention", AttentionAttrs(1, 2, "", "sqrt"), {"emb"}, Row(3, 2, 0)),
             Catch::Contains("unknown scale 'sqrt' (use false or true)"));
  CHECK_THAT(BuildError("self_attention", AttentionAttrs(1, 2, "", ""), {"dense"}, Row(3, 2, 4)),
             Catch::Contains("needs fields [n, k]"));
}

TEST_CASE("self_attention: forward by hand", "[graph][ops]") {
  // n = 2 fields, k = 1, one head of width 1: E = [1, 0], Wq = ln 3, Wk = 1, Wv = 2, Wres = -2.
  // Row 0: scores [ln 3, 0] -> P = [3/4, 1/4] -> O = 3/4 * 2 = 1.5; row 1: scores [0, 0] -> O = 1.
  // y = relu(O + E Wres) = relu([1.5 - 2, 1]) = [0, 1]; without the residual [1.5, 1].
  for (const std::string residual : {"true", "false"}) {
    const auto graph = Built(OneOpGraph("self_attention", AttentionAttrs(1, 1, residual, ""), {"emb"}, Row(2, 1, 0)));
    Harness h(graph, 1, 1);
    h.inputs[0] = {1, 0};
    h.params = {std::log(3.0f), 1, 2};
    if (residual == "true") h.params.push_back(-2);
    h.Forward();
    CHECK(h.output[0] == Approx(residual == "true" ? 0.0 : 1.5).margin(1e-6));
    CHECK(h.output[1] == Approx(1.0).margin(1e-6));
  }
}

TEST_CASE("self_attention: forward against the definition, gradients against finite differences", "[graph][ops]") {
  const size_t n = 4, k = 3, batch = 2;
  for (const std::string residual : {"true", "false"}) {
    for (const std::string scale : {"false", "true"}) {
      SECTION("residual " + residual + ", scale " + scale) {
        const auto graph =
            Built(OneOpGraph("self_attention", AttentionAttrs(2, 3, residual, scale), {"emb"}, Row(n, k, 0)));
        Harness h(graph, batch, 31);
        h.Forward();
        for (size_t b = 0; b < batch; ++b) {
          const std::vector<double> want = NaiveAttention(h.inputs[0].data() + b * n * k, h.params.data(), n, k, 2, 3,
                                                          residual == "true", scale == "true");
          RequireNear(std::span<const float>(h.output).subspan(b * h.out_size(), h.out_size()), want, 1e-5);
        }
        const double largest = h.CheckAll({.step = 2e-3, .abs_tol = 2e-3, .rel_tol = 1e-2, .skip_kinks = true}, 2);
        CHECK(largest > 0.1);
      }
    }
  }
}

TEST_CASE("moe: shapes, layout and errors", "[graph][ops]") {
  const auto graph = Built(OneOpGraph("moe", {}, {"emb", "dense"}, Row(3, 4, 5)));
  const auto& layer = graph->layers()[0];
  CHECK(graph->tensors()[layer.outputs[0]].shape == Shape{4});
  REQUIRE(layer.params.size() == 2);
  CHECK(layer.params[0] == Shape{5, 3});
  CHECK(layer.params[1] == Shape{3});
  CHECK_THAT(BuildError("moe", {}, {"dense", "emb"}, Row(3, 4, 5)), Catch::Contains("the experts [e, d]"));
  CHECK_THAT(BuildError("moe", {}, {"emb"}, Row(3, 4, 5)), Catch::Contains("takes 2 inputs, got 1"));
}

StatusOr<GraphSpec> ParseNetwork(const std::string& layers) {
  const std::string text = "inputs:\n  - {name: emb, kind: embedding}\n  - {name: dense, kind: dense}\nlayers:\n" +
                           layers + "outputs:\n  - {name: ctr, input: logit, loss: sigmoid_cross_entropy}\n";
  return fleetps::graph::ParseGraphSpec(YAML::Load(text), config::YamlContext{.file = "net.yaml", .path = "network"});
}

TEST_CASE("cin, self_attention, moe: the YAML keys", "[graph][ops]") {
  const auto spec = ParseNetwork(
      "  - {name: cin, op: cin, inputs: [emb], layer_sizes: [4, 2], activation: relu}\n"
      "  - {name: att, op: self_attention, inputs: [emb], heads: 2, head_dim: 3, residual: false, scale: true}\n"
      "  - {name: att_sum, op: reduce_sum, inputs: [att], axis: 0}\n"
      "  - {name: mix, op: moe, inputs: [emb, dense]}\n"
      "  - {name: all, op: concat, inputs: [cin, att_sum, mix]}\n"
      "  - {name: logit, op: fc, inputs: [all], size: 1}\n");
  REQUIRE(spec.ok());
  const auto graph = Built(fleetps::graph::BuildGraph(*spec, Row(3, 4, 5)));
  const auto layers = graph->layers();
  CHECK(layers[0].num_params == 4 * 3 * 3 + 2 * 4 * 3);
  CHECK(layers[1].params.size() == 3);  // residual: false
  CHECK(layers[3].num_params == 5 * 3 + 3);
  CHECK(graph->tensors()[layers[4].outputs[0]].shape == Shape{6 + 6 + 4});
  const auto bad = ParseNetwork("  - {name: mix, op: moe, inputs: [emb, dense], size: 3}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("size"));
}

TEST_CASE("moe: forward by hand", "[graph][ops]") {
  // Experts [[1, 2], [5, -2]], x = [ln 3 / 2], Wg = [1, -1], bg = 0: logits +-ln 3 / 2 ->
  // gate [3/4, 1/4] -> y = [0.75 + 1.25, 1.5 - 0.5] = [2, 1].
  const auto graph = Built(OneOpGraph("moe", {}, {"emb", "dense"}, Row(2, 2, 1)));
  Harness h(graph, 1, 1);
  h.inputs[0] = {1, 2, 5, -2};
  h.inputs[1] = {std::log(3.0f) / 2};
  h.params = {1, -1, 0, 0};
  h.Forward();
  CHECK(h.output[0] == Approx(2.0).epsilon(1e-6));
  CHECK(h.output[1] == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("moe: forward against the definition, gradients against finite differences", "[graph][ops]") {
  const size_t e = 3, d = 4, g = 5, batch = 3;
  const auto graph = Built(OneOpGraph("moe", {}, {"emb", "dense"}, Row(e, d, g)));
  Harness h(graph, batch, 41);
  h.Forward();
  for (size_t b = 0; b < batch; ++b) {
    std::vector<double> logit(e), y(d, 0.0);
    double total = 0;
    for (size_t i = 0; i < e; ++i) {
      logit[i] = h.params[g * e + i];
      for (size_t j = 0; j < g; ++j) logit[i] += double{h.inputs[1][b * g + j]} * h.params[j * e + i];
      total += std::exp(logit[i]);
    }
    for (size_t i = 0; i < e; ++i) {
      for (size_t j = 0; j < d; ++j) y[j] += std::exp(logit[i]) / total * h.inputs[0][(b * e + i) * d + j];
    }
    RequireNear(std::span<const float>(h.output).subspan(b * d, d), y, 1e-6);
  }
  const double largest = h.CheckAll({.step = 2e-3, .abs_tol = 1e-3, .rel_tol = 1e-2});
  CHECK(largest > 0.1);
}

TEST_CASE("cin, self_attention, moe: initial values", "[graph][ops]") {
  const auto check = [](const std::string& op, Attrs attrs, std::vector<std::string> inputs, const RowShape& row) {
    const auto graph = Built(OneOpGraph(op, std::move(attrs), std::move(inputs), row));
    const GraphExecutor executor(graph, TestGemm());
    std::vector<float> params(executor.num_params(), kNaN);
    UniformRandom rng(3);
    executor.InitParams(params, &rng);
    std::vector<float> limits;  // per parameter entry
    for (const Shape& p : graph->layers()[0].params) {
      float limit = 0;  // a bias: zero
      if (op == "cin") limit = std::sqrt(6.0f / static_cast<float>(p[1] * p[2] + p[0]));
      if (op != "cin" && p.size() == 2) limit = std::sqrt(6.0f / static_cast<float>(p[0] + p[1]));
      limits.insert(limits.end(), fleetps::graph::NumElements(p), limit);
    }
    REQUIRE(limits.size() == params.size());
    float largest = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(std::fabs(params[i]) <= limits[i]);
      if (limits[i] > 0) largest = std::max(largest, std::fabs(params[i]) / limits[i]);
    }
    CHECK(largest > 0.5f);
  };
  check("cin", CinAttrs({4, 3}, ""), {"emb"}, Row(5, 2, 0));
  check("self_attention", AttentionAttrs(2, 3, "", ""), {"emb"}, Row(5, 4, 0));
  check("moe", {}, {"emb", "dense"}, Row(3, 4, 5));
}

// xDeepFM's CIN, AutoInt's attention and an MMoE gate in one graph on the executor:
//   cin(emb) [5]; flatten(self_attention(emb)) [16];
//   moe(reshape(concat(fc(dense), fc(att))) [2, 3], dense) [3]; fc(concat of the three) [1].
GraphSpec MixedSpec() {
  GraphSpec spec;
  spec.where = "test";
  spec.inputs = {GraphInput{.name = "emb", .kind = InputKind::kEmbedding, .where = "test"},
                 GraphInput{.name = "dense", .kind = InputKind::kDense, .where = "test"}};
  Attrs fc;
  fc.SetNumber("size", 3);
  fc.SetText("activation", "tanh");
  Attrs shape;
  shape.SetList("shape", {2, 3});
  Attrs logit;
  logit.SetNumber("size", 1);
  spec.layers = {Layer("cin", "cin", {"emb"}, CinAttrs({3, 2}, "relu")),
                 Layer("att", "self_attention", {"emb"}, AttentionAttrs(2, 2, "", "true")),
                 Layer("att_flat", "flatten", {"att"}),
                 Layer("e0", "fc", {"dense"}, fc),
                 Layer("e1", "fc", {"att_flat"}, fc),
                 Layer("experts", "concat", {"e0", "e1"}),
                 Layer("experts2", "reshape", {"experts"}, shape),
                 Layer("mix", "moe", {"experts2", "dense"}),
                 Layer("all", "concat", {"cin", "att_flat", "mix"}),
                 Layer("logit", "fc", {"all"}, logit)};
  spec.outputs.push_back(GraphOutput{.name = "click", .input = "logit", .where = "test"});
  return spec;
}

TEST_CASE("cin, self_attention and moe in one graph: executor gradients against finite differences", "[graph][ops]") {
  const auto graph = Built(fleetps::graph::BuildGraph(MixedSpec(), Row(4, 3, 2)));
  const GraphExecutor executor(graph, TestGemm());
  const size_t batch = 3;
  std::vector<float> params(executor.num_params());
  UniformRandom rng(17);
  executor.InitParams(params, &rng);
  std::vector<float> row = RandomVector(batch * executor.row_width(), 18);
  const std::vector<float> logit_grads = RandomVector(batch, 19);
  GraphExecutor::Workspace ws;
  std::vector<float> logits(batch);
  const auto f = [&] {
    executor.Forward(params, row, batch, &ws, logits);
    double sum = 0;
    for (size_t b = 0; b < batch; ++b) sum += double{logit_grads[b]} * logits[b];
    return sum;
  };
  f();
  std::vector<float> pg(params.size(), 9.0f), rg(row.size(), 9.0f);
  executor.Backward(params, row, batch, logit_grads, &ws, pg, rg, nullptr);
  const GradientCheckOptions options{.step = 2e-3, .abs_tol = 1e-3, .rel_tol = 1e-2, .skip_kinks = true};
  const GradientCheckResult p = CheckGradient(f, params, pg, options);
  const GradientCheckResult r = CheckGradient(f, row, rg, options);
  CHECK(p.skipped <= 4);
  CHECK(r.skipped <= 2);
  CHECK(p.max_gradient > 0.05);
  CHECK(r.max_gradient > 0.05);
}

}  // namespace
}  // namespace fleetps::trainer::graph::advanced_ops_test
