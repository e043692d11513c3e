#include "heter_trainer/cuda/pass_table_kernels.h"

#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/cuda/kernel_launch.h"

namespace fleetps::heter::gpu {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t Mix(uint64_t x) {  // common/sharding.h MixKey
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void InsertKernel(const uint64_t* keys, uint32_t n, uint64_t* table_keys, uint32_t* table_rows,
                             uint64_t mask) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint64_t key = keys[k];
  uint64_t pos = Mix(key) & mask;
  while (true) {
    if (atomicCAS(&table_rows[pos], kEmptySlot, k) == kEmptySlot) {
      table_keys[pos] = key;
      return;
    }
    pos = (pos + 1) & mask;
  }
}

__global__ void FindKernel(const uint64_t* keys, uint32_t n, const uint64_t* table_keys, const uint32_t* table_rows,
                           uint64_t mask, uint32_t* rows_out, uint32_t* first_missing) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint64_t key = keys[k];
  uint64_t pos = Mix(key) & mask;
  while (true) {
    const uint32_t row = table_rows[pos];
    if (row == kEmptySlot || table_keys[pos] == key) {
      rows_out[k] = row;
      if (row == kEmptySlot && first_missing != nullptr) atomicMin(first_missing, k);
      return;
    }
    pos = (pos + 1) & mask;
  }
}

__global__ void GatherKernel(const uint32_t* row_index, uint32_t n, const float* rows, uint32_t row_floats,
                             uint32_t dim, float* out) {
  const uint64_t t = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= uint64_t{n} * dim) return;
  const uint32_t k = static_cast<uint32_t>(t / dim), j = static_cast<uint32_t>(t % dim);
  const uint32_t row = row_index[k];
  out[t] = row == kEmptySlot ? 0.0f : rows[uint64_t{row} * row_floats + j];
}

__global__ void PushKernel(PassRule r, const uint32_t* row_index, uint32_t n, const uint32_t* limit, const float* grads,
                           const float* shows, const float* clicks, float* rows, float* pass_shows, float* pass_clicks,
                           uint8_t* touched, uint32_t* extend_list, uint32_t* extend_count) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n || k >= *limit) return;
  const uint32_t slot = row_index[k];
  const float show = shows != nullptr ? shows[k] : 0.0f;
  const float click = clicks != nullptr ? clicks[k] : 0.0f;
  if (rules::PushRow(r, rows + uint64_t{slot} * r.row_floats, grads + uint64_t{k} * r.dim, show, click)) {
    extend_list[atomicAdd(extend_count, 1u)] = k;
  }
  pass_shows[slot] = __fadd_rn(pass_shows[slot], show);
  pass_clicks[slot] = __fadd_rn(pass_clicks[slot], click);
  touched[slot] = 1;
}

__global__ void ExtendKernel(PassRule r, const uint32_t* positions, const uint32_t* row_index, uint32_t n,
                             const float* initial, float* rows, float* begin) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint64_t at = uint64_t{row_index[positions[k]]} * r.row_floats;
  rules::ExtendRow(r, rows + at, initial + uint64_t{k} * r.dim);
  rules::ExtendRow(r, begin + at, initial + uint64_t{k} * r.dim);
}

uint32_t Blocks(uint64_t n) { return static_cast<uint32_t>((n + kThreads - 1) / kThreads); }

}  // namespace

Status LaunchInsert(const uint64_t* keys, uint32_t n, uint64_t* table_keys, uint32_t* table_rows, uint64_t mask,
                    cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(InsertKernel, Blocks(n), kThreads, stream, keys, n, table_keys, table_rows, mask));
  return Status::OK();
}

Status LaunchFind(const uint64_t* keys, uint32_t n, const uint64_t* table_keys, const uint32_t* table_rows,
                  uint64_t mask, uint32_t* rows_out, uint32_t* first_missing, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(FindKernel, Blocks(n), kThreads, stream, keys, n, table_keys, table_rows, mask,
                                    rows_out, first_missing));
  return Status::OK();
}

Status LaunchGather(const uint32_t* row_index, uint32_t n, const float* rows, uint32_t row_floats, uint32_t dim,
                    float* out, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(GatherKernel, Blocks(uint64_t{n} * dim), kThreads, stream, row_index, n, rows,
                                    row_floats, dim, out));
  return Status::OK();
}

Status LaunchPush(const PassRule& rule, const uint32_t* row_index, uint32_t n, const uint32_t* limit,
                  const float* grads, const float* shows, const float* clicks, float* rows, float* pass_shows,
                  float* pass_clicks, uint8_t* touched, uint32_t* extend_list, uint32_t* extend_count,
                  cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(PushKernel, Blocks(n), kThreads, stream, rule, row_index, n, limit, grads, shows,
                                    clicks, rows, pass_shows, pass_clicks, touched, extend_list, extend_count));
  return Status::OK();
}

Status LaunchExtend(const PassRule& rule, const uint32_t* positions, const uint32_t* row_index, uint32_t n,
                    const float* initial, float* rows, float* begin, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(
      LaunchKernel(ExtendKernel, Blocks(n), kThreads, stream, rule, positions, row_index, n, initial, rows, begin));
  return Status::OK();
}

}  // namespace fleetps::heter::gpu
