#pragma once
// fleetps-launch's plan: which processes of a job run on this node, with which command
// line, environment and log file. A pure function of the launcher's flags, the
// environment and this node's addresses, so every rule of fleetrun's flag handling
// (run-mode inference, port choice, role environment) is unit tested without processes.
//
// Compatibility with Paddle's `fleetrun` / `python -m paddle.distributed.launch`:
//  - flags: --server_num --worker_num --heter_worker_num --heter_devices --servers --workers
//    --heter_workers --gpus --log_dir --run_mode --ips --host (plus --nproc_per_node);
//  - the run mode, when --run_mode is not given, is inferred from the other flags as
//    fleetrun does: heter flags -> ps-heter, parameter-server flags -> ps, --ips /
//    --nproc_per_node / --gpus -> collective; none of them -> ps; a role's count defaults to 1;
//  - ports: FLAGS_START_PORT (or --start_port) upwards, else free ports on this node;
//  - logs: LOG_DIR/serverlog.N, workerlog.N, heterlog.N (N: the process's index on this node);
//  - environment: TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM,
//    PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT, the heter stage variables, and for collective
//    (and the hybrid, `--sync-mode collective` among the trainer's arguments)
//    PADDLE_TRAINER_ENDPOINTS / PADDLE_CURRENT_ENDPOINT. Role variables the launcher
//    inherited are not passed on (see IsRoleVariable), except, in collective mode,
//    PADDLE_PSERVERS_IP_PORT_LIST: the pservers of a hybrid job started separately.
// Differences: workers run TRAINER_BINARY (any program); servers and heter trainers run
// `pserver` / `heter-trainer` from the same install with the job's --config from ARGS.
// Thread-safety: values and pure functions.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fleetps::launch {

enum class RunMode { kCollective, kPs, kPsHeter };
const char* RunModeName(RunMode mode);

enum class Role { kServer, kWorker, kHeterWorker };
const char* RoleName(Role role);  // "server", "worker", "heter worker"

// The launcher's command line, as given (empty / nullopt: not given).
struct LaunchFlags {
  std::optional<uint32_t> server_num;        // pservers on this node
  std::optional<uint32_t> worker_num;        // trainers on this node
  std::optional<uint32_t> heter_worker_num;  // heter-trainers on this node
  std::optional<uint32_t> nproc_per_node;    // collective: ranks on this node (default: --gpus count, else 1)
  std::string heter_devices;                 // gpu | cpu: HETER_DEVICE_TYPE of the heter trainers
  std::string servers;                       // every pserver, ip:port,ip:port (multi-node)
  std::string workers;                       // every trainer, ip:port,...
  std::string heter_workers;                 // every heter-trainer, ip:port,...
  std::string gpus;                          // GPU ids, "0,1": FLAGS_selected_gpus of each local process
  std::string log_dir = "log";               // where serverlog.N, workerlog.N, heterlog.N go
  std::string run_mode;                      // collective | ps | ps-heter; empty: inferred
  std::string ips;                           // collective: every node's IP, in node-rank order
  std::string host;                          // this node's IP (default: POD_IP, else found among --ips / lists)
  std::optional<uint32_t> start_port;        // first port (overrides FLAGS_START_PORT)
  std::string pserver_binary;                // the pserver to run (default: found next to the launcher)
  std::string heter_binary;                  // the heter-trainer to run (default: likewise)
  // After the workers have ended, how long the servers and heter trainers get to exit by
  // themselves before they are sent SIGTERM; and how long after SIGTERM before SIGKILL.
  double stop_wait_s = 5;
  double kill_grace_s = 5;
  // Times a failed heter trainer is started again while the workers run (SupervisorOptions).
  uint32_t heter_max_restarts = 0;
  std::vector<std::string> command;  // TRAINER_BINARY ARGS...
};

// Parses the launcher's argv. Flags precede TRAINER_BINARY; everything from it on is the
// trainer's command line. `--help` yields a NotFound status whose message is the usage.
StatusOr<LaunchFlags> ParseLaunchArgs(int argc, const char* const* argv);

// What the plan needs from the world, injectable for tests.
struct LaunchEnvironment {
  std::function<std::optional<std::string>(const std::string&)> env;  // getenv
  std::function<StatusOr<std::vector<uint16_t>>(size_t)> free_ports;  // n distinct free ports
  std::vector<std::string> local_addresses;                           // this node's IPs (getifaddrs)
  std::function<bool(const std::string&)> is_executable;
  std::string self_path;  // the launcher's own executable (/proc/self/exe)
};
// The real one: process environment, kernel-chosen free ports, getifaddrs, access(X_OK).
LaunchEnvironment SystemLaunchEnvironment();

struct ProcessSpec {
  Role role = Role::kWorker;
  uint32_t local_index = 0;  // among this node's processes of the role (the log's N)
  uint32_t rank = 0;         // the role's global index (PADDLE_TRAINER_ID for workers)
  std::string endpoint;      // ip:port
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (and overriding) the launcher's environment
  std::string log_path;
  std::string Name() const;  // "worker 1"
};

struct LaunchPlan {
  RunMode mode = RunMode::kPs;
  std::string mode_reason;                                   // why this mode, e.g. "inferred from --server_num"
  std::vector<std::string> servers, workers, heter_workers;  // every endpoint of the job
  std::vector<ProcessSpec> processes;  // this node's, servers first, then heter workers, then workers
  std::string log_dir;
  std::string Summary() const;  // one line per process, for the launcher's start-up output
};

StatusOr<LaunchPlan> PlanLaunch(const LaunchFlags& flags, const LaunchEnvironment& env);

// True for the variables that name a process's role (PADDLE_*, TRAINING_ROLE, POD_IP,
// STAGE_*, HETER_DEVICE_TYPE, FLAGS_selected_gpus): the launcher does not pass the ones
// it inherited to its children, only those of each child's ProcessSpec.
bool IsRoleVariable(const std::string& name);

// The value of --config / -c / --config=FILE in a trainer command line; empty when absent.
std::string FindConfigArg(const std::vector<std::string>& args);

}  // namespace fleetps::launch
