#pragma once
// Helpers for the model tests: random vectors and central finite-difference gradient checks.
//
// Tolerance reasoning. The functions under test compute in float, so f(x) carries a
// rounding error eps_f of at most ~1e-7 * |f| (float epsilon 6e-8 times a handful
// of accumulated operations in tiny layers). The central difference
//   fd = (f(x + h) - f(x - h)) / 2h
// then has a rounding error of about eps_f / h and a truncation error of h^2 f''' / 6.
// Callers pick h so that both are well under their tolerance (see each test). Where f is
// only piecewise smooth (ReLU), a step may cross a kink; such a coordinate is detected
// because the differences at h and h / 2 disagree by more than the tolerance, and it is
// skipped (callers bound how many may be).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trainer/model/layers.h"

namespace fleetps::trainer::model::testing {

// The dense backend layers under test run on: fp32 with the CPU's best kernels, as trainers
// run by default (one per test binary).
inline const dense::CpuGemm* TestGemm() {
  static const std::shared_ptr<const dense::CpuGemm> gemm = dense::CpuGemm::Fp32();
  return gemm.get();
}

// n floats uniform in [lo, hi), deterministic from seed.
inline std::vector<float> RandomVector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  UniformRandom rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Next(lo, hi);
  return v;
}

struct GradientCheckOptions {
  double step = 1e-3;     // h
  double abs_tol = 1e-3;  // |fd - analytic| <= abs_tol + rel_tol * |analytic|
  double rel_tol = 1e-2;
  bool skip_kinks = false;  // skip coordinates where fd(h) and fd(h/2) disagree
};

struct GradientCheckResult {
  size_t checked = 0;
  size_t skipped = 0;
  double max_error = 0.0;     // largest |fd - analytic| over checked coordinates
  double max_gradient = 0.0;  // largest |analytic|, to show the check was not vacuous
};

// Checks analytic[i] == d f / d x[i] for every i. f() reads x (which this perturbs in
// place and restores) and returns the objective.
template <typename F>
GradientCheckResult CheckGradient(F f, std::span<float> x, std::span<const float> analytic,
                                  const GradientCheckOptions& options) {
  REQUIRE(x.size() == analytic.size());
  GradientCheckResult result;
  const auto central_difference = [&](size_t i, double h) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + h);
    const double plus = f();
    x[i] = static_cast<float>(saved - h);
    const double minus = f();
    // The step actually taken in float, not h, divides the difference.
    const double taken = (double{static_cast<float>(saved + h)} - double{static_cast<float>(saved - h)});
    x[i] = saved;
    return (plus - minus) / taken;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = central_difference(i, options.step);
    const double tol = options.abs_tol + options.rel_tol * std::fabs(analytic[i]);
    if (options.skip_kinks && std::fabs(fd - central_difference(i, options.step / 2)) > tol) {
      ++result.skipped;
      continue;
    }
    INFO("coordinate " << i << ": finite difference " << fd << ", analytic " << analytic[i]);
    CHECK(std::fabs(fd - analytic[i]) <= tol);
    ++result.checked;
    result.max_error = std::max(result.max_error, std::fabs(fd - analytic[i]));
    result.max_gradient = std::max(result.max_gradient, double{std::fabs(analytic[i])});
  }
  return result;
}

}  // namespace fleetps::trainer::model::testing
