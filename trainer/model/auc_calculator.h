#pragma once
// AucCalculator: Paddle-style bucketed AUC (Paddle's `auc` op, num_thresholds = 4096)
// plus mean log loss, actual CTR and predicted CTR over the examples added since Reset().
//
// A prediction p in [0, 1] falls in bucket floor(p * num_thresholds) (num_thresholds + 1
// buckets; p == 1 lands in the last) of the positive or the negative counts. AUC is the
// area under the ROC curve by trapezoids over the buckets from the highest down, divided
// by positives * negatives, exactly as Paddle computes it; examples in the same bucket
// count as ties (half a correctly ordered pair).
//
// Merging across trainers: the whole state is one flat vector of doubles (state()); the
// state of a union of example sets is the elementwise sum of their states, so trainers
// sum their vectors (MergeState, an allreduce, or a dense table push) and read the
// metrics from the sum. Counts are exact integers in a double up to 2^53 examples.
//
// Thread-safety: none; use one calculator per thread and merge.

#include <cstddef>
#include <span>
#include <vector>

namespace fleetps::trainer::model {

class AucCalculator {
 public:
  static constexpr size_t kDefaultNumThresholds = 4096;  // Paddle's 2^12

  explicit AucCalculator(size_t num_thresholds = kDefaultNumThresholds);

  // predictions: click probabilities (clamped into [0, 1]; NaN counts as 0); labels: [same
  // size], a label >= 0.5 is a click.
  void Add(std::span<const float> predictions, std::span<const float> labels);
  void Reset();

  // The state, laid out as [positive counts | negative counts | loss sum | prediction sum |
  // absolute error sum | squared error sum] (num_thresholds + 1 buckets each); state_size()
  // doubles. Every entry is a sum over the examples, so states add up across trainers.
  std::span<const double> state() const { return state_; }
  size_t state_size() const { return state_.size(); }
  // Adds another calculator's state (same num_thresholds) into this one.
  void MergeState(std::span<const double> other);
  void Merge(const AucCalculator& other) { MergeState(other.state()); }

  size_t num_thresholds() const { return num_thresholds_; }
  // Bucket b counts examples with b <= p * num_thresholds < b + 1.
  std::span<const double> positive_counts() const;
  std::span<const double> negative_counts() const;

  double num_examples() const;
  // Area under the ROC curve; 0 when no positive or no negative was added (as Paddle's op).
  double Auc() const;
  // Mean of -y log p - (1 - y) log(1 - p), p clipped to [1e-7, 1 - 1e-7]; 0 when empty.
  double MeanLoss() const;
  // Fraction of clicks; 0 when empty.
  double ActualCtr() const;
  // Mean predicted click probability; 0 when empty.
  double PredictedCtr() const;
  // Paddle's calibration metrics (fleet_util's global metrics): COPC, actual over predicted
  // CTR (0 while the predicted CTR is below 1e-6); MAE and RMSE of the click probability
  // against the 0/1 label; 0 when empty.
  double Copc() const;
  double Mae() const;
  double Rmse() const;
  // Paddle's bucket error: the buckets' predicted CTRs are grouped in spans of at most 0.01
  // until a group's impressions make its CTR's relative standard error below 0.05; the
  // impression-weighted mean of |actual CTR / predicted CTR - 1| over those groups (0 when no
  // group has enough impressions). How far the predictions are from calibrated, by CTR.
  double BucketError() const;

 private:
  double loss_sum() const { return state_[2 * num_buckets()]; }
  double prediction_sum() const { return state_[2 * num_buckets() + 1]; }
  double abs_error_sum() const { return state_[2 * num_buckets() + 2]; }
  double squared_error_sum() const { return state_[2 * num_buckets() + 3]; }
  size_t num_buckets() const { return num_thresholds_ + 1; }

  size_t num_thresholds_;
  std::vector<double> state_;
};

}  // namespace fleetps::trainer::model
