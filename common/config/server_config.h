#pragma once
// pserver options and how they are assembled from YAML, the Paddle environment and
// command-line flags.
//
// Precedence (highest first): command-line flags > environment > YAML > defaults.
//   YAML:  `server:` map and `tables:` list (see configs/pserver.yaml).
//   Env:   TRAINING_ROLE (must be PSERVER when set), PADDLE_PSERVERS_IP_PORT_LIST
//          (all server endpoints, in order), POD_IP + PADDLE_PORT (this server's endpoint;
//          its index is its position in the list), FLEETPS_LOG_LEVEL,
//          FLEETPS_AUTH_SECRET_FILE (server.auth_secret_file; never a flag, so the path
//          does not show in `ps`), FLEETPS_TLS_CERT_FILE / FLEETPS_TLS_KEY_FILE /
//          FLEETPS_TLS_CA_FILE (server.tls.cert_file / key_file / ca_file).
//   Flags: applied by the caller with ApplyServerFlags().

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/optimizer_config.h"
#include "common/config/table_options.h"
#include "common/config/yaml_util.h"
#include "common/net/endpoint.h"
#include "common/net/rpc_server.h"
#include "common/status.h"

namespace fleetps::config {

// What a push carrying NaN or Inf gradients gets. YAML server.nonfinite_gradients.
enum class NonFinitePolicy : uint8_t {
  kReject = 0,  // `reject`: the push is refused with InvalidArgument and changes nothing
  kSkip = 1,    // `skip`: the push succeeds, its non-finite gradients are not applied
};
std::string_view NonFinitePolicyName(NonFinitePolicy policy);  // "reject" | "skip"

// Whether peers must prove they hold the shared secret. YAML server.auth; see AuthRequired().
enum class AuthMode : uint8_t {
  kAuto = 0,      // `auto`: required unless bind_host is a loopback address
  kRequired = 1,  // `required`: always
  kOff = 2,       // `off`: never (a trusted network only)
};
std::string_view AuthModeName(AuthMode mode);  // "auto" | "required" | "off"

struct ServerOptions {
  // Every pserver of the cluster, in order. The key -> server function depends on this
  // order, so all servers and trainers must use the same list. Default: one server,
  // 127.0.0.1:8500.
  std::vector<net::Endpoint> endpoints;
  uint32_t index = 0;  // this server's position in `endpoints`
  // Address the listener binds to. Empty (default): this server's endpoint host (POD_IP)
  // when it is an IP address (localhost: 127.0.0.1), else 0.0.0.0; see BindHost().
  std::string bind_host;
  int io_threads = 2;                        // network threads (>= 1)
  int shard_threads = 2;                     // table executor threads (>= 1); shard s runs on s % n
  uint32_t max_message_bytes = 256u << 20;   // largest accepted frame payload, bytes
  uint64_t max_inflight_bytes = 1ull << 30;  // request bytes served at once before Busy
  // Bytes of InMemoryDataset global-shuffle records this server holds for receivers at
  // once; senders wait (Busy, retried) above it. YAML server.shuffle_buffer_bytes.
  uint64_t shuffle_buffer_bytes = 1ull << 30;
  uint32_t drain_timeout_ms = 10000;  // on SIGTERM: wait this long for in-flight requests
  std::string log_level = "info";     // trace|debug|info|warn|error|off
  std::vector<TableOptions> tables;   // at least one
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

  // ---- connection limits (YAML server.<name>) ----
  uint32_t max_connections = 1024;  // open connections at most, >= 1; accepts beyond it are refused
  uint32_t idle_timeout_s = 600;    // close a connection with no request for this long, s; 0 = never
  uint32_t read_timeout_s = 30;     // a frame whose first byte arrived must be complete within this, s; 0 = never
  // Where peers must authenticate (AuthRequired): a connection not authenticated this long
  // after it was accepted is closed, s; 0 = never. Default 5.
  uint32_t auth_timeout_s = 5;
  // Replies queued but not yet written on one connection, bytes, >= 1 MiB; above it the
  // server stops reading that connection until the queue drains. Default 64 MiB.
  uint64_t max_write_queue_bytes = 64ull << 20;

  // ---- trainers and pushes ----
  NonFinitePolicy nonfinite_gradients = NonFinitePolicy::kReject;  // `reject` | `skip`; default reject
  uint32_t trainer_lease_s = 60;  // a trainer not heard from for this long counts as gone, s; 0 = off
  // Exit by itself once every trainer that connected has finished or is gone. Default true.
  bool exit_when_trainers_gone = true;

  // ---- security ----
  AuthMode auth = AuthMode::kAuto;  // `auto` | `required` | `off`; default auto
  // File holding the shared secret; required when AuthRequired(). Env FLEETPS_AUTH_SECRET_FILE
  // overrides the YAML; deliberately no command-line flag. Default empty.
  std::string auth_secret_file;
  // `tls: {cert_file, key_file, ca_file}`: TLS on every connection (common/net/tls.h). A
  // process that serves (pserver, heter-trainer) presents cert_file/key_file; one that dials
  // verifies the server against ca_file. Default off (all empty).
  net::TlsFiles tls;
  // Save/Load requests from the network name directories below this root (relative to it,
  // or absolute inside it; '..' is refused in both); the parent of save_dir is a root too.
  // Empty and no save_dir: remote Save/Load is refused. A job YAML's default: the directory
  // holding runner.model_save_path.
  std::string checkpoint_root;

  // ---- operations ----
  // HTTP port of /metrics (Prometheus), /healthz and /readyz, on the bind address; 0
  // (default): off. YAML server.metrics_port, env FLEETPS_METRICS_PORT, --metrics-port.
  uint16_t metrics_port = 0;

  std::string source;  // where the options came from, for messages

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
  std::optional<std::string> load_dir;         // --load
  std::optional<std::string> data_dir;         // --data-dir
  std::optional<std::string> checkpoint_root;  // --checkpoint-root
  std::optional<uint16_t> metrics_port;        // --metrics-port
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment.
EnvLookup ProcessEnv();
// The variable to read of `name` and its older spelling `alias`: name when it is set
// non-empty, else alias when that is, else null. InvalidArgument naming both when both are
// set non-empty with different values.
StatusOr<const char*> EnvNameOrAlias(const EnvLookup& env, const char* name, const char* alias);

// Parses the YAML text of a pserver config (no env, no flags).
StatusOr<ServerOptions> ParseServerYaml(const std::string& text, const std::string& file_name);
StatusOr<ServerOptions> LoadServerYaml(const std::string& path);

// Applies the Paddle environment variables to `options`.
Status ApplyServerEnv(const EnvLookup& env, ServerOptions* options);
// The security part of ApplyServerEnv, shared by every role: FLEETPS_AUTH_SECRET_FILE and
// FLEETPS_TLS_{CERT,KEY,CA}_FILE (non-empty values) override the YAML.
void ApplySecurityEnv(const EnvLookup& env, ServerOptions* options);
Status ApplyServerFlags(const ServerFlags& flags, ServerOptions* options);
// Final checks after all sources are applied (index in range, tables valid, limits, a secret
// file when AuthRequired(), ...).
Status ValidateServerOptions(const ServerOptions& options);

// True when peers must authenticate: auth is required, or auto and the bind address
// (BindHost) is not a loopback address (IsLoopbackHost).
bool AuthRequired(const ServerOptions& options);
// The address the listener binds to (bind_host, or the default described there).
std::string BindHost(const ServerOptions& options);
// The RPC server options of `options` (bind host, port, limits, timeouts, auth_required);
// the auth key is the caller's to load.
net::RpcServerOptions RpcServerOptionsOf(const ServerOptions& options);
// True for "localhost", IPv4 127.0.0.0/8, "::1" and IPv4-mapped ::ffff:127.x.y.z (brackets
// allowed around IPv6). False for anything else, including "0.0.0.0", "::" and "".
bool IsLoopbackHost(std::string_view host);

// Validates a table (shared with tools that read configs).
Status ValidateTable(const TableOptions& table);
// The `accessor:` map of a sparse table.
Status ParseAccessor(const YAML::Node& node, const YamlContext& ctx, AccessorOptions* out);

// Readers of the YAML pieces shared by pserver and job configs (ParseOptimizer is in
// common/config/optimizer_config.h).
Status ParseInitializer(const YAML::Node& node, const YamlContext& ctx, InitializerOptions* out);
// The `server:` map (endpoints, index, threads, limits, storage, security, log level);
// every key is checked, unknown keys are errors.
Status ParseServerSection(const YAML::Node& node, const YamlContext& ctx, ServerOptions* out);

}  // namespace fleetps::config
