#include "common/net/endpoint.h"

#include <charconv>

namespace fleetps::net {

StatusOr<Endpoint> ParseEndpoint(const std::string& raw) {
  std::string text = raw;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Status::InvalidArgument("endpoint '" + raw + "' is not of the form host:port (e.g. 127.0.0.1:8500)");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || ptr != end || port == 0 || port > 65535) {
    return Status::InvalidArgument("endpoint '" + raw + "' has an invalid port (expected 1..65535)");
  }
  return Endpoint{host, static_cast<uint16_t>(port)};
}

StatusOr<std::vector<Endpoint>> ParseEndpointList(const std::string& text) {
  std::vector<Endpoint> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    if (!item.empty()) {
      auto ep = ParseEndpoint(item);
      if (!ep.ok()) return ep.status().WithContext("endpoint list '" + text + "'");
      out.push_back(*ep);
    }
    start = comma + 1;
  }
  if (out.empty()) return Status::InvalidArgument("endpoint list '" + text + "' is empty");
  return out;
}

}  // namespace fleetps::net
