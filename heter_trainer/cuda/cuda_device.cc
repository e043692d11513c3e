// The CUDA DenseDevice: a DenseNet step as cuBLAS products and the kernels of
// dense_kernels.cu, one CUDA stream per lane.
//
// A lane's step queues on its stream: one host-to-device copy of the staged activations
// (and labels), the forward products and bias/ReLU kernels, the loss kernel, the backward
// products and kernels, and one device-to-host copy of everything the caller asked for
// into pinned staging; then it synchronises the stream once and copies from the staging
// into the caller's spans. Inputs, or outputs, that the caller holds in page-locked memory
// (the device's host_buffers(): the heter-trainer's requests and replies) are copied from
// and into directly instead, without the staging copies on the host. Device and staging
// buffers are grown for the largest batch seen and reused (growing frees and allocates,
// which waits for the whole device: a one-off per lane and batch size); parameters stay on
// the device from SetParams to SetParams.

#include "heter_trainer/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config/model_config.h"
#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/cuda/dense_gemm.h"
#include "heter_trainer/cuda/dense_kernels.h"
#include "heter_trainer/device/dense_device.h"
#include "trainer/model/loss.h"

namespace fleetps::heter {
namespace gpu {
namespace {

using trainer::model::DenseNet;
using trainer::model::FullyConnected;

constexpr const char* kCpuHint =
    "; set HETER_DEVICE_TYPE=cpu (or --device cpu) to run the dense part on the CPU instead";

// Sections of the output buffer start at multiples of 64 floats (256 bytes), the
// alignment cuBLAS and coalesced copies like best.
constexpr size_t kAlignFloats = 64;
size_t RoundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Where a step's outputs sit in the lane's device output buffer and in its pinned mirror,
// for `batch` rows: back to back in the order they are wanted, so that one copy of a
// prefix brings back exactly what the step produced.
struct OutputLayout {
  size_t predictions = 0;       // [batch]
  size_t loss = 0;              // 1 float: the mean loss
  size_t param_grads = 0;       // [num_params], DenseNet layout
  size_t activation_grads = 0;  // [batch x in_dim]
  size_t total = 0;
};

OutputLayout LayoutFor(const DenseNet& net, size_t batch) {
  OutputLayout layout;
  layout.loss = RoundUp(batch);
  layout.param_grads = layout.loss + kAlignFloats;
  layout.activation_grads = layout.param_grads + RoundUp(net.num_params());
  layout.total = layout.activation_grads + batch * net.in_dim();
  return layout;
}

// True when `p` lies in page-locked host memory (cudaMallocHost, cudaHostRegister), from and
// into which a copy runs without staging; false for ordinary memory and null.
bool PageLocked(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not an error of the step: treated as ordinary memory
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

class CudaLane : public DenseLane {
 public:
  static StatusOr<std::unique_ptr<DenseLane>> Create(const DenseNet& net, int gpu);
  ~CudaLane() override;

  Status SetParams(std::span<const float> params) override;
  StatusOr<float> Step(std::span<const float> activations, std::span<const float> labels, size_t batch,
                       const DenseStepOutput& out) override;

 private:
  CudaLane(const DenseNet& net, int gpu);

  // Grows the per-batch buffers to hold `batch` rows (no queued work may use them).
  Status Reserve(size_t batch);
  // Queues a whole step and waits for it; see Step.
  StatusOr<float> RunStep(std::span<const float> activations, std::span<const float> labels, size_t batch,
                          const DenseStepOutput& out);
  // Queues the layers on inputs_; leaves every layer's output in layer_outputs_.
  Status QueueForward(size_t batch);
  // Queues backward from the logit gradients in grad_a_: parameter gradients and, with
  // `activation_grads`, the input gradient, into outputs_ at `layout`.
  Status QueueBackward(size_t batch, bool activation_grads, const OutputLayout& layout);
  // Layer l's output [batch x out_l] in layer_outputs_ (layers back to back for this batch).
  float* LayerOutput(size_t l, size_t batch) const { return layer_outputs_.data() + batch * output_prefix_[l]; }

  const DenseNet& net_;  // the device's net, which outlives the device and its lanes
  const int gpu_;
  const int logits_width_;
  std::vector<size_t> output_prefix_;  // [l]: sum of the output widths of the layers before l
  size_t max_width_ = 0;               // widest layer output (the gradient buffers' row width)

  Stream stream_;
  CublasHandle blas_;  // bound to stream_; declared after it, so destroyed before it

  DeviceBuffer<float> params_;            // [num_params]
  PinnedBuffer<float> params_staging_;    // [num_params]
  Event params_staged_;                   // recorded after the upload reads params_staging_
  Event compute_start_, compute_end_;     // timing: around a step's GEMMs and kernels (device_ms)
  size_t params_size_ = 0;                // num_params once SetParams succeeded, else 0
  DeviceBuffer<double> loss_block_sums_;  // [kMaxLossBlocks]

  // Grown for the largest batch seen (capacity_ rows).
  size_t capacity_ = 0;
  DeviceBuffer<float> inputs_;           // [batch x in_dim] activations, then [batch] labels
  DeviceBuffer<float> layer_outputs_;    // per layer [batch x out_l]; the last holds the logits
  DeviceBuffer<float> grad_a_, grad_b_;  // [batch x max_width_]: d(loss)/d(a layer's output), ping-pong
  DeviceBuffer<float> bias_scratch_;     // LaunchBiasGrad's scratch
  DeviceBuffer<float> outputs_;          // LayoutFor(batch)
  PinnedBuffer<float> inputs_staging_;   // as inputs_
  PinnedBuffer<float> outputs_staging_;  // as outputs_
};

CudaLane::CudaLane(const DenseNet& net, int gpu)
    : net_(net), gpu_(gpu), logits_width_(static_cast<int>(trainer::model::NumLogits(net.output()))) {
  size_t prefix = 0;
  for (const FullyConnected& layer : net.layers()) {
    output_prefix_.push_back(prefix);
    prefix += layer.out_dim();
    max_width_ = std::max(max_width_, layer.out_dim());
  }
  output_prefix_.push_back(prefix);  // [layers]: floats per row of all layer outputs
}

CudaLane::~CudaLane() {
  // Queued work (the upload SetParams reads from params_staging_) must end before the
  // buffers it uses are freed.
  if (auto guard = DeviceGuard::Enter(gpu_); guard.ok()) static_cast<void>(stream_.Synchronize());
}

StatusOr<std::unique_ptr<DenseLane>> CudaLane::Create(const DenseNet& net, int gpu) {
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(gpu));  // the pinned buffer's context too
  std::unique_ptr<CudaLane> lane(new CudaLane(net, gpu));
  ASSIGN_OR_RETURN(lane->stream_, Stream::Create(gpu));
  ASSIGN_OR_RETURN(lane->blas_, CublasHandle::Create(lane->stream_));
  ASSIGN_OR_RETURN(lane->params_, DeviceBuffer<float>::Allocate(gpu, net.num_params()));
  ASSIGN_OR_RETURN(lane->params_staging_, PinnedBuffer<float>::Allocate(net.num_params()));
  ASSIGN_OR_RETURN(lane->params_staged_, Event::Create(gpu, /*timing=*/false));
  ASSIGN_OR_RETURN(lane->compute_start_, Event::Create(gpu, /*timing=*/true));
  ASSIGN_OR_RETURN(lane->compute_end_, Event::Create(gpu, /*timing=*/true));
  ASSIGN_OR_RETURN(lane->loss_block_sums_, DeviceBuffer<double>::Allocate(gpu, kMaxLossBlocks));
  return std::unique_ptr<DenseLane>(std::move(lane));
}

Status CudaLane::SetParams(std::span<const float> params) {
  if (params.size() != net_.num_params()) {
    return Status::InvalidArgument("dense parameters have " + std::to_string(params.size()) +
                                   " floats, the model needs " + std::to_string(net_.num_params()));
  }
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(gpu_));
  params_size_ = 0;
  // The previous upload may still be reading the staging buffer; a step in between has
  // already waited for it, so this usually returns at once.
  RETURN_IF_ERROR(params_staged_.Synchronize());
  std::memcpy(params_staging_.data(), params.data(), params.size_bytes());
  // Asynchronous: the copy overlaps whatever the caller does next; steps are queued behind
  // it on the same stream, and a failed copy surfaces at the next step's synchronisation.
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(params_.data(), params_staging_.data(), params.size_bytes(),
                                       cudaMemcpyHostToDevice, stream_.get()));
  RETURN_IF_ERROR(params_staged_.Record(stream_.get()));
  params_size_ = params.size();
  return Status::OK();
}

Status CudaLane::Reserve(size_t batch) {
  if (batch <= capacity_) return Status::OK();
  // Free the old buffers first: the peak is one set of buffers, not two.
  capacity_ = 0;
  inputs_ = {};
  layer_outputs_ = {};
  grad_a_ = {};
  grad_b_ = {};
  bias_scratch_ = {};
  outputs_ = {};
  inputs_staging_ = {};
  outputs_staging_ = {};

  const size_t in_dim = net_.in_dim();
  const size_t total_outputs = LayoutFor(net_, batch).total;
  size_t scratch = 0;
  for (const FullyConnected& layer : net_.layers()) {
    scratch = std::max(scratch, BiasGradScratchFloats(batch, layer.out_dim()));
  }
  ASSIGN_OR_RETURN(inputs_, DeviceBuffer<float>::Allocate(gpu_, batch * (in_dim + 1)));
  ASSIGN_OR_RETURN(layer_outputs_, DeviceBuffer<float>::Allocate(gpu_, batch * output_prefix_.back()));
  ASSIGN_OR_RETURN(grad_a_, DeviceBuffer<float>::Allocate(gpu_, batch * max_width_));
  ASSIGN_OR_RETURN(grad_b_, DeviceBuffer<float>::Allocate(gpu_, batch * max_width_));
  ASSIGN_OR_RETURN(bias_scratch_, DeviceBuffer<float>::Allocate(gpu_, scratch));
  ASSIGN_OR_RETURN(outputs_, DeviceBuffer<float>::Allocate(gpu_, total_outputs));
  ASSIGN_OR_RETURN(inputs_staging_, PinnedBuffer<float>::Allocate(batch * (in_dim + 1)));
  ASSIGN_OR_RETURN(outputs_staging_, PinnedBuffer<float>::Allocate(total_outputs));
  capacity_ = batch;
  return Status::OK();
}

StatusOr<float> CudaLane::Step(std::span<const float> activations, std::span<const float> labels, size_t batch,
                               const DenseStepOutput& out) {
  RETURN_IF_ERROR(CheckStepShapes(net_, params_size_, activations, labels, batch, out));
  ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Enter(gpu_));
  StatusOr<float> loss = RunStep(activations, labels, batch, out);
  if (!loss.ok()) {
    // A step that failed half-way may have left copies queued that still read or write
    // the staging buffers; wait for them before the buffers are reused or freed. The
    // failure itself is already in `loss`.
    stream_.Synchronize().IgnoreError();
  }
  return loss;
}

StatusOr<float> CudaLane::RunStep(std::span<const float> activations, std::span<const float> labels, size_t batch,
                                  const DenseStepOutput& out) {
  RETURN_IF_ERROR(Reserve(batch));
  const bool backward = !out.param_grads.empty();
  const bool activation_grads = !out.activation_grads.empty();
  const cudaStream_t stream = stream_.get();

  // Inputs: activations [batch x in_dim], then (backward only) labels [batch]: straight from
  // page-locked memory, else staged and copied in one transfer.
  if (PageLocked(activations.data()) && (!backward || PageLocked(labels.data()))) {
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(inputs_.data(), activations.data(), activations.size_bytes(), cudaMemcpyHostToDevice, stream));
    if (backward) {
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(inputs_.data() + activations.size(), labels.data(), labels.size_bytes(),
                                           cudaMemcpyHostToDevice, stream));
    }
  } else {
    float* staged_inputs = inputs_staging_.data();
    std::memcpy(staged_inputs, activations.data(), activations.size_bytes());
    size_t input_floats = activations.size();
    if (backward) {
      std::memcpy(staged_inputs + input_floats, labels.data(), labels.size_bytes());
      input_floats += batch;
    }
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(inputs_.data(), staged_inputs, input_floats * sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  const bool timed = out.device_ms != nullptr;
  if (timed) RETURN_IF_ERROR(compute_start_.Record(stream));

  RETURN_IF_ERROR(QueueForward(batch));
  const float* logits = LayerOutput(net_.layers().size() - 1, batch);
  const OutputLayout layout = LayoutFor(net_, batch);
  float* device_outputs = outputs_.data();
  size_t output_floats = batch;  // forward only: the predictions
  if (!backward) {
    RETURN_IF_CUDA_ERROR(LaunchPredict(logits, batch, logits_width_, device_outputs + layout.predictions, stream));
  } else {
    const float* device_labels = inputs_.data() + activations.size();
    RETURN_IF_CUDA_ERROR(LaunchCrossEntropy(logits, device_labels, batch, logits_width_,
                                            device_outputs + layout.predictions, grad_a_.data(),
                                            loss_block_sums_.data(), device_outputs + layout.loss, stream));
    RETURN_IF_ERROR(QueueBackward(batch, activation_grads, layout));
    output_floats = activation_grads ? layout.total : layout.activation_grads;
  }
  if (timed) RETURN_IF_ERROR(compute_end_.Record(stream));
  // Outputs: straight into the caller's spans when all of them are page-locked (the loss
  // through the staging), else everything in one copy to the staging.
  const bool direct = PageLocked(out.predictions.data()) && (!backward || PageLocked(out.param_grads.data())) &&
                      (!activation_grads || PageLocked(out.activation_grads.data()));
  float* staged = outputs_staging_.data();
  auto copy_out = [&](float* to, size_t from, size_t floats) {
    return cudaMemcpyAsync(to, device_outputs + from, floats * sizeof(float), cudaMemcpyDeviceToHost, stream);
  };
  if (direct) {
    RETURN_IF_CUDA_ERROR(copy_out(out.predictions.data(), layout.predictions, batch));
    if (backward) {
      RETURN_IF_CUDA_ERROR(copy_out(staged + layout.loss, layout.loss, 1));
      RETURN_IF_CUDA_ERROR(copy_out(out.param_grads.data(), layout.param_grads, out.param_grads.size()));
    }
    if (activation_grads) {
      RETURN_IF_CUDA_ERROR(copy_out(out.activation_grads.data(), layout.activation_grads, out.activation_grads.size()));
    }
  } else {
    RETURN_IF_CUDA_ERROR(copy_out(staged, 0, output_floats));
  }
  RETURN_IF_ERROR(stream_.Synchronize());
  if (timed) {
    ASSIGN_OR_RETURN(*out.device_ms, Event::ElapsedMs(compute_start_, compute_end_));
  }
  if (!direct) {
    std::memcpy(out.predictions.data(), staged + layout.predictions, out.predictions.size_bytes());
    if (backward) std::memcpy(out.param_grads.data(), staged + layout.param_grads, out.param_grads.size_bytes());
    if (activation_grads) {
      std::memcpy(out.activation_grads.data(), staged + layout.activation_grads, out.activation_grads.size_bytes());
    }
  }
  return backward ? staged[layout.loss] : 0.0f;
}

Status CudaLane::QueueForward(size_t batch) {
  const cudaStream_t stream = stream_.get();
  const std::span<const FullyConnected> layers = net_.layers();
  const float* x = inputs_.data();
  for (size_t l = 0; l < layers.size(); ++l) {
    const FullyConnected& layer = layers[l];
    const float* w = params_.data() + layer.param_offset();
    const float* b = w + layer.in_dim() * layer.out_dim();
    float* y = LayerOutput(l, batch);
    RETURN_IF_ERROR(GemmForward(blas_.get(), x, w, batch, layer.in_dim(), layer.out_dim(), y));
    // ReLU between layers; the last layer's output is the logits.
    const bool relu = l + 1 < layers.size();
    RETURN_IF_CUDA_ERROR(LaunchBiasActivation(y, b, batch, layer.out_dim(), relu, stream));
    x = y;
  }
  return Status::OK();
}

Status CudaLane::QueueBackward(size_t batch, bool activation_grads, const OutputLayout& layout) {
  const cudaStream_t stream = stream_.get();
  const std::span<const FullyConnected> layers = net_.layers();
  float* param_grads = outputs_.data() + layout.param_grads;
  float* dy = grad_a_.data();       // d(mean loss)/d(layer l's output), starting at the logits
  float* next_dy = grad_b_.data();  // d(mean loss)/d(layer l's input)
  for (size_t l = layers.size(); l-- > 0;) {
    const FullyConnected& layer = layers[l];
    const size_t in = layer.in_dim(), out = layer.out_dim();
    const float* w = params_.data() + layer.param_offset();
    float* dw = param_grads + layer.param_offset();
    float* db = dw + in * out;
    // The input of layer l: the activations, or the ReLU output of layer l - 1.
    const float* x = l == 0 ? inputs_.data() : LayerOutput(l - 1, batch);
    RETURN_IF_ERROR(GemmWeightGrad(blas_.get(), x, dy, batch, in, out, dw));
    RETURN_IF_CUDA_ERROR(LaunchBiasGrad(dy, batch, out, db, bias_scratch_.data(), stream));
    if (l == 0) {
      if (activation_grads) {
        RETURN_IF_ERROR(GemmInputGrad(blas_.get(), dy, w, batch, in, out, outputs_.data() + layout.activation_grads));
      }
      break;
    }
    RETURN_IF_ERROR(GemmInputGrad(blas_.get(), dy, w, batch, in, out, next_dy));
    // Through the ReLU of layer l - 1: its output x is the mask.
    RETURN_IF_CUDA_ERROR(LaunchReluBackward(x, next_dy, batch * in, stream));
    std::swap(dy, next_dy);
  }
  return Status::OK();
}

class CudaDevice : public DenseDevice {
 public:
  CudaDevice(const DenseNet& net, int gpu, std::string description)
      : net_(net),
        gpu_(gpu),
        description_(std::move(description)),
        // Page-locked blocks, null (ordinary memory) when that fails. Allocated and freed on
        // io and lane threads with this device current: a thread with none would make one on
        // GPU 0 (a context there, memory taken from another process's GPU).
        host_buffers_(std::make_shared<HostBufferPool>(
            [gpu](size_t bytes) -> void* {
              void* block = nullptr;
              auto guard = DeviceGuard::Enter(gpu);
              return guard.ok() && AllocatePinnedBytes(bytes, &block).ok() ? block : nullptr;
            },
            [gpu](void* block) {
              auto guard = DeviceGuard::Enter(gpu);
              FreePinnedBytes(block);
            })) {}

  DeviceType type() const override { return DeviceType::kGpu; }
  std::string Describe() const override { return description_; }
  // Thread-safe: a lane shares nothing with the device but the immutable net.
  StatusOr<std::unique_ptr<DenseLane>> NewLane() override { return CudaLane::Create(net_, gpu_); }
  std::shared_ptr<HostBufferPool> host_buffers() override { return host_buffers_; }

 private:
  const DenseNet& net_;  // outlives the device (MakeCudaDevice's contract)
  const int gpu_;
  const std::string description_;
  const std::shared_ptr<HostBufferPool> host_buffers_;  // page-locked; shared with the blocks handed out
};

}  // namespace

StatusOr<std::string> ProbeCudaDevice(int gpu) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return Status::Unavailable(std::string("no CUDA device is usable: cudaGetDeviceCount failed: ") +
                               cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")" + kCpuHint);
  }
  if (count == 0) {
    return Status::Unavailable(std::string("no CUDA device is visible to this process") + kCpuHint);
  }
  if (gpu < 0 || gpu >= count) {
    return Status::Unavailable("gpu " + std::to_string(gpu) + " is out of range: " + std::to_string(count) +
                               " CUDA device(s) visible (0.." + std::to_string(count - 1) + ")" + kCpuHint);
  }
  cudaDeviceProp props{};
  Status status = CudaStatus(cudaGetDeviceProperties(&props, gpu), "cudaGetDeviceProperties", __FILE__, __LINE__);
  if (!status.ok()) return Status::Unavailable(status.message() + kCpuHint);
  const std::string name =
      "gpu " + std::to_string(gpu) + " (" + props.name + ", " + std::to_string(props.multiProcessorCount) + " SMs)";
  {
    StatusOr<DeviceGuard> guard = DeviceGuard::Enter(gpu);
    if (!guard.ok()) return Status::Unavailable(name + ": " + guard.status().message() + kCpuHint);
    status = CudaStatus(ProbeKernelImage(), "ProbeKernelImage", __FILE__, __LINE__);
  }
  if (!status.ok()) {
    return Status::Unavailable(name + ", compute capability " + std::to_string(props.major) + "." +
                               std::to_string(props.minor) + ", cannot run this build's kernels (" + status.message() +
                               "); rebuild with CMAKE_CUDA_ARCHITECTURES including " +
                               std::to_string(props.major * 10 + props.minor) + kCpuHint);
  }
  return name;
}

}  // namespace gpu

StatusOr<std::unique_ptr<DenseDevice>> MakeCudaDevice(const trainer::model::DenseNet& net, int gpu,
                                                      config::CudaWait wait) {
  if (!net.is_mlp()) {
    return Status::InvalidArgument(
        "the GPU device runs only plain MLP graphs (mlp, ctr_dnn, or a network of fc layers in a chain), not "
        "model_type " +
        ModelTypeName(net.type()) + "; run it on the CPU (HETER_DEVICE_TYPE=cpu)");
  }
  ASSIGN_OR_RETURN(std::string description, gpu::ProbeCudaDevice(gpu));
  RETURN_IF_ERROR(gpu::SetCudaWait(gpu, wait));
  return std::unique_ptr<DenseDevice>(new gpu::CudaDevice(net, gpu, std::move(description)));
}

int VisibleCudaDevices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

}  // namespace fleetps::heter
