#include "common/net/rpc_server.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <thread>
#include <mutex>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/net/frame.h"
#include "common/net/frame_queue.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct RpcServer::Impl : std::enable_shared_from_this<RpcServer::Impl> {
  Impl(IoThreads& io_threads, RpcServerOptions o, RequestHandler h)
      : io(io_threads), options(std::move(o)), handler(std::move(h)), acceptor(asio::make_strand(io.context())) {}

  void DoAccept();
  void OnReplied(uint64_t request_bytes) {
    inflight_bytes -= request_bytes;
    if (--in_flight == 0) {
      std::lock_guard<std::mutex> lock(drain_mu);
      drain_cv.notify_all();
    }
  }

  IoThreads& io;
  const RpcServerOptions options;
  const RequestHandler handler;
  tcp::acceptor acceptor;  // touched only from Start/StopAccepting/accept handlers
  std::atomic<bool> accepting{false};
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> inflight_bytes{0};
  std::atomic<uint64_t> connection_count{0};
  std::mutex drain_mu;
  std::condition_variable drain_cv;

  std::mutex conns_mu;  // guards conns
  std::vector<std::weak_ptr<ServerConnection>> conns;
};

// One accepted connection. All socket state is touched only on `strand_`.
class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  ServerConnection(tcp::socket socket, std::shared_ptr<RpcServer::Impl> server)
      : socket_(std::move(socket)), strand_(asio::make_strand(server->io.context())), server_(std::move(server)) {
    boost::system::error_code ec;
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
    socket_.set_option(tcp::no_delay(true), ec);
    ++server_->connection_count;
  }
  ~ServerConnection() { --server_->connection_count; }

  void Start() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->ReadHeader(); });
  }

  // Thread-safe: queues one frame for writing.
  void Enqueue(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload, bool close_after) {
    asio::post(strand_, [self = shared_from_this(), type, request_id, p = std::move(payload), close_after]() mutable {
      if (self->closed_) return;
      self->queue_.Push(type, request_id, std::move(p));
      if (close_after) self->close_after_flush_ = true;
      if (!self->queue_.writing()) self->DoWrite();
    });
  }

  // Graceful close: replies already queued are written first.
  void Close() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->queue_.empty() && !self->queue_.writing()) {
        self->CloseNow();
      } else {
        self->close_after_flush_ = true;
      }
    });
  }

  const std::string& peer() const { return peer_; }
  RpcServer::Impl& server() { return *server_; }

 private:
  void CloseNow() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  void ReadHeader() {
    if (closed_ || close_after_flush_) return;
    asio::async_read(socket_, asio::buffer(header_buf_),
                     asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       self->OnHeader(ec);
                     }));
  }

  void OnHeader(boost::system::error_code ec) {
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted && !closed_) {
        spdlog::debug("connection {}: read failed: {}", peer_, ec.message());
      }
      CloseNow();
      return;
    }
    wire::FrameHeader header;
    Status st = DecodeFrameHeader(header_buf_, server_->options.max_payload, peer_, &header);
    if (!st.ok()) {
      // The stream cannot be re-synchronised after a bad header: answer, then close.
      spdlog::warn("closing connection {}: {}", peer_, st.message());
      Enqueue(static_cast<uint16_t>(wire::MessageType::ErrorReply), header.request_id(), BuildErrorReply(st), true);
      return;
    }
    header_ = header;
    if (header.payload_length() == 0) {
      Dispatch(nullptr);
      return;
    }
    std::shared_ptr<uint8_t[]> payload(new uint8_t[header.payload_length()]);
    uint8_t* data = payload.get();
    asio::async_read(socket_, asio::buffer(data, header.payload_length()),
                     asio::bind_executor(strand_, [self = shared_from_this(), payload = std::move(payload)](
                                                      boost::system::error_code ec, size_t) mutable {
                       if (ec) {
                         spdlog::debug("connection {}: truncated frame: {}", self->peer_, ec.message());
                         self->CloseNow();
                         return;
                       }
                       self->Dispatch(std::move(payload));
                     }));
  }

  void Dispatch(std::shared_ptr<uint8_t[]> payload) {
    Request req;
    req.type = header_.type();
    req.request_id = header_.request_id();
    req.payload_size = header_.payload_length();
    req.payload = std::move(payload);
    auto& srv = *server_;
    ++srv.in_flight;
    srv.inflight_bytes += req.payload_size;
    Responder responder(shared_from_this(), req.type, req.request_id, req.payload_size);
    if (srv.inflight_bytes.load() > srv.options.max_inflight_bytes) {
      responder.SendError(Status::Busy("server is serving more than " +
                                       std::to_string(srv.options.max_inflight_bytes) +
                                       " request bytes; retry later or send smaller batches"));
    } else {
      srv.handler(std::move(req), std::move(responder));
    }
    ReadHeader();
  }

  void DoWrite() {
    if (queue_.empty()) {
      if (close_after_flush_) CloseNow();
      return;
    }
    asio::async_write(socket_, queue_.StartBatch(),
                      asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        self->queue_.FinishBatch();
                        if (ec) {
                          self->CloseNow();
                          self->queue_.Clear();  // nothing more can be sent
                          return;
                        }
                        self->DoWrite();
                      }));
  }

  tcp::socket socket_;
  asio::strand<asio::io_context::executor_type> strand_;
  std::shared_ptr<RpcServer::Impl> server_;
  std::string peer_;
  uint8_t header_buf_[kFrameHeaderSize];
  wire::FrameHeader header_;
  FrameQueue queue_;
  bool close_after_flush_ = false;
  bool closed_ = false;
};

// ---- Responder ---------------------------------------------------------------------

struct Responder::State {
  std::shared_ptr<ServerConnection> conn;
  uint16_t request_type;
  uint64_t request_id;
  uint64_t request_bytes;
  std::atomic<bool> sent{false};

  void Send(uint16_t type, flatbuffers::DetachedBuffer payload) {
    if (sent.exchange(true)) return;
    conn->Enqueue(type, request_id, std::move(payload), false);
    conn->server().OnReplied(request_bytes);
  }
  ~State() {
    if (!sent.load()) {
      Send(static_cast<uint16_t>(wire::MessageType::ErrorReply),
           BuildErrorReply(Status::Internal("server dropped the request without replying")));
    }
  }
};

Responder::Responder(std::shared_ptr<ServerConnection> conn, uint16_t request_type, uint64_t request_id,
                     uint64_t request_bytes)
    : state_(std::make_shared<State>()) {
  state_->conn = std::move(conn);
  state_->request_type = request_type;
  state_->request_id = request_id;
  state_->request_bytes = request_bytes;
}

void Responder::Send(uint16_t type, flatbuffers::DetachedBuffer payload) const {
  state_->Send(type, std::move(payload));
}

void Responder::SendError(const Status& status) const {
  state_->Send(static_cast<uint16_t>(wire::MessageType::ErrorReply), BuildErrorReply(status));
}

const std::string& Responder::peer() const { return state_->conn->peer(); }
uint16_t Responder::request_type() const { return state_->request_type; }

// ---- RpcServer -----------------------------------------------------------------------

void RpcServer::Impl::DoAccept() {
  acceptor.async_accept(asio::make_strand(io.context()),
                        [self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
                          if (ec) {
                            if (ec != asio::error::operation_aborted) {
                              spdlog::warn("accept failed: {}", ec.message());
                            }
                            if (!self->accepting.load()) return;
                          } else {
                            auto conn = std::make_shared<ServerConnection>(std::move(socket), self);
                            {
                              std::lock_guard<std::mutex> lock(self->conns_mu);
                              std::erase_if(self->conns, [](const auto& w) { return w.expired(); });
                              self->conns.push_back(conn);
                            }
                            conn->Start();
                          }
                          if (self->accepting.load()) self->DoAccept();
                        });
}

RpcServer::RpcServer(IoThreads& io, RpcServerOptions options, RequestHandler handler)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(handler))) {}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::Start() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(impl_->options.host, ec);
  if (ec) return Status::InvalidArgument("cannot bind to '" + impl_->options.host + "': not an IP address");
  tcp::endpoint ep(address, impl_->options.port);
  const std::string where = impl_->options.host + ":" + std::to_string(impl_->options.port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (ec) {
    return Status::IOError("cannot listen on " + where + ": " + ec.message() +
                           " (is another process using the port?)");
  }
  impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IOError("cannot listen on " + where + ": " + ec.message());
  impl_->accepting = true;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_] { impl->DoAccept(); });
  return Status::OK();
}

uint16_t RpcServer::port() const {
  boost::system::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void RpcServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  std::promise<void> done;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_, &done] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
    done.set_value();
  });
  done.get_future().wait();
}

bool RpcServer::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->drain_mu);
  return impl_->drain_cv.wait_for(lock, timeout, [this] { return impl_->in_flight.load() == 0; });
}

void RpcServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  StopAccepting();
  std::vector<std::shared_ptr<ServerConnection>> conns;
  {
    std::lock_guard<std::mutex> lock(impl_->conns_mu);
    for (auto& w : impl_->conns) {
      if (auto c = w.lock()) conns.push_back(std::move(c));
    }
    impl_->conns.clear();
  }
  for (auto& c : conns) c->Close();
  conns.clear();
  // Give queued replies (e.g. the answer to a Stop request) a moment to reach the peers.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (impl_->connection_count.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

uint64_t RpcServer::in_flight() const { return impl_->in_flight.load(); }
uint64_t RpcServer::connections() const { return impl_->connection_count.load(); }

}  // namespace fleetps::net
