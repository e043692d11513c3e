#include "common/config/yaml_util.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

namespace fleetps::config {
namespace {

std::string Quote(const YAML::Node& node) {
  if (node.IsScalar()) return "\"" + node.Scalar() + "\"";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "null";
}

// Parses an integer scalar fully (no trailing junk).
bool ParseInt64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 0);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseUint64(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// Looks up `key`; sets *found=false when absent. yaml-cpp may throw on non-map nodes.
YAML::Node Lookup(const YAML::Node& map, const std::string& key, bool* found) {
  *found = false;
  if (!map || !map.IsMap()) return YAML::Node();
  YAML::Node n = map[key];
  if (!n || n.IsNull()) return YAML::Node();
  *found = true;
  return n;
}

template <typename T, typename Parse>
Status ReadScalar(const YAML::Node& map, const std::string& key, const YamlContext& ctx, T* out, const char* expected,
                  Parse parse) {
  bool found = false;
  YAML::Node n = Lookup(map, key, &found);
  if (!found) return Status::OK();
  YamlContext c = ctx.Child(key);
  if (!n.IsScalar()) return c.Error(n, std::string("expected ") + expected + ", got " + Quote(n));
  if (!parse(n.Scalar(), out)) return c.Error(n, std::string("expected ") + expected + ", got " + Quote(n));
  return Status::OK();
}

}  // namespace

YamlContext YamlContext::Child(const std::string& key) const {
  return YamlContext{file, path.empty() ? key : path + "." + key};
}

YamlContext YamlContext::Index(size_t i) const { return YamlContext{file, path + "[" + std::to_string(i) + "]"}; }

std::string YamlContext::Where(const YAML::Node& node) const {
  std::string out = file;
  if (node && node.Mark().line >= 0) out += ":" + std::to_string(node.Mark().line + 1);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  return out;
}

std::string YamlContext::Location(const YAML::Node& node) const {
  if (!node || node.Mark().line < 0) return file;
  return file + ":" + std::to_string(node.Mark().line + 1) + ":" + std::to_string(node.Mark().column + 1);
}

Status YamlContext::Error(const YAML::Node& node, const std::string& what) const {
  return Status::InvalidArgument(Where(node) + what);
}

StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open config file (check the path)");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read error");
  return ss.str();
}

StatusOr<YAML::Node> LoadYamlFile(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::NotFound(path + ": cannot open config file (check the path and permissions)");
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
}

StatusOr<YAML::Node> LoadYamlString(const std::string& text, const std::string& name) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(name + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
}

Status ReadString(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::string* out) {
  return ReadScalar(map, key, ctx, out, "a string", [](const std::string& s, std::string* o) {
    *o = s;
    return true;
  });
}

Status ReadBool(const YAML::Node& map, const std::string& key, const YamlContext& ctx, bool* out) {
  return ReadScalar(map, key, ctx, out, "true or false", [](const std::string& s, bool* o) {
    std::string l = s;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "true" || l == "yes" || l == "on" || l == "1") return *o = true, true;
    if (l == "false" || l == "no" || l == "off" || l == "0") return *o = false, true;
    return false;
  });
}

Status ReadInt64(const YAML::Node& map, const std::string& key, const YamlContext& ctx, int64_t* out) {
  return ReadScalar(map, key, ctx, out, "an integer", ParseInt64);
}

Status ReadUint64(const YAML::Node& map, const std::string& key, const YamlContext& ctx, uint64_t* out) {
  return ReadScalar(map, key, ctx, out, "a non-negative integer", ParseUint64);
}

Status ReadUint32(const YAML::Node& map, const std::string& key, const YamlContext& ctx, uint32_t* out) {
  return ReadScalar(map, key, ctx, out, "an integer in [0, 4294967295]", [](const std::string& s, uint32_t* o) {
    uint64_t v = 0;
    if (!ParseUint64(s, &v) || v > std::numeric_limits<uint32_t>::max()) return false;
    *o = static_cast<uint32_t>(v);
    return true;
  });
}

Status ReadInt(const YAML::Node& map, const std::string& key, const YamlContext& ctx, int* out) {
  return ReadScalar(map, key, ctx, out, "a 32-bit integer", [](const std::string& s, int* o) {
    int64_t v = 0;
    if (!ParseInt64(s, &v) || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return false;
    }
    *o = static_cast<int>(v);
    return true;
  });
}

Status ReadFloat(const YAML::Node& map, const std::string& key, const YamlContext& ctx, float* out) {
  return ReadScalar(map, key, ctx, out, "a number", [](const std::string& s, float* o) {
    double v = 0;
    if (!ParseDouble(s, &v)) return false;
    *o = static_cast<float>(v);
    return true;
  });
}

Status ReadDouble(const YAML::Node& map, const std::string& key, const YamlContext& ctx, double* out) {
  return ReadScalar(map, key, ctx, out, "a number", ParseDouble);
}

namespace {
template <typename T, typename Parse>
Status ReadList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::vector<T>* out,
                const char* expected, Parse parse) {
  bool found = false;
  YAML::Node n = Lookup(map, key, &found);
  if (!found) return Status::OK();
  YamlContext c = ctx.Child(key);
  if (!n.IsSequence()) return c.Error(n, std::string("expected a list of ") + expected + ", got " + Quote(n));
  std::vector<T> values;
  for (size_t i = 0; i < n.size(); ++i) {
    YAML::Node item = n[i];
    T v{};
    if (!item.IsScalar() || !parse(item.Scalar(), &v)) {
      return c.Index(i).Error(item, std::string("expected ") + expected + ", got " + Quote(item));
    }
    values.push_back(std::move(v));
  }
  *out = std::move(values);
  return Status::OK();
}
}  // namespace

Status ReadIntList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::vector<int64_t>* out) {
  return ReadList(map, key, ctx, out, "integers", ParseInt64);
}

Status ReadFloatList(const YAML::Node& map, const std::string& key, const YamlContext& ctx, std::vector<float>* out) {
  return ReadList(map, key, ctx, out, "numbers", [](const std::string& s, float* o) {
    double v = 0;
    if (!ParseDouble(s, &v)) return false;
    *o = static_cast<float>(v);
    return true;
  });
}

Status ReadStringList(const YAML::Node& map, const std::string& key, const YamlContext& ctx,
                      std::vector<std::string>* out) {
  return ReadList(map, key, ctx, out, "strings", [](const std::string& s, std::string* o) {
    *o = s;
    return true;
  });
}

Status Require(const YAML::Node& map, const std::string& key, const YamlContext& ctx) {
  bool found = false;
  Lookup(map, key, &found);
  if (found) return Status::OK();
  return ctx.Error(map, "missing required key '" + key + "'");
}

size_t EditDistance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table: row[j] = distance(a[0, i), b[0, j)).
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];  // distance(a[0, i-1), b[0, j-1))
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  const auto lower = [](std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
  };
  const std::string w = lower(word);
  const size_t limit = std::min<size_t>(3, (word.size() + 2) / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const size_t d = EditDistance(w, lower(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

Status RejectUnknownKeys(const YAML::Node& map, const std::vector<std::string>& known, const YamlContext& ctx,
                         const std::vector<std::string>& ignored) {
  if (!map || !map.IsMap()) return Status::OK();
  const std::string where = ctx.path.empty() ? "at the top level" : "under '" + ctx.path + "'";
  const auto listed = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  std::vector<std::pair<std::string, int>> seen;  // key, 1-based line
  for (const auto& kv : map) {
    const YAML::Node& key_node = kv.first;
    if (!key_node.IsScalar()) {
      return Status::InvalidArgument(ctx.Location(key_node) + ": a key " + where + " is " + Quote(key_node) +
                                     ", expected a name");
    }
    const std::string& key = key_node.Scalar();
    for (const auto& [earlier, line] : seen) {
      if (earlier == key) {
        return Status::InvalidArgument(ctx.Location(key_node) + ": duplicate key '" + key + "' " + where +
                                       (line > 0 ? " (first at line " + std::to_string(line) + ")" : "") +
                                       "; give each key once");
      }
    }
    seen.emplace_back(key, key_node.Mark().line + 1);
    if (listed(known, key) || listed(ignored, key)) continue;
    std::string hint;
    if (const std::string closest = ClosestMatch(key, known); !closest.empty()) {
      hint = "did you mean '" + closest + "'?";
    } else {
      for (const auto& k : known) hint += (hint.empty() ? "known keys: " : ", ") + k;
      if (hint.empty()) hint = "this map takes no keys";
    }
    return Status::InvalidArgument(ctx.Location(key_node) + ": unknown key '" + key + "' " + where + " (" + hint + ")");
  }
  return Status::OK();
}

}  // namespace fleetps::config
