// ps_bench: pull/push throughput against running pservers.
//
//   ps_bench --servers 127.0.0.1:8500[,127.0.0.1:8501] [--dims 1,8,64] [--batches 1000,100000]
//            [--inflight 1,8] [--keys 1000000] [--seconds 2] [--wire-mbps 1700]
//
// The servers must serve sparse tables with ids equal to the dims measured (see
// bench/ps_bench/pserver_bench.yaml; bench/run_ps_bench.sh starts them). Each cell
// first fills the key space, then pulls or pushes batches of random keys drawn
// uniformly from it, keeping `inflight` requests outstanding, for `seconds`.
// MB/s counts payload bytes moved (8 bytes per key + 4 per float); "wire" is that
// divided by the loopback TCP bandwidth given with --wire-mbps (iperf3).

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>

#include "common/net/endpoint.h"
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
  cli.add_option("--servers", servers, "pserver endpoints, comma separated")->required();
  cli.add_option("--dims", dims, "table ids = dims to measure")->delimiter(',');
  cli.add_option("--batches", batches, "keys per batch")->delimiter(',');
  cli.add_option("--inflight", inflights, "requests kept in flight")->delimiter(',');
  cli.add_option("--keys", key_space, "key space (filled before measuring)");
  cli.add_option("--seconds", seconds, "seconds per measurement");
  cli.add_option("--wire-mbps", wire_mbps, "loopback TCP bandwidth in MB/s (iperf3), for the ratio column");
  cli.add_option("--label", label, "text printed in the first column (e.g. '2 servers')");
  CLI11_PARSE(cli, argc, argv);

  auto endpoints = fleetps::net::ParseEndpointList(servers);
  if (!endpoints.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", endpoints.status().ToString().c_str());
    return 2;
  }
  fleetps::trainer::PsClientOptions options;
  options.servers = *endpoints;
  options.io_threads = 2;
  auto client = PsClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", client.status().ToString().c_str());
    return 2;
  }
  PsClient& ps = **client;
  if (label.empty()) label = std::to_string(endpoints->size()) + " server(s)";

  std::printf("| setup | dim | batch | inflight | op | keys/s | MB/s | MB/s / wire |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(1);
  for (uint32_t dim : dims) {
    auto info = ps.Table(dim);
    if (!info.ok() || info->dense || info->dim != dim) {
      std::fprintf(stderr, "ps_bench: the servers need a sparse table with id %u and dim %u\n", dim, dim);
      return 2;
    }
    // Fill the key space so pulls hit stored rows.
    {
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
    }
    for (size_t batch : batches) {
      for (int inflight : inflights) {
        // One key/value buffer per in-flight slot; keys drawn uniformly.
        std::vector<std::vector<uint64_t>> keys(inflight, std::vector<uint64_t>(batch));
        for (auto& k : keys) {
          for (auto& x : k) x = rng() % key_space;
        }
        std::vector<std::vector<float>> values(inflight, std::vector<float>(batch * dim));
        std::vector<float> grads(batch * dim, 0.001f);
        Cell pull = Measure(batch, dim, inflight, seconds,
                            [&](int slot) { return ps.PullSparse(dim, keys[slot], values[slot].data()); });
        Cell push = Measure(batch, dim, inflight, seconds,
                            [&](int slot) { return ps.PushSparse(dim, keys[slot], grads); });
        for (auto [op, cell] : {std::pair{"pull", pull}, std::pair{"push", push}}) {
          char ratio[32] = "n/a";
          if (wire_mbps > 0) std::snprintf(ratio, sizeof(ratio), "%.3f", cell.mb_per_s / wire_mbps);
          std::printf("| %s | %u | %zu | %d | %s | %.2fM | %.1f | %s |\n", label.c_str(), dim, batch, inflight, op,
                      cell.keys_per_s / 1e6, cell.mb_per_s, ratio);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
