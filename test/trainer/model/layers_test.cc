#include "trainer/model/layers.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::model {
namespace {

using testing::CheckGradient;
using testing::GradientCheckOptions;
using testing::RandomVector;
using testing::TestGemm;

// sum(a ⊙ b) in double.
double Dot(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

TEST_CASE("FullyConnected forward matches hand-computed values", "[layers]") {
  // One float of padding in front shows that the layer reads its parameters at its offset.
  const FullyConnected fc(3, 2, /*param_offset=*/1, TestGemm());
  REQUIRE(fc.num_params() == 8);
  const std::vector<float> params = {99,         // not this layer's
                                     1,    2,    // W row 0
                                     3,    4,    // W row 1
                                     5,    6,    // W row 2
                                     0.5f, -1};  // b
  const std::vector<float> x = {1, 0, -1,        // example 0
                                2, 1, 0};        // example 1
  std::vector<float> y(4);
  fc.Forward(params, x, 2, y);
  CHECK(y == std::vector<float>{1 - 5 + 0.5f, 2 - 6 - 1, 2 + 3 + 0.5f, 4 + 4 - 1});
}

TEST_CASE("FullyConnected backward matches finite differences", "[layers]") {
  // Objective f = sum(y ⊙ r) for a fixed random r, so df/dy = r. f is linear in the
  // parameters and in x, so the central difference has no truncation error; with h = 0.1
  // its rounding error is ~1e-7 * |f| / h ~ 1e-5, far below the tolerance.
  const size_t in = 4, out = 3, batch = 5, offset = 2;
  const FullyConnected fc(in, out, offset, TestGemm());
  std::vector<float> params = RandomVector(offset + fc.num_params() + 1, 1);
  std::vector<float> x = RandomVector(batch * in, 2);
  const std::vector<float> r = RandomVector(batch * out, 3);
  std::vector<float> y(batch * out);
  const auto objective = [&] {
    fc.Forward(params, x, batch, y);
    return Dot(y, r);
  };

  const float kSentinel = 1234.5f;
  std::vector<float> param_grads(params.size(), kSentinel);
  std::vector<float> dx(batch * in);
  fc.Backward(params, x, r, batch, param_grads, dx);

  // Only this layer's slice of the gradient vector is written.
  CHECK(param_grads[0] == kSentinel);
  CHECK(param_grads[1] == kSentinel);
  CHECK(param_grads.back() == kSentinel);

  const GradientCheckOptions options{.step = 0.1, .abs_tol = 1e-4, .rel_tol = 1e-4};
  std::span<float> own_params = std::span(params).subspan(offset, fc.num_params());
  std::span<const float> own_grads = std::span(param_grads).subspan(offset, fc.num_params());
  CHECK(CheckGradient(objective, own_params, own_grads, options).checked == fc.num_params());
  CHECK(CheckGradient(objective, x, dx, options).checked == x.size());

  // Without dx the parameter gradients are the same.
  std::vector<float> param_grads_only(params.size(), kSentinel);
  fc.Backward(params, x, r, batch, param_grads_only, {});
  CHECK(param_grads_only == param_grads);
}

TEST_CASE("FullyConnected Xavier init is deterministic and bounded", "[layers]") {
  const FullyConnected fc(10, 6, 0, TestGemm());
  std::vector<float> a(fc.num_params()), b(fc.num_params()), c(fc.num_params());
  UniformRandom rng_a(7), rng_b(7), rng_c(8);
  fc.InitParams(a, &rng_a);
  fc.InitParams(b, &rng_b);
  fc.InitParams(c, &rng_c);
  CHECK(a == b);
  CHECK(a != c);
  const float limit = std::sqrt(6.0f / 16.0f);
  for (size_t i = 0; i < 60; ++i) CHECK(std::fabs(a[i]) <= limit);
  for (size_t i = 60; i < 66; ++i) CHECK(a[i] == 0.0f);
}

TEST_CASE("ReLU forward and backward", "[layers]") {
  std::vector<float> x = {-2, -0.0f, 0, 0.5f, 3};
  ReluForward(x);
  CHECK(x == std::vector<float>{0, 0, 0, 0.5f, 3});
  std::vector<float> dy = {1, 2, 3, 4, 5};
  ReluBackward(x, dy);
  CHECK(dy == std::vector<float>{0, 0, 0, 4, 5});
}

TEST_CASE("ReLU backward matches finite differences away from the kink", "[layers]") {
  // Inputs at least 0.1 from 0 and h = 0.01: no step crosses the kink, and ReLU is linear
  // on each side, so the only error is rounding (~1e-7 / h).
  std::vector<float> x = RandomVector(20, 4, 0.1f, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  const std::vector<float> r = RandomVector(x.size(), 5);
  std::vector<float> y(x.size());
  const auto objective = [&] {
    y = x;
    ReluForward(y);
    return Dot(y, r);
  };
  y = x;
  ReluForward(y);
  std::vector<float> dx = r;
  ReluBackward(y, dx);
  const GradientCheckOptions options{.step = 0.01, .abs_tol = 1e-4, .rel_tol = 1e-4};
  CHECK(CheckGradient(objective, x, dx, options).checked == x.size());
}

}  // namespace
}  // namespace fleetps::trainer::model
