#pragma once
// pserver options and how they are assembled from YAML, the Paddle environment and
// command-line flags.
//
// Precedence (highest first): command-line flags > environment > YAML > defaults.
//   YAML:  `server:` map and `tables:` list (see configs/pserver.yaml).
//   Env:   TRAINING_ROLE (must be PSERVER when set), PADDLE_PSERVERS_IP_PORT_LIST
//          (all server endpoints, in order), POD_IP + PADDLE_PORT (this server's endpoint;
//          its index is its position in the list), FLEETPS_LOG_LEVEL.
//   Flags: applied by the caller with ApplyServerFlags().

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/config/table_options.h"
#include "common/config/yaml_util.h"
#include "common/net/endpoint.h"
#include "common/status.h"

namespace fleetps::config {

struct ServerOptions {
  // Every pserver of the cluster, in order. The key -> server function depends on this
  // order, so all servers and trainers must use the same list. Default: one server,
  // 127.0.0.1:8500.
  std::vector<net::Endpoint> endpoints;
  uint32_t index = 0;                    // this server's position in `endpoints`
  std::string bind_host = "0.0.0.0";     // address the listener binds to
  int io_threads = 2;                    // network threads (>= 1)
  int shard_threads = 2;                 // table executor threads (>= 1); shard s runs on s % n
  uint32_t max_message_bytes = 256u << 20;     // largest accepted frame payload, bytes
  uint64_t max_inflight_bytes = 1ull << 30;    // request bytes served at once before Busy
  // Bytes of InMemoryDataset global-shuffle records this server holds for receivers at
  // once; senders wait (Busy, retried) above it. YAML server.shuffle_buffer_bytes.
  uint64_t shuffle_buffer_bytes = 1ull << 30;
  uint32_t drain_timeout_ms = 10000;     // on SIGTERM: wait this long for in-flight requests
  std::string log_level = "info";        // trace|debug|info|warn|error|off
  std::vector<TableOptions> tables;      // at least one
  // Root of the RocksDB spill tier: tables with memory_budget_bytes keep their cold rows in
  // data_dir/server-<index>/table-<id>/ (wiped at start-up). Required when a table has a
  // budget. YAML server.data_dir.
  std::string data_dir;
  // Checkpoint loaded before the server listens (`--load DIR`, YAML server.load_dir); empty:
  // start with initial values.
  std::string load_dir;
  // Periodic saves (YAML server.save_dir, save_interval_s, save_mode): every
  // save_interval_s seconds server 0 saves all tables to save_dir in save_mode
  // (0 checkpoint, 1 delta, 2 base, 3 batch). 0 seconds (default) or an empty dir: off.
  std::string save_dir;
  uint32_t save_interval_s = 0;
  uint32_t save_mode = 0;
  std::string source;                    // where the options came from, for messages

  const net::Endpoint& self() const { return endpoints[index]; }
};

// Flags given on the command line; unset ones leave the option alone.
struct ServerFlags {
  std::optional<std::string> endpoints;  // --endpoints "h:p,h:p"
  std::optional<uint32_t> index;         // --index
  std::optional<uint16_t> port;          // --port (replaces the port of endpoints[index])
  std::optional<std::string> bind_host;  // --bind
  std::optional<int> io_threads;
  std::optional<int> shard_threads;
  std::optional<std::string> log_level;
  std::optional<std::string> load_dir;   // --load
  std::optional<std::string> data_dir;   // --data-dir
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment.
EnvLookup ProcessEnv();

// Parses the YAML text of a pserver config (no env, no flags).
StatusOr<ServerOptions> ParseServerYaml(const std::string& text, const std::string& file_name);
StatusOr<ServerOptions> LoadServerYaml(const std::string& path);

// Applies the Paddle environment variables to `options`.
Status ApplyServerEnv(const EnvLookup& env, ServerOptions* options);
Status ApplyServerFlags(const ServerFlags& flags, ServerOptions* options);
// Final checks after all sources are applied (index in range, tables valid, ...).
Status ValidateServerOptions(const ServerOptions& options);

// Validates a table (shared with tools that read configs).
Status ValidateTable(const TableOptions& table);
// The `accessor:` map of a sparse table.
Status ParseAccessor(const YAML::Node& node, const YamlContext& ctx, AccessorOptions* out);

// Readers of the YAML pieces shared by pserver and job configs.
Status ParseOptimizer(const YAML::Node& node, const YamlContext& ctx, OptimizerOptions* out);
Status ParseInitializer(const YAML::Node& node, const YamlContext& ctx, InitializerOptions* out);
// The `server:` map (endpoints, index, threads, limits, log level).
Status ParseServerSection(const YAML::Node& node, const YamlContext& ctx, ServerOptions* out);

}  // namespace fleetps::config
