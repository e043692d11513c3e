#pragma once
// Reply verification shared by PsClient's files (internal to trainer/client).

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "common/flatbuffer_align.h"
#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/sharding.h"
#include "common/status.h"

namespace fleetps::trainer {

// Verifies a reply as a T; on failure sets *error (naming `server`) and returns null.
template <typename T>
const T* VerifiedReply(const net::Reply& reply, const std::string& server, Status* error) {
  flatbuffers::Verifier verifier(reply.data(), reply.payload_size);
  if (!verifier.VerifyBuffer<T>(nullptr)) {
    *error = Status::Corruption("malformed " + net::MessageTypeName(reply.type) + " from " + server);
    return nullptr;
  }
  return flatbuffers::GetRoot<T>(reply.data());
}

// The requests of one keyed call: the positions of `keys`, grouped by the server that owns
// each key (ServerOfKey) and cut into chunks of at most `chunk` keys, as (server, positions).
inline std::vector<std::pair<uint32_t, std::vector<uint32_t>>> CallsByServer(std::span<const uint64_t> keys,
                                                                            uint32_t num_servers, size_t chunk) {
  std::vector<std::vector<uint32_t>> by_server(num_servers);
  for (uint32_t i = 0; i < keys.size(); ++i) by_server[ServerOfKey(keys[i], num_servers)].push_back(i);
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> calls;
  for (uint32_t s = 0; s < num_servers; ++s) {
    const auto& list = by_server[s];
    for (size_t b = 0; b < list.size(); b += chunk) {
      calls.emplace_back(s, std::vector<uint32_t>(list.begin() + b, list.begin() + std::min(list.size(), b + chunk)));
    }
  }
  return calls;
}

}  // namespace fleetps::trainer
