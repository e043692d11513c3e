// ExactAuc on cases computed by hand.

#include <vector>

#include <catch2/catch.hpp>

#include "tools/datagen/exact_auc.h"

namespace fleetps::datagen {
namespace {

std::optional<double> Auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  return ExactAuc(scores, labels);
}

TEST_CASE("ExactAuc on hand-computed cases", "[datagen][auc]") {
  // Positives 0.35 and 0.8 vs negatives 0.1 and 0.4: 0.35 beats 1 of 2, 0.8 beats 2 -> 3/4.
  CHECK(Auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}) == 0.75);
  CHECK(Auc({0.1, 0.2, 0.3}, {0, 0, 1}) == 1.0);
  CHECK(Auc({0.1, 0.2, 0.3}, {1, 0, 0}) == 0.0);
  // Ties count 1/2: 0.5 beats 0.2 and ties 0.5 (1.5), 0.9 beats both (2) -> 3.5 / 4.
  CHECK(Auc({0.2, 0.5, 0.5, 0.9}, {0, 1, 0, 1}) == 0.875);
  CHECK(Auc({0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}) == 0.5);
  // Order of the input does not matter.
  CHECK(Auc({0.9, 0.5, 0.2, 0.5}, {1, 0, 0, 1}) == 0.875);
}

TEST_CASE("ExactAuc is undefined without both classes", "[datagen][auc]") {
  CHECK_FALSE(Auc({}, {}).has_value());
  CHECK_FALSE(Auc({0.1, 0.2}, {1, 1}).has_value());
  CHECK_FALSE(Auc({0.1, 0.2}, {0, 0}).has_value());
}

}  // namespace
}  // namespace fleetps::datagen
