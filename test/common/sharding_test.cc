#include "common/sharding.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

namespace fleetps {
namespace {

TEST_CASE("PlaceKey is stable: pinned values never change") {
  // These values are part of the checkpoint contract (keys are re-split by this
  // function on load); a change here breaks every saved model.
  CHECK(MixKey(0) == 0xe220a8397b1dcdafULL);
  CHECK(MixKey(1) == 0x910a2dec89025cc1ULL);
  const KeyPlacement p = PlaceKey(12345, 3, 8);
  CHECK(p.server == MixKey(12345) % 3);
  CHECK(p.shard == (MixKey(12345) / 3) % 8);
}

TEST_CASE("PlaceKey agrees with ServerOfKey and stays in range") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t key = rng();
    for (uint32_t servers : {1u, 2u, 3u, 5u}) {
      const KeyPlacement p = PlaceKey(key, servers, 16);
      REQUIRE(p.server < servers);
      REQUIRE(p.shard < 16);
      REQUIRE(p.server == ServerOfKey(key, servers));
    }
  }
}

TEST_CASE("PlaceKey balances sequential and random keys across servers and shards") {
  for (bool sequential : {true, false}) {
    const uint32_t servers = 3, shards = 8;
    std::vector<int> count(servers * shards, 0);
    std::mt19937_64 rng(11);
    const int n = 240000;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = sequential ? static_cast<uint64_t>(i) : rng();
      const KeyPlacement p = PlaceKey(key, servers, shards);
      ++count[p.server * shards + p.shard];
    }
    const double expected = static_cast<double>(n) / count.size();
    for (int c : count) {
      // 10000 expected per bucket; 5 sigma is about 500.
      REQUIRE(std::abs(c - expected) < 600);
    }
  }
}

TEST_CASE("Dense slices are contiguous and cover the table") {
  for (uint64_t total : {1ull, 7ull, 100ull, 1000003ull}) {
    for (uint32_t servers : {1u, 2u, 3u, 8u}) {
      CHECK(DenseSliceBegin(total, servers, 0) == 0);
      CHECK(DenseSliceBegin(total, servers, servers) == total);
      for (uint32_t s = 0; s < servers; ++s) {
        CHECK(DenseSliceBegin(total, servers, s) <= DenseSliceBegin(total, servers, s + 1));
      }
    }
  }
}

}  // namespace
}  // namespace fleetps
