#pragma once
// CpuGemm: fleetps's CPU backend for the dense layers' matrix products, on oneDNN.
//
//   C [m x n] = op(A) op(B) + beta C (+ bias row) (then ReLU),  op(X) = X or X^T, row-major
//
// oneDNN picks its kernels from the CPU's features when the first product runs (JIT code for
// SSE4.1, AVX2, AVX-512, AVX512-BF16, AMX), so nothing in the environment can pin a slower
// family: Create sets the process's kernel-family cap itself (options.max_isa, default the best
// the CPU has), which also overrides a stray DNNL_MAX_CPU_ISA.
//
// Precision:
//   fp32  fp32 products, fp32 accumulation.
//   bf16  A and B are rounded to bf16 (round to nearest even) and multiplied with fp32
//         accumulation on the AVX512-BF16 or AMX units; C, the bias and everything the caller
//         keeps (master weights, optimizer state) stay fp32. Refused on CPUs without them.
//
// Threads: each call runs on `threads_per_call` threads (default 1: the trainers' workers and
// lanes already use every core; an OpenMP team under each would oversubscribe them).
// Thread-safety: a CpuGemm is immutable; any number of threads may call Gemm at once (oneDNN
// primitives are reentrant; the bf16 conversion buffers are per thread).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/dense/cpu_features.h"
#include "common/status.h"

namespace fleetps::dense {

enum class Precision { kFp32, kBf16 };
std::string_view PrecisionName(Precision p);
std::optional<Precision> ParsePrecision(std::string_view name);  // "fp32" | "bf16"

enum class Op { kN, kT };

// Applied to C after the product, in this order: + bias[j] on every row, then max(0, .).
struct GemmEpilogue {
  const float* bias = nullptr;  // [n], or none
  bool relu = false;
};

struct CpuGemmOptions {
  Precision precision = Precision::kFp32;
  // Cap on the kernel family, for tests and comparisons; nullopt = the CPU's best. The cap is
  // per process (oneDNN's): every CpuGemm in a process must ask for the same one.
  std::optional<IsaLevel> max_isa = std::nullopt;
  int threads_per_call = 1;
};

class CpuGemm {
 public:
  // InvalidArgument for bf16 on a CPU without AVX512-BF16/AMX (or with max_isa below them),
  // naming the CPU and what it has, and when options.max_isa asks for another kernel family
  // than the one this process already runs.
  static StatusOr<std::shared_ptr<const CpuGemm>> Create(const CpuGemmOptions& options);
  // fp32 with the CPU's best kernels (always available).
  static std::shared_ptr<const CpuGemm> Fp32();
  ~CpuGemm();
  CpuGemm(const CpuGemm&) = delete;
  CpuGemm& operator=(const CpuGemm&) = delete;

  // See the file comment. lda/ldb/ldc are the row strides of A, B, C as stored (A stored
  // [m x k] for Op::kN, [k x m] for Op::kT; likewise B [k x n] or [n x k]). beta is 0 or 1.
  // m, n or k of 0 is allowed (k = 0: C = beta C + epilogue).
  void Gemm(Op op_a, Op op_b, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
            float beta, float* c, size_t ldc, const GemmEpilogue& epilogue = {}) const;

  Precision precision() const { return options_.precision; }
  // The kernel family oneDNN runs in this process (the CPU's best under the cap).
  IsaLevel isa() const { return isa_; }
  // "oneDNN 2.6.3".
  const std::string& backend() const { return backend_; }
  // oneDNN's name for the kernel a ctr_dnn-sized product runs, e.g. "brg:avx512_core_bf16".
  const std::string& kernel() const { return kernel_; }
  // One line for the start-up log: backend, kernel family and kernel, precision, threads.
  std::string Describe() const;

 private:
  struct Impl;
  CpuGemm(CpuGemmOptions options, IsaLevel isa, std::string backend, std::string kernel);
  // Gemm's oneDNN part (throws dnnl::error).
  void Run(Op op_a, Op op_b, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
           float beta, float* c, size_t ldc, const GemmEpilogue& epilogue) const;

  std::unique_ptr<const Impl> impl_;  // the oneDNN engine
  CpuGemmOptions options_;
  IsaLevel isa_;
  std::string backend_;
  std::string kernel_;
};

// A ~10 ms measurement at start: the GFLOP/s of one core on a 256^3 product at the backend's
// precision, against a floor well below what any server core of its kernel family gives.
struct GemmSelfCheck {
  double gflops = 0;
  double floor_gflops = 0;
  bool slow() const { return gflops < floor_gflops; }
  // Empty unless slow(): what was measured, the likely causes and the fix.
  std::string warning;
};
GemmSelfCheck RunGemmSelfCheck(const CpuGemm& gemm);

}  // namespace fleetps::dense
