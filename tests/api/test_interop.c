/*
** test_interop.c -- tc_from_blob (zero-copy wrap of caller memory, the
** deleter's one call, writes landing in the caller's array, alignment and
** bool checks) and tc_format / tc_print against the exact strings PyTorch
** prints. Runs eagerly and traced (TC_COMPILE=1): lazy readers of a
** wrapped array must keep it alive.
*/
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

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

/* A pending in-place write (compile mode) holds the array too: released
** before tc_sync, the write still lands, and only then the deleter runs. */
static void test_from_blob_pending_write_then_deleter(void **state)
{
  (void)state;
  for (int rep = 0; rep < 3; rep++) {
    del_log d = {0};
    double a[4] = {1, 2, 3, 4};
    tc_tensor *t = TU_NN(tc_from_blob(TC_F64, TC_SHAPE(4), a, count_deleter,
                                      &d));
    TU_OK(tc_mul_scalar_(t, 3.0));
    TU_OK(tc_add_scalar_(t, 0.5));
    tc_release(t);
    if (tc_compile_enabled())
      assert_int_equal(d.calls, 0);
    TU_OK(tc_sync());
    assert_int_equal(d.calls, 1);
    const double want[4] = {3.5, 6.5, 9.5, 12.5};
    assert_memory_equal(a, want, sizeof want);
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
  char bad_dtype[64];
  snprintf(bad_dtype, sizeof bad_dtype, "tc_from_blob: invalid dtype %d",
           (int)TC_DTYPE__MAX);
  assert_string_equal(tc_last_error(), bad_dtype);
  assert_null(tc_from_blob(TC_F32, TC_SHAPE(2, -1), raw, NULL, NULL));
  assert_string_equal(tc_last_error(),
                      "tc_from_blob: size -1 of dim 1 is negative");
  assert_int_equal(d.calls, 0);   /* a failed wrap never calls it */
}

/* -- tc_format / tc_print -------------------------------------------------- */

/* t's text must be exactly want (a string PyTorch 2.x prints for the same
** tensor), with snprintf semantics at every buffer size. */
#define EXPECT_FORMAT(t, want) expect_format_((t), (want), __LINE__)
static void expect_format_(tc_tensor *t, const char *want, int line)
{
  int n = (int)strlen(want);
  int got_n = tc_format(t, NULL, 0);
  if (got_n != n)
    fail_msg("line %d: tc_format needs %d, want %d (%s)", line, got_n, n,
             got_n < 0 ? tc_last_error() : "");
  char *buf = malloc((size_t)n + 8);
  assert_int_equal(tc_format(t, buf, (size_t)n + 8), n);
  if (strcmp(buf, want) != 0)
    fail_msg("line %d: got\n%s\nwant\n%s", line, buf, want);
  /* Truncated: the first size-1 bytes and a NUL, never past size. */
  size_t sizes[] = {1, 2, 7, (size_t)n / 2 + 1, (size_t)n, (size_t)n + 1};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t sz = sizes[k];
    memset(buf, '#', (size_t)n + 8);
    assert_int_equal(tc_format(t, buf, sz), n);
    size_t keep = sz - 1 < (size_t)n ? sz - 1 : (size_t)n;
    assert_memory_equal(buf, want, keep);
    assert_int_equal(buf[keep], '\0');
    assert_int_equal(buf[sz], '#');
  }
  free(buf);
}

static tc_tensor *f32s(int ndim, const int64_t *shape, const float *v)
{
  return TU_NN(tc_from_data(TC_F32, ndim, shape, v,
                            (size_t)tu_numel(ndim, shape) * sizeof(float)));
}

static void test_format_floats(void **state)
{
  (void)state;
  tc_tensor *t = f32s(TC_SHAPE(2, 2), (float[]){1, 2, 3, 4});
  EXPECT_FORMAT(t, "tensor([[1., 2.],\n        [3., 4.]])");
  tc_release(t);
  t = f32s(TC_SHAPE(2, 2), (float[]){1.5f, 2, 3, 4});
  EXPECT_FORMAT(t, "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
  tc_release(t);
  t = f32s(TC_SHAPE(2), (float[]){-1.5f, 2.25f});
  EXPECT_FORMAT(t, "tensor([-1.5000,  2.2500])");
  tc_release(t);
  t = f32s(0, NULL, (float[]){3.5f});
  EXPECT_FORMAT(t, "tensor(3.5000)");
  tc_release(t);
  t = f32s(0, NULL, (float[]){2});
  EXPECT_FORMAT(t, "tensor(2.)");
  tc_release(t);
  /* f32 0.1 printed from its exact value, as Python does. */
  t = f32s(TC_SHAPE(3), (float[]){0.1f, 0.2f, 0.3f});
  EXPECT_FORMAT(t, "tensor([0.1000, 0.2000, 0.3000])");
  tc_release(t);
  /* Scientific: a ratio over 1000, a value over 1e8, or one below 1e-4. */
  t = f32s(TC_SHAPE(2), (float[]){1e-5f, 1});
  EXPECT_FORMAT(t, "tensor([1.0000e-05, 1.0000e+00])");
  tc_release(t);
  t = f32s(TC_SHAPE(2), (float[]){1, 2000});
  EXPECT_FORMAT(t, "tensor([1.0000e+00, 2.0000e+03])");
  tc_release(t);
  tc_tensor *d = TU_NN(tc_from_data(TC_F64, TC_SHAPE(2),
                                    (double[]){1, 2}, 16));
  EXPECT_FORMAT(d, "tensor([1., 2.], dtype=torch.float64)");
  tc_release(d);
  d = TU_NN(tc_from_data(TC_F64, TC_SHAPE(3),
                         (double[]){0.5, -0.0, 123.456789}, 24));
  EXPECT_FORMAT(d, "tensor([  0.5000,  -0.0000, 123.4568], "
                   "dtype=torch.float64)");
  tc_release(d);
}

/* f16 and bf16 print their values as f32 (PyTorch converts them first). */
static void test_format_half(void **state)
{
  (void)state;
  tc_tensor *h = TU_NN(tc_from_data(TC_F16, TC_SHAPE(2),
                                    (uint16_t[]){0x3e00, 0x4000}, 4));
  EXPECT_FORMAT(h, "tensor([1.5000, 2.0000], dtype=torch.float16)");
  tc_release(h);
  tc_tensor *f = f32s(TC_SHAPE(1), (float[]){0.1f});
  tc_tensor *b = TU_NN(tc_cast(f, TC_BF16));   /* 0.10009765625 */
  EXPECT_FORMAT(b, "tensor([0.1001], dtype=torch.bfloat16)");
  tc_release(b);
  tc_release(f);
}

static void test_format_nonfinite(void **state)
{
  (void)state;
  float inf = INFINITY, nan = NAN;
  tc_tensor *t = f32s(TC_SHAPE(4), (float[]){nan, inf, -inf, 1});
  EXPECT_FORMAT(t, "tensor([nan, inf, -inf, 1.])");
  tc_release(t);
  t = f32s(TC_SHAPE(2), (float[]){-nan, 1.5f});
  EXPECT_FORMAT(t, "tensor([   nan, 1.5000])");
  tc_release(t);
  t = f32s(TC_SHAPE(2), (float[]){inf, 1e10f});
  EXPECT_FORMAT(t, "tensor([       inf, 1.0000e+10])");
  tc_release(t);
  t = f32s(TC_SHAPE(3), (float[]){0, -0.0f, nan});
  EXPECT_FORMAT(t, "tensor([0., -0., nan])");
  tc_release(t);
}

static void test_format_ints_and_bools(void **state)
{
  (void)state;
  tc_tensor *t = TU_NN(tc_from_data(TC_I64, TC_SHAPE(3),
                                    (int64_t[]){1, 2, 3}, 24));
  EXPECT_FORMAT(t, "tensor([1, 2, 3])");
  tc_release(t);
  t = TU_NN(tc_from_data(TC_I32, TC_SHAPE(3), (int32_t[]){-10, 2, 300}, 12));
  EXPECT_FORMAT(t, "tensor([-10,   2, 300], dtype=torch.int32)");
  tc_release(t);
  t = TU_NN(tc_from_data(TC_BOOL, TC_SHAPE(2), (uint8_t[]){1, 0}, 2));
  EXPECT_FORMAT(t, "tensor([ True, False])");
  tc_release(t);
  t = TU_NN(tc_from_data(TC_BOOL, 0, NULL, (uint8_t[]){1}, 1));
  EXPECT_FORMAT(t, "tensor(True)");
  tc_release(t);
  t = TU_NN(tc_arange(TC_I64, 0, 8, 1));
  tc_tensor *c = TU_NN(tc_reshape(t, TC_SHAPE(2, 2, 2)));
  EXPECT_FORMAT(c, "tensor([[[0, 1],\n"
                   "         [2, 3]],\n"
                   "\n"
                   "        [[4, 5],\n"
                   "         [6, 7]]])");
  /* A view prints its own elements. */
  tc_tensor *v = TU_NN(tc_transpose(c, 0, 2));
  EXPECT_FORMAT(v, "tensor([[[0, 4],\n"
                   "         [2, 6]],\n"
                   "\n"
                   "        [[1, 5],\n"
                   "         [3, 7]]])");
  tc_release(v);
  tc_release(c);
  tc_release(t);
}

static void test_format_empty(void **state)
{
  (void)state;
  tc_tensor *t = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0)));
  EXPECT_FORMAT(t, "tensor([])");
  tc_release(t);
  t = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 0)));
  EXPECT_FORMAT(t, "tensor([], size=(2, 0))");
  tc_release(t);
  t = TU_NN(tc_zeros(TC_I64, TC_SHAPE(0)));
  EXPECT_FORMAT(t, "tensor([], dtype=torch.int64)");
  tc_release(t);
  t = TU_NN(tc_zeros(TC_BOOL, TC_SHAPE(0, 3, 1)));
  EXPECT_FORMAT(t, "tensor([], size=(0, 3, 1), dtype=torch.bool)");
  tc_release(t);
}

/* Long rows wrap at 80 columns; suffixes go to a new line when they would
** not fit (torch.arange(100.), torch.arange(60, dtype=torch.int32)). */
static void test_format_wrapping(void **state)
{
  (void)state;
  tc_tensor *t = TU_NN(tc_arange(TC_F32, 0, 100, 1));
  EXPECT_FORMAT(t,
    "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
    "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
    "        28., 29., 30., 31., 32., 33., 34., 35., 36., 37., 38., 39., 40., 41.,\n"
    "        42., 43., 44., 45., 46., 47., 48., 49., 50., 51., 52., 53., 54., 55.,\n"
    "        56., 57., 58., 59., 60., 61., 62., 63., 64., 65., 66., 67., 68., 69.,\n"
    "        70., 71., 72., 73., 74., 75., 76., 77., 78., 79., 80., 81., 82., 83.,\n"
    "        84., 85., 86., 87., 88., 89., 90., 91., 92., 93., 94., 95., 96., 97.,\n"
    "        98., 99.])");
  tc_release(t);
  t = TU_NN(tc_arange(TC_I32, 0, 36, 1));
  EXPECT_FORMAT(t,
    "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
    "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35],\n"
    "       dtype=torch.int32)");
  tc_release(t);
}

/* More than 1000 elements: 3 items at each end of every long dim, and the
** formatter sees only the items shown (torch.arange(2000),
** torch.arange(2000).reshape(1000, 2), torch.zeros(100, 100)). */
static void test_format_summarized(void **state)
{
  (void)state;
  tc_tensor *t = TU_NN(tc_arange(TC_I64, 0, 2000, 1));
  EXPECT_FORMAT(t, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  tc_tensor *m = TU_NN(tc_reshape(t, TC_SHAPE(1000, 2)));
  EXPECT_FORMAT(m, "tensor([[   0,    1],\n"
                   "        [   2,    3],\n"
                   "        [   4,    5],\n"
                   "        ...,\n"
                   "        [1994, 1995],\n"
                   "        [1996, 1997],\n"
                   "        [1998, 1999]])");
  tc_release(m);
  tc_release(t);
  tc_tensor *z = TU_NN(tc_zeros(TC_F32, TC_SHAPE(100, 100)));
  EXPECT_FORMAT(z, "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
                   "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                   "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                   "        ...,\n"
                   "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                   "        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                   "        [0., 0., 0.,  ..., 0., 0., 0.]])");
  tc_release(z);
  /* The hidden middle would force scientific notation; it is not seen. */
  float *v = calloc(1001, sizeof *v);
  for (int i = 0; i < 1001; i++)
    v[i] = i < 3 || i >= 998 ? 1.5f : 1e-9f;
  t = f32s(TC_SHAPE(1001), v);
  EXPECT_FORMAT(t, "tensor([1.5000, 1.5000, 1.5000,  ..., 1.5000, 1.5000, "
                   "1.5000])");
  tc_release(t);
  free(v);
}

/* tc_print writes tc_format's text and a newline to stdout. */
static void test_print_to_stdout(void **state)
{
  (void)state;
  tc_tensor *t = TU_NN(tc_from_data(TC_I32, TC_SHAPE(2), (int32_t[]){7, -8},
                                    8));
  FILE *cap = tmpfile();
  assert_non_null(cap);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fileno(cap), STDOUT_FILENO) >= 0);
  int rc = tc_print(t);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  assert_int_equal(rc, 0);
  char got[128] = {0};
  rewind(cap);
  size_t n = fread(got, 1, sizeof got - 1, cap);
  fclose(cap);
  assert_int_equal(n, strlen(got));
  assert_string_equal(got, "tensor([ 7, -8], dtype=torch.int32)\n");
  tc_release(t);
}

/* A lazy tensor (compile mode) is computed before it is printed. */
static void test_format_realizes_and_errors(void **state)
{
  (void)state;
  tc_tensor *a = f32s(TC_SHAPE(3), (float[]){1, 2, 3});
  tc_tensor *b = TU_NN(tc_mul_scalar(a, 0.5));
  EXPECT_FORMAT(b, "tensor([0.5000, 1.0000, 1.5000])");
  TU_OK(tc_print(b));
  tc_release(b);
  tc_clear_error();
  char buf[8];
  assert_int_equal(tc_format(NULL, buf, sizeof buf), -1);
  assert_string_equal(tc_last_error(), "tc_format: argument is NULL");
  assert_int_equal(tc_format(a, NULL, 4), -1);
  assert_string_equal(tc_last_error(), "tc_format: argument is NULL");
  tc_clear_error();
  assert_int_equal(tc_print(NULL), -1);
  assert_string_equal(tc_last_error(), "tc_format: argument is NULL");
  tc_release(a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_from_blob_zero_copy),
    cmocka_unit_test(test_from_blob_deleter_once_after_views),
    cmocka_unit_test(test_from_blob_lazy_reader_keeps_it),
    cmocka_unit_test(test_from_blob_inplace_lands_in_array),
    cmocka_unit_test(test_from_blob_pending_write_then_deleter),
    cmocka_unit_test(test_from_blob_every_dtype_and_empty),
    cmocka_unit_test(test_from_blob_errors),
    cmocka_unit_test(test_format_floats),
    cmocka_unit_test(test_format_half),
    cmocka_unit_test(test_format_nonfinite),
    cmocka_unit_test(test_format_ints_and_bools),
    cmocka_unit_test(test_format_empty),
    cmocka_unit_test(test_format_wrapping),
    cmocka_unit_test(test_format_summarized),
    cmocka_unit_test(test_print_to_stdout),
    cmocka_unit_test(test_format_realizes_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
