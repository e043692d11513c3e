#include "common/config/server_config.h"

#include <catch2/catch.hpp>
#include <map>

namespace fleetps::config {
namespace {

const char* kGood = R"(
server:
  endpoints: ["127.0.0.1:8500", "127.0.0.1:8501"]
  index: 1
  io_threads: 3
tables:
  - id: 0
    name: embedding
    kind: sparse
    dim: 9
    shards: 4
    optimizer: {name: adam, learning_rate: 0.001, weight_bounds: [-10, 10]}
    initializer: {name: uniform, min: -0.1, max: 0.1, seed: 7}
  - id: 1
    name: dense
    kind: dense
    size: 1000
    optimizer: {name: sgd, learning_rate: 0.1}
)";

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST_CASE("A full pserver config parses") {
  auto o = ParseServerYaml(kGood, "ps.yaml");
  REQUIRE(o.ok());
  CHECK(o->endpoints.size() == 2);
  CHECK(o->index == 1);
  CHECK(o->io_threads == 3);
  REQUIRE(o->tables.size() == 2);
  const auto& e = o->tables[0];
  CHECK(e.dim == 9);
  CHECK(e.shards == 4);
  CHECK(e.optimizer.kind == OptimizerKind::kAdam);
  CHECK(e.optimizer.learning_rate == Approx(0.001f));
  CHECK(e.optimizer.has_bounds);
  CHECK(e.optimizer.bound_min == -10.0f);
  CHECK(e.initializer.seed == 7);
  CHECK(o->tables[1].kind == TableKind::kDense);
  CHECK(o->tables[1].dim == 1000);
  CHECK(ValidateServerOptions(*o).ok());
}

void ExpectError(const std::string& yaml, const std::string& fragment) {
  auto o = ParseServerYaml(yaml, "bad.yaml");
  INFO(yaml);
  REQUIRE_FALSE(o.ok());
  INFO(o.status().message());
  CHECK(o.status().message().find(fragment) != std::string::npos);
  CHECK(o.status().message().find("bad.yaml") != std::string::npos);
}

TEST_CASE("Config errors name file, line, key and the fix") {
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, optimizer: {name: adamw}}\n", "unknown optimizer 'adamw'");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, optimizer: {name: sgd, learning_rate: fast}}\n",
              "tables[0].optimizer.learning_rate: expected a number, got \"fast\"");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, optimizer: {name: sgd, learning_rte: 1}}\n",
              "unknown key 'learning_rte'");
  ExpectError("tables:\n  - {id: 0, name: e}\n", "missing required key 'dim'");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8}\n  - {id: 0, name: f, dim: 8}\n", "duplicate table id 0");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, kind: hashed}\n", "unknown table kind 'hashed'");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 0}\n", "dim/size must be > 0");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, initializer: {name: uniform, min: 1, max: 0}}\n", "min < max");
  ExpectError("server: {io_threads: 0}\ntables:\n  - {id: 0, name: e, dim: 8}\n", "io_threads");
  ExpectError("tables: []\n", "non-empty list");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8}\nextra: 1\n", "unknown key 'extra'");
  ExpectError("tables: [\n", "YAML syntax error");
  // The line number of the offending node is reported (1-based).
  ExpectError("tables:\n  - id: 0\n    name: e\n    dim: 8\n    shards: many\n", "bad.yaml:5:");
}

TEST_CASE("Paddle environment picks the endpoint list and this server's index") {
  auto o = ParseServerYaml(kGood, "ps.yaml");
  REQUIRE(o.ok());
  Status st = ApplyServerEnv(FakeEnv({{"TRAINING_ROLE", "PSERVER"},
                                      {"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000,10.0.0.2:6000,10.0.0.3:6000"},
                                      {"POD_IP", "10.0.0.3"},
                                      {"PADDLE_PORT", "6000"}}),
                             &*o);
  REQUIRE(st.ok());
  CHECK(o->endpoints.size() == 3);
  CHECK(o->index == 2);

  auto o2 = ParseServerYaml(kGood, "ps.yaml");
  st = ApplyServerEnv(FakeEnv({{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000"},
                               {"POD_IP", "10.0.0.9"},
                               {"PADDLE_PORT", "6000"}}),
                      &*o2);
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("10.0.0.9:6000 is not in the pserver list") != std::string::npos);

  st = ApplyServerEnv(FakeEnv({{"TRAINING_ROLE", "TRAINER"}}), &*o2);
  CHECK(st.message().find("expected PSERVER") != std::string::npos);
}

TEST_CASE("Flags override environment, which overrides YAML") {
  auto o = ParseServerYaml(kGood, "ps.yaml");
  REQUIRE(o.ok());
  REQUIRE(ApplyServerEnv(FakeEnv({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:7000,127.0.0.1:7001"},
                                  {"FLEETPS_LOG_LEVEL", "debug"}}),
                         &*o)
              .ok());
  CHECK(o->endpoints[0].port == 7000);
  CHECK(o->index == 1);  // from YAML; env gave no POD_IP
  ServerFlags flags;
  flags.index = 0;
  flags.port = 9100;
  flags.log_level = "warn";
  REQUIRE(ApplyServerFlags(flags, &*o).ok());
  CHECK(o->index == 0);
  CHECK(o->endpoints[0].port == 9100);
  CHECK(o->log_level == "warn");
  flags = ServerFlags{};
  flags.index = 5;
  REQUIRE(ApplyServerFlags(flags, &*o).ok());
  CHECK(ValidateServerOptions(*o).message().find("out of range") != std::string::npos);
}

TEST_CASE("Storage keys: accessor, memory budget, data_dir, load and periodic saves") {
  const char* yaml = R"(
server:
  endpoints: ["127.0.0.1:8500"]
  data_dir: /var/lib/fleetps
  load_dir: /models/day1
  save_dir: /models/auto
  save_interval_s: 600
  save_mode: 3
tables:
  - id: 0
    name: emb
    dim: 9
    memory_budget_bytes: 209715200
    accessor: {name: ctr, nonclk_coeff: 0.2, click_coeff: 2, embedx_threshold: 5,
               show_click_decay_rate: 0.9, delete_threshold: 0.5, delete_after_unseen_days: 7}
  - {id: 1, name: plain, dim: 4}
)";
  auto o = ParseServerYaml(yaml, "ps.yaml");
  REQUIRE(o.ok());
  CHECK(o->data_dir == "/var/lib/fleetps");
  CHECK(o->load_dir == "/models/day1");
  CHECK(o->save_dir == "/models/auto");
  CHECK(o->save_interval_s == 600);
  CHECK(o->save_mode == 3);
  const auto& t = o->tables[0];
  CHECK(t.memory_budget_bytes == 209715200u);
  CHECK(t.accessor.kind == AccessorKind::kCtr);
  CHECK(t.accessor.nonclk_coeff == Approx(0.2f));
  CHECK(t.accessor.click_coeff == 2.0f);
  CHECK(t.accessor.embedx_threshold == 5.0f);
  CHECK(t.accessor.show_click_decay_rate == Approx(0.9f));
  CHECK(t.accessor.delete_threshold == 0.5f);
  CHECK(t.accessor.delete_after_unseen_days == 7);
  CHECK(o->tables[1].accessor.kind == AccessorKind::kPlain);  // the default
  CHECK(o->tables[1].memory_budget_bytes == 0);
  CHECK(ValidateServerOptions(*o).ok());

  ServerFlags flags;
  flags.load_dir = "/models/day2";
  flags.data_dir = "/ssd";
  REQUIRE(ApplyServerFlags(flags, &*o).ok());
  CHECK(o->load_dir == "/models/day2");
  CHECK(o->data_dir == "/ssd");

  // A budget needs somewhere to put the cold rows.
  auto no_dir = ParseServerYaml("tables:\n  - {id: 0, name: e, dim: 8, memory_budget_bytes: 100000000}\n", "b.yaml");
  REQUIRE(no_dir.ok());
  no_dir->endpoints.push_back({"127.0.0.1", 8500});
  CHECK(ValidateServerOptions(*no_dir).message().find("server.data_dir") != std::string::npos);

  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, accessor: {name: downpour}}\n", "unknown accessor 'downpour'");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, accessor: {name: ctr, show_click_decay_rate: 1.5}}\n",
              "show_click_decay_rate must be in (0, 1]");
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, accessor: {name: plain, click_coeff: 1}}\n",
              "plain accessor takes no parameters");
  ExpectError("tables:\n  - {id: 0, name: d, kind: dense, size: 8, memory_budget_bytes: 1000}\n",
              "dense tables live in RAM");
  ExpectError("server: {save_mode: 4}\ntables:\n  - {id: 0, name: e, dim: 8}\n", "save_mode");
}

}  // namespace
}  // namespace fleetps::config
