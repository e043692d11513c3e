#pragma once
// A minimal HTTP/1.1 endpoint for operators' tools: Prometheus scrapes (/metrics) and
// health probes (/healthz, /readyz). GET and HEAD only, one request per connection
// (Connection: close), request headers up to 8 KiB within 5 s, served by one thread of
// its own so a slow scrape never delays the RPC io threads.
// Thread-safety: Start/Stop from the owner's thread; the handler runs on the endpoint's
// thread, one request at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace fleetps::net {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Maps a request path ("/metrics", query string removed) to the response.
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

class HttpEndpoint {
 public:
  HttpEndpoint(std::string host, uint16_t port, HttpHandler handler);  // port 0: any free port
  ~HttpEndpoint();  // Stop()s
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Binds and starts serving; an error names the address (e.g. the port is taken).
  Status Start();
  uint16_t port() const;
  void Stop();  // idempotent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "OK", "Not Found", ... for the status codes the endpoint uses.
const char* HttpReason(int status);

}  // namespace fleetps::net
