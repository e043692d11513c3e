#include "common/dense/open_backend.h"

#include <spdlog/spdlog.h>

namespace fleetps::dense {

StatusOr<std::shared_ptr<const CpuGemm>> OpenDenseBackend(const CpuGemmOptions& options, const std::string& role,
                                                          metrics::Registry* registry) {
  ASSIGN_OR_RETURN(auto gemm, CpuGemm::Create(options));
  const GemmSelfCheck check = RunGemmSelfCheck(*gemm);
  spdlog::info("{}: dense layers on {}; self-check {:.1f} GFLOP/s per core", role, gemm->Describe(), check.gflops);
  if (check.slow()) spdlog::warn("{}: {}", role, check.warning);
  if (registry != nullptr) {
    registry
        ->GetGauge("fleetps_dense_backend_info",
                   "The CPU dense backend this process runs: backend, kernel family, kernel and precision (value 1)",
                   {{"backend", gemm->backend()},
                    {"kernel_family", std::string(IsaName(gemm->isa()))},
                    {"kernel", gemm->kernel()},
                    {"precision", std::string(PrecisionName(gemm->precision()))}})
        .Set(1);
    registry
        ->GetGauge("fleetps_dense_selfcheck_gflops",
                   "GFLOP/s of one core on the start-up self-check's 256^3 product at the backend's precision")
        .Set(check.gflops);
  }
  return gemm;
}

}  // namespace fleetps::dense
