/*
** test_reduce_dims.c -- tc_var and tc_std over one dim, and sum / mean /
** var / std over several dims, against a two-pass reference in double
** written here: every dim and subset of dims (negative ones too), keepdim
** on and off, corrections 0, 1 and fractional, four layouts, f32 and f64;
** stability on data with a large mean; n - correction <= 0; errors.
*/
#include "testutil.h"

enum { K_SUM, K_MEAN, K_VAR, K_STD };
static const char *const KNAME[] = {"sum", "mean", "var", "std"};

/* -- The reference ----------------------------------------------------------- */

/* Output index of element i: its coordinates with the reduced ones dropped. */
static int64_t out_index(const tu_arr *a, const bool *red, int64_t i) {
  int64_t m[TC_MAX_DIMS], f = 0;
  tu_unravel(i, a->ndim, a->shape, m);
  for (int d = 0; d < a->ndim; d++)
    if (!red[d]) f = f * a->shape[d] + m[d];
  return f;
}

/* Reference of kind over the dims marked in red, into want[nout]; mag[o]
** gets the scale its rounding error is measured against. */
static void ref_reduce(int kind, const tu_arr *a, const bool *red,
                       double correction, double tol, double *want,
                       double *mag, int64_t nout) {
  double *sum = calloc((size_t)nout, sizeof(double));
  double *cnt = calloc((size_t)nout, sizeof(double));
  double *ss = calloc((size_t)nout, sizeof(double));
  double *abs = calloc((size_t)nout, sizeof(double));
  assert_true(sum && cnt && ss && abs);
  for (int64_t i = 0; i < a->n; i++) {
    int64_t o = out_index(a, red, i);
    sum[o] += a->v[i];
    abs[o] += fabs(a->v[i]);
    cnt[o] += 1;
  }
  for (int64_t i = 0; i < a->n; i++) {
    int64_t o = out_index(a, red, i);
    double dv = a->v[i] - sum[o] / cnt[o];
    ss[o] += dv * dv;
  }
  /* The rounding of the mean, delta ~ eps |x|, adds n delta^2 to the sum of
  ** squares: an absolute error that var (and std, its root) must allow for
  ** where the deviations are small, as in an expanded layout (all equal). */
  for (int64_t o = 0; o < nout; o++) {
    double var = ss[o] / fmax(0.0, cnt[o] - correction);
    double mabs = abs[o] / cnt[o];
    switch (kind) {
    case K_SUM: want[o] = sum[o]; mag[o] = abs[o]; break;
    case K_MEAN: want[o] = sum[o] / cnt[o]; mag[o] = mabs; break;
    case K_VAR:
      want[o] = var;
      mag[o] = var + tol * cnt[o] * mabs * mabs;
      break;
    default:
      want[o] = sqrt(var);
      mag[o] = sqrt(var) + sqrt(cnt[o]) * mabs;
      break;
    }
  }
  free(sum);
  free(cnt);
  free(ss);
  free(abs);
}

/* -- Running the ops ----------------------------------------------------------- */

static tc_tensor *run(int kind, tc_tensor *t, int ndims, const int *dims,
                      double corr, bool keepdim) {
  if (ndims == 1 && kind == K_VAR) return tc_var(t, dims[0], corr, keepdim);
  if (ndims == 1 && kind == K_STD) return tc_std(t, dims[0], corr, keepdim);
  switch (kind) {
  case K_SUM: return tc_sum_dims(t, ndims, dims, keepdim);
  case K_MEAN: return tc_mean_dims(t, ndims, dims, keepdim);
  case K_VAR: return tc_var_dims(t, ndims, dims, corr, keepdim);
  default: return tc_std_dims(t, ndims, dims, corr, keepdim);
  }
}

static void check(int kind, tu_arr *a, int ndims, const int *dims,
                  double corr, bool keepdim, const char *ctx) {
  bool red[TC_MAX_DIMS] = {false};
  for (int i = 0; i < ndims; i++)
    red[dims[i] < 0 ? dims[i] + a->ndim : dims[i]] = true;
  int64_t os[TC_MAX_DIMS], nout = 1;
  int on = 0;
  for (int d = 0; d < a->ndim; d++)
    if (!red[d]) {
      os[on++] = a->shape[d];
      nout *= a->shape[d];
    } else if (keepdim) {
      os[on++] = 1;
    }
  tc_tensor *r = TU_NN(run(kind, a->t, ndims, dims, corr, keepdim));
  TU_SHAPE_IS(r, on, os);
  assert_int_equal(tc_dtype_of(r), a->dt);
  double *want = malloc((size_t)nout * sizeof(double));
  double *mag = malloc((size_t)nout * sizeof(double));
  assert_true(want && mag);
  double tol = a->dt == TC_F32 ? 2e-6 : 1e-14;
  ref_reduce(kind, a, red, corr, tol, want, mag, nout);
  double *got = tu_read(r);
  tu_cmp c;
  tu_cmp_init(&c, "%s %s over %d dims (first %d) corr %g keepdim %d %s",
              KNAME[kind], tc_dtype_name(a->dt), ndims, dims[0], corr,
              (int)keepdim, ctx);
  for (int64_t o = 0; o < nout; o++)
    if (!tu_close(got[o], want[o], tol, tol * mag[o] + 1e-300))
      tu_cmp_bad(&c, o, got[o], want[o], (double)o);
  free(got);
  free(want);
  free(mag);
  tc_release(r);
  TU_CMP_DONE(c);
}

/* -- Tests ----------------------------------------------------------------------- */

static const tc_dtype FDT[2] = {TC_F32, TC_F64};

/* var and std over each dim of a 3-D tensor in every layout. */
static void test_var_std_one_dim(void **state) {
  (void)state;
  const int64_t shape[3] = {5, 7, 9};
  const double corrs[3] = {1, 0, 2.5};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(FDT[t], lay, 3, shape, -10, 10, 7 + lay);
      for (int kind = K_VAR; kind <= K_STD; kind++)
        for (int dim = -3; dim < 3; dim++)
          for (int ci = 0; ci < 3; ci++)
            check(kind, &a, 1, &dim, corrs[ci], (dim + ci) % 2,
                  tu_layout_name[lay]);
      tu_free(&a);
    }
}

/* Subsets of the dims of a 4-D tensor, given in any order. */
static void test_reduce_several_dims(void **state) {
  (void)state;
  const int64_t shape[4] = {3, 4, 5, 6};
  static const int sets[][4] = {
      {1, 2}, {-1, 0}, {3, 1, 0}, {0, 1, 2, 3}, {-2, -1}, {2}, {0, -3},
      {3, 2, 1},
  };
  static const int nsets[] = {2, 2, 3, 4, 2, 1, 2, 3};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(FDT[t], lay, 4, shape, -3, 5, 17 + lay);
      for (int kind = K_SUM; kind <= K_STD; kind++)
        for (size_t s = 0; s < sizeof nsets / sizeof nsets[0]; s++)
          for (int kd = 0; kd < 2; kd++)
            check(kind, &a, nsets[s], sets[s], kind >= K_VAR ? 1 : 0, kd,
                  tu_layout_name[lay]);
      tu_free(&a);
    }
}

/* Long rows (past one reduction chunk) and integer sums over several dims. */
static void test_reduce_dims_large_and_int(void **state) {
  (void)state;
  const int64_t shape[3] = {3, 70, 90};
  int d12[2] = {1, 2}, d02[2] = {0, 2};
  for (int t = 0; t < 2; t++) {
    tu_arr a = tu_make_unif(FDT[t], TU_CONTIG, 3, shape, -1, 3, 41);
    check(K_VAR, &a, 2, d12, 1, false, "large");
    check(K_MEAN, &a, 2, d02, 0, true, "large");
    tu_free(&a);
  }
  double v[6] = {2e9, 2e9, 2e9, -5, 7, 1};
  tc_tensor *i32 = tu_from(TC_I32, TC_SHAPE(2, 3), v);
  int both[2] = {0, 1};
  tc_tensor *s = TU_NN(tc_sum_dims(i32, 2, both, false));
  assert_int_equal(tc_dtype_of(s), TC_I64);   /* as tc_sum: i64 */
  int64_t got;
  TU_OK(tc_copy_to(s, &got, sizeof got));
  assert_true(got == INT64_C(6000000003));
  tc_release(s);
  tc_release(i32);
}

/* Two passes: a large mean does not cancel the variance away (a one-pass
** sum of squares in f32 would lose every digit here). */
static void test_var_large_mean(void **state) {
  (void)state;
  const int64_t n = 10000;
  double *v = tu_uniform(n, -1, 1, 5);
  for (int64_t i = 0; i < n; i++) v[i] += 1e4;
  tc_tensor *t = tu_from(TC_F32, TC_SHAPE(n), v);
  double *stored = tu_read(t);
  double m = 0, ss = 0;
  for (int64_t i = 0; i < n; i++) m += stored[i];
  m /= (double)n;
  for (int64_t i = 0; i < n; i++) ss += (stored[i] - m) * (stored[i] - m);
  tc_tensor *r = TU_NN(tc_var(t, 0, 1, false));
  double got = tu_item(r), want = ss / (double)(n - 1);
  if (fabs(got - want) > 1e-3 * want)
    fail_msg("var of 1e4 + U(-1, 1) in f32: %.9g, expected %.9g", got, want);
  free(stored);
  free(v);
  tc_release(r);
  tc_release(t);
}

/* n - correction <= 0 divides by zero (inf, or NaN for 0 / 0), as torch;
** empty dims give NaN. */
static void test_var_degenerate(void **state) {
  (void)state;
  double v[3] = {1, 2, 4};
  tc_tensor *t = tu_from(TC_F64, TC_SHAPE(1, 3), v);
  tc_tensor *a = TU_NN(tc_var(t, 1, 3, false));
  tc_tensor *b = TU_NN(tc_var(t, 0, 1, false));   /* one element each */
  tc_tensor *c = TU_NN(tc_std(t, 1, 0, true));
  assert_true(isinf(tu_item(a)) && tu_item(a) > 0);
  double *gb = tu_read(b);
  assert_true(isnan(gb[0]) && isnan(gb[1]) && isnan(gb[2]));
  TU_SHAPE_IS(c, 2, ((const int64_t[]){1, 1}));
  assert_true(tu_close(tu_item(c), sqrt(14.0 / 9.0), 1e-15, 0));
  free(gb);
  tc_release(a);
  tc_release(b);
  tc_release(c);
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 0)));
  tc_tensor *ve = TU_NN(tc_var(e, 1, 1, false));
  double *ge = tu_read(ve);
  assert_true(isnan(ge[0]) && isnan(ge[1]));
  free(ge);
  int d1[1] = {1};
  tc_tensor *se = TU_NN(tc_sum_dims(e, 1, d1, false));
  ge = tu_read(se);
  assert_true(ge[0] == 0 && ge[1] == 0);
  free(ge);
  tc_release(se);
  tc_release(ve);
  tc_release(e);
  /* 0-d: its one dim is 0 or -1 */
  tc_tensor *z = TU_NN(tc_full(TC_F64, 0, NULL, 2.5));
  int dm1[1] = {-1};
  tc_tensor *zs = TU_NN(tc_mean_dims(z, 1, dm1, true));
  assert_int_equal(tc_ndim(zs), 0);
  assert_true(tu_item(zs) == 2.5);
  tc_release(zs);
  tc_release(z);
  tc_release(t);
}

static void test_errors(void **state) {
  (void)state;
  tc_tensor *f = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 3, 4)));
  tc_tensor *i = TU_NN(tc_zeros(TC_I32, TC_SHAPE(2, 3)));
  int dup[2] = {1, -2}, out[2] = {0, 3}, ok[2] = {0, 1};
  tc_clear_error();
  assert_null(tc_var(i, 0, 1, false));
  TU_EXPECT_ERR("tc_var", "dtype");
  tc_clear_error();
  assert_null(tc_std(f, 3, 1, false));
  TU_EXPECT_ERR("tc_std", "dim");
  tc_clear_error();
  assert_null(tc_sum_dims(f, 2, dup, false));
  TU_EXPECT_ERR("tc_sum_dims", "more than once");
  tc_clear_error();
  assert_null(tc_mean_dims(f, 2, out, false));
  TU_EXPECT_ERR("tc_mean_dims", "out of range");
  tc_clear_error();
  assert_null(tc_mean_dims(i, 2, ok, false));
  TU_EXPECT_ERR("tc_mean_dims", "dtype");
  tc_clear_error();
  assert_null(tc_var_dims(f, 0, ok, 1, false));
  TU_EXPECT_ERR("tc_var_dims", "dims");
  tc_clear_error();
  assert_null(tc_std_dims(f, 4, (int[]){0, 1, 2, 0}, 1, false));
  TU_EXPECT_ERR("tc_std_dims", "dims");
  tc_clear_error();
  assert_null(tc_sum_dims(f, 1, NULL, false));
  TU_EXPECT_ERR("tc_sum_dims", "dims");
  tc_clear_error();
  assert_null(tc_var(NULL, 0, 1, false));
  assert_null(tc_sum_dims(NULL, 2, ok, false));
  tc_clear_error();
  tc_release(f);
  tc_release(i);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_var_std_one_dim),
      cmocka_unit_test(test_reduce_several_dims),
      cmocka_unit_test(test_reduce_dims_large_and_int),
      cmocka_unit_test(test_var_large_mean),
      cmocka_unit_test(test_var_degenerate),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
