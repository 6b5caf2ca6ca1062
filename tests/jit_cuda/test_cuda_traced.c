/*
** test_cuda_traced.c -- traced regions on CUDA tensors, compiled through
** NVRTC: programs written as users write them (softmax and RMSNorm from
** primitives, an Adam-like in-place update, matmul + bias + gelu, a loop
** whose shapes change) run under TC_COMPILE=1 TC_HOT=1 on device tensors,
** through the fake driver of tests/jit_cuda/fake in CI. Each must run
** compiled (tc_stats: compiled regions, the fused kernels launched per run)
** and give bit for bit what the same program gives in CPU eager mode,
** computed here in the same process. TC_ASYNC=1 (the compile thread) must
** give the same values.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tc.h"
#include "../../src/trace/trace.h"   /* trace_compile_wait */

static bool async_mode(void)
{
  const char *a = getenv("TC_ASYNC");
  return !a || strcmp(a, "0") != 0;
}

/* -- Helpers -------------------------------------------------------------------- */

/* t's bytes (any device), malloc'd. */
static char *bytes_of(tc_tensor *t)
{
  assert_non_null(t);
  size_t n = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  char *b = malloc(n + 1);
  assert_int_equal(tc_copy_to(t, b, n), 0);
  return b;
}

static void assert_same_bits(tc_tensor *want, tc_tensor *got)
{
  assert_non_null(got);
  assert_int_equal(tc_dtype_of(want), tc_dtype_of(got));
  assert_int_equal(tc_numel(want), tc_numel(got));
  char *x = bytes_of(want), *y = bytes_of(got);
  assert_memory_equal(x, y, (size_t)tc_numel(want) *
                                tc_dtype_size(tc_dtype_of(want)));
  free(x);
  free(y);
}

static tc_tensor *cuda_copy(tc_tensor *t)
{
  tc_tensor *d = tc_to(t, "cuda");
  assert_non_null(d);
  return d;
}

static tc_stats stats(void)
{
  tc_stats s;
  tc_stats_get(&s);
  return s;
}

/* After a region's first run: with TC_ASYNC its compile runs on the
** compile thread; wait for the plan, as a loop would after a few
** iterations. */
static void compiled_by_now(void)
{
  if (async_mode())
    trace_compile_wait();
}

/* A one-input program: f on the CPU eagerly, then ITERS times compiled on
** the device (a fresh device copy of x each time, as a loop feeds a new
** batch); every run's result equals the CPU's bitwise, and the last run
** is one compiled region launching `kernels` kernels. */
typedef tc_tensor *(*program1)(tc_tensor *x, tc_tensor *w);

enum { ITERS = 3 };

static void check_program(program1 f, tc_tensor *x, tc_tensor *w,
                          uint64_t kernels)
{
  tc_compile_set(false);
  tc_tensor *want = f(x, w);
  assert_non_null(want);
  tc_compile_set(true);
  tc_tensor *dw = w ? cuda_copy(w) : NULL;
  for (int it = 0; it < ITERS; it++) {
    if (it == ITERS - 1)
      tc_stats_reset();
    tc_tensor *dx = cuda_copy(x);
    tc_tensor *got = f(dx, dw);
    assert_same_bits(want, got);
    tc_release(got);
    tc_release(dx);
    if (it == 0)
      compiled_by_now();
  }
  tc_stats s = stats();
  assert_int_equal(s.regions, 1);
  assert_int_equal(s.regions_compiled, 1);
  assert_int_equal(s.regions_eager, 0);
  assert_int_equal(s.kernels_launched, kernels);
  assert_int_equal(s.kernels_compiled, 0);   /* compiled by the first runs */
  tc_release(dw);
  tc_release(want);
}

/* -- Programs ------------------------------------------------------------------- */

/* softmax over rows, from max, sub, exp, sum and div */
static tc_tensor *softmax_prims(tc_tensor *x, tc_tensor *unused)
{
  (void)unused;
  size_t mark = tc_scope_begin();
  tc_tensor *m = tc_max(x, 1, true);
  tc_tensor *e = tc_exp(tc_sub(x, m));
  tc_tensor *y = tc_div(e, tc_sum(e, 1, true));
  tc_keep(y);
  tc_scope_end(mark);
  return y;
}

static void test_softmax_from_primitives(void **state)
{
  (void)state;
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(6, 100), 11);
  check_program(softmax_prims, x, NULL, 1);   /* one row kernel */
  /* and it is a softmax: rows against a naive double computation */
  tc_tensor *d = cuda_copy(x);
  tc_tensor *y = softmax_prims(d, NULL);
  float xs[600], ys[600];
  assert_int_equal(tc_copy_to(x, xs, sizeof xs), 0);
  assert_int_equal(tc_copy_to(y, ys, sizeof ys), 0);
  for (int r = 0; r < 6; r++) {
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < 100; c++)
      mx = fmax(mx, xs[r * 100 + c]);
    for (int c = 0; c < 100; c++)
      sum += exp(xs[r * 100 + c] - mx);
    for (int c = 0; c < 100; c++)
      assert_true(fabs(ys[r * 100 + c] - exp(xs[r * 100 + c] - mx) / sum) <=
                  1e-6);
  }
  tc_release(y);
  tc_release(d);
  tc_release(x);
}

/* RMSNorm: x * rsqrt(mean(x * x) + eps) * w over the last dim */
static tc_tensor *rmsnorm_prims(tc_tensor *x, tc_tensor *w)
{
  size_t mark = tc_scope_begin();
  tc_tensor *ms = tc_mean(tc_mul(x, x), -1, true);
  tc_tensor *y = tc_mul(tc_mul(x, tc_rsqrt(tc_add_scalar(ms, 1e-5))), w);
  tc_keep(y);
  tc_scope_end(mark);
  return y;
}

static void test_rmsnorm_from_primitives(void **state)
{
  (void)state;
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(5, 64), 12);
  tc_tensor *w = tc_rand(TC_F32, TC_SHAPE(64), 13);
  check_program(rmsnorm_prims, x, w, 1);
  tc_release(w);
  tc_release(x);
}

/* gelu(x @ w + b) with small integer values: every product and partial
** sum is exact in f32, so cuBLAS (the fake's naive loop, or a GPU's) and
** tc's blocked CPU GEMM give the same bits whatever their order */
static tc_tensor *matmul_bias_gelu(tc_tensor *x, tc_tensor *wb)
{
  size_t mark = tc_scope_begin();
  tc_tensor *w = tc_slice(wb, 0, 0, 32, 1);   /* rows 0..31: w, 32: bias */
  tc_tensor *b = tc_slice(wb, 0, 32, 33, 1);
  tc_tensor *y = tc_gelu(tc_add(tc_matmul(x, w), b));
  tc_keep(y);
  tc_scope_end(mark);
  return y;
}

static tc_tensor *small_ints(int64_t r, int64_t c, uint64_t seed)
{
  size_t mark = tc_scope_begin();
  tc_tensor *u = tc_rand(TC_F32, TC_SHAPE(r, c), seed);
  tc_tensor *t = tc_keep(tc_round(tc_sub_scalar(tc_mul_scalar(u, 6), 3)));
  tc_scope_end(mark);
  tc_tensor *m = tc_contiguous(t);   /* materialized, as data is */
  tc_release(t);
  return m;
}

static void test_matmul_bias_gelu(void **state)
{
  (void)state;
  tc_compile_set(false);
  tc_tensor *x = small_ints(16, 32, 14), *wb = small_ints(33, 24, 15);
  /* cuBLAS, then the bias and gelu as one kernel over its result */
  check_program(matmul_bias_gelu, x, wb, 1);
  tc_release(wb);
  tc_release(x);
}

/* An Adam-like step, in place on the parameter and its two moments:
**   m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2;  p -= lr m / (sqrt(v) + eps)
** three write-backs of one region, completed by tc_sync */
static void adam_step(tc_tensor *p, tc_tensor *m, tc_tensor *v, tc_tensor *g)
{
  size_t mark = tc_scope_begin();
  assert_int_equal(tc_mul_scalar_(m, 0.9), 0);
  assert_int_equal(tc_add_(m, tc_mul_scalar(g, 0.1)), 0);
  assert_int_equal(tc_mul_scalar_(v, 0.999), 0);
  assert_int_equal(tc_add_(v, tc_mul_scalar(tc_mul(g, g), 0.001)), 0);
  tc_tensor *den = tc_add_scalar(tc_sqrt(v), 1e-8);
  assert_int_equal(tc_sub_(p, tc_mul_scalar(tc_div(m, den), 1e-3)), 0);
  tc_scope_end(mark);
  assert_int_equal(tc_sync(), 0);   /* the step's end: all three written */
}

static void test_adam_update_in_place(void **state)
{
  (void)state;
  tc_compile_set(false);
  tc_tensor *p = tc_randn(TC_F32, TC_SHAPE(40, 30), 16);
  tc_tensor *m = tc_zeros(TC_F32, TC_SHAPE(40, 30));
  tc_tensor *v = tc_zeros(TC_F32, TC_SHAPE(40, 30));
  tc_tensor *dp = cuda_copy(p), *dm = cuda_copy(m), *dv = cuda_copy(v);
  tc_tensor *g[ITERS];
  for (int it = 0; it < ITERS; it++)
    g[it] = tc_randn(TC_F32, TC_SHAPE(40, 30), 100 + (uint64_t)it);
  for (int it = 0; it < ITERS; it++) {
    tc_compile_set(false);
    adam_step(p, m, v, g[it]);
    tc_compile_set(true);
    if (it == ITERS - 1)
      tc_stats_reset();
    tc_tensor *dg = cuda_copy(g[it]);
    adam_step(dp, dm, dv, dg);
    assert_same_bits(p, dp);
    assert_same_bits(m, dm);
    assert_same_bits(v, dv);
    tc_release(dg);
    if (it == 0)
      compiled_by_now();
  }
  tc_stats s = stats();
  assert_int_equal(s.regions_compiled, 1);
  assert_int_equal(s.regions_eager, 0);
  assert_int_equal(s.kernels_launched, 1);   /* three outputs, one pass */
  for (int it = 0; it < ITERS; it++)
    tc_release(g[it]);
  tc_release(dp);
  tc_release(dm);
  tc_release(dv);
  tc_release(p);
  tc_release(m);
  tc_release(v);
}

/* A loop whose batch changes shape: row sums of tanh(x) * x + 1. The meson
** test sets TC_RECOMPILE_LIMIT=2: shapes 1 and 2 get exact guards (the
** second after a guard failure), the third fails both and is compiled
** shape-dynamic, and the fourth passes that variant's guards. The kernel
** is compiled for the first shape only: CUDA kernels take sizes as
** arguments. With TC_ASYNC a variant's first run is eager or compiled as
** the compile thread's timing has it, and an eager run compiles eager's
** one-op kernels on first use (TANH is new to this file here): so they are
** compiled before the counts start, by the same program run eagerly on the
** device (else a first shape whose plan was ready before its first run
** leaves TANH to a later variant's eager run, counted below). */
static tc_tensor *row_energy(tc_tensor *x, tc_tensor *unused)
{
  (void)unused;
  size_t mark = tc_scope_begin();
  tc_tensor *y = tc_sum(tc_add_scalar(tc_mul(tc_tanh(x), x), 1), 1, false);
  tc_keep(y);
  tc_scope_end(mark);
  return y;
}

static void test_changing_shapes(void **state)
{
  (void)state;
  static const int64_t shapes[][2] = { { 4, 40 }, { 6, 72 }, { 5, 300 },
                                       { 3, 1000 } };
  tc_compile_set(false);
  tc_tensor *warm = tc_randn(TC_F32, TC_SHAPE(2, 8), 19);
  tc_tensor *dwarm = cuda_copy(warm);
  tc_release(row_energy(dwarm, NULL));   /* eager's kernels (see above) */
  tc_release(dwarm);
  tc_release(warm);
  for (int i = 0; i < 4; i++) {
    if (i == 1)
      tc_stats_reset();   /* from the second shape on */
    tc_compile_set(false);
    tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(shapes[i][0], shapes[i][1]),
                            20 + (uint64_t)i);
    tc_tensor *want = row_energy(x, NULL);
    tc_compile_set(true);
    for (int it = 0; it < 2; it++) {
      tc_tensor *dx = cuda_copy(x);
      tc_tensor *got = row_energy(dx, NULL);
      assert_same_bits(want, got);
      tc_release(got);
      tc_release(dx);
      if (it == 0)
        compiled_by_now();
    }
    tc_release(want);
    tc_release(x);
  }
  tc_stats s = stats();
  assert_int_equal(s.guard_failures, 2);
  assert_int_equal(s.kernels_compiled, 0);   /* new shapes, no new code */
  assert_int_equal(s.regions, 6);
  /* every run compiled; with TC_ASYNC the first run of each new variant
  ** (shapes 2 and 3) may run eagerly while its plan is made (its kernel
  ** is a memo hit: the plan may also be there before the run) */
  assert_int_equal(s.regions_compiled + s.regions_eager, 6);
  assert_true(s.regions_compiled >= (async_mode() ? 4 : 6));
}

/* Recording checks devices as eager does, lazy operands included: a CPU
** and a CUDA value meet in no region. A 0-d CPU tensor is a scalar that
** may join device tensors (it is copied to the device). Realizing values
** of both devices at once cuts a region for each. */
static void test_devices_checked_at_the_call(void **state)
{
  (void)state;
  tc_compile_set(true);
  size_t mark = tc_scope_begin();
  tc_tensor *h = tc_randn(TC_F32, TC_SHAPE(8), 30);
  tc_tensor *d = cuda_copy(h);
  tc_tensor *lh = tc_exp(h), *ld = tc_exp(d);   /* lazy, one per device */
  assert_null(tc_add(lh, ld));
  assert_string_equal(tc_last_error(), "tc_add expects tensors on one device "
                      "(cpu and cuda)");
  tc_tensor *two = tc_full(TC_F32, 0, NULL, 2.0);
  tc_tensor *got = tc_mul(ld, two);
  assert_non_null(got);
  tc_stats_reset();
  tc_compile_set(false);   /* realizes both values: a region per device */
  tc_stats s = stats();
  assert_int_equal(s.regions, 2);
  if (!async_mode())   /* else their compiles may still be running */
    assert_int_equal(s.regions_compiled, 2);
  assert_int_equal(s.compile_failures, 0);
  tc_tensor *want = tc_mul(tc_exp(h), two);
  assert_same_bits(want, got);
  tc_scope_end(mark);
}

int main(void)
{
  if (!tc_cuda_available()) {
    fprintf(stderr, "test_cuda_traced needs a device (the fake driver)\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_softmax_from_primitives),
    cmocka_unit_test(test_rmsnorm_from_primitives),
    cmocka_unit_test(test_matmul_bias_gelu),
    cmocka_unit_test(test_adam_update_in_place),
    cmocka_unit_test(test_changing_shapes),
    cmocka_unit_test(test_devices_checked_at_the_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
