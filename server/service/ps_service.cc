#include "server/service/ps_service.h"

#include <algorithm>
#include <filesystem>
#include <bit>
#include <cmath>
#include <mutex>
#include <span>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/net/frame.h"
#include "common/sharding.h"
#include "fleetps/config.h"
#include "schemas/ps_generated.h"
#include "server/checkpoint/checkpoint_dir.h"

namespace fleetps::server {

using wire::MessageType;

// ---- helpers --------------------------------------------------------------------------

namespace {

// Verifies the payload as a T; on failure answers the request and returns null.
template <typename T>
const T* Verified(const net::Request& req, const net::Responder& responder) {
  flatbuffers::Verifier verifier(req.data(), req.payload_size);
  if (req.payload_size == 0 || !verifier.VerifyBuffer<T>(nullptr)) {
    responder.SendError(Status::InvalidArgument(
        "malformed " + net::MessageTypeName(req.type) + " request from " + responder.peer() + " (" +
        std::to_string(req.payload_size) + " payload bytes failed FlatBuffers verification)"));
    return nullptr;
  }
  return flatbuffers::GetRoot<T>(req.data());
}

template <typename T>
std::span<const T> Span(const flatbuffers::Vector<T>* v) {
  if (v == nullptr) return {};
  return {v->data(), v->size()};
}

// Keeps a request's payload alive while its shard tasks run, counts them down, and
// remembers the first error.
struct Fanout {
  net::Request request;
  net::Responder responder;
  std::atomic<uint32_t> remaining{0};
  std::mutex mu;  // guards error
  Status error;

  Fanout(net::Request r, net::Responder p) : request(std::move(r)), responder(std::move(p)) {}
  void Fail(const Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = st;
  }
  // True for the task that finished last.
  bool Done() { return remaining.fetch_sub(1) == 1; }
};

// Counting sort of key positions by shard: idx[begin[s] .. begin[s+1]) are the request
// positions of the keys owned by shard s.
struct ShardPartition {
  std::vector<uint32_t> begin;
  std::vector<uint32_t> idx;

  // Shards with at least one key: the number of tasks a request fans out to.
  uint32_t NonEmptyShards() const {
    uint32_t n = 0;
    for (size_t s = 0; s + 1 < begin.size(); ++s) n += begin[s + 1] > begin[s];
    return n;
  }
};

}  // namespace

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

StatusOr<std::string> PsService::RequestPath(const std::string& op, const std::string& requested) const {
  namespace fs = std::filesystem;
  Status first;
  for (const std::string& root : checkpoint_roots_) {
    std::string candidate = requested;
    if (fs::path(requested).is_absolute()) {
      const fs::path rel = fs::path(requested).lexically_normal().lexically_relative(fs::path(root).lexically_normal());
      if (rel.empty() || *rel.begin() == "..") {
        if (first.ok()) first = Status::InvalidArgument("'" + requested + "' is not inside " + root);
        continue;
      }
      candidate = rel.string();
    }
    auto confined = ConfineCheckpointPath(root, candidate);
    if (confined.ok()) return confined;
    if (first.ok()) first = confined.status();
  }
  if (checkpoint_roots_.empty()) return ConfineCheckpointPath("", requested).status().WithContext(op);
  std::string roots;
  for (const auto& r : checkpoint_roots_) roots += (roots.empty() ? "" : ", ") + r;
  return Status::PermissionDenied(op + " on " + Where() + ": " + first.message() + " (checkpoint roots: " + roots +
                                  "; name a directory below one, or set server.checkpoint_root)");
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
  const auto type = static_cast<MessageType>(request.type);
  const bool admin = type == MessageType::Stop || type == MessageType::Save || type == MessageType::Load ||
                     type == MessageType::Shrink;
  // With a shared secret configured, only peers that proved they hold it may run admin
  // operations (whatever server.auth says about the data path).
  if (admin && !options_.auth_secret_file.empty() && !request.authenticated) {
    spdlog::warn("{}: refused {} from unauthenticated peer {}", Where(), net::MessageTypeName(request.type),
                 responder.peer());
    return responder.SendError(Status::PermissionDenied(
        net::MessageTypeName(request.type) + " is an admin operation: the client must authenticate with the "
        "cluster's shared secret (FLEETPS_AUTH_SECRET_FILE)"));
  }
  switch (type) {
    case MessageType::PullSparse: return PullSparse(request, responder);
    case MessageType::PushSparse: return PushSparse(request, responder);
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
                                                  net::MessageTypeName(request.type) + ") from " +
                                                  responder.peer() + "; is the client a newer fleetps release?"));
  }
}

namespace {

// Checks ownership and partitions positions by shard. Returns an error naming the
// first key that belongs elsewhere.
// Positions with skip[i] != 0 (when skip is not empty) are left out.
Status PartitionKeys(const SparseTable& table, std::span<const uint64_t> keys, uint32_t server_index,
                     uint32_t num_servers, ShardPartition* out, const std::vector<uint8_t>& skip = {}) {
  const uint32_t shards = table.num_shards();
  std::vector<uint32_t> shard_of(keys.size());
  out->begin.assign(shards + 1, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const KeyPlacement p = PlaceKey(keys[i], num_servers, shards);
    if (p.server != server_index) {
      return Status::InvalidArgument("table '" + table.options().name + "': key " + std::to_string(keys[i]) +
                                     " (position " + std::to_string(i) + ") belongs to pserver " +
                                     std::to_string(p.server) + ", not " + std::to_string(server_index) +
                                     " (do the trainer and the pservers use the same pserver list?)");
    }
    shard_of[i] = p.shard;
    if (skip.empty() || !skip[i]) ++out->begin[p.shard + 1];
  }
  for (uint32_t s = 0; s < shards; ++s) out->begin[s + 1] += out->begin[s];
  out->idx.resize(out->begin[shards]);
  std::vector<uint32_t> cursor(out->begin.begin(), out->begin.end() - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (skip.empty() || !skip[i]) out->idx[cursor[shard_of[i]]++] = static_cast<uint32_t>(i);
  }
  return Status::OK();
}

bool Finite(std::span<const float> v, size_t* first_bad) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      *first_bad = i;
      return false;
    }
  }
  return true;
}

// The positions of keys whose gradient row, show or click is not finite; empty when all are.
std::vector<uint8_t> NonFiniteKeys(size_t keys, uint32_t dim, std::span<const float> grads,
                                   std::span<const float> shows, std::span<const float> clicks) {
  std::vector<uint8_t> bad;
  size_t first = 0;
  if (Finite(grads, &first) && Finite(shows, &first) && Finite(clicks, &first)) return bad;
  bad.assign(keys, 0);
  for (size_t k = 0; k < keys; ++k) {
    size_t unused = 0;
    bad[k] = !Finite(grads.subspan(k * dim, dim), &unused) || (!shows.empty() && !std::isfinite(shows[k])) ||
             (!clicks.empty() && !std::isfinite(clicks[k]));
  }
  return bad;
}

}  // namespace

void PsService::PullSparse(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::PullSparseRequest>(req, responder);
  if (msg == nullptr) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PullSparse", "sparse", msg->table_id()));
  }
  auto keys = Span(msg->keys());
  if (keys.empty()) {
    return responder.SendError(
        Status::InvalidArgument("PullSparse on table '" + table->options().name + "': empty key list"));
  }
  const uint32_t dim = table->dim();
  // The reply is allocated in one piece: refuse one that could not be sent.
  const uint64_t reply_bytes = uint64_t{keys.size()} * dim * sizeof(float) + 256;
  if (reply_bytes > options_.max_message_bytes) {
    return responder.SendError(Status::InvalidArgument(
        "PullSparse on table '" + table->options().name + "': " + std::to_string(keys.size()) + " keys of dim " +
        std::to_string(dim) + " need a " + std::to_string(reply_bytes) + "-byte reply, above max_message_bytes " +
        std::to_string(options_.max_message_bytes) + " (send fewer keys per request)"));
  }
  auto part = std::make_shared<ShardPartition>();
  Status st = PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()),
                            part.get());
  if (!st.ok()) return responder.SendError(st.WithContext("PullSparse"));

  struct PullState : Fanout {
    using Fanout::Fanout;
    flatbuffers::FlatBufferBuilder fbb;
    flatbuffers::Offset<flatbuffers::Vector<float>> values;
  };
  auto state = std::make_shared<PullState>(req, responder);
  state->fbb = flatbuffers::FlatBufferBuilder(keys.size() * dim * sizeof(float) + 256);
  float* out = nullptr;
  state->values = state->fbb.CreateUninitializedVector(keys.size() * dim, &out);

  const uint32_t table_id = msg->table_id();
  state->remaining = part->NonEmptyShards();
  for (uint32_t s = 0; s < table->num_shards(); ++s) {
    const uint32_t b = part->begin[s], e = part->begin[s + 1];
    if (b == e) continue;
    executors_.Post(SparseLane(table_id, s), [state, part, table, s, b, e, keys, out, table_id, dim] {
      Status st = table->PullShard(s, keys.data(), part->idx.data() + b, e - b, out);
      if (!st.ok()) state->Fail(st);
      if (!state->Done()) return;
      if (!state->error.ok()) return state->responder.SendError(state->error.WithContext("PullSparse"));
      auto& fbb = state->fbb;
      fbb.Finish(wire::CreatePullSparseReply(fbb, table_id, dim, state->values));
      state->responder.Send(net::ReplyType(MessageType::PullSparse), fbb.Release());
    });
  }
}

void PsService::PushSparse(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::PushSparseRequest>(req, responder);
  if (msg == nullptr) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PushSparse", "sparse", msg->table_id()));
  }
  const std::string& name = table->options().name;
  auto keys = Span(msg->keys());
  auto grads = Span(msg->grads());
  auto shows = Span(msg->shows());
  auto clicks = Span(msg->clicks());
  const uint32_t dim = table->dim();
  if (keys.empty()) {
    return responder.SendError(Status::InvalidArgument("PushSparse on table '" + name + "': empty key list"));
  }
  if (grads.size() != keys.size() * dim) {
    return responder.SendError(Status::InvalidArgument(
        "PushSparse on table '" + name + "': " + std::to_string(keys.size()) + " keys need " +
        std::to_string(keys.size() * dim) + " gradient floats (dim " + std::to_string(dim) + "), got " +
        std::to_string(grads.size()) + " (does the trainer's embedding width match the table dim?)"));
  }
  if ((!shows.empty() && shows.size() != keys.size()) || (!clicks.empty() && clicks.size() != keys.size())) {
    return responder.SendError(Status::InvalidArgument("PushSparse on table '" + name +
                                                       "': shows/clicks must be empty or one per key (" +
                                                       std::to_string(keys.size()) + " keys)"));
  }
  std::vector<uint8_t> bad = NonFiniteKeys(keys.size(), dim, grads, shows, clicks);
  uint32_t skipped = 0;
  if (!bad.empty()) {
    const size_t first = static_cast<size_t>(std::find(bad.begin(), bad.end(), 1) - bad.begin());
    skipped = static_cast<uint32_t>(std::count(bad.begin(), bad.end(), 1));
    if (options_.nonfinite_gradients == config::NonFinitePolicy::kReject) {
      return responder.SendError(Status::InvalidArgument(
          "PushSparse on table '" + name + "' from " + responder.peer() + ": key " + std::to_string(keys[first]) +
          " (position " + std::to_string(first) + ") has a NaN or infinite gradient, show or click; " +
          std::to_string(skipped) + " of " + std::to_string(keys.size()) +
          " keys are not finite, nothing was applied (lower the learning rate or clip gradients; "
          "server.nonfinite_gradients: skip drops such keys instead)"));
    }
    CountSkipped(name, skipped, "keys");
  }
  auto part = std::make_shared<ShardPartition>();
  Status st = PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()),
                            part.get(), bad);
  if (!st.ok()) return responder.SendError(st.WithContext("PushSparse"));

  const uint32_t table_id = msg->table_id();
  const auto applied = static_cast<uint32_t>(keys.size()) - skipped;
  auto reply = [table_id, applied, skipped](const net::Responder& r) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePushSparseReply(fbb, table_id, applied, skipped));
    r.Send(net::ReplyType(MessageType::PushSparse), fbb.Release());
  };
  if (applied == 0) return reply(responder);
  auto state = std::make_shared<Fanout>(req, responder);
  const PushMode mode = msg->delta() ? PushMode::kDelta : PushMode::kGradient;
  state->remaining = part->NonEmptyShards();
  for (uint32_t s = 0; s < table->num_shards(); ++s) {
    const uint32_t b = part->begin[s], e = part->begin[s + 1];
    if (b == e) continue;
    executors_.Post(SparseLane(table_id, s), [state, part, table, s, b, e, keys, grads, shows, clicks, reply,
                                              mode] {
      PushCounters counters;
      counters.shows = shows.empty() ? nullptr : shows.data();
      counters.clicks = clicks.empty() ? nullptr : clicks.data();
      Status st = table->PushShard(s, keys.data(), part->idx.data() + b, e - b, grads.data(), counters, mode);
      if (!st.ok()) state->Fail(st);
      if (!state->Done()) return;
      if (!state->error.ok()) return state->responder.SendError(state->error.WithContext("PushSparse"));
      reply(state->responder);
    });
  }
}

void PsService::PullDense(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::PullDenseRequest>(req, responder);
  if (msg == nullptr) return;
  DenseTable* table = tables_.dense(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PullDense", "dense", msg->table_id()));
  }
  const uint64_t offset = msg->offset(), count = msg->count();
  const uint32_t table_id = msg->table_id();
  // Range (the slice is fixed, so no lane is needed) and reply size before allocating.
  Status range = table->CheckRange(offset, count);
  if (!range.ok()) return responder.SendError(range.WithContext("PullDense"));
  if (count * sizeof(float) + 128 > options_.max_message_bytes) {
    return responder.SendError(Status::InvalidArgument(
        "PullDense on table '" + table->options().name + "': " + std::to_string(count) + " floats need a reply above " +
        "max_message_bytes " + std::to_string(options_.max_message_bytes) + " (pull the slice in pieces)"));
  }
  auto state = std::make_shared<Fanout>(req, responder);
  executors_.Post(DenseLane(table_id), [state, table, offset, count, table_id] {
    flatbuffers::FlatBufferBuilder fbb(count * sizeof(float) + 128);
    float* out = nullptr;
    auto values = fbb.CreateUninitializedVector(count, &out);
    Status st = table->Pull(offset, count, out);
    if (!st.ok()) return state->responder.SendError(st.WithContext("PullDense"));
    fbb.Finish(wire::CreatePullDenseReply(fbb, table_id, offset, values));
    state->responder.Send(net::ReplyType(MessageType::PullDense), fbb.Release());
  });
}

void PsService::PushDense(const net::Request& req, const net::Responder& responder, bool set_params) {
  uint32_t table_id = 0;
  uint64_t offset = 0;
  uint32_t sync_trainers = 0;
  int32_t trainer_id = -1;
  bool delta = false;
  std::span<const float> values;
  if (set_params) {
    const auto* msg = Verified<wire::PushDenseParamRequest>(req, responder);
    if (msg == nullptr) return;
    table_id = msg->table_id();
    offset = msg->offset();
    values = Span(msg->values());
  } else {
    const auto* msg = Verified<wire::PushDenseRequest>(req, responder);
    if (msg == nullptr) return;
    table_id = msg->table_id();
    offset = msg->offset();
    values = Span(msg->grads());
    sync_trainers = msg->sync_trainers();
    trainer_id = msg->trainer_id();
    delta = msg->delta();
  }
  const char* op = set_params ? "PushDenseParam" : "PushDense";
  DenseTable* table = tables_.dense(table_id);
  if (table == nullptr) {
    return responder.SendError(MissingTable(op, "dense", table_id));
  }
  if (values.empty()) {
    return responder.SendError(Status::InvalidArgument(std::string(op) + " on table '" + table->options().name +
                                                       "': empty value list"));
  }
  if (delta && sync_trainers > 0) {
    return responder.SendError(Status::InvalidArgument(
        "PushDense on table '" + table->options().name + "': a GEO delta push (delta = true) cannot be a sync push (sync_trainers = " +
        std::to_string(sync_trainers) + "); send deltas with sync_trainers = 0"));
  }
  if (sync_trainers > 0 && trainer_id < 0) {
    return responder.SendError(Status::InvalidArgument(
        "PushDense on table '" + table->options().name + "' from " + responder.peer() +
        ": a sync push (sync_trainers = " + std::to_string(sync_trainers) +
        ") must name its trainer_id (is the client an older fleetps release?)"));
  }
  // Non-finite values: parameters are always refused; gradients and deltas by policy.
  size_t first_bad = 0;
  uint64_t skipped = 0;
  std::vector<float> cleaned;  // a sync push under `skip`: the values with zeros for the bad ones
  if (!Finite(values, &first_bad)) {
    if (set_params || options_.nonfinite_gradients == config::NonFinitePolicy::kReject) {
      return responder.SendError(Status::InvalidArgument(
          std::string(op) + " on table '" + table->options().name + "' from " + responder.peer() + ": offset " +
          std::to_string(offset + first_bad) + " holds a NaN or infinite value; nothing was applied" +
          (set_params ? std::string() : " (server.nonfinite_gradients: skip drops such pushes instead)")));
    }
    for (float v : values) skipped += !std::isfinite(v);
    CountSkipped(table->options().name, skipped, "dense floats");
    if (sync_trainers == 0) {
      // An async or delta push is skipped whole (checked for range like any other).
      Status range = table->CheckRange(offset, values.size());
      if (!range.ok()) return responder.SendError(range.WithContext(op));
      flatbuffers::FlatBufferBuilder fbb(64);
      fbb.Finish(wire::CreatePushDenseReply(fbb, table_id, values.size()));
      return responder.Send(net::ReplyType(MessageType::PushDense), fbb.Release());
    }
    cleaned.assign(values.begin(), values.end());
    for (float& v : cleaned) v = std::isfinite(v) ? v : 0.0f;
  }
  struct DenseState : Fanout {
    using Fanout::Fanout;
    std::vector<float> cleaned;
  };
  auto state = std::make_shared<DenseState>(req, responder);
  state->cleaned = std::move(cleaned);
  executors_.Post(DenseLane(table_id), [state, table, offset, values, table_id, set_params, sync_trainers,
                                        trainer_id, delta, skipped, op] {
    Status st;
    if (set_params) {
      st = table->SetParams(offset, values.size(), values.data());
    } else if (delta) {
      st = table->AddDelta(offset, values.size(), values.data());
    } else if (sync_trainers > 0) {
      const float* grads = state->cleaned.empty() ? values.data() : state->cleaned.data();
      st = table->PushSync(static_cast<uint32_t>(trainer_id), sync_trainers, offset, values.size(), grads).status();
    } else {
      st = table->Push(offset, values.size(), values.data());
    }
    if (!st.ok()) return state->responder.SendError(st.WithContext(op));
    flatbuffers::FlatBufferBuilder fbb(64);
    if (set_params) {
      fbb.Finish(wire::CreatePushDenseParamReply(fbb, table_id));
      state->responder.Send(net::ReplyType(MessageType::PushDenseParam), fbb.Release());
    } else {
      fbb.Finish(wire::CreatePushDenseReply(fbb, table_id, skipped));
      state->responder.Send(net::ReplyType(MessageType::PushDense), fbb.Release());
    }
  });
}

void PsService::CountSkipped(const std::string& table, uint64_t count, const char* what) {
  const uint64_t before = nonfinite_skipped_.fetch_add(count);
  // The first skip, then one line per power of two, so a diverging job is visible
  // without flooding the log.
  if (before == 0 || std::bit_width(before) != std::bit_width(before + count)) {
    spdlog::warn("{}: skipped {} {} with NaN/infinite values on table '{}' ({} skipped in total; "
                 "server.nonfinite_gradients: skip)",
                 Where(), count, what, table, before + count);
  }
}

void PsService::MetricReport(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::MetricReportRequest>(req, responder);
  if (msg == nullptr) return;
  std::vector<double> values;
  if (msg->values() != nullptr) values.assign(msg->values()->begin(), msg->values()->end());
  auto result = metrics_.Report(msg->name() ? msg->name()->str() : std::string(), msg->trainer_id(), std::move(values));
  if (!result.ok()) return responder.SendError(result.status());
  flatbuffers::FlatBufferBuilder fbb(64 + result->first.size() * 8);
  auto sum = fbb.CreateVector(result->first);
  fbb.Finish(wire::CreateMetricReportReply(fbb, sum, result->second));
  responder.Send(net::ReplyType(MessageType::MetricReport), fbb.Release());
}

void PsService::ShuffleSend(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::ShuffleSendRequest>(req, responder);
  if (msg == nullptr) return;
  const auto num_servers = static_cast<uint32_t>(options_.endpoints.size());
  if (msg->to() % num_servers != options_.index) {
    return responder.SendError(Status::InvalidArgument(
        "ShuffleSend from " + responder.peer() + ": records for trainer " + std::to_string(msg->to()) +
        " go to pserver " + std::to_string(msg->to() % num_servers) + ", this is " + Where()));
  }
  std::vector<uint8_t> block;
  if (msg->block() != nullptr) block.assign(msg->block()->begin(), msg->block()->end());
  auto held = shuffle_mailbox_.Post(msg->round(), msg->from(), msg->to(), std::move(block), msg->last());
  if (!held.ok()) return responder.SendError(held.status());
  flatbuffers::FlatBufferBuilder fbb(32);
  fbb.Finish(wire::CreateShuffleSendReply(fbb, *held));
  responder.Send(net::ReplyType(MessageType::ShuffleSend), fbb.Release());
}

void PsService::ShuffleFetch(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::ShuffleFetchRequest>(req, responder);
  if (msg == nullptr) return;
  // Leave room for the reply's own framing under the client's message limit.
  const uint64_t max_bytes = std::min<uint64_t>(msg->max_bytes(), options_.max_message_bytes / 2);
  auto taken = shuffle_mailbox_.Take(msg->round(), msg->to(), msg->senders(), max_bytes);
  size_t bytes = 0;
  for (const auto& m : taken.mail) bytes += m.block.size();
  flatbuffers::FlatBufferBuilder fbb(256 + bytes + taken.mail.size() * 32);
  std::vector<flatbuffers::Offset<wire::ShuffleMail>> mail;
  mail.reserve(taken.mail.size());
  for (const auto& m : taken.mail) {
    mail.push_back(wire::CreateShuffleMail(fbb, m.from, fbb.CreateVector(m.block)));
  }
  fbb.Finish(wire::CreateShuffleFetchReply(fbb, fbb.CreateVector(mail), taken.senders_done, taken.complete));
  responder.Send(net::ReplyType(MessageType::ShuffleFetch), fbb.Release());
}

void PsService::Heartbeat(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::HeartbeatRequest>(req, responder);
  if (msg == nullptr) return;
  auto gone = trainers_.Heartbeat(msg->trainer_id(), msg->trainers(), msg->finished(), msg->failed(),
                                  msg->reason() ? msg->reason()->str() : std::string(),
                                  std::chrono::steady_clock::now());
  if (!gone.ok()) return responder.SendError(gone.status().WithContext("Heartbeat from " + responder.peer()));
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateHeartbeatReply(fbb, fbb.CreateVector(*gone)));
  responder.Send(net::ReplyType(MessageType::Heartbeat), fbb.Release());
}

void PsService::Barrier(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::BarrierRequest>(req, responder);
  if (msg == nullptr) return;
  const std::string name = msg->name() ? msg->name()->str() : std::string();
  if (msg->timeout_ms() > kMaxBarrierTimeoutMs) {
    return responder.SendError(Status::InvalidArgument(
        "barrier '" + name + "' from " + responder.peer() + ": timeout_ms " + std::to_string(msg->timeout_ms()) +
        " is above the limit of " + std::to_string(kMaxBarrierTimeoutMs) + " (1 hour)"));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(msg->timeout_ms());
  std::vector<double> values;
  if (msg->values() != nullptr) values.assign(msg->values()->begin(), msg->values()->end());
  // The waiter keeps a copy; the payload's bytes must not stay counted while it waits.
  responder.ReleaseRequestBytes();
  barriers_.Arrive(name, msg->trainer_id(), msg->participants(), deadline, std::move(values), msg->done(),
                   [responder](StatusOr<BarrierManager::Result> result) {
                     if (!result.ok()) return responder.SendError(result.status());
                     flatbuffers::FlatBufferBuilder fbb(64 + result->sum.size() * 8);
                     auto sum = fbb.CreateVector(result->sum);
                     fbb.Finish(wire::CreateBarrierReply(fbb, result->generation, sum, result->all_done));
                     responder.Send(net::ReplyType(MessageType::Barrier), fbb.Release());
                   });
}

namespace {

flatbuffers::Offset<wire::TableInfo> BuildTableInfo(flatbuffers::FlatBufferBuilder& fbb, const TableOptions& t,
                                                    const TableSet& tables) {
  uint64_t begin = 0, end = 0;
  if (const DenseTable* d = tables.dense(t.id)) {
    begin = d->begin();
    end = d->end();
  }
  return wire::CreateTableInfo(fbb, t.id, fbb.CreateString(t.name), t.kind == TableKind::kDense, t.dim, t.shards,
                               begin, end);
}

}  // namespace

void PsService::Ping(const net::Request& req, const net::Responder& responder) {
  if (Verified<wire::PingRequest>(req, responder) == nullptr) return;
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<wire::TableInfo>> infos;
  for (const auto& [id, t] : tables_.all()) infos.push_back(BuildTableInfo(fbb, t, tables_));
  const auto uptime = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
  fbb.Finish(wire::CreatePingReply(fbb, options_.index, static_cast<uint32_t>(options_.endpoints.size()),
                                   static_cast<uint64_t>(uptime.count()), fbb.CreateString(FLEETPS_VERSION),
                                   fbb.CreateVector(infos)));
  responder.Send(net::ReplyType(MessageType::Ping), fbb.Release());
}

void PsService::TableStats(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::TableStatsRequest>(req, responder);
  if (msg == nullptr) return;
  std::vector<uint32_t> ids;
  if (msg->all_tables()) {
    for (const auto& [id, t] : tables_.all()) ids.push_back(id);
  } else if (tables_.options(msg->table_id()) != nullptr) {
    ids.push_back(msg->table_id());
  } else {
    return responder.SendError(Status::NotFound("TableStats: no table with id " + std::to_string(msg->table_id()) +
                                                " on " + Where() + " (tables: " + tables_.Describe() + ")"));
  }
  // Shard statistics are read on each shard's owner lane; collect them, then reply.
  struct Collect : Fanout {
    using Fanout::Fanout;
    std::vector<uint32_t> ids;
    std::map<uint32_t, std::vector<std::pair<uint32_t, ShardStats>>> stats;  // guarded by Fanout::mu
  };
  auto state = std::make_shared<Collect>(req, responder);
  state->ids = ids;
  uint32_t tasks = 0;
  for (uint32_t id : ids) {
    if (SparseTable* t = tables_.sparse(id)) tasks += t->num_shards();
    else tasks += 1;
  }
  state->remaining = tasks;
  auto finish = [this, state] {
    flatbuffers::FlatBufferBuilder fbb(1024);
    std::vector<flatbuffers::Offset<wire::TableStatsEntry>> entries;
    for (uint32_t id : state->ids) {
      uint64_t rows = 0, bytes = 0, disk_rows = 0;
      std::vector<flatbuffers::Offset<wire::ShardStats>> shards;
      auto& per_shard = state->stats[id];
      std::sort(per_shard.begin(), per_shard.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [shard, s] : per_shard) {
        rows += s.rows;
        bytes += s.memory_bytes;
        disk_rows += s.disk_rows;
        shards.push_back(
            wire::CreateShardStats(fbb, shard, s.rows, s.memory_bytes, s.pulls, s.pushes, s.disk_rows));
      }
      entries.push_back(wire::CreateTableStatsEntry(fbb, BuildTableInfo(fbb, *tables_.options(id), tables_), rows,
                                                    bytes, fbb.CreateVector(shards), disk_rows));
    }
    fbb.Finish(wire::CreateTableStatsReply(fbb, fbb.CreateVector(entries)));
    state->responder.Send(net::ReplyType(MessageType::TableStats), fbb.Release());
  };
  for (uint32_t id : ids) {
    if (SparseTable* t = tables_.sparse(id)) {
      for (uint32_t s = 0; s < t->num_shards(); ++s) {
        executors_.Post(SparseLane(id, s), [state, t, s, id, finish] {
          const ShardStats st = t->Stats(s);
          {
            std::lock_guard<std::mutex> lock(state->mu);
            state->stats[id].emplace_back(s, st);
          }
          if (state->Done()) finish();
        });
      }
    } else {
      DenseTable* d = tables_.dense(id);
      executors_.Post(DenseLane(id), [state, d, id, finish] {
        ShardStats st{};
        st.rows = d->end() - d->begin();
        st.memory_bytes = st.rows * sizeof(float);  // weights; optimizer state not counted
        {
          std::lock_guard<std::mutex> lock(state->mu);
          state->stats[id].emplace_back(0, st);
        }
        if (state->Done()) finish();
      });
    }
  }
}

void PsService::Stop(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::StopRequest>(req, responder);
  if (msg == nullptr) return;
  const std::string reason = msg->reason() ? msg->reason()->str() : std::string("stop requested");
  flatbuffers::FlatBufferBuilder fbb(32);
  fbb.Finish(wire::CreateStopReply(fbb));
  responder.Send(net::ReplyType(MessageType::Stop), fbb.Release());
  if (!stop_requested_.exchange(true)) {
    spdlog::info("stop requested by {}: {}", responder.peer(), reason);
    on_stop_(reason);
  }
}

// ---- storage commands -----------------------------------------------------------------

void PsService::Save(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::SaveRequest>(req, responder);
  if (msg == nullptr) return;
  SaveSpec spec;
  auto dir = RequestPath("Save", msg->path() ? msg->path()->str() : std::string());
  if (!dir.ok()) return responder.SendError(dir.status());
  spec.dir = *dir;
  spec.version = msg->version() ? msg->version()->str() : std::string();
  spec.mode = msg->mode();
  if (!msg->all_tables()) spec.table_id = msg->table_id();
  if (static_cast<uint8_t>(spec.mode) > static_cast<uint8_t>(disk::SaveMode::Batch)) {
    return responder.SendError(Status::InvalidArgument(
        "Save: unknown mode " + std::to_string(static_cast<int>(spec.mode)) +
        " (use 0 checkpoint, 1 delta, 2 base, 3 batch)"));
  }
  auto reply = [responder, version = spec.version](StatusOr<SaveOutcome> result) {
    if (!result.ok()) return responder.SendError(result.status());
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateSaveReply(fbb, result->rows, result->bytes, fbb.CreateString(version)));
    responder.Send(net::ReplyType(MessageType::Save), fbb.Release());
  };
  if (msg->commit()) {
    if (options_.index != 0) {
      return responder.SendError(Status::InvalidArgument("Save commit sent to " + Where() +
                                                         "; commits go to pserver 0"));
    }
    return checkpoints_.Commit(spec.dir, spec.version, spec.mode, reply);
  }
  checkpoints_.SavePart(spec, [reply, spec, where = Where()](StatusOr<SaveOutcome> result) {
    if (result.ok()) {
      spdlog::info("{}: saved its part of {}/{} (mode {}): {} sparse rows, {} bytes", where, spec.dir, spec.version,
                   disk::EnumNameSaveMode(spec.mode), result->rows, result->bytes);
    }
    reply(std::move(result));
  });
}

void PsService::Load(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::LoadRequest>(req, responder);
  if (msg == nullptr) return;
  auto confined = RequestPath("Load", msg->path() ? msg->path()->str() : std::string());
  if (!confined.ok()) return responder.SendError(confined.status());
  const std::string dir = *confined;
  checkpoints_.Load(dir, [responder, dir, where = Where()](StatusOr<LoadOutcome> result) {
    if (!result.ok()) return responder.SendError(result.status());
    spdlog::info("{}: loaded {} (version {}, mode {}): {} sparse rows", where, dir, result->version,
                 disk::EnumNameSaveMode(result->mode), result->rows);
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateLoadReply(fbb, result->rows, fbb.CreateString(result->version), result->mode));
    responder.Send(net::ReplyType(MessageType::Load), fbb.Release());
  });
}

void PsService::Shrink(const net::Request& req, const net::Responder& responder) {
  const auto* msg = Verified<wire::ShrinkRequest>(req, responder);
  if (msg == nullptr) return;
  std::optional<uint32_t> table_id;
  if (!msg->all_tables()) table_id = msg->table_id();
  checkpoints_.Shrink(table_id, [responder, where = Where()](StatusOr<ShrinkOutcome> result) {
    if (!result.ok()) return responder.SendError(result.status().WithContext("Shrink on " + where));
    spdlog::info("{}: shrink deleted {} rows, {} left", where, result->deleted, result->rows);
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateShrinkReply(fbb, result->deleted, result->rows));
    responder.Send(net::ReplyType(MessageType::Shrink), fbb.Release());
  });
}

}  // namespace fleetps::server
