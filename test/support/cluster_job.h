#pragma once
// Runs a job with the real binaries on loopback, as a user starts it: the end-to-end tests'
// one way to bring up pservers, heter-trainers and cpu-trainers.

#include <string>
#include <vector>

namespace fleetps::testing {

// The logs of a finished job.
struct JobLogs {
  std::string trainer0;  // trainer 0's (rank 0's)
  std::string heter;     // the heter-trainer's (heter mode)
  std::string all;       // every process's, named, for a failure's INFO
};

// Runs the job at dir/job.yaml in `mode`:
//  - local: one cpu-trainer, in-process tables;
//  - async, sync, geo: 2 pservers + 2 cpu-trainers (--sync-mode mode);
//  - heter: 2 pservers + 1 heter-trainer (CPU device) + 2 cpu-trainers;
//  - collective: 2 pservers + 2 ranks started by scripts/launch_collective.sh (hybrid).
// Each cpu-trainer gets `--config dir/job.yaml`, `trainer_args` and `--report
// dir/report<i>.json`; logs go to dir/<role><i>.log (collective: dir/logs/workerlog.<i>).
// Every process must exit 0 (REQUIREd for the trainers, CHECKed for the others).
JobLogs RunJob(const std::string& dir, const std::string& mode, const std::vector<std::string>& trainer_args = {});

}  // namespace fleetps::testing
