// The pserver's /metrics and health probes while a shard lane is busy (a save, a load): the
// probes are answered while the lane is blocked, and a scrape past its deadline answers
// with the table series of the last complete collection, marked stale.
#include "server/app/server_metrics.h"

#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "common/executor.h"
#include "server/service/ps_service.h"
#include "server/table/table_set.h"
#include "test/support/http.h"

namespace fleetps::server {
namespace {

using namespace std::chrono_literals;

// The value of the series `name` as printed, -1 when absent.
double Value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// One sparse table `emb` (dim 4, one shard) on one shard lane, holding 3 rows.
struct Service {
  config::ServerOptions options;
  std::unique_ptr<TableSet> tables;
  ExecutorPool executors{1};
  std::unique_ptr<PsService> service;

  Service() {
    options.endpoints = {{"127.0.0.1", 0}};
    options.shard_threads = 1;
    TableOptions t;
    t.id = 0;
    t.name = "emb";
    t.kind = TableKind::kSparse;
    t.dim = 4;
    t.shards = 1;
    options.tables = {t};
    auto made = TableSet::Create(options);
    REQUIRE(made.ok());
    tables = std::move(*made);
    service = std::make_unique<PsService>(options, *tables, executors, [](const std::string&) {});
    const uint64_t keys[] = {1, 2, 3};
    const uint32_t idx[] = {0, 1, 2};
    const std::vector<float> grads(12, 0.5f);
    REQUIRE(tables->sparse(0)->PushShard(0, keys, idx, 3, grads.data()).ok());  // before any lane task
  }
  ~Service() { executors.Stop(); }
};

const std::string kRows = "fleetps_table_rows{id=\"0\",table=\"emb\",tier=\"memory\"}";

TEST_CASE("/healthz and /readyz answer while a scrape waits for a blocked shard lane") {
  Service s;
  ServerMetrics metrics(0, "127.0.0.1:0", /*scrape_timeout=*/20s);  // the scrape waits as long as the lane
  metrics.SetSources({s.service.get(), nullptr});
  net::HttpEndpointOptions http;
  REQUIRE(metrics
              .Serve(
                  http, [] { return true; }, [] { return std::string(); })
              .ok());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  s.executors.Post(0, [released] { released.wait(); });  // the lane is busy (a save)
  auto scrape = std::async(std::launch::async, [&] { return testing::HttpGet(metrics.port(), "/metrics"); });
  std::this_thread::sleep_for(200ms);  // lets the scrape reach the lane (sooner only weakens the check below)
  const auto health = testing::HttpGet(metrics.port(), "/healthz");
  const auto ready = testing::HttpGet(metrics.port(), "/readyz");
  const bool scrape_waiting = scrape.wait_for(0s) == std::future_status::timeout;
  release.set_value();
  CHECK(health == std::make_pair(200, std::string("ok\n")));
  CHECK(ready == std::make_pair(200, std::string("ready\n")));
  CHECK(scrape_waiting);  // the probes did not wait for it
  auto [code, text] = scrape.get();
  CHECK(code == 200);
  CHECK(Value(text, kRows) == 3);
  CHECK(Value(text, "fleetps_table_stats_stale") == 0);
  metrics.SetSources({});
  metrics.StopServing();
}

TEST_CASE("A scrape past its deadline keeps the last complete table series and says they are stale") {
  Service s;
  ServerMetrics metrics(0, "127.0.0.1:0", /*scrape_timeout=*/100ms);
  metrics.SetSources({s.service.get(), nullptr});
  const std::string fresh = metrics.Scrape();
  CHECK(Value(fresh, kRows) == 3);
  CHECK(Value(fresh, "fleetps_table_stats_stale") == 0);
  CHECK(Value(fresh, "fleetps_table_stats_age_seconds") == 0);

  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  s.executors.Post(0, [released] { released.wait(); });
  const std::string stale = metrics.Scrape();  // returns at the deadline, the lane still blocked
  release.set_value();
  CHECK(Value(stale, kRows) == 3);  // not the 0 of a lane that did not answer
  CHECK(Value(stale, "fleetps_table_stats_stale") == 1);
  CHECK(Value(stale, "fleetps_table_stats_age_seconds") > 0);

  s.executors.Stop();  // the lane ran what was queued
  metrics.SetSources({});
}

}  // namespace
}  // namespace fleetps::server
