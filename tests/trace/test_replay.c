/*
** test_replay.c -- op-level replay of compiled regions (src/trace/replay.c).
** A small chain read every iteration is replayed once compiled: no graph
** nodes are made, and its result is still exactly right. Every way out of
** a replay (an op that differs, other inputs, a view, an in-place write, a
** read of another value, another thread, autograd, leaving compile mode)
** must give what the program asked for. Expected values are computed here
** in float, op by op, with scalars exact in float: each tc op rounds its
** exact result to float once, as this does.
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/trace/trace.h"

enum { N = 64, OPS = 25 };

static int setup(void **state)
{
  (void)state;
  cache_clear();
  tc_compile_set(true);
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  tc_sync();
  tc_compile_set(false);
  assert_int_equal(trace_live_nodes(), 0);
  cache_clear();
  return 0;
}

static void values(tc_tensor *t, float *v)
{
  assert_int_equal(tc_copy_to(t, v, sizeof(float) * N), 0);
}

/* Op k of the chain (W9's: add, mul_scalar, sub, mul, add_scalar, five
** times), on tensors and in float. */
static tc_tensor *chain_op(int k, tc_tensor *a, tc_tensor *x, tc_tensor *y,
                           double s)
{
  switch (k % 5) {
  case 0: return tc_add(a, y);
  case 1: return tc_mul_scalar(a, s);
  case 2: return tc_sub(a, x);
  case 3: return tc_mul(a, y);
  default: return tc_add_scalar(a, 0.25);
  }
}

static float chain_op_ref(int k, float a, float x, float y, float s)
{
  switch (k % 5) {
  case 0: return a + y;
  case 1: return a * s;
  case 2: return a - x;
  case 3: return a * y;
  default: return a + 0.25f;
  }
}

/* Ops [from, to) of the chain on a (the caller's scope owns the results). */
static tc_tensor *chain(tc_tensor *a, tc_tensor *x, tc_tensor *y, double s,
                        int from, int to)
{
  for (int k = from; k < to; k++)
    a = chain_op(k, a, x, y, s);
  return a;
}

static void chain_ref(float *a, const float *x, const float *y, float s,
                      int from, int to)
{
  for (int i = 0; i < N; i++)
    for (int k = from; k < to; k++)
      a[i] = chain_op_ref(k, a[i], x[i], y[i], s);
}

/* Ops [0, to) of the chain from x in float: x's and y's values into xv
** and yv, the result into want. */
static void reference(tc_tensor *x, tc_tensor *y, float s, int to, float *xv,
                      float *yv, float *want)
{
  values(x, xv);
  values(y, yv);
  memcpy(want, xv, sizeof(float) * N);
  chain_ref(want, xv, yv, s, 0, to);
}

/* The whole chain from x, read, compared bit for bit with the float
** reference. */
static void check_chain(tc_tensor *x, tc_tensor *y, double s)
{
  float xv[N], yv[N], want[N], got[N];
  reference(x, y, (float)s, OPS, xv, yv, want);
  size_t mark = tc_scope_begin();
  values(chain(x, x, y, s, 0, OPS), got);
  tc_scope_end(mark);
  assert_memory_equal(got, want, sizeof want);
}

static const double scalars[] = { 0.5, -3.0, 0.75, 1.25, 2.0, -0.5 };

/* Run the chain until it is replayed (it must be within 8 runs). */
static void warm(tc_tensor *x, tc_tensor *y)
{
  uint64_t before = trace_replay_count();
  for (int i = 0; i < 8 && trace_replay_count() == before; i++)
    check_chain(x, y, 0.5);
  assert_true(trace_replay_count() > before);
}

/* Once compiled, every iteration is a replay: no node is made while its
** ops run, this run's scalars are used, and the result is exact. */
static void test_replay_steady(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 21);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 22);
  warm(x, y);
  for (int i = 0; i < 12; i++) {
    double s = scalars[i % 6];
    float xv[N], yv[N], want[N], got[N];
    reference(x, y, (float)s, OPS, xv, yv, want);
    uint64_t before = trace_replay_count();
    size_t mark = tc_scope_begin();
    tc_tensor *a = chain(x, x, y, s, 0, OPS);
    assert_int_equal(trace_live_nodes(), 0);   /* replayed: no graph */
    values(a, got);
    tc_scope_end(mark);
    assert_int_equal(trace_replay_count(), before + 1);
    assert_memory_equal(got, want, sizeof want);
  }
  tc_release(x);
  tc_release(y);
}

/* New input tensors every iteration, the same tensor for both inputs, the
** inputs swapped, a strided view for one: each binds the region's inputs
** anew, and a pattern the tape was not made with is recorded instead. */
static void test_replay_inputs(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 31);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 32);
  warm(x, y);
  uint64_t before = trace_replay_count();
  for (int i = 0; i < 6; i++) {
    tc_tensor *x2 = tc_randn(TC_F32, TC_SHAPE(N), 40 + (uint64_t)i);
    tc_tensor *y2 = tc_rand(TC_F32, TC_SHAPE(N), 50 + (uint64_t)i);
    check_chain(x2, y2, scalars[i]);
    tc_release(x2);
    tc_release(y2);
  }
  assert_true(trace_replay_count() >= before + 5);
  for (int i = 0; i < 3; i++) {
    check_chain(x, x, 0.5);   /* one input where the tape has two */
    check_chain(y, x, 0.5);
    check_chain(x, y, 0.5);
  }
  /* A 0-d y where the tape's y was a vector: every op still has the
  ** tape's result shape, but the input has another rank. */
  float y0v = 0.375f, xv[N], yv[N], want[N], got[N];
  tc_tensor *y0 = tc_from_data(TC_F32, 0, NULL, &y0v, sizeof y0v);
  values(x, xv);
  for (int i = 0; i < N; i++)
    yv[i] = y0v;
  memcpy(want, xv, sizeof want);
  chain_ref(want, xv, yv, 0.5f, 0, OPS);
  for (int i = 0; i < 3; i++) {
    size_t mark = tc_scope_begin();
    values(chain(x, x, y0, 0.5, 0, OPS), got);
    tc_scope_end(mark);
    assert_memory_equal(got, want, sizeof want);
    check_chain(x, y, 0.5);
  }
  tc_release(y0);
  tc_tensor *wide = tc_randn(TC_F32, TC_SHAPE(2 * N), 33);
  tc_tensor *strided = tc_slice(wide, 0, 0, 2 * N, 2);
  for (int i = 0; i < 4; i++) {
    check_chain(strided, y, 0.5);
    check_chain(x, y, 0.5);
  }
  tc_release(wide);
  tc_release(strided);
  tc_release(x);
  tc_release(y);
}

/* The program does something else part way through a replayed chain: an
** op the tape does not have, a view, an in-place write to an input, a raw
** pointer to an input. Each leaves the replay with the graph recording
** would have made; the chain that follows is replayed again. */
static void test_replay_left_midway(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 61);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 62);
  float xv[N], yv[N], want[N], got[N];
  for (int how = 0; how < 4; how++) {
    warm(x, y);
    reference(x, y, 0.5f, 12, xv, yv, want);
    size_t mark = tc_scope_begin();
    tc_tensor *a = chain(x, x, y, 0.5, 0, 12);
    float xnew[N];
    memcpy(xnew, xv, sizeof xnew);
    switch (how) {
    case 0:   /* an op the tape does not have */
      a = tc_neg(tc_neg(a));
      break;
    case 1: {   /* a view of a replayed value */
      tc_tensor *sq = tc_reshape(a, TC_SHAPE(8, 8));
      a = tc_reshape(tc_mul_scalar(sq, 1.0), TC_SHAPE(N));
      break;
    }
    case 2:   /* an in-place write to an input the ops read */
      assert_int_equal(tc_add_scalar_(x, 1.0), 0);
      for (int i = 0; i < N; i++)
        xnew[i] = xv[i] + 1.0f;
      break;
    default:   /* a raw pointer into an input */
      assert_non_null(tc_data(y));
      break;
    }
    a = chain(a, x, y, 0.5, 12, OPS);
    chain_ref(want, xnew, yv, 0.5f, 12, OPS);
    values(a, got);
    tc_scope_end(mark);
    assert_memory_equal(got, want, sizeof want);
    if (how == 3) {   /* y's ops would run at once from now on */
      tc_release(y);
      y = tc_from_data(TC_F32, TC_SHAPE(N), yv, sizeof yv);
    }
    check_chain(x, y, 0.5);
  }
  tc_release(x);
  tc_release(y);
}

/* An op that reads another value than the tape's (op 10 reads op 8's
** result, skipping op 9, an op of the same kind) is not replayed as the
** tape's: the result is the program's. */
static void test_replay_other_operand(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 67);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 68);
  float xv[N], yv[N], want[N], got[N];
  reference(x, y, 0.5f, 9, xv, yv, want);
  chain_ref(want, xv, yv, 0.5f, 10, OPS);
  for (int it = 0; it < 3; it++) {
    warm(x, y);
    size_t mark = tc_scope_begin();
    tc_tensor *a8 = chain(x, x, y, 0.5, 0, 9);
    (void)chain_op(9, a8, x, y, 0.5);
    values(chain(a8, x, y, 0.5, 10, OPS), got);
    tc_scope_end(mark);
    assert_memory_equal(got, want, sizeof want);
  }
  tc_release(x);
  tc_release(y);
}

/* An input released after the ops that read it, before the read: the
** replay holds it until the region has run. */
static void test_replay_input_released(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 65);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 66);
  float xv[N], yv[N], want[N], got[N];
  reference(x, y, 0.5f, OPS, xv, yv, want);
  for (int it = 0; it < 4; it++) {
    warm(x, y);
    tc_tensor *x1 = tc_from_data(TC_F32, TC_SHAPE(N), xv, sizeof xv);
    uint64_t before = trace_replay_count();
    size_t mark = tc_scope_begin();
    tc_tensor *a = chain(x1, x1, y, 0.5, 0, OPS);
    tc_release(x1);
    values(a, got);
    tc_scope_end(mark);
    assert_int_equal(trace_replay_count(), before + 1);
    assert_memory_equal(got, want, sizeof want);
  }
  tc_release(x);
  tc_release(y);
}

/* Values of a replayed chain other than its result: read before the
** result, after it, and in the next iteration while that one is replayed. */
static void test_replay_other_values(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 71);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 72);
  float xv[N], yv[N], mid[N], want[N], got[N];
  reference(x, y, 0.5f, 10, xv, yv, mid);
  memcpy(want, mid, sizeof want);
  chain_ref(want, xv, yv, 0.5f, 10, OPS);
  tc_tensor *kept = NULL;
  for (int it = 0; it < 10; it++) {
    warm(x, y);
    size_t mark = tc_scope_begin();
    tc_tensor *m = chain(x, x, y, 0.5, 0, 10);
    tc_tensor *a = chain(m, x, y, 0.5, 10, OPS);
    if (kept) {   /* last iteration's value, read during this one */
      values(kept, got);
      assert_memory_equal(got, mid, sizeof mid);
      tc_release(kept);
      kept = NULL;
    }
    if (it % 3 == 0) {
      values(m, got);   /* before the result */
      assert_memory_equal(got, mid, sizeof mid);
    }
    values(a, got);
    assert_memory_equal(got, want, sizeof want);
    if (it % 3 == 1) {
      values(m, got);   /* after it */
      assert_memory_equal(got, mid, sizeof mid);
    }
    if (it % 3 == 2)
      kept = tc_retain(m);   /* into the next iteration */
    tc_scope_end(mark);
  }
  tc_release(kept);
  tc_release(x);
  tc_release(y);
}

/* A replayed chain's result read by another thread, which also releases
** the values. */
typedef struct {
  tc_tensor *a, *m;
  float got[N];
} reader_arg;

static void *reader(void *p)
{
  reader_arg *r = p;
  values(r->a, r->got);
  tc_release(r->a);
  tc_release(r->m);
  return NULL;
}

static void test_replay_other_thread(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 81);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 82);
  float xv[N], yv[N], want[N];
  reference(x, y, 0.5f, OPS, xv, yv, want);
  for (int it = 0; it < 6; it++) {
    warm(x, y);
    size_t mark = tc_scope_begin();
    reader_arg r;
    r.m = tc_retain(chain(x, x, y, 0.5, 0, 10));
    r.a = tc_retain(chain(r.m, x, y, 0.5, 10, OPS));
    tc_scope_end(mark);   /* the other thread holds both */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader, &r), 0);
    pthread_join(th, NULL);
    assert_memory_equal(r.got, want, sizeof want);
  }
  tc_release(x);
  tc_release(y);
}

/* Compile mode left part way through a replayed chain: what was recorded
** is computed, and the rest runs eagerly. */
static void test_replay_compile_off_midway(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 91);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 92);
  float xv[N], yv[N], want[N], got[N];
  reference(x, y, 0.5f, OPS, xv, yv, want);
  warm(x, y);
  size_t mark = tc_scope_begin();
  tc_tensor *a = chain(x, x, y, 0.5, 0, 12);
  tc_compile_set(false);
  values(chain(a, x, y, 0.5, 12, OPS), got);
  tc_scope_end(mark);
  assert_memory_equal(got, want, sizeof want);
  tc_compile_set(true);
  tc_release(x);
  tc_release(y);
}

/* Programs that leave the replay every time: after a few runs the tape
** is turned off (a log line says so), and results stay exact. */
static void test_replay_off_after_misses(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 101);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 102);
  float xv[N], yv[N], want[N], got[N];
  reference(x, y, 0.5f, OPS, xv, yv, want);
  warm(x, y);
  char *log = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&log, &len);
  tensor_log_to(f, TC_LOG_REGIONS);
  for (int it = 0; it < 20; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *a = chain(x, x, y, 0.5, 0, 20);
    tc_tensor *v = tc_reshape(a, TC_SHAPE(8, 8));   /* leaves */
    a = chain(tc_reshape(v, TC_SHAPE(N)), x, y, 0.5, 20, OPS);
    values(a, got);
    tc_scope_end(mark);
    assert_memory_equal(got, want, sizeof want);
  }
  tensor_log_to(NULL, 0);
  fclose(f);
  assert_non_null(strstr(log, "replay off"));
  free(log);
  tc_release(x);
  tc_release(y);
}

/* A training loop on a small model: the loss region read every step is
** replayed while autograd saves its values; gradients are exact. loss =
** sum((w * x + b) * y): d/dw = x * y, d/db = y. */
static void test_replay_autograd(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(N), 111);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(N), 112);
  tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(N), 113);
  tc_tensor *b = tc_randn(TC_F32, TC_SHAPE(N), 114);
  assert_int_equal(tc_set_requires_grad(w, true), 0);
  assert_int_equal(tc_set_requires_grad(b, true), 0);
  float xv[N], yv[N], gw[N], gb[N];
  values(x, xv);
  values(y, yv);
  for (int it = 0; it < 10; it++) {
    tc_zero_grad(w);
    tc_zero_grad(b);
    size_t mark = tc_scope_begin();
    tc_tensor *loss = tc_sum_all(tc_mul(tc_add(tc_mul(w, x), b), y));
    double l;
    assert_int_equal(tc_item(loss, &l), 0);
    assert_int_equal(tc_backward(loss), 0);
    tc_scope_end(mark);
    tc_tensor *g = tc_grad(w), *h = tc_grad(b);
    values(g, gw);
    values(h, gb);
    tc_release(g);
    tc_release(h);
    for (int i = 0; i < N; i++) {
      assert_true(gw[i] == xv[i] * yv[i]);
      assert_true(gb[i] == yv[i]);
    }
  }
  tc_release(x);
  tc_release(y);
  tc_release(w);
  tc_release(b);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_replay_steady, setup, teardown),
    cmocka_unit_test_setup_teardown(test_replay_inputs, setup, teardown),
    cmocka_unit_test_setup_teardown(test_replay_left_midway, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_other_operand, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_input_released, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_other_values, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_other_thread, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_compile_off_midway, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_off_after_misses, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_replay_autograd, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
