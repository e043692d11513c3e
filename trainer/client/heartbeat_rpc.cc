#include "trainer/client/heartbeat_rpc.h"

#include <algorithm>
#include <future>

#include "schemas/ps_generated.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

StatusOr<std::vector<uint32_t>> HeartbeatAll(const std::vector<net::RpcClient*>& clients, uint32_t trainer_id,
                                             uint32_t trainers, const HeartbeatState& state,
                                             std::chrono::milliseconds timeout) {
  net::CallOptions call;
  call.timeout = timeout;
  call.idempotent = true;
  call.busy = net::BusyRetry::kAlways;
  std::vector<std::promise<StatusOr<net::Reply>>> promises(clients.size());
  for (size_t s = 0; s < clients.size(); ++s) {
    flatbuffers::FlatBufferBuilder fbb(64 + state.reason.size());
    fbb.Finish(wire::CreateHeartbeatRequest(fbb, trainer_id, trainers, state.finished, state.failed,
                                            fbb.CreateString(state.reason), state.stopping));
    clients[s]->Call(static_cast<uint16_t>(wire::MessageType::Heartbeat), fbb.Release(), call,
                     [p = &promises[s]](StatusOr<net::Reply> r) { p->set_value(std::move(r)); });
  }
  std::vector<StatusOr<net::Reply>> replies;
  for (auto& p : promises) replies.push_back(p.get_future().get());
  std::vector<uint32_t> gone;
  for (size_t s = 0; s < replies.size(); ++s) {
    if (!replies[s].ok()) return replies[s].status();
    Status error;
    const auto* reply = VerifiedReply<wire::HeartbeatReply>(*replies[s], clients[s]->name(), &error);
    if (reply == nullptr) return error;
    if (reply->gone() != nullptr) gone.insert(gone.end(), reply->gone()->begin(), reply->gone()->end());
  }
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  return gone;
}

}  // namespace fleetps::trainer
