#pragma once
// The rendezvous of a collective job: a small key-value store that rank 0 serves on its
// entry of PADDLE_TRAINER_ENDPOINTS while the ranks set up their collective transport.
// Every rank publishes what the others need to reach it (Gloo's per-pair addresses) and
// reads theirs; for NCCL, rank 0 publishes the unique id (as Paddle's gen_nccl_id hands it
// out over RPC). Messages: StoreSet / StoreGet (schemas/collective.fbs).
//
// Bounds (it listens on the network): keys up to 1 KiB, values up to 1 MiB, at most 65536
// keys, and all keys and values together up to a total budget (fleetps.collective.
// store_budget_bytes); a request past them is InvalidArgument naming the peer (and, for the
// budget, the option). A key may be set again (the latest
// wins; its old bytes are given back). With an auth key, a peer must prove it holds the
// cluster's secret (common/net/auth.h) before anything else is served; one that does not is
// answered PermissionDenied and closed. The store serves set-up only: its owner destroys it
// once the group has formed (communicator.h), so the port is closed for the rest of the job.
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
  static constexpr uint64_t kMinBudgetBytes = 64u << 10;

  // The total budget a group of `ranks` needs, with margin (CollectiveOptions::
  // store_budget_bytes 0): Gloo stores about 122 bytes per pair of ranks (measured: 2 ranks
  // 322 bytes, 8 ranks 7816), NCCL one 128-byte id; 64 KiB + 256 x ranks^2 bytes (8 ranks:
  // 80 KiB; 64 ranks: 1.06 MiB; 256 ranks: 16.06 MiB).
  static uint64_t BudgetFor(size_t ranks) { return kMinBudgetBytes + 256ull * ranks * ranks; }

  // Listens on host:port (port 0: any free port). With auth_key, peers must authenticate;
  // with tls (it must hold a certificate), every connection is TLS. `budget_bytes`: keys
  // plus values held at once, at most.
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(const std::string& host, uint16_t port,
                                                           std::shared_ptr<const net::AuthKey> auth_key,
                                                           std::shared_ptr<net::TlsContext> tls = nullptr,
                                                           uint64_t budget_bytes = kMinBudgetBytes);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;
  uint64_t stored_bytes() const;  // keys plus values held now

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
