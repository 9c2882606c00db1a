// Row-major GEMM on cuBLAS, which is column-major: the one place that maps between the two.
//
// A row-major matrix read column-major is its transpose, so C = op(A)·op(B) row-major is
// C^T = op(B)^T·op(A)^T column-major: cuBLAS gets B first and A second, with m and n swapped,
// the transposes kept as they are, and every leading dimension the stored row length.
#pragma once

#include <cublas_v2.h>

#include <algorithm>

namespace kubetrain::worker::cuda {

// Device::Gemm's contract: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, with A stored
// [k,m] when trans_a and B stored [n,k] when trans_b; all pointers are device pointers and
// alpha/beta are read from the host (the handle's default pointer mode). Issues on the
// handle's stream.
inline cublasStatus_t RowMajorSgemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n,
                                    int k, float alpha, const float* a, const float* b, float beta,
                                    float* c) {
  // cuBLAS rejects a leading dimension below 1 even for an empty matrix.
  const int lda = std::max(1, trans_a ? m : k);
  const int ldb = std::max(1, trans_b ? k : n);
  const int ldc = std::max(1, n);
  return cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda, &beta, c,
                     ldc);
}

// The same product over bf16 operands (the 16 bits of cuda::LaunchToBf16), summed and written in
// float32 (CUBLAS_COMPUTE_32F): --precision=bf16 (docs/decisions/0011-bf16-mixed-precision.md).
inline cublasStatus_t RowMajorGemmBf16(cublasHandle_t handle, bool trans_a, bool trans_b, int m,
                                       int n, int k, float alpha, const void* a, const void* b,
                                       float beta, float* c) {
  const int lda = std::max(1, trans_a ? m : k);
  const int ldb = std::max(1, trans_b ? k : n);
  const int ldc = std::max(1, n);
  return cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a,
                      CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

}  // namespace kubetrain::worker::cuda
