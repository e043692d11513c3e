#include "common/net/rpc_client.h"

#include <atomic>
#include <deque>
#include <future>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>

#include "common/net/frame.h"
#include "common/net/frame_queue.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct RpcClient::Impl : std::enable_shared_from_this<RpcClient::Impl> {
  Impl(IoThreads& io_threads, Endpoint ep, RpcClientOptions o)
      : io(io_threads),
        endpoint(std::move(ep)),
        name(endpoint.ToString()),
        options(o),
        strand(asio::make_strand(io.context())),
        socket(strand),
        sweep_timer(strand) {}

  struct Pending {
    uint16_t request_type;
    ReplyCallback callback;
    Clock::time_point deadline;
  };

  // All below run on `strand`.
  void StartReading() { ReadHeader(); }

  void ReadHeader() {
    asio::async_read(socket, asio::buffer(header_buf),
                     asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       self->OnHeader(ec);
                     }));
  }

  void OnHeader(boost::system::error_code ec) {
    if (ec) return Fail(Status::Unavailable("connection to server " + name + " lost: " + ec.message()));
    wire::FrameHeader header;
    Status st = DecodeFrameHeader(header_buf, options.max_payload, "server " + name, &header);
    if (!st.ok()) return Fail(st);
    std::shared_ptr<uint8_t[]> payload(new uint8_t[std::max<uint32_t>(header.payload_length(), 1)]);
    uint8_t* data = payload.get();
    asio::async_read(socket, asio::buffer(data, header.payload_length()),
                     asio::bind_executor(strand, [self = shared_from_this(), header, payload = std::move(payload)](
                                                     boost::system::error_code ec, size_t) mutable {
                       if (ec) {
                         return self->Fail(
                             Status::Unavailable("connection to server " + self->name + " lost: " + ec.message()));
                       }
                       self->OnReply(header, std::move(payload));
                       self->ReadHeader();
                     }));
  }

  void OnReply(const wire::FrameHeader& header, std::shared_ptr<uint8_t[]> payload) {
    auto it = pending.find(header.request_id());
    if (it == pending.end()) return;  // timed out earlier; late reply dropped
    Pending p = std::move(it->second);
    pending.erase(it);
    const uint16_t type = header.type();
    if (type == static_cast<uint16_t>(wire::MessageType::ErrorReply)) {
      p.callback(ParseErrorReply(payload.get(), header.payload_length(), "server " + name));
      return;
    }
    if (type != ReplyType(static_cast<wire::MessageType>(p.request_type))) {
      p.callback(Status::Corruption("server " + name + " answered " + MessageTypeName(p.request_type) +
                                    " with " + MessageTypeName(type)));
      return;
    }
    p.callback(Reply{type, std::move(payload), header.payload_length()});
  }

  void Enqueue(uint16_t type, flatbuffers::DetachedBuffer payload, ReplyCallback cb) {
    if (!connected.load()) {
      cb(Status::Unavailable("not connected to server " + name));
      return;
    }
    const uint64_t id = next_id++;
    Clock::time_point deadline = Clock::time_point::max();
    if (options.request_timeout.count() > 0) {
      deadline = Clock::now() + options.request_timeout;
      ArmSweep();
    }
    pending.emplace(id, Pending{type, std::move(cb), deadline});
    queue.Push(type, id, std::move(payload));
    if (!queue.writing()) DoWrite();
  }

  void DoWrite() {
    if (queue.empty()) return;
    asio::async_write(socket, queue.StartBatch(),
                      asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        self->queue.FinishBatch();
                        if (ec) {
                          return self->Fail(Status::Unavailable("sending to server " + self->name +
                                                                " failed: " + ec.message()));
                        }
                        self->DoWrite();
                      }));
  }

  void ArmSweep() {
    if (sweep_armed) return;
    sweep_armed = true;
    sweep_timer.expires_after(std::chrono::milliseconds(50));
    sweep_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
      self->sweep_armed = false;
      if (ec) return;
      const auto now = Clock::now();
      bool any_deadline = false;
      for (auto it = self->pending.begin(); it != self->pending.end();) {
        if (it->second.deadline <= now) {
          auto cb = std::move(it->second.callback);
          const uint16_t type = it->second.request_type;
          it = self->pending.erase(it);
          cb(Status::TimedOut(MessageTypeName(type) + " to server " + self->name + " timed out after " +
                              std::to_string(self->options.request_timeout.count()) + " ms"));
        } else {
          any_deadline |= it->second.deadline != Clock::time_point::max();
          ++it;
        }
      }
      if (any_deadline) self->ArmSweep();
    }));
  }

  // Fails every pending call and closes the socket.
  void Fail(const Status& status) {
    connected = false;
    boost::system::error_code ec;
    socket.close(ec);
    sweep_timer.cancel();
    queue.Clear();
    auto failed = std::move(pending);
    pending.clear();
    for (auto& [id, p] : failed) p.callback(status);
  }

  IoThreads& io;
  const Endpoint endpoint;
  const std::string name;
  const RpcClientOptions options;
  asio::strand<asio::io_context::executor_type> strand;
  tcp::socket socket;           // strand only (after Connect)
  asio::steady_timer sweep_timer;
  std::atomic<bool> connected{false};
  std::atomic<bool> closed{false};  // Close() was called
  std::atomic<uint64_t> pending_count{0};
  // strand-only state:
  uint8_t header_buf[kFrameHeaderSize];
  std::unordered_map<uint64_t, Pending> pending;
  FrameQueue queue;
  bool sweep_armed = false;
  uint64_t next_id = 1;
};

RpcClient::RpcClient(IoThreads& io, Endpoint endpoint, RpcClientOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(endpoint), options)) {}

RpcClient::~RpcClient() { Close(); }

Status RpcClient::Connect() {
  auto& impl = *impl_;
  if (impl.connected.load()) return Status::OK();
  const auto deadline = Clock::now() + impl.options.connect_timeout;
  auto backoff = impl.options.initial_backoff;
  std::string last_error;
  int attempts = 0;
  while (true) {
    ++attempts;
    // Resolve and connect synchronously from the caller's thread, then hand the socket
    // to the strand.
    boost::system::error_code ec;
    tcp::resolver resolver(impl.io.context());
    auto results = resolver.resolve(impl.endpoint.host, std::to_string(impl.endpoint.port), ec);
    if (!ec) {
      std::promise<boost::system::error_code> done;
      asio::post(impl.strand, [&impl, &results, &done] {
        boost::system::error_code cec;
        if (impl.socket.is_open()) impl.socket.close(cec);
        asio::connect(impl.socket, results, cec);
        if (!cec) {
          impl.socket.set_option(tcp::no_delay(true), cec);
          impl.connected = true;
          impl.StartReading();
        }
        done.set_value(cec);
      });
      ec = done.get_future().get();
      if (!ec) return Status::OK();
    }
    last_error = ec.message();
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, impl.options.max_backoff);
  }
  return Status::Unavailable("cannot connect to server " + impl.name + " after " + std::to_string(attempts) +
                             " attempts in " + std::to_string(impl.options.connect_timeout.count()) +
                             " ms: " + last_error + " (is the pserver running and the endpoint right?)");
}

void RpcClient::Call(uint16_t type, flatbuffers::DetachedBuffer payload, ReplyCallback callback) {
  if (payload.size() > impl_->options.max_payload) {
    callback(Status::InvalidArgument(MessageTypeName(type) + " of " + std::to_string(payload.size()) +
                                     " bytes exceeds max_message_bytes " +
                                     std::to_string(impl_->options.max_payload) + "; send smaller batches"));
    return;
  }
  ++impl_->pending_count;
  asio::post(impl_->strand, [impl = impl_, type, p = std::move(payload), cb = std::move(callback)]() mutable {
    impl->Enqueue(type, std::move(p), [impl, cb = std::move(cb)](StatusOr<Reply> r) {
      --impl->pending_count;
      cb(std::move(r));
    });
  });
}

StatusOr<Reply> RpcClient::CallSync(uint16_t type, flatbuffers::DetachedBuffer payload) {
  std::promise<StatusOr<Reply>> promise;
  auto future = promise.get_future();
  Call(type, std::move(payload), [&promise](StatusOr<Reply> r) { promise.set_value(std::move(r)); });
  return future.get();
}

void RpcClient::Close() {
  if (impl_->closed.exchange(true)) return;
  std::promise<void> done;
  asio::post(impl_->strand, [impl = impl_, &done] {
    impl->Fail(Status::Aborted("connection to server " + impl->name + " closed by the client"));
    done.set_value();
  });
  // If the io threads are already stopped the post never runs; do not wait forever.
  done.get_future().wait_for(std::chrono::seconds(5));
}

const Endpoint& RpcClient::endpoint() const { return impl_->endpoint; }
bool RpcClient::connected() const { return impl_->connected.load(); }
uint64_t RpcClient::pending() const { return impl_->pending_count.load(); }

}  // namespace fleetps::net
