// Every built-in model_type as its layer graph (common/config/graph_models.cc): its size
// agrees with config::DenseParamCount (what the pservers allocate) and hand counts, and its
// gradients — parameters and activations — match finite differences of the loss.

#include "trainer/model/dense_net.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/config/trainer_config.h"
#include "test/trainer/model/model_test_util.h"
#include "trainer/model/dense_net.h"

namespace fleetps::trainer::model {
namespace {

using testing::CheckGradient;
using testing::GradientCheckOptions;
using testing::RandomVector;

// Small shapes of every model: 3 slots, embedding width 3, 2 dense features.
ModelOptions SmallOptions(ModelType type, OutputKind output) {
  ModelOptions o;
  o.type = type;
  o.num_sparse_slots = 3;
  o.sparse_feature_dim = 3;
  o.dense_input_dim = 2;
  o.input_dim = 5;
  o.fc_sizes = {4, 3};
  o.output = output;
  o.cross_num = 2;
  o.bot_layer_sizes = {4, 3};
  o.top_layer_sizes = {4, static_cast<uint32_t>(output == OutputKind::kSoftmax2 ? 2 : 1)};
  return o;
}

struct Case {
  ModelType type;
  CrossType cross = CrossType::kV1;
  std::vector<uint32_t> slot_dims = {};
};

TEST_CASE("Every model's gradients match finite differences", "[builtin_models]") {
  // As in dense_net_test: mean loss ~0.7 in float, h = 1e-3, tolerance 5e-4 + 1e-2 |g|;
  // ReLU kinks crossed by a step are detected (h vs h/2) and skipped, at most 10%.
  const GradientCheckOptions options{.step = 1e-3, .abs_tol = 5e-4, .rel_tol = 1e-2, .skip_kinks = true};
  const size_t batch = 4;
  for (const Case& c :
       {Case{ModelType::kMlp}, Case{ModelType::kCtrDnn}, Case{ModelType::kWideDeep}, Case{ModelType::kDeepFm},
        Case{ModelType::kDcn, CrossType::kV1}, Case{ModelType::kDcn, CrossType::kV2}, Case{ModelType::kDlrm},
        // per-slot embedding widths
        Case{ModelType::kCtrDnn, CrossType::kV1, {3, 1, 2}}, Case{ModelType::kWideDeep, CrossType::kV1, {1, 3, 2}},
        Case{ModelType::kDcn, CrossType::kV2, {2, 3, 1}}}) {
    for (OutputKind output : {OutputKind::kSigmoid, OutputKind::kSoftmax2}) {
      ModelOptions o = SmallOptions(c.type, output);
      o.cross_type = c.cross;
      o.slot_dims = c.slot_dims;
      INFO("model " << ModelTypeName(c.type) << ", cross " << static_cast<int>(c.cross) << ", output "
                    << static_cast<int>(output) << ", " << c.slot_dims.size() << " slot dims");
      const DenseNet net = DenseNet::FromOptions(o);
      CHECK(net.type() == c.type);
      CHECK(net.in_dim() == DenseInputDim(o));
      CHECK(net.num_params() == config::DenseParamCount(o));
      CHECK(net.is_mlp() == (c.type == ModelType::kMlp || c.type == ModelType::kCtrDnn));

      std::vector<float> params(net.num_params());
      net.InitParams(params, 11);
      // Move every parameter off its init (zero biases and wide weights included).
      const std::vector<float> noise = RandomVector(params.size(), 12, -0.3f, 0.3f);
      for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
      std::vector<float> activations = RandomVector(batch * net.in_dim(), 13, -1, 1);
      std::vector<float> labels = {1, 0, 0, 1};

      DenseNet::Workspace ws;
      std::vector<float> param_grads(net.num_params()), activation_grads(activations.size());
      std::vector<bool> covered(net.num_params(), false);
      net.ForwardBackward(params, activations, labels, batch, param_grads, activation_grads, &ws,
                          [&](size_t begin, size_t end) {
                            for (size_t i = begin; i < end; ++i) covered[i] = true;
                          });
      CHECK(std::find(covered.begin(), covered.end(), false) == covered.end());

      const auto loss = [&] {
        DenseNet::Workspace scratch;
        std::vector<float> g(net.num_params());
        return double{net.ForwardBackward(params, activations, labels, batch, g, {}, &scratch)};
      };
      const auto on_params = CheckGradient(loss, params, param_grads, options);
      const auto on_activations = CheckGradient(loss, activations, activation_grads, options);
      INFO("params: checked " << on_params.checked << ", skipped " << on_params.skipped << "; activations: checked "
                              << on_activations.checked << ", skipped " << on_activations.skipped);
      CHECK(on_params.skipped * 10 <= params.size());
      CHECK(on_activations.skipped * 10 <= activations.size());
      CHECK(on_params.max_gradient > 0.01);
      CHECK(on_activations.max_gradient > 0.01);

      // Forward alone gives ForwardBackward's predictions.
      const std::vector<float> trained(ws.predictions().begin(), ws.predictions().end());
      DenseNet::Workspace fresh;
      const auto p = net.Forward(params, activations, batch, &fresh);
      for (size_t i = 0; i < batch; ++i) CHECK(p[i] == Approx(trained[i]).margin(1e-6));
    }
  }
}

TEST_CASE("wide_deep and deepfm read the first-order column of every slot block", "[builtin_models]") {
  // With every deep weight zero, wide_deep's click logit is exactly the wide part.
  ModelOptions o = SmallOptions(ModelType::kWideDeep, OutputKind::kSigmoid);
  o.fc_sizes = {};
  const DenseNet net = DenseNet::FromOptions(o);
  REQUIRE(SparseRowDim(o) == 4);
  REQUIRE(net.in_dim() == 3 * 4 + 2);
  std::vector<float> params(net.num_params(), 0.0f);
  params[net.num_params() - 2] = 0.5f;  // w_dense
  params[net.num_params() - 1] = -1.0f;
  // slot blocks [w | e e e]: first-order 0.2, 0.3, -0.1; dense (2, 1)
  const std::vector<float> row = {0.2f, 9, 9, 9, 0.3f, 9, 9, 9, -0.1f, 9, 9, 9, 2, 1};
  DenseNet::Workspace ws;
  const auto p = net.Forward(params, row, 1, &ws);
  const float logit = 0.2f + 0.3f - 0.1f + 0.5f * 2 - 1.0f;  // 0.4
  CHECK(p[0] == Approx(1 / (1 + std::exp(-logit))));
}

TEST_CASE("wide_deep with per-slot widths reads each block's first-order column", "[builtin_models]") {
  ModelOptions o = SmallOptions(ModelType::kWideDeep, OutputKind::kSigmoid);
  o.fc_sizes = {};
  o.slot_dims = {1, 3, 2};  // blocks [w e], [w e e e], [w e e]
  const DenseNet net = DenseNet::FromOptions(o);
  REQUIRE(net.in_dim() == 2 + 4 + 3 + 2);
  std::vector<float> params(net.num_params(), 0.0f);
  const std::vector<float> row = {0.2f, 9, 0.3f, 9, 9, 9, -0.1f, 9, 9, 0, 0};
  DenseNet::Workspace ws;
  const auto p = net.Forward(params, row, 1, &ws);
  CHECK(p[0] == Approx(1 / (1 + std::exp(-0.4))));
}

TEST_CASE("Every model in bf16 gives fp32's loss, predictions and gradients up to bf16 rounding", "[builtin_models]") {
  auto bf16 = dense::CpuGemm::Create({.precision = dense::Precision::kBf16});
  if (!bf16.ok()) {  // a CPU without bf16 units: refused (dense_test checks the message)
    CHECK(bf16.status().IsInvalidArgument());
    return;
  }
  const size_t batch = 64;
  for (ModelType type :
       {ModelType::kCtrDnn, ModelType::kWideDeep, ModelType::kDeepFm, ModelType::kDcn, ModelType::kDlrm}) {
    ModelOptions o = SmallOptions(type, OutputKind::kSoftmax2);
    o.num_sparse_slots = 8;
    o.sparse_feature_dim = 8;
    o.fc_sizes = {64, 32};
    o.cross_type = CrossType::kV2;
    o.bot_layer_sizes = {16, 8};
    o.top_layer_sizes = {32, 2};
    INFO("model " << ModelTypeName(type));
    const DenseNet fp32_net = DenseNet::FromOptions(o);
    const DenseNet bf16_net = DenseNet::FromOptions(o, *bf16);
    REQUIRE(bf16_net.gemm().precision() == dense::Precision::kBf16);
    std::vector<float> params(fp32_net.num_params());
    fp32_net.InitParams(params, 21);
    const std::vector<float> activations = RandomVector(batch * fp32_net.in_dim(), 22, -1, 1);
    std::vector<float> labels(batch);
    for (size_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 3 == 0);
    struct Out {
      float loss;
      std::vector<float> predictions, param_grads, activation_grads;
    };
    const auto run = [&](const DenseNet& net) {
      Out out{0, {}, std::vector<float>(net.num_params()), std::vector<float>(activations.size())};
      DenseNet::Workspace ws;
      out.loss = net.ForwardBackward(params, activations, labels, batch, out.param_grads, out.activation_grads, &ws);
      out.predictions.assign(ws.predictions().begin(), ws.predictions().end());
      return out;
    };
    const Out a = run(fp32_net), b = run(bf16_net);
    // bf16 keeps 8 significant bits: each product's inputs move by <= 2^-9 relative.
    CHECK(b.loss == Approx(a.loss).epsilon(0.01));
    for (size_t i = 0; i < batch; ++i) CHECK(b.predictions[i] == Approx(a.predictions[i]).margin(0.01));
    const auto relative_error = [](const std::vector<float>& x, const std::vector<float>& y) {
      double diff = 0, norm = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        diff += (x[i] - y[i]) * double{x[i] - y[i]};
        norm += x[i] * double{x[i]};
      }
      return std::sqrt(diff / norm);
    };
    // The gradients sum p - y over the batch with heavy cancellation, so their relative error
    // is far above one rounding (4-9% measured on these shapes); a wrong operand, transpose
    // or stride would be ~100%.
    CHECK(relative_error(a.param_grads, b.param_grads) < 0.15);
    CHECK(relative_error(a.activation_grads, b.activation_grads) < 0.15);
    CHECK(relative_error(a.param_grads, b.param_grads) > 0);  // it did run in bf16
  }
}

TEST_CASE("dlrm's parameter count by hand", "[builtin_models]") {
  ModelOptions o = SmallOptions(ModelType::kDlrm, OutputKind::kSigmoid);
  // bottom 2 -> 4 -> 3: 12 + 15; 4 vectors of 3 -> 6 dots; top (3 + 6) -> 4 -> 1: 40 + 5.
  CHECK(config::DenseParamCount(o) == 12 + 15 + 40 + 5);
  CHECK(DenseNet::FromOptions(o).num_params() == 72);
}

}  // namespace
}  // namespace fleetps::trainer::model
