#include "trainer/client/ps_client.h"

// PsClient's admin calls: table statistics, stop, save, load and shrink (the servers
// require an authenticated peer for the last four when the cluster has a secret).

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <random>

#include <spdlog/spdlog.h>

#include "schemas/ps_generated.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

using wire::MessageType;

StatusOr<std::vector<TableStatsSummary>> PsClient::Stats() {
  ASSIGN_OR_RETURN(std::vector<ServerStats> servers, StatsByServer());
  std::map<uint32_t, TableStatsSummary> by_id;
  for (const ServerStats& server : servers) {
    for (const ServerTableStats& t : server.tables) {
      auto& s = by_id[t.id];
      s.id = t.id;
      s.name = t.name;
      s.rows += t.rows;
      s.memory_bytes += t.memory_bytes;
      s.disk_rows += t.disk_rows;
      s.disk_bytes += t.disk_bytes;
      s.rows_per_server.push_back(t.rows);
    }
  }
  std::vector<TableStatsSummary> out;
  for (auto& [id, s] : by_id) out.push_back(std::move(s));
  return out;
}

StatusOr<std::vector<ServerStats>> PsClient::StatsByServer() {
  std::vector<ServerStats> out;
  for (auto& c : clients_) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateTableStatsRequest(fbb, 0, true));
    ASSIGN_OR_RETURN(net::Reply reply, c->CallSync(static_cast<uint16_t>(MessageType::TableStats), fbb.Release()));
    Status error;
    const auto* msg = VerifiedReply<wire::TableStatsReply>(reply, c->name(), &error);
    if (msg == nullptr) return error;
    ServerStats& server = out.emplace_back();
    server.requests = msg->requests();
    auto& tables = server.tables;
    if (msg->tables() == nullptr) continue;
    for (const auto* e : *msg->tables()) {
      if (e->info() == nullptr) continue;
      ServerTableStats t;
      t.id = e->info()->id();
      t.name = e->info()->name() ? e->info()->name()->str() : "";
      t.dense = e->info()->dense();
      t.rows = e->rows();
      t.memory_bytes = e->memory_bytes();
      t.disk_rows = e->disk_rows();
      t.disk_bytes = e->disk_bytes();
      if (e->shards() != nullptr) {
        for (const auto* sh : *e->shards()) {
          t.pulls += sh->pulls();
          t.pushes += sh->pushes();
        }
      }
      tables.push_back(std::move(t));
    }
  }
  return out;
}

Status PsClient::StopServers(const std::string& reason, const StopOptions& options) {
  const auto type = static_cast<uint16_t>(MessageType::Stop);
  net::CallOptions call = net::DefaultCallOptions(type, options_.rpc);
  if (options.timeout.count() > 0) call.timeout = options.timeout;
  Status first;
  for (size_t i = 0; i < clients_.size(); ++i) {
    flatbuffers::FlatBufferBuilder fbb(64 + reason.size());
    fbb.Finish(wire::CreateStopRequest(fbb, fbb.CreateString(reason)));
    auto r = clients_[i]->CallSync(type, fbb.Release(), call);
    if (r.ok()) continue;
    if (options.gone_is_stopped && r.status().IsUnavailable()) {
      spdlog::info("pserver {} is already stopping or gone: {}", i, r.status().message());
      continue;
    }
    if (first.ok()) first = r.status();
  }
  return first;
}

namespace {

// Verifies every server's reply as a T and hands each to add(reply); the first failed call
// or malformed reply is the result.
template <typename T, typename Add>
Status ForEachReply(const std::vector<StatusOr<net::Reply>>& replies,
                    const std::vector<std::unique_ptr<net::RpcClient>>& clients, Add add) {
  for (size_t s = 0; s < replies.size(); ++s) {
    if (!replies[s].ok()) return replies[s].status();
    Status error;
    const T* msg = VerifiedReply<T>(*replies[s], clients[s]->name(), &error);
    if (msg == nullptr) return error;
    add(*msg);
  }
  return Status::OK();
}

// A fresh checkpoint version name: "ckpt-<unix ms>-<4 hex digits>".
std::string NewVersionName() {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::random_device rd;
  char suffix[8];
  std::snprintf(suffix, sizeof(suffix), "%04x", static_cast<unsigned>(rd() & 0xffff));
  return "ckpt-" + std::to_string(ms) + "-" + suffix;
}

}  // namespace

StatusOr<SaveResult> PsClient::Save(const std::string& dir, uint32_t mode, std::optional<uint32_t> table_id) {
  if (dir.empty()) return Status::InvalidArgument("Save: empty checkpoint directory");
  if (mode > kSaveBatch) {
    return Status::InvalidArgument("Save: mode " + std::to_string(mode) +
                                   " (use 0 checkpoint, 1 delta, 2 base, 3 batch)");
  }
  if (table_id) RETURN_IF_ERROR(Table(*table_id).status());
  const std::string& path = dir;  // resolved by the servers, below their checkpoint root
  const std::string version = NewVersionName();
  auto build = [&](bool commit) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto p = fbb.CreateString(path);
    auto v = fbb.CreateString(version);
    fbb.Finish(wire::CreateSaveRequest(fbb, p, v, static_cast<disk::SaveMode>(mode), table_id.value_or(0),
                                       !table_id.has_value(), commit));
    return fbb.Release();
  };
  const auto type = static_cast<uint16_t>(MessageType::Save);
  // Phase 1: every server writes its part.
  for (auto& r : CallEveryServer(type, [&](size_t) { return build(false); })) {
    if (!r.ok()) return r.status().WithContext("Save to " + path + " (the previous checkpoint there is intact)");
  }
  // Phase 2: server 0 commits.
  ASSIGN_OR_RETURN(net::Reply reply, clients_[0]->CallSync(type, build(true)));
  Status error;
  const auto* msg = VerifiedReply<wire::SaveReply>(reply, clients_[0]->name(), &error);
  if (msg == nullptr) return error;
  return SaveResult{version, msg->rows(), msg->bytes()};
}

StatusOr<LoadResult> PsClient::Load(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("Load: empty checkpoint directory");
  const std::string& path = dir;
  LoadResult result;
  auto replies = CallEveryServer(static_cast<uint16_t>(MessageType::Load), [&](size_t) {
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateLoadRequest(fbb, fbb.CreateString(path)));
    return fbb.Release();
  });
  RETURN_IF_ERROR(ForEachReply<wire::LoadReply>(replies, clients_, [&](const wire::LoadReply& msg) {
    result.rows += msg.rows();
    result.version = msg.version() ? msg.version()->str() : "";
    result.mode = static_cast<uint32_t>(msg.mode());
  }));
  return result;
}

StatusOr<ShrinkResult> PsClient::Shrink(std::optional<uint32_t> table_id) {
  if (table_id) RETURN_IF_ERROR(Table(*table_id).status());
  ShrinkResult result;
  auto replies = CallEveryServer(static_cast<uint16_t>(MessageType::Shrink), [&](size_t) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateShrinkRequest(fbb, table_id.value_or(0), !table_id.has_value()));
    return fbb.Release();
  });
  RETURN_IF_ERROR(ForEachReply<wire::ShrinkReply>(replies, clients_, [&](const wire::ShrinkReply& msg) {
    result.deleted += msg.deleted();
    result.rows += msg.rows();
  }));
  return result;
}

}  // namespace fleetps::trainer
