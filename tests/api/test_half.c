/*
** test_half.c -- the storage dtypes TC_F16 and TC_BF16: conversions against
** independent references (GCC's own _Float16 for f16; a double-precision
** round-to-nearest-even for bf16), ops computed in f32 and rounded when
** stored, PyTorch's promotion, and compiled results bitwise equal to eager.
** Written against tc.h only; runs eager and with TC_COMPILE=1 (meson).
*/
#include <float.h>
#include <math.h>
#include <string.h>

#include "testutil.h"

static bool traced;

/* -- References ------------------------------------------------------------ */

static float f16_ref_value(uint16_t h)
{
  _Float16 x;
  memcpy(&x, &h, sizeof x);
  return (float)x;
}

static uint16_t f16_ref_bits(float f)
{
  _Float16 x = (_Float16)f;   /* GCC: round to nearest even */
  uint16_t h;
  memcpy(&h, &x, sizeof h);
  return h;
}

/* bf16 from its fields, in double: (-1)^s 2^(e-127) (1 + m/128), or the
** subnormal 2^-126 m/128. */
static double bf16_ref_value(uint16_t h)
{
  int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
  double v = e == 0 ? ldexp(m / 128.0, -126) : ldexp(1.0 + m / 128.0, e - 127);
  if (e == 0xff)
    v = m ? NAN : INFINITY;
  return s ? -v : v;
}

/* f rounded to bf16 (8 significant bits, exponent range of f32), in
** double: nearbyint rounds half to even. */
static double bf16_ref_round(float f)
{
  double x = f;
  if (!isfinite(x) || x == 0)
    return x;
  int e;
  frexp(x, &e);                               /* |x| in [2^(e-1), 2^e) */
  int q = e - 8 < -133 ? -133 : e - 8;        /* the bf16 quantum */
  double r = ldexp(nearbyint(ldexp(x, -q)), q);
  return fabs(r) > 0x1.fep127 ? copysign(INFINITY, x) : r;
}

static uint32_t bits_of(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Values of a 16-bit tensor as floats, via tc's cast to f32. */
static float *as_floats(tc_tensor *t)
{
  tc_tensor *f = TU_NN(tc_cast(t, TC_F32));
  int64_t n = tc_numel(t);
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  TU_OK(tc_copy_to(f, v, (size_t)n * sizeof *v));
  tc_release(f);
  return v;
}

static uint16_t *bits16(tc_tensor *t)
{
  int64_t n = tc_numel(t);
  uint16_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  TU_OK(tc_copy_to(t, v, (size_t)n * sizeof *v));
  return v;
}

/* Adversarial f32 values: random bit patterns, every f16 and bf16 value,
** and the points halfway between neighbours (ties), with their
** neighbours one f32 ulp away. */
static float *tricky_floats(int64_t *n_out)
{
  int64_t n = 0, cap = 65536 * 8 + 200000;
  float *v = malloc((size_t)cap * sizeof *v);
  assert_non_null(v);
  for (uint32_t h = 0; h < 65536; h++) {
    float a = f16_ref_value((uint16_t)h), b = f16_ref_value((uint16_t)(h + 1));
    float mid = (float)(((double)a + (double)b) / 2);   /* exact in f32 */
    v[n++] = a;
    v[n++] = mid;
    v[n++] = nextafterf(mid, INFINITY);
    v[n++] = nextafterf(mid, -INFINITY);
    float c = float_of(h << 16), d = float_of((h + 1) << 16);
    v[n++] = c;
    v[n++] = float_of((h << 16) | 0x8000u);             /* bf16 tie */
    v[n++] = float_of((h << 16) | 0x8001u);
    v[n++] = (float)(((double)c + (double)d) / 2);
  }
  tu_rng r = { 12345 };
  while (n < cap)
    v[n++] = float_of((uint32_t)tu_next(&r));
  *n_out = n;
  return v;
}

/* -- Conversions ------------------------------------------------------------ */

static void test_names_sizes_promotion(void **state)
{
  (void)state;
  assert_string_equal(tc_dtype_name(TC_F16), "f16");
  assert_string_equal(tc_dtype_name(TC_BF16), "bf16");
  assert_int_equal(tc_dtype_size(TC_F16), 2);
  assert_int_equal(tc_dtype_size(TC_BF16), 2);
  assert_int_equal(tc_promote(TC_F16, TC_BF16), TC_F32);
  assert_int_equal(tc_promote(TC_BF16, TC_F16), TC_F32);
  assert_int_equal(tc_promote(TC_F16, TC_F32), TC_F32);
  assert_int_equal(tc_promote(TC_F64, TC_BF16), TC_F64);
  assert_int_equal(tc_promote(TC_I64, TC_F16), TC_F16);
  assert_int_equal(tc_promote(TC_BOOL, TC_BF16), TC_BF16);
  assert_int_equal(tc_promote(TC_F16, TC_F16), TC_F16);

  tc_tensor *h = TU_NN(tc_ones(TC_F16, TC_SHAPE(3)));
  tc_tensor *b = TU_NN(tc_ones(TC_BF16, TC_SHAPE(3)));
  tc_tensor *i = TU_NN(tc_ones(TC_I32, TC_SHAPE(3)));
  tc_tensor *h2 = TU_NN(tc_ones(TC_F16, TC_SHAPE(2, 2)));
  tc_tensor *r[] = {
    TU_NN(tc_add(h, b)), TU_NN(tc_add(h, i)), TU_NN(tc_mul_scalar(h, 2.5)),
    TU_NN(tc_lt(h, b)), TU_NN(tc_exp(b)), TU_NN(tc_sum(h, 0, false)),
    TU_NN(tc_argmax(b, 0, false)), TU_NN(tc_matmul(h2, h2)),
  };
  tc_dtype want[] = { TC_F32, TC_F16, TC_F16, TC_BOOL, TC_BF16, TC_F16,
                      TC_I64, TC_F16 };
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    assert_int_equal(tc_dtype_of(r[k]), want[k]);
    tc_release(r[k]);
  }
  tc_release(h);
  tc_release(h2);
  tc_release(b);
  tc_release(i);
}

/* Every f16 and bf16 bit pattern converts to f32 exactly. */
static void test_to_f32_exhaustive(void **state)
{
  (void)state;
  uint16_t *all = malloc(65536 * sizeof *all);
  assert_non_null(all);
  for (uint32_t h = 0; h < 65536; h++)
    all[h] = (uint16_t)h;
  for (int k = 0; k < 2; k++) {
    tc_dtype dt = k ? TC_BF16 : TC_F16;
    tc_tensor *t = TU_NN(tc_from_data(dt, TC_SHAPE(65536), all,
                                      65536 * sizeof *all));
    /* the data is copied as it is, NaN payloads too (torch.frombuffer) */
    uint16_t *back = malloc(65536 * sizeof *back);
    assert_non_null(back);
    assert_int_equal(tc_copy_to(t, back, 65536 * sizeof *back), 0);
    assert_memory_equal(back, all, 65536 * sizeof *all);
    free(back);
    float *v = as_floats(t);
    for (uint32_t h = 0; h < 65536; h++) {
      double want = k ? bf16_ref_value((uint16_t)h)
                      : (double)f16_ref_value((uint16_t)h);
      if (isnan(want)) {
        assert_true(isnan(v[h]));
        continue;
      }
      if ((double)v[h] != want || !signbit(v[h]) != !signbit(want))
        fail_msg("%s bits %04x: %a, expected %a", tc_dtype_name(dt), h,
                 (double)v[h], want);
    }
    free(v);
    tc_release(t);
  }
  free(all);
}

/* f32 -> f16 and bf16 round to nearest even, overflow to infinity,
** subnormals, signed zeros, NaN stays NaN. */
static void test_from_f32_rounding(void **state)
{
  (void)state;
  int64_t n;
  float *v = tricky_floats(&n);
  tc_tensor *f = TU_NN(tc_from_data(TC_F32, 1, &n, v, (size_t)n * sizeof *v));
  tc_tensor *h = TU_NN(tc_cast(f, TC_F16));
  tc_tensor *b = TU_NN(tc_cast(f, TC_BF16));
  uint16_t *hb = bits16(h), *bb = bits16(b);
  for (int64_t i = 0; i < n; i++) {
    if (isnan(v[i])) {
      assert_true(isnan(f16_ref_value(hb[i])) && isnan(bf16_ref_value(bb[i])));
      assert_int_equal(hb[i] >> 15, bits_of(v[i]) >> 31);
      continue;
    }
    if (hb[i] != f16_ref_bits(v[i]))
      fail_msg("f16(%a) = %04x, expected %04x", (double)v[i], hb[i],
               f16_ref_bits(v[i]));
    double want = bf16_ref_round(v[i]), got = bf16_ref_value(bb[i]);
    if (got != want || !signbit(got) != !signbit(want))
      fail_msg("bf16(%a) = %a (%04x), expected %a", (double)v[i], got, bb[i],
               want);
  }
  free(hb);
  free(bb);
  free(v);
  tc_release(f);
  tc_release(h);
  tc_release(b);
}

/* Other dtypes convert through f32, as c10::Half does. */
static void test_casts_between_dtypes(void **state)
{
  (void)state;
  double src[] = { 0, 1, -2, 2049, 65504, 65520, 1e6, -1e-8, 0.5 };
  int64_t n = sizeof src / sizeof src[0];
  tc_tensor *d = TU_NN(tc_from_data(TC_F64, 1, &n, src, sizeof src));
  tc_tensor *h = TU_NN(tc_cast(d, TC_F16));
  uint16_t *hb = bits16(h);
  for (int64_t i = 0; i < n; i++)
    assert_int_equal(hb[i], f16_ref_bits((float)src[i]));
  free(hb);
  /* to integers: saturating, from the f32 value */
  tc_tensor *i32 = TU_NN(tc_cast(h, TC_I32));
  double *iv = tu_read(i32);
  for (int64_t i = 0; i < n; i++) {
    double f = f16_ref_value(f16_ref_bits((float)src[i]));
    double want = isinf(f) ? (f > 0 ? INT32_MAX : INT32_MIN) : trunc(f);
    assert_true(iv[i] == want);
  }
  free(iv);
  /* f16 -> bf16 rounds the f16 value again */
  tc_tensor *b = TU_NN(tc_cast(h, TC_BF16));
  float *bv = as_floats(b), *hv = as_floats(h);
  for (int64_t i = 0; i < n; i++)
    assert_true((double)bv[i] == bf16_ref_round(hv[i]));
  free(bv);
  free(hv);
  double item = 0;
  tc_tensor *one = TU_NN(tc_full(TC_BF16, TC_SHAPE(1), 3.14159));
  TU_OK(tc_item(one, &item));
  assert_true(item == bf16_ref_round(3.14159f));
  tc_release(one);
  tc_release(b);
  tc_release(i32);
  tc_release(h);
  tc_release(d);
}

static void test_creation(void **state)
{
  (void)state;
  for (int k = 0; k < 2; k++) {
    tc_dtype dt = k ? TC_BF16 : TC_F16;
    tc_tensor *u = TU_NN(tc_rand(dt, TC_SHAPE(4096), 7));
    tc_tensor *z = TU_NN(tc_randn(dt, TC_SHAPE(4096), 8));
    tc_tensor *a = TU_NN(tc_arange(dt, 0, 10, 0.5));
    float *uv = as_floats(u), *zv = as_floats(z), *av = as_floats(a);
    double mean = 0;
    for (int i = 0; i < 4096; i++) {
      assert_true(uv[i] >= 0 && uv[i] < 1);
      mean += zv[i] / 4096;
    }
    assert_true(fabs(mean) < 0.1);
    for (int i = 0; i < 20; i++)
      assert_true(av[i] == 0.5f * i);
    free(uv);
    free(zv);
    free(av);
    tc_release(u);
    tc_release(z);
    tc_release(a);
  }
}

/* -- Ops: computed in f32, rounded when stored ------------------------------- */

static void test_pointwise_rounded_once(void **state)
{
  (void)state;
  int64_t n = 4096;
  tu_rng r = { 99 };
  uint16_t *ab = malloc((size_t)n * 2), *bb = malloc((size_t)n * 2);
  assert_non_null(ab);
  assert_non_null(bb);
  for (int64_t i = 0; i < n; i++) {
    ab[i] = f16_ref_bits((float)tu_unif(&r, -100, 100));
    bb[i] = f16_ref_bits((float)tu_unif(&r, 0.01, 50));
  }
  tc_tensor *a = TU_NN(tc_from_data(TC_F16, 1, &n, ab, (size_t)n * 2));
  tc_tensor *b = TU_NN(tc_from_data(TC_F16, 1, &n, bb, (size_t)n * 2));
  tc_tensor *s = TU_NN(tc_add(a, b)), *m = TU_NN(tc_mul(a, b));
  tc_tensor *q = TU_NN(tc_div(a, b)), *t = TU_NN(tc_mul_scalar(a, 0.05));
  tc_tensor *e = TU_NN(tc_exp(t));
  tc_release(t);
  uint16_t *sv = bits16(s), *mv = bits16(m), *qv = bits16(q);
  float *ev = as_floats(e);
  for (int64_t i = 0; i < n; i++) {
    float x = f16_ref_value(ab[i]), y = f16_ref_value(bb[i]);
    assert_int_equal(sv[i], f16_ref_bits(x + y));
    assert_int_equal(mv[i], f16_ref_bits(x * y));
    assert_int_equal(qv[i], f16_ref_bits(x / y));
    /* exp(rounded(x * 0.05)) within one f16 ulp of libm */
    float arg = f16_ref_value(f16_ref_bits(x * 0.05f));
    double want = exp((double)arg);
    assert_true(fabs(ev[i] - want) <= ldexp(fabs(want), -10));
  }
  free(sv);
  free(mv);
  free(qv);
  free(ev);
  free(ab);
  free(bb);
  tc_release(a);
  tc_release(b);
  tc_release(s);
  tc_release(m);
  tc_release(q);
  tc_release(e);
}

/* In place: dst's dtype stores the f32 result once (bf16 += f32). */
static void test_inplace_update(void **state)
{
  (void)state;
  int64_t n = 1000;
  tc_tensor *w = TU_NN(tc_full(TC_BF16, 1, &n, 1.0));
  tc_tensor *g = TU_NN(tc_full(TC_F32, 1, &n, 1e-3));
  float ref = 1.0f;
  for (int step = 0; step < 10; step++) {
    TU_OK(tc_sub_(w, g));
    ref = (float)bf16_ref_round(ref - 1e-3f);
  }
  float *wv = as_floats(w);
  for (int64_t i = 0; i < n; i++)
    assert_true(wv[i] == ref);
  /* 1 - 1e-3 rounds back to 1 in bf16: the update is lost, as in torch */
  assert_true(ref == 1.0f);
  free(wv);
  tc_release(w);
  tc_release(g);
}

/* Reductions accumulate in f32 and round the result once. */
static void test_reductions(void **state)
{
  (void)state;
  int64_t rows = 16, cols = 1000;
  tu_rng r = { 5 };
  int64_t n = rows * cols;
  uint16_t *xb = malloc((size_t)n * 2);
  assert_non_null(xb);
  for (int64_t i = 0; i < n; i++)
    xb[i] = (uint16_t)(bits_of((float)tu_unif(&r, -1, 1)) >> 16);  /* bf16 */
  tc_tensor *x = TU_NN(tc_from_data(TC_BF16, TC_SHAPE(rows, cols), xb,
                                    (size_t)n * 2));
  tc_tensor *s = TU_NN(tc_sum(x, 1, false)), *mx = TU_NN(tc_max(x, 1, false));
  tc_tensor *mn = TU_NN(tc_mean(x, 1, false));
  float *sv = as_floats(s), *mv = as_floats(mx), *nv = as_floats(mn);
  for (int64_t i = 0; i < rows; i++) {
    double sum = 0, best = -INFINITY;
    for (int64_t j = 0; j < cols; j++) {
      double v = bf16_ref_value(xb[i * cols + j]);
      sum += v;
      best = v > best ? v : best;
    }
    /* an f32 sum of 1000 terms is within 1e-4 relative; then one rounding */
    double tol = ldexp(fabs(sum), -8) + 1e-3;
    assert_true(fabs(sv[i] - sum) <= tol);
    assert_true(fabs(nv[i] - sum / cols) <= tol / cols);
    assert_true(mv[i] == best);
  }
  free(sv);
  free(mv);
  free(nv);
  free(xb);
  tc_release(x);
  tc_release(s);
  tc_release(mx);
  tc_release(mn);
}

static void test_matmul(void **state)
{
  (void)state;
  int64_t m = 17, k = 33, n = 9;
  tc_tensor *a = TU_NN(tc_randn(TC_F16, TC_SHAPE(m, k), 1));
  tc_tensor *b = TU_NN(tc_randn(TC_F16, TC_SHAPE(k, n), 2));
  tc_tensor *c = TU_NN(tc_matmul(a, b));
  assert_int_equal(tc_dtype_of(c), TC_F16);
  float *av = as_floats(a), *bv = as_floats(b), *cv = as_floats(c);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double ref = 0;
      for (int64_t p = 0; p < k; p++)
        ref += (double)av[i * k + p] * bv[p * n + j];
      /* f32 accumulation, then one f16 rounding (2^-11 relative) */
      assert_true(fabs(cv[i * n + j] - ref) <= ldexp(fabs(ref), -10) + 1e-4);
    }
  free(av);
  free(bv);
  free(cv);
  tc_release(a);
  tc_release(b);
  tc_release(c);
}

/* -- Compiled equals eager ----------------------------------------------------- */

/* softmax from primitives, RMSNorm and an in-place update, on a storage
** dtype; returns the three results' bits, concatenated as f32 casts. */
static tc_tensor *model_step(tc_dtype dt, tc_tensor *x, tc_tensor *w)
{
  size_t mark = tc_scope_begin();
  tc_tensor *mx = tc_max(x, 1, true);
  tc_tensor *e = tc_exp(tc_sub(x, mx));
  tc_tensor *sm = tc_div(e, tc_sum(e, 1, true));
  tc_tensor *ms = tc_mean(tc_mul(x, x), 1, true);
  tc_tensor *rms = tc_mul(tc_mul(x, tc_rsqrt(tc_add_scalar(ms, 1e-5))), w);
  tc_tensor *ls = tc_log_softmax(tc_cast(rms, dt), 1);
  TU_OK(tc_add_(w, tc_mul_scalar(tc_sum(sm, 0, false), 1e-2)));
  tc_tensor *out = tc_keep(TU_NN(tc_add(tc_add(sm, rms), ls)));
  tc_scope_end(mark);
  return out;
}

static void test_compiled_equals_eager(void **state)
{
  (void)state;
  for (int k = 0; k < 2; k++) {
    tc_dtype dt = k ? TC_BF16 : TC_F16;
    uint16_t *bits[2], *wbits[2];
    for (int mode = 0; mode < 2; mode++) {
      tc_compile_set(mode == 1);
      tc_tensor *x = TU_NN(tc_randn(dt, TC_SHAPE(8, 300), 3));
      tc_tensor *w = TU_NN(tc_rand(dt, TC_SHAPE(300), 4));
      tc_tensor *out = NULL;
      for (int rep = 0; rep < 3; rep++) {
        tc_release(out);
        out = model_step(dt, x, w);
      }
      assert_int_equal(tc_dtype_of(out), dt);
      bits[mode] = bits16(out);
      wbits[mode] = bits16(w);
      tc_release(out);
      tc_release(x);
      tc_release(w);
    }
    tc_compile_set(traced);
    assert_memory_equal(bits[0], bits[1], 8 * 300 * 2);
    assert_memory_equal(wbits[0], wbits[1], 300 * 2);
    for (int mode = 0; mode < 2; mode++) {
      free(bits[mode]);
      free(wbits[mode]);
    }
  }
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.compile_failures, 0);
}

int main(void)
{
  setenv("TC_HOT", "1", 1);
  setenv("TC_ASYNC", "0", 1);
  traced = tc_compile_enabled();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_names_sizes_promotion),
    cmocka_unit_test(test_to_f32_exhaustive),
    cmocka_unit_test(test_from_f32_rounding),
    cmocka_unit_test(test_casts_between_dtypes),
    cmocka_unit_test(test_creation),
    cmocka_unit_test(test_pointwise_rounded_once),
    cmocka_unit_test(test_inplace_update),
    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_matmul),
    cmocka_unit_test(test_compiled_equals_eager),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
