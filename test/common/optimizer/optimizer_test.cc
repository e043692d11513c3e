#include "common/optimizer/optimizer.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace fleetps::optimizer {
namespace {

std::unique_ptr<Optimizer> MustCreate(const OptimizerOptions& options) {
  auto created = CreateOptimizer(options);
  REQUIRE(created.ok());
  return std::move(created).value();
}

// One row: weights plus its state block, initialized by the rule.
struct Row {
  Row(const Optimizer& opt, std::vector<float> weights) : w(std::move(weights)), state(opt.StateSize(w.size())) {
    opt.InitState(state.data(), w.size());
  }
  void Step(const Optimizer& opt, std::vector<float> grad) {
    REQUIRE(grad.size() == w.size());
    opt.Update(w.data(), state.data(), grad.data(), w.size());
  }
  std::vector<float> w;
  std::vector<float> state;
};

TEST_CASE("SGD: w -= lr * g, no state", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.5f;  // all numbers below are exact in float
  auto opt = MustCreate(o);
  CHECK(opt->StateSize(8) == 0);

  Row row(*opt, {1.0f, -2.0f});
  row.Step(*opt, {0.5f, 1.0f});  // [1 - 0.25, -2 - 0.5]
  CHECK(row.w == std::vector<float>{0.75f, -2.5f});
  row.Step(*opt, {-1.0f, 0.25f});  // [0.75 + 0.5, -2.5 - 0.125]
  CHECK(row.w == std::vector<float>{1.25f, -2.625f});
  row.Step(*opt, {2.0f, -4.0f});  // [1.25 - 1, -2.625 + 2]
  CHECK(row.w == std::vector<float>{0.25f, -0.625f});
}

TEST_CASE("Adagrad: per-weight g2sum from initial_accumulator", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.learning_rate = 0.1f;
  o.initial_accumulator = 7.0f;
  o.epsilon = 1.0f;  // large on purpose: keeps the denominators round
  auto opt = MustCreate(o);
  CHECK(opt->StateSize(8) == 8);

  Row row(*opt, {1.0f, -1.0f});
  CHECK(row.state == std::vector<float>{7.0f, 7.0f});

  // w0: g2sum = 7 + 9 = 16, w = 1 - 0.1*3/(4+1) = 0.94.  w1: g = 0, unchanged.
  row.Step(*opt, {3.0f, 0.0f});
  CHECK(row.state == std::vector<float>{16.0f, 7.0f});
  CHECK(row.w[0] == Approx(0.94f));
  CHECK(row.w[1] == -1.0f);

  // w0: g2sum = 16 + 9 = 25, w = 0.94 - 0.1*3/(5+1) = 0.89.
  // w1: g2sum = 7 + 9 = 16,  w = -1 - 0.1*3/(4+1) = -1.06.
  row.Step(*opt, {3.0f, 3.0f});
  CHECK(row.state == std::vector<float>{25.0f, 16.0f});
  CHECK(row.w[0] == Approx(0.89f));
  CHECK(row.w[1] == Approx(-1.06f));

  // w0: g2sum = 25 + 144 = 169, w = 0.89 + 0.1*12/(13+1) = 0.89 + 0.0857142857 = 0.9757142857.
  row.Step(*opt, {-12.0f, 0.0f});
  CHECK(row.state == std::vector<float>{169.0f, 16.0f});
  CHECK(row.w[0] == Approx(0.9757142857f));
  CHECK(row.w[1] == Approx(-1.06f));
}

TEST_CASE("Adam: Paddle's sparse rule with per-row beta powers", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.1f;
  o.beta1 = 0.5f;
  o.beta2 = 0.75f;
  o.epsilon = 1e-8f;
  auto opt = MustCreate(o);
  CHECK(opt->StateSize(8) == 2 * 8 + 2);

  // State layout: [beta1_pow, beta2_pow, m0, v0, m1, v1].
  Row row(*opt, {1.0f, 0.5f});
  CHECK(row.state == std::vector<float>{0.5f, 0.75f, 0, 0, 0, 0});

  // Step 1: lr_t = 0.1 * sqrt(1 - 0.75) / (1 - 0.5) = 0.1.
  //   w0: g = 2:  m = 0.5*2 = 1,     v = 0.25*4 = 1,     w = 1 - 0.1*1/1 = 0.9
  //   w1: g = -1: m = -0.5,          v = 0.25*1 = 0.25,  w = 0.5 - 0.1*(-0.5/0.5) = 0.6
  row.Step(*opt, {2.0f, -1.0f});
  CHECK(row.state[0] == 0.25f);
  CHECK(row.state[1] == 0.5625f);
  CHECK(row.state[2] == 1.0f);
  CHECK(row.state[3] == 1.0f);
  CHECK(row.state[4] == -0.5f);
  CHECK(row.state[5] == 0.25f);
  CHECK(row.w[0] == Approx(0.9f));
  CHECK(row.w[1] == Approx(0.6f));

  // Step 2: lr_t = 0.1 * sqrt(1 - 0.5625) / (1 - 0.25) = 0.1 * sqrt(0.4375) / 0.75.
  //   w0: g = -2: m = 0.5*1 + 0.5*(-2) = -0.5,   v = 0.75*1 + 0.25*4 = 1.75
  //       w = 0.9 - lr_t * (-0.5 / sqrt(1.75)) = 0.9 + 0.1*(0.5/0.75)*sqrt(0.4375/1.75)
  //         = 0.9 + 0.1*(2/3)*0.5 = 0.9 + 1/30 = 0.9333333
  //   w1: g = 1:  m = 0.5*(-0.5) + 0.5*1 = 0.25, v = 0.75*0.25 + 0.25*1 = 0.4375
  //       w = 0.6 - lr_t * 0.25 / sqrt(0.4375) = 0.6 - 0.1*0.25/0.75 = 0.6 - 1/30 = 0.5666667
  row.Step(*opt, {-2.0f, 1.0f});
  CHECK(row.state[0] == 0.125f);
  CHECK(row.state[1] == 0.421875f);
  CHECK(row.state[2] == -0.5f);
  CHECK(row.state[3] == Approx(1.75f));
  CHECK(row.state[4] == 0.25f);
  CHECK(row.state[5] == Approx(0.4375f));
  CHECK(row.w[0] == Approx(0.9333333f));
  CHECK(row.w[1] == Approx(0.5666667f));

  // Step 3: lr_t = 0.1 * sqrt(1 - 0.421875) / (1 - 0.125) = 0.1 * sqrt(0.578125) / 0.875 = 0.0868966076.
  //   w0: g = 1: m = 0.5*(-0.5) + 0.5 = 0.25, v = 0.75*1.75 + 0.25 = 1.5625 (sqrt 1.25)
  //       w = 0.9333333 - 0.0868966076 * 0.25/1.25 = 0.9159540118
  //   w1: g = 0: m = 0.125, v = 0.75*0.4375 = 0.328125
  //       w = 0.5666667 - 0.0868966076 * 0.125/sqrt(0.328125) = 0.5477042723
  row.Step(*opt, {1.0f, 0.0f});
  CHECK(row.state[0] == 0.0625f);
  CHECK(row.state[1] == Approx(0.31640625f));
  CHECK(row.w[0] == Approx(0.9159540118f));
  CHECK(row.w[1] == Approx(0.5477042723f));
}

TEST_CASE("Adam: beta powers flush to 0 instead of going subnormal; weights unchanged", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01f;
  o.beta1 = 0.5f;  // 0.5^126 is the smallest normal float: ~130 steps reach subnormals
  o.beta2 = 0.6f;
  auto opt = MustCreate(o);
  Row row(*opt, {0.5f});

  // The rule written out plainly, without the flush.
  float w = 0.5f, m = 0.0f, v = 0.0f, beta1_pow = o.beta1, beta2_pow = o.beta2;
  for (int step = 0; step < 300; ++step) {
    const float g = (step % 3 == 0) ? -0.25f : 0.125f;
    row.Step(*opt, {g});
    const float lr_t = o.learning_rate * (std::sqrt(1.0f - beta2_pow) / (1.0f - beta1_pow));
    m = o.beta1 * m + (1.0f - o.beta1) * g;
    v = o.beta2 * v + (1.0f - o.beta2) * g * g;
    w -= lr_t * (m / (std::sqrt(v) + o.epsilon));
    beta1_pow *= o.beta1;
    beta2_pow *= o.beta2;
    REQUIRE(row.w[0] == w);
    REQUIRE(std::fpclassify(row.state[0]) != FP_SUBNORMAL);
    REQUIRE(std::fpclassify(row.state[1]) != FP_SUBNORMAL);
  }
  CHECK(row.state[0] == 0.0f);
  CHECK(row.state[1] == 0.0f);
}

TEST_CASE("Adam: moments that decay into subnormals flush to 0, of either sign; weights unchanged", "[optimizer]") {
  // A weight whose gradient stops (a dead ReLU unit's): m decays by beta1 per step. Subnormal
  // arithmetic is slow on x86, so a moment that goes subnormal becomes 0, which moves no weight.
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01f;
  o.beta1 = 0.5f;  // m reaches the subnormal range in ~130 steps
  o.beta2 = 0.5f;  // and v in ~60
  auto opt = MustCreate(o);
  for (float first_grad : {-0.25f, 0.25f}) {
    Row row(*opt, {0.5f});
    float w = 0.5f, m = 0.0f, v = 0.0f, beta1_pow = o.beta1, beta2_pow = o.beta2;
    bool plain_went_subnormal = false;
    for (int step = 0; step < 200; ++step) {
      const float g = step == 0 ? first_grad : 0.0f;
      row.Step(*opt, {g});
      // The rule written out plainly, without any flush.
      const float lr_t = o.learning_rate * (std::sqrt(1.0f - beta2_pow) / (1.0f - beta1_pow));
      m = o.beta1 * m + (1.0f - o.beta1) * g;
      v = o.beta2 * v + (1.0f - o.beta2) * g * g;
      w -= lr_t * (m / (std::sqrt(v) + o.epsilon));
      beta1_pow = beta1_pow * o.beta1 < std::numeric_limits<float>::min() ? 0.0f : beta1_pow * o.beta1;
      beta2_pow = beta2_pow * o.beta2 < std::numeric_limits<float>::min() ? 0.0f : beta2_pow * o.beta2;
      plain_went_subnormal |= std::fpclassify(m) == FP_SUBNORMAL;
      REQUIRE(row.w[0] == w);
      REQUIRE(std::fpclassify(row.state[2]) != FP_SUBNORMAL);
      REQUIRE(std::fpclassify(row.state[3]) != FP_SUBNORMAL);
    }
    CHECK(plain_went_subnormal);  // the case is the one meant
    CHECK(row.state[2] == 0.0f);
    CHECK(row.state[3] == 0.0f);
  }
}

TEST_CASE("Span form matches the row form", "[optimizer]") {
  // DenseTable keeps the shared state apart and updates sub-ranges; the row form is the
  // same computation over the contiguous [shared | element] block.
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    OptimizerOptions o;
    o.kind = kind;
    o.learning_rate = 0.05f;
    o.initial_accumulator = 0.1f;
    auto opt = MustCreate(o);
    const std::vector<float> grad = {0.5f, -1.5f, 2.0f};
    Row row(*opt, {0.1f, 0.2f, 0.3f});

    std::vector<float> w = row.w;
    std::vector<float> element(opt->element_state_size() * w.size());
    std::vector<float> shared(opt->shared_state_size());
    opt->InitSpanState(element.data(), shared.data(), w.size());
    for (int step = 0; step < 3; ++step) {
      row.Step(*opt, grad);
      opt->UpdateSpan(w.data(), element.data(), shared.data(), grad.data(), w.size());
    }
    CHECK(w == row.w);
    std::vector<float> joined = shared;
    joined.insert(joined.end(), element.begin(), element.end());
    CHECK(joined == row.state);
  }
}

TEST_CASE("weight_decay shrinks the weights an update touches before the rule runs", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.5f;
  o.weight_decay = 0.5f;  // factor 1 - 0.25 = 0.75; every number below is exact in float
  auto sgd = MustCreate(o);
  Row row(*sgd, {1.0f, -2.0f});
  row.Step(*sgd, {0.5f, 0.0f});  // [0.75 - 0.25, -1.5 - 0]
  CHECK(row.w == std::vector<float>{0.5f, -1.5f});
  row.Step(*sgd, {0.0f, -1.0f});  // [0.375, -1.125 + 0.5]
  CHECK(row.w == std::vector<float>{0.375f, -0.625f});

  // Adagrad and Adam: the same step as the rule without decay on the shrunk weights
  // (decoupled, as AdamW), and their state does not see the decay.
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    CAPTURE(static_cast<int>(kind));
    o.kind = kind;
    o.learning_rate = 0.1f;
    o.weight_decay = 2.0f;  // factor 0.8
    auto decayed = MustCreate(o);
    o.weight_decay = 0.0f;
    auto plain = MustCreate(o);
    Row with(*decayed, {1.0f, -0.5f, 0.0f});
    Row reference(*plain, {0.8f, -0.4f, 0.0f});
    with.Step(*decayed, {0.3f, -0.2f, 1.0f});
    reference.Step(*plain, {0.3f, -0.2f, 1.0f});
    CHECK(with.w == reference.w);
    CHECK(with.state == reference.state);
  }
}

TEST_CASE("Every rule clips into [bound_min, bound_max] when has_bounds", "[optimizer]") {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    CAPTURE(static_cast<int>(kind));
    OptimizerOptions o;
    o.kind = kind;
    o.learning_rate = 10.0f;  // every rule moves each weight by ~lr here
    o.has_bounds = true;
    o.bound_min = -1.0f;
    o.bound_max = 0.5f;
    auto opt = MustCreate(o);
    Row row(*opt, {0.0f, 0.0f, 0.25f});
    row.Step(*opt, {-2.0f, 2.0f, 0.0f});  // unclipped: [+~10, -~10, 0.25]
    CHECK(row.w == std::vector<float>{0.5f, -1.0f, 0.25f});

    o.has_bounds = false;
    auto unbounded = MustCreate(o);
    Row free_row(*unbounded, {0.0f});
    free_row.Step(*unbounded, {-2.0f});
    CHECK(free_row.w[0] > 5.0f);
  }
}

TEST_CASE("Bad options are InvalidArgument naming the field", "[optimizer]") {
  struct Case {
    std::string field;
    std::function<void(OptimizerOptions&)> mutate;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"learning_rate", [](OptimizerOptions& o) { o.learning_rate = 0.0f; }},
      {"learning_rate", [](OptimizerOptions& o) { o.learning_rate = -1.0f; }},
      {"learning_rate", [nan](OptimizerOptions& o) { o.learning_rate = nan; }},
      {"initial_accumulator",
       [](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdagrad;
         o.initial_accumulator = -0.5f;
       }},
      {"epsilon",
       [](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdagrad;
         o.epsilon = 0.0f;
       }},
      {"epsilon",
       [](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdam;
         o.epsilon = -1e-8f;
       }},
      {"beta1",
       [](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdam;
         o.beta1 = 1.0f;
       }},
      {"beta1",
       [](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdam;
         o.beta1 = -0.1f;
       }},
      {"beta2",
       [nan](OptimizerOptions& o) {
         o.kind = OptimizerKind::kAdam;
         o.beta2 = nan;
       }},
      {"weight_bounds",
       [](OptimizerOptions& o) {
         o.has_bounds = true;
         o.bound_min = 1.0f;
         o.bound_max = -1.0f;
       }},
      {"bound_max",
       [](OptimizerOptions& o) {
         o.has_bounds = true;
         o.bound_max = std::numeric_limits<float>::infinity();
       }},
      {"weight_decay", [](OptimizerOptions& o) { o.weight_decay = -0.1f; }},
      {"weight_decay", [nan](OptimizerOptions& o) { o.weight_decay = nan; }},
      {"weight_decay",
       [](OptimizerOptions& o) {
         o.learning_rate = 0.5f;
         o.weight_decay = 2.0f;  // every update would zero the weights
       }},
  };
  for (const Case& c : cases) {
    OptimizerOptions o;
    c.mutate(o);
    const Status st = ValidateOptimizerOptions(o);
    CAPTURE(c.field, st.ToString());
    CHECK(st.IsInvalidArgument());
    CHECK(st.message().find("optimizer." + c.field) != std::string::npos);
    CHECK(CreateOptimizer(o).status().IsInvalidArgument());
  }

  // Fields a rule does not read are not checked for it (an SGD table may carry Adam defaults).
  OptimizerOptions sgd;
  sgd.beta1 = 5.0f;
  CHECK(ValidateOptimizerOptions(sgd).ok());
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    OptimizerOptions defaults;
    defaults.kind = kind;
    CHECK(ValidateOptimizerOptions(defaults).ok());
  }
}

}  // namespace
}  // namespace fleetps::optimizer
