#include "trainer/collective/rendezvous.h"

#include <algorithm>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "common/thread_annotations.h"
#include "schemas/collective_generated.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer::collective {

using wire::MessageType;

struct RendezvousServer::State {
  explicit State(uint64_t budget) : budget_bytes(budget) {}

  const uint64_t budget_bytes;
  Mutex mu;  // guards values, bytes
  std::map<std::string, std::vector<uint8_t>> values GUARDED_BY(mu);
  uint64_t bytes GUARDED_BY(mu) = 0;  // keys plus values in `values`

  void Handle(const net::Request& req, const net::Responder& responder) EXCLUDES(mu) {
    flatbuffers::Verifier verifier(req.data(), req.payload_size);
    const auto type = static_cast<MessageType>(req.type);
    auto malformed = [&] {
      responder.SendError(
          Status::InvalidArgument("malformed " + net::MessageTypeName(req.type) + " from " + responder.peer()));
    };
    if (type == MessageType::StoreSet) {
      if (req.payload_size == 0 || !verifier.VerifyBuffer<wire::StoreSetRequest>(nullptr)) return malformed();
      const auto* msg = flatbuffers::GetRoot<wire::StoreSetRequest>(req.data());
      const std::string key = msg->key() ? msg->key()->str() : "";
      const size_t value_bytes = msg->value() ? msg->value()->size() : 0;
      if (key.empty() || key.size() > kMaxKeyBytes || value_bytes > kMaxValueBytes) {
        return responder.SendError(Status::InvalidArgument(
            "StoreSet from " + responder.peer() + ": key of " + std::to_string(key.size()) + " bytes, value of " +
            std::to_string(value_bytes) + " (limits: 1..1024 and 1 MiB)"));
      }
      {
        MutexLock lock(mu);
        auto it = values.find(key);
        if (values.size() >= kMaxKeys && it == values.end()) {
          return responder.SendError(Status::InvalidArgument("StoreSet from " + responder.peer() +
                                                             ": the rendezvous already holds 65536 keys"));
        }
        const uint64_t old = it == values.end() ? 0 : key.size() + it->second.size();
        const uint64_t after = bytes - old + key.size() + value_bytes;
        if (after > budget_bytes) {
          return responder.SendError(Status::InvalidArgument(
              "StoreSet of '" + key.substr(0, 64) + "' (" + std::to_string(key.size() + value_bytes) + " bytes) from " +
              responder.peer() + ": the collective rendezvous would hold " + std::to_string(after) +
              " bytes, past its budget of " + std::to_string(budget_bytes) +
              " (fleetps.collective.store_budget_bytes; a peer that is not a rank of this job, or a group too "
              "large for the budget)"));
        }
        auto& v = it == values.end() ? values[key] : it->second;
        v.clear();
        if (msg->value() != nullptr) v.assign(msg->value()->begin(), msg->value()->end());
        bytes = after;
      }
      flatbuffers::FlatBufferBuilder fbb(16);
      fbb.Finish(wire::CreateStoreSetReply(fbb));
      return responder.Send(net::ReplyType(MessageType::StoreSet), fbb.Release());
    }
    if (type == MessageType::StoreGet) {
      if (req.payload_size == 0 || !verifier.VerifyBuffer<wire::StoreGetRequest>(nullptr)) return malformed();
      const auto* msg = flatbuffers::GetRoot<wire::StoreGetRequest>(req.data());
      const std::string key = msg->key() ? msg->key()->str() : "";
      flatbuffers::FlatBufferBuilder fbb(64);
      {
        MutexLock lock(mu);
        auto it = values.find(key);
        if (it == values.end()) {
          fbb.Finish(wire::CreateStoreGetReply(fbb, false));
        } else {
          fbb.Finish(wire::CreateStoreGetReply(fbb, true, fbb.CreateVector(it->second)));
        }
      }
      return responder.Send(net::ReplyType(MessageType::StoreGet), fbb.Release());
    }
    responder.SendError(Status::InvalidArgument(net::MessageTypeName(req.type) + " from " + responder.peer() +
                                                " is not served by a collective rendezvous (StoreSet, StoreGet)"));
  }
};

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const std::string& host, uint16_t port,
                                                                    std::shared_ptr<const net::AuthKey> auth_key,
                                                                    std::shared_ptr<net::TlsContext> tls,
                                                                    uint64_t budget_bytes) {
  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->state_ = std::make_shared<State>(budget_bytes);
  server->io_ = std::make_unique<net::IoThreads>(1);
  net::RpcServerOptions o;
  o.host = host;
  o.port = port;
  o.max_payload = 4u << 20;
  o.max_inflight_bytes = 64u << 20;
  o.auth_key = auth_key;
  o.auth_required = auth_key != nullptr;
  o.tls = std::move(tls);
  server->rpc_ = std::make_unique<net::RpcServer>(
      *server->io_, o,
      [state = server->state_](net::Request req, net::Responder responder) { state->Handle(req, responder); });
  RETURN_IF_ERROR(server->rpc_->Start().WithContext("collective rendezvous on " + host + ":" + std::to_string(port)));
  return server;
}

RendezvousServer::~RendezvousServer() {
  if (rpc_) {
    rpc_->StopAccepting();
    rpc_->Stop();
  }
  if (io_) io_->Stop();
}

uint16_t RendezvousServer::port() const { return rpc_->port(); }

uint64_t RendezvousServer::stored_bytes() const {
  MutexLock lock(state_->mu);
  return state_->bytes;
}

StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(const net::Endpoint& rank0,
                                                                      std::chrono::milliseconds timeout,
                                                                      std::shared_ptr<const net::AuthKey> auth_key,
                                                                      std::shared_ptr<net::TlsContext> tls) {
  std::unique_ptr<RendezvousClient> client(new RendezvousClient());
  client->io_ = std::make_unique<net::IoThreads>(1);
  net::RpcClientOptions o;
  o.connect_timeout = timeout;
  o.request_timeout = timeout;
  o.auth_key = std::move(auth_key);
  o.tls = std::move(tls);
  client->rpc_ = std::make_unique<net::RpcClient>(*client->io_, rank0, o,
                                                  "the collective rendezvous of rank 0 (" + rank0.ToString() + ")");
  RETURN_IF_ERROR(client->rpc_->Connect());
  return client;
}

RendezvousClient::~RendezvousClient() {
  rpc_.reset();
  if (io_) io_->Stop();
}

Status RendezvousClient::Set(const std::string& key, std::span<const uint8_t> value) {
  flatbuffers::FlatBufferBuilder fbb(64 + key.size() + value.size());
  auto k = fbb.CreateString(key);
  auto v = fbb.CreateVector(value.data(), value.size());
  fbb.Finish(wire::CreateStoreSetRequest(fbb, k, v));
  net::CallOptions call = net::DefaultCallOptions(static_cast<uint16_t>(MessageType::StoreSet), rpc_->options());
  call.idempotent = true;  // setting the same value twice = once
  return rpc_->CallSync(static_cast<uint16_t>(MessageType::StoreSet), fbb.Release(), call).status();
}

StatusOr<std::vector<uint8_t>> RendezvousClient::Get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto delay = std::chrono::milliseconds(2);
  net::CallOptions call = net::DefaultCallOptions(static_cast<uint16_t>(MessageType::StoreGet), rpc_->options());
  call.idempotent = true;
  while (true) {
    flatbuffers::FlatBufferBuilder fbb(64 + key.size());
    fbb.Finish(wire::CreateStoreGetRequest(fbb, fbb.CreateString(key)));
    ASSIGN_OR_RETURN(auto reply, rpc_->CallSync(static_cast<uint16_t>(MessageType::StoreGet), fbb.Release(), call));
    Status error;
    const auto* r = VerifiedReply<wire::StoreGetReply>(reply, rpc_->name(), &error);
    if (r == nullptr) return error;
    if (r->found()) {
      if (r->value() == nullptr) return std::vector<uint8_t>{};
      return std::vector<uint8_t>(r->value()->begin(), r->value()->end());
    }
    if (std::chrono::steady_clock::now() + delay > deadline) {
      return Status::TimedOut("collective rendezvous: '" + key + "' was not published within " +
                              std::to_string(timeout.count()) +
                              " ms (is every rank of PADDLE_TRAINER_ENDPOINTS "
                              "running?)");
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace fleetps::trainer::collective
