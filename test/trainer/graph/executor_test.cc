// GraphExecutor: the inputs' views of the activation row and the scatter of their gradients
// back into it, layers declared out of execution order, workspaces reused across batch sizes,
// and the ready callback covering every parameter.

#include "trainer/graph/executor.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include "test/trainer/graph/graph_test_util.h"
#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::graph {
namespace {

using fleetps::graph::Attrs;
using fleetps::graph::GraphInput;
using fleetps::graph::GraphLayer;
using fleetps::graph::GraphOutput;
using fleetps::graph::GraphSpec;
using fleetps::graph::InputKind;
using fleetps::graph::RowShape;

using testing::Layer;

// Every input kind over 2 slots of width 2 (with embed_w) and 1 dense feature, joined into
// one fc of width 1: logit = sum_i W_i cat_i + b with cat = [flat(emb) | w | dense | row]. The
// fc is declared first, before the layers it reads.
std::shared_ptr<const fleetps::graph::Graph> AllInputsGraph() {
  GraphSpec spec;
  spec.inputs = {GraphInput{.name = "row", .kind = InputKind::kRow, .where = ""},
                 GraphInput{.name = "emb", .kind = InputKind::kEmbedding, .where = ""},
                 GraphInput{.name = "w", .kind = InputKind::kEmbedW, .where = ""},
                 GraphInput{.name = "d", .kind = InputKind::kDense, .where = ""}};
  Attrs fc;
  fc.SetNumber("size", 1);
  spec.layers = {Layer("logit", "fc", {"cat"}, fc), Layer("cat", "concat", {"flat", "w", "d", "row"}),
                 Layer("flat", "flatten", {"emb"})};
  spec.outputs = {GraphOutput{.name = "click", .input = "logit", .where = ""}};
  auto graph = fleetps::graph::BuildGraph(spec, RowShape{.slot_widths = {2, 2}, .dense_dim = 1});
  REQUIRE(graph.ok());
  return *graph;
}

TEST_CASE("the inputs read their parts of the row and their gradients add back into it", "[graph]") {
  const auto graph = AllInputsGraph();
  REQUIRE(graph->row_width() == 7);  // [w0 e00 e01 | w1 e10 e11 | d]
  REQUIRE(graph->num_params() == 14 + 1);
  const GraphExecutor ex(graph, model::testing::TestGemm());
  // W_i = i + 1 for cat position i, b = 0.5.
  std::vector<float> params(15);
  std::iota(params.begin(), params.begin() + 14, 1.0f);
  params[14] = 0.5f;
  const std::vector<float> row = {1, 2, 3, 4, 5, 6, 7};
  GraphExecutor::Workspace ws;
  std::vector<float> logit(1);
  ex.Forward(params, row, 1, &ws, logit);
  // cat = [2 3 5 6 | 1 4 | 7 | 1 2 3 4 5 6 7]
  const std::vector<float> cat = {2, 3, 5, 6, 1, 4, 7, 1, 2, 3, 4, 5, 6, 7};
  float want = 0.5f;
  for (size_t i = 0; i < cat.size(); ++i) want += static_cast<float>(i + 1) * cat[i];
  CHECK(logit[0] == want);

  std::vector<float> param_grads(15, 9.0f), row_grads(7, 9.0f);
  std::vector<bool> covered(15, false);
  ex.Backward(params, row, 1, std::vector<float>{2.0f}, &ws, param_grads, row_grads, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) covered[i] = true;
  });
  for (size_t i = 0; i < cat.size(); ++i) CHECK(param_grads[i] == 2 * cat[i]);
  CHECK(param_grads[14] == 2);
  CHECK(std::all_of(covered.begin(), covered.end(), [](bool c) { return c; }));
  // Row position r: the row part's W (positions 7..13) plus the view that reads r.
  //   w0 <- W5, e00 <- W1, e01 <- W2, w1 <- W6, e10 <- W3, e11 <- W4, d <- W7 (1-based).
  const std::vector<float> view_w = {5, 1, 2, 6, 3, 4, 7};
  for (size_t r = 0; r < 7; ++r) CHECK(row_grads[r] == 2 * (view_w[r] + static_cast<float>(8 + r)));
}

TEST_CASE("a workspace planned for one batch size serves others with the same results", "[graph]") {
  const auto graph = AllInputsGraph();
  const GraphExecutor ex(graph, model::testing::TestGemm());
  const std::vector<float> params = model::testing::RandomVector(15, 1);
  GraphExecutor::Workspace reused;
  for (size_t batch : {3u, 1u, 5u, 3u}) {
    const std::vector<float> row = model::testing::RandomVector(batch * 7, batch);
    const std::vector<float> dy = model::testing::RandomVector(batch, 100 + batch);
    std::vector<float> a(batch), b(batch), ga(15), gb(15), ra(batch * 7), rb(batch * 7);
    GraphExecutor::Workspace fresh;
    ex.Forward(params, row, batch, &reused, a);
    ex.Backward(params, row, batch, dy, &reused, ga, ra, nullptr);
    ex.Forward(params, row, batch, &fresh, b);
    ex.Backward(params, row, batch, dy, &fresh, gb, rb, nullptr);
    CHECK(a == b);
    CHECK(ga == gb);
    CHECK(ra == rb);
  }
}

TEST_CASE("gradients written by a tensor's only reader do not depend on what the buffers held", "[graph]") {
  // row -> fc -> fc -> fc: each fc is its input's only reader, so it writes that input's
  // gradient (the row's included) instead of adding to a zeroed buffer. A NaN left in the
  // row gradient or a workspace's buffers from an earlier step must not survive.
  GraphSpec spec;
  spec.inputs = {GraphInput{.name = "row", .kind = InputKind::kRow, .where = ""}};
  Attrs relu, out;
  relu.SetNumber("size", 6);
  relu.SetText("activation", "relu");
  out.SetNumber("size", 1);
  spec.layers = {Layer("a", "fc", {"row"}, relu), Layer("b", "fc", {"a"}, relu), Layer("logit", "fc", {"b"}, out)};
  spec.outputs = {GraphOutput{.name = "click", .input = "logit", .where = ""}};
  auto graph = fleetps::graph::BuildGraph(spec, RowShape{.slot_widths = {2, 3}, .dense_dim = 2});
  REQUIRE(graph.ok());
  const GraphExecutor ex(*graph, model::testing::TestGemm());
  const size_t batch = 4;
  const std::vector<float> params = model::testing::RandomVector(ex.num_params(), 3);
  const std::vector<float> row = model::testing::RandomVector(batch * 7, 4);
  const std::vector<float> dy = model::testing::RandomVector(batch, 5);
  std::vector<float> logits(batch);
  GraphExecutor::Workspace clean, dirty;
  std::vector<float> g1(ex.num_params()), r1(row.size(), 0.0f);
  ex.Forward(params, row, batch, &clean, logits);
  ex.Backward(params, row, batch, dy, &clean, g1, r1, nullptr);
  std::vector<float> g2(ex.num_params()), r2(row.size(), std::nanf(""));
  for (int step = 0; step < 2; ++step) {  // the second step finds the first one's gradients in place
    ex.Forward(params, row, batch, &dirty, logits);
    ex.Backward(params, row, batch, dy, &dirty, g2, r2, nullptr);
  }
  CHECK(g1 == g2);
  CHECK(r1 == r2);
}

TEST_CASE("dropout drops in training steps only, with a fresh mask each step, and its gradient follows the mask",
          "[graph]") {
  // row [4000] -> dropout(0.25) -> reduce_sum: each training step keeps ~3/4 of the values,
  // scaled by 4/3; inference passes them all. d(sum)/d(row) is the step's scaled mask.
  GraphSpec spec;
  spec.inputs = {GraphInput{.name = "d", .kind = InputKind::kDense, .where = ""}};
  Attrs rate;
  rate.SetNumber("rate", 0.25);
  spec.layers = {Layer("drop", "dropout", {"d"}, rate), Layer("sum", "reduce_sum", {"drop"})};
  spec.outputs = {GraphOutput{.name = "click", .input = "sum", .where = ""}};
  auto graph = fleetps::graph::BuildGraph(spec, RowShape{.slot_widths = {}, .dense_dim = 4000});
  REQUIRE(graph.ok());
  const GraphExecutor ex(*graph, model::testing::TestGemm());
  const std::vector<float> row(4000, 1.0f);
  GraphExecutor::Workspace ws;
  std::vector<float> sum(1);
  ex.Forward({}, row, 1, &ws, sum, /*training=*/false);
  CHECK(sum[0] == 4000.0f);
  std::vector<std::vector<float>> masks;
  for (int step = 0; step < 2; ++step) {
    ex.Forward({}, row, 1, &ws, sum, /*training=*/true);
    std::vector<float> grads, row_grads(4000);
    ex.Backward({}, row, 1, std::vector<float>{1.0f}, &ws, grads, row_grads, nullptr);
    size_t kept = 0;
    float total = 0;
    for (float g : row_grads) {
      CHECK((g == 0.0f || g == Approx(4.0f / 3)));
      kept += g != 0.0f ? 1 : 0;
      total += g;
    }
    CHECK(sum[0] == Approx(total).epsilon(1e-5));  // the output is the kept values, scaled
    CHECK(kept > 2800);                            // 3000 expected, standard deviation 27
    CHECK(kept < 3200);
    masks.push_back(row_grads);
  }
  CHECK(masks[0] != masks[1]);
  // A fresh workspace draws the same masks: training is reproducible.
  GraphExecutor::Workspace again;
  ex.Forward({}, row, 1, &again, sum, /*training=*/true);
  std::vector<float> grads, row_grads(4000);
  ex.Backward({}, row, 1, std::vector<float>{1.0f}, &again, grads, row_grads, nullptr);
  CHECK(row_grads == masks[0]);
}

}  // namespace
}  // namespace fleetps::trainer::graph
