#pragma once
// The per-example arithmetic of the CTR losses (loss.h) in one definition for the host
// (loss.cc) and the CUDA dense step's kernels (heter_trainer/cuda/dense_kernels.cu), so the
// GPU computes the formulas that loss_test checks on every machine. The batch loops and the
// sums (a fixed-order reduction on the GPU) stay with each caller.
//
// Plain C++ apart from the __host__ __device__ markers; the C math names (expf, exp, log1p,
// fabs) exist on both sides.

#include <math.h>

#include <cstddef>

#include "common/host_device.h"

namespace fleetps::trainer::model::loss_rules {

// sigmoid(z) without overflow for any z: exp of a non-positive argument only.
FLEETPS_HOST_DEVICE inline float Sigmoid(float z) {
  const float e = expf(-fabsf(z));  // in (0, 1]
  return z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

// Example i's click log-odds from logits [batch x width]: the logit itself (sigmoid, width
// 1) or z1 - z0 (2-class softmax, width 2, since p1 = sigmoid(z1 - z0)).
FLEETPS_HOST_DEVICE inline float LogOdds(const float* logits, size_t width, size_t i) {
  return width == 2 ? logits[2 * i + 1] - logits[2 * i] : logits[i];
}

// Binary cross-entropy of the log-odds z for label y, in double:
// max(z, 0) - z y + log1p(exp(-|z|)). A NaN logit gives a NaN loss (not 0).
FLEETPS_HOST_DEVICE inline double ExampleLoss(float z, float y) {
  const double zd = z;
  const double positive = zd < 0.0 ? 0.0 : zd;  // as std::max(zd, 0.0)
  return positive - zd * static_cast<double>(y) + log1p(exp(-fabs(zd)));
}

// d(mean loss)/d(log-odds) of an example with probability p and label y in a batch whose
// size's inverse is inv_batch. For softmax2 it is d/dz1, and d/dz0 is its negation.
FLEETPS_HOST_DEVICE inline float LogOddsGrad(float p, float y, float inv_batch) { return (p - y) * inv_batch; }

// Writes an example's logit gradients: g for width 1; (-g, g) for width 2.
FLEETPS_HOST_DEVICE inline void WriteLogitGrads(float g, size_t width, size_t i, float* logit_grads) {
  if (width == 2) {
    logit_grads[2 * i] = -g;
    logit_grads[2 * i + 1] = g;
  } else {
    logit_grads[i] = g;
  }
}

}  // namespace fleetps::trainer::model::loss_rules
