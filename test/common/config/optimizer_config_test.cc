// One optimizer reader for both config files (common/config/optimizer_config): the pserver
// YAML's tables[i].optimizer and the job YAML's hyper_parameters.optimizer must accept the
// same spellings, give the same OptimizerOptions and refuse the same values.
#include "common/config/optimizer_config.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/config/server_config.h"
#include "common/config/trainer_config.h"

namespace fleetps::config {
namespace {

// `optimizer` (a flow map) as the only table's optimizer of a pserver YAML.
StatusOr<OptimizerOptions> FromServerYaml(const std::string& optimizer) {
  ASSIGN_OR_RETURN(ServerOptions o,
                   ParseServerYaml("tables:\n  - {id: 0, name: e, dim: 8, optimizer: " + optimizer + "}\n", "ps.yaml"));
  return o.tables.at(0).optimizer;
}

// `optimizer` as hyper_parameters.optimizer of a job YAML (the model's, which both derived
// tables take).
StatusOr<OptimizerOptions> FromJobYaml(const std::string& optimizer) {
  ASSIGN_OR_RETURN(
      TrainerOptions o,
      ParseTrainerYaml("runner:\n  epochs: 1\nhyper_parameters:\n  optimizer: " + optimizer + "\n", "job.yaml"));
  REQUIRE(o.sparse_table.optimizer.kind == o.model.optimizer.kind);
  REQUIRE(o.dense_table.optimizer.learning_rate == o.model.optimizer.learning_rate);
  return o.model.optimizer;
}

// `optimizer` as fleetps.sparse_table.optimizer of a job YAML.
StatusOr<OptimizerOptions> FromJobTableOverride(const std::string& optimizer) {
  ASSIGN_OR_RETURN(TrainerOptions o,
                   ParseTrainerYaml("runner: {}\nhyper_parameters:\n  fc_sizes: [4]\nfleetps:\n  sparse_table:\n"
                                    "    optimizer: " +
                                        optimizer + "\n",
                                    "job.yaml"));
  return o.sparse_table.optimizer;
}

void CheckSame(const OptimizerOptions& a, const OptimizerOptions& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.learning_rate == b.learning_rate);
  CHECK(a.initial_accumulator == b.initial_accumulator);
  CHECK(a.beta1 == b.beta1);
  CHECK(a.beta2 == b.beta2);
  CHECK(a.epsilon == b.epsilon);
  CHECK(a.has_bounds == b.has_bounds);
  CHECK(a.bound_min == b.bound_min);
  CHECK(a.bound_max == b.bound_max);
  CHECK(a.weight_decay == b.weight_decay);
}

// The message without its "file:line: <path to the map>." prefix, e.g.
// "learning_rate: expected a number > 0, got \"0\"".
std::string AfterOptimizerPath(const std::string& message) {
  const std::string marker = "optimizer";
  const size_t at = message.find(marker);
  if (at == std::string::npos) return message;
  return message.substr(at + marker.size());
}

TEST_CASE("name: and class: give the same OptimizerOptions from either file") {
  const std::string fields =
      "learning_rate: 0.002, beta1: 0.8, beta2: 0.99, epsilon: 1.0e-6, initial_accumulator: 0.5, "
      "weight_bounds: [-5, 5], weight_decay: 0.25";
  std::vector<OptimizerOptions> parsed;
  for (const std::string kind : {"name: adam", "class: Adam", "name: ADAM", "class: adam"}) {
    const std::string map = "{" + kind + ", " + fields + "}";
    INFO(map);
    for (auto* parse : {&FromServerYaml, &FromJobYaml, &FromJobTableOverride}) {
      auto o = (*parse)(map);
      INFO(o.status().ToString());
      REQUIRE(o.ok());
      parsed.push_back(*o);
    }
  }
  const OptimizerOptions& first = parsed.front();
  CHECK(first.kind == OptimizerKind::kAdam);
  CHECK(first.learning_rate == 0.002f);
  CHECK(first.beta1 == 0.8f);
  CHECK(first.beta2 == 0.99f);
  CHECK(first.epsilon == 1.0e-6f);
  CHECK(first.initial_accumulator == 0.5f);
  CHECK(first.has_bounds);
  CHECK(first.bound_min == -5.0f);
  CHECK(first.bound_max == 5.0f);
  CHECK(first.weight_decay == 0.25f);
  for (const auto& o : parsed) CheckSame(o, first);
}

TEST_CASE("Every rule name, in any case, from either file") {
  const std::pair<std::string, OptimizerKind> cases[] = {
      {"SGD", OptimizerKind::kSgd},         {"sgd", OptimizerKind::kSgd},   {"Adagrad", OptimizerKind::kAdagrad},
      {"ADAGRAD", OptimizerKind::kAdagrad}, {"Adam", OptimizerKind::kAdam}, {"adam", OptimizerKind::kAdam},
  };
  for (const auto& [name, kind] : cases) {
    for (const std::string key : {"name", "class"}) {
      const std::string map = "{" + key + ": " + name + ", learning_rate: 0.1}";
      INFO(map);
      auto server = FromServerYaml(map);
      auto job = FromJobYaml(map);
      REQUIRE(server.ok());
      REQUIRE(job.ok());
      CHECK(server->kind == kind);
      CheckSame(*server, *job);
    }
  }
}

TEST_CASE("PaddleRec's strategy and adam_lazy_mode are accepted by both files") {
  const std::string map = "{class: Adam, learning_rate: 0.001, strategy: async, adam_lazy_mode: True}";
  auto server = FromServerYaml(map);
  auto job = FromJobYaml(map);
  REQUIRE(server.ok());
  REQUIRE(job.ok());
  CheckSame(*server, *job);
}

TEST_CASE("Bad optimizer values are refused identically by both files") {
  struct Case {
    std::string map;
    std::string message;  // after "...optimizer"
  };
  const Case cases[] = {
      {"{name: sgd, learning_rate: 0}", ".learning_rate: expected a number > 0, got \"0\""},
      {"{name: sgd, learning_rate: -0.1}", ".learning_rate: expected a number > 0, got \"-0.1\""},
      {"{name: sgd, learning_rate: 1e39}", ".learning_rate: expected a number > 0, got \"1e39\""},  // float inf
      {"{name: sgd, learning_rate: .nan}", ".learning_rate: expected a number, got \".nan\""},
      {"{name: sgd, learning_rate: fast}", ".learning_rate: expected a number, got \"fast\""},
      {"{class: adam, beta1: 1}", ".beta1: expected a number in [0, 1), got \"1\""},
      {"{class: adam, beta2: -0.5}", ".beta2: expected a number in [0, 1), got \"-0.5\""},
      {"{class: adam, epsilon: 0}", ".epsilon: expected a number > 0, got \"0\""},
      {"{class: adagrad, initial_accumulator: -1}", ".initial_accumulator: expected a number >= 0, got \"-1\""},
      {"{class: adam, weight_decay: -0.1}", ".weight_decay: expected a number >= 0, got \"-0.1\""},
      {"{name: sgd, learning_rate: 0.5, weight_decay: 2}",
       ".weight_decay: weight_decay 2 times learning_rate 0.5 must be < 1 (each update multiplies the weights by 1 - "
       "their product)"},
      // A value the chosen rule does not use is still checked.
      {"{class: sgd, beta1: 2}", ".beta1: expected a number in [0, 1), got \"2\""},
      {"{name: sgd, weight_bounds: [1, -1]}",
       ".weight_bounds: expected [min, max]: two finite numbers with min <= max"},
      {"{name: sgd, weight_bounds: [1]}", ".weight_bounds: expected [min, max]: two finite numbers with min <= max"},
      {"{name: sgd, weight_bounds: 1}", ".weight_bounds: expected a list of numbers, got \"1\""},
      {"{class: Momentum}", ".class: expected one of sgd, adagrad, adam (case-insensitive), got \"Momentum\""},
      {"{name: adamw}",
       ".name: expected one of sgd, adagrad, adam (case-insensitive), got \"adamw\" (did you mean 'adam'?)"},
      {"{name: adam, class: adam}", ": give the rule as 'name' or as 'class' (PaddleRec's spelling), not both"},
      {"{name: adam, learning_rte: 0.1}", "' (did you mean 'learning_rate'?)"},
      {"adam", ": expected a map such as {name: adam, learning_rate: 0.001}"},
  };
  for (const auto& c : cases) {
    INFO(c.map);
    auto server = FromServerYaml(c.map);
    auto job = FromJobYaml(c.map);
    REQUIRE_FALSE(server.ok());
    REQUIRE_FALSE(job.ok());
    INFO(server.status().message());
    INFO(job.status().message());
    CHECK(server.status().IsInvalidArgument());
    CHECK(job.status().IsInvalidArgument());
    CHECK_THAT(server.status().message(), Catch::StartsWith("ps.yaml:2"));
    CHECK_THAT(job.status().message(), Catch::StartsWith("job.yaml:4"));
    CHECK_THAT(server.status().message(), Catch::EndsWith(c.message));
    CHECK(AfterOptimizerPath(server.status().message()) == AfterOptimizerPath(job.status().message()));
  }
}

TEST_CASE("Unknown optimizer keys name file:line:column and the closest key in both files") {
  auto server = FromServerYaml("{name: adam, learning_rte: 0.1}");
  CHECK(server.status().message() ==
        "ps.yaml:2:54: unknown key 'learning_rte' under 'tables[0].optimizer' (did you mean 'learning_rate'?)");
  auto job = FromJobYaml("{name: adam, learning_rte: 0.1}");
  CHECK(job.status().message() ==
        "job.yaml:4:27: unknown key 'learning_rte' under 'hyper_parameters.optimizer' (did you mean 'learning_rate'?)");
}

TEST_CASE("ValidateOptimizer applies the parser's checks to options built in code") {
  OptimizerOptions o;
  CHECK(ValidateOptimizer(o).ok());  // the defaults are valid
  o.learning_rate = 0;
  CHECK(ValidateOptimizer(o).message() == "optimizer.learning_rate: expected a number > 0, got 0.000000");
  o = OptimizerOptions{};
  o.beta2 = 1.0f;
  CHECK_THAT(ValidateOptimizer(o).message(), Catch::StartsWith("optimizer.beta2: expected a number in [0, 1)"));
  o = OptimizerOptions{};
  o.has_bounds = true;
  o.bound_min = 1;
  o.bound_max = 0;
  CHECK_THAT(ValidateOptimizer(o).message(), Catch::StartsWith("optimizer.weight_bounds: expected [min, max]"));
  // ValidateTable uses it.
  TableOptions t;
  t.name = "e";
  t.optimizer.epsilon = -1;
  CHECK_THAT(ValidateTable(t).message(), Catch::Contains("optimizer.epsilon: expected a number > 0"));
}

}  // namespace
}  // namespace fleetps::config
