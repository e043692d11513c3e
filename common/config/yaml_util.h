#pragma once
// Small typed readers over yaml-cpp used by every config parser in common/config.
// Every error names the file, the key path and (when known) the line, and says what
// was expected, e.g.
//   configs/pserver.yaml:12: tables[0].optimizer.learning_rate: expected a number, got "fast"
// yaml-cpp exceptions never escape these functions.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace fleetps::config {

// Where a node came from, for error messages: file name plus dotted key path.
struct YamlContext {
  std::string file;  // path of the YAML file ("<string>" for in-memory text)
  std::string path;  // dotted key path of the node, e.g. "tables[0].optimizer"

  YamlContext Child(const std::string& key) const;
  YamlContext Index(size_t i) const;
  // "file:line: path: " prefix (line from the node's mark when it has one).
  std::string Where(const YAML::Node& node) const;
  // "file:line:column" of the node (1-based), or just "file" for a node without a mark
  // (one built in code).
  std::string Location(const YAML::Node& node) const;
  Status Error(const YAML::Node& node, const std::string& what) const;
};

// The whole text of a config file; NotFound names the path.
StatusOr<std::string> ReadConfigFile(const std::string& path);

// Parses a YAML file / string into a node; errors name the file and line.
StatusOr<YAML::Node> LoadYamlFile(const std::string& path);
StatusOr<YAML::Node> LoadYamlString(const std::string& text, const std::string& name = "<string>");

// Optional scalars: leave *out unchanged when `key` is absent; error when present but of
// the wrong type or out of range.
Status ReadString(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::string* out);
Status ReadBool(const YAML::Node& map, const std::string& key, const YamlContext& ctx, bool* out);
Status ReadInt64(const YAML::Node& map, const std::string& key, const YamlContext& ctx, int64_t* out);
Status ReadUint64(const YAML::Node& map, const std::string& key, const YamlContext& ctx, uint64_t* out);
Status ReadUint32(const YAML::Node& map, const std::string& key, const YamlContext& ctx, uint32_t* out);
Status ReadInt(const YAML::Node& map, const std::string& key, const YamlContext& ctx, int* out);
Status ReadFloat(const YAML::Node& map, const std::string& key, const YamlContext& ctx, float* out);
Status ReadDouble(const YAML::Node& map, const std::string& key, const YamlContext& ctx, double* out);
Status ReadIntList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::vector<int64_t>* out);
Status ReadFloatList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::vector<float>* out);
Status ReadStringList(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                      std::vector<std::string>* out);

// An optional string naming one of `choices` (name, value): *out becomes that value; any
// other string is "unknown <key> '<s>' (use a, b or c)". Absent: *out unchanged.
template <typename T>
Status ReadChoice(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                  std::initializer_list<std::pair<std::string_view, T>> choices, T* out) {
  if (!map[key]) return Status::OK();
  std::string name;
  RETURN_IF_ERROR(ReadString(map, key, ctx, &name));
  std::string names;
  size_t i = 0;
  for (const auto& [choice, value] : choices) {
    if (name == choice) {
      *out = value;
      return Status::OK();
    }
    if (i > 0) names += i + 1 == choices.size() ? " or " : ", ";
    names += choice;
    ++i;
  }
  return ctx.Child(key).Error(map[key], "unknown " + key + " '" + name + "' (use " + names + ")");
}

// Error unless `key` is present.
Status Require(const YAML::Node& map, const std::string& key, const YamlContext& ctx);

// Levenshtein distance between `a` and `b`: the fewest single-character insertions,
// deletions and substitutions that turn one into the other.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` by EditDistance, ignoring ASCII case, when it is close
// enough to be a likely misspelling: at most min(3, (word.size() + 2) / 3) edits, so
// "sync_mod" -> "sync_mode" and "nmae" -> "name", but nothing for "extra" among
// {"server", "tables"}. Ties go to the earlier candidate. Empty when none is close enough.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);

// Checks the keys of the map `map` (whose key path ctx names) and returns InvalidArgument for
// the first key that is neither in `known` nor in `ignored`, or that appears twice (yaml-cpp
// would silently read the first). The message starts with the key's file:line:column and
// suggests the closest known key, or lists the known keys when none is close:
//   job.yaml:12:3: unknown key 'sync_mod' under 'runner' (did you mean 'sync_mode'?)
//   ps.yaml:9:1: unknown key 'extra' at the top level (known keys: server, tables)
// `known`: the keys the parser reads. `ignored`: keys accepted on purpose and not read
// (e.g. PaddleRec keys with no meaning in fleetps); never suggested or listed. Every parser
// of a map calls this with the map's complete key set. OK for a null or non-map node (the
// caller reports a wrong type).
Status RejectUnknownKeys(const YAML::Node& map, const std::vector<std::string>& known, const YamlContext& ctx,
                         const std::vector<std::string>& ignored = {});

}  // namespace fleetps::config
