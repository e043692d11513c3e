#include "common/net/rpc_server_connection.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>

#include <spdlog/spdlog.h>

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::string Seconds(std::chrono::milliseconds ms) { return fmt::format("{:g} s", ms.count() / 1000.0); }

bool IsHandshake(uint16_t type) {
  return type == static_cast<uint16_t>(wire::MessageType::AuthHello) ||
         type == static_cast<uint16_t>(wire::MessageType::AuthProve);
}

}  // namespace

ServerConnection::ServerConnection(tcp::socket socket, std::shared_ptr<RpcServer::Impl> server)
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

ServerConnection::~ServerConnection() {
  server_->inflight_bytes -= pending_bytes_;
  --server_->connection_count;
}

void ServerConnection::Start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->ArmAuthTimer();
    if (!self->stream_.is_tls()) return self->ReadHeader();
    self->ArmReadTimer(self->options().read_timeout, ReadWait::kFrame);
    // A plain fleetps client speaks first with a frame: tell it what is wrong (in plain)
    // instead of a bare close. A TLS client's ClientHello goes on to the handshake.
    self->stream_.socket().async_wait(tcp::socket::wait_read,
                                      asio::bind_executor(self->strand_, [self](boost::system::error_code ec) {
                                        if (self->closed_) return;
                                        if (ec) return self->CloseNow();
                                        if (self->RefusePlainPeer()) return;
                                        self->Handshake();
                                      }));
  });
}

void ServerConnection::Enqueue(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload,
                               uint64_t request_bytes, bool close_after) {
  const uint64_t reply_bytes = kFrameHeaderSize + payload.size();
  server_->inflight_bytes += reply_bytes;
  asio::post(strand_, [self = shared_from_this(), type, request_id, p = std::move(payload), close_after, request_bytes,
                       reply_bytes]() mutable {
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

void ServerConnection::Release(uint64_t request_bytes) {
  asio::post(strand_, [self = shared_from_this(), request_bytes] { self->Unpend(request_bytes); });
}

void ServerConnection::Close() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->queue_.empty() && !self->queue_.writing()) {
      self->CloseNow();
    } else {
      self->close_after_flush_ = true;
    }
  });
}

void ServerConnection::CloseNow() {
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

void ServerConnection::Unpend(uint64_t bytes) {
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

void ServerConnection::ArmReadTimer(std::chrono::milliseconds timeout, ReadWait wait) {
  ++read_timer_generation_;
  if (timeout.count() == 0 || closed_) {
    read_timer_.cancel();
    return;
  }
  read_timer_.expires_after(timeout);
  read_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this(), generation = read_timer_generation_,
                                                       wait, timeout](boost::system::error_code ec) {
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

void ServerConnection::Handshake() {
  stream_.AsyncHandshake(
      /*as_server=*/true, "", asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
        if (self->closed_) return;
        if (ec) {
          spdlog::warn(
              "closing connection {}: TLS handshake failed: {} (does the peer use TLS, with server.tls "
              "set?)",
              self->peer_, ec.message());
          return self->CloseNow();
        }
        self->ReadHeader();
      }));
}

bool ServerConnection::RefusePlainPeer() {
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

void ServerConnection::ArmAuthTimer() {
  if (!options().auth_required || options().auth_timeout.count() == 0) return;
  auth_timer_.expires_after(options().auth_timeout);
  auth_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->closed_ || self->authenticated_) return;
    spdlog::warn("closing connection {}: not authenticated within {} (server.auth_timeout_s)", self->peer_,
                 Seconds(self->options().auth_timeout));
    self->CloseNow();
  }));
}

void ServerConnection::RefuseAndClose(uint64_t request_id, const Status& status) {
  spdlog::warn("closing connection {}: {}", peer_, status.message());
  ++server_->in_flight;
  ++pending_requests_;
  Enqueue(static_cast<uint16_t>(wire::MessageType::ErrorReply), request_id, BuildErrorReply(status), 0, true);
  server_->OnReplied();
}

void ServerConnection::ReadHeader() {
  if (closed_ || close_after_flush_ || reading_) return;
  if (pending_bytes_ > options().max_write_queue_bytes) {
    paused_ = true;  // resumed by Unpend once the peer reads its replies
    return;
  }
  reading_ = true;
  // Idle only while nothing of this connection is in service; Unpend arms it later.
  ArmReadTimer(pending_requests_ == 0 && queue_.empty() ? options().idle_timeout : std::chrono::milliseconds(0),
               ReadWait::kIdle);
  stream_.async_read_some(
      asio::buffer(header_buf_),
      asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec, size_t n) {
        if (ec || n == kFrameHeaderSize) return self->OnHeader(ec);
        // A frame has started: the rest of its header is bounded by
        // read_timeout, like its payload, not by the idle timeout.
        self->in_frame_ = true;
        self->ArmReadTimer(self->options().read_timeout, ReadWait::kFrame);
        asio::async_read(self->stream_, asio::buffer(self->header_buf_ + n, kFrameHeaderSize - n),
                         asio::bind_executor(self->strand_, [self](boost::system::error_code ec, size_t) {
                           self->in_frame_ = false;
                           self->OnHeader(ec);
                         }));
      }));
}

void ServerConnection::OnHeader(boost::system::error_code ec) {
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
    return RefuseAndClose(
        header.request_id(),
        Status::PermissionDenied(MessageTypeName(header.type()) +
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

void ServerConnection::Skip(uint32_t remaining, Status refuse) {
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

void ServerConnection::Refuse(const Status& refuse) {
  ++server_->in_flight;
  ++pending_requests_;
  Responder(shared_from_this(), header_.type(), header_.request_id(), 0).SendError(refuse);
  ReadHeader();
}

void ServerConnection::Dispatch(std::shared_ptr<uint8_t[]> payload) {
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

void ServerConnection::Authenticate(const Request& req, const Responder& responder) {
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
    responder.SendError(
        Status::PermissionDenied("authentication failed: the client's shared secret differs from the server's (check "
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

void ServerConnection::DoWrite() {
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
      spdlog::warn("closing connection {}: a reply was not taken within {} (the peer does not read)", self->peer_,
                   Seconds(self->options().read_timeout));
      self->CloseNow();
    }));
  }
  asio::async_write(
      stream_, buffers,
      asio::bind_executor(strand_, [self = shared_from_this(), batch_bytes](boost::system::error_code ec, size_t) {
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

}  // namespace fleetps::net
