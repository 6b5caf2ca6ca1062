/*
** test_jit.c -- src/jit_cpu: kernels built by hand in the kernel IR, compiled
** with libgccjit, must give BITWISE the results of tc's eager kernels (and of
** approx.h called directly): transcendentals over the whole f32/f64 range,
** GELU over contiguous/strided/broadcast inputs, casts, integer wraparound,
** comparisons, softmax and row sums in row, column and split mode,
** independent of the thread count; plus dynamic kernels, the .so path,
** fault injection, a check that the hot loops vectorize, and what happens
** without libgccjit.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit_cpu.h"
#include "eager.h"
#include "approx.h"

/* -- Helpers ------------------------------------------------------------------ */

/* Kernel keys for artifacts (any 32 hex digits will do here). */
#define KEY_A "0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210"

static kir_kernel *knew(kir_kind kind, int ndim, const int64_t *size,
                        int64_t row_len)
{
  kir_kernel *k = calloc(1, sizeof *k);
  assert_non_null(k);
  k->kind = (uint8_t)kind;
  k->ndim = ndim;
  for (int d = 0; d < ndim; d++)
    k->size[d] = size[d];
  k->row_len = row_len;
  return k;
}

/* strides: ndim (+1 for ROWS) entries */
static int kbuf(kir_kernel *k, kir_buf_role role, tc_dtype dt,
                const int64_t *strides)
{
  int b = k->nbufs++;
  k->buf[b].role = (uint8_t)role;
  k->buf[b].dtype = (uint8_t)dt;
  int n = k->ndim + (k->kind == KIR_ROWS);
  for (int d = 0; d < n; d++)
    k->buf[b].stride[d] = strides[d];
  return b;
}

static int kpass(kir_kernel *k, kir_pass_kind kind, kir_red red, int out,
                 int v)
{
  assert_true(k->npasses < KIR_MAX_PASSES);
  int p = k->npasses++;
  k->pass[p] = (kir_pass){ (uint8_t)kind, (uint8_t)red, (int16_t)out, v, -1 };
  return p;
}

static int E(kir_kernel *k, kir_opcode op, tc_dtype dt, int a, int b)
{
  int i = kir_emit(k, op, dt, a, b, -1);
  assert_true(i >= 0);
  return i;
}

static jcpu_kernel *compile(const kir_kernel *k)
{
  jcpu_kernel *jk = NULL;
  char why[256] = "";
  jcpu_status st = jcpu_compile(k, &jk, why, sizeof why);
  if (st != JCPU_OK)
    fail_msg("compile failed (%d): %s", st, why);
  return jk;
}

static void launch(const jcpu_kernel *jk, const kir_kernel *k, void *b0,
                   void *b1, void *b2, const double *s, const int64_t *dims)
{
  char *bufs[3] = { b0, b1, b2 };
  assert_int_equal(jcpu_launch(jk, k, bufs, s, dims), 0);
}

/* Bitwise equality of n elements of size esz, reporting the first miss. */
static void same_bits(const void *got, const void *want, int64_t n,
                      size_t esz, const char *what)
{
  if (memcmp(got, want, (size_t)n * esz) == 0)
    return;
  for (int64_t i = 0; i < n; i++) {
    uint64_t g = 0, w = 0;
    memcpy(&g, (const char *)got + i * (int64_t)esz, esz);
    memcpy(&w, (const char *)want + i * (int64_t)esz, esz);
    if (g != w)
      fail_msg("%s: element %lld differs: got 0x%llx want 0x%llx", what,
               (long long)i, (unsigned long long)g, (unsigned long long)w);
  }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)   /* xorshift64* */
{
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}
static double urand(double lo, double hi)
{
  return lo + (hi - lo) * (double)(rnd() >> 11) * 0x1p-53;
}

static float f32_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static double f64_bits(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

/* A tensor's contents, contiguous, as a malloc'd copy. */
static void *contents(tc_tensor *t)
{
  assert_non_null(t);
  size_t n = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  assert_int_equal(tc_copy_to(t, p, n), 0);
  return p;
}

static tc_tensor *from(tc_dtype dt, int ndim, const int64_t *shape,
                       const void *data)
{
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= shape[d];
  tc_tensor *t = tc_from_data(dt, ndim, shape, data,
                              (size_t)n * tc_dtype_size(dt));
  assert_non_null(t);
  return t;
}

/* -- (a) Transcendentals vs approx.h ------------------------------------------ */

#define NT (1 << 20)

static const uint32_t special32[] = {
  0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
  0x7f800001, 0x7fc12345, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff,
  0x00800000, 0x80800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000,
  0x3f000000, 0xbf000000, 0x40000000, 0xc0000000,
};
static const float value32[] = {
  88.7f, 89.0f, 89.1f, -103.9f, -104.0f, -104.1f, 9.5f, 9.49f, 9.51f, 22.0f,
  1.5707964f, 3.1415927f, -3.1415927f, 12867.0f, -12867.0f, 1e10f, -1e10f,
  0x1p23f, 0x1p24f, 0x1p23f + 1, 3.0f, -3.0f, 0.25f, 1e-30f, -1e-30f,
  130.0f, -152.0f, 0x1p-126f, 0x1p-127f, 0.9999999f, 1.0000001f,
};
static const uint64_t special64[] = {
  0, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
  0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull,
  0x7ff8000000012345ull, 1, 0x8000000000000001ull, 0x000fffffffffffffull,
  0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
  0x3ff0000000000000ull, 0xbff0000000000000ull, 0x3fe0000000000000ull,
};
static const double value64[] = {
  709.7, 710.0, 710.1, -745.9, -746.0, -746.1, 22.0, 21.99, 22.01, 9.5,
  1.5707963267948966, 3.141592653589793, 1.647e6, -1.647e6, 1e300, -1e300,
  0x1p52, 0x1p53, 0x1p52 + 1, 3.0, -3.0, 0.25, 1e-300, 1026.0, -1078.0,
  0x1p-1022, 0x1p-1023, 0.9999999999999999, 1.0000000000000002, 2.0, -2.0,
};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* x: specials, then a golden-ratio sweep over all bit patterns (every
** class: NaNs, denormals, huge), then dense ranges where the functions
** do their work. `second` makes a different mix for pow's exponent. */
static void fill_f32(float *x, int n, bool second)
{
  int i = 0;
  for (int s = 0; s < COUNT(special32); s++)
    x[i++] = f32_bits(special32[s]);
  for (int s = 0; s < COUNT(value32); s++) {
    x[i++] = value32[s];
    x[i++] = -value32[s];
  }
  for (; i < n / 2; i++)
    x[i] = f32_bits((uint32_t)((uint64_t)i * 0x9e3779b1u +
                               (second ? 0x12345u : 0)));
  for (; i < n; i++) {
    uint64_t r = rnd() % 4;
    if (second && r == 0)
      x[i] = (float)((int)(rnd() % 41) - 20) * (rnd() % 2 ? 1.0f : 0.5f);
    else
      x[i] = (float)(r == 1 ? urand(-1e4, 1e4) : urand(-30, 30));
  }
}

static void fill_f64(double *x, int n, bool second)
{
  int i = 0;
  for (int s = 0; s < COUNT(special64); s++)
    x[i++] = f64_bits(special64[s]);
  for (int s = 0; s < COUNT(value64); s++) {
    x[i++] = value64[s];
    x[i++] = -value64[s];
  }
  for (; i < n / 2; i++)
    x[i] = f64_bits((uint64_t)i * 0x9e3779b97f4a7c15ull +
                    (second ? 0x123456789ull : 0));
  for (; i < n; i++) {
    uint64_t r = rnd() % 4;
    if (second && r == 0)
      x[i] = (double)((int)(rnd() % 41) - 20) * (rnd() % 2 ? 1.0 : 0.5);
    else
      x[i] = r == 1 ? urand(-1e6, 1e6) : urand(-50, 50);
  }
}

typedef struct {
  kir_opcode op;
  tc_dtype dt;
} tcase;

static float ref32(kir_opcode op, float a, float b)
{
  switch (op) {
  case KOP_EXP: return approx_exp_f32(a);
  case KOP_LOG: return approx_log_f32(a);
  case KOP_TANH: return approx_tanh_f32(a);
  case KOP_SIGMOID: return approx_sigmoid_f32(a);
  case KOP_GELU: return approx_gelu_f32(a);
  case KOP_EXPM1: return approx_expm1_f32(a);
  case KOP_LOG1P: return approx_log1p_f32(a);
  case KOP_ERF: return approx_erf_f32(a);
  case KOP_SIN: return approx_sin_f32(a);
  case KOP_COS: return approx_cos_f32(a);
  default: return approx_pow_f32(a, b);
  }
}

static double ref64(kir_opcode op, double a, double b)
{
  switch (op) {
  case KOP_EXP: return approx_exp_f64(a);
  case KOP_LOG: return approx_log_f64(a);
  case KOP_TANH: return approx_tanh_f64(a);
  case KOP_SIGMOID: return approx_sigmoid_f64(a);
  case KOP_GELU: return approx_gelu_f64(a);
  case KOP_EXPM1: return approx_expm1_f64(a);
  case KOP_LOG1P: return approx_log1p_f64(a);
  case KOP_ERF: return approx_erf_f64(a);
  case KOP_SIN: return approx_sin_f64(a);
  case KOP_COS: return approx_cos_f64(a);
  default: return approx_pow_f64(a, b);
  }
}

static void test_transcendental(void **state)
{
  const tcase *c = *state;
  bool pow2 = c->op == KOP_POW, f32 = c->dt == TC_F32;
  size_t esz = f32 ? 4 : 8;
  int64_t n = NT;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, c->dt, (int64_t[]){ 1 }));
  int b = pow2 ? kir_load(k, kbuf(k, KIR_IN, c->dt, (int64_t[]){ 1 })) : -1;
  int out = kbuf(k, KIR_OUT, c->dt, (int64_t[]){ 1 });
  kpass(k, KIR_PASS_STORE, 0, out, E(k, c->op, c->dt, a, b));
  jcpu_kernel *jk = compile(k);
  void *x = malloc(n * esz), *y = malloc(n * esz), *got = malloc(n * esz),
       *want = malloc(n * esz);
  assert_true(x && y && got && want);
  if (f32) {
    fill_f32(x, (int)n, false);
    fill_f32(y, (int)n, true);
    for (int64_t i = 0; i < n; i++)
      ((float *)want)[i] = ref32(c->op, ((float *)x)[i], ((float *)y)[i]);
  } else {
    fill_f64(x, (int)n, false);
    fill_f64(y, (int)n, true);
    for (int64_t i = 0; i < n; i++)
      ((double *)want)[i] = ref64(c->op, ((double *)x)[i], ((double *)y)[i]);
  }
  if (pow2)
    launch(jk, k, x, y, got, NULL, NULL);
  else
    launch(jk, k, x, got, NULL, NULL, NULL);
  /* pow(NaN, NaN) returns a + b: x86 keeps the payload of the first
  ** operand, and which one is first is the compiler's choice (it differs
  ** even between two builds of approx.h). Only there, accept any NaN. */
  for (int64_t i = 0; pow2 && i < n; i++) {
    bool both = f32 ? isnan(((float *)x)[i]) && isnan(((float *)y)[i])
                    : isnan(((double *)x)[i]) && isnan(((double *)y)[i]);
    if (both)
      memcpy((char *)got + i * (int64_t)esz, (char *)want + i * (int64_t)esz,
             esz);
  }
  char what[64];
  snprintf(what, sizeof what, "%s %s", kir_opname[c->op],
           tc_dtype_name(c->dt));
  same_bits(got, want, n, esz, what);
  free(x); free(y); free(got); free(want);
  jcpu_free(jk);
  free(k);
}

/* -- (b) GELU, as ops.def writes it (one primitive) --------------------------- */

static int emit_gelu(kir_kernel *k, tc_dtype dt, int a)
{
  return E(k, KOP_GELU, dt, a, -1);
}

/* MAP [m, n] GELU: input strides `ist` over the data of `src`, contiguous
** output; compared with tc_gelu(view). */
static void gelu_case(tc_dtype dt, tc_tensor *src, tc_tensor *view,
                      const int64_t *ist, bool dynamic, const char *what)
{
  int64_t shape[2] = { tc_size(view, 0), tc_size(view, 1) };
  kir_kernel *k = knew(KIR_MAP, 2, shape, 0);
  k->dynamic = dynamic;
  int x = kir_load(k, kbuf(k, KIR_IN, dt, ist));
  int out = kbuf(k, KIR_OUT, dt, (int64_t[]){ shape[1], 1 });
  kpass(k, KIR_PASS_STORE, 0, out, emit_gelu(k, dt, x));
  jcpu_kernel *jk = compile(k);
  int64_t n = shape[0] * shape[1];
  size_t esz = tc_dtype_size(dt);
  void *got = malloc((size_t)n * esz);
  int64_t dims[64];
  kir_dyn_fill(k, dims);
  launch(jk, k, tc_data(src), got, NULL, NULL, dynamic ? dims : NULL);
  tc_tensor *ref = tc_gelu(view);
  void *want = contents(ref);
  same_bits(got, want, n, esz, what);
  tc_release(ref);
  free(got); free(want);
  jcpu_free(jk);
  free(k);
}

static tc_tensor *randn_with_specials(tc_dtype dt, int64_t m, int64_t n,
                                      uint64_t seed)
{
  tc_tensor *t = tc_randn(dt, 2, (int64_t[]){ m, n }, seed);
  assert_non_null(t);
  tc_tensor *s = tc_mul_scalar(t, 3.0);
  tc_release(t);
  void *p = tc_data(s);
  double sp[] = { NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e30, 5.0 };
  for (int i = 0; i < COUNT(sp) && i < m * n; i++) {
    if (dt == TC_F32)
      ((float *)p)[i * 7] = (float)sp[i];
    else
      ((double *)p)[i * 7] = sp[i];
  }
  return s;
}

static void test_gelu_layouts(void **state)
{
  (void)state;
  for (int f = 0; f < 2; f++) {
    tc_dtype dt = f ? TC_F64 : TC_F32;
    tc_tensor *x = randn_with_specials(dt, 256, 1000, 7);
    gelu_case(dt, x, x, (int64_t[]){ 1000, 1 }, false, "gelu contiguous");
    tc_tensor *xt = tc_transpose(x, 0, 1);   /* [1000, 256], strides 1, 1000 */
    gelu_case(dt, x, xt, (int64_t[]){ 1, 1000 }, false, "gelu transposed");
    gelu_case(dt, x, xt, (int64_t[]){ 1, 1000 }, true,
              "gelu transposed dynamic");
    tc_tensor *row = tc_randn(dt, 2, (int64_t[]){ 1, 1000 }, 8);
    tc_tensor *rb = tc_expand(row, 2, (int64_t[]){ 256, 1000 });
    gelu_case(dt, row, rb, (int64_t[]){ 0, 1 }, false, "gelu broadcast row");
    tc_tensor *col = tc_randn(dt, 2, (int64_t[]){ 256, 1 }, 9);
    tc_tensor *cb = tc_expand(col, 2, (int64_t[]){ 256, 1000 });
    gelu_case(dt, col, cb, (int64_t[]){ 1, 0 }, false, "gelu broadcast col");
    tc_release(cb); tc_release(col); tc_release(rb); tc_release(row);
    tc_release(xt); tc_release(x);
  }
}

/* -- (c) Casts, wraparound, comparisons, selects ------------------------------- */

#define NC 4096
static const tc_dtype dts[] = { TC_BOOL, TC_I32, TC_I64, TC_F32, TC_F64 };

/* Interesting values of dtype dt, then random ones. */
static void fill_typed(tc_dtype dt, void *p, int n)
{
  static const double fv[] = {
    NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5,
    -1.5, 2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0,
    2147483520.0, 4294967296.0, 9.2233720368547758e18, -9.2233720368547758e18,
    9.2233720368547748e18, 1e30, -1e30, 1e300, -1e300, 3.4e38, 1e-40, 255.0,
    256.0, -1.0, 1.0,
  };
  static const int64_t iv[] = {
    0, 1, -1, 2, 255, 256, INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
    (int64_t)INT32_MIN - 1, INT64_MAX, INT64_MIN, INT64_MAX - 1,
    (int64_t)1 << 53, ((int64_t)1 << 53) + 1, 16777217, -16777217,
  };
  for (int i = 0; i < n; i++) {
    double d = i < COUNT(fv) ? fv[i] : urand(-3e9, 3e9);
    if (i >= COUNT(fv) && rnd() % 2)
      d = urand(-300, 300);
    int64_t v = i < COUNT(iv) ? iv[i] : (int64_t)rnd();
    if (i >= COUNT(iv) && rnd() % 2)
      v = (int64_t)(rnd() % 2001) - 1000;
    switch (dt) {
    case TC_BOOL: ((uint8_t *)p)[i] = (uint8_t)(rnd() % 2); break;
    case TC_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case TC_I64: ((int64_t *)p)[i] = v; break;
    case TC_F32: ((float *)p)[i] = (float)d; break;
    default: ((double *)p)[i] = d; break;
    }
  }
}

/* The conversions from sources s0 .. s1-1 to every other dtype in one
** multi-output kernel: by CAST instructions, or (by_store) by storing a
** value into a buffer of another dtype. */
static void casts(bool by_store, int s0, int s1)
{
  int64_t n = NC;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  void *src[5], *got[8], *want[8];
  int ld[5];
  char *bufs[KIR_MAX_BUFS];
  for (int s = s0; s < s1; s++) {
    bufs[k->nbufs] = src[s] = malloc(NC * 8);
    ld[s] = kir_load(k, kbuf(k, KIR_IN, dts[s], (int64_t[]){ 1 }));
    fill_typed(dts[s], src[s], NC);
  }
  int pairs = 0;
  for (int s = s0; s < s1; s++)
    for (int d = 0; d < 5; d++) {
      if (s == d)
        continue;
      bufs[k->nbufs] = got[pairs] = calloc(NC, 8);
      int out = kbuf(k, KIR_OUT, dts[d], (int64_t[]){ 1 });
      int v = by_store ? ld[s] : kir_cast(k, dts[d], ld[s]);
      kpass(k, KIR_PASS_STORE, 0, out, v);
      want[pairs] = calloc(NC, 8);
      eager_convert(dts[d], want[pairs], 1, dts[s], src[s], 1, NC);
      pairs++;
    }
  jcpu_kernel *jk = compile(k);
  assert_int_equal(jcpu_launch(jk, k, bufs, NULL, NULL), 0);
  int p = 0;
  for (int s = s0; s < s1; s++)
    for (int d = 0; d < 5; d++) {
      if (s == d)
        continue;
      char what[64];
      snprintf(what, sizeof what, "%s %s -> %s", by_store ? "store" : "cast",
               tc_dtype_name(dts[s]), tc_dtype_name(dts[d]));
      same_bits(got[p], want[p], NC, tc_dtype_size(dts[d]), what);
      free(got[p]);
      free(want[p]);
      p++;
    }
  for (int s = s0; s < s1; s++)
    free(src[s]);
  jcpu_free(jk);
  free(k);
}

static void test_casts(void **state)
{
  (void)state;
  for (int by_store = 0; by_store < 2; by_store++) {
    casts(by_store, 0, 2);   /* 2 sources x 4 targets = 8 passes */
    casts(by_store, 2, 4);
    casts(by_store, 4, 5);
  }
}

typedef tc_tensor *(*binop)(tc_tensor *, tc_tensor *);
typedef tc_tensor *(*unop)(tc_tensor *);

/* Integer add/sub/mul/neg/abs wrap, maximum/minimum, in i32 and i64, vs
** the eager ops. */
static void test_int_wrap(void **state)
{
  (void)state;
  for (int w = 0; w < 2; w++) {
    tc_dtype dt = w ? TC_I64 : TC_I32;
    size_t esz = tc_dtype_size(dt);
    int64_t n = NC;
    kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
    int a = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ 1 }));
    int b = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ 1 }));
    const kir_opcode ops[] = { KOP_ADD, KOP_SUB, KOP_MUL, KOP_NEG, KOP_ABS,
                               KOP_MAXIMUM, KOP_MINIMUM };
    binop bf[] = { tc_add, tc_sub, tc_mul, NULL, NULL, tc_maximum,
                   tc_minimum };
    unop uf[] = { NULL, NULL, NULL, tc_neg, tc_abs, NULL, NULL };
    for (int o = 0; o < 7; o++) {
      int out = kbuf(k, KIR_OUT, dt, (int64_t[]){ 1 });
      kpass(k, KIR_PASS_STORE, 0, out, E(k, ops[o], dt, a, uf[o] ? -1 : b));
    }
    jcpu_kernel *jk = compile(k);
    void *x = malloc(NC * esz), *y = malloc(NC * esz);
    fill_typed(dt, x, NC);
    fill_typed(dt, y, NC);
    char *bufs[9] = { x, y };
    void *got[7];
    for (int o = 0; o < 7; o++)
      bufs[2 + o] = got[o] = malloc(NC * esz);
    assert_int_equal(jcpu_launch(jk, k, bufs, NULL, NULL), 0);
    tc_tensor *tx = from(dt, 1, &n, x), *ty = from(dt, 1, &n, y);
    for (int o = 0; o < 7; o++) {
      tc_tensor *r = uf[o] ? uf[o](tx) : bf[o](tx, ty);
      void *want = contents(r);
      char what[64];
      snprintf(what, sizeof what, "%s %s", kir_opname[ops[o]],
               tc_dtype_name(dt));
      same_bits(got[o], want, n, esz, what);
      free(want);
      tc_release(r);
      free(got[o]);
    }
    tc_release(tx); tc_release(ty);
    free(x); free(y);
    jcpu_free(jk);
    free(k);
  }
}

/* Float comparisons into bool (NaN included), maximum/minimum/abs with
** NaN and -0, SEL, DIV, SQRT and a SCALAR operand, vs the eager ops.
** Two kernels: 8 passes at most each. */
static void float_prims(tc_dtype dt, bool second)
{
  size_t esz = tc_dtype_size(dt);
  int64_t n = NC;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ 1 }));
  int b = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ 1 }));
  int c = kir_load(k, kbuf(k, KIR_IN, TC_BOOL, (int64_t[]){ 1 }));
  const kir_opcode ops[] = { KOP_EQ, KOP_NE, KOP_LT, KOP_LE, KOP_GT, KOP_GE,
                             KOP_MAXIMUM, KOP_MINIMUM,
                             KOP_DIV, KOP_ABS, KOP_SQRT, KOP_NEG,
                             KOP_SEL, KOP_ADD };
  binop bf[] = { tc_eq, tc_ne, tc_lt, tc_le, tc_gt, tc_ge, tc_maximum,
                 tc_minimum, tc_div, NULL, NULL, NULL, NULL, NULL };
  unop uf[] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                tc_abs, tc_sqrt, tc_neg, NULL, NULL };
  int o0 = second ? 8 : 0, o1 = second ? 14 : 8;
  for (int o = o0; o < o1; o++) {
    bool cmp = o < 6;
    int v;
    if (ops[o] == KOP_SEL)              /* where(c, a, b) */
      v = kir_emit(k, KOP_SEL, dt, c, a, b);
    else if (ops[o] == KOP_ADD)         /* a + s0 */
      v = E(k, KOP_ADD, dt, a, kir_scalar(k, dt, 0));
    else
      v = E(k, ops[o], cmp ? TC_BOOL : dt, a, uf[o] ? -1 : b);
    kpass(k, KIR_PASS_STORE, 0,
          kbuf(k, KIR_OUT, cmp ? TC_BOOL : dt, (int64_t[]){ 1 }), v);
  }
  jcpu_kernel *jk = compile(k);
  void *x = malloc(NC * esz), *y = malloc(NC * esz), *cb = malloc(NC);
  fill_typed(dt, x, NC);
  fill_typed(dt, y, NC);
  fill_typed(TC_BOOL, cb, NC);
  memcpy(y, x, 64 * esz);   /* some equal pairs, so EQ/LE/GE see true */
  char *bufs[KIR_MAX_BUFS] = { x, y, cb };
  void *got[14];
  for (int o = o0; o < o1; o++)
    bufs[3 + o - o0] = got[o] = calloc(NC, esz);
  double s0 = 0.1;
  assert_int_equal(jcpu_launch(jk, k, bufs, &s0, NULL), 0);
  tc_tensor *tx = from(dt, 1, &n, x), *ty = from(dt, 1, &n, y),
            *tcb = from(TC_BOOL, 1, &n, cb);
  for (int o = o0; o < o1; o++) {
    tc_tensor *r = bf[o] ? bf[o](tx, ty) : uf[o] ? uf[o](tx)
                   : ops[o] == KOP_SEL ? tc_where(tcb, tx, ty)
                   : tc_add_scalar(tx, s0);
    void *want = contents(r);
    char what[64];
    snprintf(what, sizeof what, "%s %s", kir_opname[ops[o]],
             tc_dtype_name(dt));
    same_bits(got[o], want, n, o < 6 ? 1 : esz, what);
    free(want);
    tc_release(r);
    free(got[o]);
  }
  tc_release(tx); tc_release(ty); tc_release(tcb);
  free(x); free(y); free(cb);
  jcpu_free(jk);
  free(k);
}

static void test_float_prims(void **state)
{
  (void)state;
  float_prims(TC_F32, false);
  float_prims(TC_F32, true);
  float_prims(TC_F64, false);
  float_prims(TC_F64, true);
}

/* -- (d) Rows: softmax, row sums, max ----------------------------------------- */

/* softmax over the last dim of a contiguous [rows, n] tensor:
** m = max x; e = exp(x - m); s = sum e; y = e * (1 / s), the order
** composite.c computes it in. */
static kir_kernel *softmax_kernel(tc_dtype dt, int64_t rows, int64_t n,
                                  bool dynamic)
{
  kir_kernel *k = knew(KIR_ROWS, 1, &rows, n);
  k->dynamic = dynamic;
  int x = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ n, 1 }));
  int out = kbuf(k, KIR_OUT, dt, (int64_t[]){ n, 1 });
  int p0 = kpass(k, KIR_PASS_REDUCE, KIR_RED_MAX, -1, x);
  int e = E(k, KOP_EXP, dt, E(k, KOP_SUB, dt, x, kir_rowvar(k, p0)), -1);
  int p1 = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, e);
  int rs = E(k, KOP_DIV, dt, kir_const(k, dt, 1.0), kir_rowvar(k, p1));
  kpass(k, KIR_PASS_STORE, 0, out, E(k, KOP_MUL, dt, e, rs));
  return k;
}

/* Run a compiled softmax (jk for k) on [rows, n] and compare with
** tc_softmax. dims: launch a dynamic kernel at this shape. */
static void softmax_check(const jcpu_kernel *jk, const kir_kernel *k,
                          tc_dtype dt, int64_t rows, int64_t n,
                          const char *what)
{
  /* specials (NaN, inf) only land in row 0; a single row gets none, or
  ** the whole row would be NaN and prove nothing */
  tc_tensor *x = rows > 1 ? randn_with_specials(dt, rows, n,
                                                (uint64_t)(rows * n))
                          : tc_randn(dt, 2, (int64_t[]){ rows, n }, 5);
  if (rows * n > 20) {   /* a row with a NaN */
    void *p = tc_data(x);
    for (int64_t i = 0; i < n && rows > 2; i++) {
      if (dt == TC_F32)
        ((float *)p)[2 * n + i] = i == n / 2 ? NAN : ((float *)p)[2 * n + i];
      else
        ((double *)p)[2 * n + i] = i == n / 2 ? NAN : ((double *)p)[2 * n + i];
    }
  }
  size_t esz = tc_dtype_size(dt);
  void *got = malloc((size_t)(rows * n) * esz + 1);
  int64_t dims[8];
  if (k->dynamic) {
    kir_kernel at = *k;
    at.size[0] = rows;
    at.row_len = n;
    at.buf[0].stride[0] = at.buf[1].stride[0] = n;
    kir_dyn_fill(&at, dims);
  }
  launch(jk, k, tc_data(x), got, NULL, NULL, k->dynamic ? dims : NULL);
  tc_tensor *ref = tc_softmax(x, -1);
  void *want = contents(ref);
  same_bits(got, want, rows * n, esz, what);
  free(got); free(want);
  tc_release(ref); tc_release(x);
}

static void softmax_case(tc_dtype dt, int64_t rows, int64_t n,
                         const char *what)
{
  kir_kernel *k = softmax_kernel(dt, rows, n, false);
  jcpu_kernel *jk = compile(k);
  softmax_check(jk, k, dt, rows, n, what);
  jcpu_free(jk);
  free(k);
}

static void test_softmax(void **state)
{
  (void)state;
  softmax_case(TC_F32, 64, 1000, "softmax 64x1000");
  softmax_case(TC_F32, 1, 3 * 4096 + 17, "softmax split 1x12305");
  softmax_case(TC_F64, 5, 11 * 4096 + 3, "softmax f64 5x45059 (12 chunks)");
  softmax_case(TC_F32, 1, 7 * 4096, "softmax split 1x28672 (7 chunks)");
}

/* sum/max/min over the last dim with keepdim: STORE_ROW of the rowvar.
** An i32 sum accumulates in i64 (the eager INT rule): a CAST feeds it. */
static void rowred_case(tc_dtype dt, kir_red red, int64_t rows, int64_t n)
{
  kir_kernel *k = knew(KIR_ROWS, 1, &rows, n);
  tc_dtype rdt = dt == TC_I32 && red == KIR_RED_SUM ? TC_I64 : dt;
  int x = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ n, 1 }));
  int out = kbuf(k, KIR_OUT, rdt, (int64_t[]){ 1, 0 });
  int p = kpass(k, KIR_PASS_REDUCE, red, -1, kir_cast(k, rdt, x));
  kpass(k, KIR_PASS_STORE_ROW, 0, out, kir_rowvar(k, p));
  jcpu_kernel *jk = compile(k);
  size_t esz = tc_dtype_size(dt), resz = tc_dtype_size(rdt);
  void *xd = malloc((size_t)(rows * n) * esz + 1);
  if (dt == TC_I64) {
    for (int64_t i = 0; i < rows * n; i++)   /* wraps when summed */
      ((int64_t *)xd)[i] = (int64_t)rnd();
  } else if (dt == TC_I32) {
    for (int64_t i = 0; i < rows * n; i++)
      ((int32_t *)xd)[i] = (int32_t)rnd();
  } else {
    /* chunk partials of very different magnitudes and alternating signs,
    ** so they cancel and any other combine order rounds differently */
    for (int64_t i = 0; i < rows * n; i++) {
      int64_t c = (i % n) / 4096;
      ((float *)xd)[i] = (float)urand(0.5, 1) * (c % 2 ? -1.0f : 1.0f) *
                         (float)(1 << ((c * 5) % 17));
    }
    if (rows > 1 && n > 10)
      ((float *)xd)[n + 3] = NAN;
  }
  void *got = malloc((size_t)rows * resz);
  launch(jk, k, xd, got, NULL, NULL, NULL);
  tc_tensor *t = from(dt, 2, (int64_t[]){ rows, n }, xd);
  tc_tensor *r = red == KIR_RED_SUM ? tc_sum(t, -1, true)
                 : red == KIR_RED_MAX ? tc_max(t, -1, true)
                                      : tc_min(t, -1, true);
  assert_int_equal(tc_dtype_of(r), rdt);
  void *want = contents(r);
  char what[64];
  snprintf(what, sizeof what, "row %s %s %lldx%lld",
           red == KIR_RED_SUM ? "sum" : red == KIR_RED_MAX ? "max" : "min",
           tc_dtype_name(dt), (long long)rows, (long long)n);
  same_bits(got, want, rows, resz, what);
  free(want); free(got); free(xd);
  tc_release(r); tc_release(t);
  jcpu_free(jk);
  free(k);
}

static void test_row_reductions(void **state)
{
  (void)state;
  rowred_case(TC_F32, KIR_RED_SUM, 37, 10001);
  rowred_case(TC_F32, KIR_RED_SUM, 1, 100003);
  rowred_case(TC_I64, KIR_RED_SUM, 37, 10001);
  rowred_case(TC_I64, KIR_RED_SUM, 1, 100003);
  rowred_case(TC_F32, KIR_RED_MAX, 16, 5000);
  rowred_case(TC_F32, KIR_RED_SUM, 1, 0);
  rowred_case(TC_F32, KIR_RED_SUM, 3, 0);
  rowred_case(TC_I32, KIR_RED_SUM, 9, 20000);
  rowred_case(TC_I32, KIR_RED_MIN, 9, 20000);
  rowred_case(TC_I64, KIR_RED_MAX, 1, 30000);
  rowred_case(TC_F32, KIR_RED_SUM, 3, 61 * 4096 + 5);   /* 62 chunks */
  rowred_case(TC_F32, KIR_RED_SUM, 1, 61 * 4096 + 5);
}

/* Rows that are not contiguous: softmax over dim 0 of [n, m] (row axis
** stride m), and over the last dim of a permuted 3-D view (two outer dims,
** carried), static and dynamic, vs tc_softmax on the same views. */
static void strided_softmax(tc_tensor *src, tc_tensor *view, int dim,
                            int nouter, const int64_t *osize, int64_t n,
                            const int64_t *ist, const int64_t *ost,
                            bool dynamic, const char *what)
{
  kir_kernel *k = knew(KIR_ROWS, nouter, osize, n);
  k->dynamic = dynamic;
  int x = kir_load(k, kbuf(k, KIR_IN, TC_F32, ist));
  int out = kbuf(k, KIR_OUT, TC_F32, ost);
  int p0 = kpass(k, KIR_PASS_REDUCE, KIR_RED_MAX, -1, x);
  int e = E(k, KOP_EXP, TC_F32, E(k, KOP_SUB, TC_F32, x, kir_rowvar(k, p0)),
            -1);
  int p1 = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, e);
  int rs = E(k, KOP_DIV, TC_F32, kir_const(k, TC_F32, 1.0),
             kir_rowvar(k, p1));
  kpass(k, KIR_PASS_STORE, 0, out, E(k, KOP_MUL, TC_F32, e, rs));
  jcpu_kernel *jk = compile(k);
  int64_t total = tc_numel(view);
  float *got = malloc((size_t)total * 4);
  int64_t dims[64];
  kir_dyn_fill(k, dims);
  launch(jk, k, tc_data(src), got, NULL, NULL, dynamic ? dims : NULL);
  tc_tensor *ref = tc_softmax(view, dim);
  float *want = contents(ref);
  same_bits(got, want, total, 4, what);
  free(got); free(want);
  tc_release(ref);
  jcpu_free(jk);
  free(k);
}

static void test_softmax_strided(void **state)
{
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    /* dim 0 of [5000, 12]: 12 rows of 5000 (2 chunks), row stride 12; the
    ** result is laid out as the input: out strides (1, 12) */
    tc_tensor *x = randn_with_specials(TC_F32, 5000, 12, 11);
    strided_softmax(x, x, 0, 1, (int64_t[]){ 12 }, 5000,
                    (int64_t[]){ 1, 12 }, (int64_t[]){ 1, 12 }, dyn,
                    dyn ? "softmax dim 0 dynamic" : "softmax dim 0");
    tc_release(x);
    /* [6, 7, 300] viewed as [7, 6, 300]: outer strides (300, 2100) */
    tc_tensor *y = tc_randn(TC_F32, 3, (int64_t[]){ 6, 7, 300 }, 12);
    tc_tensor *v = tc_transpose(y, 0, 1);
    strided_softmax(y, v, -1, 2, (int64_t[]){ 7, 6 }, 300,
                    (int64_t[]){ 300, 2100, 1 }, (int64_t[]){ 1800, 300, 1 },
                    dyn, dyn ? "softmax permuted dynamic" : "softmax permuted");
    tc_release(v);
    tc_release(y);
  }
}

/* The row-mode entry over arbitrary [lo, hi) ranges (split points inside
** rows, as the thread pool may choose) gives the same result as one range:
** out = x * 2 + y on [3, 5, 7001], x broadcast over dim 1, y transposed, so
** no dims collapse. Called through dlopen, as the disk cache will. */
static void test_map_ranges(void **state)
{
  (void)state;
  int64_t shape[3] = { 3, 5, 7001 }, n = 3 * 5 * 7001;
  for (int dyn = 0; dyn < 2; dyn++) {
    kir_kernel *k = knew(KIR_MAP, 3, shape, 0);
    k->dynamic = dyn;
    int x = kir_load(k, kbuf(k, KIR_IN, TC_F64, (int64_t[]){ 7001, 0, 1 }));
    int y = kir_load(k, kbuf(k, KIR_IN, TC_F64, (int64_t[]){ 1, 3, 15 }));
    int out = kbuf(k, KIR_OUT, TC_F64, (int64_t[]){ 5 * 7001, 7001, 1 });
    kpass(k, KIR_PASS_STORE, 0, out,
          E(k, KOP_ADD, TC_F64,
            E(k, KOP_MUL, TC_F64, x, kir_const(k, TC_F64, 2)), y));
    char dir[] = "/tmp/tc-test-jit-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.so", dir);
    jcpu_kernel *jk = NULL;
    char why[256];
    assert_int_equal(jcpu_compile_to_file(k, KEY_A, path, &jk, why, sizeof why),
                     JCPU_OK);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    kir_fn fn;
    void *sym = dlsym(h, "main");
    assert_non_null(sym);
    memcpy(&fn, &sym, sizeof fn);
    tc_tensor *tx = tc_randn(TC_F64, 2, (int64_t[]){ 3, 7001 }, 21);
    tc_tensor *ty = tc_randn(TC_F64, 3, (int64_t[]){ 7001, 5, 3 }, 22);
    double *got = calloc((size_t)n, 8);
    char *bufs[3] = { tc_data(tx), tc_data(ty), (char *)got };
    int64_t dims[64];
    kir_dyn_fill(k, dims);
    const int64_t cut[] = { 0, 1, 6999, 7002, 7002, 40000, 70004, n - 3, n };
    for (int c = 0; c + 1 < COUNT(cut); c++)
      if (cut[c] < cut[c + 1])
        fn(bufs, NULL, dyn ? dims : NULL, cut[c], cut[c + 1]);
    /* eager: x[:, None, :] * 2 + y.permute(2, 1, 0) */
    tc_tensor *xv = tc_reshape(tx, 3, (int64_t[]){ 3, 1, 7001 });
    tc_tensor *xe = tc_expand(xv, 3, shape);
    tc_tensor *yt = tc_transpose(ty, 0, 2);
    tc_tensor *m = tc_mul_scalar(xe, 2.0);
    tc_tensor *r = tc_add(m, yt);
    double *want = contents(r);
    same_bits(got, want, n, 8, dyn ? "map ranges dynamic" : "map ranges");
    free(want); free(got);
    tc_release(r); tc_release(m); tc_release(yt); tc_release(xe);
    tc_release(xv); tc_release(tx); tc_release(ty);
    dlclose(h);
    jcpu_free(jk);
    unlink(path);
    rmdir(dir);
    free(k);
  }
}

/* -- Thread independence: the same kernels in child processes ------------------ */

static uint64_t fnv(const void *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
  return h;
}

/* Child mode: hashes of a split-mode softmax, a multi-row sum and a GELU
** map, computed with whatever TC_THREADS says. */
static int child_hashes(void)
{
  int64_t n = 50 * 4096 + 123, rows = 1;
  kir_kernel *k = softmax_kernel(TC_F32, rows, n, false);
  jcpu_kernel *jk = NULL;
  char why[256];
  if (jcpu_compile(k, &jk, why, sizeof why) != JCPU_OK)
    return 1;
  int64_t m = 1 << 20;   /* the gelu below; more than n */
  float *x = malloc((size_t)m * 4), *y = malloc((size_t)m * 4);
  for (int64_t i = 0; i < m; i++)
    x[i] = (float)urand(-5, 5);
  char *bufs[2] = { (char *)x, (char *)y };
  jcpu_launch(jk, k, bufs, NULL, NULL);
  printf("softmax %016llx\n", (unsigned long long)fnv(y, (size_t)n * 4));
  jcpu_free(jk);
  free(k);
  /* gelu map over 1M */
  k = knew(KIR_MAP, 1, &m, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1 }));
  kpass(k, KIR_PASS_STORE, 0, kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 }),
        emit_gelu(k, TC_F32, a));
  if (jcpu_compile(k, &jk, why, sizeof why) != JCPU_OK)
    return 1;
  jcpu_launch(jk, k, bufs, NULL, NULL);
  printf("gelu %016llx\n", (unsigned long long)fnv(y, (size_t)m * 4));
  printf("threads %d\n", tc_threads());
  jcpu_free(jk);
  free(k);
  free(x); free(y);
  return 0;
}

static void run_child(const char *threads, char *out, size_t len)
{
  setenv("TC_THREADS", threads, 1);
  char self[4096], cmd[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = '\0';
  snprintf(cmd, sizeof cmd, "'%s' --hashes", self);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t got = fread(out, 1, len - 1, p);
  out[got] = '\0';
  assert_int_equal(pclose(p), 0);
}

/* Child mode, run with TC_GCCJIT naming a library that does not exist:
** what the module says and does without libgccjit, one line each. */
static int child_no_gccjit(void)
{
  char why[512] = "";
  printf("available %d\n", jcpu_available(why, sizeof why));
  printf("why %s\n", why);
  printf("version %s\n", jcpu_compiler_version());
  int64_t n = 8;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1 }));
  kpass(k, KIR_PASS_STORE, 0, kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 }),
        emit_gelu(k, TC_F32, a));
  jcpu_kernel *jk = NULL;
  char reason[512] = "";
  jcpu_status st = jcpu_compile(k, &jk, reason, sizeof reason);
  printf("compile %d %s\n", st == JCPU_E_COMPILE && !jk, reason);
  free(k);
  return 0;
}

/* Without libgccjit (TC_GCCJIT names a missing library) nothing compiles,
** each compile says why, and the key's compiler part matches no stored
** kernel. The API suites' -nogccjit runs check that programs in compile
** mode still compute the right values then. */
static void test_without_libgccjit(void **state)
{
  (void)state;
  char self[4096], cmd[4400], out[2048];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = '\0';
  snprintf(cmd, sizeof cmd, "TC_GCCJIT=libtc-no-such-gccjit.so.0 '%s' "
           "--no-gccjit", self);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t got = fread(out, 1, sizeof out - 1, p);
  out[got] = '\0';
  assert_int_equal(pclose(p), 0);
  const char *why = "libgccjit not available (libtc-no-such-gccjit.so.0: "
                    "cannot open shared object file";
  char want[1024];
  snprintf(want, sizeof want, "available 0\nwhy %s", why);
  assert_non_null(strstr(out, want));
  assert_non_null(strstr(out, "version libgccjit none\n"));
  snprintf(want, sizeof want, "compile 1 %s", why);
  assert_non_null(strstr(out, want));
}

static void test_threads_independent(void **state)
{
  (void)state;
  char one[512], two[512];
  const char *old = getenv("TC_THREADS");
  char *saved = old ? strdup(old) : NULL;
  run_child("1", one, sizeof one);
  run_child("2", two, sizeof two);
  if (saved) {
    setenv("TC_THREADS", saved, 1);
    free(saved);
  } else {
    unsetenv("TC_THREADS");
  }
  assert_non_null(strstr(one, "threads 1"));
  assert_non_null(strstr(two, "threads 2"));
  /* everything but the thread line is equal */
  *strstr(one, "threads") = '\0';
  *strstr(two, "threads") = '\0';
  assert_string_equal(one, two);
}

/* -- (e) Dynamic kernels ------------------------------------------------------- */

static void test_dynamic(void **state)
{
  (void)state;
  /* compiled for one shape, run at others: row mode and split mode */
  kir_kernel *k = softmax_kernel(TC_F32, 64, 1000, true);
  jcpu_kernel *jk = compile(k);
  softmax_check(jk, k, TC_F32, 64, 1000, "dynamic softmax 64x1000");
  softmax_check(jk, k, TC_F32, 33, 777, "dynamic softmax 33x777");
  softmax_check(jk, k, TC_F32, 3, 9000, "dynamic softmax 3x9000");
  softmax_check(jk, k, TC_F32, 1, 3 * 4096 + 17, "dynamic softmax split");
  jcpu_free(jk);
  free(k);
}

/* -- (f) Compile to a file, load it back --------------------------------------- */

static void test_compile_to_file(void **state)
{
  (void)state;
  char dir[] = "/tmp/tc-test-jit-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/k.so", dir);
  kir_kernel *k = softmax_kernel(TC_F32, 1, 3 * 4096 + 17, false);
  jcpu_kernel *a = NULL, *b = NULL;
  char why[256] = "";
  assert_int_equal(jcpu_compile_to_file(k, KEY_A, path, &a, why, sizeof why),
                   JCPU_OK);
  assert_non_null(jcpu_source(a));
  assert_true(jcpu_last_compile_ms(a) > 0);
  assert_int_equal(jcpu_load(k, KEY_A, path, &b, why, sizeof why), JCPU_OK);
  assert_null(jcpu_source(b));
  softmax_check(a, k, TC_F32, 1, 3 * 4096 + 17, "to_file softmax");
  softmax_check(b, k, TC_F32, 1, 3 * 4096 + 17, "loaded softmax");
  jcpu_free(a);
  jcpu_free(b);
  /* the artifact names its key: another key is refused before any entry
  ** point is resolved */
  b = (jcpu_kernel *)k;
  assert_int_equal(jcpu_load(k, KEY_B, path, &b, why, sizeof why),
                   JCPU_E_LOAD);
  assert_null(b);
  assert_string_equal(why, "artifact is for another kernel");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  const char *key = dlsym(h, JCPU_KEY_SYMBOL);
  assert_non_null(key);
  assert_string_equal(key, JCPU_KEY_MARKER KEY_A);
  dlclose(h);
  /* a missing file and a file without the entries fail cleanly */
  snprintf(path, sizeof path, "%s/missing.so", dir);
  assert_int_equal(jcpu_load(k, KEY_A, path, &b, why, sizeof why), JCPU_E_LOAD);
  assert_null(b);
  assert_non_null(strstr(why, "dlopen"));
  snprintf(path, sizeof path, "%s/k.so", dir);
  kir_kernel *rows = softmax_kernel(TC_F32, 4, 100, false);   /* wants main */
  assert_int_equal(jcpu_load(rows, KEY_A, path, &b, why, sizeof why), JCPU_E_LOAD);
  assert_null(b);
  assert_non_null(strstr(why, "main"));
  unlink(path);
  rmdir(dir);
  free(rows);
  free(k);
}

/* -- (g) Failures ---------------------------------------------------------------- */

static void test_failures(void **state)
{
  (void)state;
  int64_t n = 100;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1 }));
  kpass(k, KIR_PASS_STORE, 0, kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 }),
        E(k, KOP_EXP, TC_F32, a, -1));
  jcpu_kernel *jk = (jcpu_kernel *)k;   /* must be overwritten with NULL */
  char why[256] = "";
  jcpu_fail_next(1);
  assert_int_equal(jcpu_compile(k, &jk, why, sizeof why), JCPU_E_COMPILE);
  assert_null(jk);
  assert_string_equal(why, "injected compile failure");
  jcpu_fail_next(1);
  assert_int_equal(jcpu_compile_to_file(k, KEY_A, "/nonexistent/x.so", &jk, why,
                                        sizeof why), JCPU_E_COMPILE);
  assert_null(jk);
  jk = compile(k);   /* the injection is used up */
  jcpu_free(jk);
  /* an unwritable path is a compile error with libgccjit's reason */
  assert_int_equal(jcpu_compile_to_file(k, KEY_A, "/nonexistent/dir/x.so", &jk,
                                        why, sizeof why), JCPU_E_COMPILE);
  assert_null(jk);
  assert_true(strlen(why) > 0);
  assert_null(strchr(why, '\n'));
  /* integer division is not emitted */
  kir_kernel *d = knew(KIR_MAP, 1, &n, 0);
  int x = kir_load(d, kbuf(d, KIR_IN, TC_I32, (int64_t[]){ 1 }));
  kpass(d, KIR_PASS_STORE, 0, kbuf(d, KIR_OUT, TC_I32, (int64_t[]){ 1 }),
        E(d, KOP_DIV, TC_I32, x, x));
  assert_int_equal(jcpu_compile(d, &jk, why, sizeof why),
                   JCPU_E_UNSUPPORTED);
  assert_string_equal(why, "unsupported kernel: %1: DIV of i32");
  /* a pass that reads its own result */
  kir_kernel *r = knew(KIR_ROWS, 1, &n, 10);
  int y = kir_load(r, kbuf(r, KIR_IN, TC_F32, (int64_t[]){ 10, 1 }));
  int p = kpass(r, KIR_PASS_REDUCE, KIR_RED_SUM, -1, y);
  r->pass[p].value = E(r, KOP_ADD, TC_F32, y, kir_rowvar(r, p));
  assert_int_equal(jcpu_compile(r, &jk, why, sizeof why), JCPU_E_UNSUPPORTED);
  assert_non_null(strstr(why, "pass0 uses the result of pass0"));
  free(r);
  free(d);
  free(k);
}

/* -- (h) Vectorization ------------------------------------------------------------ */

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return strdup("");
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strdup(buf);
}

static void test_vectorized(void **state)
{
  (void)state;
  char path[] = "/tmp/tc-test-vec-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  jcpu_set_vec_report(path);
  int64_t n = 1 << 24;
  kir_kernel *k = knew(KIR_MAP, 1, &n, 0);
  int a = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1 }));
  kpass(k, KIR_PASS_STORE, 0, kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 }),
        emit_gelu(k, TC_F32, a));
  jcpu_kernel *jk = compile(k);
  char *rep = slurp(path);
  if (!strstr(rep, "main.map:1:1: optimized: loop vectorized"))
    fail_msg("gelu map loop not vectorized:\n%s", rep);
  free(rep);
  jcpu_free(jk);
  free(k);
  assert_int_equal(truncate(path, 0), 0);
  /* Several outputs over many inputs (a backward pass beside its forward,
  ** a 40-term sum): GCC needs a run-time overlap check per stored buffer
  ** and buffer it accesses, past its default limit of 10. */
  static const int ninputs[] = { 5, 40 };
  for (int c = 0; c < 2; c++) {
    int nin = ninputs[c];
    assert_int_equal(truncate(path, 0), 0);
    k = knew(KIR_MAP, 1, &n, 0);
    int sum = -1;
    for (int i = 0; i < nin; i++) {
      int x = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1 }));
      sum = sum < 0 ? x : E(k, KOP_MUL, TC_F32, E(k, KOP_ADD, TC_F32, sum, x), x);
    }
    for (int o = 0; o < 3; o++) {
      sum = E(k, KOP_MUL, TC_F32, sum, sum);
      kpass(k, KIR_PASS_STORE, 0, kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 }),
            sum);
    }
    jk = compile(k);
    rep = slurp(path);
    if (!strstr(rep, "main.map:1:1: optimized: loop vectorized"))
      fail_msg("map loop of %d inputs and 3 outputs not vectorized:\n%s",
               nin, rep);
    free(rep);
    jcpu_free(jk);
    free(k);
  }
  assert_int_equal(truncate(path, 0), 0);
  k = softmax_kernel(TC_F32, 64, 1000, false);
  jk = compile(k);
  rep = slurp(path);
  /* the halving's levels too: written out in place, max's were scalar
  ** compares and branches */
  const char *want[] = { "main.p0.lanes:1:1: optimized: loop vectorized",
                         "main.p1.lanes:1:1: optimized: loop vectorized",
                         "main.p2.store:1:1: optimized: loop vectorized",
                         "main.p0.halve8:1:1: optimized: loop vectorized",
                         "main.p1.halve8:1:1: optimized: loop vectorized",
                         "main.p0.halve4:1:1: optimized: loop vectorized" };
  for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++)
    if (!strstr(rep, want[i]))
      fail_msg("missing \"%s\" in:\n%s", want[i], rep);
  free(rep);
  jcpu_free(jk);
  free(k);
  /* column mode: the loop over a block's rows (one option file per
  ** process: -fopt-info's file cannot change once set) */
  assert_int_equal(truncate(path, 0), 0);
  int64_t c = 512;
  k = knew(KIR_ROWS, 1, &c, 64);
  int x = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1, 512 }));
  int p = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, x);
  kpass(k, KIR_PASS_STORE_ROW, 0,
        kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, 0 }), kir_rowvar(k, p));
  jk = compile(k);
  rep = slurp(path);
  if (!strstr(rep, "main.p0.cols:1:1: optimized: loop vectorized"))
    fail_msg("column loop not vectorized:\n%s", rep);
  free(rep);
  jcpu_free(jk);
  free(k);
  jcpu_set_vec_report(NULL);
  unlink(path);
}

/* -- Column mode: rows side by side ------------------------------------------
** A reduction over a dim that is not innermost reads its rows with a stride
** and its adjacent rows contiguously: the kernel takes blocks of rows side
** by side (emit.c, column mode). Each row must still reduce in the
** canonical order: checked against the order computed here in f32
** plain C and bitwise against eager, over block cuts inside a
** block, across an outer dim, multi-chunk rows, several passes (a hoisted
** mean), NaN, integers, and arbitrary [lo, hi) ranges. */

/* The canonical order (ARCHITECTURE.md) of n f32 values x[i * stride],
** written out plainly: lanes i % 16 per chunk of 4096, lanes halved,
** chunk partials pairwise by levels with an odd one carried up. */
static float canon_sum(const float *x, int64_t n, int64_t stride)
{
  int64_t m = n ? (n + 4095) / 4096 : 1;
  float *p = malloc((size_t)m * sizeof *p);
  assert_non_null(p);
  for (int64_t c = 0; c < m; c++) {
    float lane[16] = { 0 };
    for (int64_t i = c * 4096; i < n && i < (c + 1) * 4096; i++)
      lane[(i - c * 4096) % 16] += x[i * stride];
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; l++)
        lane[l] += lane[l + w];
    p[c] = lane[0];
  }
  while (m > 1) {
    for (int64_t i = 0; i < m / 2; i++)
      p[i] = p[2 * i] + p[2 * i + 1];
    if (m % 2)
      p[m / 2] = p[m - 1];
    m = (m + 1) / 2;
  }
  float r = p[0];
  free(p);
  return r;
}

/* sum over dim 1 of [outer, n, c] f32 (outer 1: dim 0 of [n, c]) as a
** column kernel, run over the ranges cut by `cuts` (0-terminated, ends
** at rows), vs canon_sum and eager tc_sum. */
static void colsum_case(int64_t outer, int64_t n, int64_t c,
                        const int64_t *cuts)
{
  int64_t size[2] = { outer, c }, rows = outer * c;
  kir_kernel *k = knew(KIR_ROWS, 2, size, n);
  int x = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ n * c, 1, c }));
  int out = kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ c, 1, 0 });
  int p = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, x);
  kpass(k, KIR_PASS_STORE_ROW, 0, out, kir_rowvar(k, p));
  jcpu_kernel *jk = compile(k);
  tc_tensor *t = tc_randn(TC_F32, 3, (int64_t[]){ outer, n, c }, 41);
  float *xd = tc_data(t);
  for (int64_t i = 0; i < outer * n * c; i += 97)   /* cancellation */
    xd[i] *= 1e6f;
  float *got = malloc((size_t)rows * 4 + 4);
  char *bufs[2] = { (char *)xd, (char *)got };
  int64_t lo = 0;
  for (int i = 0; cuts && cuts[i]; i++) {
    jcpu_run_points(jk, bufs, NULL, NULL, lo, cuts[i]);
    lo = cuts[i];
  }
  jcpu_run_points(jk, bufs, NULL, NULL, lo, rows);
  char what[96];
  snprintf(what, sizeof what, "column sum [%lld, %lld, %lld]",
           (long long)outer, (long long)n, (long long)c);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < c; j++) {
      float want = canon_sum(xd + o * n * c + j, n, c);
      if (memcmp(&got[o * c + j], &want, 4) != 0)
        fail_msg("%s: row (%lld, %lld): got %a, canonical order %a", what,
                 (long long)o, (long long)j, (double)got[o * c + j],
                 (double)want);
    }
  tc_tensor *r = tc_sum(t, 1, false);
  float *want = contents(r);
  same_bits(got, want, rows, 4, what);
  free(want); free(got);
  tc_release(r); tc_release(t);
  jcpu_free(jk);
  free(k);
}

/* max/min/sum of another dtype over dim 0 of [n, c], one NaN (max, min
** propagate it), vs eager. An i32 sum accumulates in i64 through a CAST. */
static void colred_case(tc_dtype dt, kir_red red, int64_t n, int64_t c)
{
  tc_dtype rdt = dt == TC_I32 && red == KIR_RED_SUM ? TC_I64 : dt;
  kir_kernel *k = knew(KIR_ROWS, 1, &c, n);
  int x = kir_load(k, kbuf(k, KIR_IN, dt, (int64_t[]){ 1, c }));
  int out = kbuf(k, KIR_OUT, rdt, (int64_t[]){ 1, 0 });
  int p = kpass(k, KIR_PASS_REDUCE, red, -1, kir_cast(k, rdt, x));
  kpass(k, KIR_PASS_STORE_ROW, 0, out, kir_rowvar(k, p));
  jcpu_kernel *jk = compile(k);
  tc_tensor *t0 = tc_randn(TC_F64, 2, (int64_t[]){ n, c }, 43);
  tc_tensor *t1 = tc_mul_scalar(t0, dt == TC_I32 ? 1e9 : 1.0);
  tc_tensor *t = tc_cast(t1, dt);
  assert_non_null(t);
  if (dt == TC_F32)
    ((float *)tc_data(t))[3 * c + 5] = NAN;
  if (dt == TC_F64)
    ((double *)tc_data(t))[7 * c + 9] = NAN;
  void *got = malloc((size_t)c * 8);
  launch(jk, k, tc_data(t), got, NULL, NULL, NULL);
  tc_tensor *r = red == KIR_RED_SUM ? tc_sum(t, 0, false)
                 : red == KIR_RED_MAX ? tc_max(t, 0, false)
                                      : tc_min(t, 0, false);
  assert_int_equal(tc_dtype_of(r), rdt);
  void *want = contents(r);
  char what[64];
  snprintf(what, sizeof what, "column %s %s %lldx%lld",
           red == KIR_RED_SUM ? "sum" : red == KIR_RED_MAX ? "max" : "min",
           tc_dtype_name(dt), (long long)n, (long long)c);
  same_bits(got, want, c, tc_dtype_size(rdt), what);
  free(want); free(got);
  tc_release(r); tc_release(t); tc_release(t1); tc_release(t0);
  jcpu_free(jk);
  free(k);
}

/* Several passes over dim 0 of [n, c]: mean (a ROWVAR-only value, hoisted
** per row), the centred squares summed, and x - mean stored in x's layout,
** vs the same ops eagerly. */
static void colvar_case(int64_t n, int64_t c)
{
  kir_kernel *k = knew(KIR_ROWS, 1, &c, n);
  int x = kir_load(k, kbuf(k, KIR_IN, TC_F32, (int64_t[]){ 1, c }));
  int omean = kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, 0 });
  int ovar = kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, 0 });
  int ocent = kbuf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, c });
  int p0 = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, x);
  int mean = E(k, KOP_MUL, TC_F32, kir_rowvar(k, p0),
               kir_const(k, TC_F32, (double)(1.0f / (float)n)));
  int d = E(k, KOP_SUB, TC_F32, x, mean);
  int p1 = kpass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1,
                 E(k, KOP_MUL, TC_F32, d, d));
  kpass(k, KIR_PASS_STORE_ROW, 0, omean, mean);
  kpass(k, KIR_PASS_STORE_ROW, 0, ovar, kir_rowvar(k, p1));
  kpass(k, KIR_PASS_STORE, 0, ocent, d);
  jcpu_kernel *jk = compile(k);
  tc_tensor *t = tc_randn(TC_F32, 2, (int64_t[]){ n, c }, 44);
  float *gm = malloc((size_t)c * 4), *gv = malloc((size_t)c * 4);
  float *gc = malloc((size_t)(n * c) * 4);
  char *bufs[4] = { tc_data(t), (char *)gm, (char *)gv, (char *)gc };
  assert_int_equal(jcpu_launch(jk, k, bufs, NULL, NULL), 0);
  tc_tensor *s = tc_sum(t, 0, true);
  tc_tensor *m = tc_mul_scalar(s, (double)(1.0f / (float)n));
  tc_tensor *dd = tc_sub(t, m);
  tc_tensor *sq = tc_mul(dd, dd);
  tc_tensor *v = tc_sum(sq, 0, true);
  float *wm = contents(m), *wv = contents(v), *wc = contents(dd);
  same_bits(gm, wm, c, 4, "column mean");
  same_bits(gv, wv, c, 4, "column centred squares");
  same_bits(gc, wc, n * c, 4, "column x - mean");
  free(wm); free(wv); free(wc); free(gm); free(gv); free(gc);
  tc_release(v); tc_release(sq); tc_release(dd); tc_release(m);
  tc_release(s); tc_release(t);
  jcpu_free(jk);
  free(k);
}

static void test_column_mode(void **state)
{
  (void)state;
  colsum_case(1, 16, 24576, NULL);
  colsum_case(1, 5, 300, (int64_t[]){ 3, 200, 257, 0 });   /* 256 + 44 */
  colsum_case(1, 3 * 4096 + 5, 37, (int64_t[]){ 20, 0 });  /* 4 chunks */
  colsum_case(1, 0, 20, NULL);                             /* empty rows */
  colsum_case(3, 100, 70, (int64_t[]){ 65, 140, 141, 0 }); /* outer dim */
  colred_case(TC_F32, KIR_RED_MAX, 300, 90);
  colred_case(TC_F64, KIR_RED_MIN, 5000, 33);
  colred_case(TC_F64, KIR_RED_SUM, 2 * 4096 + 1, 20);
  colred_case(TC_I32, KIR_RED_SUM, 400, 50);
  colvar_case(1000, 300);
  colvar_case(9000, 24);
}

/* -- Source and identity ------------------------------------------------------------ */

static void test_source_and_target(void **state)
{
  (void)state;
  kir_kernel *k = softmax_kernel(TC_F32, 1, 5000, false);
  jcpu_kernel *jk = compile(k);
  const char *src = jcpu_source(jk);
  assert_non_null(src);
  assert_non_null(strstr(src, "pass0 ("));
  assert_non_null(strstr(src, "pass2 ("));
  assert_non_null(strstr(src, "approx_exp_f32"));
  const char *t = jcpu_target();
  assert_true(strncmp(t, "x86-64", 6) == 0);
  assert_true(strncmp(jcpu_compiler_version(), "libgccjit ", 10) == 0);
  jcpu_free(jk);
  free(k);
}

/* Row mode: the second pass of a multi-row kernel prefetches the next row;
** a single row has none to fetch. The approx functions fuse multiply-adds
** exactly when approx.h does (APPROX_FMA). */
static void test_rows_codegen(void **state)
{
  (void)state;
  kir_kernel *k = softmax_kernel(TC_F32, 64, 1000, false);
  jcpu_kernel *jk = compile(k);
  const char *src = jcpu_source(jk);
  assert_non_null(src);
  assert_non_null(strstr(src, "__builtin_prefetch"));
  assert_int_equal(strstr(src, "fmaf (") != NULL, APPROX_FMA);   /* dumped so */
  jcpu_free(jk);
  free(k);
  k = softmax_kernel(TC_F32, 1, 1000, false);
  jk = compile(k);
  assert_null(strstr(jcpu_source(jk), "__builtin_prefetch"));
  jcpu_free(jk);
  free(k);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--hashes") == 0)
    return child_hashes();
  if (argc > 1 && strcmp(argv[1], "--no-gccjit") == 0)
    return child_no_gccjit();
  static const tcase tc[] = {
    { KOP_EXP, TC_F32 }, { KOP_LOG, TC_F32 }, { KOP_TANH, TC_F32 },
    { KOP_SIGMOID, TC_F32 }, { KOP_SIN, TC_F32 }, { KOP_COS, TC_F32 },
    { KOP_POW, TC_F32 }, { KOP_GELU, TC_F32 }, { KOP_EXPM1, TC_F32 },
    { KOP_LOG1P, TC_F32 }, { KOP_ERF, TC_F32 },
    { KOP_EXP, TC_F64 }, { KOP_LOG, TC_F64 }, { KOP_TANH, TC_F64 },
    { KOP_SIGMOID, TC_F64 }, { KOP_SIN, TC_F64 }, { KOP_COS, TC_F64 },
    { KOP_POW, TC_F64 }, { KOP_GELU, TC_F64 }, { KOP_EXPM1, TC_F64 },
    { KOP_LOG1P, TC_F64 }, { KOP_ERF, TC_F64 },
  };
#define TT(i) cmocka_unit_test_prestate(test_transcendental, (void *)&tc[i])
  const struct CMUnitTest tests[] = {
    TT(0), TT(1), TT(2), TT(3), TT(4), TT(5), TT(6),
    TT(7), TT(8), TT(9), TT(10), TT(11), TT(12), TT(13), TT(14), TT(15),
    TT(16), TT(17), TT(18), TT(19), TT(20), TT(21),
    cmocka_unit_test(test_gelu_layouts),
    cmocka_unit_test(test_casts),
    cmocka_unit_test(test_int_wrap),
    cmocka_unit_test(test_float_prims),
    cmocka_unit_test(test_softmax),
    cmocka_unit_test(test_softmax_strided),
    cmocka_unit_test(test_map_ranges),
    cmocka_unit_test(test_row_reductions),
    cmocka_unit_test(test_column_mode),
    cmocka_unit_test(test_threads_independent),
    cmocka_unit_test(test_without_libgccjit),
    cmocka_unit_test(test_dynamic),
    cmocka_unit_test(test_compile_to_file),
    cmocka_unit_test(test_failures),
    cmocka_unit_test(test_vectorized),
    cmocka_unit_test(test_source_and_target),
    cmocka_unit_test(test_rows_codegen),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
