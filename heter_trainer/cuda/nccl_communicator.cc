#include "heter_trainer/cuda/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/device/nccl_backend.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps::heter {
namespace {

using trainer::collective::CollectiveOptions;
using trainer::collective::Communicator;
using trainer::collective::RendezvousClient;
using trainer::collective::RendezvousServer;

Status NcclStatus(ncclResult_t result, const char* call, int rank) {
  if (result == ncclSuccess) return Status::OK();
  std::string message =
      std::string(call) + " failed on rank " + std::to_string(rank) + ": " + ncclGetErrorString(result);
  if (result == ncclSystemError || result == ncclRemoteError) {
    return Status::Unavailable(message + " (a rank died, or is unreachable)");
  }
  return Status::Internal(std::move(message));
}

#define RETURN_IF_NCCL_ERROR(call, rank) RETURN_IF_ERROR(NcclStatus((call), #call, (rank)))

using Clock = std::chrono::steady_clock;

// The communicators are non-blocking (ncclConfig_t::blocking = 0), so that no call waits
// for a rank that died: set-up and every operation are polled until done, failed, or past
// the deadline (CollectiveOptions::timeout), as the Gloo backend's operations are.
// Between two polls: a yield for the first 1000 (short operations end within them, without
// a sleep's latency), then 20 us sleeps.
void Pause(uint32_t& polls) {
  if (++polls < 1000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status PastDeadline(const std::string& what, int rank, std::chrono::milliseconds timeout) {
  return Status::TimedOut(what + " on rank " + std::to_string(rank) + " did not finish within " +
                          std::to_string(timeout.count()) +
                          " ms (fleetps.collective.timeout_ms): a rank died, "
                          "stopped answering or never joined");
}

// Waits until the communicator's last call is no longer in progress; its outcome.
Status WaitForComm(ncclComm_t comm, const std::string& what, int rank, Clock::time_point deadline,
                   std::chrono::milliseconds timeout) {
  for (uint32_t polls = 0;; Pause(polls)) {
    ncclResult_t state = ncclSuccess;
    RETURN_IF_NCCL_ERROR(ncclCommGetAsyncError(comm, &state), rank);
    if (state != ncclInProgress) return NcclStatus(state, what.c_str(), rank);
    if (Clock::now() >= deadline) return PastDeadline(what, rank, timeout);
  }
}

// Owns an ncclComm_t.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  // Non-blocking: finalized (polled, at most 10 s) before it is destroyed; aborted when
  // that fails or takes longer.
  ~NcclComm() {
    if (comm_ == nullptr) return;
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (uint32_t polls = 0; state == ncclInProgress && Clock::now() < deadline;) {
      Pause(polls);
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  NcclComm(NcclComm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }
  ncclComm_t release() { return std::exchange(comm_, nullptr); }

 private:
  ncclComm_t comm_ = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(uint32_t rank, uint32_t size, int gpu, std::chrono::milliseconds timeout, NcclComm comm,
                   gpu::Stream stream)
      : rank_(rank), size_(size), gpu_(gpu), timeout_(timeout), stream_(std::move(stream)), comm_(std::move(comm)) {}

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Status Broadcast(std::span<float> data, uint32_t root) override {
    if (root >= size_) return Status::InvalidArgument("broadcast root " + std::to_string(root) + " >= world size");
    return Run(data.data(), data.size() * sizeof(float), "ncclBroadcast", [&](void* buf) {
      return ncclBroadcast(buf, buf, data.size(), ncclFloat, static_cast<int>(root), comm_.get(), stream_.get());
    });
  }
  Status AllreduceSum(std::span<float> data) override {
    return Run(data.data(), data.size() * sizeof(float), "ncclAllReduce", [&](void* buf) {
      return ncclAllReduce(buf, buf, data.size(), ncclFloat, ncclSum, comm_.get(), stream_.get());
    });
  }
  Status AllreduceSum(std::span<double> data) override {
    return Run(data.data(), data.size() * sizeof(double), "ncclAllReduce", [&](void* buf) {
      return ncclAllReduce(buf, buf, data.size(), ncclDouble, ncclSum, comm_.get(), stream_.get());
    });
  }
  Status Barrier() override {
    float one = 1.0f;
    return AllreduceSum(std::span<float>(&one, 1));
  }

 private:
  // Copies `bytes` of host data to the device, runs `op` (the NCCL call `call`) on the
  // device copy, copies back, and waits, watching the communicator, until done or past the
  // timeout. A failed or late operation aborts the communicator: this and every later
  // operation return its error (the job cannot go on without the lost rank). The copies go
  // through a pinned staging buffer: a copy to pageable memory would block the host until
  // the collective ended (never, with a rank gone), and after an abort the late copy lands
  // in the staging buffer, not in the caller's memory.
  template <typename Op>
  Status Run(void* host, size_t bytes, const char* call, Op op) {
    if (bytes == 0) return Status::OK();
    if (!broken_.ok()) return broken_;
    Status st = RunOnce(host, bytes, call, op);
    if (!st.ok() && comm_.get() != nullptr) {
      ncclCommAbort(comm_.release());
      broken_ = st;
    }
    return st;
  }

  template <typename Op>
  Status RunOnce(void* host, size_t bytes, const char* call, Op op) {
    const auto deadline = Clock::now() + timeout_;
    const int rank = static_cast<int>(rank_);
    ASSIGN_OR_RETURN(gpu::DeviceGuard guard, gpu::DeviceGuard::Enter(gpu_));
    if (buffer_.size() < bytes) {
      buffer_ = {};
      ASSIGN_OR_RETURN(buffer_, gpu::DeviceBuffer<uint8_t>::Allocate(gpu_, bytes));
    }
    if (staging_.size() < bytes) {
      staging_ = {};
      ASSIGN_OR_RETURN(staging_, gpu::PinnedBuffer<uint8_t>::Allocate(bytes));
    }
    std::memcpy(staging_.data(), host, bytes);
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(buffer_.data(), staging_.data(), bytes, cudaMemcpyHostToDevice, stream_.get()));
    const ncclResult_t queued = op(buffer_.data());
    if (queued == ncclInProgress) {
      RETURN_IF_ERROR(WaitForComm(comm_.get(), call, rank, deadline, timeout_));
    } else {
      RETURN_IF_ERROR(NcclStatus(queued, call, rank));
    }
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(staging_.data(), buffer_.data(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    for (uint32_t polls = 0;; Pause(polls)) {
      const cudaError_t done = cudaStreamQuery(stream_.get());
      if (done == cudaSuccess) {
        std::memcpy(host, staging_.data(), bytes);
        return Status::OK();
      }
      if (done != cudaErrorNotReady) return gpu::CudaStatus(done, "cudaStreamQuery", __FILE__, __LINE__);
      ncclResult_t state = ncclSuccess;
      RETURN_IF_NCCL_ERROR(ncclCommGetAsyncError(comm_.get(), &state), rank);
      if (state != ncclSuccess && state != ncclInProgress) return NcclStatus(state, call, rank);
      if (Clock::now() >= deadline) return PastDeadline(call, rank, timeout_);
    }
  }

  const uint32_t rank_;
  const uint32_t size_;
  const int gpu_;
  const std::chrono::milliseconds timeout_;  // each operation
  Status broken_;                            // the error that aborted the communicator
  // Destroyed in reverse order: the communicator ends (its kernels with it) before the
  // stream and the buffers its operations use.
  gpu::DeviceBuffer<uint8_t> buffer_;
  gpu::PinnedBuffer<uint8_t> staging_;
  gpu::Stream stream_;
  NcclComm comm_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(const CollectiveOptions& o, int gpu) {
  const uint32_t size = static_cast<uint32_t>(o.endpoints.size());
  if (size == 0 || o.rank >= size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " of " + std::to_string(size) +
                                   " PADDLE_TRAINER_ENDPOINTS");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || gpu < 0 || gpu >= devices) {
    return Status::Unavailable("NCCL needs CUDA device " + std::to_string(gpu) + " but " + std::to_string(devices) +
                               " are visible; use the Gloo backend to train on CPUs");
  }
  ASSIGN_OR_RETURN(gpu::DeviceGuard guard, gpu::DeviceGuard::Enter(gpu));
  // The unique id: made by rank 0 and handed out through the rendezvous.
  ncclUniqueId id;
  std::unique_ptr<RendezvousServer> server;
  if (o.rank == 0) RETURN_IF_NCCL_ERROR(ncclGetUniqueId(&id), 0);
  if (size > 1) {
    if (o.rank == 0) {
      const uint64_t budget = o.store_budget_bytes != 0 ? o.store_budget_bytes : RendezvousServer::BudgetFor(size);
      ASSIGN_OR_RETURN(server,
                       RendezvousServer::Start(o.endpoints[0].host, o.endpoints[0].port, o.auth_key, o.tls, budget));
    }
    ASSIGN_OR_RETURN(auto client, RendezvousClient::Connect(o.endpoints[0], o.timeout, o.auth_key, o.tls));
    const std::string key = o.prefix + "/nccl-unique-id";
    if (o.rank == 0) {
      RETURN_IF_ERROR(client->Set(key, {reinterpret_cast<const uint8_t*>(&id), sizeof(id)}));
    } else {
      ASSIGN_OR_RETURN(auto bytes, client->Get(key, o.timeout));
      if (bytes.size() != sizeof(id)) {
        return Status::Corruption("the NCCL unique id from rank 0 has " + std::to_string(bytes.size()) +
                                  " bytes, expected " + std::to_string(sizeof(id)));
      }
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  }
  // Non-blocking, so that a rank that never joins fails the others' set-up at the timeout.
  const auto deadline = Clock::now() + o.timeout;
  const int rank = static_cast<int>(o.rank);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&raw, static_cast<int>(size), id, rank, &config);
  NcclComm comm(raw);
  Status joined = started == ncclInProgress ? WaitForComm(raw, "ncclCommInitRankConfig", rank, deadline, o.timeout)
                                            : NcclStatus(started, "ncclCommInitRankConfig", rank);
  if (!joined.ok()) {
    if (raw != nullptr) ncclCommAbort(comm.release());
    return joined;
  }
  ASSIGN_OR_RETURN(auto stream, gpu::Stream::Create(gpu));
  auto result = std::make_unique<NcclCommunicator>(o.rank, size, gpu, o.timeout, std::move(comm), std::move(stream));
  RETURN_IF_ERROR(result->Barrier());
  // Past the barrier every rank holds the id: the rendezvous (rank 0) closes with `server`.
  return std::unique_ptr<Communicator>(std::move(result));
}

}  // namespace fleetps::heter

namespace fleetps::heter {

const trainer::collective::NcclBackend* BuildNcclBackend() {
  static const trainer::collective::NcclBackend backend{
      .visible_gpus =
          [] {
            int count = 0;
            return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
          },
      .make = MakeNcclCommunicator,
  };
  return &backend;
}

}  // namespace fleetps::heter
