/*
** test_dispatch.c -- the dispatcher's key sets: the highest key with a
** handler wins, the TLS include set adds keys, the exclude set removes
** them, and a key without a handler falls through to the next.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "eager.h"

static int trace_calls;

static tc_tensor *fake_trace_add(const eager_call *c)
{
  trace_calls++;
  return tensor_new(c->dtype, c->ndim, c->shape);
}

static void test_dispatch_keys(void **state)
{
  (void)state;
  tc_tensor *a = tc_ones(TC_F32, TC_SHAPE(4));
  tc_tensor *r = tc_add(a, a);      /* CPU only: no trace handler */
  assert_non_null(r);
  tc_release(r);
  assert_int_equal(trace_calls, 0);

  eager_register(TC_KEY_TRACE, TC_OP_ADD, fake_trace_add);
  eager_tls_set((eager_tls_keys){ TC_KEYSET(TC_KEY_TRACE), 0 });
  r = tc_add(a, a);                 /* TRACE included and has a handler */
  tc_release(r);
  assert_int_equal(trace_calls, 1);
  r = tc_mul(a, a);                 /* no TRACE handler for MUL: falls through */
  tc_tensor *s = tc_sum_all(r);
  double v;
  assert_int_equal(tc_item(s, &v), 0);
  assert_true(v == 4.0);
  tc_release(s);
  tc_release(r);
  eager_tls_set((eager_tls_keys){ TC_KEYSET(TC_KEY_TRACE),
                                  TC_KEYSET(TC_KEY_TRACE) });
  r = tc_add(a, a);                 /* excluded wins over included */
  tc_release(r);
  assert_int_equal(trace_calls, 1);
  eager_tls_set((eager_tls_keys){ 0, 0 });
  eager_register(TC_KEY_TRACE, TC_OP_ADD, NULL);
  tc_release(a);
}

static void sum_range(void *ctx, int64_t lo, int64_t hi)
{
  int64_t *parts = ctx;
  __atomic_fetch_add(&parts[0], hi - lo, __ATOMIC_RELAXED);
  __atomic_fetch_add(&parts[1], 1, __ATOMIC_RELAXED);
}

static void test_pool_covers_range(void **state)
{
  (void)state;
  int64_t acc[2] = { 0, 0 };
  tensor_parallel(1000003, 1000, sum_range, acc);
  assert_int_equal(acc[0], 1000003);
  assert_true(acc[1] >= 1 && acc[1] <= tc_threads());
  acc[0] = acc[1] = 0;
  tensor_parallel(10, 1000, sum_range, acc);   /* below grain: one range */
  assert_int_equal(acc[0], 10);
  assert_int_equal(acc[1], 1);
}

static void test_convert_rules(void **state)
{
  (void)state;
  float f[5] = { 3.9f, -3.9f, 1e20f, -1e20f, 0.0f };
  f[4] = __builtin_nanf("");
  int32_t i[5];
  eager_convert(TC_I32, i, 1, TC_F32, f, 1, 5);
  assert_int_equal(i[0], 3);            /* toward zero */
  assert_int_equal(i[1], -3);
  assert_int_equal(i[2], INT32_MAX);    /* saturates */
  assert_int_equal(i[3], INT32_MIN);
  assert_int_equal(i[4], 0);            /* NaN -> 0 */
  uint8_t b[5];
  eager_convert(TC_BOOL, b, 1, TC_F32, f, 1, 5);
  assert_int_equal(b[0] + b[1] + b[2] + b[3] + b[4], 5);  /* NaN != 0 */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_dispatch_keys),
    cmocka_unit_test(test_pool_covers_range),
    cmocka_unit_test(test_convert_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
