#include "common/net/rpc_client.h"

#include <algorithm>
#include <future>
#include <string_view>
#include <vector>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/net/frame.h"
#include "common/net/rpc_client_impl.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using wire::MessageType;

namespace {

// How RpcServer words its admission refusal (common/net/rpc_server_connection.cc, "server is serving
// more than N request bytes"): the only Busy sent before any handler saw the request. The
// wire has no field saying "not applied", so this text is the marker; net_test pins it
// against a real RpcServer.
constexpr std::string_view kAdmissionBusy = "server is serving more than";

// Period of the deadline and liveness sweep while calls are pending.
constexpr std::chrono::milliseconds kSweepPeriod{20};

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
    case MessageType::ShuffleSend: c.busy = BusyRetry::kAlways; break;
    case MessageType::HeterHello:
    case MessageType::HeterFlush:  // flushing twice sends nothing more
      c.idempotent = true;
      c.busy = BusyRetry::kAlways;
      break;
    case MessageType::Save:
    case MessageType::Load:
    case MessageType::Shrink: c.timeout = options.admin_timeout; break;
    default: break;
  }
  return c;
}

void RpcClient::Impl::Start(CallPtr call) {
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

void RpcClient::Impl::Dispatch(const CallPtr& call) {
  if (conn && by_request.empty() && options.max_idle.count() > 0 &&
      Clock::now() - conn->last_used >= options.max_idle) {
    Retire();
  }
  if (conn && conn->ready) return Send(call);
  waiting.push_back(call);
  EnsureConnecting();
}

void RpcClient::Impl::Send(const CallPtr& call) {
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

void RpcClient::Impl::OnReply(const ConnPtr& c, const wire::FrameHeader& header, std::shared_ptr<uint8_t[]> payload) {
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

bool RpcClient::Impl::RetriesBusy(BusyRetry policy, const Status& busy) {
  switch (policy) {
    case BusyRetry::kNever: return false;
    case BusyRetry::kAlways: return true;
    case BusyRetry::kAdmission: return busy.message().find(kAdmissionBusy) != std::string::npos;
  }
  return false;
}

void RpcClient::Impl::BackOffBusy(const CallPtr& call, const Status& busy) {
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

void RpcClient::Impl::ArmSweep() {
  if (sweep_armed) return;
  sweep_armed = true;
  sweep_timer.expires_after(kSweepPeriod);
  sweep_timer.async_wait(asio::bind_executor(strand, [self = shared_from_this()](boost::system::error_code ec) {
    self->sweep_armed = false;
    if (ec || self->closed.load()) return;
    self->Sweep();
  }));
}

void RpcClient::Impl::Sweep() {
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

Status RpcClient::Impl::Expired(const CallState& call) const {
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

void RpcClient::Impl::Finish(const CallPtr& call, StatusOr<Reply> result) {
  call->done = true;
  auto cb = std::move(call->callback);
  cb(std::move(result));
}

void RpcClient::Impl::Complete(const CallPtr& call, StatusOr<Reply> result) {
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

void RpcClient::Impl::Shutdown() {
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
    if (impl->closed.load()) {
      return done->set_value(Status::Aborted("connection to " + impl->name + " closed by the client"));
    }
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
