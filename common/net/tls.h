#pragma once
// TLS for fleetps connections (optional; schemas/WIRE.md "TLS").
//
// When a process is configured with TLS (server.tls in the YAML), every connection it
// accepts starts with a TLS handshake in which it presents its certificate, and every
// connection it opens verifies the server's certificate against the configured CA and the
// host it dialled (the IP address or name in the endpoint list must be in the
// certificate's subjectAltName). The frames of schemas/WIRE.md, the shared-secret
// authentication included, then travel inside TLS unchanged. Plain and TLS peers do not
// interoperate: a TLS client of a plain server fails its handshake with an error saying so,
// and a plain client of a TLS server gets an Unavailable ErrorReply saying that the server
// requires TLS (RpcServer answers a peer whose first bytes are a fleetps frame, in plain).
//
// Thread-safety: a TlsContext is immutable after Load and may be shared by every server
// and client of a process.

#include <memory>
#include <string>

#include "common/status.h"

namespace fleetps::net {

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain this process presents when it serves
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA certificate(s) that sign the servers this process dials
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

class TlsContext {
 public:
  // Reads the files (TLS 1.2 or newer). InvalidArgument names the file and what is wrong
  // with it (missing, not PEM, key not matching the certificate); cert_file and key_file
  // come together.
  static StatusOr<std::shared_ptr<TlsContext>> Load(const TlsFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool can_serve() const { return can_serve_; }  // has a certificate and key
  bool can_dial() const { return can_dial_; }    // has a CA to verify servers with
  const TlsFiles& files() const { return files_; }

  struct Native;  // the Boost.Asio SSL context; defined in tls.cc
  Native& native() const { return *native_; }

 private:
  TlsContext(TlsFiles files, std::unique_ptr<Native> native, bool can_serve, bool can_dial);
  const TlsFiles files_;
  const std::unique_ptr<Native> native_;
  const bool can_serve_;
  const bool can_dial_;
};

}  // namespace fleetps::net
