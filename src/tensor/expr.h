/*
** expr.h -- tc's scalar expression language, as C. The `ex` column of
** ops.def is written in these primitives; eager kernels expand it with the
** definitions below for a compute type T (a macro the includer defines).
** The JIT backends give the same primitives their own definitions, so every
** consumer computes the same operations in the same order (principle 2).
**
** Integer arithmetic wraps (two's complement, as PyTorch) instead of being
** undefined; comparisons yield T's 1 or 0; selects are branch-free so GCC
** if-converts and vectorizes them (with -fno-trapping-math).
*/
#ifndef TC_EXPR_H
#define TC_EXPR_H

#include <stdint.h>

#include "approx.h"

#define TC_WRAP(x, y, op)                                                   \
  _Generic((x),                                                             \
    int32_t: (int32_t)((uint32_t)(x) op (uint32_t)(y)),                     \
    int64_t: (int64_t)((uint64_t)(x) op (uint64_t)(y)),                     \
    default: (x) op (y))

#define K(v)           ((T)(v))
#define S(i)           ((T)s[i])
#define ADD(x, y)      ((T)TC_WRAP(x, y, +))
#define SUB(x, y)      ((T)TC_WRAP(x, y, -))
#define MUL(x, y)      ((T)TC_WRAP(x, y, *))
#define DIV(x, y)      ((T)((x) / (y)))
#define NEG(x)         _Generic((x),                                      \
                         int32_t: (int32_t)(0u - (uint32_t)(x)),           \
                         int64_t: (int64_t)(0u - (uint64_t)(x)),           \
                         default: (T)(-(x)))
#define ABS(x)         _Generic((x),                                      \
                         float: __builtin_fabsf((float)(x)),               \
                         double: __builtin_fabs((double)(x)),              \
                         default: (T)((x) < K(0) ? NEG(x) : (x)))
#define SEL(c, x, y)   ((c) != K(0) ? (x) : (y))
#define EQ(x, y)       ((T)((x) == (y)))
#define NE(x, y)       ((T)((x) != (y)))
#define LT(x, y)       ((T)((x) < (y)))
#define LE(x, y)       ((T)((x) <= (y)))
#define GT(x, y)       ((T)((x) > (y)))
#define GE(x, y)       ((T)((x) >= (y)))
/* NaN propagates, as torch.maximum: x wins when it is NaN or larger. */
#define MAXIMUM(x, y)  (((x) > (y) || (x) != (x)) ? (x) : (y))
#define MINIMUM(x, y)  (((x) < (y) || (x) != (x)) ? (x) : (y))
#define SQRT(x)        _Generic((x), float: __builtin_sqrtf, \
                                     double: __builtin_sqrt)(x)
/* Rounding to an integral value: exact, so any implementation gives the
** same bits; integers are integral already. ROUND is half to even (as
** torch.round), in the default rounding mode, raising no exception. */
#define TC_ROUNDING(x, ff, fd) _Generic((x), float: ff((float)(x)),        \
                                             double: fd((double)(x)),      \
                                             default: (x))
#define FLOOR(x)       TC_ROUNDING(x, __builtin_floorf, __builtin_floor)
#define CEIL(x)        TC_ROUNDING(x, __builtin_ceilf, __builtin_ceil)
#define ROUND(x)       TC_ROUNDING(x, __builtin_nearbyintf, __builtin_nearbyint)
#define TRUNC(x)       TC_ROUNDING(x, __builtin_truncf, __builtin_trunc)
#define EXP(x)         APPROX_EXP(x)
#define LOG(x)         APPROX_LOG(x)
#define TANH(x)        APPROX_TANH(x)
#define SIGMOID(x)     APPROX_SIGMOID(x)
#define GELU(x)        APPROX_GELU(x)
#define SIN(x)         APPROX_SIN(x)
#define COS(x)         APPROX_COS(x)
#define POW(x, y)      APPROX_POW(x, y)
#define EXPM1(x)       APPROX_EXPM1(x)
#define LOG1P(x)       APPROX_LOG1P(x)
#define ERF(x)         APPROX_ERF(x)

#endif
