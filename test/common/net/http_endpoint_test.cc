// The HTTP endpoint of /metrics, /healthz and /readyz over real loopback sockets: a health
// probe is answered while a scrape's handler is blocked, a connection past the cap is
// answered 503, a peer that sends nothing or reads nothing is dropped at the deadline, and
// an accept that fails for want of descriptors backs off instead of spinning (in a child
// process with a low RLIMIT_NOFILE).
#include "common/net/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include "common/net/accept_backoff.h"
#include "test/support/http.h"

namespace fleetps::net {
namespace {

using namespace std::chrono_literals;

using fleetps::testing::ConnectLoopback;
using fleetps::testing::HttpExchange;
using fleetps::testing::ReadUntilClosed;

std::string Get(uint16_t port, const std::string& path) {
  return HttpExchange(port, "GET " + path + " HTTP/1.1\r\n\r\n");
}

// Polls `done` up to 10 s.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

TEST_CASE("The request line: GET and HEAD of an absolute path, the query dropped; anything else refused") {
  auto line = ParseHttpRequestLine("GET /metrics?name=x HTTP/1.1\r\nHost: a\r\n");
  CHECK(line.status == 0);
  CHECK(line.method == "GET");
  CHECK(line.path == "/metrics");
  CHECK(ParseHttpRequestLine("HEAD /healthz HTTP/1.0").path == "/healthz");
  CHECK(ParseHttpRequestLine("POST /metrics HTTP/1.1").status == 405);
  for (const char* bad : {"", "GET", "GET /metrics", "GET metrics HTTP/1.1", "GET  HTTP/1.1", "GET /x HTTP/2",
                          "GET /x FTP/1.1", " /x HTTP/1.1", "GET /x HTTP/1.1x"}) {
    INFO(bad);
    CHECK(ParseHttpRequestLine(bad).status == 400);
  }
  CHECK(FormatHttpResponse({404, "text/plain", "no\n"}, false) ==
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno\n");
  CHECK(FormatHttpResponse({200, "text/plain", "ok\n"}, true).find("ok\n") == std::string::npos);
}

TEST_CASE("Accept back-off: 10 ms after a failure, doubling to 1 s") {
  CHECK(NextAcceptBackoff(0ms) == 10ms);
  CHECK(NextAcceptBackoff(10ms) == 20ms);
  CHECK(NextAcceptBackoff(640ms) == 1000ms);
  CHECK(NextAcceptBackoff(1000ms) == 1000ms);
}

// A scrape that waits for the process's work (a busy shard lane) must not hold a liveness
// probe behind it: /metrics runs on the endpoint's blocking thread.
TEST_CASE("/healthz is answered while a /metrics handler is blocked") {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  HttpEndpointOptions o;
  o.blocking_paths = {"/metrics"};
  HttpEndpoint http(o, [&](const std::string& path) {
    if (path == "/metrics") {
      entered.set_value();
      released.wait();
      return HttpResponse{200, "text/plain", "metrics\n"};
    }
    return HttpResponse{200, "text/plain", "ok\n"};
  });
  REQUIRE(http.Start().ok());
  auto scrape = std::async(std::launch::async, [&] { return Get(http.port(), "/metrics"); });
  entered.get_future().wait();
  const std::string health = Get(http.port(), "/healthz");
  const bool scrape_still_blocked = scrape.wait_for(0s) == std::future_status::timeout;
  release.set_value();
  CHECK(health.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(health.find("\r\n\r\nok\n") != std::string::npos);
  CHECK(scrape_still_blocked);
  CHECK(scrape.get().find("\r\n\r\nmetrics\n") != std::string::npos);
  const std::string head = HttpExchange(http.port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  CHECK(head.find("Content-Length: 3\r\nConnection: close\r\n\r\n") != std::string::npos);
  CHECK(HttpExchange(http.port(), "BREW /pot HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(HttpExchange(http.port(), "GET pot\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
}

TEST_CASE("Connections past the cap are answered 503; a closed one makes room") {
  HttpEndpointOptions o;
  o.max_connections = 2;
  HttpEndpoint http(o, [](const std::string&) { return HttpResponse{200, "text/plain", "ok\n"}; });
  REQUIRE(http.Start().ok());
  const int idle1 = ConnectLoopback(http.port());
  const int idle2 = ConnectLoopback(http.port());
  REQUIRE((idle1 >= 0 && idle2 >= 0));
  REQUIRE(Eventually([&] { return http.open_connections() == 2; }));
  const std::string refused = Get(http.port(), "/healthz");
  CHECK(refused.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
  CHECK(refused.find("2 connections open; retry later") != std::string::npos);
  ::close(idle1);
  CHECK(Eventually([&] { return http.open_connections() == 1; }));
  CHECK(Get(http.port(), "/healthz").rfind("HTTP/1.1 200 OK", 0) == 0);
  ::close(idle2);
}

TEST_CASE("A peer that sends no request, or reads no answer, is dropped at the deadline") {
  HttpEndpointOptions o;
  o.io_timeout = 200ms;
  const std::string big(64u << 20, 'x');  // far more than the socket buffers hold
  HttpEndpoint http(o, [&](const std::string& path) {
    return HttpResponse{200, "text/plain", path == "/big" ? big : std::string("ok\n")};
  });
  REQUIRE(http.Start().ok());

  const int silent = ConnectLoopback(http.port());
  REQUIRE(silent >= 0);
  CHECK(ReadUntilClosed(silent).empty());  // closed by the endpoint, nothing answered
  ::close(silent);

  const int slow = ConnectLoopback(http.port());
  REQUIRE(slow >= 0);
  const std::string request = "GET /big HTTP/1.1\r\n\r\n";
  REQUIRE(::write(slow, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  // Not read from meanwhile: the endpoint must give up writing to it. (Polling at once could
  // see no connection before the endpoint has accepted this one.)
  std::this_thread::sleep_for(3 * o.io_timeout);
  CHECK(Eventually([&] { return http.open_connections() == 0; }));
  CHECK(ReadUntilClosed(slow).size() < big.size());
  ::close(slow);
  CHECK(Get(http.port(), "/ok").find("\r\n\r\nok\n") != std::string::npos);
}

// Out of descriptors, accept fails and the pending connection stays in the backlog:
// retrying at once would spin at full CPU. Run in a child process (its own RLIMIT_NOFILE).
TEST_CASE("An accept that fails with EMFILE backs off, and the endpoint serves again once descriptors are free") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = [] {
      size_t open = 0;  // descriptors open now: the limit leaves 16 more
      for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++open;
      rlimit limit{open + 16, open + 16};
      if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 10;
      HttpEndpoint http(HttpEndpointOptions{}, [](const std::string&) {
        return HttpResponse{200, "text/plain", "ok\n"};
      });
      if (!http.Start().ok()) return 11;
      std::vector<int> filler;
      for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
      if (filler.empty()) return 12;
      ::close(filler.back());  // one free descriptor: the client's; none for the accept
      filler.pop_back();
      const int client = ConnectLoopback(http.port());
      if (client < 0) return 13;
      if (!Eventually([&] { return http.accept_errors() >= 1; })) return 14;
      std::this_thread::sleep_for(300ms);  // spinning would fail thousands of times meanwhile
      if (http.accept_errors() > 20) return 15;
      for (int fd : filler) ::close(fd);
      const std::string request = "GET /healthz HTTP/1.1\r\n\r\n";
      if (::write(client, request.data(), request.size()) != static_cast<ssize_t>(request.size())) return 16;
      if (ReadUntilClosed(client).rfind("HTTP/1.1 200 OK", 0) != 0) return 17;  // accepted after the back-off
      return 0;
    }();
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  // 14: no accept failed; 15: accept was retried without backing off; 17: never served again.
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace fleetps::net
