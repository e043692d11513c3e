#include "common/dense/cpu_features.h"

#include <cpuid.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace fleetps::dense {
namespace {

struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return Regs{};
  return r;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// XCR0: the state components the OS saves (only valid when CPUID says OSXSAVE).
uint64_t Xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

std::string Trimmed(std::string s) {
  const auto begin = s.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(' ');
  return s.substr(begin, end - begin + 1);
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  const Regs vendor = Cpuid(0);
  char name[13] = {};
  std::memcpy(name, &vendor.ebx, 4);
  std::memcpy(name + 4, &vendor.edx, 4);
  std::memcpy(name + 8, &vendor.ecx, 4);
  f.vendor = name;
  if (Cpuid(0x80000000).eax >= 0x80000004) {
    std::array<char, 49> brand{};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = Cpuid(0x80000002 + i);
      std::memcpy(brand.data() + 16 * i, &r, 16);
    }
    f.model = Trimmed(brand.data());
  }
  const uint32_t max_leaf = vendor.eax;
  const Regs l1 = Cpuid(1);
  f.sse41 = Bit(l1.ecx, 19);
  f.fma = Bit(l1.ecx, 12);
  const bool osxsave = Bit(l1.ecx, 27);
  if (osxsave) {
    const uint64_t xcr0 = Xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;                   // XMM, YMM
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;           // XTILECFG, XTILEDATA
  }
  if (max_leaf >= 7) {
    const Regs l7 = Cpuid(7, 0);
    f.avx2 = Bit(l7.ebx, 5);
    f.avx512f = Bit(l7.ebx, 16);
    f.avx512dq = Bit(l7.ebx, 17);
    f.avx512bw = Bit(l7.ebx, 30);
    f.avx512vl = Bit(l7.ebx, 31);
    f.amx_bf16 = Bit(l7.edx, 22);
    f.amx_tile = Bit(l7.edx, 24);
    if (l7.eax >= 1) f.avx512_bf16 = Bit(Cpuid(7, 1).eax, 5);
  }
  return f;
}

IsaLevel CpuFeatures::best() const {
  const bool avx2_ok = os_avx && avx2 && fma;
  const bool avx512_ok = avx2_ok && os_avx512 && avx512f && avx512bw && avx512vl && avx512dq;
  if (avx512_ok && os_amx && amx_tile && amx_bf16) return IsaLevel::kAmx;
  if (avx512_ok && avx512_bf16) return IsaLevel::kAvx512Bf16;
  if (avx512_ok) return IsaLevel::kAvx512;
  if (avx2_ok) return IsaLevel::kAvx2;
  return IsaLevel::kGeneric;
}

std::string CpuFeatures::FlagList() const {
  std::string out;
  const auto add = [&out](bool on, const char* flag) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += flag;
  };
  add(sse41, "sse4_1");
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512dq, "avx512dq");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  add(amx_tile, "amx_tile");
  return out;
}

std::string_view IsaName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kGeneric: return "generic";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx512Bf16: return "avx512_bf16";
    case IsaLevel::kAmx: return "amx";
  }
  return "?";
}

std::optional<IsaLevel> ParseIsa(std::string_view name) {
  for (IsaLevel l : {IsaLevel::kGeneric, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Bf16, IsaLevel::kAmx}) {
    if (name == IsaName(l)) return l;
  }
  return std::nullopt;
}

}  // namespace fleetps::dense
