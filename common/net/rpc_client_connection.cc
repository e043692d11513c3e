#include "common/net/rpc_client_impl.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using wire::MessageType;

void RpcClient::Impl::DoWrite(const ConnPtr& c) {
  if (c != conn || c->queue.empty()) return;
  const auto& buffers = c->queue.StartBatch();
  for (size_t i = 0; i < c->queue.batch_size(); ++i) {
    auto it = by_request.find(c->queue.batch_request_id(i));
    if (it != by_request.end()) it->second->written = true;
  }
  asio::async_write(c->stream, buffers,
                    asio::bind_executor(strand, [self = shared_from_this(), c](boost::system::error_code ec, size_t) {
                      c->queue.FinishBatch();
                      if (c != self->conn) return;
                      if (ec) return self->Lost(c, StatusCode::kUnavailable, "sending failed: " + ec.message());
                      self->DoWrite(c);
                    }));
}

void RpcClient::Impl::ReadHeader(const ConnPtr& c) {
  asio::async_read(c->stream, asio::buffer(c->header_buf),
                   asio::bind_executor(strand, [self = shared_from_this(), c](boost::system::error_code ec, size_t) {
                     self->OnHeader(c, ec);
                   }));
}

void RpcClient::Impl::OnHeader(const ConnPtr& c, boost::system::error_code ec) {
  if (c != conn) return;
  if (ec) return Lost(c, StatusCode::kUnavailable, "connection lost (" + ec.message() + ")");
  wire::FrameHeader header;
  Status st = DecodeFrameHeader(c->header_buf, options.max_payload, name, &header);
  if (!st.ok()) return Lost(c, StatusCode::kUnavailable, "connection dropped after a bad frame (" + st.message() + ")");
  std::shared_ptr<uint8_t[]> payload(new uint8_t[std::max<uint32_t>(header.payload_length(), 1)]);
  uint8_t* data = payload.get();
  asio::async_read(c->stream, asio::buffer(data, header.payload_length()),
                   asio::bind_executor(strand, [self = shared_from_this(), c, header, payload = std::move(payload)](
                                                   boost::system::error_code ec, size_t) mutable {
                     if (c != self->conn) return;
                     if (ec) return self->Lost(c, StatusCode::kUnavailable, "connection lost (" + ec.message() + ")");
                     self->OnReply(c, header, std::move(payload));
                     if (c == self->conn) self->ReadHeader(c);
                   }));
}

// `c` by value: it may be `conn` itself.
void RpcClient::Impl::Lost(ConnPtr c, StatusCode code, const std::string& reason) {
  if (c != conn) return;
  conn.reset();
  connected = false;
  boost::system::error_code ignored;
  c->stream.socket().close(ignored);
  last_error = reason;
  std::vector<CallPtr> sent;
  sent.reserve(by_request.size());
  for (auto& [id, call] : by_request) sent.push_back(call);
  by_request.clear();
  std::sort(sent.begin(), sent.end(), [](const CallPtr& a, const CallPtr& b) { return a->request_id < b->request_id; });
  size_t failed = 0;
  for (const CallPtr& call : sent) {
    call->request_id = 0;
    if (call->written && !call->options.idempotent) {
      ++failed;
      Complete(call, Status(code, Describe(*call) + ": " + reason +
                                      " before the reply; it may have been applied, so it was not re-sent"));
      continue;
    }
    if (call->written) ++resent;
    call->written = false;
    waiting.push_back(call);
  }
  if (!sent.empty()) {
    spdlog::warn("{}: {}; {} request(s) failed, {} to re-send", name, reason, failed, waiting.size());
  } else {
    spdlog::debug("{}: {} while idle", name, reason);
  }
  if (waiting.empty()) return;
  if (c->answered) return EnsureConnecting();
  // Closed without a single answer (the server refuses this client: its connection cap, a
  // TLS mismatch, ...): reconnecting at once would spin, so wait as after a failed attempt.
  ReconnectLater(options.initial_backoff * (1u << std::min(silent_losses++, 16u)));
}

void RpcClient::Impl::ReconnectLater(std::chrono::milliseconds delay) {
  if (closed.load() || conn || connecting) return;
  connecting = true;
  backoff = std::min(delay * 2, options.max_backoff);
  backoff_timer.expires_after(Jittered(std::min(delay, options.max_backoff)));
  backoff_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->closed.load()) return;
    self->Attempt();
  }));
}

void RpcClient::Impl::Retire() {
  spdlog::debug("{}: replacing a connection idle for {}", name, Ms(options.max_idle));
  boost::system::error_code ignored;
  conn->stream.socket().close(ignored);
  conn.reset();
  connected = false;
  retired = true;
}

void RpcClient::Impl::EnsureConnecting() {
  if (closed.load() || conn || connecting) return;
  if (!unreachable_since) unreachable_since = Clock::now();
  connecting = true;
  backoff = options.initial_backoff;
  Attempt();
}

void RpcClient::Impl::Attempt() {
  ++connect_attempts;
  resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                         asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec,
                                                                                 tcp::resolver::results_type results) {
                           if (self->closed.load()) return;
                           if (ec)
                             return self->AttemptFailed("cannot resolve " + self->endpoint.host + ": " + ec.message());
                           self->ConnectTo(results);
                         }));
}

void RpcClient::Impl::ConnectTo(const tcp::resolver::results_type& results) {
  auto stream = options.tls ? std::make_shared<Stream>(tcp::socket(strand), *options.tls)
                            : std::make_shared<Stream>(tcp::socket(strand));
  connecting_stream = stream;
  const uint64_t attempt = ++attempt_seq;
  // One deadline for the TCP connect and the TLS handshake.
  connect_timer.expires_after(options.connect_attempt_timeout);
  connect_timer.async_wait(
      asio::bind_executor(strand, [self = shared_from_this(), stream, attempt](boost::system::error_code ec) {
        if (ec || attempt != self->attempt_seq) return;  // cancelled, or the attempt is over
        self->attempt_timed_out = true;
        boost::system::error_code ignored;
        stream->socket().close(ignored);
      }));
  attempt_timed_out = false;
  asio::async_connect(
      stream->socket(), results,
      asio::bind_executor(
          strand, [self = shared_from_this(), stream](boost::system::error_code ec, const tcp::endpoint&) {
            if (!ec && !self->closed.load() && stream->is_tls()) return self->Handshake(stream);
            self->EndAttempt();
            if (self->closed.load()) return;
            if (self->attempt_timed_out) {
              return self->AttemptFailed("no answer to connect within " + Ms(self->options.connect_attempt_timeout));
            }
            if (ec) return self->AttemptFailed(ec.message());
            self->OnConnected(std::move(*stream));
          }));
}

void RpcClient::Impl::Handshake(const std::shared_ptr<Stream>& stream) {
  stream->AsyncHandshake(
      /*as_server=*/false, endpoint.host,
      asio::bind_executor(strand, [self = shared_from_this(), stream](boost::system::error_code ec) {
        self->EndAttempt();
        if (self->closed.load()) return;
        if (self->attempt_timed_out) {
          return self->AttemptFailed("no TLS handshake within " + Ms(self->options.connect_attempt_timeout) +
                                     " (does the server serve TLS? server.tls)");
        }
        if (ec) {
          return self->AttemptFailed("TLS handshake failed: " + ec.message() +
                                     " (the server must serve TLS, server.tls, with a certificate signed by "
                                     "server.tls.ca_file that names " +
                                     self->endpoint.host + " in its subjectAltName)");
        }
        self->OnConnected(std::move(*stream));
      }));
}

void RpcClient::Impl::EndAttempt() {
  ++attempt_seq;
  connect_timer.cancel();
  connecting_stream.reset();
}

void RpcClient::Impl::AttemptFailed(const std::string& error) {
  last_error = error;
  const auto now = Clock::now();
  ExpireConnectWaiters(now);
  std::erase_if(waiting, [](const CallPtr& c) { return c->done; });
  FailUnreachable(now);
  if (waiting.empty() && waiters.empty()) {  // nobody waits: the next call reconnects
    connecting = false;
    return;
  }
  Clock::duration delay = Jittered(backoff);
  backoff = std::min(backoff * 2, options.max_backoff);
  // A Connect() caller gets its answer at its deadline, not a back-off later.
  for (const auto& w : waiters) delay = std::min(delay, std::max<Clock::duration>(w.deadline - now, {}));
  backoff_timer.expires_after(delay);
  backoff_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->closed.load()) return;
    self->Attempt();
  }));
}

void RpcClient::Impl::OnConnected(Stream stream) {
  connecting = false;
  boost::system::error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
  conn = std::make_shared<Conn>(std::move(stream));
  conn->quiet_since = conn->last_used = Clock::now();
  if (ever_connected) {
    ++reconnects;
    if (retired) {
      spdlog::debug("{}: connected again after idling", name);
    } else {
      spdlog::info("{}: reconnected; {} request(s) waiting go out now", name, waiting.size());
    }
  }
  retired = false;
  ReadHeader(conn);
  if (options.auth_key) return Authenticate(conn);
  Ready();
}

void RpcClient::Impl::Ready() {
  unreachable_since.reset();
  conn->ready = true;
  ever_connected = true;
  connected = true;
  for (auto& w : waiters) w.done->set_value(Status::OK());
  waiters.clear();
  std::deque<CallPtr> queued;
  queued.swap(waiting);
  for (const CallPtr& call : queued) {
    if (!call->done && conn) Send(call);
  }
}

void RpcClient::Impl::SendAuth(MessageType type, flatbuffers::DetachedBuffer payload,
                               std::function<void(StatusOr<Reply>)> next) {
  auto call = std::make_shared<CallState>();
  call->type = static_cast<uint16_t>(type);
  call->payload = std::make_shared<const flatbuffers::DetachedBuffer>(std::move(payload));
  call->options.busy = BusyRetry::kNever;
  call->options.timeout =
      options.request_timeout.count() > 0 ? options.request_timeout : std::chrono::milliseconds(60000);
  call->deadline = Clock::now() + call->options.timeout;
  call->callback = std::move(next);
  call->id = next_call_id++;
  calls.emplace(call->id, call);
  ArmSweep();
  Send(call);
}

void RpcClient::Impl::Authenticate(const ConnPtr& c) {
  const std::string client_nonce = RandomNonce();
  flatbuffers::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateAuthHelloRequest(
      fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(client_nonce.data()), client_nonce.size())));
  SendAuth(MessageType::AuthHello, fbb.Release(), [self = shared_from_this(), c, client_nonce](StatusOr<Reply> r) {
    if (c != self->conn) return;  // lost meanwhile: the next connection starts over
    if (!r.ok()) return self->AuthFailed(c, r.status());
    flatbuffers::Verifier verifier(r->data(), r->payload_size);
    const auto* hello = verifier.VerifyBuffer<wire::AuthHelloReply>(nullptr)
                            ? flatbuffers::GetRoot<wire::AuthHelloReply>(r->data())
                            : nullptr;
    const auto bytes = [](const flatbuffers::Vector<uint8_t>* v) {
      return v == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(v->data()), v->size());
    };
    const std::string server_nonce = hello ? bytes(hello->server_nonce()) : std::string();
    if (hello == nullptr || server_nonce.size() != kAuthNonceBytes ||
        !self->options.auth_key->Verify(bytes(hello->server_proof()), "server", client_nonce, server_nonce)) {
      return self->AuthFailed(
          c, Status::PermissionDenied(self->name + " could not prove that it holds the shared secret (a different "
                                                   "secret, or not a fleetps server of this cluster)"));
    }
    const std::string proof = self->options.auth_key->Proof("client", server_nonce, client_nonce);
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateAuthProveRequest(
        fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(proof.data()), proof.size())));
    self->SendAuth(MessageType::AuthProve, fbb.Release(), [self, c](StatusOr<Reply> proved) {
      if (c != self->conn) return;
      if (!proved.ok()) return self->AuthFailed(c, proved.status());
      self->Ready();
    });
  });
}

void RpcClient::Impl::AuthFailed(const ConnPtr& c, const Status& st) {
  const Status error = st.IsPermissionDenied() || st.IsUnavailable()
                           ? Status(st.code(), "authentication with " + name + " failed: " + st.message())
                           : st.WithContext("authentication with " + name);
  spdlog::error("{}", error.ToString());
  last_error = error.message();
  conn.reset();
  connected = false;
  boost::system::error_code ignored;
  c->stream.socket().close(ignored);
  for (auto& w : waiters) w.done->set_value(error);
  waiters.clear();
  std::deque<CallPtr> queued;
  queued.swap(waiting);
  for (const CallPtr& call : queued) Complete(call, Status(error.code(), Describe(*call) + ": " + error.message()));
}

void RpcClient::Impl::FailUnreachable(Clock::time_point now) {
  if (!unreachable_since || options.request_timeout.count() == 0 ||
      now - *unreachable_since < options.request_timeout) {
    return;
  }
  const auto down = std::chrono::duration_cast<std::chrono::milliseconds>(now - *unreachable_since);
  std::deque<CallPtr> failed;
  failed.swap(waiting);
  for (const CallPtr& call : failed) {
    Complete(call,
             Status::Unavailable(Describe(*call) + ": not sent: " + name + " has been unreachable for " + Ms(down) +
                                 ", longer than the request deadline of " + Ms(options.request_timeout) + " (" +
                                 last_error + "; is the server running and reachable?)"));
  }
}

void RpcClient::Impl::ExpireConnectWaiters(Clock::time_point now) {
  std::erase_if(waiters, [&](const ConnectWaiter& w) {
    if (w.deadline > now) return false;
    w.done->set_value(Status::Unavailable(
        "cannot connect to " + name + " after " + std::to_string(connect_attempts - w.first_attempt) + " attempts in " +
        Ms(options.connect_timeout) + ": " + last_error + " (is the pserver running and the endpoint right?)"));
    return true;
  });
}

void RpcClient::Impl::SendProbe(const ConnPtr& c) {
  flatbuffers::FlatBufferBuilder fbb(32);
  fbb.Finish(wire::CreatePingRequest(fbb));
  c->probe_id = next_request_id++;
  c->probe_sent = Clock::now();
  c->queue.Push(static_cast<uint16_t>(MessageType::Ping), c->probe_id, fbb.Release());
  if (!c->queue.writing()) DoWrite(c);
}

std::chrono::milliseconds RpcClient::Impl::Jittered(std::chrono::milliseconds d) {
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  if (us <= 1) return d;
  std::uniform_int_distribution<int64_t> pick(us - us / 2, us);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(pick(rng)) +
                                                               std::chrono::microseconds(999));
}

}  // namespace fleetps::net
