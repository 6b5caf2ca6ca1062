/*
** approx.h -- the project's own transcendentals (exp, log, tanh, sigmoid, gelu, expm1, log1p,
** erf, sin, cos, pow) for f32 and f64, built only from + - * /, selects, bit casts and integer ops, so eager
** kernels and JIT code (which re-expresses these exact sequences) agree bitwise and vectorize.
*/
#ifndef TC_APPROX_H
#define TC_APPROX_H

/* NVRTC has no libc headers: src/jit_cuda renders this file as CUDA C after a
** prelude that supplies these names (jcuda_prelude in render.c). */
#ifndef __CUDACC_RTC__
#include <math.h>   /* NAN, INFINITY only */
#include <stdint.h>
#include <string.h>
#endif

/*
** Rules every function here follows (see docs/NUMERICS.md for the measured accuracy):
** - straight-line code in a fixed order: no libm, no value-dependent branches or loops
**   (c ? a : b selects only); a fused multiply-add only where written (approx_fma_*), never
**   by contraction (the project builds with -ffp-contract=off);
** - rounding to an integer is the magic-number trick (x + 1.5*2^p) - 1.5*2^p, whose sum
**   also carries the integer in its low mantissa bits, so no float->int conversion is needed
**   (int64 conversions do not vectorize on AVX2, and NaN/huge conversions would be UB);
** - integer work is on uint32_t/uint64_t (wrap-around, logical shifts: no UB, and AVX2 has
**   no 64-bit arithmetic shift);
** - 2^n scaling is done as two multiplications so results may round once into denormals.
** Polynomial coefficients come from tools/approx_fit.py (Remez, minimax relative error).
*/

/* -- Bit casts ------------------------------------------------------------ */

static inline uint32_t approx_bits_f32(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static inline float approx_from_bits_f32(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }
static inline uint64_t approx_bits_f64(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }
static inline double approx_from_bits_f64(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

/* -- Fused multiply-add ------------------------------------------------------ */

/* a*b + c: every polynomial step and range-reduction step below.  Where the build targets
** FMA hardware this is one fused operation with one rounding (a little more accurate, and
** about 30% faster for exp and tanh on AVX2, whose multiply pipes are the bottleneck);
** elsewhere it is a multiply and an add, so such a build still vectorizes instead of
** calling libm's fma per element.  APPROX_FMA tells src/jit_cpu which of the two the eager
** build uses; compiled kernels make the same choice, so results agree bitwise.  An includer
** may define it first: src/jit_cuda's CUDA C defines it as the host build's value. */
#ifndef APPROX_FMA
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define APPROX_FMA 1
#else
#define APPROX_FMA 0
#endif
#endif
#if APPROX_FMA
static inline float approx_fma_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double approx_fma_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }
#else
static inline float approx_fma_f32(float a, float b, float c) { return a * b + c; }
static inline double approx_fma_f64(double a, double b, double c) { return a * b + c; }
#endif

/* -- Shared constants ------------------------------------------------------- */

/* Adding 1.5*2^23 (2^52) rounds |z| < 2^22 (2^51) to an integer n and leaves
** bits(sum) == bits(magic) + n. */
#define APPROX_F32_RND      0x1.8p23f
#define APPROX_F32_RND_BITS 0x4b400000u
#define APPROX_F64_RND      0x1.8p52
#define APPROX_F64_RND_BITS 0x4338000000000000u

#define APPROX_F32_SIGN 0x80000000u
#define APPROX_F64_SIGN 0x8000000000000000u

#define APPROX_F32_LOG2E 0x1.715476p+0f
#define APPROX_F64_LOG2E 0x1.71547652b82fep+0
#define APPROX_F32_LN2   0x1.62e430p-1f
#define APPROX_F64_LN2   0x1.62e42fefa39efp-1
/* ln2 = HI + LO with HI short enough that n*HI is exact (|n| < 2^8 f32, 2^11 f64). */
#define APPROX_F32_LN2_HI 0x1.62e4p-1f
#define APPROX_F32_LN2_LO 0x1.7f7d1cp-20f
#define APPROX_F64_LN2_HI 0x1.62e42fefa38p-1
#define APPROX_F64_LN2_LO 0x1.ef35793c7673p-45

/* e^r = 1 + r + r^2 E(r) for |r| <= ln2/2 (relative error 2^-27.0 f32, 2^-56.2 f64). */
#define APPROX_F32_EXP_E0 0x1.fffffep-2f
#define APPROX_F32_EXP_E1 0x1.5554e0p-3f
#define APPROX_F32_EXP_E2 0x1.5557b6p-5f
#define APPROX_F32_EXP_E3 0x1.1208c6p-7f
#define APPROX_F32_EXP_E4 0x1.6a55e4p-10f
#define APPROX_F64_EXP_E0 0x1.0000000000001p-1
#define APPROX_F64_EXP_E1 0x1.5555555555538p-3
#define APPROX_F64_EXP_E2 0x1.5555555553e3fp-5
#define APPROX_F64_EXP_E3 0x1.111111111db6fp-7
#define APPROX_F64_EXP_E4 0x1.6c16c17843d3ap-10
#define APPROX_F64_EXP_E5 0x1.a01a01452688bp-13
#define APPROX_F64_EXP_E6 0x1.a019b9fe72d8ap-16
#define APPROX_F64_EXP_E7 0x1.71df2023fe18cp-19
#define APPROX_F64_EXP_E8 0x1.289088e5e95e6p-22
#define APPROX_F64_EXP_E9 0x1.ad3bca40a4f2fp-26

/* log(1+f) = 2 atanh(s), s = f/(2+f): 2atanh(s) - 2s = s z G(z), z = s^2 <= 0.0295. */
#define APPROX_F32_LOG_G0 0x1.555556p-1f
#define APPROX_F32_LOG_G1 0x1.9999ecp-2f
#define APPROX_F32_LOG_G2 0x1.245c34p-2f
#define APPROX_F32_LOG_G3 0x1.ddd19ap-3f
#define APPROX_F64_LOG_G0 0x1.5555555555558p-1
#define APPROX_F64_LOG_G1 0x1.99999999952a7p-2
#define APPROX_F64_LOG_G2 0x1.2492492df7074p-2
#define APPROX_F64_LOG_G3 0x1.c71c62defc55cp-3
#define APPROX_F64_LOG_G4 0x1.7462b656802afp-3
#define APPROX_F64_LOG_G5 0x1.39fe2df14938dp-3
#define APPROX_F64_LOG_G6 0x1.2b5a86727152cp-3
/* bits(1.0) - bits(sqrt(1/2)): moves the mantissa split point to sqrt(1/2). */
#define APPROX_F32_SQRTH_BITS 0x3f3504f3u
#define APPROX_F64_SQRTH_BITS 0x3fe6a09e667f3bcdu

/* -- Building blocks ---------------------------------------------------------- */

/* e^r - 1 = r + r^2 E(r) for |r| <= ln2/2 (a little beyond is fine), E by Horner's rule. */
static inline float approx_expm1_poly_f32(float r)
{
  float p = APPROX_F32_EXP_E4;
  p = approx_fma_f32(p, r, APPROX_F32_EXP_E3);
  p = approx_fma_f32(p, r, APPROX_F32_EXP_E2);
  p = approx_fma_f32(p, r, APPROX_F32_EXP_E1);
  p = approx_fma_f32(p, r, APPROX_F32_EXP_E0);
  float r2 = r * r;
  return approx_fma_f32(r2, p, r);
}

static inline float approx_exp_poly_f32(float r) { return approx_expm1_poly_f32(r) + 1.0f; }

static inline double approx_expm1_poly_f64(double r)   /* e^r - 1 = r + r^2 E(r) */
{
  double p = APPROX_F64_EXP_E9;
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E8);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E7);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E6);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E5);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E4);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E3);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E2);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E1);
  p = approx_fma_f64(p, r, APPROX_F64_EXP_E0);
  double r2 = r * r;
  return approx_fma_f64(r2, p, r);
}

static inline double approx_exp_poly_f64(double r) { return approx_expm1_poly_f64(r) + 1.0; }

/* x = n ln2 + r: n = round(x / ln2) by the magic number, r = x - n ln2 in two steps
** (Cody-Waite; n * LN2_HI is exact).  Returns r; *t gets the magic sum, whose low bits
** are n.  |x| must stay below 2^22 ln2 (2^51 ln2 for f64), as every caller's clamp keeps it. */
static inline float approx_ln2_reduce_f32(float x, float *t)
{
  float tt = approx_fma_f32(x, APPROX_F32_LOG2E, APPROX_F32_RND);
  float nf = tt - APPROX_F32_RND;
  float r = approx_fma_f32(-nf, APPROX_F32_LN2_HI, x);   /* exact */
  *t = tt;
  return approx_fma_f32(-nf, APPROX_F32_LN2_LO, r);
}

static inline double approx_ln2_reduce_f64(double x, double *t)
{
  double tt = approx_fma_f64(x, APPROX_F64_LOG2E, APPROX_F64_RND);
  double nf = tt - APPROX_F64_RND;
  double r = approx_fma_f64(-nf, APPROX_F64_LN2_HI, x);
  *t = tt;
  return approx_fma_f64(-nf, APPROX_F64_LN2_LO, r);
}

/* 2^n from the magic sum t of approx_ln2_reduce, for a normal 2^n (-126 <= n <= 127;
** f64 -1022 <= n <= 1023): n plus the bias, placed in the exponent field. */
static inline float approx_pow2n_f32(float t)
{
  return approx_from_bits_f32((approx_bits_f32(t) - (APPROX_F32_RND_BITS - 127u)) << 23);
}

static inline double approx_pow2n_f64(double t)
{
  return approx_from_bits_f64((approx_bits_f64(t) - (APPROX_F64_RND_BITS - 1023u)) << 52);
}

/* p * 2^n, n given as two's complement bits, -152 <= n <= 254 (f32).  n = n1 + n2 with
** n1 = floor(n/2): both factors are normal, p*2^n1 is exact, so a denormal result
** rounds once.  (nb + 256) >> 1 is a logical shift of a positive number. */
static inline float approx_scale_f32(float p, uint32_t nb)
{
  uint32_t h = (nb + 256u) >> 1;              /* n1 + 128 */
  uint32_t e1 = (h - 1u) << 23;               /* bits(2^n1): n1 + 127 in the exponent */
  uint32_t e2 = (nb + 255u - h) << 23;        /* bits(2^n2): n - n1 + 127 */
  float y = p * approx_from_bits_f32(e1);
  return y * approx_from_bits_f32(e2);
}

static inline double approx_scale_f64(double p, uint64_t nb)   /* -1078 <= n <= 2046 */
{
  uint64_t h = (nb + 2048u) >> 1;             /* n1 + 1024 */
  uint64_t e1 = (h - 1u) << 52;
  uint64_t e2 = (nb + 2047u - h) << 52;
  double y = p * approx_from_bits_f64(e1);
  return y * approx_from_bits_f64(e2);
}

/* -- exp ----------------------------------------------------------------------- */

/* e^x = 2^n e^r, n = round(x/ln2), r = x - n ln2 (Cody-Waite, n*LN2_HI exact).
** The clamps keep n in the scalable range; past them the result is inf or 0 anyway,
** and NaN passes through them (comparisons with NaN are false).  Both clamps test x, not
** each other's result: GCC then emits one compare and blend each (chained, it merges
** them into nine instructions). */
static inline float approx_exp_f32(float x)
{
  float xc = x > 89.0f ? 89.0f : x;           /* e^89 overflows */
  xc = x < -104.0f ? -104.0f : xc;            /* e^-104 < 2^-150: rounds to 0 */
  float t;
  float r = approx_ln2_reduce_f32(xc, &t);
  uint32_t nb = approx_bits_f32(t) - APPROX_F32_RND_BITS;
  float p = approx_exp_poly_f32(r);
  return approx_scale_f32(p, nb);
}

static inline double approx_exp_f64(double x)
{
  double xc = x > 710.0 ? 710.0 : x;          /* e^710 overflows */
  xc = x < -746.0 ? -746.0 : xc;              /* e^-746 < 2^-1075: rounds to 0 */
  double t;
  double r = approx_ln2_reduce_f64(xc, &t);
  uint64_t nb = approx_bits_f64(t) - APPROX_F64_RND_BITS;
  double p = approx_exp_poly_f64(r);
  return approx_scale_f64(p, nb);
}

/* -- log ----------------------------------------------------------------------- */

/* x = 2^k m, m in [sqrt(1/2), sqrt(2)); returns k as a float and f = m - 1 (exact).
** Denormals are first scaled by 2^24 so their exponent field is meaningful. */
static inline float approx_log_reduce_f32(float x, float *f)
{
  float xs = x < 0x1p-126f ? x * 0x1p24f : x;
  uint32_t kadj = x < 0x1p-126f ? 24u : 0u;
  uint32_t ix = approx_bits_f32(xs) + (0x3f800000u - APPROX_F32_SQRTH_BITS);
  uint32_t kb = (ix >> 23) - 127u - kadj;     /* k, two's complement */
  uint32_t mb = (ix & 0x007fffffu) + APPROX_F32_SQRTH_BITS;
  *f = approx_from_bits_f32(mb) - 1.0f;
  return approx_from_bits_f32(kb + APPROX_F32_RND_BITS) - APPROX_F32_RND;
}

static inline double approx_log_reduce_f64(double x, double *f)
{
  double xs = x < 0x1p-1022 ? x * 0x1p54 : x;
  uint64_t kadj = x < 0x1p-1022 ? 54u : 0u;
  uint64_t ix = approx_bits_f64(xs) + (0x3ff0000000000000u - APPROX_F64_SQRTH_BITS);
  uint64_t kb = (ix >> 52) - 1023u - kadj;
  uint64_t mb = (ix & 0x000fffffffffffffu) + APPROX_F64_SQRTH_BITS;
  *f = approx_from_bits_f64(mb) - 1.0;
  return approx_from_bits_f64(kb + APPROX_F64_RND_BITS) - APPROX_F64_RND;
}

/* s (hfsq + R) for log(1+f) = f - hfsq + s (hfsq + R), hfsq = f^2/2 (fdlibm's form:
** the small correction is added last, so f and hfsq carry the bulk exactly). */
static inline float approx_log_corr_f32(float f, float hfsq)
{
  float s = f / (2.0f + f);
  float z = s * s;
  float g = APPROX_F32_LOG_G3;
  g = approx_fma_f32(g, z, APPROX_F32_LOG_G2);
  g = approx_fma_f32(g, z, APPROX_F32_LOG_G1);
  g = approx_fma_f32(g, z, APPROX_F32_LOG_G0);
  float rr = g * z;
  return s * (hfsq + rr);
}

static inline double approx_log_corr_f64(double f, double hfsq)
{
  double s = f / (2.0 + f);
  double z = s * s;
  double g = APPROX_F64_LOG_G6;
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G5);
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G4);
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G3);
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G2);
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G1);
  g = approx_fma_f64(g, z, APPROX_F64_LOG_G0);
  double rr = g * z;
  return s * (hfsq + rr);
}

/* log x = k ln2 + log(1+f), summed small-to-large; then the special inputs:
** 0 -> -inf, negative -> NaN, +inf and NaN -> themselves. */
static inline float approx_log_f32(float x)
{
  float f;
  float kf = approx_log_reduce_f32(x, &f);
  float hfsq = 0.5f * f * f;
  float c = approx_log_corr_f32(f, hfsq);
  float y = c + kf * APPROX_F32_LN2_LO;
  y = y - hfsq;
  y = y + f;
  y = y + kf * APPROX_F32_LN2_HI;
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  return !(x < INFINITY) ? x : y;             /* +inf, NaN */
}

static inline double approx_log_f64(double x)
{
  double f;
  double kf = approx_log_reduce_f64(x, &f);
  double hfsq = 0.5 * f * f;
  double c = approx_log_corr_f64(f, hfsq);
  double y = c + kf * APPROX_F64_LN2_LO;
  y = y - hfsq;
  y = y + f;
  y = y + kf * APPROX_F64_LN2_HI;
  y = x == 0.0 ? -(double)INFINITY : y;
  y = x < 0.0 ? (double)NAN : y;
  return !(x < (double)INFINITY) ? x : y;
}

/* -- tanh ---------------------------------------------------------------------- */

/* tanh|x| = E / (E + 2), E = expm1(2|x|) = 2^n (e^r - 1) + (2^n - 1): full relative
** accuracy near 0, and near 1 the rounding of E + 2 costs at most an ulp.  (A clamped odd
** rational x P(x^2)/Q(x^2) is cheaper, but its float evaluation errs by ~6 ulp as tanh
** nears 1.)  |x| is clamped where tanh rounds to 1: there E + 2 == E. */
static inline float approx_tanh_f32(float x)
{
  uint32_t sign = approx_bits_f32(x) & APPROX_F32_SIGN;
  float ax = approx_from_bits_f32(approx_bits_f32(x) & ~APPROX_F32_SIGN);
  ax = ax > 9.5f ? 9.5f : ax;
  float u = ax + ax;
  float t;
  float r = approx_ln2_reduce_f32(u, &t);       /* n = round(2|x| / ln2) */
  float q = approx_expm1_poly_f32(r);
  float s = approx_pow2n_f32(t);                /* 0 <= n <= 28 */
  float em1 = approx_fma_f32(s, q, s - 1.0f);
  float y = em1 / (em1 + 2.0f);
  return approx_from_bits_f32(approx_bits_f32(y) | sign);
}

/* As f32; |x| is clamped at 22, where tanh rounds to 1. */
static inline double approx_tanh_f64(double x)
{
  uint64_t sign = approx_bits_f64(x) & APPROX_F64_SIGN;
  double ax = approx_from_bits_f64(approx_bits_f64(x) & ~APPROX_F64_SIGN);
  ax = ax > 22.0 ? 22.0 : ax;
  double u = ax + ax;
  double t;
  double r = approx_ln2_reduce_f64(u, &t);
  double q = approx_expm1_poly_f64(r);
  double s = approx_pow2n_f64(t);               /* 0 <= n <= 64 */
  double em1 = approx_fma_f64(s, q, s - 1.0);
  double y = em1 / (em1 + 2.0);
  return approx_from_bits_f64(approx_bits_f64(y) | sign);
}

/* -- sigmoid ------------------------------------------------------------------- */

/* 1/(1+e^-x) for x >= 0, e^x/(1+e^x) for x < 0: e = e^-|x| never overflows, and the
** tail e^x (down to denormals) keeps its relative accuracy. */
static inline float approx_sigmoid_f32(float x)
{
  float mx = x < 0.0f ? x : -x;               /* -|x| */
  float e = approx_exp_f32(mx);
  float num = x < 0.0f ? e : 1.0f;
  return num / (1.0f + e);
}

static inline double approx_sigmoid_f64(double x)
{
  double mx = x < 0.0 ? x : -x;
  double e = approx_exp_f64(mx);
  double num = x < 0.0 ? e : 1.0;
  return num / (1.0 + e);
}

/* -- GELU (tanh form) ------------------------------------------------------------ */

/* 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the same function
** x / (1 + e^z), z = -2u = x (C1 + C3 x^2): no cancellation for negative x (the tanh
** form loses all digits there), and cheaper.  e^z is exp without its denormal path: z is
** clamped to [-87, 88], where 2^n stays normal and one multiplication scales; beyond 88
** (x < -10.0) the true value is below 7e-38 and the result is -0 (also for -inf, GELU's
** limit); below -87, 1 + e^z rounds to 1 and the result is x. */
#define APPROX_F32_GELU_C1 -0x1.988454p+0f          /* -2 sqrt(2/pi) */
#define APPROX_F32_GELU_C3 -0x1.2444f2p-4f          /* -2 sqrt(2/pi) 0.044715 */
#define APPROX_F64_GELU_C1 -0x1.9884533d43651p+0
#define APPROX_F64_GELU_C3 -0x1.2444f2a4d8b4bp-4

static inline float approx_gelu_f32(float x)
{
  float x2 = x * x;
  float z = approx_fma_f32(x2, APPROX_F32_GELU_C3, APPROX_F32_GELU_C1) * x;
  float zc = z > 88.0f ? 88.0f : z;
  zc = z < -87.0f ? -87.0f : zc;
  float t;
  float r = approx_ln2_reduce_f32(zc, &t);
  float q = approx_expm1_poly_f32(r);
  float s = approx_pow2n_f32(t);                /* -126 <= n <= 127 */
  float e = approx_fma_f32(s, q, s);
  float y = x / (1.0f + e);
  return z > 88.0f ? -0.0f : y;
}

/* As f32, z clamped to [-708, 709]: -0 from x < -21.2, where the true value is below
** 3e-307. */
static inline double approx_gelu_f64(double x)
{
  double x2 = x * x;
  double z = approx_fma_f64(x2, APPROX_F64_GELU_C3, APPROX_F64_GELU_C1) * x;
  double zc = z > 709.0 ? 709.0 : z;
  zc = z < -708.0 ? -708.0 : zc;
  double t;
  double r = approx_ln2_reduce_f64(zc, &t);
  double q = approx_expm1_poly_f64(r);
  double s = approx_pow2n_f64(t);               /* -1021 <= n <= 1023 */
  double e = approx_fma_f64(s, q, s);
  double y = x / (1.0 + e);
  return z > 709.0 ? -0.0 : y;
}

/* -- expm1, log1p ---------------------------------------------------------------- */

/* e^x - 1 = 2^n (e^r - 1) + (2^n - 1) with exp's reduction: full relative accuracy near 0
** (n = 0 gives the polynomial itself), one rounding of the sum elsewhere.  x is clamped to
** [-30, 89] (f64 [-45, 710]): below, e^x - 1 rounds to -1; above, it overflows.  2^n is
** normal up to n = 127 (1023); n = 128 (1024) is computed with 2^(n-1) and doubled, so
** results up to the largest float stay finite.  -0 stays -0. */
static inline float approx_expm1_f32(float x)
{
  float xc = x > 89.0f ? 89.0f : x;
  xc = x < -30.0f ? -30.0f : xc;
  float t;
  float r = approx_ln2_reduce_f32(xc, &t);
  float q = approx_expm1_poly_f32(r);
  float tn = t > APPROX_F32_RND + 127.0f ? t - 1.0f : t;   /* n = 128: 2^127, doubled */
  float s = approx_pow2n_f32(tn);
  float em1 = approx_fma_f32(s, q, s - 1.0f);
  em1 = t > tn ? em1 * 2.0f : em1;
  return x == 0.0f ? x : em1;
}

static inline double approx_expm1_f64(double x)
{
  double xc = x > 710.0 ? 710.0 : x;
  xc = x < -45.0 ? -45.0 : xc;
  double t;
  double r = approx_ln2_reduce_f64(xc, &t);
  double q = approx_expm1_poly_f64(r);
  double tn = t > APPROX_F64_RND + 1023.0 ? t - 1.0 : t;   /* n = 1024 */
  double s = approx_pow2n_f64(tn);
  double em1 = approx_fma_f64(s, q, s - 1.0);
  em1 = t > tn ? em1 * 2.0 : em1;
  return x == 0.0 ? x : em1;
}

/* log(1 + x) = log u + c/u, u = 1 + x rounded, c = x - (u - 1) its rounding error (exact
** for u below 2^24 (2^53), where u - 1 is exact; beyond, c/u is below an ulp of the result),
** added with the small terms of log's sum (fdlibm's log1p).  u = 0 -> -inf, u < 0 -> NaN,
** +inf and NaN pass, -0 stays -0. */
static inline float approx_log1p_f32(float x)
{
  float u = 1.0f + x;
  float f;
  float kf = approx_log_reduce_f32(u, &f);
  float c = x - (u - 1.0f);
  c = c / u;
  float hfsq = 0.5f * f * f;
  float cr = approx_log_corr_f32(f, hfsq);
  float y = cr + (kf * APPROX_F32_LN2_LO + c);
  y = y - hfsq;
  y = y + f;
  y = y + kf * APPROX_F32_LN2_HI;
  y = u == 0.0f ? -INFINITY : y;
  y = u < 0.0f ? NAN : y;
  y = !(u < INFINITY) ? u : y;                /* +inf, NaN */
  return x == 0.0f ? x : y;
}

static inline double approx_log1p_f64(double x)
{
  double u = 1.0 + x;
  double f;
  double kf = approx_log_reduce_f64(u, &f);
  double c = x - (u - 1.0);
  c = c / u;
  double hfsq = 0.5 * f * f;
  double cr = approx_log_corr_f64(f, hfsq);
  double y = cr + (kf * APPROX_F64_LN2_LO + c);
  y = y - hfsq;
  y = y + f;
  y = y + kf * APPROX_F64_LN2_HI;
  y = u == 0.0 ? -(double)INFINITY : y;
  y = u < 0.0 ? (double)NAN : y;
  y = !(u < (double)INFINITY) ? u : y;
  return x == 0.0 ? x : y;
}

/* -- erf --------------------------------------------------------------------------- */

/* Two pieces, both computed, one selected (tools/approx_fit.py erf):
** |x| < 1: erf x = x + x Q(x^2) (Q relative error 2^-29.6 f32, 2^-56.9 f64);
** |x| >= 1: erf x = 1 - e^(L(|x|) - x^2), L = log(erfc) + x^2 with absolute error in erf
** 2^-29.9 (f32, on [1, 4]) or 2^-57.1 (f64, on [1, 6]); |x| is clamped there, where erf
** rounds to 1.  L - x^2 is one multiply-add.  The sign is put back last: erf is odd.  A NaN
** takes the first piece, whose operations all see the same NaN, so its bits do not depend
** on which operand an instruction propagates (the second would meet +NaN and -NaN). */
#define APPROX_F32_ERF_Q0 0x1.06eba8p-3f
#define APPROX_F32_ERF_Q1 -0x1.81273ep-2f
#define APPROX_F32_ERF_Q2 0x1.ce2cf8p-4f
#define APPROX_F32_ERF_Q3 -0x1.b7f90cp-6f
#define APPROX_F32_ERF_Q4 0x1.5405b2p-8f
#define APPROX_F32_ERF_Q5 -0x1.a3f6fep-11f
#define APPROX_F32_ERF_Q6 0x1.496a3p-14f
#define APPROX_F32_ERF_L0 -0x1.72e6e6p-12f
#define APPROX_F32_ERF_L1 -0x1.2085b2p+0f
#define APPROX_F32_ERF_L2 0x1.7274f8p-2f
#define APPROX_F32_ERF_L3 -0x1.a60a82p-4f
#define APPROX_F32_ERF_L4 0x1.654222p-6f
#define APPROX_F32_ERF_L5 -0x1.814cdap-9f
#define APPROX_F32_ERF_L6 0x1.852d48p-13f
#define APPROX_F32_ERF_XMAX 4.0f
#define APPROX_F64_ERF_Q0 0x1.06eba8214db68p-3
#define APPROX_F64_ERF_Q1 -0x1.812746b0379bdp-2
#define APPROX_F64_ERF_Q2 0x1.ce2f21a040d16p-4
#define APPROX_F64_ERF_Q3 -0x1.b82ce311fa94p-6
#define APPROX_F64_ERF_Q4 0x1.565bccf92b34ap-8
#define APPROX_F64_ERF_Q5 -0x1.c02db03dd7cd4p-11
#define APPROX_F64_ERF_Q6 0x1.f9a2baa90db6ap-14
#define APPROX_F64_ERF_Q7 -0x1.f4ca4d700c6bcp-17
#define APPROX_F64_ERF_Q8 0x1.b97fd3e0c1a68p-20
#define APPROX_F64_ERF_Q9 -0x1.5c07271808db3p-23
#define APPROX_F64_ERF_Q10 0x1.d71b1012fd084p-27
#define APPROX_F64_ERF_Q11 -0x1.abae4bb6f5827p-31
#define APPROX_F64_ERF_L0 -0x1.138773a2746adp-21
#define APPROX_F64_ERF_L1 -0x1.20dd1e3144b98p+0
#define APPROX_F64_ERF_L2 0x1.741394c6e6823p-2
#define APPROX_F64_ERF_L3 -0x1.a4ab28fac4582p-4
#define APPROX_F64_ERF_L4 0x1.3719a69451191p-6
#define APPROX_F64_ERF_L5 0x1.b19d22407b04bp-12
#define APPROX_F64_ERF_L6 -0x1.f709851e9083dp-10
#define APPROX_F64_ERF_L7 0x1.954ad932d91f5p-11
#define APPROX_F64_ERF_L8 -0x1.1e5cbca7130c8p-13
#define APPROX_F64_ERF_L9 -0x1.479b71edc60bbp-16
#define APPROX_F64_ERF_L10 0x1.7a11010bc4f3bp-16
#define APPROX_F64_ERF_L11 -0x1.1fdf9c2eed73ap-17
#define APPROX_F64_ERF_L12 0x1.1bdc470e0ae9bp-19
#define APPROX_F64_ERF_L13 -0x1.8cd7af2af2bcbp-22
#define APPROX_F64_ERF_L14 0x1.8a96f3497a876p-25
#define APPROX_F64_ERF_L15 -0x1.0b56ce6df9be1p-28
#define APPROX_F64_ERF_L16 0x1.bc5033617a669p-33
#define APPROX_F64_ERF_L17 -0x1.566172ec5c6dfp-38
#define APPROX_F64_ERF_XMAX 6.0

static inline float approx_erf_f32(float x)
{
  uint32_t sign = approx_bits_f32(x) & APPROX_F32_SIGN;
  float ax = approx_from_bits_f32(approx_bits_f32(x) & ~APPROX_F32_SIGN);
  float z = ax * ax;
  float q = APPROX_F32_ERF_Q6;
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q5);
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q4);
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q3);
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q2);
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q1);
  q = approx_fma_f32(q, z, APPROX_F32_ERF_Q0);
  float ys = approx_fma_f32(ax, q, ax);
  float bx = ax > APPROX_F32_ERF_XMAX ? APPROX_F32_ERF_XMAX : ax;
  bx = ax >= 1.0f ? bx : 1.0f;                /* NaN: 1, so yl is finite */
  float l = APPROX_F32_ERF_L6;
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L5);
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L4);
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L3);
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L2);
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L1);
  l = approx_fma_f32(l, bx, APPROX_F32_ERF_L0);
  float h = approx_fma_f32(-bx, bx, l);
  float yl = 1.0f - approx_exp_f32(h);
  float y = ax >= 1.0f ? yl : ys;             /* NaN: ys, one NaN throughout */
  return approx_from_bits_f32(approx_bits_f32(y) | sign);
}

static inline double approx_erf_f64(double x)
{
  uint64_t sign = approx_bits_f64(x) & APPROX_F64_SIGN;
  double ax = approx_from_bits_f64(approx_bits_f64(x) & ~APPROX_F64_SIGN);
  double z = ax * ax;
  double q = APPROX_F64_ERF_Q11;
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q10);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q9);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q8);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q7);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q6);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q5);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q4);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q3);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q2);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q1);
  q = approx_fma_f64(q, z, APPROX_F64_ERF_Q0);
  double ys = approx_fma_f64(ax, q, ax);
  double bx = ax > APPROX_F64_ERF_XMAX ? APPROX_F64_ERF_XMAX : ax;
  bx = ax >= 1.0 ? bx : 1.0;
  double l = APPROX_F64_ERF_L17;
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L16);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L15);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L14);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L13);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L12);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L11);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L10);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L9);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L8);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L7);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L6);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L5);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L4);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L3);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L2);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L1);
  l = approx_fma_f64(l, bx, APPROX_F64_ERF_L0);
  double h = approx_fma_f64(-bx, bx, l);
  double yl = 1.0 - approx_exp_f64(h);
  double y = ax >= 1.0 ? yl : ys;
  return approx_from_bits_f64(approx_bits_f64(y) | sign);
}

/* -- sin, cos ------------------------------------------------------------------ */

/* sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (abs error of S
** 2^-35 / C 2^-38.6 for f32, 2^-66 / 2^-70 for f64). */
#define APPROX_F32_SIN_S0 -0x1.555556p-3f
#define APPROX_F32_SIN_S1 0x1.11110ep-7f
#define APPROX_F32_SIN_S2 -0x1.a013a2p-13f
#define APPROX_F32_SIN_S3 0x1.6dbc30p-19f
#define APPROX_F32_COS_C0 0x1.555556p-5f
#define APPROX_F32_COS_C1 -0x1.6c16c0p-10f
#define APPROX_F32_COS_C2 0x1.a015c0p-16f
#define APPROX_F32_COS_C3 -0x1.25230ep-22f
#define APPROX_F64_SIN_S0 -0x1.5555555555555p-3
#define APPROX_F64_SIN_S1 0x1.1111111111110p-7
#define APPROX_F64_SIN_S2 -0x1.a01a01a019927p-13
#define APPROX_F64_SIN_S3 0x1.71de3a545e87cp-19
#define APPROX_F64_SIN_S4 -0x1.ae64540f30bbfp-26
#define APPROX_F64_SIN_S5 0x1.61217c3312c35p-33
#define APPROX_F64_SIN_S6 -0x1.ab1625bb227b7p-41
#define APPROX_F64_COS_C0 0x1.5555555555555p-5
#define APPROX_F64_COS_C1 -0x1.6c16c16c16c16p-10
#define APPROX_F64_COS_C2 0x1.a01a01a019d03p-16
#define APPROX_F64_COS_C3 -0x1.27e4fb7711eb6p-22
#define APPROX_F64_COS_C4 0x1.1eed8de9fe4d9p-29
#define APPROX_F64_COS_C5 -0x1.9394b7827a414p-37
#define APPROX_F64_COS_C6 0x1.ab76daf2efd33p-45

/* pi/2 split so that k*PIO2_i is exact for k < 2^13 (f32: 11-bit parts, total 2^-78
** error) or k < 2^20 (f64: 33-bit parts, 2^-160), i.e. |x| < 12867 or 1.647e6.  Beyond,
** the products round and the result is sin/cos of a point a few ulp(x) from x; past
** |2x/pi| = 2^22 (2^51) the rounding of k fails and the value is meaningless. */
#define APPROX_F32_2_PI   0x1.45f306p-1f
#define APPROX_F32_PIO2_1 0x1.92p+0f
#define APPROX_F32_PIO2_2 0x1.fb4p-12f
#define APPROX_F32_PIO2_3 0x1.444p-24f
#define APPROX_F32_PIO2_4 0x1.68cp-39f
#define APPROX_F32_PIO2_5 0x1.1a6264p-54f
#define APPROX_F64_2_PI   0x1.45f306dc9c883p-1
#define APPROX_F64_PIO2_1 0x1.921fb544p+0
#define APPROX_F64_PIO2_2 0x1.0b4611a6p-34
#define APPROX_F64_PIO2_3 0x1.3198a2ep-69
#define APPROX_F64_PIO2_4 0x1.b839a252049c1p-104
/* |r| bound for huge |x| where reduction fails: keeps the result finite, in [-1, 1]. */
#define APPROX_F32_SINCOS_RMAX 0.8f
#define APPROX_F64_SINCOS_RMAX 0.8

/* sin(|x| + q0 pi/2), with x's sign applied where smask has the sign bit: sin is
** (q0 = 0, smask = sign bit), cos is (1, 0); so sin is exactly odd and cos even.
** r = |x| - k pi/2 with k = round(2|x|/pi): the first steps are exact (short parts); once
** they may round, each step is a Fast2Sum whose error term is carried to the end. */
static inline float approx_sincos_f32(float x, uint32_t q0, uint32_t smask)
{
  uint32_t xsign = approx_bits_f32(x) & smask;
  float ax = approx_from_bits_f32(approx_bits_f32(x) & ~APPROX_F32_SIGN);
  float t = ax * APPROX_F32_2_PI + APPROX_F32_RND;
  float kf = t - APPROX_F32_RND;
  uint32_t q = approx_bits_f32(t) - APPROX_F32_RND_BITS + q0;   /* quadrant (mod 4) */
  float r = ax - kf * APPROX_F32_PIO2_1;      /* exact */
  r = r - kf * APPROX_F32_PIO2_2;             /* exact */
  float w = kf * APPROX_F32_PIO2_3;
  float s = r - w;
  float e = (r - s) - w;                      /* s + e == r - w */
  w = kf * APPROX_F32_PIO2_4;
  float s2 = s - w;
  float e2 = (s - s2) - w;
  float tail = kf * APPROX_F32_PIO2_5;
  tail = tail - e;
  tail = tail - e2;
  r = s2 - tail;
  r = r > APPROX_F32_SINCOS_RMAX ? APPROX_F32_SINCOS_RMAX : r;
  r = r < -APPROX_F32_SINCOS_RMAX ? -APPROX_F32_SINCOS_RMAX : r;
  float z = r * r;
  float ps = APPROX_F32_SIN_S3;               /* sin r */
  ps = approx_fma_f32(ps, z, APPROX_F32_SIN_S2);
  ps = approx_fma_f32(ps, z, APPROX_F32_SIN_S1);
  ps = approx_fma_f32(ps, z, APPROX_F32_SIN_S0);
  ps = ps * z;
  ps = ps * r;
  ps = ps + r;
  float pc = APPROX_F32_COS_C3;               /* cos r */
  pc = approx_fma_f32(pc, z, APPROX_F32_COS_C2);
  pc = approx_fma_f32(pc, z, APPROX_F32_COS_C1);
  pc = approx_fma_f32(pc, z, APPROX_F32_COS_C0);
  pc = pc * z;
  pc = pc * z;
  float hz = 0.5f * z;
  float one_h = 1.0f - hz;
  pc = one_h + (((1.0f - one_h) - hz) + pc);  /* recovers the rounding of 1 - hz */
  float y = (q & 1u) != 0 ? pc : ps;
  /* negate in quadrants 2, 3 and for sin of negative x: adding the sign bit flips it */
  uint32_t yb = approx_bits_f32(y) + ((q & 2u) << 30);
  return approx_from_bits_f32(yb + xsign);
}

static inline double approx_sincos_f64(double x, uint64_t q0, uint64_t smask)
{
  uint64_t xsign = approx_bits_f64(x) & smask;
  double ax = approx_from_bits_f64(approx_bits_f64(x) & ~APPROX_F64_SIGN);
  double t = ax * APPROX_F64_2_PI + APPROX_F64_RND;
  double kf = t - APPROX_F64_RND;
  uint64_t q = approx_bits_f64(t) - APPROX_F64_RND_BITS + q0;
  double r = ax - kf * APPROX_F64_PIO2_1;     /* exact */
  double w = kf * APPROX_F64_PIO2_2;
  double s = r - w;
  double e = (r - s) - w;
  w = kf * APPROX_F64_PIO2_3;
  double s2 = s - w;
  double e2 = (s - s2) - w;
  double tail = kf * APPROX_F64_PIO2_4;
  tail = tail - e;
  tail = tail - e2;
  r = s2 - tail;
  r = r > APPROX_F64_SINCOS_RMAX ? APPROX_F64_SINCOS_RMAX : r;
  r = r < -APPROX_F64_SINCOS_RMAX ? -APPROX_F64_SINCOS_RMAX : r;
  double z = r * r;
  double ps = APPROX_F64_SIN_S6;
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S5);
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S4);
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S3);
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S2);
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S1);
  ps = approx_fma_f64(ps, z, APPROX_F64_SIN_S0);
  ps = ps * z;
  ps = ps * r;
  ps = ps + r;
  double pc = APPROX_F64_COS_C6;
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C5);
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C4);
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C3);
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C2);
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C1);
  pc = approx_fma_f64(pc, z, APPROX_F64_COS_C0);
  pc = pc * z;
  pc = pc * z;
  double hz = 0.5 * z;
  double one_h = 1.0 - hz;
  pc = one_h + (((1.0 - one_h) - hz) + pc);
  double y = (q & 1u) != 0 ? pc : ps;
  uint64_t yb = approx_bits_f64(y) + ((q & 2u) << 62);
  return approx_from_bits_f64(yb + xsign);
}

static inline float approx_sin_f32(float x) { return approx_sincos_f32(x, 0u, APPROX_F32_SIGN); }
static inline float approx_cos_f32(float x) { return approx_sincos_f32(x, 1u, 0u); }
static inline double approx_sin_f64(double x) { return approx_sincos_f64(x, 0u, APPROX_F64_SIGN); }
static inline double approx_cos_f64(double x) { return approx_sincos_f64(x, 1u, 0u); }

/* -- pow ----------------------------------------------------------------------- */

/* |a|^b = 2^y, y = b log2|a| = b k + b log2(m).  b k is kept exact as bh k + bl k (bh: the
** top bits of b), so the rounding error of y scales with |b log2 m| <= |b|/2, not with
** |b log2 a|.  Then the C99 special cases, each a plain select on one comparison, and exact
** results for b = 0, 1, -1, 2.  (b = 0.5 is not special-cased: an exact sqrt would need
** __builtin_sqrtf, which under GCC's default -fmath-errno keeps the loop from vectorizing.) */
static inline float approx_pow_f32(float a, float b)
{
  uint32_t abits = approx_bits_f32(a);
  float ax = approx_from_bits_f32(abits & ~APPROX_F32_SIGN);
  float bx = approx_from_bits_f32(approx_bits_f32(b) & ~APPROX_F32_SIGN);
  /* log|a| = k ln2 + log m */
  float f;
  float kf = approx_log_reduce_f32(ax, &f);
  float hfsq = 0.5f * f * f;
  float lm = approx_log_corr_f32(f, hfsq);
  lm = lm - hfsq;
  lm = lm + f;
  /* y = yh + yl */
  float tl = b * (lm * APPROX_F32_LOG2E);     /* b log2 m */
  float bh = approx_from_bits_f32(approx_bits_f32(b) & 0xfffff000u);   /* 12 bits */
  float bl = b - bh;
  float yh = bh * kf;                         /* exact */
  float yl = bl * kf + tl;
  float y = yh + yl;
  /* 2^y = 2^n 2^r, n = round(y); yh - n is exact */
  float tn = y + APPROX_F32_RND;
  float nf = tn - APPROX_F32_RND;
  uint32_t nb = approx_bits_f32(tn) - APPROX_F32_RND_BITS;
  float r = (yh - nf) + yl;
  float p = approx_exp_poly_f32(r * APPROX_F32_LN2);
  float res = approx_scale_f32(p, nb);
  res = y > 130.0f ? INFINITY : res;
  res = y < -152.0f ? 0.0f : res;
  /* a = +-0, a = +-inf, b = +-inf */
  float zpow = b < 0.0f ? INFINITY : 0.0f;    /* 0^b */
  float ipow = b < 0.0f ? 0.0f : INFINITY;    /* inf^b */
  res = ax == 0.0f ? zpow : res;
  res = ax == INFINITY ? ipow : res;
  float bpow = ax < 1.0f ? zpow : ipow;       /* |a|^(+-inf) */
  bpow = ax == 1.0f ? 1.0f : bpow;
  res = bx == INFINITY ? bpow : res;
  /* b integer (rb == bx)?  odd?  |b| >= 2^23 is an integer, odd only below 2^24; below
  ** 2^23, tb = |b| + 2^23 rounds to an integer whose parity is tb's last bit. */
  float tb = bx < 0x1p23f ? bx + 0x1p23f : bx;
  float rb = bx < 0x1p23f ? tb - 0x1p23f : bx;
  /* a with the sign bit set (-0 and -inf too) to an odd integer power is negated */
  float neg = (approx_bits_f32(tb) & 1u) != 0 ? -res : res;
  neg = tb < 0x1p24f ? neg : res;
  neg = rb == bx ? neg : res;
  res = (abits & APPROX_F32_SIGN) != 0 ? neg : res;
  /* finite a < 0 to a non-integer power is NaN */
  float nn = rb == bx ? res : NAN;
  nn = a > -INFINITY ? nn : res;
  res = a < 0.0f ? nn : res;
  res = a != a ? a + b : res;
  res = b != b ? a + b : res;
  /* exact cases */
  res = b == 2.0f ? a * a : res;
  res = b == 1.0f ? a : res;
  res = b == -1.0f ? 1.0f / a : res;
  res = b == 0.0f ? 1.0f : res;
  return a == 1.0f ? 1.0f : res;
}

static inline double approx_pow_f64(double a, double b)
{
  const double inf = (double)INFINITY;
  uint64_t abits = approx_bits_f64(a);
  double ax = approx_from_bits_f64(abits & ~APPROX_F64_SIGN);
  double bx = approx_from_bits_f64(approx_bits_f64(b) & ~APPROX_F64_SIGN);
  /* log|a| = k ln2 + log m */
  double f;
  double kf = approx_log_reduce_f64(ax, &f);
  double hfsq = 0.5 * f * f;
  double lm = approx_log_corr_f64(f, hfsq);
  lm = lm - hfsq;
  lm = lm + f;
  /* y = yh + yl */
  double tl = b * (lm * APPROX_F64_LOG2E);    /* b log2 m */
  double bh = approx_from_bits_f64(approx_bits_f64(b) & 0xffffffff00000000u);   /* 21 bits */
  double bl = b - bh;
  double yh = bh * kf;                        /* exact */
  double yl = bl * kf + tl;
  double y = yh + yl;
  /* 2^y = 2^n 2^r, n = round(y); yh - n is exact */
  double tn = y + APPROX_F64_RND;
  double nf = tn - APPROX_F64_RND;
  uint64_t nb = approx_bits_f64(tn) - APPROX_F64_RND_BITS;
  double r = (yh - nf) + yl;
  double p = approx_exp_poly_f64(r * APPROX_F64_LN2);
  double res = approx_scale_f64(p, nb);
  res = y > 1026.0 ? inf : res;
  res = y < -1078.0 ? 0.0 : res;
  /* a = +-0, a = +-inf, b = +-inf */
  double zpow = b < 0.0 ? inf : 0.0;        /* 0^b */
  double ipow = b < 0.0 ? 0.0 : inf;        /* inf^b */
  res = ax == 0.0 ? zpow : res;
  res = ax == inf ? ipow : res;
  double bpow = ax < 1.0 ? zpow : ipow;      /* |a|^(+-inf) */
  bpow = ax == 1.0 ? 1.0 : bpow;
  res = bx == inf ? bpow : res;
  /* as f32, with 2^52 and 2^53 */
  double tb = bx < 0x1p52 ? bx + 0x1p52 : bx;
  double rb = bx < 0x1p52 ? tb - 0x1p52 : bx;
  /* a with the sign bit set (-0 and -inf too) to an odd integer power is negated */
  double neg = (approx_bits_f64(tb) & 1u) != 0 ? -res : res;
  neg = tb < 0x1p53 ? neg : res;
  neg = rb == bx ? neg : res;
  res = (abits & APPROX_F64_SIGN) != 0 ? neg : res;
  /* finite a < 0 to a non-integer power is NaN */
  double nn = rb == bx ? res : (double)NAN;
  nn = a > -inf ? nn : res;
  res = a < 0.0 ? nn : res;
  res = a != a ? a + b : res;
  res = b != b ? a + b : res;
  /* exact cases */
  res = b == 2.0 ? a * a : res;
  res = b == 1.0 ? a : res;
  res = b == -1.0 ? 1.0 / a : res;
  res = b == 0.0 ? 1.0 : res;
  return a == 1.0 ? 1.0 : res;
}

/* -- Type-generic wrappers ------------------------------------------------------ */

#define APPROX_EXP(x)     _Generic((x), float: approx_exp_f32, double: approx_exp_f64)(x)
#define APPROX_LOG(x)     _Generic((x), float: approx_log_f32, double: approx_log_f64)(x)
#define APPROX_TANH(x)    _Generic((x), float: approx_tanh_f32, double: approx_tanh_f64)(x)
#define APPROX_SIGMOID(x) _Generic((x), float: approx_sigmoid_f32, double: approx_sigmoid_f64)(x)
#define APPROX_GELU(x)    _Generic((x), float: approx_gelu_f32, double: approx_gelu_f64)(x)
#define APPROX_SIN(x)     _Generic((x), float: approx_sin_f32, double: approx_sin_f64)(x)
#define APPROX_COS(x)     _Generic((x), float: approx_cos_f32, double: approx_cos_f64)(x)
#define APPROX_POW(a, b)  _Generic((a), float: approx_pow_f32, double: approx_pow_f64)(a, b)
#define APPROX_EXPM1(x)   _Generic((x), float: approx_expm1_f32, double: approx_expm1_f64)(x)
#define APPROX_LOG1P(x)   _Generic((x), float: approx_log1p_f32, double: approx_log1p_f64)(x)
#define APPROX_ERF(x)     _Generic((x), float: approx_erf_f32, double: approx_erf_f64)(x)

#endif /* TC_APPROX_H */
