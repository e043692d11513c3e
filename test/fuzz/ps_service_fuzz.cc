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
#include "test/fuzz/ps_service_fuzz.h"

namespace fleetps::fuzz::ps_service {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

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

namespace {

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

}  // namespace
}  // namespace fleetps::fuzz::ps_service

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::MaybeWriteSeeds("ps_service_fuzz", fleetps::fuzz::ps_service::WriteSeeds);
  fleetps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  using namespace fleetps::fuzz;
  using namespace fleetps::fuzz::ps_service;
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
