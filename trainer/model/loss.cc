#include "trainer/model/loss.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace fleetps::trainer::model {
namespace {

// sigmoid(z) without overflow for any z.
float Sigmoid(float z) {
  const float e = std::exp(-std::fabs(z));  // in (0, 1]
  return z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

// Binary cross-entropy of the click log-odds z for label y: max(z, 0) - z y + log1p(exp(-|z|)).
double LogitLoss(float z, float y) {
  return std::max(double{z}, 0.0) - double{z} * y + std::log1p(std::exp(-std::fabs(double{z})));
}

// Example i's click log-odds from logits [batch x width]: the logit itself (sigmoid,
// width 1) or z1 - z0 (2-class softmax, width 2).
float LogOdds(std::span<const float> logits, size_t width, size_t i) {
  return width == 2 ? logits[2 * i + 1] - logits[2 * i] : logits[i];
}

// Both losses: the mean binary cross-entropy of the log-odds. d(mean loss)/d(log-odds)
// = (p - y) / batch, and for softmax the log-odds is z1 - z0.
float BinaryCrossEntropy(size_t width, std::span<const float> logits, std::span<const float> labels,
                         std::span<float> probs, std::span<float> logit_grads) {
  const size_t batch = labels.size();
  FLEETPS_CHECK_EQ(logits.size(), batch * width);
  FLEETPS_CHECK_EQ(probs.size(), batch);
  FLEETPS_CHECK(logit_grads.empty() || logit_grads.size() == logits.size()) << logit_grads.size();
  if (batch == 0) return 0.0f;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double sum = 0.0;
  for (size_t i = 0; i < batch; ++i) {
    const float z = LogOdds(logits, width, i);
    sum += LogitLoss(z, labels[i]);
    probs[i] = Sigmoid(z);
    if (logit_grads.empty()) continue;
    const float g = (probs[i] - labels[i]) * inv_batch;
    if (width == 2) {
      logit_grads[2 * i] = -g;
      logit_grads[2 * i + 1] = g;
    } else {
      logit_grads[i] = g;
    }
  }
  return static_cast<float>(sum / static_cast<double>(batch));
}

}  // namespace

size_t NumLogits(OutputKind kind) { return kind == OutputKind::kSoftmax2 ? 2 : 1; }

float SigmoidCrossEntropy(std::span<const float> logits, std::span<const float> labels, std::span<float> probs,
                          std::span<float> logit_grads) {
  return BinaryCrossEntropy(1, logits, labels, probs, logit_grads);
}

float Softmax2CrossEntropy(std::span<const float> logits, std::span<const float> labels, std::span<float> probs,
                           std::span<float> logit_grads) {
  return BinaryCrossEntropy(2, logits, labels, probs, logit_grads);
}

float CrossEntropy(OutputKind kind, std::span<const float> logits, std::span<const float> labels,
                   std::span<float> probs, std::span<float> logit_grads) {
  return BinaryCrossEntropy(NumLogits(kind), logits, labels, probs, logit_grads);
}

void PredictProbabilities(OutputKind kind, std::span<const float> logits, std::span<float> probs) {
  const size_t width = NumLogits(kind);
  FLEETPS_CHECK_EQ(logits.size(), probs.size() * width);
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = Sigmoid(LogOdds(logits, width, i));
}

}  // namespace fleetps::trainer::model
