#include "heter_trainer/cuda/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps::heter {
namespace {

using trainer::collective::CollectiveOptions;
using trainer::collective::Communicator;
using trainer::collective::RendezvousClient;
using trainer::collective::RendezvousServer;

Status NcclStatus(ncclResult_t result, const char* call, int rank) {
  if (result == ncclSuccess) return Status::OK();
  std::string message = std::string(call) + " failed on rank " + std::to_string(rank) + ": " + ncclGetErrorString(result);
  if (result == ncclSystemError || result == ncclRemoteError) {
    return Status::Unavailable(message + " (a rank died, or is unreachable)");
  }
  return Status::Internal(std::move(message));
}

#define RETURN_IF_NCCL_ERROR(call, rank) RETURN_IF_ERROR(NcclStatus((call), #call, (rank)))

// Owns an ncclComm_t.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  ~NcclComm() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclComm(NcclComm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(uint32_t rank, uint32_t size, int gpu, std::unique_ptr<RendezvousServer> server, NcclComm comm,
                   gpu::Stream stream)
      : rank_(rank), size_(size), gpu_(gpu), server_(std::move(server)), comm_(std::move(comm)),
        stream_(std::move(stream)) {}

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Status Broadcast(std::span<float> data, uint32_t root) override {
    if (root >= size_) return Status::InvalidArgument("broadcast root " + std::to_string(root) + " >= world size");
    return Run(data.data(), data.size() * sizeof(float), [&](void* buf) {
      return NcclStatus(ncclBroadcast(buf, buf, data.size(), ncclFloat, static_cast<int>(root), comm_.get(),
                                      stream_.get()),
                        "ncclBroadcast", static_cast<int>(rank_));
    });
  }
  Status AllreduceSum(std::span<float> data) override {
    return Run(data.data(), data.size() * sizeof(float), [&](void* buf) {
      return NcclStatus(ncclAllReduce(buf, buf, data.size(), ncclFloat, ncclSum, comm_.get(), stream_.get()),
                        "ncclAllReduce", static_cast<int>(rank_));
    });
  }
  Status AllreduceSum(std::span<double> data) override {
    return Run(data.data(), data.size() * sizeof(double), [&](void* buf) {
      return NcclStatus(ncclAllReduce(buf, buf, data.size(), ncclDouble, ncclSum, comm_.get(), stream_.get()),
                        "ncclAllReduce", static_cast<int>(rank_));
    });
  }
  Status Barrier() override {
    float one = 1.0f;
    return AllreduceSum(std::span<float>(&one, 1));
  }

 private:
  // Copies `bytes` of host data to the device, runs `op` on the device copy, copies back.
  template <typename Op>
  Status Run(void* host, size_t bytes, Op op) {
    if (bytes == 0) return Status::OK();
    ASSIGN_OR_RETURN(gpu::DeviceGuard guard, gpu::DeviceGuard::Enter(gpu_));
    if (buffer_.size() < bytes) {
      buffer_ = {};
      ASSIGN_OR_RETURN(buffer_, gpu::DeviceBuffer<uint8_t>::Allocate(gpu_, bytes));
    }
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(buffer_.data(), host, bytes, cudaMemcpyHostToDevice, stream_.get()));
    RETURN_IF_ERROR(op(buffer_.data()));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host, buffer_.data(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    return stream_.Synchronize();
  }

  const uint32_t rank_;
  const uint32_t size_;
  const int gpu_;
  std::unique_ptr<RendezvousServer> server_;  // rank 0 of several: the unique id's home
  NcclComm comm_;
  gpu::Stream stream_;
  gpu::DeviceBuffer<uint8_t> buffer_;
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
      ASSIGN_OR_RETURN(server, RendezvousServer::Start(o.endpoints[0].host, o.endpoints[0].port, o.auth_key, o.tls));
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
  ncclComm_t raw = nullptr;
  RETURN_IF_NCCL_ERROR(ncclCommInitRank(&raw, static_cast<int>(size), id, static_cast<int>(o.rank)),
                       static_cast<int>(o.rank));
  NcclComm comm(raw);
  ASSIGN_OR_RETURN(auto stream, gpu::Stream::Create(gpu));
  auto result = std::make_unique<NcclCommunicator>(o.rank, size, gpu, std::move(server), std::move(comm),
                                                   std::move(stream));
  RETURN_IF_ERROR(result->Barrier());
  return std::unique_ptr<Communicator>(std::move(result));
}

}  // namespace fleetps::heter
