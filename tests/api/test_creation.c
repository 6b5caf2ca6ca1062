/*
** test_creation.c -- tc_empty/zeros/ones/full/arange/rand/randn/from_data,
** reading back with tc_copy_to/tc_item/tc_data, metadata, every dtype,
** 0-d tensors and zero-size dims.
*/
#include "testutil.h"

static void test_dtype_sizes_and_promote(void **state) {
  (void)state;
  assert_int_equal(tc_dtype_size(TC_BOOL), 1);
  assert_int_equal(tc_dtype_size(TC_I32), 4);
  assert_int_equal(tc_dtype_size(TC_I64), 8);
  assert_int_equal(tc_dtype_size(TC_F32), 4);
  assert_int_equal(tc_dtype_size(TC_F64), 8);
  assert_int_equal(tc_dtype_size(TC_DTYPE__MAX), 0);
  for (size_t i = 0; i < 5; i++) {
    const char *n = tc_dtype_name(tu_all_dtypes[i]);
    assert_non_null(n);
    assert_true(strlen(n) > 0);
    for (size_t j = 0; j < i; j++)
      assert_true(strcmp(n, tc_dtype_name(tu_all_dtypes[j])) != 0);
  }
  /* PyTorch's promotion. */
  assert_int_equal(tc_promote(TC_BOOL, TC_BOOL), TC_BOOL);
  assert_int_equal(tc_promote(TC_BOOL, TC_I32), TC_I32);
  assert_int_equal(tc_promote(TC_I32, TC_BOOL), TC_I32);
  assert_int_equal(tc_promote(TC_I32, TC_I64), TC_I64);
  assert_int_equal(tc_promote(TC_I64, TC_I32), TC_I64);
  assert_int_equal(tc_promote(TC_I32, TC_F32), TC_F32);
  assert_int_equal(tc_promote(TC_I64, TC_F32), TC_F32);
  assert_int_equal(tc_promote(TC_F32, TC_I64), TC_F32);
  assert_int_equal(tc_promote(TC_F32, TC_F64), TC_F64);
  assert_int_equal(tc_promote(TC_I64, TC_F64), TC_F64);
  assert_int_equal(tc_promote(TC_BOOL, TC_F32), TC_F32);
  assert_int_equal(tc_promote(TC_F64, TC_F64), TC_F64);
}

static void check_const(tc_tensor *t, tc_dtype dt, int ndim,
                        const int64_t *shape, double value) {
  TU_SHAPE_IS(t, ndim, shape);
  assert_int_equal(tc_dtype_of(t), dt);
  int64_t n = tu_numel(ndim, shape);
  assert_int_equal(tc_numel(t), n);
  assert_true(tc_is_contiguous(t));
  double *v = tu_read(t);
  tu_cmp c;
  tu_cmp_init(&c, "const %s = %g", tc_dtype_name(dt), value);
  double want = tu_round(dt, value);
  for (int64_t i = 0; i < n; i++)
    if (!tu_same(v[i], want)) tu_cmp_bad(&c, i, v[i], want, value);
  free(v);
  TU_CMP_DONE(c);
}

static void test_zeros_ones_full_every_dtype(void **state) {
  (void)state;
  const int64_t shape[3] = {3, 5, 7};
  for (size_t i = 0; i < 5; i++) {
    tc_dtype dt = tu_all_dtypes[i];
    tc_tensor *z = TU_NN(tc_zeros(dt, 3, shape));
    tc_tensor *o = TU_NN(tc_ones(dt, 3, shape));
    double fv = dt == TC_BOOL ? 1 : tu_is_float(dt) ? -2.75 : -42;
    tc_tensor *f = TU_NN(tc_full(dt, 3, shape, fv));
    check_const(z, dt, 3, shape, 0);
    check_const(o, dt, 3, shape, 1);
    check_const(f, dt, 3, shape, fv);
    tc_release(z);
    tc_release(o);
    tc_release(f);
  }
  /* Full of a value that f32 rounds. */
  tc_tensor *f = TU_NN(tc_full(TC_F32, TC_SHAPE(4), 0.1));
  check_const(f, TC_F32, 1, (const int64_t[]){4}, 0.1);
  tc_release(f);
  f = TU_NN(tc_full(TC_F64, TC_SHAPE(4), 0.1));
  check_const(f, TC_F64, 1, (const int64_t[]){4}, 0.1);
  tc_release(f);
  f = TU_NN(tc_full(TC_I64, TC_SHAPE(2), 4503599627370496.0 * 16)); /* 2^56 */
  int64_t raw[2];
  TU_OK(tc_copy_to(f, raw, sizeof raw));
  assert_true(raw[0] == (INT64_C(1) << 56) && raw[1] == raw[0]);
  tc_release(f);
}

static void test_empty_shapes_every_dtype(void **state) {
  (void)state;
  for (size_t i = 0; i < 5; i++) {
    tc_dtype dt = tu_all_dtypes[i];
    tc_tensor *e = TU_NN(tc_empty(dt, TC_SHAPE(2, 3, 4, 5)));
    TU_SHAPE_IS(e, 4, ((const int64_t[]){2, 3, 4, 5}));
    assert_int_equal(tc_numel(e), 120);
    assert_int_equal(tc_dtype_of(e), dt);
    assert_true(tc_is_contiguous(e));
    assert_int_equal(tc_stride(e, 0), 60);
    assert_int_equal(tc_stride(e, 1), 20);
    assert_int_equal(tc_stride(e, 2), 5);
    assert_int_equal(tc_stride(e, 3), 1);
    assert_int_equal(tc_stride(e, -1), 1);
    assert_int_equal(tc_size(e, -1), 5);
    assert_int_equal(tc_size(e, -4), 2);
    assert_int_equal(tc_size(e, 4), -1);
    assert_int_equal(tc_size(e, -5), -1);
    /* Writable and readable. */
    TU_OK(tc_fill_(e, 1));
    check_const(e, dt, 4, (const int64_t[]){2, 3, 4, 5}, 1);
    tc_release(e);
  }
}

static void test_from_data_roundtrip_every_dtype(void **state) {
  (void)state;
  const int64_t shape[2] = {3, 4};
  uint8_t b[12];
  int32_t i32[12];
  int64_t i64[12];
  float f32[12];
  double f64[12];
  for (int i = 0; i < 12; i++) {
    b[i] = (uint8_t)(i % 3 == 0);
    i32[i] = (int32_t)(i * 1000003 - 5000000) * (i % 2 ? 1 : -1);
    i64[i] = (INT64_C(1) << 62) / (i + 1) - i;
    f32[i] = (float)(i * 0.37 - 1.9);
    f64[i] = i * 0.1234567890123 - 0.7;
  }
  f32[5] = -0.0f;
  f32[7] = INFINITY;
  f64[3] = -INFINITY;
  const void *srcs[5] = {b, i32, i64, f32, f64};
  for (size_t k = 0; k < 5; k++) {
    tc_dtype dt = tu_all_dtypes[k];
    size_t nb = 12 * tu_elsize(dt);
    unsigned char src[96], out[104];
    memcpy(src, srcs[k], nb);
    tc_tensor *t = TU_NN(tc_from_data(dt, 2, shape, src, nb));
    /* tc_from_data copies: later changes to the source are not seen. */
    memset(src, 0x55, nb);
    TU_SHAPE_IS(t, 2, shape);
    assert_int_equal(tc_dtype_of(t), dt);
    memset(out, 0xAA, sizeof out);
    TU_OK(tc_copy_to(t, out, nb));
    assert_memory_equal(out, srcs[k], nb);
    assert_int_equal(out[nb], 0xAA); /* nothing written past nbytes */
    /* tc_data of a contiguous tensor points at the same bytes. */
    void *p = tc_data(t);
    assert_non_null(p);
    assert_memory_equal(p, srcs[k], nb);
    tc_release(t);
  }
}

static void test_zero_d_tensors(void **state) {
  (void)state;
  for (size_t k = 0; k < 5; k++) {
    tc_dtype dt = tu_all_dtypes[k];
    double val = dt == TC_BOOL ? 1 : tu_is_float(dt) ? -3.5 : 17;
    tc_tensor *t = TU_NN(tc_full(dt, 0, NULL, val));
    assert_int_equal(tc_ndim(t), 0);
    assert_int_equal(tc_numel(t), 1);
    assert_true(tc_is_contiguous(t));
    double got = 0;
    TU_OK(tc_item(t, &got));
    assert_true(got == val);
    tc_release(t);
  }
  double v = 2.25;
  tc_tensor *t = TU_NN(tc_from_data(TC_F64, 0, NULL, &v, sizeof v));
  assert_int_equal(tc_ndim(t), 0);
  assert_true(tu_item(t) == 2.25);
  double out = 0;
  TU_OK(tc_copy_to(t, &out, sizeof out));
  assert_true(out == 2.25);
  tc_release(t);
  tc_tensor *z = TU_NN(tc_zeros(TC_I64, 0, NULL));
  assert_true(tu_item(z) == 0);
  tc_release(z);
  /* tc_item of one-element tensors of any rank, converted to double. */
  tc_tensor *o = TU_NN(tc_full(TC_I64, TC_SHAPE(1, 1, 1), 123456789));
  assert_true(tu_item(o) == 123456789.0);
  tc_release(o);
  o = TU_NN(tc_full(TC_F32, TC_SHAPE(1), 0.1));
  assert_true(tu_item(o) == (double)0.1f);
  tc_release(o);
}

static void test_zero_size_dims(void **state) {
  (void)state;
  for (size_t k = 0; k < 5; k++) {
    tc_dtype dt = tu_all_dtypes[k];
    tc_tensor *t = TU_NN(tc_zeros(dt, TC_SHAPE(3, 0, 4)));
    TU_SHAPE_IS(t, 3, ((const int64_t[]){3, 0, 4}));
    assert_int_equal(tc_numel(t), 0);
    char dummy[8];
    TU_OK(tc_copy_to(t, dummy, 0));
    tc_release(t);
    t = TU_NN(tc_from_data(dt, TC_SHAPE(0), dummy, 0));
    assert_int_equal(tc_numel(t), 0);
    assert_int_equal(tc_ndim(t), 1);
    tc_release(t);
  }
  tc_tensor *e = TU_NN(tc_empty(TC_F32, TC_SHAPE(0, 5)));
  tc_tensor *r = TU_NN(tc_rand(TC_F32, TC_SHAPE(5, 0), 1));
  assert_int_equal(tc_numel(e), 0);
  assert_int_equal(tc_numel(r), 0);
  tc_release(e);
  tc_release(r);
}

/* arange: length ceil((end-start)/step), values start + i*step. */
static void check_arange(tc_dtype dt, double start, double end, double step,
                         int64_t want_n) {
  tc_tensor *t = TU_NN(tc_arange(dt, start, end, step));
  assert_int_equal(tc_ndim(t), 1);
  assert_int_equal(tc_dtype_of(t), dt);
  if (tc_numel(t) != want_n)
    fail_msg("arange(%g, %g, %g): %lld elements, expected %lld", start, end,
             step, (long long)tc_numel(t), (long long)want_n);
  double *v = tu_read(t);
  tu_cmp c;
  tu_cmp_init(&c, "arange(%s, %g, %g, %g)", tc_dtype_name(dt), start, end,
              step);
  for (int64_t i = 0; i < want_n; i++) {
    double want = start + (double)i * step;
    bool ok = tu_is_float(dt)
                  ? tu_close(v[i], want, dt == TC_F32 ? 2e-7 : 1e-15, 1e-15)
                  : v[i] == want;
    if (!ok) tu_cmp_bad(&c, i, v[i], want, (double)i);
  }
  free(v);
  tc_release(t);
  TU_CMP_DONE(c);
}

static void test_arange(void **state) {
  (void)state;
  check_arange(TC_I64, 0, 10, 1, 10);
  check_arange(TC_I32, 0, 10, 3, 4);      /* 0 3 6 9 */
  check_arange(TC_I64, 10, 0, -3, 4);     /* 10 7 4 1 */
  check_arange(TC_I32, -5, 5, 2, 5);      /* -5 -3 -1 1 3 */
  check_arange(TC_F32, 0, 1, 0.1, 10);    /* fractional step */
  check_arange(TC_F64, 0, 1, 0.1, 10);
  check_arange(TC_F64, 5, 0, -1.5, 4);    /* 5 3.5 2 .5 */
  check_arange(TC_F32, -1, 1, 0.25, 8);
  check_arange(TC_F32, 0.5, 2.6, 0.5, 5); /* 0.5 .. 2.5 */
  check_arange(TC_F64, 0, 100000, 1, 100000);
  check_arange(TC_F32, 3, 3, 1, 0);       /* empty */
  check_arange(TC_I64, 3, 3, -1, 0);
  check_arange(TC_F64, 2.5, 2.5, 0.5, 0);
}

/* Uniform [0,1): range, determinism, seed dependence, moments, histogram. */
static void check_rand(tc_dtype dt) {
  const int64_t n = 100000;
  tc_tensor *a = TU_NN(tc_rand(dt, TC_SHAPE(100, 1000), 42));
  tc_tensor *b = TU_NN(tc_rand(dt, TC_SHAPE(100, 1000), 42));
  tc_tensor *c = TU_NN(tc_rand(dt, TC_SHAPE(100, 1000), 43));
  assert_int_equal(tc_dtype_of(a), dt);
  TU_SHAPE_IS(a, 2, ((const int64_t[]){100, 1000}));
  size_t nb;
  void *ra = tu_read_raw(a, &nb), *rb = tu_read_raw(b, NULL),
       *rc = tu_read_raw(c, NULL);
  assert_memory_equal(ra, rb, nb);
  double *va = tu_read(a), *vc = tu_read(c);
  int64_t same = 0, hist[10] = {0};
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!(va[i] >= 0.0 && va[i] < 1.0))
      fail_msg("rand %s [%lld] = %.17g not in [0,1)", tc_dtype_name(dt),
               (long long)i, va[i]);
    same += va[i] == vc[i];
    sum += va[i];
    sum2 += va[i] * va[i];
    hist[(int)(va[i] * 10)]++;
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  if (fabs(mean - 0.5) > 5e-3) fail_msg("rand mean %g", mean);
  if (fabs(var - 1.0 / 12) > 1.5e-3) fail_msg("rand variance %g", var);
  for (int k = 0; k < 10; k++)
    if (hist[k] < 9400 || hist[k] > 10600)
      fail_msg("rand histogram bin %d has %lld of 100000", k,
               (long long)hist[k]);
  if (same > n / 1000)
    fail_msg("seeds 42 and 43 agree on %lld of %lld values", (long long)same,
             (long long)n);
  /* Neighbouring values are not correlated. */
  double cov = 0;
  for (int64_t i = 0; i + 1 < n; i++) cov += (va[i] - 0.5) * (va[i + 1] - 0.5);
  cov /= (n - 1);
  if (fabs(cov) > 2e-3) fail_msg("rand lag-1 covariance %g", cov);
  free(ra);
  free(rb);
  free(rc);
  free(va);
  free(vc);
  tc_release(a);
  tc_release(b);
  tc_release(c);
}

static void test_rand(void **state) {
  (void)state;
  check_rand(TC_F32);
  check_rand(TC_F64);
}

static void check_randn(tc_dtype dt) {
  const int64_t n = 100000;
  tc_tensor *a = TU_NN(tc_randn(dt, TC_SHAPE(n), 7));
  tc_tensor *b = TU_NN(tc_randn(dt, TC_SHAPE(n), 7));
  tc_tensor *c = TU_NN(tc_randn(dt, TC_SHAPE(n), 8));
  assert_int_equal(tc_dtype_of(a), dt);
  size_t nb;
  void *ra = tu_read_raw(a, &nb), *rb = tu_read_raw(b, NULL);
  assert_memory_equal(ra, rb, nb);
  double *va = tu_read(a), *vc = tu_read(c);
  double sum = 0, sum2 = 0, sum4 = 0;
  int64_t within1 = 0, within2 = 0, same = 0, pos = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(va[i])) fail_msg("randn [%lld] = %g", (long long)i, va[i]);
    sum += va[i];
    sum2 += va[i] * va[i];
    sum4 += va[i] * va[i] * va[i] * va[i];
    within1 += fabs(va[i]) < 1;
    within2 += fabs(va[i]) < 2;
    pos += va[i] > 0;
    same += va[i] == vc[i];
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  if (fabs(mean) > 0.02) fail_msg("randn mean %g", mean);
  if (fabs(sqrt(var) - 1) > 0.02) fail_msg("randn std %g", sqrt(var));
  if (fabs(sum4 / n - 3) > 0.2) fail_msg("randn 4th moment %g", sum4 / n);
  if (fabs((double)within1 / n - 0.682689) > 0.01)
    fail_msg("randn P(|x|<1) = %g", (double)within1 / n);
  if (fabs((double)within2 / n - 0.954500) > 0.006)
    fail_msg("randn P(|x|<2) = %g", (double)within2 / n);
  if (fabs((double)pos / n - 0.5) > 0.01)
    fail_msg("randn P(x>0) = %g", (double)pos / n);
  if (same > n / 1000) fail_msg("randn seeds 7 and 8 agree on %lld", (long long)same);
  free(ra);
  free(rb);
  free(va);
  free(vc);
  tc_release(a);
  tc_release(b);
  tc_release(c);
}

static void test_randn(void **state) {
  (void)state;
  check_randn(TC_F32);
  check_randn(TC_F64);
}

static void test_copy_to_of_views_is_c_order(void **state) {
  (void)state;
  double v[6] = {1, 2, 3, 4, 5, 6};
  tc_tensor *t = tu_from(TC_F32, TC_SHAPE(2, 3), v);
  tc_tensor *tt = TU_NN(tc_transpose(t, 0, 1));
  float out[6];
  TU_OK(tc_copy_to(tt, out, sizeof out));
  const float want[6] = {1, 4, 2, 5, 3, 6};
  assert_memory_equal(out, want, sizeof out);
  double it = 0;
  tc_tensor *one = TU_NN(tc_slice(tt, 0, 2, 3, 1));
  tc_tensor *el = TU_NN(tc_slice(one, 1, 1, 2, 1));
  TU_OK(tc_item(el, &it));
  assert_true(it == 6);
  tc_release(el);
  tc_release(one);
  tc_release(tt);
  tc_release(t);
}

static void test_metadata_on_null(void **state) {
  (void)state;
  assert_int_equal(tc_ndim(NULL), -1);
  assert_int_equal(tc_numel(NULL), -1);
  assert_int_equal(tc_size(NULL, 0), -1);
  assert_int_equal(tc_dtype_of(NULL), TC_DTYPE__MAX);
  tc_release(NULL);
  assert_null(tc_retain(NULL));
  tc_clear_error();
}

static void test_retain_release(void **state) {
  (void)state;
  tc_tensor *t = TU_NN(tc_full(TC_F32, TC_SHAPE(3), 2.5));
  assert_ptr_equal(tc_retain(t), t);
  tc_release(t);
  /* Still alive with one reference left (ASan checks the read). */
  float out[3] = {0, 0, 0};
  TU_OK(tc_copy_to(t, out, sizeof out));
  assert_true(out[0] == 2.5f && out[1] == 2.5f && out[2] == 2.5f);
  tc_release(t);
}

static void test_control_and_stats(void **state) {
  (void)state;
  assert_true(tc_threads() >= 1);
  bool was = tc_compile_enabled();
  tc_compile_set(true);
  assert_true(tc_compile_enabled());
  tc_compile_set(false);
  assert_false(tc_compile_enabled());
  tc_compile_set(was);
  tc_stats_reset();
  tc_stats s0, s1;
  tc_stats_get(&s0);
  assert_true(s0.ops == 0 && s0.kernels_compiled == 0 &&
              s0.compile_failures == 0);
  tc_tensor *a = TU_NN(tc_ones(TC_F32, TC_SHAPE(16)));
  tc_tensor *b = TU_NN(tc_add(a, a));
  tc_tensor *c = TU_NN(tc_exp(b));
  TU_OK(tc_realize(c));
  TU_OK(tc_sync());
  tc_stats_get(&s1);
  assert_true(s1.ops >= 2);
  /* Traced, the temporary b is never stored. */
  assert_true(s1.bytes_allocated >=
              (tc_compile_enabled() ? 2 : 3) * 16 * sizeof(float));
  tc_tensor *sum = TU_NN(tc_sum_all(c));
  assert_true(tu_close(tu_item(sum), 16 * exp(2.0), 1e-6, 0));
  tc_release(sum);
  tc_clear_error();
  assert_int_equal(tc_realize(NULL), -1);
  tc_clear_error();
  tc_release(a);
  tc_release(b);
  tc_release(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_sizes_and_promote),
      cmocka_unit_test(test_zeros_ones_full_every_dtype),
      cmocka_unit_test(test_empty_shapes_every_dtype),
      cmocka_unit_test(test_from_data_roundtrip_every_dtype),
      cmocka_unit_test(test_zero_d_tensors),
      cmocka_unit_test(test_zero_size_dims),
      cmocka_unit_test(test_arange),
      cmocka_unit_test(test_rand),
      cmocka_unit_test(test_randn),
      cmocka_unit_test(test_copy_to_of_views_is_c_order),
      cmocka_unit_test(test_metadata_on_null),
      cmocka_unit_test(test_retain_release),
      cmocka_unit_test(test_control_and_stats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
