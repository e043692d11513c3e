#include "common/net/http_endpoint.h"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/net/accept_backoff.h"

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What the sessions of one endpoint share with it; outlives every session (each holds it).
// Outside the anonymous namespace: HttpEndpoint::Impl holds one (in a unity build a field of
// an internal type would be -Wsubobject-linkage).
struct HttpShared {
  HttpShared(HttpEndpointOptions o, HttpHandler h) : options(std::move(o)), handler(std::move(h)) {}
  const HttpEndpointOptions options;
  const HttpHandler handler;
  std::atomic<uint32_t> open{0};  // sessions alive
};

namespace {

using Shared = HttpShared;

constexpr size_t kMaxRequestHeader = 8192;

HttpResponse Text(int status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body)}; }

// One connection: read the request head, answer, close. Counted in Shared::open while alive.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, std::shared_ptr<Shared> shared, asio::thread_pool& blocking)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        shared_(std::move(shared)),
        blocking_(blocking),
        buf_(kMaxRequestHeader) {
    shared_->open.fetch_add(1);
  }
  ~HttpSession() { shared_->open.fetch_sub(1); }

  void Run() {
    Deadline();
    asio::async_read_until(
        socket_, buf_, "\r\n\r\n",
        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) { self->OnRequest(ec, n); });
  }

 private:
  // Closes the connection unless the phase in progress (read or write) ends within io_timeout.
  void Deadline() {
    timer_.expires_after(shared_->options.io_timeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;  // re-armed or cancelled
      boost::system::error_code ignored;
      self->socket_.close(ignored);  // too slow: drop the connection
    });
  }

  void OnRequest(const boost::system::error_code& ec, size_t head_bytes) {
    timer_.cancel();
    if (ec) {
      if (ec != asio::error::not_found) return;  // closed, timed out: nothing to answer
      return Answer(Text(431, "request header too large (8 KiB at most)\n"), false);
    }
    const std::string head(asio::buffers_begin(buf_.data()), asio::buffers_begin(buf_.data()) + head_bytes);
    const HttpRequestLine line = ParseHttpRequestLine(head);
    if (line.status == 405) return Answer(Text(405, "only GET and HEAD\n"), false);
    if (line.status != 0) return Answer(Text(400, "bad request line (expected GET /path HTTP/1.1)\n"), false);
    const bool head_only = line.method == "HEAD";
    const auto& blocking = shared_->options.blocking_paths;
    if (std::find(blocking.begin(), blocking.end(), line.path) == blocking.end()) {
      return Answer(Handle(line.path), head_only);
    }
    // A handler that may wait: on the blocking thread, the answer written back on the io thread.
    asio::post(blocking_, [self = shared_from_this(), path = line.path, head_only] {
      HttpResponse resp = self->Handle(path);
      asio::post(self->socket_.get_executor(),
                 [self, resp = std::move(resp), head_only] { self->Answer(resp, head_only); });
    });
  }

  HttpResponse Handle(const std::string& path) const {
    try {
      return shared_->handler(path);
    } catch (const std::exception& e) {
      return Text(500, std::string("internal error: ") + e.what() + "\n");
    }
  }

  void Answer(const HttpResponse& resp, bool head_only) {
    if (!socket_.is_open()) return;  // timed out meanwhile
    reply_ = FormatHttpResponse(resp, head_only);
    Deadline();
    asio::async_write(socket_, asio::buffer(reply_),
                      [self = shared_from_this()](const boost::system::error_code&, size_t) {
                        boost::system::error_code ignored;
                        self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                        self->socket_.close(ignored);
                        self->timer_.cancel();
                      });
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  std::shared_ptr<Shared> shared_;
  asio::thread_pool& blocking_;  // the endpoint's; joined before its io_context is destroyed
  asio::streambuf buf_;
  std::string reply_;
};

}  // namespace

HttpRequestLine ParseHttpRequestLine(std::string_view head) {
  HttpRequestLine out;
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    out.status = 400;
    return out;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || target.empty() || target[0] != '/' || version.substr(0, 7) != "HTTP/1." ||
      version.size() != 8) {
    out.status = 400;
    return out;
  }
  if (method != "GET" && method != "HEAD") {
    out.status = 405;
    return out;
  }
  out.method = std::string(method);
  out.path = std::string(target.substr(0, target.find('?')));
  return out;
}

std::string FormatHttpResponse(const HttpResponse& resp, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " " + HttpReason(resp.status) +
                    "\r\nContent-Type: " + resp.content_type +
                    "\r\nContent-Length: " + std::to_string(resp.body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += resp.body;
  return out;
}

const char* HttpReason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

struct HttpEndpoint::Impl {
  Impl(HttpEndpointOptions o, HttpHandler fn) : shared(std::make_shared<Shared>(std::move(o), std::move(fn))) {}

  void Accept() {
    acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // EMFILE, ENFILE, ...: the connection stays in the backlog; retrying at once would spin.
        accept_errors.fetch_add(1);
        backoff = NextAcceptBackoff(backoff);
        spdlog::warn("HTTP endpoint {}:{}: accept failed: {}; retrying in {} ms", shared->options.host, port,
                     ec.message(), backoff.count());
        backoff_timer.expires_after(backoff);
        backoff_timer.async_wait([this](const boost::system::error_code& wait_ec) {
          if (!wait_ec && acceptor.is_open()) Accept();
        });
        return;
      }
      backoff = std::chrono::milliseconds(0);
      if (shared->open.load() >= shared->options.max_connections) {
        Refuse(std::move(socket));
      } else {
        std::make_shared<HttpSession>(std::move(socket), shared, blocking)->Run();
      }
      Accept();
    });
  }

  // Best effort: a 503 written without waiting (a fresh socket's send buffer is empty), then close.
  void Refuse(tcp::socket socket) {
    const std::string reply = FormatHttpResponse(
        Text(503, std::to_string(shared->options.max_connections) + " connections open; retry later\n"), false);
    boost::system::error_code ec;
    socket.non_blocking(true, ec);
    socket.write_some(asio::buffer(reply), ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  std::shared_ptr<Shared> shared;
  uint16_t port = 0;
  std::atomic<uint64_t> accept_errors{0};
  std::chrono::milliseconds backoff{0};  // io thread only
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer backoff_timer{io};
  std::thread thread;
  // Declared after io: destroyed (its queued tasks, holding sessions, with it) before io.
  asio::thread_pool blocking{1};
};

HttpEndpoint::HttpEndpoint(HttpEndpointOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {
  impl_->port = impl_->shared->options.port;
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

Status HttpEndpoint::Start() {
  const HttpEndpointOptions& o = impl_->shared->options;
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (o.max_connections == 0) return Status::InvalidArgument("HTTP endpoint " + where + ": max_connections is 0");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(o.host, ec);
  if (ec) {
    return Status::InvalidArgument("HTTP (metrics, health) endpoint: '" + o.host + "' is not an IP address (" + o.what +
                                   ")");
  }
  const tcp::endpoint ep(address, o.port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen for HTTP (metrics, health) on " + where + ": " + ec.message() +
                               " (choose another address or port: " + o.what + ")");
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
  return Status::OK();
}

uint16_t HttpEndpoint::port() const { return impl_->port; }

uint64_t HttpEndpoint::accept_errors() const { return impl_->accept_errors.load(); }

uint32_t HttpEndpoint::open_connections() const { return impl_->shared->open.load(); }

void HttpEndpoint::Stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->backoff_timer.cancel();
  });
  impl_->io.stop();
  impl_->thread.join();
  impl_->blocking.stop();
  impl_->blocking.join();
}

}  // namespace fleetps::net
