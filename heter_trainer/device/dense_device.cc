#include "heter_trainer/device/dense_device.h"

namespace fleetps::heter {

std::string_view DeviceTypeName(DeviceType type) { return type == DeviceType::kGpu ? "gpu" : "cpu"; }

bool DeviceTypeFromName(std::string_view name, DeviceType* type) {
  if (name == "cpu") {
    *type = DeviceType::kCpu;
  } else if (name == "gpu") {
    *type = DeviceType::kGpu;
  } else {
    return false;
  }
  return true;
}

Status CheckStepShapes(const model::DenseNet& net, size_t params_size, std::span<const float> activations,
                       std::span<const float> labels, size_t batch, const DenseStepOutput& out) {
  auto mismatch = [](const char* what, size_t got, size_t want) {
    return Status::InvalidArgument(std::string(what) + " has " + std::to_string(got) + " floats, expected " +
                                   std::to_string(want));
  };
  if (params_size != net.num_params()) {
    return Status::InvalidArgument("no dense parameters were set for this lane (SetParams)");
  }
  if (batch == 0) return Status::InvalidArgument("empty micro-batch");
  if (activations.size() != batch * net.in_dim()) return mismatch("activations", activations.size(), batch * net.in_dim());
  if (out.predictions.size() != batch) return mismatch("predictions", out.predictions.size(), batch);
  if (!out.param_grads.empty()) {
    if (out.param_grads.size() != net.num_params()) {
      return mismatch("param_grads", out.param_grads.size(), net.num_params());
    }
    if (labels.size() != batch) return mismatch("labels", labels.size(), batch);
    if (!out.activation_grads.empty() && out.activation_grads.size() != batch * net.in_dim()) {
      return mismatch("activation_grads", out.activation_grads.size(), batch * net.in_dim());
    }
  } else if (!out.activation_grads.empty()) {
    return Status::InvalidArgument("activation_grads requested without a backward pass (param_grads empty)");
  }
  return Status::OK();
}

}  // namespace fleetps::heter
