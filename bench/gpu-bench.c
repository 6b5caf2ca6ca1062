/*
** gpu-bench.c -- tc on a CUDA device (issue 13): W1 (gelu), W2 (softmax),
** W3 (layer_norm) and W7 (an Adam step in place) on device tensors, beside
** the device's copy bandwidth measured by tc's own copy kernel (tc_copy_
** of 64 MiB), the eager launch overhead per op, and NVRTC's compile time
** per kernel. Every workload's result is first checked against the same
** ops on the CPU: pointwise results bitwise, reductions bitwise too (the
** canonical order), so a wrong kernel is never timed.
**
**   gpu-bench [--scale S] [--reps N]
**
** --scale divides the sizes (the fake driver of tests/jit_cuda/fake runs
** kernels on the host: CI runs this program with --scale 4096). Times are
** medians of N runs, each ended by tc_sync() (which waits for the device).
** Needs a device: exits 2 with tc's reason when there is none.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tc.h"

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
  fprintf(stderr, "gpu-bench: %s: %s\n", what, tc_last_error());
  exit(1);
}

static tc_tensor *ck(tc_tensor *t, const char *what)
{
  if (!t)
    die(what);
  return t;
}

static void sync_or_die(void)
{
  if (tc_sync() < 0)
    die("tc_sync");
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* -- The workloads --------------------------------------------------------------
** Each builds its inputs on the current default device and runs one
** iteration, returning its result (or NULL for W7, which updates in
** place). */

typedef struct {
  int64_t n, rows, cols;  /* sizes after --scale */
  tc_tensor *t[4];
  long step;
} work;

static tc_tensor *w1(work *w) { return tc_gelu(w->t[0]); }
static tc_tensor *w2(work *w) { return tc_softmax(w->t[0], -1); }
static tc_tensor *w3(work *w)
{
  return tc_layer_norm(w->t[0], w->t[1], w->t[2], 1e-5);
}

/* tc-bench's W7: m, v and p updated in place, temporaries in a scope. */
static tc_tensor *w7(work *w)
{
  tc_tensor *p = w->t[0], *g = w->t[1], *m = w->t[2], *v = w->t[3];
  const double b1 = 0.9, b2 = 0.999, lr = 1e-3, eps = 1e-8;
  long t = ++w->step;
  size_t mark = tc_scope_begin();
  int rc = tc_mul_scalar_(m, b1);
  rc |= tc_add_(m, ck(tc_mul_scalar(g, 1.0 - b1), "W7"));
  rc |= tc_mul_scalar_(v, b2);
  tc_tensor *gg = ck(tc_mul(g, g), "W7");
  rc |= tc_mul_scalar_(gg, 1.0 - b2);
  rc |= tc_add_(v, gg);
  tc_tensor *mhat = ck(tc_div_scalar(m, 1.0 - pow(b1, (double)t)), "W7");
  tc_tensor *vhat = ck(tc_div_scalar(v, 1.0 - pow(b2, (double)t)), "W7");
  tc_tensor *den = ck(tc_add_scalar(ck(tc_sqrt(vhat), "W7"), eps), "W7");
  tc_tensor *upd = ck(tc_mul_scalar(ck(tc_div(mhat, den), "W7"), lr), "W7");
  rc |= tc_sub_(p, upd);
  tc_scope_end(mark);
  if (rc)
    die("W7 in-place update");
  return NULL;
}

typedef struct {
  const char *id, *what;
  tc_tensor *(*iter)(work *);
  int ninputs;
  bool rows;             /* inputs are rows x cols, else n */
  double bytes_per_elem; /* memory traffic per element (the floor) */
} workload;

static const workload workloads[] = {
  { "W1", "gelu (tanh) 16M f32", w1, 1, false, 8 },
  { "W2", "softmax 4096x4096 f32 dim -1", w2, 1, true, 8 },
  { "W3", "layer_norm 8192x1024 f32 +g,b", w3, 3, true, 8 },
  { "W7", "Adam step 16M f32 in place", w7, 4, false, 28 },
};

static void make_inputs(const workload *wl, work *w, uint64_t seed)
{
  int64_t shape[2] = { w->rows, w->cols };
  for (int i = 0; i < wl->ninputs; i++) {
    if (wl->rows && i > 0)   /* layer_norm's gamma and beta */
      w->t[i] = ck(tc_randn(TC_F32, 1, &w->cols, seed + (uint64_t)i), "randn");
    else if (wl->rows)
      w->t[i] = ck(tc_randn(TC_F32, 2, shape, seed + (uint64_t)i), "randn");
    else if (i == 3)         /* Adam's v >= 0 */
      w->t[i] = ck(tc_rand(TC_F32, 1, &w->n, seed + (uint64_t)i), "rand");
    else
      w->t[i] = ck(tc_randn(TC_F32, 1, &w->n, seed + (uint64_t)i), "randn");
  }
}

static void free_inputs(work *w)
{
  for (int i = 0; i < 4; i++) {
    tc_release(w->t[i]);
    w->t[i] = NULL;
  }
}

/* The bytes of t (any device) in a malloc'd buffer. */
static char *host_bytes(tc_tensor *t, size_t *n)
{
  *n = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  char *b = malloc(*n + 1);
  if (!b || tc_copy_to(t, b, *n) < 0)
    die("tc_copy_to");
  return b;
}

/* Run one iteration on the device and on the CPU from the same inputs;
** the results (W7: the updated p, m, v) must be the same bytes. */
static bool check(const workload *wl, work *dev, work *cpu)
{
  tc_tensor *a = wl->iter(dev), *b = wl->iter(cpu);
  tc_tensor *da[4] = { a }, *db[4] = { b };
  int n = 1;
  if (!a) {   /* in place */
    for (int i = 0; i < 4; i++) {
      da[i] = dev->t[i];
      db[i] = cpu->t[i];
    }
    n = 4;
  }
  bool same = true;
  for (int i = 0; i < n; i++) {
    size_t na, nb;
    char *x = host_bytes(da[i], &na), *y = host_bytes(db[i], &nb);
    same &= na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
  }
  tc_release(a);
  tc_release(b);
  return same;
}

static double median_seconds(const workload *wl, work *w, int reps)
{
  double t[64];
  for (int r = 0; r < reps; r++) {
    sync_or_die();
    double t0 = now();
    tc_release(wl->iter(w));
    sync_or_die();
    t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  return t[reps / 2];
}

/* -- The floor and the overheads -------------------------------------------------- */

/* tc's own device copy (tc_copy_, one kernel): GB/s read + written. */
static double copy_gbs(int64_t n, int reps)
{
  tc_tensor *src = ck(tc_randn(TC_F32, 1, &n, 7), "randn");
  tc_tensor *dst = ck(tc_empty(TC_F32, 1, &n), "empty");
  double t[64];
  for (int r = 0; r < reps + 1; r++) {
    sync_or_die();
    double t0 = now();
    if (tc_copy_(dst, src) < 0)
      die("tc_copy_");
    sync_or_die();
    t[r > 0 ? r - 1 : 0] = now() - t0;   /* the first run compiles */
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  tc_release(src);
  tc_release(dst);
  return 2.0 * (double)n * 4 / t[reps / 2] / 1e9;
}

/* Microseconds per eager op on a 1-element tensor, waited for at the end
** (launches queue: this is the host's cost per op). */
static double launch_us(int ops)
{
  tc_tensor *x = ck(tc_zeros(TC_F32, TC_SHAPE(1)), "zeros");
  if (tc_add_scalar_(x, 1.0) < 0)   /* compiles the kernel first */
    die("tc_add_scalar_");
  sync_or_die();
  double t0 = now();
  for (int i = 0; i < ops; i++)
    if (tc_add_scalar_(x, 1.0) < 0)
      die("tc_add_scalar_");
  sync_or_die();
  double us = (now() - t0) / ops * 1e6;
  double v = 0;
  if (tc_item(x, &v) < 0 || v != (double)ops + 1)
    die("launch loop: wrong count");
  tc_release(x);
  return us;
}

int main(int argc, char **argv)
{
  int64_t scale = 1;
  int reps = 11;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--scale") && i + 1 < argc)
      scale = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: gpu-bench [--scale S] [--reps N]\n");
      return 2;
    }
  }
  if (scale < 1 || reps < 1 || reps > 64) {
    fprintf(stderr, "gpu-bench: --scale >= 1, --reps 1..64\n");
    return 2;
  }
  if (!tc_cuda_available()) {
    tc_tensor *t = tc_zeros(TC_F32, TC_SHAPE(1)), *d = tc_to(t, "cuda");
    fprintf(stderr, "gpu-bench: no CUDA device: %s\n",
            d ? "?" : tc_last_error());
    return 2;
  }
  if (tc_set_default_device("cuda") < 0)
    die("tc_set_default_device");

  const int64_t m16 = 16l << 20;
  double floor_gbs = copy_gbs(m16 / scale, reps);
  printf("gpu-bench: device copy (tc_copy_, %lld f32): %.2f GB/s; "
         "sizes / %lld, medians of %d runs\n",
         (long long)(m16 / scale), floor_gbs, (long long)scale, reps);

  tc_stats st0, st1;
  int bad = 0;
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
    const workload *wl = &workloads[i];
    bool ln = !strcmp(wl->id, "W3");
    work dev = { .n = m16 / scale, .rows = (ln ? 8192 : 4096) / scale,
                 .cols = ln ? 1024 : 4096 };
    if (dev.rows < 1)
      dev.rows = 1;
    work cpu = dev;
    make_inputs(wl, &dev, 100 + 10 * i);
    if (tc_set_default_device("cpu") < 0)
      die("tc_set_default_device");
    make_inputs(wl, &cpu, 100 + 10 * i);
    tc_set_default_device("cuda");
    tc_stats_reset();
    tc_stats_get(&st0);
    double t0 = now();
    bool ok = check(wl, &dev, &cpu);
    sync_or_die();
    double first = now() - t0;
    tc_stats_get(&st1);
    uint64_t compiled = st1.kernels_compiled - st0.kernels_compiled;
    double s = median_seconds(wl, &dev, reps);
    double elems = wl->rows ? (double)dev.rows * (double)dev.cols
                            : (double)dev.n;
    double gbs = elems * wl->bytes_per_elem / s / 1e9;
    /* the first run also ran the CPU's iteration: about one more */
    double per_compile = compiled ? (first - 2 * s) / (double)compiled : 0;
    printf("%-3s %-32s %10.3f ms %8.2f GB/s %5.0f%% of copy  %s  "
           "%llu kernels compiled, ~%.1f ms each\n",
           wl->id, wl->what, s * 1e3, gbs, 100 * gbs / floor_gbs,
           ok ? "= CPU bitwise" : "DIFFERS FROM CPU",
           (unsigned long long)compiled, per_compile * 1e3);
    bad += !ok;
    free_inputs(&dev);
    free_inputs(&cpu);
  }
  printf("launch overhead: %.2f us per eager op (tc_add_scalar_ on 1 "
         "element, 2000 ops)\n", launch_us(2000));
  return bad ? 1 : 0;
}
