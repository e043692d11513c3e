#include "trainer/model/loss.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "trainer/model/loss_rules.h"

namespace fleetps::trainer::model {
namespace {

using loss_rules::LogOdds;
using loss_rules::Sigmoid;

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
    const float z = LogOdds(logits.data(), width, i);
    sum += loss_rules::ExampleLoss(z, labels[i]);
    probs[i] = Sigmoid(z);
    if (logit_grads.empty()) continue;
    loss_rules::WriteLogitGrads(loss_rules::LogOddsGrad(probs[i], labels[i], inv_batch), width, i, logit_grads.data());
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

float LogLoss(std::span<const float> p, std::span<const float> labels, std::span<float> probs, std::span<float> grads) {
  const size_t batch = labels.size();
  FLEETPS_CHECK_EQ(p.size(), batch);
  FLEETPS_CHECK_EQ(probs.size(), batch);
  FLEETPS_CHECK(grads.empty() || grads.size() == batch) << grads.size();
  if (batch == 0) return 0.0f;
  const double inv_batch = 1.0 / static_cast<double>(batch);
  const double eps = kLogLossEpsilon;
  double sum = 0.0;
  for (size_t i = 0; i < batch; ++i) {
    const double x = p[i], y = labels[i];
    sum += -y * std::log(x + eps) - (1 - y) * std::log(1 - x + eps);
    probs[i] = std::clamp(p[i], 0.0f, 1.0f);
    if (!grads.empty()) grads[i] = static_cast<float>((-y / (x + eps) + (1 - y) / (1 - x + eps)) * inv_batch);
  }
  return static_cast<float>(sum * inv_batch);
}

float OutputLoss(fleetps::graph::LossKind kind, std::span<const float> inputs, std::span<const float> labels,
                 std::span<float> probs, std::span<float> grads) {
  if (kind == fleetps::graph::LossKind::kLogLoss) return LogLoss(inputs, labels, probs, grads);
  return BinaryCrossEntropy(fleetps::graph::LossWidth(kind), inputs, labels, probs, grads);
}

void PredictOutput(fleetps::graph::LossKind kind, std::span<const float> inputs, std::span<float> probs) {
  const size_t width = fleetps::graph::LossWidth(kind);
  FLEETPS_CHECK_EQ(inputs.size(), probs.size() * width);
  for (size_t i = 0; i < probs.size(); ++i) {
    probs[i] = kind == fleetps::graph::LossKind::kLogLoss ? std::clamp(inputs[i], 0.0f, 1.0f)
                                                          : Sigmoid(LogOdds(inputs.data(), width, i));
  }
}

}  // namespace fleetps::trainer::model
