#include "heter_trainer/gpups/pass_table.h"

namespace fleetps::heter {

StatusOr<std::unique_ptr<PassTable>> MakeCudaPassTable(const PassTableOptions&) {
  return Status::Unavailable(
      "this heter-trainer was built without CUDA, so GPU-PS mode cannot put its pass table on a GPU: run with "
      "HETER_DEVICE_TYPE=cpu (the host-memory twin; FLAGS_selected_gpus=0,1 gives two host shards)");
}

StatusOr<double> MeasureDeviceCopyGBps(int) { return Status::Unavailable("this build has no CUDA"); }

}  // namespace fleetps::heter
