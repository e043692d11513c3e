#pragma once
// PsClient: the trainer-side, asynchronous client of a pserver cluster.
//
// Routes every key to its server with fleetps::PlaceKey (the same function the servers
// use), de-duplicates keys on pull, sums the gradients (and show/click counts) of
// duplicate keys on push, splits dense vectors by server slice, and keeps many requests
// in flight over one pipelined connection per server. Used by both trainers.
//
// Calls return a std::future<Status>; the spans passed in must stay valid (and, for
// pulls, unread) until that future is ready. Every call is bounded: options.rpc gives
// the deadlines (request_timeout for pulls and pushes, admin_timeout for Save, Load and
// Shrink; a barrier waits its own timeout plus barrier_margin), the reconnect back-off
// and which requests are retried (net::DefaultCallOptions: pulls are re-sent after a
// reconnect, a push whose connection dropped fails with Unavailable rather than risk a
// double application). Errors name the request type and the pserver by index and
// endpoint ("PullSparse to pserver 1 (10.0.0.2:8500): ...").
// Thread-safety: all methods are thread-safe; several worker threads share one client
// (Hogwild).

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/net/endpoint.h"
#include "common/net/rpc_client.h"
#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/heartbeat_state.h"

namespace fleetps::net {
class IoThreads;
}

namespace fleetps::trainer {

struct PsClientOptions {
  std::vector<net::Endpoint> servers;        // every pserver, in the cluster's order
  int io_threads = 2;                        // threads serving the connections
  net::RpcClientOptions rpc;                 // connect deadline/backoff, request timeouts, max frame
  uint32_t max_keys_per_request = 1u << 18;  // larger per-server batches are split
  // A Barrier call waits for the server's answer for its timeout plus this margin (the
  // server answers TimedOut at the timeout; the margin covers the trip and its sweep).
  std::chrono::milliseconds barrier_margin{10000};
};

// What the servers report about a table (from Ping).
struct TableInfo {
  uint32_t id = 0;
  std::string name;
  bool dense = false;
  uint64_t dim = 0;  // sparse: row width; dense: total floats
  uint32_t shards = 0;
  std::vector<uint64_t> slice_begin;  // dense: per server, plus a final end entry
};

struct TableStatsSummary {
  uint32_t id = 0;
  std::string name;
  uint64_t rows = 0;          // summed over servers
  uint64_t memory_bytes = 0;  // summed over servers
  std::vector<uint64_t> rows_per_server;
  uint64_t disk_rows = 0;   // rows held only on the servers' RocksDB tier (in rows)
  uint64_t disk_bytes = 0;  // their bytes as written to RocksDB (key + encoded row each)
};

// One table on one server (PsClient::StatsByServer).
struct ServerTableStats {
  uint32_t id = 0;
  std::string name;
  bool dense = false;
  uint64_t rows = 0;  // dense: floats of the server's slice
  uint64_t memory_bytes = 0;
  uint64_t disk_rows = 0;   // on the RocksDB tier (included in rows)
  uint64_t disk_bytes = 0;  // their bytes as written to RocksDB
  uint64_t pulls = 0;       // keys pulled since the server started
  uint64_t pushes = 0;      // keys pushed since the server started
};

// One server's tables and its request count (PsClient::StatsByServer).
struct ServerStats {
  uint64_t requests = 0;  // requests the server has received since it started, every type
  std::vector<ServerTableStats> tables;
};

// Save modes (schemas/checkpoint.fbs SaveMode; Paddle's save modes).
inline constexpr uint32_t kSaveCheckpoint = 0;  // weights, optimizer state, statistics
inline constexpr uint32_t kSaveDelta = 1;       // weights of rows changed since the last delta/base save
inline constexpr uint32_t kSaveBase = 2;        // weights only, for serving
inline constexpr uint32_t kSaveBatch = 3;       // like checkpoint, then unseen_days += 1

struct SaveResult {
  std::string version;  // the committed version directory under dir
  uint64_t rows = 0;    // sparse rows saved, all servers
  uint64_t bytes = 0;   // data file bytes, all servers
};

struct LoadResult {
  std::string version;
  uint32_t mode = 0;  // the checkpoint's save mode
  uint64_t rows = 0;  // sparse rows taken, all servers
};

struct ShrinkResult {
  uint64_t deleted = 0;  // rows deleted, all servers
  uint64_t rows = 0;     // rows left in the shrunk tables
};

class PsClient {
 public:
  // Connects to every server (retrying until the connect deadline), pings them and
  // checks they agree on the server list and the tables.
  static StatusOr<std::unique_ptr<PsClient>> Connect(PsClientOptions options);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  size_t num_servers() const { return clients_.size(); }
  // Closes every server connection: the calls under way and any later one fail at once
  // with Aborted. For a shutdown that must not wait out a gone pserver's deadline; the
  // client is of no further use.
  void Close();
  // "pserver i (host:port)", as messages name server i.
  std::string ServerName(size_t i) const;
  // Reconnects and retries so far, summed over the servers.
  net::RpcClientCounters counters() const;
  StatusOr<TableInfo> Table(uint32_t table_id) const;
  StatusOr<TableInfo> TableByName(const std::string& name) const;

  // Whether a call's keys may repeat. kDistinct skips the client's de-duplication (a hash
  // table per call) for keys that are distinct by construction, as the trainer's de-duplicated
  // batches and merged pushes are; builds with assertions check the promise and refuse the
  // call when it does not hold.
  enum class Keys : uint8_t { kMayRepeat, kDistinct };
  // values: keys.size() * dim floats, row k for keys[k].
  std::future<Status> PullSparse(uint32_t table_id, std::span<const uint64_t> keys, float* values,
                                 Keys keys_are = Keys::kMayRepeat);
  struct SparsePushOptions {
    std::span<const float> shows;   // empty or one per key (CTR statistics)
    std::span<const float> clicks;  // empty or one per key
    bool delta = false;             // GEO: add grads to the rows instead of an optimizer step
    Keys keys_are = Keys::kMayRepeat;
  };
  // grads: keys.size() * dim. Repeated keys are summed (grads, shows, clicks).
  std::future<Status> PushSparse(uint32_t table_id, std::span<const uint64_t> keys, std::span<const float> grads,
                                 const SparsePushOptions& options);
  std::future<Status> PushSparse(uint32_t table_id, std::span<const uint64_t> keys, std::span<const float> grads) {
    return PushSparse(table_id, keys, grads, SparsePushOptions{});
  }
  // ---- GPU-PS pass mode (PullRows / WriteRows, schemas/ps.fbs) ----
  // A row here is `row_floats` floats: the weights and the optimizer state (the table's
  // RowAccessor layout); the servers' value must match. Keys must be distinct.
  struct RowsOut {
    float* rows = nullptr;     // keys.size() * row_floats
    uint8_t* flags = nullptr;  // keys.size(): saved RowFlag bits
    float* stats = nullptr;    // CTR tables: keys.size() * 2 (show, click); null to ignore
  };
  // The full rows of `keys` (missing keys: the row a push would create, not stored).
  std::future<Status> PullRows(uint32_t table_id, std::span<const uint64_t> keys, uint32_t row_floats,
                               const RowsOut& out);
  struct RowsIn {
    std::span<const float> begin;       // keys.size() * row_floats: the rows the pass pulled
    std::span<const float> end;         // keys.size() * row_floats: the rows it ended with
    std::span<const uint8_t> extended;  // empty or one per key: the pass extended the row (CTR)
    std::span<const float> shows;       // empty or one per key: shows counted in the pass
    std::span<const float> clicks;      // empty or one per key
    bool average = false;               // rows another writer changed: mean with end, not += end - begin
  };
  struct RowsWritten {
    uint64_t written = 0;  // rows replaced by `end`
    uint64_t merged = 0;   // rows another writer had changed: end - begin added
  };
  // Writes a pass's rows back (WriteRows: see schemas/ps.fbs). Not re-sent after a lost
  // connection (a second application would add end - begin again): fails Unavailable.
  // `written` (optional) receives the servers' counts once the future is ready. keys and
  // `in` are copied into the requests before this returns: the caller may reuse them.
  std::future<Status> WriteRows(uint32_t table_id, std::span<const uint64_t> keys, uint32_t row_floats,
                                const RowsIn& in, RowsWritten* written = nullptr);

  // A dense table's optimizer state as a trainer's replica that steps the dense rule itself
  // holds it: `element`, the rule's element state of every parameter (weight-major), and
  // `shared`, its shared state (Adam's beta powers).
  struct DenseState {
    std::vector<float> element;
    std::vector<float> shared;
  };
  // The whole dense table (values.size() must equal the table size). With `state`, also its
  // optimizer state, into buffers the caller sized for its own rule (element: a multiple of
  // the table size); the servers refuse a rule of other sizes. The shared state is the first
  // slice's.
  std::future<Status> PullDense(uint32_t table_id, std::span<float> values, DenseState* state = nullptr);
  struct DensePushOptions {
    // > 0: the servers accumulate until that many pushes of the whole table arrived,
    // then apply their average as one step (sync mode).
    uint32_t sync_trainers = 0;
    // Sync mode: this pusher's id in [0, sync_trainers), so that the servers count each
    // pusher once per step (a retried or duplicated push cannot stand in for another's).
    int32_t trainer_id = -1;
    // Sync mode: this pusher's step number (1, 2, ...; 0 = unnumbered). A numbered push is
    // counted once per step by the servers, so it is re-sent after a lost connection.
    uint64_t sync_step = 0;
    bool delta = false;  // GEO: add grads to the parameters instead of an optimizer step
  };
  std::future<Status> PushDense(uint32_t table_id, std::span<const float> grads, const DensePushOptions& options);
  std::future<Status> PushDense(uint32_t table_id, std::span<const float> grads) {
    return PushDense(table_id, grads, DensePushOptions{});
  }
  // Sets the dense parameters; with `state`, the servers' optimizer state becomes it (else it
  // starts afresh). values and state are copied into the requests before this returns.
  std::future<Status> PushDenseParam(uint32_t table_id, std::span<const float> values,
                                     const DenseState* state = nullptr);
  // A job's initial dense parameters: set only on the servers whose slice holds none yet (a
  // slice loaded from a checkpoint, or set by an earlier call, keeps its parameters). Waits
  // for every server; returns the floats kept rather than set (0: all set; the table's size:
  // all kept).
  StatusOr<uint64_t> InitDenseParam(uint32_t table_id, std::span<const float> values);

  // Waits at the named barrier on server 0 until `participants` trainers arrived; also
  // sums `values` across them (an all-reduce) and ANDs `done`. With `stop`, a stop request
  // ends the wait within kStopPoll with Aborted (this trainer's arrival stays counted; the
  // others' wait ends when it reports that it failed).
  struct BarrierResult {
    uint64_t generation = 0;
    std::vector<double> sum;
    bool all_done = false;
  };
  StatusOr<BarrierResult> Barrier(const std::string& name, uint32_t trainer_id, uint32_t participants,
                                  std::chrono::milliseconds timeout, std::span<const double> values = {},
                                  bool done = false, const StopRequest* stop = nullptr);
  static constexpr std::chrono::milliseconds kStopPoll{100};
  // Reports this trainer's latest `values` under `name` to server 0 without waiting for
  // the others; returns the sum of every reporter's latest values and their number.
  struct MetricSum {
    std::vector<double> sum;
    uint32_t reporters = 0;
  };
  StatusOr<MetricSum> ReportMetric(const std::string& name, uint32_t trainer_id, std::span<const double> values);

  // Global-shuffle mailbox (ShuffleSend / ShuffleFetch, schemas/ps.fbs): records for
  // trainer `to` live on server to % num_servers. ShuffleSend posts one serialised
  // RecordBlock (Busy while the server's mailbox is full: retry); ShuffleFetch takes what
  // waits for `to`. Blocking calls. ShuffleSend retries Busy answers until `timeout` (0 =
  // rpc.request_timeout) and then returns the Busy.
  Status ShuffleSend(uint64_t round, uint32_t from, uint32_t to, std::span<const uint8_t> block, bool last,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  struct ShuffleMail {
    uint32_t from = 0;
    std::vector<uint8_t> block;
  };
  struct ShuffleFetchResult {
    std::vector<ShuffleMail> mail;
    uint32_t senders_done = 0;
    bool complete = false;
  };
  StatusOr<ShuffleFetchResult> ShuffleFetch(uint64_t round, uint32_t to, uint32_t senders);
  StatusOr<std::vector<TableStatsSummary>> Stats();
  // Every table of every server, in server order (fleetps-ctl status).
  StatusOr<std::vector<ServerStats>> StatsByServer();

  // ---- storage commands: blocking; every server, then the result (docs/STORAGE.md) ----
  // Saves every table (or only `table_id`) into `dir`, a path every pserver can write (the
  // same path on each; a shared mount when they run on several machines), below the
  // pservers' checkpoint root: a relative path names a directory in that root, an absolute
  // one must lie inside it (server.checkpoint_root). `mode`: kSaveCheckpoint,
  // kSaveDelta, kSaveBase or kSaveBatch. Returns once the checkpoint is committed: every
  // server wrote its part, then server 0 wrote the manifest and pointed dir/CURRENT at it.
  // On error the previous checkpoint in `dir` is intact.
  StatusOr<SaveResult> Save(const std::string& dir, uint32_t mode = kSaveCheckpoint,
                            std::optional<uint32_t> table_id = std::nullopt);
  // Every server loads the checkpoint in `dir` (the rows it owns, whatever the number of
  // servers and shards that saved it), after verifying the manifest and checksums. Do not
  // push while loading.
  StatusOr<LoadResult> Load(const std::string& dir);
  // CTR tables (or only `table_id`): decay show/click and delete the rows the accessor's
  // shrink rules select. Plain tables are left alone.
  StatusOr<ShrinkResult> Shrink(std::optional<uint32_t> table_id = std::nullopt);
  // Asks every server to shut down cleanly; each call is bounded by `timeout` (0: the
  // client's request_timeout). With `gone_is_stopped`, a server that is already stopping or
  // gone counts as stopped: it answered Unavailable, or its connection was lost or refused.
  // The end of a job needs that: pservers exit by themselves once every trainer has ended,
  // so one may close its connections before the Stop of trainer 0 is answered.
  struct StopOptions {
    std::chrono::milliseconds timeout{0};
    bool gone_is_stopped = false;
  };
  Status StopServers(const std::string& reason, const StopOptions& options);
  Status StopServers(const std::string& reason) { return StopServers(reason, StopOptions{}); }
  // Tells every server that trainer `trainer_id` of `trainers` is alive, stopping, or has
  // ended (HeartbeatState). Returns the trainers that some server counts as gone (sorted,
  // unique), or the first server's error.
  // Bounded by `timeout` (re-sent after a connection loss: a heartbeat is idempotent).
  StatusOr<std::vector<uint32_t>> Heartbeat(uint32_t trainer_id, uint32_t trainers, const HeartbeatState& state,
                                            std::chrono::milliseconds timeout);

 private:
  explicit PsClient(PsClientOptions options);
  Status Handshake();
  // `params`: PushDenseParam, with `kept` (if_unset: InitDenseParam) counting the floats the
  // servers kept.
  std::future<Status> PushDenseValues(uint32_t table_id, std::span<const float> values, bool params,
                                      const DensePushOptions& options,
                                      std::shared_ptr<std::atomic<uint64_t>> kept = nullptr,
                                      const DenseState* state = nullptr);
  // Sends `payload(s)` to every server s at once and waits for every reply.
  std::vector<StatusOr<net::Reply>> CallEveryServer(uint16_t type,
                                                    const std::function<flatbuffers::DetachedBuffer(size_t)>& payload);

  PsClientOptions options_;
  std::unique_ptr<net::IoThreads> io_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::map<uint32_t, TableInfo> tables_;  // immutable after Connect
};

}  // namespace fleetps::trainer
