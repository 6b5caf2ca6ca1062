/*
** test_cumsum_triangle.c -- tc_cumsum against sums written here in the
** order tc.h states (bitwise: the order is part of the contract), over every dim and layout,
** f32, f64, integers and bool (i64 results, past 2^31); tc_tril and tc_triu
** against (i, j) tests over batched inputs, every k that matters, several
** dtypes and layouts; errors.
*/
#include "testutil.h"

/* Inclusive sums along dim d of the C-order values v (shape of a), in the
** result dtype and in the order tc.h states: segments of 256 positions,
** each summed in order from 0, with the sum of the segments before (summed
** in order) added in front. In float for f32 (one rounding per step, as
** the contract says), in double for f64, exactly in int64 otherwise. */
#define SEG 256
static double *ref_cumsum(const tu_arr *a, int d, tc_dtype rdt) {
  double *out = malloc((size_t)(a->n ? a->n : 1) * sizeof(double));
  assert_non_null(out);
  int64_t n = a->shape[d], inner = 1;
  for (int j = d + 1; j < a->ndim; j++) inner *= a->shape[j];
  for (int64_t base = 0; base < a->n; base++) {
    if ((base / inner) % n != 0) continue;   /* first element of a row */
    float f = 0, fc = 0;
    double g = 0, gc = 0;
    int64_t q = 0;
    for (int64_t k = 0; k < n; k++) {
      if (k % SEG == 0) {   /* a new segment: its carry, its sum from 0 */
        fc += f;
        gc += g;
        f = 0;
        g = 0;
      }
      double x = a->v[base + k * inner];
      f += (float)x;
      g += x;
      q += (int64_t)x;
      out[base + k * inner] = rdt == TC_F32 ? (double)(fc + f)
                              : rdt == TC_F64 ? gc + g : (double)q;
    }
  }
  return out;
}

static void check_cumsum(tu_arr *a, int dim, tc_dtype rdt, const char *ctx) {
  int d = dim < 0 ? dim + a->ndim : dim;
  tc_tensor *r = TU_NN(tc_cumsum(a->t, dim));
  TU_SHAPE_IS(r, a->ndim, a->shape);
  assert_int_equal(tc_dtype_of(r), rdt);
  double *want = ref_cumsum(a, d, rdt), *got = tu_read(r);
  tu_cmp c;
  tu_cmp_init(&c, "cumsum %s dim %d %s", tc_dtype_name(a->dt), dim, ctx);
  for (int64_t i = 0; i < a->n; i++)
    if (!tu_same(got[i], want[i])) tu_cmp_bad(&c, i, got[i], want[i], a->v[i]);
  free(want);
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_cumsum_float_layouts(void **state) {
  (void)state;
  const int64_t shape[3] = {4, 6, 5};
  const tc_dtype dts[2] = {TC_F32, TC_F64};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(dts[t], lay, 3, shape, -3, 3, 51 + lay);
      for (int dim = -3; dim < 3; dim++)
        check_cumsum(&a, dim, dts[t], tu_layout_name[lay]);
      tu_free(&a);
    }
  /* long rows, split over threads */
  tu_arr a = tu_make_unif(TC_F32, TU_CONTIG, 2, (const int64_t[]){3, 9000},
                          0, 1, 5);
  check_cumsum(&a, 1, TC_F32, "long rows");
  check_cumsum(&a, 0, TC_F32, "long rows");
  tu_free(&a);
  /* down columns of wide rows: blocks of up to 1024 columns and a rest,
  ** several segments, 1e8 among small values */
  const int64_t wide[2][2] = {{520, 5000}, {300, 1500}};
  for (int w = 0; w < 2; w++) {
    tu_arr b = tu_make_unif(dts[w], w ? TU_SLICED : TU_CONTIG, 2, wide[w], 0,
                            1, 80 + w);
    for (int64_t j = 0; j < b.n; j += 9) b.v[j] *= 1e8;
    tu_arr c = tu_make(dts[w], w ? TU_SLICED : TU_CONTIG, 2, wide[w], b.v);
    check_cumsum(&c, 0, dts[w], "wide columns");
    tu_free(&c);
    tu_free(&b);
  }
  /* rows ending around the segment boundaries, values whose sums round
  ** differently in any other order (1e8 among ones), strided too */
  const int64_t lens[] = {255, 256, 257, 512, 3 * 256 + 7};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
    for (int t = 0; t < 2; t++) {
      int64_t shp[2] = {3, lens[i]};
      tu_arr b = tu_make_unif(dts[t], t ? TU_TRANS : TU_CONTIG, 2, shp, 0, 1,
                              60 + (int)i);
      for (int64_t j = 0; j < b.n; j += 7) b.v[j] *= 1e8;
      tu_arr c = tu_make(dts[t], t ? TU_TRANS : TU_CONTIG, 2, shp, b.v);
      check_cumsum(&c, 1, dts[t], "segments");
      check_cumsum(&c, 0, dts[t], "segments");
      tu_free(&c);
      tu_free(&b);
      /* down columns: several segments, column blocks of 64 and a rest */
      int64_t cshp[3] = {2, lens[i], 70};
      tu_arr d = tu_make_unif(dts[t], t ? TU_SLICED : TU_CONTIG, 3, cshp, 0,
                              1, 70 + (int)i);
      for (int64_t j = 0; j < d.n; j += 5) d.v[j] *= 1e8;
      tu_arr e = tu_make(dts[t], t ? TU_SLICED : TU_CONTIG, 3, cshp, d.v);
      check_cumsum(&e, 1, dts[t], "columns");
      tu_free(&e);
      tu_free(&d);
    }
}

static void test_cumsum_int_and_bool(void **state) {
  (void)state;
  double v[8] = {2e9, 2e9, -7, 1, 2e9, 5, 0, -1};
  tu_arr a = tu_make(TC_I32, TU_TRANS, 2, (const int64_t[]){2, 4}, v);
  check_cumsum(&a, 1, TC_I64, "i32 transposed");   /* 4e9 needs i64 */
  check_cumsum(&a, 0, TC_I64, "i32 transposed");
  tu_free(&a);
  double bv[6] = {1, 0, 1, 1, 1, 0};
  tu_arr b = tu_make(TC_BOOL, TU_CONTIG, 2, (const int64_t[]){2, 3}, bv);
  check_cumsum(&b, -1, TC_I64, "bool");
  tu_free(&b);
  /* 0-d and empty tensors */
  tc_tensor *z = TU_NN(tc_full(TC_F64, 0, NULL, 1.5));
  tc_tensor *zc = TU_NN(tc_cumsum(z, -1));
  assert_int_equal(tc_ndim(zc), 0);
  assert_true(tu_item(zc) == 1.5);
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0, 3)));
  tc_tensor *ec = TU_NN(tc_cumsum(e, 0));
  TU_SHAPE_IS(ec, 2, ((const int64_t[]){0, 3}));
  tc_release(ec);
  tc_release(e);
  tc_release(zc);
  tc_release(z);
  /* errors */
  tc_tensor *f = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 3)));
  tc_clear_error();
  assert_null(tc_cumsum(f, 2));
  TU_EXPECT_ERR("tc_cumsum", "dim");
  tc_clear_error();
  assert_null(tc_cumsum(NULL, 0));
  tc_clear_error();
  tc_release(f);
}

/* -- Triangles ------------------------------------------------------------------- */

static void check_triangle(tu_arr *a, int64_t k, bool lower, const char *ctx) {
  tc_tensor *r = TU_NN(lower ? tc_tril(a->t, k) : tc_triu(a->t, k));
  TU_SHAPE_IS(r, a->ndim, a->shape);
  assert_int_equal(tc_dtype_of(r), a->dt);
  double *got = tu_read(r);
  int64_t m[TC_MAX_DIMS];
  tu_cmp c;
  tu_cmp_init(&c, "%s %s k %lld %s", lower ? "tril" : "triu",
              tc_dtype_name(a->dt), (long long)k, ctx);
  for (int64_t i = 0; i < a->n; i++) {
    tu_unravel(i, a->ndim, a->shape, m);
    int64_t row = m[a->ndim - 2], col = m[a->ndim - 1];
    bool keep = lower ? col - row <= k : col - row >= k;
    double want = keep ? a->v[i] : 0;
    if (!tu_same_value(got[i], want)) tu_cmp_bad(&c, i, got[i], want, a->v[i]);
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_triangles(void **state) {
  (void)state;
  const int64_t ks[] = {-9, -3, -1, 0, 1, 2, 6, 9, INT64_C(1) << 40};
  const int64_t sq[2] = {5, 7}, batched[4] = {2, 3, 4, 6};
  const tc_dtype dts[3] = {TC_F32, TC_F64, TC_I32};
  for (int t = 0; t < 3; t++)
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(dts[t], lay, 2, sq, -5, 5, 61 + lay);
      tu_arr b = tu_make_unif(dts[t], lay, 4, batched, 1, 9, 71 + lay);
      for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (int lower = 0; lower < 2; lower++) {
          check_triangle(&a, ks[i], lower, tu_layout_name[lay]);
          check_triangle(&b, ks[i], lower, tu_layout_name[lay]);
        }
      tu_free(&a);
      tu_free(&b);
    }
  double bv[4] = {1, 1, 1, 1};
  tu_arr m = tu_make(TC_BOOL, TU_CONTIG, 2, (const int64_t[]){2, 2}, bv);
  check_triangle(&m, 0, true, "bool");
  check_triangle(&m, 1, false, "bool");
  tu_free(&m);
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(3, 0, 4)));
  tc_tensor *et = TU_NN(tc_triu(e, 0));
  TU_SHAPE_IS(et, 3, ((const int64_t[]){3, 0, 4}));
  tc_release(et);
  tc_release(e);
  tc_tensor *v = TU_NN(tc_ones(TC_F32, TC_SHAPE(4)));
  tc_clear_error();
  assert_null(tc_tril(v, 0));
  TU_EXPECT_ERR("tc_tril", "2 dims");
  tc_clear_error();
  assert_null(tc_triu(NULL, 0));
  tc_clear_error();
  tc_release(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cumsum_float_layouts),
      cmocka_unit_test(test_cumsum_int_and_bool),
      cmocka_unit_test(test_triangles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
