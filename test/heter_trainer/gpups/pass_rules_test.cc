// The pass table kernels' row rules (heter_trainer/gpups/pass_rules.h, the code the CUDA
// kernels run), run on the host against RowAccessor::ApplyPush and Extend with the table's
// own optimizer: the rows must agree bitwise after every push, for each sparse rule, with
// weight decay and bounds, CTR statistics and lazy embedx extension. This checks the kernels'
// arithmetic on machines without a GPU; cuda_pass_table_test checks the kernels themselves.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "heter_trainer/gpups/pass_table_impl.h"
#include "server/table/table_common.h"
#include "test/heter_trainer/gpups/pass_table_checks.h"

namespace fleetps::heter {
namespace {

// Pushes random gradients, shows and clicks to 50 rows for `steps` steps through both rules;
// every row, and every decision to extend it, must agree bitwise. From step `fade` on, the
// gradients are 0 and only rows 0-4 are pushed (their optimizer state decays).
void CompareRules(const TableOptions& t, int steps = 300, int fade = -1) {
  auto parts = server::BuildTableParts(t, TableKind::kSparse, 0, 1);
  REQUIRE(parts.ok());
  const server::RowAccessor accessor(t.accessor, static_cast<uint32_t>(t.dim), *parts->optimizer);
  const gpu::PassRule rule = PassRuleOf(t, *parts->optimizer, accessor);
  const uint32_t dim = accessor.dim(), floats = accessor.row_floats();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> host(50 * size_t{floats}), rules(host.size());
  for (uint32_t r = 0; r < 50; ++r) {
    float* row = host.data() + size_t{r} * floats;
    for (uint32_t j = 0; j < accessor.CreateWeights(); ++j) row[j] = u(rng);
    accessor.InitRow(row);
  }
  rules = host;
  std::vector<float> grad(dim), initial(dim);
  uint32_t extended = 0;
  for (int step = 0; step < steps; ++step) {
    const bool fading = fade >= 0 && step >= fade;
    const uint32_t r = fading ? step % 5 : rng() % 50;
    for (auto& g : grad) g = fading ? 0.0f : u(rng);
    const float show = static_cast<float>(1 + rng() % 2), click = static_cast<float>(rng() % 2);
    float* a = host.data() + size_t{r} * floats;
    float* b = rules.data() + size_t{r} * floats;
    const bool extend_a = accessor.ApplyPush(a, grad.data(), show, click, /*delta=*/false);
    const bool extend_b = gpu::rules::PushRow(rule, b, grad.data(), show, click);
    REQUIRE(extend_a == extend_b);
    if (extend_a) {
      ++extended;
      for (auto& w : initial) w = u(rng);
      std::copy(initial.begin() + 1, initial.end(), a + 1);
      accessor.Extend(a);
      gpu::rules::ExtendRow(rule, b, initial.data());
    }
    INFO("step " << step << ", row " << r);
    REQUIRE(std::memcmp(a, b, floats * sizeof(float)) == 0);
  }
  if (accessor.ctr()) CHECK(extended > 0);  // the extension path ran
}

TEST_CASE("Pass table rules = RowAccessor: SGD, plain rows, weight decay") {
  CompareRules(RuleTable(OptimizerKind::kSgd, false, 0.1f, false));
}

TEST_CASE("Pass table rules = RowAccessor: Adagrad, CTR rows extended lazily, bounds") {
  CompareRules(RuleTable(OptimizerKind::kAdagrad, true, 0.0f, true));
}

TEST_CASE("Pass table rules = RowAccessor: Adam, CTR rows, weight decay and bounds") {
  CompareRules(RuleTable(OptimizerKind::kAdam, true, 0.1f, true));
}

TEST_CASE("Pass table rules = RowAccessor: Adam moments decaying into subnormals (flushed to 0 by both)") {
  TableOptions t = RuleTable(OptimizerKind::kAdam, false, 0.0f, false);
  t.optimizer.beta1 = 0.5f;  // m of a row pushed zeros reaches subnormals in ~130 pushes
  t.optimizer.beta2 = 0.5f;
  CompareRules(t, 1500, 300);
}

}  // namespace
}  // namespace fleetps::heter
