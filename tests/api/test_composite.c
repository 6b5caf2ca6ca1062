/*
** test_composite.c -- softmax, log_softmax (dim -1, dim 0, a middle dim; on
** several layouts; large and -inf inputs) and layer_norm (with and without
** gamma/beta, eps honoured, biased variance, stable for offset inputs)
** against double references with max subtraction / two-pass variance.
*/
#include "testutil.h"

static const tc_dtype FDT[2] = {TC_F32, TC_F64};

static void check_softmax(tu_arr *a, int dim, bool logsm, const char *ctx) {
  int nd = a->ndim, d = dim < 0 ? dim + nd : dim;
  int64_t outer = 1, len = a->shape[d], inner = 1;
  for (int j = 0; j < d; j++) outer *= a->shape[j];
  for (int j = d + 1; j < nd; j++) inner *= a->shape[j];
  tc_tensor *r = TU_NN(logsm ? tc_log_softmax(a->t, dim) : tc_softmax(a->t, dim));
  TU_SHAPE_IS(r, nd, a->shape);
  assert_int_equal(tc_dtype_of(r), a->dt);
  double *got = tu_read(r);
  bool f32 = a->dt == TC_F32;
  double rtol = f32 ? 1e-5 : 1e-13, atol = f32 ? 1e-6 : 1e-14;
  tu_cmp c;
  tu_cmp_init(&c, "%s %s dim %d %s", logsm ? "log_softmax" : "softmax",
              tc_dtype_name(a->dt), dim, ctx);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double m = -INFINITY, s = 0, psum = 0;
      for (int64_t k = 0; k < len; k++)
        m = fmax(m, a->v[(o * len + k) * inner + i]);
      for (int64_t k = 0; k < len; k++)
        s += exp(a->v[(o * len + k) * inner + i] - m);
      for (int64_t k = 0; k < len; k++) {
        int64_t idx = (o * len + k) * inner + i;
        double x = a->v[idx] - m;
        double want = logsm ? x - log(s) : exp(x) / s;
        bool ok = logsm ? tu_close(got[idx], want, rtol, atol)
                        : tu_close(got[idx], want, rtol, 1e-300);
        if (!ok) tu_cmp_bad(&c, idx, got[idx], want, a->v[idx]);
        psum += logsm ? exp(got[idx]) : got[idx];
      }
      if (fabs(psum - 1) > (f32 ? 1e-5 : 1e-12))
        tu_cmp_bad(&c, o * inner + i, psum, 1, NAN);
    }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_softmax_layouts(void **state) {
  (void)state;
  const int64_t shape[2] = {7, 33};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(FDT[t], lay, 2, shape, -10, 10, 5 + lay);
      for (int logsm = 0; logsm < 2; logsm++) {
        check_softmax(&a, -1, logsm, tu_layout_name[lay]);
        check_softmax(&a, 0, logsm, tu_layout_name[lay]);
        check_softmax(&a, 1, logsm, tu_layout_name[lay]);
      }
      tu_free(&a);
    }
}

static void test_softmax_large_and_3d(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tu_arr a = tu_make_unif(FDT[t], TU_CONTIG, 2, (const int64_t[]){64, 1000},
                            -20, 20, 17);
    check_softmax(&a, -1, false, "64x1000");
    check_softmax(&a, -1, true, "64x1000");
    check_softmax(&a, 0, false, "64x1000");
    tu_free(&a);
    tu_arr b = tu_make_unif(FDT[t], TU_SLICED, 3, (const int64_t[]){3, 5, 7},
                            -5, 5, 18);
    check_softmax(&b, 1, false, "3-D middle dim");
    check_softmax(&b, -2, true, "3-D middle dim");
    tu_free(&b);
  }
}

/* Large inputs do not overflow; -inf entries (masks) get probability 0. */
static void test_softmax_extreme_inputs(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    double v[12] = {1000, 1001, 1002, 1000, /**/ -1000, -1000, -1000, -1000,
                    /**/ 0, -INFINITY, 1, -INFINITY};
    tu_arr a = tu_make(FDT[t], TU_CONTIG, 2, (const int64_t[]){3, 4}, v);
    check_softmax(&a, -1, false, "extreme");
    check_softmax(&a, -1, true, "extreme");
    tc_tensor *p = TU_NN(tc_softmax(a.t, -1));
    double *g = tu_read(p);
    for (int i = 0; i < 12; i++) assert_true(isfinite(g[i]));
    assert_true(g[4] == g[7] && fabs(g[4] - 0.25) < 1e-7);
    assert_true(g[9] == 0 && g[11] == 0);
    free(g);
    tc_release(p);
    tc_tensor *lp = TU_NN(tc_log_softmax(a.t, -1));
    g = tu_read(lp);
    assert_true(g[9] == -INFINITY && g[11] == -INFINITY && isfinite(g[0]));
    free(g);
    tc_release(lp);
    tu_free(&a);
  }
}

/* Reference layer norm over the last dim (two-pass, biased variance). */
static void check_layer_norm(tu_arr *x, tu_arr *g, tu_arr *b, double eps,
                             double tol, const char *ctx) {
  int64_t n = x->shape[x->ndim - 1], rows = x->n / n;
  tc_tensor *r =
      TU_NN(tc_layer_norm(x->t, g ? g->t : NULL, b ? b->t : NULL, eps));
  TU_SHAPE_IS(r, x->ndim, x->shape);
  assert_int_equal(tc_dtype_of(r), x->dt);
  double *got = tu_read(r);
  tu_cmp c;
  tu_cmp_init(&c, "layer_norm %s eps %g gamma %d beta %d %s",
              tc_dtype_name(x->dt), eps, g != NULL, b != NULL, ctx);
  for (int64_t row = 0; row < rows; row++) {
    const double *xv = x->v + row * n;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < n; k++) mean += xv[k];
    mean /= (double)n;
    for (int64_t k = 0; k < n; k++) var += (xv[k] - mean) * (xv[k] - mean);
    var /= (double)n;
    for (int64_t k = 0; k < n; k++) {
      double want = (xv[k] - mean) / sqrt(var + eps);
      if (g) want *= g->v[k];
      if (b) want += b->v[k];
      double v = got[row * n + k];
      if (!tu_close(v, want, tol, tol)) tu_cmp_bad(&c, row * n + k, v, want, xv[k]);
    }
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_layer_norm(void **state) {
  (void)state;
  const int64_t s2[2] = {6, 37}, s3[3] = {2, 3, 37}, s1[1] = {37};
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    double tol = dt == TC_F32 ? 1e-5 : 1e-12;
    tu_arr g = tu_make_unif(dt, TU_CONTIG, 1, s1, 0.5, 1.5, 1);
    tu_arr b = tu_make_unif(dt, TU_CONTIG, 1, s1, -1, 1, 2);
    tu_arr gs = tu_make_unif(dt, TU_SLICED, 1, s1, -2, 2, 3);
    for (int lay = 0; lay < 3; lay++) {
      tu_arr x = tu_make_unif(dt, lay, 2, s2, -3, 5, 10 + lay);
      const char *ln = tu_layout_name[lay];
      check_layer_norm(&x, &g, &b, 1e-5, tol, ln);
      check_layer_norm(&x, NULL, NULL, 1e-5, tol, ln);
      check_layer_norm(&x, &g, NULL, 1e-5, tol, ln);
      check_layer_norm(&x, NULL, &b, 1e-5, tol, ln);
      check_layer_norm(&x, &gs, &b, 1e-3, tol, ln);
      tu_free(&x);
    }
    tu_arr x3 = tu_make_unif(dt, TU_TRANS, 3, s3, -1, 1, 20);
    check_layer_norm(&x3, &g, &b, 1e-5, tol, "3-D transposed");
    tu_free(&x3);
    tu_arr xl = tu_make_unif(dt, TU_CONTIG, 2, (const int64_t[]){5, 1000},
                             -2, 2, 21);
    tu_arr gl = tu_make_unif(dt, TU_CONTIG, 1, (const int64_t[]){1000}, 0.5,
                             1.5, 22);
    check_layer_norm(&xl, &gl, NULL, 1e-5, tol, "5x1000");
    tu_free(&xl);
    tu_free(&gl);
    tu_free(&g);
    tu_free(&b);
    tu_free(&gs);
  }
}

/* eps is added to the variance: with a tiny variance it changes the result
** a lot; a constant row gives zeros (not NaN). */
static void test_layer_norm_eps(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    double v[8] = {0, 0.01, 0, 0.01, /**/ 2, 2, 2, 2};
    tu_arr x = tu_make(FDT[t], TU_CONTIG, 2, (const int64_t[]){2, 4}, v);
    const double eps[3] = {1e-5, 1e-2, 1};
    for (int e = 0; e < 3; e++)
      check_layer_norm(&x, NULL, NULL, eps[e], FDT[t] == TC_F32 ? 1e-5 : 1e-12,
                       "tiny variance");
    tc_tensor *a = TU_NN(tc_layer_norm(x.t, NULL, NULL, 1e-5));
    tc_tensor *b = TU_NN(tc_layer_norm(x.t, NULL, NULL, 1e-2));
    double *ga = tu_read(a), *gb = tu_read(b);
    /* 0.005/sqrt(2.5e-5 + eps) */
    assert_true(fabs(ga[1] - 0.005 / sqrt(3.5e-5)) < 1e-4);
    assert_true(fabs(gb[1] - 0.005 / sqrt(0.010025)) < 1e-5);
    for (int i = 4; i < 8; i++) assert_true(ga[i] == 0 && gb[i] == 0);
    free(ga);
    free(gb);
    tc_release(a);
    tc_release(b);
    tu_free(&x);
  }
}

/* Rows with a large mean and unit spread: a naive E[x^2] - E[x]^2 in f32
** loses the variance; PyTorch (Welford / two-pass) does not. */
static void test_layer_norm_offset_input_stable(void **state) {
  (void)state;
  double *v = tu_uniform(8 * 256, -1.7, 1.7, 77);
  for (int i = 0; i < 8 * 256; i++) v[i] += 100;
  tu_arr x = tu_make(TC_F32, TU_CONTIG, 2, (const int64_t[]){8, 256}, v);
  free(v);
  check_layer_norm(&x, NULL, NULL, 1e-5, 1e-4, "mean 100");
  tu_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_layouts),
      cmocka_unit_test(test_softmax_large_and_3d),
      cmocka_unit_test(test_softmax_extreme_inputs),
      cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_layer_norm_eps),
      cmocka_unit_test(test_layer_norm_offset_input_stable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
