#pragma once
// Plain SGD: w -= lr * g. No state. See common/optimizer/optimizer.h for the contract.

#include "common/optimizer/optimizer.h"

namespace fleetps::optimizer {

class SgdOptimizer final : public Optimizer {
 public:
  // `options` must pass ValidateOptimizerOptions (CreateOptimizer checks).
  explicit SgdOptimizer(const OptimizerOptions& options) : Optimizer(options, 0, 0) {}

  void InitSpanState(float* element_state, float* shared_state, size_t n) const override {}

 protected:
  void ApplySpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const override;
};

}  // namespace fleetps::optimizer
