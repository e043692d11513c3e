#include "common/optimizer/adam.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fleetps::optimizer {
namespace {
// Shared state slots.
constexpr size_t kBeta1Pow = 0;
constexpr size_t kBeta2Pow = 1;

// 0 for a subnormal x (of either sign), else x.
float FlushSubnormal(float x) {
  return x < std::numeric_limits<float>::min() && x > -std::numeric_limits<float>::min() ? 0.0f : x;
}

}  // namespace

void AdamOptimizer::InitSpanState(float* element_state, float* shared_state, size_t n) const {
  std::fill_n(element_state, 2 * n, 0.0f);
  shared_state[kBeta1Pow] = options().beta1;
  shared_state[kBeta2Pow] = options().beta2;
}

void AdamOptimizer::ApplySpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const {
  const float beta1 = options().beta1;
  const float beta2 = options().beta2;
  const float epsilon = options().epsilon;
  float& beta1_pow = shared_state[kBeta1Pow];
  float& beta2_pow = shared_state[kBeta2Pow];
  const float lr_t = options().learning_rate * (std::sqrt(1.0f - beta2_pow) / (1.0f - beta1_pow));
  for (size_t i = 0; i < n; ++i) {
    float& m = element_state[2 * i];
    float& v = element_state[2 * i + 1];
    const float g = grad[i];
    // A moment that decays into the subnormal range (m of a weight whose gradient has been 0
    // for ~800 steps at beta1 0.9: a dead ReLU unit's) is flushed to 0. Subnormal arithmetic
    // takes a microcode assist per operation on x86 (measured on a 16-core Intel host: a
    // dense replica's Adam step 10x slower late in an epoch), and a subnormal m or v moves no
    // weight: lr_t * m / (sqrt(v) + epsilon) is then below 2^-100 and w is far above it.
    m = FlushSubnormal(beta1 * m + (1.0f - beta1) * g);
    v = FlushSubnormal(beta2 * v + (1.0f - beta2) * g * g);
    w[i] -= lr_t * (m / (std::sqrt(v) + epsilon));
  }
  // Flush the powers to 0 before they go subnormal (a row pushed ~900 times at beta1 0.9),
  // for the same reason; below 2^-25 a power no longer changes 1 - pow in float, so the
  // flush changes no result.
  beta1_pow = FlushSubnormal(beta1_pow * beta1);
  beta2_pow = FlushSubnormal(beta2_pow * beta2);
}

}  // namespace fleetps::optimizer
