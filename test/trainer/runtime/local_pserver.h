#pragma once
// An in-process pserver on a free loopback port holding `tables`, and a client of it: the
// server side of the runtime tests.

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "common/config/server_config.h"
#include "server/app/app.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps::testing {

struct LocalPserver {
  net::Endpoint endpoint{"127.0.0.1", FreePorts(1)[0]};
  std::unique_ptr<server::App> app;
  std::unique_ptr<trainer::PsClient> client;

  explicit LocalPserver(std::vector<TableOptions> tables) {
    config::ServerOptions o;
    o.endpoints = {endpoint};
    o.bind_host = "127.0.0.1";
    o.io_threads = 1;
    o.shard_threads = 1;
    o.tables = std::move(tables);
    app = std::make_unique<server::App>(o);
    REQUIRE(app->Start().ok());
    trainer::PsClientOptions co;
    co.servers = {endpoint};
    auto c = trainer::PsClient::Connect(co);
    REQUIRE(c.ok());
    client = std::move(*c);
  }
  ~LocalPserver() {
    client.reset();
    app->Shutdown();
  }
};

}  // namespace fleetps::testing
