#include "trainer/client/sparse_merge.h"

#include <catch2/catch.hpp>

#include <vector>

namespace fleetps::trainer {
namespace {

TEST_CASE("SparseMerge sums each key's gradients and CTR counts over steps, in first-seen order") {
  SparseMerge m(2);
  const std::vector<uint64_t> a = {7, 3};
  const std::vector<float> ga = {1, 2, 3, 4};
  const std::vector<float> sa = {1, 2}, ca = {0, 1};
  m.Add(a, ga, sa, ca);
  const std::vector<uint64_t> b = {3, 9};
  const std::vector<float> gb = {10, 20, 5, 6};
  const std::vector<float> sb = {3, 1}, cb = {1, 0};
  m.Add(b, gb, sb, cb);
  CHECK(m.steps() == 2);
  CHECK(std::vector<uint64_t>(m.keys().begin(), m.keys().end()) == std::vector<uint64_t>{7, 3, 9});
  CHECK(std::vector<float>(m.grads().begin(), m.grads().end()) == std::vector<float>{1, 2, 13, 24, 5, 6});
  CHECK(std::vector<float>(m.shows().begin(), m.shows().end()) == std::vector<float>{1, 5, 1});
  CHECK(std::vector<float>(m.clicks().begin(), m.clicks().end()) == std::vector<float>{0, 2, 0});

  m.Clear();
  CHECK(m.empty());
  CHECK(m.steps() == 0);
  // Steps without counts (plain rows) and without keys (a dense-only step) still count.
  m.Add(b, gb, {}, {});
  m.Add({}, {}, {}, {});
  CHECK(m.steps() == 2);
  CHECK(std::vector<uint64_t>(m.keys().begin(), m.keys().end()) == std::vector<uint64_t>{3, 9});
  CHECK(std::vector<float>(m.grads().begin(), m.grads().end()) == gb);
  CHECK(m.shows().empty());
  CHECK(m.clicks().empty());
}

}  // namespace
}  // namespace fleetps::trainer
