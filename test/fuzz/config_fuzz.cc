// Fuzz target: the YAML configs (common/config: ParseServerYaml for pserver configs and
// ParseTrainerYaml for job configs) and the Paddle environment variables.
//
// Input: YAML text, given to both parsers. An input whose first byte is 0x01 is instead a
// set of environment values separated by NUL bytes, in the order of kEnvNames (an empty
// value leaves the variable unset), applied to the options of configs/pserver.yaml and
// configs/ctr_dnn.yaml (ApplyServerEnv, ApplyTrainerEnv, ApplyHeterTrainerEnv,
// ParseEndpointList).
// Checks, besides the sanitizers:
//  - a refused YAML names the file ("fuzz.yaml") in its error (docs/TRAINING.md,
//    "Configuration": errors name the file and the key);
//  - options that parse and validate can be used: every table of a valid pserver config
//    or of a valid job (JobTables) passes ValidateTable, and the job's data options build
//    a LineFormat (whose constructor CHECKs them);
//  - a job YAML (IsJobYaml) read by the pserver gives the tables JobTables gives.
#include <optional>
#include <string>
#include <vector>

#include "common/config/heter_config.h"
#include "common/config/server_config.h"
#include "common/config/trainer_config.h"
#include "common/net/endpoint.h"
#include "test/fuzz/fuzz_util.h"
#include "trainer/data/line_format.h"

namespace fleetps::fuzz {
namespace {

constexpr const char* kFile = "fuzz.yaml";
constexpr const char* kEnvNames[] = {"TRAINING_ROLE",
                                     "PADDLE_PSERVERS_IP_PORT_LIST",
                                     "POD_IP",
                                     "PADDLE_PORT",
                                     "PADDLE_TRAINERS_NUM",
                                     "PADDLE_TRAINER_ID",
                                     "FLEETPS_LOG_LEVEL",
                                     "FLEETPS_AUTH_SECRET_FILE",
                                     "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST",
                                     "PADDLE_HETER_TRAINER_IP_PORT_LIST",
                                     "HETER_DEVICE_TYPE",
                                     "PADDLE_HETER_TRAINER_DEVICE"};
constexpr size_t kNumEnv = sizeof(kEnvNames) / sizeof(kEnvNames[0]);

std::string SourceDir() {
  const char* dir = std::getenv("FLEETPS_SOURCE_DIR");
  return dir != nullptr ? dir : FLEETPS_SOURCE_DIR;
}

void RequireNamesFile(const Status& st, const std::string& what) {
  if (st.message().find(kFile) == std::string::npos) Fail(what + " error does not name the file: " + st.ToString());
}

bool SameTables(const std::vector<TableOptions>& a, const std::vector<TableOptions>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].name != b[i].name || a[i].kind != b[i].kind || a[i].dim != b[i].dim) return false;
  }
  return true;
}

void FuzzYaml(const std::string& text) {
  auto server = config::ParseServerYaml(text, kFile);
  if (!server.ok()) {
    RequireNamesFile(server.status(), "ParseServerYaml");
  } else if (config::ValidateServerOptions(*server).ok()) {
    for (const auto& t : server->tables) {
      if (Status st = config::ValidateTable(t); !st.ok())
        Fail("a validated pserver config has a bad table: " + st.ToString());
    }
  }
  auto job = config::ParseTrainerYaml(text, kFile);
  if (!job.ok()) {
    RequireNamesFile(job.status(), "ParseTrainerYaml");
    return;
  }
  if (config::IsJobYaml(text) && server.ok() && !SameTables(server->tables, config::JobTables(*job))) {
    Fail("pserver and trainer derive different tables from one job YAML");
  }
  if (!config::ValidateTrainerOptions(*job).ok()) return;
  for (const auto& t : config::JobTables(*job)) {
    if (Status st = config::ValidateTable(t); !st.ok()) Fail("a validated job derives a bad table: " + st.ToString());
  }
  (void)config::DenseParamCount(job->model);
  (void)data::MakeLineFormat(job->data);
}

void FuzzEnv(std::string_view rest) {
  std::optional<std::string> values[kNumEnv];
  for (size_t i = 0; i < kNumEnv && !rest.empty(); ++i) {
    const size_t end = rest.find('\0');
    const std::string_view v = rest.substr(0, end);
    if (!v.empty()) values[i] = std::string(v);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  const config::EnvLookup env = [&](const std::string& name) -> std::optional<std::string> {
    for (size_t i = 0; i < kNumEnv; ++i) {
      if (name == kEnvNames[i]) return values[i];
    }
    return std::nullopt;
  };
  static const std::string pserver_yaml = ReadBytes(SourceDir() + "/configs/pserver.yaml");
  static const std::string job_yaml = ReadBytes(SourceDir() + "/configs/ctr_dnn.yaml");
  auto server = config::ParseServerYaml(pserver_yaml, "configs/pserver.yaml");
  if (!server.ok()) Fail("configs/pserver.yaml does not parse: " + server.status().ToString());
  if (config::ApplyServerEnv(env, &*server).ok() && config::ValidateServerOptions(*server).ok()) {
    (void)server->self().ToString();  // index within the endpoints
  }
  auto job = config::ParseTrainerYaml(job_yaml, "configs/ctr_dnn.yaml");
  if (!job.ok()) Fail("configs/ctr_dnn.yaml does not parse: " + job.status().ToString());
  if (config::ApplyTrainerEnv(env, &*job).ok()) (void)config::ValidateTrainerOptions(*job);
  static const auto heter_yaml = config::LoadHeterTrainerYaml(SourceDir() + "/configs/ctr_dnn.yaml");
  if (!heter_yaml.ok()) {
    Fail("configs/ctr_dnn.yaml does not load as a heter-trainer's: " + heter_yaml.status().ToString());
  }
  config::HeterTrainerOptions heter = *heter_yaml;
  if (config::ApplyHeterTrainerEnv(env, &heter).ok()) (void)config::ValidateHeterTrainerOptions(heter);
  for (const auto& v : values) {
    if (v) (void)net::ParseEndpointList(*v);
  }
}

void WriteSeeds(SeedWriter& seeds) {
  const std::string src = SourceDir();
  for (const char* f :
       {"configs/pserver.yaml", "configs/ctr_dnn.yaml", "configs/ctr_dnn_criteo.yaml", "configs/mlp.yaml"}) {
    seeds.Add(ReadBytes(src + "/" + f));
  }
  const char* shared = std::getenv("FLEETPS_PADDLEREC_DIR");
  const std::string paddlerec = shared != nullptr ? shared : src + "/../shared/data/paddlerec";
  for (const char* f : {"rank_dnn/config.yaml", "rank_dnn/online.yaml", "slot_dnn/config_queuedataset.yaml"}) {
    const std::string text = ReadBytes(paddlerec + "/" + f);
    if (!text.empty()) seeds.Add(text);
  }
  auto env = [](const std::vector<std::string>& values) {
    std::string out = "\x01";
    for (const auto& v : values) out += v + std::string(1, '\0');
    return out;
  };
  seeds.Add(env({"PSERVER", "127.0.0.1:8500,127.0.0.1:8501", "127.0.0.1", "8501", "2", "1", "info"}));
  seeds.Add(env({"TRAINER", "[::1]:6000,host:70000", "", "", "3", "7"}));
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::MaybeWriteSeeds("config_fuzz", fleetps::fuzz::WriteSeeds);
  fleetps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps::fuzz;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '\x01') {
    FuzzEnv(std::string_view(text).substr(1));
  } else {
    FuzzYaml(text);
  }
  return 0;
}
