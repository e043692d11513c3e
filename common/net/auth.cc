#include "common/net/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/check.h"

namespace fleetps::net {

StatusOr<std::shared_ptr<const AuthKey>> AuthKey::Load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("auth secret file '" + path +
                                   "' does not exist (create it with a random secret, e.g. `head -c 32 "
                                   "/dev/urandom | base64 > " +
                                   path + " && chmod 600 " + path + "`)");
  }
  if ((st.st_mode & 077) != 0) {
    return Status::InvalidArgument("auth secret file '" + path +
                                   "' is readable or writable by group or others; run `chmod 600 " + path + "`");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::IOError("cannot read auth secret file '" + path + "'");
  std::string secret = text.str();
  const auto first = secret.find_first_not_of(" \t\r\n");
  const auto last = secret.find_last_not_of(" \t\r\n");
  secret = first == std::string::npos ? std::string() : secret.substr(first, last - first + 1);
  if (secret.size() < 16) {
    return Status::InvalidArgument("auth secret file '" + path + "' holds " + std::to_string(secret.size()) +
                                   " bytes; use at least 16 random bytes (e.g. `head -c 32 /dev/urandom | base64`)");
  }
  return std::shared_ptr<const AuthKey>(std::make_shared<AuthKey>(std::move(secret)));
}

std::string AuthKey::Proof(std::string_view role, std::string_view first, std::string_view second) const {
  std::string message = "fleetps-auth-v1/";
  message.append(role).append("/").append(first).append(second);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  const unsigned char* digest =
      HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_len);
  FLEETPS_CHECK(digest != nullptr);
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

bool AuthKey::Verify(std::string_view proof, std::string_view role, std::string_view first,
                     std::string_view second) const {
  const std::string expected = Proof(role, first, second);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

std::string RandomNonce() {
  std::string nonce(kAuthNonceBytes, '\0');
  FLEETPS_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) == 1);
  return nonce;
}

}  // namespace fleetps::net
