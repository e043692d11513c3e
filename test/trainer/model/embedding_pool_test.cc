#include "trainer/model/embedding_pool.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "test/trainer/model/model_test_util.h"

namespace fleetps::trainer::model {
namespace {

using testing::RandomVector;

// Batch of 3 examples, 2 slots, embeddings of width 2, 1 dense feature:
//   slot 0: example 0 {10}, example 1 {20, 10}, example 2 {} (empty)
//   slot 1: example 0 {30, 30} (duplicate in one example), example 1 {}, example 2 {10}
//           (key 10 again, now in another slot)
struct HandBatch {
  std::vector<uint32_t> offsets0 = {0, 1, 3, 3};
  std::vector<uint64_t> ids0 = {10, 20, 10};
  std::vector<uint32_t> offsets1 = {0, 2, 2, 3};
  std::vector<uint64_t> ids1 = {30, 30, 10};
  std::vector<SlotIdsView> slots = {{offsets0, ids0}, {offsets1, ids1}};
  std::vector<float> dense = {0.5f, 1.5f, 2.5f};
};

TEST_CASE("DedupKeys lists each key once and indexes every id", "[embedding_pool]") {
  HandBatch b;
  std::vector<uint64_t> keys = {999};  // overwritten
  std::vector<uint32_t> index = {7};
  DedupKeys(b.slots, &keys, &index);
  CHECK(keys == std::vector<uint64_t>{10, 20, 30});
  CHECK(index == std::vector<uint32_t>{0, 1, 0, /*slot 1*/ 2, 2, 0});
}

TEST_CASE("EmbeddingPool forward sum-pools per slot and appends dense features", "[embedding_pool]") {
  HandBatch b;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> index;
  DedupKeys(b.slots, &keys, &index);
  const std::vector<float> rows = {1,   2,     // key 10
                                   10,  20,    // key 20
                                   100, 200};  // key 30
  const EmbeddingPool pool(2, 2, 1);
  REQUIRE(pool.output_dim() == 5);
  std::vector<float> activations(3 * 5, -1.0f);
  pool.Forward(b.slots, index, rows, b.dense, activations);
  CHECK(activations == std::vector<float>{1, 2, 200, 400, 0.5f,  //
                                          11, 22, 0, 0, 1.5f,    //
                                          0, 0, 1, 2, 2.5f});
}

TEST_CASE("EmbeddingPool backward sums gradients per key", "[embedding_pool]") {
  HandBatch b;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> index;
  DedupKeys(b.slots, &keys, &index);
  const EmbeddingPool pool(2, 2, 1);
  const std::vector<float> grads = {1, 2,  3,  4,  99,   // example 0: slot 0, slot 1, dense
                                    5, 6,  7,  8,  99,   // example 1
                                    9, 10, 11, 12, 99};  // example 2
  std::vector<float> key_grads(3 * 2, -1.0f);
  pool.Backward(b.slots, index, {}, grads, key_grads);
  CHECK(key_grads == std::vector<float>{1 + 5 + 11, 2 + 6 + 12,  // key 10: ex0 slot0, ex1 slot0, ex2 slot1
                                        5, 6,                    // key 20: ex1 slot0
                                        3 + 3, 4 + 4});          // key 30: twice in ex0 slot1
}

TEST_CASE("EmbeddingPool with an all-empty slot and no dense features", "[embedding_pool]") {
  const std::vector<uint32_t> offsets0 = {0, 1, 2}, offsets1 = {0, 0, 0};
  const std::vector<uint64_t> ids0 = {5, 5}, ids1 = {};
  const std::vector<SlotIdsView> slots = {{offsets0, ids0}, {offsets1, ids1}};
  std::vector<uint64_t> keys;
  std::vector<uint32_t> index;
  DedupKeys(slots, &keys, &index);
  CHECK(keys == std::vector<uint64_t>{5});
  const EmbeddingPool pool(2, 3, 0);
  const std::vector<float> rows = {1, 2, 3};
  std::vector<float> activations(2 * 6);
  pool.Forward(slots, index, rows, {}, activations);
  CHECK(activations == std::vector<float>{1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 0, 0});
  std::vector<float> key_grads(3);
  pool.Backward(slots, index, {}, RandomVector(12, 1), key_grads);
  const std::vector<float> g = RandomVector(12, 1);
  CHECK(key_grads == std::vector<float>{g[0] + g[6], g[1] + g[7], g[2] + g[8]});
}

TEST_CASE("EmbeddingPool backward is the adjoint of forward", "[embedding_pool]") {
  // <Forward(rows), G> == <rows, Backward(G)> on the slot columns, for random ids with
  // many duplicates, empty examples and random rows and G: every layout is linear in the
  // rows (max piecewise: each output is one row's entry).
  const size_t batch = 20, num_slots = 4, dim = 4, dense_dim = 2;
  std::vector<std::vector<uint32_t>> offsets(num_slots);
  std::vector<std::vector<uint64_t>> ids(num_slots);
  UniformRandom rng(9);
  std::vector<SlotIdsView> slots;
  for (size_t s = 0; s < num_slots; ++s) {
    offsets[s].push_back(0);
    for (size_t i = 0; i < batch; ++i) {
      const int n = static_cast<int>(rng.Next(0, 5));  // 0..4 ids
      for (int k = 0; k < n; ++k) ids[s].push_back(static_cast<uint64_t>(rng.Next(0, 15)));
      offsets[s].push_back(static_cast<uint32_t>(ids[s].size()));
    }
    slots.push_back({offsets[s], ids[s]});
  }
  std::vector<uint64_t> keys;
  std::vector<uint32_t> index;
  DedupKeys(slots, &keys, &index);
  using fleetps::graph::Pooling;
  const std::vector<std::vector<PoolSlot>> layouts = {
      {{.width = 4}, {.width = 4}, {.width = 4}, {.width = 4}},
      {{.width = 3, .pooling = Pooling::kMean},
       {.width = 4, .pooling = Pooling::kSqrt},
       {.width = 2, .pooling = Pooling::kMax},
       {.width = 3, .row_skip = 1, .max_len = 3}},
      {{.width = 3, .row_skip = 1, .max_len = 2},
       {.width = 1, .pooling = Pooling::kMax},
       {.width = 4, .pooling = Pooling::kMean},
       {.width = 4, .max_len = 5}},
  };
  for (const std::vector<PoolSlot>& layout : layouts) {
    const EmbeddingPool pool(dim, layout, dense_dim);
    const std::vector<float> rows = RandomVector(keys.size() * dim, 10);
    const std::vector<float> grads = RandomVector(batch * pool.output_dim(), 11);
    std::vector<float> activations(batch * pool.output_dim()), key_grads(rows.size());
    pool.Forward(slots, index, rows, std::vector<float>(batch * dense_dim, 0.0f), activations);
    pool.Backward(slots, index, rows, grads, key_grads);
    double lhs = 0, rhs = 0;
    // The sequences' masks are constants, not functions of the rows: leave them out.
    for (size_t i = 0; i < batch; ++i) {
      for (size_t s = 0; s < num_slots; ++s) {
        const PoolSlot& slot = pool.slot(s);
        const size_t base = i * pool.output_dim() + [&] {
          size_t o = 0;
          for (size_t t = 0; t < s; ++t) o += pool.slot(t).block();
          return o;
        }();
        const size_t n = slot.max_len > 0 ? slot.max_len * slot.width : slot.width;
        for (size_t j = 0; j < n; ++j) lhs += double{activations[base + j]} * grads[base + j];
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) rhs += double{rows[i]} * key_grads[i];
    CHECK(lhs == Approx(rhs).epsilon(1e-5));
  }
}

TEST_CASE("EmbeddingPool pools by mean, sqrt and max, and lays out sequences with a mask", "[embedding_pool]") {
  // One example: ids {a, b, a} in every slot; rows a = (1, -2), b = (3, 4).
  using fleetps::graph::Pooling;
  const EmbeddingPool pool(2,
                           {{.width = 2, .pooling = Pooling::kMean},
                            {.width = 2, .pooling = Pooling::kSqrt},
                            {.width = 2, .pooling = Pooling::kMax},
                            {.width = 2, .max_len = 2},
                            {.width = 1, .row_skip = 1, .max_len = 4}},
                           0);
  REQUIRE(pool.output_dim() == 2 + 2 + 2 + 2 * 3 + 4 * 2);
  const std::vector<uint32_t> off = {0, 3};
  const std::vector<uint64_t> ids = {10, 20, 10};
  const std::vector<SlotIdsView> slots(5, SlotIdsView{off, ids});
  const std::vector<uint32_t> index = {0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0};
  const std::vector<float> rows = {1, -2, 3, 4};
  std::vector<float> a(pool.output_dim());
  pool.Forward(slots, index, rows, {}, a);
  const float r3 = std::sqrt(3.0f);
  const std::vector<float> want = {5.0f / 3, 0,  5 / r3, 0 / r3, 3, 4,  // mean, sqrt, max
                                   1,        -2, 3,      4,      1, 1,  // sequence of 2: a, b; mask
                                   -2,       4,  -2,     0,             // sequence of 4 (column 1): a b a _
                                   1,        1,  1,      0};
  REQUIRE(a.size() == want.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(want[i]));

  std::vector<float> g(pool.output_dim(), 1.0f), key_grads(4);
  pool.Backward(slots, index, rows, g, key_grads);
  // key a (2 of 3 ids): mean 2/3, sqrt 2/sqrt3, max column 0 -> b, column 1 -> b: 0, sequences 1 + (0, 2).
  CHECK(key_grads[0] == Approx(2.0f / 3 + 2 / r3 + 0 + 1));
  CHECK(key_grads[1] == Approx(2.0f / 3 + 2 / r3 + 0 + 1 + 2));
  CHECK(key_grads[2] == Approx(1.0f / 3 + 1 / r3 + 1 + 1));
  CHECK(key_grads[3] == Approx(1.0f / 3 + 1 / r3 + 1 + 1 + 1));
}

TEST_CASE("EmbeddingPool with per-slot widths pools each slot's leading floats", "[embedding_pool]") {
  // Rows of 3 floats; slot 0 uses 1 of them, slot 1 all 3. One example: slot 0 ids {a, b},
  // slot 1 id {a}; then one dense feature.
  const EmbeddingPool pool(3, {1, 3}, 1);
  REQUIRE(pool.output_dim() == 1 + 3 + 1);
  CHECK(pool.slot_width(0) == 1);
  const std::vector<uint32_t> off0 = {0, 2}, off1 = {0, 1};
  const std::vector<uint64_t> ids0 = {10, 20}, ids1 = {10};
  const std::vector<SlotIdsView> slots = {{off0, ids0}, {off1, ids1}};
  const std::vector<uint32_t> index = {0, 1, 0};
  const std::vector<float> rows = {1, 2, 3, /*key 20*/ 4, 5, 6};
  const std::vector<float> dense = {7};
  std::vector<float> activations(5);
  pool.Forward(slots, index, rows, dense, activations);
  CHECK(activations == std::vector<float>{1 + 4, 1, 2, 3, 7});
  std::vector<float> key_grads(6);
  pool.Backward(slots, index, {}, std::vector<float>{0.5f, 1, 2, 3, 9}, key_grads);
  CHECK(key_grads == std::vector<float>{0.5f + 1, 2, 3, 0.5f, 0, 0});
}

TEST_CASE("EmbeddingPool from the rank/dnn options", "[embedding_pool]") {
  const EmbeddingPool pool = EmbeddingPool::FromOptions(ModelOptions{});
  CHECK(pool.num_slots() == 26);
  CHECK(pool.dim() == 9);
  CHECK(pool.dense_dim() == 13);
  CHECK(pool.output_dim() == DenseInputDim(ModelOptions{}));
}

}  // namespace
}  // namespace fleetps::trainer::model
