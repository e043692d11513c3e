#include "common/net/security.h"

namespace fleetps::net {

StatusOr<ClusterSecurity> ClusterSecurity::Load(const std::string& auth_secret_file, const TlsFiles& tls) {
  ClusterSecurity security;
  if (!auth_secret_file.empty()) {
    ASSIGN_OR_RETURN(security.auth_key, AuthKey::Load(auth_secret_file));
  }
  if (tls.enabled()) {
    ASSIGN_OR_RETURN(security.tls, TlsContext::Load(tls));
  }
  return security;
}

}  // namespace fleetps::net
