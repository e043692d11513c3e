#include "server/table/table_set.h"

#include <utility>

namespace fleetps::server {

StatusOr<std::unique_ptr<TableSet>> TableSet::Create(const config::ServerOptions& options) {
  auto set = std::make_unique<TableSet>();
  const auto num_servers = static_cast<uint32_t>(options.endpoints.size());
  for (const auto& t : options.tables) {
    set->options_[t.id] = t;
    if (t.kind == TableKind::kSparse) {
      StorageOptions storage;
      if (!options.data_dir.empty()) {
        storage.spill_dir =
            options.data_dir + "/server-" + std::to_string(options.index) + "/table-" + std::to_string(t.id);
      }
      ASSIGN_OR_RETURN(auto table, SparseTable::Create(t, options.index, num_servers, storage));
      set->sparse_[t.id] = std::move(table);
    } else {
      ASSIGN_OR_RETURN(auto table, DenseTable::Create(t, options.index, num_servers));
      set->dense_[t.id] = std::move(table);
    }
  }
  return set;
}

SparseTable* TableSet::sparse(uint32_t id) const {
  auto it = sparse_.find(id);
  return it == sparse_.end() ? nullptr : it->second.get();
}

DenseTable* TableSet::dense(uint32_t id) const {
  auto it = dense_.find(id);
  return it == dense_.end() ? nullptr : it->second.get();
}

const TableOptions* TableSet::options(uint32_t id) const {
  auto it = options_.find(id);
  return it == options_.end() ? nullptr : &it->second;
}

std::string TableSet::Describe() const {
  std::string out;
  for (const auto& [id, t] : options_) {
    if (!out.empty()) out += ", ";
    out += t.name + "(" + std::to_string(id) + (t.kind == TableKind::kSparse ? ", sparse" : ", dense") + ")";
  }
  return out;
}

}  // namespace fleetps::server
