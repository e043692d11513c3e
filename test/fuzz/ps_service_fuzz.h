#pragma once
// The parts of the ps_service_fuzz target shared by its files: ps_service_fuzz.cc (the
// in-process pservers, the exchange and the reply checks; the input format and the checks
// are described there), ps_service_fuzz_requests.cc (structure-aware requests) and
// ps_service_fuzz_seeds.cc (the seed corpus).
#include <fcntl.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/executor.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_server.h"
#include "common/optimizer/optimizer.h"
#include "schemas/ps_generated.h"
#include "schemas/records_generated.h"
#include "server/service/ps_service.h"
#include "server/table/table_set.h"
#include "test/fuzz/fuzz_util.h"

namespace fleetps::fuzz::ps_service {

using wire::MessageType;

inline constexpr MessageType kTypes[] = {
    MessageType::Ping,         MessageType::PullSparse,     MessageType::PushSparse,   MessageType::PullDense,
    MessageType::PushDense,    MessageType::PushDenseParam, MessageType::Barrier,      MessageType::TableStats,
    MessageType::MetricReport, MessageType::ShuffleSend,    MessageType::ShuffleFetch, MessageType::PullRows,
    MessageType::WriteRows};
inline constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
inline constexpr MessageType kAdminTypes[] = {MessageType::Save, MessageType::Load, MessageType::Shrink,
                                              MessageType::Stop};
inline constexpr size_t kNumAdminTypes = sizeof(kAdminTypes) / sizeof(kAdminTypes[0]);
inline constexpr int kClearRootEvery = 500;
inline constexpr uint16_t kRawTypes[] = {0, 18, 99, 0x7ffe, 0x7fff, 0x8001, 0x8002, 0xffff, 1000, 0x4000};
inline constexpr size_t kMaxMessages = 16;
inline constexpr int kRebuildEvery = 20000;
inline constexpr auto kReplyDeadline = std::chrono::seconds(20);

inline bool IsAdmin(uint16_t type) {
  for (MessageType t : kAdminTypes) {
    if (static_cast<uint16_t>(t) == type) return true;
  }
  return false;
}

// Types the fuzzer may send: kTypes (and kAdminTypes to server C), and types with no name
// (unknown to this build).
inline bool Sendable(uint16_t type, bool admin_server) {
  for (MessageType t : kTypes) {
    if (static_cast<uint16_t>(t) == type) return true;
  }
  if (IsAdmin(type)) return admin_server;
  const auto base = static_cast<MessageType>(type);
  if (type & net::kReplyBit) return true;  // never a request type
  if (base >= MessageType::MIN && base <= MessageType::MAX) {
    const char* name = wire::EnumNameMessageType(base);
    return name == nullptr || *name == '\0' || base == MessageType::Invalid || base == MessageType::ErrorReply;
  }
  return true;
}

inline uint32_t DimOf(const config::ServerOptions& o, uint32_t table_id) {
  for (const auto& t : o.tables) {
    if (t.id == table_id) return static_cast<uint32_t>(t.dim);
  }
  return 0;
}

// Floats of a sparse row as PullRows / WriteRows carry it: weights and optimizer state.
inline uint32_t CoreOf(const config::ServerOptions& o, uint32_t table_id) {
  for (const auto& t : o.tables) {
    if (t.id != table_id || t.kind != TableKind::kSparse) continue;
    auto opt = optimizer::CreateOptimizer(t.optimizer);
    if (!opt.ok()) Fail("fuzz table optimizer: " + opt.status().ToString());
    return static_cast<uint32_t>(t.dim) + (*opt)->StateSize(static_cast<uint32_t>(t.dim));
  }
  return 0;
}

// Server C's scratch directory: its checkpoint root ("/root") and a directory no request
// may write to ("/outside").
const std::string& ScratchDir();

// A valid request of `type` for a server with options `o`, built from `bytes` through a
// FuzzedDataProvider (the input's mode bit 0).
std::string Build(MessageType type, std::string_view bytes, const config::ServerOptions& o);

// The seed corpus (fleetps::fuzz::MaybeWriteSeeds).
void WriteSeeds(SeedWriter& seeds);

}  // namespace fleetps::fuzz::ps_service
