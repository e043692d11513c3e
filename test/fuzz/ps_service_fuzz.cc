// Fuzz target: every request handler of the pserver, through the real RPC server
// (common/net/rpc_server.h) and PsService (server/service/ps_service.h) over real tables
// (a CTR-accessor sparse table, a plain sparse table and a dense table).
//
// Three in-process pservers listen on loopback (built once, rebuilt every kRebuildEvery
// inputs so that rows created by pushes cannot grow without end): server A is the only
// server of its cluster (owns every key; nonfinite_gradients: reject; SGD/Adagrad), server
// B is server 0 of two (owns half the keys and half the dense table; skip; Adam with
// weight bounds), server C is A with a checkpoint root in a private temporary directory
// and also takes the admin requests (Save, Load, Shrink, Stop; a Stop rebuilds it before
// the next input, as a restart would). The harness connects a plain socket, sends the
// input's requests as pipelined frames and waits for every reply.
//
// Input format (docs/FUZZING.md):
//   byte 0          bit 0: server (0 = A, 1 = B); bit 1 set: server C
//   then messages   [type selector: u8][mode: u8][length: u16 LE][length bytes]
//                   (the last message takes what is left when the input is shorter)
//   type selector   < 0xF0: the (selector % n)-th request type of kTypes (n = 13), or for
//                   server C of kTypes then kAdminTypes (n = 17);
//                   >= 0xF0: a raw type from kRawTypes (unknown types, reply types)
//   mode            bit 0 clear: the bytes are the FlatBuffer payload as is;
//                   bit 0 set: the bytes drive a FuzzedDataProvider that builds a valid
//                   request of that type with the generated builders (structure-aware)
// At most kMaxMessages messages per input. Admin requests go to server C only; other named
// types not in these lists (AuthHello, AuthProve: the frame and auth tests' ground) are
// never sent. Checkpoints written under C's root are removed every kClearRootEvery inputs.
//
// Checks, besides the sanitizers: every request gets exactly one reply with its request
// id, within kReplyDeadline; the reply is either the request's reply type, whose payload
// passes the FlatBuffers verifier and agrees with the request (PullSparse: keys x dim
// values; PullDense: count values, and with_state their state; PushSparse: applied +
// skipped = keys; PullRows: keys x row floats and one flag per key; WriteRows: written +
// merged = keys; Save, Load, Shrink, Stop: a reply that verifies; nothing is ever written
// outside C's root), or an ErrorReply
// that parses and is not Internal (Internal means a handler threw or dropped a request);
// an unknown type is answered with an ErrorReply; the connection is never closed. Barriers
// left waiting at the end of an input are expired through BarrierManager::ExpireDeadlines
// (what the pserver's 50 ms sweep does), so each input ends with nothing in flight.
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

namespace fleetps::fuzz {
namespace {

using wire::MessageType;
using Clock = std::chrono::steady_clock;

constexpr MessageType kTypes[] = {MessageType::Ping,        MessageType::PullSparse,   MessageType::PushSparse,
                                  MessageType::PullDense,   MessageType::PushDense,    MessageType::PushDenseParam,
                                  MessageType::Barrier,     MessageType::TableStats,   MessageType::MetricReport,
                                  MessageType::ShuffleSend, MessageType::ShuffleFetch, MessageType::PullRows,
                                  MessageType::WriteRows};
constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
constexpr MessageType kAdminTypes[] = {MessageType::Save, MessageType::Load, MessageType::Shrink, MessageType::Stop};
constexpr size_t kNumAdminTypes = sizeof(kAdminTypes) / sizeof(kAdminTypes[0]);
constexpr int kClearRootEvery = 500;
constexpr uint16_t kRawTypes[] = {0, 18, 99, 0x7ffe, 0x7fff, 0x8001, 0x8002, 0xffff, 1000, 0x4000};
constexpr size_t kMaxMessages = 16;
constexpr int kRebuildEvery = 20000;
constexpr auto kReplyDeadline = std::chrono::seconds(20);

bool IsAdmin(uint16_t type) {
  for (MessageType t : kAdminTypes) {
    if (static_cast<uint16_t>(t) == type) return true;
  }
  return false;
}

// Types the fuzzer may send: kTypes (and kAdminTypes to server C), and types with no name
// (unknown to this build).
bool Sendable(uint16_t type, bool admin_server) {
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

uint32_t DimOf(const config::ServerOptions& o, uint32_t table_id) {
  for (const auto& t : o.tables) {
    if (t.id == table_id) return static_cast<uint32_t>(t.dim);
  }
  return 0;
}

// Floats of a sparse row as PullRows / WriteRows carry it: weights and optimizer state.
uint32_t CoreOf(const config::ServerOptions& o, uint32_t table_id) {
  for (const auto& t : o.tables) {
    if (t.id != table_id || t.kind != TableKind::kSparse) continue;
    auto opt = optimizer::CreateOptimizer(t.optimizer);
    if (!opt.ok()) Fail("fuzz table optimizer: " + opt.status().ToString());
    return static_cast<uint32_t>(t.dim) + (*opt)->StateSize(static_cast<uint32_t>(t.dim));
  }
  return 0;
}

// ---- one in-process pserver -----------------------------------------------------------

class Server {
 public:
  explicit Server(config::ServerOptions options) : options_(std::move(options)) {
    if (Status st = config::ValidateServerOptions(options_); !st.ok()) Fail("bad fuzz options: " + st.ToString());
    auto tables = server::TableSet::Create(options_);
    if (!tables.ok()) Fail("TableSet::Create: " + tables.status().ToString());
    tables_ = std::move(tables).value();
    io_ = std::make_unique<net::IoThreads>(options_.io_threads);
    executors_ = std::make_unique<ExecutorPool>(static_cast<size_t>(options_.shard_threads));
    const bool admin = !options_.checkpoint_root.empty();
    service_ =
        std::make_unique<server::PsService>(options_, *tables_, *executors_, [this, admin](const std::string& reason) {
          if (!admin) Fail("Stop reached a server that is never sent one: " + reason);
          stopped_ = true;
        });
    net::RpcServerOptions rpc;
    rpc.host = "127.0.0.1";
    rpc.port = 0;
    rpc.max_payload = options_.max_message_bytes;
    rpc.max_inflight_bytes = options_.max_inflight_bytes;
    rpc_ = std::make_unique<net::RpcServer>(*io_, rpc, [svc = service_.get()](net::Request req, net::Responder r) {
      svc->Handle(std::move(req), std::move(r));
    });
    if (Status st = rpc_->Start(); !st.ok()) Fail("RpcServer::Start: " + st.ToString());
    Connect();
  }

  ~Server() {
    if (fd_ >= 0) ::close(fd_);
    rpc_->StopAccepting();
    service_->barriers().AbortAll("fuzz server rebuilt");
    if (!rpc_->Drain(std::chrono::seconds(10))) Fail("requests still in flight at rebuild");
    rpc_->Stop();
    executors_->Stop();
    io_->Stop();
    rpc_.reset();
    service_.reset();
    executors_.reset();
    io_.reset();
    tables_.reset();
  }

  const config::ServerOptions& options() const { return options_; }
  bool admin() const { return !options_.checkpoint_root.empty(); }
  bool stopped() const { return stopped_; }
  server::BarrierManager& barriers() { return service_->barriers(); }
  int fd() const { return fd_; }

 private:
  void Connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) Fail(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(rpc_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Fail(std::string("connect: ") + std::strerror(errno));
    }
  }

  config::ServerOptions options_;
  std::unique_ptr<server::TableSet> tables_;
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<ExecutorPool> executors_;
  std::unique_ptr<server::PsService> service_;
  std::unique_ptr<net::RpcServer> rpc_;
  int fd_ = -1;
  std::atomic<bool> stopped_{false};
};

std::unique_ptr<Server> g_servers[3];
int g_inputs = 0;
uint64_t g_next_id = 1;

// Server C's checkpoint root: <tmp>/root inside a private directory (removed at exit);
// <tmp>/outside must stay empty (a Save or Load that leaves the root would write there).
std::string g_scratch;

void RemoveScratch() {
  std::error_code ignored;
  std::filesystem::remove_all(g_scratch, ignored);
}

const std::string& ScratchDir() {
  if (g_scratch.empty()) {
    std::string t = (std::filesystem::temp_directory_path() / "ps_service_fuzz.XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) Fail(std::string("mkdtemp: ") + std::strerror(errno));
    std::filesystem::create_directories(t + "/root");
    std::filesystem::create_directories(t + "/outside");
    g_scratch = t;
    std::atexit(RemoveScratch);
  }
  return g_scratch;
}

void CheckOutsideUntouched() {
  if (!std::filesystem::is_empty(ScratchDir() + "/outside")) Fail("a request wrote outside the checkpoint root");
}

Server& GetServer(int which) {
  if (++g_inputs % kRebuildEvery == 0) {
    for (auto& s : g_servers) s.reset();
  }
  if (which == 2 && g_servers[2] && g_servers[2]->stopped()) g_servers[2].reset();  // a restart after Stop
  if (which == 2 && g_inputs % kClearRootEvery == 0) {
    std::filesystem::remove_all(ScratchDir() + "/root");
    std::filesystem::create_directories(ScratchDir() + "/root");
  }
  if (!g_servers[which]) {
    config::ServerOptions o = FuzzServerOptions(which == 1 ? 2 : 1, which == 1);
    if (which == 2) o.checkpoint_root = ScratchDir() + "/root";
    g_servers[which] = std::make_unique<Server>(std::move(o));
  }
  return *g_servers[which];
}

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

// ---- reply checks ---------------------------------------------------------------------

struct Sent {
  uint16_t type = 0;
  std::string payload;
};

template <typename T>
const T* VerifiedAs(const std::string& bytes) {
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (bytes.empty() || !v.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(bytes.data());
}

template <typename T>
const T* ReplyAs(const std::string& reply, const Sent& req) {
  const T* r = VerifiedAs<T>(reply);
  if (r == nullptr) Fail("the " + net::MessageTypeName(req.type) + " reply fails FlatBuffers verification");
  return r;
}

void CheckReply(const Sent& req, uint16_t reply_type, const std::string& reply, const config::ServerOptions& o) {
  const std::string what = net::MessageTypeName(req.type) + " request";
  if (reply_type == static_cast<uint16_t>(MessageType::ErrorReply)) {
    const Status st = net::ParseErrorReply(reinterpret_cast<const uint8_t*>(reply.data()), reply.size(), "pserver");
    if (st.ok()) Fail(what + ": ErrorReply parsed as OK");
    if (st.IsCorruption() && st.message().find("malformed error reply") != std::string::npos) {
      Fail(what + ": the server sent a malformed ErrorReply");
    }
    if (st.code() == StatusCode::kInternal) Fail(what + " answered Internal: " + st.ToString());
    return;
  }
  bool known = IsAdmin(req.type);
  for (MessageType t : kTypes) known |= static_cast<uint16_t>(t) == req.type;
  if (!known) Fail(what + " (unknown type) answered with type " + std::to_string(reply_type) + ", not an ErrorReply");
  if (reply_type != (req.type | net::kReplyBit)) {
    Fail(what + " answered with type " + net::MessageTypeName(reply_type));
  }
  switch (static_cast<MessageType>(req.type)) {
    case MessageType::Ping: {
      const auto* r = ReplyAs<wire::PingReply>(reply, req);
      if (r->num_servers() != o.endpoints.size() || r->tables() == nullptr || r->tables()->size() != o.tables.size()) {
        Fail("Ping reply disagrees with the server's configuration");
      }
      break;
    }
    case MessageType::PullSparse: {
      const auto* r = ReplyAs<wire::PullSparseReply>(reply, req);
      const auto* q = VerifiedAs<wire::PullSparseRequest>(req.payload);
      if (q == nullptr) Fail("a PullSparse request that fails verification was answered with values");
      const size_t keys = q->keys() ? q->keys()->size() : 0;
      const uint32_t dim = DimOf(o, q->table_id());
      const size_t values = r->values() ? r->values()->size() : 0;
      if (r->dim() != dim || values != keys * dim) {
        Fail("PullSparse of " + std::to_string(keys) + " keys (dim " + std::to_string(dim) + ") got " +
             std::to_string(values) + " values, reply dim " + std::to_string(r->dim()));
      }
      break;
    }
    case MessageType::PushSparse: {
      const auto* r = ReplyAs<wire::PushSparseReply>(reply, req);
      const auto* q = VerifiedAs<wire::PushSparseRequest>(req.payload);
      if (q == nullptr) Fail("a PushSparse request that fails verification was applied");
      const size_t keys = q->keys() ? q->keys()->size() : 0;
      if (size_t{r->applied()} + r->skipped() != keys) {
        Fail("PushSparse of " + std::to_string(keys) + " keys: applied " + std::to_string(r->applied()) +
             " + skipped " + std::to_string(r->skipped()));
      }
      break;
    }
    case MessageType::PullRows: {
      const auto* r = ReplyAs<wire::PullRowsReply>(reply, req);
      const auto* q = VerifiedAs<wire::PullRowsRequest>(req.payload);
      if (q == nullptr) Fail("a PullRows request that fails verification was answered with rows");
      const size_t keys = q->keys() ? q->keys()->size() : 0;
      const uint32_t core = CoreOf(o, q->table_id());
      const size_t rows = r->rows() ? r->rows()->size() : 0;
      const size_t flags = r->flags() ? r->flags()->size() : 0;
      if (r->row_floats() != core || rows != keys * core || flags != keys) {
        Fail("PullRows of " + std::to_string(keys) + " keys (" + std::to_string(core) + " row floats) got " +
             std::to_string(rows) + " floats and " + std::to_string(flags) + " flags");
      }
      break;
    }
    case MessageType::WriteRows: {
      const auto* r = ReplyAs<wire::WriteRowsReply>(reply, req);
      const auto* q = VerifiedAs<wire::WriteRowsRequest>(req.payload);
      if (q == nullptr) Fail("a WriteRows request that fails verification was applied");
      const size_t keys = q->keys() ? q->keys()->size() : 0;
      if (size_t{r->written()} + r->merged() != keys) {
        Fail("WriteRows of " + std::to_string(keys) + " keys: written " + std::to_string(r->written()) + " + merged " +
             std::to_string(r->merged()));
      }
      break;
    }
    case MessageType::PullDense: {
      const auto* r = ReplyAs<wire::PullDenseReply>(reply, req);
      const auto* q = VerifiedAs<wire::PullDenseRequest>(req.payload);
      if (q == nullptr) Fail("a PullDense request that fails verification was answered with values");
      const size_t values = r->values() ? r->values()->size() : 0;
      if (values != q->count() || r->offset() != q->offset()) {
        Fail("PullDense of " + std::to_string(q->count()) + " floats got " + std::to_string(values));
      }
      // With the state: the element state of every value and the shared state, of the sizes
      // the request named (a table of other sizes refuses it).
      const size_t element = r->element_state() ? r->element_state()->size() : 0;
      const size_t shared = r->shared_state() ? r->shared_state()->size() : 0;
      if (q->with_state() &&
          (element != q->count() * q->element_state_floats() || shared != q->shared_state_floats())) {
        Fail("PullDense with state of " + std::to_string(q->count()) + " floats got " + std::to_string(element) +
             " + " + std::to_string(shared) + " floats of state");
      }
      break;
    }
    case MessageType::PushDense: ReplyAs<wire::PushDenseReply>(reply, req); break;
    case MessageType::PushDenseParam: ReplyAs<wire::PushDenseParamReply>(reply, req); break;
    case MessageType::Barrier: ReplyAs<wire::BarrierReply>(reply, req); break;
    case MessageType::TableStats: ReplyAs<wire::TableStatsReply>(reply, req); break;
    case MessageType::MetricReport: ReplyAs<wire::MetricReportReply>(reply, req); break;
    case MessageType::ShuffleSend: ReplyAs<wire::ShuffleSendReply>(reply, req); break;
    case MessageType::ShuffleFetch: ReplyAs<wire::ShuffleFetchReply>(reply, req); break;
    case MessageType::Save: ReplyAs<wire::SaveReply>(reply, req); break;
    case MessageType::Load: ReplyAs<wire::LoadReply>(reply, req); break;
    case MessageType::Shrink: ReplyAs<wire::ShrinkReply>(reply, req); break;
    case MessageType::Stop: ReplyAs<wire::StopReply>(reply, req); break;
    default: Fail(what + ": no reply check for this type");
  }
}

// ---- the exchange ---------------------------------------------------------------------

void SendAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail(std::string("send to the pserver failed (connection closed?): ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

void Exchange(Server& server, const std::vector<std::pair<uint16_t, std::string>>& messages) {
  std::map<uint64_t, Sent> pending;
  std::string out;
  for (const auto& [type, payload] : messages) {
    const uint64_t id = g_next_id++;
    std::array<uint8_t, net::kFrameHeaderSize> header;
    net::EncodeFrameHeader(type, id, static_cast<uint32_t>(payload.size()), header.data());
    out.append(reinterpret_cast<const char*>(header.data()), header.size());
    out += payload;
    pending.emplace(id, Sent{type, payload});
  }
  SendAll(server.fd(), out);

  const auto deadline = Clock::now() + kReplyDeadline;
  std::string in;
  std::vector<char> buf(1 << 16);
  while (!pending.empty()) {
    // Replies already buffered.
    while (in.size() >= net::kFrameHeaderSize) {
      wire::FrameHeader h;
      const Status st = net::DecodeFrameHeader(reinterpret_cast<const uint8_t*>(in.data()), 64u << 20, "pserver", &h);
      if (!st.ok()) Fail("the pserver sent a bad frame header: " + st.ToString());
      const size_t total = net::kFrameHeaderSize + h.payload_length();
      if (in.size() < total) break;
      const auto it = pending.find(h.request_id());
      if (it == pending.end())
        Fail("reply for request id " + std::to_string(h.request_id()) + ", which is not pending");
      CheckReply(it->second, h.type(), in.substr(net::kFrameHeaderSize, h.payload_length()), server.options());
      pending.erase(it);
      in.erase(0, total);
    }
    if (pending.empty()) break;
    // Barriers that wait for trainers this input never sends: expire them once every
    // pending request is such a parked barrier (as the pserver's deadline sweep would).
    size_t barriers = 0;
    for (const auto& [id, s] : pending) barriers += s.type == static_cast<uint16_t>(MessageType::Barrier);
    if (barriers == pending.size() && server.barriers().waiting() >= barriers) {
      server.barriers().ExpireDeadlines(Clock::now() + std::chrono::hours(2));
    }
    if (Clock::now() > deadline) {
      std::string types;
      for (const auto& [id, s] : pending) types += " " + net::MessageTypeName(s.type);
      Fail("no reply within " + std::to_string(kReplyDeadline.count()) + " s to:" + types);
    }
    pollfd pfd{server.fd(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 10);
    if (ready < 0 && errno != EINTR) Fail(std::string("poll: ") + std::strerror(errno));
    if (ready <= 0) continue;
    const ssize_t n = ::recv(server.fd(), buf.data(), buf.size(), 0);
    if (n == 0) Fail("the pserver closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      Fail(std::string("recv: ") + std::strerror(errno));
    }
    in.append(buf.data(), static_cast<size_t>(n));
  }
  if (!in.empty()) Fail("the pserver sent bytes beyond the replies");
}

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

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::MaybeWriteSeeds("ps_service_fuzz", fleetps::fuzz::WriteSeeds);
  fleetps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  using namespace fleetps::fuzz;
  Reader in(data, size);
  if (in.empty()) return 0;
  const uint8_t first = in.U8();
  const int which = (first & 2) ? 2 : (first & 1);
  Server& server = GetServer(which);
  const size_t types = server.admin() ? kNumTypes + kNumAdminTypes : kNumTypes;
  std::vector<std::pair<uint16_t, std::string>> messages;
  while (!in.empty() && messages.size() < kMaxMessages) {
    const uint8_t selector = in.U8();
    const uint8_t mode = in.U8();
    const uint16_t length = in.U16();
    const std::string_view bytes = in.Bytes(length);
    const size_t pick = selector % types;
    const uint16_t type = selector >= 0xF0   ? kRawTypes[(selector - 0xF0) % (sizeof(kRawTypes) / sizeof(kRawTypes[0]))]
                          : pick < kNumTypes ? static_cast<uint16_t>(kTypes[pick])
                                             : static_cast<uint16_t>(kAdminTypes[pick - kNumTypes]);
    if (!Sendable(type, server.admin())) continue;
    std::string payload =
        (mode & 1) ? Build(static_cast<MessageType>(type), bytes, server.options()) : std::string(bytes);
    messages.emplace_back(type, std::move(payload));
  }
  if (!messages.empty()) Exchange(server, messages);
  if (server.admin()) CheckOutsideUntouched();
  return 0;
}
