#include "trainer/runtime/collective_sync.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace fleetps::trainer {

StatusOr<std::unique_ptr<CollectiveSync>> CollectiveSync::Create(const config::TrainerOptions& o, PsClient& client,
                                                                 collective::Communicator& comm) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(o.dense_table.optimizer).WithContext("dense optimizer"));
  std::unique_ptr<ParamSync> sparse;
  if (!o.local() && o.model.type == ModelType::kCtrDnn) sparse = MakeSparseAsyncSync(o, client);
  return std::unique_ptr<CollectiveSync>(new CollectiveSync(o, client, comm, std::move(sparse)));
}

CollectiveSync::CollectiveSync(const config::TrainerOptions& o, PsClient& client, collective::Communicator& comm,
                               std::unique_ptr<ParamSync> sparse)
    : o_(o), client_(client), comm_(comm), sparse_(std::move(sparse)) {}

Status CollectiveSync::SetInitialParams(std::vector<float> params) {
  if (params.size() != o_.dense_table.dim) {
    return Status::InvalidArgument("initial dense parameters have " + std::to_string(params.size()) +
                                   " floats, the dense table " + std::to_string(o_.dense_table.dim));
  }
  RETURN_IF_ERROR(comm_.Broadcast(params, 0).WithContext("broadcasting the initial parameters from rank 0"));
  params_ = std::move(params);
  ASSIGN_OR_RETURN(auto opt, optimizer::CreateOptimizer(o_.dense_table.optimizer));
  state_.assign(params_.size() * opt->element_state_size(), 0.0f);
  shared_state_.assign(opt->shared_state_size(), 0.0f);
  opt->InitSpanState(state_.data(), shared_state_.data(), params_.size());
  steps_ = 0;
  return Status::OK();
}

std::string CollectiveSync::Checksum() const {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const uint8_t*>(params_.data());
  for (size_t i = 0; i < params_.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

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

Status CollectiveSync::Push(uint32_t worker, const StepGrads& g) {
  if (!g.keys.empty()) {
    if (sparse_ == nullptr) return Status::InvalidArgument("collective training without pservers has no sparse table");
    RETURN_IF_ERROR(sparse_->Push(worker, StepGrads{g.keys, g.key_grads, g.shows, g.clicks, {}}));
  }
  if (g.dense_grads.size() != params_.size()) {
    return Status::InvalidArgument("dense gradient has " + std::to_string(g.dense_grads.size()) +
                                   " floats, the replica " + std::to_string(params_.size()));
  }
  grads_.assign(g.dense_grads.begin(), g.dense_grads.end());
  has_grads_ = true;
  return Status::OK();
}

float CollectiveSync::LearningRate() const {
  float lr = o_.dense_table.optimizer.learning_rate;
  if (o_.collective.lr_scaling == config::LrScaling::kLinear) lr *= static_cast<float>(comm_.size());
  if (o_.collective.warmup_steps > 0 && steps_ < o_.collective.warmup_steps) {
    lr *= static_cast<float>(steps_ + 1) / static_cast<float>(o_.collective.warmup_steps);
  }
  return lr;
}

StatusOr<bool> CollectiveSync::EndStep(uint32_t, bool out_of_data) {
  // Every rank joins every step's allreduce with the same element count: a rank without
  // data adds zeros and a 0 in the last slot, which counts the ranks that had data.
  const size_t n = params_.size();
  if (!has_grads_ || out_of_data) grads_.assign(n, 0.0f);
  grads_.resize(n + 1);
  grads_[n] = has_grads_ && !out_of_data ? 1.0f : 0.0f;
  has_grads_ = false;
  const size_t bucket = size_t{o_.collective.fuse_grad_size_mb} << 18;  // floats per bucket
  for (size_t begin = 0; begin < grads_.size(); begin += bucket) {
    const size_t count = std::min(bucket, grads_.size() - begin);
    RETURN_IF_ERROR(comm_.AllreduceSum(std::span<float>(grads_).subspan(begin, count))
                        .WithContext("step " + std::to_string(steps_ + 1) + " gradient allreduce"));
  }
  const float with_data = grads_[n];
  if (with_data == 0.0f) return true;  // every rank is out of data
  if (o_.collective.drop_last && with_data < static_cast<float>(comm_.size())) return true;
  const float scale = 1.0f / with_data;
  for (size_t i = 0; i < n; ++i) grads_[i] *= scale;
  OptimizerOptions opt_options = o_.dense_table.optimizer;
  opt_options.learning_rate = LearningRate();
  ASSIGN_OR_RETURN(auto opt, optimizer::CreateOptimizer(opt_options));
  opt->UpdateSpan(params_.data(), state_.data(), shared_state_.data(), grads_.data(), n);
  ++steps_;
  return false;  // some rank still had data: everyone joins the next step
}

Status CollectiveSync::Flush() {
  if (sparse_ != nullptr) RETURN_IF_ERROR(sparse_->Flush());
  // The replica to the dense table, where evaluation and saving read it: the hybrid's
  // pservers once (rank 0; every rank holds the same), or each rank's in-process table.
  if (o_.local() || comm_.rank() == 0) {
    RETURN_IF_ERROR(client_.PushDenseParam(o_.dense_table.id, params_).get().WithContext("dense replica"));
  }
  return Status::OK();
}

}  // namespace fleetps::trainer
