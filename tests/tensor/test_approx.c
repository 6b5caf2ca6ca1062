/*
** test_approx.c -- accuracy and special values of src/tensor/approx.h.
** Dense sweeps measure the max error in ulp of the true result (references: double libm
** for f32, long double libm for f64) and assert the bounds stated in docs/NUMERICS.md.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approx.h"

/* -- Bounds (max ulp), ORDER NUMERICS: keep in step with docs/NUMERICS.md --------- */

#define BOUND_EXP_F32     1.1
#define BOUND_LOG_F32     1.0
#define BOUND_TANH_F32    3.0
#define BOUND_SIGMOID_F32 2.5
#define BOUND_SINCOS_F32  1.5
#define BOUND_EXP_F64     1.5
#define BOUND_LOG_F64     1.0
#define BOUND_TANH_F64    3.0
#define BOUND_SIGMOID_F64 2.5
#define BOUND_SINCOS_F64  2.0
#define BOUND_EXPM1_F32   2.0
#define BOUND_LOG1P_F32   1.0
#define BOUND_ERF_F32     1.5
#define BOUND_EXPM1_F64   2.5
#define BOUND_LOG1P_F64   1.0
#define BOUND_ERF_F64     1.5
/* gelu: err <= GELU_C * (1 + |z|) ulp, z = 2u: GELU's own condition number grows like
** |z| for negative x (x e^-|z|), so a rounding in z costs |z| times its relative size. */
#define BOUND_GELU_C      3.0
/* pow: err <= POW_C0 + POW_C1 * |b| (the error of b log2 m grows with |b|) */
#define POW_F32_C0 2.0
#define POW_F32_C1 0.75
#define POW_F64_C0 2.0
#define POW_F64_C1 0.75

/* Accurate range of sin/cos (k = round(2x/pi) < 2^13 resp. 2^20). */
#define SINCOS_F32_MAX 12867.0f
#define SINCOS_F64_MAX 1.647e6

/* Sampling density: 1 by default (about 5 s at -O2); TC_APPROX_DENSITY=20 samples 20x more
** (calibration), and AddressSanitizer builds use 1/8 (they check memory, not accuracy). */
static double density = 1.0;

/* -- ulp error ------------------------------------------------------------------ */

/* ulp of the true value: 2^(e-23) for 2^e <= |v| < 2^(e+1), 2^-149 below 2^-126.
** Infinity counts as 2^128 (one ulp past FLT_MAX), so overflow at the edge is measured. */
static double ulp_err_f32(float got, double ref)
{
  if (isnan(ref) || isnan(got))
    return isnan(ref) && isnan(got) ? 0.0 : INFINITY;
  if ((double)got == ref || got == (float)ref)
    return 0.0;
  double g = isinf(got) ? copysign(0x1p128, got) : (double)got;
  double r = isinf(ref) ? copysign(0x1p128, ref) : ref;
  double a = fabs(r);
  double ulp = a < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(a) - 23);
  return fabs(g - r) / ulp;
}

static double ulp_err_f64(double got, long double ref)
{
  if (isnan(ref) || isnan(got))
    return isnan(ref) && isnan(got) ? 0.0 : INFINITY;
  if ((long double)got == ref || got == (double)ref)
    return 0.0;
  long double g = isinf(got) ? copysignl(0x1p1024L, got) : (long double)got;
  long double r = isinf(ref) ? copysignl(0x1p1024L, ref) : ref;
  long double a = fabsl(r);
  long double ulp = a < 0x1p-1022L ? 0x1p-1074L : ldexpl(1.0L, ilogbl(a) - 52);
  return (double)(fabsl(g - r) / ulp);
}

/* -- Batches: the functions as eager kernels use them (inlined, vectorized loops) -- */

#define BATCH1(name, T, fn) \
  static void name(const T *in, T *out, size_t n) \
  { for (size_t i = 0; i < n; i++) out[i] = fn(in[i]); }
BATCH1(batch_exp_f32, float, approx_exp_f32)
BATCH1(batch_log_f32, float, approx_log_f32)
BATCH1(batch_tanh_f32, float, approx_tanh_f32)
BATCH1(batch_sigmoid_f32, float, approx_sigmoid_f32)
BATCH1(batch_sin_f32, float, approx_sin_f32)
BATCH1(batch_cos_f32, float, approx_cos_f32)
BATCH1(batch_gelu_f32, float, approx_gelu_f32)
BATCH1(batch_expm1_f32, float, approx_expm1_f32)
BATCH1(batch_log1p_f32, float, approx_log1p_f32)
BATCH1(batch_erf_f32, float, approx_erf_f32)
BATCH1(batch_exp_f64, double, approx_exp_f64)
BATCH1(batch_log_f64, double, approx_log_f64)
BATCH1(batch_tanh_f64, double, approx_tanh_f64)
BATCH1(batch_sigmoid_f64, double, approx_sigmoid_f64)
BATCH1(batch_sin_f64, double, approx_sin_f64)
BATCH1(batch_cos_f64, double, approx_cos_f64)
BATCH1(batch_gelu_f64, double, approx_gelu_f64)
BATCH1(batch_expm1_f64, double, approx_expm1_f64)
BATCH1(batch_log1p_f64, double, approx_log1p_f64)
BATCH1(batch_erf_f64, double, approx_erf_f64)

static void batch_pow_f32(const float *a, const float *b, float *out, size_t n)
{ for (size_t i = 0; i < n; i++) out[i] = approx_pow_f32(a[i], b[i]); }
static void batch_pow_f64(const double *a, const double *b, double *out, size_t n)
{ for (size_t i = 0; i < n; i++) out[i] = approx_pow_f64(a[i], b[i]); }

/* The same functions called one at a time through a pointer (not inlined into a loop):
** vector and scalar code must agree bitwise (compiled equals eager). */
typedef float (*fn_f32)(float);
typedef double (*fn_f64)(double);

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static long double ref_sigmoidl(long double x) { return 1.0L / (1.0L + expl(-x)); }

typedef struct {
  const char *name;
  void (*batch)(const float *, float *, size_t);
  fn_f32 scalar;
  double (*ref)(double);
  double (*scale)(double);   /* the error is divided by scale(x); NULL: 1 */
} case_f32;

typedef struct {
  const char *name;
  void (*batch)(const double *, double *, size_t);
  fn_f64 scalar;
  long double (*ref)(long double);
  double (*scale)(double);
} case_f64;

static const case_f32 C_EXP_F32 = { "exp f32", batch_exp_f32, approx_exp_f32, exp, NULL };
static const case_f32 C_LOG_F32 = { "log f32", batch_log_f32, approx_log_f32, log, NULL };
static const case_f32 C_TANH_F32 = { "tanh f32", batch_tanh_f32, approx_tanh_f32, tanh,
                                     NULL };
static const case_f32 C_SIGMOID_F32 = { "sigmoid f32", batch_sigmoid_f32, approx_sigmoid_f32,
                                        ref_sigmoid, NULL };
static const case_f32 C_SIN_F32 = { "sin f32", batch_sin_f32, approx_sin_f32, sin, NULL };
static const case_f32 C_COS_F32 = { "cos f32", batch_cos_f32, approx_cos_f32, cos, NULL };
static const case_f64 C_EXP_F64 = { "exp f64", batch_exp_f64, approx_exp_f64, expl, NULL };
static const case_f64 C_LOG_F64 = { "log f64", batch_log_f64, approx_log_f64, logl, NULL };
static const case_f64 C_TANH_F64 = { "tanh f64", batch_tanh_f64, approx_tanh_f64, tanhl,
                                     NULL };
static const case_f64 C_SIGMOID_F64 = { "sigmoid f64", batch_sigmoid_f64, approx_sigmoid_f64,
                                        ref_sigmoidl, NULL };
static const case_f64 C_SIN_F64 = { "sin f64", batch_sin_f64, approx_sin_f64, sinl, NULL };
static const case_f64 C_COS_F64 = { "cos f64", batch_cos_f64, approx_cos_f64, cosl, NULL };
static const case_f32 C_EXPM1_F32 = { "expm1 f32", batch_expm1_f32, approx_expm1_f32, expm1,
                                      NULL };
static const case_f32 C_LOG1P_F32 = { "log1p f32", batch_log1p_f32, approx_log1p_f32, log1p,
                                      NULL };
static const case_f32 C_ERF_F32 = { "erf f32", batch_erf_f32, approx_erf_f32, erf, NULL };
static const case_f64 C_EXPM1_F64 = { "expm1 f64", batch_expm1_f64, approx_expm1_f64, expm1l,
                                      NULL };
static const case_f64 C_LOG1P_F64 = { "log1p f64", batch_log1p_f64, approx_log1p_f64, log1pl,
                                      NULL };
static const case_f64 C_ERF_F64 = { "erf f64", batch_erf_f64, approx_erf_f64, erfl, NULL };

/* GELU, tanh form, as x / (1 + e^-2u) (equal to 0.5 x (1 + tanh u); no cancellation).
** Its error is measured against its own condition, 1 + |z| with z = 2u (BOUND_GELU_C). */
static long double gelu_u(long double x)
{
  return 0.797884560802865355879892119868763737L * (x + 0.044715L * x * x * x);
}
static long double ref_gelul(long double x) { return x / (1.0L + expl(-2.0L * gelu_u(x))); }
static double ref_gelu(double x) { return (double)ref_gelul(x); }
static double gelu_cond(double x) { return 1 + 2 * fabs((double)gelu_u(x)); }

static const case_f32 C_GELU_F32 = { "gelu f32 /cond", batch_gelu_f32, approx_gelu_f32,
                                     ref_gelu, gelu_cond };
static const case_f64 C_GELU_F64 = { "gelu f64 /cond", batch_gelu_f64, approx_gelu_f64,
                                     ref_gelul, gelu_cond };

/* -- Sweep machinery --------------------------------------------------------------- */

#define CHUNK 4096

typedef struct {
  double max_ulp;
  double worst_in, worst_in2;
  uint64_t n;
  uint64_t mismatches;      /* vector != scalar */
} stats;

static void report(const char *what, const stats *s)
{
  printf("  %-16s max %.3f ulp at x = %.9g", what, s->max_ulp, s->worst_in);
  if (s->worst_in2 != 0.0)
    printf(", b = %.9g", s->worst_in2);
  printf(" (%llu points)\n", (unsigned long long)s->n);
}

static void check_chunk_f32(const case_f32 *c, const float *in, size_t n, stats *s)
{
  float out[CHUNK];
  fn_f32 volatile scalar = c->scalar;
  c->batch(in, out, n);
  for (size_t i = 0; i < n; i++) {
    float one = scalar(in[i]);
    if (memcmp(&one, &out[i], sizeof one) != 0)
      s->mismatches++;
    double e = ulp_err_f32(out[i], c->ref(in[i]));
    if (c->scale)
      e /= c->scale(in[i]);
    if (e > s->max_ulp) {
      s->max_ulp = e;
      s->worst_in = in[i];
    }
  }
  s->n += n;
}

static void check_chunk_f64(const case_f64 *c, const double *in, size_t n, stats *s)
{
  double out[CHUNK];
  fn_f64 volatile scalar = c->scalar;
  c->batch(in, out, n);
  for (size_t i = 0; i < n; i++) {
    double one = scalar(in[i]);
    if (memcmp(&one, &out[i], sizeof one) != 0)
      s->mismatches++;
    double e = ulp_err_f64(out[i], c->ref(in[i]));
    if (c->scale)
      e /= c->scale(in[i]);
    if (e > s->max_ulp) {
      s->max_ulp = e;
      s->worst_in = in[i];
    }
  }
  s->n += n;
}

/* Floats ordered as integers: key is monotonic in the value (-0 and +0 both map to 0). */
static int64_t key_f32(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

static float unkey_f32(int64_t k)
{
  uint32_t u = k < 0 ? (uint32_t)(-k) | 0x80000000u : (uint32_t)k;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Every stride-th float in [lo, hi] (an odd stride visits all low-bit patterns), plus the
** end points. */
static stats sweep_f32(const case_f32 *c, float lo, float hi, int64_t stride)
{
  stats s = { 0 };
  float in[CHUNK];
  size_t n = 0;
  int64_t khi = key_f32(hi);
  stride = (int64_t)((double)stride / density) | 1;
  for (int64_t k = key_f32(lo); k <= khi + stride - 1; k += stride) {
    in[n++] = unkey_f32(k < khi ? k : khi);
    if (n == CHUNK) {
      check_chunk_f32(c, in, n, &s);
      n = 0;
    }
  }
  if (n)
    check_chunk_f32(c, in, n, &s);
  return s;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)                 /* splitmix64 */
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static double rng_unit(void) { return (double)(rng() >> 11) * 0x1p-53; }

/* n uniform points in [lo, hi], n log-uniform ones (random sign, |x| in [tiny, max|lo,hi|]
** with tiny = 2^-1074 ... clipped to the range), and the end points. */
static stats sweep_f64(const case_f64 *c, double lo, double hi, double tiny, size_t n)
{
  stats s = { 0 };
  double in[CHUNK];
  size_t m = 0;
  double big = fmax(fabs(lo), fabs(hi));
  double l2lo = log2(tiny), l2hi = log2(big);
  n = (size_t)((double)n * density);
  for (size_t i = 0; i < 2 * n + 2; i++) {
    double x;
    if (i == 2 * n)
      x = lo;
    else if (i == 2 * n + 1)
      x = hi;
    else if (i & 1)
      x = lo + (hi - lo) * rng_unit();
    else {
      x = exp2(l2lo + (l2hi - l2lo) * rng_unit());
      x = (rng() & 1) ? -x : x;
      if (x < lo || x > hi)
        x = -x;
      if (x < lo || x > hi)
        continue;
    }
    in[m++] = x;
    if (m == CHUNK) {
      check_chunk_f64(c, in, m, &s);
      m = 0;
    }
  }
  if (m)
    check_chunk_f64(c, in, m, &s);
  return s;
}

static void expect_le(const char *name, const stats *s, double bound)
{
  report(name, s);
  assert_int_equal(s->mismatches, 0);
  assert_true(s->max_ulp <= bound);
}

/* -- Accuracy sweeps, f32 ---------------------------------------------------------- */

/* A NaN argument comes back as that NaN, quieted (its sign and payload
** kept): one defined result, whichever order a compiler gives the
** operands of the steps a NaN would otherwise travel through. */
static void test_approx_nan_in_nan_out(void **state)
{
  (void)state;
  static const uint32_t n32[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                                  0xff812345u, 0x7fc12345u };
  static const uint64_t n64[] = { 0x7ff8000000000000u, 0xfff8000000000000u,
                                  0x7ff0000000000001u, 0xfff0000000012345u };
  for (size_t i = 0; i < sizeof n32 / sizeof n32[0]; i++) {
    float x = approx_from_bits_f32(n32[i]);
    uint32_t want = n32[i] | 0x00400000u;   /* quiet bit set */
    assert_int_equal(approx_bits_f32(approx_exp_f32(x)), want);
    assert_int_equal(approx_bits_f32(approx_expm1_f32(x)), want);
    assert_int_equal(approx_bits_f32(approx_tanh_f32(x)), want);
    assert_int_equal(approx_bits_f32(approx_sigmoid_f32(x)), want);
  }
  for (size_t i = 0; i < sizeof n64 / sizeof n64[0]; i++) {
    double x = approx_from_bits_f64(n64[i]);
    uint64_t want = n64[i] | 0x0008000000000000u;
    assert_true(approx_bits_f64(approx_exp_f64(x)) == want);
    assert_true(approx_bits_f64(approx_expm1_f64(x)) == want);
    assert_true(approx_bits_f64(approx_tanh_f64(x)) == want);
    assert_true(approx_bits_f64(approx_sigmoid_f64(x)) == want);
  }
}

static void test_approx_exp_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_EXP_F32, -104.0f, 89.0f, 191);
  expect_le("exp f32", &s, BOUND_EXP_F32);
}

static void test_approx_log_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_LOG_F32, 0x1p-149f, FLT_MAX, 191);
  expect_le("log f32", &s, BOUND_LOG_F32);
  s = sweep_f32(&C_LOG_F32, 0.5f, 2.0f, 3);          /* near 1: relative error of log */
  expect_le("log f32 ~1", &s, BOUND_LOG_F32);
}

static void test_approx_tanh_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_TANH_F32, -10.0f, 10.0f, 127);
  expect_le("tanh f32", &s, BOUND_TANH_F32);
}

static void test_approx_sigmoid_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_SIGMOID_F32, -105.0f, 90.0f, 191);
  expect_le("sigmoid f32", &s, BOUND_SIGMOID_F32);
}

/* Floats closest to multiples of pi/2 have the smallest reduced arguments (down to
** 2^-27.8 in this range): check them and their neighbours. */
static stats sincos_near_multiples_f32(const case_f32 *c)
{
  stats s = { 0 };
  float in[CHUNK];
  size_t n = 0;
  for (int k = 1; k <= 8192; k++) {
    float x0 = (float)(k * (3.14159265358979323846264338327950288L / 2));
    if (x0 > SINCOS_F32_MAX)
      break;
    for (int d = -2; d <= 2; d++) {
      int64_t kk = key_f32(x0) + d;
      in[n++] = unkey_f32(kk);
      in[n++] = -unkey_f32(kk);
      if (n >= CHUNK - 2) {
        check_chunk_f32(c, in, n, &s);
        n = 0;
      }
    }
  }
  if (n)
    check_chunk_f32(c, in, n, &s);
  return s;
}

static void test_approx_sin_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_SIN_F32, -SINCOS_F32_MAX, SINCOS_F32_MAX, 191);
  expect_le("sin f32", &s, BOUND_SINCOS_F32);
  s = sincos_near_multiples_f32(&C_SIN_F32);
  expect_le("sin f32 k*pi/2", &s, BOUND_SINCOS_F32);
}

static void test_approx_cos_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_COS_F32, -SINCOS_F32_MAX, SINCOS_F32_MAX, 191);
  expect_le("cos f32", &s, BOUND_SINCOS_F32);
  s = sincos_near_multiples_f32(&C_COS_F32);
  expect_le("cos f32 k*pi/2", &s, BOUND_SINCOS_F32);
}

/* Beyond the accurate range: finite in, finite and in [-1, 1] out; the absolute error
** grows about like ulp(x). */
static void test_approx_sincos_f32_large(void **state)
{
  (void)state;
  double maxabs = 0.0;
  for (int64_t k = key_f32(SINCOS_F32_MAX); k <= key_f32(FLT_MAX); k += 4093) {
    float x = unkey_f32(k);
    float sv = approx_sin_f32(x), cv = approx_cos_f32(x);
    assert_true(sv >= -1.0f && sv <= 1.0f);
    assert_true(cv >= -1.0f && cv <= 1.0f);
    if (x < 1e5f)
      maxabs = fmax(maxabs, fabs(sv - sin(x)));
  }
  printf("  %-16s max abs error %.3g for 1.3e4 < |x| < 1e5\n", "sin f32 large", maxabs);
  assert_true(maxabs < 2e-6);
}

static double pow_bound_f32(float b) { return POW_F32_C0 + POW_F32_C1 * fabs(b); }
static double pow_bound_f64(double b) { return POW_F64_C0 + POW_F64_C1 * fabs(b); }

/* a over all binades (every 2^15+1-th positive float, and negated for integer b), b from
** a fixed list of common exponents plus random ones in [-16, 16]. */
static void test_approx_pow_f32_accuracy(void **state)
{
  (void)state;
  static const float common[] = { 2.0f, 3.0f, 0.5f, -0.5f, 1.5f, -1.0f, -2.0f, 4.0f,
                                  1.0f / 3, 2.2f, 1.0f / 2.2f, 0.1f, 7.0f, -3.0f, 10.0f };
  float bs[15 + 185];
  size_t nb = 0;
  for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
    bs[nb++] = common[i];
  while (nb < sizeof bs / sizeof bs[0])
    bs[nb++] = (float)(32.0 * rng_unit() - 16.0);
  float a[CHUNK], b[CHUNK], out[CHUNK];
  stats s = { 0 };
  double worst_ratio = 0.0, max4 = 0.0;
  size_t n = 0;
  int64_t astride = (int64_t)(32769 / density) | 1;
  for (size_t j = 0; j < nb; j++) {
    int is_int = bs[j] == nearbyintf(bs[j]);
    for (int64_t k = 1; k <= key_f32(FLT_MAX); k += astride) {
      for (int sgn = 0; sgn <= is_int; sgn++) {
        a[n] = sgn ? -unkey_f32(k) : unkey_f32(k);
        b[n] = bs[j];
        n++;
      }
      if (n >= CHUNK - 1 || k + astride > key_f32(FLT_MAX)) {
        batch_pow_f32(a, b, out, n);
        for (size_t i = 0; i < n; i++) {
          double ref = pow((double)a[i], (double)b[i]);
          double e = ulp_err_f32(out[i], ref);
          float one = approx_pow_f32(a[i], b[i]);
          if (memcmp(&one, &out[i], sizeof one) != 0)
            s.mismatches++;
          if (e > s.max_ulp) {
            s.max_ulp = e;
            s.worst_in = a[i];
            s.worst_in2 = b[i];
          }
          if (fabsf(b[i]) <= 4.0f)
            max4 = fmax(max4, e);
          worst_ratio = fmax(worst_ratio, e / pow_bound_f32(b[i]));
        }
        s.n += n;
        n = 0;
      }
    }
  }
  report("pow f32", &s);
  printf("  %-16s max %.3f ulp for |b| <= 4; max err/bound(b) %.3f\n", "pow f32", max4, worst_ratio);
  assert_int_equal(s.mismatches, 0);
  assert_true(worst_ratio <= 1.0);
}

/* expm1 over its whole finite range (below -30 it is -1, checked in _special); log1p
** from -1 to the largest float, and densely near 0 where log1p differs from log(1 + x);
** erf over [-4.5, 4.5] (beyond, +-1). */
static void test_approx_expm1_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_EXPM1_F32, -31.0f, 88.72f, 191);
  expect_le("expm1 f32", &s, BOUND_EXPM1_F32);
  s = sweep_f32(&C_EXPM1_F32, -1.0f, 1.0f, 61);
  expect_le("expm1 f32 ~0", &s, BOUND_EXPM1_F32);
}

static void test_approx_log1p_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_LOG1P_F32, -1.0f, FLT_MAX, 191);
  expect_le("log1p f32", &s, BOUND_LOG1P_F32);
  s = sweep_f32(&C_LOG1P_F32, -0.5f, 1.0f, 61);
  expect_le("log1p f32 ~0", &s, BOUND_LOG1P_F32);
}

static void test_approx_erf_f32_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_ERF_F32, -4.5f, 4.5f, 63);
  expect_le("erf f32", &s, BOUND_ERF_F32);
}

/* -- Accuracy sweeps, f64 ---------------------------------------------------------- */

static void test_approx_exp_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_EXP_F64, -746.0, 710.0, 0x1p-1074, 1000000);
  expect_le("exp f64", &s, BOUND_EXP_F64);
  s = sweep_f64(&C_EXP_F64, -746.0, -700.0, 1.0, 200000);      /* denormal results */
  expect_le("exp f64 den", &s, BOUND_EXP_F64);
}

static void test_approx_log_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_LOG_F64, 0.0, DBL_MAX, 0x1p-1074, 1000000);
  expect_le("log f64", &s, BOUND_LOG_F64);
  s = sweep_f64(&C_LOG_F64, 0.5, 2.0, 1.0, 500000);
  expect_le("log f64 ~1", &s, BOUND_LOG_F64);
}

static void test_approx_tanh_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_TANH_F64, -25.0, 25.0, 0x1p-1074, 1000000);
  expect_le("tanh f64", &s, BOUND_TANH_F64);
  s = sweep_f64(&C_TANH_F64, -1.0, 1.0, 0x1p-30, 500000);
  expect_le("tanh f64 ~0", &s, BOUND_TANH_F64);
}

static void test_approx_sigmoid_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_SIGMOID_F64, -746.0, 40.0, 0x1p-1074, 1000000);
  expect_le("sigmoid f64", &s, BOUND_SIGMOID_F64);
}

static void test_approx_expm1_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_EXPM1_F64, -46.0, 709.78, 0x1p-1074, 1000000);
  expect_le("expm1 f64", &s, BOUND_EXPM1_F64);
  s = sweep_f64(&C_EXPM1_F64, -1.0, 1.0, 0x1p-60, 500000);
  expect_le("expm1 f64 ~0", &s, BOUND_EXPM1_F64);
}

static void test_approx_log1p_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_LOG1P_F64, -1.0, DBL_MAX, 0x1p-1074, 1000000);
  expect_le("log1p f64", &s, BOUND_LOG1P_F64);
  s = sweep_f64(&C_LOG1P_F64, -0.5, 1.0, 0x1p-60, 500000);
  expect_le("log1p f64 ~0", &s, BOUND_LOG1P_F64);
}

static void test_approx_erf_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_ERF_F64, -6.5, 6.5, 0x1p-1074, 1000000);
  expect_le("erf f64", &s, BOUND_ERF_F64);
}

/* Doubles nearest k pi/2 for a spread of k < 2^20 (k pi/2 rounded from 64-bit long double
** arithmetic, then neighbours). */
static stats sincos_near_multiples_f64(const case_f64 *c)
{
  stats s = { 0 };
  double in[CHUNK];
  size_t n = 0;
  for (int64_t k = 1; k < (1 << 20); k += (k < 4096 ? 1 : 37)) {
    double x0 = (double)(k * (3.14159265358979323846264338327950288L / 2));
    if (x0 > SINCOS_F64_MAX)
      break;
    in[n++] = x0;
    in[n++] = -nextafter(x0, 0.0);
    in[n++] = nextafter(x0, INFINITY);
    if (n >= CHUNK - 3) {
      check_chunk_f64(c, in, n, &s);
      n = 0;
    }
  }
  if (n)
    check_chunk_f64(c, in, n, &s);
  return s;
}

static void test_approx_sin_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_SIN_F64, -SINCOS_F64_MAX, SINCOS_F64_MAX, 0x1p-1074, 1000000);
  expect_le("sin f64", &s, BOUND_SINCOS_F64);
  s = sincos_near_multiples_f64(&C_SIN_F64);
  expect_le("sin f64 k*pi/2", &s, BOUND_SINCOS_F64);
}

static void test_approx_cos_f64_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f64(&C_COS_F64, -SINCOS_F64_MAX, SINCOS_F64_MAX, 0x1p-1074, 1000000);
  expect_le("cos f64", &s, BOUND_SINCOS_F64);
  s = sincos_near_multiples_f64(&C_COS_F64);
  expect_le("cos f64 k*pi/2", &s, BOUND_SINCOS_F64);
}

static void test_approx_sincos_f64_large(void **state)
{
  (void)state;
  for (int i = 0; i < 100000; i++) {
    double x = exp2(20.0 + 1003.0 * rng_unit());
    double sv = approx_sin_f64(x), cv = approx_cos_f64(x);
    assert_true(sv >= -1.0 && sv <= 1.0);
    assert_true(cv >= -1.0 && cv <= 1.0);
  }
}

static void test_approx_pow_f64_accuracy(void **state)
{
  (void)state;
  double a[CHUNK], b[CHUNK], out[CHUNK];
  stats s = { 0 };
  double worst_ratio = 0.0, max4 = 0.0;
  for (int rep = 0; rep < (int)(400 * density) + 1; rep++) {
    for (size_t i = 0; i < CHUNK; i++) {
      /* |a| log-uniform over all doubles; b common or uniform in [-16, 16] */
      double la = -1074.0 + 2098.0 * rng_unit();
      a[i] = exp2(la);
      double bb = 32.0 * rng_unit() - 16.0;
      uint64_t pick = rng() % 8;
      b[i] = pick == 0 ? 3.0 : pick == 1 ? -0.5 : pick == 2 ? (double)(int)bb : bb;
      if (b[i] == (double)(int64_t)b[i] && (rng() & 1))
        a[i] = -a[i];
    }
    batch_pow_f64(a, b, out, CHUNK);
    for (size_t i = 0; i < CHUNK; i++) {
      double e = ulp_err_f64(out[i], powl(a[i], b[i]));
      double one = approx_pow_f64(a[i], b[i]);
      if (memcmp(&one, &out[i], sizeof one) != 0)
        s.mismatches++;
      if (e > s.max_ulp) {
        s.max_ulp = e;
        s.worst_in = a[i];
        s.worst_in2 = b[i];
      }
      if (fabs(b[i]) <= 4.0)
        max4 = fmax(max4, e);
      worst_ratio = fmax(worst_ratio, e / pow_bound_f64(b[i]));
    }
    s.n += CHUNK;
  }
  report("pow f64", &s);
  printf("  %-16s max %.3f ulp for |b| <= 4; max err/bound(b) %.3f\n", "pow f64", max4, worst_ratio);
  assert_int_equal(s.mismatches, 0);
  assert_true(worst_ratio <= 1.0);
}

/* -- Special values ------------------------------------------------------------------ */

/* Bitwise equality, so -0 and +0 differ and any NaN equals any NaN. */
static int same_f32(float a, float b)
{
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return memcmp(&a, &b, sizeof a) == 0;
}

static int same_f64(double a, double b)
{
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return memcmp(&a, &b, sizeof a) == 0;
}

#define EQ32(got, want) assert_true(same_f32((got), (want)))
#define EQ64(got, want) assert_true(same_f64((got), (want)))

static void test_approx_exp_special(void **state)
{
  (void)state;
  const float inf = INFINITY;
  EQ32(approx_exp_f32(NAN), NAN);
  EQ32(approx_exp_f32(inf), inf);
  EQ32(approx_exp_f32(-inf), 0.0f);
  EQ32(approx_exp_f32(0.0f), 1.0f);
  EQ32(approx_exp_f32(-0.0f), 1.0f);
  EQ32(approx_exp_f32(0x1p-149f), 1.0f);                  /* denormal in */
  EQ32(approx_exp_f32(89.0f), inf);                       /* overflow */
  EQ32(approx_exp_f32(88.8f), inf);
  assert_true(approx_exp_f32(88.7f) < inf);
  EQ32(approx_exp_f32(-104.0f), 0.0f);                    /* underflow */
  EQ32(approx_exp_f32(-1e30f), 0.0f);
  EQ32(approx_exp_f32(-103.2789f), 0x1p-149f);            /* into denormals */
  float d = approx_exp_f32(-100.0f);
  assert_true(d > 0.0f && d < FLT_MIN);
  assert_true(ulp_err_f32(d, exp(-100.0)) <= 0.5 + 1e-3);
  assert_true(ulp_err_f32(approx_exp_f32(1.0f), 2.718281828459045235) <= BOUND_EXP_F32);

  EQ64(approx_exp_f64(NAN), NAN);
  EQ64(approx_exp_f64(INFINITY), INFINITY);
  EQ64(approx_exp_f64(-INFINITY), 0.0);
  EQ64(approx_exp_f64(0.0), 1.0);
  EQ64(approx_exp_f64(-0.0), 1.0);
  EQ64(approx_exp_f64(0x1p-1074), 1.0);
  EQ64(approx_exp_f64(710.0), INFINITY);
  assert_true(approx_exp_f64(709.78) < INFINITY);
  EQ64(approx_exp_f64(-746.0), 0.0);
  EQ64(approx_exp_f64(-1e300), 0.0);
  EQ64(approx_exp_f64(-745.0), 0x1p-1074);
  double dd = approx_exp_f64(-720.0);
  assert_true(dd > 0.0 && dd < DBL_MIN);
  assert_true(ulp_err_f64(approx_exp_f64(1.0), 2.718281828459045235360287L) <= BOUND_EXP_F64);
}

static void test_approx_log_special(void **state)
{
  (void)state;
  EQ32(approx_log_f32(NAN), NAN);
  EQ32(approx_log_f32(INFINITY), INFINITY);
  EQ32(approx_log_f32(-INFINITY), NAN);
  EQ32(approx_log_f32(0.0f), -INFINITY);
  EQ32(approx_log_f32(-0.0f), -INFINITY);
  EQ32(approx_log_f32(-1.0f), NAN);
  EQ32(approx_log_f32(-0x1p-149f), NAN);
  EQ32(approx_log_f32(1.0f), 0.0f);
  EQ32(approx_log_f32(2.0f), (float)0.6931471805599453094);
  assert_true(ulp_err_f32(approx_log_f32(0x1p-149f), log(0x1p-149)) <= BOUND_LOG_F32);
  assert_true(ulp_err_f32(approx_log_f32(0x1.8p-140f), log(0x1.8p-140)) <= BOUND_LOG_F32);
  assert_true(ulp_err_f32(approx_log_f32(FLT_MAX), log(FLT_MAX)) <= BOUND_LOG_F32);

  EQ64(approx_log_f64(NAN), NAN);
  EQ64(approx_log_f64(INFINITY), INFINITY);
  EQ64(approx_log_f64(-INFINITY), NAN);
  EQ64(approx_log_f64(0.0), -INFINITY);
  EQ64(approx_log_f64(-0.0), -INFINITY);
  EQ64(approx_log_f64(-1.0), NAN);
  EQ64(approx_log_f64(1.0), 0.0);
  EQ64(approx_log_f64(2.0), 0.6931471805599453094);
  assert_true(ulp_err_f64(approx_log_f64(0x1p-1074), logl(0x1p-1074L)) <= BOUND_LOG_F64);
  assert_true(ulp_err_f64(approx_log_f64(DBL_MAX), logl(DBL_MAX)) <= BOUND_LOG_F64);
}

static void test_approx_tanh_special(void **state)
{
  (void)state;
  EQ32(approx_tanh_f32(NAN), NAN);
  EQ32(approx_tanh_f32(INFINITY), 1.0f);
  EQ32(approx_tanh_f32(-INFINITY), -1.0f);
  EQ32(approx_tanh_f32(0.0f), 0.0f);
  EQ32(approx_tanh_f32(-0.0f), -0.0f);
  EQ32(approx_tanh_f32(0x1p-149f), 0x1p-149f);
  EQ32(approx_tanh_f32(-0x1p-130f), -0x1p-130f);
  /* saturation: exactly +-1 from where tanh rounds to 1 (9.0109...) on */
  for (float x = 9.02f; x < 1e6f; x *= 1.37f) {
    EQ32(approx_tanh_f32(x), 1.0f);
    EQ32(approx_tanh_f32(-x), -1.0f);
  }
  EQ32(approx_tanh_f32(FLT_MAX), 1.0f);
  for (float x = 0.0f; x < 12.0f; x += 0.001f)          /* |tanh| <= 1, odd */
    assert_true(approx_tanh_f32(x) <= 1.0f && approx_tanh_f32(-x) == -approx_tanh_f32(x));

  EQ64(approx_tanh_f64(NAN), NAN);
  EQ64(approx_tanh_f64(INFINITY), 1.0);
  EQ64(approx_tanh_f64(-INFINITY), -1.0);
  EQ64(approx_tanh_f64(0.0), 0.0);
  EQ64(approx_tanh_f64(-0.0), -0.0);
  EQ64(approx_tanh_f64(0x1p-1074), 0x1p-1074);
  EQ64(approx_tanh_f64(-0x1p-1070), -0x1p-1070);
  EQ64(approx_tanh_f64(19.5), 1.0);
  EQ64(approx_tanh_f64(-30.0), -1.0);
  EQ64(approx_tanh_f64(DBL_MAX), 1.0);
}

/* GELU's error scaled by its condition (BOUND_GELU_C), over every 15th float of [-10,
** 10.5] (f32) and 2M points of [-21.1, 22] (f64), i.e. down to where the result is cut
** to -0 (checked in _special). */
static void test_approx_gelu_accuracy(void **state)
{
  (void)state;
  stats s = sweep_f32(&C_GELU_F32, -10.0f, 10.5f, 15);
  expect_le("gelu f32 /cond", &s, BOUND_GELU_C);
  s = sweep_f64(&C_GELU_F64, -21.1, 22.0, 0x1p-1074, 1000000);
  expect_le("gelu f64 /cond", &s, BOUND_GELU_C);
}

static void test_approx_gelu_special(void **state)
{
  (void)state;
  EQ32(approx_gelu_f32(NAN), NAN);
  EQ32(approx_gelu_f32(INFINITY), INFINITY);
  EQ32(approx_gelu_f32(-INFINITY), -0.0f);    /* the limit, not inf * 0 */
  EQ32(approx_gelu_f32(0.0f), 0.0f);
  EQ32(approx_gelu_f32(-0.0f), -0.0f);
  EQ32(approx_gelu_f32(-10.1f), -0.0f);      /* below 7e-38: cut to -0 */
  EQ32(approx_gelu_f32(10.0f), 10.0f);
  EQ32(approx_gelu_f32(FLT_MAX), FLT_MAX);
  EQ32(approx_gelu_f32(0x1p-148f), 0x1p-149f);   /* x / 2 near 0, exactly */
  float t = approx_gelu_f32(-9.9f);                     /* still a value, ~1e-36 */
  assert_true(t < 0.0f && t > -1e-35f);
  assert_true(ulp_err_f32(t, ref_gelu(-9.9f)) <= BOUND_GELU_C * gelu_cond(-9.9f));

  EQ64(approx_gelu_f64(NAN), NAN);
  EQ64(approx_gelu_f64(INFINITY), INFINITY);
  EQ64(approx_gelu_f64(-INFINITY), -0.0);
  EQ64(approx_gelu_f64(0.0), 0.0);
  EQ64(approx_gelu_f64(-0.0), -0.0);
  EQ64(approx_gelu_f64(-21.3), -0.0);
  EQ64(approx_gelu_f64(30.0), 30.0);
  EQ64(approx_gelu_f64(DBL_MAX), DBL_MAX);
}

static void test_approx_sigmoid_special(void **state)
{
  (void)state;
  EQ32(approx_sigmoid_f32(NAN), NAN);
  EQ32(approx_sigmoid_f32(-INFINITY), 0.0f);
  EQ32(approx_sigmoid_f32(INFINITY), 1.0f);
  EQ32(approx_sigmoid_f32(0.0f), 0.5f);
  EQ32(approx_sigmoid_f32(-0.0f), 0.5f);
  EQ32(approx_sigmoid_f32(0x1p-149f), 0.5f);
  EQ32(approx_sigmoid_f32(20.0f), 1.0f);
  EQ32(approx_sigmoid_f32(-200.0f), 0.0f);
  float d = approx_sigmoid_f32(-95.0f);                   /* denormal tail */
  assert_true(d > 0.0f && d < FLT_MIN);
  assert_true(ulp_err_f32(d, ref_sigmoid(-95.0)) <= BOUND_SIGMOID_F32);

  EQ64(approx_sigmoid_f64(NAN), NAN);
  EQ64(approx_sigmoid_f64(-INFINITY), 0.0);
  EQ64(approx_sigmoid_f64(INFINITY), 1.0);
  EQ64(approx_sigmoid_f64(0.0), 0.5);
  EQ64(approx_sigmoid_f64(40.0), 1.0);
  EQ64(approx_sigmoid_f64(-800.0), 0.0);
  double dd = approx_sigmoid_f64(-720.0);
  assert_true(dd > 0.0 && dd < DBL_MIN);
}

static void test_approx_sincos_special(void **state)
{
  (void)state;
  EQ32(approx_sin_f32(NAN), NAN);
  EQ32(approx_sin_f32(INFINITY), NAN);
  EQ32(approx_sin_f32(-INFINITY), NAN);
  EQ32(approx_cos_f32(NAN), NAN);
  EQ32(approx_cos_f32(INFINITY), NAN);
  EQ32(approx_sin_f32(0.0f), 0.0f);
  EQ32(approx_sin_f32(-0.0f), -0.0f);
  EQ32(approx_cos_f32(0.0f), 1.0f);
  EQ32(approx_cos_f32(-0.0f), 1.0f);
  EQ32(approx_sin_f32(0x1p-149f), 0x1p-149f);
  EQ32(approx_sin_f32(-0x1p-130f), -0x1p-130f);
  EQ32(approx_cos_f32(0x1p-149f), 1.0f);
  /* large-ish arguments inside the documented range */
  static const float big[] = { 100.0f, 1000.0f, 1e4f, 12000.0f, 12867.0f, -9999.5f,
                               252.898208f, 4.71238899f };
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    assert_true(ulp_err_f32(approx_sin_f32(big[i]), sin(big[i])) <= BOUND_SINCOS_F32);
    assert_true(ulp_err_f32(approx_cos_f32(big[i]), cos(big[i])) <= BOUND_SINCOS_F32);
  }
  /* never NaN for finite input, even far outside the range */
  assert_false(isnan(approx_sin_f32(FLT_MAX)));
  assert_false(isnan(approx_cos_f32(-FLT_MAX)));
  assert_false(isnan(approx_sin_f32(1e20f)));

  EQ64(approx_sin_f64(NAN), NAN);
  EQ64(approx_sin_f64(INFINITY), NAN);
  EQ64(approx_cos_f64(-INFINITY), NAN);
  EQ64(approx_sin_f64(0.0), 0.0);
  EQ64(approx_sin_f64(-0.0), -0.0);
  EQ64(approx_cos_f64(-0.0), 1.0);
  EQ64(approx_sin_f64(0x1p-1074), 0x1p-1074);
  EQ64(approx_cos_f64(0x1p-1074), 1.0);
  static const double bigd[] = { 1e4, 1e5, 1e6, 1.6e6, -123456.789, 1.0e22 / 1e16 };
  for (size_t i = 0; i < sizeof bigd / sizeof bigd[0]; i++) {
    assert_true(ulp_err_f64(approx_sin_f64(bigd[i]), sinl(bigd[i])) <= BOUND_SINCOS_F64);
    assert_true(ulp_err_f64(approx_cos_f64(bigd[i]), cosl(bigd[i])) <= BOUND_SINCOS_F64);
  }
  assert_false(isnan(approx_sin_f64(DBL_MAX)));
  assert_false(isnan(approx_cos_f64(1e300)));
}

static void test_approx_pow_special(void **state)
{
  (void)state;
  const float inf = INFINITY, nan = NAN;
  /* pow(x, +-0) = 1 and pow(1, y) = 1, even for NaN */
  EQ32(approx_pow_f32(nan, 0.0f), 1.0f);
  EQ32(approx_pow_f32(-inf, -0.0f), 1.0f);
  EQ32(approx_pow_f32(1.0f, nan), 1.0f);
  EQ32(approx_pow_f32(1.0f, inf), 1.0f);
  EQ32(approx_pow_f32(-1.0f, inf), 1.0f);
  EQ32(approx_pow_f32(-1.0f, -inf), 1.0f);
  EQ32(approx_pow_f32(nan, 1.0f), nan);
  EQ32(approx_pow_f32(2.0f, nan), nan);
  /* zero base */
  EQ32(approx_pow_f32(0.0f, -1.0f), inf);
  EQ32(approx_pow_f32(-0.0f, -1.0f), -inf);
  EQ32(approx_pow_f32(-0.0f, -3.0f), -inf);
  EQ32(approx_pow_f32(-0.0f, -2.0f), inf);
  EQ32(approx_pow_f32(-0.0f, -0.5f), inf);
  EQ32(approx_pow_f32(0.0f, -inf), inf);
  EQ32(approx_pow_f32(-0.0f, 3.0f), -0.0f);
  EQ32(approx_pow_f32(-0.0f, 2.0f), 0.0f);
  EQ32(approx_pow_f32(-0.0f, 0.5f), 0.0f);
  EQ32(approx_pow_f32(0.0f, 2.5f), 0.0f);
  EQ32(approx_pow_f32(0.0f, inf), 0.0f);
  /* infinite exponent */
  EQ32(approx_pow_f32(0.5f, inf), 0.0f);
  EQ32(approx_pow_f32(-0.5f, inf), 0.0f);
  EQ32(approx_pow_f32(2.0f, inf), inf);
  EQ32(approx_pow_f32(-2.0f, inf), inf);
  EQ32(approx_pow_f32(0.5f, -inf), inf);
  EQ32(approx_pow_f32(2.0f, -inf), 0.0f);
  /* infinite base */
  EQ32(approx_pow_f32(inf, 0.5f), inf);
  EQ32(approx_pow_f32(inf, -0.5f), 0.0f);
  EQ32(approx_pow_f32(-inf, 3.0f), -inf);
  EQ32(approx_pow_f32(-inf, 2.0f), inf);
  EQ32(approx_pow_f32(-inf, 0.5f), inf);
  EQ32(approx_pow_f32(-inf, -3.0f), -0.0f);
  EQ32(approx_pow_f32(-inf, -2.0f), 0.0f);
  /* negative base */
  EQ32(approx_pow_f32(-2.0f, 3.0f), -8.0f);
  EQ32(approx_pow_f32(-2.0f, 4.0f), 16.0f);
  EQ32(approx_pow_f32(-2.0f, -1.0f), -0.5f);
  EQ32(approx_pow_f32(-2.0f, 0.5f), nan);
  EQ32(approx_pow_f32(-2.0f, 1.5f), nan);
  EQ32(approx_pow_f32(-1.0f, 0x1p30f), 1.0f);             /* large even integer */
  EQ32(approx_pow_f32(-1.0f, 0x1.fffffep23f), -1.0f);     /* largest odd float */
  EQ32(approx_pow_f32(-0.5f, 0x1p23f + 1.0f), -0.0f);     /* odd, underflows */
  /* exact cases */
  EQ32(approx_pow_f32(3.0f, 2.0f), 9.0f);
  EQ32(approx_pow_f32(1.1f, 2.0f), 1.1f * 1.1f);
  assert_true(ulp_err_f32(approx_pow_f32(2.0f, 0.5f), sqrt(2.0)) <= 1.0);
  EQ32(approx_pow_f32(7.0f, 1.0f), 7.0f);
  EQ32(approx_pow_f32(3.0f, -1.0f), 1.0f / 3.0f);
  EQ32(approx_pow_f32(2.0f, 10.0f), 1024.0f);
  EQ32(approx_pow_f32(2.0f, -149.0f), 0x1p-149f);
  EQ32(approx_pow_f32(0.5f, 0.0f), 1.0f);
  /* overflow and underflow */
  EQ32(approx_pow_f32(10.0f, 39.0f), inf);
  EQ32(approx_pow_f32(-10.0f, 39.0f), -inf);
  EQ32(approx_pow_f32(10.0f, -46.0f), 0.0f);
  EQ32(approx_pow_f32(FLT_MAX, 2.0f), inf);
  EQ32(approx_pow_f32(1e30f, 1e30f), inf);
  EQ32(approx_pow_f32(1e30f, -1e30f), 0.0f);
  assert_true(ulp_err_f32(approx_pow_f32(0x1p-149f, 0.5f), sqrt(0x1p-149)) <= 1.0);
  assert_true(ulp_err_f32(approx_pow_f32(0x1p-149f, 0.25f), pow(0x1p-149, 0.25)) <= 3.0);
  assert_true(ulp_err_f32(approx_pow_f32(10000.0f, -0.25f), pow(1e4, -0.25)) <= 3.0);

  const double dinf = INFINITY, dnan = NAN;
  EQ64(approx_pow_f64(dnan, 0.0), 1.0);
  EQ64(approx_pow_f64(1.0, dnan), 1.0);
  EQ64(approx_pow_f64(-1.0, -dinf), 1.0);
  EQ64(approx_pow_f64(dnan, 2.0), dnan);
  EQ64(approx_pow_f64(-0.0, -3.0), -dinf);
  EQ64(approx_pow_f64(-0.0, -2.0), dinf);
  EQ64(approx_pow_f64(-0.0, 3.0), -0.0);
  EQ64(approx_pow_f64(-0.0, 0.5), 0.0);
  EQ64(approx_pow_f64(0.5, dinf), 0.0);
  EQ64(approx_pow_f64(0.5, -dinf), dinf);
  EQ64(approx_pow_f64(-dinf, 3.0), -dinf);
  EQ64(approx_pow_f64(-dinf, -3.0), -0.0);
  EQ64(approx_pow_f64(-dinf, 0.5), dinf);
  EQ64(approx_pow_f64(-2.0, 3.0), -8.0);
  EQ64(approx_pow_f64(-2.0, 0.5), dnan);
  EQ64(approx_pow_f64(-1.0, 0x1p60), 1.0);
  EQ64(approx_pow_f64(-1.0, 0x1.fffffffffffffp52), -1.0);
  assert_true(ulp_err_f64(approx_pow_f64(2.0, 0.5), sqrtl(2.0L)) <= 1.0);
  EQ64(approx_pow_f64(1.1, 2.0), 1.1 * 1.1);
  EQ64(approx_pow_f64(3.0, -1.0), 1.0 / 3.0);
  EQ64(approx_pow_f64(2.0, -1074.0), 0x1p-1074);
  EQ64(approx_pow_f64(10.0, 309.0), dinf);
  EQ64(approx_pow_f64(10.0, -324.0), 0.0);
  EQ64(approx_pow_f64(1e300, 1e300), dinf);
}

static void test_approx_expm1_special(void **state)
{
  (void)state;
  EQ32(approx_expm1_f32(NAN), NAN);
  EQ32(approx_expm1_f32(INFINITY), INFINITY);
  EQ32(approx_expm1_f32(-INFINITY), -1.0f);
  EQ32(approx_expm1_f32(0.0f), 0.0f);
  EQ32(approx_expm1_f32(-0.0f), -0.0f);
  EQ32(approx_expm1_f32(0x1p-149f), 0x1p-149f);
  EQ32(approx_expm1_f32(-0x1p-130f), -0x1p-130f);
  EQ32(approx_expm1_f32(1e-10f), 1e-10f);
  EQ32(approx_expm1_f32(-18.0f), -1.0f);                 /* e^x below half an ulp of 1 */
  EQ32(approx_expm1_f32(-1e30f), -1.0f);
  EQ32(approx_expm1_f32(88.73f), INFINITY);               /* overflow */
  float big = approx_expm1_f32(88.72f);                   /* n = 128, still finite */
  assert_true(big < INFINITY && ulp_err_f32(big, expm1((double)88.72f)) <= BOUND_EXPM1_F32);

  EQ64(approx_expm1_f64(NAN), NAN);
  EQ64(approx_expm1_f64(INFINITY), INFINITY);
  EQ64(approx_expm1_f64(-INFINITY), -1.0);
  EQ64(approx_expm1_f64(0.0), 0.0);
  EQ64(approx_expm1_f64(-0.0), -0.0);
  EQ64(approx_expm1_f64(0x1p-1074), 0x1p-1074);
  EQ64(approx_expm1_f64(-40.0), -1.0);
  EQ64(approx_expm1_f64(709.8), INFINITY);
  double bigd = approx_expm1_f64(709.78);
  assert_true(bigd < INFINITY && ulp_err_f64(bigd, expm1l((long double)709.78)) <= BOUND_EXPM1_F64);
}

static void test_approx_log1p_special(void **state)
{
  (void)state;
  EQ32(approx_log1p_f32(NAN), NAN);
  EQ32(approx_log1p_f32(INFINITY), INFINITY);
  EQ32(approx_log1p_f32(-INFINITY), NAN);
  EQ32(approx_log1p_f32(-1.0f), -INFINITY);
  EQ32(approx_log1p_f32(-1.5f), NAN);
  EQ32(approx_log1p_f32(0.0f), 0.0f);
  EQ32(approx_log1p_f32(-0.0f), -0.0f);
  EQ32(approx_log1p_f32(0x1p-149f), 0x1p-149f);
  EQ32(approx_log1p_f32(-0x1p-130f), -0x1p-130f);
  EQ32(approx_log1p_f32(1e-10f), 1e-10f);
  assert_true(ulp_err_f32(approx_log1p_f32(FLT_MAX), log(FLT_MAX)) <= BOUND_LOG1P_F32);
  assert_true(ulp_err_f32(approx_log1p_f32(-1.0f + 0x1p-24f), log(0x1p-24)) <=
              BOUND_LOG1P_F32);

  EQ64(approx_log1p_f64(NAN), NAN);
  EQ64(approx_log1p_f64(INFINITY), INFINITY);
  EQ64(approx_log1p_f64(-1.0), -INFINITY);
  EQ64(approx_log1p_f64(-2.0), NAN);
  EQ64(approx_log1p_f64(-0.0), -0.0);
  EQ64(approx_log1p_f64(0x1p-1074), 0x1p-1074);
  assert_true(ulp_err_f64(approx_log1p_f64(DBL_MAX), logl(DBL_MAX)) <= BOUND_LOG1P_F64);
}

static void test_approx_erf_special(void **state)
{
  (void)state;
  EQ32(approx_erf_f32(NAN), NAN);
  EQ32(approx_erf_f32(INFINITY), 1.0f);
  EQ32(approx_erf_f32(-INFINITY), -1.0f);
  EQ32(approx_erf_f32(0.0f), 0.0f);
  EQ32(approx_erf_f32(-0.0f), -0.0f);
  EQ32(approx_erf_f32(4.0f), 1.0f);
  EQ32(approx_erf_f32(-100.0f), -1.0f);
  EQ32(approx_erf_f32(FLT_MAX), 1.0f);
  assert_true(ulp_err_f32(approx_erf_f32(0x1p-140f), erf(0x1p-140)) <= BOUND_ERF_F32);
  for (float x = 0.0f; x < 5.0f; x += 0.001f)           /* odd, |erf| <= 1 */
    assert_true(approx_erf_f32(x) <= 1.0f && approx_erf_f32(-x) == -approx_erf_f32(x));

  EQ64(approx_erf_f64(NAN), NAN);
  EQ64(approx_erf_f64(INFINITY), 1.0);
  EQ64(approx_erf_f64(-INFINITY), -1.0);
  EQ64(approx_erf_f64(-0.0), -0.0);
  EQ64(approx_erf_f64(6.0), 1.0);
  EQ64(approx_erf_f64(-1e300), -1.0);
  assert_true(ulp_err_f64(approx_erf_f64(0x1p-1060), erfl(0x1p-1060L)) <= BOUND_ERF_F64);
}

/* _Generic wrappers pick the dtype's function. */
static void test_approx_generic(void **state)
{
  (void)state;
  float xf = 0.75f;
  double xd = 0.75;
  EQ32(APPROX_EXP(xf), approx_exp_f32(xf));
  EQ64(APPROX_EXP(xd), approx_exp_f64(xd));
  EQ32(APPROX_LOG(xf), approx_log_f32(xf));
  EQ64(APPROX_LOG(xd), approx_log_f64(xd));
  EQ32(APPROX_TANH(xf), approx_tanh_f32(xf));
  EQ64(APPROX_TANH(xd), approx_tanh_f64(xd));
  EQ32(APPROX_SIGMOID(xf), approx_sigmoid_f32(xf));
  EQ64(APPROX_SIGMOID(xd), approx_sigmoid_f64(xd));
  EQ32(APPROX_SIN(xf), approx_sin_f32(xf));
  EQ64(APPROX_SIN(xd), approx_sin_f64(xd));
  EQ32(APPROX_COS(xf), approx_cos_f32(xf));
  EQ64(APPROX_COS(xd), approx_cos_f64(xd));
  EQ32(APPROX_POW(xf, 3.0f), approx_pow_f32(xf, 3.0f));
  EQ64(APPROX_POW(xd, 3.0), approx_pow_f64(xd, 3.0));
  EQ32(APPROX_EXPM1(xf), approx_expm1_f32(xf));
  EQ64(APPROX_EXPM1(xd), approx_expm1_f64(xd));
  EQ32(APPROX_LOG1P(xf), approx_log1p_f32(xf));
  EQ64(APPROX_LOG1P(xd), approx_log1p_f64(xd));
  EQ32(APPROX_ERF(xf), approx_erf_f32(xf));
  EQ64(APPROX_ERF(xd), approx_erf_f64(xd));
  assert_int_equal(sizeof(APPROX_EXP(xf)), sizeof(float));
  assert_int_equal(sizeof(APPROX_EXP(xd)), sizeof(double));
}

int main(void)
{
  const char *d = getenv("TC_APPROX_DENSITY");
#ifdef __SANITIZE_ADDRESS__
  density = 0.125;
#endif
  if (d && atof(d) > 0.0)
    density = atof(d);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_approx_exp_special),
    cmocka_unit_test(test_approx_log_special),
    cmocka_unit_test(test_approx_tanh_special),
    cmocka_unit_test(test_approx_sigmoid_special),
    cmocka_unit_test(test_approx_gelu_special),
    cmocka_unit_test(test_approx_gelu_accuracy),
    cmocka_unit_test(test_approx_sincos_special),
    cmocka_unit_test(test_approx_pow_special),
    cmocka_unit_test(test_approx_expm1_special),
    cmocka_unit_test(test_approx_log1p_special),
    cmocka_unit_test(test_approx_erf_special),
    cmocka_unit_test(test_approx_generic),
    cmocka_unit_test(test_approx_nan_in_nan_out),
    cmocka_unit_test(test_approx_exp_f32_accuracy),
    cmocka_unit_test(test_approx_log_f32_accuracy),
    cmocka_unit_test(test_approx_tanh_f32_accuracy),
    cmocka_unit_test(test_approx_sigmoid_f32_accuracy),
    cmocka_unit_test(test_approx_sin_f32_accuracy),
    cmocka_unit_test(test_approx_cos_f32_accuracy),
    cmocka_unit_test(test_approx_sincos_f32_large),
    cmocka_unit_test(test_approx_pow_f32_accuracy),
    cmocka_unit_test(test_approx_expm1_f32_accuracy),
    cmocka_unit_test(test_approx_log1p_f32_accuracy),
    cmocka_unit_test(test_approx_erf_f32_accuracy),
    cmocka_unit_test(test_approx_exp_f64_accuracy),
    cmocka_unit_test(test_approx_log_f64_accuracy),
    cmocka_unit_test(test_approx_tanh_f64_accuracy),
    cmocka_unit_test(test_approx_sigmoid_f64_accuracy),
    cmocka_unit_test(test_approx_sin_f64_accuracy),
    cmocka_unit_test(test_approx_cos_f64_accuracy),
    cmocka_unit_test(test_approx_sincos_f64_large),
    cmocka_unit_test(test_approx_pow_f64_accuracy),
    cmocka_unit_test(test_approx_expm1_f64_accuracy),
    cmocka_unit_test(test_approx_log1p_f64_accuracy),
    cmocka_unit_test(test_approx_erf_f64_accuracy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
