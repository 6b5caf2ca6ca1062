/*
** cublas.c -- matmul on the device through cuBLAS, loaded with dlopen
** (libcublas.so.13, else .12) at the first call. Row-major C = A @ B is
** column-major C^T = B^T @ A^T, so one strided-batched gemm with the
** operands swapped computes it with no transposes. cuBLAS's summation
** order is its own: results are not bitwise equal to the CPU's matmul
** (NUMERICS.md).
*/
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#include "jit_cuda.h"

typedef void *blas_handle;
enum { BLAS_OP_N = 0 };

typedef int (*sgemm_fn)(blas_handle, int, int, int, int, int, const float *,
                        const float *, int, long long, const float *, int,
                        long long, const float *, float *, int, long long,
                        int);
typedef int (*dgemm_fn)(blas_handle, int, int, int, int, int, const double *,
                        const double *, int, long long, const double *, int,
                        long long, const double *, double *, int, long long,
                        int);

static struct {
  int (*create)(blas_handle *);
  int (*set_stream)(blas_handle, void *);
  const char *(*status_string)(int);
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  blas_handle handle;
} blas;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;
static char reason[200];

static const char *status_text(int rc)
{
  return blas.status_string ? blas.status_string(rc) : "cuBLAS error";
}

static void load(void)
{
  static const char *const names[] = { "libcublas.so.13", "libcublas.so.12" };
  void *h = jcuda_open_toolkit_lib(names, 2);
  if (!h) {
    snprintf(reason, sizeof reason, "cuBLAS not found (libcublas.so.13 or "
             ".12)");
    return;
  }
#define SYM(field, name) (blas.field = (__typeof__(blas.field))dlsym(h, name))
  SYM(status_string, "cublasGetStatusString");
  if (!SYM(create, "cublasCreate_v2") ||
      !SYM(set_stream, "cublasSetStream_v2") ||
      !SYM(sgemm, "cublasSgemmStridedBatched") ||
      !SYM(dgemm, "cublasDgemmStridedBatched")) {
    snprintf(reason, sizeof reason, "cuBLAS lacks an entry point tc uses");
    return;
  }
#undef SYM
  int rc = blas.create(&blas.handle);
  if (rc == 0)
    rc = blas.set_stream(blas.handle, jcuda_stream());
  if (rc != 0) {
    snprintf(reason, sizeof reason, "cublasCreate failed: %s (%d)",
             status_text(rc), rc);
    blas.handle = NULL;
  }
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

int jcuda_gemm(tc_dtype dt, int64_t m, int64_t n, int64_t k, int64_t batch,
               jcuda_ptr a, int64_t stride_a, jcuda_ptr b, int64_t stride_b,
               jcuda_ptr c, int64_t stride_c)
{
  if (!jcuda_device_available())
    return tc_seterr(TC_E_DEVICE, "matmul: CUDA is not available: %s",
                     jcuda_device_reason()), -1;
  pthread_once(&load_once, load);
  if (!blas.handle)
    return tc_seterr(TC_E_DEVICE, "matmul on cuda: %s", reason), -1;
  if (m == 0 || n == 0 || batch == 0)
    return 0;
  if (k == 0)   /* an empty sum: zeros, whatever cuBLAS does with k = 0 */
    return jcuda_memset(c, 0, (size_t)(batch * stride_c) *
                              tensor_dtype_size[dt]);
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(batch))
    return tc_seterr(TC_E_DEVICE, "matmul on cuda: sizes past 2^31 are not "
                     "available yet"), -1;
  int rc;
  pthread_mutex_lock(&call_lock);   /* one handle, one stream */
  if (dt == TC_F32) {
    const float one = 1, zero = 0;
    rc = blas.sgemm(blas.handle, BLAS_OP_N, BLAS_OP_N, (int)n, (int)m, (int)k,
                    &one, (const float *)(uintptr_t)b, (int)n, stride_b,
                    (const float *)(uintptr_t)a, (int)k, stride_a, &zero,
                    (float *)(uintptr_t)c, (int)n, stride_c, (int)batch);
  } else {
    const double one = 1, zero = 0;
    rc = blas.dgemm(blas.handle, BLAS_OP_N, BLAS_OP_N, (int)n, (int)m, (int)k,
                    &one, (const double *)(uintptr_t)b, (int)n, stride_b,
                    (const double *)(uintptr_t)a, (int)k, stride_a, &zero,
                    (double *)(uintptr_t)c, (int)n, stride_c, (int)batch);
  }
  pthread_mutex_unlock(&call_lock);
  if (rc != 0)
    return tc_seterr(TC_E_DEVICE, "cublas%sgemmStridedBatched failed: %s "
                     "(%d)", dt == TC_F32 ? "S" : "D", status_text(rc), rc),
           -1;
  return 0;
}
