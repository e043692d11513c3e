// The built-in model_types as layer graphs (common/config/graph_models.cc) against the
// hand-written models they replace: the same parameter layout and initial values from the
// same seed, the same logits, and the same gradients (parameters and activations) on the
// same batch, within 1e-6 relative (RequireClose says how it is measured).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/config/graph_models.h"
#include "test/trainer/model/model_test_util.h"
#include "trainer/model/dense_model.h"

namespace fleetps::trainer::model {
namespace {

using testing::RandomVector;
using testing::TestGemm;

// Relative error of the whole vector, ||a - b|| / ||a|| <= 1e-6, and no entry off by more
// than 1e-5 of the vector's largest: the sums run in another order in the graph (a tensor
// feeding several layers collects its gradient in one buffer), so single entries where
// terms cancel may differ by a few float roundings.
void RequireClose(std::span<const float> a, std::span<const float> b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  double norm = 0, diff = 0, scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double{a[i]} - double{b[i]};
    norm += double{a[i]} * a[i];
    diff += d * d;
    scale = std::max(scale, double{std::fabs(a[i])});
    worst = std::max(worst, std::fabs(d));
  }
  REQUIRE(norm > 0);
  INFO(what << ": relative error " << std::sqrt(diff / norm) << ", worst entry " << worst << " of " << scale);
  CHECK(std::sqrt(diff / norm) <= 1e-6);
  CHECK(worst <= 1e-5 * scale);
}

struct Case {
  std::string name;
  ModelOptions options;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (OutputKind output : {OutputKind::kSoftmax2, OutputKind::kSigmoid}) {
    const std::string suffix = output == OutputKind::kSoftmax2 ? "/softmax2" : "/sigmoid";
    ModelOptions o;
    o.num_sparse_slots = 4;
    o.sparse_feature_dim = 5;
    o.dense_input_dim = 3;
    o.input_dim = 7;
    o.fc_sizes = {16, 8};
    o.output = output;
    o.bot_layer_sizes = {8, 5};
    o.top_layer_sizes = {12, static_cast<uint32_t>(output == OutputKind::kSoftmax2 ? 2 : 1)};
    o.init_seed = 7;
    for (ModelType type : {ModelType::kMlp, ModelType::kCtrDnn, ModelType::kWideDeep, ModelType::kDeepFm,
                           ModelType::kDcn, ModelType::kDlrm}) {
      o.type = type;
      cases.push_back({ModelTypeName(type) + suffix, o});
    }
    o.type = ModelType::kDcn;
    o.cross_type = CrossType::kV2;
    o.cross_num = 3;
    cases.push_back({"dcn_v2" + suffix, o});
    o.cross_type = CrossType::kV1;
    o.fc_sizes = {};
    cases.push_back({"dcn_no_mlp" + suffix, o});
    o.type = ModelType::kCtrDnn;
    o.slot_dims = {5, 2, 4, 1};
    o.fc_sizes = {6};
    cases.push_back({"ctr_dnn_slot_dims" + suffix, o});
    o.type = ModelType::kWideDeep;
    cases.push_back({"wide_deep_slot_dims" + suffix, o});
    o.slot_dims = {};
    o.type = ModelType::kDeepFm;
    o.dense_input_dim = 0;
    cases.push_back({"deepfm_no_dense" + suffix, o});
  }
  return cases;
}

std::unique_ptr<DenseModel> HandWritten(const ModelOptions& o) {
  switch (o.type) {
    case ModelType::kMlp:
    case ModelType::kCtrDnn: return MakeMlpModel(DenseInputDim(o), o.fc_sizes, o.output, o.type, TestGemm());
    case ModelType::kWideDeep: return MakeWideDeepModel(o, TestGemm());
    case ModelType::kDeepFm: return MakeDeepFmModel(o, TestGemm());
    case ModelType::kDcn: return MakeDcnModel(o, TestGemm());
    case ModelType::kDlrm: return MakeDlrmModel(o, TestGemm());
    case ModelType::kNetwork: break;
  }
  FAIL("no hand-written model");
  return nullptr;
}

TEST_CASE("every built-in model as a graph matches its hand-written implementation", "[graph]") {
  for (const Case& c : Cases()) {
    SECTION(c.name) {
      const std::unique_ptr<DenseModel> old_model = HandWritten(c.options);
      const std::unique_ptr<DenseModel> graph_model = MakeGraphModel(c.options, TestGemm());
      REQUIRE(graph_model->in_dim() == old_model->in_dim());
      REQUIRE(graph_model->num_logits() == old_model->num_logits());
      REQUIRE(graph_model->num_params() == old_model->num_params());

      // The same initial values from the same seed: layouts agree entry for entry.
      std::vector<float> old_params(old_model->num_params()), params(graph_model->num_params());
      UniformRandom r1(c.options.init_seed), r2(c.options.init_seed);
      old_model->InitParams(old_params, &r1);
      graph_model->InitParams(params, &r2);
      REQUIRE(params == old_params);
      // Nonzero everywhere, so that every weight's gradient path is exercised.
      params = RandomVector(params.size(), 11, -0.5f, 0.5f);

      const size_t batch = 6;
      const std::vector<float> row = RandomVector(batch * old_model->in_dim(), 12, -1.0f, 1.0f);
      const std::vector<float> logit_grads = RandomVector(batch * old_model->num_logits(), 13);
      std::vector<float> old_logits(batch * old_model->num_logits()), logits(old_logits.size());
      auto old_scratch = old_model->NewScratch();
      auto scratch = graph_model->NewScratch();
      old_model->Forward(params, row, batch, old_scratch.get(), old_logits);
      graph_model->Forward(params, row, batch, scratch.get(), logits);
      RequireClose(old_logits, logits, "logits");

      std::vector<float> old_pg(params.size(), 9.0f), pg(params.size(), 9.0f);
      std::vector<float> old_ag(row.size(), 9.0f), ag(row.size(), 9.0f);
      std::vector<bool> covered(params.size(), false);
      old_model->Backward(params, row, batch, logit_grads, old_scratch.get(), old_pg, old_ag, nullptr);
      graph_model->Backward(params, row, batch, logit_grads, scratch.get(), pg, ag, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) covered[i] = true;
      });
      RequireClose(old_pg, pg, "parameter gradients");
      RequireClose(old_ag, ag, "activation gradients");
      CHECK(std::all_of(covered.begin(), covered.end(), [](bool b) { return b; }));

      // Without activation gradients (the first layer's input product skipped): the same.
      std::vector<float> pg2(params.size(), 9.0f);
      graph_model->Forward(params, row, batch, scratch.get(), logits);
      graph_model->Backward(params, row, batch, logit_grads, scratch.get(), pg2, {}, nullptr);
      RequireClose(pg, pg2, "parameter gradients without activation gradients");
    }
  }
}

}  // namespace
}  // namespace fleetps::trainer::model
