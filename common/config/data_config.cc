#include "common/config/data_config.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

namespace fleetps::config {
namespace {

constexpr std::pair<std::string_view, DataFormat> kFormats[] = {
    {"rank_dnn", DataFormat::kRankDnn},
    {"multislot", DataFormat::kMultiSlot},
    {"slot_dnn", DataFormat::kSlotDnn},
    {"criteo", DataFormat::kCriteo},
};
// The last spelling of a kind is an alias (PaddleRec's config_gpubox.yaml writes it).
constexpr std::pair<std::string_view, DatasetKind> kDatasetKinds[] = {
    {"QueueDataset", DatasetKind::kQueue},
    {"InMemoryDataset", DatasetKind::kInMemory},
    {"InmemoryDataset", DatasetKind::kInMemory},
};

constexpr std::pair<std::string_view, ShuffleMode> kShuffleModes[] = {
    {"none", ShuffleMode::kNone},
    {"local", ShuffleMode::kLocal},
    {"global", ShuffleMode::kGlobal},
};

constexpr std::pair<std::string_view, SamplerKind> kSamplers[] = {
    {"files", SamplerKind::kFiles},
    {"distributed", SamplerKind::kDistributed},
};

bool Has(const YAML::Node& map, const std::string& key) { return map && map.IsMap() && map[key] && !map[key].IsNull(); }

// Reads the string at `key` and maps it through `table`; error lists the allowed names.
template <typename T, size_t N>
Status ReadEnum(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                const std::pair<std::string_view, T> (&table)[N], T* out) {
  if (!Has(map, key)) return Status::OK();
  std::string name;
  RETURN_IF_ERROR(ReadString(map, key, ctx, &name));
  for (const auto& [spelling, value] : table) {
    if (spelling == name) {
      *out = value;
      return Status::OK();
    }
  }
  std::string allowed;
  for (const auto& entry : table) allowed += (allowed.empty() ? "" : ", ") + std::string(entry.first);
  return ctx.Child(key).Error(map[key], "unknown value \"" + name + "\" (allowed: " + allowed + ")");
}

Status ReadOptionalUint32(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                          std::optional<uint32_t>* out) {
  if (!Has(map, key)) return Status::OK();
  uint32_t value = 0;
  RETURN_IF_ERROR(ReadUint32(map, key, ctx, &value));
  *out = value;
  return Status::OK();
}

Status RequireAtLeast(const YAML::Node& map, const std::string& key, const YamlContext& ctx, uint64_t value,
                      uint64_t min) {
  if (value >= min) return Status::OK();
  return ctx.Child(key).Error(Has(map, key) ? map[key] : map,
                              "must be >= " + std::to_string(min) + ", got " + std::to_string(value));
}

// PaddleRec shape keys, read from hyper_parameters and / or the section itself.
struct ShapeKeys {
  std::optional<uint32_t> dense_input_dim;
  std::optional<uint32_t> sparse_inputs_slots;  // sparse slots + 1 (PaddleRec counts the label slot)
  std::optional<uint32_t> slot_num;             // slot_dnn sparse slots
};

// Overrides the keys present in `map`.
Status ReadShapeKeys(const YAML::Node& map, const YamlContext& ctx, ShapeKeys* keys) {
  RETURN_IF_ERROR(ReadOptionalUint32(map, "dense_input_dim", ctx, &keys->dense_input_dim));
  RETURN_IF_ERROR(ReadOptionalUint32(map, "sparse_inputs_slots", ctx, &keys->sparse_inputs_slots));
  RETURN_IF_ERROR(ReadOptionalUint32(map, "slot_num", ctx, &keys->slot_num));
  return Status::OK();
}

std::vector<std::string> NumberedSlots(uint32_t first, uint32_t count) {
  std::vector<std::string> slots;
  for (uint32_t i = 0; i < count; ++i) slots.push_back(std::to_string(first + i));
  return slots;
}

// PaddleRec resolves data paths against the config file's directory. Names starting with
// '<' are in-memory documents (LoadYamlString), which have no directory.
std::string ResolvePath(const YamlContext& ctx, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || ctx.file.empty() || ctx.file.front() == '<') return path;
  return (std::filesystem::path(ctx.file).parent_path() / p).string();
}

// `dir_key` (one path) and `list_key` (a list), both optional, appended in that order.
Status ReadPaths(const YAML::Node& map, const std::string& dir_key, const std::string& list_key, const YamlContext& ctx,
                 std::vector<std::string>* out) {
  std::vector<std::string> dirs, list;
  if (Has(map, dir_key) && map[dir_key].IsSequence()) {  // PaddleRec's online configs list them
    RETURN_IF_ERROR(ReadStringList(map, dir_key, ctx, &dirs));
  } else {
    std::string dir;
    RETURN_IF_ERROR(ReadString(map, dir_key, ctx, &dir));
    if (!dir.empty()) dirs.push_back(dir);
  }
  RETURN_IF_ERROR(ReadStringList(map, list_key, ctx, &list));
  out->clear();
  for (const auto& p : dirs) out->push_back(ResolvePath(ctx, p));
  for (const auto& p : list) out->push_back(ResolvePath(ctx, p));
  return Status::OK();
}

// Reads `label_slot` (one name) or `label_slots` (a list) into *labels, which keeps the
// format's default when neither is given.
Status ReadLabelSlots(const YAML::Node& map, const YamlContext& ctx, std::vector<std::string>* labels) {
  if (Has(map, "label_slot") && Has(map, "label_slots")) {
    return ctx.Child("label_slots")
        .Error(map["label_slots"],
               "give label_slot (one label) or label_slots (a list of labels), not both: this section has both");
  }
  if (Has(map, "label_slot")) {
    std::string name;
    RETURN_IF_ERROR(ReadString(map, "label_slot", ctx, &name));
    *labels = {std::move(name)};
  } else if (Has(map, "label_slots")) {
    RETURN_IF_ERROR(ReadStringList(map, "label_slots", ctx, labels));
    if (labels->empty()) return ctx.Child("label_slots").Error(map["label_slots"], "needs at least one label slot");
  }
  return Status::OK();
}

// The key the label slots were given with, for errors.
const char* LabelKey(const YAML::Node& map) { return Has(map, "label_slots") ? "label_slots" : "label_slot"; }

// Checks names are non-empty and pairwise distinct across the label, dense and sparse roles.
Status CheckSlotNames(const YAML::Node& map, const YamlContext& ctx, const DataOptions& o) {
  std::set<std::string> seen;
  auto add = [&](const std::string& name, const std::string& key) -> Status {
    if (name.empty()) return ctx.Child(key).Error(Has(map, key) ? map[key] : map, "slot name must not be empty");
    if (!seen.insert(name).second) {
      return ctx.Child(key).Error(
          Has(map, key) ? map[key] : map,
          "slot \"" + name + "\" is used twice (label, dense and sparse slot names must differ)");
    }
    return Status::OK();
  };
  for (const auto& label : o.label_slots) RETURN_IF_ERROR(add(label, LabelKey(map)));
  if (o.dense_dim > 0) RETURN_IF_ERROR(add(o.dense_slot, "dense_slot"));
  if (o.sparse_slots.empty()) return ctx.Child("sparse_slots").Error(map, "needs at least one sparse slot");
  for (const auto& s : o.sparse_slots) RETURN_IF_ERROR(add(s, "sparse_slots"));
  return Status::OK();
}

// multislot_slots must be a permutation of the label, dense and sparse slots.
Status CheckMultiSlotOrder(const YAML::Node& map, const YamlContext& ctx, const DataOptions& o) {
  std::vector<std::string> expected = o.sparse_slots;
  expected.insert(expected.end(), o.label_slots.begin(), o.label_slots.end());
  if (o.dense_dim > 0) expected.push_back(o.dense_slot);
  std::vector<std::string> got = o.multislot_slots;
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  if (got == expected) return Status::OK();
  return ctx.Child("multislot_slots")
      .Error(Has(map, "multislot_slots") ? map["multislot_slots"] : map,
             "must list every label slot, the dense slot and every sparse slot exactly once");
}

// A criteo line has 13 integer columns (the dense features) and 26 categorical ones (one id
// for each sparse slot, in order). The error points at the key when this map holds it, else
// at data_format (the shape keys may come from hyper_parameters).
Status CheckCriteoShape(const YAML::Node& map, const YamlContext& ctx, const DataOptions& o) {
  auto error = [&](const char* key, const std::string& message) {
    return Has(map, key) ? ctx.Child(key).Error(map[key], message)
                         : ctx.Child("data_format").Error(map["data_format"], message);
  };
  if (o.label_slots.size() != 1) {
    return error(LabelKey(map), "data_format criteo lines carry one label: label_slots must name one slot, not " +
                                    std::to_string(o.label_slots.size()));
  }
  if (o.dense_dim != 13) {
    return error("dense_input_dim", "data_format criteo has 13 integer columns: dense_input_dim must be 13, not " +
                                        std::to_string(o.dense_dim));
  }
  if (o.sparse_slots.size() != 26) {
    return error(Has(map, "sparse_slots") ? "sparse_slots" : "sparse_inputs_slots",
                 "data_format criteo has 26 categorical columns, one per sparse slot: it needs 26 sparse slots "
                 "(sparse_inputs_slots: 27, the label counted), not " +
                     std::to_string(o.sparse_slots.size()));
  }
  return Status::OK();
}

// Reads every key of `section`; `shape` holds the shape keys gathered so far.
Status ParseSection(const YAML::Node& section, const YamlContext& ctx, ShapeKeys shape, DataOptions* out) {
  if (section && !section.IsNull() && !section.IsMap()) return ctx.Error(section, "expected a map of data options");
  RETURN_IF_ERROR(ReadShapeKeys(section, ctx, &shape));

  DataOptions o;
  RETURN_IF_ERROR(ReadEnum(section, "data_format", ctx, kFormats, &o.format));
  RETURN_IF_ERROR(ReadEnum(section, "reader_type", ctx, kDatasetKinds, &o.dataset));
  RETURN_IF_ERROR(ReadEnum(section, "shuffle", ctx, kShuffleModes, &o.shuffle));
  RETURN_IF_ERROR(ReadEnum(section, "sampler", ctx, kSamplers, &o.sampler));
  if (o.sampler == SamplerKind::kDistributed) {
    if (o.dataset != DatasetKind::kInMemory) {
      return ctx.Child("sampler").Error(
          section["sampler"], "distributed needs reader_type: InMemoryDataset (it samples the loaded records)");
    }
    if (o.shuffle == ShuffleMode::kGlobal) {
      return ctx.Child("sampler").Error(
          section["sampler"], "distributed cannot be combined with shuffle: global (use shuffle: local or none)");
    }
  }
  const bool slot_dnn = o.format == DataFormat::kSlotDnn;

  // Format-dependent defaults first, then the explicit keys.
  o.label_slots = {slot_dnn ? "1" : "click"};
  o.dense_slot = slot_dnn ? "" : "dense_feature";
  o.dense_dim = shape.dense_input_dim.value_or(slot_dnn ? 0 : 13);
  if (slot_dnn) {
    const uint32_t slot_num = shape.slot_num.value_or(300);
    RETURN_IF_ERROR(RequireAtLeast(section, "slot_num", ctx, slot_num, 1));
    o.sparse_slots = NumberedSlots(2, slot_num);
  } else {
    const uint32_t inputs = shape.sparse_inputs_slots.value_or(27);
    RETURN_IF_ERROR(RequireAtLeast(section, "sparse_inputs_slots", ctx, inputs, 2));
    o.sparse_slots = NumberedSlots(1, inputs - 1);
  }
  RETURN_IF_ERROR(ReadLabelSlots(section, ctx, &o.label_slots));
  RETURN_IF_ERROR(ReadString(section, "dense_slot", ctx, &o.dense_slot));
  RETURN_IF_ERROR(ReadStringList(section, "sparse_slots", ctx, &o.sparse_slots));
  if (slot_dnn && o.dense_dim > 0) {
    return ctx.Child("dense_input_dim")
        .Error(Has(section, "dense_input_dim") ? section["dense_input_dim"] : section,
               "must be 0 for data_format slot_dnn (the format has no dense features)");
  }
  RETURN_IF_ERROR(CheckSlotNames(section, ctx, o));

  if (o.format == DataFormat::kMultiSlot) {
    o.multislot_slots = o.label_slots;
    o.multislot_slots.insert(o.multislot_slots.end(), o.sparse_slots.begin(), o.sparse_slots.end());
    if (o.dense_dim > 0) o.multislot_slots.push_back(o.dense_slot);
    RETURN_IF_ERROR(ReadStringList(section, "multislot_slots", ctx, &o.multislot_slots));
    RETURN_IF_ERROR(CheckMultiSlotOrder(section, ctx, o));
  } else if (Has(section, "multislot_slots")) {
    return ctx.Child("multislot_slots").Error(section["multislot_slots"], "only valid with data_format multislot");
  }
  if (o.format == DataFormat::kCriteo) {
    RETURN_IF_ERROR(CheckCriteoShape(section, ctx, o));
    RETURN_IF_ERROR(ReadUint64(section, "criteo_hash_dim", ctx, &o.criteo_hash_dim));
  } else if (Has(section, "criteo_hash_dim")) {
    return ctx.Child("criteo_hash_dim").Error(section["criteo_hash_dim"], "only valid with data_format criteo");
  }

  RETURN_IF_ERROR(ReadPaths(section, "train_data_dir", "train_files", ctx, &o.train_paths));
  RETURN_IF_ERROR(ReadPaths(section, "test_data_dir", "test_files", ctx, &o.test_paths));
  RETURN_IF_ERROR(ReadBool(section, "split_file_list", ctx, &o.split_file_list));

  RETURN_IF_ERROR(ReadUint32(section, "train_batch_size", ctx, &o.batch_size));
  o.test_batch_size = o.batch_size;
  RETURN_IF_ERROR(ReadUint32(section, "infer_batch_size", ctx, &o.test_batch_size));
  RETURN_IF_ERROR(ReadUint32(section, "thread_num", ctx, &o.thread_num));
  RETURN_IF_ERROR(ReadBool(section, "skip_bad_lines", ctx, &o.skip_bad_lines));
  RETURN_IF_ERROR(ReadUint32(section, "queue_capacity", ctx, &o.queue_capacity));
  RETURN_IF_ERROR(ReadUint64(section, "shuffle_seed", ctx, &o.shuffle_seed));
  RETURN_IF_ERROR(RequireAtLeast(section, "train_batch_size", ctx, o.batch_size, 1));
  RETURN_IF_ERROR(RequireAtLeast(section, "infer_batch_size", ctx, o.test_batch_size, 1));
  RETURN_IF_ERROR(RequireAtLeast(section, "thread_num", ctx, o.thread_num, 1));
  RETURN_IF_ERROR(RequireAtLeast(section, "queue_capacity", ctx, o.queue_capacity, 1));

  *out = std::move(o);
  return Status::OK();
}

}  // namespace

std::string_view DataFormatName(DataFormat format) {
  for (const auto& [name, value] : kFormats) {
    if (value == format) return name;
  }
  return "unknown";
}

bool DataFormatFromName(std::string_view name, DataFormat* out) {
  for (const auto& [spelling, value] : kFormats) {
    if (spelling == name) {
      *out = value;
      return true;
    }
  }
  return false;
}

bool DatasetKindFromName(std::string_view name, DatasetKind* out) {
  for (const auto& [spelling, value] : kDatasetKinds) {
    if (spelling == name) {
      *out = value;
      return true;
    }
  }
  return false;
}

std::string_view DatasetKindName(DatasetKind kind) {
  for (const auto& [name, value] : kDatasetKinds) {
    if (value == kind) return name;
  }
  return "unknown";
}

Status ParseDataOptions(const YAML::Node& section, const YamlContext& ctx, DataOptions* out) {
  RETURN_IF_ERROR(RejectUnknownKeys(section, DataOptionKeys(), ctx));
  return ParseSection(section, ctx, ShapeKeys{}, out);
}

Status ParsePaddleRecDataOptions(const YAML::Node& root, const YamlContext& ctx, DataOptions* out) {
  if (!root || !root.IsMap()) return ctx.Error(root, "expected a PaddleRec config (a map with a runner section)");
  RETURN_IF_ERROR(Require(root, "runner", ctx));
  ShapeKeys shape;
  RETURN_IF_ERROR(ReadShapeKeys(root["hyper_parameters"], ctx.Child("hyper_parameters"), &shape));
  return ParseSection(root["runner"], ctx.Child("runner"), shape, out);
}

std::vector<std::string> DataOptionKeys() {
  return {"data_format",     "label_slot",          "label_slots",      "dense_slot",
          "dense_input_dim", "sparse_inputs_slots", "slot_num",         "sparse_slots",
          "multislot_slots", "train_data_dir",      "train_files",      "test_data_dir",
          "test_files",      "split_file_list",     "train_batch_size", "infer_batch_size",
          "thread_num",      "reader_type",         "skip_bad_lines",   "queue_capacity",
          "shuffle",         "shuffle_seed",        "sampler",          "criteo_hash_dim"};
}

std::vector<std::string> DataShapeKeys() { return {"dense_input_dim", "sparse_inputs_slots", "slot_num"}; }

}  // namespace fleetps::config
