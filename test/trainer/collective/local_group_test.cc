// Local groups: threads of one process as consecutive ranks, summing in memory, over an
// inner communicator (none, or Gloo ranks standing for processes): every member ends an
// allreduce with bitwise the same values, broadcasts reach every member of every process,
// ranks are numbered process by process, and a member that never joins fails the others
// within the timeout.
#include "trainer/collective/local_group.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "test/support/process.h"

namespace fleetps::trainer::collective {
namespace {

using namespace std::chrono_literals;

// Runs body(comm) for every member of `processes` local groups of `members` each (threads
// of this process; with processes > 1 joined by Gloo ranks over loopback). Statuses
// returned by body are checked on this thread (Catch's assertions are not thread-safe).
void OnGroups(uint32_t processes, uint32_t members, const std::function<Status(Communicator&)>& body) {
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(static_cast<int>(processes))) eps.push_back({"127.0.0.1", p});
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> failures;
  for (uint32_t p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      std::unique_ptr<Communicator> inner;
      if (processes > 1) {
        CollectiveOptions o;
        o.rank = p;
        o.endpoints = eps;
        o.timeout = 20s;
        auto comm = MakeGlooCommunicator(o);
        if (!comm.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(comm.status().ToString());
          return;
        }
        inner = std::move(comm).value();
      }
      auto group = MakeLocalGroup(members, std::move(inner), 20s);
      std::vector<std::thread> member_threads;
      for (auto& comm : group) {
        member_threads.emplace_back([&, c = comm.get()] {
          Status st = body(*c);
          if (!st.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            failures.push_back("rank " + std::to_string(c->rank()) + ": " + st.ToString());
          }
        });
      }
      for (auto& t : member_threads) t.join();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) FAIL_CHECK(f);
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST_CASE("One process, three members: the allreduce is the in-order sum, bitwise the same on every member") {
  const size_t n = 10007;
  std::vector<std::vector<float>> data = {Random(n, 1), Random(n, 2), Random(n, 3)};
  std::vector<float> want = data[0];  // member order: 0, then 1, then 2
  for (size_t i = 0; i < n; ++i) want[i] += data[1][i];
  for (size_t i = 0; i < n; ++i) want[i] += data[2][i];
  std::vector<std::vector<double>> counts = {{1, 0.5}, {1, 0.25}, {0, 1e15}};
  std::vector<uint32_t> ranks(3, 99), sizes(3);
  OnGroups(1, 3, [&](Communicator& c) -> Status {
    ranks[c.rank()] = c.rank();
    sizes[c.rank()] = c.size();
    RETURN_IF_ERROR(c.AllreduceSum(data[c.rank()]));
    RETURN_IF_ERROR(c.AllreduceSum(counts[c.rank()]));
    return c.Barrier();
  });
  CHECK(ranks == std::vector<uint32_t>{0, 1, 2});
  CHECK(sizes == std::vector<uint32_t>{3, 3, 3});
  for (const auto& d : data) CHECK(d == want);  // bitwise
  for (const auto& c : counts) CHECK(c == std::vector<double>{2, 1e15 + 0.75});
}

TEST_CASE("One member per process: the allreduce is the processes' sum (alone: its own data); Abort fails it") {
  const size_t n = 1001;
  std::vector<std::vector<float>> data = {Random(n, 21), Random(n, 22)};
  std::vector<float> want = data[0];
  for (size_t i = 0; i < n; ++i) want[i] += data[1][i];
  OnGroups(2, 1, [&](Communicator& c) -> Status { return c.AllreduceSum(data[c.rank()]); });
  CHECK(data[0] == data[1]);  // bitwise
  double max_err = 0;
  for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, double{std::abs(data[0][i] - want[i])});
  CHECK(max_err < 1e-6);
  std::vector<float> alone = Random(n, 23);
  const std::vector<float> before = alone;
  auto group = MakeLocalGroup(1, nullptr, 5s);
  REQUIRE(group[0]->AllreduceSum(alone).ok());
  CHECK(alone == before);
  group[0]->Abort(Status::Internal("worker 0: device error"));
  const Status st = group[0]->AllreduceSum(alone);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("worker 0: device error"));
}

TEST_CASE("Seven members, allreduces of changing sizes back to back: each is the in-order sum on every member") {
  // Each member sums a slice; sizes below the member count, off the cache-line grid and
  // growing or shrinking between calls exercise the slices and the alternating buffers,
  // with no other synchronisation between the calls than the allreduces themselves. Every
  // other round reads the sum in the group's buffer (AllreduceSumView), until the next call.
  const std::vector<size_t> sizes = {1, 6, 7, 16, 17, 1000, 3, 30011, 5, 129};
  const uint32_t members = 7;
  const auto input = [](size_t round, uint32_t member, size_t n) {
    return Random(n, static_cast<uint32_t>(1000 * round + member));
  };
  std::atomic<size_t> checked{0};
  OnGroups(1, members, [&](Communicator& c) -> Status {
    for (size_t round = 0; round < 3 * sizes.size(); ++round) {
      const size_t n = sizes[round % sizes.size()];
      std::vector<float> want = input(round, 0, n);
      for (uint32_t m = 1; m < members; ++m) {
        const std::vector<float> other = input(round, m, n);
        for (size_t i = 0; i < n; ++i) want[i] += other[i];
      }
      std::vector<float> data = input(round, c.rank(), n);
      std::span<const float> sum = data;
      if (round % 2 == 1) {
        ASSIGN_OR_RETURN(sum, c.AllreduceSumView(std::span<float>(data)));
      } else {
        RETURN_IF_ERROR(c.AllreduceSum(std::span<float>(data)));
      }
      if (!std::equal(sum.begin(), sum.end(), want.begin(), want.end())) {
        return Status::Internal("round " + std::to_string(round) + " (" + std::to_string(n) +
                                " floats): not the in-order sum");
      }
      ++checked;
    }
    return Status::OK();
  });
  CHECK(checked == members * 3 * sizes.size());
}

TEST_CASE("Two processes of two members: ranks 0..3, the allreduce and a broadcast reach every member") {
  const size_t n = 30011;
  std::vector<std::vector<float>> data(4), params(4);
  std::vector<double> want(n, 0.0);
  for (uint32_t r = 0; r < 4; ++r) {
    data[r] = Random(n, 10 + r);
    for (size_t i = 0; i < n; ++i) want[i] += data[r][i];
    params[r].assign(100, static_cast<float>(r + 1));  // initialized differently
  }
  std::mutex mu;
  std::vector<std::string> backends;
  OnGroups(2, 2, [&](Communicator& c) -> Status {
    if (c.size() != 4) return Status::Internal("size " + std::to_string(c.size()));
    {
      std::lock_guard<std::mutex> lock(mu);
      backends.push_back(c.backend());
    }
    std::vector<float> copy = data[c.rank()];
    RETURN_IF_ERROR(c.AllreduceSum(data[c.rank()]));
    {  // the same sum read in the group's buffer: bitwise the copied one
      ASSIGN_OR_RETURN(auto sum, c.AllreduceSumView(copy));
      if (!std::equal(sum.begin(), sum.end(), data[c.rank()].begin(), data[c.rank()].end())) {
        return Status::Internal("the view differs from the copied sum");
      }
    }
    RETURN_IF_ERROR(c.Broadcast(params[c.rank()], 3));  // process 1's second member
    return c.Barrier();
  });
  for (const auto& b : backends) CHECK(b == "gloo+local");
  for (uint32_t r = 1; r < 4; ++r) CHECK(data[r] == data[0]);  // bitwise
  double max_err = 0;
  for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, std::abs(data[0][i] - want[i]));
  CHECK(max_err < 1e-5);
  for (const auto& p : params) CHECK(p == std::vector<float>(100, 4.0f));
}

TEST_CASE("A member that never joins fails the others within the timeout; the group stays failed") {
  auto group = MakeLocalGroup(3, nullptr, 300ms);
  std::vector<Status> results(2), later(2);
  std::vector<std::thread> threads;
  for (uint32_t m = 0; m < 2; ++m) {  // member 2 never calls
    threads.emplace_back([&, m] {
      std::vector<float> v(10, 1.0f);
      results[m] = group[m]->AllreduceSum(std::span<float>(v));
      later[m] = group[m]->Barrier();
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t m = 0; m < 2; ++m) {
    INFO(results[m].ToString());
    CHECK(results[m].IsTimedOut());
    CHECK_THAT(results[m].message(),
               Catch::Contains("3 local ranks waited 300 ms") && Catch::Contains("fleetps.collective.timeout_ms"));
    CHECK(later[m].IsTimedOut());
  }
}

TEST_CASE("Members that disagree on the size of an allreduce all get an error naming the sizes") {
  auto group = MakeLocalGroup(2, nullptr, 5s);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (uint32_t m = 0; m < 2; ++m) {
    threads.emplace_back([&, m] {
      std::vector<float> v(10 + m, 1.0f);
      results[m] = group[m]->AllreduceSum(std::span<float>(v));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& st : results) {
    CHECK(st.IsInvalidArgument());
    CHECK_THAT(st.message(), Catch::Contains("local rank 1 gave 11 values, local rank 0 10"));
  }
}

}  // namespace
}  // namespace fleetps::trainer::collective

namespace fleetps::trainer::collective {
namespace {

TEST_CASE("Abort on any member ends the others' waits at once with its reason") {
  auto group = MakeLocalGroup(2, nullptr, 60s);  // without Abort member 0 would wait 60 s
  Status result;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiting([&] {
    std::vector<float> v(10, 1.0f);
    result = group[0]->AllreduceSum(std::span<float>(v));
  });
  std::this_thread::sleep_for(100ms);
  group[1]->Abort(Status::Internal("worker 1: a device error"));
  waiting.join();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(result.code() == StatusCode::kInternal);
  CHECK_THAT(result.message(),
             Catch::Contains("a local rank of this process stopped") && Catch::Contains("worker 1: a device error"));
  CHECK_THAT(group[0]->Barrier().message(), Catch::Contains("worker 1: a device error"));  // and later
}

}  // namespace
}  // namespace fleetps::trainer::collective
