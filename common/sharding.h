#pragma once
// Key -> server -> shard: the one pure function shared by the client's router and the
// server's ownership check. Stable across processes and releases (part of the on-disk
// contract: a checkpoint saved with N servers is re-split with this function when loaded
// into M servers), so never change the mixing constants.
//
// A key is mixed once (splitmix64 finalizer); the low part picks the server, the rest
// picks the shard inside that server. Both are balanced for any key distribution.

#include <cstdint>

namespace fleetps {

// splitmix64 finalizer: a bijective 64-bit mix.
constexpr uint64_t MixKey(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct KeyPlacement {
  uint32_t server;  // index in the server list, [0, num_servers)
  uint32_t shard;   // shard inside that server, [0, shards_per_server)
};

// num_servers >= 1, shards_per_server >= 1.
constexpr KeyPlacement PlaceKey(uint64_t key, uint32_t num_servers, uint32_t shards_per_server) {
  const uint64_t h = MixKey(key);
  return KeyPlacement{static_cast<uint32_t>(h % num_servers),
                      static_cast<uint32_t>((h / num_servers) % shards_per_server)};
}

constexpr uint32_t ServerOfKey(uint64_t key, uint32_t num_servers) {
  return static_cast<uint32_t>(MixKey(key) % num_servers);
}

// Dense tables: a flat vector of `total` floats split into contiguous slices, one per
// server; server i holds [DenseSliceBegin(i), DenseSliceBegin(i + 1)).
constexpr uint64_t DenseSliceBegin(uint64_t total, uint32_t num_servers, uint32_t server) {
  return total * server / num_servers;
}

}  // namespace fleetps
