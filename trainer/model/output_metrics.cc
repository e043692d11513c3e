#include "trainer/model/output_metrics.h"

#include "common/check.h"

namespace fleetps::trainer::model {

OutputMetrics::OutputMetrics(const DenseNet& net) : num_labels_(net.num_labels()), aucs_(net.num_outputs()) {
  const fleetps::graph::Graph& g = net.graph();
  for (size_t o = 0; o < net.num_outputs(); ++o) {
    columns_.push_back(g.output_label(o));
    names_.push_back(g.spec().outputs[o].name);
    label_names_.push_back(g.row().labels[g.output_label(o)]);
  }
}

void OutputMetrics::Add(std::span<const float> predictions, std::span<const float> labels) {
  const size_t outputs = aucs_.size();
  FLEETPS_CHECK_EQ(predictions.size() % outputs, 0u);
  const size_t batch = predictions.size() / outputs;
  FLEETPS_CHECK_EQ(labels.size(), batch * num_labels_);
  if (outputs == 1 && num_labels_ == 1) {
    aucs_[0].Add(predictions, labels);
    return;
  }
  predictions_.resize(batch);
  labels_.resize(batch);
  for (size_t o = 0; o < outputs; ++o) {
    for (size_t i = 0; i < batch; ++i) {
      predictions_[i] = predictions[i * outputs + o];
      labels_[i] = labels[i * num_labels_ + columns_[o]];
    }
    aucs_[o].Add(predictions_, labels_);
  }
}

void OutputMetrics::Reset() {
  for (AucCalculator& auc : aucs_) auc.Reset();
}

std::vector<double> OutputMetrics::State() const {
  std::vector<double> state;
  for (const AucCalculator& auc : aucs_) state.insert(state.end(), auc.state().begin(), auc.state().end());
  return state;
}

void OutputMetrics::MergeState(std::span<const double> state) {
  const size_t each = aucs_[0].state_size();
  FLEETPS_CHECK_EQ(state.size(), each * aucs_.size()) << "metric states of different outputs";
  for (size_t o = 0; o < aucs_.size(); ++o) aucs_[o].MergeState(state.subspan(o * each, each));
}

}  // namespace fleetps::trainer::model
