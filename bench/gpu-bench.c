/*
** gpu-bench.c -- tc on a CUDA device (issue 13): W1 (gelu), W2 (softmax),
** W3 (layer_norm) and W7 (an Adam step in place) on device tensors, with
** W1p and W2p (the same GELU and softmax written from primitive ops, as
** users write them), W14b (cumsum along rows: the canonical scan order,
** a block per row), W15 (topk of 50 over 64 rows of 32000: chunked
** ranks) and W16 (an embedding's gradient: scatter_add of 8192 tokens'
** rows of 768 into a 50257-row table, in the CPU's order), each eager and
** compiled (tc_compile_set), beside the
** device's copy bandwidth measured by tc's own copy kernel (tc_copy_ of
** 64 MiB), the eager launch overhead per op, and NVRTC's compile time per
** kernel. In each mode a workload's result is first checked against the
** same ops run eagerly on the CPU: pointwise results bitwise, reductions
** bitwise too (the canonical order), so a wrong kernel is never timed.
**
**   gpu-bench [--scale S] [--reps N] [--only W1,W7,...]
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
  int64_t vocab;          /* W16's table rows */
  tc_tensor *t[4];
  long step;
} work;

static tc_tensor *w1(work *w) { return tc_gelu(w->t[0]); }
static tc_tensor *w2(work *w) { return tc_softmax(w->t[0], -1); }

/* W1p: tc-bench's GELU from 9 primitive ops (eager: 9 kernels). */
static tc_tensor *w1p(work *w)
{
  tc_tensor *x = w->t[0];
  size_t mark = tc_scope_begin();
  tc_tensor *x3 = tc_mul(tc_mul(x, x), x);
  tc_tensor *u = tc_mul_scalar(tc_add(x, tc_mul_scalar(x3, 0.044715)),
                               0.7978845608028654);
  tc_tensor *y = tc_keep(ck(tc_mul(tc_mul_scalar(x, 0.5),
                                   tc_add_scalar(tc_tanh(u), 1.0)), "W1p"));
  tc_scope_end(mark);
  return y;
}

/* W2p: tc-bench's softmax from primitives, as users write it. */
static tc_tensor *w2p(work *w)
{
  tc_tensor *x = w->t[0];
  size_t mark = tc_scope_begin();
  tc_tensor *e = tc_exp(tc_sub(x, tc_max(x, -1, true)));
  tc_tensor *y = tc_keep(ck(tc_div(e, tc_sum(e, -1, true)), "W2p"));
  tc_scope_end(mark);
  return y;
}
/* W14b: cumsum along the rows (tc-bench's W14b on W2's 4096x4096; each row
** 16 segments of the scan order: a block per row on the device). */
static tc_tensor *w14b(work *w) { return tc_cumsum(w->t[0], -1); }
/* W15: top-k sampling's first step, the 50 largest logits of each of 64
** rows of a 32000-token vocabulary (on the device: chunks of the row, only
** their candidates ranked); the indices, the values being a gather. */
static tc_tensor *w15(work *w)
{
  tc_tensor *idx = NULL;
  if (tc_topk(w->t[0], 50, -1, true, true, NULL, &idx) < 0)
    die("W15 topk");
  return idx;
}
/* W16: the gradient of an embedding lookup, as autograd makes it
** (derivatives.c: take_grad): each token's row of g (rows x cols) added
** into its row of a zero table (vocab x cols), the tokens expanded along
** the rows (on the device: a thread per column, tokens in order). Its
** traffic: g, the index and the table's rows it adds into, read and
** written (20 bytes an element; the table's first copy not counted). */
static tc_tensor *w16(work *w)
{
  return tc_scatter_add(w->t[2], 0, w->t[1], w->t[0]);
}

/* W16's inputs: g, the expanded tokens (a uniform times vocab - 1,
** truncated: in [0, vocab - 1)), zeros. */
static void w16_inputs(work *w, uint64_t seed)
{
  size_t mark = tc_scope_begin();
  int64_t shape[2] = { w->rows, w->cols };
  w->t[0] = tc_keep(ck(tc_randn(TC_F32, 2, shape, seed), "randn"));
  tc_tensor *u = ck(tc_rand(TC_F32, TC_SHAPE(w->rows, 1), seed + 1),
                    "rand");
  tc_tensor *tok = ck(tc_cast(tc_mul_scalar(u, (double)(w->vocab - 1)),
                              TC_I64), "tokens");
  w->t[1] = tc_keep(ck(tc_contiguous(tc_expand(tok, 2, shape)), "expand"));
  w->t[2] = tc_keep(ck(tc_zeros(TC_F32, TC_SHAPE(w->vocab, w->cols)),
                       "zeros"));
  tc_scope_end(mark);
}

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

static const workload workloads[] = {   /* issue 13's four first */
  { "W1", "gelu (tanh) 16M f32", w1, 1, false, 8 },
  { "W2", "softmax 4096x4096 f32 dim -1", w2, 1, true, 8 },
  { "W3", "layer_norm 8192x1024 f32 +g,b", w3, 3, true, 8 },
  { "W7", "Adam step 16M f32 in place", w7, 4, false, 28 },
  { "W1p", "gelu from 9 primitive ops 16M", w1p, 1, false, 8 },
  { "W2p", "softmax 4096x4096 from primitives", w2p, 1, true, 8 },
  { "W14b", "cumsum 4096x4096 f32 dim -1", w14b, 1, true, 8 },
  { "W15", "topk 50 of 64x32000 f32 dim -1", w15, 1, true, 4 },
  { "W16", "scatter_add 8192x768 to 50257x768", w16, 3, true, 20 },
};

static void make_inputs(const workload *wl, work *w, uint64_t seed)
{
  if (!strcmp(wl->id, "W16")) {
    w16_inputs(w, seed);
    return;
  }
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

/* The result of `iters` iterations of wl (the last one's, or W7's p, g, m
** and v after them): on the CPU eagerly, then on the device in the mode
** asked for. Must be the same bytes. */
static bool paired(const workload *wl, work *dev, work *cpu, int iters,
                   bool compiled)
{
  tc_tensor *a = NULL, *b = NULL;
  tc_compile_set(false);
  for (int i = 0; i < iters; i++) {
    tc_release(b);
    b = wl->iter(cpu);
  }
  tc_compile_set(compiled);
  for (int i = 0; i < iters; i++) {   /* each run realized, as timed */
    tc_release(a);
    a = wl->iter(dev);
    if (a && tc_realize(a) < 0)
      die(wl->id);
    sync_or_die();
  }
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
    tc_tensor *out = wl->iter(w);   /* realized: compiled, a result
                                        released unread is never computed */
    if (out && tc_realize(out) < 0)
      die(wl->id);
    tc_release(out);
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

/* Is id one of the comma-separated ids in list? */
static bool listed(const char *list, const char *id)
{
  size_t n = strlen(id);
  for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
    if (strncmp(p, id, n) == 0 && (p[n] == ',' || p[n] == '\0'))
      return true;
  return false;
}

/* -- One workload in one mode ---------------------------------------------- */

typedef struct {
  bool ok;               /* the device's result = the CPU's, bitwise */
  double s;              /* median seconds an iteration */
  double launches;       /* kernel launches an iteration (timed runs) */
  uint64_t kernels;      /* kernels compiled for the device's first runs */
  double compile_ms;     /* their render + NVRTC time */
  uint64_t regions, regions_compiled;   /* during the timed runs */
} figures;

/* Fresh inputs (the same seed on both devices); the first runs checked
** against the CPU's (compiled: enough for the regions to be hot and
** compiled first, TC_HOT runs); then the device's median. */
static figures run_mode(const workload *wl, const work *size, uint64_t seed,
                        bool compiled, int reps)
{
  work dev = *size, cpu = *size;
  make_inputs(wl, &dev, seed);
  if (tc_set_default_device("cpu") < 0)
    die("tc_set_default_device");
  make_inputs(wl, &cpu, seed);
  tc_set_default_device("cuda");
  figures f = { 0 };
  tc_stats a, b;
  tc_stats_get(&a);
  f.ok = paired(wl, &dev, &cpu, compiled ? 4 : 1, compiled);
  sync_or_die();
  tc_stats_get(&b);
  f.kernels = b.kernels_compiled - a.kernels_compiled;
  f.compile_ms = b.compile_ms - a.compile_ms;
  tc_stats_get(&a);
  f.s = median_seconds(wl, &dev, reps);
  tc_stats_get(&b);
  f.launches = (double)(b.kernels_launched - a.kernels_launched) / reps;
  f.regions = b.regions - a.regions;
  f.regions_compiled = b.regions_compiled - a.regions_compiled;
  tc_compile_set(false);
  free_inputs(&dev);
  free_inputs(&cpu);
  return f;
}

int main(int argc, char **argv)
{
  int64_t scale = 1;
  int reps = 11;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--scale") && i + 1 < argc)
      scale = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: gpu-bench [--scale S] [--reps N] "
              "[--only W1,W7,...]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);   /* a timeout keeps the lines so far */
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

  printf("launch overhead: %.2f us per eager op (tc_add_scalar_ on 1 "
         "element, 2000 ops)\n", launch_us(2000));
  printf("%-3s %-34s %-8s %10s %11s %13s  %-16s %s\n", "id", "workload",
         "mode", "median", "achieved", "of copy", "check",
         "launches/it, compiles");
  int bad = 0;
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
    for (int compiled = 0; compiled < 2; compiled++) {
      const workload *wl = &workloads[i];
      if (only && !listed(only, wl->id))
        continue;
      bool ln = !strcmp(wl->id, "W3"), tk = !strcmp(wl->id, "W15");
      bool sa = !strcmp(wl->id, "W16");
      work size = { .n = m16 / scale,
                    .rows = (ln || sa ? 8192 : tk ? 64 : 4096) / scale,
                    .cols = ln ? 1024 : tk ? 32000 : sa ? 768 : 4096,
                    .vocab = 50257 / scale };
      if (sa && size.rows < 40)   /* batches of 16 and a tail */
        size.rows = 40;
      if (size.vocab < 16)
        size.vocab = 16;
      if (tk && scale > 1)   /* rows long enough to be cut into chunks */
        size.cols = 32000 / scale > 1024 ? 32000 / scale : 1024;
      if (size.rows < 1)
        size.rows = 1;
      figures f = run_mode(wl, &size, 100 + 10 * i, compiled, reps);
      double elems = wl->rows ? (double)size.rows * (double)size.cols
                              : (double)size.n;
      double gbs = elems * wl->bytes_per_elem / f.s / 1e9;
      printf("%-3s %-34s %-8s %7.3f ms %6.1f GB/s %5.0f%% of copy  %-16s "
             "%.1f, %llu kernels compiled (~%.1f ms each)",
             wl->id, wl->what, compiled ? "compiled" : "eager", f.s * 1e3,
             gbs, 100 * gbs / floor_gbs,
             f.ok ? "= CPU bitwise" : "DIFFERS FROM CPU", f.launches,
             (unsigned long long)f.kernels,
             f.kernels ? f.compile_ms / (double)f.kernels : 0.0);
      if (compiled)
        printf(", regions %llu/%llu run compiled",
               (unsigned long long)f.regions_compiled,
               (unsigned long long)f.regions);
      putchar('\n');
      bad += !f.ok;
    }
  return bad ? 1 : 0;
}
