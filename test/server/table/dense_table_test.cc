#include "server/table/dense_table.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "server/table/initializer.h"

namespace fleetps::server {
namespace {

TableOptions DenseOptions(uint64_t size) {
  TableOptions o;
  o.id = 1;
  o.name = "dense0";
  o.kind = TableKind::kDense;
  o.dim = size;
  return o;
}

std::unique_ptr<DenseTable> MustCreate(const TableOptions& o, uint32_t server, uint32_t servers) {
  auto table = DenseTable::Create(o, server, servers);
  REQUIRE(table.ok());
  return std::move(table).value();
}

TEST_CASE("DenseTable: slices over 1, 2, 3 servers reassemble the same vector", "[dense_table]") {
  TableOptions o = DenseOptions(10);
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = 77;
  auto initializer = Initializer::Create(o.initializer);
  REQUIRE(initializer.ok());
  std::vector<float> expected(10);
  for (uint64_t i = 0; i < 10; ++i) expected[i] = initializer->Value(i, 0);

  for (uint32_t servers : {1u, 2u, 3u, 11u}) {  // 11 > 10 floats: some slices are empty
    CAPTURE(servers);
    std::vector<float> assembled;
    uint64_t next = 0;
    for (uint32_t s = 0; s < servers; ++s) {
      auto table = MustCreate(o, s, servers);
      CHECK(table->begin() == next);  // contiguous, in server order
      std::vector<float> slice(table->end() - table->begin());
      REQUIRE(table->Pull(table->begin(), slice.size(), slice.data()).ok());
      assembled.insert(assembled.end(), slice.begin(), slice.end());
      next = table->end();
    }
    CHECK(next == 10);
    CHECK(assembled == expected);
  }
}

TEST_CASE("DenseTable: pushes apply the optimizer per element", "[dense_table]") {
  TableOptions o = DenseOptions(6);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 1.0f;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 0.5f;
  auto table = MustCreate(o, 1, 2);  // holds [3, 6)
  REQUIRE(table->begin() == 3);
  REQUIRE(table->end() == 6);

  const std::vector<float> grads = {1.0f, 2.0f};
  REQUIRE(table->Push(4, 2, grads.data()).ok());  // [1 - 0.5, 1 - 1] at offsets 4, 5
  std::vector<float> w(3);
  REQUIRE(table->Pull(3, 3, w.data()).ok());
  CHECK(w == std::vector<float>{1.0f, 0.5f, 0.0f});
}

TEST_CASE("DenseTable: Adam shares its beta powers over the slice; SetParams resets", "[dense_table]") {
  TableOptions o = DenseOptions(2);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 1.0f;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.1f;
  o.optimizer.beta1 = 0.5f;
  o.optimizer.beta2 = 0.75f;
  auto table = MustCreate(o, 0, 1);
  CHECK(table->MemoryBytes() == (2 + 2 * 2 + 2) * sizeof(float));  // weights, m and v, beta powers

  // Step 1 on both weights: lr_t = 0.1; g = 2 gives m = 1, v = 1: w = 1 - 0.1 = 0.9.
  const std::vector<float> g1 = {2.0f, 2.0f};
  REQUIRE(table->Push(0, 2, g1.data()).ok());
  // Step 2 on weight 0 only: lr_t = 0.1 * sqrt(0.4375) / 0.75 (the powers advanced once);
  // g = -2: m = -0.5, v = 1.75, w = 0.9 + 1/30.
  const float g2 = -2.0f;
  REQUIRE(table->Push(0, 1, &g2).ok());
  std::vector<float> w(2);
  REQUIRE(table->Pull(0, 2, w.data()).ok());
  CHECK(w[0] == Approx(0.9333333f));
  CHECK(w[1] == Approx(0.9f));

  // SetParams overwrites and restarts the optimizer: the next push is a first step again.
  const std::vector<float> values = {1.0f, 1.0f};
  REQUIRE(table->SetParams(0, 2, values.data()).ok());
  REQUIRE(table->Push(0, 2, g1.data()).ok());
  REQUIRE(table->Pull(0, 2, w.data()).ok());
  CHECK(w[0] == Approx(0.9f));
  CHECK(w[1] == Approx(0.9f));
}

TEST_CASE("DenseTable: SetParams with an optimizer state continues from it; PullState gives it back", "[dense_table]") {
  TableOptions o = DenseOptions(6);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 0.5f;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.1f;
  // The middle of three servers' slices, [2, 4): global offsets on both tables.
  auto trained = MustCreate(o, 1, 3);
  auto resumed = MustCreate(o, 1, 3);
  REQUIRE(trained->begin() == 2);
  REQUIRE(trained->end() == 4);
  const std::vector<float> g1 = {0.3f, -0.2f}, g2 = {-0.1f, 0.4f};
  REQUIRE(trained->Push(2, 2, g1.data()).ok());
  REQUIRE(trained->Push(2, 2, g1.data()).ok());
  std::vector<float> w(2), element(2 * 2), shared(2);
  REQUIRE(trained->Pull(2, 2, w.data()).ok());
  REQUIRE(trained->PullState(2, 2, element.data(), shared.data()).ok());
  CHECK(shared[0] == Approx(0.9f * 0.9f * 0.9f));  // beta1 power: beta1, then x beta1 per step
  CHECK(element[0] != 0.0f);                       // weight 2's first moment
  // A table given the weights and that state takes the next step as the trained one does.
  REQUIRE(resumed->SetParams(2, 2, w.data(), {element, shared}).ok());
  REQUIRE(trained->Push(2, 2, g2.data()).ok());
  REQUIRE(resumed->Push(2, 2, g2.data()).ok());
  std::vector<float> a(2), b(2), ea(4), eb(4), sa(2), sb(2);
  REQUIRE(trained->Pull(2, 2, a.data()).ok());
  REQUIRE(resumed->Pull(2, 2, b.data()).ok());
  REQUIRE(trained->PullState(2, 2, ea.data(), sa.data()).ok());
  REQUIRE(resumed->PullState(2, 2, eb.data(), sb.data()).ok());
  CHECK(a == b);
  CHECK(ea == eb);
  CHECK(sa == sb);
  // One weight of the two: its state alone, the slice's shared state.
  std::vector<float> one(2), one_shared(2);
  REQUIRE(trained->PullState(3, 1, one.data(), one_shared.data()).ok());
  CHECK(one == std::vector<float>(ea.begin() + 2, ea.end()));
  // State of another rule's sizes: refused naming the table and both sizes; nothing changes.
  const std::vector<float> adagrad_state(2, 1.0f), none;
  const std::vector<float> seven = {7.0f, 7.0f};
  Status st = resumed->SetParams(2, 2, seven.data(), {adagrad_state, none});
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("dense0") && Catch::Contains("2 + 0 floats for 2 parameters") &&
                               Catch::Contains("keeps 2 per parameter + 2"));
  REQUIRE(resumed->Pull(2, 2, b.data()).ok());
  CHECK(b == a);
  CHECK(resumed->PullState(0, 1, one.data(), one_shared.data()).IsInvalidArgument());  // outside the slice
}

TEST_CASE("DenseTable: ranges outside the slice are InvalidArgument", "[dense_table]") {
  TableOptions o = DenseOptions(10);
  auto table = MustCreate(o, 1, 2);  // holds [5, 10)
  std::vector<float> buf(20);
  auto expect_range_error = [&](const Status& st, const std::string& range) {
    CAPTURE(st.ToString());
    CHECK(st.IsInvalidArgument());
    CHECK(st.message().find("dense table 'dense0' (id 1)") != std::string::npos);
    CHECK(st.message().find("range " + range) != std::string::npos);
    CHECK(st.message().find("slice [5, 10)") != std::string::npos);
  };
  expect_range_error(table->Pull(4, 2, buf.data()), "[4, 6)");
  expect_range_error(table->Pull(8, 3, buf.data()), "[8, 11)");
  expect_range_error(table->Push(10, 1, buf.data()), "[10, 11)");
  expect_range_error(table->SetParams(0, 20, buf.data()), "[0, 20)");
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  expect_range_error(table->Pull(6, huge, buf.data()), "[6, " + std::to_string(huge) + ")");

  CHECK(table->Pull(5, 5, buf.data()).ok());
  CHECK(table->Pull(10, 0, buf.data()).ok());  // empty range at the end
  CHECK(table->Push(7, 0, buf.data()).ok());
}

TEST_CASE("DenseTable: Create rejects bad options", "[dense_table]") {
  TableOptions o = DenseOptions(0);
  CHECK(DenseTable::Create(o, 0, 1).status().IsInvalidArgument());
  o = DenseOptions(4);
  o.kind = TableKind::kSparse;
  CHECK(DenseTable::Create(o, 0, 1).status().IsInvalidArgument());
  o = DenseOptions(4);
  const Status st = DenseTable::Create(o, 3, 3).status();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("dense table 'dense0'") != std::string::npos);
}

}  // namespace
}  // namespace fleetps::server

namespace fleetps::server {
namespace {

TEST_CASE("DenseTable: a sync step applies the average once every trainer sent its whole slice", "[dense_table]") {
  TableOptions o = DenseOptions(6);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 1.0f;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 0.5f;  // w -= 0.5 * mean(g)
  auto t = MustCreate(o, 0, 1);
  const std::vector<float> g0 = {2, 2, 2, 2, 2, 2}, g1 = {4, 4, 4, 4, 4, 4};
  // Trainer 0 sends in two pieces, trainer 1 in one.
  auto r = t->PushSync(0, 2, 0, 0, 3, g0.data());
  REQUIRE(r.ok());
  CHECK_FALSE(r->applied);
  r = t->PushSync(0, 2, 0, 3, 3, g0.data());
  REQUIRE(r.ok());
  CHECK_FALSE(r->applied);
  CHECK(t->sync_trainers_complete() == 1);
  std::vector<float> w(6);
  REQUIRE(t->Pull(0, 6, w.data()).ok());
  CHECK(w == std::vector<float>(6, 1.0f));  // nothing applied yet
  r = t->PushSync(1, 2, 0, 0, 6, g1.data());
  REQUIRE(r.ok());
  CHECK(r->applied);
  REQUIRE(t->Pull(0, 6, w.data()).ok());
  CHECK(w == std::vector<float>(6, 1.0f - 0.5f * 3.0f));
  CHECK(t->sync_trainers_complete() == 0);
}

TEST_CASE("DenseTable: a duplicated sync push cannot stand in for another trainer", "[dense_table]") {
  TableOptions o = DenseOptions(4);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 1.0f;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 1.0f;
  auto t = MustCreate(o, 0, 1);
  const std::vector<float> g = {1, 1, 1, 1};
  REQUIRE(t->PushSync(0, 2, 0, 0, 4, g.data()).ok());
  auto dup = t->PushSync(0, 2, 0, 0, 4, g.data());  // retried: must not complete the step
  CHECK(dup.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(dup.status().message(), Catch::Contains("already pushed"));
  auto partial = t->PushSync(0, 2, 0, 2, 1, g.data());  // overlaps the first piece
  CHECK_FALSE(partial.ok());
  std::vector<float> w(4);
  REQUIRE(t->Pull(0, 4, w.data()).ok());
  CHECK(w == std::vector<float>(4, 1.0f));
  auto done = t->PushSync(1, 2, 0, 0, 4, g.data());
  REQUIRE(done.ok());
  CHECK(done->applied);
  REQUIRE(t->Pull(0, 4, w.data()).ok());
  CHECK(w == std::vector<float>(4, 0.0f));  // one step with the mean gradient 1
}

TEST_CASE("DenseTable: numbered sync steps stay in lockstep across a lost push and re-sent copies", "[dense_table]") {
  TableOptions o = DenseOptions(2);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 0.0f;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 1.0f;  // w -= mean(g)
  auto t = MustCreate(o, 0, 1);
  std::vector<float> w(2);
  const auto weights = [&] {
    REQUIRE(t->Pull(0, 2, w.data()).ok());
    return w;
  };
  const std::vector<float> one = {1, 1}, two = {2, 2}, four = {4, 4};
  // Step 1 completes normally; a re-sent copy of trainer 0's step-1 push afterwards is a
  // duplicate and changes nothing.
  REQUIRE(t->PushSync(0, 2, 1, 0, 2, one.data()).ok());
  auto r = t->PushSync(1, 2, 1, 0, 2, one.data());
  REQUIRE(r.ok());
  CHECK(r->applied);
  CHECK(weights() == std::vector<float>{-1, -1});
  r = t->PushSync(0, 2, 1, 0, 2, one.data());
  REQUIRE(r.ok());
  CHECK(r->stale);
  CHECK_FALSE(r->applied);
  CHECK(weights() == std::vector<float>{-1, -1});
  // Step 2: trainer 1's push is here, trainer 0's was lost (it went to a pserver that died).
  // A copy of trainer 1's push is not counted twice.
  REQUIRE(t->PushSync(1, 2, 2, 0, 2, two.data()).ok());
  r = t->PushSync(1, 2, 2, 0, 2, two.data());
  REQUIRE(r.ok());
  CHECK(r->stale);
  CHECK(t->sync_trainers_complete() == 1);
  // Trainer 0 pushes step 3: step 2 is abandoned (not mixed into step 3), and step 3
  // applies the mean of the two step-3 gradients only.
  r = t->PushSync(0, 2, 3, 0, 2, four.data());
  REQUIRE(r.ok());
  CHECK(r->abandoned_step == 2);
  CHECK(r->abandoned_trainers == 1);
  CHECK_FALSE(r->applied);
  r = t->PushSync(1, 2, 3, 0, 2, two.data());
  REQUIRE(r.ok());
  CHECK(r->applied);
  CHECK(r->abandoned_step == 0);
  CHECK(weights() == std::vector<float>{-4, -4});  // -1 - (4 + 2) / 2
  // Pushes for the abandoned step arriving later are stale: never applied, never counted.
  r = t->PushSync(1, 2, 2, 0, 2, one.data());
  REQUIRE(r.ok());
  CHECK(r->stale);
  REQUIRE(t->PushSync(0, 2, 5, 0, 2, one.data()).ok());
  r = t->PushSync(1, 2, 4, 0, 2, one.data());  // step 4 was never begun; 5 is under way
  REQUIRE(r.ok());
  CHECK(r->stale);
  CHECK(t->sync_trainers_complete() == 1);
  CHECK(weights() == std::vector<float>{-4, -4});
}

TEST_CASE("DenseTable: sync pushes with wrapping offsets or bad trainer ids are refused", "[dense_table]") {
  TableOptions o = DenseOptions(8);
  auto t = MustCreate(o, 1, 2);  // slice [4, 8)
  const std::vector<float> g(4, 1.0f);
  // offset + count wraps past 2^64 to a small number: must not pass the range check.
  auto wrap = t->PushSync(0, 1, 0, std::numeric_limits<uint64_t>::max() - 1, 4, g.data());
  CHECK(wrap.status().code() == StatusCode::kInvalidArgument);
  CHECK(t->PushSync(0, 1, 0, 2, 4, g.data()).status().code() == StatusCode::kInvalidArgument);
  CHECK(t->PushSync(3, 2, 0, 4, 4, g.data()).status().code() == StatusCode::kInvalidArgument);
  CHECK(t->PushSync(0, 0, 0, 4, 4, g.data()).status().code() == StatusCode::kInvalidArgument);
  CHECK(t->PushSync(0, DenseTable::kMaxSyncTrainers + 1, 0, 4, 4, g.data()).status().code() ==
        StatusCode::kInvalidArgument);
  REQUIRE(t->PushSync(0, 2, 0, 4, 4, g.data()).ok());
  CHECK(t->PushSync(1, 3, 0, 4, 4, g.data()).status().code() == StatusCode::kInvalidArgument);  // trainers differ
  CHECK(t->CheckRange(4, 4).ok());
  CHECK_FALSE(t->CheckRange(std::numeric_limits<uint64_t>::max(), 2).ok());
}

}  // namespace
}  // namespace fleetps::server
