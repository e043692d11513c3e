#include "server/table/table_common.h"

#include <utility>

namespace fleetps::server {

std::string TableLabel(const TableOptions& options) {
  return std::string(options.kind == TableKind::kDense ? "dense" : "sparse") + " table '" + options.name + "' (id " +
         std::to_string(options.id) + ")";
}

StatusOr<TableParts> BuildTableParts(const TableOptions& options, TableKind kind, uint32_t server_index,
                                     uint32_t num_servers) {
  const std::string label = TableLabel(options);
  if (options.kind != kind) {
    return Status::InvalidArgument(label + ": kind must be " + (kind == TableKind::kDense ? "dense" : "sparse"));
  }
  if (server_index >= num_servers) {
    return Status::InvalidArgument(label + ": server index " + std::to_string(server_index) +
                                   " is not below the server count " + std::to_string(num_servers));
  }
  if (options.dim == 0) return Status::InvalidArgument(label + ": dim must be >= 1");
  auto optimizer = optimizer::CreateOptimizer(options.optimizer);
  if (!optimizer.ok()) return optimizer.status().WithContext(label);
  auto initializer = Initializer::Create(options.initializer);
  if (!initializer.ok()) return initializer.status().WithContext(label);
  return TableParts{std::move(optimizer).value(), std::move(initializer).value()};
}

}  // namespace fleetps::server
