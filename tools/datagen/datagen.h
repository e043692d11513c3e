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
//   where w, h are per-id weights hashed from (seed, slot, id); click ~ Bernoulli(sigmoid(logit)).
//   With history_len > 0 the last slot is a click history instead: 1..history_len items of
//   slot 0's vocabulary, most of them from the user's interest category (id mod 32), which
//   half of the target items (slot 0) share; the logit gains 2.5 x (the share of history
//   items in the target's category) - 0.8. Attention over the history (DIN) can see it.
//
// With `conversion` every example gets a second label, `conversion`, after the click (the
// label slots are [click, conversion]; slot_dnn ["1", conversion], its click keeping the
// format's default slot "1"), as multi-task models (MMoE, ESMM) learn them:
//   conversion = 0 when click = 0; when click = 1, conversion ~ Bernoulli(sigmoid(cvr_logit))
//   cvr_logit = cvr_bias + sum_s (0.6 w_s(id_s) + v_s(id_s)) + sum_j beta'_j (x_j - 1/3)
//   where v, beta' are hashed like w, beta from streams of their own (v with 0.8 times w's
//   spread, so a slot's cvr weights correlate 0.6 with its click weights) and the history
//   slot adds nothing. cvr_bias is solved for each model (seed and shape) so that
//   P(conversion | click) averages 0.25 over the clicks of 32768 rows drawn for that alone:
//   about 25% of the clicks convert (20-30% in a data set of a few thousand clicks or more).
//   The conversions are drawn from a random stream of their own: the features and clicks
//   are those the same seed gives without `conversion`.
//   Its Bayes-optimal AUC is that of p_click * p_cvr, the probability of a conversion over all
//   rows (what ESMM's CTCVR output predicts).
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
#include "trainer/data/batch.h"

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
  // Add the `conversion` label after `click` (see above).
  bool conversion = false;
};

// The label slot names of the generated files: the click's (the format's default), then,
// with `conversion`, kConversionSlot.
inline constexpr char kConversionSlot[] = "conversion";

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
  // With `conversion` (all 0 without):
  double conversion_mean = 0;            // share of rows that converted
  double conversion_rate = 0;            // share of the clicks that converted (0 without clicks)
  double bayes_conversion_auc = 0;       // AUC of p_click * p_cvr against the conversion labels, all rows
  double bayes_conversion_test_auc = 0;  // the same on the test rows only (0 without test rows)
  double bayes_cvr_auc = 0;              // AUC of p_cvr against the conversion labels of the clicked rows
  std::vector<std::string> train_files;
  std::vector<std::string> test_files;
  std::string config_file;  // data section that reads the files back
};

// The DataOptions the generated files are written and read with (built through
// ParseDataOptions, so the defaults are the trainer's): slots "1".."N" (slot_dnn "2".."N+1"),
// label "click" (slot_dnn "1") and with `conversion` then "conversion", multislot order
// labels, sparse, dense.
StatusOr<config::DataOptions> DatagenDataOptions(const DatagenOptions& options);

// The true probabilities of a row's labels under the model of `options` (a pure function
// of its seed and shape): P(click) and P(conversion | click) (0 without `conversion`).
struct LabelProbabilities {
  double click = 0;
  double cvr = 0;
};
// Those of every row of `rows`: generated rows read back (DatagenDataOptions' shape).
std::vector<LabelProbabilities> TrueLabelProbabilities(const DatagenOptions& options, const data::Batch& rows);

// Writes out_dir/train/part-00000.. (train_files files), out_dir/test/part-00000 (when
// test rows > 0) and out_dir/data.yaml (a `data:` section with data_format, shapes, with
// `conversion` label_slots, and train_data_dir / test_data_dir relative to it, so
// ParseDataOptions reads the files back).
// InvalidArgument for bad options, IOError naming a file that cannot be written.
StatusOr<DatagenReport> GenerateDataset(const DatagenOptions& options);

}  // namespace fleetps::datagen
