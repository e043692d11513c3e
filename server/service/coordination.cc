#include "server/service/ps_service.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <vector>

#include "fleetps/config.h"
#include <spdlog/spdlog.h>

#include "schemas/ps_generated.h"
#include "common/mutex.h"
#include "common/net/handler_util.h"
#include "common/thread_annotations.h"

namespace fleetps::server {

using wire::MessageType;

// Barriers, metric boards, heartbeats, Ping and TableStats (the shuffle mailbox: shuffle.cc).

void PsService::MetricReport(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::MetricReportRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->values(), "values", req, responder)) return;
  std::vector<double> values;
  if (msg->values() != nullptr) values.assign(msg->values()->begin(), msg->values()->end());
  auto result = metrics_.Report(msg->name() ? msg->name()->str() : std::string(), msg->trainer_id(), std::move(values),
                                req.connection_id);
  if (!result.ok()) return responder.SendError(result.status());
  flatbuffers::FlatBufferBuilder fbb(64 + result->first.size() * 8);
  auto sum = fbb.CreateVector(result->first);
  fbb.Finish(wire::CreateMetricReportReply(fbb, sum, result->second));
  responder.Send(net::ReplyType(MessageType::MetricReport), fbb.Release());
}

void PsService::Heartbeat(const net::Request& req, const net::Responder& responder) {
  net::AnswerHeartbeat(trainers_, req, responder);
}

void PsService::Barrier(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::BarrierRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->values(), "values", req, responder)) return;
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
  return wire::CreateTableInfo(fbb, t.id, fbb.CreateString(t.name), t.kind == TableKind::kDense, t.dim, t.shards, begin,
                               end);
}

}  // namespace

void PsService::Ping(const net::Request& req, const net::Responder& responder) {
  if (net::Verified<wire::PingRequest>(req, responder) == nullptr) return;
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<wire::TableInfo>> infos;
  for (const auto& [id, t] : tables_.all()) infos.push_back(BuildTableInfo(fbb, t, tables_));
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
  fbb.Finish(wire::CreatePingReply(fbb, options_.index, static_cast<uint32_t>(options_.endpoints.size()),
                                   static_cast<uint64_t>(uptime.count()), fbb.CreateString(FLEETPS_VERSION),
                                   fbb.CreateVector(infos)));
  responder.Send(net::ReplyType(MessageType::Ping), fbb.Release());
}

void PsService::TableStats(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::TableStatsRequest>(req, responder);
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
  struct Collect : net::Fanout {
    using net::Fanout::Fanout;
    std::vector<uint32_t> ids;
    std::map<uint32_t, std::vector<std::pair<uint32_t, ShardStats>>> stats GUARDED_BY(mu);
  };
  auto state = std::make_shared<Collect>(req, responder);
  state->ids = ids;
  uint32_t tasks = 0;
  for (uint32_t id : ids) tasks += tables_.sparse(id) != nullptr ? tables_.sparse(id)->num_shards() : 1;
  state->remaining = tasks;
  auto finish = [this, state] {
    // Every task has added its statistics (finish runs after the last one).
    std::map<uint32_t, std::vector<std::pair<uint32_t, ShardStats>>> stats;
    {
      MutexLock lock(state->mu);
      stats = std::move(state->stats);
    }
    flatbuffers::FlatBufferBuilder fbb(1024);
    std::vector<flatbuffers::Offset<wire::TableStatsEntry>> entries;
    for (uint32_t id : state->ids) {
      uint64_t rows = 0, bytes = 0, disk_rows = 0, disk_bytes = 0;
      std::vector<flatbuffers::Offset<wire::ShardStats>> shards;
      auto& per_shard = stats[id];
      std::sort(per_shard.begin(), per_shard.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [shard, s] : per_shard) {
        rows += s.rows;
        bytes += s.memory_bytes;
        disk_rows += s.disk_rows;
        disk_bytes += s.disk_bytes;
        shards.push_back(
            wire::CreateShardStats(fbb, shard, s.rows, s.memory_bytes, s.pulls, s.pushes, s.disk_rows, s.disk_bytes));
      }
      entries.push_back(wire::CreateTableStatsEntry(fbb, BuildTableInfo(fbb, *tables_.options(id), tables_), rows,
                                                    bytes, fbb.CreateVector(shards), disk_rows, disk_bytes));
    }
    fbb.Finish(wire::CreateTableStatsReply(fbb, fbb.CreateVector(entries), requests_.load()));
    state->responder.Send(net::ReplyType(MessageType::TableStats), fbb.Release());
  };
  for (uint32_t id : ids) {
    if (SparseTable* t = tables_.sparse(id)) {
      for (uint32_t s = 0; s < t->num_shards(); ++s) {
        executors_.Post(SparseLane(id, s), [state, t, s, id, finish] {
          const ShardStats st = t->Stats(s);
          {
            MutexLock lock(state->mu);
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
          MutexLock lock(state->mu);
          state->stats[id].emplace_back(0, st);
        }
        if (state->Done()) finish();
      });
    }
  }
}

std::vector<TableTotals> PsService::CollectTableStats(std::chrono::milliseconds timeout) {
  struct Gather {
    Mutex mu;
    std::condition_variable cv;
    std::map<uint32_t, TableTotals> totals GUARDED_BY(mu);
    size_t remaining GUARDED_BY(mu) = 0;
  };
  auto g = std::make_shared<Gather>();
  std::vector<std::function<void()>> tasks;
  std::vector<size_t> lanes;
  {
    MutexLock lock(g->mu);
    for (const auto& [id, opts] : tables_.all()) {
      TableTotals t;
      t.id = id;
      t.name = opts.name;
      t.sparse = tables_.sparse(id) != nullptr;
      g->totals[id] = t;
    }
  }
  auto add = [g](uint32_t id, const ShardStats& st) {
    MutexLock lock(g->mu);
    TableTotals& t = g->totals[id];
    t.rows += st.rows;
    t.disk_rows += st.disk_rows;
    t.disk_bytes += st.disk_bytes;
    t.memory_bytes += st.memory_bytes;
    t.pulls += st.pulls;
    t.pushes += st.pushes;
    if (--g->remaining == 0) g->cv.notify_all();
  };
  for (const auto& [id, opts] : tables_.all()) {
    if (SparseTable* t = tables_.sparse(id)) {
      for (uint32_t s = 0; s < t->num_shards(); ++s) {
        lanes.push_back(SparseLane(id, s));
        tasks.push_back([add, t, s, id = id] { add(id, t->Stats(s)); });
      }
    } else if (DenseTable* d = tables_.dense(id)) {
      lanes.push_back(DenseLane(id));
      tasks.push_back([add, d, id = id] {
        ShardStats st{};
        st.rows = d->end() - d->begin();
        st.memory_bytes = st.rows * sizeof(float);
        add(id, st);
      });
    }
  }
  {
    MutexLock lock(g->mu);
    g->remaining = tasks.size();
  }
  for (size_t i = 0; i < tasks.size(); ++i) executors_.Post(lanes[i], std::move(tasks[i]));
  UniqueLock lock(g->mu);
  g->cv.wait_for(lock.native(), timeout, [&]() REQUIRES(g->mu) { return g->remaining == 0; });
  std::vector<TableTotals> out;
  for (const auto& [id, t] : g->totals) out.push_back(t);
  return out;
}

}  // namespace fleetps::server
