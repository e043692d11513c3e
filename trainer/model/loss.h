#pragma once
// Output losses of the CTR models, with their gradients. Both are the binary
// cross-entropy of a click label y in [0, 1] (normally 0 or 1):
//   loss = -y log p - (1 - y) log(1 - p),  averaged over the batch,
// computed from logits without forming log(p) (stable for any logit).
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

// The loss of `kind` (one of the two above).
float CrossEntropy(OutputKind kind, std::span<const float> logits, std::span<const float> labels,
                   std::span<float> probs, std::span<float> logit_grads);

// Click probabilities only (no labels): probs [batch] from logits [batch x NumLogits(kind)].
void PredictProbabilities(OutputKind kind, std::span<const float> logits, std::span<float> probs);

}  // namespace fleetps::trainer::model
