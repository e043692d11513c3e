#pragma once
// RpcServer: accepts TCP connections and turns frames into calls of a handler.
//
// Each connection reads frames back to back (requests are pipelined: many in flight per
// connection) and hands every well-framed request to the handler together with a
// Responder. Replies may be sent in any order, from any thread; they are written in the
// order they are sent. A frame with a bad header (magic, version, oversize) cannot be
// re-synchronised: the connection gets an ErrorReply and is closed; other connections
// are unaffected. The payload is NOT interpreted here: the handler verifies it.
//
// TLS (options.tls): each accepted connection first completes a TLS handshake; a peer
// that does not speak TLS is logged and closed, and one that starts with a plain fleetps
// frame is first answered (in plain) Unavailable saying that the server serves TLS only.
//
// Authentication (options.auth_key): the AuthHello/AuthProve exchange is answered here; a
// wrong proof closes the connection. Handshake frames (AuthHello, AuthProve) larger than
// kMaxHandshakePayload are refused before allocation, on every connection; a connection's
// first two skip the max_inflight_bytes admission (still counting in it), so that peers
// filling the budget cannot keep a client from authenticating. With
// auth_required, before the exchange succeeds only handshake frames are accepted: any other
// frame is answered PermissionDenied and the connection closed, its payload never read, and
// a connection that has not authenticated within auth_timeout (from accept, TLS handshake
// included) is closed. Without auth_required (a secret on a trusted network) unauthenticated
// peers may send anything, bounded as below; handlers refuse what changes the job's state
// to them (Request::auth_configured, common/net/handler_util.h).
//
// Bounds (a hostile or broken peer cannot exhaust the server):
//  - at most max_connections connections; one more is answered Unavailable and closed;
//    accept errors (EMFILE, ...) back off instead of spinning;
//  - request bytes being served plus reply bytes not yet written count against
//    max_inflight_bytes; a request that would pass it is answered Busy *before* its
//    payload is allocated (the payload is read into a small scratch buffer and dropped);
//  - per connection, request bytes being served plus reply bytes not yet written above
//    max_write_queue_bytes stop reading from that connection until its peer reads;
//  - a connection with nothing in service and no request for idle_timeout is closed; a
//    frame whose first byte arrived (header and payload) must be complete within
//    read_timeout, and a write must complete within read_timeout;
//  - an exception thrown by the handler is answered Internal; it never ends the process.
//
// Lifecycle (admit, drain, stop): Start() listens; StopAccepting() closes the listener and
// answers requests that arrive later on open connections Unavailable; Drain() waits for
// every handed-out request to be answered; Stop() closes connections and must be called
// before the IoThreads stop. StopAccepting() and Stop() must not be called from an io
// thread.
// Thread-safety: all public methods are thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "common/net/auth.h"
#include "common/net/io_threads.h"
#include "common/net/tls.h"
#include "common/status.h"

namespace fleetps::net {

// A received request frame. `payload` is 8-byte aligned (FlatBuffers verifier-friendly).
struct Request {
  uint16_t type = 0;
  uint64_t request_id = 0;
  std::shared_ptr<uint8_t[]> payload;
  uint32_t payload_size = 0;
  // The connection proved it holds the shared secret (AuthHello/AuthProve, common/net/auth.h).
  bool authenticated = false;
  // The server holds a shared secret (RpcServerOptions::auth_key), so a peer could have
  // authenticated: requests that change the job's state need `authenticated`.
  bool auth_configured = false;
  // The connection it came on, unique per RpcServer (RpcServerOptions::on_connection_closed).
  uint64_t connection_id = 0;
  const uint8_t* data() const { return payload.get(); }
};

class ServerConnection;  // internal

// Sends the one reply to one request. Copyable; the first Send wins, later ones are
// ignored. If every copy is destroyed without a Send, an Internal error is sent so a
// client never waits forever.
class Responder {
 public:
  Responder(std::shared_ptr<ServerConnection> conn, uint16_t request_type, uint64_t request_id, uint64_t request_bytes);
  void Send(uint16_t type, flatbuffers::DetachedBuffer payload) const;
  void SendError(const Status& status) const;
  // The handler has copied what it needs from the request payload: its bytes stop
  // counting against the in-flight limits, so a request that waits long for its answer
  // (a barrier) holds none. The request still counts for Drain().
  void ReleaseRequestBytes() const;
  const std::string& peer() const;
  uint16_t request_type() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

using RequestHandler = std::function<void(Request request, Responder responder)>;

// One answered request, for metrics (RpcServerOptions::on_reply).
struct ReplyInfo {
  uint16_t request_type = 0;
  uint64_t request_bytes = 0;           // payload
  uint16_t reply_type = 0;              // ErrorReply for errors
  uint64_t reply_bytes = 0;             // payload
  std::chrono::nanoseconds latency{0};  // from the request's arrival to its answer
};

// The largest AuthHello / AuthProve payload accepted (theirs are about 60 bytes); larger
// handshake frames are refused before allocation and the connection closed.
inline constexpr uint32_t kMaxHandshakePayload = 1024;

struct RpcServerOptions {
  std::string host = "0.0.0.0";                    // address to bind
  uint16_t port = 0;                               // 0 = pick a free port (see RpcServer::port())
  uint32_t max_payload = 256u << 20;               // bytes; larger frames are refused
  uint64_t max_inflight_bytes = 1ull << 30;        // request bytes being served plus reply bytes
                                                   // not yet written; above it new requests are
                                                   // answered Busy
  uint32_t max_connections = 1024;                 // open connections; more are refused
  std::chrono::milliseconds idle_timeout{600000};  // no request and nothing in service; 0 = never
  std::chrono::milliseconds read_timeout{30000};   // to finish a started frame or a write; 0 = never
  uint64_t max_write_queue_bytes = 64ull << 20;    // per connection: in service + unwritten
                                                   // replies; above it reading pauses
  // Set: connections may authenticate (AuthHello/AuthProve are answered here, never reach
  // the handler). auth_required: any other frame before that is answered PermissionDenied
  // and the connection closed (its payload unread), and the exchange must succeed within
  // auth_timeout of the accept (0 = no deadline).
  std::shared_ptr<const AuthKey> auth_key = nullptr;
  bool auth_required = false;
  std::chrono::milliseconds auth_timeout{5000};
  // Set: every connection is TLS (common/net/tls.h); the context must hold a certificate.
  // The handshake must complete within read_timeout.
  std::shared_ptr<TlsContext> tls = nullptr;
  // Called once per answered request, on the thread that answers it (io thread or shard
  // lane): must be cheap and thread-safe. Null: nothing.
  std::function<void(const ReplyInfo&)> on_reply = nullptr;
  // Called once when the server closes a connection (the peer left, a timeout, a bad frame,
  // Stop()), with its Request::connection_id, on its io thread, never after Stop() returned
  // and the IoThreads stopped: must be cheap and thread-safe (a handler forgets what the
  // connection left, e.g. its metric reports). Requests of the connection may still be in
  // service. Null: nothing.
  std::function<void(uint64_t connection_id)> on_connection_closed = nullptr;
  // Allocates each request's payload of `bytes` (> 0) bytes, 8-byte aligned, on an io
  // thread: must be thread-safe, and may return null to fall back to ordinary memory. For a
  // handler that wants payloads in memory of its own (a GPU heter-trainer's page-locked
  // memory, copied to the device without staging). Null: ordinary memory.
  std::function<std::shared_ptr<uint8_t[]>(uint32_t bytes)> payload_allocator = nullptr;
};

class RpcServer {
 public:
  RpcServer(IoThreads& io, RpcServerOptions options, RequestHandler handler);  // io outlives this
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  Status Start();
  uint16_t port() const;
  void StopAccepting();
  // Returns true when nothing is in flight, false when `timeout` passed first.
  bool Drain(std::chrono::milliseconds timeout);
  void Stop();

  uint64_t in_flight() const;        // requests handed out and not answered
  uint64_t in_flight_bytes() const;  // see max_inflight_bytes
  uint64_t connections() const;

  struct Impl;  // defined in rpc_server_connection.h; public so the connection class can name it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace fleetps::net
