#pragma once
// Plain option structs describing a parameter table, as read from the pserver's YAML
// config (`tables:` list) by common/config/server_config. Each field: meaning, default, unit.

#include <cstdint>
#include <string>

namespace fleetps {

enum class TableKind : uint8_t { kSparse = 0, kDense = 1 };
enum class OptimizerKind : uint8_t { kSgd = 0, kAdagrad = 1, kAdam = 2 };
enum class InitializerKind : uint8_t { kUniform = 0, kGaussian = 1, kZeros = 2, kConstant = 3 };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;  // `name`: sgd | adagrad | adam
  float learning_rate = 0.01f;               // step size, > 0
  // Adagrad: w -= lr * g / (sqrt(g2sum) + epsilon), g2sum starts at initial_accumulator.
  float initial_accumulator = 0.0f;
  // Adam: moments m, v per weight; per-row beta powers for bias correction.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;  // Adagrad and Adam
  // Weight bounds: after each update w is clipped to [bound_min, bound_max] when
  // has_bounds. YAML: `weight_bounds: [min, max]`.
  bool has_bounds = false;
  float bound_min = 0.0f;
  float bound_max = 0.0f;
};

struct InitializerOptions {
  InitializerKind kind = InitializerKind::kUniform;  // `name`: uniform|gaussian|zeros|constant
  float min = -0.01f;   // uniform lower bound
  float max = 0.01f;    // uniform upper bound
  float mean = 0.0f;    // gaussian mean
  float stddev = 0.01f; // gaussian standard deviation
  float value = 0.0f;   // constant value
  uint64_t seed = 0;    // a row's initial value is a pure function of (seed, key, column)
};

struct TableOptions {
  uint32_t id = 0;                      // wire id, unique per cluster
  std::string name;                     // human name, unique per cluster
  TableKind kind = TableKind::kSparse;  // `kind`: sparse | dense
  // Sparse: floats per row (embedding width). Dense: total floats in the table
  // across all servers (`dim` or `size` in YAML).
  uint64_t dim = 8;
  uint32_t shards = 8;           // shards per server (sparse); each has one owner executor
  bool create_on_pull = false;   // sparse: store a row when a missing key is pulled
                                 // (otherwise its initial value is returned, not stored)
  OptimizerOptions optimizer;
  InitializerOptions initializer;
};

}  // namespace fleetps
