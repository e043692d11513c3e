#include "trainer/runtime/collective_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

namespace fleetps::trainer {

StatusOr<std::unique_ptr<CollectiveSync>> CollectiveSync::Create(const config::TrainerOptions& o, PsClient& client,
                                                                 collective::Communicator& comm) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(o.dense_table.optimizer).WithContext("dense optimizer"));
  std::unique_ptr<ParamSync> sparse;
  if (!o.local() && HasSparseSlots(o.model)) sparse = MakeAsyncSync(o, client, AsyncParts::kSparseOnly);
  return std::unique_ptr<CollectiveSync>(new CollectiveSync(o, client, comm, std::move(sparse)));
}

StatusOr<std::unique_ptr<CollectiveSync>> CollectiveSync::CreateDenseOnly(const config::TrainerOptions& o,
                                                                          PsClient& client,
                                                                          collective::Communicator& comm) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(o.dense_table.optimizer).WithContext("dense optimizer"));
  return std::unique_ptr<CollectiveSync>(new CollectiveSync(o, client, comm, nullptr));
}

CollectiveSync::CollectiveSync(const config::TrainerOptions& o, PsClient& client, collective::Communicator& comm,
                               std::unique_ptr<ParamSync> sparse)
    : o_(o), client_(client), comm_(comm), sparse_(std::move(sparse)) {
  comm_thread_ = std::thread([this] { CommLoop(); });
}

CollectiveSync::~CollectiveSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  comm_thread_.join();
}

void CollectiveSync::CommLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    const size_t k = queue_.front();
    queue_.pop_front();
    const bool skip = !comm_error_.ok();  // after a failure the step is lost anyway
    lock.unlock();
    Status st;
    if (!skip) {
      const auto [begin, end] = buckets_[k];
      st = comm_.AllreduceSum(std::span<float>(buffer_).subspan(begin, end - begin))
               .WithContext("step " + std::to_string(steps_ + 1) + " gradient allreduce (bucket " + std::to_string(k) +
                            ")");
    }
    lock.lock();
    if (!st.ok() && comm_error_.ok()) comm_error_ = st;
    ++reduced_;
    cv_.notify_all();
  }
}

Status CollectiveSync::SetInitialParams(std::vector<float> params) {
  if (params.size() != o_.dense_table.dim) {
    return Status::InvalidArgument("initial dense parameters have " + std::to_string(params.size()) +
                                   " floats, the dense table " + std::to_string(o_.dense_table.dim));
  }
  // The hybrid's rank 0 starts from the pservers' dense table and its optimizer state (as
  // Flush left them) when it holds parameters (a model loaded from a checkpoint) and sets its
  // draw there otherwise; the broadcast makes its choice every rank's.
  ASSIGN_OR_RETURN(PsClient::DenseState state, FreshDenseState(o_.dense_table.optimizer, params.size()));
  if (!o_.local() && comm_.rank() == 0) {
    RETURN_IF_ERROR(InitDenseParams(client_, o_.dense_table.id, "rank 0", true, &params, &state).status());
  }
  std::vector<float> packed = PackDenseState(params, state);
  RETURN_IF_ERROR(comm_.Broadcast(packed, 0).WithContext("broadcasting the initial parameters from rank 0"));
  UnpackDenseState(packed, &params, &state);
  params_ = std::move(params);
  state_ = std::move(state.element);
  shared_state_ = std::move(state.shared);
  // Buckets of fuse_grad_size_in_MB over [had data | gradient].
  buffer_.assign(params_.size() + 1, 0.0f);
  buckets_.clear();
  const size_t bucket = size_t{o_.collective.fuse_grad_size_mb} << 18;  // floats
  for (size_t begin = 0; begin < buffer_.size(); begin += bucket) {
    buckets_.emplace_back(begin, std::min(begin + bucket, buffer_.size()));
  }
  filled_.assign(buckets_.size(), 0);
  next_bucket_ = static_cast<int>(buckets_.size()) - 1;
  optimizer_.reset();
  steps_ = 0;
  return Status::OK();
}

std::string CollectiveSync::Checksum() const { return DenseChecksum(params_); }

Status CollectiveSync::PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) {
  if (keys.empty()) return Status::OK();
  if (sparse_ == nullptr) return Status::InvalidArgument("collective training without pservers has no sparse table");
  return sparse_->PullSparse(worker, keys, rows);
}

Status CollectiveSync::DenseParams(uint32_t, std::vector<float>* params) {
  if (params_.empty()) return Status::InvalidArgument("collective training: SetInitialParams was not called");
  *params = params_;
  return Status::OK();
}

void CollectiveSync::Filled(size_t begin, size_t end) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const size_t lo = std::max(begin, buckets_[k].first), hi = std::min(end, buckets_[k].second);
    if (lo < hi) filled_[k] += hi - lo;
  }
  std::lock_guard<std::mutex> lock(mu_);
  bool queued = false;
  while (next_bucket_ >= 0) {
    const auto [b, e] = buckets_[next_bucket_];
    if (filled_[next_bucket_] < e - b) break;
    queue_.push_back(static_cast<size_t>(next_bucket_--));
    queued = true;
  }
  if (queued) cv_.notify_all();
}

void CollectiveSync::GradsReady(std::span<const float> grads, size_t begin, size_t end) {
  if (!has_grads_) {  // the first range of a step with data: count this rank in
    has_grads_ = true;
    buffer_[0] = 1.0f;
    Filled(0, 1);
  }
  std::copy(grads.begin() + begin, grads.begin() + end, buffer_.begin() + 1 + begin);
  Filled(1 + begin, 1 + end);
}

Status CollectiveSync::Push(uint32_t worker, const StepGrads& g) {
  if (!g.keys.empty()) {
    if (sparse_ == nullptr) return Status::InvalidArgument("collective training without pservers has no sparse table");
    RETURN_IF_ERROR(sparse_->Push(worker, StepGrads{g.keys, g.key_grads, g.shows, g.clicks, {}}));
  }
  if (g.dense_grads.size() != params_.size()) {
    return Status::InvalidArgument("dense gradient has " + std::to_string(g.dense_grads.size()) +
                                   " floats, the replica " + std::to_string(params_.size()));
  }
  // Whatever the backward hook did not hand over yet (all of it without the hook).
  if (!has_grads_) GradsReady(g.dense_grads, 0, g.dense_grads.size());
  return Status::OK();
}

StatusOr<bool> CollectiveSync::EndStep(uint32_t, bool out_of_data) {
  // Every rank joins every step's allreduce with the same buckets: a rank without data
  // adds zeros and a 0 in the first slot, which counts the ranks that had data.
  if (!has_grads_) {  // out of data this step (nothing of it handed out yet)
    std::fill(buffer_.begin(), buffer_.end(), 0.0f);
    Filled(0, buffer_.size());
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return reduced_ == buckets_.size(); });
    comm_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reduced_ = 0;
    RETURN_IF_ERROR(comm_error_);
  }
  // Ready for the next step.
  std::fill(filled_.begin(), filled_.end(), 0);
  next_bucket_ = static_cast<int>(buckets_.size()) - 1;
  has_grads_ = false;

  const size_t n = params_.size();
  const float with_data = buffer_[0];
  if (with_data == 0.0f) return true;  // every rank is out of data
  if (o_.collective.drop_last && with_data < static_cast<float>(comm_.size())) return true;
  const float scale = 1.0f / with_data;
  float* grads = buffer_.data() + 1;
  for (size_t i = 0; i < n; ++i) grads[i] *= scale;
  // The rule is immutable with its rate: rebuilt only while the rate changes (warm-up).
  const float lr = config::DataParallelLearningRate(o_.collective, o_.dense_table.optimizer, steps_, comm_.size());
  if (optimizer_ == nullptr || lr != optimizer_->options().learning_rate) {
    OptimizerOptions opt_options = o_.dense_table.optimizer;
    opt_options.learning_rate = lr;
    ASSIGN_OR_RETURN(optimizer_, optimizer::CreateOptimizer(opt_options));
  }
  optimizer_->UpdateSpan(params_.data(), state_.data(), shared_state_.data(), grads, n);
  ++steps_;
  return false;  // some rank still had data: everyone joins the next step
}

Status CollectiveSync::Flush() {
  if (sparse_ != nullptr) RETURN_IF_ERROR(sparse_->Flush());
  // The replica and its optimizer state to the dense table, where evaluation and saving read
  // them and a restart resumes them: the hybrid's pservers once (rank 0; every rank holds the
  // same), or each rank's in-process table.
  if (o_.local() || comm_.rank() == 0) {
    const PsClient::DenseState state{state_, shared_state_};
    RETURN_IF_ERROR(client_.PushDenseParam(o_.dense_table.id, params_, &state).get().WithContext("dense replica"));
  }
  return Status::OK();
}

}  // namespace fleetps::trainer
