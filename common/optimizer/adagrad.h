#pragma once
// Adagrad with a per-weight accumulator: g2sum += g*g; w -= lr * g / (sqrt(g2sum) + epsilon).
// Element state: g2sum (1 float per weight, starts at initial_accumulator); no shared state.
// See common/optimizer/optimizer.h for the contract.

#include "common/optimizer/optimizer.h"

namespace fleetps::optimizer {

class AdagradOptimizer final : public Optimizer {
 public:
  // `options` must pass ValidateOptimizerOptions (CreateOptimizer checks).
  explicit AdagradOptimizer(const OptimizerOptions& options) : Optimizer(options, 1, 0) {}

  void InitSpanState(float* element_state, float* shared_state, size_t n) const override;

 protected:
  void ApplySpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const override;
};

}  // namespace fleetps::optimizer
