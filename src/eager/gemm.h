/*
** gemm.h -- the GEMM behind matmul (private to src/eager): which path runs
** it, what every path promises about results, and hooks for tests.
** The entry points are eager_gemm_f32/f64(_ep) in eager.h.
*/
#ifndef TC_EAGER_GEMM_H
#define TC_EAGER_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* The paths (ORDER GEMM_PATH: path_names in gemm.c).
** - AVX512, AVX2: tc's own packed kernel with x86 micro-kernels (AVX-512F;
**   AVX2 + FMA), chosen at run time from the CPU.
** - PORTABLE: the same kernel with a plain C micro-kernel; any CPU.
** - BLAS: the BLAS (OpenBLAS's cblas) single-threaded on fixed tiles of C;
**   only in a build that found one.
** The default is the first of AVX512, AVX2, BLAS, PORTABLE available here.
**
** What results are bitwise independent of:
** - Own kernel (AVX512, AVX2, PORTABLE): C[i][j] is the chain s = +0, then
**   s = fma(op(A)[i][p], op(B)[p][j], s) for p = 0 .. k-1 in order (one
**   rounding per step; PORTABLE without FMA hardware: s = s + a*b, two).
**   So it does not depend on the thread count, on how C or k is blocked,
**   or on which FMA path computed it: AVX512 and AVX2 (and PORTABLE in an
**   FMA build) give the same bits, and so does any sub-block of C computed
**   on its own.
** - BLAS: each fixed tile is one single-threaded BLAS call, so results do
**   not depend on the thread count; they differ from the own kernel's.
*/
typedef enum {
  GEMM_AUTO, GEMM_AVX512, GEMM_AVX2, GEMM_PORTABLE, GEMM_BLAS, GEMM__MAX
} gemm_path;

/* The path eager_gemm_* take now (the default, unless a test forced one). */
gemm_path eager_gemm_path(void);
const char *eager_gemm_path_name(gemm_path p);
/* Can p run here (this CPU, this build)? GEMM_AUTO and PORTABLE always. */
bool eager_gemm_path_available(gemm_path p);
/* Does p's chain use fused multiply-adds (see above)? */
bool eager_gemm_path_fma(gemm_path p);
/* Test and bench hook: make every later eager_gemm_* call take p
** (GEMM_AUTO: the default again). False, and nothing changes, when p is
** not available. Not for use while another thread runs a GEMM. */
bool eager_gemm_set_path(gemm_path p);

/* The portable path directly (whatever the default), so that it stays
** tested on machines that never choose it. Same contract as eager_gemm_*. */
void eager_gemm_portable_f32(bool ta, bool tb, int64_t m, int64_t n,
                             int64_t k, const float *a, int64_t lda,
                             const float *b, int64_t ldb, float *c,
                             int64_t ldc);
void eager_gemm_portable_f64(bool ta, bool tb, int64_t m, int64_t n,
                             int64_t k, const double *a, int64_t lda,
                             const double *b, int64_t ldb, double *c,
                             int64_t ldc);

/* The k block of the own kernel (a blocking choice: results do not depend
** on it). Its A slices are rows of KC (+ padding), its B micro-panels
** KC x NR (32 KiB for AVX-512 f32: L1). */
#define GEMM_KC 256

#endif
