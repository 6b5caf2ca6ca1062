/*
** state.c -- process state: configuration read once from the environment,
** the counters behind tc_stats_get(), and one-time initialization.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eager.h"
#include "../jit_cuda/jit_cuda.h"

/* The one name eager knows from above: tracing registers its TRACE
** handlers and hooks here, at the library's one-time init, so that a
** static link, which keeps only what is referenced, keeps tracing too
** (a constructor in an unreferenced object would be dropped). */
void trace_init(void);
/* Autograd registers its AUTOGRAD handlers the same way, above TRACE. */
void autograd_init(void);

_Thread_local eager_stat_block *eager_stat_mine;
static struct {
  pthread_mutex_t lock;
  eager_stat_block *all;       /* every block ever made; never freed */
  uint64_t base[ST__MAX];      /* the sums at the last reset */
  pthread_key_t key;           /* a thread's block, released at its exit */
  pthread_once_t once;
  eager_stat_block spare;      /* for a thread whose block calloc refused */
} stats = { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT };

static void stat_release(void *block)
{
  pthread_mutex_lock(&stats.lock);
  ((eager_stat_block *)block)->in_use = false;
  pthread_mutex_unlock(&stats.lock);
  eager_stat_mine = NULL;   /* a later count in another destructor claims again */
}

static void stat_key_make(void)
{
  pthread_key_create(&stats.key, stat_release);
  stats.all = &stats.spare;
  stats.spare.in_use = true;   /* shared by all such threads: never released */
}

eager_stat_block *eager_stat_claim(void)
{
  pthread_once(&stats.once, stat_key_make);
  pthread_mutex_lock(&stats.lock);
  eager_stat_block *b = stats.all;
  while (b && b->in_use)
    b = b->next;
  if (!b && (b = calloc(1, sizeof *b)) != NULL) {
    b->next = stats.all;
    stats.all = b;
  }
  if (b)
    b->in_use = true;
  pthread_mutex_unlock(&stats.lock);
  if (!b)
    return &stats.spare;   /* shared: a count there may race, rarely lost */
  pthread_setspecific(stats.key, b);
  return eager_stat_mine = b;
}

static uint64_t stat_sum(eager_stat s)
{
  uint64_t n = 0;
  for (eager_stat_block *b = stats.all; b; b = b->next)
    n += atomic_load_explicit(&b->v[s], memory_order_relaxed);
  return n;
}

/* Every counter since the last reset, summed over the threads at one
** moment. */
static void stat_totals(uint64_t v[ST__MAX])
{
  pthread_once(&stats.once, stat_key_make);
  pthread_mutex_lock(&stats.lock);
  for (int i = 0; i < ST__MAX; i++)
    v[i] = stat_sum((eager_stat)i) - stats.base[i];
  pthread_mutex_unlock(&stats.lock);
}

uint64_t eager_stat_total(eager_stat s)
{
  uint64_t v[ST__MAX];
  stat_totals(v);
  return v[s];
}
static _Atomic uint64_t compile_us;   /* compile time, microseconds */
static _Atomic uint64_t compile_wall_us;   /* ... by the clock */
static eager_config cfg;
static double t_first_region, t_first_compiled;   /* ms, CLOCK_MONOTONIC */

void eager_note_region(void)
{
  if (t_first_region == 0)
    t_first_region = tensor_now_ms();
}

void eager_note_compiled_run(void)
{
  if (t_first_compiled == 0)
    t_first_compiled = tensor_now_ms();
}
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool ready;   /* init_once has run: skip pthread_once */

static void print_stats(void)
{
  tc_stats s;
  tc_stats_get(&s);
  fprintf(stderr,
          "tc stats: ops %llu regions %llu (compiled %llu, eager %llu) "
          "kernels compiled %llu loaded %llu launched %llu guard_failures "
          "%llu compile_failures %llu compile_ms %.1f (wall %.1f) "
          "first_compiled_ms %.1f "
          "pool hits %llu misses %llu layouts derived %llu built %llu\n",
          (unsigned long long)s.ops, (unsigned long long)s.regions,
          (unsigned long long)s.regions_compiled,
          (unsigned long long)s.regions_eager,
          (unsigned long long)s.kernels_compiled,
          (unsigned long long)s.kernels_loaded,
          (unsigned long long)s.kernels_launched,
          (unsigned long long)s.guard_failures,
          (unsigned long long)s.compile_failures, s.compile_ms,
          s.compile_wall_ms, s.first_compiled_ms,
          (unsigned long long)s.pool_hits, (unsigned long long)s.pool_misses,
          (unsigned long long)s.layouts_derived,
          (unsigned long long)s.layouts_built);
}

static void init_once(void)
{
  const tensor_config *env = tensor_cfg();
  cfg.threads = tensor_threads();
  cfg.compile = env->compile;
  cfg.stats_at_exit = env->stats;
  eager_register_cpu_pointwise();
  eager_register_cpu_reduce();
  eager_register_cpu_composite();
  eager_register_cpu_matmul();
  eager_register_cpu_misc();
  eager_register_cpu_index();
  eager_register_cpu_half();   /* wraps what the lines above registered */
  eager_register_cuda();
  eager_gemm_init();
  trace_init();
  autograd_init();
  if (cfg.compile)
    eager_global_include(TC_KEYSET(TC_KEY_TRACE), true);
  if (cfg.stats_at_exit)
    atexit(print_stats);
  atomic_store_explicit(&ready, true, memory_order_release);
}

/* Every op calls this; after init one acquire load is the whole cost. */
void eager_init(void)
{
  if (!atomic_load_explicit(&ready, memory_order_acquire))
    pthread_once(&once, init_once);
}

const eager_config *eager_cfg(void)
{
  eager_init();
  return &cfg;
}

void eager_add_compile_ms(double ms)
{
  atomic_fetch_add(&compile_us, (uint64_t)(ms * 1000.0));
}

void eager_add_compile_wall_ms(double ms)
{
  atomic_fetch_add(&compile_wall_us, (uint64_t)(ms * 1000.0));
}

int tc_threads(void) { return eager_cfg()->threads; }

void tc_compile_set(bool on)
{
  eager_init();
  /* Leaving compile mode: nothing may stay lazy under eager writes. */
  if (cfg.compile && !on && tensor_hooks.realize_all)
    tensor_hooks.realize_all();
  cfg.compile = on;
  eager_global_include(TC_KEYSET(TC_KEY_TRACE), on);
}

bool tc_compile_enabled(void) { return eager_cfg()->compile; }

void tc_stats_get(tc_stats *out)
{
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  uint64_t v[ST__MAX];
  stat_totals(v);
  out->ops = v[ST_OPS];
  out->regions = v[ST_REGIONS];
  out->regions_compiled = v[ST_REGIONS_COMPILED];
  out->regions_eager = v[ST_REGIONS_EAGER];
  out->kernels_compiled = v[ST_KERNELS_COMPILED];
  out->kernels_loaded = v[ST_KERNELS_LOADED];
  out->kernels_launched = v[ST_KERNELS_LAUNCHED];
  out->guard_failures = v[ST_GUARD_FAILURES];
  out->compile_failures = v[ST_COMPILE_FAILURES];
  out->layouts_derived = v[ST_LAYOUTS_DERIVED];
  out->layouts_built = v[ST_LAYOUTS_BUILT];
  out->compile_ms = (double)compile_us / 1000.0;
  out->compile_wall_ms = (double)compile_wall_us / 1000.0;
  out->first_compiled_ms =
    t_first_compiled ? t_first_compiled - t_first_region : 0;
  tensor_alloc_stats(&out->bytes_allocated, &out->pool_hits,
                     &out->pool_misses);
}

void tc_stats_reset(void)
{
  pthread_once(&stats.once, stat_key_make);
  pthread_mutex_lock(&stats.lock);
  for (int i = 0; i < ST__MAX; i++)
    stats.base[i] = stat_sum((eager_stat)i);
  pthread_mutex_unlock(&stats.lock);
  compile_us = 0;
  compile_wall_us = 0;
  tensor_alloc_reset_stats();
}

bool tc_cuda_available(void) { return jcuda_device_available(); }
