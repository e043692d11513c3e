// pserver, heter-trainer and cpu-trainer under a (simulated) service manager:
// NOTIFY_SOCKET points at a socket this test listens on, as systemd does for Type=notify
// units.
//  - READY=1 arrives only once the port accepts connections (it is sent after the bind
//    and, with --resume/--load, after the tables are loaded); a cpu-trainer's once it
//    trains;
//  - WatchdogSec= (WATCHDOG_USEC) is answered with WATCHDOG=1 pings;
//  - SIGTERM (a trainer: the job's end) yields STOPPING=1, then a clean exit 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <span>
#include <thread>

#include "test/support/job.h"
#include "test/support/notify_socket.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using namespace std::chrono_literals;

// One connection attempt to 127.0.0.1:port, now.
bool Accepts(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST_CASE("pserver sends READY=1 once it accepts, pings the watchdog, and STOPPING=1 on SIGTERM", "[integration]") {
  const std::string dir = testing::MakeTempDir("systemd_notify");
  const uint16_t port = testing::FreePorts(1)[0];
  testing::NotifySocket manager;
  testing::ChildProcess server;
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config",
                        std::string(FLEETPS_SOURCE_DIR) + "/configs/pserver.yaml", "--resume", dir + "/save"},
                       {{"NOTIFY_SOCKET", manager.address()},
                        {"WATCHDOG_USEC", "400000"},
                        {"TRAINING_ROLE", "PSERVER"},
                        {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                        {"POD_IP", "127.0.0.1"},
                        {"PADDLE_PORT", std::to_string(port)}},
                       dir + "/pserver.log"));
  const auto ready = manager.Receive(60s);
  INFO("pserver log:\n" << testing::ReadFile(dir + "/pserver.log"));
  REQUIRE(ready.has_value());
  // The first message is READY=1, and by then the port accepts (no wait needed).
  CHECK_THAT(*ready, Catch::StartsWith("READY=1\nSTATUS=pserver 0 listening on port " + std::to_string(port)));
  CHECK(Accepts(port));
  CHECK_THAT(testing::ReadFile(dir + "/pserver.log"),
             Catch::Contains("no complete checkpoint there; starting with fresh tables"));
  // The watchdog (200 ms pings for a 400 ms WatchdogSec) while the io threads run.
  CHECK(manager.Receive(30s) == "WATCHDOG=1");
  CHECK(manager.Receive(30s) == "WATCHDOG=1");

  server.Signal(SIGTERM);
  std::optional<std::string> msg;
  do {
    msg = manager.Receive(30s);
  } while (msg == "WATCHDOG=1");
  REQUIRE(msg.has_value());
  CHECK_THAT(*msg, Catch::StartsWith("STOPPING=1\nSTATUS=pserver 0 shutting down"));
  CHECK(server.Wait(30s) == 0);
}

// Restart=on-failure runs `pserver --resume SAVE_DIR`: after a crash the pserver comes back
// with the newest complete checkpoint under the save directory, loaded before READY=1.
TEST_CASE("pserver --resume after kill -9 loads the newest checkpoint before READY=1", "[integration]") {
  const std::string dir = testing::MakeTempDir("systemd_resume");
  const uint16_t port = testing::FreePorts(1)[0];
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  testing::WriteFile(dir + "/ps.yaml",
                     "server:\n  endpoints: [\"" + endpoint +
                         "\"]\n  io_threads: 1\n  shard_threads: 1\n  checkpoint_root: " + dir +
                         "\ntables:\n"
                         "  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 2,\n"
                         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n");
  const std::vector<std::string> argv = {testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml",
                                         "--resume", dir + "/save"};
  std::vector<uint64_t> keys(150);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  const std::vector<float> ones(keys.size() * 4, 1.0f);
  trainer::PsClientOptions o;
  o.servers = {{"127.0.0.1", port}};
  o.io_threads = 1;
  {
    testing::ChildProcess first;
    REQUIRE(first.Start(argv, {}, dir + "/first.log"));
    REQUIRE(testing::WaitForPort(port, 30s));
    auto client = trainer::PsClient::Connect(o);
    REQUIRE(client.ok());
    // Checkpoint a: keys 1..100 at -1. Checkpoint b, newer: keys 1..100 at -2, 101..150 at -1.
    REQUIRE((*client)->PushSparse(0, std::span(keys).first(100), std::span(ones).first(400)).get().ok());
    REQUIRE((*client)->Save(dir + "/save/a").ok());
    std::this_thread::sleep_for(20ms);
    REQUIRE((*client)->PushSparse(0, keys, ones).get().ok());
    REQUIRE((*client)->Save(dir + "/save/b").ok());
    client->reset();
    first.Signal(SIGKILL);
    REQUIRE(first.Wait(30s) == 128 + SIGKILL);
  }
  testing::NotifySocket manager;
  testing::ChildProcess server;
  REQUIRE(server.Start(argv, {{"NOTIFY_SOCKET", manager.address()}}, dir + "/pserver.log"));
  const auto ready = manager.Receive(60s);
  INFO("pserver log:\n" << testing::ReadFile(dir + "/pserver.log"));
  REQUIRE(ready.has_value());
  CHECK_THAT(*ready, Catch::StartsWith("READY=1"));
  // At READY=1 the rows of checkpoint b are there: nothing to wait for.
  auto client = trainer::PsClient::Connect(o);
  REQUIRE(client.ok());
  std::vector<float> values(keys.size() * 4);
  REQUIRE((*client)->PullSparse(0, keys, values.data()).get().ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    INFO("key " << keys[k]);
    CHECK(values[k * 4] == (keys[k] <= 100 ? -2.0f : -1.0f));
  }
  CHECK_THAT(testing::ReadFile(dir + "/pserver.log"), Catch::Contains(dir + "/save/b"));
  REQUIRE((*client)->StopServers("test done").ok());
  client->reset();
  CHECK(server.Wait(30s) == 0);
}

TEST_CASE("heter-trainer sends READY=1 once it accepts, pings the watchdog, and STOPPING=1 on SIGTERM",
          "[integration]") {
  const std::string dir = testing::MakeTempDir("systemd_notify_heter");
  const auto ports = testing::FreePorts(2);
  const std::string pserver = "127.0.0.1:" + std::to_string(ports[0]);
  const std::string heter = "127.0.0.1:" + std::to_string(ports[1]);
  testing::WriteFile(dir + "/job.yaml", "runner:\n  sync_mode: heter\n" + testing::kSmallCtrDnnModel +
                                            "fleetps:\n  server: {io_threads: 1, shard_threads: 1}\n");
  std::map<std::string, std::string> env = {
      {"PADDLE_PSERVERS_IP_PORT_LIST", pserver},        {"PADDLE_TRAINERS_NUM", "1"},
      {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", heter}, {"STAGE_NUM", "2"},
      {"PADDLE_STAGE_TRAINERS_NUM", "[1, 1]"},          {"POD_IP", "127.0.0.1"}};
  testing::ChildProcess server;
  env["TRAINING_ROLE"] = "PSERVER";
  env["PADDLE_PORT"] = std::to_string(ports[0]);
  REQUIRE(
      server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"}, env, dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(ports[0], 60s));

  testing::NotifySocket manager;
  env["TRAINING_ROLE"] = "HETER_TRAINER";
  env["PADDLE_PORT"] = std::to_string(ports[1]);
  env["STAGE_ID"] = "2";
  env["HETER_DEVICE_TYPE"] = "cpu";
  env["NOTIFY_SOCKET"] = manager.address();
  env["WATCHDOG_USEC"] = "400000";
  testing::ChildProcess heter_trainer;
  REQUIRE(heter_trainer.Start({testing::BinaryPath("heter_trainer/heter-trainer"), "--config", dir + "/job.yaml"}, env,
                              dir + "/heter.log"));
  const auto ready = manager.Receive(60s);
  INFO("heter-trainer log:\n" << testing::ReadFile(dir + "/heter.log"));
  REQUIRE(ready.has_value());
  CHECK_THAT(*ready, Catch::StartsWith("READY=1\nSTATUS=heter-trainer listening on port " + std::to_string(ports[1])));
  CHECK(Accepts(ports[1]));
  // WatchdogSec=: 200 ms pings for a 400 ms period, while its io threads run.
  CHECK(manager.Receive(30s) == "WATCHDOG=1");
  CHECK(manager.Receive(30s) == "WATCHDOG=1");

  heter_trainer.Signal(SIGTERM);
  std::optional<std::string> msg;
  do {
    msg = manager.Receive(30s);
  } while (msg == "WATCHDOG=1");
  REQUIRE(msg.has_value());
  CHECK_THAT(*msg, Catch::StartsWith("STOPPING=1\nSTATUS=heter-trainer shutting down"));
  CHECK(heter_trainer.Wait(30s) == 0);
  server.Signal(SIGTERM);
  CHECK(server.Wait(30s) == 0);
}

// fleetps-trainer@.service is Type=notify too: the trainer says READY=1 once it has joined
// the job (connected, past the start barrier), pings the watchdog while it trains, and
// STOPPING=1 when the job has ended.
TEST_CASE("cpu-trainer sends READY=1 once training starts, pings the watchdog, STOPPING=1 at the end",
          "[integration]") {
  const std::string dir = testing::MakeTempDir("systemd_notify_trainer");
  REQUIRE(testing::GenerateData(dir, {"--rows", "60000", "--train-files", "1"}));
  const uint16_t port = testing::FreePorts(1)[0];
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  testing::WriteFile(dir + "/job.yaml", "runner:\n  train_data_dir: " + dir + "/data/train\n  test_data_dir: " + dir +
                                            "/data/test\n  train_batch_size: 256\n  epochs: 2\n" +
                                            testing::kSmallCtrDnnModel +
                                            "fleetps:\n  server: {io_threads: 1, shard_threads: 1}\n");
  std::map<std::string, std::string> env = {{"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                                            {"PADDLE_TRAINERS_NUM", "1"},
                                            {"POD_IP", "127.0.0.1"},
                                            {"PADDLE_PORT", std::to_string(port)},
                                            {"TRAINING_ROLE", "PSERVER"}};
  testing::ChildProcess server;
  REQUIRE(
      server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"}, env, dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(port, 60s));

  testing::NotifySocket manager;
  env = {{"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
         {"PADDLE_TRAINERS_NUM", "1"},
         {"PADDLE_TRAINER_ID", "0"},
         {"TRAINING_ROLE", "TRAINER"},
         {"NOTIFY_SOCKET", manager.address()},
         {"WATCHDOG_USEC", "400000"}};
  testing::ChildProcess trainer;
  REQUIRE(trainer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml"}, env,
                        dir + "/trainer.log"));
  const auto ready = manager.Receive(60s);
  INFO("trainer log:\n" << testing::ReadFile(dir + "/trainer.log"));
  REQUIRE(ready.has_value());
  CHECK_THAT(*ready, Catch::StartsWith("READY=1\nSTATUS=cpu-trainer 0 training"));
  int pings = 0;
  std::optional<std::string> msg;
  while ((msg = manager.Receive(120s)) == "WATCHDOG=1") ++pings;
  REQUIRE(msg.has_value());
  CHECK_THAT(*msg, Catch::StartsWith("STOPPING=1\nSTATUS=job finished"));
  CHECK(pings >= 1);  // 200 ms pings over 2 epochs of 54000 rows
  CHECK(trainer.Wait(60s) == 0);
  CHECK(server.Wait(60s) == 0);  // stopped by trainer 0 at the end
}

TEST_CASE("pserver --version prints the version; --resume with --load is refused", "[integration]") {
  const std::string dir = testing::MakeTempDir("systemd_version");
  testing::ChildProcess v;
  REQUIRE(v.Start({testing::BinaryPath("server/pserver"), "--version"}, {}, dir + "/version.log"));
  CHECK(v.Wait(30s) == 0);
  CHECK_THAT(testing::ReadFile(dir + "/version.log"), Catch::StartsWith("pserver (fleetps) "));
  testing::ChildProcess both;
  REQUIRE(both.Start({testing::BinaryPath("server/pserver"), "--config",
                      std::string(FLEETPS_SOURCE_DIR) + "/configs/pserver.yaml", "--load", dir, "--resume", dir},
                     {}, dir + "/both.log"));
  CHECK(both.Wait(30s) == 2);
  CHECK_THAT(testing::ReadFile(dir + "/both.log"), Catch::Contains("give --load or --resume, not both"));
}

}  // namespace
}  // namespace fleetps
