/*
** reduce_order.c -- the last step of the canonical reduction order
** (tensor.h): chunk partials combined pairwise by levels. Eager reductions
** and compiled kernels (whose launcher combines the partials their chunks
** produced) both end here, so the order is written once. And the
** canonical scan order, for the CPU's inclusive sums.
*/
#include <math.h>

#include "tensor.h"

/* Pairwise combine by levels; the result lands in p[0]. */
#define COMBINE_FN(name, T, comb)                                            \
  static T name(T *p, int64_t m)                                             \
  {                                                                          \
    while (m > 1) {                                                          \
      int64_t h = m / 2;                                                     \
      for (int64_t i = 0; i < h; i++)                                        \
        p[i] = comb(p[2 * i], p[2 * i + 1]);                                 \
      if (m & 1)                                                             \
        p[h] = p[m - 1];                                                     \
      m = h + (m & 1);                                                       \
    }                                                                        \
    return p[0];                                                             \
  }

#define X(kind, dt, T, nm, comb, ident) COMBINE_FN(combine_##nm, T, comb)
TENSOR_RED_CASES(X)
#undef X

int tensor_combine(int kind, tc_dtype dt, void *p, int64_t m, void *out)
{
  switch (TENSOR_RED_KEY(kind, dt)) {
#define X(kind, dt, T, nm, comb, ident)                                      \
  case TENSOR_RED_KEY(kind, dt):                                             \
    *(T *)out = combine_##nm((T *)p, m);                                     \
    return 0;
  TENSOR_RED_CASES(X)
#undef X
  default:
    return -1;
  }
}

float tensor_combine_f32(float *p, int64_t m) { return combine_sum_f32(p, m); }
double tensor_combine_f64(double *p, int64_t m) { return combine_sum_f64(p, m); }

/* The canonical scan order (tensor.h). Each segment is walked as a plain
** running sum, then its carry is added in front while the segment is in
** L1 (a loop GCC vectorizes): the one chain of dependent adds is as short
** as a plain running sum's. The first segment's carry is the identity,
** and +0 (+) L is L (a sum from +0 is never -0), so it is left out. */
#define SCAN_FN(nm, T, comb)                                                 \
  void tensor_scan_##nm(const T *x, T *out, int64_t n)                      \
  {                                                                          \
    T carry = 0;                                                             \
    for (int64_t s = 0; s < n; s += TENSOR_SCAN_SEG) {                       \
      int64_t e = n - s < TENSOR_SCAN_SEG ? n : s + TENSOR_SCAN_SEG;         \
      T acc = 0;                                                             \
      for (int64_t i = s; i < e; i++) {                                      \
        acc = comb(acc, x[i]);                                               \
        out[i] = acc;                                                        \
      }                                                                      \
      if (s > 0)                                                             \
        for (int64_t i = s; i < e; i++)                                      \
          out[i] = comb(carry, out[i]);                                      \
      carry = comb(carry, acc);                                              \
    }                                                                        \
  }
SCAN_FN(f32, float, TENSOR_COMB_ADD)
SCAN_FN(f64, double, TENSOR_COMB_ADD)
SCAN_FN(i64, int64_t, TENSOR_COMB_ADDW)

/* Columns side by side: each column's segment sums and carries as above,
** kept in arrays across the columns (out = carry (+) acc directly: the
** columns' chains are independent, so there is no chain to shorten). */
#define SCAN_COLS_FN(nm, T, comb)                                            \
  void tensor_scan_cols_##nm(const T *x, T *out, int64_t n, int64_t inner,  \
                             int64_t ncols)                                  \
  {                                                                          \
    T carry[TENSOR_SCAN_COLS], acc[TENSOR_SCAN_COLS];                        \
    for (int64_t j = 0; j < ncols; j++)                                      \
      carry[j] = 0;                                                          \
    for (int64_t s = 0; s < n; s += TENSOR_SCAN_SEG) {                       \
      int64_t e = n - s < TENSOR_SCAN_SEG ? n : s + TENSOR_SCAN_SEG;         \
      for (int64_t j = 0; j < ncols; j++)                                    \
        acc[j] = 0;                                                          \
      for (int64_t k = s; k < e; k++) {                                      \
        const T *xr = x + k * inner;                                         \
        T *orow = out + k * inner;                                           \
        for (int64_t j = 0; j < ncols; j++) {                                \
          acc[j] = comb(acc[j], xr[j]);                                      \
          orow[j] = comb(carry[j], acc[j]);                                  \
        }                                                                    \
      }                                                                      \
      for (int64_t j = 0; j < ncols; j++)                                    \
        carry[j] = comb(carry[j], acc[j]);                                   \
    }                                                                        \
  }
SCAN_COLS_FN(f32, float, TENSOR_COMB_ADD)
SCAN_COLS_FN(f64, double, TENSOR_COMB_ADD)
SCAN_COLS_FN(i64, int64_t, TENSOR_COMB_ADDW)
