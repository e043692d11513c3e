#pragma once
// Kernels of the CUDA pass table (cuda_pass_table.cc): an open-addressing hash table in
// device memory (batched insert / find), gathers of a batch's weights, and the sparse
// optimizer + CTR accessor step on the rows (heter_trainer/gpups/pass_rules.h: bitwise what
// the host code gives; this file's kernels are also compiled with -fmad=false).
//
// This header includes the CUDA headers: only sources of fleetps::heter_cuda include it.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "heter_trainer/gpups/pass_rules.h"

namespace fleetps::heter::gpu {

inline constexpr uint32_t kEmptySlot = 0xffffffffu;

// Inserts keys[0, n) (distinct, not yet present) into a table of `mask + 1` slots: slot i of
// the table holds table_keys[i] and its row index table_rows[i] (kEmptySlot: free). Row
// index of keys[k] = k.
Status LaunchInsert(const uint64_t* keys, uint32_t n, uint64_t* table_keys, uint32_t* table_rows, uint64_t mask,
                    cudaStream_t stream);
// rows_out[k] = the row index of keys[k], or kEmptySlot when absent. first_missing (when not
// null, a device scalar) is lowered to the least k that is absent.
Status LaunchFind(const uint64_t* keys, uint32_t n, const uint64_t* table_keys, const uint32_t* table_rows,
                  uint64_t mask, uint32_t* rows_out, uint32_t* first_missing, cudaStream_t stream);
// out[k * dim + j] = rows[row_index[k] * row_floats + j] for j < dim; 0 where row_index[k] is
// kEmptySlot (a key LaunchFind did not find), so a lookup can gather before it checks.
Status LaunchGather(const uint32_t* row_index, uint32_t n, const float* rows, uint32_t row_floats, uint32_t dim,
                    float* out, cudaStream_t stream);
// One push per k < min(n, *limit) (limit: a device scalar, read when the kernel runs; row
// indices distinct): RowAccessor::ApplyPush with the rule; pass_shows / pass_clicks / touched
// of the row updated; the positions k whose row must now be extended are appended to
// extend_list (count in *extend_count).
Status LaunchPush(const PassRule& rule, const uint32_t* row_index, uint32_t n, const uint32_t* limit,
                  const float* grads, const float* shows, const float* clicks, float* rows, float* pass_shows,
                  float* pass_clicks, uint8_t* touched, uint32_t* extend_list, uint32_t* extend_count,
                  cudaStream_t stream);
// RowAccessor::Extend of rows[r] and begin[r], r = row_index[positions[k]], with their embedx
// weights from initial[k * dim + 1 .. k * dim + dim).
Status LaunchExtend(const PassRule& rule, const uint32_t* positions, const uint32_t* row_index, uint32_t n,
                    const float* initial, float* rows, float* begin, cudaStream_t stream);

}  // namespace fleetps::heter::gpu
