#include "tools/datagen/exact_auc.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/check.h"

namespace fleetps::datagen {

std::optional<double> ExactAuc(std::span<const double> scores, std::span<const float> labels) {
  FLEETPS_CHECK_EQ(scores.size(), labels.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });

  // Walk groups of equal score in ascending order: each positive beats the negatives of
  // lower groups and ties with the negatives of its own group.
  double wins = 0;  // exact: sums of integers and halves far below 2^52
  uint64_t negatives_below = 0;
  uint64_t positives = 0;
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin;
    uint64_t group_pos = 0;
    while (end < order.size() && scores[order[end]] == scores[order[begin]]) group_pos += labels[order[end++]] == 1.0f;
    const uint64_t group_neg = (end - begin) - group_pos;
    wins +=
        static_cast<double>(group_pos) * (static_cast<double>(negatives_below) + 0.5 * static_cast<double>(group_neg));
    negatives_below += group_neg;
    positives += group_pos;
    begin = end;
  }
  if (positives == 0 || negatives_below == 0) return std::nullopt;
  return wins / (static_cast<double>(positives) * static_cast<double>(negatives_below));
}

}  // namespace fleetps::datagen
