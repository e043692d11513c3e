// ps_service_fuzz: the seed corpus (ps_service_fuzz.cc describes the input format).
#include "test/fuzz/ps_service_fuzz.h"

namespace fleetps::fuzz::ps_service {
namespace {

// ---- seeds ----------------------------------------------------------------------------

std::string Raw(flatbuffers::FlatBufferBuilder& fbb) {
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

// One message of the input format: raw payload (mode 0) or builder bytes (mode 1).
std::string Message(uint8_t selector, uint8_t mode, const std::string& bytes) {
  std::string m;
  m += static_cast<char>(selector);
  m += static_cast<char>(mode);
  m += static_cast<char>(bytes.size() & 0xff);
  m += static_cast<char>((bytes.size() >> 8) & 0xff);
  return m + bytes;
}

uint8_t Selector(MessageType t) {
  for (size_t i = 0; i < kNumTypes; ++i) {
    if (kTypes[i] == t) return static_cast<uint8_t>(i);
  }
  for (size_t i = 0; i < kNumAdminTypes; ++i) {
    if (kAdminTypes[i] == t) return static_cast<uint8_t>(kNumTypes + i);  // server C's numbering
  }
  return 0;
}

}  // namespace

void WriteSeeds(SeedWriter& seeds) {
  std::vector<std::pair<MessageType, std::string>> requests;
  auto add = [&](MessageType t, flatbuffers::FlatBufferBuilder& fbb) { requests.emplace_back(t, Raw(fbb)); };
  const std::vector<uint64_t> keys = {1, 2, 3, 17, 1u << 20, 0xfedcba9876543210ull};
  {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreatePingRequest(fbb, 0));
    add(MessageType::Ping, fbb);
  }
  for (uint32_t table : {kCtrTable, kPlainTable}) {
    const uint32_t dim = table == kCtrTable ? kCtrDim : kPlainDim;
    flatbuffers::FlatBufferBuilder pull;
    pull.Finish(wire::CreatePullSparseRequest(pull, table, pull.CreateVector(keys)));
    add(MessageType::PullSparse, pull);
    std::vector<float> grads(keys.size() * dim, 0.25f), shows(keys.size(), 5.0f), clicks(keys.size(), 1.0f);
    flatbuffers::FlatBufferBuilder push;
    push.Finish(wire::CreatePushSparseRequest(push, table, push.CreateVector(keys), push.CreateVector(grads),
                                              push.CreateVector(shows), push.CreateVector(clicks), false));
    add(MessageType::PushSparse, push);
    // GPU-PS pass mode: the full rows, then the pass's rows written back (the begin rows
    // are what a fresh table holds only by chance: mostly a merge).
    flatbuffers::FlatBufferBuilder rows;
    rows.Finish(wire::CreatePullRowsRequest(rows, table, rows.CreateVector(keys)));
    add(MessageType::PullRows, rows);
    const uint32_t core = table == kCtrTable ? kCtrDim * 2 : kPlainDim;  // adagrad | sgd (server 0)
    std::vector<float> begin(keys.size() * core, 0.0f), end(keys.size() * core, 0.125f);
    std::vector<uint8_t> extended(keys.size(), table == kCtrTable ? 1 : 0);
    flatbuffers::FlatBufferBuilder write;
    write.Finish(wire::CreateWriteRowsRequest(write, table, write.CreateVector(keys), write.CreateVector(begin),
                                              write.CreateVector(end), write.CreateVector(extended),
                                              write.CreateVector(shows), write.CreateVector(clicks)));
    add(MessageType::WriteRows, write);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreatePullDenseRequest(fbb, kDenseTable, 0, 32));
    add(MessageType::PullDense, fbb);
    std::vector<float> g(16, 0.5f);
    flatbuffers::FlatBufferBuilder push;
    push.Finish(wire::CreatePushDenseRequest(push, kDenseTable, 8, push.CreateVector(g), 0, false, -1));
    add(MessageType::PushDense, push);
    flatbuffers::FlatBufferBuilder sync;
    sync.Finish(wire::CreatePushDenseRequest(sync, kDenseTable, 0, sync.CreateVector(g), 2, false, 1));
    add(MessageType::PushDense, sync);
    flatbuffers::FlatBufferBuilder param;
    param.Finish(wire::CreatePushDenseParamRequest(param, kDenseTable, 0, param.CreateVector(g)));
    add(MessageType::PushDenseParam, param);
  }
  {
    std::vector<double> v = {1.0, 2.5};
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString("epoch"), 0, 2, 50, fbb.CreateVector(v), false));
    add(MessageType::Barrier, fbb);
    flatbuffers::FlatBufferBuilder other;
    other.Finish(wire::CreateBarrierRequest(other, other.CreateString("epoch"), 1, 2, 50, other.CreateVector(v), true));
    add(MessageType::Barrier, other);
    flatbuffers::FlatBufferBuilder metric;
    metric.Finish(wire::CreateMetricReportRequest(metric, metric.CreateString("auc"), 1, metric.CreateVector(v)));
    add(MessageType::MetricReport, metric);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateTableStatsRequest(fbb, 0, true));
    add(MessageType::TableStats, fbb);
    flatbuffers::FlatBufferBuilder block;
    std::vector<uint32_t> begins = {0, 2};
    std::vector<uint64_t> words = {0x3f80000000000001ull, 42};
    block.Finish(wire::CreateRecordBlock(block, 0, 1, block.CreateVector(begins), block.CreateVector(words)));
    const std::vector<uint8_t> bytes(block.GetBufferPointer(), block.GetBufferPointer() + block.GetSize());
    flatbuffers::FlatBufferBuilder send;
    send.Finish(wire::CreateShuffleSendRequest(send, 1, 0, 0, send.CreateVector(bytes), true));
    add(MessageType::ShuffleSend, send);
    flatbuffers::FlatBufferBuilder fetch;
    fetch.Finish(wire::CreateShuffleFetchRequest(fetch, 1, 0, 1, 1u << 20));
    add(MessageType::ShuffleFetch, fetch);
  }
  // One raw request per seed, on each server; then every request in one input; then
  // structure-aware messages.
  std::string all[2] = {std::string(1, '\0'), std::string(1, '\1')};
  for (const auto& [type, payload] : requests) {
    for (int server : {0, 1}) {
      seeds.Add(std::string(1, static_cast<char>(server)) + Message(Selector(type), 0, payload));
      if (all[server].size() < 3000) all[server] += Message(Selector(type), 0, payload);
    }
  }
  seeds.Add(all[0]);
  seeds.Add(all[1]);
  for (size_t i = 0; i < kNumTypes; ++i) {
    std::string bytes(48, '\0');
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<char>(j * 37 + i);
    seeds.Add(std::string(1, static_cast<char>(i & 1)) + Message(static_cast<uint8_t>(i), 1, bytes));
  }
  seeds.Add(std::string(1, '\0') + Message(0xF0, 0, "unknown"));

  // Server C: a push, a save (phase 1, then the commit), a load of it, a shrink, a save
  // that tries to leave the root, and a Stop; each also alone.
  std::vector<std::pair<MessageType, std::string>> admin;
  auto add_admin = [&](MessageType t, flatbuffers::FlatBufferBuilder& fbb) { admin.emplace_back(t, Raw(fbb)); };
  admin.push_back(requests[2]);  // a PushSparse of the CTR table
  for (bool commit : {false, true}) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateSaveRequest(fbb, fbb.CreateString("ck0"), fbb.CreateString("v1"), disk::SaveMode::Checkpoint,
                                       0, true, commit));
    add_admin(MessageType::Save, fbb);
  }
  {
    flatbuffers::FlatBufferBuilder load;
    load.Finish(wire::CreateLoadRequest(load, load.CreateString("ck0")));
    add_admin(MessageType::Load, load);
    flatbuffers::FlatBufferBuilder shrink;
    shrink.Finish(wire::CreateShrinkRequest(shrink, 0, true));
    add_admin(MessageType::Shrink, shrink);
    flatbuffers::FlatBufferBuilder escape;
    escape.Finish(wire::CreateSaveRequest(escape, escape.CreateString("../outside/x"), escape.CreateString("v1")));
    add_admin(MessageType::Save, escape);
    flatbuffers::FlatBufferBuilder stop;
    stop.Finish(wire::CreateStopRequest(stop, stop.CreateString("fuzz")));
    add_admin(MessageType::Stop, stop);
  }
  std::string sequence(1, '\2');
  for (const auto& [type, payload] : admin) {
    seeds.Add(std::string(1, '\2') + Message(Selector(type), 0, payload));
    sequence += Message(Selector(type), 0, payload);
  }
  seeds.Add(sequence);
  for (size_t i = 0; i < kNumAdminTypes; ++i) {
    std::string bytes(32, '\0');
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<char>(j * 29 + i);
    seeds.Add(std::string(1, '\2') + Message(static_cast<uint8_t>(kNumTypes + i), 1, bytes));
  }
}

}  // namespace fleetps::fuzz::ps_service
