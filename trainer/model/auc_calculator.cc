#include "trainer/model/auc_calculator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/check.h"

namespace fleetps::trainer::model {
namespace {

constexpr double kLossClip = 1e-7;

double Sum(std::span<const double> values) { return std::accumulate(values.begin(), values.end(), 0.0); }

}  // namespace

AucCalculator::AucCalculator(size_t num_thresholds)
    : num_thresholds_(num_thresholds), state_(2 * (num_thresholds + 1) + 2, 0.0) {
  FLEETPS_CHECK_GE(num_thresholds, 1u);
}

void AucCalculator::Add(std::span<const float> predictions, std::span<const float> labels) {
  FLEETPS_CHECK_EQ(predictions.size(), labels.size());
  const size_t nb = num_buckets();
  double loss = 0.0;
  double prediction = 0.0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const double p = std::clamp(std::isnan(predictions[i]) ? 0.0 : double{predictions[i]}, 0.0, 1.0);
    const bool click = labels[i] >= 0.5f;
    const auto bucket = static_cast<size_t>(p * static_cast<double>(num_thresholds_));
    state_[(click ? 0 : nb) + bucket] += 1.0;
    const double clipped = std::clamp(p, kLossClip, 1.0 - kLossClip);
    loss -= labels[i] * std::log(clipped) + (1.0 - labels[i]) * std::log(1.0 - clipped);
    prediction += p;
  }
  state_[2 * nb] += loss;
  state_[2 * nb + 1] += prediction;
}

void AucCalculator::Reset() { std::ranges::fill(state_, 0.0); }

void AucCalculator::MergeState(std::span<const double> other) {
  FLEETPS_CHECK_EQ(other.size(), state_.size()) << "AUC states of different num_thresholds";
  for (size_t i = 0; i < state_.size(); ++i) state_[i] += other[i];
}

std::span<const double> AucCalculator::positive_counts() const {
  return std::span<const double>(state_).subspan(0, num_buckets());
}

std::span<const double> AucCalculator::negative_counts() const {
  return std::span<const double>(state_).subspan(num_buckets(), num_buckets());
}

double AucCalculator::num_examples() const { return Sum(positive_counts()) + Sum(negative_counts()); }

double AucCalculator::Auc() const {
  // Paddle's auc kernel: walk the thresholds from the highest down, accumulating true and
  // false positives, and add the trapezoid between consecutive ROC points.
  const std::span<const double> pos = positive_counts();
  const std::span<const double> neg = negative_counts();
  double total_pos = 0.0;
  double total_neg = 0.0;
  double area = 0.0;
  for (size_t b = num_buckets(); b-- > 0;) {
    const double prev_pos = total_pos;
    const double prev_neg = total_neg;
    total_pos += pos[b];
    total_neg += neg[b];
    area += (total_neg - prev_neg) * (total_pos + prev_pos) / 2.0;
  }
  return total_pos > 0.0 && total_neg > 0.0 ? area / total_pos / total_neg : 0.0;
}

double AucCalculator::MeanLoss() const {
  const double n = num_examples();
  return n > 0.0 ? loss_sum() / n : 0.0;
}

double AucCalculator::ActualCtr() const {
  const double n = num_examples();
  return n > 0.0 ? Sum(positive_counts()) / n : 0.0;
}

double AucCalculator::PredictedCtr() const {
  const double n = num_examples();
  return n > 0.0 ? prediction_sum() / n : 0.0;
}

}  // namespace fleetps::trainer::model
