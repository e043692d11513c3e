#pragma once
// Test certificates for TLS (common/net/tls.h), made with the openssl command-line tool:
// a throw-away CA and a server certificate it signs for the given subjectAltName.

#include <string>

namespace fleetps::testing {

struct TlsTestFiles {
  std::string ca_file;    // the CA's certificate (what clients verify with)
  std::string cert_file;  // the server certificate, signed by the CA
  std::string key_file;   // its private key
};

// Writes <dir>/<name>-ca.pem, <name>.pem and <name>.key: a fresh CA and a P-256 server
// certificate for `san` (an openssl subjectAltName value such as "IP:127.0.0.1").
// Returns false (and prints openssl's output) when openssl fails.
bool MakeTlsFiles(const std::string& dir, const std::string& name, const std::string& san, TlsTestFiles* out);

}  // namespace fleetps::testing
