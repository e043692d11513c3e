// The NCCL communicator (world size 1: one GPU per machine here) against the Gloo backend's
// semantics; without a visible GPU, the refusal and its hint.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include "heter_trainer/cuda/nccl_communicator.h"
#include "test/support/process.h"

namespace fleetps::heter {
namespace {

int Devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

trainer::collective::CollectiveOptions OneRank() {
  trainer::collective::CollectiveOptions o;
  o.rank = 0;
  o.endpoints = {{"127.0.0.1", 0}};
  return o;
}

TEST_CASE("Without a GPU the NCCL communicator is refused with the way to run on CPUs") {
  if (Devices() > 0) {
    WARN("skipped: a CUDA device is visible");
    return;
  }
  auto comm = MakeNcclCommunicator(OneRank(), 0);
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().IsUnavailable());
  CHECK_THAT(comm.status().message(), Catch::Contains("Gloo"));
}

TEST_CASE("NCCL with one rank: broadcast and allreduce leave the data as the Gloo backend does") {
  if (Devices() == 0) {
    WARN("skipped: no CUDA device visible");
    return;
  }
  auto made = MakeNcclCommunicator(OneRank(), 0);
  INFO(made.status().ToString());
  REQUIRE(made.ok());
  auto& comm = **made;
  CHECK(comm.backend() == "nccl");
  CHECK(comm.size() == 1);
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  std::vector<double> d = {1e15, 0.5};
  REQUIRE(comm.AllreduceSum(f).ok());
  REQUIRE(comm.AllreduceSum(d).ok());
  REQUIRE(comm.Broadcast(f, 0).ok());
  REQUIRE(comm.Barrier().ok());
  CHECK(f == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(d == std::vector<double>{1e15, 0.5});
  std::vector<float> mean = {4.0f, 8.0f};
  REQUIRE(trainer::collective::AllreduceMean(comm, mean).ok());
  CHECK(mean == std::vector<float>{4.0f, 8.0f});
  CHECK(comm.Broadcast(f, 1).IsInvalidArgument());
}

TEST_CASE("NCCL set-up waiting for a rank that never joins fails with TimedOut, not a hang") {
  if (Devices() == 0) {
    WARN("skipped: no CUDA device visible");
    return;
  }
  // Rank 0 of 2: it serves the unique id and starts the (non-blocking) set-up; rank 1 never
  // comes, so the set-up must end at the timeout with an error that says why.
  const auto ports = testing::FreePorts(2);
  trainer::collective::CollectiveOptions o;
  o.rank = 0;
  o.endpoints = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  o.timeout = std::chrono::milliseconds(3000);
  auto made = MakeNcclCommunicator(o, 0);
  INFO(made.status().ToString());
  REQUIRE_FALSE(made.ok());
  CHECK(made.status().IsTimedOut());
  CHECK_THAT(made.status().message(), Catch::Contains("ncclCommInitRankConfig") &&
                                          Catch::Contains("did not finish within 3000 ms") &&
                                          Catch::Contains("fleetps.collective.timeout_ms"));
}

}  // namespace
}  // namespace fleetps::heter
