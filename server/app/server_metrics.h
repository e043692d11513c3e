#pragma once
// The pserver's Prometheus metrics and its HTTP endpoint (/metrics, /healthz, /readyz),
// wired by the App (docs/OPERATIONS.md lists every series):
//  - per request type: count, errors, payload bytes in and out, latency histogram (from
//    the RpcServer's on_reply hook, on the answering thread, lock-free after first use);
//  - per table, refreshed at each scrape on the shards' owner lanes: rows in memory and on
//    the RocksDB tier, memory bytes, RocksDB-tier bytes, keys pulled and pushed;
//  - checkpoints: saves and loads with their rows and bytes, the latest save's and load's
//    duration, bytes and rows (every duration is also in the Save and Load request
//    latencies), the start-up load's duration;
//  - gradient values dropped under nonfinite_gradients: skip;
//  - connections and requests in flight.
// Thread-safety: OnReply from any thread; the HTTP handler runs on the endpoint's thread.

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metrics/registry.h"
#include "common/net/http_endpoint.h"
#include "common/net/rpc_server.h"
#include "common/status.h"

namespace fleetps::server {

class PsService;

class ServerMetrics {
 public:
  // What a scrape reads; set by the App once the service and RPC server exist (before
  // that, and after Shutdown begins, a scrape reports only the request series).
  struct Sources {
    PsService* service = nullptr;
    net::RpcServer* rpc = nullptr;
  };

  explicit ServerMetrics(uint32_t server_index, const std::string& endpoint);
  ~ServerMetrics();

  void OnReply(const net::ReplyInfo& reply);
  void SetStartupLoad(double seconds, uint64_t rows);

  // Starts the HTTP endpoint on host:port. `healthy` answers /healthz (the process makes
  // progress), `ready` /readyz (empty string: ready; else why not).
  Status Serve(const std::string& host, uint16_t port, std::function<bool()> healthy,
               std::function<std::string()> ready);
  uint16_t port() const;
  void SetSources(Sources sources);  // {} to detach before teardown
  void StopServing();

  // The /metrics body (also for tests).
  std::string Scrape();

 private:
  struct TypeSeries {
    metrics::Counter requests, errors, bytes_in, bytes_out;
    metrics::Histogram latency;
  };
  TypeSeries* Series(uint16_t type);
  void Refresh();

  metrics::Registry registry_;
  std::mutex series_mu_;  // guards series_ (creation only)
  std::vector<std::unique_ptr<TypeSeries>> series_;
  std::array<std::atomic<TypeSeries*>, 512> by_type_{};
  std::mutex sources_mu_;  // guards sources_ and the per-table counters' previous values
  Sources sources_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> last_keys_;  // table -> (pulled, pushed) already counted
  std::map<std::string, uint64_t> last_checkpoint_;                 // counter name -> value already counted
  std::unique_ptr<net::HttpEndpoint> http_;
};

}  // namespace fleetps::server
