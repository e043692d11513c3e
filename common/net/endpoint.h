#pragma once
// A TCP endpoint "host:port" as written in configs and PADDLE_* variables.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fleetps::net {

struct Endpoint {
  std::string host;  // IPv4/IPv6 literal or host name
  uint16_t port = 0;

  std::string ToString() const { return host + ":" + std::to_string(port); }
  bool operator==(const Endpoint& o) const { return host == o.host && port == o.port; }
};

// Parses "host:port" (or "[v6]:port"); errors say what is wrong with `text`.
StatusOr<Endpoint> ParseEndpoint(const std::string& text);
// Parses a comma-separated list, e.g. PADDLE_PSERVERS_IP_PORT_LIST.
StatusOr<std::vector<Endpoint>> ParseEndpointList(const std::string& text);

}  // namespace fleetps::net
