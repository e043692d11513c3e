#include "heter_trainer/cuda/dense_gemm_timing.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "heter_trainer/cuda/cuda_device.h"
#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/cuda/dense_gemm.h"

namespace fleetps::heter {
namespace {

using trainer::model::DenseNet;
using trainer::model::FullyConnected;

// The device memory of one timed step, zero-filled.
struct GemmBuffers {
  gpu::DeviceBuffer<float> params, param_grads;  // [num_params]
  gpu::DeviceBuffer<float> inputs, input_grads;  // [batch x in_dim]
  gpu::DeviceBuffer<float> layer_outputs;        // per layer [batch x out_l], back to back
  gpu::DeviceBuffer<float> grad_a, grad_b;       // [batch x widest layer output]
};

Status Allocate(int gpu, size_t count, const gpu::Stream& stream, gpu::DeviceBuffer<float>* buffer) {
  ASSIGN_OR_RETURN(*buffer, gpu::DeviceBuffer<float>::Allocate(gpu, count));
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(buffer->data(), 0, count * sizeof(float), stream.get()));
  return Status::OK();
}

// Queues the products of one training step with activation gradients, in the order
// CudaLane queues them.
Status QueueStepGemms(const DenseNet& net, size_t batch, cublasHandle_t blas, const GemmBuffers& b) {
  const std::span<const FullyConnected> layers = net.layers();
  std::vector<float*> outputs;
  float* y = b.layer_outputs.data();
  for (const FullyConnected& layer : layers) {
    outputs.push_back(y);
    y += batch * layer.out_dim();
  }
  const float* x = b.inputs.data();
  for (size_t l = 0; l < layers.size(); ++l) {
    const FullyConnected& layer = layers[l];
    RETURN_IF_ERROR(gpu::GemmForward(blas, x, b.params.data() + layer.param_offset(), batch, layer.in_dim(),
                                     layer.out_dim(), outputs[l]));
    x = outputs[l];
  }
  float* dy = b.grad_a.data();
  float* next_dy = b.grad_b.data();
  for (size_t l = layers.size(); l-- > 0;) {
    const FullyConnected& layer = layers[l];
    const float* w = b.params.data() + layer.param_offset();
    const float* input = l == 0 ? b.inputs.data() : outputs[l - 1];
    RETURN_IF_ERROR(gpu::GemmWeightGrad(blas, input, dy, batch, layer.in_dim(), layer.out_dim(),
                                        b.param_grads.data() + layer.param_offset()));
    float* dx = l == 0 ? b.input_grads.data() : next_dy;
    RETURN_IF_ERROR(gpu::GemmInputGrad(blas, dy, w, batch, layer.in_dim(), layer.out_dim(), dx));
    std::swap(dy, next_dy);
  }
  return Status::OK();
}

}  // namespace

StatusOr<double> TimeDenseGemms(const DenseNet& net, size_t batch, int iterations, int gpu) {
  if (batch == 0 || iterations < 1) {
    return Status::InvalidArgument("TimeDenseGemms needs batch >= 1 and iterations >= 1, got batch " +
                                   std::to_string(batch) + ", iterations " + std::to_string(iterations));
  }
  RETURN_IF_ERROR(gpu::ProbeCudaDevice(gpu).status());
  ASSIGN_OR_RETURN(gpu::DeviceGuard guard, gpu::DeviceGuard::Enter(gpu));
  ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::Create(gpu));
  ASSIGN_OR_RETURN(gpu::CublasHandle blas, gpu::CublasHandle::Create(stream));
  ASSIGN_OR_RETURN(gpu::Event start, gpu::Event::Create(gpu, /*timing=*/true));
  ASSIGN_OR_RETURN(gpu::Event stop, gpu::Event::Create(gpu, /*timing=*/true));

  size_t total_width = 0, max_width = 0;
  for (const FullyConnected& layer : net.layers()) {
    total_width += layer.out_dim();
    max_width = std::max(max_width, layer.out_dim());
  }
  GemmBuffers buffers;
  RETURN_IF_ERROR(Allocate(gpu, net.num_params(), stream, &buffers.params));
  RETURN_IF_ERROR(Allocate(gpu, net.num_params(), stream, &buffers.param_grads));
  RETURN_IF_ERROR(Allocate(gpu, batch * net.in_dim(), stream, &buffers.inputs));
  RETURN_IF_ERROR(Allocate(gpu, batch * net.in_dim(), stream, &buffers.input_grads));
  RETURN_IF_ERROR(Allocate(gpu, batch * total_width, stream, &buffers.layer_outputs));
  RETURN_IF_ERROR(Allocate(gpu, batch * max_width, stream, &buffers.grad_a));
  RETURN_IF_ERROR(Allocate(gpu, batch * max_width, stream, &buffers.grad_b));

  // One untimed step: cuBLAS picks and loads its kernels on first use.
  RETURN_IF_ERROR(QueueStepGemms(net, batch, blas.get(), buffers));
  RETURN_IF_ERROR(stream.Synchronize());

  RETURN_IF_ERROR(start.Record(stream.get()));
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(QueueStepGemms(net, batch, blas.get(), buffers));
  RETURN_IF_ERROR(stop.Record(stream.get()));
  RETURN_IF_ERROR(stop.Synchronize());
  ASSIGN_OR_RETURN(float ms, gpu::Event::ElapsedMs(start, stop));
  return static_cast<double>(ms) / iterations;
}

}  // namespace fleetps::heter
