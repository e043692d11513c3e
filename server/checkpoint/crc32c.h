#pragma once
// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected; as iSCSI, ext4 and RocksDB before
// masking): the checksum of every checkpoint block and file (schemas/checkpoint.fbs).
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise; both give the
// same value. Crc32c("123456789") == 0xE3069283.
// Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>

namespace fleetps::server {

// Extends `crc` (the CRC of the bytes before, 0 for none) with data[0, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace fleetps::server
