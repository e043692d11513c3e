#pragma once
// The three matrix products of an FC layer (trainer/model/layers.h: y = x W + b, W
// [in x out] row-major) as cuBLAS calls on row-major device matrices. Shared by the CUDA
// lane and the GEMM timing, so that what is timed is what a step runs.
//
// cuBLAS is column-major. A row-major matrix M [r x c] (leading dimension c) is, read
// column-major with the same leading dimension, M^T [c x r]. So a row-major product
// C [m x n] = A [m x k] B [k x n] is computed as the column-major C^T [n x m] =
// B^T [n x k] A^T [k x m]: cublasSgemm(h, N, N, n, m, k, 1, B, n, A, k, 0, C, n) — the
// operands swap places and nothing is transposed in memory. With b = batch, i = in,
// o = out:
//
//   forward  y  [b x o] = x [b x i] W [i x o]
//            column-major y^T [o x b] = W^T [o x i] x^T [i x b]
//            Sgemm(N, N, m=o, n=b, k=i, W, lda=o, x, ldb=i, y, ldc=o)
//   weights  dW [i x o] = x^T [i x b] dy [b x o]
//            column-major dW^T [o x i] = dy^T [o x b] x [b x i]; x is stored as x^T [i x b]
//            (ld i), so it enters transposed: Sgemm(N, T, m=o, n=i, k=b, dy, lda=o, x, ldb=i,
//            dW, ldc=o)
//   input    dx [b x i] = dy [b x o] W^T [o x i]
//            column-major dx^T [i x b] = W [i x o] dy^T [o x b]; W is stored as W^T [o x i]
//            (ld o), so it enters transposed: Sgemm(T, N, m=i, n=b, k=o, W, lda=o, dy,
//            ldb=o, dx, ldc=i)
//
// The *Args functions only compute a call's arguments (so the mapping can be checked on
// the host against any column-major BLAS, with no GPU); the Gemm* functions make the
// call. Pointers given to the Gemm* functions are device memory; the products are queued
// on the handle's stream. A dimension over INT_MAX (cuBLAS's int) is InvalidArgument.
// This header includes the cuBLAS header: only sources of fleetps::heter_cuda include it.

#include <cublas_v2.h>

#include <cstddef>

#include "common/status.h"

namespace fleetps::heter::gpu {

// The arguments of one cublasSgemm call with alpha = 1 and beta = 0: column-major
// C [m x n] = op(A) [m x k] op(B) [k x n].
struct SgemmArgs {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
};

StatusOr<SgemmArgs> ForwardArgs(const float* x, const float* w, size_t batch, size_t in, size_t out, float* y);
StatusOr<SgemmArgs> WeightGradArgs(const float* x, const float* dy, size_t batch, size_t in, size_t out, float* dw);
StatusOr<SgemmArgs> InputGradArgs(const float* dy, const float* w, size_t batch, size_t in, size_t out, float* dx);

// Queues cublasSgemm(handle, args) (C is overwritten).
Status RunSgemm(cublasHandle_t handle, const SgemmArgs& args);

// y [batch x out] = x [batch x in] W [in x out] (the bias is added by a kernel).
Status GemmForward(cublasHandle_t handle, const float* x, const float* w, size_t batch, size_t in, size_t out,
                   float* y);

// dW [in x out] = x^T dy, x [batch x in], dy [batch x out] (overwrites dW).
Status GemmWeightGrad(cublasHandle_t handle, const float* x, const float* dy, size_t batch, size_t in, size_t out,
                      float* dw);

// dx [batch x in] = dy W^T, dy [batch x out], W [in x out] (overwrites dx).
Status GemmInputGrad(cublasHandle_t handle, const float* dy, const float* w, size_t batch, size_t in, size_t out,
                     float* dx);

}  // namespace fleetps::heter::gpu
