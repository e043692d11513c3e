#pragma once
// FlatBuffers' verifier (Debian's 2.0.8) checks that a vector's length prefix is 4-byte
// aligned, not that 8-byte elements are 8-byte aligned: a crafted buffer can place a
// [ulong] or [double] vector at 4 mod 8, and reading its elements through typed pointers
// is undefined behaviour. Buffers written by a FlatBuffers builder are always aligned, so
// every reader of an 8-byte vector from outside the process refuses the rest with this
// check after verification (the buffer itself must start 8-byte aligned, as every fleetps
// receive buffer does).

#include <cstdint>

#include <flatbuffers/flatbuffers.h>

namespace fleetps {

// An empty vector has nothing to read (and builders do not align one).
template <typename T>
bool ElementsAligned(const flatbuffers::Vector<T>* v) {
  return v == nullptr || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % alignof(T) == 0;
}

}  // namespace fleetps
