#pragma once
// RpcClient's state (RpcClient::Impl): the calls in flight and their deadlines, and the one
// connection with its (re)connect attempts, liveness probes and authentication. Internal to
// common/net: rpc_client.cc (the calls: sending, replies, Busy back-off, deadlines,
// completion) and rpc_client_connection.cc (the connection: connecting, reading and writing
// frames, losses, authentication) define its members. Everything below the constructor runs
// on `strand` unless its comment says otherwise.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <flatbuffers/flatbuffers.h>

#include "common/net/frame.h"
#include "common/net/frame_queue.h"
#include "common/net/rpc_client.h"
#include "common/net/stream.h"
#include "common/status.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {

struct RpcClient::Impl : std::enable_shared_from_this<RpcClient::Impl> {
  using Clock = std::chrono::steady_clock;

  Impl(IoThreads& io_threads, Endpoint ep, RpcClientOptions o, std::string peer)
      : io(io_threads),
        endpoint(std::move(ep)),
        name(peer.empty() ? "server " + endpoint.ToString() : std::move(peer)),
        options(o),
        strand(boost::asio::make_strand(io.context())),
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
    std::unique_ptr<boost::asio::steady_timer> busy_timer;
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
    bool ready = false;     // authenticated (or no auth): calls may be sent
    bool answered = false;  // a frame has arrived on it
  };
  using ConnPtr = std::shared_ptr<Conn>;

  struct ConnectWaiter {
    Clock::time_point deadline;
    uint64_t first_attempt;  // connect_attempts when it started waiting
    std::shared_ptr<std::promise<Status>> done;
  };

  std::string Describe(const CallState& c) const { return MessageTypeName(c.type) + " to " + name; }
  static std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

  // ---- everything below runs on `strand` ----

  void Start(CallPtr call);

  // Sends on the current connection, or waits for the next one.
  void Dispatch(const CallPtr& call);

  void Send(const CallPtr& call);

  void DoWrite(const ConnPtr& c);

  void ReadHeader(const ConnPtr& c);

  void OnHeader(const ConnPtr& c, boost::system::error_code ec);

  void OnReply(const ConnPtr& c, const wire::FrameHeader& header, std::shared_ptr<uint8_t[]> payload);

  static bool RetriesBusy(BusyRetry policy, const Status& busy);

  void BackOffBusy(const CallPtr& call, const Status& busy);

  // The connection `c` is gone: requests that may have reached the server and are not
  // idempotent fail (`code`, naming `reason`); the others wait for the next connection.
  void Lost(ConnPtr c, StatusCode code, const std::string& reason);

  void ReconnectLater(std::chrono::milliseconds delay);

  // Closes the current connection, which has nothing in flight (max_idle).
  void Retire();

  // ---- (re)connecting ----

  void EnsureConnecting();

  void Attempt();

  void ConnectTo(const boost::asio::ip::tcp::resolver::results_type& results);

  void Handshake(const std::shared_ptr<Stream>& stream);

  // The connect attempt is over: its timer may no longer close the socket.
  void EndAttempt();

  void AttemptFailed(const std::string& error);

  void OnConnected(Stream stream);

  // The connection may carry calls: Connect() returns, waiting calls go out.
  void Ready();

  // ---- authentication (common/net/auth.h) ----

  // Sends an exchange message on `c` ahead of the waiting calls; `next` runs on the strand
  // with the answer.
  void SendAuth(wire::MessageType type, flatbuffers::DetachedBuffer payload, std::function<void(StatusOr<Reply>)> next);

  void Authenticate(const ConnPtr& c);

  // A failed exchange is not retried: the secrets differ until an operator fixes them.
  void AuthFailed(const ConnPtr& c, const Status& st);

  // The server has been unreachable (every connect attempt failed) for request_timeout:
  // the calls waiting for a connection fail now, whatever their own deadline, and so does
  // each later call at the next failed attempt. Without this, a caller that lets one
  // Unavailable pass (a push lost with its pserver) would wait a whole deadline again on
  // its next call before it notices that the pserver is gone.
  void FailUnreachable(Clock::time_point now);

  void ExpireConnectWaiters(Clock::time_point now);

  // ---- deadlines and liveness ----

  void ArmSweep();

  void Sweep();

  Status Expired(const CallState& call) const;

  void SendProbe(const ConnPtr& c);

  // ---- completion ----

  // Runs the callback of a call that never entered `calls`.
  static void Finish(const CallPtr& call, StatusOr<Reply> result);

  void Complete(const CallPtr& call, StatusOr<Reply> result);

  // Close(): everything fails with Aborted.
  void Shutdown();

  std::chrono::milliseconds Jittered(std::chrono::milliseconds d);

  IoThreads& io;
  const Endpoint endpoint;
  const std::string name;
  const RpcClientOptions options;
  boost::asio::strand<boost::asio::io_context::executor_type> strand;
  std::atomic<bool> connected{false};
  std::atomic<bool> closed{false};  // Close() was called
  std::atomic<uint64_t> pending_count{0};
  std::atomic<uint64_t> reconnects{0}, resent{0}, busy_retries{0};

  // strand-only state:
  boost::asio::ip::tcp::resolver resolver;
  boost::asio::steady_timer connect_timer;  // bounds one connect attempt
  boost::asio::steady_timer backoff_timer;  // between connect attempts
  boost::asio::steady_timer sweep_timer;
  std::minstd_rand rng;                       // back-off jitter
  ConnPtr conn;                               // null while disconnected
  std::shared_ptr<Stream> connecting_stream;  // of the connect attempt under way
  uint32_t silent_losses = 0;                 // connections lost in a row before any frame arrived
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

}  // namespace fleetps::net
