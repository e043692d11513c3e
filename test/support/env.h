#pragma once
// The environment a test hands to the config readers: an EnvLookup over a fixed map.

#include <map>
#include <optional>
#include <string>

#include "common/config/server_config.h"

namespace fleetps::testing {

inline config::EnvLookup EnvFrom(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace fleetps::testing
