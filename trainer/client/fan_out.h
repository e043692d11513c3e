#pragma once
// The fan-out of PsClient's calls to several pservers (internal to trainer/client).
//
// CallJoin completes a set of calls sent at once; FanOut is the one shape of every keyed
// (sparse) call: split the keys by the server that owns each (ServerOfKey), cut each server's
// share into requests of at most `chunk` keys, build and send one request per piece, verify
// each reply and hand it to the caller, and complete one future when the last reply is in.
//
// Thread-safety: replies arrive on the client's io threads; CallJoin's members are safe to
// use from any of them, and a FanOut's hooks run on them (concurrently, for different
// pieces). Each piece's keys are its own positions, so hooks that write only to those
// positions need no lock.

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "common/mutex.h"
#include "common/net/rpc_client.h"
#include "common/sharding.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

// Completion of a fan-out: counts calls down (`remaining`, set before the first is sent),
// keeps the first error, runs `finish` with the result and fulfils the promise when the last
// call is done.
struct CallJoin {
  std::atomic<uint32_t> remaining{0};
  Mutex mu;  // guards error
  Status error GUARDED_BY(mu);
  std::promise<Status> promise;
  // Runs once, before the promise is set, with the call's result (null: nothing to do).
  std::function<void(const Status& result)> finish;

  void Fail(const Status& st) EXCLUDES(mu) {
    MutexLock lock(mu);
    if (error.ok()) error = st;
  }
  void Done() EXCLUDES(mu) {
    if (remaining.fetch_sub(1) != 1) return;
    Status result;
    {
      MutexLock lock(mu);
      result = error;
    }
    if (finish) finish(result);
    promise.set_value(std::move(result));
  }
  static std::future<Status> Ready(Status st) {
    std::promise<Status> p;
    p.set_value(std::move(st));
    return p.get_future();
  }
};

// The requests of one keyed call: the positions of `keys`, grouped by the server that owns
// each key (ServerOfKey) and cut into chunks of at most `chunk` keys, as (server, positions),
// in server order and, within a server, in the order of `keys`.
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

// A reply of a FanOut verified as a `Reply` and handed to `read`; OK without a look for
// Reply = void.
template <typename Reply, typename OnReply>
Status ReadFanOutReply(const net::Reply& reply, const std::string& server, std::span<const uint32_t> members,
                       const OnReply& read) {
  if constexpr (std::is_void_v<Reply>) {
    (void)reply;
    (void)server;
    (void)members;
    (void)read;
    return Status::OK();
  } else {
    Status error;
    const Reply* msg = VerifiedReply<Reply>(reply, server, &error);
    if (msg == nullptr) return error;
    return read(server, members, *msg);
  }
}

// One keyed call of message `type` over `clients` (pserver i at clients[i]), one request per
// piece of CallsByServer(keys, clients.size(), chunk):
//   build(server, members) -> flatbuffers::DetachedBuffer: the request of the keys at the
//     positions `members` of `keys` (std::span<const uint32_t>), owned by pserver `server`.
//     Runs on the calling thread before FanOut returns: it may read the caller's buffers.
//   on_reply(server_name, members, const Reply& reply) -> Status: reads a reply, verified as a
//     `Reply` first (a malformed one fails the call, Corruption naming the server); an error
//     fails the call. Runs on an io thread: what it captures must outlive the call.
//     Reply = void: the replies are acknowledgements, not read; pass nullptr for on_reply.
//   finish(result): runs once when every reply is in (CallJoin::finish); null: none.
// The future holds the first error (a transport error, or a reply's), else OK. No keys: OK at
// once, after finish.
template <typename Reply, typename Build, typename OnReply>
std::future<Status> FanOut(std::span<const std::unique_ptr<net::RpcClient>> clients, uint16_t type,
                           std::span<const uint64_t> keys, size_t chunk, Build&& build, OnReply on_reply,
                           std::function<void(const Status&)> finish = nullptr) {
  auto calls = CallsByServer(keys, static_cast<uint32_t>(clients.size()), chunk);
  auto join = std::make_shared<CallJoin>();
  join->finish = std::move(finish);
  if (calls.empty()) {
    if (join->finish) join->finish(Status::OK());
    return CallJoin::Ready(Status::OK());
  }
  join->remaining = static_cast<uint32_t>(calls.size());  // before the first reply can count down
  auto future = join->promise.get_future();
  const auto read = std::make_shared<const OnReply>(std::move(on_reply));
  for (auto& [s, positions] : calls) {
    auto members = std::make_shared<const std::vector<uint32_t>>(std::move(positions));
    flatbuffers::DetachedBuffer request = build(s, std::span<const uint32_t>(*members));
    clients[s]->Call(type, std::move(request),
                     [join, read, members, server = clients[s]->name()](StatusOr<net::Reply> r) {
                       const Status st = r.ok() ? ReadFanOutReply<Reply>(*r, server, *members, *read) : r.status();
                       if (!st.ok()) join->Fail(st);
                       join->Done();
                     });
  }
  return future;
}

}  // namespace fleetps::trainer
