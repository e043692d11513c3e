#pragma once
// Adam, Paddle's sparse convention. Element state: m, v interleaved (2 floats per weight,
// start at 0). Shared state: beta1_pow, beta2_pow (start at beta1, beta2; advanced once per
// span update). See common/optimizer/optimizer.h for the exact rule.

#include "common/optimizer/optimizer.h"

namespace fleetps::optimizer {

class AdamOptimizer final : public Optimizer {
 public:
  // `options` must pass ValidateOptimizerOptions (CreateOptimizer checks).
  explicit AdamOptimizer(const OptimizerOptions& options) : Optimizer(options, 2, 2) {}

  void InitSpanState(float* element_state, float* shared_state, size_t n) const override;

 protected:
  void ApplySpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const override;
};

}  // namespace fleetps::optimizer
