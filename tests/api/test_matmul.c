/*
** test_matmul.c -- tc_matmul for 2-D, batched 3-D, a 2-D operand broadcast
** over a batch, transposed/sliced/expanded operands, odd and larger sizes,
** empty dims, f32 and f64, against a naive double triple loop. The error
** bound is the rigorous one for any summation order: |err| <= 2*k*u*sum|a*b|
** (u = unit roundoff of the dtype). Integer matmul works exactly or errors.
*/
#include "testutil.h"

static const tc_dtype FDT[2] = {TC_F32, TC_F64};

static void check_matmul(tu_arr *A, tu_arr *B, const char *ctx) {
  bool ab = A->ndim == 3, bb = B->ndim == 3;
  int64_t batch = ab ? A->shape[0] : bb ? B->shape[0] : 1;
  int64_t m = A->shape[A->ndim - 2], k = A->shape[A->ndim - 1];
  int64_t n = B->shape[B->ndim - 1];
  assert_int_equal(B->shape[B->ndim - 2], k);
  tc_tensor *r = TU_NN(tc_matmul(A->t, B->t));
  int64_t os[3] = {batch, m, n};
  if (ab || bb) TU_SHAPE_IS(r, 3, os);
  else TU_SHAPE_IS(r, 2, os + 1);
  assert_int_equal(tc_dtype_of(r), A->dt);
  double *got = tu_read(r);
  double u = A->dt == TC_F32 ? 0x1p-24 : 0x1p-53;
  tu_cmp c;
  tu_cmp_init(&c, "matmul %s %s", tc_dtype_name(A->dt), ctx);
  for (int64_t bi = 0; bi < batch; bi++) {
    const double *a = A->v + (ab ? bi * m * k : 0);
    const double *b = B->v + (bb ? bi * k * n : 0);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs = 0;
        for (int64_t p = 0; p < k; p++) {
          s += a[i * k + p] * b[p * n + j];
          abs += fabs(a[i * k + p] * b[p * n + j]);
        }
        int64_t idx = (bi * m + i) * n + j;
        if (!tu_close(got[idx], s, 0, 2.0 * (double)k * u * abs))
          tu_cmp_bad(&c, idx, got[idx], s, (double)i);
      }
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void run(tc_dtype dt, int la, int an, const int64_t *as, int lb, int bn,
                const int64_t *bs, const char *ctx, uint64_t seed) {
  tu_arr A = tu_make_unif(dt, la, an, as, -1, 1, seed);
  tu_arr B = tu_make_unif(dt, lb, bn, bs, -1, 1, seed + 1);
  check_matmul(&A, &B, ctx);
  tu_free(&A);
  tu_free(&B);
}

static void test_matmul_2d(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    run(dt, TU_CONTIG, TC_SHAPE(7, 13), TU_CONTIG, TC_SHAPE(13, 5), "7x13@13x5",
        1);
    run(dt, TU_CONTIG, TC_SHAPE(128, 256), TU_CONTIG, TC_SHAPE(256, 64),
        "128x256@256x64", 3);
    run(dt, TU_CONTIG, TC_SHAPE(129, 257), TU_CONTIG, TC_SHAPE(257, 65),
        "129x257@257x65", 5);
    run(dt, TU_CONTIG, TC_SHAPE(1, 300), TU_CONTIG, TC_SHAPE(300, 1),
        "row@column", 7);
    run(dt, TU_CONTIG, TC_SHAPE(9, 1), TU_CONTIG, TC_SHAPE(1, 11), "outer", 9);
    run(dt, TU_CONTIG, TC_SHAPE(3, 1000), TU_CONTIG, TC_SHAPE(1000, 2),
        "long k", 11);
  }
}

static void test_matmul_layouts(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    run(dt, TU_TRANS, TC_SHAPE(7, 13), TU_TRANS, TC_SHAPE(13, 5),
        "transposed both", 21);
    run(dt, TU_TRANS, TC_SHAPE(67, 45), TU_CONTIG, TC_SHAPE(45, 33),
        "transposed a", 23);
    run(dt, TU_CONTIG, TC_SHAPE(67, 45), TU_TRANS, TC_SHAPE(45, 33),
        "transposed b", 25);
    run(dt, TU_SLICED, TC_SHAPE(7, 13), TU_SLICED, TC_SHAPE(13, 5),
        "sliced both", 27);
    run(dt, TU_EXPAND, TC_SHAPE(6, 13), TU_SLICED, TC_SHAPE(13, 5),
        "expanded a", 29);
    run(dt, TU_CONTIG, TC_SHAPE(6, 13), TU_EXPAND, TC_SHAPE(13, 5),
        "expanded b", 31);
  }
}

/* (b, m, k) whose last two dims are a transposed view: base (b, k, m). */
static tu_arr make_inner_transposed(tc_dtype dt, int64_t b, int64_t m,
                                    int64_t k, uint64_t seed) {
  tu_arr a = tu_make_unif(dt, TU_CONTIG, 3, (const int64_t[]){b, m, k}, -1, 1,
                          seed);
  double *bv = malloc((size_t)(b * m * k) * sizeof(double));
  for (int64_t x = 0; x < b; x++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t p = 0; p < k; p++)
        bv[(x * k + p) * m + i] = a.v[(x * m + i) * k + p];
  tc_tensor *base = tu_from(dt, 3, (const int64_t[]){b, k, m}, bv);
  free(bv);
  tc_release(a.t);
  a.t = TU_NN(tc_transpose(base, 1, 2));
  tc_release(base);
  TU_SHAPE_IS(a.t, 3, ((const int64_t[]){b, m, k}));
  return a;
}

static void test_matmul_batched(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    run(dt, TU_CONTIG, TC_SHAPE(3, 7, 13), TU_CONTIG, TC_SHAPE(3, 13, 5),
        "batched", 41);
    run(dt, TU_CONTIG, TC_SHAPE(4, 33, 70), TU_CONTIG, TC_SHAPE(4, 70, 17),
        "batched larger", 43);
    run(dt, TU_CONTIG, TC_SHAPE(3, 7, 13), TU_CONTIG, TC_SHAPE(13, 5),
        "batched @ 2-D", 45);
    run(dt, TU_CONTIG, TC_SHAPE(7, 13), TU_CONTIG, TC_SHAPE(3, 13, 5),
        "2-D @ batched", 47);
    run(dt, TU_SLICED, TC_SHAPE(3, 7, 13), TU_TRANS, TC_SHAPE(13, 5),
        "sliced batched @ transposed 2-D", 49);
    run(dt, TU_EXPAND, TC_SHAPE(3, 7, 13), TU_CONTIG, TC_SHAPE(3, 13, 5),
        "expanded batch", 51);
    /* GEMMs too small to split, enough of them to split the batches */
    run(dt, TU_CONTIG, TC_SHAPE(48, 64, 40), TU_TRANS, TC_SHAPE(48, 40, 64),
        "many small batches", 57);
    tu_arr A = make_inner_transposed(dt, 3, 7, 13, 53);
    tu_arr B = make_inner_transposed(dt, 3, 13, 5, 55);
    check_matmul(&A, &B, "batched, inner dims transposed");
    tu_free(&A);
    tu_free(&B);
  }
}

/* x @ W with a batched x: its batch folds into the rows of one GEMM, and
** each batch's rows are bitwise the 2-D product of that batch alone (plain
** and transposed W). */
static void test_matmul_batch_folds_bitwise(void **state) {
  (void)state;
  enum { B = 5, M = 37, K = 70, N = 90 };
  tc_tensor *x = TU_NN(tc_randn(TC_F32, TC_SHAPE(B, M, K), 61));
  tc_tensor *w = TU_NN(tc_randn(TC_F32, TC_SHAPE(K, N), 62));
  tc_tensor *wt0 = TU_NN(tc_randn(TC_F32, TC_SHAPE(N, K), 63));
  tc_tensor *ws[2] = { w, TU_NN(tc_transpose(wt0, 0, 1)) };
  static float got[B * M * N], one[M * N];
  for (int v = 0; v < 2; v++) {
    tc_tensor *y = TU_NN(tc_matmul(x, ws[v]));
    assert_int_equal(tc_copy_to(y, got, sizeof got), 0);
    for (int b = 0; b < B; b++) {
      tc_tensor *xs = TU_NN(tc_slice(x, 0, b, b + 1, 1));
      tc_tensor *xb = TU_NN(tc_squeeze(xs, 0));
      tc_tensor *yb = TU_NN(tc_matmul(xb, ws[v]));
      assert_int_equal(tc_copy_to(yb, one, sizeof one), 0);
      assert_memory_equal(got + (size_t)b * M * N, one, sizeof one);
      tc_release(yb);
      tc_release(xb);
      tc_release(xs);
    }
    tc_release(y);
  }
  tc_release(ws[1]);
  tc_release(wt0);
  tc_release(w);
  tc_release(x);
}

static void test_matmul_empty(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_ones(TC_F32, TC_SHAPE(3, 0)));
  tc_tensor *b = TU_NN(tc_ones(TC_F32, TC_SHAPE(0, 4)));
  tc_tensor *r = TU_NN(tc_matmul(a, b));
  TU_SHAPE_IS(r, 2, ((const int64_t[]){3, 4}));
  double *g = tu_read(r);
  for (int i = 0; i < 12; i++) assert_true(g[i] == 0);
  free(g);
  tc_tensor *c = TU_NN(tc_ones(TC_F64, TC_SHAPE(0, 5)));
  tc_tensor *d = TU_NN(tc_ones(TC_F64, TC_SHAPE(5, 4)));
  tc_tensor *e = TU_NN(tc_matmul(c, d));
  TU_SHAPE_IS(e, 2, ((const int64_t[]){0, 4}));
  /* A batch of 0 against a 2-D operand (or a batch of 1) stays a batch of
  ** 0, from either side (found by the random-program test: it was 1). */
  tc_tensor *f = TU_NN(tc_ones(TC_F64, TC_SHAPE(0, 2, 5)));
  tc_tensor *g1 = TU_NN(tc_ones(TC_F64, TC_SHAPE(1, 5, 4)));
  tc_tensor *fd = TU_NN(tc_matmul(f, d));
  TU_SHAPE_IS(fd, 3, ((const int64_t[]){0, 2, 4}));
  tc_tensor *fg = TU_NN(tc_matmul(f, g1));
  TU_SHAPE_IS(fg, 3, ((const int64_t[]){0, 2, 4}));
  tc_tensor *h = TU_NN(tc_ones(TC_F64, TC_SHAPE(0, 4, 3)));
  tc_tensor *gf = TU_NN(tc_matmul(g1, h));
  TU_SHAPE_IS(gf, 3, ((const int64_t[]){0, 5, 3}));
  tc_release(h);
  tc_release(f);
  tc_release(g1);
  tc_release(fd);
  tc_release(fg);
  tc_release(gf);
  tc_release(a);
  tc_release(b);
  tc_release(r);
  tc_release(c);
  tc_release(d);
  tc_release(e);
}

/* Exact small integers in floats: the result must be exact too. */
static void test_matmul_exact_integers(void **state) {
  (void)state;
  double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  const double want[4] = {58, 64, 139, 154};
  for (int t = 0; t < 2; t++) {
    tc_tensor *ta = tu_from(FDT[t], TC_SHAPE(2, 3), a);
    tc_tensor *tb = tu_from(FDT[t], TC_SHAPE(3, 2), b);
    tc_tensor *r = TU_NN(tc_matmul(ta, tb));
    double *g = tu_read(r);
    for (int i = 0; i < 4; i++) assert_true(g[i] == want[i]);
    free(g);
    tc_release(ta);
    tc_release(tb);
    tc_release(r);
  }
}

/* Integer matmul: either exact with the input dtype, or a clear error. */
static void test_matmul_int(void **state) {
  (void)state;
  double a[6] = {1, -2, 3, 4, 5, -6}, b[6] = {7, 8, 9, 10, 11, 12};
  const double want[4] = {22, 24, -1, 10};
  const tc_dtype idt[2] = {TC_I32, TC_I64};
  for (int t = 0; t < 2; t++) {
    tc_tensor *ta = tu_from(idt[t], TC_SHAPE(2, 3), a);
    tc_tensor *tb = tu_from(idt[t], TC_SHAPE(3, 2), b);
    tc_clear_error();
    tc_tensor *r = tc_matmul(ta, tb);
    if (r) {
      assert_int_equal(tc_dtype_of(r), idt[t]);
      TU_SHAPE_IS(r, 2, ((const int64_t[]){2, 2}));
      double *g = tu_read(r);
      for (int i = 0; i < 4; i++) assert_true(g[i] == want[i]);
      free(g);
    } else {
      TU_EXPECT_ERR("tc_matmul", "dtype|type");
    }
    tc_clear_error();
    tc_release(r);
    tc_release(ta);
    tc_release(tb);
  }
}

/* torch.matmul semantics computed here: a 1-D a is [1, k], a 1-D b is
** [k, 1] (those dims then dropped), batch dims broadcast (NumPy rules). */
static void check_matmul_nd(tu_arr *A, tu_arr *B, const char *ctx) {
  int64_t as[TC_MAX_DIMS], bs[TC_MAX_DIMS];
  int an = A->ndim, bn = B->ndim;
  if (an == 1) { as[0] = 1; as[1] = A->shape[0]; an = 2; }
  else memcpy(as, A->shape, sizeof(int64_t) * (size_t)an);
  if (bn == 1) { bs[0] = B->shape[0]; bs[1] = 1; bn = 2; }
  else memcpy(bs, B->shape, sizeof(int64_t) * (size_t)bn);
  int64_t m = as[an - 2], k = as[an - 1], n = bs[bn - 1];
  int64_t batch_shape[TC_MAX_DIMS];
  int nb = tu_bshape(an - 2, as, bn - 2, bs, batch_shape);
  int64_t nbatch = tu_numel(nb, batch_shape);
  /* the expected shape: batch, then m and n unless that operand was 1-D */
  int64_t os[TC_MAX_DIMS];
  int on = 0;
  for (int d = 0; d < nb; d++) os[on++] = batch_shape[d];
  if (A->ndim > 1) os[on++] = m;
  if (B->ndim > 1) os[on++] = n;
  tc_tensor *r = TU_NN(tc_matmul(A->t, B->t));
  TU_SHAPE_IS(r, on, os);
  double *got = tu_read(r);
  double u = A->dt == TC_F32 ? 0x1p-24 : 0x1p-53;
  tu_cmp c;
  tu_cmp_init(&c, "matmul %s %s", tc_dtype_name(A->dt), ctx);
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t ao = tu_bidx(nb, batch_shape, bi, an - 2, as) * m * k;
    int64_t bo = tu_bidx(nb, batch_shape, bi, bn - 2, bs) * k * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = A->v[ao + i * k + p] * B->v[bo + p * n + j];
          s += x;
          abs += fabs(x);
        }
        int64_t idx = (bi * m + i) * n + j;
        if (!tu_close(got[idx], s, 0, 2.0 * (double)k * u * abs))
          tu_cmp_bad(&c, idx, got[idx], s, (double)i);
      }
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void run_nd(tc_dtype dt, int la, int an, const int64_t *as, int lb,
                   int bn, const int64_t *bs, const char *ctx,
                   uint64_t seed) {
  tu_arr A = tu_make_unif(dt, la, an, as, -1, 1, seed);
  tu_arr B = tu_make_unif(dt, lb, bn, bs, -1, 1, seed + 1);
  check_matmul_nd(&A, &B, ctx);
  tu_free(&A);
  tu_free(&B);
}

static void test_matmul_1d(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    run_nd(dt, TU_CONTIG, TC_SHAPE(37), TU_CONTIG, TC_SHAPE(37), "dot", 61);
    run_nd(dt, TU_SLICED, TC_SHAPE(300), TU_SLICED, TC_SHAPE(300),
           "dot, strided", 63);
    run_nd(dt, TU_CONTIG, TC_SHAPE(13), TU_CONTIG, TC_SHAPE(13, 5),
           "vector @ matrix", 65);
    run_nd(dt, TU_CONTIG, TC_SHAPE(7, 13), TU_SLICED, TC_SHAPE(13),
           "matrix @ vector", 67);
    run_nd(dt, TU_CONTIG, TC_SHAPE(13), TU_CONTIG, TC_SHAPE(2, 3, 13, 5),
           "vector @ 4-D", 69);
    run_nd(dt, TU_TRANS, TC_SHAPE(4, 2, 7, 13), TU_CONTIG, TC_SHAPE(13),
           "4-D @ vector", 71);
    run_nd(dt, TU_CONTIG, TC_SHAPE(0), TU_CONTIG, TC_SHAPE(0), "empty dot",
           73);
  }
}

static void test_matmul_broadcast_batches(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    tc_dtype dt = FDT[t];
    run_nd(dt, TU_CONTIG, TC_SHAPE(2, 3, 4, 5), TU_CONTIG, TC_SHAPE(5, 6),
           "[2,3,4,5] @ [5,6]", 81);
    run_nd(dt, TU_CONTIG, TC_SHAPE(2, 1, 4, 5), TU_CONTIG, TC_SHAPE(3, 5, 6),
           "[2,1,4,5] @ [3,5,6]", 83);
    run_nd(dt, TU_EXPAND, TC_SHAPE(3, 2, 4, 5), TU_SLICED,
           TC_SHAPE(3, 1, 5, 6), "expanded @ sliced, 4-D", 85);
    run_nd(dt, TU_TRANS, TC_SHAPE(6, 2, 9, 4), TU_TRANS, TC_SHAPE(2, 4, 6),
           "transposed 4-D @ 3-D", 87);
    run_nd(dt, TU_CONTIG, TC_SHAPE(2, 1, 2, 1, 3, 4), TU_CONTIG,
           TC_SHAPE(3, 1, 2, 4, 5), "6-D @ 5-D", 89);
    run_nd(dt, TU_CONTIG, TC_SHAPE(2, 0, 3, 4), TU_CONTIG, TC_SHAPE(4, 2),
           "empty batch", 91);
    run_nd(dt, TU_CONTIG, TC_SHAPE(2, 3, 40, 70), TU_CONTIG,
           TC_SHAPE(1, 3, 70, 33), "larger", 93);
  }
}

static void test_matmul_nd_errors(void **state) {
  (void)state;
  tc_tensor *s = TU_NN(tc_ones(TC_F32, 0, NULL));
  tc_tensor *v = TU_NN(tc_ones(TC_F32, TC_SHAPE(4)));
  tc_tensor *w = TU_NN(tc_ones(TC_F32, TC_SHAPE(5)));
  tc_tensor *a = TU_NN(tc_ones(TC_F32, TC_SHAPE(2, 3, 4, 5)));
  tc_tensor *b = TU_NN(tc_ones(TC_F32, TC_SHAPE(4, 5, 6)));
  tc_clear_error();
  assert_null(tc_matmul(s, v));
  TU_EXPECT_ERR("tc_matmul", "at least 1 dim");
  tc_clear_error();
  assert_null(tc_matmul(v, w));
  TU_EXPECT_ERR("tc_matmul", "inner");
  tc_clear_error();
  assert_null(tc_matmul(a, b));
  TU_EXPECT_ERR("tc_matmul", "broadcast");
  tc_clear_error();
  assert_null(tc_matmul(a, v));
  TU_EXPECT_ERR("tc_matmul", "inner");
  tc_clear_error();
  tc_release(s);
  tc_release(v);
  tc_release(w);
  tc_release(a);
  tc_release(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_2d),
      cmocka_unit_test(test_matmul_layouts),
      cmocka_unit_test(test_matmul_batched),
      cmocka_unit_test(test_matmul_batch_folds_bitwise),
      cmocka_unit_test(test_matmul_empty),
      cmocka_unit_test(test_matmul_exact_integers),
      cmocka_unit_test(test_matmul_int),
      cmocka_unit_test(test_matmul_1d),
      cmocka_unit_test(test_matmul_broadcast_batches),
      cmocka_unit_test(test_matmul_nd_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
