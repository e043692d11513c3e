// The job helpers the trainer mains share: the opt-in metrics port and per-trainer paths.
#include <catch2/catch.hpp>

#include <map>

#include "common/metrics/registry.h"
#include "test/support/env.h"
#include "test/support/http.h"
#include "trainer/runtime/job.h"

namespace fleetps::trainer {
namespace {

TEST_CASE("The trainer metrics port: the flag, else FLEETPS_TRAINER_METRICS_PORT, else none") {
  auto port = TrainerMetricsPort(std::nullopt, testing::EnvFrom({}));
  REQUIRE(port.ok());
  CHECK_FALSE(port->has_value());
  port = TrainerMetricsPort(std::nullopt, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_PORT", ""}}));
  REQUIRE(port.ok());
  CHECK_FALSE(port->has_value());
  port = TrainerMetricsPort(std::nullopt, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_PORT", "9105"}}));
  REQUIRE(port.ok());
  CHECK(*port == std::optional<uint16_t>(9105));
  port = TrainerMetricsPort(7001, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_PORT", "9105"}}));
  REQUIRE(port.ok());
  CHECK(*port == std::optional<uint16_t>(7001));
  port = TrainerMetricsPort(std::nullopt, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_PORT", "0"}}));
  REQUIRE(port.ok());
  CHECK(*port == std::optional<uint16_t>(0));  // any free port
  for (const char* bad : {"65536", "-1", "91x", "+80", " 80", "\t80", "99999999999999999999"}) {
    INFO(bad);
    auto refused = TrainerMetricsPort(std::nullopt, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_PORT", bad}}));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsInvalidArgument());
    CHECK_THAT(refused.status().message(),
               Catch::Contains(std::string("FLEETPS_TRAINER_METRICS_PORT='") + bad + "' is not a port number"));
  }
}

// A trainer's /metrics follows the trainer's own address, never every interface by
// default; the flag, then the variable, choose another.
TEST_CASE("The trainer metrics address: the flag, the variable, else the trainer's own address") {
  config::TrainerOptions o;
  const auto none = testing::EnvFrom({});
  CHECK(*TrainerMetricsBind(std::nullopt, none, o) == "127.0.0.1");  // no address of its own: loopback
  CHECK(*TrainerMetricsBind(std::nullopt, testing::EnvFrom({{"POD_IP", "10.1.2.3"}}), o) == "10.1.2.3");
  o.trainer_endpoints = {{"10.0.0.1", 6170}, {"10.0.0.2", 6170}};
  o.trainer_id = 1;
  CHECK(*TrainerMetricsBind(std::nullopt, testing::EnvFrom({{"POD_IP", "10.1.2.3"}}), o) == "10.0.0.2");
  o.trainer_endpoints[1].host = "localhost";
  CHECK(*TrainerMetricsBind(std::nullopt, none, o) == "127.0.0.1");
  o.trainer_endpoints[1].host = "worker-1.example";  // a name: every interface, as a pserver's
  CHECK(*TrainerMetricsBind(std::nullopt, none, o) == "0.0.0.0");
  const auto env = testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_BIND", "0.0.0.0"}});
  CHECK(*TrainerMetricsBind(std::nullopt, env, o) == "0.0.0.0");
  CHECK(*TrainerMetricsBind(std::string("::1"), env, o) == "::1");
  auto bad = TrainerMetricsBind(std::nullopt, testing::EnvFrom({{"FLEETPS_TRAINER_METRICS_BIND", "eth0"}}), o);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("FLEETPS_TRAINER_METRICS_BIND='eth0' is not an IP address"));
  CHECK_THAT(TrainerMetricsBind(std::string("x"), none, o).status().message(), Catch::Contains("--metrics-bind='x'"));
}

TEST_CASE("The trainer endpoint listens on the address it is given, not on every interface") {
  metrics::Registry registry;
  auto served = ServeTrainerMetrics(registry, "127.0.0.1", 0);
  REQUIRE(served.ok());
  CHECK(testing::HttpGetBody((*served)->port(), "/healthz") == "ok\n");
  auto elsewhere = ServeTrainerMetrics(registry, "127.0.0.2", 0);  // another loopback address
  REQUIRE(elsewhere.ok());
  CHECK(testing::HttpGet((*elsewhere)->port(), "/healthz").first == -1);  // 127.0.0.1 is refused
  auto taken = ServeTrainerMetrics(registry, "127.0.0.1", (*served)->port());
  REQUIRE_FALSE(taken.ok());
  CHECK_THAT(taken.status().message(), Catch::Contains("127.0.0.1:" + std::to_string((*served)->port())) &&
                                           Catch::Contains("FLEETPS_TRAINER_METRICS_BIND"));
}

TEST_CASE("Per-trainer paths replace every {trainer_id}") {
  CHECK(PerTrainerPath("out/trainer{trainer_id}.json", 3) == "out/trainer3.json");
  CHECK(PerTrainerPath("{trainer_id}/{trainer_id}.txt", 12) == "12/12.txt");
  CHECK(PerTrainerPath("plain.json", 1) == "plain.json");
}

}  // namespace
}  // namespace fleetps::trainer
