// The command line and this machine's environment as PlanLaunch (launch_plan.cc) reads them.
#include "tools/launch/launch_plan.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace fleetps::launch {

StatusOr<LaunchFlags> ParseLaunchArgs(int argc, const char* const* argv) {
  LaunchFlags f;
  CLI::App cli{
      "fleetps-launch: starts this node's processes of a fleetps job, as Paddle's fleetrun does.\n"
      "  fleetps-launch [flags] TRAINER_BINARY [ARGS...]\n"
      "Workers run TRAINER_BINARY ARGS; servers run pserver --config FILE (FILE: the --config among ARGS);\n"
      "heter workers run heter-trainer --config FILE. Ports: FLAGS_START_PORT upwards, else free ports.",
      "fleetps-launch"};
  cli.prefix_command();
  cli.add_option("--server_num", f.server_num, "number of pservers (on this node)");
  cli.add_option("--worker_num", f.worker_num, "number of trainers (on this node)");
  cli.add_option("--heter_worker_num", f.heter_worker_num, "number of heter-trainers (on this node)");
  cli.add_option("--nproc_per_node", f.nproc_per_node, "collective: ranks on this node (default: one per --gpus id)");
  cli.add_option("--heter_devices", f.heter_devices, "gpu | cpu: the heter-trainers' device (HETER_DEVICE_TYPE)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
  cli.add_option("--servers", f.servers, "every pserver of the job: ip:port,ip:port");
  cli.add_option("--workers", f.workers, "every trainer of the job: ip:port,ip:port");
  cli.add_option("--heter_workers", f.heter_workers, "every heter-trainer of the job: ip:port,ip:port");
  cli.add_option("--gpus", f.gpus, "GPU ids for this node's processes, e.g. 0,1 (FLAGS_selected_gpus)");
  cli.add_option("--log_dir", f.log_dir, "directory of serverlog.N, workerlog.N, heterlog.N (default log)");
  cli.add_option("--run_mode", f.run_mode, "collective | ps | ps-heter (default: inferred from the other flags)")
      ->check(CLI::IsMember({"collective", "ps", "ps-heter"}));
  cli.add_option("--ips", f.ips, "collective: every node's IP, in node order (this node: --host, or found)");
  cli.add_option("--host", f.host, "this node's IP (default: POD_IP, else looked up among the node's addresses)");
  cli.add_option("--start_port", f.start_port, "first port to use (overrides FLAGS_START_PORT)")
      ->check(CLI::Range(1, 65535));
  cli.add_option("--pserver_binary", f.pserver_binary, "the pserver program (default: the one of this install)");
  cli.add_option("--heter_binary", f.heter_binary, "the heter-trainer program (default: the one of this install)");
  cli.add_option("--stop_wait_s", f.stop_wait_s,
                 "after the workers end, seconds the servers get to exit by themselves before SIGTERM (default 5)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--kill_grace_s", f.kill_grace_s, "seconds between SIGTERM and SIGKILL when stopping (default 5)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--heter_max_restarts", f.heter_max_restarts,
                 "times a heter-trainer that dies (a signal, or an exit code other than 1 and 2) is started again "
                 "while the workers run (default 0: it fails the job); with fleetps.heter.failover the cpu-trainers "
                 "take it back");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Status::NotFound(cli.help());
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (fleetps-launch --help lists the flags)");
  }
  f.command = cli.remaining();
  if (f.command.empty()) {
    return Status::InvalidArgument(
        "no trainer program: usage fleetps-launch [flags] TRAINER_BINARY [ARGS...] (fleetps-launch --help)");
  }
  if (!f.command.front().empty() && f.command.front()[0] == '-') {
    return Status::InvalidArgument("unknown flag " + f.command.front() + " (fleetps-launch --help lists the flags)");
  }
  return f;
}

LaunchEnvironment SystemLaunchEnvironment() {
  LaunchEnvironment e;
  e.env = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  e.free_ports = [](size_t n) -> StatusOr<std::vector<uint16_t>> {
    std::vector<int> fds;
    std::vector<uint16_t> ports;
    Status st;
    for (size_t i = 0; i < n && st.ok(); ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof(addr);
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        st = Status::IOError(std::string("cannot find a free port: ") + std::strerror(errno) +
                             " (set FLAGS_START_PORT to choose the ports)");
      } else {
        ports.push_back(ntohs(addr.sin_port));
      }
      if (fd >= 0) fds.push_back(fd);
    }
    for (int fd : fds) ::close(fd);
    if (!st.ok()) return st;
    return ports;
  };
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) == 0) {
    for (ifaddrs* a = addrs; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (a->ifa_addr->sa_family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      } else if (a->ifa_addr->sa_family == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof(buf));
      } else {
        continue;
      }
      e.local_addresses.push_back(buf);
    }
    ::freeifaddrs(addrs);
  }
  e.is_executable = [](const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
  };
  std::error_code ec;
  e.self_path = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return e;
}

}  // namespace fleetps::launch
