// The CPU DenseDevice: model::DenseNet over BLAS, one Workspace per lane.

#include <vector>

#include "heter_trainer/device/dense_device.h"

namespace fleetps::heter {
namespace {

class CpuLane : public DenseLane {
 public:
  explicit CpuLane(const model::DenseNet& net) : net_(net) {}

  Status SetParams(std::span<const float> params) override {
    if (params.size() != net_.num_params()) {
      return Status::InvalidArgument("dense parameters have " + std::to_string(params.size()) +
                                     " floats, the model needs " + std::to_string(net_.num_params()));
    }
    params_.assign(params.begin(), params.end());
    return Status::OK();
  }

  StatusOr<float> Step(std::span<const float> activations, std::span<const float> labels, size_t batch,
                       const DenseStepOutput& out) override {
    RETURN_IF_ERROR(CheckStepShapes(net_, params_.size(), activations, labels, batch, out));
    if (out.param_grads.empty()) {
      auto p = net_.Forward(params_, activations, batch, &ws_);
      std::copy(p.begin(), p.end(), out.predictions.begin());
      return 0.0f;
    }
    const float loss =
        net_.ForwardBackward(params_, activations, labels, batch, out.param_grads, out.activation_grads, &ws_);
    auto p = ws_.predictions();
    std::copy(p.begin(), p.end(), out.predictions.begin());
    return loss;
  }

 private:
  const model::DenseNet& net_;
  std::vector<float> params_;
  model::DenseNet::Workspace ws_;
};

class CpuDevice : public DenseDevice {
 public:
  explicit CpuDevice(const model::DenseNet& net)
      : net_(net), host_buffers_(std::make_shared<HostBufferPool>(nullptr, nullptr)) {}
  DeviceType type() const override { return DeviceType::kCpu; }
  std::string Describe() const override { return "cpu"; }
  StatusOr<std::unique_ptr<DenseLane>> NewLane() override { return std::unique_ptr<DenseLane>(new CpuLane(net_)); }
  std::shared_ptr<HostBufferPool> host_buffers() override { return host_buffers_; }

 private:
  const model::DenseNet& net_;
  const std::shared_ptr<HostBufferPool> host_buffers_;  // ordinary memory, recycled
};

}  // namespace

std::unique_ptr<DenseDevice> MakeCpuDevice(const model::DenseNet& net) { return std::make_unique<CpuDevice>(net); }

}  // namespace fleetps::heter
