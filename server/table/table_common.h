#pragma once
// What every table kind builds from its TableOptions: validation shared by SparseTable and
// DenseTable, and the label that prefixes every error a table returns.

#include <cstdint>
#include <memory>
#include <string>

#include "common/config/table_options.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "server/table/initializer.h"

namespace fleetps::server {

// "sparse table 'emb' (id 3)".
std::string TableLabel(const TableOptions& options);

struct TableParts {
  std::unique_ptr<optimizer::Optimizer> optimizer;
  Initializer initializer;
};

// Checks that `options` describes a table of `kind` (dim >= 1, valid optimizer and
// initializer) and that server_index < num_servers, then builds the optimizer and the
// initializer. InvalidArgument prefixed with TableLabel(options) otherwise.
StatusOr<TableParts> BuildTableParts(const TableOptions& options, TableKind kind, uint32_t server_index,
                                     uint32_t num_servers);

}  // namespace fleetps::server
