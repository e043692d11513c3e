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
// sparse_feature_number, ...) are accepted and ignored from explicit lists in
// trainer_config_runner.cc and trainer_config.cc, so PaddleRec configs load as they are.
//
// The same file can be given to `pserver --config`: its tables are derived from the
// model (JobTables), so trainers and servers cannot disagree on dimensions.
//
// Precedence (highest first): command-line flags > environment > YAML > defaults.
// Environment (as Paddle's PaddleCloudRoleMaker reads it): TRAINING_ROLE (TRAINER when
// set), PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID, PADDLE_PSERVERS_IP_PORT_LIST (absent:
// local training with in-process tables), PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST /
// PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST (or Paddle 2.0-2.1's PADDLE_HETER_TRAINER_IP_PORT_LIST;
// set: heterogeneous training),
// PADDLE_TRAINER_ENDPOINTS / PADDLE_CURRENT_ENDPOINT (several: collective training; with
// PADDLE_PSERVERS_IP_PORT_LIST too, the hybrid: sparse on the pservers, dense by allreduce;
// in gpubox mode: the nodes, whose devices' dense replicas are all-reduced together),
// FLAGS_selected_gpus and HETER_DEVICE_TYPE (or PADDLE_HETER_TRAINER_DEVICE; gpubox mode's
// devices).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config/data_config.h"
#include "common/dense/cpu_gemm.h"
#include "common/config/model_config.h"
#include "common/config/server_config.h"
#include "common/config/table_options.h"
#include "common/net/endpoint.h"
#include "common/status.h"

namespace fleetps::config {

enum class SyncMode : uint8_t {
  kAsync = 0,       // pull, train, push through a merging background communicator
  kSync = 1,        // all workers meet every step; dense gradients averaged before the update
  kGeo = 2,         // train local copies for geo_step steps, then push parameter deltas
  kHeter = 3,       // heterogeneous: the dense part runs on heter-trainers; sparse as async
  kCollective = 4,  // data parallel: dense replicas kept equal by allreduce; sparse (if any) as async
  kGpuBox = 5,      // GPU-PS passes: a pass's rows in (GPU or host-twin) device tables, dense by allreduce
};
std::string_view SyncModeName(SyncMode mode);
// Parses "async" | "sync" | "geo" | "heter" | "collective" | "gpubox"; false for anything else.
bool SyncModeFromName(std::string_view name, SyncMode* mode);

// How a cpu-trainer picks the heter-trainer of a micro-batch.
enum class HeterRoute : uint8_t {
  kRoundRobin = 0,  // micro-batches in turn to every heter-trainer of the next stage
  kTrainerId = 1,   // every micro-batch of trainer t to heter-trainer t % heter-trainers
};

// How the heter-trainers keep the dense parameters in step.
enum class HeterDenseSync : uint8_t {
  kPserver = 0,    // `pserver`: each pushes its dense gradients to the pservers' dense table
                   //   and pulls fresh parameters (the async communicator)
  kAllreduce = 1,  // `allreduce`: each holds a replica; they average their gradients among
                   //   themselves (Gloo) and write the replica to the pservers on HeterFlush
};

// How a host thread waits for its CUDA device (cudaSetDeviceFlags' schedule).
enum class CudaWait : uint8_t {
  kAuto = 0,   // `auto`: the CUDA runtime's choice (it spins while the process has fewer
               // active contexts than cores: one GPU on a 16-core node spins)
  kSpin = 1,   // `spin`: busy-wait; lowest latency, a core per waiting thread
  kYield = 2,  // `yield`: spin, yielding the core between polls
  kBlock = 3,  // `block`: sleep until the device signals; frees the core for the other workers
};

// Heterogeneous training (runner.sync_mode: heter, or PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST
// set): the `fleetps.heter` map of the job YAML.
struct HeterOptions {
  HeterRoute route = HeterRoute::kRoundRobin;  // `route`: round_robin | trainer_id
  uint32_t inflight = 2;                       // `inflight`: micro-batches in flight per worker thread, [1, 64]
  uint32_t timeout_ms = 20000;                 // `timeout_ms`: a heter-trainer silent this long fails the cpu-trainer
  bool failover = false;                       // `failover`: re-send a micro-batch whose heter-trainer failed to
                                               //   the next live one (instead of failing the cpu-trainer)
  uint32_t failover_probe_ms = 10000;          // `failover_probe_ms`: with failover, how often a down
                                               //   heter-trainer is asked whether it is back, [100, 600000]
  uint32_t lanes = 2;                          // `lanes`: micro-batches a heter-trainer computes at once, [1, 64]
  HeterDenseSync dense_sync = HeterDenseSync::kPserver;  // `dense_sync`: pserver | allreduce
  // `allreduce_port`: with allreduce, the rendezvous port on heter-trainer 0's host (free,
  // not its PADDLE_PORT); required then. Bounded by fleetps.collective.timeout_ms.
  uint16_t allreduce_port = 0;
  // `allreduce_interval_ms`: with allreduce, a round (and an optimizer step when any
  // heter-trainer has gradients) at most this often, [1, 60000].
  uint32_t allreduce_interval_ms = 1;
  // `cuda_wait` (auto | spin | yield | block): how the lanes of a GPU heter-trainer wait for
  // it (fleetps.gpups.cuda_wait for GPU-PS). auto, the default: the CUDA runtime's choice; on
  // an H100 with 8 cpu-trainers on its 16 cores, auto, yield and block trained alike.
  CudaWait cuda_wait = CudaWait::kAuto;
};

// How learning rates follow the world size of a collective job.
enum class LrScaling : uint8_t {
  kNone = 0,    // `none`: the configured rate as is
  kLinear = 1,  // `linear`: rate x world size (the global batch is per-rank batch x world size)
  kSqrt = 2,    // `sqrt`: rate x sqrt(world size)
  kAuto = 3,    // `auto`: linear for sgd, sqrt for the adaptive rules (adagrad, adam), whose
                // step size does not grow with the gradient's scale
};

// Which library all-reduces among the ranks of a collective job.
enum class CollectiveBackend : uint8_t {
  kAuto = 0,  // `auto`: NCCL when this rank was given a GPU (FLAGS_selected_gpus), the build
              // has NCCL and the GPU is visible; Gloo otherwise
  kGloo = 1,  // `gloo`: Gloo over TCP, on the CPU
  kNccl = 2,  // `nccl`: NCCL on this rank's GPU; an error when that cannot be
};

std::string_view CollectiveBackendName(CollectiveBackend backend);
// Parses "auto" | "gloo" | "nccl"; false for anything else.
bool ParseCollectiveBackend(std::string_view name, CollectiveBackend* backend);

// Collective (data-parallel) training: the `fleetps.collective` map of the job YAML.
struct DataParallelOptions {
  // `backend` (PADDLE_DISTRI_BACKEND overrides it): auto | gloo | nccl.
  CollectiveBackend backend = CollectiveBackend::kAuto;
  // This rank's GPU: the first id of FLAGS_selected_gpus (the launcher's --gpus gives each
  // rank one); -1 when it is unset.
  int gpu = -1;
  uint32_t fuse_grad_size_mb = 32;          // `fuse_grad_size_in_MB`: gradient bucket size, [1, 1024]
  LrScaling lr_scaling = LrScaling::kAuto;  // `lr_scaling`: auto | linear | sqrt | none
  uint32_t warmup_steps = 0;                // `warmup_steps`: linear warm-up of the dense rate over these steps
  bool overlap = true;                      // `overlap`: start a bucket's allreduce during the backward pass
  // `drop_last`: true = every rank stops when the first runs out of data (the others'
  // remainders are dropped); false = ranks out of data keep joining each step's allreduce
  // with no gradient until all are done (the mean is over the ranks that had data).
  bool drop_last = false;
  uint32_t timeout_ms = 300000;  // `timeout_ms`: set-up and each collective operation
  // `store_budget_bytes`: keys plus values rank 0's rendezvous holds at most while the group
  // forms (trainer/collective/rendezvous.h), >= 4096. 0 (default): 64 KiB + 256 bytes x
  // ranks^2, twice what a Gloo group stores (about 122 bytes per pair of ranks).
  uint64_t store_budget_bytes = 0;
};

// The dense rate of data-parallel step `step` (0-based) among `world` ranks: `dense`'s rate
// scaled as `c.lr_scaling` says, then warmed up over `c.warmup_steps`.
float DataParallelLearningRate(const DataParallelOptions& c, const OptimizerOptions& dense, uint64_t step,
                               uint32_t world);

// GPU-PS pass mode (runner.sync_mode: gpubox, run by heter-trainer): the `fleetps.gpups` map
// of the job YAML, FLAGS_selected_gpus and HETER_DEVICE_TYPE.
struct GpuPsOptions {
  // FLAGS_selected_gpus: the devices one process drives; the pass table is sharded by key
  // over them and each trains its share of the batches (one worker thread per device).
  std::vector<int> devices = {0};
  // HETER_DEVICE_TYPE: gpu | cpu | auto (gpu when one is visible and this build has CUDA).
  // cpu: the host-memory twin, one host shard per entry of FLAGS_selected_gpus.
  std::string device = "auto";
  // `device_memory_mb`: memory a pass table may take per device, MiB; a pass that needs more
  // is refused naming its key count and bytes. 0: the GPU's free memory less a reserve
  // (host twin: no limit).
  uint64_t device_memory_mb = 0;
  // `merge`: how end_pass writes a row another trainer changed during the pass. false (`add`,
  // default): the pass's difference is added, every trainer's updates count in full; true
  // (`average`): the row becomes the mean of the stored row and the pass's (model averaging of
  // the nodes' copies of shared keys). show/click add up either way.
  bool average_merge = false;
  // `passes_per_epoch` >= 1: each epoch's records (InMemoryDataset, after its shuffle) in this
  // many consecutive parts, each its own pass (begin_pass, train, end_pass). More passes: smaller
  // pass tables, and the nodes of a multi-node job see each other's updates of shared keys
  // sooner.
  uint32_t passes_per_epoch = 1;
  // `workers_per_device` >= 1: host worker threads driving each device. Each worker reads its
  // own batches, does its host work (de-duplication, pooling, the embedding backward, the
  // gradient merge) and steps its own dense replica on the device (a lane of its own), so a
  // device is fed by several cores; every worker is a dense allreduce rank (trainers x
  // devices x workers_per_device ranks in all: a node's workers sum in memory, the nodes
  // all-reduce over one Gloo or NCCL rank each).
  uint32_t workers_per_device = 1;
  // `prefetch` (auto | true | false): each worker has a helper thread that reads its next
  // batch, de-duplicates its keys, looks them up in the pass table and pools them while the
  // worker runs the current step. A lookup that the current step's update could change (the
  // update that applies the worker's merged gradients) waits for it, so a worker's rows are
  // those it would see without the helper. false: one thread per worker does everything in
  // turn. auto (nullopt, the default): helpers when the process has two cores per worker.
  std::optional<bool> prefetch;
  // `cuda_wait` (auto | spin | yield | block): how threads wait for the GPUs of the CUDA pass
  // table and the workers' dense lanes; set once per device before its first stream. yield,
  // the default: on an H100 with 16 cores, 16 workers trained 1-6% faster than with the
  // runtime's spinning (auto), and 9-13% slower with block (docs/BENCHMARKS.md).
  CudaWait cuda_wait = CudaWait::kYield;
};

// Online training by day and pass, as PaddleRec's online trainer (rank/dnn online.yaml):
// for each day, pass_per_day passes, each over its own data (the training paths with
// `{day}` and `{pass}` replaced), each followed by a delta save; each day ends with a shrink
// and the day's checkpoint and base saves (trainer/runtime/job.h).
struct OnlineOptions {
  // `days`: Paddle's shell spelling ("{20191225..20191227}", "20191225 20191226", brace
  // lists and ranges expanded as bash does) or a YAML list; or `start_day` and `end_day`
  // (YYYYMMDD, inclusive), every calendar date between. Empty: not an online job.
  std::vector<std::string> days;
  uint32_t pass_per_day = 1;  // `pass_per_day`, >= 1
  // `data_donefile`: a pass's data is complete once this file is in each of its directories
  // (beside each of its files, for paths that name files; it is not read as data); waited
  // for, polling every `data_sleep_second`. "": not waited.
  std::string data_donefile;
  uint32_t data_sleep_second = 30;  // >= 1
  // `checkpoint_per_pass` (PaddleRec's key): also a checkpoint (mode 0) into
  // MODEL/DAY/checkpoint-PASS after every N-th pass of a day but its last; 0: none. A job
  // started again resumes after the newest one (trainer/runtime/online_resume.h).
  uint32_t checkpoint_per_pass = 0;
  uint32_t start_pass = 1;  // `start_pass`: the first day's first pass, in [1, pass_per_day]

  bool enabled() const { return !days.empty(); }
};

// Days written as Paddle's online configs write them (`echo -n <days>` in its trainer):
// whitespace-separated words, each with bash's brace expansion: {a..b} (integers, zero-padded
// to the wider end when either is) and {x,y,z}, several groups and nesting included.
// InvalidArgument naming the text for unbalanced braces or a range of over 100000 days.
StatusOr<std::vector<std::string>> ExpandDays(const std::string& text);
// `path` with every `{day}` and `{pass}` replaced.
std::string OnlinePassPath(std::string path, const std::string& day, uint32_t pass);

struct TrainerOptions {
  std::string config_path;  // the YAML this came from ("" when built in code)
  DataOptions data;
  ModelOptions model;

  // ---- runner ----
  SyncMode sync_mode = SyncMode::kAsync;  // `sync_mode`: async | sync | geo | heter | collective | gpubox
  uint32_t geo_step = 100;                // `geo_step`: local steps between GEO exchanges, >= 1
  uint32_t epochs = 1;                    // `epochs`, >= 1
  uint32_t print_interval = 100;          // `print_interval`: steps between progress lines, >= 1
  uint32_t worker_threads = 1;            // `thread_num`: training threads per trainer (Hogwild)
  std::string model_save_path;            // `model_save_path`: "" = do not save; relative to the YAML
  bool save_every_epoch = false;          // fleetps.save_every_epoch: also save to <path>/<epoch>
  OnlineOptions online;                   // `days`, `pass_per_day`, `data_donefile`, `data_sleep_second`
  std::string infer_load_path;            // `infer_load_path`: infer model dir (default model_save_path)

  // ---- cluster (environment / flags) ----
  uint32_t trainer_id = 0;              // PADDLE_TRAINER_ID
  uint32_t trainers_num = 1;            // PADDLE_TRAINERS_NUM
  std::vector<net::Endpoint> pservers;  // PADDLE_PSERVERS_IP_PORT_LIST; empty = local mode
  // The heter-trainers of the next stage: PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST, else
  // PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST. Set: heterogeneous training (sync_mode kHeter).
  std::vector<net::Endpoint> heter_trainers;
  // Every rank of a collective job (PADDLE_TRAINER_ENDPOINTS), in rank order. More than one:
  // collective training (sync_mode kCollective), this rank = trainer_id.
  std::vector<net::Endpoint> trainer_endpoints;

  // ---- fleetps extensions ----
  TableOptions sparse_table;             // fleetps.sparse_table: id/name/shards/initializer/optimizer overrides
  TableOptions dense_table;              // fleetps.dense_table: id/name/optimizer overrides; size from the model
  bool stop_servers_at_end = true;       // fleetps.stop_servers_at_end: trainer 0 stops the pservers
  uint32_t barrier_timeout_ms = 600000;  // fleetps.barrier_timeout_ms
  uint32_t dense_pull_interval = 1;      // fleetps.dense_pull_interval: async, steps between dense pulls
  // fleetps.max_merge_steps: steps whose gradients are merged (sparse summed per key, dense
  // averaged) into one optimizer step: the async communicator's sends (async, heter and the
  // collective hybrid's sparse part) and GPU-PS's pass-table pushes. 1 (the default): one
  // step per batch, as local training. N > 1 merges up to N steps, on request only: fewer,
  // larger pushes, but with Adam or Adagrad a key seen in every batch then gets up to N times
  // fewer updates of about one step's size (ctr_dnn on 200k rows, GPU-PS, 1 to 8: test AUC
  // 0.6933 to 0.6837; docs/BENCHMARKS.md).
  uint32_t max_merge_steps = 1;
  // fleetps.dense: the CPU dense backend (common/dense/cpu_gemm.h) of every role that runs
  // the dense layers on a CPU. `precision`: fp32 (default) | bf16 (bf16 products with fp32
  // accumulation and fp32 weights; CPUs with AVX512-BF16 or AMX). `max_isa`: auto (default,
  // the CPU's best) | generic | avx2 | avx512 | avx512_bf16 | amx, a cap for comparisons.
  dense::CpuGemmOptions dense;
  // fleetps.prefetch (auto | true | false), async PS mode: each worker has a helper thread
  // that reads its next batch, de-duplicates its keys, pulls and pools its rows while the
  // worker trains the current one, so the worker no longer waits for its pulls. The rows a
  // step reads then never include this worker's previous step (in async mode they may miss
  // it anyway: its push goes out in the background). auto (nullopt, the default): helpers
  // when the machine has two hardware threads per worker thread. Other modes: no effect
  // (GPU-PS has fleetps.gpups.prefetch).
  std::optional<bool> prefetch;
  uint32_t local_shards = 8;       // fleetps.local_shards: shards of in-process tables
  std::string log_level = "info";  // fleetps.log_level / FLEETPS_LOG_LEVEL
  HeterOptions heter;              // fleetps.heter
  DataParallelOptions collective;  // fleetps.collective
  GpuPsOptions gpups;              // fleetps.gpups, FLAGS_selected_gpus, HETER_DEVICE_TYPE

  bool local() const { return pservers.empty(); }
  bool heter_mode() const { return sync_mode == SyncMode::kHeter; }
  bool collective_mode() const { return sync_mode == SyncMode::kCollective; }
  bool gpubox_mode() const { return sync_mode == SyncMode::kGpuBox; }
};

// Floats in the dense part of the model (DenseNet's flat parameter vector).
uint64_t DenseParamCount(const ModelOptions& model);
// The sparse and dense tables a job needs, in that order.
std::vector<TableOptions> JobTables(const TrainerOptions& options);

StatusOr<TrainerOptions> ParseTrainerYaml(const std::string& text, const std::string& file_name);
StatusOr<TrainerOptions> LoadTrainerYaml(const std::string& path);
Status ApplyTrainerEnv(const EnvLookup& env, TrainerOptions* options);
// Reads the heter-trainer endpoints of the environment (the NEXT list, else the ALL list,
// HeterTrainerListEnv); a cpu-trainer given some runs in heter mode.
Status ApplyHeterEndpointsEnv(const EnvLookup& env, TrainerOptions* options);
// The variable naming every heter-trainer: PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST, else
// PADDLE_HETER_TRAINER_IP_PORT_LIST (Paddle 2.0-2.1's spelling, which the Kubernetes
// paddle-operator sets); null when neither is set. Both set and different: InvalidArgument.
StatusOr<const char*> HeterTrainerListEnv(const EnvLookup& env);
// The heter device type: HETER_DEVICE_TYPE, else PADDLE_HETER_TRAINER_DEVICE (Paddle
// 2.0-2.1's); nullopt when neither is set. Both set and different: InvalidArgument.
StatusOr<std::optional<std::string>> HeterDeviceEnv(const EnvLookup& env);
Status ValidateTrainerOptions(const TrainerOptions& options);

// True when the YAML document is a job config (has `hyper_parameters`), so pserver can
// derive its tables from it.
bool IsJobYaml(const std::string& text);

}  // namespace fleetps::config
