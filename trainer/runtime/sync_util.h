#pragma once
// Helpers the ParamSync implementations share (direct_sync.cc, async_sync.cc, geo_sync.cc).

#include <future>

#include "common/status.h"

namespace fleetps::trainer {

// The first error of two calls, after both completed.
inline Status WaitBoth(std::future<Status>& a, std::future<Status>& b) {
  Status sa = a.get();
  Status sb = b.get();
  return sa.ok() ? sb : sa;
}

// A call that was not needed, as a completed one.
inline std::future<Status> ReadyOk() {
  std::promise<Status> p;
  p.set_value(Status::OK());
  return p.get_future();
}

}  // namespace fleetps::trainer
