#pragma once
// PsService: decodes verified requests and dispatches them to the tables.
//
// The only code that sees both the wire types and the tables. Every payload is checked
// with the FlatBuffers verifier before it is read; every semantic error (unknown table,
// wrong dimension, empty batch, key owned by another server, range outside this
// server's dense slice) is answered with an ErrorReply naming the table and what is
// wrong, and the connection keeps serving.
//
// One file per message family, so each bound and auth rule has one home: data_path.cc
// (pulls and pushes, and GPU-PS pass mode's PullRows / WriteRows), coordination.cc
// (barriers, metrics, heartbeats, Ping, TableStats), shuffle.cc (the global-shuffle mail),
// admin.cc (Stop, Save, Load, Shrink; admin-only with a secret configured, paths confined
// to the checkpoint roots); ps_service.cc dispatches. PsClient is split the same way
// (ps_client.cc + ps_client_rows.cc, ps_client_coordination.cc, ps_client_shuffle.cc,
// ps_client_admin.cc).
//
// Threading: Handle() runs on an io thread and only validates and partitions; table
// work is posted to the ExecutorPool lane that owns the shard (sparse) or table
// (dense), so rows are touched by one thread and need no locks. Replies are built in
// place (values written straight into the reply FlatBuffer by the shard tasks).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>
#include <memory>
#include <string>

#include "common/config/server_config.h"
#include "common/executor.h"
#include "common/net/rpc_server.h"
#include "server/service/checkpoint_runner.h"
#include "server/service/barrier.h"
#include "server/service/shuffle_mailbox.h"
#include "common/net/trainer_registry.h"
#include "server/table/dense_table.h"
#include "server/table/sparse_table.h"
#include "server/table/table_set.h"

namespace fleetps::server {

// A table's statistics summed over this server's shards (PsService::CollectTableStats).
struct TableTotals {
  uint32_t id = 0;
  std::string name;
  bool sparse = true;
  uint64_t rows = 0;          // rows held (dense: floats of this server's slice)
  uint64_t disk_rows = 0;     // of which only on the RocksDB tier
  uint64_t disk_bytes = 0;    // their bytes as written to RocksDB (key + encoded row each)
  uint64_t memory_bytes = 0;  // RAM of the rows (dense: the weights)
  uint64_t pulls = 0;         // keys pulled since start
  uint64_t pushes = 0;        // keys pushed since start
};

// Checkpoint work of this server since start (its part of every save, every load).
struct CheckpointCounters {
  std::atomic<uint64_t> saves{0}, saved_rows{0}, saved_bytes{0}, save_failures{0};
  std::atomic<uint64_t> loads{0}, loaded_rows{0}, load_failures{0};
  // The latest successful save of this server's part and the latest load (0 before any).
  std::atomic<double> last_save_seconds{0}, last_load_seconds{0};
  std::atomic<uint64_t> last_save_bytes{0}, last_save_rows{0}, last_load_rows{0};
};

class PsService {
 public:
  static constexpr uint32_t kMaxBarrierTimeoutMs = 3600 * 1000;

  // `tables` and `executors` outlive the service. `on_stop` is called (once, from an
  // io thread) when a Stop request arrives; the App then shuts down.
  PsService(const config::ServerOptions& options, TableSet& tables, ExecutorPool& executors,
            std::function<void(const std::string& reason)> on_stop);

  void Handle(net::Request request, net::Responder responder);
  // A connection closed (RpcServerOptions::on_connection_closed): what it left is dropped
  // (its metric reports). Thread-safe.
  void ConnectionClosed(uint64_t connection_id) { metrics_.Forget(connection_id); }
  BarrierManager& barriers() { return barriers_; }
  net::TrainerRegistry& trainers() { return trainers_; }
  // Save / load / shrink over this server's tables (also used by the App at start-up).
  CheckpointRunner& checkpoints() { return checkpoints_; }
  const CheckpointCounters& checkpoint_counters() const { return checkpoint_counters_; }
  // Gradient values dropped under server.nonfinite_gradients: skip (sparse keys + dense floats).
  uint64_t nonfinite_skipped() const { return nonfinite_skipped_.load(); }
  // Every table's statistics, read on the shards' owner lanes; blocks up to `timeout`
  // (shards that did not answer by then count zero). Not from an io thread or a lane.
  std::vector<TableTotals> CollectTableStats(std::chrono::milliseconds timeout);

 private:
  void PullSparse(const net::Request& req, const net::Responder& responder);
  void PushSparse(const net::Request& req, const net::Responder& responder);
  void PullRows(const net::Request& req, const net::Responder& responder);
  void WriteRows(const net::Request& req, const net::Responder& responder);
  void PullDense(const net::Request& req, const net::Responder& responder);
  void PushDense(const net::Request& req, const net::Responder& responder, bool set_params);
  void Barrier(const net::Request& req, const net::Responder& responder);
  void Ping(const net::Request& req, const net::Responder& responder);
  void TableStats(const net::Request& req, const net::Responder& responder);
  void Stop(const net::Request& req, const net::Responder& responder);
  void Save(const net::Request& req, const net::Responder& responder);
  void Load(const net::Request& req, const net::Responder& responder);
  void Shrink(const net::Request& req, const net::Responder& responder);
  void MetricReport(const net::Request& req, const net::Responder& responder);
  void ShuffleSend(const net::Request& req, const net::Responder& responder);
  void ShuffleFetch(const net::Request& req, const net::Responder& responder);
  void Heartbeat(const net::Request& req, const net::Responder& responder);

  // The directory a Save or Load request names, confined to a checkpoint root: a path
  // relative to a root, or an absolute one inside it ('..' and symbolic-link escapes
  // refused). Roots: server.checkpoint_root, and the parent of server.save_dir.
  StatusOr<std::string> RequestPath(const std::string& op, const std::string& requested) const;
  // Counts (and logs, sparingly) values dropped under nonfinite_gradients: skip.
  void CountSkipped(const std::string& table, uint64_t count, const char* what);
  size_t SparseLane(uint32_t table_id, uint32_t shard) const;
  size_t DenseLane(uint32_t table_id) const;
  std::string Where() const;  // "pserver 0 (127.0.0.1:8500)"
  // NotFound for a request naming a table this server lacks (or of the other kind).
  Status MissingTable(const std::string& request, const std::string& kind, uint32_t table_id) const;

  const config::ServerOptions& options_;
  TableSet& tables_;
  ExecutorPool& executors_;
  std::function<void(const std::string&)> on_stop_;
  BarrierManager barriers_;
  net::TrainerRegistry trainers_;
  MetricBoard metrics_;
  ShuffleMailbox shuffle_mailbox_;
  std::atomic<uint64_t> nonfinite_skipped_{0};
  std::atomic<uint64_t> requests_{0};  // every request handed to Handle()
  std::vector<std::string> checkpoint_roots_;
  CheckpointRunner checkpoints_;
  CheckpointCounters checkpoint_counters_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<bool> stop_requested_{false};
};

}  // namespace fleetps::server
