// Fuzz target: the heter-trainer's request handling (heter_trainer/service/heter_service.h)
// through the real RPC server, with the CPU device over a small dense net and a dense
// communicator stand-in (it hands out fixed parameters and checks every pushed gradient's
// size), driven by the real RpcClient over loopback.
//
// Input format (docs/FUZZING.md): messages [type selector: u8][mode: u8][length: u16 LE]
// [length bytes], at most kMaxMessages. Selector < 0xF0: the (selector % 5)-th type of
// kTypes; >= 0xF0: a raw type of kRawTypes (pserver requests, unknown types). Mode bit 0
// clear: the bytes are the payload as is; set: they drive a FuzzedDataProvider that builds
// a well-formed request of that type with lengths near the valid ones.
//
// Checks, besides the sanitizers: every request is answered within the deadline, with its
// reply type (whose payload passes the verifier and, for HeterTrain, matches the
// micro-batch: batch id, rows predictions, rows x width activation gradients — none for a
// forward_only one — and a dense gradient of the model's size, all finite, reached the
// communicator for each trained one and none for a forward_only one) or with an error that
// is not Internal (a handler that threw or dropped a request); the service keeps serving.
#include <fuzzer/FuzzedDataProvider.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/config/heter_config.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "heter_trainer/device/dense_device.h"
#include "heter_trainer/service/heter_service.h"
#include "schemas/heter_generated.h"
#include "schemas/ps_generated.h"
#include "common/net/trainer_registry.h"
#include "test/fuzz/fuzz_util.h"
#include "trainer/model/dense_net.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::fuzz {
namespace {

using wire::MessageType;

constexpr MessageType kTypes[] = {MessageType::Ping, MessageType::HeterHello, MessageType::HeterTrain,
                                  MessageType::HeterFlush, MessageType::Heartbeat};
constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
constexpr uint16_t kRawTypes[] = {2, 3, 5, 7, 9, 10, 22, 99, 0x7ffe, 1000};
constexpr size_t kMaxMessages = 12;
constexpr size_t kInDim = 7;  // activation row width
constexpr uint32_t kTrainers = 3;

// The dense communicator of a heter-trainer, without pservers.
class FakeDense : public trainer::ParamSync {
 public:
  explicit FakeDense(size_t n) : params_(std::make_shared<const std::vector<float>>(n, 0.05f)) {}
  Status PullSparse(uint32_t, std::span<const uint64_t>, float*) override {
    return Status::InvalidArgument("no sparse table");
  }
  Status DenseParams(uint32_t, std::vector<float>* params) override {
    *params = *params_;
    return Status::OK();
  }
  StatusOr<std::shared_ptr<const std::vector<float>>> DenseSnapshot(uint32_t) override { return params_; }
  Status Push(uint32_t, const trainer::StepGrads& g) override {
    if (g.dense_grads.size() != params_->size() || !g.keys.empty()) Fail("a pushed dense gradient has the wrong shape");
    for (float v : g.dense_grads) {
      if (!std::isfinite(v)) Fail("a dense gradient that is not finite reached the communicator");
    }
    ++pushes;
    return Status::OK();
  }
  Status Flush() override { return Status::OK(); }
  std::atomic<uint64_t> pushes{0};

 private:
  std::shared_ptr<const std::vector<float>> params_;
};

struct Harness {
  trainer::model::DenseNet net{kInDim, {5}, OutputKind::kSoftmax2};
  config::HeterTrainerOptions options;
  std::unique_ptr<heter::DenseDevice> device = heter::MakeCpuDevice(net);
  FakeDense dense{net.num_params()};
  net::TrainerRegistry trainers{std::chrono::milliseconds(0)};
  std::unique_ptr<heter::HeterService> service;
  net::IoThreads io{2};
  std::unique_ptr<net::RpcServer> rpc;
  std::unique_ptr<net::RpcClient> client;

  Harness() {
    options.job.trainers_num = kTrainers;
    options.job.heter.lanes = 2;
    options.server.endpoints = {{"127.0.0.1", 0}};
    service = std::make_unique<heter::HeterService>(options, net, *device, dense, trainers);
    if (Status st = service->Start(); !st.ok()) Fail("HeterService::Start: " + st.ToString());
    net::RpcServerOptions ro;
    ro.host = "127.0.0.1";
    rpc = std::make_unique<net::RpcServer>(io, ro, [svc = service.get()](net::Request req, net::Responder r) {
      svc->Handle(std::move(req), std::move(r));
    });
    if (Status st = rpc->Start(); !st.ok()) Fail("RpcServer::Start: " + st.ToString());
    net::RpcClientOptions co;
    co.request_timeout = std::chrono::seconds(20);
    client = std::make_unique<net::RpcClient>(io, net::Endpoint{"127.0.0.1", rpc->port()}, co);
    if (Status st = client->Connect(); !st.ok()) Fail("connect: " + st.ToString());
  }
};

Harness& GetHarness() {
  static Harness* h = new Harness();  // lives for the process: libFuzzer never returns
  return *h;
}

float Float(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return p.ConsumeFloatingPoint<float>();
    default: return p.ConsumeFloatingPointInRange<float>(-2.0f, 2.0f);
  }
}

size_t Around(FuzzedDataProvider& p, size_t want) {
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return p.ConsumeIntegralInRange<size_t>(0, 200);
    case 1: return want + 1;
    case 2: return want > 0 ? want - 1 : 0;
    default: return want;
  }
}

std::string Finish(flatbuffers::FlatBufferBuilder& fbb) {
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

// A well-formed request of `type` from the bytes.
std::string Build(MessageType type, std::string_view bytes, const Harness& h) {
  FuzzedDataProvider p(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  flatbuffers::FlatBufferBuilder fbb;
  const uint32_t trainer = p.ConsumeIntegralInRange<uint32_t>(0, kTrainers + 1);
  switch (type) {
    case MessageType::HeterHello:
      fbb.Finish(wire::CreateHeterHelloRequest(fbb, trainer, static_cast<uint32_t>(Around(p, kTrainers)),
                                               static_cast<uint32_t>(Around(p, kInDim)), Around(p, h.net.num_params()),
                                               p.ConsumeIntegral<uint8_t>()));
      break;
    case MessageType::HeterTrain: {
      const uint32_t rows = p.ConsumeIntegralInRange<uint32_t>(0, 9);
      const uint32_t width = static_cast<uint32_t>(Around(p, kInDim));
      std::vector<float> acts(Around(p, size_t{rows} * width)), labels(Around(p, rows));
      for (float& a : acts)
        a = p.ConsumeIntegralInRange<int>(0, 15) == 0 ? Float(p) : p.ConsumeFloatingPointInRange<float>(-1, 1);
      for (float& l : labels)
        l = p.ConsumeIntegralInRange<int>(0, 9) == 0 ? Float(p) : static_cast<float>(p.ConsumeBool());
      auto a = fbb.CreateVector(acts);
      auto l = fbb.CreateVector(labels);
      const uint64_t batch_id = p.ConsumeIntegral<uint64_t>();
      fbb.Finish(wire::CreateHeterTrainRequest(fbb, trainer, batch_id, rows, width, a, l,
                                               /*forward_only=*/p.ConsumeIntegralInRange<int>(0, 3) == 0));
      break;
    }
    case MessageType::HeterFlush: fbb.Finish(wire::CreateHeterFlushRequest(fbb, trainer)); break;
    case MessageType::Heartbeat:
      fbb.Finish(wire::CreateHeartbeatRequest(fbb, trainer, static_cast<uint32_t>(Around(p, kTrainers)),
                                              p.ConsumeBool(), p.ConsumeBool(),
                                              fbb.CreateString(p.ConsumeRandomLengthString(40)), p.ConsumeBool()));
      break;
    default: fbb.Finish(wire::CreatePingRequest(fbb, p.ConsumeIntegral<int32_t>())); break;
  }
  return Finish(fbb);
}

template <typename T>
const T* Verified(const net::Reply& r) {
  flatbuffers::Verifier v(r.data(), r.payload_size);
  if (!v.VerifyBuffer<T>(nullptr)) Fail("a reply failed FlatBuffers verification");
  return flatbuffers::GetRoot<T>(r.data());
}

// Checks one answer; returns whether it was a trained micro-batch (not forward_only).
bool Check(uint16_t type, const std::string& payload, const StatusOr<net::Reply>& reply) {
  if (!reply.ok()) {
    const Status& st = reply.status();
    if (st.code() == StatusCode::kInternal || st.IsTimedOut() || st.IsUnavailable() ||
        st.code() == StatusCode::kAborted) {
      Fail(net::MessageTypeName(type) + " answered " + st.ToString());
    }
    return false;
  }
  if (reply->type != (type | net::kReplyBit)) Fail("reply of the wrong type to " + net::MessageTypeName(type));
  if (type == static_cast<uint16_t>(MessageType::HeterTrain)) {
    const auto* req = flatbuffers::GetRoot<wire::HeterTrainRequest>(payload.data());  // accepted, so it verified
    const auto* r = Verified<wire::HeterTrainReply>(*reply);
    const size_t rows = req->rows();
    const size_t grads = req->forward_only() ? 0 : rows * kInDim;
    if (r->batch_id() != req->batch_id() || r->predictions() == nullptr || r->predictions()->size() != rows ||
        (r->activation_grads() == nullptr ? 0 : r->activation_grads()->size()) != grads) {
      Fail("a HeterTrain reply does not match its micro-batch");
    }
    if (req->forward_only() && r->loss() != 0.0f) Fail("a forward_only HeterTrain reply has a loss");
    return !req->forward_only();
  } else if (type == static_cast<uint16_t>(MessageType::HeterHello)) {
    Verified<wire::HeterHelloReply>(*reply);
  } else if (type == static_cast<uint16_t>(MessageType::HeterFlush)) {
    Verified<wire::HeterFlushReply>(*reply);
  } else if (type == static_cast<uint16_t>(MessageType::Heartbeat)) {
    Verified<wire::HeartbeatReply>(*reply);
  }
  return false;
}

void WriteSeeds(SeedWriter& seeds) {
  auto message = [](uint8_t selector, uint8_t mode, const std::string& bytes) {
    std::string m = {static_cast<char>(selector), static_cast<char>(mode), static_cast<char>(bytes.size() & 0xff),
                     static_cast<char>(bytes.size() >> 8)};
    return m + bytes;
  };
  flatbuffers::FlatBufferBuilder hello;
  hello.Finish(wire::CreateHeterHelloRequest(hello, 0, kTrainers, kInDim, 52, 1));
  std::vector<float> acts(2 * kInDim, 0.5f), labels = {0, 1};
  flatbuffers::FlatBufferBuilder train;
  auto a = train.CreateVector(acts);
  auto l = train.CreateVector(labels);
  train.Finish(wire::CreateHeterTrainRequest(train, 1, 7, 2, kInDim, a, l));
  flatbuffers::FlatBufferBuilder flush;
  flush.Finish(wire::CreateHeterFlushRequest(flush, 0));
  flatbuffers::FlatBufferBuilder beat;
  beat.Finish(wire::CreateHeartbeatRequest(beat, 0, kTrainers, false, false, beat.CreateString("")));
  const std::string all = message(1, 0, Finish(hello)) + message(2, 0, Finish(train)) + message(3, 0, Finish(flush)) +
                          message(4, 0, Finish(beat));
  seeds.Add(all);
  seeds.Add(message(2, 0, Finish(train)));
  // Scored only; and finite activations that overflow the dense step.
  flatbuffers::FlatBufferBuilder score;
  auto sa = score.CreateVector(acts);
  auto sl = score.CreateVector(labels);
  score.Finish(wire::CreateHeterTrainRequest(score, 1, 8, 2, kInDim, sa, sl, /*forward_only=*/true));
  seeds.Add(message(2, 0, Finish(score)));
  std::vector<float> huge(2 * kInDim, 3e38f);
  flatbuffers::FlatBufferBuilder overflow;
  auto ha = overflow.CreateVector(huge);
  auto hl = overflow.CreateVector(labels);
  overflow.Finish(wire::CreateHeterTrainRequest(overflow, 0, 9, 2, kInDim, ha, hl));
  seeds.Add(message(2, 0, Finish(overflow)) + message(2, 0, Finish(train)) + message(3, 0, Finish(flush)));
  for (uint8_t i = 0; i < kNumTypes; ++i) seeds.Add(message(i, 1, std::string(64, static_cast<char>(i * 29 + 3))));
  seeds.Add(message(0xF0, 0, "not a pserver"));
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::MaybeWriteSeeds("heter_service_fuzz", fleetps::fuzz::WriteSeeds);
  fleetps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  using namespace fleetps::fuzz;
  Harness& h = GetHarness();
  Reader in(data, size);
  struct Sent {
    uint16_t type;
    std::string payload;
    std::future<StatusOr<net::Reply>> reply;
  };
  const uint64_t pushes_before = h.dense.pushes.load();
  std::vector<Sent> sent;
  while (!in.empty() && sent.size() < kMaxMessages) {
    const uint8_t selector = in.U8();
    const uint8_t mode = in.U8();
    const std::string_view bytes = in.Bytes(in.U16());
    const uint16_t type = selector < 0xF0 ? static_cast<uint16_t>(kTypes[selector % kNumTypes])
                                          : kRawTypes[(selector - 0xF0) % (sizeof(kRawTypes) / sizeof(kRawTypes[0]))];
    std::string payload = (mode & 1) ? Build(static_cast<MessageType>(type), bytes, h) : std::string(bytes);
    // The payload as is (not necessarily a finished FlatBuffer), in the buffer type Call takes.
    auto* bytes_copy = flatbuffers::DefaultAllocator().allocate(std::max<size_t>(payload.size(), 1));
    std::memcpy(bytes_copy, payload.data(), payload.size());
    flatbuffers::DetachedBuffer buffer(nullptr, false, bytes_copy, std::max<size_t>(payload.size(), 1), bytes_copy,
                                       payload.size());
    auto promise = std::make_shared<std::promise<StatusOr<net::Reply>>>();
    Sent s{type, std::move(payload), promise->get_future()};
    net::CallOptions call;
    call.timeout = std::chrono::seconds(20);
    h.client->Call(type, std::move(buffer), call,
                   [promise](StatusOr<net::Reply> r) { promise->set_value(std::move(r)); });
    sent.push_back(std::move(s));
  }
  uint64_t trained = 0;
  for (auto& s : sent) trained += Check(s.type, s.payload, s.reply.get());
  // Exactly one dense gradient reached the communicator per trained micro-batch, none per
  // forward_only or failed one.
  if (h.dense.pushes.load() - pushes_before != trained) Fail("dense pushes do not match the trained micro-batches");
  return 0;
}
