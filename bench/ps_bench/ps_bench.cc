// ps_bench: pull/push throughput against running pservers, and save/load speed.
//
//   ps_bench --servers 127.0.0.1:8500[,127.0.0.1:8501] [--dims 1,8,64] [--batches 1000,100000]
//            [--inflight 1,8] [--keys 1000000] [--seconds 2] [--wire-mbps 1700]
//            [--save-dir DIR] [--fill-only | --skip-fill] [--fresh-keys]
//
// The servers must serve sparse tables with ids equal to the dims measured (see
// bench/ps_bench/pserver_bench.yaml; bench/run_ps_bench.sh starts them). Each cell
// first fills the key space, then pulls or pushes batches of random keys drawn
// uniformly from it, keeping `inflight` requests outstanding, for `seconds`.
// MB/s counts payload bytes moved (8 bytes per key + 4 per float); "wire" is that
// divided by the loopback TCP bandwidth given with --wire-mbps (iperf3). The "on disk"
// column is the share of the table's rows held on the servers' RocksDB tier when the cell
// starts (tables with memory_budget_bytes; see bench/run_storage_bench.sh).
//
// With --save-dir, the servers then save every table there (mode 0, checkpoint) and load it
// back; rows/s and MB/s (checkpoint bytes) are printed for both. --fill-only fills the key
// space and skips the pull/push cells (for a save/load or memory measurement).

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>

#include "common/net/endpoint.h"
#include "common/net/tls.h"
#include "trainer/client/ps_client.h"

namespace {

using Clock = std::chrono::steady_clock;
using fleetps::Status;
using fleetps::trainer::PsClient;

struct Cell {
  double keys_per_s = 0;
  double mb_per_s = 0;
};

// Runs batches of `op` with `inflight` outstanding for `seconds`.
template <typename Op>
Cell Measure(size_t batch, uint32_t dim, int inflight, double seconds, Op op) {
  std::deque<std::future<Status>> flight;
  uint64_t done_keys = 0;
  const auto start = Clock::now();
  const auto stop = start + std::chrono::duration<double>(seconds);
  int slot = 0;
  while (Clock::now() < stop) {
    flight.push_back(op(slot));
    slot = (slot + 1) % inflight;
    if (static_cast<int>(flight.size()) >= inflight) {
      Status st = flight.front().get();
      flight.pop_front();
      if (!st.ok()) {
        std::fprintf(stderr, "ps_bench: %s\n", st.ToString().c_str());
        std::exit(1);
      }
      done_keys += batch;
    }
  }
  for (auto& f : flight) {
    if (!f.get().ok()) std::exit(1);
    done_keys += batch;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  Cell c;
  c.keys_per_s = done_keys / elapsed;
  c.mb_per_s = c.keys_per_s * (8.0 + 4.0 * dim) / 1e6;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"fleetps pull/push throughput benchmark"};
  std::string servers;
  std::vector<uint32_t> dims{1, 8, 64};
  std::vector<size_t> batches{1000, 100000};
  std::vector<int> inflights{1, 8};
  uint64_t key_space = 1000000;
  double seconds = 2.0;
  double wire_mbps = 0;
  std::string label;
  std::string save_dir;
  bool fill_only = false;
  bool skip_fill = false;
  bool fresh_keys = false;
  cli.add_option("--servers", servers, "pserver endpoints, comma separated")->required();
  cli.add_option("--dims", dims, "table ids = dims to measure")->delimiter(',');
  cli.add_option("--batches", batches, "keys per batch")->delimiter(',');
  cli.add_option("--inflight", inflights, "requests kept in flight")->delimiter(',');
  cli.add_option("--keys", key_space, "key space (filled before measuring)");
  cli.add_option("--seconds", seconds, "seconds per measurement");
  cli.add_option("--wire-mbps", wire_mbps, "loopback TCP bandwidth in MB/s (iperf3), for the ratio column");
  cli.add_option("--label", label, "text printed in the first column (e.g. '2 servers')");
  std::string tls_ca;
  cli.add_option("--tls-ca", tls_ca, "connect over TLS, verifying the servers against this CA file (server.tls)");
  cli.add_option("--save-dir", save_dir, "after the cells, save every table here and load it back, timed");
  cli.add_flag("--fill-only", fill_only, "fill the key space, skip the pull/push cells");
  cli.add_flag("--skip-fill", skip_fill, "the key space is already filled (by an earlier --fill-only run)");
  cli.add_flag("--fresh-keys", fresh_keys,
               "draw new random keys for every request (default: each in-flight slot reuses its batch, "
               "so a cell touches only inflight * batch distinct keys)");
  CLI11_PARSE(cli, argc, argv);

  auto endpoints = fleetps::net::ParseEndpointList(servers);
  if (!endpoints.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", endpoints.status().ToString().c_str());
    return 2;
  }
  fleetps::trainer::PsClientOptions options;
  options.servers = *endpoints;
  options.io_threads = 2;
  if (!tls_ca.empty()) {
    auto tls = fleetps::net::TlsContext::Load({"", "", tls_ca});
    if (!tls.ok()) {
      std::fprintf(stderr, "ps_bench: %s\n", tls.status().ToString().c_str());
      return 2;
    }
    options.rpc.tls = *tls;
  }
  auto client = PsClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", client.status().ToString().c_str());
    return 2;
  }
  PsClient& ps = **client;
  if (label.empty()) label = std::to_string(endpoints->size()) + " server(s)";

  // Share of a table's rows on the RocksDB tier, from the servers' statistics.
  auto disk_share = [&](uint32_t table_id) {
    auto stats = ps.Stats();
    if (!stats.ok()) return 0.0;
    for (const auto& t : *stats) {
      if (t.id == table_id && t.rows > 0) return static_cast<double>(t.disk_rows) / static_cast<double>(t.rows);
    }
    return 0.0;
  };
  if (!fill_only) {
    std::printf("| setup | dim | batch | inflight | op | keys/s | MB/s | MB/s / wire | on disk |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
  }
  std::mt19937_64 rng(1);
  for (uint32_t dim : dims) {
    auto info = ps.Table(dim);
    if (!info.ok() || info->dense || info->dim != dim) {
      std::fprintf(stderr, "ps_bench: the servers need a sparse table with id %u and dim %u\n", dim, dim);
      return 2;
    }
    // Fill the key space so pulls hit stored rows.
    if (!skip_fill) {
      const auto fill_start = Clock::now();
      const size_t chunk = 100000;
      std::vector<uint64_t> keys(chunk);
      std::vector<float> grads(chunk * dim, 0.001f);
      for (uint64_t b = 0; b < key_space; b += chunk) {
        const size_t n = std::min<uint64_t>(chunk, key_space - b);
        for (size_t i = 0; i < n; ++i) keys[i] = b + i;
        Status st = ps.PushSparse(dim, {keys.data(), n}, {grads.data(), n * dim}).get();
        if (!st.ok()) {
          std::fprintf(stderr, "ps_bench: fill: %s\n", st.ToString().c_str());
          return 1;
        }
      }
      const double fill_s = std::chrono::duration<double>(Clock::now() - fill_start).count();
      std::fprintf(stderr, "ps_bench: filled %llu keys of table %u in %.1f s (%.2fM keys/s), %.1f%% on disk\n",
                   static_cast<unsigned long long>(key_space), dim, fill_s, key_space / fill_s / 1e6,
                   100.0 * disk_share(dim));
    }
    if (fill_only) continue;
    for (size_t batch : batches) {
      for (int inflight : inflights) {
        // One key/value buffer per in-flight slot; keys drawn uniformly.
        std::vector<std::vector<uint64_t>> keys(inflight, std::vector<uint64_t>(batch));
        for (auto& k : keys) {
          for (auto& x : k) x = rng() % key_space;
        }
        std::vector<std::vector<float>> values(inflight, std::vector<float>(batch * dim));
        std::vector<float> grads(batch * dim, 0.001f);
        // A slot is reused only after its previous request completed (Measure), so its keys
        // can be redrawn then.
        auto redraw = [&](int slot) {
          if (fresh_keys) {
            for (auto& x : keys[slot]) x = rng() % key_space;
          }
        };
        Cell pull = Measure(batch, dim, inflight, seconds, [&](int slot) {
          redraw(slot);
          return ps.PullSparse(dim, keys[slot], values[slot].data());
        });
        Cell push = Measure(batch, dim, inflight, seconds, [&](int slot) {
          redraw(slot);
          return ps.PushSparse(dim, keys[slot], grads);
        });
        const double on_disk = disk_share(dim);
        for (auto [op, cell] : {std::pair{"pull", pull}, std::pair{"push", push}}) {
          char ratio[32] = "n/a";
          if (wire_mbps > 0) std::snprintf(ratio, sizeof(ratio), "%.3f", cell.mb_per_s / wire_mbps);
          std::printf("| %s | %u | %zu | %d | %s | %.2fM | %.1f | %s | %.0f%% |\n", label.c_str(), dim, batch, inflight,
                      op, cell.keys_per_s / 1e6, cell.mb_per_s, ratio, 100.0 * on_disk);
          std::fflush(stdout);
        }
      }
    }
  }
  if (!save_dir.empty()) {
    std::printf("\n| setup | op | rows | seconds | rows/s | MB/s |\n|---|---|---|---|---|---|\n");
    auto start = Clock::now();
    auto saved = ps.Save(save_dir, fleetps::trainer::kSaveCheckpoint);
    const double save_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!saved.ok()) {
      std::fprintf(stderr, "ps_bench: save: %s\n", saved.status().ToString().c_str());
      return 1;
    }
    std::printf("| %s | save (mode 0) | %llu | %.2f | %.2fM | %.1f |\n", label.c_str(),
                static_cast<unsigned long long>(saved->rows), save_s, saved->rows / save_s / 1e6,
                saved->bytes / save_s / 1e6);
    start = Clock::now();
    auto loaded = ps.Load(save_dir);
    const double load_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!loaded.ok()) {
      std::fprintf(stderr, "ps_bench: load: %s\n", loaded.status().ToString().c_str());
      return 1;
    }
    std::printf("| %s | load | %llu | %.2f | %.2fM | %.1f |\n", label.c_str(),
                static_cast<unsigned long long>(loaded->rows), load_s, loaded->rows / load_s / 1e6,
                saved->bytes / load_s / 1e6);
    std::fflush(stdout);
  }
  return 0;
}
