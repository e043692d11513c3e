#include "bench/heter_bench/dense_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "fleetps/config.h"
#include "heter_trainer/device/dense_device.h"
#include "trainer/model/dense_net.h"
#include "trainer/model/layers.h"
#if FLEETPS_HAVE_CUDA
#include "heter_trainer/cuda/dense_gemm_timing.h"
#endif

namespace fleetps::bench {
namespace {

using trainer::model::DenseNet;

std::vector<float> Uniform(size_t n, uint64_t seed, float lo, float hi) {
  trainer::model::UniformRandom rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Next(lo, hi);
  return v;
}

// Mean milliseconds of a training step with activation gradients on one lane of `device`
// (SetParams once, options.warmup_steps untimed steps, then options.steps timed ones).
StatusOr<double> TimeSteps(heter::DenseDevice& device, const DenseNet& net, std::span<const float> params, size_t batch,
                           const DenseBenchOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<heter::DenseLane> lane, device.NewLane());
  RETURN_IF_ERROR(lane->SetParams(params));
  const std::vector<float> activations = Uniform(batch * net.in_dim(), options.seed + batch, -1.0f, 1.0f);
  std::vector<float> labels = Uniform(batch, options.seed + batch + 1, 0.0f, 1.0f);
  for (float& y : labels) y = y < 0.25f ? 1.0f : 0.0f;
  std::vector<float> predictions(batch), param_grads(net.num_params()), activation_grads(batch * net.in_dim());
  const heter::DenseStepOutput out{predictions, activation_grads, param_grads};
  for (int i = 0; i < options.warmup_steps; ++i) RETURN_IF_ERROR(lane->Step(activations, labels, batch, out).status());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.steps; ++i) RETURN_IF_ERROR(lane->Step(activations, labels, batch, out).status());
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / options.steps;
}

// Mean milliseconds of the BLAS calls a CPU training step of `net` with activation gradients
// makes for `batch` rows, as TimeDenseGemms does on a GPU: per layer the forward product,
// and backward the weight-gradient and input-gradient products (the first layer's input
// gradient included), in the order FullyConnected makes them; on zero-filled buffers, after
// one untimed step. What the CPU step is compared with.
double TimeCpuDenseGemms(const DenseNet& net, size_t batch, int iterations) {
  const std::span<const trainer::model::FullyConnected> layers = net.layers();
  size_t max_width = net.in_dim();
  for (const auto& layer : layers) max_width = std::max(max_width, layer.out_dim());
  std::vector<float> params(net.num_params()), param_grads(net.num_params());
  std::vector<std::vector<float>> outputs;
  for (const auto& layer : layers) outputs.emplace_back(batch * layer.out_dim());
  std::vector<float> inputs(batch * net.in_dim()), dy(batch * max_width), dx(batch * max_width);
  const auto n = [](size_t v) { return static_cast<int>(v); };
  const auto step = [&] {
    const float* x = inputs.data();
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& layer = layers[l];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n(batch), n(layer.out_dim()), n(layer.in_dim()), 1.0f, x,
                  n(layer.in_dim()), params.data() + layer.param_offset(), n(layer.out_dim()), 1.0f,
                  outputs[l].data(), n(layer.out_dim()));
      x = outputs[l].data();
    }
    for (size_t l = layers.size(); l-- > 0;) {
      const auto& layer = layers[l];
      const float* input = l == 0 ? inputs.data() : outputs[l - 1].data();
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n(layer.in_dim()), n(layer.out_dim()), n(batch), 1.0f,
                  input, n(layer.in_dim()), dy.data(), n(layer.out_dim()), 0.0f,
                  param_grads.data() + layer.param_offset(), n(layer.out_dim()));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n(batch), n(layer.in_dim()), n(layer.out_dim()), 1.0f,
                  dy.data(), n(layer.out_dim()), params.data() + layer.param_offset(), n(layer.out_dim()), 0.0f,
                  dx.data(), n(layer.in_dim()));
    }
  };
  step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) step();
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

void PrintRow(const char* device, size_t batch, double step_ms, double gemm_ms) {
  const double examples_per_s = static_cast<double>(batch) / (step_ms / 1e3);
  if (gemm_ms > 0.0) {
    std::printf("%-6s %7zu %10.3f %10.3f %10.2f %14.0f\n", device, batch, step_ms, gemm_ms, step_ms / gemm_ms,
                examples_per_s);
  } else {
    std::printf("%-6s %7zu %10.3f %10s %10s %14.0f\n", device, batch, step_ms, "-", "-", examples_per_s);
  }
}

// One table block: every batch on `device`, with the GEMM-only time next to it (OpenBLAS's on
// the CPU, cuBLAS's on GPU options.gpu).
Status RunDevice(const char* name, heter::DenseDevice& device, const DenseNet& net, std::span<const float> params,
                 const DenseBenchOptions& options, bool gpu) {
  for (size_t batch : options.batches) {
    ASSIGN_OR_RETURN(double step_ms, TimeSteps(device, net, params, batch, options));
    double gemm_ms = 0.0;
    if (!gpu) gemm_ms = TimeCpuDenseGemms(net, batch, options.steps);
#if FLEETPS_HAVE_CUDA
    if (gpu) {
      ASSIGN_OR_RETURN(gemm_ms, heter::TimeDenseGemms(net, batch, options.steps, options.gpu));
    }
#endif
    PrintRow(name, batch, step_ms, gemm_ms);
    std::fflush(stdout);
  }
  return Status::OK();
}

}  // namespace

int RunDenseDeviceBench(const DenseBenchOptions& options) {
  if (options.in_dim == 0 || options.steps < 1 || options.warmup_steps < 0) {
    std::fprintf(stderr, "heter_bench: dense: in_dim >= 1, steps >= 1 and warmup_steps >= 0 are needed\n");
    return 1;
  }
  const DenseNet net(options.in_dim, options.hidden_sizes, options.output);
  std::vector<float> params(net.num_params());
  net.InitParams(params, options.seed);

  std::string shape = std::to_string(net.in_dim());
  for (uint32_t width : options.hidden_sizes) shape += "-" + std::to_string(width);
  shape += options.output == OutputKind::kSoftmax2 ? "-2 (softmax2)" : "-1 (sigmoid)";
  std::printf(
      "dense step: net %s, %zu params; mean of %d steps after %d warm-up; forward, loss, backward with "
      "activation gradients, host copies included\n",
      shape.c_str(), net.num_params(), options.steps, options.warmup_steps);
  std::printf("%-6s %7s %10s %10s %10s %14s\n", "device", "batch", "step ms", "gemm ms", "step/gemm", "examples/s");

  std::unique_ptr<heter::DenseDevice> cpu = heter::MakeCpuDevice(net);
  if (Status status = RunDevice("cpu", *cpu, net, params, options, /*gpu=*/false); !status.ok()) {
    std::fprintf(stderr, "heter_bench: cpu: %s\n", status.ToString().c_str());
    return 1;
  }
#if !FLEETPS_HAVE_CUDA
  std::printf("gpu: skipped (this build has no CUDA)\n");
  return 0;
#endif
  if (heter::VisibleCudaDevices() == 0) {
    std::printf("gpu: skipped (no CUDA device visible)\n");
    return 0;
  }
  StatusOr<std::unique_ptr<heter::DenseDevice>> gpu = heter::MakeCudaDevice(net, options.gpu);
  if (!gpu.ok()) {
    std::fprintf(stderr, "heter_bench: gpu: %s\n", gpu.status().ToString().c_str());
    return 1;
  }
  std::printf("gpu: %s\n", (*gpu)->Describe().c_str());
  if (Status status = RunDevice("gpu", **gpu, net, params, options, /*gpu=*/true); !status.ok()) {
    std::fprintf(stderr, "heter_bench: gpu: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace fleetps::bench
