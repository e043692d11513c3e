#pragma once
// Local groups: k threads of one process acting as k consecutive ranks of a collective job
// whose processes are joined by an inner communicator (one rank per process). Member m of
// the process with inner rank r is rank r * k + m of inner size * k ranks.
//
// An allreduce sums the members' buffers in memory (in member order, so every member gets
// bitwise the same values), runs one inner allreduce of the sum for the whole process, and
// hands the result back to every member (or, with AllreduceSumView, lets each read the one
// sum where it lies); a broadcast and a barrier likewise cross the
// network once per process. Against one inner rank per thread, this moves 1/k of the bytes
// over the network and needs no transport at all for a single process (inner = nullptr).
// GPU-PS uses it for the host replicas of its workers (fleetps.gpups.workers_per_device).
//
// Every member must issue the same operations in the same order, as ranks do; a member that
// does not join an operation within `timeout` fails the others' with an error naming it (and
// the group stays failed), and so does Abort(why) on any member at once (a worker thread that
// failed and stops). An inner error reaches every member.
// Thread-safety: each member is a Communicator (one thread at a time per member); members
// run concurrently on their own threads.

#include <chrono>
#include <memory>
#include <vector>

#include "common/status.h"
#include "trainer/collective/communicator.h"

namespace fleetps::trainer::collective {

// `members` >= 1 communicators sharing `inner` (null: this process is the whole job).
std::vector<std::unique_ptr<Communicator>> MakeLocalGroup(uint32_t members, std::unique_ptr<Communicator> inner,
                                                          std::chrono::milliseconds timeout);

}  // namespace fleetps::trainer::collective
