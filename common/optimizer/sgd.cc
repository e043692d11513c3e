#include "common/optimizer/sgd.h"

namespace fleetps::optimizer {

void SgdOptimizer::ApplySpan(float* w, float* /*element_state*/, float* /*shared_state*/, const float* grad,
                             size_t n) const {
  const float lr = options().learning_rate;
  for (size_t i = 0; i < n; ++i) w[i] -= lr * grad[i];
}

}  // namespace fleetps::optimizer
