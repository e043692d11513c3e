// MakeCudaDevice of a build without CUDA (no nvcc was found, or FLEETPS_WITH_CUDA=OFF).

#include "heter_trainer/device/dense_device.h"

namespace fleetps::heter {

StatusOr<std::unique_ptr<DenseDevice>> MakeCudaDevice(const model::DenseNet&, int, config::CudaWait) {
  return Status::Unavailable(
      "this heter-trainer was built without CUDA (no nvcc at configure time), so it cannot run on a GPU; "
      "set HETER_DEVICE_TYPE=cpu (or --device cpu) to run the dense part on the CPU, or rebuild with "
      "-DFLEETPS_WITH_CUDA=ON on a machine with the CUDA toolkit");
}

int VisibleCudaDevices() { return 0; }

}  // namespace fleetps::heter
