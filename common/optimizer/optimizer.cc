#include "common/optimizer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/optimizer/adagrad.h"
#include "common/optimizer/adam.h"
#include "common/optimizer/sgd.h"

namespace fleetps::optimizer {
namespace {

// "optimizer.<field> must be <what>, got <value>".
Status BadField(const char* field, const char* what, float value) {
  return Status::InvalidArgument(std::string("optimizer.") + field + " must be " + what + ", got " +
                                 std::to_string(value));
}

}  // namespace

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(o.learning_rate) && o.learning_rate > 0)) {
    return BadField("learning_rate", "finite and > 0", o.learning_rate);
  }
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0)) {
    return BadField("weight_decay", "finite and >= 0", o.weight_decay);
  }
  if (!(o.learning_rate * o.weight_decay < 1)) {
    return Status::InvalidArgument("optimizer.weight_decay " + std::to_string(o.weight_decay) +
                                   " times learning_rate " + std::to_string(o.learning_rate) +
                                   " must be < 1 (each update multiplies the weights by 1 - their product)");
  }
  if (o.kind == OptimizerKind::kAdagrad && !(std::isfinite(o.initial_accumulator) && o.initial_accumulator >= 0)) {
    return BadField("initial_accumulator", "finite and >= 0", o.initial_accumulator);
  }
  if ((o.kind == OptimizerKind::kAdagrad || o.kind == OptimizerKind::kAdam) &&
      !(std::isfinite(o.epsilon) && o.epsilon > 0)) {
    return BadField("epsilon", "finite and > 0", o.epsilon);
  }
  if (o.kind == OptimizerKind::kAdam) {
    if (!(o.beta1 >= 0 && o.beta1 < 1)) return BadField("beta1", "in [0, 1)", o.beta1);
    if (!(o.beta2 >= 0 && o.beta2 < 1)) return BadField("beta2", "in [0, 1)", o.beta2);
  }
  if (o.has_bounds) {
    if (!std::isfinite(o.bound_min)) return BadField("bound_min", "finite", o.bound_min);
    if (!std::isfinite(o.bound_max)) return BadField("bound_max", "finite", o.bound_max);
    if (!(o.bound_min <= o.bound_max)) {
      return Status::InvalidArgument("optimizer.weight_bounds: bound_min " + std::to_string(o.bound_min) +
                                     " must be <= bound_max " + std::to_string(o.bound_max));
    }
  }
  return Status::OK();
}

void Optimizer::ClipToBounds(float* w, size_t n) const {
  const float lo = options_.bound_min;
  const float hi = options_.bound_max;
  for (size_t i = 0; i < n; ++i) w[i] = std::clamp(w[i], lo, hi);
}

StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options) {
  RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  switch (options.kind) {
    case OptimizerKind::kSgd: return std::unique_ptr<Optimizer>(std::make_unique<SgdOptimizer>(options));
    case OptimizerKind::kAdagrad: return std::unique_ptr<Optimizer>(std::make_unique<AdagradOptimizer>(options));
    case OptimizerKind::kAdam: return std::unique_ptr<Optimizer>(std::make_unique<AdamOptimizer>(options));
  }
  return Status::InvalidArgument("optimizer.name: unknown optimizer kind " +
                                 std::to_string(static_cast<int>(options.kind)));
}

}  // namespace fleetps::optimizer
