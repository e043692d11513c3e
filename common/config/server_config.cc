#include "common/config/server_config.h"

#include <cerrno>
#include <cstdlib>

#include <filesystem>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "common/config/trainer_config.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {
namespace {

constexpr std::pair<std::string_view, NonFinitePolicy> kNonFinitePolicies[] = {
    {"reject", NonFinitePolicy::kReject},
    {"skip", NonFinitePolicy::kSkip},
};
constexpr std::pair<std::string_view, AuthMode> kAuthModes[] = {
    {"auto", AuthMode::kAuto},
    {"required", AuthMode::kRequired},
    {"off", AuthMode::kOff},
};

// Reads the string at `key` and maps it through `table`; the error lists the allowed names
// and suggests the closest.
template <typename E, size_t N>
Status ReadChoice(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                  const std::pair<std::string_view, E> (&table)[N], E* out) {
  const YAML::Node node = map[key];
  if (!node || node.IsNull()) return Status::OK();
  std::string name;
  RETURN_IF_ERROR(ReadString(map, key, ctx, &name));
  std::vector<std::string> names;
  for (const auto& [spelling, value] : table) {
    if (spelling == name) {
      *out = value;
      return Status::OK();
    }
    names.emplace_back(spelling);
  }
  std::string message = "expected one of ";
  for (size_t i = 0; i < names.size(); ++i) message += (i == 0 ? "" : ", ") + names[i];
  message += ", got \"" + name + "\"";
  if (const std::string closest = ClosestMatch(name, names); !closest.empty()) {
    message += " (did you mean '" + closest + "'?)";
  }
  return ctx.Child(key).Error(node, message);
}

template <typename E, size_t N>
std::string_view ChoiceName(const std::pair<std::string_view, E> (&table)[N], E value) {
  for (const auto& [spelling, v] : table) {
    if (v == value) return spelling;
  }
  return "unknown";
}

constexpr uint64_t kMinWriteQueueBytes = 1ull << 20;

}  // namespace

std::string_view NonFinitePolicyName(NonFinitePolicy policy) { return ChoiceName(kNonFinitePolicies, policy); }

std::string_view AuthModeName(AuthMode mode) { return ChoiceName(kAuthModes, mode); }

bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string h(host);
  for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (std::memcmp(&v6, &in6addr_loopback, sizeof(v6)) == 0) return true;
    // ::ffff:a.b.c.d, an IPv4 address written as IPv6.
    static constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(v6.s6_addr, kMappedPrefix, sizeof(kMappedPrefix)) == 0 && v6.s6_addr[12] == 127;
  }
  return false;
}

std::string BindHost(const ServerOptions& o) {
  if (!o.bind_host.empty()) return o.bind_host;
  if (o.index >= o.endpoints.size()) return "0.0.0.0";
  const std::string& host = o.self().host;
  if (host == "localhost") return "127.0.0.1";
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1) return host;
  return "0.0.0.0";  // a host name: listen everywhere
}

net::RpcServerOptions RpcServerOptionsOf(const ServerOptions& o) {
  net::RpcServerOptions r;
  r.host = BindHost(o);
  r.port = o.index < o.endpoints.size() ? o.self().port : 0;
  r.max_payload = o.max_message_bytes;
  r.max_inflight_bytes = o.max_inflight_bytes;
  r.max_connections = o.max_connections;
  r.idle_timeout = std::chrono::seconds(o.idle_timeout_s);
  r.read_timeout = std::chrono::seconds(o.read_timeout_s);
  r.auth_timeout = std::chrono::seconds(o.auth_timeout_s);
  r.max_write_queue_bytes = o.max_write_queue_bytes;
  r.auth_required = AuthRequired(o);
  return r;
}

bool AuthRequired(const ServerOptions& o) {
  switch (o.auth) {
    case AuthMode::kRequired: return true;
    case AuthMode::kOff: return false;
    case AuthMode::kAuto: return !IsLoopbackHost(BindHost(o));
  }
  return true;
}

Status ParseInitializer(const YAML::Node& node, const YamlContext& ctx, InitializerOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map with 'name'");
  RETURN_IF_ERROR(RejectUnknownKeys(node, {"name", "min", "max", "mean", "stddev", "value", "seed"}, ctx));
  std::string name = "uniform";
  RETURN_IF_ERROR(ReadString(node, "name", ctx, &name));
  if (name == "uniform") {
    out->kind = InitializerKind::kUniform;
  } else if (name == "gaussian" || name == "normal") {
    out->kind = InitializerKind::kGaussian;
  } else if (name == "zeros") {
    out->kind = InitializerKind::kZeros;
  } else if (name == "constant") {
    out->kind = InitializerKind::kConstant;
  } else {
    return ctx.Child("name").Error(node["name"],
                                   "unknown initializer '" + name + "' (use uniform, gaussian, zeros or constant)");
  }
  RETURN_IF_ERROR(ReadFloat(node, "min", ctx, &out->min));
  RETURN_IF_ERROR(ReadFloat(node, "max", ctx, &out->max));
  RETURN_IF_ERROR(ReadFloat(node, "mean", ctx, &out->mean));
  RETURN_IF_ERROR(ReadFloat(node, "stddev", ctx, &out->stddev));
  RETURN_IF_ERROR(ReadFloat(node, "value", ctx, &out->value));
  RETURN_IF_ERROR(ReadUint64(node, "seed", ctx, &out->seed));
  if (out->kind == InitializerKind::kUniform && !(out->min < out->max)) {
    return ctx.Error(node, "uniform initializer needs min < max (got min=" + std::to_string(out->min) +
                               ", max=" + std::to_string(out->max) + ")");
  }
  if (out->kind == InitializerKind::kGaussian && !(out->stddev >= 0)) {
    return ctx.Error(node, "gaussian initializer needs stddev >= 0");
  }
  return Status::OK();
}

Status ParseAccessor(const YAML::Node& node, const YamlContext& ctx, AccessorOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map with 'name' (plain or ctr)");
  RETURN_IF_ERROR(RejectUnknownKeys(node,
                                    {"name", "nonclk_coeff", "click_coeff", "embedx_threshold", "show_click_decay_rate",
                                     "delete_threshold", "delete_after_unseen_days"},
                                    ctx));
  std::string name = "plain";
  RETURN_IF_ERROR(ReadString(node, "name", ctx, &name));
  if (name == "plain") {
    out->kind = AccessorKind::kPlain;
  } else if (name == "ctr" || name == "ctr_common" || name == "CtrCommonAccessor") {
    out->kind = AccessorKind::kCtr;
  } else {
    return ctx.Child("name").Error(node["name"], "unknown accessor '" + name + "' (use plain or ctr)");
  }
  if (out->kind == AccessorKind::kPlain && node.size() > (node["name"] ? 1u : 0u)) {
    return ctx.Error(node, "the plain accessor takes no parameters (set name: ctr for CTR statistics)");
  }
  RETURN_IF_ERROR(ReadFloat(node, "nonclk_coeff", ctx, &out->nonclk_coeff));
  RETURN_IF_ERROR(ReadFloat(node, "click_coeff", ctx, &out->click_coeff));
  RETURN_IF_ERROR(ReadFloat(node, "embedx_threshold", ctx, &out->embedx_threshold));
  RETURN_IF_ERROR(ReadFloat(node, "show_click_decay_rate", ctx, &out->show_click_decay_rate));
  RETURN_IF_ERROR(ReadFloat(node, "delete_threshold", ctx, &out->delete_threshold));
  RETURN_IF_ERROR(ReadUint32(node, "delete_after_unseen_days", ctx, &out->delete_after_unseen_days));
  return Status::OK();
}

namespace {

Status ParseTable(const YAML::Node& node, const YamlContext& ctx, TableOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a table map (id, name, kind, dim, ...)");
  RETURN_IF_ERROR(RejectUnknownKeys(node,
                                    {"id", "name", "kind", "dim", "size", "shards", "create_on_pull", "optimizer",
                                     "initializer", "accessor", "memory_budget_bytes"},
                                    ctx));
  RETURN_IF_ERROR(Require(node, "id", ctx));
  RETURN_IF_ERROR(Require(node, "name", ctx));
  RETURN_IF_ERROR(ReadUint32(node, "id", ctx, &out->id));
  RETURN_IF_ERROR(ReadString(node, "name", ctx, &out->name));
  std::string kind = "sparse";
  RETURN_IF_ERROR(ReadString(node, "kind", ctx, &kind));
  if (kind == "sparse") {
    out->kind = TableKind::kSparse;
  } else if (kind == "dense") {
    out->kind = TableKind::kDense;
  } else {
    return ctx.Child("kind").Error(node["kind"], "unknown table kind '" + kind + "' (use sparse or dense)");
  }
  if (node["dim"] && node["size"]) return ctx.Error(node, "give either 'dim' or 'size', not both");
  if (!node["dim"] && !node["size"]) {
    return ctx.Error(node, out->kind == TableKind::kSparse ? "missing required key 'dim' (floats per row)"
                                                           : "missing required key 'size' (floats in the table)");
  }
  RETURN_IF_ERROR(ReadUint64(node, "dim", ctx, &out->dim));
  RETURN_IF_ERROR(ReadUint64(node, "size", ctx, &out->dim));
  RETURN_IF_ERROR(ReadUint32(node, "shards", ctx, &out->shards));
  RETURN_IF_ERROR(ReadBool(node, "create_on_pull", ctx, &out->create_on_pull));
  RETURN_IF_ERROR(ReadUint64(node, "memory_budget_bytes", ctx, &out->memory_budget_bytes));
  if (node["accessor"]) RETURN_IF_ERROR(ParseAccessor(node["accessor"], ctx.Child("accessor"), &out->accessor));
  if (node["optimizer"]) RETURN_IF_ERROR(ParseOptimizer(node["optimizer"], ctx.Child("optimizer"), &out->optimizer));
  if (node["initializer"]) {
    RETURN_IF_ERROR(ParseInitializer(node["initializer"], ctx.Child("initializer"), &out->initializer));
  }
  Status st = ValidateTable(*out);
  if (!st.ok()) return ctx.Error(node, st.message());
  return Status::OK();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

StatusOr<const char*> EnvNameOrAlias(const EnvLookup& env, const char* name, const char* alias) {
  const auto value = env(name), old = env(alias);
  const bool has = value && !value->empty(), has_old = old && !old->empty();
  if (has && has_old && *value != *old) {
    return Status::InvalidArgument(std::string(name) + "='" + *value + "' and " + alias + "='" + *old +
                                   "' differ: they name the same thing (" + alias +
                                   " is the older spelling); set one of them");
  }
  return has ? name : has_old ? alias : nullptr;
}

Status ValidateTable(const TableOptions& t) {
  const std::string where = "table '" + t.name + "' (id " + std::to_string(t.id) + ")";
  if (t.name.empty()) return Status::InvalidArgument("table id " + std::to_string(t.id) + " has an empty name");
  if (t.dim == 0) return Status::InvalidArgument(where + ": dim/size must be > 0");
  if (t.kind == TableKind::kSparse && t.dim > 65536) {
    return Status::InvalidArgument(where + ": sparse dim " + std::to_string(t.dim) + " is above the limit 65536");
  }
  if (t.shards == 0 || t.shards > 4096) return Status::InvalidArgument(where + ": shards must be in [1, 4096]");
  RETURN_IF_ERROR(ValidateOptimizer(t.optimizer).WithContext(where));
  if (t.kind == TableKind::kDense && t.accessor.kind != AccessorKind::kPlain) {
    return Status::InvalidArgument(where + ": dense tables have no accessor (remove 'accessor')");
  }
  if (t.kind == TableKind::kDense && t.memory_budget_bytes != 0) {
    return Status::InvalidArgument(where + ": dense tables live in RAM (remove 'memory_budget_bytes')");
  }
  const auto& a = t.accessor;
  const auto finite = [](float x) { return x - x == 0.0f; };
  if (!finite(a.nonclk_coeff) || !finite(a.click_coeff) || !finite(a.embedx_threshold) || !finite(a.delete_threshold)) {
    return Status::InvalidArgument(where + ": accessor coefficients and thresholds must be finite");
  }
  if (!(a.show_click_decay_rate > 0 && a.show_click_decay_rate <= 1)) {
    return Status::InvalidArgument(where + ": accessor.show_click_decay_rate must be in (0, 1]");
  }
  return Status::OK();
}

namespace {

// server.tls: the certificate, its key and the CA of the cluster's TLS.
Status ParseServerTls(const YAML::Node& tls, const YamlContext& tctx, net::TlsFiles* out) {
  if (!tls.IsMap()) return tctx.Error(tls, "expected a map with cert_file, key_file, ca_file");
  RETURN_IF_ERROR(RejectUnknownKeys(tls, {"cert_file", "key_file", "ca_file"}, tctx));
  RETURN_IF_ERROR(ReadString(tls, "cert_file", tctx, &out->cert_file));
  RETURN_IF_ERROR(ReadString(tls, "key_file", tctx, &out->key_file));
  RETURN_IF_ERROR(ReadString(tls, "ca_file", tctx, &out->ca_file));
  if (out->cert_file.empty() != out->key_file.empty()) {
    return tctx.Error(tls, "cert_file and key_file go together");
  }
  return Status::OK();
}

// The bounds of server.* values that need more than their type (read by ParseServerSection).
Status CheckServerBounds(const YAML::Node& server, const YamlContext& sctx, const ServerOptions& out) {
  if (out.max_connections < 1) {
    return sctx.Child("max_connections").Error(server["max_connections"], "must be >= 1");
  }
  if (out.max_write_queue_bytes < kMinWriteQueueBytes) {
    return sctx.Child("max_write_queue_bytes")
        .Error(server["max_write_queue_bytes"],
               "must be >= 1048576 (1 MiB), got " + std::to_string(out.max_write_queue_bytes));
  }
  if (out.save_mode > 3) {
    return sctx.Child("save_mode")
        .Error(server["save_mode"], "must be 0 (checkpoint), 1 (delta), 2 (base) or 3 (batch)");
  }
  if (out.io_threads < 1 || out.io_threads > 256) {
    return sctx.Child("io_threads").Error(server["io_threads"], "must be in [1, 256]");
  }
  if (out.shard_threads < 1 || out.shard_threads > 256) {
    return sctx.Child("shard_threads").Error(server["shard_threads"], "must be in [1, 256]");
  }
  if (out.max_message_bytes < 1024) {
    return sctx.Child("max_message_bytes").Error(server["max_message_bytes"], "must be >= 1024");
  }
  return Status::OK();
}

}  // namespace

Status ParseServerSection(const YAML::Node& server, const YamlContext& sctx, ServerOptions* options) {
  ServerOptions& out = *options;
  if (!server.IsMap()) return sctx.Error(server, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(server,
                                    {"endpoints",
                                     "index",
                                     "bind_host",
                                     "io_threads",
                                     "shard_threads",
                                     "max_message_bytes",
                                     "max_inflight_bytes",
                                     "shuffle_buffer_bytes",
                                     "drain_timeout_ms",
                                     "log_level",
                                     "data_dir",
                                     "load_dir",
                                     "save_dir",
                                     "save_interval_s",
                                     "save_mode",
                                     "max_connections",
                                     "idle_timeout_s",
                                     "read_timeout_s",
                                     "auth_timeout_s",
                                     "max_write_queue_bytes",
                                     "nonfinite_gradients",
                                     "trainer_lease_s",
                                     "exit_when_trainers_gone",
                                     "auth",
                                     "auth_secret_file",
                                     "tls",
                                     "checkpoint_root",
                                     "metrics_port"},
                                    sctx));
  std::vector<std::string> endpoints;
  RETURN_IF_ERROR(ReadStringList(server, "endpoints", sctx, &endpoints));
  for (size_t i = 0; i < endpoints.size(); ++i) {
    auto ep = net::ParseEndpoint(endpoints[i]);
    if (!ep.ok()) return sctx.Child("endpoints").Index(i).Error(server["endpoints"][i], ep.status().message());
    out.endpoints.push_back(*ep);
  }
  RETURN_IF_ERROR(ReadUint32(server, "index", sctx, &out.index));
  RETURN_IF_ERROR(ReadString(server, "bind_host", sctx, &out.bind_host));
  RETURN_IF_ERROR(ReadInt(server, "io_threads", sctx, &out.io_threads));
  RETURN_IF_ERROR(ReadInt(server, "shard_threads", sctx, &out.shard_threads));
  RETURN_IF_ERROR(ReadUint32(server, "max_message_bytes", sctx, &out.max_message_bytes));
  RETURN_IF_ERROR(ReadUint64(server, "max_inflight_bytes", sctx, &out.max_inflight_bytes));
  RETURN_IF_ERROR(ReadUint64(server, "shuffle_buffer_bytes", sctx, &out.shuffle_buffer_bytes));
  RETURN_IF_ERROR(ReadUint32(server, "drain_timeout_ms", sctx, &out.drain_timeout_ms));
  RETURN_IF_ERROR(ReadString(server, "log_level", sctx, &out.log_level));
  RETURN_IF_ERROR(ReadString(server, "data_dir", sctx, &out.data_dir));
  RETURN_IF_ERROR(ReadString(server, "load_dir", sctx, &out.load_dir));
  RETURN_IF_ERROR(ReadString(server, "save_dir", sctx, &out.save_dir));
  RETURN_IF_ERROR(ReadUint32(server, "save_interval_s", sctx, &out.save_interval_s));
  RETURN_IF_ERROR(ReadUint32(server, "save_mode", sctx, &out.save_mode));
  RETURN_IF_ERROR(ReadUint32(server, "max_connections", sctx, &out.max_connections));
  RETURN_IF_ERROR(ReadUint32(server, "idle_timeout_s", sctx, &out.idle_timeout_s));
  RETURN_IF_ERROR(ReadUint32(server, "read_timeout_s", sctx, &out.read_timeout_s));
  RETURN_IF_ERROR(ReadUint32(server, "auth_timeout_s", sctx, &out.auth_timeout_s));
  RETURN_IF_ERROR(ReadUint64(server, "max_write_queue_bytes", sctx, &out.max_write_queue_bytes));
  RETURN_IF_ERROR(ReadChoice(server, "nonfinite_gradients", sctx, kNonFinitePolicies, &out.nonfinite_gradients));
  RETURN_IF_ERROR(ReadUint32(server, "trainer_lease_s", sctx, &out.trainer_lease_s));
  RETURN_IF_ERROR(ReadBool(server, "exit_when_trainers_gone", sctx, &out.exit_when_trainers_gone));
  RETURN_IF_ERROR(ReadChoice(server, "auth", sctx, kAuthModes, &out.auth));
  RETURN_IF_ERROR(ReadString(server, "auth_secret_file", sctx, &out.auth_secret_file));
  if (server["tls"] && !server["tls"].IsNull()) {
    RETURN_IF_ERROR(ParseServerTls(server["tls"], sctx.Child("tls"), &out.tls));
  }
  RETURN_IF_ERROR(ReadString(server, "checkpoint_root", sctx, &out.checkpoint_root));
  uint32_t metrics_port = out.metrics_port;
  RETURN_IF_ERROR(ReadUint32(server, "metrics_port", sctx, &metrics_port));
  if (metrics_port > 65535) {
    return sctx.Child("metrics_port").Error(server["metrics_port"], "a port is at most 65535 (0: no metrics endpoint)");
  }
  out.metrics_port = static_cast<uint16_t>(metrics_port);
  return CheckServerBounds(server, sctx, out);
}

StatusOr<ServerOptions> ParseServerYaml(const std::string& text, const std::string& file_name) {
  if (IsJobYaml(text)) {
    // A trainer job config: tables come from the model, server options from fleetps.server.
    ASSIGN_OR_RETURN(TrainerOptions job, ParseTrainerYaml(text, file_name));
    ServerOptions out;
    out.source = file_name;
    out.tables = JobTables(job);
    ASSIGN_OR_RETURN(YAML::Node root, LoadYamlString(text, file_name));
    const YAML::Node ext = root["fleetps"];
    if (ext && ext.IsMap() && ext["server"]) {
      RETURN_IF_ERROR(ParseServerSection(ext["server"], YamlContext{file_name, "fleetps.server"}, &out));
    }
    // Trainer 0 saves the model into runner.model_save_path: its directory is where network
    // Save/Load requests may go unless fleetps.server.checkpoint_root says otherwise.
    if (out.checkpoint_root.empty() && !job.model_save_path.empty()) {
      out.checkpoint_root = std::filesystem::path(job.model_save_path).parent_path().string();
    }
    return out;
  }
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlString(text, file_name));
  YamlContext ctx{file_name, ""};
  if (!root.IsMap()) return ctx.Error(root, "expected a map with 'server' and 'tables'");
  RETURN_IF_ERROR(RejectUnknownKeys(root, {"server", "tables"}, ctx));
  ServerOptions out;
  out.source = file_name;
  if (root["server"]) RETURN_IF_ERROR(ParseServerSection(root["server"], ctx.Child("server"), &out));
  const YAML::Node tables = root["tables"];
  YamlContext tctx = ctx.Child("tables");
  if (!tables || !tables.IsSequence() || tables.size() == 0) {
    return tctx.Error(tables ? tables : root, "expected a non-empty list of tables");
  }
  std::set<uint32_t> ids;
  std::set<std::string> names;
  for (size_t i = 0; i < tables.size(); ++i) {
    TableOptions t;
    RETURN_IF_ERROR(ParseTable(tables[i], tctx.Index(i), &t));
    if (!ids.insert(t.id).second) {
      return tctx.Index(i).Error(tables[i], "duplicate table id " + std::to_string(t.id));
    }
    if (!names.insert(t.name).second) {
      return tctx.Index(i).Error(tables[i], "duplicate table name '" + t.name + "'");
    }
    out.tables.push_back(std::move(t));
  }
  return out;
}

StatusOr<ServerOptions> LoadServerYaml(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  return ParseServerYaml(text, path);
}

Status ApplyServerEnv(const EnvLookup& env, ServerOptions* options) {
  if (auto role = env("TRAINING_ROLE"); role && *role != "PSERVER") {
    return Status::InvalidArgument("TRAINING_ROLE=" + *role + " but this is the pserver (expected PSERVER)");
  }
  if (auto list = env("PADDLE_PSERVERS_IP_PORT_LIST"); list && !list->empty()) {
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext("PADDLE_PSERVERS_IP_PORT_LIST");
    options->endpoints = *eps;
  }
  auto pod_ip = env("POD_IP");
  auto port = env("PADDLE_PORT");
  if (pod_ip.has_value() != port.has_value()) {
    return Status::InvalidArgument("set both POD_IP and PADDLE_PORT (or neither) to name this pserver");
  }
  if (pod_ip) {
    auto self = net::ParseEndpoint(*pod_ip + ":" + *port);
    if (!self.ok()) return self.status().WithContext("POD_IP/PADDLE_PORT");
    bool found = false;
    for (size_t i = 0; i < options->endpoints.size(); ++i) {
      if (options->endpoints[i] == *self) {
        options->index = static_cast<uint32_t>(i);
        found = true;
        break;
      }
    }
    if (!found) {
      std::string list;
      for (const auto& e : options->endpoints) list += (list.empty() ? "" : ",") + e.ToString();
      return Status::InvalidArgument("POD_IP:PADDLE_PORT = " + self->ToString() + " is not in the pserver list [" +
                                     list +
                                     "] (PADDLE_PSERVERS_IP_PORT_LIST must name every pserver, this one included)");
    }
  }
  if (auto level = env("FLEETPS_LOG_LEVEL")) options->log_level = *level;
  ApplySecurityEnv(env, options);
  if (auto port = env("FLEETPS_METRICS_PORT"); port && !port->empty()) {
    char* end = nullptr;
    errno = 0;
    const unsigned long p = std::strtoul(port->c_str(), &end, 10);
    if (errno != 0 || end == port->c_str() || *end != '\0' || p > 65535 || (*port)[0] == '-') {
      return Status::InvalidArgument("FLEETPS_METRICS_PORT='" + *port +
                                     "' is not a port number (0-65535; 0 turns the metrics endpoint off)");
    }
    options->metrics_port = static_cast<uint16_t>(p);
  }
  return Status::OK();
}

void ApplySecurityEnv(const EnvLookup& env, ServerOptions* options) {
  const auto set = [&env](const char* name, std::string* field) {
    if (auto value = env(name); value && !value->empty()) *field = *value;
  };
  set("FLEETPS_AUTH_SECRET_FILE", &options->auth_secret_file);
  set("FLEETPS_TLS_CERT_FILE", &options->tls.cert_file);
  set("FLEETPS_TLS_KEY_FILE", &options->tls.key_file);
  set("FLEETPS_TLS_CA_FILE", &options->tls.ca_file);
}

Status ApplyServerFlags(const ServerFlags& flags, ServerOptions* options) {
  if (flags.endpoints) {
    auto eps = net::ParseEndpointList(*flags.endpoints);
    if (!eps.ok()) return eps.status().WithContext("--endpoints");
    options->endpoints = *eps;
  }
  if (flags.index) options->index = *flags.index;
  if (flags.bind_host) options->bind_host = *flags.bind_host;
  if (flags.checkpoint_root) options->checkpoint_root = *flags.checkpoint_root;
  if (flags.metrics_port) options->metrics_port = *flags.metrics_port;
  if (flags.io_threads) options->io_threads = *flags.io_threads;
  if (flags.shard_threads) options->shard_threads = *flags.shard_threads;
  if (flags.log_level) options->log_level = *flags.log_level;
  if (flags.load_dir) options->load_dir = *flags.load_dir;
  if (flags.data_dir) options->data_dir = *flags.data_dir;
  if (flags.port) {
    if (options->endpoints.empty()) options->endpoints.push_back({"127.0.0.1", *flags.port});
    if (options->index < options->endpoints.size()) options->endpoints[options->index].port = *flags.port;
  }
  return Status::OK();
}

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.endpoints.empty()) {
    return Status::InvalidArgument(
        "no pserver endpoints: set server.endpoints in the YAML, PADDLE_PSERVERS_IP_PORT_LIST, or --endpoints");
  }
  if (o.index >= o.endpoints.size()) {
    return Status::InvalidArgument("server index " + std::to_string(o.index) + " is out of range for " +
                                   std::to_string(o.endpoints.size()) + " endpoints");
  }
  if (o.io_threads < 1 || o.shard_threads < 1)
    return Status::InvalidArgument("io_threads and shard_threads must be >= 1");
  if (o.tables.empty()) return Status::InvalidArgument(o.source + ": no tables configured");
  for (const auto& t : o.tables) {
    RETURN_IF_ERROR(ValidateTable(t).WithContext(o.source));
    if (t.memory_budget_bytes != 0 && o.data_dir.empty()) {
      return Status::InvalidArgument(o.source + ": table '" + t.name +
                                     "' has memory_budget_bytes but server.data_dir is not set (where its cold "
                                     "rows go; or pass --data-dir)");
    }
  }
  if (o.save_mode > 3) return Status::InvalidArgument("server.save_mode must be in [0, 3]");
  if (o.save_interval_s != 0 && o.save_dir.empty()) {
    return Status::InvalidArgument(o.source + ": server.save_interval_s is set but server.save_dir is empty");
  }
  if (o.max_connections < 1) return Status::InvalidArgument("server.max_connections must be >= 1");
  if (o.max_write_queue_bytes < kMinWriteQueueBytes) {
    return Status::InvalidArgument("server.max_write_queue_bytes must be >= 1048576 (1 MiB)");
  }
  if (AuthRequired(o) && o.auth_secret_file.empty()) {
    const std::string why = o.auth == AuthMode::kRequired ? "server.auth is required"
                                                          : "server.auth is auto and bind address '" + BindHost(o) +
                                                                "' is not a loopback address";
    return Status::InvalidArgument(
        (o.source.empty() ? "" : o.source + ": ") + why +
        ", so peers must authenticate, but no shared secret is configured: set server.auth_secret_file (or "
        "FLEETPS_AUTH_SECRET_FILE) to a file holding the secret, or bind to a loopback address (--bind "
        "127.0.0.1), or set server.auth: off on a trusted network");
  }
  return Status::OK();
}

}  // namespace fleetps::config
