#include "heter_trainer/gpups/dense_replica.h"

#include <algorithm>
#include <string>

namespace fleetps::heter {

StatusOr<std::unique_ptr<DenseReplica>> DenseReplica::Create(const config::TrainerOptions& o,
                                                              std::vector<trainer::collective::Communicator*> comms,
                                                              std::vector<float> params) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(o.dense_table.optimizer).WithContext("dense optimizer"));
  if (comms.empty()) return Status::InvalidArgument("dense replica: no workers");
  if (params.size() != o.dense_table.dim) {
    return Status::InvalidArgument("initial dense parameters have " + std::to_string(params.size()) +
                                   " floats, the dense table " + std::to_string(o.dense_table.dim));
  }
  std::unique_ptr<DenseReplica> replica(new DenseReplica(o, std::move(params)));
  ASSIGN_OR_RETURN(auto rule, optimizer::CreateOptimizer(o.dense_table.optimizer));
  const size_t n = replica->params_.size();
  replica->state_.assign(n * rule->element_state_size(), 0.0f);
  std::vector<float> shared(rule->shared_state_size(), 0.0f);
  rule->InitSpanState(replica->state_.data(), shared.data(), n);
  // Slices a multiple of a cache line long: workers share at most the line at each boundary.
  constexpr size_t kLine = 16;
  const size_t k = comms.size();
  const size_t per = (n / k + kLine) / kLine * kLine;
  replica->members_.resize(k);
  for (size_t w = 0; w < k; ++w) {
    Member& m = replica->members_[w];
    m.comm = comms[w];
    m.lo = std::min(n, w * per);
    m.hi = std::min(n, m.lo + per);
    m.buffer.assign(n + 1, 0.0f);
    m.shared_state = shared;
  }
  return replica;
}

DenseReplica::DenseReplica(const config::TrainerOptions& options, std::vector<float> params)
    : o_(options), params_(std::move(params)) {}

uint64_t DenseReplica::steps() const { return members_.front().applied; }

void DenseReplica::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = why.WithContext("a worker of this process stopped");
  cv_.notify_all();
}

Status DenseReplica::DenseParams(uint32_t worker, std::vector<float>* params) {
  if (worker >= members_.size()) {
    return Status::InvalidArgument("dense replica: worker " + std::to_string(worker) + " of " +
                                   std::to_string(members_.size()));
  }
  const uint64_t want = members_[worker].applied * members_.size();  // every slice of its steps
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto timeout = std::chrono::milliseconds(o_.collective.timeout_ms);
    if (!cv_.wait_for(lock, timeout, [&] { return slices_applied_ >= want || !aborted_.ok(); })) {
      return Status::TimedOut("worker " + std::to_string(worker) + " waited " + std::to_string(timeout.count()) +
                              " ms for the other workers to apply their slices of step " +
                              std::to_string(members_[worker].applied) +
                              " to the dense replica (fleetps.collective.timeout_ms)");
    }
    if (slices_applied_ < want) return aborted_;
  }
  params->assign(params_.begin(), params_.end());
  return Status::OK();
}

Status DenseReplica::Push(uint32_t worker, std::span<const float> grads) {
  if (worker >= members_.size()) return DenseParams(worker, nullptr);
  if (grads.size() != params_.size()) {
    return Status::InvalidArgument("dense gradient has " + std::to_string(grads.size()) + " floats, the replica " +
                                   std::to_string(params_.size()));
  }
  Member& m = members_[worker];
  m.buffer[0] = 1.0f;  // this rank had data
  std::copy(grads.begin(), grads.end(), m.buffer.begin() + 1);
  m.has_grads = true;
  return Status::OK();
}

float DenseReplica::LearningRate(uint64_t step, uint32_t world) const {
  float lr = o_.dense_table.optimizer.learning_rate;
  if (o_.collective.lr_scaling == config::LrScaling::kLinear) lr *= static_cast<float>(world);
  if (o_.collective.warmup_steps > 0 && step < o_.collective.warmup_steps) {
    lr *= static_cast<float>(step + 1) / static_cast<float>(o_.collective.warmup_steps);
  }
  return lr;
}

StatusOr<bool> DenseReplica::EndStep(uint32_t worker, bool) {
  if (worker >= members_.size()) return DenseParams(worker, nullptr);
  Member& m = members_[worker];
  // A rank without data adds zeros and a 0 in the first slot, which counts the ranks with data.
  if (!m.has_grads) std::fill(m.buffer.begin(), m.buffer.end(), 0.0f);
  m.has_grads = false;
  RETURN_IF_ERROR(
      m.comm->AllreduceSum(m.buffer).WithContext("step " + std::to_string(m.applied + 1) + " gradient allreduce"));
  const float with_data = m.buffer[0];
  if (with_data == 0.0f) return true;  // every rank is out of data
  if (o_.collective.drop_last && with_data < static_cast<float>(m.comm->size())) return true;
  // Every worker decided as this one (the same sum): each steps its own slice.
  const float scale = 1.0f / with_data;
  float* grads = m.buffer.data() + 1;
  for (size_t i = m.lo; i < m.hi; ++i) grads[i] *= scale;
  // The rule is immutable with its rate: rebuilt only while the rate changes (warm-up).
  const float lr = LearningRate(m.applied, m.comm->size());
  if (m.optimizer == nullptr || lr != m.optimizer->options().learning_rate) {
    OptimizerOptions rule = o_.dense_table.optimizer;
    rule.learning_rate = lr;
    ASSIGN_OR_RETURN(m.optimizer, optimizer::CreateOptimizer(rule));
  }
  const size_t element = m.optimizer->element_state_size();
  m.optimizer->UpdateSpan(params_.data() + m.lo, state_.data() + m.lo * element, m.shared_state.data(),
                          grads + m.lo, m.hi - m.lo);
  ++m.applied;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++slices_applied_;
  }
  cv_.notify_all();
  return false;
}

}  // namespace fleetps::heter
