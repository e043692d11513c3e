#pragma once
// How long a listener waits before accepting again after accept failed (EMFILE, ENFILE,
// ENOBUFS, ...): the pending connection stays in the backlog, so retrying at once would fail
// the same way in a loop at full CPU. 10 ms after the first failure, doubling up to 1 s;
// back to 0 after a success. The RPC server's and the HTTP endpoint's accept loops.

#include <algorithm>
#include <chrono>

namespace fleetps::net {

inline constexpr std::chrono::milliseconds kMinAcceptBackoff{10};
inline constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};

// The wait after a failed accept, given the wait after the previous one (0 after a success).
inline std::chrono::milliseconds NextAcceptBackoff(std::chrono::milliseconds previous) {
  return std::min(kMaxAcceptBackoff, std::max(kMinAcceptBackoff, previous * 2));
}

}  // namespace fleetps::net
