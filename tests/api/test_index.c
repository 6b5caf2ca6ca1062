/*
** test_index.c -- tc_cat, tc_stack, tc_index_select, tc_embedding,
** tc_gather, tc_scatter_add(_): values against naive loops written here
** over the logical (C-order) values, for contiguous, transposed, sliced
** and expanded inputs, negative dims, empty tensors, dtype promotion, and
** clear errors for bad shapes, dtypes and out-of-range indices. Runs eager
** and traced (TC_COMPILE=1); a loop makes the regions hot.
*/
#include "testutil.h"

/* Values of t must equal want[0..n) exactly (data movement is exact). */
static void expect_values(tc_tensor *t, const double *want, int64_t n,
                          const char *ctx) {
  assert_int_equal(tc_numel(t), n);
  double *got = tu_read(t);
  for (int64_t i = 0; i < n; i++)
    if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) {
      print_error("%s: element %lld is %.17g, expected %.17g\n", ctx,
                  (long long)i, got[i], want[i]);
      free(got);
      fail();
    }
  free(got);
}

/* A tensor of integer indices (dt i32 or i64) from a list. */
static tc_tensor *ints(tc_dtype dt, int ndim, const int64_t *shape,
                       const double *v) {
  return tu_from(dt, ndim, shape, v);
}

/* -- cat / stack ------------------------------------------------------------ */

/* Naive cat of n C-order arrays along d (all rank nd). */
static double *ref_cat(int n, tu_arr *const *xs, int nd, int d,
                       int64_t *oshape) {
  memcpy(oshape, xs[0]->shape, sizeof(int64_t) * (size_t)nd);
  oshape[d] = 0;
  for (int i = 0; i < n; i++) oshape[d] += xs[i]->shape[d];
  int64_t total = tu_numel(nd, oshape);
  double *out = malloc(sizeof(double) * (size_t)(total ? total : 1));
  int64_t m[TC_MAX_DIMS];
  for (int64_t f = 0; f < total; f++) {
    tu_unravel(f, nd, oshape, m);
    int i = 0;
    while (m[d] >= xs[i]->shape[d]) m[d] -= xs[i++]->shape[d];
    out[f] = xs[i]->v[tu_ravel(nd, xs[i]->shape, m)];
  }
  return out;
}

static void check_cat(int n, tu_arr *const *xs, int dim, const char *ctx) {
  int nd = xs[0]->ndim, d = dim < 0 ? dim + nd : dim;
  tc_tensor *ts[8];
  for (int i = 0; i < n; i++) ts[i] = xs[i]->t;
  tc_tensor *r = TU_NN(tc_cat(ts, n, dim));
  int64_t os[TC_MAX_DIMS];
  double *want = ref_cat(n, xs, nd, d, os);
  TU_SHAPE_IS(r, nd, os);
  assert_int_equal(tc_dtype_of(r), xs[0]->dt);
  expect_values(r, want, tu_numel(nd, os), ctx);
  free(want);
  tc_release(r);
}

static void test_cat_values_layouts(void **state) {
  (void)state;
  const tc_dtype dts[3] = {TC_F32, TC_F64, TC_I64};
  for (int di = 0; di < 3; di++)
    for (int l = 0; l < TU_NLAYOUTS; l++) {
      tc_dtype dt = dts[di];
      /* along dim 1 (sizes 3, 5, 2), layouts mixed */
      tu_arr a = tu_make_unif(dt, l, TC_SHAPE(4, 3, 6), -9, 9, 1);
      tu_arr b = tu_make_unif(dt, TU_CONTIG, TC_SHAPE(4, 5, 6), -9, 9, 2);
      tu_arr c = tu_make_unif(dt, (l + 1) % TU_NLAYOUTS, TC_SHAPE(4, 2, 6),
                              -9, 9, 3);
      if (dt == TC_I64) { /* integral values */
        for (int64_t i = 0; i < a.n; i++) assert_true(a.v[i] == floor(a.v[i]));
      }
      char ctx[64];
      snprintf(ctx, sizeof ctx, "cat dim 1 %s %s", tc_dtype_name(dt),
               tu_layout_name[l]);
      check_cat(3, (tu_arr *[]){&a, &b, &c}, 1, ctx);
      check_cat(2, (tu_arr *[]){&c, &a}, -2, ctx);
      check_cat(1, (tu_arr *[]){&a}, 0, ctx);
      tu_free(&a);
      tu_free(&b);
      tu_free(&c);
      /* along the first and last dims; five inputs take two levels */
      tu_arr p[5];
      tu_arr *pp[5];
      for (int i = 0; i < 5; i++) {
        p[i] = tu_make_unif(dt, (l + i) % TU_NLAYOUTS,
                            TC_SHAPE(2 + i % 2, 3), -9, 9, 10 + i);
        pp[i] = &p[i];
      }
      check_cat(5, pp, 0, ctx);
      for (int i = 0; i < 5; i++) tu_free(&p[i]);
      tu_arr q[4];
      tu_arr *qq[4];
      for (int i = 0; i < 4; i++) {
        q[i] = tu_make_unif(dt, (l + i) % TU_NLAYOUTS, TC_SHAPE(3, 1 + i),
                            -9, 9, 20 + i);
        qq[i] = &q[i];
      }
      check_cat(4, qq, -1, ctx);
      for (int i = 0; i < 4; i++) tu_free(&q[i]);
    }
}

static void test_cat_promotes_and_empty(void **state) {
  (void)state;
  tc_tensor *i = tu_from(TC_I32, TC_SHAPE(2), (double[]){1, 2});
  tc_tensor *f = tu_from(TC_F32, TC_SHAPE(1), (double[]){0.5});
  tc_tensor *r = TU_NN(tc_cat((tc_tensor *[]){i, f}, 2, 0));
  assert_int_equal(tc_dtype_of(r), TC_F32);
  expect_values(r, (double[]){1, 2, 0.5}, 3, "i32 + f32");
  tc_release(r);
  /* a 1-D tensor of size 0 joins anything; size-0 dims join normally */
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0)));
  tc_tensor *m = tu_from(TC_F32, TC_SHAPE(2, 2), (double[]){1, 2, 3, 4});
  tc_tensor *z = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0, 2)));
  r = TU_NN(tc_cat((tc_tensor *[]){e, m, z, e}, 4, 0));
  TU_SHAPE_IS(r, 2, ((int64_t[]){2, 2}));
  expect_values(r, (double[]){1, 2, 3, 4}, 4, "legacy empty");
  tc_release(r);
  r = TU_NN(tc_cat((tc_tensor *[]){e, e}, 2, 0));
  TU_SHAPE_IS(r, 1, ((int64_t[]){0}));
  tc_release(r);
  tc_tensor *w = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 0)));
  r = TU_NN(tc_cat((tc_tensor *[]){w, m, w}, 3, 1));
  expect_values(r, (double[]){1, 2, 3, 4}, 4, "size-0 dim");
  tc_release(r);
  tc_release(i);
  tc_release(f);
  tc_release(e);
  tc_release(m);
  tc_release(z);
  tc_release(w);
}

static void test_cat_errors(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 3)));
  tc_tensor *b = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 4)));
  tc_tensor *c = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 3, 1)));
  tc_tensor *s = TU_NN(tc_zeros(TC_F32, 0, NULL));
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){a, b}, 2, 0));
  TU_EXPECT_ERR("tc_cat", "dim 1");
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){a, c}, 2, 0));
  TU_EXPECT_ERR("tc_cat", "dims");
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){a}, 0, 0));
  TU_EXPECT_ERR("tc_cat", "at least one");
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){a, NULL}, 2, 0));
  TU_EXPECT_ERR("tc_cat", NULL);
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){a, a}, 2, 2));
  TU_EXPECT_ERR("tc_cat", "dim");
  tc_clear_error();
  assert_null(tc_cat((tc_tensor *[]){s, s}, 2, 0));
  TU_EXPECT_ERR("tc_cat", "0-d");
  tc_clear_error();
  assert_null(tc_stack((tc_tensor *[]){a, b}, 2, 0));
  TU_EXPECT_ERR("tc_stack", "same shape");
  tc_clear_error();
  assert_null(tc_stack((tc_tensor *[]){a, a}, 2, 3));
  TU_EXPECT_ERR("tc_stack", "dim");
  tc_clear_error();
  tc_release(a);
  tc_release(b);
  tc_release(c);
  tc_release(s);
}

static void test_stack_values(void **state) {
  (void)state;
  for (int l = 0; l < TU_NLAYOUTS; l++) {
    tu_arr x[3];
    for (int i = 0; i < 3; i++)
      x[i] = tu_make_unif(TC_F64, (l + i) % TU_NLAYOUTS, TC_SHAPE(2, 3), -5,
                          5, 40 + i);
    for (int dim = -3; dim < 3; dim++) {
      int d = dim < 0 ? dim + 3 : dim;
      tc_tensor *r = TU_NN(tc_stack((tc_tensor *[]){x[0].t, x[1].t, x[2].t},
                                    3, dim));
      int64_t os[3], k = 0;
      for (int e = 0; e < 3; e++) os[e] = e == d ? 3 : (int64_t[]){2, 3}[k++];
      TU_SHAPE_IS(r, 3, os);
      double want[18];
      int64_t m[3];
      for (int64_t f = 0; f < 18; f++) {
        tu_unravel(f, 3, os, m);
        int64_t mm[2], j = 0;
        for (int e = 0; e < 3; e++)
          if (e != d) mm[j++] = m[e];
        want[f] = x[m[d]].v[mm[0] * 3 + mm[1]];
      }
      expect_values(r, want, 18, "stack");
      tc_release(r);
    }
    for (int i = 0; i < 3; i++) tu_free(&x[i]);
  }
}

/* -- index_select / embedding ----------------------------------------------- */

static void test_index_select_values(void **state) {
  (void)state;
  const double idxv[5] = {3, 0, 3, 1, 2};
  for (int l = 0; l < TU_NLAYOUTS; l++)
    for (int it = 0; it < 2; it++) {
      tc_dtype idt = it ? TC_I64 : TC_I32;
      tu_arr a = tu_make_unif(TC_F32, l, TC_SHAPE(4, 5), -3, 3, 50 + l);
      tc_tensor *idx = ints(idt, TC_SHAPE(5), idxv);
      /* dim 0: rows */
      tc_tensor *r = TU_NN(tc_index_select(a.t, 0, idx));
      TU_SHAPE_IS(r, 2, ((int64_t[]){5, 5}));
      double want[25];
      for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) want[i * 5 + j] = a.v[(int)idxv[i] * 5 + j];
      expect_values(r, want, 25, "index_select dim 0");
      tc_release(r);
      /* dim -1: columns */
      r = TU_NN(tc_index_select(a.t, -1, idx));
      TU_SHAPE_IS(r, 2, ((int64_t[]){4, 5}));
      double want2[20];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) want2[i * 5 + j] = a.v[i * 5 + (int)idxv[j]];
      expect_values(r, want2, 20, "index_select dim -1");
      tc_release(r);
      /* a 0-d index keeps the dim, with size 1 */
      tc_tensor *one = ints(idt, 0, NULL, (double[]){2});
      r = TU_NN(tc_index_select(a.t, 1, one));
      TU_SHAPE_IS(r, 2, ((int64_t[]){4, 1}));
      double want3[4] = {a.v[2], a.v[7], a.v[12], a.v[17]};
      expect_values(r, want3, 4, "0-d index");
      tc_release(r);
      tc_release(one);
      tc_release(idx);
      tu_free(&a);
    }
}

static void test_index_errors(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(4, 5)));
  tc_tensor *bad = ints(TC_I64, TC_SHAPE(3), (double[]){0, 7, 1});
  tc_tensor *neg = ints(TC_I32, TC_SHAPE(2), (double[]){0, -1});
  tc_tensor *fl = tu_from(TC_F32, TC_SHAPE(1), (double[]){1});
  tc_tensor *two = ints(TC_I64, TC_SHAPE(1, 1), (double[]){1});
  tc_clear_error();
  assert_null(tc_index_select(a, 0, bad));
  TU_EXPECT_ERR("tc_index_select", "index 7 is out of range");
  tc_clear_error();
  assert_null(tc_index_select(a, 1, neg));
  TU_EXPECT_ERR("tc_index_select", "index -1 is out of range");
  tc_clear_error();
  assert_null(tc_index_select(a, 0, fl));
  TU_EXPECT_ERR("tc_index_select", "i32 or i64");
  tc_clear_error();
  assert_null(tc_index_select(a, 0, two));
  TU_EXPECT_ERR("tc_index_select", "1-D");
  tc_clear_error();
  assert_null(tc_index_select(a, 2, neg));
  TU_EXPECT_ERR("tc_index_select", "dim");
  tc_clear_error();
  assert_null(tc_embedding(a, bad));
  TU_EXPECT_ERR("tc_embedding", "index 7 is out of range");
  tc_clear_error();
  assert_null(tc_embedding(a, neg));
  TU_EXPECT_ERR("tc_embedding", "index -1");
  tc_clear_error();
  assert_null(tc_embedding(bad, neg));
  TU_EXPECT_ERR("tc_embedding", "2-D");
  tc_clear_error();
  assert_null(tc_embedding(a, NULL));
  TU_EXPECT_ERR("tc_embedding", NULL);
  tc_clear_error();
  /* a lazy (computed) index is checked too: 3 + 3 = 6 is past 5 rows */
  tc_tensor *six = TU_NN(tc_add_scalar(two, 5));
  assert_null(tc_embedding(a, six));
  TU_EXPECT_ERR("tc_embedding", "index 6 is out of range");
  tc_clear_error();
  tc_release(six);
  tc_release(a);
  tc_release(bad);
  tc_release(neg);
  tc_release(fl);
  tc_release(two);
}

static void test_embedding_values(void **state) {
  (void)state;
  const double iv[6] = {9, 0, 4, 4, 2, 7};
  for (int l = 0; l < TU_NLAYOUTS; l++)
    for (int it = 0; it < 2; it++) {
      tc_dtype idt = it ? TC_I32 : TC_I64;
      tu_arr w = tu_make_unif(l == 1 ? TC_F64 : TC_F32, l, TC_SHAPE(10, 6),
                              -1, 1, 60 + l);
      tc_tensor *idx = ints(idt, TC_SHAPE(2, 3), iv);
      tc_tensor *r = TU_NN(tc_embedding(w.t, idx));
      TU_SHAPE_IS(r, 3, ((int64_t[]){2, 3, 6}));
      assert_int_equal(tc_dtype_of(r), w.dt);
      double want[36];
      for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) want[i * 6 + j] = w.v[(int)iv[i] * 6 + j];
      expect_values(r, want, 36, "embedding");
      tc_release(r);
      /* a transposed index tensor reads its logical order */
      tc_tensor *it2 = TU_NN(tc_transpose(idx, 0, 1));
      r = TU_NN(tc_embedding(w.t, it2));
      TU_SHAPE_IS(r, 3, ((int64_t[]){3, 2, 6}));
      double want2[36];
      for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
          for (int j = 0; j < 6; j++)
            want2[(i * 2 + k) * 6 + j] = w.v[(int)iv[k * 3 + i] * 6 + j];
      expect_values(r, want2, 36, "embedding transposed index");
      tc_release(r);
      tc_release(it2);
      tc_release(idx);
      tu_free(&w);
    }
}

/* Token embedding + position embedding, several times (hot regions in
** compile mode), then a pointwise op: the values stay exact references. */
static void test_embedding_in_a_loop(void **state) {
  (void)state;
  tu_arr tok = tu_make_unif(TC_F32, TU_CONTIG, TC_SHAPE(16, 8), -1, 1, 70);
  tu_arr pos = tu_make_unif(TC_F32, TU_CONTIG, TC_SHAPE(4, 8), -1, 1, 71);
  for (int step = 0; step < 5; step++) {
    size_t mark = tc_scope_begin();
    double iv[4] = {step, 15 - step, 3, step * 2};
    tc_tensor *idx = ints(TC_I64, TC_SHAPE(4), iv);
    tc_tensor *x = tc_add(tc_embedding(tok.t, idx), pos.t);
    tc_tensor *y = TU_NN(tc_mul_scalar(x, 2));
    double want[32];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 8; j++)
        want[i * 8 + j] =
            (double)((float)((float)tok.v[(int)iv[i] * 8 + j] +
                             (float)pos.v[i * 8 + j]) * 2.0f);
    expect_values(y, want, 32, "embedding + position");
    tc_scope_end(mark);
  }
  tu_free(&tok);
  tu_free(&pos);
}

/* -- gather / scatter_add ------------------------------------------------------- */

static void test_gather_values(void **state) {
  (void)state;
  const int64_t as[3] = {3, 4, 5};
  for (int l = 0; l < TU_NLAYOUTS; l++)
    for (int d = 0; d < 3; d++) {
      tu_arr a = tu_make_unif(TC_F64, l, 3, as, -4, 4, 80 + l);
      int64_t is[3] = {2, 3, 4};
      int64_t n = tu_numel(3, is);
      tu_rng rng = {(uint64_t)(d * 10 + l)};
      double iv[24];
      for (int64_t i = 0; i < n; i++) iv[i] = (double)(tu_next(&rng) % (uint64_t)as[d]);
      tc_tensor *idx = ints(d == 1 ? TC_I32 : TC_I64, 3, is, iv);
      tc_tensor *r = TU_NN(tc_gather(a.t, d - 3, idx));
      TU_SHAPE_IS(r, 3, is);
      double want[24];
      int64_t m[3];
      for (int64_t i = 0; i < n; i++) {
        tu_unravel(i, 3, is, m);
        m[d] = (int64_t)iv[i];
        want[i] = a.v[tu_ravel(3, as, m)];
      }
      expect_values(r, want, n, "gather");
      tc_release(r);
      tc_release(idx);
      tu_free(&a);
    }
}

static void test_scatter_add_values(void **state) {
  (void)state;
  const tc_dtype dts[3] = {TC_F32, TC_F64, TC_I32};
  for (int di = 0; di < 3; di++)
    for (int l = 0; l < TU_NLAYOUTS; l++)
      for (int d = 0; d < 2; d++) {
        tc_dtype dt = dts[di];
        bool fl = tu_is_float(dt);
        tu_arr a = tu_make_unif(dt, l, TC_SHAPE(4, 3), fl ? -2 : -50,
                                fl ? 2 : 50, 90 + l);
        tu_arr src = tu_make_unif(dt, (l + 1) % TU_NLAYOUTS, TC_SHAPE(6, 5),
                                  fl ? -2 : -50, fl ? 2 : 50, 95 + l);
        int64_t is[2] = {5, 3};
        if (d == 1) is[0] = 4, is[1] = 5;
        double iv[20];
        tu_rng rng = {(uint64_t)(l * 7 + d)};
        int64_t lim = d == 0 ? 4 : 3;
        for (int i = 0; i < is[0] * is[1]; i++)
          iv[i] = (double)(tu_next(&rng) % (uint64_t)lim);
        tc_tensor *idx = ints(TC_I64, 2, is, iv);
        tc_tensor *r = TU_NN(tc_scatter_add(a.t, d, idx, src.t));
        TU_SHAPE_IS(r, 2, a.shape);
        assert_int_equal(tc_dtype_of(r), dt);
        /* reference: adds in C order of index, rounded to dt each time */
        double want[12];
        memcpy(want, a.v, sizeof want);
        for (int64_t i = 0; i < is[0]; i++)
          for (int64_t j = 0; j < is[1]; j++) {
            int64_t t = (int64_t)iv[i * is[1] + j];
            int64_t at = d == 0 ? t * 3 + j : i * 3 + t;
            want[at] = tu_round(dt, want[at] + src.v[i * 5 + j]);
          }
        expect_values(r, want, 12, "scatter_add");
        tc_release(r);
        /* in place, when a is writable (not an expanded view) */
        if (l != TU_EXPAND) {
          TU_OK(tc_scatter_add_(a.t, d, idx, src.t));
          expect_values(a.t, want, 12, "scatter_add_");
        }
        tc_release(idx);
        tu_free(&a);
        tu_free(&src);
      }
}

/* Larger scatters, enough to split over threads and along the last dim's
** runs: a [7, 5, 600] (f32, f64, i64) scattered along each dim from src
** [12, 12, 700], the index i32 or i64 and contiguous, transposed (its last
** two dims swapped in memory) or expanded (a size-1 base broadcast over
** every dim but the scattered one, as an embedding's gradient does).
** Reference: the adds in C order of the index, rounded each time. */
static void test_scatter_add_large(void **state) {
  (void)state;
  const int64_t as[3] = {7, 5, 600}, ss[3] = {12, 12, 700};
  const tc_dtype dts[3] = {TC_F32, TC_F64, TC_I64};
  for (int di = 0; di < 3; di++)
    for (int d = 0; d < 3; d++)
      for (int form = 0; form < 3; form++) {
        tc_dtype dt = dts[di];
        bool fl = tu_is_float(dt);
        tu_arr a = tu_make_unif(dt, TU_CONTIG, 3, as, fl ? -2 : -50,
                                fl ? 2 : 50, 300 + d);
        tu_arr src = tu_make_unif(dt, TU_SLICED, 3, ss, fl ? -2 : -50,
                                  fl ? 2 : 50, 310 + d);
        int64_t is[3] = {6, 4, 520};
        is[d] = d == 2 ? 650 : 11;   /* more than a has along d: repeats */
        int64_t n = tu_numel(3, is);
        double *iv = malloc(sizeof(double) * (size_t)n);
        tu_rng rng = {(uint64_t)(di * 9 + d * 3 + form + 1)};
        tc_tensor *idx;
        if (form == 2) {   /* expanded: one index per step along d */
          int64_t bs[3] = {1, 1, 1};
          bs[d] = is[d];
          double bv[650];
          for (int64_t j = 0; j < is[d]; j++)
            bv[j] = (double)(tu_next(&rng) % (uint64_t)as[d]);
          tc_tensor *base = ints(TC_I64, 3, bs, bv);
          idx = TU_NN(tc_expand(base, 3, is));
          tc_release(base);
          int64_t m[3];
          for (int64_t i = 0; i < n; i++) {
            tu_unravel(i, 3, is, m);
            iv[i] = bv[m[d]];
          }
        } else {
          for (int64_t i = 0; i < n; i++)
            iv[i] = (double)(tu_next(&rng) % (uint64_t)as[d]);
          tc_dtype it = d == 1 ? TC_I32 : TC_I64;
          if (form == 0) {
            idx = ints(it, 3, is, iv);
          } else {   /* the same values, stored with dims 1 and 2 swapped */
            int64_t ts[3] = {is[0], is[2], is[1]};
            double *tv = malloc(sizeof(double) * (size_t)n);
            int64_t m[3];
            for (int64_t i = 0; i < n; i++) {
              tu_unravel(i, 3, is, m);
              tv[(m[0] * is[2] + m[2]) * is[1] + m[1]] = iv[i];
            }
            tc_tensor *t = ints(it, 3, ts, tv);
            idx = TU_NN(tc_transpose(t, 1, 2));
            tc_release(t);
            free(tv);
          }
        }
        tc_tensor *r = TU_NN(tc_scatter_add(a.t, d, idx, src.t));
        int64_t na = tu_numel(3, as);
        double *want = malloc(sizeof(double) * (size_t)na);
        memcpy(want, a.v, sizeof(double) * (size_t)na);
        int64_t m[3];
        for (int64_t i = 0; i < n; i++) {
          tu_unravel(i, 3, is, m);
          double sv = src.v[tu_ravel(3, ss, m)];
          m[d] = (int64_t)iv[i];
          int64_t at = tu_ravel(3, as, m);
          want[at] = tu_round(dt, want[at] + sv);
        }
        expect_values(r, want, na, "scatter_add (large)");
        tc_release(r);
        tc_release(idx);
        free(want);
        free(iv);
        tu_free(&a);
        tu_free(&src);
      }
}

/* An expanded index is checked through its one stored copy: a bad value
** there is still named. */
static void test_scatter_add_expanded_bad_index(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(4, 300)));
  tc_tensor *src = TU_NN(tc_ones(TC_F32, TC_SHAPE(3, 300)));
  tc_tensor *base = ints(TC_I64, TC_SHAPE(3, 1), (double[]){1, 7, 2});
  tc_tensor *idx = TU_NN(tc_expand(base, TC_SHAPE(3, 300)));
  assert_null(tc_scatter_add(a, 0, idx, src));
  TU_EXPECT_ERR("tc_scatter_add", "index 7 is out of range for dim 0 of size 4");
  tc_release(idx);
  tc_release(base);
  tc_release(src);
  tc_release(a);
}

static void test_gather_scatter_errors(void **state) {
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(3, 4)));
  tc_tensor *src = TU_NN(tc_ones(TC_F32, TC_SHAPE(3, 4)));
  tc_tensor *srcd = TU_NN(tc_ones(TC_F64, TC_SHAPE(3, 4)));
  tc_tensor *big = ints(TC_I64, TC_SHAPE(1, 2), (double[]){0, 3});
  tc_tensor *wide = ints(TC_I64, TC_SHAPE(1, 5), (double[]){0, 0, 0, 0, 0});
  tc_tensor *flat = ints(TC_I64, TC_SHAPE(2), (double[]){0, 0});
  tc_clear_error();
  assert_null(tc_gather(a, 0, big));
  TU_EXPECT_ERR("tc_gather", "index 3 is out of range");
  tc_clear_error();
  assert_null(tc_gather(a, 0, wide));
  TU_EXPECT_ERR("tc_gather", "size 5");
  tc_clear_error();
  assert_null(tc_gather(a, 0, flat));
  TU_EXPECT_ERR("tc_gather", "dims");
  tc_clear_error();
  assert_null(tc_scatter_add(a, 0, big, src));
  TU_EXPECT_ERR("tc_scatter_add", "index 3 is out of range");
  tc_clear_error();
  assert_null(tc_scatter_add(a, 1, big, srcd));
  TU_EXPECT_ERR("tc_scatter_add", "dtype");
  tc_clear_error();
  assert_int_equal(tc_scatter_add_(a, 0, big, src), -1);
  TU_EXPECT_ERR("tc_scatter_add_", "index 3");
  tc_clear_error();
  double *v = tu_read(a);   /* a unchanged */
  for (int i = 0; i < 12; i++) assert_true(v[i] == 0);
  free(v);
  tc_release(a);
  tc_release(src);
  tc_release(srcd);
  tc_release(big);
  tc_release(wide);
  tc_release(flat);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cat_values_layouts),
      cmocka_unit_test(test_cat_promotes_and_empty),
      cmocka_unit_test(test_cat_errors),
      cmocka_unit_test(test_stack_values),
      cmocka_unit_test(test_index_select_values),
      cmocka_unit_test(test_index_errors),
      cmocka_unit_test(test_embedding_values),
      cmocka_unit_test(test_embedding_in_a_loop),
      cmocka_unit_test(test_gather_values),
      cmocka_unit_test(test_scatter_add_values),
      cmocka_unit_test(test_scatter_add_large),
      cmocka_unit_test(test_scatter_add_expanded_bad_index),
      cmocka_unit_test(test_gather_scatter_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
