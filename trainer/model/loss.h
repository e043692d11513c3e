#pragma once
// Output losses of the models, with their gradients. All are the binary cross-entropy of
// a label y in [0, 1] (normally 0 or 1):
//   loss = -y log p - (1 - y) log(1 - p),  averaged over the batch,
// computed from logits without forming log(p) (stable for any logit), or from the
// probability itself with Paddle's epsilon (log_loss).
// Thread-safety: stateless functions.

#include <cstddef>
#include <span>

#include "common/config/model_config.h"

namespace fleetps::trainer::model {

// Logits per example of an output kind: 2 for softmax2, 1 for sigmoid.
size_t NumLogits(OutputKind kind);

// Sigmoid binary cross-entropy. logits, labels, probs: [batch]. Per example, with z the
// logit: loss = max(z, 0) - z y + log(1 + exp(-|z|)), p = sigmoid(z). Writes probs and,
// unless logit_grads is empty, logit_grads = d(mean loss)/dz = (p - y) / batch.
// Returns the mean loss (0 for an empty batch).
float SigmoidCrossEntropy(std::span<const float> logits, std::span<const float> labels, std::span<float> probs,
                          std::span<float> logit_grads);

// 2-class softmax cross-entropy, PaddleRec rank/dnn's loss. logits [batch x 2]: (no
// click, click); labels, probs: [batch]. loss = -(1 - y) log p0 - y log p1 with
// (p0, p1) = softmax(z0, z1); since p1 = sigmoid(z1 - z0) this is the sigmoid loss of
// z1 - z0. Writes probs = p1 and, unless logit_grads ([batch x 2]) is empty,
// d(mean loss)/dz1 = (p1 - y) / batch = -d(mean loss)/dz0. Returns the mean loss.
float Softmax2CrossEntropy(std::span<const float> logits, std::span<const float> labels, std::span<float> probs,
                           std::span<float> logit_grads);

// Paddle's log_loss of probabilities p [batch] (ESMM's pCTCVR): per example
// -y log(p + eps) - (1 - y) log(1 - p + eps), eps = kLogLossEpsilon. Writes probs = p
// clamped into [0, 1] and, unless grads is empty, grads = d(mean loss)/dp. Returns the
// mean loss.
inline constexpr float kLogLossEpsilon = 1e-4f;
float LogLoss(std::span<const float> p, std::span<const float> labels, std::span<float> probs, std::span<float> grads);

// The loss of a graph output of `kind` (one of the three above) over its inputs [batch x
// fleetps::graph::LossWidth(kind)]: writes probs [batch] and, unless empty, grads; returns the mean.
float OutputLoss(fleetps::graph::LossKind kind, std::span<const float> inputs, std::span<const float> labels,
                 std::span<float> probs, std::span<float> grads);

// Probabilities only (no labels): probs [batch] from an output's inputs.
void PredictOutput(fleetps::graph::LossKind kind, std::span<const float> inputs, std::span<float> probs);

}  // namespace fleetps::trainer::model
