/*
** test_views.c -- reshape, permute, transpose, slice, expand, unsqueeze,
** squeeze, contiguous: shapes, strides, values, writes through views into
** the base, no copies (bytes_allocated), and views outliving their base.
*/
#include "testutil.h"

/* A contiguous f32 tensor holding 0, 1, 2, ... */
static tc_tensor *iota(int ndim, const int64_t *shape) {
  int64_t n = tu_numel(ndim, shape);
  double *v = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) v[i] = (double)i;
  tc_tensor *t = tu_from(TC_F32, ndim, shape, v);
  free(v);
  return t;
}

/* Checks t's values (C order) against want[0..n). */
#define EXPECT_VALUES(t, ...)                                             \
  do {                                                                    \
    const double w_[] = {__VA_ARGS__};                                    \
    expect_values_((t), w_, (int64_t)(sizeof w_ / sizeof w_[0]), __FILE__, \
                   __LINE__);                                             \
  } while (0)
static void expect_values_(tc_tensor *t, const double *want, int64_t n,
                           const char *file, int line) {
  if (tc_numel(t) != n) {
    print_error("%s:%d: numel %lld, expected %lld\n", file, line,
                (long long)tc_numel(t), (long long)n);
    _fail(file, line);
  }
  double *got = tu_read(t);
  for (int64_t i = 0; i < n; i++)
    if (!tu_same_value(got[i], want[i])) {
      print_error("%s:%d: [%lld] = %g, expected %g\n", file, line,
                  (long long)i, got[i], want[i]);
      free(got);
      _fail(file, line);
    }
  free(got);
}

static void expect_strides(tc_tensor *t, int ndim, const int64_t *st) {
  for (int d = 0; d < ndim; d++)
    if (tc_stride(t, d) != st[d])
      fail_msg("stride(%d) = %lld, expected %lld", d,
               (long long)tc_stride(t, d), (long long)st[d]);
}

static uint64_t live_bytes(void) {
  tc_stats s;
  tc_stats_get(&s);
  return s.bytes_allocated;
}

static void test_reshape_is_a_view(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(2, 3, 4));
  uint64_t before = live_bytes();
  tc_tensor *r = TU_NN(tc_reshape(b, TC_SHAPE(6, 4)));
  assert_true(live_bytes() == before); /* no copy */
  TU_SHAPE_IS(r, 2, ((const int64_t[]){6, 4}));
  expect_strides(r, 2, (const int64_t[]){4, 1});
  assert_true(tc_is_contiguous(r));
  TU_OK(tc_add_scalar_(r, 100)); /* visible in the base */
  double *v = tu_read(b);
  for (int i = 0; i < 24; i++) assert_true(v[i] == i + 100);
  free(v);
  /* -1 inference. */
  tc_tensor *r2 = TU_NN(tc_reshape(b, TC_SHAPE(4, -1)));
  TU_SHAPE_IS(r2, 2, ((const int64_t[]){4, 6}));
  tc_tensor *r3 = TU_NN(tc_reshape(b, TC_SHAPE(-1)));
  TU_SHAPE_IS(r3, 1, ((const int64_t[]){24}));
  tc_tensor *r4 = TU_NN(tc_reshape(b, TC_SHAPE(2, -1, 3)));
  TU_SHAPE_IS(r4, 3, ((const int64_t[]){2, 4, 3}));
  EXPECT_VALUES(r4, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
                111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122,
                123);
  /* One element to 0-d and back. */
  tc_tensor *one = TU_NN(tc_full(TC_F64, TC_SHAPE(1, 1), 5));
  tc_tensor *z = TU_NN(tc_reshape(one, 0, NULL));
  assert_int_equal(tc_ndim(z), 0);
  assert_true(tu_item(z) == 5);
  tc_tensor *back = TU_NN(tc_reshape(z, TC_SHAPE(1, 1, 1)));
  TU_SHAPE_IS(back, 3, ((const int64_t[]){1, 1, 1}));
  /* Zero-size reshape. */
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0, 4)));
  tc_tensor *e2 = TU_NN(tc_reshape(e, TC_SHAPE(2, 0, 2)));
  TU_SHAPE_IS(e2, 3, ((const int64_t[]){2, 0, 2}));
  tc_tensor *e3 = TU_NN(tc_reshape(e, TC_SHAPE(-1, 2)));
  TU_SHAPE_IS(e3, 2, ((const int64_t[]){0, 2}));
  tc_release(e3);
  tc_release(e);
  tc_release(e2);
  tc_release(one);
  tc_release(z);
  tc_release(back);
  tc_release(r);
  tc_release(r2);
  tc_release(r3);
  tc_release(r4);
  tc_release(b);
}

static void test_reshape_of_noncontiguous(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(3, 4));
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 1)); /* (4,3) */
  tc_tensor *r = TU_NN(tc_reshape(t, TC_SHAPE(12)));
  EXPECT_VALUES(r, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
  tc_tensor *r2 = TU_NN(tc_reshape(t, TC_SHAPE(2, 6)));
  EXPECT_VALUES(r2, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
  /* Inserting a size-1 dim is always possible as a view (as in torch). */
  tc_tensor *r3 = TU_NN(tc_reshape(t, TC_SHAPE(4, 1, 3)));
  TU_OK(tc_add_scalar_(r3, 1000));
  EXPECT_VALUES(b, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009,
                1010, 1011);
  /* The earlier reshape copies are not affected by the later write. */
  EXPECT_VALUES(r, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
  /* Reshape of a stepped slice and of an expanded tensor. */
  tc_tensor *s = TU_NN(tc_slice(b, 1, 0, 4, 2)); /* (3,2): cols 0, 2 */
  tc_tensor *rs = TU_NN(tc_reshape(s, TC_SHAPE(-1)));
  EXPECT_VALUES(rs, 1000, 1002, 1004, 1006, 1008, 1010);
  tc_tensor *row = TU_NN(tc_slice(b, 0, 1, 2, 1)); /* (1,4) */
  tc_tensor *ex = TU_NN(tc_expand(row, TC_SHAPE(2, 4)));
  tc_tensor *rex = TU_NN(tc_reshape(ex, TC_SHAPE(8)));
  EXPECT_VALUES(rex, 1004, 1005, 1006, 1007, 1004, 1005, 1006, 1007);
  tc_release(b);
  tc_release(t);
  tc_release(r);
  tc_release(r2);
  tc_release(r3);
  tc_release(s);
  tc_release(rs);
  tc_release(row);
  tc_release(ex);
  tc_release(rex);
}

static void test_permute_transpose(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(2, 3, 4));
  uint64_t before = live_bytes();
  tc_tensor *p = TU_NN(tc_permute(b, 3, (const int[]){2, 0, 1}));
  tc_tensor *pn = TU_NN(tc_permute(b, 3, (const int[]){-1, 0, 1}));
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 2));
  tc_tensor *tn = TU_NN(tc_transpose(b, -1, -2));
  tc_tensor *same = TU_NN(tc_transpose(b, 1, 1));
  assert_true(live_bytes() == before);
  TU_SHAPE_IS(p, 3, ((const int64_t[]){4, 2, 3}));
  TU_SHAPE_IS(pn, 3, ((const int64_t[]){4, 2, 3}));
  expect_strides(p, 3, (const int64_t[]){1, 12, 4});
  assert_false(tc_is_contiguous(p));
  TU_SHAPE_IS(t, 3, ((const int64_t[]){4, 3, 2}));
  expect_strides(t, 3, (const int64_t[]){1, 4, 12});
  TU_SHAPE_IS(tn, 3, ((const int64_t[]){2, 4, 3}));
  expect_strides(tn, 3, (const int64_t[]){12, 1, 4});
  TU_SHAPE_IS(same, 3, ((const int64_t[]){2, 3, 4}));
  double *vp = tu_read(p), *vpn = tu_read(pn), *vt = tu_read(t),
         *vtn = tu_read(tn);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) {
        assert_true(vp[(i * 2 + j) * 3 + k] == j * 12 + k * 4 + i);
        assert_true(vpn[(i * 2 + j) * 3 + k] == j * 12 + k * 4 + i);
      }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 2; k++)
        assert_true(vt[(i * 3 + j) * 2 + k] == k * 12 + j * 4 + i);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++)
        assert_true(vtn[(i * 4 + j) * 3 + k] == i * 12 + k * 4 + j);
  free(vp);
  free(vpn);
  free(vt);
  free(vtn);
  /* Writes through a permuted view land in the base. */
  TU_OK(tc_mul_scalar_(p, -1));
  double *vb = tu_read(b);
  for (int i = 0; i < 24; i++) assert_true(vb[i] == -i);
  free(vb);
  /* Transposing twice gives back the base's layout. */
  tc_tensor *tt = TU_NN(tc_transpose(t, 0, 2));
  assert_true(tc_is_contiguous(tt));
  expect_strides(tt, 3, (const int64_t[]){12, 4, 1});
  tc_release(tt);
  tc_release(p);
  tc_release(pn);
  tc_release(t);
  tc_release(tn);
  tc_release(same);
  tc_release(b);
}

static void test_slice(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(10));
  struct { int64_t start, end, step; int n; double v[10]; } cases[] = {
      {2, 7, 1, 5, {2, 3, 4, 5, 6}},
      {1, 10, 3, 3, {1, 4, 7}},
      {-3, 10, 1, 3, {7, 8, 9}},        /* negative start, as in Python */
      {-100, 2, 1, 2, {0, 1}},          /* start clamped to 0 */
      {5, 100, 1, 5, {5, 6, 7, 8, 9}},  /* end clamped */
      {0, INT64_MAX, 4, 3, {0, 4, 8}},
      {0, -1, 2, 5, {0, 2, 4, 6, 8}},   /* negative end */
      {-4, -1, 1, 3, {6, 7, 8}},
      {8, 2, 1, 0, {0}},                /* empty */
      {12, 20, 1, 0, {0}},              /* start past the end */
      {9, 10, 5, 1, {9}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tc_tensor *s = TU_NN(
        tc_slice(b, 0, cases[k].start, cases[k].end, cases[k].step));
    assert_int_equal(tc_ndim(s), 1);
    if (tc_size(s, 0) != cases[k].n)
      fail_msg("slice [%lld:%lld:%lld] has %lld elements, expected %d",
               (long long)cases[k].start, (long long)cases[k].end,
               (long long)cases[k].step, (long long)tc_size(s, 0),
               cases[k].n);
    double *v = tu_read(s);
    for (int i = 0; i < cases[k].n; i++)
      if (v[i] != cases[k].v[i])
        fail_msg("slice [%lld:%lld:%lld][%d] = %g, expected %g",
                 (long long)cases[k].start, (long long)cases[k].end,
                 (long long)cases[k].step, i, v[i], cases[k].v[i]);
    if (cases[k].n > 1) assert_int_equal(tc_stride(s, 0), cases[k].step);
    free(v);
    tc_release(s);
  }
  /* Slice of a slice. */
  tc_tensor *s1 = TU_NN(tc_slice(b, 0, 1, 10, 2)); /* 1 3 5 7 9 */
  tc_tensor *s2 = TU_NN(tc_slice(s1, 0, 1, 5, 2)); /* 3 7 */
  EXPECT_VALUES(s2, 3, 7);
  assert_int_equal(tc_stride(s2, 0), 4);
  /* 2-D: along dim 1 (and -1), rows stay. */
  tc_tensor *m = iota(TC_SHAPE(4, 6));
  uint64_t before = live_bytes();
  tc_tensor *c = TU_NN(tc_slice(m, -1, 1, 6, 2));
  tc_tensor *r = TU_NN(tc_slice(m, 0, 1, 3, 1));
  assert_true(live_bytes() == before);
  TU_SHAPE_IS(c, 2, ((const int64_t[]){4, 3}));
  expect_strides(c, 2, (const int64_t[]){6, 2});
  assert_false(tc_is_contiguous(c));
  EXPECT_VALUES(c, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23);
  TU_SHAPE_IS(r, 2, ((const int64_t[]){2, 6}));
  assert_true(tc_is_contiguous(r)); /* a block of whole rows */
  EXPECT_VALUES(r, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17);
  /* Writes through the stepped slice touch only its elements. */
  TU_OK(tc_fill_(c, -1));
  EXPECT_VALUES(m, 0, -1, 2, -1, 4, -1, 6, -1, 8, -1, 10, -1, 12, -1, 14, -1,
                16, -1, 18, -1, 20, -1, 22, -1);
  tc_release(c);
  tc_release(r);
  tc_release(m);
  tc_release(s1);
  tc_release(s2);
  tc_release(b);
}

/* split and chunk: piece sizes as torch gives them, views (no bytes),
** values along dim 0 and dim -1, writes through a piece, errors. */
static void test_split_chunk(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(10));
  struct { bool chunk; int64_t arg; int n; int64_t sizes[10]; } cases[] = {
      {false, 3, 4, {3, 3, 3, 1}},
      {false, 5, 2, {5, 5}},
      {false, 10, 1, {10}},
      {false, 12, 1, {10}},
      {true, 3, 3, {4, 4, 2}},
      {true, 4, 4, {3, 3, 3, 1}},
      {true, 6, 5, {2, 2, 2, 2, 2}},   /* fewer pieces than asked */
      {true, 10, 10, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tc_tensor *out[16];
    uint64_t before = live_bytes();
    int n = cases[k].chunk ? tc_chunk(b, (int)cases[k].arg, 0, out)
                           : tc_split(b, cases[k].arg, 0, out, 16);
    assert_true(live_bytes() == before);
    if (n != cases[k].n)
      fail_msg("%s(%lld): %d pieces, expected %d",
               cases[k].chunk ? "chunk" : "split", (long long)cases[k].arg,
               n, cases[k].n);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      assert_int_equal(tc_size(out[i], 0), cases[k].sizes[i]);
      double *v = tu_read(out[i]);
      for (int64_t j = 0; j < cases[k].sizes[i]; j++)
        assert_true(v[j] == (double)(at + j));
      at += cases[k].sizes[i];
      free(v);
      tc_release(out[i]);
    }
    assert_int_equal(at, 10);
  }
  /* 2-D along the last dim; a write through a piece reaches the base. */
  tc_tensor *m = iota(TC_SHAPE(2, 5));
  tc_tensor *p[3];
  assert_int_equal(tc_split(m, 2, -1, p, 3), 3);
  TU_SHAPE_IS(p[2], 2, ((const int64_t[]){2, 1}));
  EXPECT_VALUES(p[1], 2, 3, 7, 8);
  TU_OK(tc_fill_(p[1], -1));
  EXPECT_VALUES(m, 0, 1, -1, -1, 4, 5, 6, -1, -1, 9);
  for (int i = 0; i < 3; i++) tc_release(p[i]);
  /* An empty dim: one empty piece. */
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0, 3)));
  assert_int_equal(tc_chunk(e, 4, 0, p), 1);
  assert_int_equal(tc_size(p[0], 0), 0);
  tc_release(p[0]);
  tc_release(e);
  /* Errors: nothing written. */
  p[0] = NULL;
  assert_int_equal(tc_split(m, 0, 0, p, 3), -1);
  assert_non_null(strstr(tc_last_error(), "size must be positive"));
  assert_int_equal(tc_chunk(m, 0, 0, p), -1);
  assert_int_equal(tc_split(m, 1, 1, p, 3), -1);   /* 5 pieces, room for 3 */
  assert_non_null(strstr(tc_last_error(), "room for 3"));
  assert_int_equal(tc_split(m, 1, 2, p, 3), -1);   /* no dim 2 */
  assert_null(p[0]);
  tc_tensor *z = TU_NN(tc_sum_all(m));
  assert_int_equal(tc_chunk(z, 2, 0, p), -1);
  tc_release(z);
  tc_release(m);
  tc_release(b);
}

static void test_expand(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(3, 1));
  uint64_t before = live_bytes();
  tc_tensor *e = TU_NN(tc_expand(b, TC_SHAPE(3, 4)));
  tc_tensor *e2 = TU_NN(tc_expand(b, TC_SHAPE(-1, 2)));
  tc_tensor *e3 = TU_NN(tc_expand(b, TC_SHAPE(2, 3, 4)));
  assert_true(live_bytes() == before);
  TU_SHAPE_IS(e, 2, ((const int64_t[]){3, 4}));
  assert_int_equal(tc_stride(e, 1), 0);
  assert_int_equal(tc_stride(e, 0), 1);
  assert_false(tc_is_contiguous(e));
  EXPECT_VALUES(e, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2);
  TU_SHAPE_IS(e2, 2, ((const int64_t[]){3, 2}));
  EXPECT_VALUES(e2, 0, 0, 1, 1, 2, 2);
  TU_SHAPE_IS(e3, 3, ((const int64_t[]){2, 3, 4}));
  assert_int_equal(tc_stride(e3, 0), 0);
  assert_int_equal(tc_stride(e3, 2), 0);
  EXPECT_VALUES(e3, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1,
                1, 2, 2, 2, 2);
  /* Expanding a 0-d tensor; expanding to the same shape. */
  tc_tensor *z = TU_NN(tc_full(TC_I32, 0, NULL, 7));
  tc_tensor *ez = TU_NN(tc_expand(z, TC_SHAPE(2, 3)));
  EXPECT_VALUES(ez, 7, 7, 7, 7, 7, 7);
  tc_tensor *same = TU_NN(tc_expand(e, TC_SHAPE(3, 4)));
  EXPECT_VALUES(same, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2);
  /* The base sees writes to itself through the expanded view's reads. */
  TU_OK(tc_add_scalar_(b, 10));
  EXPECT_VALUES(e, 10, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12);
  tc_release(z);
  tc_release(ez);
  tc_release(same);
  tc_release(e);
  tc_release(e2);
  tc_release(e3);
  tc_release(b);
}

static void test_unsqueeze_squeeze(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(3, 4));
  struct { int dim; int64_t shape[3]; } us[] = {
      {0, {1, 3, 4}}, {1, {3, 1, 4}}, {2, {3, 4, 1}}, {-1, {3, 4, 1}},
      {-3, {1, 3, 4}},
  };
  for (size_t k = 0; k < sizeof us / sizeof us[0]; k++) {
    tc_tensor *u = TU_NN(tc_unsqueeze(b, us[k].dim));
    TU_SHAPE_IS(u, 3, us[k].shape);
    assert_true(tc_is_contiguous(u));
    EXPECT_VALUES(u, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    tc_release(u);
  }
  tc_tensor *u = TU_NN(tc_unsqueeze(b, 1));
  TU_OK(tc_add_scalar_(u, 1)); /* a view */
  EXPECT_VALUES(b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
  tc_release(u);

  tc_tensor *q = iota(TC_SHAPE(1, 3, 1, 4));
  struct { int dim; int ndim; int64_t shape[3]; } sq[] = {
      {0, 3, {3, 1, 4}}, {2, 3, {1, 3, 4}}, {-2, 3, {1, 3, 4}},
      {-4, 3, {3, 1, 4}}, {TC_ALL_DIMS, 2, {3, 4}},
  };
  for (size_t k = 0; k < sizeof sq / sizeof sq[0]; k++) {
    tc_tensor *s = TU_NN(tc_squeeze(q, sq[k].dim));
    TU_SHAPE_IS(s, sq[k].ndim, sq[k].shape);
    EXPECT_VALUES(s, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    tc_release(s);
  }
  tc_tensor *s = TU_NN(tc_squeeze(q, TC_ALL_DIMS));
  TU_OK(tc_sub_scalar_(s, 1));
  EXPECT_VALUES(q, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
  tc_tensor *one = TU_NN(tc_full(TC_F32, TC_SHAPE(1, 1), 3));
  tc_tensor *s0 = TU_NN(tc_squeeze(one, TC_ALL_DIMS));
  assert_int_equal(tc_ndim(s0), 0);
  assert_true(tu_item(s0) == 3);
  tc_release(one);
  tc_release(s0);
  tc_release(s);
  tc_release(q);
  tc_release(b);
}

static void test_contiguous(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(3, 4));
  /* Already contiguous: a new handle on the same data, no copy. */
  tc_tensor *c = TU_NN(tc_contiguous(b));
  assert_ptr_not_equal(c, b);
  assert_ptr_equal(tc_data(c), tc_data(b));
  tc_release(c); /* b still holds its own reference */
  assert_true(tc_numel(b) == 12);
  /* Transposed: a contiguous copy. */
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));
  assert_false(tc_is_contiguous(t));
  tc_tensor *ct = TU_NN(tc_contiguous(t));
  assert_ptr_not_equal(ct, t);
  assert_true(tc_is_contiguous(ct));
  expect_strides(ct, 2, (const int64_t[]){3, 1});
  EXPECT_VALUES(ct, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
  float *p = tc_data(ct);
  assert_non_null(p);
  assert_true(p[0] == 0 && p[1] == 4 && p[3] == 1 && p[11] == 11);
  TU_OK(tc_fill_(ct, 0)); /* the copy is separate from the base */
  EXPECT_VALUES(b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
  /* Sliced and expanded inputs. */
  tc_tensor *s = TU_NN(tc_slice(b, 1, 1, 4, 2));
  tc_tensor *cs = TU_NN(tc_contiguous(s));
  assert_true(tc_is_contiguous(cs));
  EXPECT_VALUES(cs, 1, 3, 5, 7, 9, 11);
  tc_release(s);
  tc_release(cs);
  tc_release(ct);
  tc_release(t);
  tc_release(b);
}

/* tc_data of a non-contiguous view fails with a clear message and leaves
** the view attached to its base (a copy would not write through); a
** contiguous slice of rows points into the base, so writes reach it. */
static void test_data_of_view(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(3, 4));
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));
  tc_clear_error();
  assert_null(tc_data(t));
  TU_EXPECT_ERR("tc_data", "non-contiguous");
  assert_false(tc_is_contiguous(t));
  TU_OK(tc_add_scalar_(t, 100));   /* still a view: writes reach b */
  EXPECT_VALUES(b, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
                111);
  tc_tensor *rows = TU_NN(tc_slice(b, 0, 1, 3, 1));
  float *p = tc_data(rows);
  assert_non_null(p);
  p[0] = -1;
  EXPECT_VALUES(b, 100, 101, 102, 103, -1, 105, 106, 107, 108, 109, 110,
                111);
  tc_release(rows);
  tc_release(t);
  tc_release(b);
}

/* A view keeps the storage alive after the base is released. */
static void test_view_outlives_base(void **state) {
  (void)state;
  tc_tensor *b = iota(TC_SHAPE(4, 5));
  tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));
  tc_tensor *s = TU_NN(tc_slice(b, 1, 0, 5, 2));
  tc_tensor *r = TU_NN(tc_reshape(b, TC_SHAPE(20)));
  tc_tensor *row = TU_NN(tc_slice(b, 0, 0, 1, 1));
  tc_tensor *e = TU_NN(tc_expand(row, TC_SHAPE(2, 5)));
  tc_release(row);
  tc_release(b);
  EXPECT_VALUES(s, 0, 2, 4, 5, 7, 9, 10, 12, 14, 15, 17, 19);
  tc_release(s);
  TU_OK(tc_add_scalar_(r, 1)); /* r and t still share the storage */
  double *v = tu_read(t);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++) assert_true(v[i * 4 + j] == j * 5 + i + 1);
  free(v);
  EXPECT_VALUES(e, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5);
  tc_release(r);
  tc_release(t);
  tc_release(e);
}

static void test_views_of_each_dtype(void **state) {
  (void)state;
  for (size_t k = 0; k < 5; k++) {
    tc_dtype dt = tu_all_dtypes[k];
    double v[6] = {1, 0, 1, 1, 0, 0};
    if (dt != TC_BOOL)
      for (int i = 0; i < 6; i++) v[i] = i * 3 - 7;
    tc_tensor *b = tu_from(dt, TC_SHAPE(2, 3), v);
    tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));
    tc_tensor *c = TU_NN(tc_contiguous(t));
    assert_int_equal(tc_dtype_of(c), dt);
    double *g = tu_read(c);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 2; j++) assert_true(g[i * 2 + j] == v[j * 3 + i]);
    free(g);
    tc_release(b);
    tc_release(t);
    tc_release(c);
  }
}

/* Copies and ops whose operands step through memory in another order than
** the result, large enough that the eager iterator walks them in tiles
** (both dims 16 or longer), with partial tiles at the edges: every element
** checked against the source read by hand. */
enum { TR_R = 70, TR_C = 131 };

static double tr_val(tc_dtype dt, int64_t i) {
  return dt == TC_BOOL ? (double)(i % 3 == 1) : (double)(i % 1009) - 400;
}

static void test_transposed_walks(void **state) {
  (void)state;
  const tc_dtype dts[] = {TC_BOOL, TC_I32, TC_I64, TC_F32, TC_F64};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    tc_dtype dt = dts[k];
    double *v = malloc(sizeof(double) * TR_R * TR_C);
    assert_non_null(v);
    for (int64_t i = 0; i < TR_R * TR_C; i++) v[i] = tr_val(dt, i);
    tc_tensor *b = tu_from(dt, TC_SHAPE(TR_R, TR_C), v);
    tc_tensor *t = TU_NN(tc_transpose(b, 0, 1));
    /* a plain copy, and one that converts (to f64, and f64 to f32) */
    tc_tensor *c = TU_NN(tc_contiguous(t));
    tc_tensor *cv = TU_NN(tc_cast(t, dt == TC_F64 ? TC_F32 : TC_F64));
    double *g = tu_read(c), *gv = tu_read(cv);
    for (int64_t i = 0; i < TR_C; i++)
      for (int64_t j = 0; j < TR_R; j++) {
        double want = v[j * TR_C + i];
        if (g[i * TR_R + j] != want || gv[i * TR_R + j] != want)
          fail_msg("%s: [%lld][%lld] = %g, %g; expected %g",
                   tc_dtype_name(dt), (long long)i, (long long)j,
                   g[i * TR_R + j], gv[i * TR_R + j], want);
      }
    free(g);
    free(gv);
    /* into a transposed destination: d^T = b, then d^T += b */
    tc_tensor *d = TU_NN(tc_zeros(dt, TC_SHAPE(TR_C, TR_R)));
    tc_tensor *dt_view = TU_NN(tc_transpose(d, 0, 1));
    TU_OK(tc_copy_(dt_view, b));
    if (dt != TC_BOOL) TU_OK(tc_add_(dt_view, b));
    double *gd = tu_read(d);
    for (int64_t i = 0; i < TR_C; i++)
      for (int64_t j = 0; j < TR_R; j++) {
        double want = v[j * TR_C + i] * (dt == TC_BOOL ? 1 : 2);
        if (gd[i * TR_R + j] != want)
          fail_msg("%s: d[%lld][%lld] = %g, expected %g", tc_dtype_name(dt),
                   (long long)i, (long long)j, gd[i * TR_R + j], want);
      }
    free(gd);
    tc_release(dt_view);
    tc_release(d);
    tc_release(cv);
    tc_release(c);
    tc_release(t);
    tc_release(b);
    free(v);
  }

  /* The 16-bit storage types: a transposed copy moves their bits. */
  const tc_dtype halves[] = {TC_F16, TC_BF16};
  for (size_t k = 0; k < 2; k++) {
    double *v = malloc(sizeof(double) * TR_R * TR_C);
    assert_non_null(v);
    for (int64_t i = 0; i < TR_R * TR_C; i++) v[i] = tr_val(TC_F32, i) / 7;
    tc_tensor *f = tu_from(TC_F32, TC_SHAPE(TR_R, TR_C), v);
    tc_tensor *h = TU_NN(tc_cast(f, halves[k]));
    tc_tensor *ht = TU_NN(tc_transpose(h, 0, 1));
    tc_tensor *c = TU_NN(tc_contiguous(ht));
    tc_tensor *src = TU_NN(tc_cast(h, TC_F32)), *got = TU_NN(tc_cast(c, TC_F32));
    double *gs = tu_read(src), *gg = tu_read(got);
    for (int64_t i = 0; i < TR_C; i++)
      for (int64_t j = 0; j < TR_R; j++)
        if (gg[i * TR_R + j] != gs[j * TR_C + i])
          fail_msg("%s: [%lld][%lld] = %g, expected %g",
                   tc_dtype_name(halves[k]), (long long)i, (long long)j,
                   gg[i * TR_R + j], gs[j * TR_C + i]);
    free(gs);
    free(gg);
    free(v);
    tc_release(got);
    tc_release(src);
    tc_release(c);
    tc_release(ht);
    tc_release(h);
    tc_release(f);
  }

  /* An op with a transposed operand and a broadcast one: x^T + row. */
  double *v = malloc(sizeof(double) * TR_R * TR_C), row[TR_R];
  assert_non_null(v);
  for (int64_t i = 0; i < TR_R * TR_C; i++) v[i] = tr_val(TC_F32, i) * 0.25;
  for (int64_t j = 0; j < TR_R; j++) row[j] = 0.5 * (double)j - 3;
  tc_tensor *x = tu_from(TC_F32, TC_SHAPE(TR_R, TR_C), v);
  tc_tensor *r = tu_from(TC_F32, TC_SHAPE(TR_R), row);
  tc_tensor *xt = TU_NN(tc_transpose(x, 0, 1));
  tc_tensor *y = TU_NN(tc_add(xt, r));
  double *g = tu_read(y);
  for (int64_t i = 0; i < TR_C; i++)
    for (int64_t j = 0; j < TR_R; j++)
      assert_true(g[i * TR_R + j] == (double)(float)(v[j * TR_C + i] + row[j]));
  free(g);

  /* A 3-D permute with the outer dim walked too: p[c][a][b] = z[a][b][c]. */
  enum { A = 5, B = 40, C = 33 };
  double *w = malloc(sizeof(double) * A * B * C);
  assert_non_null(w);
  for (int64_t i = 0; i < A * B * C; i++) w[i] = (double)i;
  tc_tensor *z = tu_from(TC_F32, TC_SHAPE(A, B, C), w);
  tc_tensor *zp = TU_NN(tc_permute(z, 3, (const int[]){2, 0, 1}));
  tc_tensor *pc = TU_NN(tc_contiguous(zp));
  double *gp = tu_read(pc);
  for (int64_t c = 0; c < C; c++)
    for (int64_t a = 0; a < A; a++)
      for (int64_t b = 0; b < B; b++)
        assert_true(gp[(c * A + a) * B + b] == w[(a * B + b) * C + c]);
  free(gp);
  free(w);
  free(v);
  tc_release(pc);
  tc_release(zp);
  tc_release(z);
  tc_release(y);
  tc_release(xt);
  tc_release(r);
  tc_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape_is_a_view),
      cmocka_unit_test(test_reshape_of_noncontiguous),
      cmocka_unit_test(test_permute_transpose),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_split_chunk),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_unsqueeze_squeeze),
      cmocka_unit_test(test_contiguous),
      cmocka_unit_test(test_data_of_view),
      cmocka_unit_test(test_view_outlives_base),
      cmocka_unit_test(test_views_of_each_dtype),
      cmocka_unit_test(test_transposed_walks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
