#include "tools/ctl/ctl.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/config/security_config.h"
#include "common/config/server_config.h"
#include "common/net/endpoint.h"
#include "trainer/client/ps_client.h"

namespace fleetps::ctl {
namespace {

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  std::ostringstream s;
  s << std::fixed << std::setprecision(u == 0 ? 0 : 1) << bytes << " " << units[u];
  return s.str();
}

StatusOr<uint32_t> ParseMode(const std::string& text) {
  static const std::map<std::string, uint32_t> kModes = {{"checkpoint", trainer::kSaveCheckpoint},
                                                         {"delta", trainer::kSaveDelta},
                                                         {"base", trainer::kSaveBase},
                                                         {"batch", trainer::kSaveBatch},
                                                         {"0", 0},
                                                         {"1", 1},
                                                         {"2", 2},
                                                         {"3", 3}};
  auto it = kModes.find(text);
  if (it == kModes.end()) {
    return Status::InvalidArgument("save mode '" + text + "': use checkpoint (0), delta (1), base (2) or batch (3)");
  }
  return it->second;
}

// Counts per second between two samples; "-" without a first sample.
std::string Rate(uint64_t before, uint64_t now, double seconds) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(0) << static_cast<double>(now - std::min(before, now)) / seconds;
  return o.str();
}

void PrintStatus(std::ostream& out, const std::vector<net::Endpoint>& servers,
                 const std::vector<trainer::ServerStats>& now, const std::vector<trainer::ServerStats>* before,
                 double seconds) {
  const bool rates = before != nullptr && before->size() == now.size() && seconds > 0;
  auto rate = [&](size_t s, size_t t, bool pulls) -> std::string {
    if (!rates || t >= (*before)[s].tables.size()) return "-";
    const auto& a = (*before)[s].tables[t];
    const auto& b = now[s].tables[t];
    return pulls ? Rate(a.pulls, b.pulls, seconds) : Rate(a.pushes, b.pushes, seconds);
  };
  std::map<std::string, std::pair<uint64_t, uint64_t>> totals;  // table -> rows, memory
  for (size_t s = 0; s < now.size(); ++s) {
    out << "pserver " << s << "  " << servers[s].ToString() << "  requests/s "
        << (rates ? Rate((*before)[s].requests, now[s].requests, seconds) : "-") << " (" << now[s].requests
        << " since start)\n";
    out << "  " << std::left << std::setw(16) << "table" << std::setw(4) << "id" << std::setw(8) << "kind" << std::right
        << std::setw(12) << "rows" << std::setw(12) << "memory" << std::setw(14) << "rocksdb rows" << std::setw(15)
        << "rocksdb bytes" << std::setw(14) << "pull keys/s" << std::setw(14) << "push keys/s"
        << "\n";
    for (size_t t = 0; t < now[s].tables.size(); ++t) {
      const auto& x = now[s].tables[t];
      out << "  " << std::left << std::setw(16) << x.name << std::setw(4) << x.id << std::setw(8)
          << (x.dense ? "dense" : "sparse") << std::right << std::setw(12) << x.rows << std::setw(12)
          << Human(static_cast<double>(x.memory_bytes)) << std::setw(14)
          << (x.dense ? "-" : std::to_string(x.disk_rows)) << std::setw(15)
          << (x.dense ? "-" : Human(static_cast<double>(x.disk_bytes))) << std::setw(14)
          << (x.dense ? "-" : rate(s, t, true)) << std::setw(14) << (x.dense ? "-" : rate(s, t, false)) << "\n";
      totals[x.name].first += x.rows;
      totals[x.name].second += x.memory_bytes;
    }
  }
  out << "total";
  for (const auto& [name, t] : totals) out << "  " << name << ": " << t.first << " rows, " << Human(t.second);
  out << "\n";
}

// A command's failure, written to `err`; the exit code.
int Fail(std::ostream& err, const char* what, const Status& st) {
  err << "fleetps-ctl: " << what << " failed: " << st.ToString() << std::endl;
  return 1;
}

// The client of the commands: every pserver in `endpoints` (`servers` as given), with the
// cluster's shared secret and TLS files. Null after writing why to `err`.
std::unique_ptr<trainer::PsClient> ConnectToServers(const std::vector<net::Endpoint>& endpoints,
                                                    const std::string& servers, const std::string& config_path,
                                                    double timeout_s, std::ostream& err) {
  trainer::PsClientOptions options;
  options.servers = endpoints;
  options.io_threads = 1;
  options.rpc.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  options.rpc.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  // The cluster's shared secret and TLS files, as every trainer finds them; a --config that
  // cannot be read is an error here (a trainer's job YAML was read before).
  auto security = config::LoadClusterSecurity(config_path, config::ProcessEnv(), config::SecurityYaml::kRequired);
  if (!security.ok()) {
    err << "fleetps-ctl: the cluster's shared secret and TLS files (--config, FLEETPS_AUTH_SECRET_FILE, "
           "FLEETPS_TLS_*_FILE): "
        << security.status().message() << std::endl;
    return nullptr;
  }
  options.rpc.auth_key = security->auth_key;
  options.rpc.tls = security->tls;
  auto client = trainer::PsClient::Connect(options);
  if (!client.ok()) {
    err << "fleetps-ctl: cannot reach the pservers " << servers << " within " << timeout_s
        << " s: " << client.status().message()
        << " (is each one running and listening there? is the list complete and in the cluster's order?)" << std::endl;
    return nullptr;
  }
  return std::move(client).value();
}

// `status`: two samples of every server's stats, `interval_s` apart (one when 0), printed.
int RunStatus(trainer::PsClient& c, const std::vector<net::Endpoint>& endpoints, double interval_s, std::ostream& out,
              std::ostream& err) {
  auto first = c.StatsByServer();
  if (!first.ok()) return Fail(err, "status", first.status());
  if (interval_s <= 0) {
    PrintStatus(out, endpoints, *first, nullptr, 0);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)));
  auto second = c.StatsByServer();
  if (!second.ok()) return Fail(err, "status", second.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PrintStatus(out, endpoints, *second, &*first, secs);
  return 0;
}

}  // namespace

// Long: the command line's definition and checks, then one short branch per command.
int RunCtl(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App cli{"fleetps-ctl: status and admin commands for running pservers", "fleetps-ctl"};
  std::string servers, config_path, save_dir, save_mode = "checkpoint", load_dir, reason = "fleetps-ctl stop";
  double timeout_s = 10, interval_s = 1;
  std::optional<uint32_t> save_table, shrink_table;
  cli.add_option("--servers", servers,
                 "every pserver, in order: ip:port,ip:port (default PADDLE_PSERVERS_IP_PORT_LIST)");
  cli.add_option("--config", config_path,
                 "the job or pserver YAML: its server section's auth_secret_file and tls files (overridden by "
                 "FLEETPS_AUTH_SECRET_FILE and FLEETPS_TLS_{CERT,KEY,CA}_FILE)");
  cli.add_option("--timeout", timeout_s, "seconds to wait for the servers to accept a connection (default 10)")
      ->check(CLI::PositiveNumber);
  cli.require_subcommand(1);
  auto* status = cli.add_subcommand(
      "status", "per server: requests/s; per table: rows, memory, RocksDB rows and bytes, keys pulled/pushed per s");
  status->add_option("--interval", interval_s, "seconds between the two samples of the key rates (0: no rates)")
      ->check(CLI::NonNegativeNumber);
  auto* save = cli.add_subcommand("save", "save every table (a checkpoint under the servers' checkpoint root)");
  save->add_option("DIR", save_dir, "directory (relative to the servers' checkpoint root, or inside it)")->required();
  save->add_option("MODE", save_mode, "checkpoint | delta | base | batch (or 0-3; default checkpoint)");
  save->add_option("--table", save_table, "save only this table id");
  auto* load = cli.add_subcommand("load", "every server loads the checkpoint in DIR (its rows)");
  load->add_option("DIR", load_dir, "checkpoint directory (under the servers' checkpoint root)")->required();
  auto* shrink = cli.add_subcommand("shrink", "CTR tables: decay show/click, delete the rows the rules select");
  shrink->add_option("--table", shrink_table, "shrink only this table id");
  auto* stop = cli.add_subcommand("stop", "stop every server cleanly (drain, exit 0)");
  stop->add_option("--reason", reason, "logged by the servers");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << cli.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    const auto extra = cli.remaining();
    if (!extra.empty() && extra.front().rfind("-", 0) != 0) {
      err << "fleetps-ctl: unknown command '" << extra.front()
          << "' (commands: status, save, load, shrink, stop; fleetps-ctl --help)" << std::endl;
    } else {
      err << "fleetps-ctl: " << e.what() << " (fleetps-ctl --help)" << std::endl;
    }
    return 2;
  }
  if (servers.empty()) {
    if (const char* env = std::getenv("PADDLE_PSERVERS_IP_PORT_LIST"); env != nullptr) servers = env;
  }
  if (servers.empty()) {
    err << "fleetps-ctl: no pservers: pass --servers ip:port,ip:port (or set PADDLE_PSERVERS_IP_PORT_LIST)"
        << std::endl;
    return 2;
  }
  auto endpoints = net::ParseEndpointList(servers);
  if (!endpoints.ok()) {
    err << "fleetps-ctl: --servers: " << endpoints.status().message() << std::endl;
    return 2;
  }
  uint32_t mode = 0;
  if (save->parsed()) {
    auto m = ParseMode(save_mode);
    if (!m.ok()) {
      err << "fleetps-ctl: " << m.status().message() << std::endl;
      return 2;
    }
    mode = *m;
  }
  const std::unique_ptr<trainer::PsClient> client = ConnectToServers(*endpoints, servers, config_path, timeout_s, err);
  if (client == nullptr) return 2;
  trainer::PsClient& c = *client;
  if (status->parsed()) return RunStatus(c, *endpoints, interval_s, out, err);
  if (save->parsed()) {
    auto r = c.Save(save_dir, mode, save_table);
    if (!r.ok()) return Fail(err, "save", r.status());
    out << "saved " << save_dir << " version " << r->version << " (mode " << save_mode << "): " << r->rows
        << " sparse rows, " << Human(static_cast<double>(r->bytes)) << "\n";
    return 0;
  }
  if (load->parsed()) {
    auto r = c.Load(load_dir);
    if (!r.ok()) return Fail(err, "load", r.status());
    out << "loaded " << load_dir << " version " << r->version << " (mode " << r->mode << "): " << r->rows
        << " sparse rows\n";
    return 0;
  }
  if (shrink->parsed()) {
    auto r = c.Shrink(shrink_table);
    if (!r.ok()) return Fail(err, "shrink", r.status());
    out << "shrink: deleted " << r->deleted << " rows, " << r->rows << " left\n";
    return 0;
  }
  if (stop->parsed()) {
    if (auto st = c.StopServers(reason); !st.ok()) return Fail(err, "stop", st);
    out << "stopping " << endpoints->size() << " pserver(s)\n";
    return 0;
  }
  return 2;
}

}  // namespace fleetps::ctl
