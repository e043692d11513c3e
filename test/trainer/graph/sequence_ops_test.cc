// The sequence ops target_attention (DIN) and gru (DIEN): their schemas' shapes and errors,
// each kernel's forward against values worked out by hand and against a naive
// double-precision reference written here from the maths, every parameter and input gradient
// (sequence, target) against central finite differences, the mask's part (padded rows change
// nothing and get no gradient; an example with no real position gives zeros), and both ops in
// one graph on the executor.
//
// The graphs here stand a sequence in with the inputs there are: the sequence [L, k] is an
// embedding input of L slots of width k, its mask [L] the embed_w input, the target [k] the
// dense input.

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
namespace fleetps::trainer::graph::sequence_ops_test {
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

// Inputs seq [len, k], mask [len] and target [dense] (dense = k unless a test wants a wrong one).
RowShape SeqRow(size_t len, size_t k, size_t dense = 0) {
  return RowShape{.slot_widths = std::vector<size_t>(len, k), .dense_dim = dense == 0 ? k : dense};
}

GraphSpec SeqSpec() {
  GraphSpec spec;
  spec.where = "test";
  spec.inputs = {GraphInput{.name = "seq", .kind = InputKind::kEmbedding, .where = "test"},
                 GraphInput{.name = "mask", .kind = InputKind::kEmbedW, .where = "test"},
                 GraphInput{.name = "target", .kind = InputKind::kDense, .where = "test"}};
  return spec;
}

// `op` over `inputs` of SeqSpec, then its sum as the logit.
StatusOr<std::shared_ptr<const Graph>> OneOpGraph(const std::string& op, Attrs attrs, std::vector<std::string> inputs,
                                                  const RowShape& row) {
  return testing::OneOpGraph(SeqSpec(), op, std::move(attrs), std::move(inputs), row);
}

std::string BuildError(const std::string& op, Attrs attrs, std::vector<std::string> inputs, const RowShape& row) {
  return testing::BuildMessage(OneOpGraph(op, std::move(attrs), std::move(inputs), row));
}

void RequireNear(std::span<const float> got, std::span<const double> want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("entry " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

bool AllFinite(std::span<const float> v) {
  return std::ranges::all_of(v, [](float x) { return std::isfinite(x); });
}

// The first layer of a graph as a bare kernel on its own buffers, over a batch of sequences
// of the given lengths: the sequence random in its real rows and zero after them (as the
// trainer fills it), the mask 1 then 0, the target, parameters and the objective
// sum(weights * y) random.
class Harness {
 public:
  Harness(std::shared_ptr<const Graph> graph, std::vector<size_t> lengths, uint64_t seed)
      : graph_(std::move(graph)), lengths_(std::move(lengths)), batch_(lengths_.size()) {
    const auto& layer = graph_->layers()[0];
    const auto tensors = graph_->tensors();
    for (size_t t : layer.inputs) in_shapes_.push_back(tensors[t].shape);
    out_shape_ = tensors[layer.outputs[0]].shape;
    len_ = in_shapes_[0][0];
    k_ = in_shapes_[0][1];
    kernel_ = MakeKernel(KernelContext{layer, in_shapes_, {&out_shape_, 1}, TestGemm()});
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      inputs.push_back(RandomVector(batch_ * fleetps::graph::NumElements(in_shapes_[i]), seed + i));
    }
    for (size_t b = 0; b < batch_; ++b) {
      for (size_t l = 0; l < len_; ++l) {
        const bool real = l < lengths_[b];
        inputs[1][b * len_ + l] = real ? 1.0f : 0.0f;
        if (!real) SetPadded(b, l, 0.0f);
      }
    }
    params = RandomVector(layer.num_params, seed + 10, -0.7f, 0.7f);
    weights = RandomVector(batch_ * fleetps::graph::NumElements(out_shape_), seed + 11);
    output.resize(weights.size());
    scratch.resize(kernel_->ScratchFloats(batch_));
  }

  size_t out_size() const { return fleetps::graph::NumElements(out_shape_); }
  size_t len() const { return len_; }
  size_t k() const { return k_; }
  const std::vector<size_t>& lengths() const { return lengths_; }
  const float* seq(size_t b) const { return inputs[0].data() + b * len_ * k_; }
  const float* mask(size_t b) const { return inputs[1].data() + b * len_; }
  const float* target(size_t b) const { return inputs[2].data() + b * k_; }
  std::span<const float> out(size_t b) const {
    return std::span<const float>(output).subspan(b * out_size(), out_size());
  }

  // Example b's sequence row l, every entry `v`.
  void SetPadded(size_t b, size_t l, float v) { std::fill_n(inputs[0].begin() + (b * len_ + l) * k_, k_, v); }

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

  // Checks every parameter gradient and the sequence's and target's; the mask's is left
  // alone (exactly 0 after the 0.25 is taken off). Returns the largest gradient seen.
  double CheckAll(const GradientCheckOptions& options, size_t max_skipped = 0) {
    std::vector<float> pg;
    std::vector<std::vector<float>> ig;
    Gradients(true, &pg, &ig);
    CHECK(std::ranges::all_of(ig[1], [](float v) { return v == 0.0f; }));
    const auto f = [&] { return Objective(); };
    double largest = 0;
    const auto check = [&](std::span<float> x, std::span<const float> analytic, const char* what) {
      INFO(what);
      const GradientCheckResult r = CheckGradient(f, x, analytic, options);
      CHECK(r.skipped <= max_skipped);
      largest = std::max(largest, r.max_gradient);
    };
    check(params, pg, "parameters");
    check(inputs[0], ig[0], "sequence");
    if (inputs.size() > 2) check(inputs[2], ig[2], "target");
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
  std::vector<size_t> lengths_;
  size_t batch_;
  size_t len_ = 0, k_ = 0;
  std::vector<Shape> in_shapes_;
  Shape out_shape_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<std::span<const float>> in_views_;
  std::span<float> out_view_;
};

// The mask's contract, for any op over (seq, mask, ...): rewriting the padded rows (with
// `fill`) changes no output and no gradient, the padded rows get no gradient, an example
// with no real position gives zeros, and nothing is NaN.
void CheckMasking(Harness& h, std::span<const float> fills) {
  std::vector<float> pg;
  std::vector<std::vector<float>> ig;
  h.Gradients(true, &pg, &ig);
  const std::vector<float> out = h.output;
  CHECK(AllFinite(out));
  CHECK(AllFinite(pg));
  for (const auto& grad : ig) CHECK(AllFinite(grad));
  for (size_t b = 0; b < h.lengths().size(); ++b) {
    for (size_t l = h.lengths()[b]; l < h.len(); ++l) {
      for (size_t j = 0; j < h.k(); ++j) CHECK(ig[0][(b * h.len() + l) * h.k() + j] == 0.0f);
    }
    if (h.lengths()[b] == 0) {
      for (float v : h.out(b)) CHECK(v == 0.0f);
      if (ig.size() > 2) {
        for (size_t j = 0; j < h.k(); ++j) CHECK(ig[2][b * h.k() + j] == 0.0f);
      }
    }
  }
  for (float fill : fills) {
    INFO("padded rows set to " << fill);
    for (size_t b = 0; b < h.lengths().size(); ++b) {
      for (size_t l = h.lengths()[b]; l < h.len(); ++l) h.SetPadded(b, l, fill);
    }
    std::vector<float> pg2;
    std::vector<std::vector<float>> ig2;
    h.Gradients(true, &pg2, &ig2);
    CHECK(h.output == out);
    CHECK(pg2 == pg);
    CHECK(ig2 == ig);
  }
}

// ---------------------------------------------------------------- target_attention

Attrs AttentionAttrs(std::vector<double> hidden, const std::string& activation, const std::string& softmax,
                     const std::string& scale = "") {
  Attrs a;
  a.SetList("hidden", std::move(hidden));
  if (!activation.empty()) a.SetText("activation", activation);
  if (!softmax.empty()) a.SetText("softmax", softmax);
  if (!scale.empty()) a.SetText("scale", scale);
  return a;
}

// target_attention from the definition, one example.
std::vector<double> NaiveTargetAttention(const float* seq, const float* mask, const float* target, const float* params,
                                         size_t len, size_t k, const std::vector<size_t>& hidden, bool relu,
                                         bool softmax, bool scale) {
  std::vector<size_t> widths = {4 * k};
  widths.insert(widths.end(), hidden.begin(), hidden.end());
  widths.push_back(1);
  std::vector<double> scores;
  std::vector<size_t> real;
  for (size_t l = 0; l < len; ++l) {
    if (mask[l] != 1.0f) continue;
    const float* s = seq + l * k;
    std::vector<double> x;
    for (size_t j = 0; j < k; ++j) x.push_back(target[j]);
    for (size_t j = 0; j < k; ++j) x.push_back(s[j]);
    for (size_t j = 0; j < k; ++j) x.push_back(double{target[j]} - s[j]);
    for (size_t j = 0; j < k; ++j) x.push_back(double{target[j]} * s[j]);
    const float* p = params;
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      const size_t in = widths[i], out = widths[i + 1];
      std::vector<double> next(p + in * out, p + in * out + out);  // b
      for (size_t o = 0; o < out; ++o) {
        for (size_t c = 0; c < in; ++c) next[o] += x[c] * p[c * out + o];
        if (i + 2 < widths.size()) next[o] = relu ? std::max(next[o], 0.0) : 1.0 / (1.0 + std::exp(-next[o]));
      }
      p += in * out + out;
      x = std::move(next);
    }
    scores.push_back(scale ? x[0] / std::sqrt(static_cast<double>(k)) : x[0]);
    real.push_back(l);
  }
  if (softmax) {
    double total = 0;
    for (double a : scores) total += std::exp(a);
    for (double& a : scores) a = std::exp(a) / total;
  }
  std::vector<double> y(k, 0.0);
  for (size_t i = 0; i < real.size(); ++i) {
    for (size_t j = 0; j < k; ++j) y[j] += scores[i] * seq[real[i] * k + j];
  }
  return y;
}

TEST_CASE("target_attention: shapes and layout", "[graph][ops][sequence]") {
  const auto graph =
      Built(OneOpGraph("target_attention", AttentionAttrs({3, 2}, "", ""), {"seq", "mask", "target"}, SeqRow(5, 4)));
  const auto& layer = graph->layers()[0];
  CHECK(graph->tensors()[layer.outputs[0]].shape == Shape{4});
  CHECK(layer.params == std::vector<Shape>{{16, 3}, {3}, {3, 2}, {2}, {2, 1}, {1}});
  CHECK(layer.num_params == 16 * 3 + 3 + 3 * 2 + 2 + 2 + 1);
  // Without `hidden`: DIN's [80, 40]; hidden: [] is one linear layer.
  const auto din = Built(OneOpGraph("target_attention", {}, {"seq", "mask", "target"}, SeqRow(5, 4)));
  CHECK(din->layers()[0].params == std::vector<Shape>{{16, 80}, {80}, {80, 40}, {40}, {40, 1}, {1}});
  const auto linear =
      Built(OneOpGraph("target_attention", AttentionAttrs({}, "", ""), {"seq", "mask", "target"}, SeqRow(5, 4)));
  CHECK(linear->layers()[0].params == std::vector<Shape>{{16, 1}, {1}});
}

TEST_CASE("target_attention: errors", "[graph][ops][sequence]") {
  const std::vector<std::string> in = {"seq", "mask", "target"};
  CHECK_THAT(BuildError("target_attention", {}, {"seq", "mask"}, SeqRow(5, 4)),
             Catch::Contains("takes 3 inputs, got 2"));
  CHECK_THAT(BuildError("target_attention", {}, {"target", "mask", "target"}, SeqRow(5, 4)),
             Catch::Contains("the first input must be a sequence [L, k] (positions x embedding), got [4]"));
  CHECK_THAT(BuildError("target_attention", {}, {"seq", "target", "target"}, SeqRow(5, 4)),
             Catch::Contains("the second input must be the sequence's mask [5] (1 real, 0 padding), got [4]"));
  CHECK_THAT(
      BuildError("target_attention", {}, in, SeqRow(5, 4, 3)),
      Catch::Contains("the third input must be the target [4] (one embedding of the sequence's width), got [3]"));
  CHECK_THAT(BuildError("target_attention", AttentionAttrs({8, 0}, "", ""), in, SeqRow(5, 4)),
             Catch::Contains("'hidden' widths must be in [1, "));
  CHECK_THAT(BuildError("target_attention", AttentionAttrs({8}, "tanh", ""), in, SeqRow(5, 4)),
             Catch::Contains("unknown activation 'tanh' (use sigmoid or relu)"));
  CHECK_THAT(BuildError("target_attention", AttentionAttrs({8}, "", "yes"), in, SeqRow(5, 4)),
             Catch::Contains("unknown softmax 'yes' (use false or true)"));
  CHECK_THAT(BuildError("target_attention", AttentionAttrs({8}, "", "", "sqrt"), in, SeqRow(5, 4)),
             Catch::Contains("unknown scale 'sqrt' (use false or true)"));
  Attrs word;
  word.SetText("hidden", "wide");
  CHECK_THAT(BuildError("target_attention", word, in, SeqRow(5, 4)),
             Catch::Contains("'hidden' must be a list of integers"));
}

TEST_CASE("target_attention: forward by hand", "[graph][ops][sequence]") {
  // k = 1, L = 3: s = [1, 3, (padded) 100], t = 2.
  const auto run = [](const Attrs& attrs, std::vector<float> params) {
    const auto graph = Built(OneOpGraph("target_attention", attrs, {"seq", "mask", "target"}, SeqRow(3, 1)));
    Harness h(graph, {2}, 1);
    h.inputs[0] = {1, 3, 100};
    h.inputs[2] = {2};
    h.params = std::move(params);
    h.Forward();
    return double{h.output[0]};
  };
  // Linear (hidden: []): a_l = c s_l with W = [0, c, 0, 0], b = 0, c = ln 3 / 2: a = [c, 3c].
  // No softmax: y = c * 1 + 3c * 3 = 10c = 5 ln 3. Softmax: w = [1/4, 3/4], y = 1/4 + 9/4 = 2.5.
  const float c = std::log(3.0f) / 2;
  CHECK(run(AttentionAttrs({}, "", ""), {0, c, 0, 0, 0}) == Approx(5 * std::log(3.0)).epsilon(1e-6));
  CHECK(run(AttentionAttrs({}, "", "true"), {0, c, 0, 0, 0}) == Approx(2.5).epsilon(1e-6));
  // hidden: [1]: h_l = act(t - s_l + 0.5) (W_1 = [1, -1, 0, 0], b_1 = 0.5), a_l = 2 h_l - 1.
  // relu: h = [1.5, 0], a = [2, -1], y = 2 - 3 = -1; with softmax w = [e^3, 1] / (e^3 + 1).
  const std::vector<float> mlp = {1, -1, 0, 0, 0.5f, 2, -1};
  CHECK(run(AttentionAttrs({1}, "relu", ""), mlp) == Approx(-1.0).epsilon(1e-6));
  const double e3 = std::exp(3.0);
  CHECK(run(AttentionAttrs({1}, "relu", "true"), mlp) == Approx((e3 + 3) / (e3 + 1)).epsilon(1e-6));
  // sigmoid: h = [sigmoid(1.5), sigmoid(-0.5)], y = a_0 + 3 a_1.
  const auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  CHECK(run(AttentionAttrs({1}, "", ""), mlp) ==
        Approx(2 * sigmoid(1.5) - 1 + 3 * (2 * sigmoid(-0.5) - 1)).epsilon(1e-6));
}

TEST_CASE("target_attention: forward against the definition, gradients against finite differences",
          "[graph][ops][sequence]") {
  const size_t len = 5, k = 3;
  const std::vector<size_t> lengths = {3, 0, 5, 1};
  for (const std::string act : {"sigmoid", "relu"}) {
    for (const std::string softmax : {"false", "true"}) {
      for (const std::string scale : {"false", "true"}) {
        SECTION(act + ", softmax " + softmax + ", scale " + scale) {
          const auto graph = Built(OneOpGraph("target_attention", AttentionAttrs({4, 3}, act, softmax, scale),
                                              {"seq", "mask", "target"}, SeqRow(len, k)));
          Harness h(graph, lengths, 51);
          h.Forward();
          for (size_t b = 0; b < lengths.size(); ++b) {
            const std::vector<double> want =
                NaiveTargetAttention(h.seq(b), h.mask(b), h.target(b), h.params.data(), len, k, {4, 3}, act == "relu",
                                     softmax == "true", scale == "true");
            RequireNear(h.out(b), want, 1e-5);
          }
          const double largest = h.CheckAll(
              {.step = 2e-3, .abs_tol = 1e-3, .rel_tol = 1e-2, .skip_kinks = act == "relu"}, act == "relu" ? 3 : 0);
          CHECK(largest > 0.1);
        }
      }
    }
  }
}

TEST_CASE("target_attention: padded positions change nothing; no real position gives zeros", "[graph][ops][sequence]") {
  const float fills[] = {5.0f, -300.0f, kNaN, std::numeric_limits<float>::infinity()};
  for (const std::string softmax : {"false", "true"}) {
    SECTION("softmax " + softmax) {
      const auto graph = Built(
          OneOpGraph("target_attention", AttentionAttrs({4}, "", softmax), {"seq", "mask", "target"}, SeqRow(4, 3)));
      Harness h(graph, {2, 0, 4, 1}, 61);
      CheckMasking(h, fills);
      // A batch with no real position at all.
      Harness none(graph, {0, 0}, 62);
      CheckMasking(none, fills);
      std::vector<float> pg;
      std::vector<std::vector<float>> ig;
      none.Gradients(true, &pg, &ig);
      CHECK(std::ranges::all_of(pg, [](float v) { return v == 0.0f; }));
    }
  }
}

// ---------------------------------------------------------------- gru

Attrs GruAttrs(double hidden, const std::string& sequences) {
  Attrs a;
  a.SetNumber("hidden", hidden);
  if (!sequences.empty()) a.SetText("sequences", sequences);
  return a;
}

// gru from the definition, one example: the final state [h] or every state [L, h].
std::vector<double> NaiveGru(const float* x, const float* mask, const float* params, size_t len, size_t k, size_t h,
                             bool sequences) {
  const float* w = params;
  const float* u = w + k * 3 * h;
  const float* b = u + h * 3 * h;
  const float* bhn = b + 3 * h;
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> state(h, 0.0), all(len * h, 0.0);
  for (size_t l = 0; l < len; ++l) {
    if (mask[l] != 1.0f) continue;
    std::vector<double> gx(3 * h), gh(3 * h);
    for (size_t c = 0; c < 3 * h; ++c) {
      gx[c] = b[c];
      gh[c] = 0;
      for (size_t i = 0; i < k; ++i) gx[c] += double{x[l * k + i]} * w[i * 3 * h + c];
      for (size_t i = 0; i < h; ++i) gh[c] += state[i] * u[i * 3 * h + c];
    }
    std::vector<double> next(h);
    for (size_t j = 0; j < h; ++j) {
      const double z = sigmoid(gx[j] + gh[j]);
      const double r = sigmoid(gx[h + j] + gh[h + j]);
      const double n = std::tanh(gx[2 * h + j] + r * (gh[2 * h + j] + bhn[j]));
      next[j] = (1 - z) * n + z * state[j];
    }
    state = next;
    std::copy(state.begin(), state.end(), all.begin() + static_cast<std::ptrdiff_t>(l * h));
  }
  return sequences ? all : state;
}

TEST_CASE("gru: shapes and layout", "[graph][ops][sequence]") {
  for (const std::string sequences : {"", "false", "true"}) {
    const auto graph = Built(OneOpGraph("gru", GruAttrs(3, sequences), {"seq", "mask"}, SeqRow(5, 4)));
    const auto& layer = graph->layers()[0];
    CHECK(graph->tensors()[layer.outputs[0]].shape == (sequences == "true" ? Shape{5, 3} : Shape{3}));
    CHECK(layer.params == std::vector<Shape>{{4, 9}, {3, 9}, {9}, {3}});
    CHECK(layer.num_params == 4 * 9 + 3 * 9 + 9 + 3);
  }
}

TEST_CASE("gru: errors", "[graph][ops][sequence]") {
  CHECK_THAT(BuildError("gru", {}, {"seq", "mask"}, SeqRow(5, 4)),
             Catch::Contains("missing key 'hidden' (the width of the GRU's state)"));
  CHECK_THAT(BuildError("gru", GruAttrs(-2, ""), {"seq", "mask"}, SeqRow(5, 4)),
             Catch::Contains("'hidden' must be in [1, "));
  CHECK_THAT(BuildError("gru", GruAttrs(2.5, ""), {"seq", "mask"}, SeqRow(5, 4)),
             Catch::Contains("'hidden' must be an integer"));
  CHECK_THAT(BuildError("gru", GruAttrs(2, "all"), {"seq", "mask"}, SeqRow(5, 4)),
             Catch::Contains("unknown sequences 'all' (use false or true)"));
  CHECK_THAT(BuildError("gru", GruAttrs(2, ""), {"seq"}, SeqRow(5, 4)), Catch::Contains("takes 2 inputs, got 1"));
  CHECK_THAT(BuildError("gru", GruAttrs(2, ""), {"mask", "mask"}, SeqRow(5, 4)),
             Catch::Contains("the first input must be a sequence [L, k]"));
  CHECK_THAT(BuildError("gru", GruAttrs(2, ""), {"seq", "target"}, SeqRow(5, 4)),
             Catch::Contains("the second input must be the sequence's mask [5] (1 real, 0 padding), got [4]"));
}

TEST_CASE("gru: forward by hand", "[graph][ops][sequence]") {
  // k = h = 1, L = 3: x = [1, 2, (padded) 7]. W = [0, 0, 1], U = [0, 0, 2], b = [ln 3, 0, 0],
  // bhn = 0.5: z = 3/4 and r = 1/2 at every step.
  //   step 0 (h = 0): n_0 = tanh(1 + 1/2 * 0.5),            h_1 = n_0 / 4
  //   step 1:         n_1 = tanh(2 + 1/2 * (2 h_1 + 0.5)),  h_2 = n_1 / 4 + 3/4 h_1
  //   step 2 padded:  h_3 = h_2.
  // (The reset-before form, tanh(x Wn + (r h) Un + bhn), would give n_0 = tanh(1.5).)
  const double n0 = std::tanh(1.25), h1 = n0 / 4;
  const double n1 = std::tanh(2 + 0.5 * (2 * h1 + 0.5)), h2 = n1 / 4 + 0.75 * h1;
  for (const std::string sequences : {"false", "true"}) {
    const auto graph = Built(OneOpGraph("gru", GruAttrs(1, sequences), {"seq", "mask"}, SeqRow(3, 1)));
    Harness h(graph, {2}, 1);
    h.inputs[0] = {1, 2, 7};
    h.params = {0, 0, 1, 0, 0, 2, std::log(3.0f), 0, 0, 0.5f};
    h.Forward();
    if (sequences == "true") {
      REQUIRE(h.output.size() == 3);
      CHECK(h.output[0] == Approx(h1).epsilon(1e-6));
      CHECK(h.output[1] == Approx(h2).epsilon(1e-6));
      CHECK(h.output[2] == 0.0f);
    } else {
      REQUIRE(h.output.size() == 1);
      CHECK(h.output[0] == Approx(h2).epsilon(1e-6));
    }
  }
}

TEST_CASE("gru: forward against the definition, gradients against finite differences", "[graph][ops][sequence]") {
  const size_t len = 4, k = 3, hidden = 3;
  const std::vector<size_t> lengths = {3, 0, 4, 1};
  for (const std::string sequences : {"false", "true"}) {
    SECTION("sequences " + sequences) {
      const auto graph = Built(OneOpGraph("gru", GruAttrs(hidden, sequences), {"seq", "mask"}, SeqRow(len, k)));
      Harness h(graph, lengths, 71);
      h.Forward();
      for (size_t b = 0; b < lengths.size(); ++b) {
        const std::vector<double> want =
            NaiveGru(h.seq(b), h.mask(b), h.params.data(), len, k, hidden, sequences == "true");
        RequireNear(h.out(b), want, 1e-5);
      }
      const double largest = h.CheckAll({.step = 2e-3, .abs_tol = 1e-3, .rel_tol = 1e-2});
      CHECK(largest > 0.1);
    }
  }
}

TEST_CASE("gru: padded positions change nothing; no real position gives zeros", "[graph][ops][sequence]") {
  // The padded rows are zero by the input's contract; other finite values change nothing
  // either (they enter only the projection's rows that are never used, and dW times zeros).
  const float fills[] = {5.0f, -300.0f};
  for (const std::string sequences : {"false", "true"}) {
    SECTION("sequences " + sequences) {
      const auto graph = Built(OneOpGraph("gru", GruAttrs(3, sequences), {"seq", "mask"}, SeqRow(4, 2)));
      Harness h(graph, {2, 0, 4, 1}, 81);
      CheckMasking(h, fills);
      Harness none(graph, {0, 0}, 82);
      CheckMasking(none, fills);
      std::vector<float> pg;
      std::vector<std::vector<float>> ig;
      none.Gradients(true, &pg, &ig);
      CHECK(std::ranges::all_of(pg, [](float v) { return v == 0.0f; }));
    }
  }
}

TEST_CASE("gru: a long sequence keeps finite, bounded states", "[graph][ops][sequence]") {
  const size_t len = 200;
  const auto graph = Built(OneOpGraph("gru", GruAttrs(4, "true"), {"seq", "mask"}, SeqRow(len, 3)));
  Harness h(graph, {len, 150, 7}, 91);
  for (float& v : h.params) v *= 4;  // saturating gates
  h.Forward();
  CHECK(AllFinite(h.output));
  CHECK(std::ranges::all_of(h.output, [](float v) { return std::fabs(v) <= 1.0f; }));
  std::vector<float> pg;
  std::vector<std::vector<float>> ig;
  h.Gradients(true, &pg, &ig);
  CHECK(AllFinite(pg));
  CHECK(AllFinite(ig[0]));
}

// ---------------------------------------------------------------- both

TEST_CASE("target_attention, gru: initial values", "[graph][ops][sequence]") {
  const auto check = [](const std::string& op, Attrs attrs, std::vector<std::string> inputs) {
    const auto graph = Built(OneOpGraph(op, std::move(attrs), std::move(inputs), SeqRow(5, 4)));
    const GraphExecutor executor(graph, TestGemm());
    std::vector<float> params(executor.num_params(), kNaN);
    UniformRandom rng(3);
    executor.InitParams(params, &rng);
    std::vector<float> limits;  // per parameter entry; a bias: zero
    for (const Shape& p : graph->layers()[0].params) {
      const float limit = p.size() == 2 ? std::sqrt(6.0f / static_cast<float>(p[0] + p[1])) : 0.0f;
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
  check("target_attention", AttentionAttrs({6, 3}, "", ""), {"seq", "mask", "target"});
  check("gru", GruAttrs(3, ""), {"seq", "mask"});
}

StatusOr<GraphSpec> ParseNetwork(const std::string& layers) {
  const std::string text =
      "inputs:\n  - {name: seq, kind: embedding}\n  - {name: mask, kind: embed_w}\n  - {name: target, kind: dense}\n"
      "layers:\n" +
      layers + "outputs:\n  - {name: ctr, input: logit, loss: sigmoid_cross_entropy}\n";
  return fleetps::graph::ParseGraphSpec(YAML::Load(text), config::YamlContext{.file = "net.yaml", .path = "network"});
}

TEST_CASE("target_attention, gru: the YAML keys", "[graph][ops][sequence]") {
  const auto spec = ParseNetwork(
      "  - {name: att, op: target_attention, inputs: [seq, mask, target], hidden: [8, 4], activation: relu,\n"
      "     softmax: true, scale: true}\n"
      "  - {name: states, op: gru, inputs: [seq, mask], hidden: 5, sequences: true}\n"
      "  - {name: interest, op: gru, inputs: [states, mask], hidden: 2}\n"
      "  - {name: all, op: concat, inputs: [att, interest]}\n"
      "  - {name: logit, op: fc, inputs: [all], size: 1}\n");
  REQUIRE(spec.ok());
  const auto graph = Built(fleetps::graph::BuildGraph(*spec, SeqRow(6, 4)));
  const auto layers = graph->layers();
  CHECK(layers[0].params == std::vector<Shape>{{16, 8}, {8}, {8, 4}, {4}, {4, 1}, {1}});
  CHECK(graph->tensors()[layers[1].outputs[0]].shape == Shape{6, 5});
  CHECK(layers[2].params == std::vector<Shape>{{5, 6}, {2, 6}, {6}, {2}});
  CHECK(graph->tensors()[layers[3].outputs[0]].shape == Shape{6});
  const auto bad = ParseNetwork("  - {name: logit, op: gru, inputs: [seq, mask], hidden: 1, size: 3}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("size"));
}

// DIN's attention and DIEN's two GRU layers over one sequence, on the executor:
//   att = target_attention(seq, mask, target) [k]; states = gru(seq, mask) [L, 3];
//   interest = gru(states, mask) [2]; logit = fc(concat(att, interest, target)).
TEST_CASE("target_attention and gru in one graph: executor gradients against finite differences",
          "[graph][ops][sequence]") {
  const size_t len = 4, k = 3, batch = 3;
  const std::vector<size_t> lengths = {2, 4, 0};
  GraphSpec spec = SeqSpec();
  Attrs logit;
  logit.SetNumber("size", 1);
  spec.layers = {
      Layer("att", "target_attention", {"seq", "mask", "target"}, AttentionAttrs({4, 3}, "", "true", "true")),
      Layer("states", "gru", {"seq", "mask"}, GruAttrs(3, "true")),
      Layer("interest", "gru", {"states", "mask"}, GruAttrs(2, "")),
      Layer("all", "concat", {"att", "interest", "target"}), Layer("logit", "fc", {"all"}, logit)};
  spec.outputs.push_back(GraphOutput{.name = "click", .input = "logit", .where = "test"});
  const auto graph = Built(fleetps::graph::BuildGraph(std::move(spec), SeqRow(len, k)));
  const GraphExecutor executor(graph, TestGemm());
  REQUIRE(executor.row_width() == len * (1 + k) + k);
  std::vector<float> params(executor.num_params());
  UniformRandom rng(17);
  executor.InitParams(params, &rng);
  // Row: per position [mask | embedding], then the target.
  std::vector<float> row = RandomVector(batch * executor.row_width(), 18);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t l = 0; l < len; ++l) {
      float* block = row.data() + b * executor.row_width() + l * (1 + k);
      block[0] = l < lengths[b] ? 1.0f : 0.0f;
      if (l >= lengths[b]) std::fill_n(block + 1, k, 0.0f);
    }
  }
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
  // The mask's columns get no gradient (and a nudge of one leaves it real or padded: the
  // finite differences there are zero too).
  for (size_t b = 0; b < batch; ++b) {
    for (size_t l = 0; l < len; ++l) CHECK(rg[b * executor.row_width() + l * (1 + k)] == 0.0f);
  }
  const GradientCheckOptions options{.step = 2e-3, .abs_tol = 1e-3, .rel_tol = 1e-2};
  const GradientCheckResult p = CheckGradient(f, params, pg, options);
  const GradientCheckResult r = CheckGradient(f, row, rg, options);
  CHECK(p.max_gradient > 0.05);
  CHECK(r.max_gradient > 0.05);
}

}  // namespace
}  // namespace fleetps::trainer::graph::sequence_ops_test
