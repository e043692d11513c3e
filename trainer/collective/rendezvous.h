#pragma once
// The rendezvous of a collective job: a small key-value store that rank 0 serves on its
// entry of PADDLE_TRAINER_ENDPOINTS while the ranks set up their collective transport.
// Every rank publishes what the others need to reach it (Gloo's per-pair addresses) and
// reads theirs; for NCCL, rank 0 publishes the unique id (as Paddle's gen_nccl_id hands it
// out over RPC). Messages: StoreSet / StoreGet (schemas/collective.fbs).
//
// Bounds (it listens on the network): keys up to 1 KiB, values up to 1 MiB, at most 65536
// keys; a request past them is InvalidArgument. A key may be set again (the latest wins).
// Thread-safety: all methods are thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/net/auth.h"
#include "common/net/endpoint.h"
#include "common/net/tls.h"
#include "common/status.h"

namespace fleetps::net {
class IoThreads;
class RpcClient;
class RpcServer;
}  // namespace fleetps::net

namespace fleetps::trainer::collective {

class RendezvousServer {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1u << 20;
  static constexpr size_t kMaxKeys = 1u << 16;

  // Listens on host:port (port 0: any free port). With auth_key, peers must authenticate;
  // with tls (it must hold a certificate), every connection is TLS.
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(const std::string& host, uint16_t port,
                                                           std::shared_ptr<const net::AuthKey> auth_key,
                                                           std::shared_ptr<net::TlsContext> tls = nullptr);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;

 private:
  struct State;
  RendezvousServer() = default;
  std::shared_ptr<State> state_;
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<net::RpcServer> rpc_;
};

class RendezvousClient {
 public:
  // Connects to rank 0's store, retrying until `timeout` (rank 0 may start last); over TLS
  // when tls is set (the store's certificate verified against its CA).
  static StatusOr<std::unique_ptr<RendezvousClient>> Connect(const net::Endpoint& rank0,
                                                             std::chrono::milliseconds timeout,
                                                             std::shared_ptr<const net::AuthKey> auth_key,
                                                             std::shared_ptr<net::TlsContext> tls = nullptr);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  Status Set(const std::string& key, std::span<const uint8_t> value);
  // The value of `key`, waiting for some rank to set it; TimedOut after `timeout`, naming
  // the key.
  StatusOr<std::vector<uint8_t>> Get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  RendezvousClient() = default;
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<net::RpcClient> rpc_;
};

}  // namespace fleetps::trainer::collective
