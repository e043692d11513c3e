#include "test/support/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace fleetps::testing {

int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string ReadUntilClosed(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::string HttpExchange(uint16_t port, const std::string& request) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  std::string out;
  if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) out = ReadUntilClosed(fd);
  ::close(fd);
  return out;
}

std::pair<int, std::string> HttpGet(uint16_t port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {-1, ""};
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  std::string resp;
  if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) resp = ReadUntilClosed(fd);
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.1 ", 0) != 0 || body == std::string::npos) return {-2, resp};
  return {std::stoi(resp.substr(9, 3)), resp.substr(body + 4)};
}

std::string HttpGetBody(uint16_t port, const std::string& path) {
  auto [code, body] = HttpGet(port, path);
  return code == 200 ? body : std::string();
}

}  // namespace fleetps::testing
