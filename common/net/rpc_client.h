#pragma once
// RpcClient: one pipelined TCP connection to one server endpoint.
//
// Call() may be invoked from any thread; many calls are in flight at once and replies
// are matched by request id in whatever order they arrive. The callback runs on an io
// thread exactly once, with the reply or with an error: the server's ErrorReply
// converted to a Status prefixed with the endpoint, Unavailable when the connection
// is lost, TimedOut when the per-call timeout passes, Aborted on Close().
// Thread-safety: all public methods are thread-safe. Callbacks must not block.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <flatbuffers/flatbuffers.h>

#include "common/net/endpoint.h"
#include "common/net/io_threads.h"
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
  uint32_t max_payload = 256u << 20;                  // bytes; larger replies are refused
  std::chrono::milliseconds connect_timeout{30000};   // total time Connect() keeps retrying
  std::chrono::milliseconds initial_backoff{50};      // first retry delay, doubled each try
  std::chrono::milliseconds max_backoff{2000};        // cap of the retry delay
  std::chrono::milliseconds request_timeout{0};       // per call; 0 = no timeout
};

class RpcClient {
 public:
  RpcClient(IoThreads& io, Endpoint endpoint, RpcClientOptions options);  // io outlives this
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Blocks until connected, retrying with exponential backoff until connect_timeout.
  // Unavailable names the endpoint and the last error.
  Status Connect();
  void Call(uint16_t type, flatbuffers::DetachedBuffer payload, ReplyCallback callback);
  // Blocking form of Call(); must not be called from an io thread.
  StatusOr<Reply> CallSync(uint16_t type, flatbuffers::DetachedBuffer payload);
  // Closes the connection; pending calls fail with Aborted. Idempotent; call it while
  // the IoThreads still run (the destructor does).
  void Close();

  const Endpoint& endpoint() const;
  bool connected() const;
  uint64_t pending() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace fleetps::net
