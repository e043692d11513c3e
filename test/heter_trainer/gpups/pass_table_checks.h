#pragma once
// What the pass table tests share: the tables they train (RuleTable), and the checks of
// refusals and of concurrent lookups and updates, for both PassTable implementations.
//
// A push refused part-way (a key given twice, a key not in the pass) applies exactly the
// pushes routed before the refused key: every key of the devices before its own, and the keys
// before it on its own device; a pass with a repeated key is refused naming the first repeat
// in routing order, with nothing kept. One check for both PassTable implementations (the host
// twin in host_pass_table_test, the CUDA table in cuda_pass_table_test).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "heter_trainer/gpups/pass_table.h"

namespace fleetps::heter {

// A dim-9 table with the sparse rule `kind` at learning rate 0.05 (Adagrad's accumulator
// from 0.1), `weight_decay`, bounds [-0.2, 0.2] when `bounds`, Gaussian initial weights,
// and, with `ctr`, the CTR accessor with rows extended at score 5.
inline TableOptions RuleTable(OptimizerKind kind, bool ctr, float weight_decay, bool bounds) {
  TableOptions t;
  t.name = "embedding";
  t.dim = 9;
  t.optimizer.kind = kind;
  t.optimizer.learning_rate = 0.05f;
  t.optimizer.initial_accumulator = 0.1f;
  t.optimizer.weight_decay = weight_decay;
  if (bounds) {
    t.optimizer.has_bounds = true;
    t.optimizer.bound_min = -0.2f;
    t.optimizer.bound_max = 0.2f;
  }
  t.initializer.kind = InitializerKind::kGaussian;
  t.initializer.stddev = 0.1f;
  t.initializer.seed = 3;
  if (ctr) {
    t.accessor.kind = AccessorKind::kCtr;
    t.accessor.embedx_threshold = 5.0f;
  }
  return t;
}

// A plain SGD table of dim 2 at learning rate 1: a push of gradient 1 takes a weight from 0 to -1.
inline TableOptions RefusedPushTable() {
  TableOptions t;
  t.name = "embedding";
  t.dim = 2;
  t.optimizer.kind = OptimizerKind::kSgd;
  t.optimizer.learning_rate = 1.0f;
  return t;
}

// `table`: two devices over RefusedPushTable().
inline void CheckRefusedPushes(PassTable& table) {
  REQUIRE(table.devices() == 2);
  std::vector<uint64_t> on[2];
  uint64_t absent0 = 0;
  for (uint64_t k = 1; on[0].size() < 4 || on[1].size() < 3; ++k) {
    auto& list = on[DeviceOfKey(k, 2)];
    if (list.size() < 4) list.push_back(k);
  }
  absent0 = on[0].back();  // device 0's fourth key stays out of the pass
  on[0].pop_back();
  const uint32_t core = table.core_floats();
  // Device 1's key repeats first in the list, device 0's first in routing order.
  std::vector<uint64_t> twice = {on[1][0], on[1][0], on[0][0], on[0][0]};
  Status st =
      table.Build(twice, std::vector<float>(twice.size() * core, 0.0f), std::vector<uint8_t>(twice.size(), 0), {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("key " + std::to_string(on[0][0]) + " given twice") != std::string::npos);
  CHECK(table.size() == 0);
  std::vector<uint64_t> keys = {on[0][0], on[0][1], on[0][2], on[1][0], on[1][1], on[1][2]};
  REQUIRE(
      table.Build(keys, std::vector<float>(keys.size() * core, 0.0f), std::vector<uint8_t>(keys.size(), 0), {}).ok());
  auto weight = [&](uint64_t key) {
    float out[2] = {7, 7};
    REQUIRE(table.Pull({&key, 1}, out).ok());
    return out[0];
  };
  // On device 1 the third key repeats its first: device 0's keys and device 1's first two pushed.
  std::vector<uint64_t> push = {on[1][0], on[0][0], on[1][1], on[1][0], on[1][2], on[0][1]};
  st = table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("key " + std::to_string(on[1][0]) + " given twice") != std::string::npos);
  CHECK(weight(on[0][0]) == -1.0f);
  CHECK(weight(on[0][1]) == -1.0f);
  CHECK(weight(on[0][2]) == 0.0f);
  CHECK(weight(on[1][0]) == -1.0f);
  CHECK(weight(on[1][1]) == -1.0f);
  CHECK(weight(on[1][2]) == 0.0f);
  // A key not in the pass on device 0: the key before it pushed; the one after, and device 1's, not.
  push = {on[0][2], on[1][2], absent0, on[0][0]};
  st = table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {});
  CHECK(st.IsNotFound());
  CHECK(st.message().find("key " + std::to_string(absent0) + " ") != std::string::npos);
  CHECK(weight(on[0][2]) == -1.0f);
  CHECK(weight(on[0][0]) == -1.0f);
  CHECK(weight(on[1][2]) == 0.0f);
  // A key given twice in a row: its first push applied, not its second.
  push = {on[1][2], on[1][2]};
  st = table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("key " + std::to_string(on[1][2]) + " given twice") != std::string::npos);
  CHECK(weight(on[1][2]) == -1.0f);
  // A key not in the pass before a repeat: the absent key is named, the key before it pushed once.
  push = {on[0][0], absent0, on[0][0]};
  st = table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {});
  CHECK(st.IsNotFound());
  CHECK(st.message().find("key " + std::to_string(absent0) + " ") != std::string::npos);
  CHECK(weight(on[0][0]) == -2.0f);
  // A repeat before a key not in the pass: the repeat is named, its first push applied.
  push = {on[0][1], on[0][1], absent0};
  st = table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("key " + std::to_string(on[0][1]) + " given twice") != std::string::npos);
  CHECK(weight(on[0][1]) == -2.0f);
  // A key not in the pass first: nothing of the shard pushed.
  push = {absent0, on[0][2]};
  CHECK(table.Push(push, std::vector<float>(push.size() * 2, 1.0f), {}, {}).IsNotFound());
  CHECK(weight(on[0][2]) == -1.0f);
  // The table serves on: a valid push after the refused ones.
  push = {on[1][2]};
  REQUIRE(table.Push(push, std::vector<float>(2, 1.0f), {}, {}).ok());
  CHECK(weight(on[1][2]) == -2.0f);
}

// Two exports hold the same rows, bitwise.
inline void CheckSameRows(const PassRows& a, const PassRows& b) {
  CHECK(a.keys == b.keys);
  CHECK(a.begin == b.begin);
  CHECK(a.end == b.end);
  CHECK(a.extended == b.extended);
  CHECK(a.shows == b.shows);
  CHECK(a.clicks == b.clicks);
}

// ExportRange over ranges of 1, 7 and 1000 rows (crossing the shards' boundaries), appended
// in order, gives `whole` (the table's Export); a range past the end gives nothing.
inline void CheckExportRanges(const PassTable& table, const PassRows& whole) {
  for (uint64_t range : {uint64_t{1}, uint64_t{7}, uint64_t{1000}}) {
    INFO("ranges of " << range << " rows");
    PassRows joined, part;
    for (uint64_t first = 0; first < table.size(); first += range) {
      REQUIRE(table.ExportRange(first, range, &part).ok());
      joined.keys.insert(joined.keys.end(), part.keys.begin(), part.keys.end());
      joined.begin.insert(joined.begin.end(), part.begin.begin(), part.begin.end());
      joined.end.insert(joined.end.end(), part.end.begin(), part.end.end());
      joined.extended.insert(joined.extended.end(), part.extended.begin(), part.extended.end());
      joined.shows.insert(joined.shows.end(), part.shows.begin(), part.shows.end());
      joined.clicks.insert(joined.clicks.end(), part.clicks.begin(), part.clicks.end());
    }
    CheckSameRows(joined, whole);
  }
  PassRows past;
  REQUIRE(table.ExportRange(table.size(), 10, &past).ok());
  CHECK(past.keys.empty());
}

// Lookups and updates from several threads at once, as the GPU-PS workers call them: two
// threads push batches of their own keys while four threads look up keys nobody pushes and
// some of the keys being pushed, each in batches of its own size. `reference` (built the
// same, called from one thread) gives what they must see: a key nobody pushes, its row; a
// key being pushed, one of the rows its pushes pass through (each key has one pusher, so
// they form one sequence), never a row half updated. The pass must end with the rows of
// `reference` after the same pushes one after the other (the pushers' keys are disjoint, so
// their order between threads does not matter). Catches scratch shared between concurrent
// calls, and updates lost or torn by them; a lock that does not exclude (Push under a shared
// lock, say) shows as races in a ThreadSanitizer build (README, Tests), rarely as wrong
// values.
inline void CheckConcurrentTraffic(PassTable& table, PassTable& reference) {
  const uint32_t core = table.core_floats(), dim = table.dim();
  REQUIRE(reference.core_floats() == core);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 6000; ++k) keys.push_back(k * 0x9E3779B97F4A7C15ull + 11);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> rows(keys.size() * core);
  for (auto& v : rows) v = std::abs(u(rng));
  const std::vector<uint8_t> flags(keys.size(), 0);
  std::vector<float> stats(keys.size() * 2, 1.0f);
  REQUIRE(table.Build(keys, rows, flags, stats).ok());
  REQUIRE(reference.Build(keys, rows, flags, stats).ok());
  // keys[i]: pushed by thread i % 3 (0 or 1); i % 3 == 2: only looked up.
  std::vector<std::vector<uint64_t>> pushed(2);
  std::vector<uint64_t> looked_up;
  for (size_t i = 0; i < keys.size(); ++i) (i % 3 == 2 ? looked_up : pushed[i % 3]).push_back(keys[i]);
  std::vector<float> expected(looked_up.size() * dim);
  REQUIRE(reference.Pull(looked_up, expected.data()).ok());
  // Each pusher's batches: rounds of 300 of its keys, with gradients drawn from its seed.
  constexpr int kRounds = 40;
  auto batch_of = [&](uint32_t t, int round, std::vector<uint64_t>* ks, std::vector<float>* grads,
                      std::vector<float>* shows) {
    std::mt19937 r(100 * t + static_cast<uint32_t>(round));
    ks->clear();
    const size_t start = (static_cast<size_t>(round) * 300) % pushed[t].size();
    for (size_t j = 0; j < 300; ++j) ks->push_back(pushed[t][(start + j) % pushed[t].size()]);
    grads->resize(ks->size() * dim);
    for (auto& g : *grads) g = std::uniform_real_distribution<float>(-0.3f, 0.3f)(r);
    shows->assign(ks->size(), 1.0f);
  };
  // The pushes applied to `reference` round by round, each pushed key's rows along the way
  // recorded (its row before any push first).
  std::unordered_map<uint64_t, std::vector<float>> passes_through;
  {
    std::vector<uint64_t> all(pushed[0]);
    all.insert(all.end(), pushed[1].begin(), pushed[1].end());
    std::vector<float> now(all.size() * dim);
    REQUIRE(reference.Pull(all, now.data()).ok());
    for (size_t i = 0; i < all.size(); ++i)
      passes_through[all[i]].assign(now.begin() + i * dim, now.begin() + (i + 1) * dim);
    std::vector<uint64_t> ks;
    std::vector<float> grads, shows;
    for (uint32_t t = 0; t < 2; ++t) {
      for (int round = 0; round < kRounds; ++round) {
        batch_of(t, round, &ks, &grads, &shows);
        REQUIRE(reference.Push(ks, grads, shows, {}).ok());
        now.resize(ks.size() * dim);
        REQUIRE(reference.Pull(ks, now.data()).ok());
        for (size_t i = 0; i < ks.size(); ++i) {
          auto& seen = passes_through[ks[i]];
          seen.insert(seen.end(), now.begin() + i * dim, now.begin() + (i + 1) * dim);
        }
      }
    }
  }
  auto one_of_its_rows = [&](uint64_t key, const float* row) {
    const std::vector<float>& rows = passes_through.at(key);
    for (size_t r = 0; r < rows.size(); r += dim) {
      if (std::equal(row, row + dim, rows.begin() + r)) return true;
    }
    return false;
  };
  std::atomic<int> failures{0};
  std::atomic<int> pushers_left{2};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> ks;
      std::vector<float> grads, shows;
      for (int round = 0; round < kRounds; ++round) {
        batch_of(t, round, &ks, &grads, &shows);
        if (!table.Push(ks, grads, shows, {}).ok()) ++failures;
      }
      --pushers_left;
    });
  }
  std::atomic<int> lookups{0};
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const size_t size = 97 + 211 * t;  // each thread its own batch size
      std::vector<float> out;
      const std::vector<uint64_t>& busy = pushed[t % 2];
      for (size_t start = 0; pushers_left > 0 || start < 4 * size; start += size) {
        std::vector<uint64_t> ks;
        std::vector<float> want;
        for (size_t j = 0; j < size; ++j) {
          const size_t i = (start + j) % looked_up.size();
          ks.push_back(looked_up[i]);
          want.insert(want.end(), expected.begin() + i * dim, expected.begin() + (i + 1) * dim);
        }
        const size_t quiet = ks.size();  // then a quarter as many keys being pushed
        for (size_t j = 0; j < size / 4; ++j) ks.push_back(busy[(start + 7 * j) % busy.size()]);
        out.assign(ks.size() * dim, -7.0f);
        bool ok = table.Pull(ks, out.data()).ok() && std::equal(want.begin(), want.end(), out.begin());
        for (size_t k = quiet; ok && k < ks.size(); ++k) ok = one_of_its_rows(ks[k], out.data() + k * dim);
        if (!ok) ++failures;
        ++lookups;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(lookups >= 16);
  PassRows got, want;
  REQUIRE(table.Export(&got).ok());
  REQUIRE(reference.Export(&want).ok());
  CheckSameRows(got, want);
  CheckExportRanges(table, got);
}

}  // namespace fleetps::heter
