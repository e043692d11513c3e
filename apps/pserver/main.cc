// pserver: the fleetps parameter server daemon.
//
//   pserver --config configs/pserver.yaml [--endpoints h:p,h:p --index 0 --port 8500] [--load DIR | --resume DIR]
//   TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST=... POD_IP=... PADDLE_PORT=... pserver --config ...
//
// Precedence: flags > environment > YAML > defaults (common/config/server_config.h).
// Under systemd (Type=notify) it reports READY=1 once it listens with its tables loaded,
// STOPPING=1 when it begins to shut down, and answers WatchdogSec= while its io threads run.

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/config/server_config.h"
#include "common/logging.h"
#include "common/systemd/notifier.h"
#include "fleetps/config.h"
#include "server/app/app.h"
#include "server/checkpoint/checkpoint_dir.h"

namespace {

int Fail(const fleetps::Status& st) {
  std::cerr << "pserver: " << st.ToString() << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"fleetps parameter server"};
  std::string config_path;
  fleetps::config::ServerFlags flags;
  cli.add_option("-c,--config", config_path, "pserver YAML config (tables, server options)")->required();
  cli.add_option("--endpoints", flags.endpoints, "all pserver endpoints in order, host:port,host:port");
  cli.add_option("--index", flags.index, "this server's position in the endpoint list");
  cli.add_option("--port", flags.port, "listen port (replaces the port of this server's endpoint)");
  cli.add_option("--bind", flags.bind_host,
                 "address to bind (default: the endpoint's host when it is an IP address, else 0.0.0.0)");
  cli.add_option("--io-threads", flags.io_threads, "network threads");
  cli.add_option("--shard-threads", flags.shard_threads, "table executor threads");
  cli.add_option("--log-level", flags.log_level, "trace|debug|info|warn|error|off");
  cli.add_option("--load", flags.load_dir,
                 "checkpoint directory to load before listening (each server takes the rows it owns)");
  cli.add_option("--data-dir", flags.data_dir, "root of the RocksDB tier of tables with a memory budget");
  cli.add_option("--checkpoint-root", flags.checkpoint_root,
                 "directory below which Save/Load requests from the network may save and load");
  cli.add_option("--metrics-port", flags.metrics_port,
                 "HTTP port of /metrics (Prometheus), /healthz and /readyz (overrides server.metrics_port and "
                 "FLEETPS_METRICS_PORT; 0: off)");
  std::string resume_dir;
  cli.add_option("--resume", resume_dir,
                 "restart (systemd Restart=): load the newest complete checkpoint at or under DIR "
                 "(server.save_dir), or start with fresh tables when there is none");
  cli.set_version_flag("--version", std::string("pserver (fleetps) ") + FLEETPS_VERSION);
  CLI11_PARSE(cli, argc, argv);

  auto options = fleetps::config::LoadServerYaml(config_path);
  if (!options.ok()) return Fail(options.status());
  if (auto st = fleetps::config::ApplyServerEnv(fleetps::config::ProcessEnv(), &*options); !st.ok()) return Fail(st);
  if (auto st = fleetps::config::ApplyServerFlags(flags, &*options); !st.ok()) return Fail(st);
  if (options->endpoints.empty()) options->endpoints.push_back({"127.0.0.1", 8500});
  if (auto st = fleetps::config::ValidateServerOptions(*options); !st.ok()) return Fail(st);
  if (auto st = fleetps::SetUpLogging({options->log_level, "pserver:" + std::to_string(options->index)}); !st.ok()) {
    return Fail(st);
  }

  if (!resume_dir.empty()) {
    if (!options->load_dir.empty()) return Fail(fleetps::Status::InvalidArgument("give --load or --resume, not both"));
    auto latest = fleetps::server::FindLatestCheckpoint(resume_dir);
    if (!latest.ok()) return Fail(latest.status().WithContext("--resume " + resume_dir));
    if (latest->empty()) {
      std::cerr << "pserver: --resume " << resume_dir << ": no complete checkpoint there; starting with fresh tables"
                << std::endl;
    }
    options->load_dir = *latest;
  }

  fleetps::systemd::Notifier notifier;
  fleetps::server::App app(std::move(*options));
  if (auto st = app.Start(); !st.ok()) return Fail(st);
  const std::string who = "pserver " + std::to_string(app.options().index);
  if (auto st = notifier.Ready(who + " listening on port " + std::to_string(app.port())); !st.ok()) return Fail(st);
  notifier.StartWatchdog([&app] { return app.IoResponsive(std::chrono::seconds(5)); });
  app.WaitForShutdown(/*handle_signals=*/true);
  notifier.Stopping(who + " shutting down").IgnoreError();  // best effort: the manager sees the exit anyway
  app.Shutdown();
  return app.exit_code();
}
