#include "server/table/sparse_table.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/sharding.h"

namespace fleetps::server {
namespace {

TableOptions SparseOptions(uint32_t dim, uint32_t shards) {
  TableOptions o;
  o.id = 3;
  o.name = "emb";
  o.kind = TableKind::kSparse;
  o.dim = dim;
  o.shards = shards;
  return o;
}

// The servers of one table, with the service's routing: keys are split by PlaceKey into
// (server, shard) groups and each group goes to PullShard/PushShard with its idx list.
class Cluster {
 public:
  Cluster(const TableOptions& options, uint32_t num_servers) {
    for (uint32_t s = 0; s < num_servers; ++s) {
      auto table = SparseTable::Create(options, s, num_servers);
      REQUIRE(table.ok());
      servers_.push_back(std::move(table).value());
    }
  }
  SparseTable& server(uint32_t s) { return *servers_[s]; }
  uint32_t dim() const { return servers_[0]->dim(); }

  std::vector<float> Pull(const std::vector<uint64_t>& keys) {
    std::vector<float> out(keys.size() * dim(), -999.0f);
    for (const auto& [place, idx] : Route(keys)) {
      REQUIRE(servers_[place.first]->PullShard(place.second, keys.data(), idx.data(), idx.size(), out.data()).ok());
    }
    return out;
  }
  void Push(const std::vector<uint64_t>& keys, const std::vector<float>& grads) {
    REQUIRE(grads.size() == keys.size() * dim());
    for (const auto& [place, idx] : Route(keys)) {
      REQUIRE(servers_[place.first]->PushShard(place.second, keys.data(), idx.data(), idx.size(), grads.data()).ok());
    }
  }

 private:
  // (server, shard) -> indices into keys, in request order.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> Route(const std::vector<uint64_t>& keys) {
    std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> groups;
    const uint32_t num_servers = static_cast<uint32_t>(servers_.size());
    for (uint32_t i = 0; i < keys.size(); ++i) {
      const KeyPlacement p = PlaceKey(keys[i], num_servers, servers_[0]->num_shards());
      CHECK(servers_[p.server]->Owns(keys[i]));
      CHECK(servers_[p.server]->ShardOf(keys[i]) == p.shard);
      groups[{p.server, p.shard}].push_back(i);
    }
    return groups;
  }

  std::vector<std::unique_ptr<SparseTable>> servers_;
};

// Table with rows starting at `init` and the given optimizer; 4 shards on 2 servers so the
// routing is exercised.
TableOptions HandOptions(OptimizerOptions optimizer, float init) {
  TableOptions o = SparseOptions(2, 4);
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = init;
  o.optimizer = optimizer;
  return o;
}

TEST_CASE("SparseTable: SGD pushes by hand, duplicates applied in order", "[sparse_table]") {
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.learning_rate = 0.5f;
  Cluster cluster(HandOptions(sgd, 0.5f), 2);

  // Key 7: [0.5 - 0.5*1, 0.5 - 0.5*(-1)] = [0, 1]. Key 9 untouched reads its initial value.
  cluster.Push({7}, {1.0f, -1.0f});
  CHECK(cluster.Pull({7, 9}) == std::vector<float>{0.0f, 1.0f, 0.5f, 0.5f});

  // Key 7 twice in one push, in order: [0 - 0.5, 1] then [-0.5, 1 - 0.5*2] = [-0.5, 0].
  // Key 0 is created by the push: [0.5 - 0.5*0.25, 0.5 - 0.5*0.5] = [0.375, 0.25].
  cluster.Push({7, 0, 7}, {1.0f, 0.0f, 0.25f, 0.5f, 0.0f, 2.0f});
  CHECK(cluster.Pull({0, 7, 7}) == std::vector<float>{0.375f, 0.25f, -0.5f, 0.0f, -0.5f, 0.0f});
}

TEST_CASE("SparseTable: Adagrad pushes by hand", "[sparse_table]") {
  OptimizerOptions adagrad;
  adagrad.kind = OptimizerKind::kAdagrad;
  adagrad.learning_rate = 0.1f;
  adagrad.initial_accumulator = 7.0f;
  adagrad.epsilon = 1.0f;
  Cluster cluster(HandOptions(adagrad, 1.0f), 2);
  const uint64_t key = std::numeric_limits<uint64_t>::max();

  // w0: g2sum = 7 + 9 = 16, w = 1 - 0.1*3/(4+1) = 0.94.      w1: g = 0, stays 1.
  cluster.Push({key}, {3.0f, 0.0f});
  auto w = cluster.Pull({key});
  CHECK(w[0] == Approx(0.94f));
  CHECK(w[1] == 1.0f);
  // w0: g2sum = 16 + 9 = 25, w = 0.94 - 0.1*3/(5+1) = 0.89.  w1: g2sum = 16, w = 1 + 0.1*3/5 = 1.06.
  cluster.Push({key}, {3.0f, -3.0f});
  w = cluster.Pull({key});
  CHECK(w[0] == Approx(0.89f));
  CHECK(w[1] == Approx(1.06f));
}

TEST_CASE("SparseTable: Adam pushes by hand", "[sparse_table]") {
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.1f;
  adam.beta1 = 0.5f;
  adam.beta2 = 0.75f;
  Cluster cluster(HandOptions(adam, 1.0f), 2);

  // Step 1: lr_t = 0.1 * sqrt(1 - 0.75) / (1 - 0.5) = 0.1.
  //   w0: g = 2: m = 1, v = 1, w = 1 - 0.1 = 0.9.   w1: g = -1: m = -0.5, v = 0.25, w = 1 + 0.1 = 1.1.
  cluster.Push({0}, {2.0f, -1.0f});
  auto w = cluster.Pull({0});
  CHECK(w[0] == Approx(0.9f));
  CHECK(w[1] == Approx(1.1f));
  // Step 2: lr_t = 0.1 * sqrt(0.4375) / 0.75.
  //   w0: g = -2: m = -0.5, v = 1.75, w = 0.9 + 0.1 * (0.5/0.75) * sqrt(0.4375/1.75) = 0.9 + 1/30.
  //   w1: g = 1: m = 0.25, v = 0.4375, w = 1.1 - 0.1 * 0.25/0.75 = 1.1 - 1/30.
  cluster.Push({0}, {-2.0f, 1.0f});
  w = cluster.Pull({0});
  CHECK(w[0] == Approx(0.9333333f));
  CHECK(w[1] == Approx(1.0666667f));
}

TEST_CASE("SparseTable: initial values do not depend on servers or shards", "[sparse_table]") {
  TableOptions o = SparseOptions(8, 1);
  o.initializer.kind = InitializerKind::kGaussian;
  o.initializer.seed = 2024;
  std::vector<uint64_t> keys = {0, 1, 2, std::numeric_limits<uint64_t>::max()};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 500; ++i) keys.push_back(rng());

  auto initializer = Initializer::Create(o.initializer);
  REQUIRE(initializer.ok());
  std::vector<float> expected(keys.size() * 8);
  for (size_t i = 0; i < keys.size(); ++i) initializer->FillRow(keys[i], &expected[i * 8], 8);

  for (const auto& [servers, shards] : std::vector<std::pair<uint32_t, uint32_t>>{{1, 1}, {2, 8}, {3, 5}, {7, 3}}) {
    CAPTURE(servers, shards);
    o.shards = shards;
    for (bool create_on_pull : {false, true}) {
      o.create_on_pull = create_on_pull;
      Cluster cluster(o, servers);
      CHECK(cluster.Pull(keys) == expected);
      CHECK(cluster.Pull(keys) == expected);  // stored or not, the same value
    }
  }
}

// Sum of one counter over every shard of every server.
uint64_t Total(Cluster& cluster, uint32_t servers, uint64_t ShardStats::*field) {
  uint64_t total = 0;
  for (uint32_t s = 0; s < servers; ++s) {
    for (uint32_t shard = 0; shard < cluster.server(s).num_shards(); ++shard) {
      total += cluster.server(s).Stats(shard).*field;
    }
  }
  return total;
}

TEST_CASE("SparseTable: create_on_pull decides whether a pull stores the row", "[sparse_table]") {
  const std::vector<uint64_t> keys = {10, 20, 30, 20};
  TableOptions o = SparseOptions(4, 3);

  o.create_on_pull = false;
  Cluster lazy(o, 2);
  const auto first = lazy.Pull(keys);
  CHECK(Total(lazy, 2, &ShardStats::rows) == 0);
  CHECK(Total(lazy, 2, &ShardStats::created) == 0);
  CHECK(Total(lazy, 2, &ShardStats::pulls) == 4);
  CHECK(Total(lazy, 2, &ShardStats::memory_bytes) > 0);

  o.create_on_pull = true;
  Cluster eager(o, 2);
  CHECK(eager.Pull(keys) == first);
  CHECK(Total(eager, 2, &ShardStats::rows) == 3);
  CHECK(Total(eager, 2, &ShardStats::created) == 3);
  CHECK(eager.Pull(keys) == first);
  CHECK(Total(eager, 2, &ShardStats::created) == 3);
  CHECK(Total(eager, 2, &ShardStats::pulls) == 8);

  // A push creates the row either way.
  lazy.Push({10, 10}, std::vector<float>(8, 0.0f));
  CHECK(Total(lazy, 2, &ShardStats::rows) == 1);
  CHECK(Total(lazy, 2, &ShardStats::created) == 1);
  CHECK(Total(lazy, 2, &ShardStats::pushes) == 2);
  CHECK(lazy.Pull(keys) == first);  // zero gradients: values unchanged
}

TEST_CASE("SparseTable: big random pushes match a reference model", "[sparse_table]") {
  // Pushes longer than the table's internal batch, with keys repeated inside and across
  // batches, against rows kept in a std::map and updated with the same optimizer.
  TableOptions o = SparseOptions(5, 4);
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.has_bounds = true;
  o.optimizer.bound_min = -0.05f;
  o.optimizer.bound_max = 0.05f;
  Cluster cluster(o, 2);
  auto optimizer = optimizer::CreateOptimizer(o.optimizer);
  auto initializer = Initializer::Create(o.initializer);
  REQUIRE((optimizer.ok() && initializer.ok()));
  const uint32_t dim = 5;
  std::map<uint64_t, std::vector<float>> reference;  // key -> [weights, state]

  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> grad_dist(-1.0f, 1.0f);
  for (int round = 0; round < 5; ++round) {
    std::vector<uint64_t> keys(3000);
    for (uint64_t& key : keys) key = rng() % 700;  // many repeats
    std::vector<float> grads(keys.size() * dim);
    for (float& g : grads) g = grad_dist(rng);
    cluster.Push(keys, grads);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, inserted] = reference.try_emplace(keys[i]);
      std::vector<float>& row = it->second;
      if (inserted) {
        row.resize(dim + (*optimizer)->StateSize(dim));
        initializer->FillRow(keys[i], row.data(), dim);
        (*optimizer)->InitState(row.data() + dim, dim);
      }
      (*optimizer)->Update(row.data(), row.data() + dim, &grads[i * dim], dim);
    }
  }
  std::vector<uint64_t> keys;
  std::vector<float> expected;
  for (const auto& [key, row] : reference) {
    keys.push_back(key);
    expected.insert(expected.end(), row.begin(), row.begin() + dim);
  }
  CHECK(cluster.Pull(keys) == expected);
  CHECK(Total(cluster, 2, &ShardStats::rows) == reference.size());
  CHECK(Total(cluster, 2, &ShardStats::pushes) == 5 * 3000);
}

TEST_CASE("SparseTable: Create rejects bad options naming the table", "[sparse_table]") {
  auto expect_error = [](const TableOptions& o, uint32_t server, uint32_t servers, const std::string& what) {
    const Status st = SparseTable::Create(o, server, servers).status();
    CAPTURE(st.ToString());
    CHECK(st.IsInvalidArgument());
    CHECK(st.message().find("sparse table 'emb' (id 3)") != std::string::npos);
    CHECK(st.message().find(what) != std::string::npos);
  };
  TableOptions o = SparseOptions(8, 4);
  expect_error(o, 2, 2, "server index 2");
  o.dim = 0;
  expect_error(o, 0, 1, "dim");
  o.dim = SparseTable::kMaxDim + 1;
  expect_error(o, 0, 1, "dim");
  o = SparseOptions(8, 0);
  expect_error(o, 0, 1, "shards");
  o = SparseOptions(8, 4);
  o.optimizer.learning_rate = -1.0f;
  expect_error(o, 0, 1, "optimizer.learning_rate");
  o = SparseOptions(8, 4);
  o.initializer.min = 1.0f;
  expect_error(o, 0, 1, "initializer");
  o = SparseOptions(8, 4);
  o.kind = TableKind::kDense;
  CHECK(SparseTable::Create(o, 0, 1).status().IsInvalidArgument());
}

}  // namespace
}  // namespace fleetps::server
