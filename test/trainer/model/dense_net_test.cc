#include "trainer/model/dense_net.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "test/trainer/model/model_test_util.h"
#include "trainer/model/output_metrics.h"

namespace fleetps::trainer::model {
namespace {

using testing::CheckGradient;
using testing::GradientCheckOptions;
using testing::RandomVector;

std::vector<float> Labels(size_t batch) {
  std::vector<float> labels(batch);
  for (size_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 3 == 0);
  return labels;
}

TEST_CASE("DenseNet parameter layout", "[dense_net]") {
  const DenseNet net(5, {4, 3}, OutputKind::kSoftmax2);
  REQUIRE(net.layers().size() == 3);
  CHECK(net.layers()[0].param_offset() == 0);
  CHECK(net.layers()[1].param_offset() == 5 * 4 + 4);
  CHECK(net.layers()[2].param_offset() == 24 + 4 * 3 + 3);
  CHECK(net.layers()[2].out_dim() == 2);
  CHECK(net.num_params() == 39 + 3 * 2 + 2);

  const DenseNet linear(7, {}, OutputKind::kSigmoid);
  CHECK(linear.num_params() == 7 + 1);

  ModelOptions options;  // PaddleRec rank/dnn: 26 slots x 9 + 13 dense -> 512-256-128-32 -> 2
  const DenseNet rank_dnn = DenseNet::FromOptions(options);
  CHECK(rank_dnn.in_dim() == 247);
  CHECK(rank_dnn.num_params() == 247 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128 + 128 * 32 + 32 + 32 * 2 + 2);
}

TEST_CASE("DenseNet InitParams is a pure function of the seed", "[dense_net]") {
  const DenseNet net(6, {5}, OutputKind::kSigmoid);
  std::vector<float> a(net.num_params()), b(net.num_params()), c(net.num_params());
  net.InitParams(a, 42);
  net.InitParams(b, 42);
  net.InitParams(c, 43);
  CHECK(a == b);
  CHECK(a != c);
}

// Tolerance reasoning (see model_test_util.h), for these sizes: the mean loss is ~0.7
// and tiny float GEMMs (K <= 5) give it a rounding error of ~1e-7 at most, so with
// h = 1e-3 rounding puts the central difference off by up to ~1e-4 (observed: <= 5e-5);
// the truncation error h^2 f''' / 6 is ~1e-7. Tolerance 5e-4 + 1e-2 |g|, for gradients
// of ~0.01..0.3. A step that crosses a ReLU kink shows as disagreeing differences at h
// and h/2 and is skipped; pre-activations of scale ~1 move by ~1e-3, so at most a few
// percent of the coordinates may be (none are with these seeds).
TEST_CASE("DenseNet gradients match finite differences", "[dense_net]") {
  const size_t in = 5, batch = 3;
  const GradientCheckOptions options{.step = 1e-3, .abs_tol = 5e-4, .rel_tol = 1e-2, .skip_kinks = true};
  for (OutputKind kind : {OutputKind::kSoftmax2, OutputKind::kSigmoid}) {
    for (const std::vector<uint32_t>& hidden : {std::vector<uint32_t>{4, 3}, std::vector<uint32_t>{}}) {
      INFO("output kind " << static_cast<int>(kind) << ", " << hidden.size() << " hidden layers");
      const DenseNet net(in, hidden, kind);
      std::vector<float> params(net.num_params());
      net.InitParams(params, 5);
      // Non-zero biases, so that the bias gradients are tested away from the init.
      for (const FullyConnected& layer : net.layers()) {
        for (size_t j = 0; j < layer.out_dim(); ++j) {
          params[layer.param_offset() + layer.in_dim() * layer.out_dim() + j] = 0.1f * static_cast<float>(j + 1);
        }
      }
      std::vector<float> activations = RandomVector(batch * in, 6, -2, 2);
      const std::vector<float> labels = Labels(batch);
      DenseNet::Workspace ws;
      std::vector<float> param_grads(net.num_params()), activation_grads(activations.size());
      net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws);

      const auto loss = [&] {
        DenseNet::Workspace scratch;
        std::vector<float> g(net.num_params());
        return double{net.ForwardBackward(params, activations, labels, batch, g, {}, &scratch)};
      };
      const auto on_params = CheckGradient(loss, params, param_grads, options);
      const auto on_activations = CheckGradient(loss, activations, activation_grads, options);
      INFO("params: checked " << on_params.checked << ", skipped " << on_params.skipped << ", max error "
                              << on_params.max_error << "; activations: checked " << on_activations.checked
                              << ", skipped " << on_activations.skipped << ", max error " << on_activations.max_error);
      CHECK(on_params.skipped * 10 <= params.size());
      CHECK(on_activations.skipped * 10 <= activations.size());
      CHECK(on_params.max_gradient > 0.01);
      CHECK(on_activations.max_gradient > 0.01);
    }
  }
}

TEST_CASE("DenseNet Forward agrees with ForwardBackward and reuses its workspace", "[dense_net]") {
  const DenseNet net(8, {6, 4}, OutputKind::kSoftmax2);
  std::vector<float> params(net.num_params());
  net.InitParams(params, 1);
  DenseNet::Workspace ws;
  for (size_t batch : {7u, 2u, 9u}) {  // shrink and grow the same workspace
    const std::vector<float> activations = RandomVector(batch * 8, batch);
    const std::vector<float> labels = Labels(batch);
    std::vector<float> param_grads(net.num_params()), activation_grads(activations.size());
    net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws);
    const std::vector<float> trained(ws.predictions().begin(), ws.predictions().end());

    DenseNet::Workspace fresh;
    const std::span<const float> predicted = net.Forward(params, activations, batch, &fresh);
    CHECK(std::vector<float>(predicted.begin(), predicted.end()) == trained);
    for (float p : trained) CHECK((p > 0.0f && p < 1.0f));

    // No activation gradients requested: same parameter gradients.
    std::vector<float> param_grads_only(net.num_params());
    net.ForwardBackward(params, activations, labels, batch, param_grads_only, {}, &fresh);
    CHECK(param_grads_only == param_grads);
  }
}

// ESMM's shape: a shared layer, a click tower (sigmoid cross-entropy on its logit, which the
// sigmoid also reads) and pCTCVR = pCTR x pCVR under log_loss on the second label, weighted.
DenseNet TwoTaskNet() {
  using fleetps::graph::GraphLayer;
  const auto layer = [](std::string name, std::string op, std::vector<std::string> in, fleetps::graph::Attrs a = {}) {
    return GraphLayer{.name = name,
                      .op = std::move(op),
                      .inputs = std::move(in),
                      .outputs = {name},
                      .attrs = std::move(a),
                      .where = "test"};
  };
  const auto size = [](double n, const char* activation) {
    fleetps::graph::Attrs a;
    a.Set("size", {.numbers = {n}});
    a.Set("activation", {.text = activation, .is_text = true});
    return a;
  };
  fleetps::graph::GraphSpec spec;
  spec.where = "test";
  spec.inputs.push_back({.name = "dense", .kind = fleetps::graph::InputKind::kDense, .where = "test"});
  spec.layers = {layer("h", "fc", {"dense"}, size(4, "tanh")),
                 layer("ctr", "fc", {"h"}, size(1, "none")),
                 layer("cvr", "fc", {"h"}, size(1, "none")),
                 layer("pctr", "sigmoid", {"ctr"}),
                 layer("pcvr", "sigmoid", {"cvr"}),
                 layer("ctcvr", "multiply", {"pctr", "pcvr"})};
  spec.outputs = {{.name = "ctr", .input = "ctr", .label = "click", .where = "test"},
                  {.name = "ctcvr",
                   .input = "ctcvr",
                   .loss = fleetps::graph::LossKind::kLogLoss,
                   .label = "conversion",
                   .weight = 0.5,
                   .where = "test"}};
  fleetps::graph::RowShape row{.slot_widths = {}, .dense_dim = 5, .labels = {"conversion", "click"}};
  auto graph = fleetps::graph::BuildGraph(std::move(spec), row);
  INFO(graph.status().message());
  REQUIRE(graph.ok());
  ModelOptions options;
  options.type = ModelType::kNetwork;
  options.num_sparse_slots = 0;
  options.dense_input_dim = 5;
  options.graph = *graph;
  return DenseNet::FromOptions(options);
}

TEST_CASE("DenseNet with two outputs: weighted losses on their labels, gradients of the sum", "[dense_net]") {
  const DenseNet net = TwoTaskNet();
  REQUIRE(net.num_outputs() == 2);
  REQUIRE(net.num_labels() == 2);
  const size_t batch = 4;
  std::vector<float> params(net.num_params());
  net.InitParams(params, 3);
  std::vector<float> activations = RandomVector(batch * 5, 4, -2, 2);
  // Columns (conversion, click), as the row shape lists them.
  const std::vector<float> labels = {0, 1, 1, 1, 0, 0, 0, 1};
  DenseNet::Workspace ws;
  std::vector<float> param_grads(net.num_params()), activation_grads(activations.size());
  const float loss = net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws);
  const std::vector<float> p(ws.predictions().begin(), ws.predictions().end());
  REQUIRE(p.size() == batch * 2);
  // By hand from the predictions: the click loss, plus half the log_loss of pCTCVR.
  double expect = 0;
  for (size_t i = 0; i < batch; ++i) {
    const double click = labels[2 * i + 1], conversion = labels[2 * i];
    const double pctr = p[2 * i], pctcvr = p[2 * i + 1];
    CHECK(pctcvr < pctr);  // a product with a probability < 1
    expect += -(click * std::log(pctr) + (1 - click) * std::log(1 - pctr)) / batch;
    expect += 0.5 * -(conversion * std::log(pctcvr + 1e-4) + (1 - conversion) * std::log(1 - pctcvr + 1e-4)) / batch;
  }
  CHECK(loss == Approx(expect).epsilon(1e-5));
  DenseNet::Workspace fresh;
  const auto predicted = net.Forward(params, activations, batch, &fresh);
  CHECK(std::vector<float>(predicted.begin(), predicted.end()) == p);

  const auto objective = [&] {
    DenseNet::Workspace scratch;
    std::vector<float> g(net.num_params());
    return double{net.ForwardBackward(params, activations, labels, batch, g, {}, &scratch)};
  };
  const GradientCheckOptions options{.step = 1e-3, .abs_tol = 5e-4, .rel_tol = 1e-2};
  CHECK(CheckGradient(objective, params, param_grads, options).checked == params.size());
  CHECK(CheckGradient(objective, activations, activation_grads, options).checked == activations.size());
}

TEST_CASE("OutputMetrics: each output's predictions against its own label column", "[dense_net]") {
  const DenseNet net = TwoTaskNet();
  OutputMetrics metrics(net);
  REQUIRE(metrics.size() == 2);
  CHECK(metrics.name(0) == "ctr");
  CHECK(metrics.label(0) == "click");
  CHECK(metrics.name(1) == "ctcvr");
  CHECK(metrics.label(1) == "conversion");
  // Rows of (ctr, ctcvr) predictions; labels in the row shape's order (conversion, click).
  const std::vector<float> predictions = {0.9f, 0.1f, 0.2f, 0.8f, 0.7f, 0.3f, 0.4f, 0.6f};
  const std::vector<float> labels = {0, 1, 1, 0, 0, 1, 1, 0};
  metrics.Add(predictions, labels);
  AucCalculator click, conversion;
  click.Add(std::vector<float>{0.9f, 0.2f, 0.7f, 0.4f}, std::vector<float>{1, 0, 1, 0});
  conversion.Add(std::vector<float>{0.1f, 0.8f, 0.3f, 0.6f}, std::vector<float>{0, 1, 0, 1});
  CHECK(metrics.output(0).Auc() == 1.0);
  CHECK(metrics.output(1).Auc() == 1.0);
  CHECK(std::vector<double>(metrics.output(0).state().begin(), metrics.output(0).state().end()) ==
        std::vector<double>(click.state().begin(), click.state().end()));
  CHECK(std::vector<double>(metrics.output(1).state().begin(), metrics.output(1).state().end()) ==
        std::vector<double>(conversion.state().begin(), conversion.state().end()));
  // States add up across trainers, output by output.
  OutputMetrics merged(net);
  merged.MergeState(metrics.State());
  merged.Merge(metrics);
  CHECK(merged.output(1).num_examples() == 8);
  CHECK(merged.output(1).ActualCtr() == 0.5);
}

TEST_CASE("DenseNet runs concurrently on shared parameters", "[dense_net]") {
  const DenseNet net(10, {8, 4}, OutputKind::kSigmoid);
  std::vector<float> params(net.num_params());
  net.InitParams(params, 3);
  const size_t batch = 16;
  const std::vector<float> activations = RandomVector(batch * 10, 4);
  const std::vector<float> labels = Labels(batch);
  const auto run = [&](std::vector<float>* grads) {
    DenseNet::Workspace ws;
    grads->assign(net.num_params(), 0.0f);
    for (int i = 0; i < 50; ++i) net.ForwardBackward(params, activations, labels, batch, *grads, {}, &ws);
  };
  std::vector<float> expected, a, b;
  run(&expected);
  std::thread ta(run, &a), tb(run, &b);
  ta.join();
  tb.join();
  CHECK(a == expected);
  CHECK(b == expected);
}

// Not run by default: ./model_test "[.bench]" (one thread per product, as the trainers run).
TEST_CASE("DenseNet ForwardBackward throughput, PaddleRec rank/dnn shape", "[.bench]") {
  const size_t in = 26 * 9 + 13, batch = 512;
  const DenseNet net(in, {512, 256, 128, 32}, OutputKind::kSoftmax2);
  std::vector<float> params(net.num_params()), param_grads(net.num_params());
  net.InitParams(params, 1);
  const std::vector<float> activations = RandomVector(batch * in, 2);
  std::vector<float> activation_grads(activations.size());
  const std::vector<float> labels = Labels(batch);
  DenseNet::Workspace ws;
  net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws);  // warm up
  const int iterations = 200;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "DenseNet in=" << in << " fc 512-256-128-32 softmax2, batch " << batch << ": "
            << seconds / iterations * 1e3 << " ms/batch, " << iterations * batch / seconds << " examples/s\n";
}

}  // namespace
}  // namespace fleetps::trainer::model
