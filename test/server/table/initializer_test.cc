#include "server/table/initializer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace fleetps::server {
namespace {

Initializer MustCreate(const InitializerOptions& options) {
  auto created = Initializer::Create(options);
  REQUIRE(created.ok());
  return std::move(created).value();
}

TEST_CASE("Initializer: pure function of (seed, key, column)", "[initializer]") {
  InitializerOptions o;
  o.seed = 99;
  const Initializer a = MustCreate(o);
  const Initializer b = MustCreate(o);
  std::vector<float> row(16);
  a.FillRow(123456789, row.data(), 16);
  for (uint32_t c = 0; c < 16; ++c) {
    CHECK(row[c] == a.Value(123456789, c));
    CHECK(row[c] == b.Value(123456789, c));
  }
  // A different seed, key or column gives a different value.
  o.seed = 100;
  const Initializer other_seed = MustCreate(o);
  CHECK(other_seed.Value(123456789, 0) != a.Value(123456789, 0));
  CHECK(a.Value(123456790, 0) != a.Value(123456789, 0));
  CHECK(row[0] != row[1]);
}

TEST_CASE("Initializer: uniform stays in [min, max) and spreads", "[initializer]") {
  InitializerOptions o;
  o.kind = InitializerKind::kUniform;
  o.min = -0.5f;
  o.max = 0.25f;
  const Initializer init = MustCreate(o);
  double sum = 0;
  float lo = 1, hi = -1;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float v = init.Value(i, i % 7);
    REQUIRE(v >= o.min);
    REQUIRE(v < o.max);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  CHECK(sum / n == Approx(-0.125).margin(0.005));
  CHECK(lo < -0.49f);
  CHECK(hi > 0.24f);
}

TEST_CASE("Initializer: gaussian moments, zeros, constant", "[initializer]") {
  InitializerOptions o;
  o.kind = InitializerKind::kGaussian;
  o.mean = 1.0f;
  o.stddev = 2.0f;
  const Initializer gauss = MustCreate(o);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = gauss.Value(i, 3);
    REQUIRE(std::isfinite(v));
    sum += v;
    sum2 += v * v;
  }
  const double mean = sum / n;
  CHECK(mean == Approx(1.0).margin(0.02));
  CHECK(std::sqrt(sum2 / n - mean * mean) == Approx(2.0).margin(0.02));

  o.kind = InitializerKind::kZeros;
  CHECK(MustCreate(o).Value(5, 5) == 0.0f);
  o.kind = InitializerKind::kConstant;
  o.value = 0.75f;
  CHECK(MustCreate(o).Value(5, 5) == 0.75f);
}

TEST_CASE("Initializer: bad options name the field", "[initializer]") {
  InitializerOptions o;
  o.min = 1.0f;
  o.max = 1.0f;
  auto st = Initializer::Create(o).status();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("min") != std::string::npos);

  o = {};
  o.kind = InitializerKind::kGaussian;
  o.stddev = -1.0f;
  st = Initializer::Create(o).status();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("initializer.stddev") != std::string::npos);

  o = {};
  o.kind = InitializerKind::kConstant;
  o.value = std::numeric_limits<float>::quiet_NaN();
  st = Initializer::Create(o).status();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("initializer.value") != std::string::npos);
}

}  // namespace
}  // namespace fleetps::server
