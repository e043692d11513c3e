// QueueDataset: streaming passes with several reader and worker threads.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

#include <catch2/catch.hpp>

#include "trainer/data/queue_dataset.h"
#include "test/trainer/data/data_test_util.h"

namespace fleetps::data {
namespace {

struct PassResult {
  Status status;  // first error a worker saw (OK when none)
  int workers_with_error = 0;
  std::vector<uint64_t> keys;  // slot-0 id of every example received
  size_t batches = 0;
  size_t max_batch = 0;
  int ones = 0;
};

// Runs one pass with `workers` consumer threads.
PassResult RunPass(Dataset* dataset, int workers) {
  PassResult result;
  std::mutex mu;
  REQUIRE(dataset->StartPass().ok());
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      Batch batch;
      for (;;) {
        StatusOr<bool> next = dataset->NextBatch(&batch);
        std::lock_guard<std::mutex> lock(mu);
        if (!next.ok()) {
          if (result.status.ok()) result.status = next.status();
          ++result.workers_with_error;
          return;
        }
        if (!*next) return;
        testing::AppendKeys(batch, &result.keys);
        ++result.batches;
        result.max_batch = std::max(result.max_batch, batch.size());
        result.ones += static_cast<int>(std::count(batch.labels.begin(), batch.labels.end(), 1.0f));
      }
    });
  }
  for (auto& t : threads) t.join();
  dataset->EndPass();
  return result;
}

std::vector<uint64_t> SequentialIds(size_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_CASE("queue dataset yields every example exactly once, pass after pass", "[data][queue]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 12, 250);
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = 4;
  options.queue_capacity = 2;  // readers block on the full queue: exercises back-pressure
  QueueDataset dataset(options, files, 16);
  for (int pass = 0; pass < 3; ++pass) {
    PassResult result = RunPass(&dataset, 3);
    REQUIRE(result.status.ok());
    std::sort(result.keys.begin(), result.keys.end());
    CHECK(result.keys == SequentialIds(3000));
    CHECK(result.max_batch == 16);
    CHECK(result.ones == 1000);
    const ReadStats stats = dataset.stats();
    CHECK(stats.files == 12);
    CHECK(stats.examples == 3000);
    CHECK(stats.bad_lines == 0);
  }
}

TEST_CASE("queue dataset batches carry every label slot", "[data][queue][labels]") {
  testing::TempDir dir;
  config::DataOptions options = testing::TwoLabelOptions();
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 300, options);
  options.thread_num = 2;
  QueueDataset dataset(options, files, 32);
  REQUIRE(dataset.StartPass().ok());
  Batch batch;
  size_t rows = 0;
  double clicks = 0, conversions = 0;
  while (true) {
    StatusOr<bool> next = dataset.NextBatch(&batch);
    REQUIRE(next.ok());
    if (!*next) break;
    CHECK(batch.num_labels == 2);
    CHECK(batch.labels.size() == 2 * batch.size());
    CHECK(testing::HasNumberedLabels(batch));
    rows += batch.size();
    for (size_t r = 0; r < batch.size(); ++r) {
      clicks += batch.Labels(r)[0];
      conversions += batch.Labels(r)[1];
    }
  }
  dataset.EndPass();
  CHECK(rows == 1200);
  CHECK(clicks == 400);       // rows 0, 3, 6, ...
  CHECK(conversions == 200);  // rows 0, 6, 12, ...
}

TEST_CASE("queue dataset over the rank_dnn sample: 80 examples, 23 clicks", "[data][queue]") {
  testing::TempDir dir;
  // The sample split into three files, read by two threads.
  const auto lines = testing::ReadLines(testing::kRankDnnSample);
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::vector<std::string> part;
    for (size_t i = f; i < lines.size(); i += 3) part.push_back(lines[i]);
    files.push_back(dir.Write("part" + std::to_string(f), part));
  }
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = 2;
  QueueDataset dataset(options, files, 8);
  const PassResult result = RunPass(&dataset, 2);
  REQUIRE(result.status.ok());
  CHECK(result.keys.size() == 80);
  CHECK(result.ones == 23);
}

TEST_CASE("a bad line fails the pass with file:line for every worker", "[data][queue]") {
  testing::TempDir dir;
  auto files = testing::WriteNumberedRankDnnFiles(dir, "good", 6, 400);
  auto lines = testing::ReadLines(testing::kRankDnnSample);
  lines[2] = "click:1 dense_feature:oops";
  files.insert(files.begin() + 3, dir.Write("bad.txt", lines));
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = 3;
  options.queue_capacity = 1;
  QueueDataset dataset(options, files, 32);
  const PassResult result = RunPass(&dataset, 4);  // returns: no worker hangs
  CHECK(result.workers_with_error == 4);
  REQUIRE(result.status.IsInvalidArgument());
  CHECK(result.status.message() == dir.path() + "/bad.txt:3: token 2 \"dense_feature:oops\": \"oops\" is not a number");
}

TEST_CASE("skip_bad_lines skips, counts and reports bad lines", "[data][queue]") {
  testing::TempDir dir;
  auto lines = testing::ReadLines(testing::kRankDnnSample);
  lines[4] = "click:1";                  // line 5
  lines[9] += " 1:x";                    // line 10
  lines.insert(lines.begin() + 20, "");  // blank line 21: ignored, not bad
  const std::string file = dir.Write("sample.txt", lines);
  config::DataOptions options = testing::RankDnnOptions();
  options.skip_bad_lines = true;
  QueueDataset dataset(options, {file}, 10);
  const PassResult result = RunPass(&dataset, 1);
  REQUIRE(result.status.ok());
  CHECK(result.keys.size() == 78);
  const ReadStats stats = dataset.stats();
  CHECK(stats.examples == 78);
  CHECK(stats.bad_lines == 2);
  REQUIRE(stats.first_bad_lines.size() == 2);
  CHECK(stats.first_bad_lines[0] == file + ":5: dense slot \"dense_feature\" has 0 values, expected 13");
  CHECK(stats.first_bad_lines[1] == file + ":10: token 41 \"1:x\": \"x\" is not an unsigned integer");
}

TEST_CASE("only the first few bad lines are kept", "[data][queue]") {
  testing::TempDir dir;
  const std::string file = dir.Write("junk.txt", std::vector<std::string>(20, "junk"));
  config::DataOptions options = testing::RankDnnOptions();
  options.skip_bad_lines = true;
  QueueDataset dataset(options, {file}, 10);
  const PassResult result = RunPass(&dataset, 2);
  REQUIRE(result.status.ok());
  CHECK(result.keys.empty());
  CHECK(dataset.stats().bad_lines == 20);
  CHECK(dataset.stats().first_bad_lines.size() == ReadProgress::kLoggedBadLines);
}

TEST_CASE("an unreadable file is an IOError naming it", "[data][queue]") {
  testing::TempDir dir;
  QueueDataset dataset(testing::RankDnnOptions(), {dir.path() + "/missing.txt"}, 4);
  const PassResult result = RunPass(&dataset, 2);
  CHECK(result.status.IsIOError());
  CHECK_THAT(result.status.message(), Catch::Contains("missing.txt"));
}

TEST_CASE("ending a pass early stops blocked readers", "[data][queue]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 500);
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = 2;
  options.queue_capacity = 1;
  QueueDataset dataset(options, files, 8);
  REQUIRE(dataset.StartPass().ok());
  Batch batch;
  REQUIRE(*dataset.NextBatch(&batch));
  CHECK(batch.size() == 8);
  dataset.EndPass();  // readers are blocked on the full queue
  // A new pass starts from the beginning.
  const PassResult result = RunPass(&dataset, 2);
  REQUIRE(result.status.ok());
  CHECK(result.keys.size() == 2000);
}

TEST_CASE("the depth observer follows the reader -> worker queue: full, drained, cancelled", "[data][queue]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 100);  // 400 examples
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = 2;
  options.queue_capacity = 3;
  // Declared before the dataset: its destructor ends the pass, which reports depth 0.
  std::mutex mu;
  std::condition_variable changed;
  size_t depth = 99, max_depth = 0, calls = 0;  // guarded by mu
  QueueDataset dataset(options, files, 8);
  dataset.SetDepthObserver([&](size_t d) {
    std::lock_guard<std::mutex> lock(mu);
    depth = d;
    max_depth = std::max(max_depth, d);
    ++calls;
    changed.notify_all();
  });
  auto wait_for_depth = [&](size_t want) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(30), [&] { return depth == want; });
  };

  REQUIRE(dataset.StartPass().ok());
  CHECK(wait_for_depth(3));  // no worker yet: the readers fill the queue and block
  Batch batch;
  REQUIRE(*dataset.NextBatch(&batch));
  CHECK(wait_for_depth(3));  // a reader refills the slot
  size_t batches = 1, examples = batch.size();
  for (;;) {
    auto next = dataset.NextBatch(&batch);
    REQUIRE(next.ok());
    if (!*next) break;
    ++batches;
    examples += batch.size();
  }
  CHECK(examples == 400);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(depth == 0);
    CHECK(max_depth == 3);        // never above the capacity
    CHECK(calls == 2 * batches);  // one push and one pop per batch
  }
  dataset.EndPass();

  // A pass ended early: what was queued is dropped and the depth reads 0.
  REQUIRE(dataset.StartPass().ok());
  CHECK(wait_for_depth(3));
  dataset.EndPass();
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(depth == 0);
  }
}

TEST_CASE("no files: the pass is empty", "[data][queue]") {
  QueueDataset dataset(testing::RankDnnOptions(), {}, 4);
  const PassResult result = RunPass(&dataset, 2);
  CHECK(result.status.ok());
  CHECK(result.batches == 0);
}

}  // namespace
}  // namespace fleetps::data
