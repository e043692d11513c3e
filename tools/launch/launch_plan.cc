#include "tools/launch/launch_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/net/endpoint.h"

namespace fleetps::launch {
namespace {

std::string Join(const std::vector<std::string>& items, const char* sep = ",") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool IsLoopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

// A parsed ip:port list, as strings in the list's order.
StatusOr<std::vector<net::Endpoint>> ParseList(const std::string& text, const char* flag) {
  auto eps = net::ParseEndpointList(text);
  if (!eps.ok()) return eps.status().WithContext(flag);
  if (eps->empty()) return Status::InvalidArgument(std::string(flag) + " is empty: give ip:port,ip:port");
  for (size_t i = 0; i < eps->size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if ((*eps)[i] == (*eps)[j]) {
        return Status::InvalidArgument(std::string(flag) + " names " + (*eps)[i].ToString() + " twice");
      }
    }
  }
  return eps;
}

// Hands out ports: FLAGS_START_PORT / --start_port upwards, else free ones.
class PortSource {
 public:
  PortSource(std::optional<uint32_t> start, const LaunchEnvironment& env) : next_(start), env_(env) {}
  StatusOr<std::vector<uint16_t>> Take(size_t n) {
    if (n == 0) return std::vector<uint16_t>{};
    if (!next_) return env_.free_ports(n);
    if (*next_ + n - 1 > 65535) {
      return Status::InvalidArgument("the start port " + std::to_string(*next_) + " leaves no room for " +
                                     std::to_string(n) + " more ports below 65536: choose a lower FLAGS_START_PORT");
    }
    std::vector<uint16_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint16_t>((*next_)++));
    return out;
  }

 private:
  std::optional<uint32_t> next_;
  const LaunchEnvironment& env_;
};

struct RoleList {
  std::vector<net::Endpoint> endpoints;
  std::vector<bool> local;  // per endpoint: runs on this node
};

// Either the explicit list (--servers) or `count` (--server_num, default `fallback`) local
// endpoints on `host` with ports from `ports`.
StatusOr<RoleList> MakeRoleList(const std::string& list, const char* list_flag, std::optional<uint32_t> count,
                                const char* count_flag, uint32_t fallback, const std::string& host,
                                const std::function<bool(const std::string&)>& is_local, PortSource* ports) {
  RoleList out;
  if (!list.empty()) {
    ASSIGN_OR_RETURN(out.endpoints, ParseList(list, list_flag));
    if (count && *count != out.endpoints.size()) {
      return Status::InvalidArgument(std::string(count_flag) + "=" + std::to_string(*count) + " but " + list_flag +
                                     " names " + std::to_string(out.endpoints.size()) + ": give one of them");
    }
    for (const auto& e : out.endpoints) out.local.push_back(is_local(e.host));
    return out;
  }
  const uint32_t n = count.value_or(fallback);
  ASSIGN_OR_RETURN(auto taken, ports->Take(n));
  for (uint16_t p : taken) {
    out.endpoints.push_back({host, p});
    out.local.push_back(true);
  }
  return out;
}

std::vector<std::string> Strings(const std::vector<net::Endpoint>& eps) {
  std::vector<std::string> out;
  for (const auto& e : eps) out.push_back(e.ToString());
  return out;
}

std::string Dir(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

// The pserver / heter-trainer of the same install: next to the launcher (installed: one
// bin/ directory), or where the build tree puts it, or next to the trainer binary.
StatusOr<std::string> ResolveRoleBinary(const std::string& explicit_path, const char* flag, const std::string& name,
                                        const std::string& build_subdir, const LaunchFlags& flags,
                                        const LaunchEnvironment& env) {
  if (!explicit_path.empty()) {
    if (!env.is_executable(explicit_path)) {
      return Status::InvalidArgument(std::string(flag) + " " + explicit_path + " is not an executable file");
    }
    return explicit_path;
  }
  std::vector<std::string> candidates;
  if (!env.self_path.empty()) {
    const std::string self_dir = Dir(env.self_path);
    candidates.push_back(self_dir + "/" + name);
    candidates.push_back(self_dir + "/../../" + build_subdir + "/" + name);  // build/tools/launch -> build/<subdir>
  }
  const std::string& trainer = flags.command.front();
  if (trainer.find('/') != std::string::npos) {
    candidates.push_back(Dir(trainer) + "/" + name);
    candidates.push_back(Dir(trainer) + "/../" + build_subdir + "/" + name);  // build/trainer -> build/<subdir>
  }
  for (auto& c : candidates) {
    c = std::filesystem::path(c).lexically_normal().string();
    if (env.is_executable(c)) return c;
  }
  return Status::NotFound("cannot find the " + name + " program (looked for " + Join(candidates, ", ") + "): pass " +
                          flag + " PATH");
}

// The value of --sync-mode among the trainer's arguments ("" when absent).
std::string SyncModeArg(const std::vector<std::string>& command) {
  static const std::string kFlag = "--sync-mode";
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i].rfind(kFlag + "=", 0) == 0) return command[i].substr(kFlag.size() + 1);
    if (command[i] == kFlag && i + 1 < command.size()) return command[i + 1];
  }
  return "";
}

}  // namespace

const char* RunModeName(RunMode mode) {
  switch (mode) {
    case RunMode::kCollective: return "collective";
    case RunMode::kPs: return "ps";
    case RunMode::kPsHeter: return "ps-heter";
  }
  return "?";
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
    case Role::kHeterWorker: return "heter worker";
  }
  return "?";
}

std::string ProcessSpec::Name() const { return std::string(RoleName(role)) + " " + std::to_string(local_index); }

bool IsRoleVariable(const std::string& name) {
  static const char* const kNames[] = {"TRAINING_ROLE",      "POD_IP", "STAGE_ID", "STAGE_NUM", "HETER_DEVICE_TYPE",
                                       "FLAGS_selected_gpus"};
  if (name.rfind("PADDLE_", 0) == 0) return true;
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::string FindConfigArg(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "--config" || args[i] == "-c") && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) return args[i].substr(9);
  }
  return "";
}

namespace {

// ---- the run mode, given or inferred as fleetrun does ----
Status ChooseRunMode(const LaunchFlags& flags, LaunchPlan* plan) {
  std::vector<std::string> ps_given, heter_given, collective_given;
  if (flags.server_num) ps_given.push_back("--server_num");
  if (flags.worker_num) ps_given.push_back("--worker_num");
  if (!flags.servers.empty()) ps_given.push_back("--servers");
  if (!flags.workers.empty()) ps_given.push_back("--workers");
  if (flags.heter_worker_num) heter_given.push_back("--heter_worker_num");
  if (!flags.heter_workers.empty()) heter_given.push_back("--heter_workers");
  if (!flags.heter_devices.empty()) heter_given.push_back("--heter_devices");
  if (!flags.ips.empty()) collective_given.push_back("--ips");
  if (flags.nproc_per_node) collective_given.push_back("--nproc_per_node");
  if (!flags.run_mode.empty()) {
    if (flags.run_mode == "collective") {
      plan->mode = RunMode::kCollective;
    } else if (flags.run_mode == "ps") {
      plan->mode = RunMode::kPs;
    } else if (flags.run_mode == "ps-heter") {
      plan->mode = RunMode::kPsHeter;
    } else {
      return Status::InvalidArgument("--run_mode " + flags.run_mode + ": expected collective, ps or ps-heter");
    }
    plan->mode_reason = "--run_mode";
  } else if (!heter_given.empty()) {
    plan->mode = RunMode::kPsHeter;
    plan->mode_reason = "inferred from " + heter_given.front();
  } else if (!ps_given.empty()) {
    plan->mode = RunMode::kPs;
    plan->mode_reason = "inferred from " + ps_given.front();
  } else if (!collective_given.empty() || !flags.gpus.empty()) {
    plan->mode = RunMode::kCollective;
    plan->mode_reason =
        "inferred from " + (collective_given.empty() ? std::string("--gpus") : collective_given.front());
  } else {
    plan->mode = RunMode::kPs;
    plan->mode_reason = "the default: no --server_num/--worker_num/--gpus given";
  }
  const std::string mode_name = RunModeName(plan->mode);
  if (plan->mode == RunMode::kCollective && !(ps_given.empty() && heter_given.empty())) {
    const std::string flag = ps_given.empty() ? heter_given.front() : ps_given.front();
    return Status::InvalidArgument(flag + " is a parameter-server flag, but the run mode is collective (" +
                                   plan->mode_reason + "): drop it, or use --run_mode ps");
  }
  if (plan->mode != RunMode::kCollective && !collective_given.empty()) {
    return Status::InvalidArgument(collective_given.front() + " is a collective flag, but the run mode is " +
                                   mode_name + " (" + plan->mode_reason +
                                   "): name the parameter-server roles with --servers / --workers instead");
  }
  if (plan->mode == RunMode::kPs && !heter_given.empty()) {
    return Status::InvalidArgument(heter_given.front() + " needs --run_mode ps-heter (the run mode is ps)");
  }
  return Status::OK();
}

// This node as the plan sees it: its address, which hosts are its own, where ports come
// from and the GPUs its processes get.
struct LocalNode {
  std::string host;                        // --host or POD_IP; "" = any of this node's addresses
  std::optional<uint32_t> start_port;      // --start_port or FLAGS_START_PORT; none = free ports
  std::vector<std::string> gpus;           // --gpus
  const LaunchEnvironment* env = nullptr;  // PlanLaunch's, which outlives the node

  bool IsLocal(const std::string& h) const {
    if (!host.empty()) return h == host;
    if (IsLoopback(h)) return true;
    return std::find(env->local_addresses.begin(), env->local_addresses.end(), h) != env->local_addresses.end();
  }
  std::string address() const { return host.empty() ? "127.0.0.1" : host; }
  std::optional<std::string> GpuOf(uint32_t local_index) const {
    if (gpus.empty()) return std::nullopt;
    return gpus[local_index % gpus.size()];
  }
};

// ---- ports and this node's address ----
StatusOr<LocalNode> FindLocalNode(const LaunchFlags& flags, const LaunchEnvironment& env) {
  std::optional<uint32_t> start_port = flags.start_port;
  if (!start_port) {
    if (auto v = env.env("FLAGS_START_PORT"); v && !v->empty()) {
      char* end = nullptr;
      errno = 0;
      const unsigned long p = std::strtoul(v->c_str(), &end, 10);
      if (errno != 0 || end == v->c_str() || *end != '\0' || p < 1 || p > 65535) {
        return Status::InvalidArgument("FLAGS_START_PORT='" + *v +
                                       "' is not a port number (1-65535): fix or unset it (unset: free ports)");
      }
      start_port = static_cast<uint32_t>(p);
    }
  }
  std::string host = flags.host;
  if (host.empty()) {
    if (auto v = env.env("POD_IP"); v && !v->empty()) host = *v;
  }
  return LocalNode{host, start_port, SplitComma(flags.gpus), &env};
}

// ---- collective: ranks of one program, PADDLE_TRAINER_ENDPOINTS ----
Status PlanCollective(const LaunchFlags& flags, const LaunchEnvironment& env, LocalNode node, LaunchPlan* plan) {
  const auto gpus = SplitComma(flags.gpus);
  if (flags.nproc_per_node && !gpus.empty() && *flags.nproc_per_node != gpus.size()) {
    return Status::InvalidArgument("--nproc_per_node=" + std::to_string(*flags.nproc_per_node) + " but --gpus " +
                                   flags.gpus + " names " + std::to_string(gpus.size()) + " GPUs");
  }
  const uint32_t nproc = flags.nproc_per_node.value_or(gpus.empty() ? 1 : static_cast<uint32_t>(gpus.size()));
  if (nproc == 0) return Status::InvalidArgument("--nproc_per_node must be >= 1");
  std::vector<std::string> ips = flags.ips.empty() ? std::vector<std::string>{node.address()} : SplitComma(flags.ips);
  size_t node_rank = 0;
  if (ips.size() > 1) {
    auto it = std::find_if(ips.begin(), ips.end(), [&](const std::string& h) { return node.IsLocal(h); });
    if (it == ips.end()) {
      return Status::InvalidArgument("none of --ips " + flags.ips + " is this node (its addresses: " +
                                     Join(env.local_addresses, " ") + "): pass --host THIS_NODE_IP");
    }
    node_rank = static_cast<size_t>(it - ips.begin());
    // Every node computes every endpoint, so the ports must be the same everywhere.
    if (!node.start_port) node.start_port = 6170;
  }
  PortSource ports(node.start_port, env);
  ASSIGN_OR_RETURN(auto rank_ports, ports.Take(nproc));
  for (const auto& ip : ips) {
    for (uint16_t p : rank_ports) plan->workers.push_back(ip + ":" + std::to_string(p));
  }
  const std::string endpoints = Join(plan->workers);
  for (uint32_t i = 0; i < nproc; ++i) {
    ProcessSpec s;
    s.role = Role::kWorker;
    s.local_index = i;
    s.rank = static_cast<uint32_t>(node_rank * nproc + i);
    s.endpoint = plan->workers[s.rank];
    s.argv = flags.command;
    s.env = {{"TRAINING_ROLE", "TRAINER"},
             {"PADDLE_TRAINER_ID", std::to_string(s.rank)},
             {"PADDLE_TRAINERS_NUM", std::to_string(plan->workers.size())},
             {"PADDLE_TRAINER_ENDPOINTS", endpoints},
             {"PADDLE_CURRENT_ENDPOINT", s.endpoint},
             {"POD_IP", ips[node_rank]}};
    // The hybrid started by hand: pservers already running elsewhere, named by the caller.
    if (auto list = env.env("PADDLE_PSERVERS_IP_PORT_LIST"); list && !list->empty()) {
      s.env["PADDLE_PSERVERS_IP_PORT_LIST"] = *list;
    }
    if (auto g = node.GpuOf(i)) s.env["FLAGS_selected_gpus"] = *g;
    s.log_path = plan->log_dir + "/workerlog." + std::to_string(i);
    plan->processes.push_back(std::move(s));
  }
  return Status::OK();
}

// The roles of a parameter-server job, and what this node's server and heter processes run.
struct PsRoles {
  RoleList servers, workers, heters;
  std::string config;   // the job's YAML, from the trainer's arguments (when a server or heter is local)
  std::string pserver;  // the binaries of this node's servers and heter workers ("" when it has none)
  std::string heter;
};

// ---- parameter-server modes: the roles, their endpoints and binaries ----
StatusOr<PsRoles> PlanPsRoles(const LaunchFlags& flags, const LaunchEnvironment& env, const LocalNode& node,
                              LaunchPlan* plan) {
  const std::vector<std::string> trainer_args(flags.command.begin() + 1, flags.command.end());
  const auto is_local = [&node](const std::string& h) { return node.IsLocal(h); };
  PsRoles r;
  PortSource ports(node.start_port, env);
  ASSIGN_OR_RETURN(r.servers, MakeRoleList(flags.servers, "--servers", flags.server_num, "--server_num", 1,
                                           node.address(), is_local, &ports));
  ASSIGN_OR_RETURN(r.workers, MakeRoleList(flags.workers, "--workers", flags.worker_num, "--worker_num", 1,
                                           node.address(), is_local, &ports));
  if (plan->mode == RunMode::kPsHeter) {
    ASSIGN_OR_RETURN(r.heters, MakeRoleList(flags.heter_workers, "--heter_workers", flags.heter_worker_num,
                                            "--heter_worker_num", 1, node.address(), is_local, &ports));
  }
  if (r.servers.endpoints.empty()) return Status::InvalidArgument("a ps job needs at least one server (--server_num)");
  if (r.workers.endpoints.empty()) return Status::InvalidArgument("a ps job needs at least one worker (--worker_num)");
  if (plan->mode == RunMode::kPsHeter && r.heters.endpoints.empty()) {
    return Status::InvalidArgument("a ps-heter job needs at least one heter worker (--heter_worker_num)");
  }
  plan->servers = Strings(r.servers.endpoints);
  plan->workers = Strings(r.workers.endpoints);
  plan->heter_workers = Strings(r.heters.endpoints);
  const bool any_local = std::count(r.servers.local.begin(), r.servers.local.end(), true) +
                             std::count(r.workers.local.begin(), r.workers.local.end(), true) +
                             std::count(r.heters.local.begin(), r.heters.local.end(), true) >
                         0;
  if (!any_local) {
    return Status::InvalidArgument("no server or worker of the job is on this node (its addresses: " +
                                   Join(env.local_addresses, " ") + "): pass --host THIS_NODE_IP");
  }
  const bool needs_config = std::count(r.servers.local.begin(), r.servers.local.end(), true) +
                                std::count(r.heters.local.begin(), r.heters.local.end(), true) >
                            0;
  if (needs_config) {
    r.config = FindConfigArg(trainer_args);
    if (r.config.empty()) {
      return Status::InvalidArgument(
          "the pservers (and heter trainers) run with the job's config, taken from the trainer's arguments, "
          "but there is no --config FILE after " +
          flags.command.front());
    }
  }
  if (std::count(r.servers.local.begin(), r.servers.local.end(), true) > 0) {
    ASSIGN_OR_RETURN(r.pserver,
                     ResolveRoleBinary(flags.pserver_binary, "--pserver_binary", "pserver", "server", flags, env));
  }
  if (std::count(r.heters.local.begin(), r.heters.local.end(), true) > 0) {
    ASSIGN_OR_RETURN(
        r.heter, ResolveRoleBinary(flags.heter_binary, "--heter_binary", "heter-trainer", "heter_trainer", flags, env));
  }
  return r;
}

// The environment every process of a parameter-server job gets.
std::map<std::string, std::string> PsCommonEnv(const LaunchPlan& plan) {
  std::map<std::string, std::string> common = {
      {"PADDLE_PSERVERS_IP_PORT_LIST", Join(plan.servers)},
      {"PADDLE_TRAINERS_NUM", std::to_string(plan.workers.size())},
  };
  if (plan.mode == RunMode::kPsHeter) {
    common["PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"] = Join(plan.heter_workers);
    common["STAGE_NUM"] = "2";
    common["PADDLE_STAGE_TRAINERS_NUM"] =
        "[" + std::to_string(plan.workers.size()) + ", " + std::to_string(plan.heter_workers.size()) + "]";
  }
  return common;
}

void AddServerProcesses(const PsRoles& r, const std::map<std::string, std::string>& common, LaunchPlan* plan) {
  uint32_t local = 0;
  for (size_t i = 0; i < r.servers.endpoints.size(); ++i) {
    if (!r.servers.local[i]) continue;
    ProcessSpec s;
    s.role = Role::kServer;
    s.local_index = local++;
    s.rank = static_cast<uint32_t>(i);
    s.endpoint = plan->servers[i];
    s.argv = {r.pserver, "--config", r.config};
    s.env = common;
    s.env["TRAINING_ROLE"] = "PSERVER";
    s.env["POD_IP"] = r.servers.endpoints[i].host;
    s.env["PADDLE_PORT"] = std::to_string(r.servers.endpoints[i].port);
    s.log_path = plan->log_dir + "/serverlog." + std::to_string(s.local_index);
    plan->processes.push_back(std::move(s));
  }
}

void AddHeterProcesses(const LaunchFlags& flags, const PsRoles& r, const LocalNode& node,
                       const std::map<std::string, std::string>& common, LaunchPlan* plan) {
  uint32_t local = 0;
  for (size_t i = 0; i < r.heters.endpoints.size(); ++i) {
    if (!r.heters.local[i]) continue;
    ProcessSpec s;
    s.role = Role::kHeterWorker;
    s.local_index = local++;
    s.rank = static_cast<uint32_t>(i);
    s.endpoint = plan->heter_workers[i];
    s.argv = {r.heter, "--config", r.config};
    s.env = common;
    s.env["TRAINING_ROLE"] = "HETER_TRAINER";
    s.env["POD_IP"] = r.heters.endpoints[i].host;
    s.env["PADDLE_PORT"] = std::to_string(r.heters.endpoints[i].port);
    s.env["STAGE_ID"] = "2";
    if (!flags.heter_devices.empty()) s.env["HETER_DEVICE_TYPE"] = flags.heter_devices;
    if (auto g = node.GpuOf(s.local_index)) s.env["FLAGS_selected_gpus"] = *g;
    s.log_path = plan->log_dir + "/heterlog." + std::to_string(s.local_index);
    plan->processes.push_back(std::move(s));
  }
}

// `allreduce_workers`: the workers keep dense replicas equal by allreduce among themselves.
void AddWorkerProcesses(const LaunchFlags& flags, const PsRoles& r, const LocalNode& node, bool allreduce_workers,
                        const std::map<std::string, std::string>& common, LaunchPlan* plan) {
  uint32_t local = 0;
  for (size_t i = 0; i < r.workers.endpoints.size(); ++i) {
    if (!r.workers.local[i]) continue;
    ProcessSpec s;
    s.role = Role::kWorker;
    s.local_index = local++;
    s.rank = static_cast<uint32_t>(i);
    s.endpoint = plan->workers[i];
    s.argv = flags.command;
    s.env = common;
    s.env["TRAINING_ROLE"] = "TRAINER";
    s.env["PADDLE_TRAINER_ID"] = std::to_string(i);
    s.env["POD_IP"] = r.workers.endpoints[i].host;
    if (allreduce_workers) {  // dense replicas kept equal by allreduce among the workers
      s.env["PADDLE_TRAINER_ENDPOINTS"] = Join(plan->workers);
      s.env["PADDLE_CURRENT_ENDPOINT"] = s.endpoint;
    }
    if (plan->mode == RunMode::kPsHeter) {
      s.env["STAGE_ID"] = "1";
      s.env["PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"] = Join(plan->heter_workers);
    }
    if (auto g = node.GpuOf(s.local_index)) s.env["FLAGS_selected_gpus"] = *g;
    s.log_path = plan->log_dir + "/workerlog." + std::to_string(s.local_index);
    plan->processes.push_back(std::move(s));
  }
}

}  // namespace

StatusOr<LaunchPlan> PlanLaunch(const LaunchFlags& flags, const LaunchEnvironment& env) {
  if (flags.command.empty()) return Status::InvalidArgument("no trainer program given");
  LaunchPlan plan;
  plan.log_dir = flags.log_dir.empty() ? "log" : flags.log_dir;
  RETURN_IF_ERROR(ChooseRunMode(flags, &plan));
  ASSIGN_OR_RETURN(const LocalNode node, FindLocalNode(flags, env));
  if (plan.mode == RunMode::kCollective) {
    RETURN_IF_ERROR(PlanCollective(flags, env, node, &plan));
    return plan;
  }
  ASSIGN_OR_RETURN(const PsRoles roles, PlanPsRoles(flags, env, node, &plan));
  const std::map<std::string, std::string> common = PsCommonEnv(plan);
  const std::string sync_mode = SyncModeArg(flags.command);
  const bool hybrid = sync_mode == "collective";
  // GPU-PS pass mode (heter-trainer --sync-mode gpubox as the worker): several nodes
  // all-reduce their devices' dense replicas over the workers' endpoints, one rank per node.
  const bool gpubox_nodes = sync_mode == "gpubox" && plan.workers.size() > 1;
  AddServerProcesses(roles, common, &plan);
  AddHeterProcesses(flags, roles, node, common, &plan);
  AddWorkerProcesses(flags, roles, node, hybrid || gpubox_nodes, common, &plan);
  return plan;
}

std::string LaunchPlan::Summary() const {
  std::string out = std::string(RunModeName(mode)) + " mode (" + mode_reason + ")";
  if (!servers.empty()) out += "; servers " + Join(servers);
  if (!heter_workers.empty()) out += "; heter workers " + Join(heter_workers);
  out += "; workers " + Join(workers) + "; logs in " + log_dir + "/";
  return out;
}

}  // namespace fleetps::launch
