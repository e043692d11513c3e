#pragma once
// Shared-secret authentication of connections (schemas/WIRE.md "Authentication").
//
// Both ends hold the same secret (a file readable only by its owner). When a connection
// opens, the client sends a fresh nonce (AuthHello); the server answers with its own nonce
// and a proof over both (so the client knows the server holds the secret); the client
// answers with its proof (AuthProve). Proofs are HMAC-SHA256 with the role in the message,
// so neither end's proof can be replayed as the other's, and fresh nonces make an old
// exchange worthless. The secret never crosses the wire. Thread-safety: all functions are
// thread-safe; an AuthKey is immutable.

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fleetps::net {

inline constexpr size_t kAuthNonceBytes = 32;

class AuthKey {
 public:
  // Reads the secret from `path` (surrounding whitespace is dropped). InvalidArgument when
  // the file is missing, empty, shorter than 16 bytes, or readable by group or others
  // (the fix, `chmod 600 PATH`, is in the message).
  static StatusOr<std::shared_ptr<const AuthKey>> Load(const std::string& path);
  // For tests and tools.
  explicit AuthKey(std::string secret) : secret_(std::move(secret)) {}

  // HMAC-SHA256(secret, "fleetps-auth-v1/" + role + "/" + first + second), 32 bytes.
  std::string Proof(std::string_view role, std::string_view first, std::string_view second) const;
  // Constant-time comparison of `proof` with Proof(role, first, second).
  bool Verify(std::string_view proof, std::string_view role, std::string_view first, std::string_view second) const;

 private:
  std::string secret_;
};

// kAuthNonceBytes bytes from the system's CSPRNG.
std::string RandomNonce();

}  // namespace fleetps::net
