#include "common/net/endpoint.h"

#include <catch2/catch.hpp>

namespace fleetps::net {
namespace {

TEST_CASE("ParseEndpoint accepts host:port and rejects the rest with a reason") {
  auto ep = ParseEndpoint("127.0.0.1:8500");
  REQUIRE(ep.ok());
  CHECK(ep->host == "127.0.0.1");
  CHECK(ep->port == 8500);
  CHECK(ParseEndpoint(" [::1]:9 ")->host == "::1");
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":80", "h:0", "h:70000", "h:12x"}) {
    auto r = ParseEndpoint(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find(bad) != std::string::npos);
  }
}

TEST_CASE("ParseEndpointList splits PADDLE_PSERVERS_IP_PORT_LIST") {
  auto list = ParseEndpointList("10.0.0.1:6000,10.0.0.2:6001");
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[1].ToString() == "10.0.0.2:6001");
  CHECK_FALSE(ParseEndpointList("").ok());
  CHECK_FALSE(ParseEndpointList("a:1,b").ok());
}

}  // namespace
}  // namespace fleetps::net
