#pragma once
// TableSet: the tables of one server, by id, built from the server's options.
// Sparse tables with a memory budget keep their RocksDB tier in
// data_dir/server-<index>/table-<id>/ (see SpillDb; wiped at start-up).
// Thread-safety: immutable after Create (the tables themselves follow their own rules).

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/config/server_config.h"
#include "common/status.h"
#include "server/table/dense_table.h"
#include "server/table/sparse_table.h"

namespace fleetps::server {

class TableSet {
 public:
  static StatusOr<std::unique_ptr<TableSet>> Create(const config::ServerOptions& options);

  SparseTable* sparse(uint32_t id) const;  // null when absent or dense
  DenseTable* dense(uint32_t id) const;    // null when absent or sparse
  const TableOptions* options(uint32_t id) const;
  // "embedding(0, sparse), dense(1, dense)" for error messages.
  std::string Describe() const;
  const std::map<uint32_t, TableOptions>& all() const { return options_; }

 private:
  std::map<uint32_t, TableOptions> options_;
  std::map<uint32_t, std::unique_ptr<SparseTable>> sparse_;
  std::map<uint32_t, std::unique_ptr<DenseTable>> dense_;
};

}  // namespace fleetps::server
