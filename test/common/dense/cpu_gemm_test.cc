#include "common/dense/cpu_gemm.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/dense/cpu_features.h"
#include "test/common/dense/dense_test_support.h"

namespace fleetps::dense {
namespace {

using testing::Setup;

// The flags of the first processor in /proc/cpuinfo, as the kernel reports them.
std::set<std::string> ProcCpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// bf16 as the backend rounds it: round to nearest, ties to even, kept in a float.
float RoundBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

struct Case {
  Op op_a, op_b;
  size_t m, n, k;
  float beta;
  bool bias, relu;
};

// C = op(A) op(B) + beta C + bias, then ReLU, in double, on inputs rounded by `round`.
// Also returns per element sum |a||b| (the scale of the rounding error).
template <typename Round>
void Reference(const Case& c, const std::vector<float>& a, size_t lda, const std::vector<float>& b, size_t ldb,
               const std::vector<float>& c0, const std::vector<float>& bias, Round round, std::vector<double>* out,
               std::vector<double>* scale) {
  out->assign(c.m * c.n, 0.0);
  scale->assign(c.m * c.n, 0.0);
  for (size_t i = 0; i < c.m; ++i) {
    for (size_t j = 0; j < c.n; ++j) {
      double sum = 0, mag = 0;
      for (size_t p = 0; p < c.k; ++p) {
        const double av = round(c.op_a == Op::kN ? a[i * lda + p] : a[p * lda + i]);
        const double bv = round(c.op_b == Op::kN ? b[p * ldb + j] : b[j * ldb + p]);
        sum += av * bv;
        mag += std::abs(av * bv);
      }
      double v = sum + (c.beta != 0 ? c0[i * c.n + j] : 0.0) + (c.bias ? bias[j] : 0.0);
      if (c.relu) v = std::max(v, 0.0);
      (*out)[i * c.n + j] = v;
      (*scale)[i * c.n + j] = mag + 1.0;
    }
  }
}

// Runs `c` on `gemm` with random operands (row strides padded past the width) and returns the
// largest |error| / scale against the reference on inputs rounded as the precision says, and
// against the fp32 reference.
std::pair<double, double> RunCase(const CpuGemm& gemm, const Case& c, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t a_rows = c.op_a == Op::kN ? c.m : c.k, a_cols = c.op_a == Op::kN ? c.k : c.m;
  const size_t b_rows = c.op_b == Op::kN ? c.k : c.n, b_cols = c.op_b == Op::kN ? c.n : c.k;
  const size_t lda = a_cols + 3, ldb = b_cols + 1;
  std::vector<float> a(a_rows * lda), b(b_rows * ldb), c0(c.m * c.n), bias(c.n);
  for (auto* v : {&a, &b, &c0, &bias}) {
    for (float& x : *v) x = u(rng);
  }
  std::vector<float> out = c0;
  gemm.Gemm(c.op_a, c.op_b, c.m, c.n, c.k, a.data(), lda, b.data(), ldb, c.beta, out.data(), c.n,
            {.bias = c.bias ? bias.data() : nullptr, .relu = c.relu});
  const bool bf16 = gemm.precision() == Precision::kBf16;
  std::vector<double> ref, scale, ref32, scale32;
  Reference(
      c, a, lda, b, ldb, c0, bias, [&](float x) { return bf16 ? RoundBf16(x) : x; }, &ref, &scale);
  Reference(
      c, a, lda, b, ldb, c0, bias, [](float x) { return x; }, &ref32, &scale32);
  double worst = 0, worst32 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    worst = std::max(worst, std::abs(out[i] - ref[i]) / scale[i]);
    worst32 = std::max(worst32, std::abs(out[i] - ref32[i]) / scale32[i]);
  }
  return {worst, worst32};
}

std::vector<Case> RandomCases(std::mt19937_64& rng, int count) {
  std::vector<Case> cases;
  std::uniform_int_distribution<size_t> dim(1, 300);
  for (int i = 0; i < count; ++i) {
    Case c{i % 2 ? Op::kT : Op::kN,
           (i / 2) % 2 ? Op::kT : Op::kN,
           dim(rng),
           dim(rng),
           dim(rng),
           (i / 4) % 2 ? 1.0f : 0.0f,
           (i / 8) % 2 == 1,
           (i / 16) % 2 == 1};
    if (i % 5 == 0) c.m = 1;  // one example
    cases.push_back(c);
  }
  // The ctr_dnn layers' shapes at batch 512: forward, dW = x^T dy, dx = dy W^T.
  cases.push_back({Op::kN, Op::kN, 512, 512, 247, 0.0f, true, true});
  cases.push_back({Op::kT, Op::kN, 247, 512, 512, 0.0f, false, false});
  cases.push_back({Op::kN, Op::kT, 512, 247, 512, 0.0f, false, false});
  return cases;
}

TEST_CASE("The CPU's features are the flags /proc/cpuinfo reports") {
  const std::set<std::string> flags = ProcCpuFlags();
  REQUIRE_FALSE(flags.empty());
  const CpuFeatures f = DetectCpuFeatures();
  INFO("cpu: " << f.vendor << " " << f.model << "; detected: " << f.FlagList());
  CHECK(f.sse41 == flags.count("sse4_1"));
  CHECK(f.avx2 == flags.count("avx2"));
  CHECK(f.fma == flags.count("fma"));
  CHECK(f.avx512f == flags.count("avx512f"));
  CHECK(f.avx512dq == flags.count("avx512dq"));
  CHECK(f.avx512bw == flags.count("avx512bw"));
  CHECK(f.avx512vl == flags.count("avx512vl"));
  CHECK(f.avx512_bf16 == flags.count("avx512_bf16"));
  CHECK(f.amx_bf16 == flags.count("amx_bf16"));
  CHECK(f.amx_tile == flags.count("amx_tile"));
  // The best level follows from the flags alone.
  IsaLevel expected = IsaLevel::kGeneric;
  if (flags.count("avx2") && flags.count("fma")) expected = IsaLevel::kAvx2;
  if (expected == IsaLevel::kAvx2 && flags.count("avx512f") && flags.count("avx512bw") && flags.count("avx512vl") &&
      flags.count("avx512dq")) {
    expected = IsaLevel::kAvx512;
    if (flags.count("avx512_bf16")) expected = IsaLevel::kAvx512Bf16;
    if (flags.count("amx_bf16") && flags.count("amx_tile")) expected = IsaLevel::kAmx;
  }
  CHECK(f.best() == expected);
}

TEST_CASE("The backend runs the best kernel family the CPU has, under the process's cap") {
  const CpuGemm& gemm = *Setup().fp32;
  const IsaLevel best = DetectCpuFeatures().best();
  const IsaLevel expected = Setup().cap ? std::min(*Setup().cap, best) : best;
  INFO("family " << IsaName(gemm.isa()) << ", kernel " << gemm.kernel() << ", CPU best " << IsaName(best));
  CHECK(gemm.isa() == expected);
  CHECK(gemm.backend().rfind("oneDNN ", 0) == 0);
  // Never oneDNN's reference (non-JIT) code where a JIT family is available.
  if (gemm.isa() >= IsaLevel::kAvx2) CHECK(gemm.kernel().find("ref") == std::string::npos);
  CHECK(gemm.Describe().find(std::string(IsaName(gemm.isa()))) != std::string::npos);
}

TEST_CASE("fp32 products match a double-precision reference on random shapes, transposes and epilogues") {
  std::mt19937_64 rng(35);
  for (const Case& c : RandomCases(rng, 48)) {
    const auto [err, err32] = RunCase(*Setup().fp32, c, rng);
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " opA " << (c.op_a == Op::kT) << " opB " << (c.op_b == Op::kT)
              << " beta " << c.beta << " bias " << c.bias << " relu " << c.relu);
    CHECK(err < 1e-6);
  }
}

TEST_CASE("bf16 products round their inputs to nearest even bf16 and accumulate in fp32") {
  const IsaLevel isa = Setup().fp32->isa();
  auto bf16 = CpuGemm::Create({.precision = Precision::kBf16, .max_isa = Setup().cap});
  if (!HasBf16(isa)) {
    // Refused with the reason and the fix.
    REQUIRE_FALSE(bf16.ok());
    CHECK(bf16.status().IsInvalidArgument());
    CHECK_THAT(bf16.status().message(), Catch::Contains("fleetps.dense.precision bf16 needs a CPU with AVX512-BF16 "
                                                        "or AMX") &&
                                            Catch::Contains("Set fleetps.dense.precision: fp32"));
    return;
  }
  REQUIRE(bf16.ok());
  const CpuGemm& gemm = **bf16;
  CHECK(gemm.precision() == Precision::kBf16);
  CHECK((gemm.kernel().find("bf16") != std::string::npos || gemm.kernel().find("amx") != std::string::npos));
  // 1 + 2^-8 is halfway between bf16's 1 and 1 + 2^-7: ties go to the even one, 1.
  // 1 + 2^-8 + 2^-9 is nearer 1 + 2^-7.
  const float tie = 1.0f + 0x1p-8f, above = 1.0f + 0x1p-8f + 0x1p-9f, one = 1.0f;
  float out = 0;
  gemm.Gemm(Op::kN, Op::kN, 1, 1, 1, &tie, 1, &one, 1, 0.0f, &out, 1);
  CHECK(out == 1.0f);
  gemm.Gemm(Op::kN, Op::kN, 1, 1, 1, &above, 1, &one, 1, 0.0f, &out, 1);
  CHECK(out == 1.0f + 0x1p-7f);
  // Random shapes: exact to fp32 accumulation on the rounded inputs; within bf16's rounding
  // of the fp32 result.
  std::mt19937_64 rng(36);
  for (const Case& c : RandomCases(rng, 48)) {
    const auto [err, err32] = RunCase(gemm, c, rng);
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " opA " << (c.op_a == Op::kT) << " opB " << (c.op_b == Op::kT)
              << " beta " << c.beta << " bias " << c.bias << " relu " << c.relu);
    CHECK(err < 1e-6);
    CHECK(err32 < 0x1p-7);
  }
}

TEST_CASE("A product with nothing to sum still applies beta, the bias and ReLU") {
  const float bias[3] = {1.0f, -2.0f, 0.5f};
  std::vector<float> c = {3.0f, 4.0f, -5.0f, 1.0f, 1.0f, 1.0f};
  Setup().fp32->Gemm(Op::kN, Op::kN, 2, 3, 0, nullptr, 1, nullptr, 3, 1.0f, c.data(), 3, {.bias = bias, .relu = true});
  CHECK(c == std::vector<float>{4.0f, 2.0f, 0.0f, 2.0f, 0.0f, 1.5f});
}

TEST_CASE("The kernel family cannot change once a process has chosen it") {
  const IsaLevel current = Setup().fp32->isa();
  const IsaLevel other = current == IsaLevel::kGeneric ? IsaLevel::kAvx2 : IsaLevel::kGeneric;
  if (other > DetectCpuFeatures().best()) return;  // a CPU with one family: nothing else to ask for
  auto gemm = CpuGemm::Create({.max_isa = other});
  REQUIRE_FALSE(gemm.ok());
  CHECK_THAT(gemm.status().message(), Catch::Contains("in this process already"));
  // Asking for what runs is fine.
  CHECK(CpuGemm::Create({.max_isa = Setup().cap}).ok());
}

TEST_CASE("The start-up self-check measures the backend and says when it is slow") {
  const GemmSelfCheck check = RunGemmSelfCheck(*Setup().fp32);
  CHECK(check.gflops > 0);
  CHECK(check.floor_gflops > 0);
  CHECK(check.warning.empty() == !check.slow());
  if (check.slow()) CHECK_THAT(check.warning, Catch::Contains("GFLOP/s"));
}

TEST_CASE("Precision and kernel-family names round-trip") {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) CHECK(ParsePrecision(PrecisionName(p)) == p);
  for (IsaLevel l : {IsaLevel::kGeneric, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Bf16, IsaLevel::kAmx}) {
    CHECK(ParseIsa(IsaName(l)) == l);
  }
  CHECK_FALSE(ParsePrecision("fp16"));
  CHECK_FALSE(ParseIsa("sse2"));
}

}  // namespace
}  // namespace fleetps::dense
