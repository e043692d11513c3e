#pragma once
// A cluster's security: its shared secret (auth.h) and its TLS context (tls.h), loaded once
// from the files that name them, the same way by every role (pserver, cpu-trainer,
// heter-trainer, fleetps-ctl). Where the file names come from (YAML, environment) is
// config's business: config::LoadClusterSecurity reads them and calls Load.
//
// Thread-safety: a loaded ClusterSecurity is immutable and its parts may be shared by every
// server and client of a process.

#include <memory>
#include <string>

#include "common/net/auth.h"
#include "common/net/tls.h"
#include "common/status.h"

namespace fleetps::net {

// The cluster's shared secret and TLS context; null: the cluster has none.
struct ClusterSecurity {
  std::shared_ptr<const AuthKey> auth_key;
  std::shared_ptr<TlsContext> tls;

  // The secret in `auth_secret_file` ("": none) and the TLS context of `tls` (none when no
  // file is set). Errors are AuthKey::Load's and TlsContext::Load's: they name the file that
  // cannot be loaded and what is wrong with it.
  static StatusOr<ClusterSecurity> Load(const std::string& auth_secret_file, const TlsFiles& tls);
};

}  // namespace fleetps::net
