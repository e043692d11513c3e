// data_bench: how fast the data readers turn text lines into training batches — the host
// work that feeds every trainer (and, in GPU-PS and heter mode, the devices). Each thread
// runs its own FileReader over every given file, parsing lines with the job's format and
// appending the examples to a batch of the job's batch size, as QueueDataset's readers do.
// Prints a markdown table: examples/s and MB/s for 1..N threads, and the cores the readers
// need for a target rate.
//   data_bench --config configs/ctr_dnn.yaml --data DIR_OR_FILE [--threads 1,2] [--repeat 3]
//              [--target 1000000]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config/trainer_config.h"
#include "trainer/data/batch.h"
#include "trainer/data/file_list.h"
#include "trainer/data/file_reader.h"
#include "trainer/data/line_format.h"

namespace fleetps {
namespace {

int Fail(const Status& status) {
  std::fprintf(stderr, "data_bench: %s\n", status.ToString().c_str());
  return 1;
}

struct Result {
  uint64_t examples = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// `threads` readers, each reading every file `repeat` times.
StatusOr<Result> Run(const config::TrainerOptions& job, const std::vector<std::string>& files, uint32_t threads,
                     uint32_t repeat) {
  const auto format = data::MakeLineFormat(job.data);
  uint64_t file_bytes = 0;
  for (const auto& f : files) file_bytes += std::filesystem::file_size(f);
  std::vector<Status> errors(threads);
  std::atomic<uint64_t> examples{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      data::ReadProgress progress;
      data::FileReader reader(*format, /*skip_bad_lines=*/false, &progress);
      data::Batch batch(job.data.dense_dim, job.data.sparse_slots.size(), job.data.num_labels());
      uint64_t mine = 0;
      auto sink = [&](const data::Example& e) {
        batch.Append(e);
        if (batch.size() == job.data.batch_size) batch.Clear();
        ++mine;
        return Status::OK();
      };
      for (uint32_t r = 0; r < repeat && errors[t].ok(); ++r) {
        for (const auto& f : files) {
          errors[t] = reader.ReadFile(f, sink);
          if (!errors[t].ok()) break;
        }
      }
      examples += mine;
    });
  }
  for (auto& th : pool) th.join();
  for (const auto& e : errors) RETURN_IF_ERROR(e);
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.examples = examples;
  r.bytes = file_bytes * threads * repeat;
  return r;
}

}  // namespace
}  // namespace fleetps

int main(int argc, char** argv) {
  using namespace fleetps;
  std::string config_path = "configs/ctr_dnn.yaml", data_path;
  std::vector<uint32_t> thread_counts = {1, 2};
  uint32_t repeat = 3;
  double target = 1e6;
  CLI::App cli{"data reader throughput: lines parsed into batches per second"};
  cli.add_option("-c,--config", config_path, "job YAML: its runner/data keys give the format, slots and batch size");
  cli.add_option("--data", data_path, "a data file, or a folder of them")->required();
  cli.add_option("--threads", thread_counts, "reader thread counts to measure")->delimiter(',');
  cli.add_option("--repeat", repeat, "times each thread reads the files")->check(CLI::PositiveNumber);
  cli.add_option("--target", target, "examples/s to size the reader cores for")->check(CLI::PositiveNumber);
  CLI11_PARSE(cli, argc, argv);

  auto job = config::LoadTrainerYaml(config_path);
  if (!job.ok()) return Fail(job.status());
  auto files = data::ExpandFileList({data_path});
  if (!files.ok()) return Fail(files.status());
  if (files->empty()) return Fail(Status::InvalidArgument("no data files under " + data_path));

  const std::string format_name(config::DataFormatName(job->data.format));
  std::printf("data_bench: %s (%s), %zu file(s) under %s, batch %u, each thread reads them %u time(s)\n\n",
              config_path.c_str(), format_name.c_str(), files->size(), data_path.c_str(), job->data.batch_size, repeat);
  std::printf(
      "| reader threads | examples/s | per thread | MB/s | us per example per thread |\n|---|---|---|---|---|\n");
  double best_per_thread = 0;
  for (uint32_t threads : thread_counts) {
    auto r = Run(*job, *files, threads, repeat);
    if (!r.ok()) return Fail(r.status());
    const double rate = static_cast<double>(r->examples) / r->seconds;
    best_per_thread = std::max(best_per_thread, rate / threads);
    std::printf("| %u | %.0f | %.0f | %.1f | %.2f |\n", threads, rate, rate / threads,
                static_cast<double>(r->bytes) / r->seconds / 1e6, 1e6 * threads / rate);
  }
  std::printf("\n%.0f examples/s need %.1f reader cores at the best per-thread rate above.\n", target,
              target / best_per_thread);
  return 0;
}
