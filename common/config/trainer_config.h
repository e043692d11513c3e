#pragma once
// cpu-trainer job options: one PaddleRec-style YAML describes the whole job.
//
//   runner:           PaddleRec runner keys (data paths, batch sizes, epochs,
//                     print_interval, thread_num, sync_mode, geo_step, model_save_path, ...)
//   hyper_parameters: the model (common/config/model_config.h)
//   fleetps:          optional fleetps extensions (tables, communicator, lifecycle)
//
// Every map is checked for unknown keys (file:line:column and the closest known key in the
// error). PaddleRec keys with no meaning in fleetps (Python reader paths, use_gpu,
// sparse_feature_number, ...) are accepted and ignored from an explicit list in
// trainer_config.cc, so PaddleRec configs load as they are.
//
// The same file can be given to `pserver --config`: its tables are derived from the
// model (JobTables), so trainers and servers cannot disagree on dimensions.
//
// Precedence (highest first): command-line flags > environment > YAML > defaults.
// Environment (as Paddle's PaddleCloudRoleMaker reads it): TRAINING_ROLE (TRAINER when
// set), PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID, PADDLE_PSERVERS_IP_PORT_LIST (absent:
// local training with in-process tables).

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/data_config.h"
#include "common/config/model_config.h"
#include "common/config/server_config.h"
#include "common/config/table_options.h"
#include "common/net/endpoint.h"
#include "common/status.h"

namespace fleetps::config {

enum class SyncMode : uint8_t {
  kAsync = 0,  // pull, train, push through a merging background communicator
  kSync = 1,   // all workers meet every step; dense gradients averaged before the update
  kGeo = 2,    // train local copies for geo_step steps, then push parameter deltas
};
std::string_view SyncModeName(SyncMode mode);
// Parses "async" | "sync" | "geo"; false for anything else.
bool SyncModeFromName(std::string_view name, SyncMode* mode);

struct TrainerOptions {
  std::string config_path;  // the YAML this came from ("" when built in code)
  DataOptions data;
  ModelOptions model;

  // ---- runner ----
  SyncMode sync_mode = SyncMode::kAsync;  // `sync_mode`: async | sync | geo
  uint32_t geo_step = 100;                // `geo_step`: local steps between GEO exchanges, >= 1
  uint32_t epochs = 1;                    // `epochs`, >= 1
  uint32_t print_interval = 100;          // `print_interval`: steps between progress lines, >= 1
  uint32_t worker_threads = 1;            // `thread_num`: training threads per trainer (Hogwild)
  std::string model_save_path;            // `model_save_path`: "" = do not save; relative to the YAML
  bool save_every_epoch = false;          // fleetps.save_every_epoch: also save to <path>/<epoch>
  std::string infer_load_path;            // `infer_load_path`: infer model dir (default model_save_path)

  // ---- cluster (environment / flags) ----
  uint32_t trainer_id = 0;                // PADDLE_TRAINER_ID
  uint32_t trainers_num = 1;              // PADDLE_TRAINERS_NUM
  std::vector<net::Endpoint> pservers;    // PADDLE_PSERVERS_IP_PORT_LIST; empty = local mode

  // ---- fleetps extensions ----
  TableOptions sparse_table;   // fleetps.sparse_table: id/name/shards/initializer/optimizer overrides
  TableOptions dense_table;    // fleetps.dense_table: id/name/optimizer overrides; size from the model
  bool stop_servers_at_end = true;        // fleetps.stop_servers_at_end: trainer 0 stops the pservers
  uint32_t barrier_timeout_ms = 600000;   // fleetps.barrier_timeout_ms
  uint32_t dense_pull_interval = 1;       // fleetps.dense_pull_interval: async, steps between dense pulls
  uint32_t max_merge_steps = 4;           // fleetps.max_merge_steps: async, steps merged per send
  uint32_t local_shards = 8;              // fleetps.local_shards: shards of in-process tables
  std::string log_level = "info";         // fleetps.log_level / FLEETPS_LOG_LEVEL

  bool local() const { return pservers.empty(); }
};

// Floats in the dense part of the model (DenseNet's flat parameter vector).
uint64_t DenseParamCount(const ModelOptions& model);
// The sparse and dense tables a job needs, in that order.
std::vector<TableOptions> JobTables(const TrainerOptions& options);

StatusOr<TrainerOptions> ParseTrainerYaml(const std::string& text, const std::string& file_name);
StatusOr<TrainerOptions> LoadTrainerYaml(const std::string& path);
Status ApplyTrainerEnv(const EnvLookup& env, TrainerOptions* options);
Status ValidateTrainerOptions(const TrainerOptions& options);

// True when the YAML document is a job config (has `hyper_parameters`), so pserver can
// derive its tables from it.
bool IsJobYaml(const std::string& text);

}  // namespace fleetps::config
