#pragma once
// Reply verification shared by PsClient's files (internal to trainer/client).

#include <span>
#include <string>

#include <flatbuffers/flatbuffers.h>

#include "common/flatbuffer_align.h"
#include "common/net/frame.h"
#include "common/net/rpc_client.h"
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

}  // namespace fleetps::trainer
