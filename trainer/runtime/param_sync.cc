#include "trainer/runtime/param_sync.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "common/optimizer/optimizer.h"

namespace fleetps::trainer {

using config::SyncMode;
using config::TrainerOptions;

bool AsyncPrefetchOn(const TrainerOptions& o) {
  return o.prefetch.value_or(2 * uint64_t{std::max<uint32_t>(o.worker_threads, 1)} <=
                             std::thread::hardware_concurrency());
}

StatusOr<std::unique_ptr<ParamSync>> MakeParamSync(const TrainerOptions& options, PsClient& client,
                                                   uint32_t worker_threads, PushQueueGauges queue) {
  if (options.local() || options.sync_mode == SyncMode::kSync) return MakeDirectSync(options, client, worker_threads);
  if (options.sync_mode == SyncMode::kAsync) return MakeAsyncSync(options, client, AsyncParts::kBoth, queue);
  if (options.sync_mode == SyncMode::kHeter) return MakeAsyncSync(options, client, AsyncParts::kSparseOnly, queue);
  if (options.sync_mode == SyncMode::kCollective) {
    return Status::InvalidArgument("collective mode's ParamSync is a CollectiveSync (it needs the communicator)");
  }
  return MakeGeoSync(options, client);
}

StatusOr<uint64_t> InitDenseParams(PsClient& client, uint32_t table_id, std::string_view who, bool adopt,
                                   std::vector<float>* params, PsClient::DenseState* state) {
  auto kept = client.InitDenseParam(table_id, *params);
  if (!kept.ok()) return kept.status().WithContext("the initial dense parameters");
  if (*kept == 0) return kept;
  if (*kept < params->size()) {
    spdlog::warn(
        "{}: {} of the dense table's {} floats kept the pservers' parameters, the others were initialized: "
        "the pservers were not all loaded from the same checkpoint",
        who, *kept, params->size());
  } else {
    spdlog::info(
        "{}: the pservers' dense table already holds parameters (loaded from a checkpoint, or set by an "
        "earlier {}): kept, not initialized",
        who, who);
  }
  if (adopt) {
    RETURN_IF_ERROR(client.PullDense(table_id, *params, state).get().WithContext("the pservers' dense parameters"));
    spdlog::info("{}: the dense replicas start from the pservers' dense table{}", who,
                 state != nullptr ? " and its optimizer state" : "");
  }
  return kept;
}

StatusOr<PsClient::DenseState> FreshDenseState(const OptimizerOptions& rule, size_t params) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(rule).WithContext("dense optimizer"));
  ASSIGN_OR_RETURN(auto opt, optimizer::CreateOptimizer(rule));
  PsClient::DenseState state;
  state.element.assign(params * opt->element_state_size(), 0.0f);
  state.shared.assign(opt->shared_state_size(), 0.0f);
  opt->InitSpanState(state.element.data(), state.shared.data(), params);
  return state;
}

std::vector<float> PackDenseState(std::span<const float> params, const PsClient::DenseState& state) {
  std::vector<float> packed(params.begin(), params.end());
  packed.insert(packed.end(), state.element.begin(), state.element.end());
  packed.insert(packed.end(), state.shared.begin(), state.shared.end());
  return packed;
}

void UnpackDenseState(std::span<const float> packed, std::vector<float>* params, PsClient::DenseState* state) {
  auto at = packed.begin();
  for (std::vector<float>* v : {params, &state->element, &state->shared}) {
    std::copy_n(at, v->size(), v->begin());
    at += static_cast<std::ptrdiff_t>(v->size());
  }
}

std::string DenseChecksum(std::span<const float> params) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const uint8_t*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

StatusOr<std::shared_ptr<const std::vector<float>>> ParamSync::DenseSnapshot(uint32_t worker) {
  auto params = std::make_shared<std::vector<float>>();
  RETURN_IF_ERROR(DenseParams(worker, params.get()));
  return std::shared_ptr<const std::vector<float>>(std::move(params));
}

}  // namespace fleetps::trainer
