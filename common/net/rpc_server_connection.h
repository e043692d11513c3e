#pragma once
// The server side of a connection: RpcServer's shared state (RpcServer::Impl) and one
// accepted connection (ServerConnection), which reads frames, admits them against the
// server's bounds, hands requests to the handler and writes the replies that Responder
// queues. Internal to common/net: rpc_server.cc (accepting, Responder, lifecycle) and
// rpc_server_connection.cc (the connection) include it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <flatbuffers/flatbuffers.h>

#include "common/mutex.h"
#include "common/net/frame.h"
#include "common/net/frame_queue.h"
#include "common/net/rpc_server.h"
#include "common/net/stream.h"
#include "common/status.h"

namespace fleetps::net {

// RpcServer's state, shared with its connections (each holds it by shared_ptr, so it outlives
// them). The atomics and the mutex-guarded members may be touched from any thread.
struct RpcServer::Impl : std::enable_shared_from_this<RpcServer::Impl> {
  Impl(IoThreads& io_threads, RpcServerOptions o, RequestHandler h)
      : io(io_threads),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor(boost::asio::make_strand(io.context())),
        accept_backoff_timer(acceptor.get_executor()) {}

  void DoAccept();
  void Refuse(boost::asio::ip::tcp::socket socket);
  void OnReplied() {
    if (--in_flight == 0) {
      MutexLock lock(drain_mu);
      drain_cv.notify_all();
    }
  }

  IoThreads& io;
  const RpcServerOptions options;
  const RequestHandler handler;
  boost::asio::ip::tcp::acceptor acceptor;         // touched only from Start/StopAccepting/accept handlers
  boost::asio::steady_timer accept_backoff_timer;  // same strand as the acceptor
  std::chrono::milliseconds accept_backoff{0};
  std::atomic<bool> accepting{false};
  std::atomic<bool> admitting{true};  // false after StopAccepting: new requests -> Unavailable
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> inflight_bytes{0};  // requests in service + replies not written
  std::atomic<uint64_t> connection_count{0};
  std::atomic<uint64_t> next_connection_id{1};
  Mutex drain_mu;  // Drain's wait for in_flight to reach 0
  std::condition_variable drain_cv;

  Mutex conns_mu;
  std::vector<std::weak_ptr<ServerConnection>> conns GUARDED_BY(conns_mu);
};

// One accepted connection. All socket state is touched only on `strand_`.
//
// `pending_bytes_` is this connection's share of the server's in-flight bytes: request
// payloads handed to the handler and not yet answered (or released), plus reply frames
// queued and not yet written. Reading pauses while it is above max_write_queue_bytes.
class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  ServerConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<RpcServer::Impl> server);
  ~ServerConnection();

  void Start();

  // Thread-safe: queues one reply frame for writing; `request_bytes` of the request it
  // answers stop counting.
  void Enqueue(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload, uint64_t request_bytes,
               bool close_after);

  // Thread-safe: a request's bytes stop counting before it is answered.
  void Release(uint64_t request_bytes);

  // Graceful close: replies already queued are written first.
  void Close();

  const std::string& peer() const { return peer_; }
  RpcServer::Impl& server() { return *server_; }

 private:
  const RpcServerOptions& options() const { return server_->options; }

  void CloseNow();

  // Drops `bytes` from this connection's pending bytes and the server's count, and resumes
  // reading when the connection drops below its bound.
  void Unpend(uint64_t bytes);

  // One timer per direction; a stale expiry (re-armed or cancelled since) does nothing.
  // One read timer: kIdle (nothing in service, no request) or kFrame (a started frame).
  enum class ReadWait { kIdle, kFrame };
  void ArmReadTimer(std::chrono::milliseconds timeout, ReadWait wait);

  // TLS only: the handshake, bounded by the read timer armed in Start().
  void Handshake();

  // TLS only, before the handshake: when the peer's first bytes are a fleetps frame header
  // (a client without server.tls), answers it in plain with Unavailable saying so, echoing
  // its request id so that the client's call gets the message, and closes. True when so.
  bool RefusePlainPeer();

  // With auth_required, the exchange must succeed within auth_timeout of the accept.
  void ArmAuthTimer();

  // Answers the frame whose header was just read with `status`, then closes (its payload,
  // if any, is never read: the stream cannot be re-synchronised).
  void RefuseAndClose(uint64_t request_id, const Status& status);

  void ReadHeader();

  void OnHeader(boost::system::error_code ec);

  // Reads and drops `remaining` payload bytes of a refused request, then answers it.
  void Skip(uint32_t remaining, Status refuse);

  void Refuse(const Status& refuse);

  void Dispatch(std::shared_ptr<uint8_t[]> payload);

  // The two steps of the exchange in common/net/auth.h.
  void Authenticate(const Request& req, const Responder& responder);

  void DoWrite();

  static constexpr size_t kScratchBytes = 64 * 1024;

  Stream stream_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  boost::asio::steady_timer auth_timer_;  // auth_timeout, with auth_required
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
  bool paused_ = false;    // reading stopped by max_write_queue_bytes
  bool close_after_flush_ = false;
  bool closed_ = false;
  bool authenticated_ = false;
  uint32_t handshake_frames_ = 0;            // AuthHello / AuthProve frames read before authenticating
  std::string client_nonce_, server_nonce_;  // of the exchange under way
};

}  // namespace fleetps::net
