// The cluster's security as every role loads it (common/net/security.h,
// common/config/security_config.h): the secret and the TLS files, each alone or together,
// from the YAML or the environment (which wins), and errors that name the file.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <string>

#include "common/config/security_config.h"
#include "test/support/env.h"
#include "test/support/process.h"
#include "test/support/tls_files.h"

namespace fleetps::config {
namespace {

// A secret file readable only by its owner, as AuthKey::Load wants it.
std::string WriteSecret(const std::string& path) {
  testing::WriteFile(path, "security config test secret 0123456789\n");
  ::chmod(path.c_str(), 0600);
  return path;
}

// A pserver YAML at dir/name whose server section is `server` (a YAML map body).
std::string WriteSecurityYaml(const std::string& dir, const std::string& name, const std::string& server) {
  const std::string path = dir + "/" + name;
  testing::WriteFile(path, "server: {" + server + "}\ntables:\n  - {id: 0, name: emb, dim: 4}\n");
  return path;
}

std::string TlsYaml(const testing::TlsTestFiles& tls) {
  return "tls: {cert_file: " + tls.cert_file + ", key_file: " + tls.key_file + ", ca_file: " + tls.ca_file + "}";
}

struct SecurityFiles {
  std::string dir = testing::MakeTempDir("security_config_test");
  std::string secret = WriteSecret(dir + "/secret");
  testing::TlsTestFiles tls, other_tls;
  SecurityFiles() {
    REQUIRE(testing::MakeTlsFiles(dir, "cluster", "IP:127.0.0.1", &tls));
    REQUIRE(testing::MakeTlsFiles(dir, "other", "IP:127.0.0.1", &other_tls));
  }
};

TEST_CASE("ClusterSecurity::Load: nothing, the secret, TLS, or both") {
  SecurityFiles f;
  const net::TlsFiles tls{f.tls.cert_file, f.tls.key_file, f.tls.ca_file};

  auto none = net::ClusterSecurity::Load("", {});
  REQUIRE(none.ok());
  CHECK(none->auth_key == nullptr);
  CHECK(none->tls == nullptr);

  auto secret = net::ClusterSecurity::Load(f.secret, {});
  INFO(secret.status().ToString());
  REQUIRE(secret.ok());
  CHECK(secret->auth_key != nullptr);
  CHECK(secret->tls == nullptr);

  auto only_tls = net::ClusterSecurity::Load("", tls);
  INFO(only_tls.status().ToString());
  REQUIRE(only_tls.ok());
  CHECK(only_tls->auth_key == nullptr);
  REQUIRE(only_tls->tls != nullptr);
  CHECK(only_tls->tls->can_serve());
  CHECK(only_tls->tls->can_dial());

  auto both = net::ClusterSecurity::Load(f.secret, tls);
  INFO(both.status().ToString());
  REQUIRE(both.ok());
  CHECK(both->auth_key != nullptr);
  CHECK(both->tls != nullptr);
}

TEST_CASE("ClusterSecurity::Load names the file it cannot load") {
  SecurityFiles f;
  auto secret = net::ClusterSecurity::Load(f.dir + "/no-secret", {});
  REQUIRE_FALSE(secret.ok());
  CHECK_THAT(secret.status().message(), Catch::Contains(f.dir + "/no-secret"));

  auto tls = net::ClusterSecurity::Load(f.secret, {"", "", f.dir + "/no-ca.pem"});
  REQUIRE_FALSE(tls.ok());
  CHECK_THAT(tls.status().message(), Catch::Contains("TLS ca_file") && Catch::Contains(f.dir + "/no-ca.pem"));
}

TEST_CASE("LoadClusterSecurity reads the YAML's files, and the environment overrides them") {
  SecurityFiles f;
  const auto no_env = testing::EnvFrom({});

  SECTION("the secret alone, from the YAML") {
    const std::string yaml = WriteSecurityYaml(f.dir, "secret.yaml", "auth_secret_file: " + f.secret);
    auto security = LoadClusterSecurity(yaml, no_env);
    INFO(security.status().ToString());
    REQUIRE(security.ok());
    CHECK(security->auth_key != nullptr);
    CHECK(security->tls == nullptr);
  }
  SECTION("TLS alone, from the environment") {
    auto security = LoadClusterSecurity("", testing::EnvFrom({{"FLEETPS_TLS_CERT_FILE", f.tls.cert_file},
                                                              {"FLEETPS_TLS_KEY_FILE", f.tls.key_file},
                                                              {"FLEETPS_TLS_CA_FILE", f.tls.ca_file}}));
    INFO(security.status().ToString());
    REQUIRE(security.ok());
    CHECK(security->auth_key == nullptr);
    REQUIRE(security->tls != nullptr);
    CHECK(security->tls->files().ca_file == f.tls.ca_file);
  }
  SECTION("both, from the YAML") {
    const std::string yaml =
        WriteSecurityYaml(f.dir, "both.yaml", "auth_secret_file: " + f.secret + ", " + TlsYaml(f.tls));
    auto security = LoadClusterSecurity(yaml, no_env);
    INFO(security.status().ToString());
    REQUIRE(security.ok());
    CHECK(security->auth_key != nullptr);
    REQUIRE(security->tls != nullptr);
    CHECK(security->tls->files().cert_file == f.tls.cert_file);
  }
  SECTION("the environment wins over the YAML, file by file") {
    const std::string yaml =
        WriteSecurityYaml(f.dir, "stale.yaml", "auth_secret_file: " + f.dir + "/gone-secret, " + TlsYaml(f.tls));
    auto security = LoadClusterSecurity(yaml, testing::EnvFrom({{"FLEETPS_AUTH_SECRET_FILE", f.secret},
                                                                {"FLEETPS_TLS_CA_FILE", f.other_tls.ca_file},
                                                                {"FLEETPS_TLS_KEY_FILE", ""}}));
    INFO(security.status().ToString());
    REQUIRE(security.ok());
    CHECK(security->auth_key != nullptr);
    REQUIRE(security->tls != nullptr);
    CHECK(security->tls->files().ca_file == f.other_tls.ca_file);  // from the environment
    CHECK(security->tls->files().cert_file == f.tls.cert_file);    // from the YAML
    CHECK(security->tls->files().key_file == f.tls.key_file);      // an empty variable leaves the YAML's
  }
  SECTION("a missing file is named, wherever it was set") {
    const std::string yaml = WriteSecurityYaml(f.dir, "missing.yaml", "auth_secret_file: " + f.dir + "/gone-secret");
    auto from_yaml = LoadClusterSecurity(yaml, no_env);
    REQUIRE_FALSE(from_yaml.ok());
    CHECK_THAT(from_yaml.status().message(), Catch::Contains(f.dir + "/gone-secret"));

    auto from_env = LoadClusterSecurity(yaml, testing::EnvFrom({{"FLEETPS_AUTH_SECRET_FILE", f.secret},
                                                                {"FLEETPS_TLS_CERT_FILE", f.dir + "/gone.pem"},
                                                                {"FLEETPS_TLS_KEY_FILE", f.tls.key_file}}));
    REQUIRE_FALSE(from_env.ok());
    CHECK_THAT(from_env.status().message(), Catch::Contains("TLS cert_file") && Catch::Contains(f.dir + "/gone.pem"));
  }
}

TEST_CASE("LoadClusterSecurity: a YAML that cannot be read is skipped, or named when it is required") {
  SecurityFiles f;
  const std::string missing = f.dir + "/no-such.yaml";
  const auto env = testing::EnvFrom({{"FLEETPS_AUTH_SECRET_FILE", f.secret}});

  auto skipped = LoadClusterSecurity(missing, env);
  INFO(skipped.status().ToString());
  REQUIRE(skipped.ok());
  CHECK(skipped->auth_key != nullptr);  // the environment's files still count
  CHECK(skipped->tls == nullptr);

  auto required = LoadClusterSecurity(missing, env, SecurityYaml::kRequired);
  REQUIRE_FALSE(required.ok());
  CHECK_THAT(required.status().message(), Catch::Contains(missing));

  auto none = LoadClusterSecurity("", testing::EnvFrom({}), SecurityYaml::kRequired);  // no YAML given: none needed
  REQUIRE(none.ok());
  CHECK(none->auth_key == nullptr);
  CHECK(none->tls == nullptr);
}

}  // namespace
}  // namespace fleetps::config
