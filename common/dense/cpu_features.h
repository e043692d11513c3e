#pragma once
// What the CPU this process runs on can compute, read from the CPU itself (CPUID, and
// XGETBV for what the kernel saves on a context switch), never from the environment.
//
// IsaLevel orders the kernel families fleetps's dense backend (cpu_gemm.h) distinguishes;
// each level includes the ones before it:
//   generic      SSE4.1 (any x86-64 server)
//   avx2         AVX2 + FMA
//   avx512       AVX-512 F/BW/VL/DQ
//   avx512_bf16  + AVX512-BF16 (bf16 dot products, e.g. Cooper Lake, Zen 4)
//   amx          + AMX-TILE/AMX-BF16 (bf16 tile matrix units, Sapphire Rapids and later)
// Thread-safety: pure functions.

#include <optional>
#include <string>
#include <string_view>

namespace fleetps::dense {

enum class IsaLevel { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };

struct CpuFeatures {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string model;   // the brand string, e.g. "AMD EPYC 9454 48-Core Processor" (generic on some VMs)
  bool sse41 = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  // The OS saves the YMM / ZMM / AMX tile state (XCR0): without it the instructions fault.
  bool os_avx = false;
  bool os_avx512 = false;
  bool os_amx = false;

  // The highest level whose instructions the CPU has and the OS enables.
  IsaLevel best() const;
  // The flags above, as lscpu spells them ("avx2 fma avx512f ... amx_bf16").
  std::string FlagList() const;
};

CpuFeatures DetectCpuFeatures();

std::string_view IsaName(IsaLevel level);
// "generic" | "avx2" | "avx512" | "avx512_bf16" | "amx"; nullopt for anything else.
std::optional<IsaLevel> ParseIsa(std::string_view name);
// Whether bf16 matrix products run natively at this level (AVX512-BF16 or AMX).
inline bool HasBf16(IsaLevel level) { return level >= IsaLevel::kAvx512Bf16; }

}  // namespace fleetps::dense
