#pragma once
// TcpProxy (tests only): a loopback TCP relay in front of one server, to script network
// faults between an RpcClient and a real server.
//   Cut()          closes every relayed connection (a crash, a reset, a dropped link);
//                  new connections are relayed again.
//   Freeze(dir)    stops relaying in one or both directions while the connections stay
//                  open: what a client sees of a SIGSTOPped server or a partitioned host.
//                  Held bytes are delivered after Freeze(kNone), or dropped by Cut().
// Thread-safety: the public methods may be called from any thread but an io thread of
// the proxy. Runs its own io thread.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

namespace fleetps::net::testing {

class TcpProxy {
 public:
  enum class Frozen : int { kNone = 0, kToServer = 1, kToClient = 2, kBoth = 3 };

  explicit TcpProxy(uint16_t upstream_port) : upstream_port_(upstream_port) {
    namespace asio = boost::asio;
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TcpProxy() {
    std::promise<void> done;
    boost::asio::post(io_, [this, &done] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      CloseAll();
      done.set_value();
    });
    done.get_future().wait();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int accepted() const { return accepted_.load(); }
  void Freeze(Frozen f) { frozen_ = static_cast<int>(f); }
  void Cut() {
    std::promise<void> done;
    boost::asio::post(io_, [this, &done] {
      CloseAll();
      done.set_value();
    });
    done.get_future().wait();
  }

 private:
  using tcp = boost::asio::ip::tcp;
  struct Pair {
    explicit Pair(boost::asio::io_context& io) : client(io), server(io) {}
    tcp::socket client, server;
    void Close() {
      boost::system::error_code ec;
      client.close(ec);
      server.close(ec);
    }
  };

  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      ++accepted_;
      auto pair = std::make_shared<Pair>(io_);
      pair->client = std::move(s);
      boost::system::error_code cec;
      pair->server.connect({boost::asio::ip::make_address("127.0.0.1"), upstream_port_}, cec);
      if (cec) {
        pair->Close();
      } else {
        pairs_.push_back(pair);
        Relay(pair, pair->client, pair->server, static_cast<int>(Frozen::kToServer));
        Relay(pair, pair->server, pair->client, static_cast<int>(Frozen::kToClient));
      }
      Accept();
    });
  }

  // Copies from -> to until either side closes; holds the bytes while `direction` is frozen.
  void Relay(std::shared_ptr<Pair> pair, tcp::socket& from, tcp::socket& to, int direction) {
    auto buf = std::make_shared<std::array<char, 16384>>();
    from.async_read_some(boost::asio::buffer(*buf),
                         [this, pair, &from, &to, direction, buf](boost::system::error_code ec, size_t n) {
                           if (ec) return pair->Close();
                           Forward(pair, from, to, direction, buf, n);
                         });
  }
  void Forward(std::shared_ptr<Pair> pair, tcp::socket& from, tcp::socket& to, int direction,
               std::shared_ptr<std::array<char, 16384>> buf, size_t n) {
    if (!to.is_open()) return;
    if ((frozen_.load() & direction) != 0) {
      auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(5));
      timer->async_wait([this, pair, &from, &to, direction, buf, n, timer](boost::system::error_code) {
        Forward(pair, from, to, direction, buf, n);
      });
      return;
    }
    boost::asio::async_write(to, boost::asio::buffer(*buf, n),
                             [this, pair, &from, &to, direction, buf](boost::system::error_code ec, size_t) {
                               if (ec) return pair->Close();
                               Relay(pair, from, to, direction);
                             });
  }

  void CloseAll() {
    for (auto& p : pairs_) p->Close();
    pairs_.clear();
  }

  const uint16_t upstream_port_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_ =
      std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(io_.get_executor());
  tcp::acceptor acceptor_{io_};
  std::vector<std::shared_ptr<Pair>> pairs_;  // io thread only
  std::atomic<int> frozen_{0};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace fleetps::net::testing
