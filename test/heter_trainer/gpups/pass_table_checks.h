#pragma once
// What the pass table tests share: the tables they train (RuleTable), and one check of
// refusals for both PassTable implementations.
//
// A push refused part-way (a key given twice, a key not in the pass) applies exactly the
// pushes routed before the refused key: every key of the devices before its own, and the keys
// before it on its own device; a pass with a repeated key is refused naming the first repeat
// in routing order, with nothing kept. One check for both PassTable implementations (the host
// twin in host_pass_table_test, the CUDA table in cuda_pass_table_test).
#include <catch2/catch.hpp>

#include <string>
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
  REQUIRE(table.Build(keys, std::vector<float>(keys.size() * core, 0.0f), std::vector<uint8_t>(keys.size(), 0), {})
              .ok());
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
  // The table serves on: a valid push after the refused ones.
  push = {on[1][2]};
  REQUIRE(table.Push(push, std::vector<float>(2, 1.0f), {}, {}).ok());
  CHECK(weight(on[1][2]) == -1.0f);
}

}  // namespace fleetps::heter
