// Batch (columnar) and RecordBlock (row-major) hold the same examples.

#include <catch2/catch.hpp>

#include "trainer/data/batch.h"
#include "trainer/data/record_block.h"

namespace fleetps::data {
namespace {

// Three examples of shape (dense_dim, 3 slots, num_labels) with empty and multi-id slots
// and ids across the full uint64 range. Label 0 is 1 in row 1; label l > 0 of row i is
// (i + l) % 2.
std::vector<Example> Examples(uint32_t dense_dim, uint32_t num_labels = 1) {
  std::vector<Example> examples(3);
  for (size_t i = 0; i < examples.size(); ++i) {
    Example& ex = examples[i];
    ex.Reset(3, num_labels);
    ex.labels[0] = i == 1 ? 1.0f : 0.0f;
    for (uint32_t l = 1; l < num_labels; ++l) ex.labels[l] = static_cast<float>((i + l) % 2);
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

TEST_CASE("a Batch with two labels keeps each row's labels together", "[data][batch]") {
  Batch batch(2, 3, 2);
  CHECK(batch.num_labels == 2);
  for (const auto& ex : Examples(2, 2)) batch.Append(ex);
  REQUIRE(batch.size() == 3);
  // Row-major [B x 2]: (click, second label) per row.
  CHECK(batch.labels == std::vector<float>{0, 1, 1, 0, 0, 1});
  CHECK(std::vector<float>(batch.Labels(1).begin(), batch.Labels(1).end()) == std::vector<float>{1, 0});
  CHECK(batch.Labels(2).size() == 2);
  CHECK(batch.Dense(2)[1] == 0.75f);
  CHECK(batch.Ids(0, 2).size() == 3);
  batch.Clear();
  CHECK(batch.empty());
  CHECK(batch.size() == 0);
  CHECK(batch.num_labels == 2);

  // One label: labels is the [B] vector, Labels(row) its one entry.
  Batch one(2, 3);
  for (const auto& ex : Examples(2)) one.Append(ex);
  CHECK(one.num_labels == 1);
  CHECK(one.Labels(1).size() == 1);
  CHECK(one.Labels(1)[0] == 1.0f);
}

TEST_CASE("RecordBlock decodes to the same Batch rows", "[data][batch]") {
  // Odd and even header lengths (num_labels + dense_dim + 3 counts) pack differently.
  for (uint32_t num_labels : {1u, 2u, 3u}) {
    for (uint32_t dense_dim : {0u, 1u, 13u}) {
      INFO("dense_dim " << dense_dim << ", num_labels " << num_labels);
      const auto examples = Examples(dense_dim, num_labels);
      RecordBlock block(dense_dim, 3, num_labels);
      CHECK(block.num_labels() == num_labels);
      Batch expected(dense_dim, 3, num_labels);
      for (const auto& ex : examples) {
        block.Append(ex);
        expected.Append(ex);
      }
      REQUIRE(block.size() == 3);
      Batch decoded(dense_dim, 3, num_labels);
      for (size_t i = 0; i < block.size(); ++i) block.AppendToBatch(i, &decoded);
      CHECK(decoded == expected);

      // Records copied out of order decode out of order.
      RecordBlock reordered(dense_dim, 3, num_labels);
      reordered.AppendRecord(block, 2);
      reordered.AppendRecord(block, 0);
      Batch two(dense_dim, 3, num_labels);
      reordered.AppendToBatch(0, &two);
      reordered.AppendToBatch(1, &two);
      Batch expected_two(dense_dim, 3, num_labels);
      expected_two.Append(examples[2]);
      expected_two.Append(examples[0]);
      CHECK(two == expected_two);
    }
  }
}

}  // namespace
}  // namespace fleetps::data
