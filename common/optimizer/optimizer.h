#pragma once
// Optimizer: the sparse/dense update rules, shared by the parameter-server tables and the
// trainer's GEO local copies (hence common/). One file per rule (sgd, adagrad, adam), built by
// CreateOptimizer() from OptimizerOptions.
//
// State layout. A rule keeps `element_state_size()` floats per weight and
// `shared_state_size()` floats shared by a span of weights (a sparse row, or a whole dense
// slice). A sparse row's state is one contiguous block of StateSize(dim) floats:
//
//   [shared state (shared_state_size())][element state: element_state_size() floats per
//                                        weight, weight-major (m0 v0 m1 v1 ... for Adam)]
//
// Callers that keep shared and element state apart (DenseTable: one shared block for the
// whole table, element state for any sub-range) use the *Span functions.
//
// Rules (g = gradient; all arithmetic in float, as Paddle's sparse rules):
//   SGD:     w -= lr * g.                                       no state.
//   Adagrad: g2sum += g*g; w -= lr * g / (sqrt(g2sum) + epsilon).
//            element state: g2sum, starts at initial_accumulator.
//   Adam:    lr_t = lr * (sqrt(1 - beta2_pow) / (1 - beta1_pow))
//            m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//            w -= lr_t * (m / (sqrt(v) + epsilon))
//            then beta1_pow *= beta1, beta2_pow *= beta2 (once per Update call; a power that
//            would go subnormal becomes 0, which changes no result: 1 - pow is already 1).
//            element state: m, v (start at 0); shared state: beta1_pow, beta2_pow (start at
//            beta1, beta2: Paddle's convention, so the first step is already bias-corrected).
//   All:     with weight_decay (decoupled, as AdamW), before the rule: w -= lr * weight_decay * w;
//            after the update, each w is clipped into [bound_min, bound_max] when has_bounds.
//
// Hot path: one virtual call per span, none per element, no allocation.
// Thread-safety: an Optimizer is immutable after construction; concurrent calls on
// disjoint weights/state are safe.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/config/table_options.h"
#include "common/status.h"

namespace fleetps::optimizer {

// OK, or InvalidArgument naming the first bad field ("optimizer.learning_rate ...").
// Checks: learning_rate finite and > 0; weight_decay finite, >= 0 and with
// learning_rate * weight_decay < 1; Adagrad: initial_accumulator finite and >= 0;
// Adagrad/Adam: epsilon finite and > 0; Adam: beta1, beta2 in [0, 1); has_bounds: both
// bounds finite and bound_min <= bound_max.
Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const OptimizerOptions& options() const { return options_; }
  uint32_t element_state_size() const { return element_state_size_; }
  uint32_t shared_state_size() const { return shared_state_size_; }
  // The factor every update first multiplies the weights by: 1 - learning_rate * weight_decay.
  float decay() const { return decay_; }
  // Floats of state for one row of `dim` weights.
  uint32_t StateSize(uint32_t dim) const { return shared_state_size_ + element_state_size_ * dim; }

  // Row form: `state` holds StateSize(dim) floats laid out as described above.
  void InitState(float* state, uint32_t dim) const { InitSpanState(state + shared_state_size_, state, dim); }
  void Update(float* w, float* state, const float* grad, uint32_t dim) const {
    UpdateSpan(w, state + shared_state_size_, state, grad, dim);
  }

  // Span form: n weights w[0, n) with their element state (n * element_state_size() floats)
  // and a shared state block (shared_state_size() floats). One call is one optimizer step for
  // the shared state (Adam advances its beta powers once).
  virtual void InitSpanState(float* element_state, float* shared_state, size_t n) const = 0;
  void UpdateSpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const {
    if (decay_ != 1.0f) {
      for (size_t i = 0; i < n; ++i) w[i] *= decay_;
    }
    ApplySpan(w, element_state, shared_state, grad, n);
    if (options_.has_bounds) ClipToBounds(w, n);
  }

 protected:
  Optimizer(const OptimizerOptions& options, uint32_t element_state_size, uint32_t shared_state_size)
      : options_(options),
        element_state_size_(element_state_size),
        shared_state_size_(shared_state_size),
        decay_(1.0f - options.learning_rate * options.weight_decay) {}

  // The rule itself, without clipping.
  virtual void ApplySpan(float* w, float* element_state, float* shared_state, const float* grad, size_t n) const = 0;

 private:
  void ClipToBounds(float* w, size_t n) const;

  const OptimizerOptions options_;
  const uint32_t element_state_size_;
  const uint32_t shared_state_size_;
  const float decay_;  // 1 - learning_rate * weight_decay: the factor each update starts with
};

// Validates `options` and builds the rule it names.
StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options);

}  // namespace fleetps::optimizer
