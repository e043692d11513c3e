#include "trainer/model/auc_calculator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::model {
namespace {

// Exact AUC by sorting (Mann-Whitney U with mid-ranks for ties).
double ExactAuc(const std::vector<float>& predictions, const std::vector<float>& labels) {
  std::vector<size_t> order(predictions.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return predictions[a] < predictions[b]; });
  double positive_rank_sum = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && predictions[order[j]] == predictions[order[i]]) ++j;
    const double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] < 0.5f) continue;
      positive_rank_sum += mid_rank;
      positives += 1;
    }
    i = j;
  }
  const double negatives = static_cast<double>(predictions.size()) - positives;
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

TEST_CASE("AUC hand cases", "[auc]") {
  AucCalculator auc;
  SECTION("perfect ranking") {
    auc.Add({{0.9f, 0.8f, 0.2f, 0.1f}}, {{1, 1, 0, 0}});
    CHECK(auc.Auc() == 1.0);
  }
  SECTION("inverted ranking") {
    auc.Add({{0.9f, 0.8f, 0.2f, 0.1f}}, {{0, 0, 1, 1}});
    CHECK(auc.Auc() == 0.0);
  }
  SECTION("all ties") {
    auc.Add({{0.3f, 0.3f, 0.3f, 0.3f, 0.3f}}, {{1, 0, 0, 1, 0}});
    CHECK(auc.Auc() == 0.5);
  }
  SECTION("one class only is 0, as in Paddle") {
    auc.Add({{0.3f, 0.6f}}, {{1, 1}});
    CHECK(auc.Auc() == 0.0);
  }
  SECTION("empty") { CHECK(auc.Auc() == 0.0); }
  SECTION("one misordered pair of four") {
    auc.Add({{0.9f, 0.6f, 0.7f, 0.1f}}, {{1, 1, 0, 0}});
    CHECK(auc.Auc() == 0.75);
  }
}

TEST_CASE("AUC buckets: bounds, clamping and NaN", "[auc]") {
  AucCalculator auc(4);
  auc.Add({{0.0f, 0.24f, 0.25f, 0.99f, 1.0f, 1.5f, -0.5f, std::numeric_limits<float>::quiet_NaN()}},
          {{1, 1, 1, 1, 1, 0, 0, 0}});
  CHECK(std::vector<double>(auc.positive_counts().begin(), auc.positive_counts().end()) ==
        std::vector<double>{2, 1, 0, 1, 1});
  CHECK(std::vector<double>(auc.negative_counts().begin(), auc.negative_counts().end()) ==
        std::vector<double>{2, 0, 0, 0, 1});
  CHECK(auc.num_examples() == 8);
}

TEST_CASE("Bucketed AUC agrees with the exact AUC on random data", "[auc]") {
  const size_t n = 50000;
  const std::vector<float> noise = testing::RandomVector(n, 1, -3, 3);
  const std::vector<float> coin = testing::RandomVector(n, 2, 0, 1);
  std::vector<float> predictions(n), labels(n);
  for (size_t i = 0; i < n; ++i) {
    labels[i] = coin[i] < 0.3f ? 1.0f : 0.0f;
    predictions[i] = 1.0f / (1.0f + std::exp(-(noise[i] + 1.5f * labels[i] - 1.0f)));
  }
  AucCalculator auc;
  auc.Add(predictions, labels);
  const double exact = ExactAuc(predictions, labels);
  INFO("bucketed " << auc.Auc() << ", exact " << exact);
  CHECK(exact > 0.6);
  CHECK(std::fabs(auc.Auc() - exact) < 1e-3);
}

TEST_CASE("AUC loss and CTR statistics", "[auc]") {
  AucCalculator auc;
  auc.Add({{0.8f, 0.4f, 0.1f, 0.5f}}, {{1, 0, 0, 1}});
  CHECK(auc.num_examples() == 4);
  CHECK(auc.ActualCtr() == 0.5);
  CHECK(auc.PredictedCtr() == Approx((0.8 + 0.4 + 0.1 + 0.5) / 4));
  const double loss = -(std::log(0.8) + std::log(0.6) + std::log(0.9) + std::log(0.5)) / 4;
  CHECK(auc.MeanLoss() == Approx(loss).epsilon(1e-6));

  // |p - y|: 0.2, 0.4, 0.1, 0.5; (p - y)^2: 0.04, 0.16, 0.01, 0.25.
  CHECK(auc.Mae() == Approx(1.2 / 4));
  CHECK(auc.Rmse() == Approx(std::sqrt(0.46 / 4)));
  CHECK(auc.Copc() == Approx(0.5 / ((0.8 + 0.4 + 0.1 + 0.5) / 4)));

  auc.Reset();
  CHECK(auc.num_examples() == 0);
  CHECK(auc.MeanLoss() == 0);
  CHECK(auc.ActualCtr() == 0);
  CHECK(auc.PredictedCtr() == 0);
  CHECK(auc.Copc() == 0);
  CHECK(auc.Mae() == 0);
  CHECK(auc.Rmse() == 0);
  CHECK(auc.BucketError() == 0);
}

TEST_CASE("Bucket error, by hand: Paddle's groups of predicted CTR with enough impressions", "[auc]") {
  // 100 thresholds: 101 buckets, bucket b standing for CTR b / 101, so a group (spans of at
  // most 0.01) holds two adjacent buckets. Every prediction 0.5: bucket 50, CTR 50/101.
  AucCalculator auc(100);
  const auto add = [&](int examples, int clicks) {
    std::vector<float> predictions(examples, 0.5f), labels(examples, 0.0f);
    std::fill(labels.begin(), labels.begin() + clicks, 1.0f);
    auc.Add(predictions, labels);
  };
  // 100 impressions: the group's relative error sqrt((1 - c) / (c n)) = 0.101 is above 0.05,
  // so no group counts.
  add(100, 40);
  CHECK(auc.BucketError() == 0);
  // 1000 impressions (0.032): it counts, |actual / predicted - 1| = |0.4 * 101 / 50 - 1|.
  add(900, 360);
  CHECK(auc.BucketError() == Approx(0.192));
  // A second group: predictions 0.905, bucket floor(0.905 * 100) = 90, whose CTR is 90/101
  // (as Paddle: bucket b stands for b / (thresholds + 1)); 2000 impressions, 1800 clicks.
  // The groups' errors weighted by their impressions.
  std::vector<float> predictions(2000, 0.905f), labels(2000, 0.0f);
  std::fill(labels.begin(), labels.begin() + 1800, 1.0f);
  auc.Add(predictions, labels);
  const double second = std::abs(0.9 * 101 / 90 - 1);  // 0.01
  CHECK(auc.BucketError() == Approx((0.192 * 1000 + second * 2000) / 3000));
  // Clicks at exactly their bucket's CTR (49/101, predictions 0.495 in bucket 49): none.
  AucCalculator calibrated(100);
  std::vector<float> p(10100, 0.495f), l(10100, 0.0f);
  std::fill(l.begin(), l.begin() + 4900, 1.0f);
  calibrated.Add(p, l);
  CHECK(calibrated.BucketError() < 1e-9);
}

TEST_CASE("AUC states merge to the AUC of the union", "[auc]") {
  const size_t n = 3000;
  const std::vector<float> predictions = testing::RandomVector(n, 3, 0, 1);
  std::vector<float> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = predictions[i] + 0.3f * static_cast<float>(i % 5) > 0.9f;
  AucCalculator all, first, second;
  all.Add(predictions, labels);
  const std::span<const float> p(predictions), l(labels);
  first.Add(p.first(1000), l.first(1000));
  second.Add(p.subspan(1000), l.subspan(1000));

  SECTION("Merge") { first.Merge(second); }
  SECTION("MergeState of a summed vector") {
    // What an allreduce across trainers does: sum the flat states elementwise.
    std::vector<double> summed(first.state().begin(), first.state().end());
    for (size_t i = 0; i < summed.size(); ++i) summed[i] += second.state()[i];
    first.Reset();
    first.MergeState(summed);
  }
  CHECK(first.Auc() == all.Auc());
  CHECK(first.num_examples() == all.num_examples());
  CHECK(first.ActualCtr() == all.ActualCtr());
  CHECK(first.MeanLoss() == Approx(all.MeanLoss()));
  CHECK(first.PredictedCtr() == Approx(all.PredictedCtr()));
  CHECK(first.Mae() == Approx(all.Mae()));
  CHECK(first.Rmse() == Approx(all.Rmse()));
  CHECK(first.BucketError() == Approx(all.BucketError()));
}

}  // namespace
}  // namespace fleetps::trainer::model
