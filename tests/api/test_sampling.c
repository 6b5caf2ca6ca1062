/*
** test_sampling.c -- tc_topk, tc_multinomial and tc_dropout against naive
** references written here: a stable selection for topk (ties to the lower
** index, NaN largest), the documented draws for multinomial (uniforms from
** tc_rand's stream, a running sum searched in double) plus frequencies,
** and the documented mask for dropout; errors for bad arguments. Runs
** eager and traced (TC_COMPILE=1).
*/
#include "testutil.h"

/* -- topk ------------------------------------------------------------------- */

/* Does x go before y? NaN above every number, ties by index. */
static bool before(double x, int64_t ix, double y, int64_t iy, bool largest) {
  bool xn = isnan(x), yn = isnan(y);
  if (xn != yn) return largest ? xn : yn;
  if (!xn && x != y) return largest ? x > y : x < y;
  return ix < iy;
}

/* Indices of the k best of row v[0..n) (stride st), best first. */
static void ref_topk_row(const double *v, int64_t st, int64_t n, int64_t k,
                         bool largest, bool sorted, int64_t *out) {
  int64_t *ord = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) ord[i] = i;
  for (int64_t i = 1; i < n; i++) /* insertion sort: stable */
    for (int64_t j = i; j > 0 && before(v[ord[j] * st], ord[j],
                                        v[ord[j - 1] * st], ord[j - 1],
                                        largest); j--) {
      int64_t t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  if (!sorted) /* the k chosen, in index order */
    for (int64_t i = 1; i < k; i++)
      for (int64_t j = i; j > 0 && ord[j] < ord[j - 1]; j--) {
        int64_t t = ord[j];
        ord[j] = ord[j - 1];
        ord[j - 1] = t;
      }
  memcpy(out, ord, sizeof(int64_t) * (size_t)k);
  free(ord);
}

static void check_topk(tu_arr *a, int64_t k, int dim, bool largest,
                       bool sorted) {
  int nd = a->ndim, d = dim < 0 ? dim + nd : dim;
  tc_tensor *vals = NULL, *idx = NULL;
  TU_OK(tc_topk(a->t, k, dim, largest, sorted, &vals, &idx));
  int64_t os[TC_MAX_DIMS];
  memcpy(os, a->shape, sizeof(int64_t) * (size_t)nd);
  os[d] = k;
  TU_SHAPE_IS(vals, nd, os);
  TU_SHAPE_IS(idx, nd, os);
  assert_int_equal(tc_dtype_of(idx), TC_I64);
  assert_int_equal(tc_dtype_of(vals), a->dt);
  double *gv = tu_read(vals), *gi = tu_read(idx);
  int64_t n = a->shape[d], inner = 1, outer = 1;
  for (int e = d + 1; e < nd; e++) inner *= a->shape[e];
  for (int e = 0; e < d; e++) outer *= a->shape[e];
  int64_t *want = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
  for (int64_t o = 0; o < outer; o++)
    for (int64_t q = 0; q < inner; q++) {
      const double *row = a->v + o * n * inner + q;
      ref_topk_row(row, inner, n, k, largest, sorted, want);
      for (int64_t j = 0; j < k; j++) {
        int64_t at = (o * k + j) * inner + q;
        double wv = row[want[j] * inner];
        if (gi[at] != (double)want[j] ||
            !(gv[at] == wv || (isnan(gv[at]) && isnan(wv))))
          fail_msg("topk k %lld dim %d largest %d sorted %d: row (%lld, "
                   "%lld) place %lld: got index %g value %g, want %lld %g",
                   (long long)k, dim, largest, sorted, (long long)o,
                   (long long)q, (long long)j, gi[at], gv[at],
                   (long long)want[j], wv);
      }
    }
  free(want);
  free(gv);
  free(gi);
  tc_release(vals);
  tc_release(idx);
}

static void test_topk_values(void **state) {
  (void)state;
  const tc_dtype dts[3] = {TC_F32, TC_F64, TC_I32};
  for (int di = 0; di < 3; di++)
    for (int l = 0; l < TU_NLAYOUTS; l++) {
      /* few distinct values: many ties */
      double v[4 * 5 * 9];
      tu_rng r = {(uint64_t)(di * 10 + l)};
      for (int i = 0; i < 180; i++) v[i] = (double)(tu_next(&r) % 7) - 3;
      tu_arr a = tu_make(dts[di], l, TC_SHAPE(4, 5, 9), v);
      for (int dim = -3; dim < 3; dim++) {
        int64_t n = a.shape[dim < 0 ? dim + 3 : dim];
        for (int64_t k = 0; k <= n; k += (n > 4 ? 3 : 1))
          for (int f = 0; f < 4; f++) check_topk(&a, k, dim, f & 1, f & 2);
      }
      tu_free(&a);
    }
}

static void test_topk_nan_and_only_indices(void **state) {
  (void)state;
  double v[6] = {1, NAN, 5, -2, NAN, 5};
  tu_arr a = tu_make(TC_F64, TU_CONTIG, TC_SHAPE(6), v);
  for (int64_t k = 0; k <= 6; k++)
    for (int f = 0; f < 4; f++) check_topk(&a, k, 0, f & 1, f & 2);
  tc_tensor *idx = NULL;
  TU_OK(tc_topk(a.t, 3, 0, true, true, NULL, &idx));
  double *gi = tu_read(idx);
  assert_true(gi[0] == 1 && gi[1] == 4 && gi[2] == 2); /* NaN, NaN, 5 */
  free(gi);
  tc_release(idx);
  tu_free(&a);
}

static void test_topk_errors(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(3, 4)));
  tc_tensor *b = TU_NN(tc_zeros(TC_BOOL, TC_SHAPE(3)));
  tc_tensor *s = TU_NN(tc_zeros(TC_F32, 0, NULL));
  tc_tensor *v = NULL, *i = NULL;
  tc_clear_error();
  assert_int_equal(tc_topk(a, 5, 1, true, true, &v, &i), -1);
  TU_EXPECT_ERR("tc_topk", "k 5 is out of range");
  tc_clear_error();
  assert_int_equal(tc_topk(a, -1, 1, true, true, &v, &i), -1);
  TU_EXPECT_ERR("tc_topk", "out of range");
  tc_clear_error();
  assert_int_equal(tc_topk(a, 1, 2, true, true, &v, &i), -1);
  TU_EXPECT_ERR("tc_topk", "dim");
  tc_clear_error();
  assert_int_equal(tc_topk(b, 1, 0, true, true, &v, &i), -1);
  TU_EXPECT_ERR("tc_topk", "bool");
  tc_clear_error();
  assert_int_equal(tc_topk(s, 1, 0, true, true, &v, &i), -1);
  TU_EXPECT_ERR("tc_topk", "dim");
  tc_clear_error();
  assert_int_equal(tc_topk(a, 1, 0, true, true, NULL, NULL), -1);
  TU_EXPECT_ERR("tc_topk", "NULL");
  tc_clear_error();
  assert_int_equal(tc_topk(NULL, 1, 0, true, true, &v, &i), -1);
  assert_null(v);
  assert_null(i);
  tc_clear_error();
  tc_release(a);
  tc_release(b);
  tc_release(s);
}

/* -- multinomial ------------------------------------------------------------ */

/* The documented draws: uniform u_j = tc_rand(f64)[r * n + j], the first
** category whose running sum (double, in tc_cumsum's order: segments of
** 256 summed in order, the segments before added in front) exceeds
** u_j * total, the last such sum; the last positive one if none does;
** without replacement a drawn weight is set to 0 for later draws. */
static void ref_multinomial(const double *p, int64_t rows, int64_t m,
                            int64_t n, bool repl, uint64_t seed,
                            double *out) {
  tc_tensor *u = TU_NN(tc_rand(TC_F64, TC_SHAPE(rows * n), seed));
  double *uv = tu_read(u);
  double *w = malloc(sizeof(double) * (size_t)m);
  double *cum = malloc(sizeof(double) * (size_t)m);
  for (int64_t r = 0; r < rows; r++) {
    memcpy(w, p + r * m, sizeof(double) * (size_t)m);
    for (int64_t j = 0; j < n; j++) {
      double carry = 0, seg = 0;
      int64_t last = 0;
      for (int64_t i = 0; i < m; i++) {
        if (i % 256 == 0) {
          carry += seg;
          seg = 0;
        }
        seg += w[i];
        cum[i] = carry + seg;
        if (w[i] > 0) last = i;
      }
      double x = uv[r * n + j] * cum[m - 1];
      int64_t pick = last;
      for (int64_t i = 0; i < m; i++)
        if (cum[i] > x) {
          pick = i;
          break;
        }
      out[r * n + j] = (double)pick;
      if (!repl) w[pick] = 0;
    }
  }
  free(w);
  free(cum);
  free(uv);
  tc_release(u);
}

static void test_multinomial_draws(void **state) {
  (void)state;
  double p[3 * 6] = {0.1, 0,   0.3, 0.2, 0.4, 0,    /* two zero weights */
                     1,   1,   1,   1,   1,   1,    /* unnormalized */
                     0,   0,   0,   0,   0,   2.5}; /* one choice */
  for (int t = 0; t < 2; t++)
    for (int repl = 0; repl < 2; repl++) {
      tc_dtype dt = t ? TC_F64 : TC_F32;
      tu_arr pr = tu_make(dt, TU_SLICED, TC_SHAPE(3, 6), p);
      int64_t n = repl ? 40 : 1;
      uint64_t seed = 0xfeedface12345678ull + (uint64_t)repl;
      tc_tensor *r = TU_NN(tc_multinomial(pr.t, n, repl, seed));
      TU_SHAPE_IS(r, 2, ((int64_t[]){3, n}));
      assert_int_equal(tc_dtype_of(r), TC_I64);
      double *got = tu_read(r), want[120];
      ref_multinomial(pr.v, 3, 6, n, repl, seed, want);
      for (int64_t i = 0; i < 3 * n; i++) assert_true(got[i] == want[i]);
      for (int64_t j = 0; j < n; j++) {
        assert_true(got[j] != 1 && got[j] != 5); /* zero weights */
        assert_true(got[2 * n + j] == 5);
      }
      free(got);
      tc_release(r);
      tu_free(&pr);
    }
  /* without replacement: a permutation of the positive categories */
  tc_tensor *pv = tu_from(TC_F64, TC_SHAPE(5), (double[]){1, 2, 0, 3, 4});
  tc_tensor *r = TU_NN(tc_multinomial(pv, 4, false, 7));
  TU_SHAPE_IS(r, 1, ((int64_t[]){4}));
  double *got = tu_read(r), want[4];
  ref_multinomial((double[]){1, 2, 0, 3, 4}, 1, 5, 4, false, 7, want);
  bool seen[5] = {false};
  for (int j = 0; j < 4; j++) {
    assert_true(got[j] == want[j]);
    assert_true(got[j] != 2 && !seen[(int)got[j]]);
    seen[(int)got[j]] = true;
  }
  free(got);
  tc_release(r);
  tc_release(pv);
  /* long rows (sums of several segments), many draws, either way */
  double *lp = tu_uniform(2 * 1000, 0, 1, 9);
  for (int i = 0; i < 2 * 1000; i += 3) lp[i] = 0;
  tc_tensor *lt = tu_from(TC_F64, TC_SHAPE(2, 1000), lp);
  for (int repl = 0; repl < 2; repl++) {
    int64_t n = repl ? 300 : 20;
    tc_tensor *lr = TU_NN(tc_multinomial(lt, n, repl, 11));
    double *lg = tu_read(lr), *lw = malloc(sizeof(double) * 2 * 300);
    ref_multinomial(lp, 2, 1000, n, repl, 11, lw);
    for (int64_t i = 0; i < 2 * n; i++) assert_true(lg[i] == lw[i]);
    free(lg);
    free(lw);
    tc_release(lr);
  }
  tc_release(lt);
  free(lp);
}

static void test_multinomial_frequencies_and_seeds(void **state) {
  (void)state;
  const double p[3] = {0.1, 0.2, 0.7};
  const int64_t n = 20000;
  tc_tensor *pv = tu_from(TC_F64, TC_SHAPE(3), p);
  tc_tensor *r = TU_NN(tc_multinomial(pv, n, true, 99));
  double *got = tu_read(r);
  int64_t count[3] = {0, 0, 0};
  for (int64_t j = 0; j < n; j++) count[(int)got[j]]++;
  for (int i = 0; i < 3; i++) {
    double mean = p[i] * n, sd = sqrt(n * p[i] * (1 - p[i]));
    assert_true(fabs((double)count[i] - mean) < 5 * sd);
  }
  /* the same seed draws the same; another seed draws otherwise */
  tc_tensor *r2 = TU_NN(tc_multinomial(pv, n, true, 99));
  tc_tensor *r3 = TU_NN(tc_multinomial(pv, n, true, 100));
  double *g2 = tu_read(r2), *g3 = tu_read(r3);
  int64_t diff = 0;
  for (int64_t j = 0; j < n; j++) {
    assert_true(g2[j] == got[j]);
    diff += g3[j] != got[j];
  }
  assert_true(diff > n / 4);
  free(got);
  free(g2);
  free(g3);
  tc_release(r);
  tc_release(r2);
  tc_release(r3);
  tc_release(pv);
}

static void test_multinomial_errors(void **state) {
  (void)state;
  tc_tensor *neg = tu_from(TC_F32, TC_SHAPE(3), (double[]){0.5, -0.1, 1});
  tc_tensor *nan = tu_from(TC_F32, TC_SHAPE(2), (double[]){NAN, 1});
  tc_tensor *zero = tu_from(TC_F64, TC_SHAPE(2, 2), (double[]){1, 0, 0, 0});
  tc_tensor *two = tu_from(TC_F64, TC_SHAPE(3), (double[]){1, 0, 1});
  tc_tensor *ints = tu_from(TC_I64, TC_SHAPE(2), (double[]){1, 1});
  tc_tensor *cube = TU_NN(tc_ones(TC_F32, TC_SHAPE(2, 2, 2)));
  tc_clear_error();
  assert_null(tc_multinomial(neg, 1, true, 1));
  TU_EXPECT_ERR("tc_multinomial", ">= 0");
  tc_clear_error();
  assert_null(tc_multinomial(nan, 1, true, 1));
  TU_EXPECT_ERR("tc_multinomial", "finite");
  tc_clear_error();
  assert_null(tc_multinomial(zero, 1, true, 1));
  TU_EXPECT_ERR("tc_multinomial", "row 1");
  tc_clear_error();
  assert_null(tc_multinomial(two, 3, false, 1));
  TU_EXPECT_ERR("tc_multinomial", "without replacement");
  tc_clear_error();
  assert_null(tc_multinomial(ints, 1, true, 1));
  TU_EXPECT_ERR("tc_multinomial", "float");
  tc_clear_error();
  assert_null(tc_multinomial(cube, 1, true, 1));
  TU_EXPECT_ERR("tc_multinomial", "2-D");
  tc_clear_error();
  assert_null(tc_multinomial(two, 0, true, 1));
  TU_EXPECT_ERR("tc_multinomial", "positive");
  tc_clear_error();
  tc_release(neg);
  tc_release(nan);
  tc_release(zero);
  tc_release(two);
  tc_release(ints);
  tc_release(cube);
}

/* -- dropout ------------------------------------------------------------------ */

static void check_dropout(tc_dtype dt, int layout, double p, uint64_t seed) {
  tu_arr a = tu_make_unif(dt, layout, TC_SHAPE(37, 41), -3, 3, seed + 5);
  tc_tensor *r = TU_NN(tc_dropout(a.t, p, true, seed));
  TU_SHAPE_IS(r, 2, a.shape);
  assert_int_equal(tc_dtype_of(r), dt);
  tc_tensor *u = TU_NN(tc_rand(dt, 2, a.shape, seed));
  double *uv = tu_read(u), *got = tu_read(r);
  double scale = p < 1 ? 1 / (1 - p) : 0;
  int64_t dropped = 0;
  for (int64_t i = 0; i < a.n; i++) {
    bool drop = dt == TC_F32 ? uv[i] < (double)(float)p : uv[i] < p;
    double want = drop ? 0
                  : dt == TC_F32 ? (double)((float)a.v[i] * (float)scale)
                                 : a.v[i] * scale;
    if (got[i] != want)
      fail_msg("dropout %s p %g: element %lld is %g, want %g",
               tc_dtype_name(dt), p, (long long)i, got[i], want);
    dropped += drop;
  }
  double sd = sqrt((double)a.n * p * (1 - p));
  assert_true(fabs((double)dropped - p * (double)a.n) <= 5 * sd + 0.5);
  free(uv);
  free(got);
  tc_release(u);
  tc_release(r);
  tu_free(&a);
}

static void test_dropout_values(void **state) {
  (void)state;
  const double ps[5] = {0, 0.1, 0.5, 0.9, 1};
  for (int t = 0; t < 2; t++)
    for (int l = 0; l < TU_NLAYOUTS; l++)
      for (int i = 0; i < 5; i++)
        check_dropout(t ? TC_F64 : TC_F32, l, ps[i], 1000 + (uint64_t)i);
}

static void test_dropout_eval_and_errors(void **state) {
  (void)state;
  tu_arr a = tu_make_unif(TC_F32, TU_TRANS, TC_SHAPE(5, 7), -1, 1, 3);
  tc_tensor *r = TU_NN(tc_dropout(a.t, 0.5, false, 1));
  double *got = tu_read(r);
  for (int64_t i = 0; i < a.n; i++) assert_true(got[i] == a.v[i]);
  free(got);
  tc_release(r);
  tc_tensor *ints = TU_NN(tc_ones(TC_I32, TC_SHAPE(3)));
  tc_clear_error();
  assert_null(tc_dropout(a.t, 1.5, true, 1));
  TU_EXPECT_ERR("tc_dropout", "[0, 1]");
  tc_clear_error();
  assert_null(tc_dropout(a.t, NAN, true, 1));
  TU_EXPECT_ERR("tc_dropout", "[0, 1]");
  tc_clear_error();
  assert_null(tc_dropout(ints, 0.5, true, 1));
  TU_EXPECT_ERR("tc_dropout", "must be floating");
  tc_clear_error();
  tc_release(ints);
  tu_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_topk_values),
      cmocka_unit_test(test_topk_nan_and_only_indices),
      cmocka_unit_test(test_topk_errors),
      cmocka_unit_test(test_multinomial_draws),
      cmocka_unit_test(test_multinomial_frequencies_and_seeds),
      cmocka_unit_test(test_multinomial_errors),
      cmocka_unit_test(test_dropout_values),
      cmocka_unit_test(test_dropout_eval_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
