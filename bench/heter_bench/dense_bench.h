#pragma once
// The dense-device part of heter_bench: the mean time of one DenseDevice training step
// (forward, loss, backward with activation gradients, copies included) on the CPU device
// and, when a GPU is visible, on the CUDA device, each next to the time of the step's matrix
// products alone (OpenBLAS's on the CPU, cuBLAS's on the GPU) — how far a step is from its
// GEMM floor.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/config/model_config.h"

namespace fleetps::bench {

struct DenseBenchOptions {
  // The net: ctr_dnn's activation row (26 sparse slots x 9 + 13 dense features), its
  // hidden widths, and the 2-logit softmax output.
  size_t in_dim = 26 * 9 + 13;
  std::vector<uint32_t> hidden_sizes = {512, 256, 128};
  OutputKind output = OutputKind::kSoftmax2;
  // Rows per step; one table row per (device, batch).
  std::vector<size_t> batches = {512, 1024, 2048, 4096, 8192};
  int warmup_steps = 3;                  // untimed steps per (device, batch)
  int steps = 20;                        // timed steps per (device, batch); the mean is printed
  std::vector<uint32_t> lanes = {2, 4};  // GPU: lanes stepping at once, one column each
  int gpu = 0;                           // CUDA device index (among the visible ones)
  uint64_t seed = 1;                     // parameters and inputs
};

// Prints the table (device, batch, step ms, GEMMs ms, step / GEMMs; on the GPU the on-device
// time and the time per step of `lanes` lanes at once; examples/s at the best) to stdout;
// "gpu: skipped (no CUDA device visible)" when there is no GPU. Returns 0, or 1 after
// printing the error when a device fails.
int RunDenseDeviceBench(const DenseBenchOptions& options);

}  // namespace fleetps::bench
