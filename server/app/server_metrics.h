#pragma once
// The pserver's Prometheus metrics and its HTTP endpoint (/metrics, /healthz, /readyz),
// wired by the App (docs/OPERATIONS.md lists every series):
//  - per request type: count, errors, payload bytes in and out, latency histogram (from
//    the RpcServer's on_reply hook, on the answering thread, lock-free after first use);
//  - per table, refreshed at each scrape on the shards' owner lanes: rows in memory and on
//    the RocksDB tier, memory bytes, RocksDB-tier bytes, keys pulled and pushed. A scrape
//    waits for the lanes at most scrape_timeout: when one is busy longer (a save, a load),
//    the table series keep the values of the last complete collection and
//    fleetps_table_stats_stale is 1 (fleetps_table_stats_age_seconds: how old they are);
//  - checkpoints: saves and loads with their rows and bytes, the latest save's and load's
//    duration, bytes and rows (every duration is also in the Save and Load request
//    latencies), the start-up load's duration;
//  - gradient values dropped under nonfinite_gradients: skip;
//  - connections and requests in flight.
// /healthz and /readyz are answered on the endpoint's io thread from the App's state, never
// behind a scrape (which runs on the endpoint's blocking thread) or shard work.
// Thread-safety: OnReply from any thread; the HTTP handlers run on the endpoint's threads.

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics/registry.h"
#include "common/mutex.h"
#include "common/net/http_endpoint.h"
#include "common/net/rpc_server.h"
#include "common/status.h"
#include "common/thread_annotations.h"

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

  static constexpr std::chrono::milliseconds kDefaultScrapeTimeout{2000};

  ServerMetrics(uint32_t server_index, const std::string& endpoint,
                std::chrono::milliseconds scrape_timeout = kDefaultScrapeTimeout);
  ~ServerMetrics();

  void OnReply(const net::ReplyInfo& reply);
  void SetStartupLoad(double seconds, uint64_t rows);

  // Starts the HTTP endpoint (`http`: address, limits; /metrics is made a blocking path).
  // `healthy` answers /healthz (the process makes progress), `ready` /readyz (empty
  // string: ready; else why not); both must answer without waiting for shard work.
  Status Serve(net::HttpEndpointOptions http, std::function<bool()> healthy, std::function<std::string()> ready);
  uint16_t port() const;
  void SetSources(Sources sources) EXCLUDES(sources_mu_);  // {} to detach before teardown
  void StopServing();

  // The /metrics body (also for tests).
  std::string Scrape();

 private:
  struct TypeSeries {
    metrics::Counter requests, errors, bytes_in, bytes_out;
    metrics::Histogram latency;
  };
  TypeSeries* Series(uint16_t type) EXCLUDES(series_mu_);
  void Refresh() EXCLUDES(sources_mu_);
  // The parts of Refresh(), called with sources_mu_ held and sources_.service set.
  void RefreshTableSeries() REQUIRES(sources_mu_);
  void RefreshCheckpointSeries() REQUIRES(sources_mu_);

  metrics::Registry registry_;
  Mutex series_mu_;  // guards series_ (creation only)
  std::vector<std::unique_ptr<TypeSeries>> series_ GUARDED_BY(series_mu_);
  std::array<std::atomic<TypeSeries*>, 512> by_type_{};
  Mutex sources_mu_;  // guards sources_ and the per-table counters' previous values
  Sources sources_ GUARDED_BY(sources_mu_);
  // table -> (pulled, pushed) already counted
  std::map<std::string, std::pair<uint64_t, uint64_t>> last_keys_ GUARDED_BY(sources_mu_);
  std::map<std::string, uint64_t> last_checkpoint_ GUARDED_BY(sources_mu_);  // counter name -> value already counted
  const std::chrono::milliseconds scrape_timeout_;
  std::chrono::steady_clock::time_point last_complete_ GUARDED_BY(sources_mu_) = {};  // of the table series
  std::unique_ptr<net::HttpEndpoint> http_;
};

}  // namespace fleetps::server
