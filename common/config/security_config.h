#pragma once
// Where every role finds the cluster's security files, and the loading of them.
//
// Precedence (highest first): environment > YAML. No command-line flag names them, so the
// paths do not show in `ps`.
//   YAML: server.auth_secret_file and server.tls.{cert_file, key_file, ca_file} of a pserver
//         config, or fleetps.server.* of a job YAML (what the pservers of the job read).
//   Env:  FLEETPS_AUTH_SECRET_FILE, FLEETPS_TLS_CERT_FILE, FLEETPS_TLS_KEY_FILE,
//         FLEETPS_TLS_CA_FILE (non-empty values; ApplySecurityEnv).
// A role that has its ServerOptions already (pserver, heter-trainer service) loads them with
// net::ClusterSecurity::Load(options.auth_secret_file, options.tls).

#include <cstdint>
#include <string>

#include "common/config/server_config.h"
#include "common/net/security.h"
#include "common/status.h"

namespace fleetps::config {

// What LoadClusterSecurity makes of a YAML it cannot read as a pserver config.
enum class SecurityYaml : uint8_t {
  kIfReadable,  // the files come from the environment alone (the clients of a job, whose job YAML was read already)
  kRequired,    // the error, naming the file (a tool given the YAML on its command line)
};

// The cluster's security as a client of its pservers finds it: the files of the YAML at
// `config_path` ("": none), overridden by the environment `env`, then loaded
// (net::ClusterSecurity::Load). Errors name the file that cannot be read or loaded.
StatusOr<net::ClusterSecurity> LoadClusterSecurity(const std::string& config_path, const EnvLookup& env,
                                                   SecurityYaml yaml = SecurityYaml::kIfReadable);

}  // namespace fleetps::config
