/*
** reduce_order.c -- the last step of the canonical reduction order
** (tensor.h): chunk partials combined pairwise by levels. Eager reductions
** and compiled kernels (whose launcher combines the partials their chunks
** produced) both end here, so the order is written once.
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
