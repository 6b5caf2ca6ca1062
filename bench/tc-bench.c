/*
** tc-bench -- the benchmark harness of tc.
**
** Measures this machine's own memory-bandwidth floor (a STREAM-like triad with
** the same thread count as tc) in the same run, then times a fixed set of
** workloads through tc's public API and prints each one's median time next to
** the time the memory system alone would need for the bytes it must move.
**
** Every tc_ call is checked: a NULL (or -1) result stops the bench with
** tc_last_error()'s message, so no figure is ever printed from a failed op.
** Each workload's result is also checked against a reference computed here in
** double precision, once in each mode, so a broken kernel cannot look fast.
**
** Uses only include/tc.h, libc, libm and pthreads, and, where the build
** found OpenBLAS, its cblas for the "OpenBLAS direct" figures of W6, W6m
** and W10 (the same matmuls called directly). See bench/README.md.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tc.h"

#include "llama_model.h" /* W12 (examples/llama_model.c) */

#ifdef TC_HAVE_CBLAS
#include <cblas.h>
#endif

#define MB 1e6
#define GB 1e9
#define M16 (16L * 1024 * 1024)

/* -- Options ---------------------------------------------------------------- */

static struct {
  bool quick;
  bool compiled;
  bool keep_going;
  const char *only;      /* comma list of workload ids, or NULL */
  const char *json_path; /* or NULL */
  int reps;              /* timed samples per workload */
  int warmup;            /* untimed runs before them */
  int warmup_compiled;   /* untimed runs before the compiled samples */
  long overhead_loop;    /* W5 ops per sample */
  long triad_n;          /* doubles per triad array */
  int triad_reps;
} opt;

/* -- Failure handling ------------------------------------------------------- */

static jmp_buf *fail_jmp; /* set while a workload runs under --keep-going */
static char fail_msg[768];

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
  va_end(ap);
  if (fail_jmp) longjmp(*fail_jmp, 1);
  fflush(stdout);
  fprintf(stderr, "tc-bench: FAILED: %s\n", fail_msg);
  exit(1);
}

static const char *errmsg(void) {
  const char *e = tc_last_error();
  return e ? e : "(tc_last_error() gave no message)";
}

static tc_tensor *ck_(tc_tensor *t, const char *expr, int line) {
  if (!t) fail("line %d: %s returned NULL: %s", line, expr, errmsg());
  return t;
}
static void cki_(int rc, const char *expr, int line) {
  if (rc != 0) fail("line %d: %s returned %d: %s", line, expr, rc, errmsg());
}
static void *ckp_(void *p, const char *expr, int line) {
  if (!p) fail("line %d: %s returned NULL: %s", line, expr, errmsg());
  return p;
}
#define CK(e) ck_((e), #e, __LINE__)
#define CKI(e) cki_((e), #e, __LINE__)
#define CKP(e) ckp_((e), #e, __LINE__)

/* -- Small helpers ---------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double *s = malloc((size_t)n * sizeof *s);
  if (!s) fail("out of memory");
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = (n % 2) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

/* How busy the machine was: CPU seconds used by everything (from /proc/stat)
** and by this process (getrusage), and stolen by the hypervisor. */
typedef struct {
  double wall, all_busy, steal, self;
  bool ok;
} cpu_snap;

static cpu_snap cpu_snap_take(void) {
  cpu_snap c = {.wall = now_s()};
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    c.self = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec * 1e-6;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return c;
  unsigned long long v[10] = {0};
  int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]);
  fclose(f);
  if (got < 8) return c;
  double hz = (double)sysconf(_SC_CLK_TCK);
  /* user nice system idle iowait irq softirq steal (guest counted in user) */
  c.all_busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / hz;
  c.steal = (double)v[7] / hz;
  c.ok = true;
  return c;
}

/* Share of the machine's CPU capacity used by other processes (and stolen)
** between two snapshots; negative when unknown. */
static double cpu_others(cpu_snap a, cpu_snap b, double *steal) {
  double cap = (b.wall - a.wall) * (double)sysconf(_SC_NPROCESSORS_ONLN);
  if (!a.ok || !b.ok || cap <= 0) return -1;
  double others = (b.all_busy - a.all_busy) - (b.self - a.self);
  if (steal) *steal = (b.steal - a.steal) / cap;
  return others < 0 ? 0 : others / cap;
}

static bool close_enough(double got, double ref, double atol, double rtol) {
  return isfinite(got) && fabs(got - ref) <= atol + rtol * fabs(ref);
}

/* Checks read and write through raw pointers. tc_data keeps a tensor's
** storage eager (ops that touch it run at once) while the handle the pointer
** came from lives, so checks take it through an alias handle, released after
** the check: the timed loops stay fused. */
static tc_tensor *aliases[64];
static int naliases;

static float *f32_data(tc_tensor *t) {
  if (tc_dtype_of(t) != TC_F32) fail("expected an f32 tensor, got %s", tc_dtype_name(tc_dtype_of(t)));
  if (naliases == 64) fail("too many raw pointers in one check");
  tc_tensor *a = aliases[naliases++] = CK(tc_to(t, "cpu"));
  return (float *)CKP(tc_data(a));
}


/* -- The bandwidth floor: STREAM triad with pthreads ------------------------ */

enum { MODE_TRIAD, MODE_INIT, MODE_TRIAD_NT };

typedef struct {
  double *a, *b, *c;
  long n;
  double s;
  int nth;
  volatile int quit;
  volatile int mode; /* MODE_* */
  pthread_barrier_t start, done;
} triad_pool;

typedef struct {
  triad_pool *p;
  int id;
} triad_arg;

static void *triad_worker(void *argp) {
  triad_arg *w = argp;
  triad_pool *p = w->p;
  for (;;) {
    pthread_barrier_wait(&p->start);
    if (p->quit) break;
    /* chunk bounds on 64-byte lines, so each thread's stores are aligned */
    long lo = (p->n * w->id / p->nth) & ~7L, hi = w->id + 1 == p->nth ? p->n : (p->n * (w->id + 1) / p->nth) & ~7L;
    double *restrict a = p->a, *restrict b = p->b, *restrict c = p->c;
    if (p->mode == MODE_INIT) {
      for (long i = lo; i < hi; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
      }
    } else if (p->mode == MODE_TRIAD_NT) {
#if defined(__SSE2__)
      const __m128d s = _mm_set1_pd(p->s);
      long i = lo;
      for (; i + 2 <= hi; i += 2)
        _mm_stream_pd(a + i, _mm_add_pd(_mm_load_pd(b + i), _mm_mul_pd(s, _mm_load_pd(c + i))));
      for (; i < hi; i++) a[i] = b[i] + p->s * c[i];
      _mm_sfence();
#endif
    } else {
      const double s = p->s;
      for (long i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
    }
    pthread_barrier_wait(&p->done);
  }
  return NULL;
}

static double *triad_alloc(long n) {
  void *p = NULL;
  size_t bytes = (size_t)n * sizeof(double);
  if (posix_memalign(&p, 2u << 20, bytes) != 0) fail("cannot allocate %zu bytes for the triad", bytes);
  /* tc's allocator asks for huge pages on large blocks; ask here too so the
  ** floor is not handicapped by TLB misses the library does not pay. */
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

/* One pass (MODE_*) over all threads; returns seconds. */
static double triad_pass(triad_pool *p, int mode) {
  p->mode = mode;
  double t0 = now_s();
  pthread_barrier_wait(&p->start);
  pthread_barrier_wait(&p->done);
  return now_s() - t0;
}

/* Median GB/s (STREAM convention: 24 bytes per element) over reps passes.
** nt: with non-temporal (streaming) stores, which skip the read-for-ownership
** of a; informational only, the floor is the plain triad. */
static double triad_gbs(double *a, double *b, double *c, long n, int nth, int reps, bool prefault, bool nt) {
  triad_pool p = {.a = a, .b = b, .c = c, .n = n, .s = 3.0, .nth = nth};
  pthread_t *th = calloc((size_t)nth, sizeof *th);
  triad_arg *args = calloc((size_t)nth, sizeof *args);
  double *gbs = calloc((size_t)reps, sizeof *gbs);
  if (!th || !args || !gbs) fail("out of memory");
  pthread_barrier_init(&p.start, NULL, (unsigned)nth + 1);
  pthread_barrier_init(&p.done, NULL, (unsigned)nth + 1);
  for (int i = 0; i < nth; i++) {
    args[i] = (triad_arg){&p, i};
    if (pthread_create(&th[i], NULL, triad_worker, &args[i]) != 0) fail("pthread_create failed");
  }
  int mode = nt ? MODE_TRIAD_NT : MODE_TRIAD;
  if (prefault) triad_pass(&p, MODE_INIT);
  triad_pass(&p, mode); /* warm-up */
  for (int r = 0; r < reps; r++) gbs[r] = 24.0 * (double)n / triad_pass(&p, mode) / GB;
  p.quit = 1;
  pthread_barrier_wait(&p.start);
  for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&p.start);
  pthread_barrier_destroy(&p.done);
  /* The triad must really have run: a = b + 3c = 1 + 6. */
  for (long i = 0; i < n; i += n / 97 + 1)
    if (a[i] != 7.0) fail("triad produced a[%ld] = %g, expected 7", i, a[i]);
  double m = median(gbs, reps);
  free(gbs);
  free(args);
  free(th);
  return m;
}

/* -- Workloads -------------------------------------------------------------- */

typedef struct {
  bool ok;
  int n;
  double med, min, max;   /* seconds per iteration */
  double samples[64];
  uint64_t pool_misses;   /* during the timed samples */
  uint64_t regions, regions_compiled, kernels_compiled; /* during timed samples */
  double launches;        /* kernel launches per iteration (timed samples) */
  double others, steal;   /* CPU share used by other processes / stolen, timed samples */
} result;

typedef struct wl wl;
struct wl {
  const char *id, *name;
  void (*setup)(wl *);
  void (*iter)(wl *);  /* one unit of timed work: computes, reads/realizes, releases */
  void (*check)(wl *); /* fail()s when the result is wrong */
  long inner;          /* iterations per timed sample (W5: many) */
  double bytes;        /* minimum bytes moved per iteration; 0: no floor */
  double flops;        /* flops per iteration; 0: none */
  tc_tensor *t[8];     /* inputs, released after the workload */
  long step;           /* W7's Adam step counter */
  bool selected, failed;
  char err[768];
  result eager, comp;
  struct {
    uint64_t kernels;     /* kernels compiled for the compiled column */
    double ms;            /* their compile times summed (cold, excluded above) */
    double wall_ms;       /* the wall time that compiling them added */
  } cold;
};

/* Realize and release an op's result, as a program that uses it would. */
static void consume(tc_tensor *out) {
  CKI(tc_realize(out));
  tc_release(out);
}

/* Samples of indices spread over [0, n). */
#define NSAMPLE 4096
static long sample_idx(long k, long n) { return (long)(((unsigned long long)k * 2654435761ull) % (unsigned long long)n); }

/* W1: tanh-GELU over 16M f32. */
static double gelu_ref(double x) {
  const double k = sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static void w1_setup(wl *w) { w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(M16), 1)); }
static void w1_iter(wl *w) { consume(CK(tc_gelu(w->t[0]))); }
static void w1_check(wl *w) {
  static const float known[] = {-6.0f, -3.0f, -1.0f, -0.5f, 0.0f, 0.25f, 0.5f, 1.0f, 2.0f, 3.0f, 8.0f};
  size_t nk = sizeof known / sizeof known[0];
  tc_tensor *k = CK(tc_from_data(TC_F32, TC_SHAPE((int64_t)nk), known, sizeof known));
  tc_tensor *gk = CK(tc_gelu(k));
  float *g = f32_data(gk);
  for (size_t i = 0; i < nk; i++)
    if (!close_enough(g[i], gelu_ref(known[i]), 1e-5, 1e-4))
      fail("gelu(%g) = %.9g, expected %.9g", known[i], g[i], gelu_ref(known[i]));
  tc_release(gk);
  tc_release(k);
  tc_tensor *out = CK(tc_gelu(w->t[0]));
  if (tc_numel(out) != M16) fail("gelu: %lld elements, expected %ld", (long long)tc_numel(out), M16);
  float *x = f32_data(w->t[0]), *y = f32_data(out);
  for (long s = 0; s < NSAMPLE; s++) {
    long i = sample_idx(s, M16);
    if (!close_enough(y[i], gelu_ref(x[i]), 1e-5, 1e-4))
      fail("gelu: element %ld: got %.9g for x = %.9g, expected %.9g", i, y[i], x[i], gelu_ref(x[i]));
  }
  tc_release(out);
}

/* W0: one large memory-bound elementwise op: c = a + b over 16M f32. */
static void w0_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(M16), 11));
  w->t[1] = CK(tc_randn(TC_F32, TC_SHAPE(M16), 12));
}
static void w0_iter(wl *w) { consume(CK(tc_add(w->t[0], w->t[1]))); }
static void w0_check(wl *w) {
  tc_tensor *out = CK(tc_add(w->t[0], w->t[1]));
  float *a = f32_data(w->t[0]), *b = f32_data(w->t[1]), *y = f32_data(out);
  for (long s = 0; s < NSAMPLE; s++) {
    long i = sample_idx(s, M16);
    if (y[i] != a[i] + b[i]) fail("add: element %ld: got %.9g, expected %.9g", i, y[i], a[i] + b[i]);
  }
  tc_release(out);
}

/* W1p: the same GELU written from primitive ops, as a user without tc_gelu
** would: eager runs 9 ops (9 passes over memory), compiled fuses them. */
static tc_tensor *gelu_prims(tc_tensor *x) {
  size_t mark = tc_scope_begin();
  tc_tensor *x3 = CK(tc_mul(CK(tc_mul(x, x)), x));
  tc_tensor *u = CK(tc_mul_scalar(CK(tc_add(x, CK(tc_mul_scalar(x3, 0.044715)))), 0.7978845608028654));
  tc_tensor *y = tc_keep(CK(tc_mul(CK(tc_mul_scalar(x, 0.5)), CK(tc_add_scalar(CK(tc_tanh(u)), 1.0)))));
  tc_scope_end(mark);
  return y;
}
static void w1p_iter(wl *w) { consume(gelu_prims(w->t[0])); }
static void w1p_check(wl *w) {
  tc_tensor *out = gelu_prims(w->t[0]);
  float *x = f32_data(w->t[0]), *y = f32_data(out);
  for (long s = 0; s < NSAMPLE; s++) {
    long i = sample_idx(s, M16);
    if (!close_enough(y[i], gelu_ref(x[i]), 1e-5, 1e-4))
      fail("gelu (primitives): element %ld: got %.9g for x = %.9g, expected %.9g", i, y[i], x[i],
           gelu_ref(x[i]));
  }
  tc_release(out);
}

/* W2: row softmax 4096x4096 f32. */
static void w2_setup(wl *w) { w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(4096, 4096), 2)); }
static void w2_iter(wl *w) { consume(CK(tc_softmax(w->t[0], -1))); }
static void softmax_check_out(wl *w, tc_tensor *out) {
  if (tc_ndim(out) != 2 || tc_size(out, 0) != 4096 || tc_size(out, 1) != 4096) fail("softmax: wrong shape");
  float *x = f32_data(w->t[0]), *y = f32_data(out);
  for (long r = 0; r < 4096; r++) {
    double s = 0;
    for (long j = 0; j < 4096; j++) s += y[r * 4096 + j];
    if (!close_enough(s, 1.0, 1e-4, 0)) fail("softmax: row %ld sums to %.9g", r, s);
  }
  static const long rows[] = {0, 1, 2047, 4095};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    const float *xr = x + rows[k] * 4096;
    const float *yr = y + rows[k] * 4096;
    double mx = -INFINITY, z = 0;
    for (long j = 0; j < 4096; j++) mx = fmax(mx, xr[j]);
    for (long j = 0; j < 4096; j++) z += exp(xr[j] - mx);
    for (long j = 0; j < 4096; j++) {
      double ref = exp(xr[j] - mx) / z;
      if (!close_enough(yr[j], ref, 1e-8, 1e-4))
        fail("softmax: [%ld,%ld] = %.9g, expected %.9g", rows[k], j, yr[j], ref);
    }
  }
  tc_release(out);
}
static void w2_check(wl *w) { softmax_check_out(w, CK(tc_softmax(w->t[0], -1))); }

/* W2p: the same softmax written from primitives, as users write it. */
static tc_tensor *softmax_prims(tc_tensor *x) {
  size_t mark = tc_scope_begin();
  tc_tensor *e = CK(tc_exp(CK(tc_sub(x, CK(tc_max(x, -1, true))))));
  tc_tensor *y = tc_keep(CK(tc_div(e, CK(tc_sum(e, -1, true)))));
  tc_scope_end(mark);
  return y;
}
static void w2p_iter(wl *w) { consume(softmax_prims(w->t[0])); }
static void w2p_check(wl *w) { softmax_check_out(w, softmax_prims(w->t[0])); }

/* W3: layer_norm 8192x1024 f32 with gamma and beta. */
static void w3_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(8192, 1024), 3));
  w->t[1] = CK(tc_randn(TC_F32, TC_SHAPE(1024), 4));
  w->t[2] = CK(tc_randn(TC_F32, TC_SHAPE(1024), 5));
}
static void w8_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(8192, 1024), 3));
  w->t[1] = CK(tc_randn(TC_F32, TC_SHAPE(1024), 4));
}
static void w3_iter(wl *w) { consume(CK(tc_layer_norm(w->t[0], w->t[1], w->t[2], 1e-5))); }
static void layer_norm_check_out(wl *w, tc_tensor *out) {
  if (tc_ndim(out) != 2 || tc_size(out, 0) != 8192 || tc_size(out, 1) != 1024) fail("layer_norm: wrong shape");
  float *x = f32_data(w->t[0]), *g = f32_data(w->t[1]), *b = f32_data(w->t[2]), *y = f32_data(out);
  static const long rows[] = {0, 1, 777, 4096, 8191};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    const float *xr = x + rows[k] * 1024, *yr = y + rows[k] * 1024;
    double mean = 0, var = 0;
    for (long j = 0; j < 1024; j++) mean += xr[j];
    mean /= 1024;
    for (long j = 0; j < 1024; j++) var += (xr[j] - mean) * (xr[j] - mean);
    var /= 1024;
    double inv = 1.0 / sqrt(var + 1e-5);
    for (long j = 0; j < 1024; j++) {
      double ref = (xr[j] - mean) * inv * g[j] + b[j];
      if (!close_enough(yr[j], ref, 1e-4, 1e-4))
        fail("layer_norm: [%ld,%ld] = %.9g, expected %.9g", rows[k], j, yr[j], ref);
    }
  }
  tc_release(out);
}
static void w3_check(wl *w) { layer_norm_check_out(w, CK(tc_layer_norm(w->t[0], w->t[1], w->t[2], 1e-5))); }

/* W3p: the same layer norm from primitives (mean, variance, rsqrt). */
static tc_tensor *layer_norm_prims(wl *w) {
  size_t mark = tc_scope_begin();
  tc_tensor *x = w->t[0];
  tc_tensor *d = CK(tc_sub(x, CK(tc_mean(x, -1, true))));
  tc_tensor *var = CK(tc_mean(CK(tc_mul(d, d)), -1, true));
  tc_tensor *n = CK(tc_mul(d, CK(tc_rsqrt(CK(tc_add_scalar(var, 1e-5))))));
  tc_tensor *y = tc_keep(CK(tc_add(CK(tc_mul(n, w->t[1])), w->t[2])));
  tc_scope_end(mark);
  return y;
}
static void w3p_iter(wl *w) { consume(layer_norm_prims(w)); }
static void w3p_check(wl *w) { layer_norm_check_out(w, layer_norm_prims(w)); }

/* W8: RMSNorm 8192x1024 from primitives: x * rsqrt(mean(x*x) + eps) * g. */
static tc_tensor *rms_norm(wl *w) {
  size_t mark = tc_scope_begin();
  tc_tensor *x = w->t[0];
  tc_tensor *ms = CK(tc_mean(CK(tc_mul(x, x)), -1, true));
  tc_tensor *y = tc_keep(CK(tc_mul(CK(tc_mul(x, CK(tc_rsqrt(CK(tc_add_scalar(ms, 1e-6)))))), w->t[1])));
  tc_scope_end(mark);
  return y;
}
static void w8_iter(wl *w) { consume(rms_norm(w)); }
static void w8_check(wl *w) {
  tc_tensor *out = rms_norm(w);
  if (tc_ndim(out) != 2 || tc_size(out, 0) != 8192 || tc_size(out, 1) != 1024) fail("rms_norm: wrong shape");
  float *x = f32_data(w->t[0]), *g = f32_data(w->t[1]), *y = f32_data(out);
  static const long rows[] = {0, 5, 4095, 8191};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    const float *xr = x + rows[k] * 1024, *yr = y + rows[k] * 1024;
    double ms = 0;
    for (long j = 0; j < 1024; j++) ms += (double)xr[j] * xr[j];
    double inv = 1.0 / sqrt(ms / 1024 + 1e-6);
    for (long j = 0; j < 1024; j++) {
      double ref = xr[j] * inv * g[j];
      if (!close_enough(yr[j], ref, 1e-4, 1e-4))
        fail("rms_norm: [%ld,%ld] = %.9g, expected %.9g", rows[k], j, yr[j], ref);
    }
  }
  tc_release(out);
}

/* W9: a 25-op elementwise chain on 64 f32, its result read every
** iteration (a small-tensor program: per-op overhead is all there is). */
#define W9_N 64
static void w9_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(W9_N), 21));
  w->t[1] = CK(tc_rand(TC_F32, TC_SHAPE(W9_N), 22));
}
static void w9_chain(wl *w, float *out) {
  size_t mark = tc_scope_begin();
  tc_tensor *x = w->t[0], *y = w->t[1], *a = x;
  for (int i = 0; i < 5; i++) {
    a = CK(tc_add(a, y));
    a = CK(tc_mul_scalar(a, 0.5));
    a = CK(tc_sub(a, x));
    a = CK(tc_mul(a, y));
    a = CK(tc_add_scalar(a, 0.25));
  }
  CKI(tc_copy_to(a, out, W9_N * sizeof(float)));
  tc_scope_end(mark);
}
static void w9_iter(wl *w) {
  float out[W9_N];
  w9_chain(w, out);
}
static void w9_check(wl *w) {
  float out[W9_N];
  w9_chain(w, out);
  float *x = f32_data(w->t[0]), *y = f32_data(w->t[1]);
  for (long i = 0; i < W9_N; i++) {
    double a = x[i];
    for (int k = 0; k < 5; k++) a = ((a + y[i]) * 0.5 - x[i]) * y[i] + 0.25;
    if (!close_enough(out[i], a, 1e-5, 1e-5)) fail("chain: [%ld] = %.9g, expected %.9g", i, out[i], a);
  }
}

/* W4: sum of squares over 16M f32 (eagerly materializes x*x); W4b: sum_all. */
static void w4_setup(wl *w) { w->t[0] = CK(tc_rand(TC_F32, TC_SHAPE(M16), 6)); }
static tc_tensor *w4_op(wl *w) {
  size_t mark = tc_scope_begin();
  tc_tensor *sq = CK(tc_mul(w->t[0], w->t[0]));
  tc_tensor *s = tc_keep(CK(tc_sum_all(sq)));
  tc_scope_end(mark);
  return s;
}
static void w4_iter(wl *w) {
  tc_tensor *s = w4_op(w);
  double v;
  CKI(tc_item(s, &v)); /* a program reads a reduction's value */
  tc_release(s);
}
static void w4_check(wl *w) {
  tc_tensor *s = w4_op(w);
  double v, ref = 0;
  CKI(tc_item(s, &v));
  tc_release(s);
  float *x = f32_data(w->t[0]);
  for (long i = 0; i < M16; i++) ref += (double)x[i] * x[i];
  if (!close_enough(v, ref, 0, 1e-5)) fail("sum_all(x*x) = %.9g, expected %.9g", v, ref);
}
static void w4b_iter(wl *w) {
  tc_tensor *s = CK(tc_sum_all(w->t[0]));
  double v;
  CKI(tc_item(s, &v));
  tc_release(s);
}
static void w4b_check(wl *w) {
  tc_tensor *s = CK(tc_sum_all(w->t[0]));
  double v, ref = 0;
  CKI(tc_item(s, &v));
  tc_release(s);
  float *x = f32_data(w->t[0]);
  for (long i = 0; i < M16; i++) ref += x[i];
  if (!close_enough(v, ref, 0, 1e-5)) fail("sum_all(x) = %.9g, expected %.9g", v, ref);
}

/* W14: cumsum of a 2048x4096 f32 matrix down its columns (dim 0: blocks of
** columns scanned side by side); W14b: along its rows (dim 1). Checked at
** sampled columns and rows against running sums in double. */
#define W14_R 2048
#define W14_C 4096
static void w14_setup(wl *w) { w->t[0] = CK(tc_rand(TC_F32, TC_SHAPE(W14_R, W14_C), 14)); }
static void w14_run(wl *w, int dim) {
  tc_tensor *c = CK(tc_cumsum(w->t[0], dim));
  CKI(tc_realize(c));
  tc_release(c);
}
static void w14_iter(wl *w) { w14_run(w, 0); }
static void w14b_iter(wl *w) { w14_run(w, 1); }
static void w14_check_dim(wl *w, int dim) {
  tc_tensor *c = CK(tc_cumsum(w->t[0], dim));
  float *x = f32_data(w->t[0]), *y = f32_data(c);
  long n = dim ? W14_C : W14_R, lines = dim ? W14_R : W14_C;
  for (long l = 0; l < lines; l += 97) {
    double ref = 0;
    for (long k = 0; k < n; k++) {
      long at = dim ? l * W14_C + k : k * W14_C + l;
      ref += x[at];
      if (!close_enough(y[at], ref, 1e-4, 1e-5))
        fail("cumsum dim %d: line %ld at %ld = %.9g, expected %.9g", dim, l, k, y[at], ref);
    }
  }
  tc_release(c);
}
static void w14_check(wl *w) { w14_check_dim(w, 0); }
static void w14b_check(wl *w) { w14_check_dim(w, 1); }

/* W16: an embedding's backward, as a language model's training step makes
** it (the GPU bench's W16's shapes, through autograd): 8192 tokens looked
** up in a 50257x768 table (GPT-2's vocabulary), loss sum(rows * c), and
** the table's gradient (each token's row of c added into its row, the
** tokens in order) realized. The floor: the gradient table written once,
** the looked-up rows and c read once each. Checked at sampled rows
** against sums in double over the tokens that chose them. */
#define W16_V 50257
#define W16_D 768
#define W16_N 8192
static void w16_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(W16_V, W16_D), 16));
  CKI(tc_set_requires_grad(w->t[0], true));
  int64_t *ix = malloc(sizeof *ix * W16_N);
  if (!ix) fail("out of memory");
  uint64_t s = 16;
  for (long i = 0; i < W16_N; i++) {   /* Zipf-like: some tokens repeat */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) * 0x1p-53;
    ix[i] = (int64_t)(W16_V * u * u * u) % W16_V;
  }
  w->t[1] = CK(tc_from_data(TC_I64, TC_SHAPE(W16_N), ix, sizeof *ix * W16_N));
  free(ix);
  w->t[2] = CK(tc_randn(TC_F32, TC_SHAPE(W16_N, W16_D), 17));
}
static tc_tensor *w16_grad(wl *w) {
  CKI(tc_zero_grad(w->t[0]));
  size_t mark = tc_scope_begin();
  CKI(tc_backward(CK(tc_sum_all(CK(tc_mul(CK(tc_embedding(w->t[0], w->t[1])), w->t[2]))))));
  tc_scope_end(mark);
  return CK(tc_grad(w->t[0]));
}
static void w16_iter(wl *w) { consume(w16_grad(w)); }
static void w16_check(wl *w) {
  tc_tensor *g = w16_grad(w), *ixt = CK(tc_cast(w->t[1], TC_F32));
  float *gv = f32_data(g), *c = f32_data(w->t[2]), *ixf = f32_data(ixt);
  for (long v = 0; v < W16_V; v += 997) {
    for (long k = 0; k < W16_D; k += 101) {
      double ref = 0;
      for (long i = 0; i < W16_N; i++)
        if ((long)ixf[i] == v) ref += c[i * W16_D + k];
      if (!close_enough(gv[v * W16_D + k], ref, 1e-4, 1e-4))
        fail("embedding grad [%ld, %ld] = %.9g, expected %.9g", v, k, gv[v * W16_D + k], ref);
    }
  }
  tc_release(ixt);
  tc_release(g);
}

/* W5: per-op overhead: add two 64-element tensors, release the result. */
static void w5_setup(wl *w) {
  w->t[0] = CK(tc_arange(TC_F32, 0, 64, 1));
  w->t[1] = CK(tc_full(TC_F32, TC_SHAPE(64), 0.5));
}
static void w5_iter(wl *w) { tc_release(CK(tc_add(w->t[0], w->t[1]))); }
static void w5_check(wl *w) {
  tc_tensor *out = CK(tc_add(w->t[0], w->t[1]));
  if (tc_numel(out) != 64) fail("add: %lld elements, expected 64", (long long)tc_numel(out));
  float *y = f32_data(out);
  for (int i = 0; i < 64; i++)
    if (y[i] != (float)i + 0.5f) fail("add: element %d = %.9g, expected %g", i, y[i], i + 0.5);
  tc_release(out);
}

/* W6: MLP 256x1024 -> 4096 (gelu) -> 1024. W10 is the same program: its
** figure is set beside OpenBLAS doing the same matmuls and elementwise ops
** (W6's beside the matmuls alone). */
static void w6_setup(wl *w) {
  tc_tensor *r;
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(256, 1024), 7));
  r = CK(tc_randn(TC_F32, TC_SHAPE(1024, 4096), 8));
  w->t[1] = CK(tc_mul_scalar(r, 1.0 / 32.0)); /* 1/sqrt(fan_in) */
  tc_release(r);
  r = CK(tc_randn(TC_F32, TC_SHAPE(4096), 9));
  w->t[2] = CK(tc_mul_scalar(r, 0.1));
  tc_release(r);
  r = CK(tc_randn(TC_F32, TC_SHAPE(4096, 1024), 10));
  w->t[3] = CK(tc_mul_scalar(r, 1.0 / 64.0));
  tc_release(r);
  r = CK(tc_randn(TC_F32, TC_SHAPE(1024), 11));
  w->t[4] = CK(tc_mul_scalar(r, 0.1));
  tc_release(r);
}
static tc_tensor *w6_op(wl *w) {
  size_t mark = tc_scope_begin();
  tc_tensor *h = CK(tc_matmul(w->t[0], w->t[1]));
  tc_tensor *hb = CK(tc_add(h, w->t[2]));
  tc_tensor *a = CK(tc_gelu(hb));
  tc_tensor *o = CK(tc_matmul(a, w->t[3]));
  tc_tensor *y = tc_keep(CK(tc_add(o, w->t[4])));
  tc_scope_end(mark);
  return y;
}
static void w6_iter(wl *w) { consume(w6_op(w)); }
/* Three rows of the MLP's output y (256 x 1024) against double precision. */
static void mlp_check_rows(wl *w, const float *y, const char *who) {
  float *x = f32_data(w->t[0]), *w1 = f32_data(w->t[1]), *b1 = f32_data(w->t[2]);
  float *w2 = f32_data(w->t[3]), *b2 = f32_data(w->t[4]);
  double *h = malloc(4096 * sizeof *h);
  if (!h) fail("out of memory");
  static const long rows[] = {0, 100, 255};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    const float *xr = x + rows[k] * 1024;
    for (long j = 0; j < 4096; j++) h[j] = b1[j];
    for (long i = 0; i < 1024; i++)
      for (long j = 0; j < 4096; j++) h[j] += (double)xr[i] * w1[i * 4096 + j];
    for (long j = 0; j < 4096; j++) h[j] = gelu_ref(h[j]);
    for (long j = 0; j < 1024; j++) {
      double ref = b2[j];
      for (long i = 0; i < 4096; i++) ref += h[i] * w2[i * 1024 + j];
      if (!close_enough(y[rows[k] * 1024 + j], ref, 1e-3, 1e-3))
        fail("%s: [%ld,%ld] = %.9g, expected %.9g", who, rows[k], j, y[rows[k] * 1024 + j], ref);
    }
  }
  free(h);
}
static void w6_check(wl *w) {
  tc_tensor *out = w6_op(w);
  if (tc_ndim(out) != 2 || tc_size(out, 0) != 256 || tc_size(out, 1) != 1024) fail("mlp: wrong shape");
  mlp_check_rows(w, f32_data(out), "mlp");
  tc_release(out);
}
/* NSAMPLE elements of c = a @ b (m x k @ k x n, row-major) against double. */
static void mm_check_samples(const float *a, const float *b, const float *c, long m, long k, long n,
                             const char *who) {
  for (long s = 0; s < NSAMPLE; s++) {
    long i = sample_idx(s, m), j = sample_idx(s * 7 + 3, n);
    double ref = 0;
    for (long p = 0; p < k; p++) ref += (double)a[i * k + p] * b[p * n + j];
    if (!close_enough(c[i * n + j], ref, 1e-4, 1e-4))
      fail("%s: [%ld,%ld] = %.9g, expected %.9g", who, i, j, c[i * n + j], ref);
  }
}

/* W6m: the first matmul alone (no epilogue), to set tc's matmul beside BLAS. */
static void w6m_iter(wl *w) { consume(CK(tc_matmul(w->t[0], w->t[1]))); }
static void w6m_check(wl *w) {
  tc_tensor *out = CK(tc_matmul(w->t[0], w->t[1]));
  if (tc_ndim(out) != 2 || tc_size(out, 0) != 256 || tc_size(out, 1) != 4096) fail("matmul: wrong shape");
  mm_check_samples(f32_data(w->t[0]), f32_data(w->t[1]), f32_data(out), 256, 1024, 4096, "matmul");
  tc_release(out);
}

/* -- OpenBLAS called directly (W6, W6m, W10) ---------------------------------
** cblas_sgemm with OpenBLAS's own threads, as many as tc uses, on the same
** inputs, into buffers made once (so no allocation is timed). W10 adds the
** elementwise ops the obvious way: one plain loop per op (libm's tanhf for
** GELU), its rows split over the same number of pthreads. */

#ifdef TC_HAVE_CBLAS
static struct {
  float *x, *w1, *b1, *w2, *b2; /* the workload's inputs (alias handles) */
  float *h, *y;                 /* 256 x 4096, 256 x 4096 (W6m) or 256 x 1024 */
} dir;

static void dir_inputs(wl *w) {
  dir.x = f32_data(w->t[0]), dir.w1 = f32_data(w->t[1]), dir.b1 = f32_data(w->t[2]);
  dir.w2 = f32_data(w->t[3]), dir.b2 = f32_data(w->t[4]);
  if (!dir.h) {
    dir.h = CKP(aligned_alloc(64, 256 * 4096 * sizeof(float)));
    dir.y = CKP(aligned_alloc(64, 256 * 4096 * sizeof(float)));
    memset(dir.h, 0, 256 * 4096 * sizeof(float)); /* fault the pages in now */
    memset(dir.y, 0, 256 * 4096 * sizeof(float));
  }
}

static void sgemm_nn(const float *a, const float *b, float *c, int m, int k, int n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

/* x[r][j] = f(x[r][j] + bias[j]) for rows [r0, r1): GELU or identity. */
typedef struct {
  float *x;
  const float *bias;
  long r0, r1, cols;
  bool gelu;
} ew_part;

static void *ew_rows(void *arg) {
  const ew_part *e = arg;
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  for (long r = e->r0; r < e->r1; r++) {
    float *x = e->x + r * e->cols;
    if (e->gelu)
      for (long j = 0; j < e->cols; j++) {
        float v = x[j] + e->bias[j];
        x[j] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
      }
    else
      for (long j = 0; j < e->cols; j++) x[j] += e->bias[j];
  }
  return NULL;
}

static void ew_run(float *x, const float *bias, long rows, long cols, bool gelu) {
  enum { MAXT = 64 };
  int nth = tc_threads() < MAXT ? tc_threads() : MAXT;
  ew_part part[MAXT];
  pthread_t th[MAXT];
  for (int t = 0; t < nth; t++)
    part[t] = (ew_part){x, bias, rows * t / nth, rows * (t + 1) / nth, cols, gelu};
  int started = 1;
  for (; started < nth; started++)
    if (pthread_create(&th[started], NULL, ew_rows, &part[started]) != 0) break;
  ew_rows(&part[0]);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  for (int t = started; t < nth; t++) ew_rows(&part[t]); /* threads that did not start */
}

static void w6m_direct(wl *w) {
  (void)w;
  sgemm_nn(dir.x, dir.w1, dir.y, 256, 1024, 4096);
}
static void w6m_direct_check(wl *w) {
  w6m_direct(w);
  mm_check_samples(dir.x, dir.w1, dir.y, 256, 1024, 4096, "OpenBLAS matmul");
}
static void w6_direct(wl *w) {
  (void)w;
  sgemm_nn(dir.x, dir.w1, dir.h, 256, 1024, 4096);
  sgemm_nn(dir.h, dir.w2, dir.y, 256, 4096, 1024);
}
static void w6_direct_check(wl *w) {
  w6_direct(w);
  mm_check_samples(dir.x, dir.w1, dir.h, 256, 1024, 4096, "OpenBLAS matmul 1");
  mm_check_samples(dir.h, dir.w2, dir.y, 256, 4096, 1024, "OpenBLAS matmul 2");
}
static void w10_direct(wl *w) {
  (void)w;
  sgemm_nn(dir.x, dir.w1, dir.h, 256, 1024, 4096);
  ew_run(dir.h, dir.b1, 256, 4096, true);
  sgemm_nn(dir.h, dir.w2, dir.y, 256, 4096, 1024);
  ew_run(dir.y, dir.b2, 256, 1024, false);
}
static void w10_direct_check(wl *w) {
  w10_direct(w);
  mlp_check_rows(w, dir.y, "OpenBLAS mlp");
}
#define DIRECT(f) f##_direct, f##_direct_check
#else
#define DIRECT(f) NULL, NULL
#endif

/* W13: one training step of examples/gpt_model.c's character-level GPT
** (4 layers, dim 128, 4 heads, context 64, batch 16, vocab 96; forward,
** cross-entropy, backward, AdamW), as train_gpt runs it, on one fixed batch
** of a seeded synthetic text. The check trains a fresh model of the same
** init for 3 steps on that batch: the first loss must be ln(96) (the init is
** near uniform), the third lower, and all three bitwise equal to the eager
** check's (so the compiled kernels the timed loop uses give eager's bits). */
#include "gpt_model.h"

#define W13_STEPS 3
/* matmul flops of a step (gpt_step_flops), as a constant for the table */
#define W13_FLOPS \
  (3.0 * (4 * (2.0 * 16 * 64 * (128 * 384 + 128 * 128 + 2 * 128 * 512) + 4.0 * 16 * 64 * 64 * 128) + \
          2.0 * 16 * 64 * 128 * 96))
static const gpt_config w13_cfg = {.vocab = 96, .ctx = 64, .dim = 128, .layers = 4, .heads = 4, .batch = 16,
                                   .lr = 1e-3, .weight_decay = 0.01};
static gpt_model w13_model;
static bool w13_live, w13_have_ref;
static double w13_ref[W13_STEPS]; /* the eager check's losses */

static void w13_free(void) {
  if (w13_live) gpt_free(&w13_model);
  w13_live = false;
}

static void w13_setup(wl *w) {
  static bool registered;
  if (!registered) atexit(w13_free);
  registered = true;
  w13_free();
  if (gpt_init(&w13_model, &w13_cfg, 13) < 0) fail("gpt_init: %s", tc_last_error() ? tc_last_error() : "bad config");
  w13_live = true;
  if (gpt_step_flops(&w13_cfg) != W13_FLOPS) fail("W13_FLOPS is not gpt_step_flops (%g)", gpt_step_flops(&w13_cfg));
  /* Text: a seeded walk over the vocabulary (learnable: mostly +1 steps). */
  static uint8_t text[4096];
  uint64_t s = 13;
  for (size_t i = 0; i < sizeof text; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    text[i] = (uint8_t)(i ? (text[i - 1] + ((s >> 60) < 12 ? 1 : (s >> 33) % 96)) % 96 : 0);
  }
  size_t n = (size_t)w13_cfg.batch * (size_t)w13_cfg.ctx;
  int64_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  if (!x || !y) fail("out of memory");
  uint64_t rng = 13;
  gpt_batch(text, sizeof text, w13_cfg.batch, w13_cfg.ctx, &rng, x, y);
  w->t[0] = CK(tc_from_data(TC_I64, TC_SHAPE(w13_cfg.batch, w13_cfg.ctx), x, n * sizeof *x));
  w->t[1] = CK(tc_from_data(TC_I64, TC_SHAPE(w13_cfg.batch, w13_cfg.ctx), y, n * sizeof *y));
  free(x);
  free(y);
}
static void w13_iter(wl *w) {
  double loss;
  CKI(gpt_train_step(&w13_model, w->t[0], w->t[1], &loss));
  if (!isfinite(loss)) fail("gpt step: loss %g", loss);
}
static void w13_check(wl *w) {
  gpt_model m;
  if (gpt_init(&m, &w13_cfg, 13) < 0) fail("gpt_init: %s", tc_last_error() ? tc_last_error() : "bad config");
  double loss[W13_STEPS];
  for (int i = 0; i < W13_STEPS; i++) CKI(gpt_train_step(&m, w->t[0], w->t[1], &loss[i]));
  gpt_free(&m);
  if (!close_enough(loss[0], log(96.0), 0.1, 0)) fail("gpt: first loss %.9g, expected ln(96) = %.6f", loss[0], log(96.0));
  if (!(loss[W13_STEPS - 1] < loss[0])) fail("gpt: loss %.9g after %d steps, not below %.9g", loss[W13_STEPS - 1], W13_STEPS, loss[0]);
  if (!tc_compile_enabled()) {
    memcpy(w13_ref, loss, sizeof loss);
    w13_have_ref = true;
  } else if (w13_have_ref) {
    for (int i = 0; i < W13_STEPS; i++)
      if (memcmp(&loss[i], &w13_ref[i], sizeof loss[i]))
        fail("gpt: compiled loss of step %d is %a, eager's %a (not bitwise equal)", i + 1, loss[i], w13_ref[i]);
  }
}

/* W7: one Adam step over 16M f32 params, in place, as a user writes it. */
#define ADAM_LR 1e-3
#define ADAM_B1 0.9
#define ADAM_B2 0.999
#define ADAM_EPS 1e-8
static void w7_setup(wl *w) {
  w->t[0] = CK(tc_randn(TC_F32, TC_SHAPE(M16), 12));   /* p */
  w->t[1] = CK(tc_randn(TC_F32, TC_SHAPE(M16), 13));   /* g */
  tc_tensor *r = CK(tc_randn(TC_F32, TC_SHAPE(M16), 14));
  w->t[2] = CK(tc_mul_scalar(r, 0.1));                 /* m */
  tc_release(r);
  r = CK(tc_rand(TC_F32, TC_SHAPE(M16), 15));
  w->t[3] = CK(tc_mul_scalar(r, 0.01));                /* v >= 0 */
  tc_release(r);
  w->step = 0;
}
static void w7_step(wl *w) {
  tc_tensor *p = w->t[0], *g = w->t[1], *m = w->t[2], *v = w->t[3];
  long t = ++w->step;
  size_t mark = tc_scope_begin();
  /* m = b1*m + (1-b1)*g */
  CKI(tc_mul_scalar_(m, ADAM_B1));
  CKI(tc_add_(m, CK(tc_mul_scalar(g, 1.0 - ADAM_B1))));
  /* v = b2*v + (1-b2)*g*g */
  CKI(tc_mul_scalar_(v, ADAM_B2));
  tc_tensor *gg = CK(tc_mul(g, g));
  CKI(tc_mul_scalar_(gg, 1.0 - ADAM_B2));
  CKI(tc_add_(v, gg));
  /* p -= lr * mhat / (sqrt(vhat) + eps) */
  tc_tensor *mhat = CK(tc_div_scalar(m, 1.0 - pow(ADAM_B1, (double)t)));
  tc_tensor *vhat = CK(tc_div_scalar(v, 1.0 - pow(ADAM_B2, (double)t)));
  tc_tensor *den = CK(tc_add_scalar(CK(tc_sqrt(vhat)), ADAM_EPS));
  tc_tensor *upd = CK(tc_mul_scalar(CK(tc_div(mhat, den)), ADAM_LR));
  CKI(tc_sub_(p, upd));
  tc_scope_end(mark);
  CKI(tc_sync()); /* complete the in-place writes (lazy under compile) */
}
static void w7_check(wl *w) {
  enum { NS = 1024 };
  static long idx[NS];
  static double p0[NS], g0[NS], m0[NS], v0[NS];
  float *p = f32_data(w->t[0]), *g = f32_data(w->t[1]), *m = f32_data(w->t[2]), *v = f32_data(w->t[3]);
  for (long s = 0; s < NS; s++) {
    long i = idx[s] = sample_idx(s, M16);
    p0[s] = p[i], g0[s] = g[i], m0[s] = m[i], v0[s] = v[i];
  }
  long t = w->step + 1;
  w7_step(w);
  p = f32_data(w->t[0]), m = f32_data(w->t[2]), v = f32_data(w->t[3]);
  for (long s = 0; s < NS; s++) {
    long i = idx[s];
    double mr = ADAM_B1 * m0[s] + (1 - ADAM_B1) * g0[s];
    double vr = ADAM_B2 * v0[s] + (1 - ADAM_B2) * g0[s] * g0[s];
    double mh = mr / (1 - pow(ADAM_B1, (double)t)), vh = vr / (1 - pow(ADAM_B2, (double)t));
    double dp = -ADAM_LR * mh / (sqrt(vh) + ADAM_EPS);
    if (!close_enough(m[i], mr, 1e-7, 1e-5)) fail("adam: m[%ld] = %.9g, expected %.9g", i, m[i], mr);
    if (!close_enough(v[i], vr, 1e-9, 1e-5)) fail("adam: v[%ld] = %.9g, expected %.9g", i, v[i], vr);
    if (!close_enough((double)p[i] - p0[s], dp, 2e-7 * (1 + fabs(p0[s])), 1e-3))
      fail("adam: p[%ld] moved by %.9g, expected %.9g", i, (double)p[i] - p0[s], dp);
  }
}

/* -- W11: one training step of the W6 MLP ------------------------------------
** x 256x1024 -> gelu(x @ w1 + b1) (4096) -> logits = h @ w2 + b2 (1024 classes),
** cross-entropy against i64 targets, backward, AdamW (lr 1e-5, betas
** 0.9/0.999, eps 1e-8, weight decay 0.01), the loss read with tc_item, as
** a training loop does (examples/train_mlp.c). The inputs are W6's.
**
** The minimum bytes of a step (W11_BYTES), P = 8,393,728 parameters (w1, b1,
** w2, b2) in f32:
**   x read once                                      256x1024x4      1.05 MB
**   parameters read once (forward and backward)      P x 4          33.57 MB
**   the pre-activation saved for backward: written    256x4096x4x2   8.39 MB
**     once, read once (GELU recomputed from it)
**   logits / their gradient: written once, read once 256x1024x4x2   2.10 MB
**   gradients written once (tc_grad keeps them)      P x 4          33.57 MB
**   AdamW: read p, g, m, v, write p, m, v            7 x P x 4     235.03 MB
** total 313.71 MB. The FLOPs (W11_FLOPS): 5 matmuls of 2x256x1024x4096 =
** 2.147 GFLOP each: forward x@w1 and h@w2, backward dh = dlogits@w2^T,
** dw2 = h^T@dlogits and dw1 = x^T@dpre (no dx: x needs no gradient); the
** elementwise work and the bias gradients are small beside them. */
#define W11_P (1024.0 * 4096 + 4096 + 4096 * 1024 + 1024)
#define W11_BYTES (256.0 * 1024 * 4 + W11_P * 4 + 256.0 * 4096 * 4 * 2 + 256.0 * 1024 * 4 * 2 + W11_P * 4 + 7 * W11_P * 4)
#define W11_MM (2.0 * 256 * 1024 * 4096)
#define W11_FLOPS (5 * W11_MM)
/* lr 1e-5 keeps the step a real one through the ~20 steps a run takes (the
** loss goes from 7.2 to about 6); at 1e-3, AdamW's sign-like first steps
** memorize the 256 targets in 5 steps, and a step with a loss of 0 (its
** gradients underflowing towards denormals) is not a training step. */
#define W11_LR 1e-5
#define W11_WD 0.01
static struct {
  tc_optimizer *opt;
  tc_tensor *init[4];      /* the parameters' initial values, for the checks */
  double *pre, *logits;    /* step 1 in double: pre-activations 256x4096; softmax - onehot 256x1024 */
  double loss_ref, dl_scale;
  double loss_eager;       /* step 1's loss, eager (compiled must equal it) */
  bool have_eager;
  double mm_s;             /* median time of tc_matmul(x, w1) (the W6m matmul) */
  double mm5_s;            /* the step's 5 matmuls (forward and backward shapes) timed alone */
} w11;

static void w11_free(void) {
  tc_optimizer_free(w11.opt);
  for (int i = 0; i < 4; i++) tc_release(w11.init[i]);
  free(w11.pre);
  free(w11.logits);
  memset(&w11, 0, sizeof w11);
}

static void w11_new_opt(wl *w) {
  tc_optimizer_free(w11.opt);
  w11.opt = CKP(tc_adamw(&w->t[1], 4, W11_LR, ADAM_B1, ADAM_B2, ADAM_EPS, W11_WD));
}

static void w11_setup(wl *w) {
  w6_setup(w); /* x, w1, b1, w2, b2 */
  static int64_t y[256];
  for (long i = 0; i < 256; i++) y[i] = sample_idx(i * 13 + 5, 1024);
  w->t[5] = CK(tc_from_data(TC_I64, TC_SHAPE(256), y, sizeof y));
  /* The matmuls' times alone, for the arithmetic of the note (eager; a
  ** matmul is an extern op, the same kernel compiled): the W6m one, and
  ** the step's five shapes with their transposes. */
  tc_tensor *h = CK(tc_randn(TC_F32, TC_SHAPE(256, 4096), 31)), *dl = CK(tc_randn(TC_F32, TC_SHAPE(256, 1024), 32));
  tc_tensor *w2t = CK(tc_transpose(w->t[3], 0, 1)), *ht = CK(tc_transpose(h, 0, 1));
  tc_tensor *xt = CK(tc_transpose(w->t[0], 0, 1));
  tc_tensor *mm[5][2] = {{w->t[0], w->t[1]}, {h, w->t[3]}, {dl, w2t}, {ht, dl}, {xt, h}};
  w11.mm5_s = 0;
  for (int k = 0; k < 5; k++) {
    double s[5];
    for (int i = 0; i < 5; i++) {
      double t0 = now_s();
      consume(CK(tc_matmul(mm[k][0], mm[k][1])));
      s[i] = now_s() - t0;
    }
    w11.mm5_s += median(s + 1, 4);
    if (k == 0) w11.mm_s = median(s + 1, 4);
  }
  tc_release(h), tc_release(dl), tc_release(w2t), tc_release(ht), tc_release(xt);
  for (int i = 0; i < 4; i++) {
    tc_tensor *p = w->t[1 + i];
    int64_t shape[2] = {tc_size(p, 0), tc_ndim(p) == 2 ? tc_size(p, 1) : 1};
    w11.init[i] = CK(tc_from_data(TC_F32, tc_ndim(p), shape, f32_data(p), (size_t)tc_numel(p) * sizeof(float)));
    CKI(tc_set_requires_grad(p, true));
  }
  static bool registered;
  if (!registered) atexit(w11_free);
  registered = true;
  w11_new_opt(w);
}

/* One step; returns the loss. */
static double w11_step(wl *w) {
  size_t mark = tc_scope_begin();
  CKI(tc_optimizer_zero_grad(w11.opt));
  tc_tensor *h = CK(tc_gelu(CK(tc_add(CK(tc_matmul(w->t[0], w->t[1])), w->t[2]))));
  tc_tensor *logits = CK(tc_add(CK(tc_matmul(h, w->t[3])), w->t[4]));
  tc_tensor *l = CK(tc_cross_entropy(logits, w->t[5]));
  CKI(tc_backward(l));
  CKI(tc_optimizer_step(w11.opt));
  double loss;
  CKI(tc_item(l, &loss));
  tc_scope_end(mark);
  return loss;
}
static void w11_iter(wl *w) { (void)w11_step(w); }

static double gelu_grad_ref(double x) {
  const double k = sqrt(2.0 / M_PI);
  double th = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}

/* Step 1 in double from the initial parameters: pre-activations, logits,
** the loss; d loss / d logits = (softmax - onehot) / 256 is then formed
** from w11.logits where needed. */
static void w11_reference(wl *w) {
  const float *x = f32_data(w->t[0]), *w1 = f32_data(w11.init[0]), *b1 = f32_data(w11.init[1]);
  const float *w2 = f32_data(w11.init[2]), *b2 = f32_data(w11.init[3]);
  tc_tensor *ya = aliases[naliases++] = CK(tc_to(w->t[5], "cpu"));
  const int64_t *y = CKP(tc_data(ya));
  w11.pre = CKP(malloc(256 * 4096 * sizeof(double)));
  w11.logits = CKP(malloc(256 * 1024 * sizeof(double)));
  double *h = CKP(malloc(4096 * sizeof(double))), loss = 0;
  for (long i = 0; i < 256; i++) {
    double *pre = w11.pre + i * 4096, *lg = w11.logits + i * 1024;
    for (long j = 0; j < 4096; j++) pre[j] = b1[j];
    for (long k = 0; k < 1024; k++) {
      double xv = x[i * 1024 + k];
      for (long j = 0; j < 4096; j++) pre[j] += xv * w1[k * 4096 + j];
    }
    for (long j = 0; j < 4096; j++) h[j] = gelu_ref(pre[j]);
    for (long j = 0; j < 1024; j++) lg[j] = b2[j];
    for (long k = 0; k < 4096; k++)
      for (long j = 0; j < 1024; j++) lg[j] += h[k] * w2[k * 1024 + j];
    double mx = lg[0], se = 0;
    for (long j = 1; j < 1024; j++) mx = fmax(mx, lg[j]);
    for (long j = 0; j < 1024; j++) se += exp(lg[j] - mx);
    loss += mx + log(se) - lg[y[i]];
    for (long j = 0; j < 1024; j++) lg[j] = exp(lg[j] - mx) / se - (j == y[i]); /* softmax - onehot */
  }
  w11.loss_ref = loss / 256;
  w11.dl_scale = 1.0 / 256;
  free(h);
}

/* The parameters' gradient as floats (a new alias kept until check() ends). */
static float *w11_grad(tc_tensor *p) {
  tc_tensor *g = CK(tc_grad(p));
  float *d = f32_data(g);
  tc_release(g);
  return d;
}

/* Back to the initial parameters and a fresh AdamW, then step 1: its loss
** against double precision, the gradients (all of b2, samples of w2, w1,
** b1) against the double-precision backward, and the AdamW update of b2
** recomputed in double from tc's gradient. Compiled, the loss must also
** equal eager's bit for bit (compiled equals eager). */
static void w11_check(wl *w) {
  bool was = tc_set_grad_enabled(false);
  for (int i = 0; i < 4; i++) CKI(tc_copy_(w->t[1 + i], w11.init[i]));
  CKI(tc_sync());
  tc_set_grad_enabled(was);
  w11_new_opt(w);
  if (!w11.pre) w11_reference(w);
  double loss = w11_step(w);
  if (!close_enough(loss, w11.loss_ref, 1e-5, 1e-5))
    fail("mlp step: loss %.9g, expected %.9g", loss, w11.loss_ref);
  if (!tc_compile_enabled()) {
    w11.loss_eager = loss;
    w11.have_eager = true;
  } else if (w11.have_eager && loss != w11.loss_eager)
    fail("mlp step: compiled loss %.9g != eager %.9g (compiled must equal eager bitwise)", loss, w11.loss_eager);
  const float *x = f32_data(w->t[0]), *w2 = f32_data(w11.init[2]), *b2_0 = f32_data(w11.init[3]);
  const double *dl = w11.logits, sc = w11.dl_scale;
  float *gb2 = w11_grad(w->t[4]), *gw2 = w11_grad(w->t[3]), *gw1 = w11_grad(w->t[1]), *gb1 = w11_grad(w->t[2]);
  const float *b2 = f32_data(w->t[4]);
  for (long j = 0; j < 1024; j++) {
    double ref = 0;
    for (long i = 0; i < 256; i++) ref += dl[i * 1024 + j];
    ref *= sc;
    if (!close_enough(gb2[j], ref, 1e-7, 1e-3)) fail("mlp step: grad b2[%ld] = %.9g, expected %.9g", j, gb2[j], ref);
    /* AdamW's first step from m = v = 0: p (1 - lr wd) - lr g / (|g| + eps) */
    double g = gb2[j], pr = b2_0[j] * (1 - W11_LR * W11_WD) - W11_LR * g / (fabs(g) + ADAM_EPS);
    if (!close_enough(b2[j], pr, 1e-7, 1e-6)) fail("mlp step: b2[%ld] = %.9g after AdamW, expected %.9g", j, b2[j], pr);
  }
  for (long s = 0; s < 256; s++) { /* dw2[k][j] = sum_i gelu(pre[i][k]) dl[i][j] */
    long k = sample_idx(s, 4096), j = sample_idx(s * 7 + 1, 1024);
    double ref = 0;
    for (long i = 0; i < 256; i++) ref += gelu_ref(w11.pre[i * 4096 + k]) * dl[i * 1024 + j];
    ref *= sc;
    if (!close_enough(gw2[k * 1024 + j], ref, 1e-6, 1e-3))
      fail("mlp step: grad w2[%ld,%ld] = %.9g, expected %.9g", k, j, gw2[k * 1024 + j], ref);
  }
  double *dpre = CKP(malloc(256 * sizeof(double)));
  for (long s = 0; s < 32; s++) { /* column j of dpre = (dl @ w2^T)[:, j] * gelu'(pre[:, j]) */
    long j = sample_idx(s * 5 + 2, 4096);
    double db1 = 0;
    for (long i = 0; i < 256; i++) {
      double dh = 0;
      for (long n = 0; n < 1024; n++) dh += dl[i * 1024 + n] * w2[j * 1024 + n];
      dpre[i] = dh * sc * gelu_grad_ref(w11.pre[i * 4096 + j]);
      db1 += dpre[i];
    }
    if (!close_enough(gb1[j], db1, 1e-7, 1e-3)) fail("mlp step: grad b1[%ld] = %.9g, expected %.9g", j, gb1[j], db1);
    for (long t = 0; t < 8; t++) {
      long k = sample_idx(s * 8 + t, 1024);
      double ref = 0;
      for (long i = 0; i < 256; i++) ref += (double)x[i * 1024 + k] * dpre[i];
      if (!close_enough(gw1[k * 4096 + j], ref, 1e-7, 1e-3))
        fail("mlp step: grad w1[%ld,%ld] = %.9g, expected %.9g", k, j, gw1[k * 4096 + j], ref);
    }
  }
  free(dpre);
}

/* -- W12: stories15M-shaped decoding -----------------------------------------
** The model of examples/llama_model.c with stories15M's shapes (dim 288, 6
** layers, 6 heads, hidden 768, vocab 32000, context 256; lm_head tied to
** the embedding) and random weights made in memory. One iteration decodes
** W12_TOKENS tokens from BOS at position 0, each sampled from its logits
** at temperature 0.9 with a fixed seed, as a decoder does (llama.c's
** sampler: the softmax read, one draw; greedy decoding of random weights
** repeats one token). The KV cache rows are written before they are read,
** so no reset is needed between iterations.
**
** The floor of decoding (W12_BYTES, per iteration): every weight read once
** per token, plus the KV cache rows attention reads: at position p, rows
** 0..p of K and V in every layer.
**   weights: 6 layers x (4 x 288x288 + 3 x 288x768) + 32000x288 (lm_head)
**            + norms 13 x 288 = 15,191,712 floats = 60.77 MB (W12_WBYTES)
**   KV:      sum over p < W12_TOKENS of 2 x 6 x (p + 1) x 288 x 4
** (the embedding row read per token is negligible and not counted). */
#define W12_TOKENS 64
#define W12_TEMP 0.9
#define W12_WBYTES (4.0 * (6 * (4.0 * 288 * 288 + 3.0 * 288 * 768) + 32000.0 * 288 + 13 * 288))
#define W12_KVBYTES (2.0 * 6 * 288 * 4 * (W12_TOKENS * (W12_TOKENS + 1) / 2.0))
#define W12_BYTES (W12_TOKENS * W12_WBYTES + W12_KVBYTES)
static struct {
  llama_model m;
  bool loaded;
  int toks_eager[W12_TOKENS];
  bool have_eager;
  double *logits0;        /* double reference of BOS's logits at position 0 */
  float *probs;           /* the sampler's scratch, vocab floats */
} w12;

static void w12_free(void) {
  if (w12.loaded) llama_free(&w12.m);
  free(w12.logits0);
  free(w12.probs);
  memset(&w12, 0, sizeof w12);
}

static void w12_setup(wl *w) {
  (void)w;
  if (w12.loaded) return;
  llama_config c;
  if (llama_preset("stories15M", &c) < 0) fail("llama: no stories15M preset");
  if (llama_init(&w12.m, &c, 1) < 0) fail("llama_init: %s", errmsg());
  w12.loaded = true;
  atexit(w12_free);
  w12.probs = CKP(malloc(sizeof(float) * (size_t)c.vocab));
}

/* Decodes W12_TOKENS tokens into toks; logits0 (optional) gets position
** 0's logits. */
static void w12_decode(int *toks, float *logits0) {
  int tok = 1; /* BOS */
  uint64_t rng = 42;
  for (int pos = 0; pos < W12_TOKENS; pos++) {
    size_t mark = tc_scope_begin();
    tc_tensor *logits = CK(llama_forward(&w12.m, tok, pos));
    if (pos == 0 && logits0) CKI(tc_copy_to(logits, logits0, sizeof(float) * (size_t)w12.m.c.vocab));
    tok = llama_sample(logits, W12_TEMP, &rng, w12.probs, w12.m.c.vocab);
    if (tok < 0) fail("llama_sample: %s", errmsg());
    tc_scope_end(mark);
    if (toks) toks[pos] = tok;
  }
}
static void w12_iter(wl *w) {
  (void)w;
  w12_decode(NULL, NULL);
}

/* y = W x for W [rows, cols] (a Linear's weight), in double. */
static void w12_linear(const float *wt, const double *x, double *y, long rows, long cols) {
  for (long r = 0; r < rows; r++) {
    double acc = 0;
    for (long k = 0; k < cols; k++) acc += (double)wt[r * cols + k] * x[k];
    y[r] = acc;
  }
}
static void w12_rms_norm(const double *x, const float *g, double *y, long n, double eps) {
  double ms = 0;
  for (long i = 0; i < n; i++) ms += x[i] * x[i];
  double s = 1 / sqrt(ms / (double)n + eps);
  for (long i = 0; i < n; i++) y[i] = x[i] * s * g[i];
}

/* BOS at position 0 in double: attention over one position is its value
** row (softmax of one score is 1), so RoPE and the scores drop out; the
** rest (norms, projections, SwiGLU, residuals, lm_head) is checked. */
static void w12_reference(void) {
  const llama_config *c = &w12.m.c;
  long d = c->dim, hd = c->hidden, V = c->vocab;
  double *x = CKP(calloc((size_t)(3 * d + 2 * hd), sizeof(double))), *h = x + d, *t = h + d, *g = t + d,
         *u = g + hd;
  const float *emb = f32_data(w12.m.embed);
  for (long i = 0; i < d; i++) x[i] = emb[1 * d + i];
  for (int l = 0; l < c->layers; l++) {
    const llama_layer *ly = &w12.m.l[l];
    w12_rms_norm(x, f32_data(ly->attn_norm), h, d, c->eps);
    w12_linear(f32_data(ly->wv), h, t, d, d);   /* v = attention's output */
    w12_linear(f32_data(ly->wo), t, h, d, d);
    for (long i = 0; i < d; i++) x[i] += h[i];
    w12_rms_norm(x, f32_data(ly->ffn_norm), h, d, c->eps);
    w12_linear(f32_data(ly->w_gate), h, g, hd, d);
    w12_linear(f32_data(ly->w_up), h, u, hd, d);
    for (long i = 0; i < hd; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    w12_linear(f32_data(ly->w_down), g, h, d, hd);
    for (long i = 0; i < d; i++) x[i] += h[i];
    while (naliases) tc_release(aliases[--naliases]); /* 7 pointers a layer */
  }
  w12_rms_norm(x, f32_data(w12.m.norm), h, d, c->eps);
  w12.logits0 = CKP(malloc(sizeof(double) * (size_t)V));
  w12_linear(f32_data(w12.m.lm_head), h, w12.logits0, V, d);
  free(x);
}

/* BOS's logits at position 0 against double precision; the eager tokens
** are kept, and compiled decoding must produce the same ones (compiled
** equals eager bitwise, so the same draws pick the same tokens). */
static void w12_check(wl *w) {
  (void)w;
  int toks[W12_TOKENS];
  float *lg = CKP(malloc(sizeof(float) * (size_t)w12.m.c.vocab));
  CKI(llama_reset_cache(&w12.m));
  w12_decode(toks, lg);
  if (!w12.logits0) w12_reference();
  for (long i = 0; i < w12.m.c.vocab; i++)
    if (!close_enough(lg[i], w12.logits0[i], 1e-5, 1e-4))
      fail("llama: logit %ld at position 0 = %.9g, expected %.9g", i, lg[i], w12.logits0[i]);
  free(lg);
  if (!tc_compile_enabled()) {
    memcpy(w12.toks_eager, toks, sizeof toks);
    w12.have_eager = true;
  } else if (w12.have_eager) {
    for (int i = 0; i < W12_TOKENS; i++)
      if (toks[i] != w12.toks_eager[i])
        fail("llama: compiled decoding's token %d is %d, eager's %d (compiled must equal eager)", i, toks[i],
             w12.toks_eager[i]);
  }
}

/* The notes under the table: W11's and W12's arithmetic against the floor. */
static void w11_w12_notes(const wl *w, double bwn) {
  if (!w->selected || !w->eager.ok) return;
  double floor_s = w->bytes / (bwn * GB);
  if (!strcmp(w->id, "W11")) {
    double mm_rate = W11_MM / w11.mm_s, mm_s = W11_FLOPS / mm_rate;
    double best_s = fmax(mm_s, w11.mm5_s) + floor_s;
    printf("W11: a step moves at least %.1f MB (x, parameters read once, pre-activation and logits saved for\n"
           "     backward, gradients written, AdamW reading p,g,m,v and writing p,m,v: 7 x %.0f params x 4 B):\n"
           "     floor %.2f ms at %.1f GB/s; %.2f GFLOP in 5 matmuls of 256x1024x4096: at the W6m rate measured here\n"
           "     (%.1f GFLOP/s, %.2f ms a matmul) the matmuls alone need %.1f ms; the step's 5 shapes (3 with a\n"
           "     transposed operand) timed alone take %.1f ms. So the best step is about %.1f ms (matmuls + floor).\n"
           "     Eager %.1f ms, %.1f kernels a step: the 2x goal needs compiled <= %.1f ms, %s\n",
           W11_BYTES / MB, W11_P, floor_s * 1e3, bwn, W11_FLOPS / GB, mm_rate / GB, w11.mm_s * 1e3, mm_s * 1e3,
           w11.mm5_s * 1e3, best_s * 1e3, w->eager.med * 1e3, w->eager.launches, w->eager.med * 1e3 / 2,
           w->eager.med / 2 >= best_s ? "above that bound: reachable" : "below that bound: not reachable");
    if (w->comp.ok)
      printf("     compiled %.1f ms (%.2fx eager), %.1f kernels a step; the matmuls alone are %.0f%% of it\n",
             w->comp.med * 1e3, w->eager.med / w->comp.med, w->comp.launches, 100 * w11.mm5_s / w->comp.med);
  } else if (!strcmp(w->id, "W12")) {
    double tok_floor = floor_s / W12_TOKENS;
    printf("W12: %d tokens a run, sampled (t 0.9), from BOS; floor = weights (%.1f MB) + KV cache rows at the mean context\n"
           "     (%.1f positions, %.2f MB) read once per token = %.3f ms a token at %.1f GB/s (%.0f tokens/s)\n"
           "     eager %.1f tokens/s (%.2f ms a token, %.2fx the floor), %.1f kernels a token\n",
           W12_TOKENS, W12_WBYTES / MB, (W12_TOKENS + 1) / 2.0, W12_KVBYTES / W12_TOKENS / MB, tok_floor * 1e3,
           bwn, 1 / tok_floor, W12_TOKENS / w->eager.med, w->eager.med * 1e3 / W12_TOKENS,
           w->eager.med / floor_s, w->eager.launches / W12_TOKENS);
    if (w->comp.ok)
      printf("     compiled %.1f tokens/s (%.2f ms a token, %.2fx the floor, %.2fx eager), %.1f kernels a token;\n"
             "     kernels compiled while decoding in the timed runs: %llu (%llu in the whole compiled phase)\n",
             W12_TOKENS / w->comp.med, w->comp.med * 1e3 / W12_TOKENS, w->comp.med / floor_s,
             w->eager.med / w->comp.med, w->comp.launches / W12_TOKENS,
             (unsigned long long)w->comp.kernels_compiled, (unsigned long long)w->cold.kernels);
  }
}

static wl workloads[] = {
  {"W0", "add 16M f32 (a + b)", w0_setup, w0_iter, w0_check, 1, 3.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0}, {0},
   {0}},
  {"W1", "gelu (tanh) 16M f32", w1_setup, w1_iter, w1_check, 1, 2.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W1p", "gelu from 9 primitive ops 16M", w1_setup, w1p_iter, w1p_check, 1, 2.0 * M16 * 4, 0, {0}, 0, 0, 0, "",
   {0}, {0}, {0}},
  {"W2", "softmax 4096x4096 f32 dim -1", w2_setup, w2_iter, w2_check, 1, 2.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W2p", "softmax 4096x4096 from primitives", w2_setup, w2p_iter, w2p_check, 1, 2.0 * M16 * 4, 0, {0}, 0, 0, 0,
   "", {0}, {0}, {0}},
  {"W3", "layer_norm 8192x1024 f32 +g,b", w3_setup, w3_iter, w3_check, 1, 2.0 * 8192 * 1024 * 4 + 2.0 * 1024 * 4, 0,
   {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W3p", "layer_norm from primitives", w3_setup, w3p_iter, w3p_check, 1, 2.0 * 8192 * 1024 * 4 + 2.0 * 1024 * 4,
   0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W8", "RMSNorm 8192x1024 from primitives", w8_setup, w8_iter, w8_check, 1, 2.0 * 8192 * 1024 * 4 + 1024 * 4, 0,
   {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W4", "sum_all(x*x) 16M f32", w4_setup, w4_iter, w4_check, 1, 1.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W4b", "sum_all(x) 16M f32", w4_setup, w4b_iter, w4b_check, 1, 1.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W5", "add 64 f32 + release (per op)", w5_setup, w5_iter, w5_check, 1000000, 0, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W6", "MLP 256x1024x4096x1024 gelu", w6_setup, w6_iter, w6_check, 1, 0, 2.0 * 256 * 1024 * 4096 * 2, {0}, 0, 0,
   0, "", {0}, {0}, {0}},
  {"W6m", "matmul 256x1024 @ 1024x4096", w6_setup, w6m_iter, w6m_check, 1, 0, 2.0 * 256 * 1024 * 4096, {0}, 0,
   0, 0, "", {0}, {0}, {0}},
  {"W7", "Adam step 16M f32 in place", w7_setup, w7_step, w7_check, 1, 7.0 * M16 * 4, 0, {0}, 0, 0, 0, "", {0},
   {0}, {0}},
  {"W9", "25-op chain on 64 f32, read", w9_setup, w9_iter, w9_check, 20000, 0, 0, {0}, 0, 0, 0, "", {0}, {0}, {0}},
  {"W10", "MLP + bias/gelu epilogues", w6_setup, w6_iter, w6_check, 1, 0, 2.0 * 256 * 1024 * 4096 * 2, {0}, 0, 0,
   0, "", {0}, {0}, {0}},
  {.id = "W11", .name = "MLP train step (CE, AdamW)", .setup = w11_setup, .iter = w11_iter, .check = w11_check,
   .inner = 1, .bytes = W11_BYTES, .flops = W11_FLOPS},
  {.id = "W12", .name = "stories15M decode 64 tokens", .setup = w12_setup, .iter = w12_iter, .check = w12_check,
   .inner = 1, .bytes = W12_BYTES},
  {.id = "W13", .name = "GPT train step 4x128 ctx 64 b 16", .setup = w13_setup, .iter = w13_iter,
   .check = w13_check, .inner = 1, .flops = W13_FLOPS},
  {.id = "W14", .name = "cumsum 2048x4096 f32 dim 0", .setup = w14_setup, .iter = w14_iter, .check = w14_check,
   .inner = 1, .bytes = 2.0 * W14_R * W14_C * 4},
  {.id = "W14b", .name = "cumsum 2048x4096 f32 dim 1", .setup = w14_setup, .iter = w14b_iter,
   .check = w14b_check, .inner = 1, .bytes = 2.0 * W14_R * W14_C * 4},
  {.id = "W16", .name = "embedding backward 8192 x 50257x768", .setup = w16_setup, .iter = w16_iter,
   .check = w16_check, .inner = 1, .bytes = 4.0 * W16_V * W16_D + 2.0 * 4 * W16_N * W16_D},
};
#define NWL ((int)(sizeof workloads / sizeof workloads[0]))

/* Workloads with an OpenBLAS-direct column: the same work with OpenBLAS
** called directly (run, check), and its result, by workload index. */
typedef struct {
  const char *id;
  void (*run)(wl *);
  void (*check)(wl *);
} direct_fn;
static const direct_fn directs[] = {{"W6", DIRECT(w6)}, {"W6m", DIRECT(w6m)}, {"W10", DIRECT(w10)}};
static result dir_res[NWL];

static const direct_fn *direct_of(const wl *w) {
  for (size_t i = 0; i < sizeof directs / sizeof directs[0]; i++)
    if (!strcmp(directs[i].id, w->id) && directs[i].run) return &directs[i];
  return NULL;
}
static result *dir_of(const wl *w) { return &dir_res[w - workloads]; }

/* -- Running ---------------------------------------------------------------- */

static void measure_fn(wl *w, void (*fn)(wl *), result *r, int warmup) {
  long inner = w->inner;
  tc_stats s0, s1;
  for (int i = 0; i < warmup; i++)
    for (long k = 0; k < inner; k++) fn(w);
  r->n = opt.reps;
  cpu_snap c0 = cpu_snap_take();
  tc_stats_get(&s0);
  for (int i = 0; i < r->n; i++) {
    double t0 = now_s();
    for (long k = 0; k < inner; k++) fn(w);
    r->samples[i] = (now_s() - t0) / (double)inner;
  }
  tc_stats_get(&s1);
  r->others = cpu_others(c0, cpu_snap_take(), &r->steal);
  r->med = median(r->samples, r->n);
  r->min = r->max = r->samples[0];
  for (int i = 1; i < r->n; i++) {
    r->min = fmin(r->min, r->samples[i]);
    r->max = fmax(r->max, r->samples[i]);
  }
  r->pool_misses = s1.pool_misses - s0.pool_misses;
  r->regions = s1.regions - s0.regions;
  r->regions_compiled = s1.regions_compiled - s0.regions_compiled;
  r->kernels_compiled = s1.kernels_compiled - s0.kernels_compiled;
  r->launches = (double)(s1.kernels_launched - s0.kernels_launched) / ((double)r->n * (double)inner);
  r->ok = true;
}

static void measure(wl *w, result *r, int warmup) { measure_fn(w, w->iter, r, warmup); }

/* The OpenBLAS-direct comparison: samples of tc eager, tc compiled (with
** --compiled) and OpenBLAS called directly, taken in turn, so that a busy
** moment of the machine hits all of them alike; each after a pause of
** DIRECT_PAUSE_MS, because OpenBLAS's idle threads poll (yielding) for about
** 2^28 cycles after each call and would slow whatever runs next. OpenBLAS
** gets tc's thread count for its own samples only (tc keeps it at one). */
#define DIRECT_PAUSE_MS 150

static result dir_eager[NWL], dir_comp[NWL];   /* tc's samples taken in turn */

#ifdef TC_HAVE_CBLAS
/* Busy-wait (a sleep lets this VM's idle vCPU slow down: every sample
** after one ran ~30% slower, tc and OpenBLAS alike). */
static void pause_ms(long ms) {
  double end = now_s() + (double)ms * 1e-3;
  while (now_s() < end) {
  }
}

static double sample(wl *w, void (*fn)(wl *)) {
  pause_ms(DIRECT_PAUSE_MS);
  double t0 = now_s();
  fn(w);
  return now_s() - t0;
}

static void run_direct(wl *w) {
  openblas_set_num_threads(tc_threads());
  direct_of(w)->run(w);
  openblas_set_num_threads(1);
}

static void check_direct(wl *w) {
  openblas_set_num_threads(tc_threads());
  direct_of(w)->check(w);
  openblas_set_num_threads(1);
}

static void finish(result *r, int n) {
  r->n = n;
  r->med = median(r->samples, n);
  r->min = r->max = r->samples[0];
  for (int i = 1; i < n; i++) {
    r->min = fmin(r->min, r->samples[i]);
    r->max = fmax(r->max, r->samples[i]);
  }
  r->ok = true;
}
#endif

static void measure_direct(wl *w) {
#ifdef TC_HAVE_CBLAS
  int i = (int)(w - workloads);
  result *d = dir_of(w), *e = &dir_eager[i], *c = &dir_comp[i];
  dir_inputs(w);
  check_direct(w);
  for (int k = 0; k < opt.warmup; k++) run_direct(w);
  cpu_snap c0 = cpu_snap_take();
  for (int r = 0; r < opt.reps; r++) {
    tc_compile_set(false);
    e->samples[r] = sample(w, w->iter);
    if (opt.compiled) {
      tc_compile_set(true);
      c->samples[r] = sample(w, w->iter);
      tc_compile_set(false);
    }
    d->samples[r] = sample(w, run_direct);
  }
  d->others = e->others = c->others = cpu_others(c0, cpu_snap_take(), &d->steal);
  finish(d, opt.reps);
  finish(e, opt.reps);
  if (opt.compiled) finish(c, opt.reps);
  check_direct(w);
  while (naliases) tc_release(aliases[--naliases]);
  pause_ms(300);
#else
  (void)w;
#endif
}

static void check(wl *w) {
  w->check(w);
  while (naliases) tc_release(aliases[--naliases]);
}

static void run_workload(wl *w) {
  jmp_buf jb;
  for (int i = 0; i < 8; i++) w->t[i] = NULL;
  if (opt.keep_going) {
    if (setjmp(jb)) {
      fail_jmp = NULL;
      tc_compile_set(false);
      w->failed = true;
      snprintf(w->err, sizeof w->err, "%s", fail_msg);
      fprintf(stderr, "tc-bench: %s FAILED: %s\n", w->id, fail_msg);
      return; /* its tensors leak: the state after a failure is not trusted */
    }
    fail_jmp = &jb;
  }
  fprintf(stderr, "tc-bench: %s %s ...\n", w->id, w->name);
  tc_clear_error();
  tc_compile_set(false);
  w->setup(w);
  check(w);
  measure(w, &w->eager, opt.warmup);
  if (opt.compiled) {
    tc_stats c0, c1;
    tc_stats_get(&c0);
    tc_compile_set(true);
    check(w);
    measure(w, &w->comp, opt.warmup_compiled);
    check(w); /* compiled kernels (if any were made) must still be right */
    tc_compile_set(false);
    tc_stats_get(&c1);
    w->cold.kernels = c1.kernels_compiled - c0.kernels_compiled;
    w->cold.ms = c1.compile_ms - c0.compile_ms;
    w->cold.wall_ms = c1.compile_wall_ms - c0.compile_wall_ms;
  }
  if (direct_of(w)) measure_direct(w);
  for (int i = 0; i < 8; i++) tc_release(w->t[i]);
  fail_jmp = NULL;
}

/* -- Output ----------------------------------------------------------------- */

static double g_others = -1, g_steal; /* whole run: CPU share of other processes, stolen */

static void fmt_time(char *buf, size_t n, const wl *w, double sec) {
  if (w->inner > 1) snprintf(buf, n, "%.1f ns", sec * 1e9);
  else if (sec < 1e-3) snprintf(buf, n, "%.1f us", sec * 1e6);
  else snprintf(buf, n, "%.3f ms", sec * 1e3);
}

static void fmt_rate(char *buf, size_t n, const wl *w, double sec) {
  if (w->flops > 0) snprintf(buf, n, "%.1f GFLOP/s", w->flops / sec / GB);
  else if (w->bytes > 0) snprintf(buf, n, "%.1f GB/s", w->bytes / sec / GB);
  else snprintf(buf, n, "%.2f Mop/s", 1.0 / sec / 1e6);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_result(FILE *f, const char *key, const wl *w, const result *r, double floor_s) {
  fprintf(f, ",\n      \"%s\": {\"median_s\": %.9g, \"min_s\": %.9g, \"max_s\": %.9g, \"n\": %d, \"samples_s\": [", key,
          r->med, r->min, r->max, r->n);
  for (int i = 0; i < r->n; i++) fprintf(f, "%s%.9g", i ? ", " : "", r->samples[i]);
  fprintf(f, "]");
  if (floor_s > 0) fprintf(f, ", \"ratio\": %.4f", r->med / floor_s);
  if (w->bytes > 0) fprintf(f, ", \"gbs\": %.4f", w->bytes / r->med / GB);
  if (w->flops > 0) fprintf(f, ", \"gflops\": %.4f", w->flops / r->med / GB);
  fprintf(f,
          ", \"cpu_others\": %.4f, \"cpu_steal\": %.4f"
          ", \"pool_misses\": %llu, \"regions\": %llu, \"regions_compiled\": %llu, \"kernels_compiled\": %llu"
          ", \"launches_per_iter\": %.4g}",
          r->others, r->steal, (unsigned long long)r->pool_misses, (unsigned long long)r->regions,
          (unsigned long long)r->regions_compiled, (unsigned long long)r->kernels_compiled, r->launches);
}

/* The kernel set OpenBLAS chose for this CPU, or NULL without OpenBLAS. */
static const char *blas_core(void) {
#if defined(TC_HAVE_CBLAS) && defined(OPENBLAS_VERSION)
  return openblas_get_corename();
#else
  return NULL;
#endif
}

/* Whether OpenBLAS's kernels are older than this CPU's vector ISA (it fell
** back to a generic core because it does not know the CPU). */
static bool blas_core_behind(const char *core) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const char *const avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
  bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (!avx2) return false;
  for (size_t i = avx512 ? 2 : 0; i < sizeof avx2_cores / sizeof avx2_cores[0]; i++)
    if (!strcasecmp(core, avx2_cores[i])) return false;
  return true;
#else
  (void)core;
  return false;
#endif
}

static const char *isa_name(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  return "x86-64";
#else
  return "?";
#endif
}

/* W6, W6m, W10 beside OpenBLAS called directly in the same run. */
static void print_direct(int nth) {
  bool any = false;
  for (int i = 0; i < NWL; i++) any |= workloads[i].selected && dir_res[i].ok;
  if (!any) return;
  const char *core = blas_core() ? blas_core() : "?";
  printf("\nOpenBLAS called directly (cblas_sgemm, its own %d thread%s, core %s), same run: samples of tc and\n"
         "OpenBLAS taken in turn (%d each, %d ms apart); medians; tc/dir = OpenBLAS time / tc time (100%% = as fast):\n",
         nth, nth == 1 ? "" : "s", core, opt.reps, DIRECT_PAUSE_MS);
  printf("%-4s %-31s %12s %15s %15s %7s", "id", "workload", "direct", "achieved", "tc eager", "tc/dir");
  if (opt.compiled) printf(" %15s %7s", "tc compiled", "tc/dir");
  printf("\n");
  for (int i = 0; i < NWL; i++) {
    const wl *w = &workloads[i];
    const result *d = &dir_res[i], *e = &dir_eager[i], *c = &dir_comp[i];
    if (!w->selected || !d->ok || !e->ok) continue;
    char t[32], a[32], ea[32], ca[32];
    fmt_time(t, sizeof t, w, d->med);
    fmt_rate(a, sizeof a, w, d->med);
    fmt_rate(ea, sizeof ea, w, e->med);
    printf("%-4s %-31s %12s %15s %15s %6.1f%%", w->id, w->name, t, a, ea, 100.0 * d->med / e->med);
    if (opt.compiled && c->ok) {
      fmt_rate(ca, sizeof ca, w, c->med);
      printf(" %15s %6.1f%%", ca, 100.0 * d->med / c->med);
    }
    printf("\n");
  }
  printf("direct: W6m, W6 the matmuls alone (W6's tc figure includes its bias adds and GELU); W10 the same MLP\n"
         "        with its elementwise ops too, one plain loop each (libm tanhf), rows split over %d pthread%s\n",
         nth, nth == 1 ? "" : "s");
  for (int i = 0; i < NWL; i++)
    if (workloads[i].selected && dir_res[i].ok && dir_res[i].others + dir_res[i].steal > 0.10)
      printf("note: %s: other processes used %.0f%% of the CPUs during the comparison; not reliable\n",
             workloads[i].id, 100 * dir_res[i].others);
  if (blas_core_behind(core))
    printf("note: OpenBLAS runs its %s kernels, older than this CPU's %s (0.3.21 falls back to Prescott on\n"
           "      CPUs it does not know); OPENBLAS_CORETYPE=%s gives its best kernels, the fairer comparison\n",
           core, isa_name(), strcmp(isa_name(), "AVX-512") ? "Haswell" : "SkylakeX");
}

static void write_json(const char *path, int nth, double bw1, double bwn, double bwn_end, double bwnt) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "tc-bench: cannot write %s\n", path);
    exit(1);
  }
  fprintf(f, "{\n  \"tool\": \"tc-bench\",\n  \"threads\": %d,\n  \"cpus_online\": %ld,\n  \"quick\": %s,\n", nth,
          sysconf(_SC_NPROCESSORS_ONLN), opt.quick ? "true" : "false");
  fprintf(f, "  \"reps\": %d,\n  \"warmup\": %d,\n  \"cpu_others\": %.4f,\n  \"cpu_steal\": %.4f,\n", opt.reps,
          opt.warmup, g_others, g_steal);
  fprintf(f,
          "  \"floor\": {\"kernel\": \"triad a=b+s*c, 24 B/element\", \"doubles_per_array\": %ld, "
          "\"gbs_1thread\": %.4f, \"gbs_all_threads\": %.4f, \"gbs_all_threads_at_end\": %.4f, "
          "\"gbs_all_threads_streaming_stores\": %.4f},\n",
          opt.triad_n, bw1, bwn, bwn_end, bwnt);
  if (blas_core()) {
    fprintf(f, "  \"openblas_core\": ");
    json_str(f, blas_core());
    fprintf(f, ",\n");
  }
  fprintf(f, "  \"workloads\": [");
  bool first = true;
  for (int i = 0; i < NWL; i++) {
    const wl *w = &workloads[i];
    if (!w->selected) continue;
    fprintf(f, "%s\n    {\"id\": ", first ? "" : ",");
    first = false;
    json_str(f, w->id);
    fprintf(f, ", \"name\": ");
    json_str(f, w->name);
    fprintf(f, ",\n      \"unit\": \"%s\", \"inner\": %ld, \"bytes\": %.0f, \"flops\": %.0f", w->inner > 1 ? "ns/op" : "ms",
            w->inner, w->bytes, w->flops);
    double floor_s = w->bytes > 0 ? w->bytes / (bwn * GB) : 0;
    if (floor_s > 0) fprintf(f, ", \"floor_s\": %.9g", floor_s);
    fprintf(f, ", \"ok\": %s", w->failed ? "false" : "true");
    if (w->failed) {
      fprintf(f, ", \"error\": ");
      json_str(f, w->err);
    }
    if (w->eager.ok) json_result(f, "eager", w, &w->eager, floor_s);
    if (w->comp.ok) json_result(f, "compiled", w, &w->comp, floor_s);
    if (dir_of(w)->ok) {
      json_result(f, "openblas_direct", w, dir_of(w), floor_s);
      json_result(f, "eager_beside_direct", w, &dir_eager[w - workloads], floor_s);
      if (dir_comp[w - workloads].ok) json_result(f, "compiled_beside_direct", w, &dir_comp[w - workloads], floor_s);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  fclose(f);
}

static void print_table(int nth, double bw1, double bwn, double bwn_end, double bwnt) {
  char cpu[128] = "?";
  FILE *ci = fopen("/proc/cpuinfo", "r");
  if (ci) {
    char line[256];
    while (fgets(line, sizeof line, ci))
      if (!strncmp(line, "model name", 10)) {
        char *c = strchr(line, ':');
        if (c) {
          c++;
          while (*c == ' ') c++;
          c[strcspn(c, "\n")] = 0;
          snprintf(cpu, sizeof cpu, "%s", c);
        }
        break;
      }
    fclose(ci);
  }
  printf("\ntc-bench: %d tc thread%s (%ld cpus online, %s, %s); median of %d runs after %d warm-up%s%s\n", nth,
         nth == 1 ? "" : "s", sysconf(_SC_NPROCESSORS_ONLN), cpu, isa_name(), opt.reps, opt.warmup,
         opt.warmup == 1 ? "" : "s", opt.quick ? " [--quick]" : "");
  printf("floor: STREAM triad (a = b + s*c, %ld doubles/array, 24 B/elem): 1 thread %.1f GB/s, %d thread%s %.1f GB/s"
         " (at end: %.1f GB/s)\n",
         opt.triad_n, bw1, nth, nth == 1 ? "" : "s", bwn, bwn_end);
  if (bwnt > 0)
    printf("       the same triad with streaming (non-temporal) stores, %d thread%s: %.1f GB/s (not the floor; a kernel\n"
           "       that skips the read-for-ownership of its output can beat the floor by up to this much)\n",
           nth, nth == 1 ? "" : "s", bwnt);
  printf("\n");

  printf("%-4s %-31s %12s %6s %10s %11s %7s %15s %5s", "id", "workload", "eager", "spread", "bytes", "floor", "ratio",
         "achieved", "k/it");
  if (opt.compiled) printf(" %12s %7s %8s %9s %5s", "compiled", "ratio", "speedup", "regions", "k/it");
  printf("\n");
  int width = 4 + 1 + 31 + 1 + 12 + 1 + 6 + 1 + 10 + 1 + 11 + 1 + 7 + 1 + 15 + 6 + (opt.compiled ? 46 : 0);
  for (int i = 0; i < width; i++) putchar('-');
  putchar('\n');

  for (int i = 0; i < NWL; i++) {
    const wl *w = &workloads[i];
    if (!w->selected) continue;
    printf("%-4s %-31s ", w->id, w->name);
    if (!w->eager.ok) {
      printf("FAILED: %s\n", w->err);
      continue;
    }
    char t[32], b[32], fl[32], ra[32], ach[32];
    double floor_s = w->bytes > 0 ? w->bytes / (bwn * GB) : 0;
    fmt_time(t, sizeof t, w, w->eager.med);
    fmt_rate(ach, sizeof ach, w, w->eager.med);
    if (w->bytes > 0) {
      snprintf(b, sizeof b, "%.1f MB", w->bytes / MB);
      fmt_time(fl, sizeof fl, w, floor_s);
      snprintf(ra, sizeof ra, "%.2fx", w->eager.med / floor_s);
    } else {
      snprintf(b, sizeof b, "-");
      snprintf(fl, sizeof fl, "-");
      snprintf(ra, sizeof ra, "-");
    }
    printf("%12s %5.1f%% %10s %11s %7s %15s %5.3g", t, 100.0 * (w->eager.max - w->eager.min) / w->eager.med, b, fl,
           ra, ach, w->eager.launches);
    if (opt.compiled) {
      if (w->comp.ok) {
        char ct[32], cr[32], rg[32];
        fmt_time(ct, sizeof ct, w, w->comp.med);
        if (floor_s > 0) snprintf(cr, sizeof cr, "%.2fx", w->comp.med / floor_s);
        else snprintf(cr, sizeof cr, "-");
        snprintf(rg, sizeof rg, "%llu/%llu", (unsigned long long)w->comp.regions_compiled,
                 (unsigned long long)w->comp.regions);
        printf(" %12s %7s %7.2fx %9s %5.3g", ct, cr, w->eager.med / w->comp.med, rg, w->comp.launches);
      } else {
        printf(" %12s", "FAILED");
      }
    }
    printf("\n");
    if (w->failed) printf("     FAILED (compiled): %s\n", w->err);
  }
  print_direct(nth);
  for (int i = 0; i < NWL; i++) w11_w12_notes(&workloads[i], bwn);
  for (int i = 0; i < NWL; i++) {
    const wl *w = &workloads[i];
    if (w->selected && w->eager.ok && w->eager.pool_misses > 0)
      printf("note: %s had %llu allocator pool misses during its timed eager runs\n", w->id,
             (unsigned long long)w->eager.pool_misses);
    if (w->selected && w->eager.ok && w->eager.others + w->eager.steal > 0.10)
      printf("note: %s: other processes used %.0f%% of the CPUs (and %.0f%% was stolen) during its timed runs;"
             " its figure is not reliable\n",
             w->id, 100 * w->eager.others, 100 * w->eager.steal);
  }
  if (opt.compiled) {
    double per[NWL];
    int np = 0;
    printf("cold compile (excluded from the compiled column):");
    for (int i = 0; i < NWL; i++) {
      const wl *w = &workloads[i];
      if (!w->selected || !w->cold.kernels)
        continue;
      printf(" %s %llu kernel%s %.0f ms (%.0f ms wall);", w->id,
             (unsigned long long)w->cold.kernels, w->cold.kernels > 1 ? "s" : "",
             w->cold.ms, w->cold.wall_ms);
      per[np++] = w->cold.ms / (double)w->cold.kernels;
    }
    for (int i = 1; i < np; i++)   /* insertion sort: a handful of values */
      for (int j = i; j > 0 && per[j] < per[j - 1]; j--) {
        double t = per[j];
        per[j] = per[j - 1];
        per[j - 1] = t;
      }
    if (np)
      printf(" median %.1f ms per kernel\n", per[np / 2]);
    else
      printf(" none (loaded from the disk store?)\n");
  }
  if (g_others >= 0)
    printf("machine: other processes used %.0f%% of the CPUs during the whole run, %.0f%% was stolen by the"
           " hypervisor%s\n",
           100 * g_others, 100 * g_steal,
           g_others + g_steal > 0.10 ? " -- the machine was busy: rerun when it is quiet" : "");

  printf("\nlegend:\n"
         "  eager     median wall time of one run (W5: of one op), tc_compile_set(false); outputs are\n"
         "            realized (or read) and released inside the timed loop\n"
         "  spread    (max - min) / median over the timed runs\n"
         "  bytes     the minimum bytes the workload must move (inputs read once + outputs written once;\n"
         "            W4 counts only x: a fused kernel never stores x*x; MB = 1e6 bytes)\n"
         "  floor     bytes / triad bandwidth at %d thread%s: the time the memory system alone needs\n"
         "  ratio     time / floor; 1.00x is the bandwidth bound, higher is slower\n"
         "  achieved  bytes / time (GB/s = 1e9 B/s); W6, W6m, W10: useful GFLOP/s (2*m*k*n per matmul); W5: ops/s\n",
         nth, nth == 1 ? "" : "s");
  if (opt.compiled)
    printf("  compiled  the same workload after tc_compile_set(true) and %d more warm-ups; regions =\n"
           "            regions run compiled / regions realized during the timed runs; speedup = eager / compiled\n",
           opt.warmup_compiled);
}

/* -- Main ------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: tc-bench [--quick] [--compiled] [--only ID,ID...] [--json FILE] [--reps N] [--keep-going]\n"
          "  --quick       fewer runs, smaller triad and W5 loop (CI smoke)\n"
          "  --compiled    also time every workload with tc_compile_set(true)\n"
          "  --only LIST   run only these workloads (ids: W0 W1 W1p W2 W2p W3 W3p W4 W4b W5 W6 W6m W7 W8 W9 W10 W11 W12\n"
          "                W13 W14 W14b W16)\n"
          "  --json FILE   also write the results as JSON\n"
          "  --reps N      timed runs per workload (default 11, --quick 3)\n"
          "  --keep-going  on a failed op or check, mark that workload FAILED and go on (exit status 1)\n"
          "Threads: TC_THREADS (tc_threads()); the triad uses the same count.\n");
}

static bool in_list(const char *list, const char *id) {
  size_t n = strlen(id);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncasecmp(p, id, n)) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

/* The fresh store made for this run, removed at exit. Registered before
** tc's first op, so it runs after tc's own exit handlers (LIFO). */
static char store_dir[] = "/tmp/tc-bench-cache-XXXXXX";

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st; (void)flag; (void)ftw;
  remove(path);
  return 0;
}

static void remove_store(void) {
  nftw(store_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv) {
  /* Compile hot regions inline, so the compiled column times compiled
  ** code once its warm-ups are done (compile time is reported apart); a
  ** fresh store, so compiles are real unless TC_CACHE_DIR is given. */
  setenv("TC_ASYNC", "0", 0);
  if (!getenv("TC_CACHE_DIR") && mkdtemp(store_dir)) {
    setenv("TC_CACHE_DIR", store_dir, 1);
    atexit(remove_store);
  }
  opt.reps = 11;
  opt.warmup = 2;
  opt.warmup_compiled = 5;
  opt.overhead_loop = 1000000;
  opt.triad_n = 32L * 1024 * 1024;
  opt.triad_reps = 10;
  int reps_override = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--quick")) opt.quick = true;
    else if (!strcmp(a, "--compiled")) opt.compiled = true;
    else if (!strcmp(a, "--keep-going")) opt.keep_going = true;
    else if (!strcmp(a, "--only") && i + 1 < argc) opt.only = argv[++i];
    else if (!strcmp(a, "--json") && i + 1 < argc) opt.json_path = argv[++i];
    else if (!strcmp(a, "--reps") && i + 1 < argc) {
      reps_override = atoi(argv[++i]);
      if (reps_override < 1 || reps_override > 64) {
        fprintf(stderr, "tc-bench: --reps takes 1..64\n");
        return 2;
      }
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "tc-bench: unknown or incomplete argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (opt.quick) {
    opt.reps = 3;
    opt.overhead_loop = 100000;
    opt.triad_n = 8L * 1024 * 1024;
    opt.triad_reps = 4;
  }
  if (reps_override) opt.reps = reps_override;

  int nsel = 0;
  for (int i = 0; i < NWL; i++) {
    wl *w = &workloads[i];
    w->selected = !opt.only || in_list(opt.only, w->id);
    if (w->inner > 1) w->inner = opt.overhead_loop;
    nsel += w->selected;
  }
  if (!nsel) {
    fprintf(stderr, "tc-bench: --only '%s' names no workload\n", opt.only);
    return 2;
  }

  int nth = tc_threads();
  if (nth < 1) {
    fprintf(stderr, "tc-bench: tc_threads() = %d\n", nth);
    return 1;
  }

  /* The floor, measured now on this machine. */
  long n = opt.triad_n;
  fprintf(stderr, "tc-bench: triad over 3 x %ld doubles (%.0f MiB) ...\n", n, 3.0 * n * 8 / (1 << 20));
  cpu_snap run0 = cpu_snap_take();
  double *a = triad_alloc(n), *b = triad_alloc(n), *c = triad_alloc(n);
  double bwn = triad_gbs(a, b, c, n, nth, opt.triad_reps, true, false);
  double bw1 = triad_gbs(a, b, c, n, 1, opt.triad_reps, false, false);
#if defined(__SSE2__)
  double bwnt = triad_gbs(a, b, c, n, nth, opt.triad_reps, false, true);
#else
  double bwnt = 0;
#endif

  int failed = 0;
  for (int i = 0; i < NWL; i++) {
    if (!workloads[i].selected) continue;
    run_workload(&workloads[i]);
    failed += workloads[i].failed;
  }

  /* Re-measure the floor: a drifting machine shows up here. */
  double bwn_end = triad_gbs(a, b, c, n, nth, opt.triad_reps, false, false);
  g_others = cpu_others(run0, cpu_snap_take(), &g_steal);
  free(a);
  free(b);
  free(c);

  print_table(nth, bw1, bwn, bwn_end, bwnt);
  if (opt.json_path) write_json(opt.json_path, nth, bw1, bwn, bwn_end, bwnt);
  return failed ? 1 : 0;
}
