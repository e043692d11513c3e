#pragma once
// The pass table's row rules — RowAccessor::ApplyPush and RowAccessor::Extend with the
// table's sparse optimizer (common/optimizer, server/accessor/row_accessor.h) — in one
// definition for the CUDA kernels (heter_trainer/cuda/pass_table_kernels.cu) and the host. The kernels must give
// bitwise what the pservers' host code gives, so every float operation is rounded on its
// own (the intrinsics on the device; plain operators on the host, where fleetps compiles
// without contraction into fused multiply-adds), in the host code's order. The host form
// lets a test without a GPU (test/heter_trainer/gpups/pass_rules_test.cc) check the kernels'
// arithmetic against RowAccessor itself.
//
// Plain C++ apart from the __host__ __device__ markers, so that host code may include it.

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace fleetps::heter::gpu {

// The sparse rule and the row layout, by value for the kernels (PassRuleOf in
// pass_table_impl.h builds it).
struct PassRule {
  int kind = 0;  // 0 SGD, 1 Adagrad, 2 Adam (OptimizerKind order)
  float learning_rate = 0, epsilon = 0, beta1 = 0, beta2 = 0, initial_accumulator = 0;
  float decay = 1;  // Optimizer::decay(): weights are first multiplied by it
  bool has_bounds = false;
  float bound_min = 0, bound_max = 0;
  uint32_t dim = 0;
  uint32_t shared_floats = 0;   // optimizer shared state floats
  uint32_t element_floats = 0;  // optimizer state floats per weight
  uint32_t row_floats = 0;      // RowAccessor::row_floats()
  uint32_t flags_offset = 0;
  uint32_t stats_offset = 0;
  bool ctr = false;
  float nonclk_coeff = 0, click_coeff = 0, embedx_threshold = 0;
};

namespace rules {

inline constexpr uint32_t kChanged = 1u;     // disk::RowFlag::Changed
inline constexpr uint32_t kExtended = 2u;    // disk::RowFlag::EmbedxExtended
inline constexpr uint32_t kDirty = 1u << 8;  // RowAccessor::kDirty
inline constexpr uint32_t kShow = 0, kClick = 1, kUnseen = 2, kDeltaScore = 3;

// One rounding each.
FLEETPS_HOST_DEVICE inline float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FLEETPS_HOST_DEVICE inline float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FLEETPS_HOST_DEVICE inline float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FLEETPS_HOST_DEVICE inline float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FLEETPS_HOST_DEVICE inline float Sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// std::clamp(w, bound_min, bound_max), as Optimizer::ClipToBounds.
FLEETPS_HOST_DEVICE inline float Clip(const PassRule& r, float w) {
  if (!r.has_bounds) return w;
  return w < r.bound_min ? r.bound_min : (r.bound_max < w ? r.bound_max : w);
}

// 0 for a subnormal x (of either sign), else x: adam.cc's.
FLEETPS_HOST_DEVICE inline float FlushSubnormal(float x) {
  return x < 1.17549435e-38f && x > -1.17549435e-38f ? 0.0f : x;
}

// Optimizer::UpdateSpan on n weights.
FLEETPS_HOST_DEVICE inline void UpdateSpan(const PassRule& r, float* w, float* element, float* shared,
                                           const float* grad, uint32_t n) {
  if (r.decay != 1.0f) {
    for (uint32_t i = 0; i < n; ++i) w[i] = Mul(w[i], r.decay);
  }
  if (r.kind == 0) {
    for (uint32_t i = 0; i < n; ++i) w[i] = Clip(r, Sub(w[i], Mul(r.learning_rate, grad[i])));
  } else if (r.kind == 1) {
    for (uint32_t i = 0; i < n; ++i) {
      element[i] = Add(element[i], Mul(grad[i], grad[i]));
      const float step = Div(Mul(r.learning_rate, grad[i]), Add(Sqrt(element[i]), r.epsilon));
      w[i] = Clip(r, Sub(w[i], step));
    }
  } else {
    float& b1 = shared[0];
    float& b2 = shared[1];
    const float lr_t = Mul(r.learning_rate, Div(Sqrt(Sub(1.0f, b2)), Sub(1.0f, b1)));
    for (uint32_t i = 0; i < n; ++i) {
      float& m = element[2 * i];
      float& v = element[2 * i + 1];
      const float g = grad[i];
      m = FlushSubnormal(Add(Mul(r.beta1, m), Mul(Sub(1.0f, r.beta1), g)));
      v = FlushSubnormal(Add(Mul(r.beta2, v), Mul(Mul(Sub(1.0f, r.beta2), g), g)));
      w[i] = Clip(r, Sub(w[i], Mul(lr_t, Div(m, Add(Sqrt(v), r.epsilon)))));
    }
    b1 = FlushSubnormal(Mul(b1, r.beta1));
    b2 = FlushSubnormal(Mul(b2, r.beta2));
  }
}

// RowAccessor::Score.
FLEETPS_HOST_DEVICE inline float Score(const PassRule& r, float show, float click) {
  return Add(Mul(Sub(show, click), r.nonclk_coeff), Mul(click, r.click_coeff));
}

// RowAccessor::ApplyPush (not delta) on `row`: true when the row must now be extended.
FLEETPS_HOST_DEVICE inline bool PushRow(const PassRule& r, float* row, const float* grad, float show, float click) {
  const uint32_t flags = static_cast<uint32_t>(row[r.flags_offset]);
  const uint32_t weights = (!r.ctr || (flags & kExtended) != 0) ? r.dim : 1;
  if (r.ctr) {
    float* st = row + r.stats_offset;
    st[kShow] = Add(st[kShow], show);
    st[kClick] = Add(st[kClick], click);
    st[kDeltaScore] = Add(st[kDeltaScore], Score(r, show, click));
    st[kUnseen] = 0.0f;
  }
  float* state = row + r.dim;
  UpdateSpan(r, row, state + r.shared_floats, state, grad, weights);
  row[r.flags_offset] = static_cast<float>(flags | kChanged | kDirty);
  return r.ctr && (flags & kExtended) == 0 &&
         Score(r, row[r.stats_offset + kShow], row[r.stats_offset + kClick]) >= r.embedx_threshold;
}

// RowAccessor::Extend with the embedx weights given (initial[1, dim)): fresh embedx element
// state, the Extended flag.
FLEETPS_HOST_DEVICE inline void ExtendRow(const PassRule& r, float* row, const float* initial) {
  for (uint32_t j = 1; j < r.dim; ++j) row[j] = initial[j];
  float* element = row + r.dim + r.shared_floats + r.element_floats;  // weight 1's state
  const uint32_t n = (r.dim - 1) * r.element_floats;
  const float fresh = r.kind == 1 ? r.initial_accumulator : 0.0f;
  for (uint32_t i = 0; i < n; ++i) element[i] = fresh;
  row[r.flags_offset] = static_cast<float>(static_cast<uint32_t>(row[r.flags_offset]) | kExtended);
}

}  // namespace rules
}  // namespace fleetps::heter::gpu
