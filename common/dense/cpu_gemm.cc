#include "common/dense/cpu_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "common/check.h"

// The OpenMP runtime oneDNN runs on (libgomp), declared here rather than through <omp.h>,
// which only gcc ships (a clang build links the same libgomp).
extern "C" {
int omp_get_max_threads();
void omp_set_num_threads(int threads);
}

namespace fleetps::dense {
namespace {

using dt = dnnl::memory::data_type;

dnnl::cpu_isa ToDnnl(IsaLevel level) {
  switch (level) {
    case IsaLevel::kGeneric: return dnnl::cpu_isa::sse41;
    case IsaLevel::kAvx2: return dnnl::cpu_isa::avx2;
    case IsaLevel::kAvx512: return dnnl::cpu_isa::avx512_core;
    case IsaLevel::kAvx512Bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case IsaLevel::kAmx: return dnnl::cpu_isa::avx512_core_amx;
  }
  return dnnl::cpu_isa::all;
}

IsaLevel FromDnnl(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return IsaLevel::kAmx;
    case dnnl::cpu_isa::avx512_core_bf16: return IsaLevel::kAvx512Bf16;
    case dnnl::cpu_isa::avx512_core:
    case dnnl::cpu_isa::avx512_core_vnni: return IsaLevel::kAvx512;
    case dnnl::cpu_isa::avx2:
    case dnnl::cpu_isa::avx2_vnni: return IsaLevel::kAvx2;
    default: return IsaLevel::kGeneric;
  }
}

dnnl::memory::dim Dim(size_t n) { return static_cast<dnnl::memory::dim>(n); }

// The logical [rows x cols] matrix op(X), X stored row-major with row stride ld.
dnnl::memory::desc Strided(size_t rows, size_t cols, size_t ld, Op op, dt type) {
  const dnnl::memory::dims strides = op == Op::kN ? dnnl::memory::dims{Dim(ld), 1} : dnnl::memory::dims{1, Dim(ld)};
  return dnnl::memory::desc({Dim(rows), Dim(cols)}, type, strides);
}

dnnl::memory::desc Plain(size_t rows, size_t cols, dt type) {
  return dnnl::memory::desc({Dim(rows), Dim(cols)}, type, dnnl::memory::format_tag::ab);
}

// Per-thread bf16 copies of A and B, grown to the largest operand the thread has seen.
struct Bf16Buffers {
  std::vector<uint16_t> a, b;
};

}  // namespace

// The engine and the primitives built so far, one per product shape: building a primitive
// (choosing and generating its kernel) costs far more than a small product itself, and the
// layers repeat the same few shapes every step. Threads share them: each primitive is built
// with a user scratchpad, which every call brings from its own thread's buffer, so a
// primitive holds no memory that two threads could write at once.
struct CpuGemm::Impl {
  // A product's shape and epilogue: what its oneDNN primitive depends on.
  struct ProductKey {
    Op op_a, op_b;
    size_t m, n, k, lda, ldb, ldc;
    bool sum, relu, bias;
    bool operator==(const ProductKey&) const = default;
  };

  struct ProductKeyHash {
    size_t operator()(const ProductKey& key) const {
      size_t h = static_cast<size_t>(key.op_a) | static_cast<size_t>(key.op_b) << 1 | size_t{key.sum} << 2 |
                 size_t{key.relu} << 3 | size_t{key.bias} << 4;
      for (size_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) h = h * 0x9E3779B97F4A7C15ull + v;
      return h;
    }
  };

  static constexpr size_t kMaxCached = 4096;  // then start over (shapes of many batch sizes)
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable std::mutex mu;
  struct Product {
    dnnl::matmul primitive;
    dnnl::memory::desc scratchpad;
  };
  mutable std::unordered_map<ProductKey, Product, ProductKeyHash> products;  // guarded by mu

  Product Find(const ProductKey& key, const std::function<Product()>& build) const {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (const auto it = products.find(key); it != products.end()) return it->second;
    }
    Product product = build();
    std::lock_guard<std::mutex> lock(mu);
    if (products.size() >= kMaxCached) products.clear();
    products.emplace(key, product);
    return product;
  }
};

std::string_view PrecisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

std::optional<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return std::nullopt;
}

CpuGemm::CpuGemm(CpuGemmOptions options, IsaLevel isa, std::string backend, std::string kernel)
    : impl_(std::make_unique<const Impl>()),
      options_(options),
      isa_(isa),
      backend_(std::move(backend)),
      kernel_(std::move(kernel)) {}

StatusOr<std::shared_ptr<const CpuGemm>> CpuGemm::Create(const CpuGemmOptions& options) {
  if (options.threads_per_call < 1) return Status::InvalidArgument("dense threads per call must be >= 1");
  const CpuFeatures cpu = DetectCpuFeatures();
  // The cap is oneDNN's, per process, fixed by the first product; setting it here also
  // overrides a DNNL_MAX_CPU_ISA left in the environment. A later, different cap fails.
  const bool capped =
      dnnl::set_max_cpu_isa(options.max_isa ? ToDnnl(*options.max_isa) : dnnl::cpu_isa::all) == dnnl::status::success;
  const IsaLevel isa = FromDnnl(dnnl::get_effective_cpu_isa());
  if (options.max_isa && isa != std::min(*options.max_isa, cpu.best())) {
    return Status::InvalidArgument("the dense kernel family is " + std::string(IsaName(isa)) +
                                   " in this process already; it cannot change to " +
                                   std::string(IsaName(*options.max_isa)) + (capped ? "" : " after the first product"));
  }
  if (options.precision == Precision::kBf16 && !HasBf16(isa)) {
    const bool cap_below_cpu = isa < cpu.best();
    return Status::InvalidArgument("fleetps.dense.precision bf16 needs a CPU with AVX512-BF16 or AMX; this one (" +
                                   cpu.vendor + ", " + (cpu.model.empty() ? "model unnamed" : cpu.model) +
                                   ") runs the " + std::string(IsaName(isa)) + " kernel family" +
                                   (cap_below_cpu ? " (capped by fleetps.dense.max_isa)" : "") +
                                   ", flags: " + cpu.FlagList() + ". Set fleetps.dense.precision: fp32" +
                                   (cap_below_cpu ? " or raise fleetps.dense.max_isa"
                                                  : " or run on a CPU with bf16 units (Intel Cooper Lake or "
                                                    "Sapphire Rapids and later, AMD Zen 4 and later)"));
  }
  const dnnl::version_t* v = dnnl::version();
  std::string backend =
      "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  // The kernel of a ctr_dnn-sized product, as oneDNN names it.
  std::string kernel;
  try {
    Impl impl;
    const dt type = options.precision == Precision::kBf16 ? dt::bf16 : dt::f32;
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(Plain(512, 512, type), Plain(512, 256, type), Plain(512, 256, dt::f32)), impl.engine);
    kernel = pd.impl_info_str();
  } catch (const dnnl::error& e) {
    return Status::Internal(backend + " cannot build a matrix product on this CPU: " + e.what());
  }
  return std::shared_ptr<const CpuGemm>(new CpuGemm(options, isa, std::move(backend), std::move(kernel)));
}

CpuGemm::~CpuGemm() = default;

std::shared_ptr<const CpuGemm> CpuGemm::Fp32() {
  auto gemm = Create(CpuGemmOptions{});
  FLEETPS_CHECK(gemm.ok()) << gemm.status().ToString();
  return *std::move(gemm);
}

std::string CpuGemm::Describe() const {
  std::string s =
      backend_ + ", kernel family " + std::string(IsaName(isa_)) + " (" + kernel_ + "), " +
      std::string(PrecisionName(options_.precision)) +
      (options_.precision == Precision::kBf16 ? " products with fp32 accumulation and fp32 weights" : " products") +
      ", " + std::to_string(options_.threads_per_call) + " thread(s) per product";
  if (const char* env = std::getenv("DNNL_MAX_CPU_ISA"); env != nullptr) {
    s += "; DNNL_MAX_CPU_ISA=" + std::string(env) + " in the environment is ignored (fleetps.dense.max_isa caps it)";
  }
  return s;
}

void CpuGemm::Gemm(Op op_a, Op op_b, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                   size_t ldb, float beta, float* c, size_t ldc, const GemmEpilogue& epilogue) const {
  FLEETPS_CHECK(beta == 0.0f || beta == 1.0f) << "beta " << beta;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: C = beta C + bias, then ReLU
    for (size_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (size_t j = 0; j < n; ++j) {
        const float v = (beta == 0.0f ? 0.0f : row[j]) + (epilogue.bias ? epilogue.bias[j] : 0.0f);
        row[j] = epilogue.relu ? std::max(v, 0.0f) : v;
      }
    }
    return;
  }
  // OpenMP's thread count is per calling thread; oneDNN reads it when it builds and runs.
  if (omp_get_max_threads() != options_.threads_per_call) omp_set_num_threads(options_.threads_per_call);
  try {
    Run(op_a, op_b, m, n, k, a, lda, b, ldb, beta, c, ldc, epilogue);
  } catch (const dnnl::error& e) {
    FLEETPS_CHECK(false) << backend_ << " matrix product " << m << "x" << k << " * " << k << "x" << n
                         << " failed: " << e.what();
  }
}

void CpuGemm::Run(Op op_a, Op op_b, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                  size_t ldb, float beta, float* c, size_t ldc, const GemmEpilogue& epilogue) const {
  const dnnl::engine& engine = impl_->engine;
  dnnl::stream stream(engine);
  dnnl::memory::desc a_desc = Strided(m, k, lda, op_a, dt::f32);
  dnnl::memory::desc b_desc = Strided(k, n, ldb, op_b, dt::f32);
  dnnl::memory a_mem(a_desc, engine, const_cast<float*>(a));
  dnnl::memory b_mem(b_desc, engine, const_cast<float*>(b));
  if (options_.precision == Precision::kBf16) {
    // Round A and B to bf16 (oneDNN's JIT reorder: round to nearest even), laid out plain,
    // in this thread's buffers.
    thread_local Bf16Buffers buffers;
    if (buffers.a.size() < m * k) buffers.a.resize(m * k);
    if (buffers.b.size() < k * n) buffers.b.resize(k * n);
    dnnl::memory a16(Plain(m, k, dt::bf16), engine, buffers.a.data());
    dnnl::memory b16(Plain(k, n, dt::bf16), engine, buffers.b.data());
    dnnl::reorder(a_mem, a16).execute(stream, a_mem, a16);
    dnnl::reorder(b_mem, b16).execute(stream, b_mem, b16);
    a_desc = a16.get_desc();
    b_desc = b16.get_desc();
    a_mem = a16;
    b_mem = b16;
  }
  const dnnl::memory::desc c_desc = Strided(m, n, ldc, Op::kN, dt::f32);
  const dnnl::memory::desc bias_desc = Plain(1, n, dt::f32);
  const Impl::ProductKey key{op_a, op_b, m, n, k, lda, ldb, ldc, beta != 0.0f, epilogue.relu, epilogue.bias != nullptr};
  const Impl::Product product = impl_->Find(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_fpmath_mode(dnnl::fpmath_mode::strict);  // what the precision says, whatever the environment
    dnnl::post_ops post;
    if (beta != 0.0f) post.append_sum(beta);
    if (epilogue.relu) post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(post);
    const dnnl::matmul::desc desc = epilogue.bias != nullptr ? dnnl::matmul::desc(a_desc, b_desc, bias_desc, c_desc)
                                                             : dnnl::matmul::desc(a_desc, b_desc, c_desc);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    return Impl::Product{dnnl::matmul(pd), pd.scratchpad_desc()};
  });
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, dnnl::memory(c_desc, engine, c)}};
  if (epilogue.bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_desc, engine, const_cast<float*>(epilogue.bias)));
  }
  // This thread's scratchpad, 64-byte aligned (a cache line, as oneDNN allocates its own).
  thread_local std::vector<uint8_t> scratchpad;
  const size_t bytes = product.scratchpad.get_size();
  if (scratchpad.size() < bytes + 64) scratchpad.resize(bytes + 64);
  const auto base = reinterpret_cast<uintptr_t>(scratchpad.data());
  void* aligned = reinterpret_cast<void*>((base + 63) & ~uintptr_t{63});
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(product.scratchpad, engine, aligned));
  product.primitive.execute(stream, args);
  stream.wait();
}

GemmSelfCheck RunGemmSelfCheck(const CpuGemm& gemm) {
  constexpr size_t kN = 256;
  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
    b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  }
  using Clock = std::chrono::steady_clock;
  Clock::duration best = Clock::duration::max();
  for (int rep = 0; rep < 12; ++rep) {  // the first runs build and warm the kernel
    const auto start = Clock::now();
    gemm.Gemm(Op::kN, Op::kN, kN, kN, kN, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    best = std::min(best, Clock::now() - start);
  }
  GemmSelfCheck check;
  check.gflops = 2.0 * kN * kN * kN / std::chrono::duration<double>(best).count() / 1e9;
  // Well below what one server core of each family gives (fp32: SSE ~20, AVX2 ~60,
  // AVX-512 ~100 GFLOP/s; bf16 about twice AVX-512 fp32 on AVX512-BF16, several times on AMX).
  const bool bf16 = gemm.precision() == Precision::kBf16;
  switch (gemm.isa()) {
    case IsaLevel::kGeneric: check.floor_gflops = 4; break;
    case IsaLevel::kAvx2: check.floor_gflops = 15; break;
    case IsaLevel::kAvx512: check.floor_gflops = 25; break;
    case IsaLevel::kAvx512Bf16: check.floor_gflops = bf16 ? 50 : 25; break;
    case IsaLevel::kAmx: check.floor_gflops = bf16 ? 100 : 25; break;
  }
  if (check.slow()) {
    char text[512];
    std::snprintf(text, sizeof(text),
                  "the dense self-check ran a %zu^3 %s product at %.1f GFLOP/s on one core, below the %.0f that any "
                  "%s core gives: the CPU is shared or throttled (other processes on these cores, a VM's CPU "
                  "quota, power saving) or the kernel family is capped (fleetps.dense.max_isa). Training will be "
                  "slower in proportion; check the load on this machine (top) and the VM's vCPU allocation",
                  kN, std::string(PrecisionName(gemm.precision())).c_str(), check.gflops, check.floor_gflops,
                  std::string(IsaName(gemm.isa())).c_str());
    check.warning = text;
  }
  return check;
}

}  // namespace fleetps::dense
