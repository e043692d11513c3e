#pragma once
// The Heartbeat request (schemas/ps.fbs HeartbeatRequest) sent to a set of servers at
// once: the pservers (PsClient) or the heter-trainers (HeterClient) a trainer keeps its
// lease on. Internal to trainer/client.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/net/rpc_client.h"
#include "common/status.h"
#include "trainer/client/heartbeat_state.h"

namespace fleetps::trainer {

// Sends trainer `trainer_id` of `trainers`' heartbeat to every client and waits for every
// answer (bounded by `timeout`; re-sent after a connection loss: it is idempotent).
// Returns the trainers some server counts as gone (sorted, unique), or the first error.
StatusOr<std::vector<uint32_t>> HeartbeatAll(const std::vector<net::RpcClient*>& clients, uint32_t trainer_id,
                                             uint32_t trainers, const HeartbeatState& state,
                                             std::chrono::milliseconds timeout);

}  // namespace fleetps::trainer
