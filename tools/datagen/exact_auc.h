#pragma once
// Exact ROC AUC by sorting, for fleetps-datagen's Bayes-optimal AUC (the trainer's
// streaming metric is the bucketed one in trainer/model).

#include <optional>
#include <span>

namespace fleetps::datagen {

// P(score of a random positive > score of a random negative), ties counted as 1/2 (the
// Mann-Whitney statistic). labels[i] is 1 (positive) or 0 (negative); sizes must match.
// O(n log n). nullopt when there is no positive or no negative.
std::optional<double> ExactAuc(std::span<const double> scores, std::span<const float> labels);

}  // namespace fleetps::datagen
