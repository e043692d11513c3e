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
    : num_thresholds_(num_thresholds), state_(2 * (num_thresholds + 1) + 4, 0.0) {
  FLEETPS_CHECK_GE(num_thresholds, 1u);
}

void AucCalculator::Add(std::span<const float> predictions, std::span<const float> labels) {
  FLEETPS_CHECK_EQ(predictions.size(), labels.size());
  const size_t nb = num_buckets();
  double loss = 0.0;
  double prediction = 0.0;
  double abs_error = 0.0;
  double squared_error = 0.0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const double p = std::clamp(std::isnan(predictions[i]) ? 0.0 : double{predictions[i]}, 0.0, 1.0);
    const bool click = labels[i] >= 0.5f;
    const auto bucket = static_cast<size_t>(p * static_cast<double>(num_thresholds_));
    state_[(click ? 0 : nb) + bucket] += 1.0;
    const double clipped = std::clamp(p, kLossClip, 1.0 - kLossClip);
    loss -= labels[i] * std::log(clipped) + (1.0 - labels[i]) * std::log(1.0 - clipped);
    prediction += p;
    const double error = p - (click ? 1.0 : 0.0);
    abs_error += std::abs(error);
    squared_error += error * error;
  }
  state_[2 * nb] += loss;
  state_[2 * nb + 1] += prediction;
  state_[2 * nb + 2] += abs_error;
  state_[2 * nb + 3] += squared_error;
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

double AucCalculator::Copc() const {
  const double predicted = PredictedCtr();
  return predicted > 1e-6 ? ActualCtr() / predicted : 0.0;
}

double AucCalculator::Mae() const {
  const double n = num_examples();
  return n > 0.0 ? abs_error_sum() / n : 0.0;
}

double AucCalculator::Rmse() const {
  const double n = num_examples();
  return n > 0.0 ? std::sqrt(squared_error_sum() / n) : 0.0;
}

double AucCalculator::BucketError() const {
  constexpr double kMaxSpan = 0.01;             // a group's predicted CTRs span at most this
  constexpr double kRelativeErrorBound = 0.05;  // a group counts once its CTR is this precise
  const std::span<const double> pos = positive_counts();
  const std::span<const double> neg = negative_counts();
  const auto buckets = static_cast<double>(num_buckets());
  double last_ctr = -1.0;
  double impressions = 0.0, ctr_sum = 0.0, clicks = 0.0;  // the current group's
  double error_sum = 0.0, error_count = 0.0;
  for (size_t b = 0; b < num_buckets(); ++b) {
    const double ctr = static_cast<double>(b) / buckets;
    if (std::abs(ctr - last_ctr) > kMaxSpan) {  // a new group
      last_ctr = ctr;
      impressions = ctr_sum = clicks = 0.0;
    }
    const double shows = pos[b] + neg[b];
    impressions += shows;
    ctr_sum += ctr * shows;
    clicks += pos[b];
    if (impressions == 0.0) continue;
    const double predicted = ctr_sum / impressions;
    if (predicted == 0.0) continue;
    if (std::sqrt((1.0 - predicted) / (predicted * impressions)) < kRelativeErrorBound) {
      error_sum += std::abs(clicks / impressions / predicted - 1.0) * impressions;
      error_count += impressions;
      last_ctr = -1.0;  // the next bucket starts a new group
    }
  }
  return error_count > 0.0 ? error_sum / error_count : 0.0;
}

}  // namespace fleetps::trainer::model
