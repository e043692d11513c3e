// Fuzz target: the HTTP endpoint of /metrics, /healthz and /readyz (common/net/http_endpoint.h):
// its request-line parser, and the endpoint itself over a loopback connection.
//
// Input: the bytes a client sends on one connection (then it half-closes). Checks, besides
// the sanitizers:
//  - ParseHttpRequestLine of the head (the bytes before the first "\r\n\r\n") returns 0, 400
//    or 405; with 0 the method is GET or HEAD and the path starts with '/', holds no '?' and
//    begins the request target;
//  - an in-process endpoint (one, reused; /metrics a blocking path, as the pserver's)
//    answers exactly as the parser says: no answer when the input has no "\r\n\r\n" within
//    its first 8 KiB and is shorter than that (the peer closed first); 431 when the head
//    passes 8 KiB (or nothing, when the endpoint's close reset the connection before the
//    answer was read); else one well-formed answer — "HTTP/1.1 <code> <reason>", a
//    Content-Length equal to the body's length (0 for HEAD's empty body), Connection: close —
//    with code 400 / 405 as parsed, or the handler's (200 for /metrics, /healthz, /readyz, 404
//    otherwise) with its body;
//  - the endpoint never holds the connection open past the answer.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "common/net/http_endpoint.h"
#include "test/fuzz/fuzz_util.h"

namespace fleetps::fuzz {
namespace {

constexpr size_t kMaxHead = 8192;  // the endpoint's limit on a request head

std::unique_ptr<net::HttpEndpoint> g_http;

net::HttpResponse Handle(const std::string& path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4", "# fuzz metrics\nup 1\n"};
  if (path == "/healthz" || path == "/readyz") return {200, "text/plain; charset=utf-8", "ok\n"};
  return {404, "text/plain; charset=utf-8", "not found: " + path + "\n"};
}

void CheckParse(std::string_view head) {
  const net::HttpRequestLine line = net::ParseHttpRequestLine(head);
  if (line.status != 0 && line.status != 400 && line.status != 405) {
    Fail("ParseHttpRequestLine status " + std::to_string(line.status));
  }
  if (line.status != 0) return;
  if (line.method != "GET" && line.method != "HEAD") Fail("accepted method '" + line.method + "'");
  if (line.path.empty() || line.path[0] != '/' || line.path.find('?') != std::string::npos) {
    Fail("bad path '" + line.path + "'");
  }
  const size_t target = head.find(' ') + 1;
  if (head.substr(target, line.path.size()) != line.path) Fail("the path is not the start of the target");
}

// What the endpoint sends back for `input`, sent whole then half-closed ("" when it closed
// without answering; `reset` when the connection was reset).
std::string Exchange(std::string_view input, bool* reset) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Fail(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(g_http->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail(std::string("connect: ") + std::strerror(errno));
  }
  size_t off = 0;
  *reset = false;
  while (off < input.size()) {
    const ssize_t n = ::send(fd, input.data() + off, input.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the endpoint answered (431) and closed before taking everything
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) Fail("the endpoint held the connection open for 20 s");
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *reset = true;
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Checks `answer` is one well-formed answer with `code` (and `body`, unless empty_body).
void CheckAnswer(const std::string& answer, int code, const std::string* body, bool head_only) {
  const std::string status = "HTTP/1.1 " + std::to_string(code) + " " + net::HttpReason(code) + "\r\n";
  if (answer.rfind(status, 0) != 0) Fail("expected '" + status + "', got '" + answer.substr(0, 64) + "'");
  const size_t end = answer.find("\r\n\r\n");
  if (end == std::string::npos) Fail("the answer has no end of head");
  const std::string head = answer.substr(0, end + 2);
  if (head.find("\r\nConnection: close\r\n") == std::string::npos) Fail("no Connection: close");
  const size_t cl = head.find("\r\nContent-Length: ");
  if (cl == std::string::npos) Fail("no Content-Length");
  const size_t length = std::stoul(head.substr(cl + 18));
  const std::string got = answer.substr(end + 4);
  if (head_only ? !got.empty() : got.size() != length) {
    Fail("Content-Length " + std::to_string(length) + " but a body of " + std::to_string(got.size()));
  }
  if (body != nullptr && !head_only && got != *body) Fail("the body is not the handler's");
  if (body != nullptr && head_only && length != body->size()) Fail("HEAD's Content-Length is not the body's");
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace fleetps;
  fuzz::MaybeWriteSeeds("http_fuzz", [](fuzz::SeedWriter& seeds) {
    // What the tests and probes send (test/support/http.cc, http_endpoint_test.cc,
    // Prometheus, kubelet), and the refusals they exercise.
    for (const char* s :
         {"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", "GET /healthz HTTP/1.1\r\n\r\n",
          "HEAD /readyz HTTP/1.0\r\n\r\n", "GET /metrics?name[]=up HTTP/1.1\r\nAccept: text/plain\r\n\r\n",
          "GET /nope HTTP/1.1\r\n\r\n", "BREW /pot HTTP/1.1\r\n\r\n", "GET pot\r\n\r\n",
          "GET /healthz HTTP/1.1\r\nUser-Agent: kube-probe/1.29\r\nConnection: close\r\n\r\nextra",
          "GET /healthz HTTP/1.1\r\n", ""}) {
      seeds.Add(std::string_view(s));
    }
    seeds.Add("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n");  // 431
  });
  fuzz::QuietLogs();
  net::HttpEndpointOptions o;
  o.blocking_paths = {"/metrics"};
  fuzz::g_http = std::make_unique<net::HttpEndpoint>(o, fuzz::Handle);
  if (Status st = fuzz::g_http->Start(); !st.ok()) fuzz::Fail("HttpEndpoint::Start: " + st.ToString());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  using namespace fleetps::fuzz;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t end = input.find("\r\n\r\n");
  const bool too_large = end == std::string_view::npos ? size >= kMaxHead : end + 4 > kMaxHead;
  const std::string_view head = end == std::string_view::npos ? input : input.substr(0, end);
  CheckParse(head);
  bool reset = false;
  const std::string answer = Exchange(input, &reset);
  if (too_large) {
    if (!answer.empty() || !reset) CheckAnswer(answer, 431, nullptr, false);
    return 0;
  }
  if (end == std::string_view::npos) {
    if (!answer.empty()) Fail("an answer to a request without an end of head: '" + answer.substr(0, 64) + "'");
    return 0;
  }
  if (answer.empty() && reset && size > end + 4) return 0;  // bytes past the head left unread: reset before read
  const net::HttpRequestLine line = net::ParseHttpRequestLine(input.substr(0, end + 4));
  if (line.status != 0) {
    CheckAnswer(answer, line.status, nullptr, false);
    return 0;
  }
  const net::HttpResponse expected = Handle(line.path);
  CheckAnswer(answer, expected.status, &expected.body, line.method == "HEAD");
  return 0;
}
