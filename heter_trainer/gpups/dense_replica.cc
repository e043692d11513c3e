#include "heter_trainer/gpups/dense_replica.h"

#include <algorithm>
#include <latch>
#include <string>
#include <thread>

#include "trainer/runtime/param_sync.h"

namespace fleetps::heter {

StatusOr<std::unique_ptr<DenseReplica>> DenseReplica::Create(const config::TrainerOptions& o,
                                                             std::vector<trainer::collective::Communicator*> comms,
                                                             std::vector<float> params,
                                                             trainer::PsClient::DenseState state,
                                                             size_t apply_threads) {
  if (comms.empty()) return Status::InvalidArgument("dense replica: no workers");
  if (params.size() != o.dense_table.dim) {
    return Status::InvalidArgument("initial dense parameters have " + std::to_string(params.size()) +
                                   " floats, the dense table " + std::to_string(o.dense_table.dim));
  }
  ASSIGN_OR_RETURN(auto fresh, trainer::FreshDenseState(o.dense_table.optimizer, params.size()));
  if (state.element.size() != fresh.element.size() || state.shared.size() != fresh.shared.size()) {
    if (!state.element.empty() || !state.shared.empty()) {
      return Status::InvalidArgument("dense replica: optimizer state of " + std::to_string(state.element.size()) +
                                     " + " + std::to_string(state.shared.size()) + " floats, the dense optimizer's " +
                                     std::to_string(fresh.element.size()) + " + " +
                                     std::to_string(fresh.shared.size()));
    }
    state = std::move(fresh);  // none given: a fresh one
  }
  std::unique_ptr<DenseReplica> replica(new DenseReplica(o, std::move(params)));
  const size_t n = replica->params_.size();
  replica->state_ = std::move(state.element);
  const std::vector<float>& shared = state.shared;
  // Slices and parts a multiple of a cache line long: threads share at most the line at each
  // boundary.
  constexpr size_t kLine = 16;
  auto lines = [](size_t floats) { return (floats + kLine - 1) / kLine * kLine; };
  const size_t k = comms.size();
  const size_t per = lines(n / k + 1);
  // Helpers when the workers are fewer than the apply threads.
  const size_t threads = std::max<size_t>(apply_threads, 1);
  const size_t parts = std::clamp<size_t>(std::min((threads + k - 1) / k, per / kMinPart), 1, threads);
  replica->members_.resize(k);
  for (size_t w = 0; w < k; ++w) {
    Member& m = replica->members_[w];
    m.comm = comms[w];
    const size_t lo = std::min(n, w * per), hi = std::min(n, lo + per);
    const size_t part = lines((hi - lo) / parts + 1);
    for (size_t b = lo; b < hi || m.parts.empty(); b += part)
      m.parts.push_back({b, std::min(hi, b + part), shared, {}});
    m.buffer.assign(n + 1, 0.0f);
  }
  if (parts > 1) replica->helpers_ = std::make_unique<ExecutorPool>(std::min(k * (parts - 1), threads - 1));
  return replica;
}

trainer::PsClient::DenseState DenseReplica::state() const {
  // Every part steps its copy of the shared state once per step: any part's is the replica's.
  return {state_, members_.front().parts.front().shared_state};
}

size_t DenseReplica::DefaultApplyThreads() { return std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 4); }

DenseReplica::DenseReplica(const config::TrainerOptions& options, std::vector<float> params)
    : o_(options), params_(std::move(params)) {}

uint64_t DenseReplica::steps() const { return members_.front().applied; }

void DenseReplica::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = why.WithContext("a worker of this process stopped");
  cv_.notify_all();
}

Status DenseReplica::DenseParams(uint32_t worker, std::vector<float>* params) {
  ASSIGN_OR_RETURN(auto view, DenseParamsView(worker));
  params->assign(view.begin(), view.end());
  return Status::OK();
}

Status DenseReplica::CheckWorker(uint32_t worker) const {
  if (worker < members_.size()) return Status::OK();
  return Status::InvalidArgument("dense replica: worker " + std::to_string(worker) + " of " +
                                 std::to_string(members_.size()));
}

StatusOr<std::span<const float>> DenseReplica::DenseParamsView(uint32_t worker) {
  RETURN_IF_ERROR(CheckWorker(worker));
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
  return std::span<const float>(params_);
}

Status DenseReplica::Push(uint32_t worker, std::span<const float> grads) {
  RETURN_IF_ERROR(CheckWorker(worker));
  if (grads.size() != params_.size()) {
    return Status::InvalidArgument("dense gradient has " + std::to_string(grads.size()) + " floats, the replica " +
                                   std::to_string(params_.size()));
  }
  Member& m = members_[worker];
  m.buffer[0] = 1.0f;  // this rank had data
  if (grads.data() != m.buffer.data() + 1) std::copy(grads.begin(), grads.end(), m.buffer.begin() + 1);
  m.has_grads = true;
  return Status::OK();
}

std::span<float> DenseReplica::GradsBuffer(uint32_t worker) {
  if (worker >= members_.size()) return {};
  return std::span<float>(members_[worker].buffer).subspan(1);
}

StatusOr<bool> DenseReplica::EndStep(uint32_t worker, bool) {
  RETURN_IF_ERROR(CheckWorker(worker));
  Member& m = members_[worker];
  // A rank without data adds zeros and a 0 in the first slot, which counts the ranks with data.
  if (!m.has_grads) std::fill(m.buffer.begin(), m.buffer.end(), 0.0f);
  m.has_grads = false;
  // The sum read where the local group left it: each worker reads only its slice.
  auto sum = m.comm->AllreduceSumView(m.buffer);
  if (!sum.ok()) return sum.status().WithContext("step " + std::to_string(m.applied + 1) + " gradient allreduce");
  const float with_data = (*sum)[0];
  if (with_data == 0.0f) return true;  // every rank is out of data
  if (o_.collective.drop_last && with_data < static_cast<float>(m.comm->size())) return true;
  // Every worker decided as this one (the same sum): each steps its own slice, its parts
  // beyond the first on the helpers meanwhile.
  // The rule is immutable with its rate: rebuilt only while the rate changes (warm-up).
  const float lr = config::DataParallelLearningRate(o_.collective, o_.dense_table.optimizer, m.applied, m.comm->size());
  if (m.optimizer == nullptr || lr != m.optimizer->options().learning_rate) {
    OptimizerOptions rule = o_.dense_table.optimizer;
    rule.learning_rate = lr;
    ASSIGN_OR_RETURN(m.optimizer, optimizer::CreateOptimizer(rule));
  }
  const float scale = 1.0f / with_data;
  const float* grads = sum->data() + 1;
  auto step = [&, element = m.optimizer->element_state_size()](Part& p) {
    p.grads.resize(p.hi - p.lo);
    for (size_t i = p.lo; i < p.hi; ++i) p.grads[i - p.lo] = grads[i] * scale;
    m.optimizer->UpdateSpan(params_.data() + p.lo, state_.data() + p.lo * element, p.shared_state.data(),
                            p.grads.data(), p.hi - p.lo);
  };
  std::latch helped(static_cast<ptrdiff_t>(m.parts.size() - 1));
  for (size_t i = 1; i < m.parts.size(); ++i) {
    helpers_->Post(worker * m.parts.size() + i, [&, i] {
      step(m.parts[i]);
      helped.count_down();
    });
  }
  step(m.parts[0]);
  helped.wait();
  ++m.applied;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++slices_applied_;
  }
  cv_.notify_all();
  return false;
}

}  // namespace fleetps::heter
