#include "common/config/optimizer_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <vector>

namespace fleetps::config {
namespace {

constexpr OptimizerKind kKinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam};

// A float hyper-parameter: its key, where it lives, and the values it accepts. The parser
// and ValidateOptimizer both check through this table, so they cannot disagree.
struct FloatField {
  const char* key;
  float OptimizerOptions::*member;
  bool (*valid)(float);
  const char* expected;  // for "expected <this>, got ..."
};

// Written so that NaN fails every check.
bool Positive(float v) { return std::isfinite(v) && v > 0.0f; }
bool NonNegative(float v) { return std::isfinite(v) && v >= 0.0f; }
bool UnitInterval(float v) { return v >= 0.0f && v < 1.0f; }

constexpr FloatField kFloatFields[] = {
    {"learning_rate", &OptimizerOptions::learning_rate, Positive, "a number > 0"},
    {"initial_accumulator", &OptimizerOptions::initial_accumulator, NonNegative, "a number >= 0"},
    {"beta1", &OptimizerOptions::beta1, UnitInterval, "a number in [0, 1)"},
    {"beta2", &OptimizerOptions::beta2, UnitInterval, "a number in [0, 1)"},
    {"epsilon", &OptimizerOptions::epsilon, Positive, "a number > 0"},
    {"weight_decay", &OptimizerOptions::weight_decay, NonNegative, "a number >= 0"},
};

// Shortest round-trip text of a float ("0.5", "2").
std::string FormatFloat(float v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

bool ValidBounds(float min, float max) { return std::isfinite(min) && std::isfinite(max) && min <= max; }

constexpr char kBoundsExpected[] = "[min, max]: two finite numbers with min <= max";

// Keys PaddleRec's optimizer map carries that fleetps accepts and ignores.
std::vector<std::string> PaddleRecIgnoredKeys() {
  return {
      "strategy",        // async | sync | geo: fleetps takes the mode from runner.sync_mode
      "adam_lazy_mode",  // Paddle's lazy Adam updates only the rows of a batch: what sparse tables do
  };
}

}  // namespace

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdagrad: return "adagrad";
    case OptimizerKind::kAdam: return "adam";
  }
  return "unknown";
}

Status ParseOptimizer(const YAML::Node& node, const YamlContext& ctx, OptimizerOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map such as {name: adam, learning_rate: 0.001}");
  std::vector<std::string> keys = {"name", "class", "weight_bounds"};
  for (const auto& f : kFloatFields) keys.push_back(f.key);
  RETURN_IF_ERROR(RejectUnknownKeys(node, keys, ctx, PaddleRecIgnoredKeys()));
  OptimizerOptions o = *out;

  if (node["name"] && node["class"]) {
    return ctx.Error(node, "give the rule as 'name' or as 'class' (PaddleRec's spelling), not both");
  }
  const std::string kind_key = node["class"] ? "class" : "name";
  if (node[kind_key] && !node[kind_key].IsNull()) {
    std::string name;
    RETURN_IF_ERROR(ReadString(node, kind_key, ctx, &name));
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    std::vector<std::string> names;
    bool found = false;
    for (OptimizerKind kind : kKinds) {
      names.emplace_back(OptimizerKindName(kind));
      if (lower == names.back()) {
        o.kind = kind;
        found = true;
      }
    }
    if (!found) {
      std::string allowed;
      for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
      std::string message = "expected one of " + allowed + " (case-insensitive), got \"" + name + "\"";
      if (const std::string closest = ClosestMatch(name, names); !closest.empty()) {
        message += " (did you mean '" + closest + "'?)";
      }
      return ctx.Child(kind_key).Error(node[kind_key], message);
    }
  }

  for (const auto& f : kFloatFields) {
    const YAML::Node value = node[f.key];
    if (!value || value.IsNull()) continue;
    float v = 0.0f;
    RETURN_IF_ERROR(ReadFloat(node, f.key, ctx, &v));
    if (!f.valid(v)) {
      return ctx.Child(f.key).Error(value, std::string("expected ") + f.expected + ", got \"" + value.Scalar() + "\"");
    }
    o.*f.member = v;
  }

  if (!(o.learning_rate * o.weight_decay < 1)) {
    return ctx.Child("weight_decay")
        .Error(node["weight_decay"] ? node["weight_decay"] : node,
               "weight_decay " + FormatFloat(o.weight_decay) + " times learning_rate " + FormatFloat(o.learning_rate) +
                   " must be < 1 (each update multiplies the weights by 1 - their product)");
  }

  std::vector<float> bounds;
  RETURN_IF_ERROR(ReadFloatList(node, "weight_bounds", ctx, &bounds));
  if (node["weight_bounds"] && !node["weight_bounds"].IsNull()) {
    if (bounds.size() != 2 || !ValidBounds(bounds[0], bounds[1])) {
      return ctx.Child("weight_bounds").Error(node["weight_bounds"], std::string("expected ") + kBoundsExpected);
    }
    o.has_bounds = true;
    o.bound_min = bounds[0];
    o.bound_max = bounds[1];
  }
  *out = o;
  return Status::OK();
}

Status ValidateOptimizer(const OptimizerOptions& o) {
  if (std::find(std::begin(kKinds), std::end(kKinds), o.kind) == std::end(kKinds)) {
    return Status::InvalidArgument("optimizer.name: unknown rule " + std::to_string(static_cast<int>(o.kind)));
  }
  for (const auto& f : kFloatFields) {
    const float v = o.*f.member;
    if (!f.valid(v)) {
      return Status::InvalidArgument(std::string("optimizer.") + f.key + ": expected " + f.expected + ", got " +
                                     std::to_string(v));
    }
  }
  if (!(o.learning_rate * o.weight_decay < 1)) {
    return Status::InvalidArgument("optimizer.weight_decay " + std::to_string(o.weight_decay) +
                                   " times learning_rate " + std::to_string(o.learning_rate) + " must be < 1");
  }
  if (o.has_bounds && !ValidBounds(o.bound_min, o.bound_max)) {
    return Status::InvalidArgument(std::string("optimizer.weight_bounds: expected ") + kBoundsExpected + ", got [" +
                                   std::to_string(o.bound_min) + ", " + std::to_string(o.bound_max) + "]");
  }
  return Status::OK();
}

}  // namespace fleetps::config
