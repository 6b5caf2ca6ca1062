/*
** test_errors.c -- bad input returns NULL (or -1) and sets tc_last_error()
** to "<public function>: <what is wrong>"; NULL arguments chain and keep the
** first error; inputs are unchanged by failed ops; successful calls do not
** clear the error; tc_clear_error(); the message is thread-local.
*/
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "testutil.h"

/* expr must give NULL and set an error from fn mentioning one of needles. */
#define EXPECT_NULL(fn, needles, expr)                                     \
  do {                                                                     \
    tc_clear_error();                                                      \
    tc_tensor *r_ = (expr);                                                \
    if (r_) {                                                              \
      tc_release(r_);                                                      \
      fail_msg("%s should fail", #expr);                                   \
    }                                                                      \
    TU_EXPECT_ERR(fn, needles);                                            \
  } while (0)

#define EXPECT_FAIL_RC(fn, needles, expr)                                  \
  do {                                                                     \
    tc_clear_error();                                                      \
    int rc_ = (expr);                                                      \
    if (rc_ != -1) fail_msg("%s returned %d, expected -1", #expr, rc_);    \
    TU_EXPECT_ERR(fn, needles);                                            \
  } while (0)

static tc_tensor *mk(int ndim, const int64_t *shape) {
  int64_t n = tu_numel(ndim, shape);
  double *v = tu_uniform(n, -1, 1, (uint64_t)n);
  tc_tensor *t = tu_from(TC_F32, ndim, shape, v);
  free(v);
  return t;
}

static void test_shape_errors(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3, 4)), *b = mk(TC_SHAPE(5)),
            *c = mk(TC_SHAPE(2, 3, 4)), *m = mk(TC_SHAPE(5, 2));
  EXPECT_NULL("tc_add", "broadcast", tc_add(a, b));
  EXPECT_NULL("tc_mul", "broadcast", tc_mul(a, m));
  EXPECT_NULL("tc_eq", "broadcast", tc_eq(b, a));
  EXPECT_NULL("tc_where", "broadcast", tc_where(a, a, b));
  EXPECT_NULL("tc_reshape", "reshape|size|element",
              tc_reshape(a, TC_SHAPE(5, 2)));
  EXPECT_NULL("tc_reshape", "-1|infer|one", tc_reshape(a, TC_SHAPE(-1, -1)));
  EXPECT_NULL("tc_reshape", "reshape|size|negative|shape",
              tc_reshape(a, TC_SHAPE(-2, 6)));
  EXPECT_NULL("tc_matmul", "inner|size|shape|match",
              tc_matmul(a, m)); /* (3,4)@(5,2) */
  tc_tensor *d = mk(TC_SHAPE(3, 4, 5));
  EXPECT_NULL("tc_matmul", "batch|size|shape|match|broadcast",
              tc_matmul(c, d)); /* batch 2 vs 3 */
  tc_release(d);
  EXPECT_NULL("tc_expand", "expand|size|shape",
              tc_expand(a, TC_SHAPE(3, 8)));
  EXPECT_NULL("tc_expand", "expand|dim|shape", tc_expand(c, TC_SHAPE(3, 4)));
  tc_tensor *g = mk(TC_SHAPE(5));
  EXPECT_NULL("tc_layer_norm", "gamma|size|shape", tc_layer_norm(a, g, NULL, 1e-5));
  EXPECT_NULL("tc_layer_norm", "beta|size|shape", tc_layer_norm(a, NULL, g, 1e-5));
  EXPECT_FAIL_RC("tc_add_", "broadcast", tc_add_(b, a));
  EXPECT_FAIL_RC("tc_copy_", "broadcast", tc_copy_(a, m));
  tc_release(g);
  tc_release(a);
  tc_release(b);
  tc_release(c);
  tc_release(m);
  tc_clear_error();
}

static void test_dim_errors(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3, 4));
  EXPECT_NULL("tc_sum", "dim", tc_sum(a, 2, false));
  EXPECT_NULL("tc_sum", "dim", tc_sum(a, -3, false));
  EXPECT_NULL("tc_mean", "dim", tc_mean(a, 7, true));
  EXPECT_NULL("tc_max", "dim", tc_max(a, 2, false));
  EXPECT_NULL("tc_argmax", "dim", tc_argmax(a, -5, false));
  EXPECT_NULL("tc_softmax", "dim", tc_softmax(a, 2));
  EXPECT_NULL("tc_log_softmax", "dim", tc_log_softmax(a, -3));
  EXPECT_NULL("tc_transpose", "dim", tc_transpose(a, 0, 2));
  EXPECT_NULL("tc_unsqueeze", "dim", tc_unsqueeze(a, 3));
  EXPECT_NULL("tc_unsqueeze", "dim", tc_unsqueeze(a, -4));
  EXPECT_NULL("tc_squeeze", "dim", tc_squeeze(a, 2));
  EXPECT_NULL("tc_slice", "dim", tc_slice(a, 2, 0, 1, 1));
  EXPECT_NULL("tc_permute", "dim|perm|repeat|duplicate",
              tc_permute(a, 2, (const int[]){0, 0}));
  EXPECT_NULL("tc_permute", "dim|perm", tc_permute(a, 2, (const int[]){0, 2}));
  EXPECT_NULL("tc_permute", "dim|perm|ndim|number",
              tc_permute(a, 3, (const int[]){0, 1, 2}));
  EXPECT_NULL("tc_slice", "step", tc_slice(a, 0, 0, 3, 0));
  EXPECT_NULL("tc_slice", "step", tc_slice(a, 1, 3, 0, -1));
  assert_int_equal(tc_size(a, 2), -1);
  tc_release(a);
  tc_clear_error();
}

static void test_creation_errors(void **state) {
  (void)state;
  const int64_t neg[2] = {2, -1}, huge[2] = {INT64_C(1) << 40,
                                            INT64_C(1) << 40};
  const int64_t ovf[2] = {INT64_C(1) << 62, 4};
  const int64_t bytes_ovf[1] = {INT64_C(1) << 61}; /* numel ok, bytes not */
  const int64_t too_big[1] = {INT64_C(1) << 48};   /* 1 PiB of f32 */
  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float buf[4] = {0};
  EXPECT_NULL("tc_zeros", "negative|shape|size|dim", tc_zeros(TC_F32, 2, neg));
  EXPECT_NULL("tc_empty", "negative|shape|size|dim", tc_empty(TC_F32, 2, neg));
  EXPECT_NULL("tc_ones", "negative|shape|size|dim", tc_ones(TC_I32, 2, neg));
  EXPECT_NULL("tc_full", "negative|shape|size|dim", tc_full(TC_F64, 2, neg, 1));
  EXPECT_NULL("tc_rand", "negative|shape|size|dim", tc_rand(TC_F32, 2, neg, 1));
  EXPECT_NULL("tc_randn", "negative|shape|size|dim",
              tc_randn(TC_F32, 2, neg, 1));
  EXPECT_NULL("tc_from_data", "negative|shape|size|dim",
              tc_from_data(TC_F32, 2, neg, buf, 8));
  EXPECT_NULL("tc_empty", "overflow|large|size", tc_empty(TC_F32, 2, huge));
  EXPECT_NULL("tc_zeros", "overflow|large|size", tc_zeros(TC_F32, 2, ovf));
  EXPECT_NULL("tc_empty", "overflow|large|size|bytes|memory|alloc",
              tc_empty(TC_F64, 1, bytes_ovf));
  EXPECT_NULL("tc_empty", "memory|alloc|large|size",
              tc_empty(TC_F32, 1, too_big));
  EXPECT_NULL("tc_zeros", "dim|rank|ndim|max", tc_zeros(TC_F32, 9, nine));
  EXPECT_NULL("tc_zeros", "dim|rank|ndim|negative", tc_zeros(TC_F32, -1, nine));
  EXPECT_NULL("tc_zeros", "dtype", tc_zeros(TC_DTYPE__MAX, TC_SHAPE(2)));
  EXPECT_NULL("tc_full", "dtype", tc_full((tc_dtype)99, TC_SHAPE(2), 0));
  EXPECT_NULL("tc_from_data", "nbytes|bytes|size",
              tc_from_data(TC_F32, TC_SHAPE(4), buf, 15));
  EXPECT_NULL("tc_from_data", "nbytes|bytes|size",
              tc_from_data(TC_F32, TC_SHAPE(3), buf, 16));
  EXPECT_NULL("tc_from_data", "null|data", tc_from_data(TC_F32, TC_SHAPE(4),
                                                       NULL, 16));
  EXPECT_NULL("tc_arange", "step", tc_arange(TC_F32, 0, 5, 0));
  EXPECT_NULL("tc_arange", "finite|inf|nan|range",
              tc_arange(TC_F64, 0, INFINITY, 1));
  EXPECT_NULL("tc_arange", "finite|inf|nan|range", tc_arange(TC_F64, NAN, 3, 1));
  tc_clear_error();
}

static void test_dtype_errors(void **state) {
  (void)state;
  double v[4] = {1, 0, 1, 1};
  tc_tensor *b = tu_from(TC_BOOL, TC_SHAPE(2, 2), v);
  tc_tensor *i = tu_from(TC_I32, TC_SHAPE(2, 2), v);
  EXPECT_NULL("tc_matmul", "dtype|type|bool", tc_matmul(b, b));
  EXPECT_NULL("tc_mean", "dtype|type|float|integer", tc_mean(i, 0, false));
  EXPECT_NULL("tc_cast", "dtype", tc_cast(i, TC_DTYPE__MAX));
  EXPECT_NULL("tc_cast", "dtype", tc_cast(i, (tc_dtype)-1));
  tc_release(b);
  tc_release(i);
  tc_clear_error();
}

static void test_reading_errors(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3, 4));
  tc_tensor *e = TU_NN(tc_zeros(TC_F32, TC_SHAPE(0)));
  float buf[16];
  double d;
  EXPECT_FAIL_RC("tc_copy_to", "nbytes|bytes|size", tc_copy_to(a, buf, 44));
  EXPECT_FAIL_RC("tc_copy_to", "nbytes|bytes|size", tc_copy_to(a, buf, 64));
  EXPECT_FAIL_RC("tc_copy_to", "null|dst|dest", tc_copy_to(a, NULL, 48));
  EXPECT_FAIL_RC("tc_copy_to", "null|tensor", tc_copy_to(NULL, buf, 48));
  EXPECT_FAIL_RC("tc_item", "element|numel|one|single", tc_item(a, &d));
  EXPECT_FAIL_RC("tc_item", "element|numel|one|single|empty", tc_item(e, &d));
  EXPECT_FAIL_RC("tc_item", "null|out", tc_item(e, NULL));
  tc_clear_error();
  assert_null(tc_data(NULL));
  assert_non_null(tc_last_error());
  tc_release(a);
  tc_release(e);
  tc_clear_error();
}

static void test_device_errors(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3));
  EXPECT_NULL("tc_to", "device|tpu", tc_to(a, "tpu"));
  EXPECT_NULL("tc_to", "device|null", tc_to(a, NULL));
  if (!tc_cuda_available())
    EXPECT_NULL("tc_to", "cuda|device|driver", tc_to(a, "cuda"));
  tc_tensor *c = TU_NN(tc_to(a, "cpu"));
  assert_ptr_equal(tc_data(c), tc_data(a)); /* already there: no copy */
  tc_release(c);
  tc_release(a);
  tc_clear_error();
}

/* NULL tensors: every op returns NULL (-1) and sets an error when none is
** set; chains keep the first error. */
static void test_null_arguments_and_chaining(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3, 4));
  EXPECT_NULL("tc_exp", NULL, tc_exp(NULL));
  EXPECT_NULL("tc_add", NULL, tc_add(a, NULL));
  EXPECT_NULL("tc_add", NULL, tc_add(NULL, a));
  EXPECT_NULL("tc_where", NULL, tc_where(NULL, a, a));
  EXPECT_NULL("tc_sum", NULL, tc_sum(NULL, 0, false));
  EXPECT_NULL("tc_matmul", NULL, tc_matmul(a, NULL));
  EXPECT_NULL("tc_reshape", NULL, tc_reshape(NULL, TC_SHAPE(12)));
  EXPECT_NULL("tc_reshape", NULL, tc_reshape(a, 2, NULL));
  EXPECT_NULL("tc_permute", NULL, tc_permute(a, 2, NULL));
  EXPECT_NULL("tc_layer_norm", NULL, tc_layer_norm(NULL, NULL, NULL, 1e-5));
  EXPECT_NULL("tc_contiguous", NULL, tc_contiguous(NULL));
  EXPECT_NULL("tc_cast", NULL, tc_cast(NULL, TC_F32));
  EXPECT_NULL("tc_add_scalar", NULL, tc_add_scalar(NULL, 1));
  EXPECT_FAIL_RC("tc_copy_", NULL, tc_copy_(a, NULL));
  EXPECT_FAIL_RC("tc_copy_", NULL, tc_copy_(NULL, a));
  EXPECT_FAIL_RC("tc_fill_", NULL, tc_fill_(NULL, 1));
  EXPECT_FAIL_RC("tc_add_scalar_", NULL, tc_add_scalar_(NULL, 1));
  EXPECT_NULL("tc_erf", NULL, tc_erf(NULL));
  EXPECT_NULL("tc_softplus", NULL, tc_softplus(NULL));
  EXPECT_NULL("tc_argmin", NULL, tc_argmin(NULL, 0, false));
  EXPECT_NULL("tc_cumsum", NULL, tc_cumsum(NULL, 0));
  EXPECT_NULL("tc_var", NULL, tc_var(NULL, 0, 1, false));
  EXPECT_NULL("tc_std_dims", NULL,
              tc_std_dims(NULL, 1, (const int[]){0}, 1, false));
  EXPECT_NULL("tc_tril", NULL, tc_tril(NULL, 0));

  /* Chains keep the first error. */
  tc_clear_error();
  tc_tensor *r = tc_add(tc_exp(NULL), a);
  assert_null(r);
  TU_EXPECT_ERR("tc_exp", NULL);
  tc_clear_error();
  r = tc_relu(tc_mul_scalar(tc_sum(a, 5, false), 2));
  assert_null(r);
  TU_EXPECT_ERR("tc_sum", "dim");
  /* Later NULL-taking calls, and successful calls, keep it too (composed
  ** ops as well). */
  assert_null(tc_softmax(NULL, 0));
  assert_null(tc_var(NULL, 0, 1, false));
  assert_null(tc_sum_dims(NULL, 1, (const int[]){0}, false));
  assert_null(tc_triu(NULL, 0));
  tc_tensor *ok = TU_NN(tc_neg(a));
  tc_release(ok);
  TU_EXPECT_ERR("tc_sum", "dim");
  tc_clear_error();
  assert_null(tc_last_error());
  /* A new genuine error replaces an old one (as errno). */
  assert_null(tc_sum(a, 9, false));
  assert_null(tc_transpose(a, 0, 5));
  TU_EXPECT_ERR("tc_transpose", "dim");
  tc_clear_error();
  assert_null(tc_last_error());
  tc_release(a);
}

/* A failed op leaves its inputs unchanged. */
static void test_inputs_unchanged(void **state) {
  (void)state;
  tc_tensor *a = mk(TC_SHAPE(3, 4)), *b = mk(TC_SHAPE(4, 3));
  tc_tensor *bt = TU_NN(tc_transpose(b, 0, 1));
  tc_tensor *s = TU_NN(tc_slice(bt, 1, 0, 3, 2)); /* (3,2) */
  size_t na, nb;
  void *a0 = tu_read_raw(a, &na), *b0 = tu_read_raw(b, &nb);
  tc_clear_error();
  assert_int_equal(tc_add_(s, a), -1);  /* (3,2) dst, (3,4) src */
  assert_int_equal(tc_copy_(a, s), -1); /* (3,4) dst, (3,2) src */
  assert_int_equal(tc_mul_(bt, b), -1); /* (3,4) dst, (4,3) src */
  assert_null(tc_matmul(a, a));
  assert_null(tc_reshape(s, TC_SHAPE(5)));
  double iv[3] = {1, 2, 3};
  tc_tensor *i = tu_from(TC_I32, TC_SHAPE(3), iv);
  int rc = tc_div_scalar_(i, 0.5); /* may refuse (f32 result) or cast */
  double *gi = tu_read(i);
  assert_true(rc == 0 ? gi[0] == 2 && gi[1] == 4 && gi[2] == 6
                      : gi[0] == 1 && gi[1] == 2 && gi[2] == 3);
  free(gi);
  void *a1 = tu_read_raw(a, NULL), *b1 = tu_read_raw(b, NULL);
  assert_memory_equal(a0, a1, na);
  assert_memory_equal(b0, b1, nb);
  free(a0);
  free(b0);
  free(a1);
  free(b1);
  tc_release(i);
  tc_release(s);
  tc_release(bt);
  tc_release(a);
  tc_release(b);
  tc_clear_error();
}

static void *other_thread(void *arg) {
  const char **seen = arg;
  seen[0] = tc_last_error(); /* this thread has no error yet */
  tc_tensor *r = tc_exp(NULL);
  seen[1] = r ? NULL : tc_last_error();
  tc_clear_error();
  return NULL;
}

static void test_error_is_thread_local(void **state) {
  (void)state;
  tc_clear_error();
  assert_null(tc_slice(NULL, 0, 0, 1, 1));
  TU_EXPECT_ERR("tc_slice", NULL);
  const char *seen[2] = {"unset", NULL};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_thread, seen), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_null(seen[0]);
  assert_non_null(seen[1]);
  TU_EXPECT_ERR("tc_slice", NULL); /* untouched by the other thread */
  tc_clear_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_errors),
      cmocka_unit_test(test_dim_errors),
      cmocka_unit_test(test_creation_errors),
      cmocka_unit_test(test_dtype_errors),
      cmocka_unit_test(test_reading_errors),
      cmocka_unit_test(test_device_errors),
      cmocka_unit_test(test_null_arguments_and_chaining),
      cmocka_unit_test(test_inputs_unchanged),
      cmocka_unit_test(test_error_is_thread_local),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
