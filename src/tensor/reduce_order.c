/*
** reduce_order.c -- the last step of the canonical reduction order
** (tensor.h): chunk partials combined pairwise by levels. Eager reductions
** and compiled kernels (whose launcher combines the partials their chunks
** produced) both end here, so the order is written once.
*/
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

/* kind (0 sum, 1 max, 2 min), dtype, C type, name */
#define COMBINE_CASES(X)                                                     \
  X(0, TC_F32, float, sum_f32, TENSOR_COMB_ADD)                              \
  X(0, TC_F64, double, sum_f64, TENSOR_COMB_ADD)                             \
  X(0, TC_I64, int64_t, sum_i64, TENSOR_COMB_ADDW)                           \
  X(1, TC_F32, float, max_f32, TENSOR_COMB_MAX)                              \
  X(1, TC_F64, double, max_f64, TENSOR_COMB_MAX)                             \
  X(1, TC_I32, int32_t, max_i32, TENSOR_COMB_MAX)                            \
  X(1, TC_I64, int64_t, max_i64, TENSOR_COMB_MAX)                            \
  X(1, TC_BOOL, uint8_t, max_b8, TENSOR_COMB_MAX)                            \
  X(2, TC_F32, float, min_f32, TENSOR_COMB_MIN)                              \
  X(2, TC_F64, double, min_f64, TENSOR_COMB_MIN)                             \
  X(2, TC_I32, int32_t, min_i32, TENSOR_COMB_MIN)                            \
  X(2, TC_I64, int64_t, min_i64, TENSOR_COMB_MIN)                            \
  X(2, TC_BOOL, uint8_t, min_b8, TENSOR_COMB_MIN)

#define X(kind, dt, T, nm, comb) COMBINE_FN(combine_##nm, T, comb)
COMBINE_CASES(X)
#undef X

#define KEY(kind, dt) ((kind) * TC_DTYPE__MAX + (dt))

int tensor_combine(int kind, tc_dtype dt, void *p, int64_t m, void *out)
{
  switch (KEY(kind, dt)) {
#define X(kind, dt, T, nm, comb)                                             \
  case KEY(kind, dt):                                                        \
    *(T *)out = combine_##nm((T *)p, m);                                     \
    return 0;
  COMBINE_CASES(X)
#undef X
  default:
    return -1;
  }
}

float tensor_combine_f32(float *p, int64_t m) { return combine_sum_f32(p, m); }
double tensor_combine_f64(double *p, int64_t m) { return combine_sum_f64(p, m); }
