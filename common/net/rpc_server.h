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
// Lifecycle (admit, drain, stop): Start() listens; StopAccepting() closes the listener;
// Drain() waits for every handed-out request to be answered; Stop() closes connections
// and must be called before the IoThreads stop. StopAccepting() and Stop() must not be
// called from an io thread.
// Thread-safety: all public methods are thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "common/net/io_threads.h"
#include "common/status.h"

namespace fleetps::net {

// A received request frame. `payload` is 8-byte aligned (FlatBuffers verifier-friendly).
struct Request {
  uint16_t type = 0;
  uint64_t request_id = 0;
  std::shared_ptr<uint8_t[]> payload;
  uint32_t payload_size = 0;
  const uint8_t* data() const { return payload.get(); }
};

class ServerConnection;  // internal

// Sends the one reply to one request. Copyable; the first Send wins, later ones are
// ignored. If every copy is destroyed without a Send, an Internal error is sent so a
// client never waits forever.
class Responder {
 public:
  Responder(std::shared_ptr<ServerConnection> conn, uint16_t request_type, uint64_t request_id,
            uint64_t request_bytes);
  void Send(uint16_t type, flatbuffers::DetachedBuffer payload) const;
  void SendError(const Status& status) const;
  const std::string& peer() const;
  uint16_t request_type() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

using RequestHandler = std::function<void(Request request, Responder responder)>;

struct RpcServerOptions {
  std::string host = "0.0.0.0";           // address to bind
  uint16_t port = 0;                      // 0 = pick a free port (see RpcServer::port())
  uint32_t max_payload = 256u << 20;      // bytes; larger frames are refused
  uint64_t max_inflight_bytes = 1ull << 30;  // request bytes being served; above it new
                                             // requests are answered Busy
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

  uint64_t in_flight() const;
  uint64_t connections() const;

  struct Impl;  // defined in rpc_server.cc; public so the connection class can name it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace fleetps::net
