#pragma once
// A minimal HTTP/1.1 GET for the tests that scrape /metrics, /healthz and /readyz.

#include <cstdint>
#include <string>
#include <utility>

namespace fleetps::testing {

// GET http://127.0.0.1:port/path: (status code, body); -1 when the connection is refused,
// -2 when the answer is not HTTP.
std::pair<int, std::string> HttpGet(uint16_t port, const std::string& path);

// The body of a 200 answer, "" otherwise.
std::string HttpGetBody(uint16_t port, const std::string& path);

}  // namespace fleetps::testing
