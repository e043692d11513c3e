#include "heter_trainer/cuda/dense_gemm.h"

#include <climits>
#include <string>

#include "heter_trainer/cuda/cuda_status.h"

namespace fleetps::heter::gpu {
namespace {

// The int dimensions of one product, or InvalidArgument when one does not fit.
struct Dims {
  int batch, in, out;
};

StatusOr<Dims> ToDims(size_t batch, size_t in, size_t out) {
  if (batch > INT_MAX || in > INT_MAX || out > INT_MAX) {
    return Status::InvalidArgument("GEMM dimensions " + std::to_string(batch) + " x " + std::to_string(in) + " x " +
                                   std::to_string(out) + " exceed cuBLAS's int range");
  }
  return Dims{static_cast<int>(batch), static_cast<int>(in), static_cast<int>(out)};
}

}  // namespace

// The mappings are derived in dense_gemm.h.

StatusOr<SgemmArgs> ForwardArgs(const float* x, const float* w, size_t batch, size_t in, size_t out, float* y) {
  ASSIGN_OR_RETURN(const Dims d, ToDims(batch, in, out));
  // y^T [o x b] = W^T [o x i] x^T [i x b]
  return SgemmArgs{.trans_a = CUBLAS_OP_N,
                   .trans_b = CUBLAS_OP_N,
                   .m = d.out,
                   .n = d.batch,
                   .k = d.in,
                   .a = w,
                   .lda = d.out,
                   .b = x,
                   .ldb = d.in,
                   .c = y,
                   .ldc = d.out};
}

StatusOr<SgemmArgs> WeightGradArgs(const float* x, const float* dy, size_t batch, size_t in, size_t out, float* dw) {
  ASSIGN_OR_RETURN(const Dims d, ToDims(batch, in, out));
  // dW^T [o x i] = dy^T [o x b] x [b x i]
  return SgemmArgs{.trans_a = CUBLAS_OP_N,
                   .trans_b = CUBLAS_OP_T,
                   .m = d.out,
                   .n = d.in,
                   .k = d.batch,
                   .a = dy,
                   .lda = d.out,
                   .b = x,
                   .ldb = d.in,
                   .c = dw,
                   .ldc = d.out};
}

StatusOr<SgemmArgs> InputGradArgs(const float* dy, const float* w, size_t batch, size_t in, size_t out, float* dx) {
  ASSIGN_OR_RETURN(const Dims d, ToDims(batch, in, out));
  // dx^T [i x b] = W [i x o] dy^T [o x b]
  return SgemmArgs{.trans_a = CUBLAS_OP_T,
                   .trans_b = CUBLAS_OP_N,
                   .m = d.in,
                   .n = d.batch,
                   .k = d.out,
                   .a = w,
                   .lda = d.out,
                   .b = dy,
                   .ldb = d.out,
                   .c = dx,
                   .ldc = d.in};
}

Status RunSgemm(cublasHandle_t handle, const SgemmArgs& args) {
  static constexpr float kOne = 1.0f;
  static constexpr float kZero = 0.0f;
  RETURN_IF_CUBLAS_ERROR(cublasSgemm(handle, args.trans_a, args.trans_b, args.m, args.n, args.k, &kOne, args.a,
                                     args.lda, args.b, args.ldb, &kZero, args.c, args.ldc));
  return Status::OK();
}

Status GemmForward(cublasHandle_t handle, const float* x, const float* w, size_t batch, size_t in, size_t out,
                   float* y) {
  ASSIGN_OR_RETURN(const SgemmArgs args, ForwardArgs(x, w, batch, in, out, y));
  return RunSgemm(handle, args);
}

Status GemmWeightGrad(cublasHandle_t handle, const float* x, const float* dy, size_t batch, size_t in, size_t out,
                      float* dw) {
  ASSIGN_OR_RETURN(const SgemmArgs args, WeightGradArgs(x, dy, batch, in, out, dw));
  return RunSgemm(handle, args);
}

Status GemmInputGrad(cublasHandle_t handle, const float* dy, const float* w, size_t batch, size_t in, size_t out,
                     float* dx) {
  ASSIGN_OR_RETURN(const SgemmArgs args, InputGradArgs(dy, w, batch, in, out, dx));
  return RunSgemm(handle, args);
}

}  // namespace fleetps::heter::gpu
