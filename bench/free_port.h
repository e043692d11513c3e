#pragma once
// A loopback port that was free a moment ago, for benchmarks that run several servers in
// one process (bind an RPC server to port 0 and read the port back).

#include <cstdint>

#include "common/net/io_threads.h"
#include "common/net/rpc_server.h"

namespace fleetps::bench {

inline uint16_t FreeLoopbackPort() {
  net::IoThreads io(1);
  net::RpcServerOptions options;
  options.host = "127.0.0.1";
  net::RpcServer probe(io, options, [](net::Request, net::Responder) {});
  if (!probe.Start().ok()) return 0;
  const uint16_t port = probe.port();
  probe.Stop();
  return port;
}

}  // namespace fleetps::bench
