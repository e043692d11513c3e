#pragma once
// RpcClient: one pipelined TCP connection to one server endpoint, re-established when it
// drops.
//
// Call() may be invoked from any thread; many calls are in flight at once and replies
// are matched by request id in whatever order they arrive. The callback runs on an io
// thread exactly once, with the reply or with an error whose message names the request
// type and the peer ("PullSparse to pserver 1 (10.0.0.2:8500): ..."):
//   * the server's ErrorReply, converted to a Status;
//   * TimedOut when the call's deadline (CallOptions::timeout, every retry included)
//     passes while the request is with the server: it may or may not have been applied;
//   * Unavailable when it could not be delivered before the deadline (no connection), or
//     when its connection dropped after it was sent and it is not idempotent (it may or
//     may not have been applied, so it is not re-sent: the caller decides), or when the
//     server has been unreachable (every connect attempt failed) for request_timeout:
//     then every call waiting for a connection fails at once, and each later one at the
//     next failed attempt, so a gone server fails its callers about request_timeout after
//     it went away, not a deadline per call;
//   * Busy when the server still refused it as overloaded at the deadline;
//   * Aborted on Close().
//
// Connection loss: calls waiting for a reply that are idempotent, and calls never handed
// to the socket, wait for a new connection and are sent again. The client reconnects
// with exponential back-off (initial_backoff doubling up to max_backoff, each delay drawn
// uniformly from [d/2, d] so that many trainers do not reconnect in lock-step) while some
// call or Connect() waits; an idle client reconnects on its next call.
// Busy answers are retried with their own back-off (busy_initial_backoff doubling up to
// busy_max_backoff, jittered likewise) until the deadline, as CallOptions::busy allows.
// Liveness: while a reply is awaited and nothing has arrived from the server for
// keepalive_interval, the client sends a Ping; when nothing at all arrives for
// request_timeout after that probe, the server is declared unresponsive (a stopped
// process or a partitioned host still has its TCP connection open) and the connection is
// treated as lost, with TimedOut for the requests that cannot be re-sent. This bounds
// long calls (barriers, saves) against a frozen server by keepalive_interval +
// request_timeout instead of their own long deadline.
//
// Thread-safety: all public methods are thread-safe. Callbacks must not block.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <flatbuffers/flatbuffers.h>

#include "common/net/auth.h"
#include "common/net/endpoint.h"
#include "common/net/io_threads.h"
#include "common/net/tls.h"
#include "common/status.h"

namespace fleetps::net {

struct Reply {
  uint16_t type = 0;
  std::shared_ptr<uint8_t[]> payload;  // 8-byte aligned
  uint32_t payload_size = 0;
  const uint8_t* data() const { return payload.get(); }
};

using ReplyCallback = std::function<void(StatusOr<Reply>)>;

struct RpcClientOptions {
  uint32_t max_payload = 256u << 20;                        // bytes; larger replies are refused
  std::chrono::milliseconds connect_timeout{30000};         // total time Connect() keeps retrying
  std::chrono::milliseconds connect_attempt_timeout{5000};  // one TCP connect attempt
  std::chrono::milliseconds initial_backoff{50};            // first (re)connect retry delay, doubled each try
  std::chrono::milliseconds max_backoff{2000};              // cap of the (re)connect retry delay
  // Deadline of an ordinary call, retries and reconnects included (pulls, pushes, Ping,
  // TableStats, Stop, metrics, shuffle); 0 = none. Also how long a liveness probe may go
  // unanswered.
  std::chrono::milliseconds request_timeout{60000};
  std::chrono::milliseconds admin_timeout{3600000};     // deadline of Save, Load and Shrink; 0 = none
  std::chrono::milliseconds busy_initial_backoff{2};    // first delay before re-sending a Busy request
  std::chrono::milliseconds busy_max_backoff{100};      // cap of that delay
  std::chrono::milliseconds keepalive_interval{10000};  // silence before a liveness probe; 0 = no probes
  // Set: every new connection first runs the AuthHello/AuthProve exchange (common/net/auth.h)
  // and checks the server's proof; requests go out only after it. A wrong secret on either
  // side fails the waiting calls and Connect() with PermissionDenied.
  std::shared_ptr<const AuthKey> auth_key = nullptr;
  // Set: every connection is TLS (common/net/tls.h): the server's certificate must be signed
  // by the context's CA and name the endpoint's host; a failed handshake is a failed
  // connect attempt (retried; Connect() reports it).
  std::shared_ptr<TlsContext> tls = nullptr;
  // A connection unused for this long is replaced before the next call goes out. Servers
  // close idle connections (server.idle_timeout_s, default 600 s); a push sent just as the
  // server closes could not be re-sent, so the client retires the connection first. 0 = never.
  std::chrono::milliseconds max_idle{300000};
};

// Which Busy answers a call retries (with back-off, until its deadline).
enum class BusyRetry : uint8_t {
  kNever,      // every Busy goes to the caller
  kAdmission,  // only the server's admission refusal (RpcServer answered before any
               // handler saw the request, so nothing was applied); a handler's Busy
               // (a table out of room) may follow a partial application: to the caller
  kAlways,     // every Busy: the request is idempotent, or its handler's Busy applied nothing
};

// How one call is bounded and retried.
struct CallOptions {
  std::chrono::milliseconds timeout{0};  // deadline, every retry included; 0 = none
  // True when the server applying the request twice has the effect of applying it once:
  // after a connection loss it is re-sent. False: a request that may have reached the
  // server before the loss fails with Unavailable instead (never a blind re-send).
  bool idempotent = false;
  BusyRetry busy = BusyRetry::kAdmission;
};

// The policy of each message type of schemas/ps.fbs (the table is in rpc_client.cc);
// unknown types get request_timeout, not idempotent, admission Busy only.
CallOptions DefaultCallOptions(uint16_t type, const RpcClientOptions& options);

// What the client did to keep calls going (monotonic counts, for logs and tests).
struct RpcClientCounters {
  uint64_t reconnects = 0;    // connections re-established after a loss
  uint64_t resent = 0;        // requests sent again after a connection loss
  uint64_t busy_retries = 0;  // requests sent again after a Busy answer
};

class RpcClient {
 public:
  // io outlives this. `peer_name` names the server in messages; "" = "server host:port".
  RpcClient(IoThreads& io, Endpoint endpoint, RpcClientOptions options, std::string peer_name = "");
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Blocks until connected, retrying with back-off until connect_timeout. Unavailable
  // names the endpoint and the last error. Until the first successful Connect(), calls
  // fail at once with Unavailable; afterwards they wait for reconnects.
  Status Connect();
  // Sends with DefaultCallOptions(type).
  void Call(uint16_t type, flatbuffers::DetachedBuffer payload, ReplyCallback callback);
  void Call(uint16_t type, flatbuffers::DetachedBuffer payload, const CallOptions& call, ReplyCallback callback);
  // Blocking forms of Call(); must not be called from an io thread.
  StatusOr<Reply> CallSync(uint16_t type, flatbuffers::DetachedBuffer payload);
  StatusOr<Reply> CallSync(uint16_t type, flatbuffers::DetachedBuffer payload, const CallOptions& call);
  // Closes the connection; pending and later calls fail with Aborted. Idempotent; call
  // it while the IoThreads still run (the destructor does).
  void Close();

  const Endpoint& endpoint() const;
  // The peer as messages name it ("pserver 1 (10.0.0.2:8500)").
  const std::string& name() const;
  const RpcClientOptions& options() const;
  bool connected() const;
  uint64_t pending() const;
  RpcClientCounters counters() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace fleetps::net
