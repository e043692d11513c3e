#include "trainer/model/loss.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::model {
namespace {

using testing::CheckGradient;
using testing::GradientCheckOptions;
using testing::RandomVector;

TEST_CASE("Sigmoid cross-entropy matches hand-computed values", "[loss]") {
  const std::vector<float> logits = {0, 2, -1};
  const std::vector<float> labels = {1, 0, 1};
  std::vector<float> probs(3), grads(3);
  const float loss = SigmoidCrossEntropy(logits, labels, probs, grads);
  // -log sigmoid(0), -log(1 - sigmoid(2)) = log(1 + e^2), -log sigmoid(-1) = log(1 + e).
  const double expected = (std::log(2.0) + std::log1p(std::exp(2.0)) + std::log1p(std::exp(1.0))) / 3;
  CHECK(loss == Approx(expected).epsilon(1e-6));
  const double p1 = 1 / (1 + std::exp(-2.0)), p2 = 1 / (1 + std::exp(1.0));
  CHECK(probs[0] == Approx(0.5));
  CHECK(probs[1] == Approx(p1));
  CHECK(probs[2] == Approx(p2));
  CHECK(grads[0] == Approx((0.5 - 1) / 3));
  CHECK(grads[1] == Approx(p1 / 3));
  CHECK(grads[2] == Approx((p2 - 1) / 3));
}

TEST_CASE("Sigmoid cross-entropy is finite for extreme logits", "[loss]") {
  const std::vector<float> logits = {100, -100, 100, -100};
  const std::vector<float> labels = {0, 1, 1, 0};
  std::vector<float> probs(4), grads(4);
  const float loss = SigmoidCrossEntropy(logits, labels, probs, grads);
  CHECK(loss == Approx((100.0 + 100.0) / 4));  // the two right answers cost ~e^-100
  const std::vector<double> expected_probs = {1, 0, 1, 0}, expected_grads = {0.25, -0.25, 0, 0};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(probs[i] == Approx(expected_probs[i]).margin(1e-30));
    CHECK(grads[i] == Approx(expected_grads[i]).margin(1e-30));
  }
}

TEST_CASE("2-class softmax cross-entropy matches hand-computed values", "[loss]") {
  const std::vector<float> logits = {1, 3,  // p1 = e^3 / (e^1 + e^3)
                                     0.5f, -0.5f};
  const std::vector<float> labels = {1, 1};
  std::vector<float> probs(2), grads(4);
  const float loss = Softmax2CrossEntropy(logits, labels, probs, grads);
  const double p0 = std::exp(3.0) / (std::exp(1.0) + std::exp(3.0));
  const double p1 = std::exp(-0.5) / (std::exp(0.5) + std::exp(-0.5));
  CHECK(loss == Approx(-(std::log(p0) + std::log(p1)) / 2).epsilon(1e-6));
  CHECK(probs[0] == Approx(p0));
  CHECK(probs[1] == Approx(p1));
  CHECK(grads[1] == Approx((p0 - 1) / 2));
  CHECK(grads[0] == -grads[1]);
  CHECK(grads[3] == Approx((p1 - 1) / 2));
  CHECK(grads[2] == -grads[3]);
}

TEST_CASE("Loss gradients match finite differences", "[loss]") {
  // Smooth in the logits. With h = 1e-2 the rounding error is ~1e-7 / h = 1e-5 and the
  // truncation error h^2 f''' / 6 < 2e-5 (|f'''| of the mean log loss is < 0.1 / batch).
  const size_t batch = 6;
  const std::vector<float> labels = {0, 1, 1, 0, 0.25f, 1};
  const GradientCheckOptions options{.step = 1e-2, .abs_tol = 1e-4, .rel_tol = 1e-3};
  for (fleetps::graph::LossKind kind :
       {fleetps::graph::LossKind::kSigmoidCrossEntropy, fleetps::graph::LossKind::kSoftmaxCrossEntropy}) {
    INFO("loss " << fleetps::graph::LossName(kind));
    std::vector<float> logits = RandomVector(batch * fleetps::graph::LossWidth(kind), 11, -3, 3);
    std::vector<float> probs(batch), grads(logits.size());
    OutputLoss(kind, logits, labels, probs, grads);
    const auto objective = [&] {
      std::vector<float> p(batch);
      return double{OutputLoss(kind, logits, labels, p, {})};
    };
    CHECK(CheckGradient(objective, logits, grads, options).checked == logits.size());

    std::vector<float> predicted(batch);
    PredictOutput(kind, logits, predicted);
    CHECK(predicted == probs);
  }
}

TEST_CASE("log_loss: Paddle's formula by hand, finite-difference gradient, clamped predictions", "[loss]") {
  const std::vector<float> p = {0.2f, 0.9f, 0.5f};
  const std::vector<float> labels = {0, 1, 1};
  std::vector<float> probs(3), grads(3);
  const double eps = 1e-4;
  const double expect = (-std::log(1 - 0.2 + eps) - std::log(0.9 + eps) - std::log(0.5 + eps)) / 3;
  CHECK(OutputLoss(fleetps::graph::LossKind::kLogLoss, p, labels, probs, grads) == Approx(expect).epsilon(1e-6));
  CHECK(grads[0] == Approx(1 / (1 - 0.2 + eps) / 3));
  CHECK(grads[1] == Approx(-1 / (0.9 + eps) / 3));
  CHECK(probs == p);

  std::vector<float> x = {0.3f, 0.6f, 0.45f};
  OutputLoss(fleetps::graph::LossKind::kLogLoss, x, labels, probs, grads);
  const auto objective = [&] {
    std::vector<float> q(3);
    return double{OutputLoss(fleetps::graph::LossKind::kLogLoss, x, labels, q, {})};
  };
  CHECK(CheckGradient(objective, x, grads, {.step = 1e-3, .abs_tol = 1e-4, .rel_tol = 1e-3}).checked == 3);

  const std::vector<float> outside = {-0.5f, 1.5f};
  std::vector<float> clamped(2);
  PredictOutput(fleetps::graph::LossKind::kLogLoss, outside, clamped);
  CHECK(clamped == std::vector<float>{0.0f, 1.0f});
}

TEST_CASE("Softmax2 loss is the sigmoid loss of the logit difference", "[loss]") {
  const std::vector<float> pairs = {0.25f, -1.25f, 2, 2, -4, 5};
  const std::vector<float> differences = {-1.5f, 0, 9};
  const std::vector<float> labels = {1, 0, 0};
  std::vector<float> p_softmax(3), p_sigmoid(3);
  CHECK(Softmax2CrossEntropy(pairs, labels, p_softmax, {}) ==
        Approx(SigmoidCrossEntropy(differences, labels, p_sigmoid, {})));
  CHECK(p_softmax == p_sigmoid);
}

TEST_CASE("A NaN logit gives a NaN loss, not a plausible one", "[loss]") {
  // A diverged model must show in the reported loss, on the CPU and (loss_rules.h is their
  // definition too) in the CUDA kernels.
  const float nan = std::nanf("");
  const std::vector<float> logits = {nan, 1};
  const std::vector<float> labels = {0, 1};
  std::vector<float> probs(2), grads(2);
  CHECK(std::isnan(SigmoidCrossEntropy(logits, labels, probs, grads)));
  CHECK(std::isnan(probs[0]));
  CHECK(std::isnan(grads[0]));
  CHECK(probs[1] == Approx(1 / (1 + std::exp(-1.0))));
  const std::vector<float> pairs = {0, nan};
  std::vector<float> p1(1);
  CHECK(std::isnan(Softmax2CrossEntropy(pairs, {labels.data(), 1}, p1, {})));
}

TEST_CASE("Empty batch has zero loss", "[loss]") {
  CHECK(SigmoidCrossEntropy({}, {}, {}, {}) == 0.0f);
  CHECK(Softmax2CrossEntropy({}, {}, {}, {}) == 0.0f);
}

}  // namespace
}  // namespace fleetps::trainer::model
