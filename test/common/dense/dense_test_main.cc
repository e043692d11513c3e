// dense_test's main: `dense_test --max-isa <auto|generic|avx2|avx512|avx512_bf16|amx> [catch args]`.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "common/dense/cpu_features.h"
#include "test/common/dense/dense_test_support.h"

namespace fleetps::dense::testing {
DenseTestSetup& Setup() {
  static DenseTestSetup setup;
  return setup;
}
}  // namespace fleetps::dense::testing

int main(int argc, char** argv) {
  using namespace fleetps::dense;
  Catch::Session session;
  std::string isa = "auto";
  session.cli(session.cli() | Catch::clara::Opt(isa, "level")["--max-isa"](
                                  "cap the dense kernel family: auto|generic|avx2|avx512|avx512_bf16|amx"));
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  testing::DenseTestSetup& setup = testing::Setup();
  if (isa != "auto") {
    setup.cap = ParseIsa(isa);
    if (!setup.cap) {
      std::fprintf(stderr, "unknown --max-isa %s\n", isa.c_str());
      return 2;
    }
  }
  auto gemm = CpuGemm::Create(CpuGemmOptions{.precision = Precision::kFp32, .max_isa = setup.cap});
  if (!gemm.ok()) {
    std::fprintf(stderr, "%s\n", gemm.status().ToString().c_str());
    return 1;
  }
  setup.fp32 = *gemm;
  std::printf("dense_test: kernel family %s (cap %s, CPU best %s), kernel %s\n",
              std::string(IsaName(setup.fp32->isa())).c_str(), isa.c_str(),
              std::string(IsaName(DetectCpuFeatures().best())).c_str(), setup.fp32->kernel().c_str());
  return session.run();
}
