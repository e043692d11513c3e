#include "tools/datagen/datagen.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <unordered_map>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "common/config/yaml_util.h"
#include "common/sharding.h"
#include "tools/datagen/exact_auc.h"
#include "trainer/data/line_format.h"

namespace fleetps::datagen {
namespace {

namespace fs = std::filesystem;

// Model constants, chosen for a Criteo-like label mean (~0.25) and a Bayes AUC near 0.8.
constexpr double kBias = -1.6;
constexpr double kSparseVariance = 1.0;  // logit variance from the per-id weights, all slots together
constexpr double kDenseScale = 1.0;      // beta_j ~ U[-kDenseScale, kDenseScale)
constexpr double kInteraction = 1.5;     // gamma
constexpr std::pair<uint32_t, uint32_t> kInteractionPairs[] = {{0, 1}, {2, 3}, {4, 5}};

// The click-history slot (history_len > 0): items fall in kCategories categories (id mod
// kCategories); each user has an interest category, its history holds 1..history_len items,
// each of that category with probability kHistoryFocus (else any), and half of the target
// items (slot 0) are of it too. The label's logit gains kHistoryWeight times the share of
// history items in the target's category, less kHistoryOffset.
constexpr uint64_t kCategories = 32;
constexpr double kHistoryFocus = 0.7;
constexpr double kHistoryWeight = 2.5;
constexpr double kHistoryOffset = 0.8;

// The conversion label (options.conversion): a slot's cvr weights are kCvrShared times its
// click weights plus an independent part of kCvrOwn times their spread (correlation 0.6,
// the same variance). The bias is solved for each model so that P(conversion | click)
// averages kCvrTarget over the clicks of kCvrCalibrationRows rows drawn for that alone: the
// realised weights of the few most frequent ids move the rate by +-5 points from seed to
// seed under any one fixed bias.
constexpr double kCvrShared = 0.6;
constexpr double kCvrOwn = 0.8;
constexpr double kCvrTarget = 0.25;
constexpr uint32_t kCvrCalibrationRows = 1 << 15;

// Independent hash streams of the model's parameters.
// Append only: a stream's number seeds its values.
enum Stream : uint64_t {
  kSlotScale = 1,
  kDenseBeta,
  kIdWeight,
  kIdInteraction,
  kSamples,
  kCvrDenseBeta,    // beta' of the conversion model
  kCvrIdWeight,     // v_s(id), the conversion model's own part of an id's weight
  kCvrSamples,      // the conversion draws
  kCvrCalibration,  // the rows that set the conversion bias
};

// U[0, 1) as a pure function of (seed, stream, a, b).
double HashUniform(uint64_t seed, Stream stream, uint64_t a, uint64_t b) {
  const uint64_t h = MixKey(MixKey(MixKey(seed ^ (uint64_t{stream} << 56)) ^ a) ^ b);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// mt19937_64 with a U[0, 1) that does not depend on the standard library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

// Ranks in [1, n] with P(k) ~ k^-s, by inverting the CDF of the density x^-s on [1, n + 1)
// and flooring: O(1) per sample and no table, whatever the vocabulary size.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
    const double top = static_cast<double>(n) + 1;
    log_top_ = std::log(top);
    top_pow_ = std::pow(top, 1 - s);
  }
  uint64_t Sample(double u) const {
    const double x = std::abs(s_ - 1) < 1e-9 ? std::exp(u * log_top_) : std::pow(u * (top_pow_ - 1) + 1, 1 / (1 - s_));
    return std::clamp<uint64_t>(static_cast<uint64_t>(x), 1, n_);
  }

 private:
  uint64_t n_;
  double s_;
  double log_top_;
  double top_pow_;
};

// An id's parameters: its weight w_s(id) and its interaction factor h_s(id).
struct IdParams {
  double weight = 0;
  double factor = 0;
};

class SyntheticCtrModel {
 public:
  explicit SyntheticCtrModel(const DatagenOptions& options)
      : seed_(options.seed),
        vocab_size_(options.vocab_size),
        zipf_(options.vocab_size, options.zipf_exponent),
        history_len_(options.history_len),
        history_slot_(options.history_len > 0 ? options.sparse_slots - 1 : UINT32_MAX),
        conversion_(options.conversion) {
    // Slot importance varies in [0.5, 1.5); scaled so the slots add up to kSparseVariance.
    const double base = std::sqrt(kSparseVariance / options.sparse_slots);
    for (uint32_t s = 0; s < options.sparse_slots; ++s) {
      slot_scale_.push_back(base * (0.5 + HashUniform(seed_, kSlotScale, s, 0)));
    }
    for (uint32_t j = 0; j < options.dense_dim; ++j) {
      dense_beta_.push_back(kDenseScale * (2 * HashUniform(seed_, kDenseBeta, j, 0) - 1));
      cvr_dense_beta_.push_back(kDenseScale * (2 * HashUniform(seed_, kCvrDenseBeta, j, 0) - 1));
    }
    if (conversion_) cvr_bias_ = CalibrateCvrBias();
  }

  uint32_t num_labels() const { return conversion_ ? 2 : 1; }

  uint32_t slots() const { return static_cast<uint32_t>(slot_scale_.size()); }
  // Weights of slot s are uniform on [-WeightBound(s), WeightBound(s)] (variance slot_scale^2);
  // interaction factors on [-1, 1].
  double WeightBound(uint32_t s) const { return slot_scale_[s] * std::sqrt(3.0); }
  IdParams TrueParams(uint32_t s, uint64_t id) const {
    return {WeightBound(s) * (2 * HashUniform(seed_, kIdWeight, s, id) - 1),
            2 * HashUniform(seed_, kIdInteraction, s, id) - 1};
  }

  // The slot of the click history (UINT32_MAX: none).
  uint32_t history_slot() const { return history_slot_; }

  // Draws the features and the click into *example (from `rng`) and, with conversion, the
  // conversion (from `cvr_rng`, one draw per row); returns the true probabilities.
  LabelProbabilities Sample(Rng* rng, Rng* cvr_rng, data::Example* example) const {
    example->Reset(slot_scale_.size(), num_labels());
    SampleFeatures(rng, example);
    const LabelProbabilities p = Probabilities(*example);
    example->labels[0] = rng->Uniform() < p.click ? 1.0f : 0.0f;
    if (conversion_) example->labels[1] = cvr_rng->Uniform() < p.cvr && example->labels[0] == 1.0f ? 1.0f : 0.0f;
    return p;
  }

  // The true P(click) and P(conversion | click) (0 without conversion) of an example's features.
  LabelProbabilities Probabilities(const data::Example& example) const {
    LabelProbabilities p;
    p.click = Sigmoid(Logit(example, [this](uint32_t s, uint64_t id) { return TrueParams(s, id); }));
    if (conversion_) p.cvr = Sigmoid(CvrLogit(example));
    return p;
  }

  // The logit of an example's features with each id's parameters taken from params(slot, id)
  // (TrueParams for the true logit).
  template <typename Params>
  double Logit(const data::Example& example, Params params) const {
    double logit = kBias;
    for (uint32_t s = 0; s < slot_scale_.size(); ++s) {
      if (s != history_slot_) logit += params(s, example.slots[s][0]).weight;
    }
    if (history_slot_ != UINT32_MAX) {
      const std::vector<uint64_t>& history = example.slots[history_slot_];
      const uint64_t target = example.slots[0][0] % kCategories;
      const auto same =
          std::count_if(history.begin(), history.end(), [&](uint64_t id) { return id % kCategories == target; });
      logit += kHistoryWeight * static_cast<double>(same) / static_cast<double>(history.size()) - kHistoryOffset;
    }
    for (size_t j = 0; j < dense_beta_.size(); ++j) logit += dense_beta_[j] * (example.dense[j] - 1.0 / 3);
    for (const auto& [a, b] : kInteractionPairs) {
      if (b >= slot_scale_.size()) continue;
      logit += kInteraction * params(a, example.slots[a][0]).factor * params(b, example.slots[b][0]).factor;
    }
    return logit;
  }

 private:
  // The conversion model's logit (given a click).
  double CvrLogit(const data::Example& example) const { return cvr_bias_ + CvrTerms(example); }

  static double Sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

  // The ids and dense values of an example whose labels are already reset.
  void SampleFeatures(Rng* rng, data::Example* example) const {
    for (uint32_t s = 0; s < slot_scale_.size(); ++s) {
      if (s != history_slot_) example->slots[s].push_back(s * vocab_size_ + zipf_.Sample(rng->Uniform()) - 1);
    }
    if (history_slot_ != UINT32_MAX) SampleHistory(rng, example);
    for (size_t j = 0; j < dense_beta_.size(); ++j) {
      const double u = rng->Uniform();
      // Rounded to 5 decimals for short lines; the value written is the value modelled.
      example->dense.push_back(static_cast<float>(std::round(u * u * 1e5) / 1e5));
    }
  }

  // The bias that makes P(conversion | click) average kCvrTarget over the clicks: the
  // P(click)-weighted mean of sigmoid(bias + terms) over calibration rows, increasing in
  // the bias, solved by bisection.
  double CalibrateCvrBias() const {
    Rng rng(MixKey(seed_ ^ (uint64_t{kCvrCalibration} << 56)));
    data::Example example;
    std::vector<std::pair<double, double>> rows;  // (P(click), the cvr logit's terms)
    for (uint32_t r = 0; r < kCvrCalibrationRows; ++r) {
      example.Reset(slot_scale_.size(), num_labels());
      SampleFeatures(&rng, &example);
      rows.emplace_back(Sigmoid(Logit(example, [this](uint32_t s, uint64_t id) { return TrueParams(s, id); })),
                        CvrTerms(example));
    }
    double low = -30, high = 30;
    for (int i = 0; i < 64; ++i) {
      const double bias = (low + high) / 2;
      double converted = 0, clicked = 0;
      for (const auto& [click, terms] : rows) {
        converted += click * Sigmoid(bias + terms);
        clicked += click;
      }
      (converted < kCvrTarget * clicked ? low : high) = bias;
    }
    return (low + high) / 2;
  }

  // The conversion model's logit without its bias.
  double CvrTerms(const data::Example& example) const {
    double logit = 0;
    for (uint32_t s = 0; s < slot_scale_.size(); ++s) {
      if (s == history_slot_) continue;
      const uint64_t id = example.slots[s][0];
      const double own = WeightBound(s) * (2 * HashUniform(seed_, kCvrIdWeight, s, id) - 1);
      logit += kCvrShared * TrueParams(s, id).weight + kCvrOwn * own;
    }
    for (size_t j = 0; j < cvr_dense_beta_.size(); ++j) logit += cvr_dense_beta_[j] * (example.dense[j] - 1.0 / 3);
    return logit;
  }

  // A slot-0 item of `category`: a Zipf rank moved to the nearest id of that category.
  uint64_t ItemOf(uint64_t category, double u) const {
    const uint64_t id = zipf_.Sample(u) - 1;
    const uint64_t moved = id - id % kCategories + category;
    return moved < vocab_size_ ? moved : category;
  }

  // The history items (slot-0 ids) and, for half of the examples, a target of the user's interest.
  void SampleHistory(Rng* rng, data::Example* example) const {
    const auto interest = static_cast<uint64_t>(rng->Uniform() * kCategories);
    const auto n = 1 + static_cast<uint32_t>(rng->Uniform() * history_len_);
    std::vector<uint64_t>& history = example->slots[history_slot_];
    for (uint32_t i = 0; i < n; ++i) {
      const bool focused = rng->Uniform() < kHistoryFocus;
      history.push_back(focused ? ItemOf(interest, rng->Uniform()) : zipf_.Sample(rng->Uniform()) - 1);
    }
    if (rng->Uniform() < 0.5) example->slots[0][0] = ItemOf(interest, rng->Uniform());
  }

  const uint64_t seed_;
  const uint64_t vocab_size_;
  const ZipfSampler zipf_;
  const uint32_t history_len_;
  const uint32_t history_slot_;
  const bool conversion_;
  std::vector<double> slot_scale_;
  std::vector<double> dense_beta_;
  std::vector<double> cvr_dense_beta_;
  double cvr_bias_ = 0;  // the conversion logit's bias (CalibrateCvrBias)
};

// The estimation limit: each id's weight and interaction factor replaced by its posterior
// mean given the training rows and every other parameter at its true value (uniform prior,
// the model's own). A learner must estimate all parameters at once, so this oracle, which
// is told all but one at a time, is an optimistic estimate of what a learner can reach.
// Posteriors live on a grid of kGrid midpoints over the prior's support: 8 * kGrid bytes
// per distinct id (twice that in the interaction slots).
class EstimationOracle {
 public:
  static constexpr int kGrid = 64;

  explicit EstimationOracle(const SyntheticCtrModel& model) : model_(model), partner_(model.slots(), -1) {
    for (const auto& [a, b] : kInteractionPairs) {
      if (b >= model.slots()) continue;
      partner_[a] = static_cast<int>(b);
      partner_[b] = static_cast<int>(a);
    }
  }

  // Adds a training row's log-likelihood to the grid of each of its ids.
  void Observe(const data::Example& example) {
    const auto truth = [this](uint32_t s, uint64_t id) { return model_.TrueParams(s, id); };
    const double logit = model_.Logit(example, truth);
    const bool clicked = example.labels[0] > 0.5f;
    for (uint32_t s = 0; s < model_.slots(); ++s) {
      if (s == model_.history_slot()) continue;  // no per-id weights: its term is exact
      const uint64_t id = example.slots[s][0];
      const IdParams own = model_.TrueParams(s, id);
      Grids& grids = grids_[id];
      if (grids.weight.empty()) grids.weight.assign(kGrid, 0.0);
      AddLogLikelihood(logit - own.weight, 1.0, model_.WeightBound(s), clicked, &grids.weight);
      if (partner_[s] < 0) continue;
      const auto b = static_cast<uint32_t>(partner_[s]);
      const double partner_factor = model_.TrueParams(b, example.slots[b][0]).factor;
      if (grids.factor.empty()) grids.factor.assign(kGrid, 0.0);
      AddLogLikelihood(logit - kInteraction * own.factor * partner_factor, kInteraction * partner_factor, 1.0, clicked,
                       &grids.factor);
    }
  }

  // The posterior means; an id never observed keeps its prior mean, 0.
  IdParams Estimate(uint32_t s, uint64_t id) const {
    const auto it = grids_.find(id);
    if (it == grids_.end()) return {};
    return {PosteriorMean(it->second.weight, model_.WeightBound(s)), PosteriorMean(it->second.factor, 1.0)};
  }

  // The value of grid point g on [-bound, bound].
  static double GridValue(int g, double bound) { return bound * ((2 * g + 1.0) / kGrid - 1); }

  // Posterior mean under a uniform prior on [-bound, bound] from the log-likelihoods at the
  // grid points (0 for an empty grid).
  static double PosteriorMean(const std::vector<double>& log_likelihood, double bound) {
    if (log_likelihood.empty()) return 0;
    const double top = *std::max_element(log_likelihood.begin(), log_likelihood.end());
    double mass = 0, mean = 0;
    for (int g = 0; g < kGrid; ++g) {
      const double p = std::exp(log_likelihood[g] - top);
      mass += p;
      mean += p * GridValue(g, bound);
    }
    return mean / mass;
  }

  // log P(label | logit = offset + slope * v) at every grid value v on [-bound, bound].
  static void AddLogLikelihood(double offset, double slope, double bound, bool clicked, std::vector<double>* grid) {
    for (int g = 0; g < kGrid; ++g) {
      const double z = offset + slope * GridValue(g, bound);
      // log sigmoid(z) = -softplus(-z), log(1 - sigmoid(z)) = -softplus(z)
      const double x = clicked ? -z : z;
      (*grid)[g] -= std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
    }
  }

 private:
  struct Grids {
    std::vector<double> weight;  // log-likelihood at each grid point of the id's weight
    std::vector<double> factor;  // the same for its interaction factor (interaction slots)
  };
  const SyntheticCtrModel& model_;
  std::vector<int> partner_;  // the slot each slot interacts with, -1 for none
  std::unordered_map<uint64_t, Grids> grids_;
};

// Buffers lines and writes them in large chunks.
class LineWriter {
 public:
  explicit LineWriter(std::string path) : path_(std::move(path)), out_(path_, std::ios::binary) {}

  const std::string& path() const { return path_; }
  bool opened() const { return out_.is_open(); }

  void Append(const std::string& line) {
    buffer_ += line;
    buffer_ += '\n';
    if (buffer_.size() >= kFlushBytes) Flush();
  }

  Status Close() {
    Flush();
    out_.close();
    return out_ ? Status::OK() : Status::IOError(path_ + ": write failed");
  }

 private:
  static constexpr size_t kFlushBytes = 1 << 20;

  void Flush() {
    out_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    buffer_.clear();
  }

  std::string path_;
  std::ofstream out_;
  std::string buffer_;
};

// The `data:` section describing the generated files' shape (no paths).
YAML::Node DataSection(const DatagenOptions& options) {
  YAML::Node section;
  section["data_format"] = std::string(config::DataFormatName(options.format));
  if (options.conversion) {
    const bool slot_dnn = options.format == config::DataFormat::kSlotDnn;
    section["label_slots"] = std::vector<std::string>{slot_dnn ? "1" : "click", kConversionSlot};
  }
  if (options.format == config::DataFormat::kSlotDnn) {
    section["slot_num"] = options.sparse_slots;
  } else {
    section["sparse_inputs_slots"] = options.sparse_slots + 1;  // PaddleRec counts the label slot too
  }
  section["dense_input_dim"] = options.dense_dim;
  return section;
}

Status Validate(const DatagenOptions& o) {
  auto fail = [](const std::string& what) { return Status::InvalidArgument("datagen: " + what); };
  if (o.rows < 1) return fail("rows must be >= 1");
  if (!(o.test_fraction >= 0 && o.test_fraction < 1)) return fail("test fraction must be in [0, 1)");
  if (o.train_files < 1) return fail("train files must be >= 1");
  if (o.sparse_slots < 1) return fail("sparse slots must be >= 1");
  if (o.history_len > 0 && o.sparse_slots < 2) {
    return fail("a click history (history_len > 0) needs >= 2 slots: slot 0 the target item, the last the history");
  }
  if (o.history_len > 0 && o.vocab_size < kCategories) {
    return fail("a click history needs a vocabulary of >= " + std::to_string(kCategories) + " ids (the categories)");
  }
  if (o.vocab_size < 1) return fail("vocabulary size must be >= 1");
  if (!(o.zipf_exponent >= 0)) return fail("zipf exponent must be >= 0");
  if (o.format == config::DataFormat::kSlotDnn && o.dense_dim > 0) {
    return fail("slot_dnn has no dense features: dense dim must be 0");
  }
  if (o.format == config::DataFormat::kCriteo) {
    return fail(
        "criteo lines hold raw values that the reader hashes and scales: generate rank_dnn, multislot or "
        "slot_dnn");
  }
  if (o.out_dir.empty()) return fail("output directory is empty");
  return Status::OK();
}

std::string PartName(uint32_t i) {
  std::string digits = std::to_string(i);
  return "part-" + std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits;
}

Status WriteConfig(const DatagenOptions& options, bool has_test, const std::string& path) {
  YAML::Node root;
  root["data"] = DataSection(options);
  root["data"]["train_data_dir"] = "train";
  if (has_test) root["data"]["test_data_dir"] = "test";
  std::ofstream out(path);
  out << "# Written by fleetps-datagen (seed " << options.seed << "); paths are relative to this file.\n"
      << YAML::Dump(root) << "\n";
  out.close();
  return out ? Status::OK() : Status::IOError(path + ": write failed");
}

// The split of the rows into train and test, and the paths of their files and of the
// data YAML under options.out_dir.
void PlanOutputFiles(const DatagenOptions& options, DatagenReport* report) {
  report->test_rows = static_cast<uint64_t>(std::llround(static_cast<double>(options.rows) * options.test_fraction));
  report->train_rows = options.rows - report->test_rows;
  const fs::path out_dir(options.out_dir);
  for (uint32_t i = 0; i < options.train_files; ++i) {
    report->train_files.push_back((out_dir / "train" / PartName(i)).string());
  }
  if (report->test_rows > 0) report->test_files.push_back((out_dir / "test" / PartName(0)).string());
  report->config_file = (out_dir / "data.yaml").string();
}

// Creates the data file `path` (and its directory), appended to `writers`.
Status OpenDataFile(const std::string& path, std::vector<std::unique_ptr<LineWriter>>* writers) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  writers->push_back(std::make_unique<LineWriter>(path));
  if (ec || !writers->back()->opened()) return Status::IOError(path + ": cannot create data file");
  return Status::OK();
}

// What the report's AUCs are computed from, gathered row by row.
struct RowScores {
  std::vector<double> probabilities;  // of every row, by the true model
  std::vector<float> labels;          // of every row
  std::vector<double> test_probabilities;
  std::vector<float> test_labels;
  std::vector<std::vector<double>> limited;  // per kDataLimitThresholds entry: the test rows' logits
  std::vector<double> estimated;             // the oracle's logits of the test rows
  // With conversion: P(click) * P(conversion | click) and the conversion label of every row
  // and of the test rows, and P(conversion | click) and the label of the clicked rows.
  std::vector<double> conversion_probabilities;
  std::vector<float> conversion_labels;
  std::vector<double> test_conversion_probabilities;
  std::vector<float> test_conversion_labels;
  std::vector<double> clicked_cvr;
  std::vector<float> clicked_conversion_labels;

  // Adds a row's conversion scores.
  void AddConversion(const LabelProbabilities& p, const data::Example& example, bool test) {
    conversion_probabilities.push_back(p.click * p.cvr);
    conversion_labels.push_back(example.labels[1]);
    if (test) {
      test_conversion_probabilities.push_back(p.click * p.cvr);
      test_conversion_labels.push_back(example.labels[1]);
    }
    if (example.labels[0] == 1.0f) {
      clicked_cvr.push_back(p.cvr);
      clicked_conversion_labels.push_back(example.labels[1]);
    }
  }
};

// The conversion numbers of `scores` into `report`.
void ReportConversion(const RowScores& scores, DatagenReport* report) {
  double conversions = 0;
  for (float label : scores.conversion_labels) conversions += label;
  report->conversion_mean = conversions / static_cast<double>(scores.conversion_labels.size());
  if (!scores.clicked_cvr.empty()) {
    report->conversion_rate = conversions / static_cast<double>(scores.clicked_cvr.size());
  }
  report->bayes_conversion_auc = ExactAuc(scores.conversion_probabilities, scores.conversion_labels).value_or(0.5);
  report->bayes_cvr_auc = ExactAuc(scores.clicked_cvr, scores.clicked_conversion_labels).value_or(0.5);
  if (!scores.test_conversion_labels.empty()) {
    report->bayes_conversion_test_auc =
        ExactAuc(scores.test_conversion_probabilities, scores.test_conversion_labels).value_or(0.5);
  }
}

// The label mean and the AUCs of `scores` into `report`.
void ReportAucs(const DatagenOptions& options, const RowScores& scores, DatagenReport* report) {
  double positives = 0;
  for (float label : scores.labels) positives += label;
  report->label_mean = positives / static_cast<double>(options.rows);
  // All-positive or all-negative data (tiny row counts) has no AUC; report 0.5, chance.
  report->bayes_auc = ExactAuc(scores.probabilities, scores.labels).value_or(0.5);
  if (!scores.test_labels.empty()) {
    report->bayes_test_auc = ExactAuc(scores.test_probabilities, scores.test_labels).value_or(0.5);
    for (size_t t = 0; t < std::size(kDataLimitThresholds); ++t) {
      report->data_limited_auc.emplace_back(kDataLimitThresholds[t],
                                            ExactAuc(scores.limited[t], scores.test_labels).value_or(0.5));
    }
    if (options.estimation_limit) {
      report->estimation_limit_auc = ExactAuc(scores.estimated, scores.test_labels).value_or(0.5);
    }
  }
  if (options.conversion) ReportConversion(scores, report);
}

}  // namespace

StatusOr<config::DataOptions> DatagenDataOptions(const DatagenOptions& options) {
  config::DataOptions data;
  RETURN_IF_ERROR(config::ParseDataOptions(DataSection(options), config::YamlContext{"<datagen>", "data"}, &data));
  return data;
}

std::vector<LabelProbabilities> TrueLabelProbabilities(const DatagenOptions& options, const data::Batch& rows) {
  const SyntheticCtrModel model(options);
  std::vector<LabelProbabilities> probabilities;
  probabilities.reserve(rows.size());
  data::Example example;
  for (size_t r = 0; r < rows.size(); ++r) {
    example.Reset(rows.num_slots(), rows.num_labels);
    example.dense.assign(rows.Dense(r).begin(), rows.Dense(r).end());
    for (size_t s = 0; s < rows.num_slots(); ++s) {
      example.slots[s].assign(rows.Ids(s, r).begin(), rows.Ids(s, r).end());
    }
    probabilities.push_back(model.Probabilities(example));
  }
  return probabilities;
}

StatusOr<DatagenReport> GenerateDataset(const DatagenOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  ASSIGN_OR_RETURN(config::DataOptions data, DatagenDataOptions(options));
  const auto format = data::MakeLineFormat(data);

  DatagenReport report;
  PlanOutputFiles(options, &report);
  std::vector<std::unique_ptr<LineWriter>> train, test;
  for (const auto& path : report.train_files) RETURN_IF_ERROR(OpenDataFile(path, &train));
  for (const auto& path : report.test_files) RETURN_IF_ERROR(OpenDataFile(path, &test));

  const SyntheticCtrModel model(options);
  // Occurrences of each id in the training rows (saturating), for the data-limited AUCs of
  // the test rows, which come after every training row.
  std::unordered_map<uint64_t, uint8_t> seen;
  seen.reserve(std::min<uint64_t>(report.train_rows * options.sparse_slots, uint64_t{1} << 24));
  RowScores scores;
  scores.limited.resize(std::size(kDataLimitThresholds));
  std::unique_ptr<EstimationOracle> oracle;
  if (options.estimation_limit) oracle = std::make_unique<EstimationOracle>(model);
  Rng rng(MixKey(options.seed ^ (uint64_t{kSamples} << 56)));
  Rng cvr_rng(MixKey(options.seed ^ (uint64_t{kCvrSamples} << 56)));
  scores.probabilities.reserve(options.rows);
  scores.labels.reserve(options.rows);
  data::Example example;
  std::string line;
  for (uint64_t r = 0; r < options.rows; ++r) {
    const LabelProbabilities p = model.Sample(&rng, &cvr_rng, &example);
    scores.probabilities.push_back(p.click);
    scores.labels.push_back(example.labels[0]);
    if (options.conversion) scores.AddConversion(p, example, r >= report.train_rows);
    if (r < report.train_rows) {
      if (oracle) oracle->Observe(example);
      for (const auto& ids : example.slots) {
        for (uint64_t id : ids) {
          uint8_t& count = seen[id];
          if (count < 255) ++count;
        }
      }
    } else {
      if (oracle) {
        scores.estimated.push_back(
            model.Logit(example, [&](uint32_t s, uint64_t id) { return oracle->Estimate(s, id); }));
      }
      scores.test_probabilities.push_back(scores.probabilities.back());
      scores.test_labels.push_back(example.labels[0]);
      for (size_t t = 0; t < std::size(kDataLimitThresholds); ++t) {
        const uint32_t k = kDataLimitThresholds[t];
        scores.limited[t].push_back(model.Logit(example, [&](uint32_t s, uint64_t id) {
          const auto it = seen.find(id);
          return it != seen.end() && it->second >= k ? model.TrueParams(s, id) : IdParams{};
        }));
      }
    }
    line.clear();
    format->Write(example, &line);
    LineWriter& writer = r < report.train_rows ? *train[r % train.size()] : *test[0];
    writer.Append(line);
  }
  for (auto& writer : train) RETURN_IF_ERROR(writer->Close());
  for (auto& writer : test) RETURN_IF_ERROR(writer->Close());
  RETURN_IF_ERROR(WriteConfig(options, report.test_rows > 0, report.config_file));
  ReportAucs(options, scores, &report);
  return report;
}

}  // namespace fleetps::datagen
