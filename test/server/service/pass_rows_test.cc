// PullRows / WriteRows (GPU-PS pass mode) on the pserver App in-process: full rows with
// optimizer state and CTR statistics, exact write-back, merge by difference when another
// writer changed a row, lazy embedx extension, and the error replies for bad requests.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "schemas/ps_generated.h"
#include "server/app/app.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using trainer::PsClient;
using wire::MessageType;

constexpr uint32_t kPlain = 1;  // dim 2, adagrad: core = 2 weights + 2 g2sum
constexpr uint32_t kCtr = 2;    // dim 3, sgd, ctr accessor, embedx_threshold 2: core = 3

config::ServerOptions Options(uint32_t max_message_bytes = 256u << 20) {
  config::ServerOptions o;
  o.endpoints = {{"127.0.0.1", 0}};
  o.bind_host = "127.0.0.1";
  o.io_threads = 1;
  o.shard_threads = 2;
  o.max_message_bytes = max_message_bytes;
  TableOptions plain;
  plain.id = kPlain;
  plain.name = "plain";
  plain.dim = 2;
  plain.shards = 3;
  plain.optimizer.kind = OptimizerKind::kAdagrad;
  plain.optimizer.learning_rate = 0.5f;
  plain.optimizer.initial_accumulator = 1.0f;
  plain.optimizer.epsilon = 1e-8f;  // below float resolution next to sqrt(g2sum) >= 1
  plain.initializer.kind = InitializerKind::kConstant;
  plain.initializer.value = 1.0f;
  TableOptions ctr = plain;
  ctr.id = kCtr;
  ctr.name = "ctr";
  ctr.dim = 3;
  ctr.optimizer.kind = OptimizerKind::kSgd;
  ctr.optimizer.learning_rate = 1.0f;
  ctr.initializer.value = 0.25f;
  ctr.accessor.kind = AccessorKind::kCtr;
  ctr.accessor.embedx_threshold = 2.0f;
  ctr.accessor.nonclk_coeff = 0.5f;
  ctr.accessor.click_coeff = 1.0f;
  TableOptions dense;
  dense.id = 3;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = 4;
  o.tables = {plain, ctr, dense};
  return o;
}

struct PassServer {
  server::App app;
  std::unique_ptr<PsClient> client;
  std::unique_ptr<net::IoThreads> io;
  std::unique_ptr<net::RpcClient> raw;  // for requests PsClient would refuse to send
  explicit PassServer(uint32_t max_message_bytes = 256u << 20) : app(Options(max_message_bytes)) {
    const Status started = app.Start();
    INFO(started.ToString());
    REQUIRE(started.ok());
    trainer::PsClientOptions co;
    co.servers = {{"127.0.0.1", app.port()}};
    co.io_threads = 1;
    auto c = PsClient::Connect(co);
    REQUIRE(c.ok());
    client = std::move(*c);
    io = std::make_unique<net::IoThreads>(1);
    raw = std::make_unique<net::RpcClient>(*io, net::Endpoint{"127.0.0.1", app.port()}, net::RpcClientOptions{});
    REQUIRE(raw->Connect().ok());
  }
  ~PassServer() {
    raw.reset();
    io.reset();
    client.reset();
    app.Shutdown();
  }
  Status Write(const std::vector<uint64_t>& keys, const std::vector<float>& begin, const std::vector<float>& end,
               const std::vector<uint8_t>& extended = {}, const std::vector<float>& shows = {},
               const std::vector<float>& clicks = {}, uint32_t table = kPlain) {
    flatbuffers::FlatBufferBuilder fbb;
    auto x = extended.empty() ? 0 : fbb.CreateVector(extended);
    auto sv = shows.empty() ? 0 : fbb.CreateVector(shows);
    auto cv = clicks.empty() ? 0 : fbb.CreateVector(clicks);
    fbb.Finish(wire::CreateWriteRowsRequest(fbb, table, fbb.CreateVector(keys), fbb.CreateVector(begin),
                                            fbb.CreateVector(end), x, sv, cv));
    return raw->CallSync(static_cast<uint16_t>(MessageType::WriteRows), fbb.Release()).status();
  }
};

struct Pulled {
  std::vector<float> rows;
  std::vector<uint8_t> flags;
  std::vector<float> stats;
};

Pulled Pull(PsClient& client, uint32_t table, const std::vector<uint64_t>& keys, uint32_t core) {
  Pulled p;
  p.rows.assign(keys.size() * core, -99.0f);
  p.flags.assign(keys.size(), 0xff);
  p.stats.assign(keys.size() * 2, -99.0f);
  REQUIRE(client.PullRows(table, keys, core, {p.rows.data(), p.flags.data(), p.stats.data()}).get().ok());
  return p;
}

TEST_CASE("PullRows returns weights and optimizer state; missing keys read as a new row, not stored") {
  PassServer s;
  std::vector<uint64_t> keys = {5, 6};
  Pulled p = Pull(*s.client, kPlain, keys, 4);
  // Initial weights 1, adagrad g2sum starts at initial_accumulator 1.
  CHECK(p.rows == std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(p.flags == std::vector<uint8_t>{0, 0});
  CHECK(p.stats == std::vector<float>{0, 0, 0, 0});  // plain table: zeros
  CHECK((*s.client->Stats())[0].rows == 0);
  // One push of g = (3, 4) on key 5: g2sum = 1 + 9 = 10, 1 + 16 = 17;
  // w = 1 - 0.5 * 3 / sqrt(10), 1 - 0.5 * 4 / sqrt(17).
  std::vector<uint64_t> one = {5};
  REQUIRE(s.client->PushSparse(kPlain, one, std::vector<float>{3, 4}).get().ok());
  p = Pull(*s.client, kPlain, keys, 4);
  CHECK(p.rows[0] == 1.0f - 0.5f * 3.0f / std::sqrt(10.0f));
  CHECK(p.rows[1] == 1.0f - 0.5f * 4.0f / std::sqrt(17.0f));
  CHECK(p.rows[2] == 10.0f);
  CHECK(p.rows[3] == 17.0f);
  CHECK(p.flags[0] == 1);  // Changed
  CHECK(std::vector<float>(p.rows.begin() + 4, p.rows.end()) == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("WriteRows replaces an unchanged row exactly and merges a changed one by difference") {
  PassServer s;
  std::vector<uint64_t> keys = {10, 11};
  Pulled start = Pull(*s.client, kPlain, keys, 4);
  std::vector<float> end = {0.1f, 0.2f, 2.5f, 3.5f, -0.3f, 0.7f, 4.0f, 1.5f};
  PsClient::RowsWritten counts;
  REQUIRE(s.client->WriteRows(kPlain, keys, 4, {start.rows, end, {}, {}, {}, false}, &counts).get().ok());
  CHECK(counts.written == 2);
  CHECK(counts.merged == 0);
  CHECK(Pull(*s.client, kPlain, keys, 4).rows == end);
  CHECK((*s.client->Stats())[0].rows == 2);
  // A second trainer that pulled the same start: its change is added on top.
  std::vector<float> end2 = {1.5f, 1.0f, 1.0f, 3.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  REQUIRE(s.client->WriteRows(kPlain, keys, 4, {start.rows, end2, {}, {}, {}, false}, &counts).get().ok());
  CHECK(counts.written == 0);
  CHECK(counts.merged == 2);
  std::vector<float> want(8);
  for (size_t i = 0; i < 8; ++i) want[i] = end[i] + (end2[i] - start.rows[i]);
  CHECK(Pull(*s.client, kPlain, keys, 4).rows == want);
  // average: a changed row becomes the mean of itself and the pass's end.
  std::vector<float> end3 = {2.0f, -1.0f, 3.0f, 5.0f, 0.5f, 0.25f, 7.0f, 2.0f};
  REQUIRE(s.client->WriteRows(kPlain, keys, 4, {start.rows, end3, {}, {}, {}, true}, &counts).get().ok());
  CHECK(counts.merged == 2);
  for (size_t i = 0; i < 8; ++i) want[i] = 0.5f * (want[i] + end3[i]);
  CHECK(Pull(*s.client, kPlain, keys, 4).rows == want);
  // ... and an unchanged row still takes the pass's end exactly.
  std::vector<uint64_t> fresh = {12};
  Pulled f = Pull(*s.client, kPlain, fresh, 4);
  REQUIRE(s.client
              ->WriteRows(kPlain, fresh, 4,
                          {f.rows, std::vector<float>(end3.begin(), end3.begin() + 4), {}, {}, {}, true}, &counts)
              .get()
              .ok());
  CHECK(counts.written == 1);
  CHECK(Pull(*s.client, kPlain, fresh, 4).rows == std::vector<float>(end3.begin(), end3.begin() + 4));
}

TEST_CASE("WriteRows on a CTR table adds the pass's shows and clicks and extends rows") {
  PassServer s;
  std::vector<uint64_t> keys = {20};
  Pulled start = Pull(*s.client, kCtr, keys, 3);
  // embedx_threshold 2 > 0: a new row has embed_w only (0.25), embedx zeros.
  CHECK(start.rows == std::vector<float>{0.25f, 0, 0});
  CHECK(start.flags[0] == 0);
  // The pass extended the row (embedx from the initializer: 0.25) and trained it.
  std::vector<float> begin = {0.25f, 0.25f, 0.25f};
  std::vector<float> end = {0.5f, -1.0f, 2.0f};
  REQUIRE(s.Write(keys, begin, end, {1}, {3}, {1}, kCtr).ok());
  Pulled after = Pull(*s.client, kCtr, keys, 3);
  CHECK(after.rows == end);    // extended on the server too, so begin matched: exact
  CHECK(after.flags[0] == 3);  // Changed | EmbedxExtended
  CHECK(after.stats == std::vector<float>{3, 1});
  // A second pass from the same start adds its difference and its statistics.
  REQUIRE(s.Write(keys, begin, {1.0f, 0.25f, 0.25f}, {1}, {2}, {0}, kCtr).ok());
  after = Pull(*s.client, kCtr, keys, 3);
  CHECK(after.rows == std::vector<float>{0.5f + 0.75f, -1.0f, 2.0f});
  CHECK(after.stats == std::vector<float>{5, 1});
}

TEST_CASE("Bad WriteRows and PullRows requests are refused, naming the table and the problem") {
  PassServer s;
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> rows(8, 1.0f);
  auto refused = [](const Status& st, const std::string& part) {
    INFO(st.ToString());
    CHECK(st.IsInvalidArgument());
    CHECK(st.message().find(part) != std::string::npos);
  };
  CHECK(s.Write(keys, rows, rows, {}, {}, {}, 42).IsNotFound());
  CHECK(s.Write(keys, rows, rows, {}, {}, {}, 3).IsNotFound());  // dense
  refused(s.Write({}, {}, {}), "empty key list");
  refused(s.Write(keys, std::vector<float>(7, 1.0f), rows), "need 8 floats");
  refused(s.Write(keys, rows, rows, {1, 0}), "plain accessor");
  refused(s.Write(keys, rows, rows, {}, {1}), "'shows' must be empty or one per key");
  refused(s.Write(keys, std::vector<float>(6, 1.0f), std::vector<float>(6, 1.0f), {2, 0}, {}, {}, kCtr),
          "must be 0 or 1");
  std::vector<float> nan = rows;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  refused(s.Write(keys, rows, nan), "key 2 (position 1) has a NaN or infinite end");
  refused(s.Write(keys, rows, rows, {}, {1, std::numeric_limits<float>::infinity()}), "infinite shows");
  refused(s.Write({7, 7}, rows, rows), "appears twice");
  CHECK((*s.client->Stats())[0].rows == 0);  // nothing of the refused requests was applied
  // A reply above max_message_bytes is refused before it is built.
  PassServer small(4096);
  std::vector<uint64_t> many(400);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreatePullRowsRequest(fbb, kPlain, fbb.CreateVector(many)));
  refused(small.raw->CallSync(static_cast<uint16_t>(MessageType::PullRows), fbb.Release()).status(),
          "above max_message_bytes");
  // The client checks row widths against the servers'.
  std::vector<float> out(6);
  std::vector<uint8_t> flags(2);
  CHECK(s.client->PullRows(kPlain, keys, 3, {out.data(), flags.data(), nullptr}).get().IsInvalidArgument());
}

}  // namespace
}  // namespace fleetps
