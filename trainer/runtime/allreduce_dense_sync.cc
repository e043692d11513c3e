#include "trainer/runtime/allreduce_dense_sync.h"

#include <algorithm>
#include <array>

#include <spdlog/spdlog.h>

namespace fleetps::trainer {

StatusOr<std::unique_ptr<AllreduceDenseSync>> AllreduceDenseSync::Create(const config::TrainerOptions& o,
                                                                         PsClient& client,
                                                                         collective::Communicator& comm,
                                                                         std::chrono::milliseconds interval) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(o.dense_table.optimizer).WithContext("dense optimizer"));
  ASSIGN_OR_RETURN(auto rule, optimizer::CreateOptimizer(o.dense_table.optimizer));
  return std::unique_ptr<AllreduceDenseSync>(new AllreduceDenseSync(o, client, comm, interval, std::move(rule)));
}

AllreduceDenseSync::AllreduceDenseSync(const config::TrainerOptions& o, PsClient& client,
                                       collective::Communicator& comm, std::chrono::milliseconds interval,
                                       std::unique_ptr<optimizer::Optimizer> optimizer)
    : o_(o),
      client_(client),
      comm_(comm),
      interval_(interval),
      optimizer_(std::move(optimizer)),
      params_(o.dense_table.dim) {
  state_.assign(params_.size() * optimizer_->element_state_size(), 0.0f);
  shared_state_.assign(optimizer_->shared_state_size(), 0.0f);
  optimizer_->InitSpanState(state_.data(), shared_state_.data(), params_.size());
  grads_.assign(params_.size(), 0.0f);
  pending_.assign(params_.size(), 0.0f);
  thread_ = std::thread([this] { RoundLoop(); });
}

AllreduceDenseSync::~AllreduceDenseSync() {
  const Status st = Leave();
  if (!st.ok() && !abandoned_) spdlog::warn("heter dense allreduce at destruction: {}", st.ToString());
}

Status AllreduceDenseSync::PullSparse(uint32_t, std::span<const uint64_t> keys, float*) {
  if (keys.empty()) return Status::OK();
  return Status::InvalidArgument("the heter-trainers' dense allreduce has no sparse table");
}

Status AllreduceDenseSync::DenseParams(uint32_t worker, std::vector<float>* params) {
  ASSIGN_OR_RETURN(auto snapshot, DenseSnapshot(worker));
  *params = *snapshot;
  return Status::OK();
}

StatusOr<std::shared_ptr<const std::vector<float>>> AllreduceDenseSync::DenseSnapshot(uint32_t) {
  std::unique_lock<std::mutex> lock(mu_);
  if (snapshot_ == nullptr) {
    wanted_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return snapshot_ != nullptr || ended_; });
    if (snapshot_ == nullptr) {
      return failed_.ok() ? Status::Unavailable("the heter-trainers' dense allreduce has ended") : failed_;
    }
  }
  return snapshot_;
}

Status AllreduceDenseSync::Push(uint32_t, const StepGrads& g) {
  if (!g.keys.empty()) return Status::InvalidArgument("the heter-trainers' dense allreduce has no sparse table");
  // pending_ is read under mu_: a round swaps it with grads_, and a size read across the
  // swap could pair one vector's begin with the other's end.
  std::lock_guard<std::mutex> lock(mu_);
  if (g.dense_grads.size() != pending_.size()) {
    return Status::InvalidArgument("dense gradient has " + std::to_string(g.dense_grads.size()) +
                                   " floats, the replica " + std::to_string(pending_.size()));
  }
  RETURN_IF_ERROR(failed_);
  if (leaving_) return Status::Unavailable("heter-trainer is leaving the dense allreduce");
  if (snapshot_ == nullptr) {
    return Status::InvalidArgument("dense gradient pushed before the replicas started (take DenseSnapshot first)");
  }
  for (size_t i = 0; i < pending_.size(); ++i) pending_[i] += g.dense_grads[i];
  ++pending_count_;
  return Status::OK();
}

Status AllreduceDenseSync::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = ++flush_tickets_;
  cv_.notify_all();  // the round thread need not wait out its interval
  cv_.wait(lock, [&] { return flushed_ticket_ >= ticket || ended_; });
  if (flushed_ticket_ >= ticket) return last_flush_;
  return failed_.ok() ? Status::Unavailable("the heter-trainers' dense allreduce has ended") : failed_;
}

Status AllreduceDenseSync::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leaving_) {
      leaving_ = true;
      ++flush_tickets_;  // the last round writes the replica
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(failed_);
  return last_flush_;
}

void AllreduceDenseSync::Abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string AllreduceDenseSync::Checksum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_ == nullptr ? "none (never started)" : DenseChecksum(*snapshot_);
}

uint64_t AllreduceDenseSync::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

void AllreduceDenseSync::RoundLoop() {
  auto next = std::chrono::steady_clock::now();
  while (true) {
    next += interval_;
    {
      // A flush or leave starts the round at once: the other ranks wait for it inside the
      // allreduce, so the rounds stay in step.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next, [this] {
        return abandoned_ || leaving_ || flush_tickets_ > flushed_ticket_ || (wanted_ && snapshot_ == nullptr);
      });
      if (abandoned_) {
        failed_ = Status::Aborted("this heter-trainer left the dense allreduce without the others");
        ended_ = true;
        cv_.notify_all();
        return;
      }
    }
    next = std::max(next, std::chrono::steady_clock::now());
    bool all_left = false;
    Status st = Round(&all_left);
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok()) failed_ = st;
    if (!st.ok() || all_left) {
      ended_ = true;
      cv_.notify_all();
      return;
    }
  }
}

Status AllreduceDenseSync::Round(bool* all_left) {
  // [micro-batches, leaving, flush asked, parameters wanted]: doubles, so counts stay exact.
  std::array<double, 4> header{};
  uint64_t tickets = 0;
  bool started = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    grads_.swap(pending_);
    header = {static_cast<double>(pending_count_), leaving_ ? 1.0 : 0.0, flush_tickets_ > flushed_ticket_ ? 1.0 : 0.0,
              wanted_ ? 1.0 : 0.0};
    pending_count_ = 0;
    tickets = flush_tickets_;
    started = snapshot_ != nullptr;  // the same on every rank: the replicas start in one round
  }
  RETURN_IF_ERROR(comm_.AllreduceSum(std::span<double>(header)).WithContext("heter dense allreduce (header)"));
  if (!started && header[3] > 0) RETURN_IF_ERROR(StartReplicas());
  if (header[0] > 0) {
    RETURN_IF_ERROR(comm_.AllreduceSum(std::span<float>(grads_)).WithContext("heter dense allreduce (gradients)"));
    const float scale = static_cast<float>(1.0 / header[0]);  // the mean over every micro-batch
    for (float& g : grads_) g *= scale;
    optimizer_->UpdateSpan(params_.data(), state_.data(), shared_state_.data(), grads_.data(), params_.size());
    auto fresh = std::make_shared<const std::vector<float>>(params_);
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = std::move(fresh);
    ++steps_;
  }
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  if (header[2] > 0) {
    // Rank 0 writes when the replica changed since its last write (every rank has taken the
    // same steps), so a leave after the job's last HeterFlush need not reach the pservers.
    Status written;
    if (comm_.rank() == 0 && written_steps_ != steps_) {
      written = client_.PushDenseParam(o_.dense_table.id, params_).get().WithContext("writing the dense replica");
      if (written.ok()) written_steps_ = steps_;
    }
    Status outcome;
    RETURN_IF_ERROR(ShareOutcome(written, "write the dense replica to the pservers", &outcome));
    std::lock_guard<std::mutex> lock(mu_);
    last_flush_ = outcome;
    flushed_ticket_ = tickets;
    cv_.notify_all();
  }
  *all_left = header[1] == static_cast<double>(comm_.size());
  return Status::OK();
}

Status AllreduceDenseSync::StartReplicas() {
  Status pulled;
  if (comm_.rank() == 0) {
    pulled = client_.PullDense(o_.dense_table.id, params_).get().WithContext("pulling the dense parameters");
  }
  Status outcome;
  RETURN_IF_ERROR(ShareOutcome(pulled, "pull the dense parameters from the pservers", &outcome));
  RETURN_IF_ERROR(outcome);
  RETURN_IF_ERROR(comm_.Broadcast(params_, 0).WithContext("heter dense allreduce (broadcasting the start)"));
  auto start = std::make_shared<const std::vector<float>>(params_);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = std::move(start);
  cv_.notify_all();
  return Status::OK();
}

Status AllreduceDenseSync::ShareOutcome(const Status& mine, const std::string& what, Status* outcome) {
  std::array<double, 1> failures{mine.ok() ? 0.0 : 1.0};
  RETURN_IF_ERROR(comm_.AllreduceSum(std::span<double>(failures)).WithContext("heter dense allreduce (" + what + ")"));
  if (!mine.ok()) {
    *outcome = mine;
  } else if (failures[0] > 0) {
    *outcome = Status::Unavailable("heter-trainer 0 could not " + what + " (see its log)");
  } else {
    *outcome = Status::OK();
  }
  return Status::OK();
}

}  // namespace fleetps::trainer
