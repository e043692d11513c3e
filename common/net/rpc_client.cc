#include "common/net/rpc_client.h"

#include <algorithm>
#include <deque>
#include <future>
#include <optional>
#include <random>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/net/frame.h"
#include "common/net/frame_queue.h"
#include "common/net/stream.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using wire::MessageType;

namespace {

// How RpcServer words its admission refusal (common/net/rpc_server.cc, "server is serving
// more than N request bytes"): the only Busy sent before any handler saw the request. The
// wire has no field saying "not applied", so this text is the marker; net_test pins it
// against a real RpcServer.
constexpr std::string_view kAdmissionBusy = "server is serving more than";

// Period of the deadline and liveness sweep while calls are pending.
constexpr std::chrono::milliseconds kSweepPeriod{20};

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

// The retry table: what each request of schemas/ps.fbs may have done on the server when
// its connection drops before the reply, or when it is answered Busy.
//
//   type            idempotent  Busy retried  deadline        why
//   Ping            yes         always        request         read-only
//   PullSparse      yes         always        request         read-only; a row created on pull
//                                                             gets its deterministic initial value
//   PullDense       yes         always        request         read-only
//   TableStats      yes         always        request         read-only
//   MetricReport    yes         always        request         replaces this trainer's latest values
//   PushDenseParam  yes         always        request         overwrites a range with the same values
//                                                             (trainer 0, before the start barrier)
//   PushSparse      NO          admission     request         an optimizer step per copy; a table's
//                                                             Busy (row store full) can follow a
//                                                             partial application
//   PushDense       NO          admission     request         an optimizer step, or a sync-mode
//                                                             contribution, per copy (a push with a
//                                                             sync_step is counted once: PsClient
//                                                             re-sends it)
//   Barrier         NO          admission     caller's        a second arrival is refused ("already
//                                             timeout_ms      waiting") or counts for the next
//                                             + margin        generation
//   Stop            NO          admission     request         the server is going away: reconnecting
//                                                             would only wait for it
//   Save            NO          admission     admin           a second writer of the same version
//   Load            NO          admission     admin           may still be loading: not run twice
//   Shrink          NO          admission     admin           decays show/click once per copy
//   ShuffleSend     NO          always        request         a copy duplicates records; a full
//                                                             mailbox's Busy stored nothing
//   ShuffleFetch    NO          admission     request         takes the mail: a lost reply lost it
//
// "Admission" Busy is RpcServer's refusal before any handler saw the request (nothing was
// applied). A request that never reached the socket is re-sent whatever its type.
CallOptions DefaultCallOptions(uint16_t type, const RpcClientOptions& options) {
  CallOptions c;
  c.timeout = options.request_timeout;
  c.idempotent = false;
  c.busy = BusyRetry::kAdmission;
  switch (static_cast<MessageType>(type)) {
    case MessageType::Ping:
    case MessageType::PullSparse:
    case MessageType::PullRows:
    case MessageType::PullDense:
    case MessageType::TableStats:
    case MessageType::MetricReport:
    case MessageType::PushDenseParam:
      c.idempotent = true;
      c.busy = BusyRetry::kAlways;
      break;
    case MessageType::ShuffleSend:
      c.busy = BusyRetry::kAlways;
      break;
    case MessageType::HeterHello:
    case MessageType::HeterFlush:  // flushing twice sends nothing more
      c.idempotent = true;
      c.busy = BusyRetry::kAlways;
      break;
    case MessageType::Save:
    case MessageType::Load:
    case MessageType::Shrink:
      c.timeout = options.admin_timeout;
      break;
    default:
      break;
  }
  return c;
}

struct RpcClient::Impl : std::enable_shared_from_this<RpcClient::Impl> {
  Impl(IoThreads& io_threads, Endpoint ep, RpcClientOptions o, std::string peer)
      : io(io_threads),
        endpoint(std::move(ep)),
        name(peer.empty() ? "server " + endpoint.ToString() : std::move(peer)),
        options(o),
        strand(asio::make_strand(io.context())),
        resolver(strand),
        connect_timer(strand),
        backoff_timer(strand),
        sweep_timer(strand),
        rng(std::random_device{}()) {}

  // One call from Call() to its callback.
  struct CallState {
    uint64_t id = 0;  // key in `calls`
    uint16_t type = 0;
    std::shared_ptr<const flatbuffers::DetachedBuffer> payload;
    ReplyCallback callback;
    CallOptions options;
    Clock::time_point deadline = Clock::time_point::max();
    uint64_t request_id = 0;  // of its send on the current connection; 0 = not on it
    bool written = false;     // handed to the socket: the server may have it
    bool done = false;
    std::chrono::milliseconds busy_delay{0};
    uint32_t busy_retries = 0;
    Status last_busy;  // the Busy answer being backed off from
    std::unique_ptr<asio::steady_timer> busy_timer;
  };
  using CallPtr = std::shared_ptr<CallState>;

  // One TCP connection; replaced by a fresh one after a loss, so handlers of an old one
  // recognise themselves as stale (conn != current).
  struct Conn {
    explicit Conn(Stream s) : stream(std::move(s)) {}
    Stream stream;
    FrameQueue queue;
    uint8_t header_buf[kFrameHeaderSize];
    Clock::time_point quiet_since;  // last frame received, or the start of the current wait
    Clock::time_point last_used;    // last frame sent or received
    uint64_t probe_id = 0;          // liveness Ping awaiting an answer; 0 = none
    Clock::time_point probe_sent;
    bool ready = false;             // authenticated (or no auth): calls may be sent
    bool answered = false;          // a frame has arrived on it
  };
  using ConnPtr = std::shared_ptr<Conn>;

  struct ConnectWaiter {
    Clock::time_point deadline;
    uint64_t first_attempt;  // connect_attempts when it started waiting
    std::shared_ptr<std::promise<Status>> done;
  };

  std::string Describe(const CallState& c) const { return MessageTypeName(c.type) + " to " + name; }

  // ---- everything below runs on `strand` ----

  void Start(CallPtr call) {
    if (closed.load()) return Finish(call, Status::Aborted(Describe(*call) + ": the client was closed"));
    if (!ever_connected) {
      return Finish(call, Status::Unavailable(Describe(*call) + ": not connected (Connect() failed or was not called)"));
    }
    call->id = next_call_id++;
    if (call->options.timeout.count() > 0) call->deadline = Clock::now() + call->options.timeout;
    calls.emplace(call->id, call);
    ArmSweep();
    Dispatch(call);
  }

  // Sends on the current connection, or waits for the next one.
  void Dispatch(const CallPtr& call) {
    if (conn && by_request.empty() && options.max_idle.count() > 0 &&
        Clock::now() - conn->last_used >= options.max_idle) {
      Retire();
    }
    if (conn && conn->ready) return Send(call);
    waiting.push_back(call);
    EnsureConnecting();
  }

  void Send(const CallPtr& call) {
    const uint64_t id = next_request_id++;
    call->request_id = id;
    call->written = false;
    call->last_busy = Status::OK();
    conn->last_used = Clock::now();
    if (by_request.empty()) conn->quiet_since = conn->last_used;  // a reply is awaited from now on
    by_request.emplace(id, call);
    conn->queue.Push(call->type, id, call->payload);
    if (!conn->queue.writing()) DoWrite(conn);
  }

  void DoWrite(const ConnPtr& c) {
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

  void ReadHeader(const ConnPtr& c) {
    asio::async_read(c->stream, asio::buffer(c->header_buf),
                     asio::bind_executor(strand, [self = shared_from_this(), c](boost::system::error_code ec, size_t) {
                       self->OnHeader(c, ec);
                     }));
  }

  void OnHeader(const ConnPtr& c, boost::system::error_code ec) {
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

  void OnReply(const ConnPtr& c, const wire::FrameHeader& header, std::shared_ptr<uint8_t[]> payload) {
    c->quiet_since = Clock::now();  // any frame shows the server is alive
    c->last_used = c->quiet_since;
    c->probe_id = 0;
    c->answered = true;
    silent_losses = 0;
    auto it = by_request.find(header.request_id());
    if (it == by_request.end()) return;  // a probe's answer, or a call that already timed out
    CallPtr call = it->second;
    by_request.erase(it);
    call->request_id = 0;
    const uint16_t type = header.type();
    if (type == static_cast<uint16_t>(MessageType::ErrorReply)) {
      Status st = ParseErrorReply(payload.get(), header.payload_length(), Describe(*call));
      if (st.IsBusy() && RetriesBusy(call->options.busy, st)) return BackOffBusy(call, st);
      return Complete(call, st);
    }
    if (type != ReplyType(static_cast<MessageType>(call->type))) {
      return Complete(call, Status::Corruption(Describe(*call) + ": answered with " + MessageTypeName(type)));
    }
    Complete(call, Reply{type, std::move(payload), header.payload_length()});
  }

  static bool RetriesBusy(BusyRetry policy, const Status& busy) {
    switch (policy) {
      case BusyRetry::kNever: return false;
      case BusyRetry::kAlways: return true;
      case BusyRetry::kAdmission: return busy.message().find(kAdmissionBusy) != std::string::npos;
    }
    return false;
  }

  void BackOffBusy(const CallPtr& call, const Status& busy) {
    call->busy_delay = call->busy_delay.count() == 0 ? options.busy_initial_backoff
                                                     : std::min(call->busy_delay * 2, options.busy_max_backoff);
    const auto delay = Jittered(call->busy_delay);
    if (Clock::now() + delay >= call->deadline) {
      return Complete(call, Status::Busy(busy.message() + " (still Busy after " + std::to_string(call->busy_retries) +
                                         " retries when the " + Ms(call->options.timeout) + " deadline came)"));
    }
    ++call->busy_retries;
    ++busy_retries;
    call->last_busy = busy;
    if (!call->busy_timer) call->busy_timer = std::make_unique<asio::steady_timer>(strand);
    call->busy_timer->expires_after(delay);
    call->busy_timer->async_wait(
        asio::bind_executor(strand, [self = shared_from_this(), call](boost::system::error_code ec) {
          if (ec || call->done || self->closed.load()) return;
          self->Dispatch(call);
        }));
  }

  // The connection `c` is gone: requests that may have reached the server and are not
  // idempotent fail (`code`, naming `reason`); the others wait for the next connection.
  void Lost(ConnPtr c, StatusCode code, const std::string& reason) {  // by value: may be `conn` itself
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

  void ReconnectLater(std::chrono::milliseconds delay) {
    if (closed.load() || conn || connecting) return;
    connecting = true;
    backoff = std::min(delay * 2, options.max_backoff);
    backoff_timer.expires_after(Jittered(std::min(delay, options.max_backoff)));
    backoff_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed.load()) return;
      self->Attempt();
    }));
  }

  // Closes the current connection, which has nothing in flight (max_idle).
  void Retire() {
    spdlog::debug("{}: replacing a connection idle for {}", name, Ms(options.max_idle));
    boost::system::error_code ignored;
    conn->stream.socket().close(ignored);
    conn.reset();
    connected = false;
    retired = true;
  }

  // ---- (re)connecting ----

  void EnsureConnecting() {
    if (closed.load() || conn || connecting) return;
    if (!unreachable_since) unreachable_since = Clock::now();
    connecting = true;
    backoff = options.initial_backoff;
    Attempt();
  }

  void Attempt() {
    ++connect_attempts;
    resolver.async_resolve(
        endpoint.host, std::to_string(endpoint.port),
        asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec,
                                                                tcp::resolver::results_type results) {
          if (self->closed.load()) return;
          if (ec) return self->AttemptFailed("cannot resolve " + self->endpoint.host + ": " + ec.message());
          self->ConnectTo(results);
        }));
  }

  void ConnectTo(const tcp::resolver::results_type& results) {
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
        asio::bind_executor(strand, [self = shared_from_this(), stream](boost::system::error_code ec,
                                                                        const tcp::endpoint&) {
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

  void Handshake(const std::shared_ptr<Stream>& stream) {
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
                                       "server.tls.ca_file that names " + self->endpoint.host +
                                       " in its subjectAltName)");
          }
          self->OnConnected(std::move(*stream));
        }));
  }

  // The connect attempt is over: its timer may no longer close the socket.
  void EndAttempt() {
    ++attempt_seq;
    connect_timer.cancel();
    connecting_stream.reset();
  }

  void AttemptFailed(const std::string& error) {
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

  void OnConnected(Stream stream) {
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

  // The connection may carry calls: Connect() returns, waiting calls go out.
  void Ready() {
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

  // ---- authentication (common/net/auth.h) ----

  // Sends an exchange message on `c` ahead of the waiting calls; `next` runs on the strand
  // with the answer.
  void SendAuth(MessageType type, flatbuffers::DetachedBuffer payload, std::function<void(StatusOr<Reply>)> next) {
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

  void Authenticate(const ConnPtr& c) {
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
        return self->AuthFailed(c, Status::PermissionDenied(
                                       self->name + " could not prove that it holds the shared secret (a different "
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

  // A failed exchange is not retried: the secrets differ until an operator fixes them.
  void AuthFailed(const ConnPtr& c, const Status& st) {
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

  // The server has been unreachable (every connect attempt failed) for request_timeout:
  // the calls waiting for a connection fail now, whatever their own deadline, and so does
  // each later call at the next failed attempt. Without this, a caller that lets one
  // Unavailable pass (a push lost with its pserver) would wait a whole deadline again on
  // its next call before it notices that the pserver is gone.
  void FailUnreachable(Clock::time_point now) {
    if (!unreachable_since || options.request_timeout.count() == 0 ||
        now - *unreachable_since < options.request_timeout) {
      return;
    }
    const auto down = std::chrono::duration_cast<std::chrono::milliseconds>(now - *unreachable_since);
    std::deque<CallPtr> failed;
    failed.swap(waiting);
    for (const CallPtr& call : failed) {
      Complete(call, Status::Unavailable(Describe(*call) + ": not sent: " + name + " has been unreachable for " +
                                         Ms(down) + ", longer than the request deadline of " +
                                         Ms(options.request_timeout) + " (" + last_error +
                                         "; is the server running and reachable?)"));
    }
  }

  void ExpireConnectWaiters(Clock::time_point now) {
    std::erase_if(waiters, [&](const ConnectWaiter& w) {
      if (w.deadline > now) return false;
      w.done->set_value(Status::Unavailable(
          "cannot connect to " + name + " after " + std::to_string(connect_attempts - w.first_attempt) +
          " attempts in " + Ms(options.connect_timeout) + ": " + last_error +
          " (is the pserver running and the endpoint right?)"));
      return true;
    });
  }

  // ---- deadlines and liveness ----

  void ArmSweep() {
    if (sweep_armed) return;
    sweep_armed = true;
    sweep_timer.expires_after(kSweepPeriod);
    sweep_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
      self->sweep_armed = false;
      if (ec || self->closed.load()) return;
      self->Sweep();
    }));
  }

  void Sweep() {
    const auto now = Clock::now();
    std::vector<CallPtr> expired;
    for (auto& [id, call] : calls) {
      if (call->deadline <= now) expired.push_back(call);
    }
    for (const CallPtr& call : expired) Complete(call, Expired(*call));
    ExpireConnectWaiters(now);
    if (conn && options.keepalive_interval.count() > 0 && options.request_timeout.count() > 0) {
      if (conn->probe_id != 0 && now - conn->probe_sent >= options.request_timeout) {
        Lost(conn, StatusCode::kTimedOut,
             "the server sent nothing for " +
                 Ms(std::chrono::duration_cast<std::chrono::milliseconds>(now - conn->quiet_since)) +
                 ", not even the answer to a liveness Ping (a stopped process or an unreachable host)");
      } else if (conn->probe_id == 0 && !by_request.empty() && now - conn->quiet_since >= options.keepalive_interval) {
        SendProbe(conn);
      }
    }
    if (!calls.empty() || !waiters.empty()) ArmSweep();
  }

  Status Expired(const CallState& call) const {
    const std::string within = Ms(call.options.timeout);
    if (call.request_id != 0) {
      return Status::TimedOut(Describe(call) + ": no reply within " + within +
                              (call.options.idempotent ? "" : "; it may have been applied") +
                              " (is the server stopped, overloaded or unreachable?)");
    }
    if (!call.last_busy.ok()) {
      return Status::Busy(call.last_busy.message() + " (still Busy after " + std::to_string(call.busy_retries) +
                          " retries when the " + within + " deadline came)");
    }
    return Status::Unavailable(Describe(call) + ": not sent within " + within + ": no connection to the server (" +
                               last_error + ")");
  }

  void SendProbe(const ConnPtr& c) {
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreatePingRequest(fbb));
    c->probe_id = next_request_id++;
    c->probe_sent = Clock::now();
    c->queue.Push(static_cast<uint16_t>(MessageType::Ping), c->probe_id, fbb.Release());
    if (!c->queue.writing()) DoWrite(c);
  }

  // ---- completion ----

  // Runs the callback of a call that never entered `calls`.
  static void Finish(const CallPtr& call, StatusOr<Reply> result) {
    call->done = true;
    auto cb = std::move(call->callback);
    cb(std::move(result));
  }

  void Complete(const CallPtr& call, StatusOr<Reply> result) {
    if (call->done) return;
    call->done = true;
    calls.erase(call->id);
    if (call->request_id != 0) by_request.erase(call->request_id);
    call->request_id = 0;
    if (call->busy_timer) call->busy_timer->cancel();
    call->payload.reset();
    auto cb = std::move(call->callback);
    cb(std::move(result));
  }

  // Close(): everything fails with Aborted.
  void Shutdown() {
    connected = false;
    boost::system::error_code ignored;
    if (conn) conn->stream.socket().close(ignored);
    conn.reset();
    if (connecting_stream) connecting_stream->socket().close(ignored);
    resolver.cancel();
    connect_timer.cancel();
    backoff_timer.cancel();
    sweep_timer.cancel();
    for (auto& w : waiters) w.done->set_value(Status::Aborted("connection to " + name + " closed by the client"));
    waiters.clear();
    waiting.clear();
    std::vector<CallPtr> all;
    for (auto& [id, call] : calls) all.push_back(call);
    for (const CallPtr& call : all) {
      Complete(call, Status::Aborted(Describe(*call) + ": connection closed by the client"));
    }
  }

  std::chrono::milliseconds Jittered(std::chrono::milliseconds d) {
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    if (us <= 1) return d;
    std::uniform_int_distribution<int64_t> pick(us - us / 2, us);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(pick(rng)) +
                                                                 std::chrono::microseconds(999));
  }

  IoThreads& io;
  const Endpoint endpoint;
  const std::string name;
  const RpcClientOptions options;
  asio::strand<asio::io_context::executor_type> strand;
  std::atomic<bool> connected{false};
  std::atomic<bool> closed{false};  // Close() was called
  std::atomic<uint64_t> pending_count{0};
  std::atomic<uint64_t> reconnects{0}, resent{0}, busy_retries{0};

  // strand-only state:
  tcp::resolver resolver;
  asio::steady_timer connect_timer;  // bounds one connect attempt
  asio::steady_timer backoff_timer;  // between connect attempts
  asio::steady_timer sweep_timer;
  std::minstd_rand rng;  // back-off jitter
  ConnPtr conn;          // null while disconnected
  std::shared_ptr<Stream> connecting_stream;  // of the connect attempt under way
  uint32_t silent_losses = 0;  // connections lost in a row before any frame arrived
  bool attempt_timed_out = false;
  bool connecting = false;  // an attempt or its back-off is under way
  bool ever_connected = false;
  bool retired = false;  // the last connection was closed by max_idle, not lost
  // Since when calls have needed a connection and every attempt failed; reset by a
  // connection that becomes ready (FailUnreachable).
  std::optional<Clock::time_point> unreachable_since;
  bool sweep_armed = false;
  std::chrono::milliseconds backoff{0};
  uint64_t connect_attempts = 0;
  uint64_t attempt_seq = 0;
  std::string last_error = "never connected";
  std::unordered_map<uint64_t, CallPtr> calls;       // every call not completed, by CallState::id
  std::unordered_map<uint64_t, CallPtr> by_request;  // calls sent on `conn`, by request id
  std::deque<CallPtr> waiting;                       // calls waiting for a connection
  std::vector<ConnectWaiter> waiters;                // Connect() callers
  uint64_t next_call_id = 1;
  uint64_t next_request_id = 1;
};

RpcClient::RpcClient(IoThreads& io, Endpoint endpoint, RpcClientOptions options, std::string peer_name)
    : impl_(std::make_shared<Impl>(io, std::move(endpoint), options, std::move(peer_name))) {}

RpcClient::~RpcClient() { Close(); }

Status RpcClient::Connect() {
  if (impl_->connected.load()) return Status::OK();
  if (impl_->closed.load()) return Status::Aborted("connection to " + impl_->name + " closed by the client");
  if (impl_->options.tls && !impl_->options.tls->can_dial()) {
    return Status::InvalidArgument("cannot verify " + impl_->name +
                                   " over TLS: no CA certificate (set server.tls.ca_file or FLEETPS_TLS_CA_FILE)");
  }
  auto done = std::make_shared<std::promise<Status>>();
  auto future = done->get_future();
  const auto deadline = std::chrono::steady_clock::now() + impl_->options.connect_timeout;
  asio::post(impl_->strand, [impl = impl_, done, deadline] {
    if (impl->closed.load()) return done->set_value(Status::Aborted("connection to " + impl->name + " closed by the client"));
    if (impl->conn) return done->set_value(Status::OK());
    impl->waiters.push_back({deadline, impl->connect_attempts, done});
    impl->ArmSweep();
    impl->EnsureConnecting();
  });
  return future.get();
}

void RpcClient::Call(uint16_t type, flatbuffers::DetachedBuffer payload, ReplyCallback callback) {
  Call(type, std::move(payload), DefaultCallOptions(type, impl_->options), std::move(callback));
}

void RpcClient::Call(uint16_t type, flatbuffers::DetachedBuffer payload, const CallOptions& options,
                     ReplyCallback callback) {
  if (payload.size() > impl_->options.max_payload) {
    callback(Status::InvalidArgument(MessageTypeName(type) + " to " + impl_->name + " of " +
                                     std::to_string(payload.size()) + " bytes exceeds max_message_bytes " +
                                     std::to_string(impl_->options.max_payload) + "; send smaller batches"));
    return;
  }
  ++impl_->pending_count;
  auto call = std::make_shared<Impl::CallState>();
  call->type = type;
  call->payload = std::make_shared<const flatbuffers::DetachedBuffer>(std::move(payload));
  call->options = options;
  call->callback = [impl = impl_, cb = std::move(callback)](StatusOr<Reply> r) {
    --impl->pending_count;
    cb(std::move(r));
  };
  asio::post(impl_->strand, [impl = impl_, call = std::move(call)]() mutable { impl->Start(std::move(call)); });
}

StatusOr<Reply> RpcClient::CallSync(uint16_t type, flatbuffers::DetachedBuffer payload) {
  return CallSync(type, std::move(payload), DefaultCallOptions(type, impl_->options));
}

StatusOr<Reply> RpcClient::CallSync(uint16_t type, flatbuffers::DetachedBuffer payload, const CallOptions& options) {
  auto promise = std::make_shared<std::promise<StatusOr<Reply>>>();
  auto future = promise->get_future();
  Call(type, std::move(payload), options, [promise](StatusOr<Reply> r) { promise->set_value(std::move(r)); });
  return future.get();
}

void RpcClient::Close() {
  if (impl_->closed.exchange(true)) return;
  auto done = std::make_shared<std::promise<void>>();
  asio::post(impl_->strand, [impl = impl_, done] {
    impl->Shutdown();
    done->set_value();
  });
  // If the io threads are already stopped the post never runs; do not wait forever.
  done->get_future().wait_for(std::chrono::seconds(5));
}

const Endpoint& RpcClient::endpoint() const { return impl_->endpoint; }
const std::string& RpcClient::name() const { return impl_->name; }
const RpcClientOptions& RpcClient::options() const { return impl_->options; }
bool RpcClient::connected() const { return impl_->connected.load(); }
uint64_t RpcClient::pending() const { return impl_->pending_count.load(); }

RpcClientCounters RpcClient::counters() const {
  return RpcClientCounters{impl_->reconnects.load(), impl_->resent.load(), impl_->busy_retries.load()};
}

}  // namespace fleetps::net
