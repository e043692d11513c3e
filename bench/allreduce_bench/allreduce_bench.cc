// allreduce_bench: the Gloo communicator's allreduce on this machine, or a local group's.
//
//   allreduce_bench [--ranks 2] [--min-bytes 1024] [--max-bytes 67108864] [--seconds 1] [--local]
//
// Every rank is a thread of this process with its own communicator (TCP over loopback,
// set up through the RPC rendezvous, as separate processes would be). For each size
// (powers of 4 from min to max bytes of floats) it runs allreduces back to back for about
// --seconds and prints the mean time and the bus bandwidth, 2 (n-1)/n x bytes / time (the
// bytes each rank sends and receives in a ring allreduce, as nccl-tests report it), to
// compare with the loopback TCP bandwidth (iperf3; bench/allreduce_bench/run.sh).
// With --local the ranks are the members of one local group instead (threads of one process
// summing in memory, trainer/collective/local_group.h: GPU-PS's workers of a node); the bus
// figure then only makes the sizes comparable.

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/free_port.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/local_group.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fleetps;

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"allreduce_bench: Gloo (or local group) allreduce time and bus bandwidth"};
  uint32_t ranks = 2;
  size_t min_bytes = 1024, max_bytes = 64u << 20;
  double seconds = 1;
  bool local = false;
  cli.add_option("--ranks", ranks, "ranks (threads)")->check(CLI::Range(2, 64));
  cli.add_option("--min-bytes", min_bytes, "smallest message");
  cli.add_option("--max-bytes", max_bytes, "largest message");
  cli.add_option("--seconds", seconds, "per size");
  cli.add_flag("--local", local, "the ranks as one local group (in memory) instead of Gloo ranks");
  CLI11_PARSE(cli, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  std::vector<net::Endpoint> endpoints;
  std::vector<std::unique_ptr<trainer::collective::Communicator>> comms(ranks);
  std::vector<Status> errors(ranks);
  if (local) {
    comms = trainer::collective::MakeLocalGroup(ranks, nullptr, std::chrono::seconds(60));
  } else {
    for (uint32_t r = 0; r < ranks; ++r) endpoints.push_back({"127.0.0.1", bench::FreeLoopbackPort()});
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        trainer::collective::CollectiveOptions o;
        o.rank = r;
        o.endpoints = endpoints;
        o.timeout = std::chrono::seconds(60);
        auto c = trainer::collective::MakeGlooCommunicator(o);
        if (c.ok()) comms[r] = std::move(*c);
        errors[r] = c.status();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (const auto& st : errors) {
    if (!st.ok()) {
      std::fprintf(stderr, "allreduce_bench: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  if (local) {
    std::printf("local group allreduce (sum of floats, in memory), %u members\n", ranks);
  } else {
    std::printf("Gloo allreduce (sum of floats), %u ranks on loopback\n", ranks);
  }
  std::printf("| bytes | iterations | mean ms | bus GB/s |\n|---|---|---|---|\n");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const size_t n = bytes / sizeof(float);
    // 10 warm-up calls, timed to size the measured run; every rank runs the same counts.
    std::vector<std::vector<float>> data(ranks, std::vector<float>(n, 1.0f));
    std::atomic<bool> failed{false};
    std::vector<double> elapsed(ranks);
    int iterations = 0;
    auto run = [&](uint32_t r, int count) {
      const auto t0 = Clock::now();
      for (int i = 0; i < count && !failed; ++i) {
        if (!comms[r]->AllreduceSum(data[r]).ok()) failed = true;
      }
      elapsed[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    };
    for (int phase = 0; phase < 2; ++phase) {
      const int count = phase == 0 ? 10 : iterations;
      std::vector<std::thread> threads;
      for (uint32_t r = 0; r < ranks; ++r) threads.emplace_back(run, r, count);
      for (auto& t : threads) t.join();
      if (failed) {
        std::fprintf(stderr, "allreduce_bench: allreduce failed at %zu bytes\n", bytes);
        return 1;
      }
      if (phase == 0) {
        iterations = std::max(1, std::min(10000, static_cast<int>(seconds * 10 / std::max(elapsed[0], 1e-6))));
      }
    }
    double worst = 0;
    for (double e : elapsed) worst = std::max(worst, e);
    const double per = worst / iterations;
    const double bus = 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes) / per / 1e9;
    std::printf("| %zu | %d | %.3f | %.2f |\n", bytes, iterations, per * 1e3, bus);
    std::fflush(stdout);
  }
  return 0;
}
