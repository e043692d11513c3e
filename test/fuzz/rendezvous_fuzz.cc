// Fuzz target: the collective rendezvous store (trainer/collective/rendezvous.h), the
// server rank 0 runs on its PADDLE_TRAINER_ENDPOINTS port, through the real RPC server.
//
// One in-process RendezvousServer listens on loopback with a small budget (kBudget bytes),
// rebuilt every kRebuildEvery inputs (and whenever an input fills it, so that the budget is
// reached often but does not stay full). The harness connects a plain socket and sends the
// input's requests as pipelined frames, waiting for every reply.
//
// Input format (docs/FUZZING.md):
//   messages        [type selector: u8][mode: u8][length: u16 LE][length bytes]
//                   (the last message takes what is left when the input is shorter)
//   type selector   bit 0: StoreSet or StoreGet; selector >= 0xF0: a raw type from
//                   kRawTypes (unknown types, reply types, other services' requests)
//   mode            bit 0 clear: the bytes are the FlatBuffer payload as is; bit 0 set: the
//                   bytes drive a FuzzedDataProvider that builds a valid request (keys from
//                   a small set so that Sets and Gets meet, lengths near the limits, values
//                   up to a few KiB)
// At most kMaxMessages messages per input.
//
// Checks, besides the sanitizers: every request gets exactly one reply with its request id
// within kReplyDeadline and the connection stays open; a StoreSet is answered StoreSetReply
// or an ErrorReply that is InvalidArgument; a StoreGet is answered a StoreGetReply that
// verifies, or InvalidArgument for a malformed one; other types get an ErrorReply. A model
// of the store (the latest value of every key whose Set succeeded) agrees with every Get:
// found exactly for the keys set, with the value last set; the server's stored_bytes() is
// the model's keys plus values and never passes the budget; a Set refused for the budget is
// one that would have passed it.
#include <fuzzer/FuzzedDataProvider.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/net/frame.h"
#include "schemas/collective_generated.h"
#include "test/fuzz/fuzz_util.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps::fuzz {
namespace {

using trainer::collective::RendezvousServer;
using wire::MessageType;

constexpr uint64_t kBudget = 16u << 10;
constexpr int kRebuildEvery = 5000;
constexpr size_t kMaxMessages = 24;
constexpr auto kReplyDeadline = std::chrono::seconds(20);
// AuthHello / AuthProve are never sent (the frame and auth tests' ground).
const uint16_t kRawTypes[] = {0,
                              1,
                              2,
                              3,
                              0x7fff,
                              0xffff,
                              net::ReplyType(MessageType::StoreSet),
                              net::ReplyType(MessageType::StoreGet),
                              static_cast<uint16_t>(MessageType::ErrorReply)};

struct Sent {
  uint16_t type;
  uint64_t id;
  bool valid = false;  // a StoreSet / StoreGet payload that verifies: `key`, `value` hold what it asks
  std::string key;
  std::vector<uint8_t> value;
};

class Store {
 public:
  Store() {
    auto server = RendezvousServer::Start("127.0.0.1", 0, nullptr, nullptr, kBudget);
    if (!server.ok()) Fail("RendezvousServer::Start: " + server.status().ToString());
    server_ = std::move(*server);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Fail(std::string("connect: ") + std::strerror(errno));
    }
  }
  ~Store() { ::close(fd_); }

  RendezvousServer& server() { return *server_; }
  int fd() const { return fd_; }
  std::map<std::string, std::vector<uint8_t>>& model() { return model_; }
  uint64_t ModelBytes() const {
    uint64_t bytes = 0;
    for (const auto& [k, v] : model_) bytes += k.size() + v.size();
    return bytes;
  }

 private:
  std::unique_ptr<RendezvousServer> server_;
  int fd_ = -1;
  std::map<std::string, std::vector<uint8_t>> model_;  // what a successful Set left
};

std::unique_ptr<Store> g_store;
int g_inputs = 0;
uint64_t g_next_id = 1;

void SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Fail(std::string("the rendezvous closed the connection while a request was sent: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
}

void RecvAll(int fd, uint8_t* out, size_t size, std::chrono::steady_clock::time_point deadline) {
  size_t off = 0;
  while (off < size) {
    pollfd pfd{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) Fail("a request got no reply within 20 s");
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, out + off, size - off, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("the rendezvous closed the connection");
    off += static_cast<size_t>(n);
  }
}

// A well-formed request built from `bytes` through a FuzzedDataProvider.
std::string Build(bool set, std::string_view bytes) {
  FuzzedDataProvider p(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  std::string key;
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: key = ""; break;
    case 1: key = std::string(RendezvousServer::kMaxKeyBytes + p.ConsumeIntegralInRange<int>(0, 1), 'k'); break;
    default: key = "fleetps/" + std::to_string(p.ConsumeIntegralInRange<int>(0, 7)); break;
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  if (set) {
    const size_t size =
        p.ConsumeBool() ? p.ConsumeIntegralInRange<size_t>(0, 64) : p.ConsumeIntegralInRange<size_t>(0, kBudget / 2);
    const std::vector<uint8_t> value(size, p.ConsumeIntegral<uint8_t>());
    const bool no_value = size == 0 && p.ConsumeBool();
    auto k = fbb.CreateString(key);
    auto v = no_value ? flatbuffers::Offset<flatbuffers::Vector<uint8_t>>() : fbb.CreateVector(value);
    fbb.Finish(wire::CreateStoreSetRequest(fbb, k, v));
  } else {
    fbb.Finish(wire::CreateStoreGetRequest(fbb, fbb.CreateString(key)));
  }
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

// What the store reads from a StoreSet / StoreGet payload, found as it does (verifier, then
// the fields), so that raw payloads that happen to be valid are modelled too.
void Interpret(std::string_view bytes, Sent* s) {
  const std::vector<uint8_t> payload(bytes.begin(), bytes.end());  // aligned, as the server's
  flatbuffers::Verifier verifier(payload.data(), payload.size());
  if (s->type == static_cast<uint16_t>(MessageType::StoreSet)) {
    if (payload.empty() || !verifier.VerifyBuffer<wire::StoreSetRequest>(nullptr)) return;
    const auto* m = flatbuffers::GetRoot<wire::StoreSetRequest>(payload.data());
    s->key = m->key() ? m->key()->str() : "";
    if (m->value()) s->value.assign(m->value()->begin(), m->value()->end());
  } else {
    if (payload.empty() || !verifier.VerifyBuffer<wire::StoreGetRequest>(nullptr)) return;
    const auto* m = flatbuffers::GetRoot<wire::StoreGetRequest>(payload.data());
    s->key = m->key() ? m->key()->str() : "";
  }
  s->valid = true;
}

void CheckReply(Store& store, const Sent& s, uint16_t type, const std::vector<uint8_t>& payload) {
  const bool error = type == static_cast<uint16_t>(MessageType::ErrorReply);
  const Status st = error ? net::ParseErrorReply(payload.data(), payload.size(), "store") : Status::OK();
  const bool is_set = s.type == static_cast<uint16_t>(MessageType::StoreSet);
  const bool is_get = s.type == static_cast<uint16_t>(MessageType::StoreGet);
  if (!is_set && !is_get) {
    if (!error) Fail("type " + std::to_string(s.type) + " was answered with type " + std::to_string(type));
    return;
  }
  if (error) {
    if (!st.IsInvalidArgument()) Fail("a store request was answered " + st.ToString());
    if (!s.valid) return;
    const bool bad_key = s.key.empty() || s.key.size() > RendezvousServer::kMaxKeyBytes;
    if (is_get) Fail("a well-formed StoreGet was refused: " + st.ToString());
    if (bad_key) return;
    auto it = store.model().find(s.key);
    const uint64_t after = store.ModelBytes() - (it == store.model().end() ? 0 : s.key.size() + it->second.size()) +
                           s.key.size() + s.value.size();
    if (after <= kBudget) Fail("a StoreSet within the budget was refused: " + st.ToString());
    if (st.message().find("store_budget_bytes") == std::string::npos) Fail("a budget refusal does not name the option");
    return;
  }
  if (type != net::ReplyType(static_cast<MessageType>(s.type))) Fail("wrong reply type " + std::to_string(type));
  flatbuffers::Verifier verifier(payload.data(), payload.size());
  if (is_set) {
    if (!verifier.VerifyBuffer<wire::StoreSetReply>(nullptr)) Fail("StoreSetReply does not verify");
    if (!s.valid) Fail("a StoreSet that does not verify was accepted");
    if (s.key.empty() || s.key.size() > RendezvousServer::kMaxKeyBytes) Fail("a StoreSet with a bad key was accepted");
    store.model()[s.key] = s.value;
    return;
  }
  if (!verifier.VerifyBuffer<wire::StoreGetReply>(nullptr)) Fail("StoreGetReply does not verify");
  if (!s.valid) Fail("a StoreGet that does not verify was answered");
  const auto* r = flatbuffers::GetRoot<wire::StoreGetReply>(payload.data());
  auto it = store.model().find(s.key);
  if (r->found() != (it != store.model().end())) Fail("StoreGet of '" + s.key.substr(0, 32) + "' disagrees on found");
  if (r->found()) {
    const std::vector<uint8_t> got =
        r->value() ? std::vector<uint8_t>(r->value()->begin(), r->value()->end()) : std::vector<uint8_t>{};
    if (got != it->second) Fail("StoreGet returned another value than the last one set");
  }
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace fleetps;
  fuzz::MaybeWriteSeeds("rendezvous_fuzz", [](fuzz::SeedWriter& seeds) {
    // What the tests send (communicator_test.cc): Gloo's per-rank address keys and the NCCL
    // id, set and read back; then an oversized key, a value past the budget, a raw Set.
    auto message = [](uint8_t selector, uint8_t mode, std::string_view bytes) {
      std::string m;
      m.push_back(static_cast<char>(selector));
      m.push_back(static_cast<char>(mode));
      m.push_back(static_cast<char>(bytes.size() & 0xff));
      m.push_back(static_cast<char>(bytes.size() >> 8));
      m.append(bytes);
      return m;
    };
    flatbuffers::FlatBufferBuilder fbb(64);
    const std::vector<uint8_t> id(128, 7);
    fbb.Finish(wire::CreateStoreSetRequest(fbb, fbb.CreateString("fleetps/nccl-unique-id"), fbb.CreateVector(id)));
    const std::string raw_set(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
    fbb.Clear();
    fbb.Finish(wire::CreateStoreGetRequest(fbb, fbb.CreateString("fleetps/nccl-unique-id")));
    const std::string raw_get(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
    seeds.Add(message(0, 0, raw_set) + message(1, 0, raw_get));
    seeds.Add(message(0, 1, "\x02\x03\x10\x20") + message(1, 1, "\x02\x03") + message(0, 1, "\x03\x01\xff\xff\x01"));
    seeds.Add(message(0, 1, std::string("\x01\x01", 2)) + message(1, 1, std::string("\x00", 1)));
    std::string fill;
    for (int k = 0; k < 6; ++k) {
      fill += message(0, 1, std::string{'\x02', static_cast<char>(k), '\x00', '\x7f', '\x7f', '\x10'});
    }
    seeds.Add(fill + message(1, 1, "\x02\x05"));
    seeds.Add(message(0xf0, 0, raw_set) + message(0xf8, 0, "") + message(0, 0, "garbage"));
  });
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  using namespace fleetps::fuzz;
  if (!g_store || ++g_inputs % kRebuildEvery == 0) g_store = std::make_unique<Store>();
  Store& store = *g_store;
  Reader in(data, size);
  std::vector<Sent> sent;
  std::string wire_bytes;
  while (!in.empty() && sent.size() < kMaxMessages) {
    const uint8_t selector = in.U8();
    const uint8_t mode = in.U8();
    const std::string_view bytes = in.Bytes(in.U16());
    Sent s;
    s.id = g_next_id++;
    std::string payload;
    if (selector >= 0xF0) {
      s.type = kRawTypes[(selector - 0xF0) % std::size(kRawTypes)];
      payload = std::string(bytes);
    } else {
      const bool set = (selector & 1) == 0;
      s.type = static_cast<uint16_t>(set ? MessageType::StoreSet : MessageType::StoreGet);
      payload = (mode & 1) ? Build(set, bytes) : std::string(bytes);
      Interpret(payload, &s);
    }
    std::string header(net::kFrameHeaderSize, '\0');
    net::EncodeFrameHeader(s.type, s.id, static_cast<uint32_t>(payload.size()),
                           reinterpret_cast<uint8_t*>(header.data()));
    wire_bytes += header + payload;
    sent.push_back(std::move(s));
  }
  if (sent.empty()) return 0;
  SendAll(store.fd(), wire_bytes);
  // The rendezvous answers one connection's requests in order (one io thread, no lanes).
  const auto deadline = std::chrono::steady_clock::now() + kReplyDeadline;
  for (const Sent& s : sent) {
    uint8_t header[net::kFrameHeaderSize];
    RecvAll(store.fd(), header, sizeof(header), deadline);
    wire::FrameHeader h;
    const Status st = net::DecodeFrameHeader(header, 64u << 20, "store", &h);
    if (!st.ok()) Fail("a reply header does not decode: " + st.ToString());
    if (h.request_id() != s.id) Fail("reply ids out of order: expected " + std::to_string(s.id));
    std::vector<uint8_t> payload(h.payload_length());
    RecvAll(store.fd(), payload.data(), payload.size(), deadline);
    CheckReply(store, s, h.type(), payload);
  }
  const uint64_t stored = store.server().stored_bytes();
  if (stored != store.ModelBytes()) {
    Fail("the store holds " + std::to_string(stored) + " bytes, the model " + std::to_string(store.ModelBytes()));
  }
  if (stored > kBudget) Fail("the store holds more than its budget");
  if (stored > kBudget * 3 / 4) g_store = std::make_unique<Store>();  // full: start afresh
  return 0;
}
