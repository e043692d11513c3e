#pragma once
// A minimal HTTP/1.1 client for the tests that scrape /metrics, /healthz and /readyz, and
// the raw loopback sockets it is made of.

#include <cstdint>
#include <string>
#include <utility>

namespace fleetps::testing {

// A socket connected to 127.0.0.1:port (-1 on failure) whose reads give up after 10 s (a
// hung server fails the test instead of hanging it).
int ConnectLoopback(uint16_t port);

// Everything the peer sends on `fd` until it closes (or 10 s pass without a byte).
std::string ReadUntilClosed(int fd);

// `request` written on a fresh connection, and everything answered until the server closes
// it ("" when it could not connect).
std::string HttpExchange(uint16_t port, const std::string& request);

// GET http://127.0.0.1:port/path: (status code, body); -1 when the connection is refused,
// -2 when the answer is not HTTP.
std::pair<int, std::string> HttpGet(uint16_t port, const std::string& path);

// The body of a 200 answer, "" otherwise.
std::string HttpGetBody(uint16_t port, const std::string& path);

}  // namespace fleetps::testing
