/*
** test_inplace.c -- copy_/add_/sub_/mul_/div_ with same-shape, transposed,
** broadcast (row, column, 0-d) sources, and their scalar forms and fill_,
** into the whole base, a stepped slice and a transpose: the write lands in
** the shared base storage and nowhere else. Results cast to the dst dtype;
** a dst that would need broadcasting is an error that leaves dst unchanged.
*/
#include "testutil.h"

enum { OP_COPY, OP_ADD, OP_SUB, OP_MUL, OP_DIV, NOPS };
static const char *const OPNAME[] = {"copy_", "add_", "sub_", "mul_", "div_"};
static int (*const OPFN[])(tc_tensor *, tc_tensor *) = {
    tc_copy_, tc_add_, tc_sub_, tc_mul_, tc_div_};
static int (*const SFN[])(tc_tensor *, double) = {
    tc_fill_, tc_add_scalar_, tc_sub_scalar_, tc_mul_scalar_, tc_div_scalar_};

/* x op y computed in dt (f32 in float), as stored in dt. */
static double apply(int op, double x, double y, tc_dtype dt) {
  if (dt == TC_F32) {
    float a = (float)x, b = (float)y;
    switch (op) {
    case OP_COPY: return b;
    case OP_ADD: return (double)(a + b);
    case OP_SUB: return (double)(a - b);
    case OP_MUL: return (double)(a * b);
    default: return (double)(a / b);
    }
  }
  switch (op) {
  case OP_COPY: return y;
  case OP_ADD: return x + y;
  case OP_SUB: return x - y;
  case OP_MUL: return x * y;
  default: return x / y;
  }
}

enum { V_WHOLE, V_SLICED, V_TRANS, NVIEWS };
static const char *const VNAME[] = {"whole", "stepped slice", "transpose"};
#define BM 6
#define BN 8

/* A view of base; *vm x *vn is its shape; map[i*vn+j] is the base index. */
static tc_tensor *make_view(tc_tensor *base, int kind, int64_t *vm,
                            int64_t *vn, int64_t *map) {
  tc_tensor *v;
  if (kind == V_WHOLE) {
    v = tc_retain(base);
    *vm = BM;
    *vn = BN;
    for (int64_t i = 0; i < BM * BN; i++) map[i] = i;
  } else if (kind == V_SLICED) { /* base[0::2, 1::3] */
    tc_tensor *r = TU_NN(tc_slice(base, 0, 0, BM, 2));
    v = TU_NN(tc_slice(r, 1, 1, BN, 3));
    tc_release(r);
    *vm = 3;
    *vn = 3;
    for (int64_t i = 0; i < 3; i++)
      for (int64_t j = 0; j < 3; j++) map[i * 3 + j] = (2 * i) * BN + 1 + 3 * j;
  } else {
    v = TU_NN(tc_transpose(base, 0, 1));
    *vm = BN;
    *vn = BM;
    for (int64_t i = 0; i < BN; i++)
      for (int64_t j = 0; j < BM; j++) map[i * BM + j] = j * BN + i;
  }
  TU_SHAPE_IS(v, 2, ((const int64_t[]){*vm, *vn}));
  return v;
}

static void check_base(tc_tensor *base, const double *want, tc_dtype dt,
                       const char *ctx) {
  double *got = tu_read(base);
  tu_cmp c;
  tu_cmp_init(&c, "%s %s", tc_dtype_name(dt), ctx);
  for (int64_t i = 0; i < BM * BN; i++)
    if (!tu_same(got[i], want[i])) tu_cmp_bad(&c, i, got[i], want[i], NAN);
  free(got);
  TU_CMP_DONE(c);
}

static void test_binary_inplace_into_views(void **state) {
  (void)state;
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  static const char *const SNAME[] = {"same shape", "transposed src",
                                      "row (1,n)", "column (m,1)", "0-d"};
  uint64_t seed = 1;
  for (int t = 0; t < 2; t++)
    for (int op = 0; op < NOPS; op++)
      for (int vk = 0; vk < NVIEWS; vk++)
        for (int sk = 0; sk < 5; sk++) {
          tc_dtype dt = dts[t];
          tu_arr B = tu_make_unif(dt, TU_CONTIG, 2,
                                  (const int64_t[]){BM, BN}, 1, 5, seed++);
          int64_t vm, vn, map[BM * BN];
          tc_tensor *v = make_view(B.t, vk, &vm, &vn, map);
          int64_t ss[2] = {vm, vn};
          int sn = 2, lay = sk == 1 ? TU_TRANS : TU_CONTIG;
          if (sk == 2) ss[0] = 1;
          if (sk == 3) ss[1] = 1;
          if (sk == 4) sn = 0;
          double *sv = tu_uniform(vm * vn, 0.5, 3, seed++);
          for (int64_t i = 0; i < vm * vn; i += 2) sv[i] = -sv[i];
          tu_arr S = tu_make(dt, lay, sn, ss, sv);
          free(sv);
          double *want = malloc(BM * BN * sizeof(double));
          memcpy(want, B.v, BM * BN * sizeof(double));
          for (int64_t f = 0; f < vm * vn; f++) {
            double s = S.v[tu_bidx(2, (const int64_t[]){vm, vn}, f, sn, ss)];
            want[map[f]] = apply(op, want[map[f]], s, dt);
          }
          TU_OK(OPFN[op](v, S.t));
          char ctx[128];
          snprintf(ctx, sizeof ctx, "%s into %s from %s", OPNAME[op],
                   VNAME[vk], SNAME[sk]);
          check_base(B.t, want, dt, ctx);
          free(want);
          tc_release(v);
          tu_free(&S);
          tu_free(&B);
        }
}

static void test_scalar_inplace_into_views(void **state) {
  (void)state;
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  const double s[NOPS] = {-1.25, 2.5, 0.75, -3, 0.375};
  for (int t = 0; t < 2; t++)
    for (int op = 0; op < NOPS; op++)
      for (int vk = 0; vk < NVIEWS; vk++) {
        tc_dtype dt = dts[t];
        tu_arr B = tu_make_unif(dt, TU_CONTIG, 2, (const int64_t[]){BM, BN},
                                -4, 4, 100 + op * 3 + vk);
        int64_t vm, vn, map[BM * BN];
        tc_tensor *v = make_view(B.t, vk, &vm, &vn, map);
        double want[BM * BN];
        memcpy(want, B.v, sizeof want);
        for (int64_t f = 0; f < vm * vn; f++)
          want[map[f]] = apply(op, want[map[f]], s[op], dt);
        TU_OK(SFN[op](v, s[op]));
        char ctx[96];
        snprintf(ctx, sizeof ctx, "%s(%g) into %s",
                 op == OP_COPY ? "fill_" : OPNAME[op], s[op], VNAME[vk]);
        check_base(B.t, want, dt, ctx);
        tc_release(v);
        tu_free(&B);
      }
}

/* Writes through one view are seen by every other view of the storage. */
static void test_other_views_see_writes(void **state) {
  (void)state;
  double v[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  tc_tensor *b = tu_from(TC_F64, TC_SHAPE(3, 4), v);
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));     /* (4,3) */
  tc_tensor *col = TU_NN(tc_slice(b, 1, 2, 3, 1)); /* (3,1): column 2 */
  tc_tensor *r = TU_NN(tc_reshape(b, TC_SHAPE(12)));
  TU_OK(tc_fill_(col, -1));
  double *g = tu_read(t);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++)
      assert_true(g[i * 3 + j] == (i == 2 ? -1 : j * 4 + i));
  free(g);
  TU_OK(tc_mul_scalar_(t, 2));
  g = tu_read(r);
  for (int i = 0; i < 12; i++) assert_true(g[i] == (i % 4 == 2 ? -2 : 2 * i));
  free(g);
  tc_release(t);
  tc_release(col);
  tc_release(r);
  tc_release(b);
}

/* Runs an in-place op whose result dtype (float) is above an integer dst's.
** tc.h says results are cast to dst's dtype; PyTorch refuses such a cast
** (can_cast). Either is accepted: the truncated values, or -1 with a
** message about the dtype/cast and dst unchanged. */
static void int_dst_cast_or_refuse(int rc, tc_tensor *d, const double *before,
                                   const double *want, int n, const char *fn,
                                   const char *what) {
  double *g = tu_read(d);
  if (rc == 0) {
    for (int i = 0; i < n; i++)
      if (g[i] != want[i])
        fail_msg("%s: [%d] = %g, expected %g", what, i, g[i], want[i]);
  } else {
    assert_int_equal(rc, -1);
    TU_EXPECT_ERR(fn, "cast|dtype");
    for (int i = 0; i < n; i++)
      if (g[i] != before[i])
        fail_msg("%s failed but changed dst: [%d] = %g, was %g", what, i,
                 g[i], before[i]);
  }
  free(g);
  tc_clear_error();
}

static void test_cast_into_int_dst(void **state) {
  (void)state;
  double dv[4] = {1, 3, -1, 7}, sv[4] = {-0.5, 0.5, -0.7, 0.5};
  struct { int op; double want[4]; } cases[] = {
      {OP_ADD, {0, 3, -1, 7}},  /* 0.5 3.5 -1.7 7.5 */
      {OP_SUB, {1, 2, 0, 6}},   /* 1.5 2.5 -0.3 6.5 */
      {OP_MUL, {0, 1, 0, 3}},   /* -0.5 1.5 0.7 3.5 */
      {OP_DIV, {-2, 6, 1, 14}}, /* -2 6 1.43 14 */
  };
  static const char *const FN[] = {"tc_copy_", "tc_add_", "tc_sub_",
                                   "tc_mul_", "tc_div_"};
  const tc_dtype idt[2] = {TC_I32, TC_I64};
  for (int t = 0; t < 2; t++) {
    /* copy_ converts (as torch's copy_): truncation toward zero. */
    tc_tensor *d = tu_from(idt[t], TC_SHAPE(4), dv);
    tc_tensor *s = tu_from(TC_F32, TC_SHAPE(4), sv);
    double fv[4] = {2.7, -2.7, 1e6 + 0.5, -0.2};
    tc_tensor *f = tu_from(TC_F64, TC_SHAPE(4), fv);
    TU_OK(tc_copy_(d, f));
    double *g = tu_read(d);
    assert_true(g[0] == 2 && g[1] == -2 && g[2] == 1e6 && g[3] == 0);
    free(g);
    tc_release(d);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      d = tu_from(idt[t], TC_SHAPE(4), dv);
      char what[64];
      snprintf(what, sizeof what, "%s %s <- f32", OPNAME[cases[k].op],
               tc_dtype_name(idt[t]));
      int rc = OPFN[cases[k].op](d, s);
      assert_int_equal(tc_dtype_of(d), idt[t]);
      int_dst_cast_or_refuse(rc, d, dv, cases[k].want, 4, FN[cases[k].op],
                             what);
      tc_release(d);
    }
    tc_release(s);
    tc_release(f);
  }
  /* Integer results into an integer dst are exact. */
  double a[4] = {7, -7, 9, 1}, b[4] = {2, 2, 4, 3};
  tc_tensor *d = tu_from(TC_I32, TC_SHAPE(4), a);
  tc_tensor *s = tu_from(TC_I64, TC_SHAPE(4), b);
  TU_OK(tc_mul_(d, s));             /* 14 -14 36 3 */
  TU_OK(tc_sub_(d, s));             /* 12 -16 32 0 */
  TU_OK(tc_add_scalar_(d, 3));      /* 15 -13 35 3 */
  TU_OK(tc_mul_scalar_(d, -2));     /* -30 26 -70 -6 */
  double *g = tu_read(d);
  assert_int_equal(tc_dtype_of(d), TC_I32);
  assert_true(g[0] == -30 && g[1] == 26 && g[2] == -70 && g[3] == -6);
  free(g);
  TU_OK(tc_fill_(d, 42));
  g = tu_read(d);
  assert_true(g[0] == 42 && g[3] == 42);
  free(g);
  /* True division and a fractional scalar give floats: cast or refuse. */
  const double before[4] = {42, 42, 42, 42};
  int rc = tc_div_(d, s); /* 21 21 10.5 14 */
  int_dst_cast_or_refuse(rc, d, before, (const double[]){21, 21, 10, 14}, 4,
                         "tc_div_", "div_ i32 by i64");
  tc_tensor *e = tu_from(TC_I64, TC_SHAPE(4), before);
  rc = tc_add_scalar_(e, -0.5);
  int_dst_cast_or_refuse(rc, e, before, (const double[]){41, 41, 41, 41}, 4,
                         "tc_add_scalar_", "add_scalar_(i64, -0.5)");
  tc_release(e);
  /* Within floats, a wider result is rounded into the narrower dst. */
  double x[3] = {1, 1.0 / 3, -2.5}, y[3] = {1e-9, 1.0 / 7, 0.1};
  tc_tensor *xf = tu_from(TC_F32, TC_SHAPE(3), x);
  tc_tensor *yd = tu_from(TC_F64, TC_SHAPE(3), y);
  TU_OK(tc_add_(xf, yd));
  g = tu_read(xf);
  for (int i = 0; i < 3; i++)
    assert_true(g[i] == (double)(float)((double)(float)x[i] + y[i]));
  free(g);
  /* Into bool: x != 0; from i64 into f32: rounded. */
  double bv[4] = {0, 0, 0, 0}, fv[4] = {0.0, -2.5, 1e-30, -0.0};
  tc_tensor *bd = tu_from(TC_BOOL, TC_SHAPE(4), bv);
  tc_tensor *fs = tu_from(TC_F32, TC_SHAPE(4), fv);
  TU_OK(tc_copy_(bd, fs));
  g = tu_read(bd);
  assert_true(g[0] == 0 && g[1] == 1 && g[2] == 1 && g[3] == 0);
  free(g);
  int64_t big = (INT64_C(1) << 40) + 1;
  tc_tensor *bi = TU_NN(tc_from_data(TC_I64, TC_SHAPE(1), &big, sizeof big));
  tc_tensor *fd = TU_NN(tc_zeros(TC_F32, TC_SHAPE(3)));
  TU_OK(tc_copy_(fd, bi)); /* broadcast (1,) -> (3,) */
  g = tu_read(fd);
  assert_true(g[0] == (double)(float)big && g[2] == g[0]);
  free(g);
  tc_release(d);
  tc_release(s);
  tc_release(xf);
  tc_release(yd);
  tc_release(bd);
  tc_release(fs);
  tc_release(bi);
  tc_release(fd);
}

/* dst never broadcasts: an error, and dst (and src) are unchanged. */
static void test_dst_broadcast_is_error(void **state) {
  (void)state;
  double dv[4] = {1, 2, 3, 4};
  tc_tensor *d = tu_from(TC_F32, TC_SHAPE(1, 4), dv);
  tc_tensor *s = TU_NN(tc_ones(TC_F32, TC_SHAPE(3, 4)));
  tc_tensor *s2 = TU_NN(tc_ones(TC_F32, TC_SHAPE(5)));
  for (int op = 0; op < NOPS; op++) {
    tc_clear_error();
    assert_int_equal(OPFN[op](d, s), -1);
    assert_non_null(tc_last_error());
    tc_clear_error();
    assert_int_equal(OPFN[op](d, s2), -1);
    assert_non_null(tc_last_error());
    double *g = tu_read(d);
    for (int i = 0; i < 4; i++) assert_true(g[i] == dv[i]);
    free(g);
  }
  tc_clear_error();
  tc_release(d);
  tc_release(s);
  tc_release(s2);
}

/* The source may be (a view of) the destination itself. */
static void test_self_aliasing(void **state) {
  (void)state;
  double v[6] = {1, 2, 3, 4, 5, 6};
  tc_tensor *a = tu_from(TC_F32, TC_SHAPE(2, 3), v);
  TU_OK(tc_add_(a, a));
  TU_OK(tc_mul_(a, a));
  double *g = tu_read(a);
  for (int i = 0; i < 6; i++) assert_true(g[i] == 4 * v[i] * v[i]);
  free(g);
  tc_tensor *b = TU_NN(tc_transpose(a, 0, 1));
  tc_tensor *bc = TU_NN(tc_contiguous(b));
  TU_OK(tc_sub_(b, bc)); /* a - a = 0 through a transposed view */
  g = tu_read(a);
  for (int i = 0; i < 6; i++) assert_true(g[i] == 0);
  free(g);
  tc_release(b);
  tc_release(bc);
  tc_release(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary_inplace_into_views),
      cmocka_unit_test(test_scalar_inplace_into_views),
      cmocka_unit_test(test_other_views_see_writes),
      cmocka_unit_test(test_cast_into_int_dst),
      cmocka_unit_test(test_dst_broadcast_is_error),
      cmocka_unit_test(test_self_aliasing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
