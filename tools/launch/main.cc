// fleetps-launch: starts this node's processes of a fleetps job, as Paddle's fleetrun
// (python -m paddle.distributed.launch) does, and supervises them to the end.
//
//   fleetps-launch --server_num 2 --worker_num 2 build/trainer/cpu-trainer --config job.yaml
//   fleetps-launch --heter_worker_num 1 --heter_devices gpu --server_num 2 --worker_num 2 cpu-trainer -c job.yaml
//   fleetps-launch --nproc_per_node 2 cpu-trainer --config mlp.yaml                  (collective)
//
// The rules (run-mode inference, ports, environment, logs) are in launch_plan.h; the
// supervision (stop order, exit codes, no process outliving the launcher) in supervisor.h.

#include <iostream>

#include "tools/launch/launch_plan.h"
#include "tools/launch/supervisor.h"

int main(int argc, char** argv) {
  using namespace fleetps::launch;
  auto flags = ParseLaunchArgs(argc, argv);
  if (!flags.ok()) {
    if (flags.status().IsNotFound()) {  // --help
      std::cout << flags.status().message();
      return 0;
    }
    std::cerr << "fleetps-launch: " << flags.status().message() << std::endl;
    return 2;
  }
  auto plan = PlanLaunch(*flags, SystemLaunchEnvironment());
  if (!plan.ok()) {
    std::cerr << "fleetps-launch: " << plan.status().message() << std::endl;
    return 2;
  }
  std::cerr << "fleetps-launch: " << plan->Summary() << std::endl;
  SupervisorOptions options;
  options.stop_wait = std::chrono::milliseconds(static_cast<int64_t>(flags->stop_wait_s * 1000));
  options.kill_grace = std::chrono::milliseconds(static_cast<int64_t>(flags->kill_grace_s * 1000));
  options.heter_restarts = flags->heter_max_restarts;
  return RunLaunchPlan(std::move(*plan), options);
}
