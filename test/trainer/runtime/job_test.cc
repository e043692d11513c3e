// The job helpers the trainer mains share: the opt-in metrics port and per-trainer paths.
#include <catch2/catch.hpp>

#include <map>

#include "test/support/env.h"
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

TEST_CASE("Per-trainer paths replace every {trainer_id}") {
  CHECK(PerTrainerPath("out/trainer{trainer_id}.json", 3) == "out/trainer3.json");
  CHECK(PerTrainerPath("{trainer_id}/{trainer_id}.txt", 12) == "12/12.txt");
  CHECK(PerTrainerPath("plain.json", 1) == "plain.json");
}

}  // namespace
}  // namespace fleetps::trainer
