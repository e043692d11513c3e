#include "trainer/client/ps_client.h"

// PsClient's coordination calls: barriers, metric reports and heartbeats (server 0 holds
// the barriers and metric boards; heartbeats go to every server).

#include <chrono>
#include <future>
#include <memory>

#include "schemas/ps_generated.h"
#include "trainer/client/heartbeat_rpc.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

using wire::MessageType;

StatusOr<PsClient::BarrierResult> PsClient::Barrier(const std::string& name, uint32_t trainer_id, uint32_t participants,
                                                    std::chrono::milliseconds timeout, std::span<const double> values,
                                                    bool done, const StopRequest* stop) {
  flatbuffers::FlatBufferBuilder fbb(128 + values.size() * 8);
  auto name_off = fbb.CreateString(name);
  auto values_off = fbb.CreateVector(values.data(), values.size());
  fbb.Finish(wire::CreateBarrierRequest(fbb, name_off, trainer_id, participants, static_cast<uint32_t>(timeout.count()),
                                        values_off, done));
  // The server answers TimedOut at `timeout`; this side waits that long plus a margin, so a
  // server that cannot answer at all is still noticed (sooner by the liveness probe).
  net::CallOptions call = net::DefaultCallOptions(static_cast<uint16_t>(MessageType::Barrier), options_.rpc);
  call.timeout = timeout + options_.barrier_margin;
  auto answer = std::make_shared<std::promise<StatusOr<net::Reply>>>();
  std::future<StatusOr<net::Reply>> answered = answer->get_future();
  clients_[0]->Call(static_cast<uint16_t>(MessageType::Barrier), fbb.Release(), call,
                    [answer](StatusOr<net::Reply> r) { answer->set_value(std::move(r)); });
  while (stop != nullptr && answered.wait_for(kStopPoll) == std::future_status::timeout) {
    if (stop->requested()) return Status::Aborted(stop->reason() + " while waiting at barrier '" + name + "'");
  }
  ASSIGN_OR_RETURN(net::Reply reply, answered.get());
  Status error;
  const auto* msg = VerifiedReply<wire::BarrierReply>(reply, clients_[0]->name(), &error);
  if (msg == nullptr) return error;
  if (!ElementsAligned(msg->sum())) {
    return Status::Corruption("Barrier reply from " + clients_[0]->name() + ": misaligned sum");
  }
  BarrierResult result;
  result.generation = msg->generation();
  result.all_done = msg->all_done();
  if (msg->sum() != nullptr) result.sum.assign(msg->sum()->begin(), msg->sum()->end());
  return result;
}

StatusOr<PsClient::MetricSum> PsClient::ReportMetric(const std::string& name, uint32_t trainer_id,
                                                     std::span<const double> values) {
  flatbuffers::FlatBufferBuilder fbb(128 + values.size() * 8);
  auto name_off = fbb.CreateString(name);
  auto values_off = fbb.CreateVector(values.data(), values.size());
  fbb.Finish(wire::CreateMetricReportRequest(fbb, name_off, trainer_id, values_off));
  ASSIGN_OR_RETURN(net::Reply reply,
                   clients_[0]->CallSync(static_cast<uint16_t>(MessageType::MetricReport), fbb.Release()));
  Status error;
  const auto* msg = VerifiedReply<wire::MetricReportReply>(reply, clients_[0]->name(), &error);
  if (msg == nullptr) return error;
  if (!ElementsAligned(msg->sum())) {
    return Status::Corruption("MetricReport reply from " + clients_[0]->name() + ": misaligned sum");
  }
  MetricSum out;
  out.reporters = msg->reporters();
  if (msg->sum() != nullptr) out.sum.assign(msg->sum()->begin(), msg->sum()->end());
  return out;
}

StatusOr<std::vector<uint32_t>> PsClient::Heartbeat(uint32_t trainer_id, uint32_t trainers, const HeartbeatState& state,
                                                    std::chrono::milliseconds timeout) {
  std::vector<net::RpcClient*> servers;
  for (const auto& c : clients_) servers.push_back(c.get());
  return HeartbeatAll(servers, trainer_id, trainers, state, timeout);
}

}  // namespace fleetps::trainer
