// fleetps-launch's flag handling: run-mode inference as fleetrun does it, ports, the
// environment of each role, multi-node selection, and the errors for bad input.
#include "tools/launch/launch_plan.h"

#include <catch2/catch.hpp>
#include <map>

namespace fleetps::launch {
namespace {

StatusOr<LaunchFlags> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "fleetps-launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseLaunchArgs(static_cast<int>(argv.size()), argv.data());
}

// A world with the given environment, free ports 41000.., this node at 10.0.0.2, and the
// binaries of an install under /opt/fleetps/bin.
LaunchEnvironment FakeWorld(std::map<std::string, std::string> vars = {}) {
  LaunchEnvironment e;
  e.env = [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  e.free_ports = [next = uint16_t{41000}](size_t n) mutable -> StatusOr<std::vector<uint16_t>> {
    std::vector<uint16_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(next++);
    return out;
  };
  e.local_addresses = {"127.0.0.1", "10.0.0.2"};
  e.is_executable = [](const std::string& path) {
    return path == "/opt/fleetps/bin/pserver" || path == "/opt/fleetps/bin/heter-trainer";
  };
  e.self_path = "/opt/fleetps/bin/fleetps-launch";
  return e;
}

LaunchPlan Plan(std::vector<std::string> args, const LaunchEnvironment& world = FakeWorld()) {
  auto flags = Parse(std::move(args));
  INFO(flags.status().ToString());
  REQUIRE(flags.ok());
  auto plan = PlanLaunch(*flags, world);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  return *plan;
}

Status PlanError(std::vector<std::string> args, const LaunchEnvironment& world = FakeWorld()) {
  auto flags = Parse(std::move(args));
  if (!flags.ok()) return flags.status();
  auto plan = PlanLaunch(*flags, world);
  REQUIRE_FALSE(plan.ok());
  return plan.status();
}

TEST_CASE("2 servers + 2 workers: ps mode, servers first, the Paddle environment of each role") {
  const auto plan = Plan({"--server_num", "2", "--worker_num", "2", "--log_dir", "out", "/x/cpu-trainer", "--config",
                          "job.yaml", "--epochs", "1"});
  CHECK(plan.mode == RunMode::kPs);
  CHECK(plan.mode_reason == "inferred from --server_num");
  REQUIRE(plan.processes.size() == 4);
  CHECK(plan.servers == std::vector<std::string>{"127.0.0.1:41000", "127.0.0.1:41001"});
  CHECK(plan.workers == std::vector<std::string>{"127.0.0.1:41002", "127.0.0.1:41003"});

  const auto& s1 = plan.processes[1];
  CHECK(s1.role == Role::kServer);
  CHECK(s1.argv == std::vector<std::string>{"/opt/fleetps/bin/pserver", "--config", "job.yaml"});
  CHECK(s1.log_path == "out/serverlog.1");
  CHECK(s1.env.at("TRAINING_ROLE") == "PSERVER");
  CHECK(s1.env.at("POD_IP") == "127.0.0.1");
  CHECK(s1.env.at("PADDLE_PORT") == "41001");
  CHECK(s1.env.at("PADDLE_PSERVERS_IP_PORT_LIST") == "127.0.0.1:41000,127.0.0.1:41001");
  CHECK(s1.env.at("PADDLE_TRAINERS_NUM") == "2");

  const auto& w1 = plan.processes[3];
  CHECK(w1.role == Role::kWorker);
  CHECK(w1.Name() == "worker 1");
  CHECK(w1.argv == std::vector<std::string>{"/x/cpu-trainer", "--config", "job.yaml", "--epochs", "1"});
  CHECK(w1.log_path == "out/workerlog.1");
  CHECK(w1.env.at("TRAINING_ROLE") == "TRAINER");
  CHECK(w1.env.at("PADDLE_TRAINER_ID") == "1");
  CHECK(w1.env.at("PADDLE_TRAINERS_NUM") == "2");
  CHECK(w1.env.at("PADDLE_PSERVERS_IP_PORT_LIST") == "127.0.0.1:41000,127.0.0.1:41001");
  // Plain PS training: no trainer endpoints (they select collective training in cpu-trainer).
  CHECK(w1.env.count("PADDLE_TRAINER_ENDPOINTS") == 0);
  CHECK(w1.env.count("FLAGS_selected_gpus") == 0);
}

TEST_CASE("Ports come from FLAGS_START_PORT (or --start_port) upwards, servers first") {
  auto plan =
      Plan({"--server_num", "2", "--worker_num", "1", "t", "-c", "j.yaml"}, FakeWorld({{"FLAGS_START_PORT", "7000"}}));
  CHECK(plan.servers == std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001"});
  CHECK(plan.workers == std::vector<std::string>{"127.0.0.1:7002"});
  CHECK(plan.processes[0].argv.back() == "j.yaml");
  plan = Plan({"--start_port", "9000", "--server_num", "1", "t", "--config=k.yaml"},
              FakeWorld({{"FLAGS_START_PORT", "7000"}}));
  CHECK(plan.servers == std::vector<std::string>{"127.0.0.1:9000"});
  CHECK(plan.processes[0].argv.back() == "k.yaml");
}

TEST_CASE("A bad FLAGS_START_PORT is refused, naming the variable and the fix") {
  for (const char* bad : {"abc", "0", "70000", "80x"}) {
    const Status st =
        PlanError({"--server_num", "1", "t", "--config", "j.yaml"}, FakeWorld({{"FLAGS_START_PORT", bad}}));
    CHECK(st.IsInvalidArgument());
    CHECK_THAT(st.message(),
               Catch::Contains(std::string("FLAGS_START_PORT='") + bad + "'") && Catch::Contains("1-65535"));
  }
  const Status st =
      PlanError({"--server_num", "3", "t", "--config", "j.yaml"}, FakeWorld({{"FLAGS_START_PORT", "65534"}}));
  CHECK_THAT(st.message(), Catch::Contains("choose a lower FLAGS_START_PORT"));
}

TEST_CASE("The run mode is inferred from the other flags as fleetrun does") {
  CHECK(Plan({"t", "--config", "j.yaml"}).mode == RunMode::kPs);  // nothing: 1 server + 1 worker
  CHECK(Plan({"t", "--config", "j.yaml"}).processes.size() == 2);
  CHECK(Plan({"--workers", "127.0.0.1:6000", "t", "--config", "j.yaml"}).mode == RunMode::kPs);
  CHECK(Plan({"--heter_worker_num", "1", "t", "--config", "j.yaml"}).mode == RunMode::kPsHeter);
  CHECK(Plan({"--heter_devices", "cpu", "--server_num", "1", "t", "--config", "j.yaml"}).mode == RunMode::kPsHeter);
  CHECK(Plan({"--gpus", "0,1", "t"}).mode == RunMode::kCollective);
  CHECK(Plan({"--nproc_per_node", "3", "t"}).mode == RunMode::kCollective);
  CHECK(Plan({"--run_mode", "collective", "t"}).mode == RunMode::kCollective);
  CHECK(Plan({"--run_mode", "ps-heter", "t", "-c", "j"}).heter_workers.size() == 1);  // 1 of each by default
  CHECK(Plan({"--run_mode", "ps", "t", "--config", "j.yaml"}).mode_reason == "--run_mode");
}

TEST_CASE("Flags of another run mode are refused with the reason") {
  Status st = PlanError({"--run_mode", "collective", "--server_num", "2", "t"});
  CHECK_THAT(st.message(),
             Catch::Contains("--server_num is a parameter-server flag") && Catch::Contains("run mode is collective"));
  st = PlanError({"--ips", "10.0.0.1,10.0.0.2", "--server_num", "1", "t"});
  CHECK_THAT(st.message(), Catch::Contains("--ips is a collective flag"));
  st = PlanError({"--run_mode", "ps", "--heter_worker_num", "1", "t", "-c", "j"});
  CHECK_THAT(st.message(), Catch::Contains("--heter_worker_num needs --run_mode ps-heter"));
  st = PlanError({"--server_num", "3", "--servers", "127.0.0.1:1,127.0.0.1:2", "t", "-c", "j"});
  CHECK_THAT(st.message(), Catch::Contains("--server_num=3 but --servers names 2"));
  st = PlanError({"--servers", "127.0.0.1:1,127.0.0.1:1", "t", "-c", "j"});
  CHECK_THAT(st.message(), Catch::Contains("names 127.0.0.1:1 twice"));
  st = PlanError({"--servers", "127.0.0.1", "t", "-c", "j"});
  CHECK_THAT(st.message(), Catch::StartsWith("--servers"));
  st = PlanError({"--gpus", "0,1", "--nproc_per_node", "3", "t"});
  CHECK_THAT(st.message(), Catch::Contains("--nproc_per_node=3 but --gpus 0,1 names 2 GPUs"));
}

TEST_CASE("ps-heter: heter trainers run heter-trainer with the stage variables") {
  const auto plan = Plan({"--server_num", "2", "--worker_num", "2", "--heter_worker_num", "1", "--heter_devices", "gpu",
                          "--gpus", "3", "t", "--config", "j.yaml"},
                         FakeWorld({{"FLAGS_START_PORT", "8000"}}));
  REQUIRE(plan.processes.size() == 5);
  CHECK(plan.heter_workers == std::vector<std::string>{"127.0.0.1:8004"});
  const auto& h = plan.processes[2];
  CHECK(h.role == Role::kHeterWorker);
  CHECK(h.log_path == "log/heterlog.0");
  CHECK(h.argv == std::vector<std::string>{"/opt/fleetps/bin/heter-trainer", "--config", "j.yaml"});
  CHECK(h.env.at("TRAINING_ROLE") == "HETER_TRAINER");
  CHECK(h.env.at("PADDLE_PORT") == "8004");
  CHECK(h.env.at("STAGE_ID") == "2");
  CHECK(h.env.at("STAGE_NUM") == "2");
  CHECK(h.env.at("PADDLE_STAGE_TRAINERS_NUM") == "[2, 1]");
  CHECK(h.env.at("HETER_DEVICE_TYPE") == "gpu");
  CHECK(h.env.at("FLAGS_selected_gpus") == "3");
  CHECK(h.env.count("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST") == 0);  // the last stage
  const auto& w = plan.processes[4];
  CHECK(w.env.at("STAGE_ID") == "1");
  CHECK(w.env.at("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST") == "127.0.0.1:8004");
  CHECK(w.env.at("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST") == "127.0.0.1:8004");
}

TEST_CASE("Multi-node ps-heter: --heter_workers lists the heter trainers; this node runs its own") {
  // This node (10.0.0.2) has one server, one worker and the second heter-trainer.
  const auto plan = Plan({"--servers", "10.0.0.1:6000,10.0.0.2:6000", "--workers", "10.0.0.1:6100,10.0.0.2:6100",
                          "--heter_workers", "10.0.0.3:6200,10.0.0.2:6200", "t", "--config", "j.yaml"});
  CHECK(plan.mode == RunMode::kPsHeter);  // inferred from --heter_workers
  CHECK(plan.heter_workers == std::vector<std::string>{"10.0.0.3:6200", "10.0.0.2:6200"});
  REQUIRE(plan.processes.size() == 3);
  const auto& h = plan.processes[1];
  CHECK(h.role == Role::kHeterWorker);
  CHECK(h.rank == 1);
  CHECK(h.endpoint == "10.0.0.2:6200");
  CHECK(h.log_path == "log/heterlog.0");
  CHECK(h.env.at("POD_IP") == "10.0.0.2");
  CHECK(h.env.at("PADDLE_PORT") == "6200");
  CHECK(h.env.at("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST") == "10.0.0.3:6200,10.0.0.2:6200");
  CHECK(h.env.at("PADDLE_STAGE_TRAINERS_NUM") == "[2, 2]");
  const auto& w = plan.processes[2];
  CHECK(w.role == Role::kWorker);
  CHECK(w.env.at("PADDLE_TRAINER_ID") == "1");
  CHECK(w.env.at("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST") == "10.0.0.3:6200,10.0.0.2:6200");
  // A list that disagrees with the count is refused, naming both.
  auto st = PlanError({"--heter_worker_num", "3", "--heter_workers", "10.0.0.2:6200", "--servers", "10.0.0.2:6000",
                       "--workers", "10.0.0.2:6100", "t", "-c", "j"});
  CHECK_THAT(st.message(), Catch::Contains("--heter_worker_num=3 but --heter_workers names 1"));
}

TEST_CASE("Collective: one rank per GPU with the trainer endpoints, no servers") {
  const auto plan = Plan({"--gpus", "0,1", "t", "--config", "mlp.yaml"}, FakeWorld({{"FLAGS_START_PORT", "6000"}}));
  REQUIRE(plan.processes.size() == 2);
  CHECK(plan.servers.empty());
  const auto& r1 = plan.processes[1];
  CHECK(r1.argv == std::vector<std::string>{"t", "--config", "mlp.yaml"});
  CHECK(r1.env.at("PADDLE_TRAINER_ID") == "1");
  CHECK(r1.env.at("PADDLE_TRAINERS_NUM") == "2");
  CHECK(r1.env.at("PADDLE_TRAINER_ENDPOINTS") == "127.0.0.1:6000,127.0.0.1:6001");
  CHECK(r1.env.at("PADDLE_CURRENT_ENDPOINT") == "127.0.0.1:6001");
  CHECK(r1.env.at("FLAGS_selected_gpus") == "1");
  CHECK(r1.env.count("PADDLE_PSERVERS_IP_PORT_LIST") == 0);
  // The hybrid with pservers started separately: their list is passed on.
  const auto hybrid = Plan({"--nproc_per_node", "2", "t"}, FakeWorld({{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.9:1"}}));
  CHECK(hybrid.processes[0].env.at("PADDLE_PSERVERS_IP_PORT_LIST") == "10.0.0.9:1");
}

TEST_CASE("Multi-node: each node starts only its own roles, with global ranks") {
  // This node is 10.0.0.2 (found among its addresses).
  auto plan = Plan({"--servers", "10.0.0.1:6000,10.0.0.2:6000", "--workers", "10.0.0.1:6100,10.0.0.2:6100", "t",
                    "--config", "j.yaml"});
  REQUIRE(plan.processes.size() == 2);
  CHECK(plan.processes[0].role == Role::kServer);
  CHECK(plan.processes[0].rank == 1);
  CHECK(plan.processes[0].log_path == "log/serverlog.0");
  CHECK(plan.processes[0].env.at("POD_IP") == "10.0.0.2");
  CHECK(plan.processes[0].env.at("PADDLE_PSERVERS_IP_PORT_LIST") == "10.0.0.1:6000,10.0.0.2:6000");
  CHECK(plan.processes[1].env.at("PADDLE_TRAINER_ID") == "1");
  // --host picks the node explicitly.
  plan = Plan({"--host", "10.0.0.1", "--servers", "10.0.0.1:6000,10.0.0.2:6000", "--workers", "10.0.0.2:6100", "t",
               "--config", "j.yaml"});
  REQUIRE(plan.processes.size() == 1);
  CHECK(plan.processes[0].endpoint == "10.0.0.1:6000");
  // Collective over --ips: the same ports on every node (6170.. unless FLAGS_START_PORT).
  plan = Plan({"--ips", "10.0.0.1,10.0.0.2", "--nproc_per_node", "2", "t"});
  REQUIRE(plan.processes.size() == 2);
  CHECK(plan.workers == std::vector<std::string>{"10.0.0.1:6170", "10.0.0.1:6171", "10.0.0.2:6170", "10.0.0.2:6171"});
  CHECK(plan.processes[0].env.at("PADDLE_TRAINER_ID") == "2");
  CHECK(plan.processes[1].env.at("PADDLE_CURRENT_ENDPOINT") == "10.0.0.2:6171");
  // None of the roles here.
  Status st = PlanError({"--servers", "10.9.9.9:1", "--workers", "10.9.9.8:1", "t", "-c", "j"});
  CHECK_THAT(st.message(),
             Catch::Contains("no server or worker of the job is on this node") && Catch::Contains("--host"));
  st = PlanError({"--ips", "10.9.9.9,10.9.9.8", "t"});
  CHECK_THAT(st.message(), Catch::Contains("none of --ips") && Catch::Contains("--host"));
}

TEST_CASE("The hybrid (--sync-mode collective among the trainer's arguments) gets trainer endpoints") {
  const auto plan =
      Plan({"--server_num", "1", "--worker_num", "2", "t", "--config", "j.yaml", "--sync-mode", "collective"});
  const auto& w0 = plan.processes[1];
  CHECK(w0.env.at("PADDLE_TRAINER_ENDPOINTS") == "127.0.0.1:41001,127.0.0.1:41002");
  CHECK(w0.env.at("PADDLE_CURRENT_ENDPOINT") == "127.0.0.1:41001");
}

TEST_CASE("GPU-PS nodes (--sync-mode gpubox) get trainer endpoints when there are several") {
  const auto two = Plan({"--server_num", "1", "--workers", "127.0.0.1:9100,127.0.0.1:9116", "heter-trainer", "--config",
                         "j.yaml", "--sync-mode=gpubox", "--gpus", "0,1"});
  REQUIRE(two.processes.size() == 3);
  CHECK(two.processes[1].env.at("PADDLE_TRAINER_ENDPOINTS") == "127.0.0.1:9100,127.0.0.1:9116");
  CHECK(two.processes[2].env.at("PADDLE_CURRENT_ENDPOINT") == "127.0.0.1:9116");
  CHECK(two.processes[2].env.at("PADDLE_TRAINER_ID") == "1");
  CHECK(two.processes[2].argv.back() == "0,1");  // the trainer's own arguments, unchanged
  // One node all-reduces among its own devices: no endpoints (as a single gpubox process).
  const auto one =
      Plan({"--server_num", "1", "--worker_num", "1", "heter-trainer", "--config", "j.yaml", "--sync-mode", "gpubox"});
  CHECK(one.processes[1].env.count("PADDLE_TRAINER_ENDPOINTS") == 0);
  // Other modes named there get none either.
  const auto async =
      Plan({"--server_num", "1", "--worker_num", "2", "t", "--config", "j.yaml", "--sync-mode", "async"});
  CHECK(async.processes[1].env.count("PADDLE_TRAINER_ENDPOINTS") == 0);
}

TEST_CASE("Servers need the job's --config among the trainer's arguments and a pserver to run") {
  Status st = PlanError({"--server_num", "1", "/x/cpu-trainer", "--epochs", "1"});
  CHECK_THAT(st.message(), Catch::Contains("no --config FILE after /x/cpu-trainer"));
  LaunchEnvironment world = FakeWorld();
  world.is_executable = [](const std::string& path) { return path == "/build/server/pserver"; };
  world.self_path = "/elsewhere/fleetps-launch";
  st = PlanError({"--server_num", "1", "t", "--config", "j"}, world);
  CHECK(st.IsNotFound());
  CHECK_THAT(st.message(), Catch::Contains("cannot find the pserver") && Catch::Contains("--pserver_binary"));
  // The build tree: next to the trainer's folder.
  auto plan = Plan({"--server_num", "1", "/build/trainer/cpu-trainer", "--config", "j"}, world);
  CHECK(plan.processes[0].argv[0] == "/build/server/pserver");
  st = PlanError({"--pserver_binary", "/nope", "--server_num", "1", "t", "--config", "j"}, world);
  CHECK_THAT(st.message(), Catch::Contains("--pserver_binary /nope is not an executable file"));
}

TEST_CASE("Bad flags are refused with what is wrong and where to look") {
  auto f = Parse({"--sever_num", "2", "t"});
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.status().message(), Catch::Contains("unknown flag --sever_num") && Catch::Contains("--help"));
  f = Parse({"--server_num", "two", "t"});
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.status().message(), Catch::Contains("--server_num") && Catch::Contains("--help"));
  f = Parse({"--run_mode", "parameter", "t"});
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.status().message(), Catch::Contains("--run_mode"));
  f = Parse({"--server_num", "2"});
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.status().message(), Catch::Contains("no trainer program"));
  f = Parse({"--help"});
  CHECK(f.status().IsNotFound());
  CHECK_THAT(f.status().message(), Catch::Contains("--heter_worker_num"));
  // Everything from the trainer binary on is the trainer's, flags that look like ours included.
  f = Parse({"--worker_num", "1", "t", "--worker_num", "5", "-c", "j"});
  REQUIRE(f.ok());
  CHECK(f->command == std::vector<std::string>{"t", "--worker_num", "5", "-c", "j"});
  CHECK(*f->worker_num == 1);
  CHECK(f->heter_max_restarts == 0);  // by default a dead heter-trainer fails the job
  f = Parse({"--heter_worker_num", "1", "--heter_max_restarts", "3", "t"});
  REQUIRE(f.ok());
  CHECK(f->heter_max_restarts == 3);
  f = Parse({"--heter_max_restarts", "-1", "t"});
  CHECK_FALSE(f.ok());
}

TEST_CASE("Inherited role variables are not passed on") {
  CHECK(IsRoleVariable("PADDLE_TRAINER_ENDPOINTS"));
  CHECK(IsRoleVariable("TRAINING_ROLE"));
  CHECK(IsRoleVariable("FLAGS_selected_gpus"));
  CHECK_FALSE(IsRoleVariable("FLEETPS_AUTH_SECRET_FILE"));
  CHECK_FALSE(IsRoleVariable("PATH"));
}

}  // namespace
}  // namespace fleetps::launch
