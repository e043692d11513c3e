#pragma once
// OpKernel: the CPU forward and backward of one graph layer (common/config/graph_ops.h
// gives its shapes). One kernel object per layer, built once with the layer's shapes and
// keys; it holds no per-call state, so any number of threads may run it at once.
// MakeKernel (kernels.cc) maps an op name to its kernel; trainer/graph/executor.h runs them.
//
// Conventions (every op follows them; the executor, executor.h, relies on them):
// - A batch is `batch` rows; a tensor of per-example size n is [batch x n] row-major.
// - params is THIS layer's slice of the flat parameter vector, laid out as the schema lists
//   the parameter shapes; param_grads the same slice of the gradient vector, which Backward
//   OVERWRITES.
// - Backward ADDS each input's gradient to input_grads[i] (a tensor may feed several
//   layers); an empty input_grads[i] means that input needs no gradient: skip it. A kernel
//   whose OverwritesInputGrads() is true instead WRITES input_grads[i] where overwrite[i] is
//   set (the executor sets it when this layer is the input's only reader and leaves the
//   buffer unzeroed).
// - output_grads[o] may be overwritten (the executor owns it and reads it no more).
// - scratch: ScratchFloats(batch) floats the executor keeps from Forward to Backward of the
//   same call (e.g. an inner product the backward pass needs).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/config/graph_spec.h"
#include "common/dense/cpu_gemm.h"
#include "common/uniform_random.h"

namespace fleetps::trainer::graph {

using fleetps::graph::ResolvedLayer;
using fleetps::graph::Shape;

struct OpArgs {
  size_t batch = 0;
  std::span<const float> params;
  std::span<const std::span<const float>> inputs;
  std::span<const std::span<float>> outputs;
  std::span<float> scratch;
  // A training step (dropout drops) or inference (it passes everything); and the step's
  // seed for random draws, a pure function of the workspace's step count and the layer.
  bool training = false;
  uint64_t seed = 0;
};

struct OpGrads {
  std::span<const std::span<float>> output_grads;
  std::span<float> param_grads;
  std::span<const std::span<float>> input_grads;
  std::span<const uint8_t> overwrite = {};  // per input (empty: add to every one)
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual size_t ScratchFloats(size_t batch) const {
    (void)batch;
    return 0;
  }
  // Fills this layer's parameters (its slice) from rng.
  virtual void InitParams(std::span<float> params, UniformRandom* rng) const { (void)params, (void)rng; }
  // True when Backward honours OpGrads::overwrite (saves the executor zeroing the buffer).
  virtual bool OverwritesInputGrads() const { return false; }
  virtual void Forward(const OpArgs& args) const = 0;
  virtual void Backward(const OpArgs& args, const OpGrads& grads) const = 0;
};

// What a kernel is built from: the layer (its keys, parameter shapes), its inputs' and
// outputs' shapes, and the matrix-product backend (which outlives the kernel).
struct KernelContext {
  const ResolvedLayer& layer;
  std::span<const Shape> input_shapes;
  std::span<const Shape> output_shapes;
  const dense::CpuGemm* gemm;
};

// The kernel of ctx.layer's op (kernels.cc). The layer has passed BuildGraph, so its keys
// are valid; CHECKs on an op without a CPU kernel.
std::unique_ptr<OpKernel> MakeKernel(const KernelContext& ctx);

}  // namespace fleetps::trainer::graph
