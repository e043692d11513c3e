#include "common/net/rpc_server.h"

#include <array>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/net/accept_backoff.h"
#include "common/net/frame.h"
#include "common/net/rpc_server_connection.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// ---- Responder ---------------------------------------------------------------------

struct Responder::State {
  std::shared_ptr<ServerConnection> conn;
  uint16_t request_type;
  uint64_t request_id;
  std::atomic<uint64_t> request_bytes;
  uint64_t payload_bytes = 0;  // the request's, for on_reply
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  std::atomic<bool> sent{false};

  void Send(uint16_t type, flatbuffers::DetachedBuffer payload) {
    if (sent.exchange(true)) return;
    const auto& on_reply = conn->server().options.on_reply;
    if (on_reply) {
      on_reply(
          ReplyInfo{request_type, payload_bytes, type, payload.size(), std::chrono::steady_clock::now() - arrived});
    }
    conn->Enqueue(type, request_id, std::move(payload), request_bytes.exchange(0), false);
    conn->server().OnReplied();
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
  state_->payload_bytes = request_bytes;
}

void Responder::Send(uint16_t type, flatbuffers::DetachedBuffer payload) const {
  state_->Send(type, std::move(payload));
}

void Responder::SendError(const Status& status) const {
  state_->Send(static_cast<uint16_t>(wire::MessageType::ErrorReply), BuildErrorReply(status));
}

void Responder::ReleaseRequestBytes() const {
  const uint64_t bytes = state_->request_bytes.exchange(0);
  if (bytes > 0) state_->conn->Release(bytes);
}

const std::string& Responder::peer() const { return state_->conn->peer(); }
uint16_t Responder::request_type() const { return state_->request_type; }

// ---- RpcServer -----------------------------------------------------------------------

void RpcServer::Impl::Refuse(tcp::socket socket) {
  // Best effort: tell the peer why before closing (a fresh socket's send buffer is empty,
  // so a non-blocking write of one small frame does not wait).
  const Status st = Status::Unavailable("server has " + std::to_string(options.max_connections) +
                                        " connections open (server.max_connections); retry later");
  auto payload = BuildErrorReply(st);
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(wire::MessageType::ErrorReply), 0, static_cast<uint32_t>(payload.size()),
                    header);
  boost::system::error_code ec;
  if (options.tls) {  // a plain frame would garble the peer's TLS handshake: just close
    socket.close(ec);
    return;
  }
  socket.non_blocking(true, ec);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(header), asio::buffer(payload.data(), payload.size())};
  socket.write_some(buffers, ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

void RpcServer::Impl::DoAccept() {
  acceptor.async_accept(asio::make_strand(io.context()), [self = shared_from_this()](boost::system::error_code ec,
                                                                                     tcp::socket socket) {
    if (!self->accepting.load()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // EMFILE, ENFILE, ENOBUFS...: retrying at once would spin; back off up to 1 s.
      self->accept_backoff = NextAcceptBackoff(self->accept_backoff);
      spdlog::warn("accept failed: {}; retrying in {} ms", ec.message(), self->accept_backoff.count());
      self->accept_backoff_timer.expires_after(self->accept_backoff);
      self->accept_backoff_timer.async_wait([self](boost::system::error_code wait_ec) {
        if (!wait_ec && self->accepting.load()) self->DoAccept();
      });
      return;
    }
    self->accept_backoff = std::chrono::milliseconds(0);
    if (self->connection_count.load() >= self->options.max_connections) {
      boost::system::error_code peer_ec;
      const auto remote = socket.remote_endpoint(peer_ec);
      spdlog::warn("refusing connection from {}: {} connections open (server.max_connections)",
                   peer_ec ? std::string("unknown peer") : remote.address().to_string(), self->connection_count.load());
      self->Refuse(std::move(socket));
    } else {
      auto conn = std::make_shared<ServerConnection>(std::move(socket), self);
      {
        MutexLock lock(self->conns_mu);
        std::erase_if(self->conns, [](const auto& w) { return w.expired(); });
        self->conns.push_back(conn);
      }
      conn->Start();
    }
    self->DoAccept();
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
  if (impl_->options.tls && !impl_->options.tls->can_serve()) {
    return Status::InvalidArgument("cannot serve TLS on " + where +
                                   ": no certificate (set server.tls.cert_file and server.tls.key_file)");
  }
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (ec) {
    return Status::IOError("cannot listen on " + where + ": " + ec.message() + " (is another process using the port?)");
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
  impl_->admitting = false;
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
  UniqueLock lock(impl_->drain_mu);
  return impl_->drain_cv.wait_for(lock.native(), timeout, [this] { return impl_->in_flight.load() == 0; });
}

void RpcServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  StopAccepting();
  std::vector<std::shared_ptr<ServerConnection>> conns;
  {
    MutexLock lock(impl_->conns_mu);
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
uint64_t RpcServer::in_flight_bytes() const { return impl_->inflight_bytes.load(); }
uint64_t RpcServer::connections() const { return impl_->connection_count.load(); }

}  // namespace fleetps::net
