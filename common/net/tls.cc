#include "common/net/tls.h"

#include <filesystem>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/net/stream.h"

namespace fleetps::net {
namespace {

std::string OpenSslError(const boost::system::error_code& ec) {
  std::string what = ec.message();
  // Asio reports the first queued OpenSSL error; drop the rest of the queue.
  ERR_clear_error();
  return what;
}

Status FileError(const std::string& key, const std::string& path, const std::string& what) {
  return Status::InvalidArgument("TLS " + key + " '" + path + "': " + what);
}

Status CheckReadable(const std::string& key, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return FileError(key, path, "no such file");
  }
  return Status::OK();
}

}  // namespace

TlsContext::TlsContext(TlsFiles files, std::unique_ptr<Native> native, bool can_serve, bool can_dial)
    : files_(std::move(files)), native_(std::move(native)), can_serve_(can_serve), can_dial_(can_dial) {}

TlsContext::~TlsContext() = default;

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Load(const TlsFiles& files) {
  namespace ssl = boost::asio::ssl;
  if (files.cert_file.empty() != files.key_file.empty()) {
    return Status::InvalidArgument("TLS: cert_file and key_file go together (got " +
                                   std::string(files.cert_file.empty() ? "key_file" : "cert_file") + " only)");
  }
  auto native = std::make_unique<Native>();
  boost::system::error_code ec;
  native->ssl.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                              ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                          ec);
  if (ec) return Status::Internal("TLS: cannot set the protocol versions: " + OpenSslError(ec));
  const bool can_serve = !files.cert_file.empty();
  if (can_serve) {
    RETURN_IF_ERROR(CheckReadable("cert_file", files.cert_file));
    RETURN_IF_ERROR(CheckReadable("key_file", files.key_file));
    native->ssl.use_certificate_chain_file(files.cert_file, ec);
    if (ec) return FileError("cert_file", files.cert_file, "not a PEM certificate chain (" + OpenSslError(ec) + ")");
    native->ssl.use_private_key_file(files.key_file, ssl::context::pem, ec);
    if (ec) {
      const std::string what = OpenSslError(ec);
      if (what.find("mismatch") != std::string::npos) {
        return FileError("key_file", files.key_file, "does not match the certificate in " + files.cert_file);
      }
      return FileError("key_file", files.key_file, "not a PEM private key (" + what + ")");
    }
    if (SSL_CTX_check_private_key(native->ssl.native_handle()) != 1) {
      ERR_clear_error();
      return FileError("key_file", files.key_file, "does not match the certificate in " + files.cert_file);
    }
  }
  const bool can_dial = !files.ca_file.empty();
  if (can_dial) {
    RETURN_IF_ERROR(CheckReadable("ca_file", files.ca_file));
    native->ssl.load_verify_file(files.ca_file, ec);
    if (ec) return FileError("ca_file", files.ca_file, "no PEM CA certificate in it (" + OpenSslError(ec) + ")");
  }
  return std::shared_ptr<TlsContext>(new TlsContext(files, std::move(native), can_serve, can_dial));
}

}  // namespace fleetps::net
