/*
** test_scope.c -- tc_scope_begin/tc_scope_end/tc_keep: temporaries are
** released (bytes_allocated returns to its prior value), kept tensors
** survive and move to the enclosing scope, early releases and extra
** retains are honoured, and scopes belong to their thread.
*/
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "testutil.h"

#define N (1 << 18) /* 1 MiB of f32 per tensor */

static uint64_t live_bytes(void) {
  tc_stats s;
  tc_stats_get(&s);
  return s.bytes_allocated;
}

/* Bytes one live tensor of this dtype and shape holds (the allocator may
** round sizes up, so this is measured, not computed). */
static uint64_t bytes_of(tc_dtype dt, int64_t n) {
  uint64_t before = live_bytes();
  tc_tensor *t = TU_NN(tc_empty(dt, 1, &n));
  uint64_t b = live_bytes() - before;
  tc_release(t);
  assert_true(live_bytes() == before);
  assert_true(b >= (uint64_t)n * tu_elsize(dt));
  return b;
}

static void expect_all(tc_tensor *t, double v) {
  double *g = tu_read(t);
  for (int64_t i = 0; i < tc_numel(t); i++)
    if (g[i] != v) {
      double x = g[i];
      free(g);
      fail_msg("[%lld] = %g, expected %g", (long long)i, x, v);
    }
  free(g);
}

static void test_scope_releases_temporaries(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  size_t mark = tc_scope_begin();
  tc_tensor *a = TU_NN(tc_ones(TC_F32, TC_SHAPE(N)));
  tc_tensor *b = TU_NN(tc_add(a, a));
  tc_tensor *c = TU_NN(tc_exp(b));
  tc_tensor *d = TU_NN(tc_transpose(TU_NN(tc_reshape(c, TC_SHAPE(512, -1))),
                                    0, 1));
  tc_tensor *s = TU_NN(tc_sum_all(d));
  assert_true(tu_close(tu_item(s), N * exp(2.0), 1e-5, 0));
  if (tc_compile_enabled())   /* traced: temporaries never stored */
    assert_true(live_bytes() < before + 2 * bytes_of(TC_F32, N));
  else
    assert_true(live_bytes() >= before + 3 * (uint64_t)N * 4);
  tc_scope_end(mark);
  assert_true(live_bytes() == before);
}

static void test_keep_survives(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  size_t mark = tc_scope_begin();
  tc_tensor *a = TU_NN(tc_full(TC_F32, TC_SHAPE(N), 3));
  tc_tensor *b = TU_NN(tc_mul(a, a));
  assert_ptr_equal(tc_keep(b), b);
  tc_scope_end(mark);
  /* a is gone, b remains and is the caller's. */
  assert_true(live_bytes() == before + bytes_of(TC_F32, N));
  expect_all(b, 9);
  tc_release(b);
  assert_true(live_bytes() == before);
  assert_null(tc_keep(NULL));
}

static void test_nested_scopes(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  size_t outer = tc_scope_begin();
  tc_tensor *x = TU_NN(tc_full(TC_F64, TC_SHAPE(N), 2));
  size_t inner = tc_scope_begin();
  tc_tensor *y = TU_NN(tc_add_scalar(x, 1));
  tc_tensor *z = TU_NN(tc_mul(y, x));
  tc_keep(z);
  tc_scope_end(inner);
  /* y is released; x (outer) and z (moved to outer) remain. Traced, z is
  ** still lazy and holds no memory until it is read. */
  assert_true(live_bytes() ==
              before + (tc_compile_enabled() ? 1 : 2) * bytes_of(TC_F64, N));
  expect_all(z, 6);
  expect_all(x, 2);
  tc_scope_end(outer); /* releases x and the kept z */
  assert_true(live_bytes() == before);
}

/* Keeping through two levels hands the tensor to the caller. */
static void test_keep_through_two_levels(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  size_t outer = tc_scope_begin();
  size_t inner = tc_scope_begin();
  tc_tensor *t = TU_NN(tc_full(TC_I32, TC_SHAPE(N), 5));
  tc_keep(t);
  tc_scope_end(inner);
  tc_keep(t);
  tc_scope_end(outer);
  expect_all(t, 5);
  tc_release(t);
  assert_true(live_bytes() == before);
}

static void test_early_release_and_retain(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  size_t mark = tc_scope_begin();
  tc_tensor *a = TU_NN(tc_ones(TC_F32, TC_SHAPE(N)));
  tc_tensor *b = TU_NN(tc_neg(a));
  tc_release(a); /* allowed: no double free at scope end */
  tc_tensor *c = TU_NN(tc_mul_scalar(b, 2));
  tc_retain(c); /* an extra reference outlives the scope */
  tc_scope_end(mark);
  expect_all(c, -2);
  tc_release(c);
  assert_true(live_bytes() == before);
}

/* Tensors created before the scope are not the scope's; a kept view keeps
** its storage. */
static void test_outside_tensors_and_views(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  tc_tensor *a = TU_NN(tc_full(TC_F32, TC_SHAPE(64, 64), 1.5));
  size_t mark = tc_scope_begin();
  tc_tensor *b = TU_NN(tc_add(a, a));
  tc_tensor *v = TU_NN(tc_slice(b, 0, 0, 64, 8));
  tc_keep(v);
  tc_scope_end(mark);
  expect_all(a, 1.5);
  TU_SHAPE_IS(v, 2, ((const int64_t[]){8, 64}));
  expect_all(v, 3);
  tc_release(v);
  tc_release(a);
  assert_true(live_bytes() == before);
}

/* Many scopes in a loop do not accumulate memory. */
static void test_loop_of_scopes(void **state) {
  (void)state;
  tc_tensor *w = TU_NN(tc_full(TC_F32, TC_SHAPE(256, 256), 0.5));
  uint64_t before = live_bytes();
  tc_tensor *acc = TU_NN(tc_zeros(TC_F32, TC_SHAPE(256)));
  for (int it = 0; it < 50; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *h = TU_NN(tc_relu(TU_NN(tc_add_scalar(w, 1))));
    tc_tensor *s = TU_NN(tc_sum(h, 0, false));
    TU_OK(tc_add_(acc, s));
    tc_scope_end(mark);
  }
  expect_all(acc, 50 * 256 * 1.5);
  tc_release(acc);
  assert_true(live_bytes() == before);
  tc_release(w);
}

/* A scope owns the tensors of its own thread only. */
static void *make_in_thread(void *arg) {
  tc_tensor **out = arg;
  *out = tc_full(TC_F32, TC_SHAPE(1000), 7);
  return NULL;
}

static void test_scope_is_per_thread(void **state) {
  (void)state;
  tc_tensor *other = NULL;
  size_t mark = tc_scope_begin();
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, make_in_thread, &other), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  tc_scope_end(mark);
  assert_non_null(other);
  expect_all(other, 7); /* not released by this thread's scope */
  tc_release(other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scope_releases_temporaries),
      cmocka_unit_test(test_keep_survives),
      cmocka_unit_test(test_nested_scopes),
      cmocka_unit_test(test_keep_through_two_levels),
      cmocka_unit_test(test_early_release_and_retain),
      cmocka_unit_test(test_outside_tensors_and_views),
      cmocka_unit_test(test_loop_of_scopes),
      cmocka_unit_test(test_scope_is_per_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
