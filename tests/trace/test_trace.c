/*
** test_trace.c -- tracing: realization semantics, hot-region detection,
** guards and their explanations, the recompile limit, compile failures.
** The property under test is that traced programs compute exactly what
** eager ones do, so expected values come from eager runs of the same code
** (compile off) and from hand-worked values.
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/trace/trace.h"
#include "../../src/guards/guards.h"
#include "../../src/trace/compile_int.h"
#include "../jit_cpu/exp_kernel.h"

static char *logbuf;
static size_t loglen;
static FILE *logf_;

static void log_begin(void)
{
  logf_ = open_memstream(&logbuf, &loglen);
  tensor_log_to(logf_, TC_LOG_REGIONS | TC_LOG_GUARDS | TC_LOG_RECOMPILES |
                       TC_LOG_FALLBACK);
}

static char *log_end(void)   /* caller frees */
{
  tensor_log_to(NULL, 0);
  fclose(logf_);
  return logbuf;
}

static int count(const char *hay, const char *needle)
{
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

static int setup(void **state)
{
  (void)state;
  cache_clear();
  tc_stats_reset();
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

static double read1(tc_tensor *t, int64_t i)
{
  double v[4096];
  tc_tensor *c = tc_cast(t, TC_F64);
  assert_int_equal(tc_copy_to(c, v, sizeof(double) * (size_t)tc_numel(c)),
                   0);
  tc_release(c);
  return v[i];
}

/* -- Realization --------------------------------------------------------- */

static void test_trace_lazy_until_read(void **state)
{
  (void)state;
  tc_tensor *x = tc_arange(TC_F32, 0, 16, 1);
  tc_stats s;
  tc_tensor *x1 = tc_add_scalar(x, 1);
  tc_tensor *y = tc_mul_scalar(x1, 3);
  tc_release(x1);                          /* y still needs its node */
  tc_stats_get(&s);
  assert_int_equal(s.regions, 0);          /* nothing computed yet */
  assert_true(read1(y, 5) == 18.0);        /* (5 + 1) * 3 */
  tc_stats_get(&s);
  assert_true(s.regions >= 1);
  tc_release(y);
  tc_release(x);
}

static void test_trace_unread_never_computed(void **state)
{
  (void)state;
  tc_tensor *x = tc_ones(TC_F32, TC_SHAPE(1000));
  tc_stats a, b;
  tc_stats_get(&a);
  size_t mark = tc_scope_begin();
  tc_tensor *y = tc_exp(tc_neg(x));
  (void)y;
  tc_scope_end(mark);                      /* released unread */
  tc_sync();
  tc_stats_get(&b);
  assert_int_equal(b.kernels_launched, a.kernels_launched);
  assert_int_equal(b.regions, a.regions);
  assert_int_equal(trace_live_nodes(), 0);
  tc_release(x);
}

/* A materialized input is read through leaf edges that hold the tensor:
** released by the program, it lives until the region reading it runs;
** read twice, it is one region input. */
static void test_trace_leaf_edges_hold_inputs(void **state)
{
  (void)state;
  tc_tensor *x = tc_arange(TC_F32, 0, 16, 1);
  tc_tensor *y = tc_mul(x, x);
  assert_int_equal(trace_live_nodes(), 3);   /* mul, and a leaf edge each */
  tc_release(x);
  log_begin();
  assert_true(read1(y, 5) == 25.0);
  char *log = log_end();
  assert_non_null(strstr(log, "2 nodes, 1 inputs, 1 outputs"));   /* +cast */
  free(log);
  tc_release(y);
}

static void test_trace_inplace_over_pending_reader(void **state)
{
  (void)state;
  tc_tensor *x = tc_arange(TC_F64, 0, 8, 1);
  tc_tensor *y = tc_mul_scalar(x, 2);      /* lazy: reads x as it is now */
  assert_int_equal(tc_add_scalar_(x, 100), 0);
  assert_true(read1(x, 3) == 103.0);       /* the write landed */
  assert_true(read1(y, 3) == 6.0);         /* y saw the old x */
  tc_release(y);
  tc_release(x);
}

/* An in-place op on the sole handle of a lazy value whose source is a view
** with a pending write: reading the source writes it back first, and that
** realization computes the lazy value too (it reads the storage written).
** The in-place op then finds its target materialized (it once rebound the
** handle off a node the realization had freed: a crash in the random
** programs, seed 8700016). Values worked by hand: a = [1, 2, 3] (rows of
** one), lo = a[0:2], hi = a[1:3]. */
static void test_trace_inplace_sole_target_realized_by_source(void **state)
{
  (void)state;
  tc_tensor *a = tc_from_data(TC_F32, TC_SHAPE(3, 1),
                              (const float[]){ 1, 2, 3 }, 3 * sizeof(float));
  tc_tensor *hi = tc_slice(a, 0, 1, 3, 1);
  tc_tensor *lo = tc_slice(a, 0, 0, 2, 1);
  tc_tensor *y = tc_add(hi, lo);              /* [3, 5], lazy */
  assert_int_equal(tc_add_(hi, hi), 0);       /* a = [1, 4, 6] */
  assert_int_equal(tc_add_(y, lo), 0);        /* y = [3 + 1, 5 + 4] */
  assert_true(read1(y, 0) == 4.0);
  assert_true(read1(y, 1) == 9.0);
  assert_true(read1(a, 2) == 6.0);
  tc_release(y);
  tc_release(lo);
  tc_release(hi);
  tc_release(a);
}

static void test_trace_views_of_lazy(void **state)
{
  (void)state;
  tc_tensor *x = tc_arange(TC_F32, 0, 12, 1);
  tc_tensor *x1 = tc_add_scalar(x, 1);
  tc_tensor *y = tc_reshape(x1, TC_SHAPE(3, 4));
  tc_release(x1);
  tc_tensor *t = tc_transpose(y, 0, 1);    /* lazy view (4, 3) */
  tc_tensor *s = tc_slice(t, 0, 1, 4, 2);  /* rows 1 and 3 of t */
  /* s[1][2] = t[3][2] = y[2][3] = x[11] + 1 */
  assert_true(read1(s, 5) == 12.0);
  /* An in-place write through a lazy view lands in its base. */
  assert_int_equal(tc_mul_scalar_(s, 0), 0);
  assert_true(read1(y, 11) == 0.0);        /* y[2][3] */
  assert_true(read1(y, 10) == 11.0);       /* y[2][2] untouched */
  tc_release(s);
  tc_release(t);
  tc_release(y);
  tc_release(x);
}

static void test_trace_scope_ends_with_pending_writes(void **state)
{
  (void)state;
  tc_tensor *p = tc_full(TC_F32, TC_SHAPE(256), 1.0);
  tc_tensor *g = tc_full(TC_F32, TC_SHAPE(256), 0.5);
  for (int it = 0; it < 3; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *upd = tc_mul_scalar(tc_mul(g, g), 4.0);   /* 1.0 */
    assert_int_equal(tc_sub_(p, upd), 0);
    assert_int_equal(tc_mul_scalar_(p, 2.0), 0);
    tc_scope_end(mark);                    /* temporaries gone, write not */
  }
  assert_int_equal(tc_sync(), 0);
  /* ((1 - 1) * 2 - 1) * 2 - 1) * 2 = -6 */
  assert_true(read1(p, 255) == -6.0);
  tc_release(p);
  tc_release(g);
}

/* -- The region table ------------------------------------------------------ */

static double loop_body(tc_tensor *x, tc_tensor *w)
{
  size_t mark = tc_scope_begin();
  tc_tensor *s = tc_sum_all(tc_relu(tc_add_scalar(tc_mul(x, w), -0.25)));
  double v;
  assert_int_equal(tc_item(s, &v), 0);
  tc_scope_end(mark);
  return v;
}

static void test_trace_hot_on_nth_iteration(void **state)
{
  (void)state;
  tc_tensor *x = tc_rand(TC_F32, TC_SHAPE(64, 128), 1);
  tc_tensor *w = tc_rand(TC_F32, TC_SHAPE(128), 2);
  tc_compile_set(false);
  double want = loop_body(x, w);
  tc_compile_set(true);
  tc_stats_reset();
  log_begin();
  for (int i = 0; i < 100; i++) {
    assert_true(loop_body(x, w) == want);   /* bitwise as eager */
    if (i == 0)
      assert_int_equal(count(logbuf ? logbuf : "", "hot after"), 0);
    if (i == 1) {
      fflush(logf_);
      assert_int_equal(count(logbuf, "hot after 2 runs"), 1);
    }
  }
  char *log = log_end();
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.regions, 100);
  int ns, nv;
  cache_counts(&ns, &nv);
  assert_int_equal(ns, 1);                  /* one table entry */
  assert_int_equal(nv, 1);
  assert_int_equal(count(log, "hot after"), 1);
  assert_int_equal(s.guard_failures, 0);
  free(log);
  tc_release(x);
  tc_release(w);
}

static void run_cast_body(tc_tensor *x)
{
  size_t mark = tc_scope_begin();
  double v;
  assert_int_equal(tc_item(tc_sum_all(tc_mul_scalar(tc_cast(x, TC_F32), 2)),
                           &v), 0);
  tc_scope_end(mark);
}

static void test_trace_guard_failures_explained(void **state)
{
  (void)state;
  tc_tensor *a = tc_rand(TC_F32, TC_SHAPE(8, 128), 3);
  tc_tensor *b = tc_rand(TC_F32, TC_SHAPE(8, 256), 4);      /* shape */
  tc_tensor *c0 = tc_rand(TC_F32, TC_SHAPE(128, 8), 5);
  tc_tensor *c = tc_transpose(c0, 0, 1);                    /* strides */
  tc_tensor *d = tc_cast(a, TC_F64);                        /* dtype */
  assert_int_equal(tc_realize(d), 0);      /* an f64 input, not a cast */
  log_begin();
  /* Each failure is explained against the variant seen last. */
  run_cast_body(a);
  run_cast_body(a);
  run_cast_body(b);
  run_cast_body(a);
  run_cast_body(c);
  run_cast_body(a);
  run_cast_body(d);
  char *log = log_end();
  assert_non_null(strstr(log, "guard failed: input 0: size of dim 1 is 256, "
                              "was compiled for 128"));
  assert_non_null(strstr(log, "guard failed: input 0: stride of dim 0 is 1, "
                              "was compiled for"));
  assert_non_null(strstr(log, "guard failed: input 0: dtype is f64, was "
                              "compiled for f32"));
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.guard_failures, 3);   /* b, c and d: a matches again */
  free(log);
  tc_release(a);
  tc_release(b);
  tc_release(c);
  tc_release(c0);
  tc_release(d);
}

static void test_trace_recompile_limit(void **state)
{
  (void)state;
  /* rows in an order whose steps never repeat twice in a row (sizes that
  ** march go shape-dynamic sooner: test_trace_marching_sizes) */
  const int64_t rows[12] = { 5, 2, 9, 3, 12, 7, 4, 11, 6, 13, 8, 10 };
  log_begin();
  for (int i = 0; i < 12; i++) {
    tc_tensor *x = tc_ones(TC_F32, TC_SHAPE(rows[i], 7));
    run_cast_body(x);
    run_cast_body(x);
    tc_release(x);
  }
  char *log = log_end();
  int ns, nv;
  cache_counts(&ns, &nv);
  assert_int_equal(ns, 1);
  /* 8 specialized variants, then one shape-dynamic one serves the rest. */
  assert_int_equal(nv, 9);
  assert_int_equal(count(log, "new (shape-dynamic)"), 1);
  assert_int_equal(count(log, "sizes march"), 0);
  free(log);
}

/* What marching is: every size and stride steps by the amount it stepped
** last time, some size by a nonzero one; same dtypes, ranks and sharing. */
static void test_trace_guard_sizes_march(void **state)
{
  (void)state;
  tc_tensor *base = tc_zeros(TC_F32, TC_SHAPE(64, 8));
  tc_tensor *w = tc_zeros(TC_F32, TC_SHAPE(8));
  guard_set *g[3];
  for (int t = 0; t < 3; t++) {   /* a cache's first 3, 5, 7 rows, and w */
    tc_tensor *ins[2] = { tc_slice(base, 0, 0, 3 + 2 * t, 1), w };
    g[t] = guard_build(2, (const tc_tensor *const *)ins, false);
    assert_non_null(g[t]);
    tc_release(ins[0]);
  }
  struct { int64_t rows, cols; tc_dtype dt; bool march; } next[] = {
    { 9, 8, TC_F32, true },     /* +2 rows again */
    { 8, 8, TC_F32, false },    /* +1: another step */
    { 7, 8, TC_F32, false },    /* the same sizes as the last */
    { 9, 4, TC_F32, false },    /* a size that stood still moves */
    { 9, 8, TC_F64, false },    /* another dtype */
  };
  for (size_t i = 0; i < sizeof next / sizeof next[0]; i++) {
    tc_tensor *b = tc_zeros(next[i].dt, TC_SHAPE(64, next[i].cols));
    tc_tensor *ins[2] = { tc_slice(b, 0, 0, next[i].rows, 1), w };
    bool got = guard_sizes_march(g[1], g[2], 2,
                                 (const tc_tensor *const *)ins);
    if (got != next[i].march)
      fail_msg("case %zu: march %d, expected %d", i, got, next[i].march);
    tc_release(ins[0]);
    tc_release(b);
  }
  /* the strides march too: a contiguous (rows, 8) transposed has stride
  ** rows in its second dim (5, 7, 9: steps alike; 5, 7, 10: not) */
  guard_set *h[2];
  for (int t = 0; t < 2; t++) {
    tc_tensor *x = tc_zeros(TC_F32, TC_SHAPE(5 + 2 * t, 8));
    tc_tensor *ins[1] = { tc_transpose(x, 0, 1) };
    h[t] = guard_build(1, (const tc_tensor *const *)ins, false);
    tc_release(ins[0]);
    tc_release(x);
  }
  for (int rows = 9; rows <= 10; rows++) {
    tc_tensor *x = tc_zeros(TC_F32, TC_SHAPE(rows, 8));
    tc_tensor *ins[1] = { tc_transpose(x, 0, 1) };
    assert_true(guard_sizes_march(h[0], h[1], 1,
                                  (const tc_tensor *const *)ins) ==
                (rows == 9));
    tc_release(ins[0]);
    tc_release(x);
  }
  /* a shape-dynamic set does not take part */
  tc_tensor *ins[2] = { tc_slice(base, 0, 0, 9, 1), w };
  guard_set *d = guard_build(2, (const tc_tensor *const *)ins, true);
  assert_false(guard_sizes_march(g[1], d, 2, (const tc_tensor *const *)ins));
  tc_release(ins[0]);
  guard_free(d);
  for (int t = 0; t < 3; t++)
    guard_free(g[t]);
  guard_free(h[0]);
  guard_free(h[1]);
  tc_release(base);
  tc_release(w);
}

/* A region may have hundreds of inputs: an input past the 128th that
** shares storage with an earlier one must still match its own guards (the
** alias index once lived in an int8_t, so such a region failed its guards
** on every run, was never compiled, and the log said "guard failed: ok").
** A GPT training step (231 inputs) hit it. */
enum { MANY = 140 };

static double many_inputs_body(tc_tensor **xs, tc_tensor *y)
{
  size_t mark = tc_scope_begin();
  tc_tensor *acc = xs[0];
  for (int i = 1; i < MANY; i++)
    acc = tc_add(acc, xs[i]);
  /* two views of one storage, the last inputs of the region */
  acc = tc_add(acc, tc_slice(y, 0, 0, 4, 1));
  acc = tc_add(acc, tc_slice(y, 0, 4, 8, 1));
  double v;
  assert_int_equal(tc_item(tc_sum_all(acc), &v), 0);
  tc_scope_end(mark);
  return v;
}

static void test_trace_guards_many_inputs_alias(void **state)
{
  (void)state;
  tc_tensor *xs[MANY];
  for (int i = 0; i < MANY; i++)
    assert_non_null(xs[i] = tc_rand(TC_F32, TC_SHAPE(4), 100 + i));
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(8), 99);

  /* The guard set itself: inputs 140..149 alias inputs 130..139. */
  tc_tensor *ins[MANY + 10];
  for (int i = 0; i < MANY + 10; i++)
    ins[i] = xs[i < MANY ? i : i - 10];
  guard_set *g = guard_build(MANY + 10, (const tc_tensor *const *)ins, false);
  assert_non_null(g);
  assert_true(guard_check(g, MANY + 10, (const tc_tensor *const *)ins));
  assert_int_equal(g->in[MANY + 9].alias, MANY - 1);
  guard_free(g);

  /* And a region with that many inputs: compiled once, reused after. */
  tc_compile_set(false);
  double want = many_inputs_body(xs, y);
  tc_compile_set(true);
  tc_stats_reset();
  for (int i = 0; i < 5; i++)
    assert_true(many_inputs_body(xs, y) == want);
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.guard_failures, 0);
  assert_true(s.regions_compiled >= 3);
  int ns, nv;
  cache_counts(&ns, &nv);
  assert_int_equal(nv, 1);
  for (int i = 0; i < MANY; i++)
    tc_release(xs[i]);
  tc_release(y);
}

/* A chain of k scaled adds: a different structure for every k. */
static double chain_body(tc_tensor *x, int k)
{
  size_t mark = tc_scope_begin();
  tc_tensor *y = x;
  for (int i = 0; i < k; i++)
    y = tc_add_scalar(tc_mul_scalar(y, 0.5), 1.0);
  double v;
  assert_int_equal(tc_item(tc_sum_all(y), &v), 0);
  tc_scope_end(mark);
  return v;
}

/* The region table keeps at most max_entries variants: the least recently
** used go, and a structure seen again after its eviction still runs
** right (it is simply new again). */
static void test_trace_region_table_bounded(void **state)
{
  (void)state;
  cache_configure(&(cache_config){ .hot = 2, .recompile_limit = 8,
                                   .max_entries = 4 });
  /* The kernel table too: plans still running a kernel the table let go
  ** keep it loaded. */
  setenv("TC_KERNELS_MAX", "3", 1);
  tensor_config_reload();
  tc_tensor *x = tc_rand(TC_F32, TC_SHAPE(16, 9), 11);
  double want[13];
  tc_compile_set(false);
  for (int k = 1; k <= 12; k++)
    want[k] = chain_body(x, k);
  tc_compile_set(true);
  uint64_t ev0 = cache_evictions();
  log_begin();
  tensor_log_to(logf_, TC_LOG_REGIONS | TC_LOG_CACHE);
  for (int round = 0; round < 2; round++)
    for (int k = 1; k <= 12; k++) {
      assert_true(chain_body(x, k) == want[k]);
      assert_true(chain_body(x, k) == want[k]);   /* hot: compiled */
      int ns, nv;
      cache_counts(&ns, &nv);
      assert_true(nv <= 4 && ns <= 4);
    }
  char *log = log_end();
  assert_true(cache_evictions() - ev0 >= 20);   /* 24 structures, 4 kept */
  assert_true(count(log, "evicted") >= 20);
  assert_true(count(log, "leaves the table") >= 20);
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.regions_compiled, 24);     /* each hot once a round */
  assert_int_equal(s.compile_failures, 0);
  free(log);
  tc_release(x);
  cache_configure(&(cache_config){ .hot = 2, .recompile_limit = 8 });
  unsetenv("TC_KERNELS_MAX");
  tensor_config_reload();
}

static int compiles;

static void failing_compiler(const trace_region *r, cache_entry *e)
{
  compiles++;
  trace_table_lock();
  e->state = CACHE_FAILED;
  trace_table_unlock();
  tensor_log(TC_LOG_FALLBACK, "region %016llx: compile failed, running "
             "eagerly: injected failure", (unsigned long long)r->hash);
}

static int never_run(void *plan, trace_region *r)
{
  (void)plan;
  (void)r;
  fail_msg("a failed region must not run a plan");
  return -1;
}

static void test_trace_compile_failure_falls_back(void **state)
{
  (void)state;
  tc_tensor *x = tc_rand(TC_F32, TC_SHAPE(64, 128), 7);
  tc_tensor *w = tc_rand(TC_F32, TC_SHAPE(128), 8);
  tc_compile_set(false);
  double want = loop_body(x, w);
  tc_compile_set(true);
  trace_set_compiler(failing_compiler, never_run, NULL);
  log_begin();
  for (int i = 0; i < 10; i++)
    assert_true(loop_body(x, w) == want);
  char *log = log_end();
  trace_compile_register();   /* the real compiler again */
  assert_int_equal(compiles, 1);            /* not retried */
  tc_stats s;
  tc_stats_get(&s);
  assert_int_equal(s.regions_eager, 10);
  assert_int_equal(count(log, "injected failure"), 1);
  free(log);
  tc_release(x);
  tc_release(w);
}

/* -- The kernel table across threads ------------------------------------ */

typedef struct {
  const kir_kernel *k;
  trace_kernel *got;
  char why[256];
} kernel_ask;

static void *ask_kernel(void *arg)
{
  kernel_ask *a = arg;
  a->got = trace_kernel_get(a->k, NULL, 0, a->why, sizeof a->why);
  return NULL;
}

/* Threads asking for kernels at once: each distinct kernel is compiled
** once, and every thread asking for it gets that one entry; one that
** fails (an injected hang past the deadline) fails every thread that
** waited for it, with its reason, after one deadline rather than one each;
** the failed kernel leaves the table, so the next request compiles it. */
static void test_trace_kernel_table_threads(void **state)
{
  (void)state;
  enum { N = 6 };
  kir_kernel *k[2] = { exp_kernel(1000, 1.25), exp_kernel(1000, 2.5) };
  kernel_ask ask[N];
  pthread_t t[N];
  tc_stats s0, s1;
  tc_stats_get(&s0);
  for (int i = 0; i < N; i++) {
    ask[i] = (kernel_ask){ .k = k[i % 2] };
    assert_int_equal(pthread_create(&t[i], NULL, ask_kernel, &ask[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(t[i], NULL);
  tc_stats_get(&s1);
  assert_int_equal(s1.kernels_compiled - s0.kernels_compiled, 2);
  /* the clock's share: more than nothing, no more than the two compiles'
  ** times (plus the bookkeeping around them) */
  double wall = s1.compile_wall_ms - s0.compile_wall_ms;
  assert_true(wall > 0);
  assert_true(wall <= s1.compile_ms - s0.compile_ms + 50);
  for (int i = 0; i < N; i++) {
    assert_non_null(ask[i].got);
    assert_ptr_equal(ask[i].got, ask[i % 2].got);
    assert_non_null(trace_kernel_code(ask[i].got));
  }
  assert_ptr_not_equal(ask[0].got, ask[1].got);
  for (int i = 0; i < N; i++)
    trace_kernel_put(ask[i].got);

  kir_kernel *hang = exp_kernel(1000, 3.75);
  jcpu_worker_set_timeout(2000);
  jcpu_worker_fault_next(JCPU_FAULT_HANG);
  double t0 = tensor_now_ms();
  for (int i = 0; i < N; i++) {
    ask[i] = (kernel_ask){ .k = hang };
    assert_int_equal(pthread_create(&t[i], NULL, ask_kernel, &ask[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(t[i], NULL);
  double ms = tensor_now_ms() - t0;
  jcpu_worker_set_timeout(0);
  for (int i = 0; i < N; i++) {
    assert_null(ask[i].got);
    assert_string_equal(ask[i].why, "compile took longer than 2000 ms; "
                        "worker killed");
  }
  assert_true(ms < 2 * 2000);   /* one deadline, shared */
  tc_stats_get(&s0);
  char why[256];
  trace_kernel *again = trace_kernel_get(hang, NULL, 0, why, sizeof why);
  assert_non_null(again);
  tc_stats_get(&s1);
  assert_int_equal(s1.kernels_compiled - s0.kernels_compiled, 1);
  trace_kernel_put(again);
  free(hang);
  free(k[0]);
  free(k[1]);
}

/* -- Small regions run every iteration ------------------------------------ */

/* W9's program: a chain of 25 pointwise ops whose result is read every
** iteration. Compiled, the same region is realized again and again; these
** runs vary one thing at a time and each must compute what eager does, bit
** for bit (a shape, a dtype, aliasing, an input written in place between
** iterations, a view for a contiguous input, a scalar). */
static void small_chain(tc_tensor *x, tc_tensor *y, double s, double *out,
                        size_t n)
{
  size_t mark = tc_scope_begin();
  tc_tensor *a = x;
  for (int i = 0; i < 5; i++) {
    a = tc_add(a, y);
    a = tc_mul_scalar(a, s);
    a = tc_sub(a, x);
    a = tc_mul(a, y);
    a = tc_add_scalar(a, 0.25);
  }
  assert_int_equal(tc_copy_to(tc_cast(a, TC_F64), out,
                              n * sizeof(double)), 0);
  tc_scope_end(mark);
}

/* Run the chain compiled `iters` times (each result checked against an
** eager run of the same inputs made just before), return the regions run
** through compiled kernels. */
static uint64_t small_chain_check(tc_tensor *x, tc_tensor *y, double s,
                                  int iters)
{
  size_t n = (size_t)tc_numel(x);
  double want[256], got[256];
  assert_true(n <= 256);
  tc_stats before, after;
  tc_stats_get(&before);
  for (int i = 0; i < iters; i++) {
    tc_compile_set(false);
    small_chain(x, y, s, want, n);
    tc_compile_set(true);
    small_chain(x, y, s, got, n);
    assert_memory_equal(want, got, n * sizeof(double));
  }
  tc_stats_get(&after);
  return after.regions_compiled - before.regions_compiled;
}

static void test_trace_small_chain_not_fooled(void **state)
{
  (void)state;
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(64), 21);
  tc_tensor *y = tc_rand(TC_F32, TC_SHAPE(64), 22);
  /* Hot and compiled: later runs are compiled, one table entry. */
  assert_true(small_chain_check(x, y, 0.5, 6) >= 4);
  int ns, nv;
  cache_counts(&ns, &nv);
  assert_int_equal(ns, 1);
  assert_int_equal(nv, 1);
  /* A different scalar is an argument, not structure: still compiled. */
  assert_int_equal(small_chain_check(x, y, -3.0, 3), 3);
  /* Another shape. */
  tc_tensor *x2 = tc_randn(TC_F32, TC_SHAPE(65), 23);
  tc_tensor *y2 = tc_rand(TC_F32, TC_SHAPE(65), 24);
  small_chain_check(x2, y2, 0.5, 4);
  /* Another dtype. */
  tc_tensor *x3 = tc_cast(x, TC_F64), *y3 = tc_cast(y, TC_F64);
  small_chain_check(x3, y3, 0.5, 4);
  /* Aliasing: both inputs one tensor, then two views of one storage. */
  small_chain_check(x, x, 0.5, 4);
  tc_tensor *both = tc_randn(TC_F32, TC_SHAPE(2, 64), 25);
  tc_tensor *b0 = tc_slice(both, 0, 0, 1, 1), *b1 = tc_slice(both, 0, 1, 2, 1);
  tc_tensor *r0 = tc_squeeze(b0, 0), *r1 = tc_squeeze(b1, 0);
  small_chain_check(r0, r1, 0.5, 4);
  /* A strided view for a contiguous input. */
  tc_tensor *wide = tc_randn(TC_F32, TC_SHAPE(128), 26);
  tc_tensor *strided = tc_slice(wide, 0, 0, 128, 2);
  small_chain_check(strided, y, 0.5, 4);
  small_chain_check(x, strided, 0.5, 4);
  /* An input written in place between iterations (eagerly and lazily). */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tc_add_scalar_(y, 0.125), 0);
    small_chain_check(x, y, 0.5, 1);
  }
  /* And back to the first inputs: still right, still compiled. */
  assert_int_equal(small_chain_check(x, y, 0.5, 3), 3);
  tc_release(x);
  tc_release(y);
  tc_release(x2);
  tc_release(y2);
  tc_release(x3);
  tc_release(y3);
  tc_release(both);
  tc_release(b0);
  tc_release(b1);
  tc_release(r0);
  tc_release(r1);
  tc_release(wide);
  tc_release(strided);
}

/* -- Shape-dynamic layouts ------------------------------------------------ */

enum { KV_D = 16, KV_N = 48, KV_MAX = 40 };

/* One decoding step as a model writes it: store this position's key and
** value rows into the caches, then attend over the first T rows (the
** softmax from primitives), and read the result. */
static void attend_step(tc_tensor *q, tc_tensor *kc, tc_tensor *vc,
                        tc_tensor *krow, tc_tensor *vrow, int64_t T,
                        float *out)
{
  size_t mark = tc_scope_begin();
  assert_int_equal(tc_copy_(tc_slice(kc, 0, T - 1, T, 1), krow), 0);
  assert_int_equal(tc_copy_(tc_slice(vc, 0, T - 1, T, 1), vrow), 0);
  tc_tensor *k = tc_slice(kc, 0, 0, T, 1), *v = tc_slice(vc, 0, 0, T, 1);
  tc_tensor *s = tc_mul_scalar(tc_matmul(q, tc_transpose(k, 0, 1)), 0.25);
  tc_tensor *e = tc_exp(tc_sub(s, tc_max(s, -1, true)));
  tc_tensor *o = tc_matmul(tc_div(e, tc_sum(e, -1, true)), v);
  assert_int_equal(tc_copy_to(tc_add(o, q), out, sizeof(float) * KV_D), 0);
  tc_scope_end(mark);
}

/* Decode KV_MAX positions; out[T - 1] gets step T's result. */
static void decode(float (*out)[KV_D])
{
  tc_tensor *q = tc_randn(TC_F32, TC_SHAPE(1, KV_D), 1);
  tc_tensor *kc = tc_zeros(TC_F32, TC_SHAPE(KV_N, KV_D));
  tc_tensor *vc = tc_zeros(TC_F32, TC_SHAPE(KV_N, KV_D));
  for (int64_t T = 1; T <= KV_MAX; T++) {
    tc_tensor *kr = tc_randn(TC_F32, TC_SHAPE(1, KV_D), 100 + (uint64_t)T);
    tc_tensor *vr = tc_randn(TC_F32, TC_SHAPE(1, KV_D), 200 + (uint64_t)T);
    attend_step(q, kc, vc, kr, vr, T, out[T - 1]);
    tc_release(kr);
    tc_release(vr);
  }
  tc_release(q);
  tc_release(kc);
  tc_release(vc);
}

/* Decode compiled; every step's result must equal want's bit for bit. */
static void decode_compiled_matches(float (*want)[KV_D])
{
  static float got[KV_MAX][KV_D];
  tc_compile_set(true);
  decode(got);
  tc_sync();
  for (int T = 0; T < KV_MAX; T++)
    for (int j = 0; j < KV_D; j++)
      assert_memory_equal(&got[T][j], &want[T][j], sizeof(float));
}

/* A KV cache that grows every step: past TC_RECOMPILE_LIMIT lengths the
** attention region is shape-dynamic, and each new length's sizes and
** strides are derived from its plan, not planned again (issue 10, item 5);
** the results equal eager's bit for bit. */
static void test_trace_dynamic_layouts_derived(void **state)
{
  (void)state;
  static float want[KV_MAX][KV_D];
  tc_compile_set(false);
  decode(want);
  decode_compiled_matches(want);
  tc_stats s;
  tc_stats_get(&s);
  /* 40 lengths, 8 specialized: more than 30 new lengths went through a
  ** shape-dynamic plan. A length equal to another size of the program
  ** (T = 16 = KV_D) relates the sizes otherwise and is planned again;
  ** every other length is derived. */
  assert_true(s.regions_compiled > 0);
  assert_true(s.layouts_derived >= 25);
  assert_true(s.layouts_built >= 1 && s.layouts_built <= 3);
  assert_int_equal(s.compile_failures, 0);

  /* A second sequence: the layouts planned again are kept apart from the
  ** derived ones (TUNE_BUILT_LAYOUTS), so its lengths that relate sizes
  ** otherwise are not planned a second time. */
  decode_compiled_matches(want);
  tc_stats again;
  tc_stats_get(&again);
  assert_int_equal(again.layouts_built, s.layouts_built);
  assert_true(again.layouts_derived > s.layouts_derived);
}

/* The hash of the region the log says went shape-dynamic, as the log
** prints it, in out (17 bytes); false when none did. */
static bool dynamic_region(const char *log, char *out)
{
  const char *p = strstr(log, ": new (shape-dynamic)");
  if (!p || p - log < 16)
    return false;
  memcpy(out, p - 16, 16);
  out[16] = 0;
  return true;
}

/* A cache that grows a row a step: its sizes march, so the third length
** is already shape-dynamic (each length is new; a specialized kernel for
** it would run once, or within one step, and never again), not the ninth
** as TC_RECOMPILE_LIMIT would have it. Bit for bit eager's results. */
static float kv_want[KV_MAX][KV_D];   /* the eager decode's results */

/* Decode eagerly into kv_want, then compiled (results checked): that
** decode's log, and in dyn the region that went shape-dynamic. */
static char *first_compiled_decode(char *dyn)
{
  tc_compile_set(false);
  decode(kv_want);
  log_begin();
  decode_compiled_matches(kv_want);
  char *log = log_end();
  assert_true(dynamic_region(log, dyn));
  return log;
}

static void test_trace_marching_sizes(void **state)
{
  (void)state;
  char dyn[17], what[96];
  char *log = first_compiled_decode(dyn);
  snprintf(what, sizeof what, "region %s: new: ", dyn);
  assert_int_equal(count(log, what), 2);          /* lengths 1 and 2 */
  snprintf(what, sizeof what, "region %s: new (shape-dynamic) as its sizes "
           "march", dyn);
  assert_int_equal(count(log, what), 1);          /* length 3, and on */
  snprintf(what, sizeof what, "region %s hot after", dyn);
  assert_int_equal(count(log, what), 1);          /* at length 4 */
  assert_int_equal(count(log, "new (shape-dynamic)"), 1);
  free(log);
  tc_stats s;
  tc_stats_get(&s);
  assert_true(s.layouts_derived >= 30);           /* lengths 5 .. 40 */
}

/* A second sequence meets its first lengths again. Their specialized
** variants were each seen once, before the region went shape-dynamic, so
** they are cold: the compiled shape-dynamic plan runs them, and nothing is
** compiled for them. (Before, each became hot on this second sighting and
** was compiled: a plan and kernels per length, for shapes the dynamic plan
** already ran.) */
static void test_trace_dynamic_serves_cold_statics(void **state)
{
  (void)state;
  char dyn[17], hot[64];
  char *first = first_compiled_decode(dyn);
  snprintf(hot, sizeof hot, "region %s hot after", dyn);
  assert_int_equal(count(first, hot), 1);   /* its shape-dynamic compile */
  free(first);
  tc_stats s;
  tc_stats_get(&s);
  log_begin();
  decode_compiled_matches(kv_want);   /* bit for bit: eager's results */
  char *second = log_end();
  tc_stats again;
  tc_stats_get(&again);
  assert_int_equal(count(second, hot), 0);
  assert_int_equal(again.regions_eager, s.regions_eager);
  assert_int_equal(again.regions_compiled - s.regions_compiled,
                   again.regions - s.regions);
  free(second);
}

/* Two values in one region, y of length n and w of 8, each read twice:
** compiled shape-dynamic when n was 8, both went into one MAP kernel over
** 8 points (and the four reductions into one ROWS kernel). Derived for
** n = 9, that kernel would compute 8 of y's 9 values; the sizes now relate
** otherwise, so the plan is built again for them and (its code not the
** compiled one) the region runs eagerly. */
static double two_lengths(int64_t n)
{
  size_t mark = tc_scope_begin();
  tc_tensor *y = tc_exp(tc_mul_scalar(tc_arange(TC_F32, 0, (double)n, 1),
                                      0.1));
  tc_tensor *w = tc_exp(tc_mul_scalar(tc_arange(TC_F32, 0, 8, 1), 0.2));
  tc_tensor *z = tc_add(tc_add(tc_sum(y, -1, false), tc_max(y, -1, false)),
                        tc_add(tc_sum(w, -1, false), tc_max(w, -1, false)));
  double v;
  assert_int_equal(tc_item(z, &v), 0);
  tc_scope_end(mark);
  return v;
}

static void test_trace_dynamic_layout_sizes_relate_otherwise(void **state)
{
  (void)state;
  /* 8 specialized lengths (in an order that does not march), then the
  ** shape-dynamic compile at n = 8 */
  const int64_t ns[] = { 20, 22, 21, 24, 23, 26, 25, 27, 8, 8, 9, 10, 11, 9 };
  enum { NN = sizeof ns / sizeof ns[0] };
  for (int i = 0; i < NN; i++) {
    tc_compile_set(false);
    double want = two_lengths(ns[i]);
    tc_compile_set(true);
    for (int rep = 0; rep < 2; rep++) {   /* the second sighting is hot */
      double got = two_lengths(ns[i]);
      assert_memory_equal(&got, &want, sizeof got);
    }
  }
  tc_stats s;
  tc_stats_get(&s);
  assert_true(s.layouts_built >= 3);   /* n = 9, 10, 11 */
}

/* A cold specialized variant whose shapes the shape-dynamic plan cannot
** run (two_lengths: n = 9 relates the sizes otherwise than n = 8, where the
** dynamic plan was made) counts its sighting after all: it becomes hot and
** is compiled, as it would have been without a dynamic variant, instead of
** running eagerly for good. */
static void test_trace_cold_static_when_dynamic_cannot(void **state)
{
  (void)state;
  /* n = 9 and 7 more lengths once each (cold; an order that does not
  ** march), then n = 8 twice: the 9th variant, shape-dynamic, hot on its
  ** second sighting. */
  const int64_t ns[] = { 9, 20, 22, 21, 24, 23, 26, 25, 8, 8 };
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
    two_lengths(ns[i]);
  tc_compile_set(false);
  double want = two_lengths(9);
  tc_compile_set(true);
  tc_stats s;
  tc_stats_get(&s);
  log_begin();
  double got = two_lengths(9);
  char *log = log_end();
  tc_stats again;
  tc_stats_get(&again);
  assert_memory_equal(&got, &want, sizeof got);
  assert_non_null(strstr(log, "relate otherwise"));   /* dynamic: no */
  assert_int_equal(count(log, "hot after"), 1);        /* the static: yes */
  assert_int_equal(again.regions_eager, s.regions_eager);
  free(log);
}

/* -- One structure for one computation, whatever came before ------------- */

enum { LAYERS = 6, WIDTH = 24 };

/* A stack of LAYERS identical layers, as a model writes it: each reads the
** previous layer's output and its own weights, rows of one stored table
** (at their own offsets, as a file's tensors are). Each layer reads a
** statistic of its pre-activation h after recording the activation that
** reads h: so a region computes the previous layer's activation and this
** layer's h, and reads h, which the region before computed after the
** activation reading it was recorded (as a decoder's layers are cut by
** the read of the KV cache). out gets the last layer's output; stat the
** sum of the statistics. */
static void layer_stack(tc_tensor *table, tc_tensor *x0, float *out,
                        double *stat)
{
  size_t mark = tc_scope_begin();
  tc_tensor *x = x0;
  *stat = 0;
  for (int l = 0; l < LAYERS; l++) {
    tc_tensor *w = tc_slice(table, 0, 2 * l, 2 * l + 1, 1);
    tc_tensor *b = tc_slice(table, 0, 2 * l + 1, 2 * l + 2, 1);
    tc_tensor *h = tc_add(tc_mul(x, w), b);
    x = tc_mul(tc_tanh(h), tc_rsqrt(tc_add_scalar(tc_mean(tc_mul(h, h), -1,
                                                          true), 1e-5)));
    double v;
    assert_int_equal(tc_item(tc_sum_all(h), &v), 0);
    *stat += v;
  }
  assert_int_equal(tc_copy_to(x, out, sizeof(float) * WIDTH), 0);
  tc_scope_end(mark);
}

/* Layers 3..LAYERS are one region structure: a region's hash is its own
** graph, not the history of the values it reads (each layer's h reads an
** activation recorded while the h before it was lazy, whose node was
** recorded while the h before that was ...). So they are planned and
** compiled once, not once per layer. Results equal eager's bit for bit. */
static void test_trace_layers_share_a_structure(void **state)
{
  (void)state;
  tc_tensor *table = tc_randn(TC_F32, TC_SHAPE(2 * LAYERS, WIDTH), 5);
  tc_tensor *x0 = tc_randn(TC_F32, TC_SHAPE(1, WIDTH), 6);
  float want[WIDTH], got[WIDTH];
  double want_stat, got_stat;
  tc_compile_set(false);
  layer_stack(table, x0, want, &want_stat);
  tc_compile_set(true);
  log_begin();
  for (int pass = 0; pass < 3; pass++) {
    layer_stack(table, x0, got, &got_stat);
    assert_memory_equal(got, want, sizeof got);
    assert_memory_equal(&got_stat, &want_stat, sizeof got_stat);
  }
  char *log = log_end();
  tc_stats s;
  tc_stats_get(&s);
  /* the first layer's; the second's, which computes the first layer's h
  ** again from x0 (the first region stored only its statistic); layers
  ** 3..6's; the last read's. Before: one per layer, and the last's */
  assert_int_equal(count(log, ": new: "), 4);
  assert_int_equal(count(log, " hot after "), 4);
  assert_true(s.regions_compiled >= 3 * LAYERS - 2);
  free(log);
  tc_release(table);
  tc_release(x0);
}

/* A shape-dynamic region reading a row of a table at a moving position
** (a token's embedding, a rotary table's row): that row's offset is not a
** fact of the layout recipe (no other input shares its storage, and inputs
** are bound by their data pointers), so no position relates the region's
** sizes otherwise, and every new length derives its layout. (With the
** offset a fact, position 12's offset, 12 rows of 24, equals the length
** of c, another input, and the layout was planned again there.) */
static double row_attend(tc_tensor *table, tc_tensor *keys, tc_tensor *c,
                         int64_t pos)
{
  size_t mark = tc_scope_begin();
  tc_tensor *q = tc_slice(tc_slice(table, 0, pos, pos + 1, 1), 1, 0,
                          tc_size(keys, 1), 1);
  tc_tensor *k = tc_slice(keys, 0, 0, pos + 1, 1);
  tc_tensor *s = tc_matmul(q, tc_transpose(k, 0, 1));
  tc_tensor *e = tc_exp(tc_sub(s, tc_max(s, -1, true)));
  tc_tensor *p = tc_div(e, tc_sum(e, -1, true));
  double v;
  assert_int_equal(tc_item(tc_add(tc_sum_all(tc_matmul(p, k)),
                                  tc_sum_all(c)), &v), 0);
  tc_scope_end(mark);
  return v;
}

static void test_trace_dynamic_moving_row_derived(void **state)
{
  (void)state;
  /* N: k's length reaches the table's row stride (24) and k's size c's
  ** (36 rows) only past it: sizes that relate otherwise, as they should */
  enum { D = 8, N = 23 };
  tc_tensor *table = tc_randn(TC_F32, TC_SHAPE(N, 3 * D), 7);
  tc_tensor *keys = tc_randn(TC_F32, TC_SHAPE(N, D), 8);
  tc_tensor *c = tc_randn(TC_F32, TC_SHAPE(12 * 3 * D), 9);
  double want[N];
  tc_compile_set(false);
  for (int64_t pos = 0; pos < N; pos++)
    want[pos] = row_attend(table, keys, c, pos);
  tc_compile_set(true);
  /* from length 10: 10 and 11 specialized, shape-dynamic from 12 (the
  ** sizes march), past length 8 = D, which relates k's sizes otherwise */
  for (int64_t pos = 9; pos < N; pos++)
    for (int rep = 0; rep < 2; rep++) {
      double got = row_attend(table, keys, c, pos);
      assert_memory_equal(&got, &want[pos], sizeof got);
    }
  tc_stats s;
  tc_stats_get(&s);
  assert_true(s.layouts_derived >= 10);   /* lengths 13 .. 23 */
  assert_int_equal(s.layouts_built, 0);
  assert_int_equal(s.compile_failures, 0);
  tc_release(table);
  tc_release(keys);
  tc_release(c);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_trace_lazy_until_read, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_unread_never_computed, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_leaf_edges_hold_inputs,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_inplace_over_pending_reader,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(
      test_trace_inplace_sole_target_realized_by_source, setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_views_of_lazy, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_scope_ends_with_pending_writes,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_hot_on_nth_iteration, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_guard_failures_explained,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_guard_sizes_march, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_recompile_limit, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_guards_many_inputs_alias,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_region_table_bounded, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_small_chain_not_fooled, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_compile_failure_falls_back,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_kernel_table_threads, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_dynamic_layouts_derived,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_layers_share_a_structure,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_dynamic_moving_row_derived,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(
      test_trace_dynamic_layout_sizes_relate_otherwise, setup, teardown),
    cmocka_unit_test_setup_teardown(test_trace_marching_sizes, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_trace_dynamic_serves_cold_statics,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(
      test_trace_cold_static_when_dynamic_cannot, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
