#include "common/optimizer/adagrad.h"

#include <algorithm>
#include <cmath>

namespace fleetps::optimizer {

void AdagradOptimizer::InitSpanState(float* element_state, float* /*shared_state*/, size_t n) const {
  std::fill_n(element_state, n, options().initial_accumulator);
}

void AdagradOptimizer::ApplySpan(float* w, float* element_state, float* /*shared_state*/, const float* grad,
                                 size_t n) const {
  const float lr = options().learning_rate;
  const float epsilon = options().epsilon;
  float* g2sum = element_state;
  for (size_t i = 0; i < n; ++i) {
    g2sum[i] += grad[i] * grad[i];
    w[i] -= lr * grad[i] / (std::sqrt(g2sum[i]) + epsilon);
  }
}

}  // namespace fleetps::optimizer
