#pragma once
// Communicator: the collective operations of data-parallel training among the ranks of
// PADDLE_TRAINER_ENDPOINTS — broadcast from a root, allreduce (sum) in place, barrier.
// One interface, one implementation per backend: Gloo over TCP (CPUs; this file's
// MakeGlooCommunicator), NCCL on GPUs. Every rank ends an allreduce with bitwise the same
// values (the ring algorithm reduces each element once and passes the result around).
//
// Set-up: rank 0 serves the rendezvous (rendezvous.h) on its endpoint; every rank
// publishes its transport addresses there and connects to every other rank. Rank 0 closes
// the rendezvous once the first barrier has passed (every rank is connected, so none reads
// it again); nothing later in the job uses it: a group is formed once per process. Every
// operation is bounded by options.timeout: a rank that died or never came fails the
// others with an error naming the operation, never a hang.
// Thread-safety: one thread at a time calls the operations (they are issued in the same
// order on every rank).

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/net/auth.h"
#include "common/net/endpoint.h"
#include "common/net/tls.h"
#include "common/status.h"

namespace fleetps::trainer::collective {

struct CollectiveOptions {
  uint32_t rank = 0;                     // PADDLE_TRAINER_ID
  std::vector<net::Endpoint> endpoints;  // PADDLE_TRAINER_ENDPOINTS, one per rank, in rank order
  // Keys of this job in the rendezvous (several communicators of one job use distinct ones).
  std::string prefix = "fleetps";
  std::chrono::milliseconds timeout{300000};     // set-up, and each operation
  std::shared_ptr<const net::AuthKey> auth_key;  // the cluster's secret, when it has one
  // The cluster's TLS files, when it has them: the rendezvous runs over TLS (rank 0 needs a
  // certificate and key, the others the CA). Gloo's and NCCL's own transports are not TLS.
  std::shared_ptr<net::TlsContext> tls;
  // Rank 0's rendezvous holds at most this many bytes of keys and values
  // (fleetps.collective.store_budget_bytes); 0: RendezvousServer::BudgetFor(the ranks). It
  // closes once the group has formed.
  uint64_t store_budget_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" | "nccl"

  // Every rank's `data` becomes root's.
  virtual Status Broadcast(std::span<float> data, uint32_t root) = 0;
  // data = the element-wise sum of every rank's data (in place, the same on every rank).
  virtual Status AllreduceSum(std::span<float> data) = 0;
  virtual Status AllreduceSum(std::span<double> data) = 0;
  // The same sum, read where it was computed: a span of `data` (the sum in place), or of the
  // communicator's own buffer (a local group's, instead of copying the sum into every
  // member's data, which may then hold anything). Valid until this rank's next operation.
  virtual StatusOr<std::span<const float>> AllreduceSumView(std::span<float> data) {
    RETURN_IF_ERROR(AllreduceSum(data));
    return std::span<const float>(data);
  }
  virtual Status Barrier() = 0;
  // A thread of this process that is a rank of this job will not come: operations that wait
  // for it end with `why`, now and later. Local groups (local_group.h) end them; backends
  // whose ranks are other processes do nothing (those peers fail by timeout or on a closed
  // connection).
  virtual void Abort(const Status& why) {}
};

// The Gloo (TCP) communicator of options.rank among options.endpoints.size() ranks. Its
// transport listens on the rank's endpoint host (ports of the system's choosing); rank 0's
// endpoint port serves the rendezvous.
StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(const CollectiveOptions& options);

// data /= size after a sum: the mean every rank applies.
Status AllreduceMean(Communicator& comm, std::span<float> data);

}  // namespace fleetps::trainer::collective
