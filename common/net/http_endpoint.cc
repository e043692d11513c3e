#include "common/net/http_endpoint.h"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <sstream>
#include <thread>

namespace fleetps::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxRequestHeader = 8192;
constexpr auto kRequestTimeout = std::chrono::seconds(5);

// One connection: read the request head, answer, close.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const HttpHandler& handler)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), handler_(handler), buf_(kMaxRequestHeader) {}

  void Run() {
    timer_.expires_after(kRequestTimeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->socket_.close();  // too slow: drop the connection
    });
    asio::async_read_until(socket_, buf_, "\r\n\r\n",
                           [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                             self->OnRequest(ec);
                           });
  }

 private:
  void OnRequest(const boost::system::error_code& ec) {
    HttpResponse resp;
    bool head = false;
    if (ec) {
      if (ec != asio::error::not_found) return;  // closed, timed out: nothing to answer
      resp = {431, "text/plain; charset=utf-8", "request header too large\n"};
    } else {
      std::istream in(&buf_);
      std::string method, target, version;
      in >> method >> target >> version;
      head = method == "HEAD";
      if (method != "GET" && !head) {
        resp = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
      } else {
        const std::string path = target.substr(0, target.find('?'));
        try {
          resp = handler_(path);
        } catch (const std::exception& e) {
          resp = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
        }
      }
    }
    std::ostringstream out;
    out << "HTTP/1.1 " << resp.status << " " << HttpReason(resp.status) << "\r\nContent-Type: " << resp.content_type
        << "\r\nContent-Length: " << resp.body.size() << "\r\nConnection: close\r\n\r\n";
    if (!head) out << resp.body;
    reply_ = out.str();
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
  const HttpHandler& handler_;  // owned by the endpoint's Impl, which outlives its io thread
  asio::streambuf buf_;
  std::string reply_;
};

}  // namespace

const char* HttpReason(int status) {
  switch (status) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

struct HttpEndpoint::Impl {
  Impl(std::string h, uint16_t p, HttpHandler fn) : host(std::move(h)), port(p), handler(std::move(fn)) {}

  void Accept() {
    acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) std::make_shared<HttpSession>(std::move(socket), handler)->Run();
      Accept();
    });
  }

  std::string host;
  uint16_t port;
  HttpHandler handler;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
};

HttpEndpoint::HttpEndpoint(std::string host, uint16_t port, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(handler))) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

Status HttpEndpoint::Start() {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(impl_->host, ec);
  if (ec) return Status::InvalidArgument("metrics endpoint: '" + impl_->host + "' is not an IP address");
  const tcp::endpoint ep(address, impl_->port);
  const std::string where = impl_->host + ":" + std::to_string(impl_->port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen for HTTP (metrics, health) on " + where + ": " + ec.message() +
                               " (choose another port: server.metrics_port / FLEETPS_METRICS_PORT / --metrics-port)");
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
  return Status::OK();
}

uint16_t HttpEndpoint::port() const { return impl_->port; }

void HttpEndpoint::Stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace fleetps::net
