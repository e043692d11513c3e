#include "common/net/trainer_registry.h"

#include <catch2/catch.hpp>

namespace fleetps::net {
namespace {

using namespace std::chrono_literals;
using Clock = TrainerRegistry::Clock;

TEST_CASE("TrainerRegistry: a silent trainer is gone after the lease; the job ends when all ended") {
  TrainerRegistry reg(10s);
  const auto t0 = Clock::now();
  REQUIRE(reg.Heartbeat(0, 2, false, false, "", t0).ok());
  REQUIRE(reg.Heartbeat(1, 2, false, false, "", t0 + 1s).ok());
  auto s = reg.Expire(t0 + 9s);
  CHECK(s.newly_gone.empty());
  CHECK_FALSE(s.ended);
  REQUIRE(reg.Heartbeat(0, 2, false, false, "", t0 + 9s).ok());
  s = reg.Expire(t0 + 12s);  // trainer 1 silent for 11 s
  CHECK(s.newly_gone == std::vector<uint32_t>{1});
  CHECK_FALSE(s.ended);                            // trainer 0 still runs
  CHECK(reg.Expire(t0 + 13s).newly_gone.empty());  // reported once
  auto gone = reg.Heartbeat(0, 2, true, true, "barrier failed", t0 + 14s);
  REQUIRE(gone.ok());
  CHECK(*gone == std::vector<uint32_t>{1});
  s = reg.Expire(t0 + 15s);
  CHECK(s.ended);
  CHECK_FALSE(s.clean);
  CHECK(s.summary == "trainers finished: -; failed: 0; gone: 1 (no heartbeat for 10 s)");
}

TEST_CASE("TrainerRegistry: finished trainers end the job cleanly; a missing one is gone after the lease") {
  TrainerRegistry reg(5s);
  const auto t0 = Clock::now();
  REQUIRE(reg.Heartbeat(1, 3, true, false, "", t0).ok());
  REQUIRE(reg.Heartbeat(0, 3, true, false, "", t0 + 1s).ok());
  auto s = reg.Expire(t0 + 2s);
  CHECK_FALSE(s.ended);  // trainer 2 not seen yet, lease not over
  s = reg.Expire(t0 + 6s);
  CHECK(s.newly_gone == std::vector<uint32_t>{2});
  CHECK(s.ended);
  CHECK_FALSE(s.clean);
  // It shows up after all: alive again.
  REQUIRE(reg.Heartbeat(2, 3, false, false, "", t0 + 7s).ok());
  CHECK(reg.gone().empty());
  REQUIRE(reg.Heartbeat(2, 3, true, false, "", t0 + 8s).ok());
  s = reg.Expire(t0 + 8s);
  CHECK(s.ended);
  CHECK(s.clean);
  CHECK(s.summary == "trainers finished: 0, 1, 2; failed: -; gone: -");
}

TEST_CASE("TrainerRegistry: lease 0 never counts anyone gone; bad heartbeats are refused") {
  TrainerRegistry reg(0s);
  const auto t0 = Clock::now();
  REQUIRE(reg.Heartbeat(0, 2, false, false, "", t0).ok());
  CHECK(reg.Expire(t0 + 1000h).newly_gone.empty());
  CHECK(reg.Heartbeat(2, 2, false, false, "", t0).status().IsInvalidArgument());
  CHECK(reg.Heartbeat(0, 3, false, false, "", t0).status().IsInvalidArgument());
  CHECK(reg.Heartbeat(0, 0, false, false, "", t0).status().IsInvalidArgument());
  CHECK(reg.Heartbeat(0, TrainerRegistry::kMaxTrainers + 1, false, false, "", t0).status().IsInvalidArgument());
}

TEST_CASE("TrainerRegistry: the alive trainers, training or stopping") {
  TrainerRegistry reg(10s);
  const auto t0 = Clock::now();
  CHECK(reg.Expire(t0).training.empty());
  REQUIRE(reg.Heartbeat(0, 3, false, false, "", t0).ok());
  REQUIRE(reg.Heartbeat(1, 3, false, false, "", t0).ok());
  auto s = reg.Expire(t0 + 1s);
  CHECK(s.training == std::vector<uint32_t>{0, 1});  // trainer 2 not heard from yet
  CHECK(s.stopping.empty());
  REQUIRE(reg.Heartbeat(1, 3, false, false, "stopped by SIGTERM", t0 + 2s, /*stopping=*/true).ok());
  REQUIRE(reg.Heartbeat(1, 3, false, false, "", t0 + 3s).ok());  // stays stopping
  s = reg.Expire(t0 + 3s);
  CHECK(s.training == std::vector<uint32_t>{0});
  CHECK(s.stopping == std::vector<uint32_t>{1});
  REQUIRE(reg.Heartbeat(1, 3, true, true, "stopped by SIGTERM", t0 + 4s).ok());
  REQUIRE(reg.Heartbeat(2, 3, false, false, "", t0 + 4s).ok());
  s = reg.Expire(t0 + 4s);
  CHECK(s.training == std::vector<uint32_t>{0, 2});
  CHECK(s.stopping.empty());  // finished
  s = reg.Expire(t0 + 15s);   // 0 and 2 silent past the lease: gone, not alive
  CHECK(s.training.empty());
  CHECK(s.gone == std::vector<uint32_t>{0, 2});
}

TEST_CASE("StopWait: stopping trainers are served until they end; training ones get the grace only") {
  TrainerRegistry reg(0s);  // nobody goes silent here
  const auto t0 = Clock::now();
  REQUIRE(reg.Heartbeat(0, 2, false, false, "", t0).ok());
  REQUIRE(reg.Heartbeat(1, 2, false, false, "", t0).ok());
  const StopWait wait("SIGTERM", t0, 2s, 300s);
  CHECK(StopWait::Needed(reg.Expire(t0)));
  CHECK(wait.Describe(reg.Expire(t0)) ==
        "SIGTERM: serving the job's stopping trainers until they have ended (stopping: -; training: 0, 1; at most "
        "300 s; send it again to stop waiting)");
  CHECK_FALSE(wait.Over(reg.Expire(t0 + 1s), t0 + 1s));  // within the grace
  CHECK(wait.Over(reg.Expire(t0 + 2s), t0 + 2s) == "SIGTERM: trainer(s) 0, 1 still training");
  // Trainer 1 stopping: served past the grace, while trainer 0 still trains, up to the limit.
  REQUIRE(reg.Heartbeat(1, 2, false, false, "stopped by SIGTERM", t0 + 1s, /*stopping=*/true).ok());
  CHECK_FALSE(wait.Over(reg.Expire(t0 + 10s), t0 + 10s));
  CHECK(wait.Over(reg.Expire(t0 + 300s), t0 + 300s) == "SIGTERM: trainer(s) 1 did not end within 300 s");
  // Every alive trainer has ended.
  TrainerRegistry ended(60s);
  REQUIRE(ended.Heartbeat(0, 1, false, false, "", t0, true).ok());
  REQUIRE(ended.Heartbeat(0, 1, true, true, "stopped by SIGTERM", t0 + 1s).ok());
  CHECK_FALSE(StopWait::Needed(ended.Expire(t0 + 1s)));
  CHECK(wait.Over(ended.Expire(t0 + 1s), t0 + 1s) == "SIGTERM: the stopping trainers have ended");
}

}  // namespace
}  // namespace fleetps::net
