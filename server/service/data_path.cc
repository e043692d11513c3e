#include "server/service/ps_service.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "common/key_index.h"
#include "common/sharding.h"
#include <spdlog/spdlog.h>

#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::server {

using wire::MessageType;

// PullSparse, PushSparse, PullDense, PushDense (and PushDenseParam).

namespace {

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
  const auto* msg = net::Verified<wire::PullSparseRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->keys(), "keys", req, responder)) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PullSparse", "sparse", msg->table_id()));
  }
  auto keys = net::Span(msg->keys());
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
  Status st = PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()), part.get());
  if (!st.ok()) return responder.SendError(st.WithContext("PullSparse"));

  struct PullState : net::Fanout {
    using net::Fanout::Fanout;
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
      if (Status error = state->first_error(); !error.ok()) {
        return state->responder.SendError(error.WithContext("PullSparse"));
      }
      auto& fbb = state->fbb;
      fbb.Finish(wire::CreatePullSparseReply(fbb, table_id, dim, state->values));
      state->responder.Send(net::ReplyType(MessageType::PullSparse), fbb.Release());
    });
  }
}

void PsService::PushSparse(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::PushSparseRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->keys(), "keys", req, responder)) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PushSparse", "sparse", msg->table_id()));
  }
  const std::string& name = table->options().name;
  auto keys = net::Span(msg->keys());
  auto grads = net::Span(msg->grads());
  auto shows = net::Span(msg->shows());
  auto clicks = net::Span(msg->clicks());
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
  Status st =
      PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()), part.get(), bad);
  if (!st.ok()) return responder.SendError(st.WithContext("PushSparse"));

  const uint32_t table_id = msg->table_id();
  const auto applied = static_cast<uint32_t>(keys.size()) - skipped;
  auto reply = [table_id, applied, skipped](const net::Responder& r) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePushSparseReply(fbb, table_id, applied, skipped));
    r.Send(net::ReplyType(MessageType::PushSparse), fbb.Release());
  };
  if (applied == 0) return reply(responder);
  auto state = std::make_shared<net::Fanout>(req, responder);
  const PushMode mode = msg->delta() ? PushMode::kDelta : PushMode::kGradient;
  state->remaining = part->NonEmptyShards();
  for (uint32_t s = 0; s < table->num_shards(); ++s) {
    const uint32_t b = part->begin[s], e = part->begin[s + 1];
    if (b == e) continue;
    executors_.Post(SparseLane(table_id, s), [state, part, table, s, b, e, keys, grads, shows, clicks, reply, mode] {
      PushCounters counters;
      counters.shows = shows.empty() ? nullptr : shows.data();
      counters.clicks = clicks.empty() ? nullptr : clicks.data();
      Status st = table->PushShard(s, keys.data(), part->idx.data() + b, e - b, grads.data(), counters, mode);
      if (!st.ok()) state->Fail(st);
      if (!state->Done()) return;
      if (Status error = state->first_error(); !error.ok()) {
        return state->responder.SendError(error.WithContext("PushSparse"));
      }
      reply(state->responder);
    });
  }
}

void PsService::PullRows(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::PullRowsRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->keys(), "keys", req, responder)) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) return responder.SendError(MissingTable("PullRows", "sparse", msg->table_id()));
  const std::string& name = table->options().name;
  auto keys = net::Span(msg->keys());
  if (keys.empty())
    return responder.SendError(Status::InvalidArgument("PullRows on table '" + name + "': empty key list"));
  const uint32_t core = table->core_floats();
  const bool ctr = table->accessor().ctr();
  const uint64_t per_key = uint64_t{core} * sizeof(float) + 1 + (ctr ? 2 * sizeof(float) : 0);
  const uint64_t reply_bytes = uint64_t{keys.size()} * per_key + 256;
  if (reply_bytes > options_.max_message_bytes) {
    return responder.SendError(Status::InvalidArgument(
        "PullRows on table '" + name + "': " + std::to_string(keys.size()) + " keys of " + std::to_string(core) +
        " row floats need a " + std::to_string(reply_bytes) + "-byte reply, above max_message_bytes " +
        std::to_string(options_.max_message_bytes) + " (send fewer keys per request)"));
  }
  auto part = std::make_shared<ShardPartition>();
  Status st = PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()), part.get());
  if (!st.ok()) return responder.SendError(st.WithContext("PullRows"));

  struct PullState : net::Fanout {
    using net::Fanout::Fanout;
    flatbuffers::FlatBufferBuilder fbb;
    flatbuffers::Offset<flatbuffers::Vector<float>> rows, stats;
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> flags;
  };
  auto state = std::make_shared<PullState>(req, responder);
  state->fbb = flatbuffers::FlatBufferBuilder(static_cast<size_t>(reply_bytes));
  float* rows = nullptr;
  float* stats = nullptr;
  uint8_t* flags = nullptr;
  state->rows = state->fbb.CreateUninitializedVector(keys.size() * core, &rows);
  state->flags = state->fbb.CreateUninitializedVector(keys.size(), &flags);
  if (ctr) state->stats = state->fbb.CreateUninitializedVector(keys.size() * 2, &stats);

  const uint32_t table_id = msg->table_id();
  const uint32_t dim = table->dim();
  state->remaining = part->NonEmptyShards();
  for (uint32_t s = 0; s < table->num_shards(); ++s) {
    const uint32_t b = part->begin[s], e = part->begin[s + 1];
    if (b == e) continue;
    executors_.Post(
        SparseLane(table_id, s), [state, part, table, s, b, e, keys, rows, flags, stats, table_id, dim, core] {
          Status st = table->PullRowsShard(s, keys.data(), part->idx.data() + b, e - b, rows, flags, stats);
          if (!st.ok()) state->Fail(st);
          if (!state->Done()) return;
          if (Status error = state->first_error(); !error.ok()) {
            return state->responder.SendError(error.WithContext("PullRows"));
          }
          auto& fbb = state->fbb;
          fbb.Finish(wire::CreatePullRowsReply(fbb, table_id, dim, core, state->rows, state->flags, state->stats));
          state->responder.Send(net::ReplyType(MessageType::PullRows), fbb.Release());
        });
  }
}

// Long: each of the request's parallel arrays checked against the keys with an error naming
// it, then the rows handed to their shards' lanes and the counts joined.
void PsService::WriteRows(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::WriteRowsRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->keys(), "keys", req, responder)) return;
  SparseTable* table = tables_.sparse(msg->table_id());
  if (table == nullptr) return responder.SendError(MissingTable("WriteRows", "sparse", msg->table_id()));
  const std::string& name = table->options().name;
  const std::string what = "WriteRows on table '" + name + "' from " + responder.peer();
  auto keys = net::Span(msg->keys());
  auto begin = net::Span(msg->begin());
  auto end = net::Span(msg->end());
  auto extended = net::Span(msg->extended());
  auto shows = net::Span(msg->shows());
  auto clicks = net::Span(msg->clicks());
  const uint32_t core = table->core_floats();
  if (keys.empty()) return responder.SendError(Status::InvalidArgument(what + ": empty key list"));
  const uint64_t want = uint64_t{keys.size()} * core;
  if (begin.size() != want || end.size() != want) {
    return responder.SendError(Status::InvalidArgument(
        what + ": " + std::to_string(keys.size()) + " keys need " + std::to_string(want) +
        " floats in begin and end (" + std::to_string(core) + " per row: dim " + std::to_string(table->dim()) +
        " and the optimizer state), got " + std::to_string(begin.size()) + " and " + std::to_string(end.size()) +
        " (do the trainer and the pservers use the same table config?)"));
  }
  auto one_per_key = [&](size_t size, const char* field) -> Status {
    if (size == 0 || size == keys.size()) return Status::OK();
    return Status::InvalidArgument(what + ": '" + field + "' must be empty or one per key (" +
                                   std::to_string(keys.size()) + " keys), got " + std::to_string(size));
  };
  for (const auto& [size, field] : {std::pair<size_t, const char*>{extended.size(), "extended"},
                                    {shows.size(), "shows"},
                                    {clicks.size(), "clicks"}}) {
    Status bad = one_per_key(size, field);
    if (!bad.ok()) return responder.SendError(bad);
  }
  for (size_t i = 0; i < extended.size(); ++i) {
    if (extended[i] > 1) {
      return responder.SendError(Status::InvalidArgument(what + ": extended[" + std::to_string(i) + "] is " +
                                                         std::to_string(extended[i]) + ", must be 0 or 1"));
    }
  }
  if (!extended.empty() && !table->accessor().ctr() &&
      std::find(extended.begin(), extended.end(), 1) != extended.end()) {
    return responder.SendError(
        Status::InvalidArgument(what + ": 'extended' is set but the table has the plain accessor (no lazy embedx)"));
  }
  // Rows are values, not gradients: a non-finite one is refused whatever
  // nonfinite_gradients says (skipping it would drop a whole pass of updates).
  size_t bad = 0;
  for (const auto& [v, field, width] : {std::tuple<std::span<const float>, const char*, size_t>{begin, "begin", core},
                                        {end, "end", core},
                                        {shows, "shows", 1},
                                        {clicks, "clicks", 1}}) {
    if (!Finite(v, &bad)) {
      const size_t k = bad / width;
      return responder.SendError(Status::InvalidArgument(
          what + ": key " + std::to_string(keys[k]) + " (position " + std::to_string(k) + ") has a NaN or infinite " +
          field + " value; nothing was written (the pass diverged: lower the learning rate or clip gradients)"));
    }
  }
  {
    KeyIndex seen(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (seen.Insert(keys[i]) != i) {
        return responder.SendError(Status::InvalidArgument(
            what + ": key " + std::to_string(keys[i]) + " appears twice (positions " +
            std::to_string(seen.Find(keys[i])) + " and " + std::to_string(i) + "); keys must be distinct"));
      }
    }
  }
  auto part = std::make_shared<ShardPartition>();
  Status st = PartitionKeys(*table, keys, options_.index, static_cast<uint32_t>(options_.endpoints.size()), part.get());
  if (!st.ok()) return responder.SendError(st.WithContext("WriteRows"));

  struct WriteState : net::Fanout {
    using net::Fanout::Fanout;
    std::atomic<uint64_t> written{0}, merged{0};
  };
  auto state = std::make_shared<WriteState>(req, responder);
  SparseTable::RowWrite write;
  write.begin = begin.data();
  write.end = end.data();
  write.extended = extended.empty() ? nullptr : extended.data();
  write.shows = shows.empty() ? nullptr : shows.data();
  write.clicks = clicks.empty() ? nullptr : clicks.data();
  write.average = msg->average();
  const uint32_t table_id = msg->table_id();
  state->remaining = part->NonEmptyShards();
  for (uint32_t s = 0; s < table->num_shards(); ++s) {
    const uint32_t b = part->begin[s], e = part->begin[s + 1];
    if (b == e) continue;
    executors_.Post(SparseLane(table_id, s), [state, part, table, s, b, e, keys, write, table_id] {
      SparseTable::RowWriteCounts counts;
      Status st = table->WriteRowsShard(s, keys.data(), part->idx.data() + b, e - b, write, &counts);
      state->written += counts.written;
      state->merged += counts.merged;
      if (!st.ok()) state->Fail(st);
      if (!state->Done()) return;
      if (Status error = state->first_error(); !error.ok()) {
        return state->responder.SendError(error.WithContext("WriteRows"));
      }
      flatbuffers::FlatBufferBuilder fbb(64);
      fbb.Finish(wire::CreateWriteRowsReply(fbb, table_id, static_cast<uint32_t>(state->written.load()),
                                            static_cast<uint32_t>(state->merged.load())));
      state->responder.Send(net::ReplyType(MessageType::WriteRows), fbb.Release());
    });
  }
}

void PsService::PullDense(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::PullDenseRequest>(req, responder);
  if (msg == nullptr) return;
  DenseTable* table = tables_.dense(msg->table_id());
  if (table == nullptr) {
    return responder.SendError(MissingTable("PullDense", "dense", msg->table_id()));
  }
  const uint64_t offset = msg->offset(), count = msg->count();
  const uint32_t table_id = msg->table_id();
  const bool with_state = msg->with_state();
  const optimizer::Optimizer& rule = table->optimizer();
  if (with_state && (msg->element_state_floats() != rule.element_state_size() ||
                     msg->shared_state_floats() != rule.shared_state_size())) {
    return responder.SendError(Status::InvalidArgument(
        "PullDense with state on table '" + table->options().name + "' from " + responder.peer() +
        ": the caller's dense optimizer keeps " + std::to_string(msg->element_state_floats()) +
        " floats per parameter + " + std::to_string(msg->shared_state_floats()) + ", the table's " +
        std::to_string(rule.element_state_size()) + " + " + std::to_string(rule.shared_state_size()) +
        " (the trainers and the pservers must configure the same dense_table optimizer)"));
  }
  // Range (the slice is fixed, so no lane is needed) and reply size before allocating.
  Status range = table->CheckRange(offset, count);
  if (!range.ok()) return responder.SendError(range.WithContext("PullDense"));
  const uint64_t floats = with_state ? count * (1 + rule.element_state_size()) + rule.shared_state_size() : count;
  if (floats * sizeof(float) + 128 > options_.max_message_bytes) {
    return responder.SendError(
        Status::InvalidArgument("PullDense on table '" + table->options().name + "': " + std::to_string(floats) +
                                " floats need a reply above " + "max_message_bytes " +
                                std::to_string(options_.max_message_bytes) + " (pull the slice in pieces)"));
  }
  auto state = std::make_shared<net::Fanout>(req, responder);
  executors_.Post(DenseLane(table_id), [state, table, offset, count, table_id, with_state, floats, &rule] {
    flatbuffers::FlatBufferBuilder fbb(floats * sizeof(float) + 160);
    float* out = nullptr;
    float* element = nullptr;
    float* shared = nullptr;
    flatbuffers::Offset<flatbuffers::Vector<float>> element_state, shared_state;
    if (with_state) {
      element_state = fbb.CreateUninitializedVector(count * rule.element_state_size(), &element);
      shared_state = fbb.CreateUninitializedVector(rule.shared_state_size(), &shared);
    }
    auto values = fbb.CreateUninitializedVector(count, &out);
    Status st = table->Pull(offset, count, out);
    if (st.ok() && with_state) st = table->PullState(offset, count, element, shared);
    if (!st.ok()) return state->responder.SendError(st.WithContext("PullDense"));
    fbb.Finish(wire::CreatePullDenseReply(fbb, table_id, offset, values, element_state, shared_state));
    state->responder.Send(net::ReplyType(MessageType::PullDense), fbb.Release());
  });
}

// Long: two request types decoded into one shape, every field checked with an error naming it,
// then the push on the table's lane.
void PsService::PushDense(const net::Request& req, const net::Responder& responder, bool set_params) {
  uint32_t table_id = 0;
  uint64_t offset = 0;
  uint32_t sync_trainers = 0;
  int32_t trainer_id = -1;
  uint64_t sync_step = 0;
  bool delta = false;
  bool if_unset = false;
  bool with_state = false;
  DenseTable::OptimizerStateView opt_state;
  std::span<const float> values;
  if (set_params) {
    const auto* msg = net::Verified<wire::PushDenseParamRequest>(req, responder);
    if (msg == nullptr) return;
    table_id = msg->table_id();
    offset = msg->offset();
    values = net::Span(msg->values());
    if_unset = msg->if_unset();
    with_state = msg->with_state();
    opt_state = {net::Span(msg->element_state()), net::Span(msg->shared_state())};
  } else {
    const auto* msg = net::Verified<wire::PushDenseRequest>(req, responder);
    if (msg == nullptr) return;
    table_id = msg->table_id();
    offset = msg->offset();
    values = net::Span(msg->grads());
    sync_trainers = msg->sync_trainers();
    trainer_id = msg->trainer_id();
    sync_step = msg->sync_step();
    delta = msg->delta();
  }
  const char* op = set_params ? "PushDenseParam" : "PushDense";
  DenseTable* table = tables_.dense(table_id);
  if (table == nullptr) {
    return responder.SendError(MissingTable(op, "dense", table_id));
  }
  if (values.empty()) {
    return responder.SendError(
        Status::InvalidArgument(std::string(op) + " on table '" + table->options().name + "': empty value list"));
  }
  if (delta && sync_trainers > 0) {
    return responder.SendError(Status::InvalidArgument(
        "PushDense on table '" + table->options().name +
        "': a GEO delta push (delta = true) cannot be a sync push (sync_trainers = " + std::to_string(sync_trainers) +
        "); send deltas with sync_trainers = 0"));
  }
  if (sync_trainers > 0 && trainer_id < 0) {
    return responder.SendError(
        Status::InvalidArgument("PushDense on table '" + table->options().name + "' from " + responder.peer() +
                                ": a sync push (sync_trainers = " + std::to_string(sync_trainers) +
                                ") must name its trainer_id (is the client an older fleetps release?)"));
  }
  // Non-finite values: parameters are always refused; gradients and deltas by policy.
  size_t first_bad = 0;
  uint64_t skipped = 0;
  std::vector<float> cleaned;  // a sync push under `skip`: the values with zeros for the bad ones
  if (with_state && (!Finite(opt_state.element_state, &first_bad) || !Finite(opt_state.shared_state, &first_bad))) {
    return responder.SendError(
        Status::InvalidArgument(std::string(op) + " on table '" + table->options().name + "' from " + responder.peer() +
                                ": its optimizer state holds a NaN or infinite value; nothing was applied"));
  }
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
  struct DenseState : net::Fanout {
    using net::Fanout::Fanout;
    std::vector<float> cleaned;
  };
  auto state = std::make_shared<DenseState>(req, responder);
  state->cleaned = std::move(cleaned);
  executors_.Post(DenseLane(table_id), [state, table, offset, values, table_id, set_params, sync_trainers, trainer_id,
                                        sync_step, delta, skipped, op, if_unset, with_state, opt_state] {
    Status st;
    const bool kept = set_params && if_unset && table->has_params();
    if (kept) {
      st = table->CheckRange(offset, values.size());
    } else if (set_params && with_state) {
      st = table->SetParams(offset, values.size(), values.data(), opt_state);
    } else if (set_params) {
      st = table->SetParams(offset, values.size(), values.data());
    } else if (delta) {
      st = table->AddDelta(offset, values.size(), values.data());
    } else if (sync_trainers > 0) {
      const float* grads = state->cleaned.empty() ? values.data() : state->cleaned.data();
      auto pushed =
          table->PushSync(static_cast<uint32_t>(trainer_id), sync_trainers, sync_step, offset, values.size(), grads);
      st = pushed.status();
      if (pushed.ok() && pushed->abandoned_step != 0) {
        spdlog::warn(
            "{}: sync step {} abandoned with the gradients of {} of {} trainer(s): trainer {} pushed step "
            "{} (this pserver restarted, or a push to it was lost)",
            op, pushed->abandoned_step, pushed->abandoned_trainers, sync_trainers, trainer_id, sync_step);
      }
    } else {
      st = table->Push(offset, values.size(), values.data());
    }
    if (!st.ok()) return state->responder.SendError(st.WithContext(op));
    flatbuffers::FlatBufferBuilder fbb(64);
    if (set_params) {
      fbb.Finish(wire::CreatePushDenseParamReply(fbb, table_id, kept));
      state->responder.Send(net::ReplyType(MessageType::PushDenseParam), fbb.Release());
    } else {
      fbb.Finish(wire::CreatePushDenseReply(fbb, table_id, skipped));
      state->responder.Send(net::ReplyType(MessageType::PushDense), fbb.Release());
    }
  });
}

}  // namespace fleetps::server
