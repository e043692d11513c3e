// The CUDA DenseDevice against its CPU twin. Without a visible GPU the comparisons report
// "skipped: no CUDA device visible" and pass; the error paths (no device, index out of
// range, the CUDA/cuBLAS error seam) run everywhere.

#include <cblas.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/cuda/dense_gemm.h"
#include "heter_trainer/cuda/dense_gemm_timing.h"
#include "heter_trainer/device/dense_device.h"
#include "trainer/model/dense_net.h"
#include "trainer/model/layers.h"

namespace fleetps::heter {
namespace {

using trainer::model::DenseNet;
using trainer::model::FullyConnected;
using trainer::model::UniformRandom;

// Tolerance reasoning. Both devices compute in float with the same formulas; they differ
// in the summation order of the matrix products (OpenBLAS vs cuBLAS blocking), of the bias
// gradients (sequential vs a two-level tree) and of the loss (sequential vs a tree, both
// in double), and in expf (CUDA's is within 2 ulp). A length-K float sum in any order has
// a rounding error of at most ~K * 6e-8 times the sum of its terms' magnitudes, in
// practice ~sqrt(K) * 6e-8 for blocked sums; with K <= 4096 here and terms of random sign
// that is ~1e-5 of a section's largest entry, so 1e-4 catches any wrong index, transpose
// or missing term (each of which is an O(1) relative error) with a wide margin. The error
// is measured per section (predictions, each layer's W and b gradients, the activation
// gradients) relative to that section's largest magnitude, so a small section (a first
// layer's bias gradient) is not judged against a large one.
constexpr double kTolerance = 1e-4;

// max |a - b| / max |b|; max |a - b| when b is all zero (then a must be ~zero too).
double NormwiseError(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return scale > 0.0 ? diff / scale : diff;
}

// A ReLU is discontinuous in its gradient: where a pre-activation is within rounding
// (~1e-7 here) of 0, the two devices may disagree on its sign, and the gradient through
// that unit is then passed by one and blocked by the other — an O(1) difference in the
// gradients of that example, which no tolerance on rounding should accept. With thousands
// of rows and hundreds of units this happens with probability near 1 per test run, so the
// rows are drawn such that every hidden pre-activation is at least kKinkMargin from 0
// (a row that comes closer is drawn again), 1000 times the rounding error.
constexpr float kKinkMargin = 1e-4f;

// Whether a row brings some hidden unit within kKinkMargin of its ReLU's kink.
bool NearKink(const DenseNet& net, std::span<const float> params, std::span<const float> row) {
  std::vector<float> x(row.begin(), row.end()), y;
  const std::span<const FullyConnected> layers = net.layers();
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    y.resize(layers[l].out_dim());
    layers[l].Forward(params, x, 1, y);
    for (float v : y) {
      if (std::fabs(v) < kKinkMargin) return true;
    }
    trainer::model::ReluForward(y);
    x.swap(y);
  }
  return false;
}

// [batch x in_dim] activations uniform in [-1, 1), each row away from every ReLU's kink
// under `params` (see kKinkMargin).
std::vector<float> RandomActivations(const DenseNet& net, std::span<const float> params, size_t batch, uint64_t seed) {
  UniformRandom rng(seed);
  std::vector<float> activations(batch * net.in_dim());
  for (size_t i = 0; i < batch; ++i) {
    const std::span<float> row(activations.data() + i * net.in_dim(), net.in_dim());
    do {
      for (float& v : row) v = rng.Next(-1.0f, 1.0f);
    } while (NearKink(net, params, row));
  }
  return activations;
}

std::vector<float> RandomLabels(size_t batch, uint64_t seed) {
  UniformRandom rng(seed);
  std::vector<float> labels(batch);
  for (float& y : labels) y = rng.Next(0.0f, 1.0f) < 0.3f ? 1.0f : 0.0f;
  return labels;
}

// Xavier weights and random non-zero biases, so that ReLU masks vary between units.
std::vector<float> RandomParams(const DenseNet& net, uint64_t seed) {
  std::vector<float> params(net.num_params());
  net.InitParams(params, seed);
  UniformRandom rng(seed + 1);
  for (const FullyConnected& layer : net.layers()) {
    float* bias = params.data() + layer.param_offset() + layer.in_dim() * layer.out_dim();
    for (size_t j = 0; j < layer.out_dim(); ++j) bias[j] = rng.Next(-0.2f, 0.2f);
  }
  return params;
}

struct StepResult {
  float loss = 0.0f;
  std::vector<float> predictions, param_grads, activation_grads;
};

// One step on `lane`: backward when `backward`, activation gradients when also `input_grads`.
StepResult RunStep(DenseLane& lane, const DenseNet& net, std::span<const float> activations,
                   std::span<const float> labels, size_t batch, bool backward, bool input_grads) {
  StepResult r;
  r.predictions.resize(batch);
  if (backward) r.param_grads.resize(net.num_params());
  if (backward && input_grads) r.activation_grads.resize(batch * net.in_dim());
  const StatusOr<float> loss =
      lane.Step(activations, labels, batch, {r.predictions, r.activation_grads, r.param_grads});
  INFO(loss.status().ToString());
  REQUIRE(loss.ok());
  r.loss = *loss;
  return r;
}

void ExpectClose(const DenseNet& net, const StepResult& gpu, const StepResult& cpu) {
  CHECK(NormwiseError(gpu.predictions, cpu.predictions) <= kTolerance);
  CHECK(std::fabs(double{gpu.loss} - double{cpu.loss}) <= kTolerance * std::max(1e-3, std::fabs(double{cpu.loss})));
  REQUIRE(gpu.param_grads.size() == cpu.param_grads.size());
  if (!cpu.param_grads.empty()) {
    for (size_t l = 0; l < net.layers().size(); ++l) {
      const FullyConnected& layer = net.layers()[l];
      const size_t w = layer.in_dim() * layer.out_dim();
      const std::span<const float> g(gpu.param_grads), c(cpu.param_grads);
      INFO("layer " << l);
      CHECK(NormwiseError(g.subspan(layer.param_offset(), w), c.subspan(layer.param_offset(), w)) <= kTolerance);
      CHECK(NormwiseError(g.subspan(layer.param_offset() + w, layer.out_dim()),
                          c.subspan(layer.param_offset() + w, layer.out_dim())) <= kTolerance);
    }
  }
  REQUIRE(gpu.activation_grads.size() == cpu.activation_grads.size());
  CHECK(NormwiseError(gpu.activation_grads, cpu.activation_grads) <= kTolerance);
}

// True when a GPU is visible; otherwise says the test is skipped.
bool HaveGpu() {
  if (VisibleCudaDevices() > 0) return true;
  WARN("skipped: no CUDA device visible");
  return false;
}

std::unique_ptr<DenseDevice> Gpu(const DenseNet& net) {
  StatusOr<std::unique_ptr<DenseDevice>> device = MakeCudaDevice(net, 0);
  INFO(device.status().ToString());
  REQUIRE(device.ok());
  return std::move(device).value();
}

std::unique_ptr<DenseLane> Lane(DenseDevice& device) {
  StatusOr<std::unique_ptr<DenseLane>> lane = device.NewLane();
  INFO(lane.status().ToString());
  REQUIRE(lane.ok());
  return std::move(lane).value();
}

struct NetShape {
  size_t in_dim;
  std::vector<uint32_t> hidden;
  OutputKind output;
};

const std::vector<NetShape>& Shapes() {
  static const std::vector<NetShape> shapes = {
      {13, {}, OutputKind::kSigmoid},                 // linear model, one logit
      {13, {}, OutputKind::kSoftmax2},                // linear model, two logits
      {5, {3}, OutputKind::kSigmoid},                 // widths below a warp
      {37, {64, 16}, OutputKind::kSoftmax2},          // odd input width
      {247, {512, 256, 128}, OutputKind::kSoftmax2},  // ctr_dnn
      {100, {33, 65}, OutputKind::kSigmoid},          // widths just past a warp multiple
  };
  return shapes;
}

TEST_CASE("MakeCudaDevice sets how threads wait for the GPU when asked, and leaves it otherwise", "[heter][cuda]") {
  if (!HaveGpu()) return;
  const DenseNet net(4, {3}, OutputKind::kSigmoid);
  auto schedule = [] {
    unsigned flags = 0;
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaGetDeviceFlags(&flags) == cudaSuccess);
    return flags & cudaDeviceScheduleMask;
  };
  REQUIRE(MakeCudaDevice(net, 0, config::CudaWait::kBlock).ok());
  CHECK(schedule() == cudaDeviceScheduleBlockingSync);
  REQUIRE(MakeCudaDevice(net, 0).ok());  // auto: as it was
  CHECK(schedule() == cudaDeviceScheduleBlockingSync);
  REQUIRE(MakeCudaDevice(net, 0, config::CudaWait::kYield).ok());
  CHECK(schedule() == cudaDeviceScheduleYield);
}

TEST_CASE("MakeCudaDevice with an index out of range is Unavailable", "[heter][cuda]") {
  const DenseNet net(4, {3}, OutputKind::kSigmoid);
  for (int gpu : {VisibleCudaDevices(), VisibleCudaDevices() + 7, -1}) {
    StatusOr<std::unique_ptr<DenseDevice>> device = MakeCudaDevice(net, gpu);
    INFO("gpu " << gpu << ": " << device.status().ToString());
    REQUIRE_FALSE(device.ok());
    CHECK(device.status().IsUnavailable());
    CHECK(device.status().message().find("HETER_DEVICE_TYPE=cpu") != std::string::npos);
  }
}

TEST_CASE("MakeCudaDevice refuses the models its lanes do not implement", "[heter][cuda]") {
  ModelOptions options;
  options.type = ModelType::kDeepFm;
  const DenseNet net = DenseNet::FromOptions(options);
  StatusOr<std::unique_ptr<DenseDevice>> device = MakeCudaDevice(net, 0);
  REQUIRE_FALSE(device.ok());
  CHECK(device.status().IsInvalidArgument());
  CHECK(device.status().message().find("model_type deepfm") != std::string::npos);
  CHECK(device.status().message().find("HETER_DEVICE_TYPE=cpu") != std::string::npos);
}

TEST_CASE("TimeDenseGemms checks its arguments and the device", "[heter][cuda]") {
  const DenseNet net(4, {3}, OutputKind::kSigmoid);
  CHECK(TimeDenseGemms(net, 0, 1, 0).status().IsInvalidArgument());
  CHECK(TimeDenseGemms(net, 8, 0, 0).status().IsInvalidArgument());
  CHECK(TimeDenseGemms(net, 8, 1, VisibleCudaDevices()).status().IsUnavailable());
}

cudaError_t Returns(cudaError_t error) { return error; }
cublasStatus_t Returns(cublasStatus_t status) { return status; }

Status CudaCall(cudaError_t error) {
  RETURN_IF_CUDA_ERROR(Returns(error));
  return Status::OK();
}

Status CublasCall(cublasStatus_t status) {
  RETURN_IF_CUBLAS_ERROR(Returns(status));
  return Status::OK();
}

TEST_CASE("The CUDA error seam names the call, the place and the error", "[heter][cuda]") {
  CHECK(CudaCall(cudaSuccess).ok());
  const Status invalid = CudaCall(cudaErrorInvalidValue);
  CHECK(invalid.code() == StatusCode::kInternal);
  CHECK(invalid.message().find("Returns(error) failed at") != std::string::npos);
  CHECK(invalid.message().find("cuda_device_test.cc:") != std::string::npos);
  CHECK(invalid.message().find("cudaErrorInvalidValue") != std::string::npos);
  CHECK(invalid.message().find(cudaGetErrorString(cudaErrorInvalidValue)) != std::string::npos);
  CHECK(CudaCall(cudaErrorMemoryAllocation).IsUnavailable());
  CHECK(CudaCall(cudaErrorNoDevice).IsUnavailable());

  CHECK(CublasCall(CUBLAS_STATUS_SUCCESS).ok());
  const Status blas = CublasCall(CUBLAS_STATUS_INVALID_VALUE);
  CHECK(blas.code() == StatusCode::kInternal);
  CHECK(blas.message().find("Returns(status) failed at") != std::string::npos);
  CHECK(blas.message().find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos);
  CHECK(CublasCall(CUBLAS_STATUS_ALLOC_FAILED).IsUnavailable());
}

// Runs the cuBLAS call described by `args` with a column-major host BLAS (same
// argument semantics as cublasSgemm).
void HostSgemm(const gpu::SgemmArgs& args) {
  const auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; };
  cblas_sgemm(CblasColMajor, op(args.trans_a), op(args.trans_b), args.m, args.n, args.k, 1.0f, args.a, args.lda, args.b,
              args.ldb, 0.0f, args.c, args.ldc);
}

// Row-major C [m x n] = op(A) op(B) in double, op(A)[r][c] = A[r * a_cols + c] or its transpose.
std::vector<float> NaiveProduct(std::span<const float> a, bool trans_a, std::span<const float> b, bool trans_b,
                                size_t m, size_t k, size_t n) {
  std::vector<float> c(m * n);
  for (size_t r = 0; r < m; ++r) {
    for (size_t col = 0; col < n; ++col) {
      double sum = 0.0;
      for (size_t j = 0; j < k; ++j) {
        const float av = trans_a ? a[j * m + r] : a[r * k + j];
        const float bv = trans_b ? b[col * k + j] : b[j * n + col];
        sum += double{av} * double{bv};
      }
      c[r * n + col] = static_cast<float>(sum);
    }
  }
  return c;
}

std::vector<float> Uniform(size_t n, uint64_t seed) {
  UniformRandom rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Next(-1.0f, 1.0f);
  return v;
}

// The row-major -> column-major mapping of dense_gemm.h, checked on the host: the exact
// arguments the CUDA lane passes to cublasSgemm, given to a column-major CPU BLAS.
TEST_CASE("cuBLAS arguments compute the row-major layer products", "[heter][cuda]") {
  struct Dims {
    size_t batch, in, out;
  };
  for (const Dims& d : {Dims{1, 1, 1}, Dims{7, 5, 3}, Dims{33, 65, 17}, Dims{4, 247, 2}, Dims{64, 3, 40}}) {
    INFO("batch " << d.batch << ", in " << d.in << ", out " << d.out);
    const std::vector<float> x = Uniform(d.batch * d.in, 1), w = Uniform(d.in * d.out, 2);
    const std::vector<float> dy = Uniform(d.batch * d.out, 3);

    std::vector<float> y(d.batch * d.out);
    const StatusOr<gpu::SgemmArgs> forward = gpu::ForwardArgs(x.data(), w.data(), d.batch, d.in, d.out, y.data());
    REQUIRE(forward.ok());
    HostSgemm(*forward);
    CHECK(NormwiseError(y, NaiveProduct(x, false, w, false, d.batch, d.in, d.out)) <= 1e-6);

    std::vector<float> dw(d.in * d.out);
    const StatusOr<gpu::SgemmArgs> weights = gpu::WeightGradArgs(x.data(), dy.data(), d.batch, d.in, d.out, dw.data());
    REQUIRE(weights.ok());
    HostSgemm(*weights);
    CHECK(NormwiseError(dw, NaiveProduct(x, true, dy, false, d.in, d.batch, d.out)) <= 1e-6);

    std::vector<float> dx(d.batch * d.in);
    const StatusOr<gpu::SgemmArgs> inputs = gpu::InputGradArgs(dy.data(), w.data(), d.batch, d.in, d.out, dx.data());
    REQUIRE(inputs.ok());
    HostSgemm(*inputs);
    CHECK(NormwiseError(dx, NaiveProduct(dy, false, w, true, d.batch, d.out, d.in)) <= 1e-6);
  }
  CHECK(gpu::ForwardArgs(nullptr, nullptr, size_t{1} << 31, 1, 1, nullptr).status().IsInvalidArgument());
}

TEST_CASE("CUDA device matches the CPU device", "[heter][cuda][gpu]") {
  if (!HaveGpu()) return;
  uint64_t seed = 100;
  for (const NetShape& shape : Shapes()) {
    const DenseNet net(shape.in_dim, shape.hidden, shape.output);
    std::unique_ptr<DenseDevice> gpu_device = Gpu(net);
    CHECK(gpu_device->type() == DeviceType::kGpu);
    CHECK(gpu_device->Describe().rfind("gpu 0 (", 0) == 0);
    std::unique_ptr<DenseDevice> cpu_device = MakeCpuDevice(net);
    std::unique_ptr<DenseLane> gpu = Lane(*gpu_device);
    std::unique_ptr<DenseLane> cpu = Lane(*cpu_device);
    const std::vector<float> params = RandomParams(net, ++seed);
    REQUIRE(gpu->SetParams(params).ok());
    REQUIRE(cpu->SetParams(params).ok());
    // Growing batches, then a small one again: buffers grow once and are reused.
    for (size_t batch : {size_t{1}, size_t{7}, size_t{512}, size_t{4096}, size_t{7}}) {
      INFO("in " << shape.in_dim << ", " << shape.hidden.size() << " hidden layers, output "
                 << static_cast<int>(shape.output) << ", batch " << batch);
      const std::vector<float> activations = RandomActivations(net, params, batch, ++seed);
      const std::vector<float> labels = RandomLabels(batch, ++seed);
      ExpectClose(net, RunStep(*gpu, net, activations, labels, batch, true, true),
                  RunStep(*cpu, net, activations, labels, batch, true, true));
      // Without activation gradients, and forward only.
      ExpectClose(net, RunStep(*gpu, net, activations, labels, batch, true, false),
                  RunStep(*cpu, net, activations, labels, batch, true, false));
      const StepResult forward = RunStep(*gpu, net, activations, {}, batch, false, false);
      CHECK(forward.loss == 0.0f);
      ExpectClose(net, forward, RunStep(*cpu, net, activations, {}, batch, false, false));
    }
  }
}

TEST_CASE("CUDA lane: inputs and outputs in the device's host buffers give the staged step's results",
          "[heter][cuda][gpu]") {
  if (!HaveGpu()) return;
  const DenseNet net(247, {512, 256, 128}, OutputKind::kSoftmax2);  // ctr_dnn
  std::unique_ptr<DenseDevice> device = Gpu(net);
  std::shared_ptr<HostBufferPool> pool = device->host_buffers();
  REQUIRE(pool != nullptr);
  std::unique_ptr<DenseLane> lane = Lane(*device);
  const std::vector<float> params = RandomParams(net, 31);
  REQUIRE(lane->SetParams(params).ok());
  auto block = [&](size_t floats) { return SharedBlock(pool, floats * sizeof(float)); };
  auto floats = [](const std::shared_ptr<uint8_t[]>& b, size_t n) {
    return std::span<float>(reinterpret_cast<float*>(b.get()), n);
  };
  for (size_t batch : {size_t{7}, size_t{4096}}) {
    INFO("batch " << batch);
    const std::vector<float> activations = RandomActivations(net, params, batch, 40 + batch);
    const std::vector<float> labels = RandomLabels(batch, 50 + batch);
    const StepResult staged = RunStep(*lane, net, activations, labels, batch, true, true);
    auto in_block = block(activations.size()), labels_block = block(batch);
    std::copy(activations.begin(), activations.end(), floats(in_block, activations.size()).begin());
    std::copy(labels.begin(), labels.end(), floats(labels_block, batch).begin());
    const std::span<const float> pinned_in = floats(in_block, activations.size());
    const std::span<const float> pinned_labels = floats(labels_block, batch);
    // Page-locked inputs, ordinary outputs.
    ExpectClose(net, RunStep(*lane, net, pinned_in, pinned_labels, batch, true, true), staged);
    // Page-locked inputs and outputs: every copy direct.
    auto predictions = block(batch), act_grads = block(activations.size()), param_grads = block(net.num_params());
    const StatusOr<float> loss = lane->Step(
        pinned_in, pinned_labels, batch,
        {floats(predictions, batch), floats(act_grads, activations.size()), floats(param_grads, net.num_params())});
    REQUIRE(loss.ok());
    StepResult direct;
    direct.loss = *loss;
    auto to_vector = [](std::span<float> f) { return std::vector<float>(f.begin(), f.end()); };
    direct.predictions = to_vector(floats(predictions, batch));
    direct.activation_grads = to_vector(floats(act_grads, activations.size()));
    direct.param_grads = to_vector(floats(param_grads, net.num_params()));
    ExpectClose(net, direct, staged);
    // Forward only, outputs page-locked.
    const StatusOr<float> forward = lane->Step(pinned_in, {}, batch, {floats(predictions, batch), {}, {}});
    REQUIRE(forward.ok());
    CHECK(*forward == 0.0f);
    CHECK(NormwiseError(floats(predictions, batch), staged.predictions) <= kTolerance);
  }
}

TEST_CASE("CUDA lane: new parameters take effect at the next step", "[heter][cuda][gpu]") {
  if (!HaveGpu()) return;
  const DenseNet net(37, {64, 16}, OutputKind::kSigmoid);
  std::unique_ptr<DenseDevice> gpu_device = Gpu(net);
  std::unique_ptr<DenseDevice> cpu_device = MakeCpuDevice(net);
  std::unique_ptr<DenseLane> gpu = Lane(*gpu_device);
  std::unique_ptr<DenseLane> cpu = Lane(*cpu_device);
  const size_t batch = 300;
  const std::vector<float> labels = RandomLabels(batch, 2);
  for (uint64_t seed : {3, 4, 5}) {
    const std::vector<float> params = RandomParams(net, seed);
    const std::vector<float> activations = RandomActivations(net, params, batch, seed + 10);
    REQUIRE(gpu->SetParams(params).ok());
    REQUIRE(cpu->SetParams(params).ok());
    ExpectClose(net, RunStep(*gpu, net, activations, labels, batch, true, true),
                RunStep(*cpu, net, activations, labels, batch, true, true));
  }
}

TEST_CASE("CUDA lanes on several threads each match the CPU", "[heter][cuda][gpu]") {
  if (!HaveGpu()) return;
  const DenseNet net(247, {512, 256, 128}, OutputKind::kSoftmax2);
  std::unique_ptr<DenseDevice> gpu_device = Gpu(net);
  std::unique_ptr<DenseDevice> cpu_device = MakeCpuDevice(net);
  const std::vector<float> params = RandomParams(net, 9);
  constexpr int kLanes = 4;
  constexpr size_t kBatch = 1024;
  std::vector<std::vector<float>> activations, labels;
  std::vector<std::unique_ptr<DenseLane>> lanes;
  for (int i = 0; i < kLanes; ++i) {
    activations.push_back(RandomActivations(net, params, kBatch, 20 + i));
    labels.push_back(RandomLabels(kBatch, 40 + i));
    lanes.push_back(Lane(*gpu_device));
    REQUIRE(lanes.back()->SetParams(params).ok());
  }
  // Catch2's assertions are not thread-safe: the threads only run steps.
  std::vector<StepResult> results(kLanes);
  std::vector<Status> statuses(kLanes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kLanes; ++i) {
    threads.emplace_back([&, i] {
      for (int repeat = 0; repeat < 5; ++repeat) {
        StepResult& r = results[i];
        r.predictions.assign(kBatch, 0.0f);
        r.param_grads.assign(net.num_params(), 0.0f);
        r.activation_grads.assign(kBatch * net.in_dim(), 0.0f);
        StatusOr<float> loss =
            lanes[i]->Step(activations[i], labels[i], kBatch, {r.predictions, r.activation_grads, r.param_grads});
        statuses[i] = loss.status();
        if (!loss.ok()) return;
        r.loss = *loss;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::unique_ptr<DenseLane> cpu = Lane(*cpu_device);
  REQUIRE(cpu->SetParams(params).ok());
  for (int i = 0; i < kLanes; ++i) {
    INFO("lane " << i << ": " << statuses[i].ToString());
    REQUIRE(statuses[i].ok());
    ExpectClose(net, results[i], RunStep(*cpu, net, activations[i], labels[i], kBatch, true, true));
  }
}

TEST_CASE("CUDA lane rejects bad shapes with InvalidArgument", "[heter][cuda][gpu]") {
  if (!HaveGpu()) return;
  const DenseNet net(6, {4}, OutputKind::kSoftmax2);
  std::unique_ptr<DenseDevice> device = Gpu(net);
  std::unique_ptr<DenseLane> lane = Lane(*device);
  const size_t batch = 3;
  std::vector<float> activations(batch * net.in_dim(), 0.5f), labels(batch, 1.0f), predictions(batch);
  std::vector<float> param_grads(net.num_params()), activation_grads(batch * net.in_dim());

  // No parameters yet.
  CHECK(lane->Step(activations, labels, batch, {predictions, {}, param_grads}).status().IsInvalidArgument());
  CHECK(lane->SetParams(std::vector<float>(net.num_params() + 1)).IsInvalidArgument());
  REQUIRE(lane->SetParams(RandomParams(net, 1)).ok());

  std::vector<float> short_activations(batch * net.in_dim() - 1);
  CHECK(lane->Step(short_activations, labels, batch, {predictions, {}, param_grads}).status().IsInvalidArgument());
  std::vector<float> short_labels(batch - 1);
  CHECK(lane->Step(activations, short_labels, batch, {predictions, {}, param_grads}).status().IsInvalidArgument());
  std::vector<float> short_grads(net.num_params() - 1);
  CHECK(lane->Step(activations, labels, batch, {predictions, {}, short_grads}).status().IsInvalidArgument());
  std::vector<float> short_input_grads(activation_grads.size() - 1);
  CHECK(lane->Step(activations, labels, batch, {predictions, short_input_grads, param_grads})
            .status()
            .IsInvalidArgument());
  CHECK(lane->Step(activations, labels, 0, {{}, {}, param_grads}).status().IsInvalidArgument());
  // The lane still works after the rejected steps.
  CHECK(lane->Step(activations, labels, batch, {predictions, activation_grads, param_grads}).ok());
}

}  // namespace
}  // namespace fleetps::heter
