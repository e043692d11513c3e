// ps_service_fuzz: structure-aware requests (the input's mode bit 0; ps_service_fuzz.cc).
#include "test/fuzz/ps_service_fuzz.h"

namespace fleetps::fuzz::ps_service {
namespace {

// ---- structure-aware request building -------------------------------------------------

float Float(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return p.ConsumeBool() ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    case 2: return p.ConsumeFloatingPoint<float>();
    case 3: return std::numeric_limits<float>::max();
    default: return p.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
  }
}

std::vector<float> Floats(FuzzedDataProvider& p, size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = Float(p);
  return v;
}

// A length close to `want`: usually exact, sometimes off by a little, sometimes anything.
size_t Around(FuzzedDataProvider& p, size_t want) {
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return p.ConsumeIntegralInRange<size_t>(0, 300);
    case 1: return want + 1;
    case 2: return want > 0 ? want - 1 : 0;
    default: return want;
  }
}

uint32_t TableId(FuzzedDataProvider& p) {
  return p.ConsumeIntegralInRange<int>(0, 9) == 0 ? p.ConsumeIntegral<uint32_t>()
                                                  : p.ConsumeIntegralInRange<uint32_t>(0, 3);
}

uint64_t Key(FuzzedDataProvider& p) {
  return p.ConsumeBool() ? p.ConsumeIntegralInRange<uint64_t>(0, 64) : p.ConsumeIntegral<uint64_t>();
}

uint64_t Offset(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return p.ConsumeIntegral<uint64_t>();
    case 1: return std::numeric_limits<uint64_t>::max() - p.ConsumeIntegralInRange<uint64_t>(0, 70);
    default: return p.ConsumeIntegralInRange<uint64_t>(0, kDenseSize + 2);
  }
}

std::vector<double> Doubles(FuzzedDataProvider& p) {
  std::vector<double> v(p.ConsumeIntegralInRange<size_t>(0, 8));
  for (auto& x : v) {
    x = p.ConsumeBool() ? p.ConsumeFloatingPoint<double>() : std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

std::vector<uint8_t> Block(FuzzedDataProvider& p) {
  if (p.ConsumeBool()) return p.ConsumeBytes<uint8_t>(p.ConsumeIntegralInRange<size_t>(0, 64));
  // A RecordBlock, with begins and words that may disagree with each other.
  flatbuffers::FlatBufferBuilder fbb;
  const auto dense_dim = p.ConsumeIntegralInRange<uint32_t>(0, 3);
  const auto num_slots = p.ConsumeIntegralInRange<uint32_t>(0, 3);
  std::vector<uint32_t> begins(p.ConsumeIntegralInRange<size_t>(0, 5));
  for (auto& b : begins) b = p.ConsumeIntegralInRange<uint32_t>(0, 12);
  std::vector<uint64_t> words(p.ConsumeIntegralInRange<size_t>(0, 12));
  for (auto& w : words) w = p.ConsumeIntegral<uint64_t>();
  fbb.Finish(wire::CreateRecordBlock(fbb, dense_dim, num_slots, fbb.CreateVector(begins), fbb.CreateVector(words)));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

// A Save/Load path: mostly inside the root (relative or absolute), sometimes one that
// tries to leave it, sometimes anything.
std::string CheckpointPath(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return "../outside/x";
    case 1: return ScratchDir() + "/outside";
    case 2: return ScratchDir() + "/root/ck/../../outside";
    case 3: return p.ConsumeRandomLengthString(24);
    case 4: return ScratchDir() + "/root/ck" + std::to_string(p.ConsumeIntegralInRange<int>(0, 1));
    default: return "ck" + std::to_string(p.ConsumeIntegralInRange<int>(0, 1));
  }
}

}  // namespace

std::string Build(MessageType type, std::string_view bytes, const config::ServerOptions& o) {
  FuzzedDataProvider p(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  flatbuffers::FlatBufferBuilder fbb;
  switch (type) {
    case MessageType::Ping: fbb.Finish(wire::CreatePingRequest(fbb, p.ConsumeIntegral<int32_t>())); break;
    case MessageType::PullSparse: {
      const uint32_t table = TableId(p);
      std::vector<uint64_t> keys(p.ConsumeIntegralInRange<size_t>(0, 64));
      for (auto& k : keys) k = Key(p);
      fbb.Finish(wire::CreatePullSparseRequest(fbb, table, fbb.CreateVector(keys)));
      break;
    }
    case MessageType::PushSparse: {
      const uint32_t table = TableId(p);
      std::vector<uint64_t> keys(p.ConsumeIntegralInRange<size_t>(0, 32));
      for (auto& k : keys) k = Key(p);
      const size_t dim = DimOf(o, table) == 0 ? 4 : DimOf(o, table);
      const auto grads = Floats(p, Around(p, keys.size() * dim));
      const bool with_counters = p.ConsumeBool();
      std::vector<float> shows, clicks;
      if (with_counters) {
        shows = Floats(p, Around(p, keys.size()));
        clicks = Floats(p, Around(p, keys.size()));
      }
      const bool delta = p.ConsumeBool();
      fbb.Finish(wire::CreatePushSparseRequest(fbb, table, fbb.CreateVector(keys), fbb.CreateVector(grads),
                                               with_counters ? fbb.CreateVector(shows) : 0,
                                               with_counters ? fbb.CreateVector(clicks) : 0, delta));
      break;
    }
    case MessageType::PullRows: {
      const uint32_t table = TableId(p);
      std::vector<uint64_t> keys(p.ConsumeIntegralInRange<size_t>(0, 64));
      for (auto& k : keys) k = Key(p);
      fbb.Finish(wire::CreatePullRowsRequest(fbb, table, fbb.CreateVector(keys)));
      break;
    }
    case MessageType::WriteRows: {
      const uint32_t table = TableId(p);
      std::vector<uint64_t> keys(p.ConsumeIntegralInRange<size_t>(0, 32));
      for (auto& k : keys) k = Key(p);
      const size_t core = CoreOf(o, table) == 0 ? 4 : CoreOf(o, table);
      const auto begin = Floats(p, Around(p, keys.size() * core));
      const auto end = Floats(p, Around(p, keys.size() * core));
      std::vector<uint8_t> extended(p.ConsumeBool() ? Around(p, keys.size()) : 0);
      for (auto& x : extended) x = p.ConsumeIntegralInRange<uint8_t>(0, 2);
      const bool with_counters = p.ConsumeBool();
      std::vector<float> shows, clicks;
      if (with_counters) {
        shows = Floats(p, Around(p, keys.size()));
        clicks = Floats(p, Around(p, keys.size()));
      }
      fbb.Finish(wire::CreateWriteRowsRequest(fbb, table, fbb.CreateVector(keys), fbb.CreateVector(begin),
                                              fbb.CreateVector(end), fbb.CreateVector(extended),
                                              with_counters ? fbb.CreateVector(shows) : 0,
                                              with_counters ? fbb.CreateVector(clicks) : 0, p.ConsumeBool()));
      break;
    }
    case MessageType::PullDense: {
      const uint32_t table = TableId(p);
      const uint64_t offset = Offset(p);
      const uint64_t count =
          p.ConsumeBool() ? p.ConsumeIntegral<uint64_t>() : p.ConsumeIntegralInRange<uint64_t>(0, 70);
      // With the optimizer state, of sizes around the tables' rules' (0 to 2 and 0 to 2).
      const bool with_state = p.ConsumeBool();
      const auto element = p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const auto shared = p.ConsumeBool() ? p.ConsumeIntegral<uint32_t>() : p.ConsumeIntegralInRange<uint32_t>(0, 3);
      fbb.Finish(wire::CreatePullDenseRequest(fbb, table, offset, count, with_state, element, shared));
      break;
    }
    case MessageType::PushDense: {
      const uint32_t table = TableId(p);
      const uint64_t offset = Offset(p);
      const auto grads = Floats(p, p.ConsumeIntegralInRange<size_t>(0, 70));
      const uint32_t sync = p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const bool delta = p.ConsumeBool();
      const int32_t trainer = p.ConsumeIntegralInRange<int32_t>(-1, 3);
      // Small step numbers (0 = unnumbered) so that steps repeat, advance and go back.
      const uint64_t step = p.ConsumeIntegralInRange<uint64_t>(0, 4);
      fbb.Finish(wire::CreatePushDenseRequest(fbb, table, offset, fbb.CreateVector(grads), sync, delta, trainer, step));
      break;
    }
    case MessageType::PushDenseParam: {
      const uint32_t table = TableId(p);
      const uint64_t offset = Offset(p);
      const auto values = Floats(p, p.ConsumeIntegralInRange<size_t>(0, 70));
      const bool if_unset = p.ConsumeBool();
      const bool with_state = p.ConsumeBool();
      const auto element = Floats(p, Around(p, values.size() * p.ConsumeIntegralInRange<size_t>(0, 3)));
      const auto shared = Floats(p, p.ConsumeIntegralInRange<size_t>(0, 3));
      fbb.Finish(wire::CreatePushDenseParamRequest(fbb, table, offset, fbb.CreateVector(values), if_unset, with_state,
                                                   fbb.CreateVector(element), fbb.CreateVector(shared)));
      break;
    }
    case MessageType::Barrier: {
      const std::string name = p.ConsumeRandomLengthString(16);
      const uint32_t trainer = p.ConsumeIntegralInRange<uint32_t>(0, 4);
      const uint32_t participants =
          p.ConsumeBool() ? p.ConsumeIntegral<uint32_t>() : p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const uint32_t timeout =
          p.ConsumeBool() ? p.ConsumeIntegral<uint32_t>() : p.ConsumeIntegralInRange<uint32_t>(0, 100);
      const auto values = Doubles(p);
      const bool done = p.ConsumeBool();
      fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString(name), trainer, participants, timeout,
                                            fbb.CreateVector(values), done));
      break;
    }
    case MessageType::TableStats: fbb.Finish(wire::CreateTableStatsRequest(fbb, TableId(p), p.ConsumeBool())); break;
    case MessageType::MetricReport: {
      const std::string name = p.ConsumeRandomLengthString(16);
      const uint32_t trainer = p.ConsumeIntegralInRange<uint32_t>(0, 4);
      const auto values = Doubles(p);
      fbb.Finish(wire::CreateMetricReportRequest(fbb, fbb.CreateString(name), trainer, fbb.CreateVector(values)));
      break;
    }
    case MessageType::ShuffleSend: {
      const uint64_t round = p.ConsumeIntegralInRange<uint64_t>(0, 3);
      const uint32_t from = p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const uint32_t to = p.ConsumeBool() ? p.ConsumeIntegral<uint32_t>() : p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const auto block = Block(p);
      const bool last = p.ConsumeBool();
      fbb.Finish(wire::CreateShuffleSendRequest(fbb, round, from, to, fbb.CreateVector(block), last));
      break;
    }
    case MessageType::ShuffleFetch: {
      const uint64_t round = p.ConsumeIntegralInRange<uint64_t>(0, 3);
      const uint32_t to = p.ConsumeIntegralInRange<uint32_t>(0, 3);
      const uint32_t senders = p.ConsumeIntegralInRange<uint32_t>(0, 4);
      const uint64_t max_bytes =
          p.ConsumeBool() ? p.ConsumeIntegral<uint64_t>() : p.ConsumeIntegralInRange<uint64_t>(0, 256);
      fbb.Finish(wire::CreateShuffleFetchRequest(fbb, round, to, senders, max_bytes));
      break;
    }
    case MessageType::Save: {
      const std::string path = CheckpointPath(p);
      const std::string version =
          p.ConsumeBool() ? "v" + std::to_string(p.ConsumeIntegralInRange<int>(0, 2)) : p.ConsumeRandomLengthString(12);
      const auto mode = static_cast<disk::SaveMode>(p.ConsumeIntegralInRange<uint8_t>(0, 5));
      const uint32_t table = TableId(p);
      const bool all = p.ConsumeBool();
      const bool commit = p.ConsumeBool();
      fbb.Finish(
          wire::CreateSaveRequest(fbb, fbb.CreateString(path), fbb.CreateString(version), mode, table, all, commit));
      break;
    }
    case MessageType::Load: fbb.Finish(wire::CreateLoadRequest(fbb, fbb.CreateString(CheckpointPath(p)))); break;
    case MessageType::Shrink: fbb.Finish(wire::CreateShrinkRequest(fbb, TableId(p), p.ConsumeBool())); break;
    case MessageType::Stop:
      fbb.Finish(wire::CreateStopRequest(fbb, fbb.CreateString(p.ConsumeRandomLengthString(16))));
      break;
    default: return std::string(bytes);
  }
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

}  // namespace fleetps::fuzz::ps_service
