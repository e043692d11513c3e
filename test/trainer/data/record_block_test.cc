// RecordBlock's wire form (schemas/records.fbs): a round trip keeps every record, and
// Parse refuses damaged or mismatched buffers with an error naming the origin.
#include <catch2/catch.hpp>

#include "schemas/records_generated.h"
#include "trainer/data/record_block.h"

namespace fleetps::data {
namespace {

Example MakeExample(std::vector<float> labels, std::vector<float> dense, std::vector<std::vector<uint64_t>> slots) {
  Example ex;
  ex.labels = std::move(labels);
  ex.dense = std::move(dense);
  ex.slots = std::move(slots);
  return ex;
}

// Two dense floats, three slots (one empty, one with several ids, full 64-bit ids).
RecordBlock SampleBlock() {
  RecordBlock block(2, 3);
  block.Append(MakeExample({1}, {0.5f, -2}, {{7}, {}, {1, 2, ~0ull}}));
  block.Append(MakeExample({0}, {3, 4}, {{1ull << 63}, {9, 9}, {5}}));
  return block;
}

// The same records with two labels each (click, conversion).
RecordBlock TwoLabelBlock() {
  RecordBlock block(2, 3, 2);
  block.Append(MakeExample({1, 1}, {0.5f, -2}, {{7}, {}, {1, 2, ~0ull}}));
  block.Append(MakeExample({0, 0}, {3, 4}, {{1ull << 63}, {9, 9}, {5}}));
  return block;
}

std::vector<uint8_t> Build(uint32_t dense_dim, uint32_t num_slots, std::vector<uint32_t> begins,
                           std::vector<uint64_t> words) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateRecordBlock(fbb, dense_dim, num_slots, fbb.CreateVector(begins), fbb.CreateVector(words)));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace

TEST_CASE("a serialised RecordBlock parses back to the same records", "[data][record_block]") {
  const RecordBlock block = SampleBlock();
  const auto bytes = block.Serialize();
  auto parsed = RecordBlock::Parse(bytes, 2, 3, 1, "test");
  REQUIRE(parsed.ok());
  CHECK(*parsed == block);
  Batch batch(2, 3);
  parsed->AppendToBatch(0, &batch);
  parsed->AppendToBatch(1, &batch);
  CHECK(batch.labels == std::vector<float>{1, 0});
  CHECK(batch.dense == std::vector<float>{0.5f, -2, 3, 4});
  CHECK(batch.slots[2].ids == std::vector<uint64_t>{1, 2, ~0ull, 5});
  CHECK(batch.slots[1].offsets == std::vector<uint32_t>{0, 0, 2});

  auto empty = RecordBlock::Parse(RecordBlock(2, 3).Serialize(), 2, 3, 1, "test");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("a RecordBlock of two-label records round-trips", "[data][record_block]") {
  const RecordBlock block = TwoLabelBlock();
  // One more header float: (2 labels + 2 dense + 3 counts + 1) / 2 = 4 words, then the ids.
  const auto bytes = block.Serialize();
  auto parsed = RecordBlock::Parse(bytes, 2, 3, 2, "test");
  REQUIRE(parsed.ok());
  CHECK(*parsed == block);
  CHECK(parsed->num_labels() == 2);
  Batch batch(2, 3, 2);
  parsed->AppendToBatch(0, &batch);
  parsed->AppendToBatch(1, &batch);
  CHECK(batch.size() == 2);
  CHECK(batch.labels == std::vector<float>{1, 1, 0, 0});
  CHECK(batch.dense == std::vector<float>{0.5f, -2, 3, 4});
  CHECK(batch.slots[2].ids == std::vector<uint64_t>{1, 2, ~0ull, 5});

  // A trainer expecting one label per record refuses the block by its header.
  auto wrong = RecordBlock::Parse(bytes, 2, 3, 1, "peer-x");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == StatusCode::kCorruption);
  CHECK_THAT(wrong.status().message(), Catch::Contains("records have 2 labels, 2 dense floats and 3 sparse slots, "
                                                       "this trainer expects 1, 2 and 3"));
}

TEST_CASE("RecordBlock::Parse refuses damaged and mismatched buffers", "[data][record_block]") {
  const auto bytes = SampleBlock().Serialize();
  auto expect_error = [](const StatusOr<RecordBlock>& r, const std::string& what) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kCorruption);
    CHECK_THAT(r.status().message(), Catch::Contains("from peer-x") && Catch::Contains(what));
  };
  SECTION("truncated") {
    expect_error(RecordBlock::Parse(std::span(bytes).first(bytes.size() / 2), 2, 3, 1, "peer-x"), "not a valid");
  }
  SECTION("other shape") {
    expect_error(RecordBlock::Parse(bytes, 13, 26, 1, "peer-x"), "this trainer expects 1, 13 and 26");
  }
  // header of (2, 3): (1 + 2 + 3 + 1) / 2 = 3 words.
  SECTION("begins past the words") {
    expect_error(RecordBlock::Parse(Build(2, 3, {0, 4}, {0, 0, 0}), 2, 3, 1, "peer-x"), "begins ends at 4");
  }
  SECTION("record shorter than its header") {
    expect_error(RecordBlock::Parse(Build(2, 3, {0, 2}, {0, 0}), 2, 3, 1, "peer-x"), "shorter than its 3-word header");
  }
  SECTION("id counts disagree with the extent") {
    // Counts live after label + 2 dense floats: bytes 12..24; slot 0 count = 2, one id held.
    std::vector<uint64_t> words = {0, uint64_t{2} << 32, 0, 42};
    expect_error(RecordBlock::Parse(Build(2, 3, {0, 4}, words), 2, 3, 1, "peer-x"), "counts 2 ids but holds 1");
  }
  SECTION("a record reaching past the words") {
    // Record 0's counts (997 ids) agree with its claimed extent [0, 1000) and record 1
    // [1000, 1003) is header-sized, but there are 4 words: reading record 1's counts would
    // read far outside the buffer.
    std::vector<uint64_t> words = {0, uint64_t{997} << 32, 0, 42};
    expect_error(RecordBlock::Parse(Build(2, 3, {0, 1000, 1003, 4}, words), 2, 3, 1, "peer-x"), "past the 4 words");
  }
  SECTION("begins not starting at 0") {
    expect_error(RecordBlock::Parse(Build(2, 3, {1, 3}, {0, 0, 0}), 2, 3, 1, "peer-x"), "start with 0");
  }
}

}  // namespace fleetps::data
