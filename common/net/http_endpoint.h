#pragma once
// A minimal HTTP/1.1 endpoint for operators' tools: Prometheus scrapes (/metrics) and
// health probes (/healthz, /readyz). GET and HEAD only, one request per connection
// (Connection: close), request headers up to 8 KiB.
//
// Bounds (it listens on the network; a peer that opens connections and sends nothing, or
// many scrapes at once, cannot starve the probes or the process):
//  - at most options.max_connections connections open; one more is answered 503 and closed;
//  - the request head must arrive within options.io_timeout, and the answer be written
//    within options.io_timeout again; a slower peer is disconnected;
//  - a failed accept (EMFILE, ENFILE, ...) backs off (accept_backoff.h) instead of spinning.
// Threads: the endpoint's own io thread reads, writes and runs the handler of every path
// except options.blocking_paths, which run on a second thread of its own, one at a time:
// a scrape that waits for the process's work never delays a health probe (whose handler
// must answer from state at hand, without waiting for other work).
// Thread-safety: Start/Stop from the owner's thread; the handler may run on both threads at
// once (for a blocking path and another).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fleetps::net {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Maps a request path ("/metrics", query string removed) to the response.
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

struct HttpEndpointOptions {
  std::string host = "127.0.0.1";              // an IP address to bind
  uint16_t port = 0;                           // 0: any free port
  uint32_t max_connections = 64;               // open at once (>= 1); more are answered 503
  std::chrono::milliseconds io_timeout{5000};  // to receive the request head; again to write the answer
  std::vector<std::string> blocking_paths;     // handled on the endpoint's second thread
  // The options that choose host and port, named when listening fails.
  std::string what = "server.metrics_port / FLEETPS_METRICS_PORT / --metrics-port";
};

class HttpEndpoint {
 public:
  HttpEndpoint(HttpEndpointOptions options, HttpHandler handler);
  ~HttpEndpoint();  // Stop()s
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Binds and starts serving; an error names the address (e.g. the port is taken).
  Status Start();
  uint16_t port() const;
  // Accepts that failed since Start (each one backs off before the next).
  uint64_t accept_errors() const;
  uint32_t open_connections() const;  // accepted and not yet closed
  void Stop();                        // idempotent; waits for a blocking handler that is running to return

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The request line of a request head (the bytes before "\r\n\r\n"), as the endpoint reads
// it: `status` 0 and the method (GET or HEAD) and path (the target up to '?'), or the error
// status to answer (400: not "METHOD /target HTTP/1.x"; 405: another method). Exposed for
// tests and the fuzzer.
struct HttpRequestLine {
  int status = 0;
  std::string method;
  std::string path;
};
HttpRequestLine ParseHttpRequestLine(std::string_view head);

// The bytes of an answer: status line, Content-Type, Content-Length, Connection: close, and
// the body unless `head_only` (HEAD).
std::string FormatHttpResponse(const HttpResponse& response, bool head_only);

// "OK", "Not Found", ... for the status codes the endpoint uses.
const char* HttpReason(int status);

}  // namespace fleetps::net
