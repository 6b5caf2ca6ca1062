/*
** fake_cublas.c -- a stand-in for libcublas.so.13 (tests only): the fake
** driver's device memory is host memory (its addresses tagged, devtag.h),
** so a strided-batched gemm is a naive host loop (column-major, as cuBLAS;
** no transposes: tc asks for none). Only the entry points tc calls
** (src/jit_cuda/cublas.c). Each element is the CPU's own chain (gemm.h:
** s = fma(a, b, s) over k in order from +0, as its AVX2 and AVX-512 paths
** compute), so a program with a matmul can be compared bit for bit with
** the CPU through the fake; a real cuBLAS sums in its own order.
*/
#include <math.h>
#include <stdlib.h>

#include "fake.h"

enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7 };

static int handle_token;

const char *cublasGetStatusString(int rc)
{
  return rc == OK ? "CUBLAS_STATUS_SUCCESS"
         : rc == INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
                               : "CUBLAS_STATUS_NOT_INITIALIZED";
}

int cublasCreate_v2(void **h)
{
  *h = &handle_token;
  return OK;
}

int cublasSetStream_v2(void *h, void *stream)
{
  return h == &handle_token && stream ? OK : NOT_INITIALIZED;
}

/* C[i] = alpha A[i] B[i] + beta C[i], column-major, one chain over k. */
#define GEMM(T, FMA, NAME)                                                   \
  int NAME(void *h, int ta, int tb, int m, int n, int k, const T *alpha,     \
           const T *a, int lda, long long sa, const T *b, int ldb,           \
           long long sb, const T *beta, T *c, int ldc, long long sc,         \
           int batch)                                                        \
  {                                                                          \
    if (h != &handle_token)                                                  \
      return NOT_INITIALIZED;                                                \
    if (ta || tb || m < 0 || n < 0 || k < 0 || lda < m || ldb < k ||         \
        ldc < m || batch < 0)                                                \
      return INVALID_VALUE;                                                  \
    a = (const T *)TCK_HOST_PTR(a);                                          \
    b = (const T *)TCK_HOST_PTR(b);                                          \
    c = (T *)TCK_HOST_PTR(c);                                                \
    for (int q = 0; q < batch; q++)                                          \
      for (int j = 0; j < n; j++)                                            \
        for (int i = 0; i < m; i++) {                                        \
          T acc = 0;                                                         \
          for (int p = 0; p < k; p++)                                        \
            acc = FMA(a[q * sa + i + (long long)p * lda],                    \
                      b[q * sb + p + (long long)j * ldb], acc);              \
          T *out = &c[q * sc + i + (long long)j * ldc];                      \
          *out = *beta != 0 ? *alpha * acc + *beta * *out : *alpha * acc;    \
        }                                                                    \
    return OK;                                                               \
  }

GEMM(float, fmaf, cublasSgemmStridedBatched)
GEMM(double, fma, cublasDgemmStridedBatched)
