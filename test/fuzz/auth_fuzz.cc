// Fuzz target: the shared-secret handshake (AuthHello / AuthProve, common/net/auth.h) as
// the server sees it, and what the RPC server lets a peer do before and during it
// (common/net/rpc_server.h).
//
// Two in-process RpcServers on loopback hold the same secret, which the harness never
// uses: server R requires authentication (server.auth: required), server S has the secret
// but does not (auth: auto on loopback, or off). Each input opens a fresh plain socket to
// one of them and sends its messages in order, reading the answers the messages expect.
//
// Input format (docs/FUZZING.md):
//   byte 0          bit 0: server (0 = R, 1 = S)
//   then messages   [kind: u8][length: u16 LE][length bytes]
//                   (the last message takes what is left when the input is shorter)
//   kind % 5        0: the bytes as they are (garbage, partial headers, several frames)
//                   1: one frame: bytes[0] picks the type (kTypes, or a raw u16 when it is
//                      >= 0xF0), the rest is its payload, length exact; its answer is read
//                   2: one frame announcing the u32 in bytes[0..4) as its length (up to the
//                      server's max_payload), followed by the rest of the bytes
//                   3: a well-formed AuthHello with a 32-byte nonce from the bytes; answer read
//                   4: a well-formed AuthProve: bytes[0] % 3 picks its proof: 0 the last
//                      server_proof echoed back (reflection), 1 an HMAC of the right message
//                      under a key made of the bytes (a wrong secret), 2 the bytes as they are
//                      (32 of them when there are); answer read
// At most kMaxMessages messages per input. After the last one the harness shuts its side
// down and reads until the server closes.
//
// Checks, besides the sanitizers:
//  - nobody authenticates without the secret: R's handler is never called, and S's only
//    ever sees requests with authenticated = false and auth_configured = true; an answer to
//    AuthProve is always an ErrorReply (PermissionDenied or InvalidArgument), never its reply
//    type;
//  - before authentication R allocates no payload above kMaxHandshakePayload (the
//    payload_allocator sees every allocation), and neither server allocates a handshake
//    payload above it;
//  - every frame read from a server has a valid header, and an ErrorReply parses;
//  - a frame sent on a connection still in step is answered (or the connection closed)
//    within kAnswerDeadline;
//  - after the connection ends each server is back to zero connections, nothing in flight
//    and no in-flight bytes within kSettleDeadline (nothing leaks per connection).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/net/auth.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"
#include "test/fuzz/fuzz_util.h"

namespace fleetps::fuzz {
namespace {

using wire::MessageType;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxMessages = 32;
constexpr uint32_t kMaxPayload = 1u << 20;  // both servers' max_message_bytes
constexpr auto kAnswerDeadline = std::chrono::seconds(5);
constexpr auto kSettleDeadline = std::chrono::seconds(5);
constexpr const char* kSecret = "the auth fuzz target's secret, never used by the harness";

constexpr MessageType kTypes[] = {MessageType::AuthHello,  MessageType::AuthProve,     MessageType::Ping,
                                  MessageType::PushSparse, MessageType::Barrier,       MessageType::Heartbeat,
                                  MessageType::Stop,       MessageType::PushDenseParam};

// One server and what its handler and allocator saw.
struct Server {
  bool required;
  std::atomic<bool> bad_request{false};    // the handler saw what it must not
  std::atomic<uint32_t> largest_alloc{0};  // largest payload allocated (nobody authenticates)
  net::IoThreads io{1};
  std::unique_ptr<net::RpcServer> rpc;

  explicit Server(bool auth_required) : required(auth_required) {
    net::RpcServerOptions o;
    o.host = "127.0.0.1";
    o.max_payload = kMaxPayload;
    o.max_inflight_bytes = 8u << 20;
    o.read_timeout = std::chrono::milliseconds(1000);
    o.auth_key = std::make_shared<const net::AuthKey>(kSecret);
    o.auth_required = auth_required;
    o.auth_timeout = std::chrono::milliseconds(2000);
    o.payload_allocator = [this](uint32_t bytes) -> std::shared_ptr<uint8_t[]> {
      uint32_t seen = largest_alloc.load();
      while (bytes > seen && !largest_alloc.compare_exchange_weak(seen, bytes)) {
      }
      return nullptr;  // ordinary memory
    };
    rpc = std::make_unique<net::RpcServer>(io, o, [this](net::Request req, net::Responder r) {
      if (required || req.authenticated || !req.auth_configured) bad_request = true;
      r.SendError(Status::InvalidArgument("fuzz handler"));
    });
    if (Status st = rpc->Start(); !st.ok()) Fail("RpcServer::Start: " + st.ToString());
  }
};

Server& GetServer(bool required) {
  static Server* servers[2] = {nullptr, nullptr};  // never destroyed: the io threads run to exit
  Server*& s = servers[required ? 0 : 1];
  if (s == nullptr) s = new Server(required);
  return *s;
}

int Dial(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Fail(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail(std::string("connect: ") + std::strerror(errno));
  }
  return fd;
}

// The harness's side of one connection.
class Peer {
 public:
  explicit Peer(uint16_t port) : fd_(Dial(port)) {}
  ~Peer() { ::close(fd_); }
  bool open() const { return open_; }

  void Write(std::string_view bytes) {
    size_t done = 0;
    while (open_ && done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open_ = false;  // the server closed (reset) the connection
        return;
      }
      done += static_cast<size_t>(n);
    }
  }
  void WriteFrame(uint16_t type, uint32_t announced, std::string_view payload) {
    std::string frame(net::kFrameHeaderSize, '\0');
    net::EncodeFrameHeader(type, next_id_++, announced, reinterpret_cast<uint8_t*>(frame.data()));
    frame.append(payload);
    Write(frame);
  }

  struct Frame {
    uint16_t type = 0;
    std::string payload;
  };
  // The next frame from the server, or false when it closed the connection (or sent
  // nothing before `deadline`: then `timed_out`).
  bool ReadFrame(Clock::time_point deadline, Frame* out, bool* timed_out) {
    *timed_out = false;
    std::string header;
    if (!ReadExactly(net::kFrameHeaderSize, deadline, &header, timed_out)) return false;
    wire::FrameHeader h;
    const Status st =
        net::DecodeFrameHeader(reinterpret_cast<const uint8_t*>(header.data()), kMaxPayload, "server", &h);
    if (!st.ok()) Fail("the server sent a bad frame header: " + st.ToString());
    out->type = h.type();
    if (!ReadExactly(h.payload_length(), deadline, &out->payload, timed_out)) {
      if (*timed_out) Fail("the server sent a frame header without its payload");
      return false;
    }
    if (out->type == static_cast<uint16_t>(MessageType::ErrorReply)) {
      const Status error =
          net::ParseErrorReply(reinterpret_cast<const uint8_t*>(out->payload.data()), out->payload.size(), "server");
      if (error.IsCorruption()) Fail("the server sent an ErrorReply that does not parse");
    }
    return true;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

 private:
  bool ReadExactly(size_t n, Clock::time_point deadline, std::string* out, bool* timed_out) {
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        *timed_out = true;
        return false;
      }
      pollfd pfd{fd_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(left));
      if (ready < 0 && errno != EINTR) Fail(std::string("poll: ") + std::strerror(errno));
      if (ready <= 0) continue;
      const ssize_t r = ::recv(fd_, out->data() + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        open_ = false;
        return false;
      }
      got += static_cast<size_t>(r);
    }
    return true;
  }

  int fd_;
  bool open_ = true;
  uint64_t next_id_ = 1;
};

std::string Bytes32(std::string_view from) {
  std::string out(net::kAuthNonceBytes, '\0');
  for (size_t i = 0; i < from.size() && i < out.size(); ++i) out[i] = from[i];
  return out;
}

// The client nonce of an AuthHello payload the server would accept; empty otherwise.
std::string NonceOf(std::string_view payload) {
  // Read from an aligned copy, as the server reads a frame's payload (a fuzzed message sits
  // anywhere in the input).
  if (payload.empty()) return std::string();
  std::vector<uint64_t> aligned((payload.size() + 7) / 8);
  std::memcpy(aligned.data(), payload.data(), payload.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier verifier(bytes, payload.size());
  if (!verifier.VerifyBuffer<wire::AuthHelloRequest>(nullptr)) return std::string();
  const auto* nonce = flatbuffers::GetRoot<wire::AuthHelloRequest>(bytes)->client_nonce();
  if (nonce == nullptr || nonce->size() != net::kAuthNonceBytes) return std::string();
  return std::string(reinterpret_cast<const char*>(nonce->data()), nonce->size());
}

void RunInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  Server& server = GetServer((in.U8() & 1) == 0);
  Peer peer(server.rpc->port());
  bool in_step = true;  // every byte sent so far was whole frames: the next one gets an answer
  std::string client_nonce, server_nonce, server_proof;  // of the last AuthHello exchange

  // Reads the answer to the frame just sent (or the close); checks an AuthProve's. Out of
  // step, the frame may be part of an earlier one's payload: its answer is read at the end.
  auto answer = [&](uint16_t type) {
    if (!in_step) return;
    Peer::Frame f;
    bool timed_out = false;
    if (!peer.ReadFrame(Clock::now() + kAnswerDeadline, &f, &timed_out)) {
      if (timed_out) Fail("no answer to " + net::MessageTypeName(type) + " within the deadline");
      return;
    }
    if (type == static_cast<uint16_t>(MessageType::AuthProve) &&
        f.type != static_cast<uint16_t>(MessageType::ErrorReply)) {
      Fail("AuthProve without the secret was answered " + net::MessageTypeName(f.type));
    }
    if (f.type == net::ReplyType(MessageType::AuthHello)) {
      flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(f.payload.data()), f.payload.size());
      if (!verifier.VerifyBuffer<wire::AuthHelloReply>(nullptr)) Fail("AuthHello reply does not verify");
      const auto* reply = flatbuffers::GetRoot<wire::AuthHelloReply>(f.payload.data());
      auto str = [](const flatbuffers::Vector<uint8_t>* v) {
        return v == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(v->data()), v->size());
      };
      server_nonce = str(reply->server_nonce());
      server_proof = str(reply->server_proof());
      if (server_nonce.size() != net::kAuthNonceBytes) Fail("AuthHello reply with a bad server nonce");
      // The server's proof is the real one: the harness checks it as a client would.
      if (!net::AuthKey(kSecret).Verify(server_proof, "server", client_nonce, server_nonce)) {
        Fail("AuthHello reply whose server proof does not verify");
      }
    }
  };

  for (size_t m = 0; m < kMaxMessages && !in.empty() && peer.open(); ++m) {
    const uint8_t kind = in.U8() % 5;
    const std::string_view bytes = in.Bytes(in.U16());
    Reader b(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    switch (kind) {
      case 0:
        peer.Write(bytes);
        in_step = false;
        break;
      case 1: {
        const uint8_t pick = b.U8();
        const uint16_t type =
            pick >= 0xF0 ? b.U16() : static_cast<uint16_t>(kTypes[pick % (sizeof(kTypes) / sizeof(kTypes[0]))]);
        const std::string_view payload = b.Rest();
        if (type == static_cast<uint16_t>(MessageType::AuthHello)) client_nonce = NonceOf(payload);
        peer.WriteFrame(type, static_cast<uint32_t>(payload.size()), payload);
        answer(type);
        break;
      }
      case 2: {
        const uint32_t announced = b.U32() % (kMaxPayload + 1);
        const uint8_t pick = b.U8();
        const uint16_t type = static_cast<uint16_t>(kTypes[pick % (sizeof(kTypes) / sizeof(kTypes[0]))]);
        const std::string_view payload = b.Rest();
        if (type == static_cast<uint16_t>(MessageType::AuthHello)) client_nonce = NonceOf(payload);
        peer.WriteFrame(type, announced, payload);
        if (announced == payload.size()) {
          answer(type);
        } else {
          in_step = false;
        }
        break;
      }
      case 3: {
        client_nonce = Bytes32(b.Rest());
        flatbuffers::FlatBufferBuilder fbb(128);
        fbb.Finish(wire::CreateAuthHelloRequest(
            fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(client_nonce.data()), client_nonce.size())));
        peer.WriteFrame(static_cast<uint16_t>(MessageType::AuthHello), fbb.GetSize(),
                        std::string_view(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()));
        answer(static_cast<uint16_t>(MessageType::AuthHello));
        break;
      }
      case 4: {
        std::string proof;
        switch (b.U8() % 3) {
          case 0: proof = server_proof; break;
          case 1: {
            std::string wrong(b.Rest());
            if (wrong.size() < 16) wrong.resize(16, 'x');
            if (wrong == kSecret) wrong += "!";
            proof = net::AuthKey(wrong).Proof("client", server_nonce, client_nonce);
            break;
          }
          default: proof = std::string(b.Rest()); break;
        }
        flatbuffers::FlatBufferBuilder fbb(128);
        fbb.Finish(wire::CreateAuthProveRequest(
            fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(proof.data()), proof.size())));
        peer.WriteFrame(static_cast<uint16_t>(MessageType::AuthProve), fbb.GetSize(),
                        std::string_view(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()));
        answer(static_cast<uint16_t>(MessageType::AuthProve));
        break;
      }
    }
  }
  // The rest of the server's answers, until it closes (on our EOF, or a timeout of its own).
  peer.ShutdownWrite();
  const auto deadline = Clock::now() + kSettleDeadline;
  Peer::Frame f;
  bool timed_out = false;
  while (peer.ReadFrame(deadline, &f, &timed_out)) {
  }
  if (timed_out) Fail("the server kept the connection open after the peer's EOF");
}

void CheckServer(Server& s, const char* name) {
  const auto deadline = Clock::now() + kSettleDeadline;
  while (s.rpc->connections() > 0 || s.rpc->in_flight() > 0 || s.rpc->in_flight_bytes() > 0) {
    if (Clock::now() > deadline) {
      Fail(std::string("server ") + name + " holds " + std::to_string(s.rpc->connections()) + " connections, " +
           std::to_string(s.rpc->in_flight()) + " requests, " + std::to_string(s.rpc->in_flight_bytes()) +
           " bytes after the peer left");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (s.bad_request) Fail(std::string("server ") + name + "'s handler saw a request it must not (authenticated?)");
  if (s.required && s.largest_alloc > net::kMaxHandshakePayload) {
    Fail("server R allocated a " + std::to_string(s.largest_alloc.load()) +
         "-byte payload for a peer that had not authenticated");
  }
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace fleetps;
  using fleetps::wire::MessageType;
  fuzz::MaybeWriteSeeds("auth_fuzz", [](fuzz::SeedWriter& seeds) {
    // [kind][u16 length][bytes] messages after the server byte.
    auto msg = [](uint8_t kind, std::string_view bytes) {
      std::string m(1, static_cast<char>(kind));
      m.push_back(static_cast<char>(bytes.size() & 0xff));
      m.push_back(static_cast<char>(bytes.size() >> 8));
      m.append(bytes);
      return m;
    };
    const std::string nonce(32, 'n');
    for (char server : {'\0', '\1'}) {
      const std::string s(1, server);
      seeds.Add(s + msg(3, nonce) + msg(4, std::string(1, '\0')));  // reflection
      seeds.Add(s + msg(3, nonce) + msg(4, std::string("\1a wrong secret of some length")));
      seeds.Add(s + msg(3, nonce) + msg(4, std::string("\2") + std::string(32, 'p')));
      seeds.Add(s + msg(4, std::string(1, '\0')));            // AuthProve before AuthHello
      seeds.Add(s + msg(1, std::string(1, '\2')));            // Ping before authenticating
      seeds.Add(s + msg(1, std::string(1, '\5')));            // Heartbeat
      seeds.Add(s + msg(2, std::string("\0\0\x10\0\3", 5)));  // 1 MiB PushSparse announced
      seeds.Add(s + msg(2, std::string("\0\x10\0\0\0", 5)));  // 4 KiB AuthHello announced
      std::string header(net::kFrameHeaderSize, '\0');
      net::EncodeFrameHeader(static_cast<uint16_t>(MessageType::AuthHello), 1, 60,
                             reinterpret_cast<uint8_t*>(header.data()));
      seeds.Add(s + msg(0, header.substr(0, 10)));      // half a header
      seeds.Add(s + msg(0, "GET / HTTP/1.1\r\n\r\n"));  // not fleetps
      seeds.Add(s + msg(3, nonce) + msg(3, nonce) + msg(4, std::string(1, '\1')));
    }
  });
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  if (size == 0) return 0;
  fuzz::RunInput(data, size);
  fuzz::Server& s = fuzz::GetServer((data[0] & 1) == 0);
  fuzz::CheckServer(s, s.required ? "R" : "S");
  return 0;
}
