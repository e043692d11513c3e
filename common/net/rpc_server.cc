#include "common/net/rpc_server.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/net/accept_backoff.h"
#include "common/net/frame.h"
#include "common/net/frame_queue.h"
#include "common/net/stream.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct RpcServer::Impl : std::enable_shared_from_this<RpcServer::Impl> {
  Impl(IoThreads& io_threads, RpcServerOptions o, RequestHandler h)
      : io(io_threads),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor(asio::make_strand(io.context())),
        accept_backoff_timer(acceptor.get_executor()) {}

  void DoAccept();
  void Refuse(tcp::socket socket);
  void OnReplied() {
    if (--in_flight == 0) {
      std::lock_guard<std::mutex> lock(drain_mu);
      drain_cv.notify_all();
    }
  }

  IoThreads& io;
  const RpcServerOptions options;
  const RequestHandler handler;
  tcp::acceptor acceptor;  // touched only from Start/StopAccepting/accept handlers
  asio::steady_timer accept_backoff_timer;  // same strand as the acceptor
  std::chrono::milliseconds accept_backoff{0};
  std::atomic<bool> accepting{false};
  std::atomic<bool> admitting{true};  // false after StopAccepting: new requests -> Unavailable
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> inflight_bytes{0};  // requests in service + replies not written
  std::atomic<uint64_t> connection_count{0};
  std::atomic<uint64_t> next_connection_id{1};
  std::mutex drain_mu;
  std::condition_variable drain_cv;

  std::mutex conns_mu;  // guards conns
  std::vector<std::weak_ptr<ServerConnection>> conns;
};

namespace {

std::string Seconds(std::chrono::milliseconds ms) { return fmt::format("{:g} s", ms.count() / 1000.0); }

bool IsHandshake(uint16_t type) {
  return type == static_cast<uint16_t>(wire::MessageType::AuthHello) ||
         type == static_cast<uint16_t>(wire::MessageType::AuthProve);
}

}  // namespace

// One accepted connection. All socket state is touched only on `strand_`.
//
// `pending_bytes_` is this connection's share of the server's in-flight bytes: request
// payloads handed to the handler and not yet answered (or released), plus reply frames
// queued and not yet written. Reading pauses while it is above max_write_queue_bytes.
class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  ServerConnection(tcp::socket socket, std::shared_ptr<RpcServer::Impl> server)
      : stream_(server->options.tls ? Stream(std::move(socket), *server->options.tls) : Stream(std::move(socket))),
        strand_(asio::make_strand(server->io.context())),
        read_timer_(strand_),
        write_timer_(strand_),
        auth_timer_(strand_),
        server_(std::move(server)),
        id_(server_->next_connection_id++) {
    boost::system::error_code ec;
    auto remote = stream_.socket().remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
    stream_.socket().set_option(tcp::no_delay(true), ec);
    ++server_->connection_count;
  }
  ~ServerConnection() {
    server_->inflight_bytes -= pending_bytes_;
    --server_->connection_count;
  }

  void Start() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      self->ArmAuthTimer();
      if (!self->stream_.is_tls()) return self->ReadHeader();
      self->ArmReadTimer(self->options().read_timeout, ReadWait::kFrame);
      // A plain fleetps client speaks first with a frame: tell it what is wrong (in plain)
      // instead of a bare close. A TLS client's ClientHello goes on to the handshake.
      self->stream_.socket().async_wait(
          tcp::socket::wait_read, asio::bind_executor(self->strand_, [self](boost::system::error_code ec) {
            if (self->closed_) return;
            if (ec) return self->CloseNow();
            if (self->RefusePlainPeer()) return;
            self->Handshake();
          }));
    });
  }

  // Thread-safe: queues one reply frame for writing; `request_bytes` of the request it
  // answers stop counting.
  void Enqueue(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload, uint64_t request_bytes,
               bool close_after) {
    const uint64_t reply_bytes = kFrameHeaderSize + payload.size();
    server_->inflight_bytes += reply_bytes;
    asio::post(strand_, [self = shared_from_this(), type, request_id, p = std::move(payload), close_after,
                         request_bytes, reply_bytes]() mutable {
      self->pending_bytes_ += reply_bytes;
      if (self->pending_requests_ > 0) --self->pending_requests_;
      self->Unpend(request_bytes);
      if (self->closed_) {
        self->Unpend(reply_bytes);
        return;
      }
      self->queue_.Push(type, request_id, std::move(p));
      if (close_after) self->close_after_flush_ = true;
      if (!self->queue_.writing()) self->DoWrite();
    });
  }

  // Thread-safe: a request's bytes stop counting before it is answered.
  void Release(uint64_t request_bytes) {
    asio::post(strand_, [self = shared_from_this(), request_bytes] { self->Unpend(request_bytes); });
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
  const RpcServerOptions& options() const { return server_->options; }

  void CloseNow() {
    if (closed_) return;
    closed_ = true;
    if (options().on_connection_closed) options().on_connection_closed(id_);
    boost::system::error_code ec;
    read_timer_.cancel();
    write_timer_.cancel();
    auth_timer_.cancel();
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  // Drops `bytes` from this connection's pending bytes and the server's count, and resumes
  // reading when the connection drops below its bound.
  void Unpend(uint64_t bytes) {
    bytes = std::min(bytes, pending_bytes_);
    pending_bytes_ -= bytes;
    server_->inflight_bytes -= bytes;
    if (paused_ && pending_bytes_ <= options().max_write_queue_bytes) {
      paused_ = false;
      ReadHeader();
    } else if (!in_frame_ && !paused_ && pending_requests_ == 0 && queue_.empty()) {
      ArmReadTimer(options().idle_timeout, ReadWait::kIdle);  // idle from now on
    }
  }

  // One timer per direction; a stale expiry (re-armed or cancelled since) does nothing.
  // One read timer: kIdle (nothing in service, no request) or kFrame (a started frame).
  enum class ReadWait { kIdle, kFrame };
  void ArmReadTimer(std::chrono::milliseconds timeout, ReadWait wait) {
    ++read_timer_generation_;
    if (timeout.count() == 0 || closed_) {
      read_timer_.cancel();
      return;
    }
    read_timer_.expires_after(timeout);
    read_timer_.async_wait(asio::bind_executor(
        strand_, [self = shared_from_this(), generation = read_timer_generation_, wait, timeout](
                     boost::system::error_code ec) {
          if (ec || generation != self->read_timer_generation_ || self->closed_) return;
          const bool idle = wait == ReadWait::kIdle;
          if (idle && (self->pending_requests_ > 0 || !self->queue_.empty())) {
            // Requests of this connection are still in service (a barrier): not idle.
            self->ArmReadTimer(timeout, wait);
            return;
          }
          spdlog::warn("closing connection {}: {} for {} (server.{}_timeout_s)", self->peer_,
                       idle ? "no request" : "frame incomplete", Seconds(timeout), idle ? "idle" : "read");
          self->CloseNow();
        }));
  }

  // TLS only: the handshake, bounded by the read timer armed in Start().
  void Handshake() {
    stream_.AsyncHandshake(
        /*as_server=*/true, "", asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
          if (self->closed_) return;
          if (ec) {
            spdlog::warn("closing connection {}: TLS handshake failed: {} (does the peer use TLS, with server.tls "
                         "set?)",
                         self->peer_, ec.message());
            return self->CloseNow();
          }
          self->ReadHeader();
        }));
  }

  // TLS only, before the handshake: when the peer's first bytes are a fleetps frame header
  // (a client without server.tls), answers it in plain with Unavailable saying so, echoing
  // its request id so that the client's call gets the message, and closes. True when so.
  bool RefusePlainPeer() {
    uint8_t first[kFrameHeaderSize];
    boost::system::error_code ec;
    const size_t n = stream_.socket().receive(asio::buffer(first), tcp::socket::message_peek, ec);
    uint32_t magic = 0;
    if (ec || n < sizeof(magic)) return false;
    std::memcpy(&magic, first, sizeof(magic));
    if (magic != kFrameMagic) return false;
    wire::FrameHeader header;
    const uint64_t request_id =
        n == kFrameHeaderSize && DecodeFrameHeader(first, UINT32_MAX, peer_, &header).ok() ? header.request_id() : 0;
    spdlog::warn("closing connection {}: a plain (non-TLS) fleetps peer of a TLS server", peer_);
    const auto payload = BuildErrorReply(Status::Unavailable(
        "this server requires TLS and the client connected without it: give the client the cluster's CA "
        "certificate (server.tls.ca_file in its YAML, or FLEETPS_TLS_CA_FILE)"));
    uint8_t reply_header[kFrameHeaderSize];
    EncodeFrameHeader(static_cast<uint16_t>(wire::MessageType::ErrorReply), request_id,
                      static_cast<uint32_t>(payload.size()), reply_header);
    // Best effort, as RpcServer::Impl::Refuse: a fresh socket's send buffer has room. What
    // the peer sent is read first, so that the close does not reset the connection (which
    // could discard the answer at the peer).
    auto& socket = stream_.socket();
    socket.non_blocking(true, ec);
    uint8_t drain[4096];
    for (int i = 0; i < 64 && socket.available(ec) > 0 && !ec; ++i) socket.read_some(asio::buffer(drain), ec);
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(reply_header),
                                                    asio::buffer(payload.data(), payload.size())};
    socket.write_some(buffers, ec);
    CloseNow();
    return true;
  }

  // With auth_required, the exchange must succeed within auth_timeout of the accept.
  void ArmAuthTimer() {
    if (!options().auth_required || options().auth_timeout.count() == 0) return;
    auth_timer_.expires_after(options().auth_timeout);
    auth_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_ || self->authenticated_) return;
      spdlog::warn("closing connection {}: not authenticated within {} (server.auth_timeout_s)", self->peer_,
                   Seconds(self->options().auth_timeout));
      self->CloseNow();
    }));
  }

  // Answers the frame whose header was just read with `status`, then closes (its payload,
  // if any, is never read: the stream cannot be re-synchronised).
  void RefuseAndClose(uint64_t request_id, const Status& status) {
    spdlog::warn("closing connection {}: {}", peer_, status.message());
    ++server_->in_flight;
    ++pending_requests_;
    Enqueue(static_cast<uint16_t>(wire::MessageType::ErrorReply), request_id, BuildErrorReply(status), 0, true);
    server_->OnReplied();
  }

  void ReadHeader() {
    if (closed_ || close_after_flush_ || reading_) return;
    if (pending_bytes_ > options().max_write_queue_bytes) {
      paused_ = true;  // resumed by Unpend once the peer reads its replies
      return;
    }
    reading_ = true;
    // Idle only while nothing of this connection is in service; Unpend arms it later.
    ArmReadTimer(pending_requests_ == 0 && queue_.empty() ? options().idle_timeout : std::chrono::milliseconds(0),
                 ReadWait::kIdle);
    stream_.async_read_some(asio::buffer(header_buf_), asio::bind_executor(strand_, [self = shared_from_this()](
                                                                                        boost::system::error_code ec,
                                                                                        size_t n) {
                              if (ec || n == kFrameHeaderSize) return self->OnHeader(ec);
                              // A frame has started: the rest of its header is bounded by
                              // read_timeout, like its payload, not by the idle timeout.
                              self->in_frame_ = true;
                              self->ArmReadTimer(self->options().read_timeout, ReadWait::kFrame);
                              asio::async_read(self->stream_, asio::buffer(self->header_buf_ + n, kFrameHeaderSize - n),
                                               asio::bind_executor(self->strand_, [self](boost::system::error_code ec,
                                                                                         size_t) {
                                                 self->in_frame_ = false;
                                                 self->OnHeader(ec);
                                               }));
                            }));
  }

  void OnHeader(boost::system::error_code ec) {
    reading_ = false;
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted && !closed_) {
        spdlog::debug("connection {}: read failed: {}", peer_, ec.message());
      }
      CloseNow();
      return;
    }
    wire::FrameHeader header;
    Status st = DecodeFrameHeader(header_buf_, options().max_payload, peer_, &header);
    // The stream cannot be re-synchronised after a bad header: answer, then close.
    if (!st.ok()) return RefuseAndClose(header.request_id(), st);
    // Before authenticating, a peer that must authenticate gets nothing but the small
    // handshake frames accepted: no admission, no allocation for anything else.
    if (IsHandshake(header.type()) && header.payload_length() > kMaxHandshakePayload) {
      return RefuseAndClose(header.request_id(),
                            Status::InvalidArgument(MessageTypeName(header.type()) + " from " + peer_ + " announces " +
                                                    std::to_string(header.payload_length()) +
                                                    " payload bytes; handshake frames hold at most " +
                                                    std::to_string(kMaxHandshakePayload)));
    }
    if (options().auth_required && !authenticated_ && !IsHandshake(header.type())) {
      return RefuseAndClose(header.request_id(),
                            Status::PermissionDenied(
                                MessageTypeName(header.type()) +
                                " before authenticating: this server requires authentication; give the client the "
                                "cluster's shared secret (FLEETPS_AUTH_SECRET_FILE or server.auth_secret_file)"));
    }
    header_ = header;
    const uint32_t length = header.payload_length();
    auto& srv = *server_;
    // Admission before any allocation: the bytes are reserved first, so connections
    // racing for the last bytes cannot all pass.
    // The first two handshake frames of a connection (a client's AuthHello and AuthProve,
    // at most kMaxHandshakePayload each) skip the in-flight budget, so that peers filling
    // it cannot keep a client from authenticating; they still count in it.
    const bool exempt = IsHandshake(header.type()) && !authenticated_ && ++handshake_frames_ <= 2;
    Status refuse;
    if (!srv.admitting.load()) {
      refuse = Status::Unavailable("server is shutting down; retry against the restarted server");
    } else if (srv.inflight_bytes.fetch_add(length) + length > srv.options.max_inflight_bytes && !exempt) {
      srv.inflight_bytes -= length;
      refuse = Status::Busy("server is serving more than " + std::to_string(srv.options.max_inflight_bytes) +
                            " request and reply bytes; retry later or send smaller batches");
    }
    if (!refuse.ok()) {
      if (length == 0) return Refuse(refuse);
      return Skip(length, refuse);
    }
    pending_bytes_ += length;
    if (length == 0) {
      Dispatch(nullptr);
      return;
    }
    ArmReadTimer(options().read_timeout, ReadWait::kFrame);
    reading_ = true;
    in_frame_ = true;
    std::shared_ptr<uint8_t[]> payload;
    if (options().payload_allocator) payload = options().payload_allocator(length);
    if (payload == nullptr) payload.reset(new uint8_t[length]);
    uint8_t* data = payload.get();
    asio::async_read(stream_, asio::buffer(data, length),
                     asio::bind_executor(strand_, [self = shared_from_this(), payload = std::move(payload)](
                                                      boost::system::error_code ec, size_t) mutable {
                       self->reading_ = false;
                       self->in_frame_ = false;
                       if (ec) {
                         spdlog::debug("connection {}: truncated frame: {}", self->peer_, ec.message());
                         self->CloseNow();
                         return;
                       }
                       self->Dispatch(std::move(payload));
                     }));
  }

  // Reads and drops `remaining` payload bytes of a refused request, then answers it.
  void Skip(uint32_t remaining, Status refuse) {
    if (!scratch_) scratch_ = std::make_unique<uint8_t[]>(kScratchBytes);
    ArmReadTimer(options().read_timeout, ReadWait::kFrame);
    reading_ = true;
    in_frame_ = true;
    const size_t n = std::min<size_t>(remaining, kScratchBytes);
    asio::async_read(stream_, asio::buffer(scratch_.get(), n),
                     asio::bind_executor(strand_, [self = shared_from_this(), remaining, n, refuse](
                                                      boost::system::error_code ec, size_t) {
                       self->reading_ = false;
                       self->in_frame_ = false;
                       if (ec) return self->CloseNow();
                       if (remaining > n) return self->Skip(static_cast<uint32_t>(remaining - n), refuse);
                       self->Refuse(refuse);
                     }));
  }

  void Refuse(const Status& refuse) {
    ++server_->in_flight;
    ++pending_requests_;
    Responder(shared_from_this(), header_.type(), header_.request_id(), 0).SendError(refuse);
    ReadHeader();
  }

  void Dispatch(std::shared_ptr<uint8_t[]> payload) {
    Request req;
    req.type = header_.type();
    req.request_id = header_.request_id();
    req.payload_size = header_.payload_length();
    req.payload = std::move(payload);
    req.authenticated = authenticated_;
    req.auth_configured = options().auth_key != nullptr;
    req.connection_id = id_;
    auto& srv = *server_;
    ++srv.in_flight;
    ++pending_requests_;
    Responder responder(shared_from_this(), req.type, req.request_id, req.payload_size);
    if (IsHandshake(req.type)) {
      Authenticate(req, responder);
      return ReadHeader();
    }
    const Responder keep = responder;  // answers if the handler throws before replying
    try {
      srv.handler(std::move(req), std::move(responder));
    } catch (const std::exception& e) {
      spdlog::error("request {} from {} failed with an exception: {}", MessageTypeName(keep.request_type()), peer_,
                    e.what());
      keep.SendError(Status::Internal(std::string("the server failed with an exception: ") + e.what()));
    }
    ReadHeader();
  }

  // The two steps of the exchange in common/net/auth.h.
  void Authenticate(const Request& req, const Responder& responder) {
    const auto& key = options().auth_key;
    if (!key) {
      return responder.SendError(Status::Unavailable(
          "authentication is not configured on this server (no server.auth_secret_file); connect without a secret"));
    }
    flatbuffers::Verifier verifier(req.data(), req.payload_size);
    if (req.type == static_cast<uint16_t>(wire::MessageType::AuthHello)) {
      const auto* msg = req.payload_size > 0 && verifier.VerifyBuffer<wire::AuthHelloRequest>(nullptr)
                            ? flatbuffers::GetRoot<wire::AuthHelloRequest>(req.data())
                            : nullptr;
      if (msg == nullptr || msg->client_nonce() == nullptr || msg->client_nonce()->size() != kAuthNonceBytes) {
        return responder.SendError(Status::InvalidArgument("malformed AuthHello from " + peer_));
      }
      client_nonce_.assign(reinterpret_cast<const char*>(msg->client_nonce()->data()), kAuthNonceBytes);
      server_nonce_ = RandomNonce();
      const std::string proof = key->Proof("server", client_nonce_, server_nonce_);
      flatbuffers::FlatBufferBuilder fbb(128);
      auto nonce = fbb.CreateVector(reinterpret_cast<const uint8_t*>(server_nonce_.data()), server_nonce_.size());
      auto p = fbb.CreateVector(reinterpret_cast<const uint8_t*>(proof.data()), proof.size());
      fbb.Finish(wire::CreateAuthHelloReply(fbb, nonce, p));
      return responder.Send(ReplyType(wire::MessageType::AuthHello), fbb.Release());
    }
    const auto* msg = req.payload_size > 0 && verifier.VerifyBuffer<wire::AuthProveRequest>(nullptr)
                          ? flatbuffers::GetRoot<wire::AuthProveRequest>(req.data())
                          : nullptr;
    const bool ok = msg != nullptr && msg->client_proof() != nullptr && !server_nonce_.empty() &&
                    key->Verify(std::string_view(reinterpret_cast<const char*>(msg->client_proof()->data()),
                                                 msg->client_proof()->size()),
                                "client", server_nonce_, client_nonce_);
    server_nonce_.clear();  // one proof per nonce
    if (!ok) {
      spdlog::warn("closing connection {}: authentication failed", peer_);
      responder.SendError(Status::PermissionDenied(
          "authentication failed: the client's shared secret differs from the server's (check "
          "FLEETPS_AUTH_SECRET_FILE on both ends)"));
      close_after_flush_ = true;
      return;
    }
    authenticated_ = true;
    auth_timer_.cancel();
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreateAuthProveReply(fbb));
    responder.Send(ReplyType(wire::MessageType::AuthProve), fbb.Release());
  }

  void DoWrite() {
    if (queue_.empty()) {
      write_timer_.cancel();
      if (close_after_flush_) CloseNow();
      return;
    }
    const auto& buffers = queue_.StartBatch();
    const uint64_t batch_bytes = asio::buffer_size(buffers);
    if (options().read_timeout.count() > 0) {
      write_timer_.expires_after(options().read_timeout);
      write_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
        if (ec || self->closed_) return;
        spdlog::warn("closing connection {}: a reply was not taken within {} (the peer does not read)",
                     self->peer_, Seconds(self->options().read_timeout));
        self->CloseNow();
      }));
    }
    asio::async_write(stream_, buffers,
                      asio::bind_executor(strand_, [self = shared_from_this(), batch_bytes](
                                                       boost::system::error_code ec, size_t) {
                        self->queue_.FinishBatch();
                        self->write_timer_.cancel();
                        if (ec) {
                          self->CloseNow();
                          self->queue_.Clear();  // nothing more can be sent
                        }
                        self->Unpend(batch_bytes);
                        if (!ec) self->DoWrite();
                      }));
  }

  static constexpr size_t kScratchBytes = 64 * 1024;

  Stream stream_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  asio::steady_timer auth_timer_;  // auth_timeout, with auth_required
  std::shared_ptr<RpcServer::Impl> server_;
  const uint64_t id_;  // Request::connection_id
  std::string peer_;
  uint8_t header_buf_[kFrameHeaderSize];
  wire::FrameHeader header_;
  FrameQueue queue_;
  std::unique_ptr<uint8_t[]> scratch_;  // refused payloads are read into it and dropped
  uint64_t pending_bytes_ = 0;
  uint32_t pending_requests_ = 0;  // handed out (or refused), reply not yet queued
  uint64_t read_timer_generation_ = 0;
  bool reading_ = false;   // a read is outstanding
  bool in_frame_ = false;  // reading the rest of a started frame: the read timer is the frame timer
  bool paused_ = false;   // reading stopped by max_write_queue_bytes
  bool close_after_flush_ = false;
  bool closed_ = false;
  bool authenticated_ = false;
  uint32_t handshake_frames_ = 0;  // AuthHello / AuthProve frames read before authenticating
  std::string client_nonce_, server_nonce_;  // of the exchange under way
};

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
      on_reply(ReplyInfo{request_type, payload_bytes, type, payload.size(), std::chrono::steady_clock::now() - arrived});
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
                   peer_ec ? std::string("unknown peer") : remote.address().to_string(),
                   self->connection_count.load());
      self->Refuse(std::move(socket));
    } else {
      auto conn = std::make_shared<ServerConnection>(std::move(socket), self);
      {
        std::lock_guard<std::mutex> lock(self->conns_mu);
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
uint64_t RpcServer::in_flight_bytes() const { return impl_->inflight_bytes.load(); }
uint64_t RpcServer::connections() const { return impl_->connection_count.load(); }

}  // namespace fleetps::net
