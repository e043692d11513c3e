#include "heter_trainer/cuda/cuda_status.h"

#include <cstring>
#include <string>

namespace fleetps::heter::gpu {
namespace {

// "heter_trainer/cuda/cuda_device.cc" of an absolute __FILE__: the path from the repository
// root is enough to find the call and does not leak the build machine's layout.
const char* SourcePath(const char* file) {
  const char* root = std::strstr(file, "heter_trainer/");
  return root != nullptr ? root : file;
}

}  // namespace

std::string CallSite(const char* call, const char* file, int line) {
  return std::string(call) + " failed at " + SourcePath(file) + ":" + std::to_string(line) + ": ";
}

Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return Status::OK();
  std::string message = CallSite(call, file, line) + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorMemoryAllocation: return Status::Unavailable(std::move(message));
    default: return Status::Internal(std::move(message));
  }
}

}  // namespace fleetps::heter::gpu
