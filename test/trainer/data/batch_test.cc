// Batch (columnar) and RecordBlock (row-major) hold the same examples.

#include <catch2/catch.hpp>

#include "trainer/data/batch.h"
#include "trainer/data/record_block.h"

namespace fleetps::data {
namespace {

// Three examples of shape (dense_dim, 3 slots) with empty and multi-id slots and ids
// across the full uint64 range.
std::vector<Example> Examples(uint32_t dense_dim) {
  std::vector<Example> examples(3);
  for (size_t i = 0; i < examples.size(); ++i) {
    Example& ex = examples[i];
    ex.Reset(3);
    ex.label = i == 1 ? 1.0f : 0.0f;
    for (uint32_t j = 0; j < dense_dim; ++j) ex.dense.push_back(0.25f * static_cast<float>(i + j));
  }
  examples[0].slots = {{1}, {}, {18446744073709551615ull, 7}};
  examples[1].slots = {{}, {}, {}};
  examples[2].slots = {{5, 6, 7}, {9223372036854775808ull}, {0}};
  return examples;
}

TEST_CASE("Batch keeps examples as CSR columns", "[data][batch]") {
  Batch batch(2, 3);
  for (const auto& ex : Examples(2)) batch.Append(ex);
  REQUIRE(batch.size() == 3);
  CHECK(batch.labels == std::vector<float>{0, 1, 0});
  CHECK(batch.dense == std::vector<float>{0, 0.25f, 0.25f, 0.5f, 0.5f, 0.75f});
  CHECK(batch.slots[0].offsets == std::vector<uint32_t>{0, 1, 1, 4});
  CHECK(batch.slots[0].ids == std::vector<uint64_t>{1, 5, 6, 7});
  CHECK(batch.slots[1].offsets == std::vector<uint32_t>{0, 0, 0, 1});
  CHECK(batch.Ids(2, 0).size() == 2);
  CHECK(batch.Ids(2, 0)[0] == 18446744073709551615ull);
  CHECK(batch.Ids(1, 1).empty());
  CHECK(batch.Dense(2)[1] == 0.75f);
  batch.Clear();
  CHECK(batch.empty());
  CHECK(batch.slots[0].offsets == std::vector<uint32_t>{0});
}

TEST_CASE("RecordBlock decodes to the same Batch rows", "[data][batch]") {
  // Odd and even header lengths (1 + dense_dim + 3 counts) pack differently.
  for (uint32_t dense_dim : {0u, 1u, 13u}) {
    INFO("dense_dim " << dense_dim);
    const auto examples = Examples(dense_dim);
    RecordBlock block(dense_dim, 3);
    Batch expected(dense_dim, 3);
    for (const auto& ex : examples) {
      block.Append(ex);
      expected.Append(ex);
    }
    REQUIRE(block.size() == 3);
    Batch decoded(dense_dim, 3);
    for (size_t i = 0; i < block.size(); ++i) block.AppendToBatch(i, &decoded);
    CHECK(decoded == expected);

    // Records copied out of order decode out of order.
    RecordBlock reordered(dense_dim, 3);
    reordered.AppendRecord(block, 2);
    reordered.AppendRecord(block, 0);
    Batch two(dense_dim, 3);
    reordered.AppendToBatch(0, &two);
    reordered.AppendToBatch(1, &two);
    Batch expected_two(dense_dim, 3);
    expected_two.Append(examples[2]);
    expected_two.Append(examples[0]);
    CHECK(two == expected_two);
  }
}

}  // namespace
}  // namespace fleetps::data
