#include "trainer/client/ps_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "common/key_index.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/sharding.h"
#include "schemas/ps_generated.h"
#include "trainer/client/fan_out.h"
#include "trainer/client/reply_util.h"
#include "trainer/client/sparse_merge.h"

namespace fleetps::trainer {

using wire::MessageType;

namespace {

// InvalidArgument when `keys` promised distinct (PsClient::Keys::kDistinct) repeat one; OK
// without a check in builds without assertions (NDEBUG), where the promise is trusted.
Status CheckDistinct(std::span<const uint64_t> keys, PsClient::Keys keys_are, const char* call) {
#ifndef NDEBUG
  if (keys_are == PsClient::Keys::kDistinct) {
    KeyIndex seen(keys.size());
    for (uint64_t key : keys) {
      const size_t before = seen.size();
      if (seen.Insert(key) < before) {  // an index it already had: seen before
        return Status::InvalidArgument(std::string(call) + " with Keys::kDistinct got key " + std::to_string(key) +
                                       " more than once");
      }
    }
  }
#else
  (void)keys;
  (void)keys_are;
  (void)call;
#endif
  return Status::OK();
}

}  // namespace

PsClient::PsClient(PsClientOptions options) : options_(std::move(options)) {}

PsClient::~PsClient() {
  clients_.clear();  // closes the connections while the io threads still run
  if (io_) io_->Stop();
}

void PsClient::Close() {
  for (auto& c : clients_) c->Close();
}

StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(PsClientOptions options) {
  if (options.servers.empty()) {
    return Status::InvalidArgument("no pserver endpoints given (set PADDLE_PSERVERS_IP_PORT_LIST)");
  }
  std::unique_ptr<PsClient> client(new PsClient(std::move(options)));
  client->io_ = std::make_unique<net::IoThreads>(client->options_.io_threads);
  for (size_t i = 0; i < client->options_.servers.size(); ++i) {
    const auto& ep = client->options_.servers[i];
    client->clients_.push_back(std::make_unique<net::RpcClient>(
        *client->io_, ep, client->options_.rpc, "pserver " + std::to_string(i) + " (" + ep.ToString() + ")"));
  }
  for (auto& c : client->clients_) RETURN_IF_ERROR(c->Connect());
  RETURN_IF_ERROR(client->Handshake());
  return client;
}

Status PsClient::Handshake() {
  for (size_t i = 0; i < clients_.size(); ++i) {
    const std::string& name = clients_[i]->name();
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePingRequest(fbb));
    ASSIGN_OR_RETURN(net::Reply reply, clients_[i]->CallSync(static_cast<uint16_t>(MessageType::Ping), fbb.Release()));
    Status error;
    const auto* ping = VerifiedReply<wire::PingReply>(reply, name, &error);
    if (ping == nullptr) return error;
    if (ping->num_servers() != clients_.size() || ping->server_index() != i) {
      return Status::InvalidArgument(name + " says it is pserver " + std::to_string(ping->server_index()) + " of " +
                                     std::to_string(ping->num_servers()) + ", but this trainer lists it as " +
                                     std::to_string(i) + " of " + std::to_string(clients_.size()) +
                                     " (PADDLE_PSERVERS_IP_PORT_LIST must be identical everywhere)");
    }
    if (ping->tables() == nullptr) continue;
    for (const auto* t : *ping->tables()) {
      TableInfo& info = tables_[t->id()];
      if (i == 0) {
        info.id = t->id();
        info.name = t->name() ? t->name()->str() : "";
        info.dense = t->dense();
        info.dim = t->dim();
        info.shards = t->shards();
      } else if (info.name != (t->name() ? t->name()->str() : "") || info.dim != t->dim() || info.dense != t->dense()) {
        return Status::InvalidArgument(name + " disagrees with pserver 0 on table " + std::to_string(t->id()) +
                                       " (run every pserver with the same config)");
      }
      if (info.dense) {
        info.slice_begin.push_back(t->slice_begin());
        if (i + 1 == clients_.size()) info.slice_begin.push_back(t->slice_end());
      }
    }
  }
  return Status::OK();
}

StatusOr<TableInfo> PsClient::Table(uint32_t table_id) const {
  auto it = tables_.find(table_id);
  if (it == tables_.end()) {
    std::string known;
    for (const auto& [id, t] : tables_) known += (known.empty() ? "" : ", ") + t.name + "(" + std::to_string(id) + ")";
    return Status::NotFound("no table with id " + std::to_string(table_id) + " on the pservers (tables: " + known +
                            ")");
  }
  return it->second;
}

StatusOr<TableInfo> PsClient::TableByName(const std::string& name) const {
  for (const auto& [id, t] : tables_) {
    if (t.name == name) return t;
  }
  return Status::NotFound("no table named '" + name + "' on the pservers");
}

std::future<Status> PsClient::PullSparse(uint32_t table_id, std::span<const uint64_t> keys, float* values,
                                         Keys keys_are) {
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  if (info->dense) return CallJoin::Ready(Status::InvalidArgument("PullSparse on dense table '" + info->name + "'"));
  if (keys.empty()) return CallJoin::Ready(Status::OK());
  if (Status st = CheckDistinct(keys, keys_are, "PullSparse"); !st.ok()) return CallJoin::Ready(st);
  const auto dim = static_cast<uint32_t>(info->dim);

  // De-duplicate, unless the keys are distinct; the unique keys are grouped by server below.
  auto slot = std::make_shared<std::vector<uint32_t>>();
  KeyIndex dedup;
  std::span<const uint64_t> uniq = keys;
  if (keys_are == Keys::kMayRepeat) {
    dedup.Reserve(keys.size());
    slot->resize(keys.size());
    dedup.InsertAll(keys, slot->data());
    uniq = dedup.keys();
  }

  // Without duplicates (slot[i] == i) replies land in `values` directly; otherwise in a
  // per-unique-key buffer that is scattered to every position at the end.
  const bool direct = uniq.size() == keys.size();
  auto uniq_values = std::make_shared<std::vector<float>>(direct ? 0 : uniq.size() * dim);
  float* const out = direct ? values : uniq_values->data();
  std::function<void(const Status&)> scatter;
  if (!direct) {
    scatter = [slot, uniq_values, values, dim](const Status& result) {
      if (!result.ok()) return;
      const float* src = uniq_values->data();
      for (size_t i = 0; i < slot->size(); ++i) std::memcpy(values + i * dim, src + (*slot)[i] * size_t{dim}, dim * 4);
    };
  }
  const size_t chunk = std::max<size_t>(
      1, std::min<size_t>(options_.max_keys_per_request, (options_.rpc.max_payload - 4096) / (dim * 4 + 8)));
  return FanOut<wire::PullSparseReply>(
      clients_, static_cast<uint16_t>(MessageType::PullSparse), uniq, chunk,
      [&](uint32_t, std::span<const uint32_t> members) {
        flatbuffers::FlatBufferBuilder fbb(members.size() * 8 + 128);
        uint64_t* kout = nullptr;
        auto kvec = fbb.CreateUninitializedVector(members.size(), &kout);
        for (size_t k = 0; k < members.size(); ++k) kout[k] = uniq[members[k]];
        fbb.Finish(wire::CreatePullSparseRequest(fbb, table_id, kvec));
        return fbb.Release();
      },
      [uniq_values, out, dim](const std::string& server, std::span<const uint32_t> members,
                              const wire::PullSparseReply& msg) {
        if (msg.values() == nullptr || msg.values()->size() != members.size() * dim) {
          return Status::Corruption("PullSparse reply from " + server + " has " +
                                    std::to_string(msg.values() ? msg.values()->size() : 0) + " values, expected " +
                                    std::to_string(members.size() * dim));
        }
        const float* src = msg.values()->data();
        for (size_t k = 0; k < members.size(); ++k) {
          std::memcpy(out + members[k] * size_t{dim}, src + k * dim, dim * 4);
        }
        return Status::OK();
      },
      std::move(scatter));
}

std::future<Status> PsClient::PushSparse(uint32_t table_id, std::span<const uint64_t> keys,
                                         std::span<const float> grads, const SparsePushOptions& options) {
  const auto shows = options.shows;
  const auto clicks = options.clicks;
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  if (info->dense) return CallJoin::Ready(Status::InvalidArgument("PushSparse on dense table '" + info->name + "'"));
  const auto dim = static_cast<uint32_t>(info->dim);
  if (grads.size() != keys.size() * dim) {
    return CallJoin::Ready(Status::InvalidArgument(
        "PushSparse on table '" + info->name + "': " + std::to_string(keys.size()) + " keys need " +
        std::to_string(keys.size() * dim) + " gradient floats, got " + std::to_string(grads.size())));
  }
  const bool with_stats = !shows.empty() || !clicks.empty();
  if (with_stats && (shows.size() != keys.size() || clicks.size() != keys.size())) {
    return CallJoin::Ready(
        Status::InvalidArgument("PushSparse on table '" + info->name + "': shows and clicks need one value per key"));
  }
  if (keys.empty()) return CallJoin::Ready(Status::OK());
  if (Status st = CheckDistinct(keys, options.keys_are, "PushSparse"); !st.ok()) return CallJoin::Ready(st);

  // Sum repeated keys, unless the keys are distinct.
  std::span<const uint64_t> uniq = keys;
  std::span<const float> sum = grads, sum_show = shows, sum_click = clicks;
  SparseMerge merged(dim);
  if (options.keys_are == Keys::kMayRepeat) {
    merged.Add(keys, grads, shows, clicks);
    uniq = merged.keys();
    sum = merged.grads();
    sum_show = merged.shows();
    sum_click = merged.clicks();
  }
  const size_t chunk = std::max<size_t>(
      1, std::min<size_t>(options_.max_keys_per_request, (options_.rpc.max_payload - 4096) / (dim * 4 + 16)));
  return FanOut<void>(
      clients_, static_cast<uint16_t>(MessageType::PushSparse), uniq, chunk,
      [&](uint32_t, std::span<const uint32_t> members) {
        const size_t n = members.size();
        flatbuffers::FlatBufferBuilder fbb(n * (8 + dim * 4 + (with_stats ? 8 : 0)) + 256);
        uint64_t* kout = nullptr;
        float* gout = nullptr;
        auto kvec = fbb.CreateUninitializedVector(n, &kout);
        auto gvec = fbb.CreateUninitializedVector(n * dim, &gout);
        flatbuffers::Offset<flatbuffers::Vector<float>> svec, cvec;
        float* sout = nullptr;
        float* cout = nullptr;
        if (with_stats) {
          svec = fbb.CreateUninitializedVector(n, &sout);
          cvec = fbb.CreateUninitializedVector(n, &cout);
        }
        for (size_t k = 0; k < n; ++k) {
          const uint32_t u = members[k];
          kout[k] = uniq[u];
          std::memcpy(gout + k * dim, sum.data() + u * size_t{dim}, dim * 4);
          if (with_stats) {
            sout[k] = sum_show[u];
            cout[k] = sum_click[u];
          }
        }
        fbb.Finish(wire::CreatePushSparseRequest(fbb, table_id, kvec, gvec, svec, cvec, options.delta));
        return fbb.Release();
      },
      nullptr);
}

namespace {

// The per-server pieces [begin, end) of a dense range [0, size), split further so no
// request exceeds `max_floats`.
std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> DensePieces(const TableInfo& info, uint64_t max_floats) {
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> out;
  for (size_t s = 0; s + 1 < info.slice_begin.size(); ++s) {
    for (uint64_t b = info.slice_begin[s]; b < info.slice_begin[s + 1]; b += max_floats) {
      out.emplace_back(static_cast<uint32_t>(s), b, std::min(info.slice_begin[s + 1], b + max_floats));
    }
  }
  return out;
}

// A dense call's requests: `pieces` of at most max_payload bytes each, with `state` (when
// given: element_floats per parameter, `shared` floats per request) beside the values.
struct DenseLayout {
  uint32_t element_floats = 0;
  size_t shared = 0;
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> pieces;
};

// InvalidArgument naming the operation and the table when `state` is not a whole number of
// floats per parameter.
StatusOr<DenseLayout> LayOutDense(const TableInfo& info, const PsClient::DenseState* state, size_t max_payload,
                                  const char* op) {
  DenseLayout out;
  if (state != nullptr) {
    if (info.dim == 0 || state->element.size() % info.dim != 0) {
      return Status::InvalidArgument(std::string(op) + " on table '" + info.name + "': optimizer state of " +
                                     std::to_string(state->element.size()) +
                                     " floats is not a multiple of the table's " + std::to_string(info.dim));
    }
    out.element_floats = static_cast<uint32_t>(state->element.size() / info.dim);
    out.shared = state->shared.size();
  }
  out.pieces = DensePieces(info, ((max_payload - 4096) / sizeof(float) - out.shared) / (1 + out.element_floats));
  return out;
}

}  // namespace

std::future<Status> PsClient::PullDense(uint32_t table_id, std::span<float> values, DenseState* state) {
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  if (!info->dense || values.size() != info->dim) {
    return CallJoin::Ready(Status::InvalidArgument("PullDense on table '" + info->name +
                                                   "': expected a dense table of " + std::to_string(info->dim) +
                                                   " floats, caller has " + std::to_string(values.size())));
  }
  auto layout = LayOutDense(*info, state, options_.rpc.max_payload, "PullDense");
  if (!layout.ok()) return CallJoin::Ready(layout.status());
  const auto& pieces = layout->pieces;
  const uint32_t es = layout->element_floats;
  const size_t shared = layout->shared;
  auto join = std::make_shared<CallJoin>();
  join->remaining = static_cast<uint32_t>(pieces.size());
  auto future = join->promise.get_future();
  if (pieces.empty()) return CallJoin::Ready(Status::OK());
  for (auto [s, b, e] : pieces) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(
        wire::CreatePullDenseRequest(fbb, table_id, b, e - b, state != nullptr, es, static_cast<uint32_t>(shared)));
    const std::string server = clients_[s]->name();
    float* dst = values.data() + b;
    float* element = state != nullptr ? state->element.data() + b * es : nullptr;
    float* shared_out = state != nullptr && b == 0 ? state->shared.data() : nullptr;  // the first slice's
    const uint64_t count = e - b;
    clients_[s]->Call(static_cast<uint16_t>(MessageType::PullDense), fbb.Release(),
                      [join, dst, count, server, element, shared_out, es, shared](StatusOr<net::Reply> r) {
                        if (!r.ok()) {
                          join->Fail(r.status());
                          return join->Done();
                        }
                        Status error;
                        const auto* msg = VerifiedReply<wire::PullDenseReply>(*r, server, &error);
                        auto size = [](const flatbuffers::Vector<float>* v) { return v == nullptr ? 0 : v->size(); };
                        if (msg != nullptr && (size(msg->values()) != count ||
                                               (element != nullptr && (size(msg->element_state()) != count * es ||
                                                                       size(msg->shared_state()) != shared)))) {
                          error = Status::Corruption("PullDense reply from " + server + " has the wrong size");
                        }
                        if (!error.ok()) {
                          join->Fail(error);
                        } else {
                          std::memcpy(dst, msg->values()->data(), count * 4);
                          if (element != nullptr && es > 0) {
                            std::memcpy(element, msg->element_state()->data(), count * es * 4);
                          }
                          if (shared_out != nullptr && shared > 0) {
                            std::memcpy(shared_out, msg->shared_state()->data(), shared * 4);
                          }
                        }
                        join->Done();
                      });
  }
  return future;
}

std::future<Status> PsClient::PushDense(uint32_t table_id, std::span<const float> grads,
                                        const DensePushOptions& options) {
  return PushDenseValues(table_id, grads, /*params=*/false, options);
}

std::future<Status> PsClient::PushDenseParam(uint32_t table_id, std::span<const float> values,
                                             const DenseState* state) {
  return PushDenseValues(table_id, values, /*params=*/true, DensePushOptions{}, nullptr, state);
}

StatusOr<uint64_t> PsClient::InitDenseParam(uint32_t table_id, std::span<const float> values) {
  auto kept = std::make_shared<std::atomic<uint64_t>>(0);
  RETURN_IF_ERROR(PushDenseValues(table_id, values, /*params=*/true, DensePushOptions{}, kept).get());
  return kept->load();
}

std::future<Status> PsClient::PushDenseValues(uint32_t table_id, std::span<const float> values, bool params,
                                              const DensePushOptions& options,
                                              std::shared_ptr<std::atomic<uint64_t>> kept, const DenseState* state) {
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  const char* op = params ? "PushDenseParam" : "PushDense";
  if (!info->dense || values.size() != info->dim) {
    return CallJoin::Ready(Status::InvalidArgument(std::string(op) + " on table '" + info->name +
                                                   "': expected a dense table of " + std::to_string(info->dim) +
                                                   " floats, caller has " + std::to_string(values.size())));
  }
  auto layout = LayOutDense(*info, state, options_.rpc.max_payload, op);
  if (!layout.ok()) return CallJoin::Ready(layout.status());
  const auto& pieces = layout->pieces;
  const uint32_t es = layout->element_floats;
  const size_t shared = layout->shared;
  if (pieces.empty()) return CallJoin::Ready(Status::OK());
  auto join = std::make_shared<CallJoin>();
  join->remaining = static_cast<uint32_t>(pieces.size());
  auto future = join->promise.get_future();
  const auto type = static_cast<uint16_t>(params ? MessageType::PushDenseParam : MessageType::PushDense);
  net::CallOptions call = net::DefaultCallOptions(type, options_.rpc);
  if (options.sync_step != 0) call.idempotent = true;  // the servers count a numbered push once
  for (auto [s, b, e] : pieces) {
    flatbuffers::FlatBufferBuilder fbb(((e - b) * (1 + es) + shared) * 4 + 160);
    auto vec = fbb.CreateVector(values.data() + b, e - b);
    if (params && state != nullptr) {
      // Each piece carries the shared state: every server's slice takes it.
      auto element = fbb.CreateVector(state->element.data() + b * es, (e - b) * es);
      auto shared_state = fbb.CreateVector(state->shared);
      fbb.Finish(wire::CreatePushDenseParamRequest(fbb, table_id, b, vec, /*if_unset=*/kept != nullptr,
                                                   /*with_state=*/true, element, shared_state));
    } else if (params) {
      fbb.Finish(wire::CreatePushDenseParamRequest(fbb, table_id, b, vec, /*if_unset=*/kept != nullptr));
    } else {
      fbb.Finish(wire::CreatePushDenseRequest(fbb, table_id, b, vec, options.sync_trainers, options.delta,
                                              options.trainer_id, options.sync_step));
    }
    clients_[s]->Call(type, fbb.Release(), call,
                      [join, kept, count = e - b, server = clients_[s]->name()](StatusOr<net::Reply> r) {
                        if (!r.ok()) {
                          join->Fail(r.status());
                        } else if (kept != nullptr) {
                          Status error;
                          const auto* msg = VerifiedReply<wire::PushDenseParamReply>(*r, server, &error);
                          if (msg == nullptr) {
                            join->Fail(error);
                          } else if (msg->kept()) {
                            *kept += count;
                          }
                        }
                        join->Done();
                      });
  }
  return future;
}

std::string PsClient::ServerName(size_t i) const { return clients_.at(i)->name(); }

net::RpcClientCounters PsClient::counters() const {
  net::RpcClientCounters sum;
  for (const auto& c : clients_) {
    const auto one = c->counters();
    sum.reconnects += one.reconnects;
    sum.resent += one.resent;
    sum.busy_retries += one.busy_retries;
  }
  return sum;
}

std::vector<StatusOr<net::Reply>> PsClient::CallEveryServer(
    uint16_t type, const std::function<flatbuffers::DetachedBuffer(size_t)>& payload) {
  std::vector<std::promise<StatusOr<net::Reply>>> promises(clients_.size());
  std::vector<std::future<StatusOr<net::Reply>>> futures;
  for (auto& p : promises) futures.push_back(p.get_future());
  for (size_t s = 0; s < clients_.size(); ++s) {
    clients_[s]->Call(type, payload(s), [p = &promises[s]](StatusOr<net::Reply> r) { p->set_value(std::move(r)); });
  }
  std::vector<StatusOr<net::Reply>> replies;
  for (auto& f : futures) replies.push_back(f.get());
  return replies;
}

}  // namespace fleetps::trainer
