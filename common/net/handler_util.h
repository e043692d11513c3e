#pragma once
// Pieces shared by PsService's handler files and the heter-trainer's service: payload
// verification, spans over FlatBuffers vectors, and the fan-out state of a request that
// runs on several executor lanes.

#include <atomic>
#include <span>
#include <string>

#include <flatbuffers/flatbuffers.h>

#include "common/flatbuffer_align.h"
#include "common/mutex.h"
#include "common/net/frame.h"
#include "common/net/rpc_server.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace fleetps::net {

// Verifies the payload as a T; on failure answers the request and returns null.
template <typename T>
const T* Verified(const Request& req, const Responder& responder) {
  flatbuffers::Verifier verifier(req.data(), req.payload_size);
  if (req.payload_size == 0 || !verifier.VerifyBuffer<T>(nullptr)) {
    responder.SendError(Status::InvalidArgument("malformed " + MessageTypeName(req.type) + " request from " +
                                                responder.peer() + " (" + std::to_string(req.payload_size) +
                                                " payload bytes failed FlatBuffers verification)"));
    return nullptr;
  }
  return flatbuffers::GetRoot<T>(req.data());
}

// Whenever the server holds a shared secret, a request that changes the job's state (the
// list is in PsService::Handle, server/service/ps_service.cc) needs a peer that proved it
// holds it, whatever server.auth says about the data path. False (after answering
// PermissionDenied, naming the request and the fix) when the peer did not.
inline bool Authorized(const Request& req, const Responder& responder) {
  if (!req.auth_configured || req.authenticated) return true;
  responder.SendError(Status::PermissionDenied(
      MessageTypeName(req.type) + " from " + responder.peer() +
      " changes the job's state, which needs an authenticated peer on a server with a shared secret: set "
      "FLEETPS_AUTH_SECRET_FILE (or server.auth_secret_file in the YAML it reads) on the client to the cluster's "
      "secret file"));
  return false;
}

// False (after answering InvalidArgument) when the 8-byte elements of `v` are misaligned in
// the payload (common/flatbuffer_align.h): only a hand-crafted buffer does that.
template <typename T>
bool Aligned(const flatbuffers::Vector<T>* v, const char* field, const Request& req, const Responder& responder) {
  if (ElementsAligned(v)) return true;
  responder.SendError(Status::InvalidArgument("malformed " + MessageTypeName(req.type) + " request from " +
                                              responder.peer() + ": its '" + field +
                                              "' vector is not 8-byte aligned (not written by a FlatBuffers "
                                              "builder)"));
  return false;
}

template <typename T>
std::span<const T> Span(const flatbuffers::Vector<T>* v) {
  if (v == nullptr) return {};
  return {v->data(), v->size()};
}

// Keeps a request's payload alive while its shard tasks run, counts them down, and
// remembers the first error.
struct Fanout {
  Request request;
  Responder responder;
  std::atomic<uint32_t> remaining{0};
  Mutex mu;  // guards error, and the results a task of a derived state adds
  Status error GUARDED_BY(mu);

  Fanout(Request r, Responder p) : request(std::move(r)), responder(std::move(p)) {}
  void Fail(const Status& st) EXCLUDES(mu) {
    MutexLock lock(mu);
    if (error.ok()) error = st;
  }
  // The first error (OK when none): read by the task that finished last.
  Status first_error() EXCLUDES(mu) {
    MutexLock lock(mu);
    return error;
  }
  // True for the task that finished last.
  bool Done() { return remaining.fetch_sub(1) == 1; }
};

}  // namespace fleetps::net
