#pragma once
// fleetps-datagen's library: writes a synthetic CTR data set, in any of the trainer's line
// formats, drawn from a known random model, and reports the Bayes-optimal AUC of what it
// wrote — the ceiling a trained model's AUC should approach.
//
// The model (every parameter a pure function of the seed):
//   sparse slot s: id rank k in [1, vocab_size] ~ Zipf(zipf_exponent) (continuous
//     power-law approximation: density ~ x^-s on [1, vocab_size + 1), k = floor(x));
//     id = s * vocab_size + k - 1, so slots never share ids.
//   dense feature j: x_j = u^2 rounded to 5 decimals, u ~ U[0, 1).
//   logit = bias + sum_s w_s(id_s) + sum_j beta_j (x_j - 1/3)
//           + sum over the pairs (0,1), (2,3), (4,5): gamma * h_a(id_a) * h_b(id_b)
//   where w, h are per-id weights hashed from (seed, slot, id); label ~ Bernoulli(sigmoid(logit)).
//   With history_len > 0 the last slot is a click history instead: 1..history_len items of
//   slot 0's vocabulary, most of them from the user's interest category (id mod 32), which
//   half of the target items (slot 0) share; the logit gains 2.5 x (the share of history
//   items in the target's category) - 0.8. Attention over the history (DIN) can see it.
//
// Besides the Bayes-optimal AUC it reports the data-limited limit: the AUC on the test rows
// of the true model with every id seen fewer than k times in the training rows at its
// prior mean (w = h = 0), for k in kDataLimitThresholds — what a learner can reach at best
// from that much data, since an id it has (almost) never seen tells it nothing.
//
// With estimation_limit it also reports the estimation limit: the AUC on the test rows when
// each id's weight and interaction factor is its posterior mean given the training rows
// and every other parameter's true value. An id seen n times is known only to about
// 1 / sqrt(0.16 n) in its weight, so this is below the k=1 limit; a learner that must
// estimate every parameter at once knows less, so this is an optimistic estimate of the
// best AUC a learner can expect from the rows.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config/data_config.h"
#include "common/status.h"

namespace fleetps::datagen {

struct DatagenOptions {
  config::DataFormat format = config::DataFormat::kRankDnn;  // line format of every file
  uint64_t rows = 100000;                                    // examples written in total (train + test), >= 1
  double test_fraction = 0.1;                                // share of the rows written to the test file, in [0, 1)
  uint32_t train_files = 1;                                  // train part files, >= 1; rows are dealt round-robin
  std::string out_dir;                                       // output directory (created); see GenerateDataset
  uint64_t seed = 1;                                         // model parameters and samples are pure functions of it
  uint32_t sparse_slots = 26;                                // sparse slots, >= 1
  uint32_t dense_dim = 13;                                   // dense features; must be 0 for slot_dnn (no dense part)
  uint64_t vocab_size = 100000;                              // distinct ids per slot, >= 1
  double zipf_exponent = 1.1;                                // id frequency ~ rank^-zipf_exponent, >= 0
  uint32_t history_len = 0;  // > 0: the last slot is a click history (above), >= 2 slots
  // Also compute the estimation limit (needs test rows; about 2 us and 512 bytes per
  // distinct id per training row's slot: ~30 s for 1M rows of 26 slots).
  bool estimation_limit = false;
};

// The k of DatagenReport::data_limited_auc.
inline constexpr uint32_t kDataLimitThresholds[] = {1, 3, 10, 100};

struct DatagenReport {
  uint64_t train_rows = 0;
  uint64_t test_rows = 0;
  double label_mean = 0;      // share of positive labels over all rows
  double bayes_auc = 0;       // AUC of the true click probabilities against the sampled labels, all rows
  double bayes_test_auc = 0;  // the same on the test rows only (0 without test rows)
  // (k, AUC on the test rows of the true model with the ids seen < k times in the training
  // rows at their prior mean), for every k of kDataLimitThresholds; empty without test rows.
  std::vector<std::pair<uint32_t, double>> data_limited_auc;
  // AUC on the test rows of the posterior-mean oracle (see above); 0 when not asked for or
  // without test rows.
  double estimation_limit_auc = 0;
  std::vector<std::string> train_files;
  std::vector<std::string> test_files;
  std::string config_file;  // data section that reads the files back
};

// The DataOptions the generated files are written and read with (built through
// ParseDataOptions, so the defaults are the trainer's): slots "1".."N" (slot_dnn "2".."N+1"),
// label "click" (slot_dnn "1"), multislot order label, sparse, dense.
StatusOr<config::DataOptions> DatagenDataOptions(const DatagenOptions& options);

// Writes out_dir/train/part-00000.. (train_files files), out_dir/test/part-00000 (when
// test rows > 0) and out_dir/data.yaml (a `data:` section with data_format, shapes and
// train_data_dir / test_data_dir relative to it, so ParseDataOptions reads the files back).
// InvalidArgument for bad options, IOError naming a file that cannot be written.
StatusOr<DatagenReport> GenerateDataset(const DatagenOptions& options);

}  // namespace fleetps::datagen
