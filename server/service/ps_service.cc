#include "server/service/ps_service.h"

#include <bit>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fleetps/config.h"
#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::server {

using wire::MessageType;

// ---- PsService ------------------------------------------------------------------------

PsService::PsService(const config::ServerOptions& options, TableSet& tables, ExecutorPool& executors,
                     std::function<void(const std::string&)> on_stop)
    : options_(options),
      tables_(tables),
      executors_(executors),
      on_stop_(std::move(on_stop)),
      trainers_(std::chrono::seconds(options.trainer_lease_s)),
      shuffle_mailbox_(options.shuffle_buffer_bytes),
      checkpoints_(
          tables, executors, [this](uint32_t table_id, uint32_t shard) { return SparseLane(table_id, shard); },
          [this](uint32_t table_id) { return DenseLane(table_id); }, options.index,
          static_cast<uint32_t>(options.endpoints.size()), FLEETPS_VERSION) {
  namespace fs = std::filesystem;
  if (!options.checkpoint_root.empty()) checkpoint_roots_.push_back(fs::absolute(options.checkpoint_root).string());
  if (!options.save_dir.empty()) {
    checkpoint_roots_.push_back(fs::absolute(options.save_dir).lexically_normal().parent_path().string());
  }
}

Status PsService::MissingTable(const std::string& request, const std::string& kind, uint32_t table_id) const {
  return Status::NotFound(request + ": no " + kind + " table with id " + std::to_string(table_id) + " on " + Where() +
                          " (tables: " + tables_.Describe() + ")");
}

std::string PsService::Where() const {
  return "pserver " + std::to_string(options_.index) + " (" + options_.self().ToString() + ")";
}

size_t PsService::SparseLane(uint32_t table_id, uint32_t shard) const {
  return static_cast<size_t>(table_id) * 7 + shard;
}

size_t PsService::DenseLane(uint32_t table_id) const { return static_cast<size_t>(table_id) * 7 + 3; }

void PsService::Handle(net::Request request, net::Responder responder) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  const auto type = static_cast<MessageType>(request.type);
  // With a shared secret configured, only peers that proved they hold it may change the
  // job's state, whatever server.auth says about the data path: the admin operations,
  // barriers, parameter writes that bypass the optimizer (PushDenseParam, WriteRows), and
  // heartbeats (checked in AnswerHeartbeat, shared with the heter-trainers). Pulls, gradient
  // pushes, PullRows, metric reports, the shuffle mail, Ping and TableStats stay open to
  // the peers the RPC layer admits.
  const bool admin = type == MessageType::Stop || type == MessageType::Save || type == MessageType::Load ||
                     type == MessageType::Shrink;
  const bool job_state =
      admin || type == MessageType::Barrier || type == MessageType::PushDenseParam || type == MessageType::WriteRows;
  if (job_state && request.auth_configured && !request.authenticated) {
    spdlog::warn("{}: refused {} from unauthenticated peer {}", Where(), net::MessageTypeName(request.type),
                 responder.peer());
    if (admin) {
      return responder.SendError(
          Status::PermissionDenied(net::MessageTypeName(request.type) +
                                   " is an admin operation: the client must authenticate with the "
                                   "cluster's shared secret (FLEETPS_AUTH_SECRET_FILE)"));
    }
    return (void)net::Authorized(request, responder);
  }
  switch (type) {
    case MessageType::PullSparse: return PullSparse(request, responder);
    case MessageType::PushSparse: return PushSparse(request, responder);
    case MessageType::PullRows: return PullRows(request, responder);
    case MessageType::WriteRows: return WriteRows(request, responder);
    case MessageType::PullDense: return PullDense(request, responder);
    case MessageType::PushDense: return PushDense(request, responder, false);
    case MessageType::PushDenseParam: return PushDense(request, responder, true);
    case MessageType::Barrier: return Barrier(request, responder);
    case MessageType::Ping: return Ping(request, responder);
    case MessageType::TableStats: return TableStats(request, responder);
    case MessageType::Stop: return Stop(request, responder);
    case MessageType::Save: return Save(request, responder);
    case MessageType::Load: return Load(request, responder);
    case MessageType::Shrink: return Shrink(request, responder);
    case MessageType::MetricReport: return MetricReport(request, responder);
    case MessageType::ShuffleSend: return ShuffleSend(request, responder);
    case MessageType::ShuffleFetch: return ShuffleFetch(request, responder);
    case MessageType::Heartbeat: return Heartbeat(request, responder);
    default:
      responder.SendError(Status::InvalidArgument("unknown message type " + std::to_string(request.type) + " (" +
                                                  net::MessageTypeName(request.type) + ") from " + responder.peer() +
                                                  "; is the client a newer fleetps release?"));
  }
}

void PsService::CountSkipped(const std::string& table, uint64_t count, const char* what) {
  const uint64_t before = nonfinite_skipped_.fetch_add(count);
  // The first skip, then one line per power of two, so a diverging job is visible
  // without flooding the log.
  if (before == 0 || std::bit_width(before) != std::bit_width(before + count)) {
    spdlog::warn(
        "{}: skipped {} {} with NaN/infinite values on table '{}' ({} skipped in total; "
        "server.nonfinite_gradients: skip)",
        Where(), count, what, table, before + count);
  }
}

}  // namespace fleetps::server
