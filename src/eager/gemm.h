/*
** gemm.h -- the project's own cache-blocked GEMM (private to src/eager).
** eager_gemm_f32/f64 (eager.h) call the BLAS when the build found one and
** these otherwise; both are always compiled, so tests can check this one.
*/
#ifndef TC_EAGER_GEMM_H
#define TC_EAGER_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* Same contract as eager_gemm_f32/f64: C (m x n, row-major, ldc) =
** op(A) @ op(B), overwriting C (C is never read). Any m, n, k >= 0; k == 0
** zeroes C. The result is bitwise independent of the thread count and of
** how C is split: every element is the sum over k in blocks of GEMM_KC,
** each block summed in order from +0 and added to C in block order. */
void eager_gemm_blocked_f32(bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const float *a, int64_t lda,
                            const float *b, int64_t ldb, float *c,
                            int64_t ldc);
void eager_gemm_blocked_f64(bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const double *a, int64_t lda,
                            const double *b, int64_t ldb, double *c,
                            int64_t ldc);

/* The k block: results depend on it (see above), so it is part of the
** contract, the same for f32 and f64. */
#define GEMM_KC 256

#endif
