#include "test/support/tls_files.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace fleetps::testing {

bool MakeTlsFiles(const std::string& dir, const std::string& name, const std::string& san, TlsTestFiles* out) {
  const std::string base = dir + "/" + name;
  out->ca_file = base + "-ca.pem";
  out->cert_file = base + ".pem";
  out->key_file = base + ".key";
  std::ofstream(base + ".ext") << "subjectAltName=" << san << "\n";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  const std::string script = "set -e; cd '" + dir + "'; " + "openssl req -x509" + ec + "-keyout " + name +
                             "-ca.key -out " + name + "-ca.pem -days 2 -subj /CN=" + name + "-ca; " + "openssl req" +
                             ec + "-keyout " + name + ".key -out " + name + ".csr -subj /CN=" + name + "; " +
                             "openssl x509 -req -in " + name + ".csr -CA " + name + "-ca.pem -CAkey " + name +
                             "-ca.key -CAcreateserial -out " + name + ".pem -days 2 -extfile " + name + ".ext";
  const std::string command = "sh -c \"" + script + "\" > '" + base + ".openssl.log' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(base + ".openssl.log");
    std::fprintf(stderr, "openssl failed:\n%s\n", std::string(std::istreambuf_iterator<char>(log), {}).c_str());
    return false;
  }
  return true;
}

}  // namespace fleetps::testing
