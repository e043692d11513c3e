// Every registered model (model_registry.cc): its size agrees with config::DenseParamCount
// (what the pservers allocate), and its gradients — parameters and activations — match
// finite differences of the loss.

#include "trainer/model/dense_model.h"

#include <catch2/catch.hpp>

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

TEST_CASE("Every model's gradients match finite differences", "[model_registry]") {
  // As in dense_net_test: mean loss ~0.7 in float, h = 1e-3, tolerance 5e-4 + 1e-2 |g|;
  // ReLU kinks crossed by a step are detected (h vs h/2) and skipped, at most 10%.
  const GradientCheckOptions options{.step = 1e-3, .abs_tol = 5e-4, .rel_tol = 1e-2, .skip_kinks = true};
  const size_t batch = 4;
  for (const Case& c : {Case{ModelType::kMlp}, Case{ModelType::kCtrDnn}, Case{ModelType::kWideDeep},
                       Case{ModelType::kDeepFm}, Case{ModelType::kDcn, CrossType::kV1},
                       Case{ModelType::kDcn, CrossType::kV2}, Case{ModelType::kDlrm},
                       // per-slot embedding widths
                       Case{ModelType::kCtrDnn, CrossType::kV1, {3, 1, 2}},
                       Case{ModelType::kWideDeep, CrossType::kV1, {1, 3, 2}},
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

TEST_CASE("wide_deep and deepfm read the first-order column of every slot block", "[model_registry]") {
  // With every deep weight zero, wide_deep's click logit is exactly the wide part.
  ModelOptions o = SmallOptions(ModelType::kWideDeep, OutputKind::kSigmoid);
  o.fc_sizes = {};
  const DenseNet net = DenseNet::FromOptions(o);
  const SlotLayout layout = SlotLayout::FromOptions(o);
  REQUIRE(layout.row_dim == 4);
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

TEST_CASE("wide_deep with per-slot widths reads each block's first-order column", "[model_registry]") {
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

TEST_CASE("dlrm's parameter count by hand", "[model_registry]") {
  ModelOptions o = SmallOptions(ModelType::kDlrm, OutputKind::kSigmoid);
  // bottom 2 -> 4 -> 3: 12 + 15; 4 vectors of 3 -> 6 dots; top (3 + 6) -> 4 -> 1: 40 + 5.
  CHECK(config::DenseParamCount(o) == 12 + 15 + 40 + 5);
  CHECK(DenseNet::FromOptions(o).num_params() == 72);
}

}  // namespace
}  // namespace fleetps::trainer::model
