#include "trainer/client/heter_client.h"

#include <spdlog/spdlog.h>

#include "common/flatbuffer_align.h"
#include "common/net/io_threads.h"
#include "schemas/heter_generated.h"
#include "trainer/client/heartbeat_rpc.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

using wire::MessageType;
using Clock = std::chrono::steady_clock;

struct HeterClient::Call {
  uint64_t batch_id = 0;
  uint32_t rows = 0;
  std::span<const float> activations;
  std::span<const float> labels;
  bool forward_only = false;
  std::promise<StatusOr<HeterStep>> done;
  uint32_t attempts = 0;
};

HeterClient::HeterClient(HeterClientOptions options)
    : options_(std::move(options)), health_(options_.heter_trainers.size()) {}

HeterClient::~HeterClient() {
  clients_.clear();  // closes the connections while the io threads still run
  if (io_) io_->Stop();
}

StatusOr<std::unique_ptr<HeterClient>> HeterClient::Connect(HeterClientOptions options) {
  if (options.heter_trainers.empty()) {
    return Status::InvalidArgument("no heter-trainer endpoints given (set PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST)");
  }
  std::unique_ptr<HeterClient> client(new HeterClient(std::move(options)));
  client->io_ = std::make_unique<net::IoThreads>(client->options_.io_threads);
  for (size_t i = 0; i < client->options_.heter_trainers.size(); ++i) {
    const auto& ep = client->options_.heter_trainers[i];
    client->clients_.push_back(std::make_unique<net::RpcClient>(
        *client->io_, ep, client->options_.rpc, "heter-trainer " + std::to_string(i) + " (" + ep.ToString() + ")"));
  }
  for (auto& c : client->clients_) RETURN_IF_ERROR(c->Connect());
  for (size_t i = 0; i < client->clients_.size(); ++i) RETURN_IF_ERROR(client->Hello(i));
  return client;
}

flatbuffers::DetachedBuffer HeterClient::HelloRequest() const {
  flatbuffers::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateHeterHelloRequest(fbb, options_.trainer_id, options_.trainers, options_.input_width,
                                           options_.dense_params, /*stage_id=*/1, options_.labels, options_.outputs));
  return fbb.Release();
}

Status HeterClient::CheckHello(size_t i, const StatusOr<net::Reply>& reply) const {
  if (!reply.ok()) return reply.status();
  Status error;
  const auto* hello = VerifiedReply<wire::HeterHelloReply>(*reply, clients_[i]->name(), &error);
  if (hello == nullptr) return error;
  spdlog::info("trainer {}: {} is stage {} on {} with {} lanes", options_.trainer_id, clients_[i]->name(),
               hello->stage_id(), hello->device() ? hello->device()->str() : "?", hello->lanes());
  return Status::OK();
}

Status HeterClient::Hello(size_t i) {
  return CheckHello(i, clients_[i]->CallSync(static_cast<uint16_t>(MessageType::HeterHello), HelloRequest()));
}

size_t HeterClient::Route() {
  const size_t n = clients_.size();
  size_t first = options_.route_by_trainer_id ? options_.trainer_id % n : next_.fetch_add(1) % n;
  if (!options_.failover) return first;
  std::vector<size_t> probes;
  size_t target = first;  // every one is down: the call fails there (and finds none to go to)
  {
    MutexLock lock(mu_);
    probes = DueProbesLocked(Clock::now());
    for (size_t k = 0; k < n; ++k) {
      if (!health_[(first + k) % n].down) {
        target = (first + k) % n;
        break;
      }
    }
  }
  for (size_t i : probes) Probe(i);
  return target;
}

int HeterClient::NextLive(size_t failed) {
  MutexLock lock(mu_);
  MarkDownLocked(failed, Clock::now());
  const size_t n = clients_.size();
  for (size_t k = 1; k < n; ++k) {
    const size_t i = (failed + k) % n;
    if (!health_[i].down) return static_cast<int>(i);
  }
  return -1;
}

void HeterClient::MarkDownLocked(size_t i, Clock::time_point now) {
  Health& h = health_[i];
  if (!h.down) {
    spdlog::warn(
        "trainer {}: {} is down: no micro-batches, heartbeats or flushes go to it until it answers "
        "HeterHello again (tried every {} ms)",
        options_.trainer_id, clients_[i]->name(), options_.failover_probe_interval.count());
  }
  h.down = true;
  h.probe_at = now + options_.failover_probe_interval;
}

std::vector<size_t> HeterClient::DueProbesLocked(Clock::time_point now) {
  std::vector<size_t> due;
  for (size_t i = 0; i < health_.size(); ++i) {
    Health& h = health_[i];
    if (!h.down || h.probing || now < h.probe_at) continue;
    h.probing = true;
    due.push_back(i);
  }
  return due;
}

void HeterClient::Probe(size_t i) {
  net::CallOptions call;
  call.timeout = options_.rpc.request_timeout;
  call.idempotent = true;
  clients_[i]->Call(static_cast<uint16_t>(MessageType::HeterHello), HelloRequest(), call,
                    [this, i](StatusOr<net::Reply> reply) {
                      const Status st = CheckHello(i, reply);
                      MutexLock lock(mu_);
                      Health& h = health_[i];
                      h.probing = false;
                      if (!st.ok()) {
                        h.probe_at = Clock::now() + options_.failover_probe_interval;
                        return;
                      }
                      h.down = false;
                      spdlog::info("trainer {}: {} answers again: it takes micro-batches again", options_.trainer_id,
                                   clients_[i]->name());
                    });
}

std::vector<size_t> HeterClient::UpTargets() {
  std::vector<size_t> up, probes;
  {
    MutexLock lock(mu_);
    if (options_.failover) probes = DueProbesLocked(Clock::now());
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (!options_.failover || !health_[i].down) up.push_back(i);
    }
  }
  for (size_t i : probes) Probe(i);
  return up;
}

std::future<StatusOr<HeterStep>> HeterClient::Train(uint64_t batch_id, uint32_t rows,
                                                    std::span<const float> activations, std::span<const float> labels,
                                                    bool forward_only) {
  auto call = std::make_shared<Call>();
  call->batch_id = batch_id;
  call->rows = rows;
  call->activations = activations;
  call->labels = labels;
  call->forward_only = forward_only;
  auto future = call->done.get_future();
  if (rows == 0 || labels.size() != size_t{rows} * options_.labels ||
      activations.size() != size_t{rows} * options_.input_width) {
    call->done.set_value(Status::InvalidArgument("micro-batch " + std::to_string(batch_id) + ": " +
                                                 std::to_string(activations.size()) + " activations and " +
                                                 std::to_string(labels.size()) + " labels for " + std::to_string(rows) +
                                                 " rows of width " + std::to_string(options_.input_width)));
    return future;
  }
  Send(std::move(call), Route());
  return future;
}

void HeterClient::Send(std::shared_ptr<Call> call, size_t target) {
  ++call->attempts;
  flatbuffers::FlatBufferBuilder fbb(64 + (call->activations.size() + call->labels.size()) * sizeof(float));
  auto acts = fbb.CreateVector(call->activations.data(), call->activations.size());
  auto labels = fbb.CreateVector(call->labels.data(), call->labels.size());
  fbb.Finish(wire::CreateHeterTrainRequest(fbb, options_.trainer_id, call->batch_id, call->rows, options_.input_width,
                                           acts, labels, call->forward_only));
  clients_[target]->Call(static_cast<uint16_t>(MessageType::HeterTrain), fbb.Release(),
                         [this, call, target](StatusOr<net::Reply> reply) { OnReply(call, target, std::move(reply)); });
}

void HeterClient::OnReply(std::shared_ptr<Call> call, size_t target, StatusOr<net::Reply> reply) {
  if (!reply.ok()) {
    const Status& st = reply.status();
    const bool lost = st.IsUnavailable() || st.IsTimedOut();
    if (lost && options_.failover && call->attempts < clients_.size()) {
      const int next = NextLive(target);
      if (next >= 0) {
        spdlog::warn("trainer {}: micro-batch {} failed on {} ({}); sending it to {}", options_.trainer_id,
                     call->batch_id, clients_[target]->name(), st.ToString(), clients_[next]->name());
        Send(std::move(call), static_cast<size_t>(next));  // on an io thread: Call() does not block
        return;
      }
    }
    call->done.set_value(st);
    return;
  }
  Status error;
  const auto* r = VerifiedReply<wire::HeterTrainReply>(*reply, clients_[target]->name(), &error);
  if (r == nullptr) {
    call->done.set_value(error);
    return;
  }
  const size_t rows = call->rows;
  const size_t predictions = rows * options_.outputs;
  const size_t width = options_.input_width;
  const size_t grads = call->forward_only ? 0 : rows * width;
  const size_t got_grads = r->activation_grads() == nullptr ? 0 : r->activation_grads()->size();
  if (r->batch_id() != call->batch_id || r->predictions() == nullptr || r->predictions()->size() != predictions ||
      got_grads != grads || !ElementsAligned(r->predictions()) || !ElementsAligned(r->activation_grads())) {
    call->done.set_value(Status::Corruption("HeterTrain reply from " + clients_[target]->name() + " does not match " +
                                            (call->forward_only ? "forward-only " : "") + "micro-batch " +
                                            std::to_string(call->batch_id) + " (" + std::to_string(rows) +
                                            " rows of width " + std::to_string(width) + ")"));
    return;
  }
  HeterStep step;
  step.loss = r->loss();
  step.predictions = {r->predictions()->data(), predictions};
  if (grads > 0) step.activation_grads = {r->activation_grads()->data(), grads};
  step.reply = std::move(*reply);
  call->done.set_value(std::move(step));
}

Status HeterClient::Flush() {
  const std::vector<size_t> targets = UpTargets();
  std::vector<std::future<StatusOr<net::Reply>>> replies;
  for (size_t i : targets) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateHeterFlushRequest(fbb, options_.trainer_id));
    auto p = std::make_shared<std::promise<StatusOr<net::Reply>>>();
    replies.push_back(p->get_future());
    clients_[i]->Call(static_cast<uint16_t>(MessageType::HeterFlush), fbb.Release(),
                      [p](StatusOr<net::Reply> r) { p->set_value(std::move(r)); });
  }
  Status first;
  for (size_t k = 0; k < replies.size(); ++k) {
    const size_t i = targets[k];
    auto r = replies[k].get();
    if (!r.ok() && options_.failover && (r.status().IsUnavailable() || r.status().IsTimedOut())) {
      spdlog::warn("trainer {}: flushing {} failed ({}); the dense gradients it had not pushed are lost with it",
                   options_.trainer_id, clients_[i]->name(), r.status().ToString());
      MutexLock lock(mu_);
      MarkDownLocked(i, Clock::now());
      continue;
    }
    Status error = r.ok() ? Status::OK() : r.status();
    if (r.ok() && VerifiedReply<wire::HeterFlushReply>(*r, clients_[i]->name(), &error) != nullptr) continue;
    if (first.ok()) first = error;
  }
  return first;
}

StatusOr<std::vector<uint32_t>> HeterClient::Heartbeat(const HeartbeatState& state, std::chrono::milliseconds timeout) {
  // The final one goes to every heter-trainer: one taken for down that is in fact alive must
  // still hear that this trainer has ended.
  std::vector<net::RpcClient*> targets;
  if (state.finished) {
    for (const auto& c : clients_) targets.push_back(c.get());
  } else {
    for (size_t i : UpTargets()) targets.push_back(clients_[i].get());
  }
  return HeartbeatAll(targets, options_.trainer_id, options_.trainers, state, timeout);
}

}  // namespace fleetps::trainer
