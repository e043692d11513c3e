#include "server/app/server_metrics.h"

#include "common/net/frame.h"
#include "fleetps/config.h"
#include "schemas/ps_generated.h"
#include "server/service/ps_service.h"

namespace fleetps::server {

namespace {

// Latency buckets: 50 us x 4^k, up to ~52 s (a Save or Load of a big table).
const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = metrics::ExponentialBuckets(50e-6, 4, 11);
  return kBuckets;
}

}  // namespace

ServerMetrics::ServerMetrics(uint32_t server_index, const std::string& endpoint,
                             std::chrono::milliseconds scrape_timeout)
    : scrape_timeout_(scrape_timeout), last_complete_(std::chrono::steady_clock::now()) {
  registry_
      .GetGauge("fleetps_server_info", "This pserver: its index, endpoint and fleetps version (value 1)",
                {{"index", std::to_string(server_index)}, {"endpoint", endpoint}, {"version", FLEETPS_VERSION}})
      .Set(1);
}

ServerMetrics::~ServerMetrics() { StopServing(); }

ServerMetrics::TypeSeries* ServerMetrics::Series(uint16_t type) {
  const size_t slot = type < by_type_.size() ? type : by_type_.size() - 1;  // the last slot: "other"
  if (TypeSeries* s = by_type_[slot].load(std::memory_order_acquire)) return s;
  MutexLock lock(series_mu_);
  if (TypeSeries* s = by_type_[slot].load(std::memory_order_acquire)) return s;
  const std::string name = slot == by_type_.size() - 1 ? "other" : net::MessageTypeName(type);
  auto s = std::make_unique<TypeSeries>();
  s->requests = registry_.GetCounter("fleetps_requests_total", "Requests answered, by request type", {{"type", name}});
  s->errors = registry_.GetCounter("fleetps_request_errors_total", "Requests answered with an error, by request type",
                                   {{"type", name}});
  s->bytes_in = registry_.GetCounter("fleetps_request_bytes_total", "Payload bytes of requests and replies",
                                     {{"type", name}, {"direction", "in"}});
  s->bytes_out = registry_.GetCounter("fleetps_request_bytes_total", "Payload bytes of requests and replies",
                                      {{"type", name}, {"direction", "out"}});
  s->latency = registry_.GetHistogram("fleetps_request_duration_seconds",
                                      "From a request's arrival to its answer, by request type", {{"type", name}},
                                      LatencyBuckets());
  TypeSeries* raw = s.get();
  series_.push_back(std::move(s));
  by_type_[slot].store(raw, std::memory_order_release);
  return raw;
}

void ServerMetrics::OnReply(const net::ReplyInfo& r) {
  TypeSeries* s = Series(r.request_type);
  s->requests.Increment();
  if (r.reply_type == static_cast<uint16_t>(wire::MessageType::ErrorReply)) s->errors.Increment();
  s->bytes_in.Increment(static_cast<double>(r.request_bytes));
  s->bytes_out.Increment(static_cast<double>(r.reply_bytes));
  s->latency.Observe(std::chrono::duration<double>(r.latency).count());
}

void ServerMetrics::SetStartupLoad(double seconds, uint64_t rows) {
  registry_.GetGauge("fleetps_checkpoint_startup_load_seconds", "Duration of the --load / --resume load at start-up")
      .Set(seconds);
  registry_.GetGauge("fleetps_checkpoint_startup_load_rows", "Sparse rows this server took from it").Set(rows);
}

void ServerMetrics::SetSources(Sources sources) {
  MutexLock lock(sources_mu_);
  sources_ = sources;
}

void ServerMetrics::Refresh() {
  MutexLock lock(sources_mu_);
  if (sources_.rpc != nullptr) {
    registry_.GetGauge("fleetps_connections", "Open client connections").Set(sources_.rpc->connections());
    registry_.GetGauge("fleetps_requests_in_flight", "Requests received and not yet answered")
        .Set(sources_.rpc->in_flight());
  }
  if (sources_.service == nullptr) return;
  RefreshTableSeries();
  RefreshCheckpointSeries();
}

void ServerMetrics::RefreshTableSeries() {
  // CollectTableStats returns before its timeout only when every lane answered; later, the
  // lanes that had not count zero: keep the last complete values instead, marked stale.
  const auto started = std::chrono::steady_clock::now();
  const std::vector<TableTotals> tables = sources_.service->CollectTableStats(scrape_timeout_);
  const auto now = std::chrono::steady_clock::now();
  const bool complete = now - started < scrape_timeout_;
  if (complete) last_complete_ = now;
  registry_
      .GetGauge("fleetps_table_stats_stale",
                "1 when a shard lane was busy past the scrape deadline: the table series are those of the last "
                "complete collection")
      .Set(complete ? 0 : 1);
  registry_
      .GetGauge("fleetps_table_stats_age_seconds",
                "Age of the table series (0: collected by this scrape; since start-up when never complete)")
      .Set(complete ? 0.0 : std::chrono::duration<double>(now - last_complete_).count());
  for (const TableTotals& t : complete ? tables : std::vector<TableTotals>{}) {
    const metrics::Labels table = {{"table", t.name}, {"id", std::to_string(t.id)}};
    auto with = [&](const char* key, const char* value) {
      metrics::Labels l = table;
      l[key] = value;
      return l;
    };
    registry_
        .GetGauge("fleetps_table_rows", "Rows of a table on this server, by tier (memory, rocksdb)",
                  with("tier", "memory"))
        .Set(static_cast<double>(t.rows - t.disk_rows));
    registry_
        .GetGauge("fleetps_table_rows", "Rows of a table on this server, by tier (memory, rocksdb)",
                  with("tier", "rocksdb"))
        .Set(static_cast<double>(t.disk_rows));
    registry_.GetGauge("fleetps_table_memory_bytes", "RAM held by a table's rows on this server", table)
        .Set(static_cast<double>(t.memory_bytes));
    registry_
        .GetGauge("fleetps_table_rocksdb_bytes",
                  "Bytes of a table's rows held only on the RocksDB tier on this server, as written "
                  "(key + encoded row each, before RocksDB's compression)",
                  table)
        .Set(static_cast<double>(t.disk_bytes));
    auto& [pulled, pushed] = last_keys_[t.name];
    registry_.GetCounter("fleetps_table_keys_pulled_total", "Keys pulled from a table (each occurrence)", table)
        .Increment(static_cast<double>(t.pulls - std::min(pulled, t.pulls)));
    registry_.GetCounter("fleetps_table_keys_pushed_total", "Keys pushed to a table (each occurrence)", table)
        .Increment(static_cast<double>(t.pushes - std::min(pushed, t.pushes)));
    pulled = std::max(pulled, t.pulls);
    pushed = std::max(pushed, t.pushes);
  }
}

void ServerMetrics::RefreshCheckpointSeries() {
  const CheckpointCounters& c = sources_.service->checkpoint_counters();
  auto counter = [&](const char* name, const char* help, uint64_t now) REQUIRES(sources_mu_) {
    uint64_t& last = last_checkpoint_[name];
    registry_.GetCounter(name, help).Increment(static_cast<double>(now - std::min(last, now)));
    last = std::max(last, now);
  };
  counter("fleetps_checkpoint_saves_total",
          "This server's parts of saves written (durations: "
          "fleetps_request_duration_seconds{type=\"Save\"})",
          c.saves.load());
  counter("fleetps_checkpoint_save_failures_total", "Saves of this server's part that failed", c.save_failures.load());
  counter("fleetps_checkpoint_saved_rows_total", "Sparse rows written by saves", c.saved_rows.load());
  counter("fleetps_checkpoint_saved_bytes_total", "File bytes written by saves", c.saved_bytes.load());
  counter("fleetps_checkpoint_loads_total",
          "Loads requested over the network (durations: "
          "fleetps_request_duration_seconds{type=\"Load\"})",
          c.loads.load());
  counter("fleetps_checkpoint_load_failures_total", "Loads that failed", c.load_failures.load());
  counter("fleetps_checkpoint_loaded_rows_total", "Sparse rows taken by loads", c.loaded_rows.load());
  auto gauge = [&](const char* name, const char* help, double value) { registry_.GetGauge(name, help).Set(value); };
  gauge("fleetps_checkpoint_last_save_seconds", "Duration of this server's latest successful save of its part",
        c.last_save_seconds.load());
  gauge("fleetps_checkpoint_last_save_bytes", "File bytes of this server's latest successful save of its part",
        static_cast<double>(c.last_save_bytes.load()));
  gauge("fleetps_checkpoint_last_save_rows", "Sparse rows of this server's latest successful save of its part",
        static_cast<double>(c.last_save_rows.load()));
  gauge("fleetps_checkpoint_last_load_seconds", "Duration of this server's latest successful load over the network",
        c.last_load_seconds.load());
  gauge("fleetps_checkpoint_last_load_rows", "Sparse rows taken by this server's latest successful load",
        static_cast<double>(c.last_load_rows.load()));
  counter("fleetps_nonfinite_values_skipped_total",
          "Gradient values with NaN/Inf dropped under server.nonfinite_gradients: skip (sparse keys and dense "
          "floats)",
          sources_.service->nonfinite_skipped());
}

std::string ServerMetrics::Scrape() {
  Refresh();
  return registry_.Serialize();
}

Status ServerMetrics::Serve(net::HttpEndpointOptions http, std::function<bool()> healthy,
                            std::function<std::string()> ready) {
  http.blocking_paths = {"/metrics"};
  http_ = std::make_unique<net::HttpEndpoint>(
      std::move(http), [this, healthy = std::move(healthy), ready = std::move(ready)](const std::string& path) {
        if (path == "/metrics") return net::HttpResponse{200, metrics::kTextFormatContentType, Scrape()};
        if (path == "/healthz") {
          return healthy() ? net::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}
                           : net::HttpResponse{503, "text/plain; charset=utf-8", "io threads not responding\n"};
        }
        if (path == "/readyz") {
          const std::string why = ready();
          return why.empty() ? net::HttpResponse{200, "text/plain; charset=utf-8", "ready\n"}
                             : net::HttpResponse{503, "text/plain; charset=utf-8", why + "\n"};
        }
        return net::HttpResponse{404, "text/plain; charset=utf-8",
                                 "not found: " + path + " (try /metrics, /healthz, /readyz)\n"};
      });
  return http_->Start();
}

uint16_t ServerMetrics::port() const { return http_ ? http_->port() : 0; }

void ServerMetrics::StopServing() {
  if (http_) http_->Stop();
}

}  // namespace fleetps::server
