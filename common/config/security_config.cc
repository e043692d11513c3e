#include "common/config/security_config.h"

#include <utility>

namespace fleetps::config {

StatusOr<net::ClusterSecurity> LoadClusterSecurity(const std::string& config_path, const EnvLookup& env,
                                                   SecurityYaml yaml) {
  ServerOptions files;
  if (!config_path.empty()) {
    StatusOr<ServerOptions> view = LoadServerYaml(config_path);
    if (view.ok()) {
      files = std::move(*view);
    } else if (yaml == SecurityYaml::kRequired) {
      return view.status();
    }
  }
  ApplySecurityEnv(env, &files);
  return net::ClusterSecurity::Load(files.auth_secret_file, files.tls);
}

}  // namespace fleetps::config
