#include "bench/heter_bench/dense_bench.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include <fmt/format.h>

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

// A step's inputs (random) and outputs: in ordinary vectors, or with `host_buffers` in blocks
// of the device's host_buffers(), as the heter-trainer holds micro-batches and replies (on a
// GPU: page-locked, copied without the lane's staging).
class StepBuffers {
 public:
  StepBuffers(heter::DenseDevice& device, const DenseNet& net, size_t batch, uint64_t seed, bool host_buffers) {
    const std::vector<float> activations = Uniform(batch * net.in_dim(), seed + batch, -1.0f, 1.0f);
    std::vector<float> labels = Uniform(batch, seed + batch + 1, 0.0f, 1.0f);
    for (float& y : labels) y = y < 0.25f ? 1.0f : 0.0f;
    std::shared_ptr<heter::HostBufferPool> pool = host_buffers ? device.host_buffers() : nullptr;
    auto make = [&](size_t n) {
      if (pool == nullptr) return std::span<float>(vectors_.emplace_back(n));
      blocks_.push_back(heter::SharedBlock(pool, n * sizeof(float)));
      return std::span<float>(reinterpret_cast<float*>(blocks_.back().get()), n);
    };
    vectors_.reserve(5);  // the spans point into them
    this->activations = make(activations.size());
    this->labels = make(batch);
    std::copy(activations.begin(), activations.end(), this->activations.begin());
    std::copy(labels.begin(), labels.end(), this->labels.begin());
    predictions = make(batch);
    activation_grads = make(activations.size());
    param_grads = make(net.num_params());
  }
  heter::DenseStepOutput out() const { return {predictions, activation_grads, param_grads}; }

  std::span<float> activations, labels, predictions, activation_grads, param_grads;

 private:
  std::vector<std::vector<float>> vectors_;
  std::vector<std::shared_ptr<uint8_t[]>> blocks_;
};

struct StepTimes {
  double step_ms = 0;    // wall time of a step, one at a time on one lane
  double device_ms = 0;  // of which the GEMMs and kernels on the device (GPU lanes; else 0)
};

// Mean times of a training step with activation gradients on one lane of `device`
// (SetParams once, options.warmup_steps untimed steps, then options.steps timed ones).
StatusOr<StepTimes> TimeSteps(heter::DenseDevice& device, const DenseNet& net, std::span<const float> params,
                              size_t batch, bool host_buffers, const DenseBenchOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<heter::DenseLane> lane, device.NewLane());
  RETURN_IF_ERROR(lane->SetParams(params));
  const StepBuffers in(device, net, batch, options.seed, host_buffers);
  float device_ms = 0;
  heter::DenseStepOutput out = in.out();
  for (int i = 0; i < options.warmup_steps; ++i)
    RETURN_IF_ERROR(lane->Step(in.activations, in.labels, batch, out).status());
  out.device_ms = &device_ms;
  double device_total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.steps; ++i) {
    RETURN_IF_ERROR(lane->Step(in.activations, in.labels, batch, out).status());
    device_total += device_ms;
  }
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return StepTimes{elapsed.count() / options.steps, device_total / options.steps};
}

// Milliseconds per step when `lanes` threads each run options.steps steps on a lane of their
// own at once, as a heter-trainer's lanes do: wall time over all the steps. What one device
// gives per micro-batch once one lane's copies and host work overlap another's compute.
StatusOr<double> TimeLanes(heter::DenseDevice& device, const DenseNet& net, std::span<const float> params, size_t batch,
                           uint32_t lanes, bool host_buffers, const DenseBenchOptions& options) {
  std::vector<std::unique_ptr<heter::DenseLane>> all;
  for (uint32_t l = 0; l < lanes; ++l) {
    ASSIGN_OR_RETURN(auto lane, device.NewLane());
    RETURN_IF_ERROR(lane->SetParams(params));
    all.push_back(std::move(lane));
  }
  std::vector<Status> results(lanes);
  std::barrier ready(static_cast<std::ptrdiff_t>(lanes) + 1);
  std::vector<std::thread> threads;
  for (uint32_t l = 0; l < lanes; ++l) {
    threads.emplace_back([&, l] {
      const StepBuffers in(device, net, batch, options.seed, host_buffers);  // each lane its own, as micro-batches
      const heter::DenseStepOutput out = in.out();
      for (int i = 0; i < options.warmup_steps && results[l].ok(); ++i) {
        results[l] = all[l]->Step(in.activations, in.labels, batch, out).status();
      }
      ready.arrive_and_wait();
      for (int i = 0; i < options.steps && results[l].ok(); ++i) {
        results[l] = all[l]->Step(in.activations, in.labels, batch, out).status();
      }
    });
  }
  ready.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  for (const Status& st : results) RETURN_IF_ERROR(st);
  return elapsed.count() / (static_cast<double>(options.steps) * lanes);
}

// Mean milliseconds of the matrix products (on net.gemm(), the CPU dense backend) a CPU training step of `net` with activation gradients
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
  const dense::CpuGemm& gemm = net.gemm();
  const auto step = [&] {
    const float* x = inputs.data();
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& layer = layers[l];
      const size_t in = layer.in_dim(), out = layer.out_dim();
      gemm.Gemm(dense::Op::kN, dense::Op::kN, batch, out, in, x, in, params.data() + layer.param_offset(), out, 0.0f,
                outputs[l].data(), out);
      x = outputs[l].data();
    }
    for (size_t l = layers.size(); l-- > 0;) {
      const auto& layer = layers[l];
      const size_t in = layer.in_dim(), out = layer.out_dim();
      const float* input = l == 0 ? inputs.data() : outputs[l - 1].data();
      gemm.Gemm(dense::Op::kT, dense::Op::kN, in, out, batch, input, in, dy.data(), out, 0.0f,
                param_grads.data() + layer.param_offset(), out);
      gemm.Gemm(dense::Op::kN, dense::Op::kT, batch, in, out, dy.data(), out, params.data() + layer.param_offset(), out,
                0.0f, dx.data(), in);
    }
  };
  step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) step();
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

// One table block: every batch on `device`, with the GEMM-only time next to it (the dense
// backend's on the CPU, cuBLAS's on GPU options.gpu); on the GPU also the on-device time and the time per
// step of several lanes at once. `host_buffers`: inputs and outputs in the device's
// host_buffers() (as the heter-trainer's micro-batches and replies), else ordinary vectors.
Status RunDevice(const char* name, heter::DenseDevice& device, const DenseNet& net, std::span<const float> params,
                 const DenseBenchOptions& options, bool gpu, bool host_buffers) {
  for (size_t batch : options.batches) {
    ASSIGN_OR_RETURN(const StepTimes one, TimeSteps(device, net, params, batch, host_buffers, options));
    double gemm_ms = 0.0;
    if (!gpu) gemm_ms = TimeCpuDenseGemms(net, batch, options.steps);
#if FLEETPS_HAVE_CUDA
    if (gpu) {
      ASSIGN_OR_RETURN(gemm_ms, heter::TimeDenseGemms(net, batch, options.steps, options.gpu));
    }
#endif
    std::string row =
        fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.2f} |", name, batch, one.step_ms, gemm_ms, one.step_ms / gemm_ms);
    double best_ms = one.step_ms;
    if (gpu) {
      row += fmt::format(" {:.3f} | {:.2f} |", one.device_ms, one.device_ms / gemm_ms);
      for (uint32_t lanes : options.lanes) {
        ASSIGN_OR_RETURN(const double ms, TimeLanes(device, net, params, batch, lanes, host_buffers, options));
        row += fmt::format(" {:.3f} |", ms);
        best_ms = std::min(best_ms, ms);
      }
      row += fmt::format(" {:.2f} |", best_ms / gemm_ms);
    } else {
      row += " - | - |";
      for (size_t i = 0; i < options.lanes.size(); ++i) row += " - |";
      row += " - |";
    }
    row += fmt::format(" {:.0f} |", static_cast<double>(batch) / (best_ms / 1e3));
    std::printf("%s\n", row.c_str());
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
      "activation gradients. step: one at a time on one lane, host copies and transfers included; on device: "
      "its GEMMs and kernels alone; N lanes: ms per step with N lanes stepping at once (threads, as the "
      "heter-trainer's lanes)\n\n",
      shape.c_str(), net.num_params(), options.steps, options.warmup_steps);
  std::string header = "| device | batch | step ms | GEMMs ms | step / GEMMs | on device ms | on device / GEMMs |";
  std::string rule = "|---|---|---|---|---|---|---|";
  for (uint32_t lanes : options.lanes) {
    header += fmt::format(" {} lanes ms |", lanes);
    rule += "---|";
  }
  std::printf("%s best / GEMMs | examples/s (best) |\n%s---|---|\n", header.c_str(), rule.c_str());

  std::unique_ptr<heter::DenseDevice> cpu = heter::MakeCpuDevice(net);
  if (Status status = RunDevice("cpu", *cpu, net, params, options, /*gpu=*/false, /*host_buffers=*/false);
      !status.ok()) {
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
  // Ordinary vectors, staged by the lane; then page-locked, as the heter-trainer holds them.
  for (bool host_buffers : {false, true}) {
    const char* name = host_buffers ? "gpu, page-locked" : "gpu";
    if (Status status = RunDevice(name, **gpu, net, params, options, /*gpu=*/true, host_buffers); !status.ok()) {
      std::fprintf(stderr, "heter_bench: %s: %s\n", name, status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace fleetps::bench
