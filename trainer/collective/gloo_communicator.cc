// The Gloo communicator: gloo's TCP transport, connected through the rendezvous of
// rendezvous.h. Gloo reports errors by throwing; every call is wrapped here and turned
// into a Status naming the operation and the rank.

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <spdlog/spdlog.h>

#include "trainer/collective/communicator.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps::trainer::collective {
namespace {

// gloo's Store over the rendezvous client (gloo blocks in get/wait; so does this).
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(RendezvousClient& client, std::string prefix, std::chrono::milliseconds timeout,
                  const std::vector<net::Endpoint>& endpoints)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout), endpoints_(endpoints) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status st = client_.Set(prefix_ + key, {reinterpret_cast<const uint8_t*>(data.data()), data.size()});
    if (!st.ok()) throw gloo::IoException(st.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto value = Get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& key : keys) Get(key, timeout);
  }

 private:
  // Gloo keys each rank's addresses by its rank number: a missing one names that rank.
  std::vector<uint8_t> Get(const std::string& key, std::chrono::milliseconds timeout) {
    auto value = client_.Get(prefix_ + key, timeout);
    if (value.ok()) return std::move(*value);
    std::string message = value.status().ToString();
    if (value.status().IsTimedOut() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
        key.size() < 6 && std::stoul(key) < endpoints_.size()) {
      const size_t r = std::stoul(key);
      message = "rank " + key + " (" + endpoints_[r].ToString() + ") did not join within " +
                std::to_string(timeout.count()) + " ms";
    }
    throw gloo::IoException(message);
  }

  RendezvousClient& client_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  const std::vector<net::Endpoint>& endpoints_;
};

// Runs a gloo call, converting what it throws.
template <typename F>
Status Guard(const std::string& what, uint32_t rank, F&& f) {
  try {
    f();
    return Status::OK();
  } catch (const gloo::IoException& e) {
    return Status::Unavailable("gloo " + what + " on rank " + std::to_string(rank) + ": " + e.what() +
                               " (a rank died, or is unreachable)");
  } catch (const std::exception& e) {
    return Status::Internal("gloo " + what + " on rank " + std::to_string(rank) + ": " + e.what());
  }
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(uint32_t rank, uint32_t size, std::shared_ptr<gloo::Context> context)
      : rank_(rank), size_(size), context_(std::move(context)) {}

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  Status Broadcast(std::span<float> data, uint32_t root) override {
    if (root >= size_) return Status::InvalidArgument("broadcast root " + std::to_string(root) + " >= world size");
    if (size_ == 1 || data.empty()) return Status::OK();
    return Guard("broadcast", rank_, [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setRoot(static_cast<int>(root));
      opts.setTag(NextTag());
      gloo::broadcast(opts);
    });
  }
  Status AllreduceSum(std::span<float> data) override { return Allreduce(data); }
  Status AllreduceSum(std::span<double> data) override { return Allreduce(data); }
  Status Barrier() override {
    if (size_ == 1) return Status::OK();
    return Guard("barrier", rank_, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      gloo::barrier(opts);
    });
  }

 private:
  template <typename T>
  Status Allreduce(std::span<T> data) {
    if (size_ == 1 || data.empty()) return Status::OK();
    return Guard("allreduce of " + std::to_string(data.size()) + " values", rank_, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
      opts.setTag(NextTag());
      gloo::allreduce(opts);
    });
  }
  uint32_t NextTag() { return tag_++; }

  const uint32_t rank_;
  const uint32_t size_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 1;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(const CollectiveOptions& o) {
  const uint32_t size = static_cast<uint32_t>(o.endpoints.size());
  if (size == 0) return Status::InvalidArgument("no PADDLE_TRAINER_ENDPOINTS: a collective job needs every rank's");
  if (o.rank >= size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not below the " + std::to_string(size) +
                                   " PADDLE_TRAINER_ENDPOINTS");
  }
  std::unique_ptr<RendezvousServer> server;
  if (o.rank == 0 && size > 1) {
    const uint64_t budget = o.store_budget_bytes != 0 ? o.store_budget_bytes : RendezvousServer::BudgetFor(size);
    ASSIGN_OR_RETURN(server,
                     RendezvousServer::Start(o.endpoints[0].host, o.endpoints[0].port, o.auth_key, o.tls, budget));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(o.rank), static_cast<int>(size));
  if (size > 1) {
    ASSIGN_OR_RETURN(auto client, RendezvousClient::Connect(o.endpoints[0], o.timeout, o.auth_key, o.tls));
    RendezvousStore store(*client, o.prefix + "/", o.timeout, o.endpoints);
    gloo::transport::tcp::attr attr;
    attr.hostname = o.endpoints[o.rank].host;
    RETURN_IF_ERROR(Guard("set-up", o.rank, [&] {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      context->setTimeout(o.timeout);
      context->connectFullMesh(store, device);
    }));
  }
  auto comm = std::make_unique<GlooCommunicator>(o.rank, size, std::move(context));
  RETURN_IF_ERROR(comm->Barrier());
  // Past the barrier every rank has finished connectFullMesh, its last read of the store:
  // the rendezvous closes (rank 0), so its port accepts nothing for the rest of the job.
  if (server) {
    spdlog::debug("collective rendezvous of {} ranks: set-up stored {} bytes; closing it", size,
                  server->stored_bytes());
  }
  server.reset();
  return std::unique_ptr<Communicator>(std::move(comm));
}

Status AllreduceMean(Communicator& comm, std::span<float> data) {
  RETURN_IF_ERROR(comm.AllreduceSum(data));
  const float scale = 1.0f / static_cast<float>(comm.size());
  for (float& v : data) v *= scale;
  return Status::OK();
}

}  // namespace fleetps::trainer::collective
