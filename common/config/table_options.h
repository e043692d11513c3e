#pragma once
// Plain option structs describing a parameter table, as read from the pserver's YAML
// config (`tables:` list) by common/config/server_config. Each field: meaning, default, unit.

#include <cstdint>
#include <string>

namespace fleetps {

enum class TableKind : uint8_t { kSparse = 0, kDense = 1 };
enum class OptimizerKind : uint8_t { kSgd = 0, kAdagrad = 1, kAdam = 2 };
enum class InitializerKind : uint8_t { kUniform = 0, kGaussian = 1, kZeros = 2, kConstant = 3 };
// Values are stored in checkpoint manifests (schemas/checkpoint.fbs AccessorKind).
enum class AccessorKind : uint8_t { kPlain = 0, kCtr = 1 };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;  // `name`: sgd | adagrad | adam
  float learning_rate = 0.01f;               // step size, > 0
  // Adagrad: w -= lr * g / (sqrt(g2sum) + epsilon), g2sum starts at initial_accumulator.
  float initial_accumulator = 0.0f;
  // Adam: moments m, v per weight; per-row beta powers for bias correction.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;  // Adagrad and Adam
  // Decoupled weight decay: each update first shrinks the weights it touches,
  // w -= learning_rate * weight_decay * w (AdamW's form; a sparse row decays only when its
  // key is pushed). 0 = none; learning_rate * weight_decay must stay below 1.
  float weight_decay = 0.0f;
  // Weight bounds: after each update w is clipped to [bound_min, bound_max] when
  // has_bounds. YAML: `weight_bounds: [min, max]`.
  bool has_bounds = false;
  float bound_min = 0.0f;
  float bound_max = 0.0f;
};

struct InitializerOptions {
  InitializerKind kind = InitializerKind::kUniform;  // `name`: uniform|gaussian|zeros|constant
  float min = -0.01f;                                // uniform lower bound
  float max = 0.01f;                                 // uniform upper bound
  float mean = 0.0f;                                 // gaussian mean
  float stddev = 0.01f;                              // gaussian standard deviation
  float value = 0.0f;                                // constant value
  uint64_t seed = 0;                                 // a row's initial value is a pure function of (seed, key, column)
};

// What a sparse row holds besides weights and optimizer state, and the rules that use it
// (server/accessor). YAML: `accessor: {name: ctr, nonclk_coeff: 0.1, ...}`; defaults are
// Paddle's CtrCommonAccessor defaults.
struct AccessorOptions {
  AccessorKind kind = AccessorKind::kPlain;  // `name`: plain | ctr
  // CTR: score = (show - click) * nonclk_coeff + click * click_coeff.
  float nonclk_coeff = 0.1f;
  float click_coeff = 1.0f;
  // CTR: a new row gets only embed_w (weight 0); embedx (weights 1..dim-1) is created,
  // from the initializer, once the row's score reaches this. <= 0: every row is created
  // whole.
  float embedx_threshold = 10.0f;
  // CTR shrink: show and click are multiplied by this (in (0, 1]) first, then rows with
  // score < delete_threshold or unseen_days > delete_after_unseen_days are deleted.
  float show_click_decay_rate = 0.98f;
  float delete_threshold = 0.8f;
  uint32_t delete_after_unseen_days = 30;  // days = batch saves (mode 3) without a push
};

struct TableOptions {
  uint32_t id = 0;                      // wire id, unique per cluster
  std::string name;                     // human name, unique per cluster
  TableKind kind = TableKind::kSparse;  // `kind`: sparse | dense
  // Sparse: floats per row (embedding width). Dense: total floats in the table
  // across all servers (`dim` or `size` in YAML).
  uint64_t dim = 8;
  uint32_t shards = 8;          // shards per server (sparse); each has one owner executor
  bool create_on_pull = false;  // sparse: store a row when a missing key is pulled
                                // (otherwise its initial value is returned, not stored)
  OptimizerOptions optimizer;
  InitializerOptions initializer;
  AccessorOptions accessor;  // sparse only
  // Sparse: RAM for this table's rows on each server, bytes; rows beyond it, coldest first,
  // move to RocksDB under server.data_dir and come back on use. 0 (default): no limit,
  // every row in RAM and no RocksDB. Covers the rows, their index and RocksDB's caches
  // (docs/STORAGE.md).
  uint64_t memory_budget_bytes = 0;
};

}  // namespace fleetps
