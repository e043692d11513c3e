#pragma once
// What dense_test's main set up before the tests ran: the kernel-family cap of this process
// (--max-isa; oneDNN fixes it per process, so CTest runs the binary once per family) and the
// fp32 backend made under it.

#include <memory>
#include <optional>

#include "common/dense/cpu_gemm.h"

namespace fleetps::dense::testing {

struct DenseTestSetup {
  std::optional<IsaLevel> cap;          // nullopt: --max-isa auto
  std::shared_ptr<const CpuGemm> fp32;  // made first, under the cap
};

DenseTestSetup& Setup();

}  // namespace fleetps::dense::testing
