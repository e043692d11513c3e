#pragma once
// What a trainer's heartbeat tells the servers it keeps a lease on (schemas/ps.fbs
// HeartbeatRequest): alive, stopping, or ended.

#include <string>

namespace fleetps::trainer {

struct HeartbeatState {
  bool finished = false;  // its job has ended (the last heartbeat)
  bool failed = false;    // ended with an error, `reason`
  // A stop request is ending its training: it finishes the steps in flight and pushes
  // them, then sends `finished` (a pserver that is being stopped too serves it until then).
  bool stopping = false;
  std::string reason;
};

}  // namespace fleetps::trainer
