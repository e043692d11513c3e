#include "trainer/model/interactions.h"

#include <catch2/catch.hpp>

#include <vector>

#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::model {
namespace {

using testing::CheckGradient;
using testing::GradientCheckOptions;
using testing::RandomVector;
using testing::TestGemm;

// Each layer's backward is checked on the objective f = sum_i r_i y_i for a fixed random r,
// whose gradient with respect to y is r. These layers are smooth (products and sums), so
// no coordinate is skipped; f is ~1 and computed in float over a handful of terms, so with
// h = 1e-3 the central difference is off by ~1e-4 at most: tolerance 1e-3 + 1e-2 |g|.
const GradientCheckOptions kSmooth{.step = 1e-3, .abs_tol = 1e-3, .rel_tol = 1e-2, .skip_kinks = false};

double ReferenceDot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

TEST_CASE("FmSecondOrder forward is the sum of pairwise dot products", "[interactions]") {
  // 3 fields of k = 2: <e0,e1> + <e0,e2> + <e1,e2> = (1*3 + 2*4) + (1*5 + 2*6) + (3*5 + 4*6) = 11 + 17 + 39
  const FmSecondOrder fm(3, 2);
  const std::vector<float> e = {1, 2, 3, 4, 5, 6, /*example 2*/ 1, 0, 0, 1, 0, 0};
  std::vector<float> y(2);
  fm.Forward(e, 2, y);
  CHECK(y[0] == Approx(67));
  CHECK(y[1] == Approx(0));
}

TEST_CASE("FmSecondOrder backward matches finite differences", "[interactions]") {
  const size_t batch = 3, fields = 4, k = 3;
  const FmSecondOrder fm(fields, k);
  std::vector<float> e = RandomVector(batch * fields * k, 1);
  const std::vector<float> r = RandomVector(batch, 2);
  std::vector<float> de(e.size(), 0.0f);
  fm.Backward(e, r, batch, de);
  const auto f = [&] {
    std::vector<float> y(batch);
    fm.Forward(e, batch, y);
    return ReferenceDot(y, r);
  };
  const auto result = CheckGradient(f, e, de, kSmooth);
  CHECK(result.max_gradient > 0.1);
}

TEST_CASE("CrossLayer forward by hand", "[interactions]") {
  // v1, d = 2: y = x0 (x . w) + b + x with x0 = (1, 2), x = (3, 4), w = (0.5, -1), b = (0.1, 0.2):
  // x . w = 1.5 - 4 = -2.5, y = (-2.5 + 0.1 + 3, -5 + 0.2 + 4) = (0.6, -0.8).
  const CrossLayer v1(CrossType::kV1, 2, 0, TestGemm());
  const std::vector<float> params = {0.5f, -1.0f, 0.1f, 0.2f};
  const std::vector<float> x0 = {1, 2}, x = {3, 4};
  std::vector<float> inner(1), y(2);
  v1.Forward(params, x0, x, 1, inner, y);
  CHECK(y[0] == Approx(0.6));
  CHECK(y[1] == Approx(-0.8));
  // v2, d = 2: u = x W + b with W = [[1, 0], [2, -1]] (row-major, x W), b = (0, 1):
  // u = (3 + 8, -4 + 1) = (11, -3); y = x0 * u + x = (11 + 3, -6 + 4) = (14, -2).
  const CrossLayer v2(CrossType::kV2, 2, 0, TestGemm());
  const std::vector<float> params2 = {1, 0, 2, -1, 0, 1};
  std::vector<float> inner2(2);
  v2.Forward(params2, x0, x, 1, inner2, y);
  CHECK(y[0] == Approx(14));
  CHECK(y[1] == Approx(-2));
}

TEST_CASE("CrossLayer backward matches finite differences", "[interactions]") {
  const size_t batch = 3, d = 4;
  for (CrossType type : {CrossType::kV1, CrossType::kV2}) {
    INFO("cross type " << static_cast<int>(type));
    const CrossLayer layer(type, d, 2, TestGemm());  // at an offset, behind 2 other floats
    std::vector<float> params = RandomVector(2 + layer.num_params(), 3);
    std::vector<float> x0 = RandomVector(batch * d, 4);
    std::vector<float> x = RandomVector(batch * d, 5);
    const std::vector<float> r = RandomVector(batch * d, 6);
    const size_t inner_size = type == CrossType::kV1 ? batch : batch * d;
    std::vector<float> inner(inner_size), y(batch * d);
    layer.Forward(params, x0, x, batch, inner, y);
    std::vector<float> grads(params.size(), 7.0f), dx0(batch * d, 0.0f), dx(batch * d);
    layer.Backward(params, x0, x, inner, r, batch, grads, dx0, dx);
    CHECK(grads[0] == 7.0f);  // other layers' entries are untouched
    CHECK(grads[1] == 7.0f);
    const auto f = [&] {
      std::vector<float> in(inner_size), out(batch * d);
      layer.Forward(params, x0, x, batch, in, out);
      return ReferenceDot(out, r);
    };
    std::span<float> own(params.data() + 2, layer.num_params());
    CheckGradient(f, own, std::span<const float>(grads).subspan(2), kSmooth);
    CheckGradient(f, x0, dx0, kSmooth);
    const auto on_x = CheckGradient(f, x, dx, kSmooth);
    CHECK(on_x.max_gradient > 0.1);
  }
}

TEST_CASE("DotInteraction forward by hand and backward against finite differences", "[interactions]") {
  const DotInteraction dots(3, 2);
  REQUIRE(dots.out_dim() == 3);
  const std::vector<float> e = {1, 2, 3, 4, 5, 6};
  std::vector<float> y(3);
  dots.Forward(e, 1, y);
  CHECK(y == std::vector<float>{11, 17, 39});  // (0,1), (0,2), (1,2)

  const size_t batch = 2, n = 4, k = 3;
  const DotInteraction big(n, k);
  std::vector<float> v = RandomVector(batch * n * k, 7);
  const std::vector<float> r = RandomVector(batch * big.out_dim(), 8);
  std::vector<float> dv(v.size(), 0.0f);
  big.Backward(v, r, batch, dv);
  const auto f = [&] {
    std::vector<float> out(batch * big.out_dim());
    big.Forward(v, batch, out);
    return ReferenceDot(out, r);
  };
  const auto result = CheckGradient(f, v, dv, kSmooth);
  CHECK(result.max_gradient > 0.1);
}

}  // namespace
}  // namespace fleetps::trainer::model
