/*
** pool.c -- the CPU thread pool: tensor_threads() - 1 workers plus the
** caller, one job at a time, each job split into contiguous ranges. Nested
** calls (from inside a job) run serially on the calling thread. Below eager
** and the JIT launcher alike: both run their kernels here.
**
** A worker that finishes a job, and a caller waiting for its workers, spin
** for up to TC_SPIN_US (50 us) before sleeping on a condition variable:
** waking a sleeping thread costs some 7 us on a VM, as much as a decoder's
** 288 x 288 matrix-vector product split over two threads, and a small-
** tensor loop posts such jobs a few microseconds apart; 50 us is short
** enough that an idle program's workers sleep at once in human terms and
** leave a background compile its core (several processes sharing the
** cores may want 0). Sleepers are counted, so a job posted while every
** worker spins costs no system call.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tensor.h"

static struct {
  pthread_mutex_t job_lock;    /* one job at a time across user threads */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  pthread_t *workers;
  int nworkers;
  bool started;
  int sleepers;                /* workers in cond_wait(wake), under lock */
  bool caller_sleeps;          /* the caller is in cond_wait(done) */
  _Atomic uint64_t generation; /* jobs posted; written under lock */
  /* the current job */
  tensor_range_fn fn;
  void *ctx;
  int64_t n;
  int nparts;
  int next_part;               /* next range to take, under lock */
  _Atomic int pending;         /* ranges not yet finished; under lock */
} pool = {
  .job_lock = PTHREAD_MUTEX_INITIALIZER,
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .wake = PTHREAD_COND_INITIALIZER,
  .done = PTHREAD_COND_INITIALIZER,
};

static _Thread_local bool in_job;

static void part_range(int part, int64_t *lo, int64_t *hi)
{
  *lo = pool.n * part / pool.nparts;
  *hi = pool.n * (part + 1) / pool.nparts;
}

/* Take and run ranges until none are left. Called with pool.lock held. */
static void run_parts(void)
{
  while (pool.next_part < pool.nparts) {
    int part = pool.next_part++;
    int64_t lo, hi;
    part_range(part, &lo, &hi);
    tensor_range_fn fn = pool.fn;
    void *ctx = pool.ctx;
    pthread_mutex_unlock(&pool.lock);
    in_job = true;
    fn(ctx, lo, hi);
    in_job = false;
    pthread_mutex_lock(&pool.lock);
    if (--pool.pending == 0 && pool.caller_sleeps)
      pthread_cond_broadcast(&pool.done);
  }
}

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spin until done(arg) or TC_SPIN_US pass (the clock read once every 64
** pauses). Called without the lock; the caller rechecks under it. */
static void spin_until(bool (*done)(uint64_t), uint64_t arg)
{
  int64_t ns = (int64_t)tensor_cfg()->spin_us * 1000;
  if (ns == 0)
    return;
  int64_t end = now_ns() + ns;
  for (unsigned i = 1; !done(arg); i++) {
    cpu_relax();
    if (i % 64 == 0 && now_ns() > end)
      return;
  }
}

static bool job_posted_since(uint64_t seen)
{
  return atomic_load_explicit(&pool.generation, memory_order_relaxed) != seen;
}

static bool job_finished(uint64_t unused)
{
  (void)unused;
  return atomic_load_explicit(&pool.pending, memory_order_acquire) == 0;
}

static void *worker(void *arg)
{
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    if (pool.generation == seen) {
      pthread_mutex_unlock(&pool.lock);
      spin_until(job_posted_since, seen);
      pthread_mutex_lock(&pool.lock);
      pool.sleepers++;
      while (pool.generation == seen)
        pthread_cond_wait(&pool.wake, &pool.lock);
      pool.sleepers--;
    }
    seen = pool.generation;
    run_parts();
  }
  return NULL;
}

static void start_workers(int n)
{
  pool.workers = calloc((size_t)n, sizeof(pthread_t));
  if (!pool.workers)
    return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  for (int i = 0; i < n; i++) {
    if (pthread_create(&pool.workers[i], &attr, worker, NULL) != 0)
      break;
    pthread_detach(pool.workers[i]);
    pool.nworkers++;
  }
  pthread_attr_destroy(&attr);
}

int tensor_threads(void)
{
  static _Atomic int resolved;   /* 0 until first asked */
  int n = atomic_load_explicit(&resolved, memory_order_relaxed);
  if (n == 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = tensor_cfg()->threads ? tensor_cfg()->threads
        : cores > 0 ? (int)cores : 1;
    atomic_store_explicit(&resolved, n, memory_order_relaxed);
  }
  return n;
}

void tensor_parallel(int64_t n, int64_t grain, tensor_range_fn fn, void *ctx)
{
  if (n <= 0)
    return;
  int threads = tensor_threads();
  if (grain < 1)
    grain = 1;
  int64_t parts = n / grain;
  if (parts > threads)
    parts = threads;
  if (parts < 2 || in_job) {
    fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&pool.job_lock);
  pthread_mutex_lock(&pool.lock);
  if (!pool.started) {
    pool.started = true;
    start_workers(threads - 1);
  }
  if (pool.nworkers == 0) {   /* could not start threads: run serially */
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
    fn(ctx, 0, n);
    return;
  }
  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  pool.nparts = (int)parts;
  pool.next_part = 0;
  pool.pending = (int)parts;
  pool.generation++;
  if (pool.sleepers > 0)
    pthread_cond_broadcast(&pool.wake);
  run_parts();
  if (pool.pending > 0) {
    pthread_mutex_unlock(&pool.lock);
    spin_until(job_finished, 0);
    pthread_mutex_lock(&pool.lock);
    pool.caller_sleeps = true;
    while (pool.pending > 0)
      pthread_cond_wait(&pool.done, &pool.lock);
    pool.caller_sleeps = false;
  }
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.job_lock);
}
