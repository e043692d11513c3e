#include "heter_trainer/cuda/pass_table_kernels.h"

#include "heter_trainer/cuda/kernel_launch.h"

#include "heter_trainer/cuda/cuda_status.h"

namespace fleetps::heter::gpu {
namespace {

constexpr uint32_t kChanged = 1u;     // disk::RowFlag::Changed
constexpr uint32_t kExtended = 2u;    // disk::RowFlag::EmbedxExtended
constexpr uint32_t kDirty = 1u << 8;  // RowAccessor::kDirty
constexpr uint32_t kShow = 0, kClick = 1, kUnseen = 2, kDeltaScore = 3;
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
                           uint64_t mask, uint32_t* rows_out) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint64_t key = keys[k];
  uint64_t pos = Mix(key) & mask;
  while (true) {
    const uint32_t row = table_rows[pos];
    if (row == kEmptySlot || table_keys[pos] == key) {
      rows_out[k] = row;
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
  out[t] = rows[uint64_t{row_index[k]} * row_floats + j];
}

// std::clamp(w, bound_min, bound_max), as Optimizer::ClipToBounds.
__device__ __forceinline__ float Clip(const PassRule& r, float w) {
  if (!r.has_bounds) return w;
  return w < r.bound_min ? r.bound_min : (r.bound_max < w ? r.bound_max : w);
}

__device__ __forceinline__ float FlushSubnormal(float x) { return x < 1.17549435e-38f ? 0.0f : x; }

// Optimizer::UpdateSpan (common/optimizer) on n weights.
__device__ void UpdateSpan(const PassRule& r, float* w, float* element, float* shared, const float* grad,
                           uint32_t n) {
  if (r.decay != 1.0f) {
    for (uint32_t i = 0; i < n; ++i) w[i] = __fmul_rn(w[i], r.decay);
  }
  if (r.kind == 0) {
    for (uint32_t i = 0; i < n; ++i) w[i] = Clip(r, __fsub_rn(w[i], __fmul_rn(r.learning_rate, grad[i])));
  } else if (r.kind == 1) {
    for (uint32_t i = 0; i < n; ++i) {
      element[i] = __fadd_rn(element[i], __fmul_rn(grad[i], grad[i]));
      const float step = __fdiv_rn(__fmul_rn(r.learning_rate, grad[i]), __fadd_rn(__fsqrt_rn(element[i]), r.epsilon));
      w[i] = Clip(r, __fsub_rn(w[i], step));
    }
  } else {
    float& b1 = shared[0];
    float& b2 = shared[1];
    const float lr_t =
        __fmul_rn(r.learning_rate, __fdiv_rn(__fsqrt_rn(__fsub_rn(1.0f, b2)), __fsub_rn(1.0f, b1)));
    for (uint32_t i = 0; i < n; ++i) {
      float& m = element[2 * i];
      float& v = element[2 * i + 1];
      const float g = grad[i];
      m = __fadd_rn(__fmul_rn(r.beta1, m), __fmul_rn(__fsub_rn(1.0f, r.beta1), g));
      v = __fadd_rn(__fmul_rn(r.beta2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, r.beta2), g), g));
      w[i] = Clip(r, __fsub_rn(w[i], __fmul_rn(lr_t, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), r.epsilon)))));
    }
    b1 = FlushSubnormal(__fmul_rn(b1, r.beta1));
    b2 = FlushSubnormal(__fmul_rn(b2, r.beta2));
  }
}

__device__ __forceinline__ float Score(const PassRule& r, float show, float click) {
  return __fadd_rn(__fmul_rn(__fsub_rn(show, click), r.nonclk_coeff), __fmul_rn(click, r.click_coeff));
}

__global__ void PushKernel(PassRule r, const uint32_t* row_index, uint32_t n, const float* grads, const float* shows,
                           const float* clicks, float* rows, float* pass_shows, float* pass_clicks, uint8_t* touched,
                           uint32_t* extend_list, uint32_t* extend_count) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint32_t slot = row_index[k];
  float* row = rows + uint64_t{slot} * r.row_floats;
  const uint32_t flags = static_cast<uint32_t>(row[r.flags_offset]);
  const uint32_t weights = (!r.ctr || (flags & kExtended) != 0) ? r.dim : 1;
  const float show = shows != nullptr ? shows[k] : 0.0f;
  const float click = clicks != nullptr ? clicks[k] : 0.0f;
  // RowAccessor::ApplyPush.
  if (r.ctr) {
    float* st = row + r.stats_offset;
    st[kShow] = __fadd_rn(st[kShow], show);
    st[kClick] = __fadd_rn(st[kClick], click);
    st[kDeltaScore] = __fadd_rn(st[kDeltaScore], Score(r, show, click));
    st[kUnseen] = 0.0f;
  }
  float* state = row + r.dim;
  UpdateSpan(r, row, state + r.shared_floats, state, grads + uint64_t{k} * r.dim, weights);
  row[r.flags_offset] = static_cast<float>(flags | kChanged | kDirty);
  if (r.ctr && (flags & kExtended) == 0 &&
      Score(r, row[r.stats_offset + kShow], row[r.stats_offset + kClick]) >= r.embedx_threshold) {
    extend_list[atomicAdd(extend_count, 1u)] = k;
  }
  pass_shows[slot] = __fadd_rn(pass_shows[slot], show);
  pass_clicks[slot] = __fadd_rn(pass_clicks[slot], click);
  touched[slot] = 1;
}

// RowAccessor::Extend: embedx weights given, fresh embedx element state, the Extended flag.
__device__ void ExtendRow(const PassRule& r, float* row, const float* initial) {
  for (uint32_t j = 1; j < r.dim; ++j) row[j] = initial[j];
  float* element = row + r.dim + r.shared_floats + r.element_floats;  // weight 1's state
  const uint32_t n = (r.dim - 1) * r.element_floats;
  const float fresh = r.kind == 1 ? r.initial_accumulator : 0.0f;
  for (uint32_t i = 0; i < n; ++i) element[i] = fresh;
  row[r.flags_offset] = static_cast<float>(static_cast<uint32_t>(row[r.flags_offset]) | kExtended);
}

__global__ void ExtendKernel(PassRule r, const uint32_t* row_index, uint32_t n, const float* initial, float* rows,
                             float* begin) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint64_t at = uint64_t{row_index[k]} * r.row_floats;
  ExtendRow(r, rows + at, initial + uint64_t{k} * r.dim);
  ExtendRow(r, begin + at, initial + uint64_t{k} * r.dim);
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
                  uint64_t mask, uint32_t* rows_out, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(
      LaunchKernel(FindKernel, Blocks(n), kThreads, stream, keys, n, table_keys, table_rows, mask, rows_out));
  return Status::OK();
}

Status LaunchGather(const uint32_t* row_index, uint32_t n, const float* rows, uint32_t row_floats, uint32_t dim,
                    float* out, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(GatherKernel, Blocks(uint64_t{n} * dim), kThreads, stream, row_index, n, rows,
                                    row_floats, dim, out));
  return Status::OK();
}

Status LaunchPush(const PassRule& rule, const uint32_t* row_index, uint32_t n, const float* grads, const float* shows,
                  const float* clicks, float* rows, float* pass_shows, float* pass_clicks, uint8_t* touched,
                  uint32_t* extend_list, uint32_t* extend_count, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(PushKernel, Blocks(n), kThreads, stream, rule, row_index, n, grads, shows, clicks,
                                    rows, pass_shows, pass_clicks, touched, extend_list, extend_count));
  return Status::OK();
}

Status LaunchExtend(const PassRule& rule, const uint32_t* row_index, uint32_t n, const float* initial, float* rows,
                    float* begin, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  RETURN_IF_CUDA_ERROR(LaunchKernel(ExtendKernel, Blocks(n), kThreads, stream, rule, row_index, n, initial, rows, begin));
  return Status::OK();
}

}  // namespace fleetps::heter::gpu
