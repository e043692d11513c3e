#pragma once
// OutputMetrics: the quality metrics of every output of a DenseNet (AUC, log loss, CTRs,
// calibration), each output's predictions against its own label column — one
// AucCalculator per output. A single-output model has one, fed as before.
//
// Merging across trainers: State() is the outputs' AucCalculator states, output after
// output; states add up as AucCalculator's do (MergeState).
// Thread-safety: none; one per thread, or under the caller's lock.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "trainer/model/auc_calculator.h"
#include "trainer/model/dense_net.h"

namespace fleetps::trainer::model {

class OutputMetrics {
 public:
  explicit OutputMetrics(const DenseNet& net);

  // predictions: [batch x outputs] (DenseNet's layout); labels: [batch x labels] (the batch's).
  void Add(std::span<const float> predictions, std::span<const float> labels);
  void Reset();

  size_t size() const { return aucs_.size(); }
  const AucCalculator& output(size_t o) const { return aucs_[o]; }
  // The output's name and the name of the label it predicts.
  const std::string& name(size_t o) const { return names_[o]; }
  const std::string& label(size_t o) const { return label_names_[o]; }

  std::vector<double> State() const;
  void MergeState(std::span<const double> state);
  void Merge(const OutputMetrics& other) { MergeState(other.State()); }

 private:
  size_t num_labels_;
  std::vector<size_t> columns_;  // per output: its label's column
  std::vector<std::string> names_, label_names_;
  std::vector<AucCalculator> aucs_;
  std::vector<float> predictions_, labels_;  // one output's column of a batch
};

}  // namespace fleetps::trainer::model
