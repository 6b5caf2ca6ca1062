/*
** test_reduce.c -- sum, mean, max, min, argmax over every dim (negative dims
** too), keepdim on and off, on contiguous/transposed/sliced/expanded inputs,
** against a double reference; sum_all, including a 16M-element f32 sum that
** must keep a relative error below 1e-5 (blocked/pairwise order); integer
** and bool dtypes; NaN propagation; argmax ties; empty dims.
*/
#include "testutil.h"

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, R_NOPS };
static const char *const RNAME[] = {"sum", "mean", "max", "min", "argmax",
                                    "argmin"};
static tc_tensor *(*const RFN[])(tc_tensor *, int, bool) = {
    tc_sum, tc_mean, tc_max, tc_min, tc_argmax, tc_argmin};

static tc_dtype result_dtype(int op, tc_dtype in) {
  if (op == R_ARGMAX || op == R_ARGMIN) return TC_I64;
  if (op == R_SUM && !tu_is_float(in)) return TC_I64;
  return in;
}

/* Reference over a logical C-order array: value for output (o, i). */
static double ref_reduce(int op, const double *v, int64_t o, int64_t len,
                         int64_t inner, int64_t i, double *abssum) {
  double s = 0, a = 0, best = 0;
  int64_t bi = -1;
  for (int64_t k = 0; k < len; k++) {
    double x = v[(o * len + k) * inner + i];
    s += x;
    a += fabs(x);
    if (bi >= 0 && isnan(best)) continue; /* NaN wins, first one kept */
    bool minimum = op == R_MIN || op == R_ARGMIN;
    if (bi < 0 || isnan(x) || (minimum ? x < best : x > best)) {
      best = x;
      bi = k;
    }
  }
  if (abssum) *abssum = a;
  switch (op) {
  case R_SUM: return s;
  case R_MEAN: *abssum /= (double)len; return s / (double)len;
  case R_ARGMAX: case R_ARGMIN: return (double)bi;
  default: return best;
  }
}

static void check_reduce(int op, tu_arr *a, int dim, bool keepdim,
                         const char *ctx) {
  int nd = a->ndim, d = dim < 0 ? dim + nd : dim;
  int64_t outer = 1, len = a->shape[d], inner = 1;
  for (int j = 0; j < d; j++) outer *= a->shape[j];
  for (int j = d + 1; j < nd; j++) inner *= a->shape[j];
  tc_tensor *r = TU_NN(RFN[op](a->t, dim, keepdim));
  int64_t os[TC_MAX_DIMS];
  int on = 0;
  for (int j = 0; j < nd; j++)
    if (j != d) os[on++] = a->shape[j];
    else if (keepdim) os[on++] = 1;
  TU_SHAPE_IS(r, on, os);
  if (tc_dtype_of(r) != result_dtype(op, a->dt))
    fail_msg("%s of %s gave dtype %s", RNAME[op], tc_dtype_name(a->dt),
             tc_dtype_name(tc_dtype_of(r)));
  double *got = tu_read(r);
  double tol = a->dt == TC_F32 ? 1e-5 : 1e-13;
  tu_cmp c;
  tu_cmp_init(&c, "%s %s dim %d keepdim %d %s", RNAME[op],
              tc_dtype_name(a->dt), dim, (int)keepdim, ctx);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double abssum;
      double want = ref_reduce(op, a->v, o, len, inner, i, &abssum);
      double g = got[o * inner + i];
      bool ok = (op == R_SUM || op == R_MEAN) && tu_is_float(a->dt)
                    ? tu_close(g, want, 0, tol * abssum + 1e-300)
                    : tu_same_value(g, want);
      if (!ok) tu_cmp_bad(&c, o * inner + i, g, want, (double)o);
    }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_reduce_dims_layouts(void **state) {
  (void)state;
  const int64_t shape[3] = {5, 7, 9};
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      /* Continuous values for sum/mean, a coarse grid (many ties) for
      ** max/min/argmax. */
      tu_arr a = tu_make_unif(dts[t], lay, 3, shape, -10, 10, 3 + lay);
      double *q = tu_uniform(5 * 7 * 9, -3, 3, 11 + lay);
      for (int i = 0; i < 5 * 7 * 9; i++) q[i] = round(q[i]);
      tu_arr b = tu_make(dts[t], lay, 3, shape, q);
      free(q);
      for (int op = 0; op < R_NOPS; op++)
        for (int dim = -3; dim < 3; dim++)
          for (int kd = 0; kd < 2; kd++)
            check_reduce(op, op <= R_MEAN ? &a : &b, dim, kd,
                         tu_layout_name[lay]);
      tu_free(&a);
      tu_free(&b);
    }
}

/* Longer rows: vectorized and threaded paths, tails. */
static void test_reduce_large(void **state) {
  (void)state;
  const int64_t shape[2] = {33, 2049};
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < 3; lay++) {
      tu_arr a = tu_make_unif(dts[t], lay, 2, shape, -1, 3, 21 + lay);
      for (int op = 0; op < R_NOPS; op++)
        for (int dim = 0; dim < 2; dim++)
          check_reduce(op, &a, dim, false, tu_layout_name[lay]);
      tu_free(&a);
    }
}

static void test_argmax_ties_take_first(void **state) {
  (void)state;
  double v[12] = {1, 5, 5, 2, /**/ 7, 7, 7, 7, /**/ -1, -3, -1, -2};
  tc_tensor *t = tu_from(TC_F32, TC_SHAPE(3, 4), v);
  tc_tensor *a1 = TU_NN(tc_argmax(t, 1, false));
  tc_tensor *a0 = TU_NN(tc_argmax(t, 0, true));
  double *g1 = tu_read(a1), *g0 = tu_read(a0);
  assert_true(g1[0] == 1 && g1[1] == 0 && g1[2] == 0);
  TU_SHAPE_IS(a0, 2, ((const int64_t[]){1, 4}));
  assert_true(g0[0] == 1 && g0[1] == 1 && g0[2] == 1 && g0[3] == 1);
  free(g1);
  free(g0);
  tc_release(a1);
  tc_release(a0);
  /* argmin: the first minimum, in rows and columns */
  tc_tensor *n1 = TU_NN(tc_argmin(t, -1, false));
  tc_tensor *n0 = TU_NN(tc_argmin(t, 0, false));
  g1 = tu_read(n1);
  g0 = tu_read(n0);
  assert_true(g1[0] == 0 && g1[1] == 0 && g1[2] == 1);
  assert_true(g0[0] == 2 && g0[1] == 2 && g0[2] == 2 && g0[3] == 2);
  free(g1);
  free(g0);
  tc_release(n1);
  tc_release(n0);
  tc_release(t);
}

static void test_nan_propagates(void **state) {
  (void)state;
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  for (int k = 0; k < 2; k++) {
    double v[8] = {1, NAN, 3, 2, /**/ 4, 5, -INFINITY, NAN};
    tc_tensor *t = tu_from(dts[k], TC_SHAPE(2, 4), v);
    tc_tensor *mx = TU_NN(tc_max(t, 1, false)), *mn = TU_NN(tc_min(t, -1, false));
    tc_tensor *am = TU_NN(tc_argmax(t, 1, false)), *s = TU_NN(tc_sum(t, 1, false));
    tc_tensor *mx0 = TU_NN(tc_max(t, 0, false));
    double *gx = tu_read(mx), *gn = tu_read(mn), *ga = tu_read(am),
           *gs = tu_read(s), *g0 = tu_read(mx0);
    assert_true(isnan(gx[0]) && isnan(gx[1]));
    assert_true(isnan(gn[0]) && isnan(gn[1]));
    assert_true(isnan(gs[0]) && isnan(gs[1]));
    /* As torch.argmax: a NaN is the maximum. */
    if (ga[0] != 1 || ga[1] != 3)
      fail_msg("argmax with NaN: %g %g, expected 1 3", ga[0], ga[1]);
    /* ... and torch.argmin: the minimum too (not -inf before it). */
    tc_tensor *an = TU_NN(tc_argmin(t, 1, false));
    double *gan = tu_read(an);
    if (gan[0] != 1 || gan[1] != 3)
      fail_msg("argmin with NaN: %g %g, expected 1 3", gan[0], gan[1]);
    free(gan);
    tc_release(an);
    assert_true(g0[0] == 4 && isnan(g0[1]) && g0[2] == 3 && isnan(g0[3]));
    free(gx);
    free(gn);
    free(ga);
    free(gs);
    free(g0);
    tc_release(mx);
    tc_release(mn);
    tc_release(am);
    tc_release(s);
    tc_release(mx0);
    tc_release(t);
  }
}

static void test_int_and_bool(void **state) {
  (void)state;
  /* Sums of i32 accumulate in (and return) i64. */
  double v[6] = {2e9, 2e9, 2e9, -5, 7, 1};
  tc_tensor *t = tu_from(TC_I32, TC_SHAPE(2, 3), v);
  tc_tensor *s = TU_NN(tc_sum(t, 1, false)), *sa = TU_NN(tc_sum_all(t));
  assert_int_equal(tc_dtype_of(s), TC_I64);
  assert_int_equal(tc_dtype_of(sa), TC_I64);
  int64_t rs[2], ra;
  TU_OK(tc_copy_to(s, rs, sizeof rs));
  TU_OK(tc_copy_to(sa, &ra, sizeof ra));
  assert_true(rs[0] == INT64_C(6000000000) && rs[1] == 3);
  assert_true(ra == INT64_C(6000000003));
  tc_tensor *mx = TU_NN(tc_max(t, 0, false)), *mn = TU_NN(tc_min(t, 1, true));
  tc_tensor *am = TU_NN(tc_argmax(t, 0, false));
  tc_tensor *an = TU_NN(tc_argmin(t, 0, false));
  assert_int_equal(tc_dtype_of(an), TC_I64);
  double *gn = tu_read(an);
  assert_true(gn[0] == 1 && gn[1] == 1 && gn[2] == 1);
  free(gn);
  tc_release(an);
  assert_int_equal(tc_dtype_of(mx), TC_I32);
  assert_int_equal(tc_dtype_of(mn), TC_I32);
  assert_int_equal(tc_dtype_of(am), TC_I64);
  double *g = tu_read(mx);
  assert_true(g[0] == 2e9 && g[1] == 2e9 && g[2] == 2e9);
  free(g);
  g = tu_read(mn);
  assert_true(g[0] == 2e9 && g[1] == -5);
  free(g);
  g = tu_read(am);
  assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0);
  free(g);
  /* i64 sums stay exact beyond 2^53. */
  int64_t big[3] = {(INT64_C(1) << 60) + 1, (INT64_C(1) << 60) + 2, 3};
  tc_tensor *b = TU_NN(tc_from_data(TC_I64, TC_SHAPE(3), big, sizeof big));
  tc_tensor *bs = TU_NN(tc_sum_all(b));
  int64_t rb;
  TU_OK(tc_copy_to(bs, &rb, sizeof rb));
  assert_true(rb == (INT64_C(1) << 61) + 6);
  /* Sum of bool counts, as i64. */
  double bv[5] = {1, 0, 1, 1, 0};
  tc_tensor *bl = tu_from(TC_BOOL, TC_SHAPE(5), bv);
  tc_tensor *cnt = TU_NN(tc_sum(bl, 0, false));
  assert_int_equal(tc_dtype_of(cnt), TC_I64);
  assert_int_equal(tc_ndim(cnt), 0);
  assert_true(tu_item(cnt) == 3);
  /* mean requires a floating dtype (as torch.mean). */
  tc_clear_error();
  assert_null(tc_mean(t, 0, false));
  TU_EXPECT_ERR("tc_mean", "dtype|type|float|integer");
  tc_clear_error();
  tc_release(t);
  tc_release(s);
  tc_release(sa);
  tc_release(mx);
  tc_release(mn);
  tc_release(am);
  tc_release(b);
  tc_release(bs);
  tc_release(bl);
  tc_release(cnt);
}

static void test_sum_all_layouts(void **state) {
  (void)state;
  const int64_t shape[2] = {61, 47};
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(dts[t], lay, 2, shape, -2, 5, 31 + lay);
      tc_tensor *s = TU_NN(tc_sum_all(a.t));
      assert_int_equal(tc_ndim(s), 0);
      assert_int_equal(tc_dtype_of(s), dts[t]);
      double want = 0, abssum = 0;
      for (int64_t i = 0; i < a.n; i++) {
        want += a.v[i];
        abssum += fabs(a.v[i]);
      }
      double got = tu_item(s);
      if (!tu_close(got, want, 0, (dts[t] == TC_F32 ? 1e-5 : 1e-13) * abssum))
        fail_msg("sum_all %s %s = %.17g, expected %.17g",
                 tc_dtype_name(dts[t]), tu_layout_name[lay], got, want);
      tc_release(s);
      tu_free(&a);
    }
}

/* 16M f32 values: a sequential float sum loses ~2 digits; the canonical
** blocked/pairwise order keeps the relative error far below 1e-5. */
static void test_sum_all_16M_accuracy(void **state) {
  (void)state;
  const int64_t n = INT64_C(1) << 24;
  tc_tensor *t = TU_NN(tc_rand(TC_F32, TC_SHAPE(n), 123));
  float *buf = malloc((size_t)n * sizeof(float));
  assert_non_null(buf);
  TU_OK(tc_copy_to(t, buf, (size_t)n * sizeof(float)));
  double want = 0;
  for (int64_t i = 0; i < n; i++) want += buf[i];
  free(buf);
  tc_tensor *s = TU_NN(tc_sum_all(t));
  double got = tu_item(s);
  if (fabs(got - want) > 1e-5 * fabs(want))
    fail_msg("sum_all of 16M rand: %.9g, double sum %.9g (rel err %.3g)", got,
             want, fabs(got - want) / want);
  /* mean over the last dim of the same data, reshaped to 16 rows of 1M. */
  tc_tensor *r = TU_NN(tc_reshape(t, TC_SHAPE(16, -1)));
  tc_tensor *m = TU_NN(tc_mean(r, 1, false));
  double *gm = tu_read(m);
  for (int i = 0; i < 16; i++)
    if (fabs(gm[i] - 0.5) > 2e-3) fail_msg("row %d mean %g", i, gm[i]);
  free(gm);
  tc_release(m);
  tc_release(r);
  tc_release(s);
  tc_release(t);
  /* A constant 0.1f, where a sequential float sum drifts far. */
  tc_tensor *c = TU_NN(tc_full(TC_F32, TC_SHAPE(n), 0.1));
  tc_tensor *cs = TU_NN(tc_sum_all(c));
  double exact = (double)0.1f * (double)n;
  got = tu_item(cs);
  if (fabs(got - exact) > 1e-5 * exact)
    fail_msg("sum_all of 16M x 0.1f = %.9g, expected %.9g", got, exact);
  tc_release(cs);
  tc_release(c);
}

static void test_empty_and_degenerate(void **state) {
  (void)state;
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(3, 0)));
  tc_tensor *s = TU_NN(tc_sum(e, 1, false));
  TU_SHAPE_IS(s, 1, ((const int64_t[]){3}));
  double *g = tu_read(s);
  assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0);
  free(g);
  tc_tensor *s0 = TU_NN(tc_sum(e, 0, true));
  TU_SHAPE_IS(s0, 2, ((const int64_t[]){1, 0}));
  tc_tensor *sa = TU_NN(tc_sum_all(e));
  assert_true(tu_item(sa) == 0);
  /* max over an empty dim has no value: an error, as in torch. */
  tc_clear_error();
  assert_null(tc_max(e, 1, false));
  TU_EXPECT_ERR("tc_max", NULL);
  tc_clear_error();
  assert_null(tc_argmax(e, 1, false));
  TU_EXPECT_ERR("tc_argmax", NULL);
  tc_clear_error();
  assert_null(tc_argmin(e, -1, false));
  TU_EXPECT_ERR("tc_argmin", "size 0");
  tc_clear_error();
  assert_null(tc_argmin(e, 2, false));
  TU_EXPECT_ERR("tc_argmin", "dim");
  tc_clear_error();
  assert_null(tc_argmin(NULL, 0, false));
  tc_clear_error();
  /* Reducing a size-1 dim, and a 1-D tensor to 0-d. */
  double v[3] = {1.5, -2, 4};
  tc_tensor *t = tu_from(TC_F64, TC_SHAPE(1, 3), v);
  tc_tensor *m = TU_NN(tc_max(t, 0, false));
  g = tu_read(m);
  assert_true(g[0] == 1.5 && g[1] == -2 && g[2] == 4);
  free(g);
  tc_tensor *row = TU_NN(tc_squeeze(t, 0));
  tc_tensor *mn = TU_NN(tc_mean(row, 0, false));
  assert_int_equal(tc_ndim(mn), 0);
  assert_true(tu_close(tu_item(mn), 3.5 / 3, 1e-15, 0));
  tc_tensor *mnk = TU_NN(tc_min(row, -1, true));
  TU_SHAPE_IS(mnk, 1, ((const int64_t[]){1}));
  assert_true(tu_item(mnk) == -2);
  tc_release(mnk);
  tc_release(mn);
  tc_release(row);
  tc_release(m);
  tc_release(t);
  tc_release(s0);
  tc_release(sa);
  tc_release(s);
  tc_release(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_dims_layouts),
      cmocka_unit_test(test_reduce_large),
      cmocka_unit_test(test_argmax_ties_take_first),
      cmocka_unit_test(test_nan_propagates),
      cmocka_unit_test(test_int_and_bool),
      cmocka_unit_test(test_sum_all_layouts),
      cmocka_unit_test(test_sum_all_16M_accuracy),
      cmocka_unit_test(test_empty_and_degenerate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
