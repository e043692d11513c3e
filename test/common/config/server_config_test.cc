#include "common/config/server_config.h"
#include "test/support/env.h"

#include <catch2/catch.hpp>
#include <map>

namespace fleetps::config {
namespace {

const char* kGood = R"(
server:
  endpoints: ["127.0.0.1:8500", "127.0.0.1:8501"]
  bind_host: 127.0.0.1
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
  ExpectError("tables:\n  - {id: 0, name: e, dim: 8, optimizer: {name: adamw}}\n",
              "tables[0].optimizer.name: expected one of sgd, adagrad, adam (case-insensitive), got \"adamw\" "
              "(did you mean 'adam'?)");
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
  Status st =
      ApplyServerEnv(testing::EnvFrom({{"TRAINING_ROLE", "PSERVER"},
                                       {"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000,10.0.0.2:6000,10.0.0.3:6000"},
                                       {"POD_IP", "10.0.0.3"},
                                       {"PADDLE_PORT", "6000"}}),
                     &*o);
  REQUIRE(st.ok());
  CHECK(o->endpoints.size() == 3);
  CHECK(o->index == 2);

  auto o2 = ParseServerYaml(kGood, "ps.yaml");
  st = ApplyServerEnv(
      testing::EnvFrom(
          {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000"}, {"POD_IP", "10.0.0.9"}, {"PADDLE_PORT", "6000"}}),
      &*o2);
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("10.0.0.9:6000 is not in the pserver list") != std::string::npos);

  st = ApplyServerEnv(testing::EnvFrom({{"TRAINING_ROLE", "TRAINER"}}), &*o2);
  CHECK(st.message().find("expected PSERVER") != std::string::npos);
}

TEST_CASE("Flags override environment, which overrides YAML") {
  auto o = ParseServerYaml(kGood, "ps.yaml");
  REQUIRE(o.ok());
  REQUIRE(ApplyServerEnv(testing::EnvFrom({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:7000,127.0.0.1:7001"},
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

TEST_CASE("metrics_port: YAML, then FLEETPS_METRICS_PORT, then --metrics-port; bad values are named") {
  auto o = ParseServerYaml("server:\n  metrics_port: 9100\ntables:\n  - {id: 0, name: e, dim: 8}\n", "ps.yaml");
  REQUIRE(o.ok());
  CHECK(o->metrics_port == 9100);
  CHECK(ParseServerYaml(kGood, "ps.yaml")->metrics_port == 0);  // off by default
  REQUIRE(ApplyServerEnv(testing::EnvFrom({{"FLEETPS_METRICS_PORT", "9200"}}), &*o).ok());
  CHECK(o->metrics_port == 9200);
  ServerFlags flags;
  flags.metrics_port = 9300;
  REQUIRE(ApplyServerFlags(flags, &*o).ok());
  CHECK(o->metrics_port == 9300);
  for (const char* bad : {"http", "70000", "-1", "91x"}) {
    const Status st = ApplyServerEnv(testing::EnvFrom({{"FLEETPS_METRICS_PORT", bad}}), &*o);
    CHECK(st.IsInvalidArgument());
    CHECK_THAT(st.message(),
               Catch::Contains(std::string("FLEETPS_METRICS_PORT='") + bad + "'") && Catch::Contains("0-65535"));
  }
  auto big = ParseServerYaml("server:\n  metrics_port: 70000\ntables:\n  - {id: 0, name: e, dim: 8}\n", "ps.yaml");
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.status().message(), Catch::Contains("ps.yaml:2") && Catch::Contains("at most 65535"));
}

TEST_CASE("Storage keys: accessor, memory budget, data_dir, load and periodic saves") {
  const char* yaml = R"(
server:
  endpoints: ["127.0.0.1:8500"]
  bind_host: 127.0.0.1
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

TEST_CASE("Unknown keys under server, tables and optimizer name file:line:column and the closest key") {
  auto o = ParseServerYaml("server:\n  io_threads: 2\n  max_inflight_byte: 10\ntables:\n  - {id: 0, name: e, dim: 8}\n",
                           "ps.yaml");
  CHECK(o.status().message() ==
        "ps.yaml:3:3: unknown key 'max_inflight_byte' under 'server' (did you mean 'max_inflight_bytes'?)");
  o = ParseServerYaml("tables:\n  - id: 0\n    name: e\n    dim: 8\n    shard: 2\n", "ps.yaml");
  CHECK(o.status().message() == "ps.yaml:5:5: unknown key 'shard' under 'tables[0]' (did you mean 'shards'?)");
  o = ParseServerYaml(
      "tables:\n  - id: 0\n    name: e\n    dim: 8\n    optimizer:\n      name: adam\n"
      "      beta_1: 0.5\n",
      "ps.yaml");
  CHECK(o.status().message() ==
        "ps.yaml:7:7: unknown key 'beta_1' under 'tables[0].optimizer' (did you mean 'beta1'?)");
  o = ParseServerYaml("tables:\n  - {id: 0, name: e, dim: 8, accessor: {name: ctr, click_coef: 1}}\n", "ps.yaml");
  CHECK(o.status().message() ==
        "ps.yaml:2:52: unknown key 'click_coef' under 'tables[0].accessor' (did you mean 'click_coeff'?)");
  o = ParseServerYaml("tables:\n  - {id: 0, name: e, dim: 8}\nservers: {}\n", "ps.yaml");
  CHECK(o.status().message() == "ps.yaml:3:1: unknown key 'servers' at the top level (did you mean 'server'?)");
  o = ParseServerYaml("server:\n  wibble: 1\ntables:\n  - {id: 0, name: e, dim: 8}\n", "ps.yaml");
  CHECK_THAT(o.status().message(),
             Catch::StartsWith("ps.yaml:2:3: unknown key 'wibble' under 'server' (known keys: endpoints, index, "));
}

const char* kNewServerKeys = R"(server:
  max_connections: 10
  idle_timeout_s: 0
  read_timeout_s: 5
  max_write_queue_bytes: 2097152
  nonfinite_gradients: skip
  trainer_lease_s: 0
  exit_when_trainers_gone: false
  auth: required
  auth_secret_file: /etc/fleetps/secret
  tls: {cert_file: /etc/fleetps/ps.pem, key_file: /etc/fleetps/ps.key, ca_file: /etc/fleetps/ca.pem}
  checkpoint_root: /models
tables:
  - {id: 0, name: e, dim: 8}
)";

TEST_CASE("Connection, trainer and security keys parse") {
  auto o = ParseServerYaml(kNewServerKeys, "ps.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->max_connections == 10);
  CHECK(o->idle_timeout_s == 0);
  CHECK(o->read_timeout_s == 5);
  CHECK(o->max_write_queue_bytes == 2097152u);
  CHECK(o->nonfinite_gradients == NonFinitePolicy::kSkip);
  CHECK(o->trainer_lease_s == 0);
  CHECK_FALSE(o->exit_when_trainers_gone);
  CHECK(o->auth == AuthMode::kRequired);
  CHECK(o->auth_secret_file == "/etc/fleetps/secret");
  CHECK(o->checkpoint_root == "/models");
  CHECK(o->tls.cert_file == "/etc/fleetps/ps.pem");
  CHECK(o->tls.key_file == "/etc/fleetps/ps.key");
  CHECK(o->tls.ca_file == "/etc/fleetps/ca.pem");
  o->endpoints.push_back({"127.0.0.1", 8500});
  CHECK(ValidateServerOptions(*o).ok());

  // The same keys under fleetps.server of a job YAML.
  auto job = ParseServerYaml(
      "runner: {}\nhyper_parameters: {}\nfleetps:\n  server: {nonfinite_gradients: skip, auth: off}\n", "job.yaml");
  REQUIRE(job.ok());
  CHECK(job->nonfinite_gradients == NonFinitePolicy::kSkip);
  CHECK(job->auth == AuthMode::kOff);
}

TEST_CASE("Connection, trainer and security keys default") {
  auto o = ParseServerYaml("tables:\n  - {id: 0, name: e, dim: 8}\n", "ps.yaml");
  REQUIRE(o.ok());
  const ServerOptions defaults;
  for (const ServerOptions* s : {static_cast<const ServerOptions*>(&*o), &defaults}) {
    CHECK(s->max_connections == 1024);
    CHECK(s->idle_timeout_s == 600);
    CHECK(s->read_timeout_s == 30);
    CHECK(s->max_write_queue_bytes == 64ull * 1024 * 1024);
    CHECK(s->nonfinite_gradients == NonFinitePolicy::kReject);
    CHECK(s->trainer_lease_s == 60);
    CHECK(s->exit_when_trainers_gone);
    CHECK(s->auth == AuthMode::kAuto);
    CHECK(s->auth_secret_file.empty());
    CHECK(s->checkpoint_root.empty());
  }
  CHECK(NonFinitePolicyName(NonFinitePolicy::kReject) == "reject");
  CHECK(NonFinitePolicyName(NonFinitePolicy::kSkip) == "skip");
  CHECK(AuthModeName(AuthMode::kAuto) == "auto");
  CHECK(AuthModeName(AuthMode::kRequired) == "required");
  CHECK(AuthModeName(AuthMode::kOff) == "off");
}

TEST_CASE("Bad connection, trainer and security values are refused") {
  const auto error = [](const std::string& server) {
    auto o = ParseServerYaml("server:\n" + server + "\ntables:\n  - {id: 0, name: e, dim: 8}\n", "ps.yaml");
    INFO(server);
    REQUIRE_FALSE(o.ok());
    return o.status().message();
  };
  CHECK(error("  max_connections: 0") == "ps.yaml:2: server.max_connections: must be >= 1");
  CHECK(error("  max_connections: -1") ==
        "ps.yaml:2: server.max_connections: expected an integer in [0, 4294967295], got \"-1\"");
  CHECK(error("  max_connections: 4294967296") ==
        "ps.yaml:2: server.max_connections: expected an integer in [0, 4294967295], got \"4294967296\"");
  CHECK(error("  idle_timeout_s: never") ==
        "ps.yaml:2: server.idle_timeout_s: expected an integer in [0, 4294967295], got \"never\"");
  CHECK(error("  read_timeout_s: 1.5") ==
        "ps.yaml:2: server.read_timeout_s: expected an integer in [0, 4294967295], got \"1.5\"");
  CHECK(error("  max_write_queue_bytes: 1048575") ==
        "ps.yaml:2: server.max_write_queue_bytes: must be >= 1048576 (1 MiB), got 1048575");
  CHECK(error("  max_write_queue_bytes: -5") ==
        "ps.yaml:2: server.max_write_queue_bytes: expected a non-negative integer, got \"-5\"");
  CHECK(error("  nonfinite_gradients: drop") ==
        "ps.yaml:2: server.nonfinite_gradients: expected one of reject, skip, got \"drop\"");
  CHECK(error("  nonfinite_gradients: rejct") ==
        "ps.yaml:2: server.nonfinite_gradients: expected one of reject, skip, got \"rejct\" (did you mean "
        "'reject'?)");
  CHECK(error("  trainer_lease_s: -60") ==
        "ps.yaml:2: server.trainer_lease_s: expected an integer in [0, 4294967295], got \"-60\"");
  CHECK(error("  exit_when_trainers_gone: sometimes") ==
        "ps.yaml:2: server.exit_when_trainers_gone: expected true or false, got \"sometimes\"");
  CHECK(error("  auth: maybe") == "ps.yaml:2: server.auth: expected one of auto, required, off, got \"maybe\"");
  CHECK(error("  auth: Required") ==
        "ps.yaml:2: server.auth: expected one of auto, required, off, got \"Required\" (did you mean 'required'?)");
  CHECK(error("  auth_secret_file: [a, b]") == "ps.yaml:2: server.auth_secret_file: expected a string, got a list");
  CHECK(error("  tls: /etc/fleetps/ps.pem") ==
        "ps.yaml:2: server.tls: expected a map with cert_file, key_file, ca_file");
  CHECK(error("  tls: {cert_file: a.pem}") == "ps.yaml:2: server.tls: cert_file and key_file go together");
  CHECK(error("  tls: {ca: a.pem}") ==
        "ps.yaml:2:9: unknown key 'ca' under 'server.tls' (known keys: cert_file, key_file, ca_file)");
  CHECK(error("  checkpoint_root: {a: 1}") == "ps.yaml:2: server.checkpoint_root: expected a string, got a map");
  CHECK(error("  max_connection: 5") ==
        "ps.yaml:2:3: unknown key 'max_connection' under 'server' (did you mean 'max_connections'?)");

  // Options built in code get the same limits.
  auto o = ParseServerYaml(kNewServerKeys, "ps.yaml");
  REQUIRE(o.ok());
  o->endpoints.push_back({"127.0.0.1", 8500});
  ServerOptions bad = *o;
  bad.max_connections = 0;
  CHECK_THAT(ValidateServerOptions(bad).message(), Catch::Contains("max_connections must be >= 1"));
  bad = *o;
  bad.max_write_queue_bytes = 1000;
  CHECK_THAT(ValidateServerOptions(bad).message(), Catch::Contains("max_write_queue_bytes must be >= 1048576"));
}

TEST_CASE("Loopback hosts") {
  for (const char* host :
       {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}) {
    INFO(host);
    CHECK(IsLoopbackHost(host));
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "", "10.0.0.1", "128.0.0.1", "::ffff:10.0.0.1", "::2",
                           "localhost.example.com", "127.0.0.1.nip.io", "example.com"}) {
    INFO(host);
    CHECK_FALSE(IsLoopbackHost(host));
  }
}

TEST_CASE("auth resolves to required off loopback, and then needs a secret file") {
  ServerOptions o;
  o.endpoints = {{"127.0.0.1", 8500}};
  o.tables.resize(1);
  o.tables[0].name = "e";
  o.source = "ps.yaml";

  // The default bind address is the endpoint's host: loopback here, POD_IP in a cluster.
  CHECK(BindHost(o) == "127.0.0.1");
  CHECK_FALSE(AuthRequired(o));
  o.endpoints = {{"localhost", 8500}};
  CHECK(BindHost(o) == "127.0.0.1");
  o.endpoints = {{"10.0.0.2", 8500}};
  CHECK(BindHost(o) == "10.0.0.2");
  CHECK(AuthRequired(o));
  o.endpoints = {{"node-7.cluster", 8500}};
  CHECK(BindHost(o) == "0.0.0.0");
  o.endpoints = {{"127.0.0.1", 8500}};
  o.bind_host = "127.0.0.1";
  o.auth = AuthMode::kAuto;
  CHECK_FALSE(AuthRequired(o));
  CHECK(ValidateServerOptions(o).ok());
  o.auth = AuthMode::kRequired;
  CHECK(AuthRequired(o));
  CHECK(ValidateServerOptions(o).message() ==
        "ps.yaml: server.auth is required, so peers must authenticate, but no shared secret is configured: set "
        "server.auth_secret_file (or FLEETPS_AUTH_SECRET_FILE) to a file holding the secret, or bind to a loopback "
        "address (--bind 127.0.0.1), or set server.auth: off on a trusted network");

  o.bind_host = "0.0.0.0";
  o.auth = AuthMode::kAuto;
  CHECK(AuthRequired(o));
  CHECK_THAT(ValidateServerOptions(o).message(),
             Catch::StartsWith("ps.yaml: server.auth is auto and bind address '0.0.0.0' is not a loopback address, so "
                               "peers must authenticate, but no shared secret is configured: set "
                               "server.auth_secret_file"));
  o.auth = AuthMode::kOff;
  CHECK_FALSE(AuthRequired(o));
  CHECK(ValidateServerOptions(o).ok());

  o.auth = AuthMode::kAuto;
  o.auth_secret_file = "/etc/fleetps/secret";
  CHECK(AuthRequired(o));
  CHECK(ValidateServerOptions(o).ok());
}

TEST_CASE("FLEETPS_AUTH_SECRET_FILE overrides the YAML's auth_secret_file") {
  auto o = ParseServerYaml(kNewServerKeys, "ps.yaml");
  REQUIRE(o.ok());
  REQUIRE(ApplyServerEnv(testing::EnvFrom({}), &*o).ok());
  CHECK(o->auth_secret_file == "/etc/fleetps/secret");
  REQUIRE(ApplyServerEnv(testing::EnvFrom({{"FLEETPS_AUTH_SECRET_FILE", "/run/secrets/ps"}}), &*o).ok());
  CHECK(o->auth_secret_file == "/run/secrets/ps");
  REQUIRE(ApplyServerEnv(testing::EnvFrom({{"FLEETPS_AUTH_SECRET_FILE", ""}}), &*o).ok());  // empty: unset
  CHECK(o->auth_secret_file == "/run/secrets/ps");
  REQUIRE(ApplyServerEnv(testing::EnvFrom({{"FLEETPS_TLS_CERT_FILE", "/run/c.pem"},
                                           {"FLEETPS_TLS_KEY_FILE", "/run/c.key"},
                                           {"FLEETPS_TLS_CA_FILE", "/run/ca.pem"}}),
                         &*o)
              .ok());
  CHECK(o->tls.cert_file == "/run/c.pem");
  CHECK(o->tls.key_file == "/run/c.key");
  CHECK(o->tls.ca_file == "/run/ca.pem");
  // No flag can set it: flags leave it alone.
  REQUIRE(ApplyServerFlags(ServerFlags{}, &*o).ok());
  CHECK(o->auth_secret_file == "/run/secrets/ps");
}

}  // namespace
}  // namespace fleetps::config
