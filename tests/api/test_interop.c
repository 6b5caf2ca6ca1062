/*
** test_interop.c -- tc_from_blob (zero-copy wrap of caller memory, the
** deleter's one call, writes landing in the caller's array, alignment and
** bool checks) and tc_format / tc_print against the exact strings PyTorch
** prints. Runs eagerly and traced (TC_COMPILE=1): lazy readers of a
** wrapped array must keep it alive.
*/
#include "testutil.h"

/* -- tc_from_blob ----------------------------------------------------------- */

typedef struct {
  int calls;
  void *seen;
} del_log;

static void count_deleter(void *data, void *ctx)
{
  del_log *d = ctx;
  d->calls++;
  d->seen = data;
}

static void test_from_blob_zero_copy(void **state)
{
  (void)state;
  float a[6] = {1, 2, 3, 4, 5, 6};
  tc_tensor *t = TU_NN(tc_from_blob(TC_F32, TC_SHAPE(2, 3), a, NULL, NULL));
  assert_int_equal(tc_dtype_of(t), TC_F32);
  assert_int_equal(tc_ndim(t), 2);
  assert_int_equal(tc_size(t, 0), 2);
  assert_int_equal(tc_size(t, 1), 3);
  assert_true(tc_is_contiguous(t));
  assert_ptr_equal(tc_data(t), a);
  float got[6];
  TU_OK(tc_copy_to(t, got, sizeof got));
  assert_memory_equal(got, a, sizeof a);
  /* The caller's later raw writes are seen: it is the same memory. */
  a[4] = 50;
  double v;
  tc_tensor *e = TU_NN(tc_slice(t, 1, 1, 2, 1));
  tc_tensor *e2 = TU_NN(tc_slice(e, 0, 1, 2, 1));
  TU_OK(tc_item(e2, &v));
  assert_true(v == 50.0);
  tc_release(e2);
  tc_release(e);
  tc_release(t);
}

static void test_from_blob_deleter_once_after_views(void **state)
{
  (void)state;
  del_log d = {0};
  double *buf = malloc(12 * sizeof *buf);
  for (int i = 0; i < 12; i++)
    buf[i] = i;
  tc_tensor *t = TU_NN(tc_from_blob(TC_F64, TC_SHAPE(3, 4), buf,
                                    count_deleter, &d));
  tc_tensor *tr = TU_NN(tc_transpose(t, 0, 1));
  tc_tensor *sl = TU_NN(tc_slice(tr, 0, 1, 4, 2));
  tc_release(t);
  assert_int_equal(d.calls, 0);
  tc_release(tr);
  assert_int_equal(d.calls, 0);
  double got[6];   /* sl = t[:, 1::2] transposed: rows 1 and 3 of t^T */
  TU_OK(tc_copy_to(sl, got, sizeof got));
  const double want[6] = {1, 5, 9, 3, 7, 11};
  assert_memory_equal(got, want, sizeof want);
  tc_release(sl);
  assert_int_equal(d.calls, 1);
  assert_ptr_equal(d.seen, buf);
  free(buf);
}

/* A lazy reader (compile mode) holds the wrapped array until it is read
** and released; eagerly the storage goes with the last handle. */
static void test_from_blob_lazy_reader_keeps_it(void **state)
{
  (void)state;
  for (int rep = 0; rep < 4; rep++) {   /* past TC_HOT: compiled too */
    del_log d = {0};
    float *buf = malloc(64 * sizeof *buf);
    for (int i = 0; i < 64; i++)
      buf[i] = (float)(i - 20 + rep);
    tc_tensor *t = TU_NN(tc_from_blob(TC_F32, TC_SHAPE(8, 8), buf,
                                      count_deleter, &d));
    tc_tensor *m = TU_NN(tc_mul_scalar(t, 2.0));
    tc_tensor *y = TU_NN(tc_add_scalar(m, 1.0));
    tc_tensor *s = TU_NN(tc_sum(y, 1, false));
    tc_release(t);
    tc_release(m);
    tc_release(y);
    if (tc_compile_enabled())
      assert_int_equal(d.calls, 0);
    float got[8];
    TU_OK(tc_copy_to(s, got, sizeof got));
    for (int r = 0; r < 8; r++) {
      double want = 0;   /* exact: small integers */
      for (int c = 0; c < 8; c++)
        want += 2.0 * (r * 8 + c - 20 + rep) + 1.0;
      assert_true(got[r] == (float)want);
    }
    tc_release(s);
    assert_int_equal(d.calls, 1);
    free(buf);
  }
}

/* In-place ops write the caller's array, directly and through views. */
static void test_from_blob_inplace_lands_in_array(void **state)
{
  (void)state;
  for (int rep = 0; rep < 3; rep++) {
    int32_t a[6] = {1, 2, 3, 4, 5, 6};
    tc_tensor *t = TU_NN(tc_from_blob(TC_I32, TC_SHAPE(2, 3), a, NULL, NULL));
    TU_OK(tc_add_scalar_(t, 10));
    tc_tensor *col = TU_NN(tc_slice(t, 1, 0, 3, 2));
    TU_OK(tc_mul_scalar_(col, 2));
    tc_tensor *row = TU_NN(tc_from_data(TC_I32, TC_SHAPE(3),
                                        (int32_t[]){100, 200, 300}, 12));
    TU_OK(tc_add_(t, row));   /* broadcast source */
    TU_OK(tc_sync());
    const int32_t want[6] = {122, 212, 326, 128, 215, 332};
    assert_memory_equal(a, want, sizeof want);
    tc_release(row);
    tc_release(col);
    tc_release(t);
  }
}

static void test_from_blob_every_dtype_and_empty(void **state)
{
  (void)state;
  uint8_t b[3] = {1, 0, 1};
  int64_t l[2] = {-5, INT64_MAX};
  double f[1] = {-0.5};
  tc_tensor *tb = TU_NN(tc_from_blob(TC_BOOL, TC_SHAPE(3), b, NULL, NULL));
  tc_tensor *tl = TU_NN(tc_from_blob(TC_I64, TC_SHAPE(2), l, NULL, NULL));
  tc_tensor *tf = TU_NN(tc_from_blob(TC_F64, 0, NULL, f, NULL, NULL));
  assert_ptr_equal(tc_data(tb), b);
  assert_ptr_equal(tc_data(tl), l);
  double v;
  TU_OK(tc_item(tf, &v));
  assert_true(v == -0.5);
  tc_tensor *nb = TU_NN(tc_sum_all(tb));
  TU_OK(tc_item(nb, &v));
  assert_true(v == 2);
  /* No elements: NULL data is allowed, and the deleter still runs once. */
  del_log d = {0};
  tc_tensor *e = TU_NN(tc_from_blob(TC_F32, TC_SHAPE(0, 4), NULL,
                                    count_deleter, &d));
  assert_int_equal(tc_numel(e), 0);
  tc_release(e);
  assert_int_equal(d.calls, 1);
  tc_release(nb);
  tc_release(tb);
  tc_release(tl);
  tc_release(tf);
}

static void test_from_blob_errors(void **state)
{
  (void)state;
  del_log d = {0};
  _Alignas(8) char raw[64] = {0};
  tc_clear_error();
  assert_null(tc_from_blob(TC_F32, TC_SHAPE(2), raw + 2, count_deleter, &d));
  char want[160];
  snprintf(want, sizeof want, "tc_from_blob: data %p is not aligned to 4 "
           "bytes (the size of one f32 element)", (void *)(raw + 2));
  assert_string_equal(tc_last_error(), want);
  assert_null(tc_from_blob(TC_F64, TC_SHAPE(2), raw + 4, count_deleter, &d));
  assert_non_null(strstr(tc_last_error(), "aligned to 8 bytes"));
  raw[1] = 2;
  assert_null(tc_from_blob(TC_BOOL, TC_SHAPE(3), raw, count_deleter, &d));
  assert_string_equal(tc_last_error(),
                      "tc_from_blob: bool element 1 is 2, not 0 or 1");
  tc_clear_error();
  assert_null(tc_from_blob(TC_F32, TC_SHAPE(2), NULL, count_deleter, &d));
  assert_string_equal(tc_last_error(), "tc_from_blob: argument is NULL");
  assert_null(tc_from_blob(TC_DTYPE__MAX, TC_SHAPE(2), raw, NULL, NULL));
  assert_string_equal(tc_last_error(), "tc_from_blob: invalid dtype 5");
  assert_null(tc_from_blob(TC_F32, TC_SHAPE(2, -1), raw, NULL, NULL));
  assert_string_equal(tc_last_error(),
                      "tc_from_blob: size -1 of dim 1 is negative");
  assert_int_equal(d.calls, 0);   /* a failed wrap never calls it */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_from_blob_zero_copy),
    cmocka_unit_test(test_from_blob_deleter_once_after_views),
    cmocka_unit_test(test_from_blob_lazy_reader_keeps_it),
    cmocka_unit_test(test_from_blob_inplace_lands_in_array),
    cmocka_unit_test(test_from_blob_every_dtype_and_empty),
    cmocka_unit_test(test_from_blob_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
