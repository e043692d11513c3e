#pragma once
// Stream: a connection's byte stream, plain TCP or TLS over it (common/net/tls.h), behind
// the AsyncReadStream / AsyncWriteStream interface that asio::async_read/async_write use.
// Internal to common/net: RpcServer and RpcClient hold one per connection.

#include <memory>
#include <optional>
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "common/net/tls.h"

namespace fleetps::net {

struct TlsContext::Native {
  boost::asio::ssl::context ssl{boost::asio::ssl::context::tls};
};

class Stream {
 public:
  using tcp = boost::asio::ip::tcp;
  using executor_type = tcp::socket::executor_type;
  using lowest_layer_type = tcp::socket;

  // Plain TCP.
  explicit Stream(tcp::socket socket) : plain_(std::move(socket)) {}
  // TLS over `socket` with `tls`'s context; Handshake() before any read or write.
  Stream(tcp::socket socket, const TlsContext& tls) : tls_(std::make_unique<Tls>(std::move(socket), tls)) {}

  executor_type get_executor() { return socket().get_executor(); }
  tcp::socket& socket() { return tls_ ? tls_->stream.next_layer() : *plain_; }
  lowest_layer_type& lowest_layer() { return socket(); }
  bool is_tls() const { return tls_ != nullptr; }

  // TLS: the handshake in the given role (a client checks that the server's certificate
  // names `host`); plain: completes at once with success.
  template <typename Handler>
  void AsyncHandshake(bool as_server, const std::string& host, Handler&& handler) {
    if (!tls_) {
      boost::asio::post(socket().get_executor(),
                        [h = std::forward<Handler>(handler)]() mutable { h(boost::system::error_code()); });
      return;
    }
    namespace ssl = boost::asio::ssl;
    if (!as_server) {
      tls_->stream.set_verify_mode(ssl::verify_peer);
      tls_->stream.set_verify_callback(ssl::host_name_verification(host));
      // SNI for names (not for IP literals, which SNI does not allow).
      boost::system::error_code ec;
      boost::asio::ip::make_address(host, ec);
      if (ec) SSL_set_tlsext_host_name(tls_->stream.native_handle(), host.c_str());
    }
    tls_->stream.async_handshake(as_server ? ssl::stream_base::server : ssl::stream_base::client,
                                 std::forward<Handler>(handler));
  }

  template <typename MutableBufferSequence, typename ReadHandler>
  void async_read_some(const MutableBufferSequence& buffers, ReadHandler&& handler) {
    if (tls_) {
      tls_->stream.async_read_some(buffers, std::forward<ReadHandler>(handler));
    } else {
      plain_->async_read_some(buffers, std::forward<ReadHandler>(handler));
    }
  }

  template <typename ConstBufferSequence, typename WriteHandler>
  void async_write_some(const ConstBufferSequence& buffers, WriteHandler&& handler) {
    if (tls_) {
      tls_->stream.async_write_some(buffers, std::forward<WriteHandler>(handler));
    } else {
      plain_->async_write_some(buffers, std::forward<WriteHandler>(handler));
    }
  }

 private:
  struct Tls {
    Tls(tcp::socket socket, const TlsContext& tls) : stream(std::move(socket), tls.native().ssl) {}
    boost::asio::ssl::stream<tcp::socket> stream;
  };
  std::optional<tcp::socket> plain_;
  std::unique_ptr<Tls> tls_;
};

}  // namespace fleetps::net
