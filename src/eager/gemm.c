/*
** gemm.c -- C = op(A) @ op(B) for the eager CPU backend, with an optional
** epilogue run on each finished tile of C while it is in cache (eager.h).
** Three paths, chosen once per process (gemm.h): tc's own packed kernel
** with AVX-512 or AVX2+FMA micro-kernels (x86, chosen at run time), the
** same kernel with a portable C micro-kernel, and the BLAS on fixed tiles.
**
** The own kernel (Goto/BLIS blocking, reorganized for thread-count
** independence and epilogues):
** - C is cut into row blocks of up to ~270 rows and column blocks of
**   EPW-column units (512 bytes of a row); a task is one (row block,
**   column block) pair, and the pool's threads take tasks from a shared
**   counter until none are left (the cut: plan(), a cost estimate). Which
**   thread computes a tile, or how C is cut, never changes its bits: every
**   element of C is the chain s = fma(a, b, s) over k in order from +0
**   (gemm.h), whatever the blocking.
** - Per task, for each KC-deep slice of k: the task's rows of op(A) are
**   copied into a slice that stays in L2 (a row panel, each row KCP apart,
**   or for a transposed A MR-wide column panels, both plain copies); then
**   for each NR-column strip, the first MR-row micro-tile reads its B
**   micro-panel straight from op(B) and packs it into an L1 buffer while it
**   computes (so the only stream from memory overlaps arithmetic, with a
**   prefetch GEMM_PD rows ahead), and the others reuse the packed panel.
** - On the last k slice each strip's values are final: every EPW columns
**   the epilogue runs on the row block x those columns (<= 280 x 512 B),
**   still in L2, on the thread that computed them.
**
** The BLAS path (on a CPU with neither AVX2 nor AVX-512, where OpenBLAS
** can be loaded) runs it single-threaded on fixed tiles of C: a
** multi-threaded BLAS call sums differently with the thread count.
** OpenBLAS is loaded with dlopen when that path is first asked about, not
** linked: loading it starts its thread pool (some 18 ms of a process's
** start on these machines, then a thread that spins for 0.1 s), which
** every program would pay for a library that the x86 paths never call.
**
** Measured on the 2-core Intel Xeon (AVX-512) dev machine, f32, thread CPU
** time, GFLOP/s: see bench/README.md ("W6m") for the figures against
** OpenBLAS in the same run.
*/
#ifndef GEMM_T   /* ---- the file proper; the template is at the end ---- */

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef TC_BLAS_DLOPEN
#include <dlfcn.h>
#include <pthread.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define GEMM_X86 1
#include <immintrin.h>
#else
#define GEMM_X86 0
#endif

#include "eager.h"
#include "gemm.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Round n up to a multiple of r. */
static inline int64_t round_up(int64_t n, int64_t r)
{
  return (n + r - 1) / r * r;
}

static inline int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

#if GEMM_X86
/* Transpose 8 rows of 8 f32 in registers: r[i][j] becomes r[j][i]. */
static inline __attribute__((always_inline, target("avx"))) void
transpose8_f32(__m256 r[8])
{
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

/* dst[i * ldd + j] = src[j * lds + i] for an 8 x 8 block of f32: the
** transposing copy that packs a transposed B (gemm's pack_b), 8 k steps of
** 8 of its rows at a time instead of one element at a time. */
__attribute__((target("avx"))) static void
transpose8x8_f32(const float *src, int64_t lds, float *dst, int64_t ldd)
{
  __m256 r[8];
  for (int i = 0; i < 8; i++)
    r[i] = _mm256_loadu_ps(src + i * lds);
  transpose8_f32(r);
  for (int i = 0; i < 8; i++)
    _mm256_storeu_ps(dst + i * ldd, r[i]);
}
#endif

/* c[q] (q < 16, or 8 with AVX2) = the chain s = fma(a[p * as], w[q * ldw
** + p], s) over p in order from +0: the dot products of a with 16 (8) rows
** of W, the transposed vector path's kernel (gemv below). Each 16 (8) k
** steps of the rows are transposed in registers, so that one vector FMA
** advances every chain by one step in the chain's own order: the bits of
** the scalar chain. Sixteen row streams advancing a cache line per step
** defeat the hardware prefetcher; the rows GEMV_PF ahead are prefetched by
** hand (about 2.5x on the dev machine's Xeon). */
#define GEMV_PF 16
#if GEMM_X86
static inline __attribute__((always_inline, target("avx512f"))) void
transpose16_f32(__m512 r[16])
{
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

/* The k steps past the last whole block, one scalar chain per row. */
__attribute__((target("fma"))) static void
dots_tail_f32(int rows, int64_t p, int64_t k, const float *a, int64_t as,
              const float *w, int64_t ldw, float *s)
{
  for (; p < k; p++)
    for (int q = 0; q < rows; q++)
      s[q] = __builtin_fmaf(a[p * as], w[q * ldw + p], s[q]);
}

__attribute__((target("avx512f,fma"))) static void
dots16_f32(int64_t k, const float *a, int64_t as, const float *w,
           int64_t ldw, float *c)
{
  __m512 acc = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; i++) {
      r[i] = _mm512_loadu_ps(w + i * ldw + p);
      _mm_prefetch((const char *)(w + (i + GEMV_PF) * ldw + p), _MM_HINT_T0);
    }
    transpose16_f32(r);
    for (int i = 0; i < 16; i++)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(a[(p + i) * as]), r[i], acc);
  }
  _mm512_storeu_ps(c, acc);
  dots_tail_f32(16, p, k, a, as, w, ldw, c);
}

/* The AVX2 kernel also prefetches the next 8 rows itself, 256 bytes a step
** (what a step reads), in address order when the rows are contiguous: on
** the dev machine's Zen 3 that read a 37 MB weight from memory at 19-23
** GB/s on two threads, against 14-16 for GEMV_PF rows ahead a line per row
** (the hardware prefetcher follows one ascending stream better than eight
** interleaved ones). */
__attribute__((target("avx2,fma"))) static void
dots8_f32(int64_t k, const float *a, int64_t as, const float *w, int64_t ldw,
          float *c)
{
  __m256 acc = _mm256_setzero_ps();
  const char *next = (const char *)(w + 8 * ldw);
  bool contiguous = ldw == k;
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    if (contiguous)
      for (int l = 0; l < 256; l += 64)
        _mm_prefetch(next + p * 32 + l, _MM_HINT_T0);
    else if (p % 16 == 0)
      for (int i = 0; i < 8; i++)
        _mm_prefetch((const char *)(w + (i + 8) * ldw + p), _MM_HINT_T0);
    __m256 r[8];
    for (int i = 0; i < 8; i++)
      r[i] = _mm256_loadu_ps(w + i * ldw + p);
    transpose8_f32(r);
    for (int i = 0; i < 8; i++)
      acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + (p + i) * as), r[i], acc);
  }
  _mm256_storeu_ps(c, acc);
  dots_tail_f32(8, p, k, a, as, w, ldw, c);
}
#endif

/* -- Blocking ---------------------------------------------------------------
** None of these change results (gemm.h); they are sized for the caches of
** the machines tc runs on (L1 32-48 KiB, L2 512 KiB - 2 MiB). */

/* Below this many flops a call runs on the calling thread. */
#define GEMM_MIN_FLOPS EAGER_GEMM_SPLIT_FLOPS
/* Rows of op(B) the packing micro-kernel prefetches ahead. */
#define GEMM_PD 24
/* A row block's A slice (rows x KC) stays below this in L2. */
#define GEMM_SLICE_BYTES (288 << 10)
/* Epilogue tiles and task units: this many bytes of a row of C. */
#define GEMM_EP_BYTES 512

/* -- The BLAS, loaded at run time ------------------------------------------
** The CBLAS entry points tc calls, bound from OpenBLAS with dlopen (their C
** ABI and the CBLAS enum values are fixed by the CBLAS standard). */

#ifdef TC_BLAS_DLOPEN
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float,
                               const float *, int, const float *, int, float,
                               float *, int);
typedef void (*cblas_dgemm_fn)(int, int, int, int, int, int, double,
                               const double *, int, const double *, int,
                               double, double *, int);

static struct {
  pthread_once_t once;
  bool ok;
  cblas_sgemm_fn sgemm;
  cblas_dgemm_fn dgemm;
} blas = { .once = PTHREAD_ONCE_INIT };

/* Load OpenBLAS (the loader's search path) and bind its CBLAS. It runs
** single-threaded: tc splits the work itself (blas_gemm below). */
static void blas_load(void)
{
  static const char *const sonames[] = { "libopenblas.so.0",
                                         "libopenblas.so" };
  for (size_t i = 0; i < sizeof sonames / sizeof *sonames; i++) {
    void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
      continue;
    void (*set_threads)(int) =
        (void (*)(int))dlsym(h, "openblas_set_num_threads");
    blas.sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    blas.dgemm = (cblas_dgemm_fn)dlsym(h, "cblas_dgemm");
    if (set_threads && blas.sgemm && blas.dgemm) {
      set_threads(1);
      blas.ok = true;
      return;   /* kept open for the process's life */
    }
    blas.sgemm = NULL;
    blas.dgemm = NULL;
    dlclose(h);
  }
}

static bool blas_loaded(void)
{
  pthread_once(&blas.once, blas_load);
  return blas.ok;
}
#endif /* TC_BLAS_DLOPEN */

/* -- Paths ------------------------------------------------------------------ */

static const char *const path_names[GEMM__MAX] = {
  [GEMM_AUTO] = "auto", [GEMM_AVX512] = "avx512", [GEMM_AVX2] = "avx2",
  [GEMM_PORTABLE] = "portable", [GEMM_BLAS] = "blas",
};

/* The portable micro-kernel fuses its multiply-adds where the build
** targets FMA hardware (as approx.h does), else multiplies then adds. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define PORTABLE_FMA 1
#else
#define PORTABLE_FMA 0
#endif

bool eager_gemm_path_available(gemm_path p)
{
#if GEMM_X86
  __builtin_cpu_init();         /* in case this runs before constructors */
#endif
  switch (p) {
  case GEMM_AUTO:
  case GEMM_PORTABLE:
    return true;
#if GEMM_X86
  case GEMM_AVX512:
    return __builtin_cpu_supports("avx512f");
  case GEMM_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#ifdef TC_BLAS_DLOPEN
  case GEMM_BLAS:
    return blas_loaded();
#endif
  default:
    return false;
  }
}

bool eager_gemm_path_fma(gemm_path p)
{
  return p == GEMM_AVX512 || p == GEMM_AVX2
         || (p == GEMM_PORTABLE && PORTABLE_FMA);
}

const char *eager_gemm_path_name(gemm_path p)
{
  return p >= 0 && p < GEMM__MAX ? path_names[p] : "?";
}

/* The best path here: the own kernel for the widest ISA, else the BLAS,
** else the portable kernel. Depends on the CPU only. */
static gemm_path path_detect(void)
{
  if (eager_gemm_path_available(GEMM_AVX512))
    return GEMM_AVX512;
  if (eager_gemm_path_available(GEMM_AVX2))
    return GEMM_AVX2;
  if (eager_gemm_path_available(GEMM_BLAS))
    return GEMM_BLAS;
  return GEMM_PORTABLE;
}

static _Atomic int path_auto = -1;       /* path_detect(), once */
static _Atomic int path_forced = GEMM_AUTO;

gemm_path eager_gemm_path(void)
{
  int p = atomic_load_explicit(&path_forced, memory_order_relaxed);
  if (p != GEMM_AUTO)
    return (gemm_path)p;
  p = atomic_load_explicit(&path_auto, memory_order_relaxed);
  if (p < 0) {
    p = path_detect();
    atomic_store_explicit(&path_auto, p, memory_order_relaxed);
  }
  return (gemm_path)p;
}

bool eager_gemm_set_path(gemm_path p)
{
  if (p < 0 || p >= GEMM__MAX || !eager_gemm_path_available(p))
    return false;
  atomic_store_explicit(&path_forced, p, memory_order_relaxed);
  return true;
}

/* -- Instantiations ----------------------------------------------------------
** The template below is compiled once per element type: the x86
** micro-kernels (gemm_micro.h), a portable one, packing, tasks. */

#define GEMM_T float
#define GEMM_SFX f32
#define GEMM_FMA_FN __builtin_fmaf
#define GEMM_KCP (GEMM_KC + 16)    /* 64 bytes of padding per row */
#define GEMM_PT_VL 8               /* portable kernel: 6 x 16 */
#define GEMM_PT_MR 6
#define GEMM_PT_NR 16
#if GEMM_X86
#define GEMM_X_V512 __m512
#define GEMM_X_V256 __m256
#define GEMM_X(op) CAT(op, _ps)
#define GEMM_X_DOTS512 16, dots16_f32
#define GEMM_X_DOTS256 8, dots8_f32
#endif
#include "gemm.c"

#define GEMM_T double
#define GEMM_SFX f64
#define GEMM_FMA_FN __builtin_fma
#define GEMM_KCP (GEMM_KC + 8)
#define GEMM_PT_VL 4               /* portable kernel: 6 x 8 */
#define GEMM_PT_MR 6
#define GEMM_PT_NR 8
#if GEMM_X86
#define GEMM_X_V512 __m512d
#define GEMM_X_V256 __m256d
#define GEMM_X(op) CAT(op, _pd)
#define GEMM_X_DOTS512 0, NULL
#define GEMM_X_DOTS256 0, NULL
#endif
#include "gemm.c"

/* -- The BLAS path ------------------------------------------------------------ */

#ifdef TC_BLAS_DLOPEN

/* A leading dim as the BLAS wants it: ignored (so normalized) when the
** stored matrix has one row, else it must cover the row. Returns false when
** the BLAS cannot take the operand (the caller then uses our kernel). */
static bool blas_ld(int64_t rows, int64_t cols, int64_t ld, int64_t *out)
{
  if (rows <= 1)
    ld = cols > 1 ? cols : 1;
  if (ld < cols || ld < 1 || ld > INT_MAX)
    return false;
  *out = ld;
  return true;
}

/* Can the BLAS run this call? Normalizes the leading dims in place. */
static bool blas_ok(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    int64_t *lda, int64_t *ldb, int64_t *ldc)
{
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return false;
  return blas_ld(ta ? k : m, ta ? m : k, *lda, lda)
         && blas_ld(tb ? n : k, tb ? k : n, *ldb, ldb)
         && blas_ld(m, n, *ldc, ldc);
}

/* OpenBLAS splits a multi-threaded call by the thread count, and its sums
** change with the split (1 thread vs 2: ~5% of elements differ by an ulp,
** measured on 300x2000 @ 2000x700), which would break principle 2. So the
** BLAS runs single-threaded, on tiles of C whose size depends on the shape
** alone, and our pool spreads the tiles over the threads. Tiles are at most
** BLAS_TILE square, evened out (384 columns: two of 192, not 256 + 128);
** each is also an epilogue tile (256 KiB of f32: in L2). */
#define BLAS_TILE 256

/* One call, split into tiles; a, b, c are float or double (f64). */
typedef struct {
  bool ta, tb, f64;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t tm, tn;               /* tile size */
  int64_t tiles_n;              /* tiles per row of tiles */
  const void *a, *b;            /* borrowed */
  void *c;                      /* borrowed */
  eager_gemm_epilogue ep;       /* or NULL */
  void *ep_ctx;                 /* borrowed */
} blas_args;

/* Tile t of C (row-major order over tiles), one BLAS call, its epilogue. */
static void blas_tile(const blas_args *g, int64_t t)
{
  int64_t i0 = t / g->tiles_n * g->tm, j0 = t % g->tiles_n * g->tn;
  int mt = (int)min64(g->tm, g->m - i0), nt = (int)min64(g->tn, g->n - j0);
  int64_t ao = g->ta ? i0 : i0 * g->lda, bo = g->tb ? j0 * g->ldb : j0;
  int64_t co = i0 * g->ldc + j0;
  int ta = g->ta ? CBLAS_TRANS : CBLAS_NO_TRANS;
  int tb = g->tb ? CBLAS_TRANS : CBLAS_NO_TRANS;
  if (g->f64)
    blas.dgemm(CBLAS_ROW_MAJOR, ta, tb, mt, nt, (int)g->k, 1.0,
               (const double *)g->a + ao, (int)g->lda,
               (const double *)g->b + bo, (int)g->ldb, 0.0,
               (double *)g->c + co, (int)g->ldc);
  else
    blas.sgemm(CBLAS_ROW_MAJOR, ta, tb, mt, nt, (int)g->k, 1.0f,
               (const float *)g->a + ao, (int)g->lda,
               (const float *)g->b + bo, (int)g->ldb, 0.0f,
               (float *)g->c + co, (int)g->ldc);
  if (g->ep)
    g->ep(g->ep_ctx, i0, i0 + mt, j0, j0 + nt);
}

/* Split len into even tiles of at most BLAS_TILE (multiples of 16 when
** split); returns the count and sets *size. */
static int64_t tile_count(int64_t len, int64_t *size)
{
  int64_t count = (len + BLAS_TILE - 1) / BLAS_TILE;
  *size = count == 1 ? len : round_up((len + count - 1) / count, 16);
  return (len + *size - 1) / *size;
}

/* tensor_range_fn over tiles: each tile is its own call, never merged, so
** the split into ranges cannot change a result. */
static void blas_range(void *ctx, int64_t lo, int64_t hi)
{
  for (int64_t t = lo; t < hi; t++)
    blas_tile(ctx, t);
}

/* The BLAS path for m, n, k > 0. Returns false when the BLAS cannot take
** the call (int overflow, leading dims); the caller then uses ours. */
static bool blas_gemm(blas_args *g)
{
  if (!blas_ok(g->ta, g->tb, g->m, g->n, g->k, &g->lda, &g->ldb, &g->ldc))
    return false;
  int64_t tiles_m = tile_count(g->m, &g->tm);
  g->tiles_n = tile_count(g->n, &g->tn);
  double tile_flops = 2.0 * (double)g->tm * (double)g->tn * (double)g->k;
  int64_t grain = (int64_t)(GEMM_MIN_FLOPS / tile_flops) + 1;
  tensor_parallel(tiles_m * g->tiles_n, grain, blas_range, g);
  return true;
}

#endif /* TC_BLAS_DLOPEN */

/* Did the BLAS take the call? Only on its path, for a non-empty product
** it can express; a, b, c are float or double (f64). */
static bool blas_took(gemm_path p, bool f64, bool ta, bool tb, int64_t m,
                      int64_t n, int64_t k, const void *a, int64_t lda,
                      const void *b, int64_t ldb, void *c, int64_t ldc,
                      eager_gemm_epilogue ep, void *ctx)
{
#ifdef TC_BLAS_DLOPEN
  blas_args g = { .ta = ta, .tb = tb, .f64 = f64, .m = m, .n = n, .k = k,
                  .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b,
                  .c = c, .ep = ep, .ep_ctx = ctx };
  return p == GEMM_BLAS && m > 0 && n > 0 && k > 0 && blas_gemm(&g);
#else
  (void)p, (void)f64, (void)ta, (void)tb, (void)m, (void)n, (void)k;
  (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc, (void)ep;
  (void)ctx;
  return false;
#endif
}

/* -- Entry points ------------------------------------------------------------ */

/* Per element type: the BLAS when it is the path and takes the call, else
** our kernel (the portable one when the BLAS was the path). */
#define GEMM_ENTRIES(sfx, T, f64)                                              void eager_gemm_##sfx##_ep(bool ta, bool tb, int64_t m, int64_t n,                                      int64_t k, const T *a, int64_t lda, const T *b,                              int64_t ldb, T *c, int64_t ldc,                                              eager_gemm_epilogue ep, void *ctx)                {                                                                              gemm_path p = eager_gemm_path();                                             if (blas_took(p, f64, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, ep, ctx))       return;                                                                    own_##sfx(p == GEMM_BLAS ? GEMM_PORTABLE : p, ta, tb, m, n, k, a, lda,                 b, ldb, c, ldc, ep, ctx);                                        }                                                                            void eager_gemm_##sfx(bool ta, bool tb, int64_t m, int64_t n, int64_t k,                           const T *a, int64_t lda, const T *b, int64_t ldb,                            T *c, int64_t ldc)                                     {                                                                              eager_gemm_##sfx##_ep(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, NULL,                               NULL);                                               }
GEMM_ENTRIES(f32, float, false)
GEMM_ENTRIES(f64, double, true)
#undef GEMM_ENTRIES

/* At library init: the path is chosen (and OpenBLAS loaded where it is
** the path) before any op runs. */
void eager_gemm_init(void)
{
  (void)eager_gemm_path();
}

const char *eager_gemm_backend(void)
{
  switch (eager_gemm_path()) {
  case GEMM_AVX512:
    return "tc avx512";
  case GEMM_AVX2:
    return "tc avx2";
#ifdef TC_BLAS_DLOPEN
  case GEMM_BLAS:
    return "openblas (cblas)";
#endif
  default:
    return "tc portable";
  }
}

#else /* GEMM_T: ---- the template, included above once per type ---- */

/* Names and types of this instantiation. */
#define G(name) CAT(CAT(name, _), GEMM_SFX)

/* A micro-kernel: an h x NR tile of C (ldc) from a packed A slice and a
** packed B micro-panel (gemm_micro.h); the _pack form (h = MR only) also
** packs the B micro-panel from op(B) rows (ldb apart) into bout. */
typedef void (*G(micro_fn))(int h, int64_t kc, const GEMM_T *a,
                            const GEMM_T *b, GEMM_T *c, int64_t ldc,
                            bool first);
typedef void (*G(micro_pack_fn))(int64_t kc, const GEMM_T *a, GEMM_T *c,
                                 int64_t ldc, bool first, const GEMM_T *bsrc,
                                 int64_t ldb, GEMM_T *bout);

/* One ISA's kernels. */
typedef struct {
  int mr, nr;
  bool fma;                     /* the chain uses fused multiply-adds */
  G(micro_fn) rp, cp;           /* row-panel / column-panel A */
  G(micro_pack_fn) rp_pack, cp_pack;   /* or NULL: pack B apart */
  int ndots;                    /* rows per dots call, or 0: no dots */
  void (*dots)(int64_t k, const GEMM_T *a, int64_t as, const GEMM_T *w,
               int64_t ldw, GEMM_T *c);   /* the transposed vector path
                                             (dots16_f32) */
} G(kern);

/* -- x86 micro-kernels ---------------------------------------------------- */

#if GEMM_X86

#define MK_SFX CAT(avx512_, GEMM_SFX)
#define MK_TARGET "avx512f,fma"
#define MK_VL (64 / (int)sizeof(GEMM_T))
#define MK_MR 14
#define MK_NR (2 * MK_VL)
#define MK_V GEMM_X_V512
#define MK_LOADU(p) GEMM_X(_mm512_loadu)(p)
#define MK_LOAD(p) GEMM_X(_mm512_load)(p)
#define MK_STORE(p, v) GEMM_X(_mm512_store)(p, v)
#define MK_STOREU(p, v) GEMM_X(_mm512_storeu)(p, v)
#define MK_SET1(x) GEMM_X(_mm512_set1)(x)
#define MK_ZERO() GEMM_X(_mm512_setzero)()
#define MK_FMA(a, b, c) GEMM_X(_mm512_fmadd)(a, b, c)
#include "gemm_micro.h"

#define MK_SFX CAT(avx2_, GEMM_SFX)
#define MK_TARGET "avx2,fma"
#define MK_VL (32 / (int)sizeof(GEMM_T))
#define MK_MR 6
#define MK_NR (2 * MK_VL)
#define MK_V GEMM_X_V256
#define MK_LOADU(p) GEMM_X(_mm256_loadu)(p)
#define MK_LOAD(p) GEMM_X(_mm256_load)(p)
#define MK_STORE(p, v) GEMM_X(_mm256_store)(p, v)
#define MK_STOREU(p, v) GEMM_X(_mm256_storeu)(p, v)
#define MK_SET1(x) GEMM_X(_mm256_set1)(x)
#define MK_ZERO() GEMM_X(_mm256_setzero)()
#define MK_FMA(a, b, c) GEMM_X(_mm256_fmadd)(a, b, c)
#include "gemm_micro.h"

static const G(kern) G(kern_avx512) = {
  14, 128 / (int)sizeof(GEMM_T), true,
  G(micro_rp_avx512), G(micro_cp_avx512),
  G(micro_rp_pack_avx512), G(micro_cp_pack_avx512), GEMM_X_DOTS512,
};
static const G(kern) G(kern_avx2) = {
  6, 64 / (int)sizeof(GEMM_T), true,
  G(micro_rp_avx2), G(micro_cp_avx2),
  G(micro_rp_pack_avx2), G(micro_cp_pack_avx2), GEMM_X_DOTS256,
};

#undef GEMM_X_V512
#undef GEMM_X_V256
#undef GEMM_X_DOTS512
#undef GEMM_X_DOTS256
#undef GEMM_X

#endif /* GEMM_X86 */

/* -- Portable micro-kernel -------------------------------------------------
** Plain C that GCC vectorizes (GEMM_PT_VL lanes per vector); the same
** chain as the x86 kernels when the build targets FMA hardware. */

#if PORTABLE_FMA
#define PT_FMA(a, b, c) GEMM_FMA_FN(a, b, c)
#else
#define PT_FMA(a, b, c) ((a) * (b) + (c))
#endif

_Static_assert(GEMM_PT_NR % GEMM_PT_VL == 0, "NR is whole vectors");

static inline __attribute__((always_inline)) void
G(pt_body)(const int H, const int64_t ars, const int64_t acs, int64_t kc,
           const GEMM_T *restrict a, const GEMM_T *restrict b,
           GEMM_T *restrict c, int64_t ldc, bool first)
{
  GEMM_T acc[GEMM_PT_MR][GEMM_PT_NR] __attribute__((aligned(64)));
#pragma GCC unroll 8
  for (int i = 0; i < H; i++)
#pragma GCC unroll 16
    for (int j = 0; j < GEMM_PT_NR; j++)
      acc[i][j] = first ? 0 : c[i * ldc + j];
  for (int64_t p = 0; p < kc; p++, a += acs, b += GEMM_PT_NR) {
#pragma GCC unroll 8
    for (int i = 0; i < H; i++) {
      GEMM_T ai = a[i * ars];
#pragma GCC unroll 16
      for (int j = 0; j < GEMM_PT_NR; j++)
        acc[i][j] = PT_FMA(ai, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < H; i++)
#pragma GCC unroll 16
    for (int j = 0; j < GEMM_PT_NR; j++)
      c[i * ldc + j] = acc[i][j];
}

#define PT_CASES(ARS, ACS)                                                   \
  switch (h) {                                                               \
  case GEMM_PT_MR:                                                           \
    G(pt_body)(GEMM_PT_MR, ARS, ACS, kc, a, b, c, ldc, first);               \
    break;                                                                   \
  case 4:                                                                    \
    G(pt_body)(4, ARS, ACS, kc, a, b, c, ldc, first);                        \
    break;                                                                   \
  case 2:                                                                    \
    G(pt_body)(2, ARS, ACS, kc, a, b, c, ldc, first);                        \
    break;                                                                   \
  default:                                                                   \
    G(pt_body)(1, ARS, ACS, kc, a, b, c, ldc, first);                        \
    break;                                                                   \
  }

static void G(pt_rp)(int h, int64_t kc, const GEMM_T *a, const GEMM_T *b,
                     GEMM_T *c, int64_t ldc, bool first)
{
  PT_CASES(GEMM_KCP, 1)
}

static void G(pt_cp)(int h, int64_t kc, const GEMM_T *a, const GEMM_T *b,
                     GEMM_T *c, int64_t ldc, bool first)
{
  PT_CASES(1, GEMM_PT_MR)
}

#undef PT_CASES

static const G(kern) G(kern_portable) = {
  GEMM_PT_MR, GEMM_PT_NR, PORTABLE_FMA, G(pt_rp), G(pt_cp), NULL, NULL, 0, NULL,
};

static const G(kern) *G(kern_of)(gemm_path p)
{
#if GEMM_X86
  if (p == GEMM_AVX512)
    return &G(kern_avx512);
  if (p == GEMM_AVX2)
    return &G(kern_avx2);
#endif
  (void)p;
  return &G(kern_portable);
}

/* The largest height <= rows that the kernels have (MR, 8 if MR > 8, 4,
** 2, 1): a short panel is computed as a few of these, never padded. */
static inline int G(height)(const G(kern) *kr, int64_t rows)
{
  if (rows >= kr->mr)
    return kr->mr;
  if (rows >= 8 && kr->mr > 8)
    return 8;
  return rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
}

/* -- One call --------------------------------------------------------------- */

/* A call and its cut into tasks (shared by the threads; read-only but for
** the task counter). */
typedef struct {
  const G(kern) *kr;            /* borrowed (static) */
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  const GEMM_T *a, *b;          /* borrowed */
  GEMM_T *c;                    /* borrowed */
  eager_gemm_epilogue ep;       /* or NULL */
  void *ep_ctx;                 /* borrowed */
  int64_t mb;                   /* rows per row block */
  int64_t epw;                  /* columns per epilogue tile */
  int64_t nt;                   /* columns per task (a multiple of epw) */
  int64_t ncb, ntasks;          /* column blocks, tasks */
  _Atomic int64_t next;         /* next task to take */
} G(job);

/* One thread's buffers: the A slice, the B micro-panel, an edge tile. */
typedef struct {
  GEMM_T *a, *b, *t;            /* owned (one block from tensor_alloc) */
  size_t bytes;
} G(scratch);

static bool G(scratch_get)(const G(job) *J, G(scratch) *W)
{
  const G(kern) *kr = J->kr;
  size_t na = (size_t)round_up(J->mb, kr->mr) * GEMM_KCP;
  size_t nb = (size_t)GEMM_KC * (size_t)kr->nr;
  size_t nt = (size_t)kr->mr * (size_t)kr->nr;
  size_t sa = (size_t)round_up((int64_t)(na * sizeof(GEMM_T)), 64);
  size_t sb = (size_t)round_up((int64_t)(nb * sizeof(GEMM_T)), 64);
  W->bytes = sa + sb + nt * sizeof(GEMM_T);
  char *p = tensor_alloc(W->bytes);
  if (!p)
    return false;
  W->a = (GEMM_T *)p;
  W->b = (GEMM_T *)(p + sa);
  W->t = (GEMM_T *)(p + sa + sb);
  return true;
}

/* -- Packing ------------------------------------------------------------------ */

/* h elements of each of kc rows of A (lda apart) into a column panel, mr
** apart. Inlined with a constant h for full panels: a call to memcpy for
** each 24 or 56 bytes cost more than the copy (a GPT step's weight
** gradients, X^T @ dY, spent some 5% of the step in memmove). */
static inline __attribute__((always_inline)) void
G(pack_a_panel)(const int h, int64_t kc, const GEMM_T *restrict src,
                int64_t lda, GEMM_T *restrict ap, int mr)
{
  for (int64_t p = 0; p < kc; p++, src += lda, ap += mr)
    for (int r = 0; r < h; r++)
      ap[r] = src[r];
}

/* op(A)[i0 .. i1, pc .. pc+kc) into the slice: not transposed, row r at
** ap[r * KCP] (plain copies of A's rows); transposed, MR-row panels, panel
** q at ap[q * MR * KC] holding row r, step p at [p * MR + r] (plain copies
** of A's rows too, MR elements at a time). Nothing is padded: the kernels
** read only the rows a tile has. */
static void G(pack_a)(const G(job) *J, int64_t i0, int64_t i1, int64_t pc,
                      int64_t kc, GEMM_T *restrict ap)
{
  if (!J->ta) {
    for (int64_t i = i0; i < i1; i++)
      memcpy(ap + (i - i0) * GEMM_KCP, J->a + i * J->lda + pc,
             sizeof(GEMM_T) * (size_t)kc);
    return;
  }
  int mr = J->kr->mr;
  for (int64_t r0 = i0; r0 < i1; r0 += mr, ap += mr * GEMM_KC) {
    int64_t h = min64(mr, i1 - r0);
    const GEMM_T *src = J->a + pc * J->lda + r0;
    if (h == 6)                 /* the AVX2 and portable panels */
      G(pack_a_panel)(6, kc, src, J->lda, ap, mr);
    else if (h == 14)           /* AVX-512's */
      G(pack_a_panel)(14, kc, src, J->lda, ap, mr);
    else
      G(pack_a_panel)((int)h, kc, src, J->lda, ap, mr);
  }
}

/* op(B)[pc .. pc+kc, j0 .. j0+nr) into an NR-wide micro-panel, zero
** padded: bp[p * NR + j]. For a transposed B or a last, narrow strip; full
** strips of a plain B are packed by the micro-kernel as it goes. */
static void G(pack_b)(const G(job) *J, int64_t pc, int64_t kc, int64_t j0,
                      int64_t nr, GEMM_T *restrict bp)
{
  int NR = J->kr->nr;
  if (nr < NR)
    memset(bp, 0, sizeof(GEMM_T) * (size_t)(kc * NR));
  if (J->tb) {                  /* B is n x k: read along its rows */
    int64_t j8 = 0, p8 = 0;
#if GEMM_X86
    if (sizeof(GEMM_T) == 4 &&  /* AVX is there: blocks of 8 x 8 */
        (J->kr == &G(kern_avx512) || J->kr == &G(kern_avx2))) {
      j8 = nr & ~(int64_t)7;
      p8 = kc & ~(int64_t)7;
      for (int64_t j = 0; j < j8; j += 8)
        for (int64_t p = 0; p < p8; p += 8)
          transpose8x8_f32((const float *)(J->b + (j0 + j) * J->ldb + pc + p),
                           J->ldb, (float *)(bp + p * NR + j), NR);
    }
#endif
    for (int64_t j = 0; j < nr; j++) {
      const GEMM_T *src = J->b + (j0 + j) * J->ldb + pc;
      for (int64_t p = j < j8 ? p8 : 0; p < kc; p++)
        bp[p * NR + j] = src[p];
    }
  } else {
    const GEMM_T *src = J->b + pc * J->ldb + j0;
    for (int64_t p = 0; p < kc; p++, src += J->ldb)
      memcpy(bp + p * NR, src, sizeof(GEMM_T) * (size_t)nr);
  }
}

/* -- Tasks -------------------------------------------------------------------- */

/* Where row r of a row block starts in its A slice. */
static inline const GEMM_T *G(a_row)(const G(job) *J, const GEMM_T *ap,
                                     int64_t r)
{
  if (!J->ta)
    return ap + r * GEMM_KCP;
  int mr = J->kr->mr;
  return ap + r / mr * mr * GEMM_KC + r % mr;
}

/* Fetch the next micro-tile of C (h rows of NR) while this one computes. */
static inline void G(prefetch_c)(const GEMM_T *c, int64_t rows, int64_t ldc,
                                 int nr)
{
  for (int64_t i = 0; i < rows; i++)
    for (int l = 0; l < nr * (int)sizeof(GEMM_T); l += 64)
      __builtin_prefetch((const char *)(c + i * ldc) + l, 1, 3);
}

/* Task t: C[i0 .. i1, j0 .. j1), every k slice, epilogues on the last. */
static void G(task)(const G(job) *J, const G(scratch) *W, int64_t t)
{
  const G(kern) *kr = J->kr;
  const int NR = kr->nr;
  int64_t i0 = t / J->ncb * J->mb, i1 = min64(i0 + J->mb, J->m);
  int64_t j0 = t % J->ncb * J->nt, j1 = min64(j0 + J->nt, J->n);
  bool full_first = i1 - i0 >= kr->mr;
  for (int64_t pc = 0; pc < J->k; pc += GEMM_KC) {
    int64_t kc = min64(GEMM_KC, J->k - pc);
    bool first = pc == 0, last = pc + kc == J->k;
    G(pack_a)(J, i0, i1, pc, kc, W->a);
    int64_t ep0 = j0;
    for (int64_t jr = j0; jr < j1; jr += NR) {
      int64_t nr = min64(NR, j1 - jr);
      bool fuse = kr->rp_pack && !J->tb && nr == NR && full_first;
      if (!fuse)
        G(pack_b)(J, pc, kc, jr, nr, W->b);
      for (int64_t ir = i0, h; ir < i1; ir += h) {
        h = G(height)(kr, i1 - ir);
        const GEMM_T *ar = G(a_row)(J, W->a, ir - i0);
        GEMM_T *c = J->c + ir * J->ldc + jr;
        if (nr < NR) {          /* last strip: through the edge tile */
          for (int64_t i = 0; !first && i < h; i++)
            memcpy(W->t + i * NR, c + i * J->ldc,
                   sizeof(GEMM_T) * (size_t)nr);
          (J->ta ? kr->cp : kr->rp)((int)h, kc, ar, W->b, W->t, NR, first);
          for (int64_t i = 0; i < h; i++)
            memcpy(c + i * J->ldc, W->t + i * NR,
                   sizeof(GEMM_T) * (size_t)nr);
          continue;
        }
        if (ir + h < i1)
          G(prefetch_c)(c + h * J->ldc, min64(kr->mr, i1 - ir - h), J->ldc,
                        NR);
        if (fuse && ir == i0)
          (J->ta ? kr->cp_pack : kr->rp_pack)(kc, ar, c, J->ldc, first,
                                              J->b + pc * J->ldb + jr,
                                              J->ldb, W->b);
        else
          (J->ta ? kr->cp : kr->rp)((int)h, kc, ar, W->b, c, J->ldc, first);
      }
      int64_t end = min64(jr + NR, j1);
      if (last && J->ep && (end == j1 || (end - j0) % J->epw == 0)) {
        J->ep(J->ep_ctx, i0, i1, ep0, end);
        ep0 = end;
      }
    }
  }
}

/* Without scratch memory: the same chains, one element at a time (slow,
** but the same bits), then the epilogue on the task's tiles. */
static void G(task_unpacked)(const G(job) *J, int64_t t)
{
  int64_t i0 = t / J->ncb * J->mb, i1 = min64(i0 + J->mb, J->m);
  int64_t j0 = t % J->ncb * J->nt, j1 = min64(j0 + J->nt, J->n);
  bool fma = J->kr->fma;
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++) {
      GEMM_T s = 0;
      for (int64_t p = 0; p < J->k; p++) {
        GEMM_T x = J->ta ? J->a[p * J->lda + i] : J->a[i * J->lda + p];
        GEMM_T y = J->tb ? J->b[j * J->ldb + p] : J->b[p * J->ldb + j];
        s = fma ? GEMM_FMA_FN(x, y, s) : s + x * y;
      }
      J->c[i * J->ldc + j] = s;
    }
  for (int64_t e = j0; J->ep && e < j1; e += J->epw)
    J->ep(J->ep_ctx, i0, i1, e, min64(e + J->epw, j1));
}

/* tensor_range_fn: one per thread; takes tasks until none are left. */
static void G(worker)(void *ctx, int64_t lo, int64_t hi)
{
  (void)lo;
  (void)hi;
  G(job) *J = ctx;
  G(scratch) W = { 0 };
  bool ok = G(scratch_get)(J, &W);
  for (;;) {
    int64_t t = atomic_fetch_add_explicit(&J->next, 1, memory_order_relaxed);
    if (t >= J->ntasks)
      break;
    if (ok)
      G(task)(J, &W, t);
    else
      G(task_unpacked)(J, t);
  }
  if (ok)
    tensor_free_block(W.a, W.bytes);
}

/* The cut of C into tasks: rblocks x ncb, row blocks of mb rows (whole
** micro-panels, the A slice within GEMM_SLICE_BYTES), column blocks of
** whole epilogue units. Each task copies its A rows once per k slice (not
** overlapped with arithmetic) and reads its B columns once (packed by the
** micro-kernel, overlapped), so column blocks cost copies of A and row
** blocks re-reads of B; threads taking tasks in turn want a number of
** tasks that lets them finish together, and some slack for a busy machine.
** The estimate below, in flops' time, weighs these (its constants fit the
** W6 shapes on the Xeon: 1 x 2 tasks for 2 threads was the fastest of the
** cuts tried, by up to 10%); it depends on the thread count, results do
** not. */
#define GEMM_COST_COPY_A 64     /* flops' time per element of A copied */
#define GEMM_COST_READ_B 32     /* per element of B read by one more task */

static void G(plan)(G(job) *J, int threads)
{
  const int64_t mr = J->kr->mr, m = J->m, n = J->n, k = J->k;
  int64_t cap = GEMM_SLICE_BYTES / (GEMM_KCP * (int64_t)sizeof(GEMM_T));
  /* Row blocks of at least 4 micro-panels; beyond 4 tasks per thread
  ** more cuts only cost (so the search stays small). */
  int64_t rb_min = ceil_div(m, cap);
  int64_t rb_max = min64(max64(rb_min, m / (4 * mr)), rb_min + 4 * threads);
  int64_t units = min64(ceil_div(n, J->epw), 4 * (int64_t)threads);
  if (threads <= 1) {           /* one task: every copy once */
    rb_max = rb_min;
    units = 1;
  }
  double flops = 2.0 * (double)m * (double)n * (double)k, best = -1;
  for (int64_t rb = rb_min; rb <= rb_max; rb++) {
    int64_t mb = round_up(ceil_div(m, rb), mr);
    if (ceil_div(m, mb) != rb)  /* the same cut as a smaller rb */
      continue;
    for (int64_t cb = 1; cb <= units; cb++) {
      int64_t w = ceil_div(ceil_div(n, J->epw), cb);
      if (ceil_div(ceil_div(n, J->epw), w) != cb)
        continue;
      int64_t tasks = rb * cb, rounds = ceil_div(tasks, threads);
      double cost = flops * (double)(rounds * threads) / (double)tasks
                    + GEMM_COST_COPY_A * (double)m * (double)k * (double)cb
                    + GEMM_COST_READ_B * (double)k * (double)n * (double)rb;
      if (tasks < 2 * (int64_t)threads)   /* no slack for a busy core */
        cost += flops * 0.01 * (2.0 - (double)tasks / threads);
      if (best < 0 || cost < best) {
        best = cost;
        J->mb = mb;
        J->nt = w * J->epw;
      }
    }
  }
  if (best < 0) {
    J->mb = round_up(ceil_div(m, rb_min), mr);
    J->nt = round_up(n, J->epw);
  }
  J->ncb = ceil_div(n, J->nt);
  J->ntasks = ceil_div(m, J->mb) * J->ncb;
}

/* -- One row of C (m == 1: decoding, a batch of one) --------------------------
** A vector times a matrix is bound by reading B once; packing B, or
** micro-tiles of MR rows with one of them used, costs several times that.
** The same chains as every path (gemm.h: s = fma(a, b, s) over k in order
** from +0), so the bits are those of the packed kernel. op(B) plain: each
** k step is an axpy over a strip of columns (vectorized across j); op(B)
** transposed (x @ W^T, W's rows contiguous in k): a vector of dot products
** at a time, transposed in registers (the ISA's dots kernel, f32), else
** GEMV_CHAINS scalar chains that fill the FMA pipes. Columns go in blocks
** of at most GEMV_COLS (an epilogue tile's 512 bytes, eager.h), as many per
** thread, each a whole number of dots groups; the epilogue runs per block.
** Whether to use the pool is decided by the bytes of B read, the cost: a
** decoder's 288 x 288 weight (2 x 166K flops, far under GEMM_MIN_FLOPS)
** read from memory takes some 40 us on one thread, several times a pool
** wake. */
#define GEMV_COLS (GEMM_EP_BYTES / (int64_t)sizeof(GEMM_T))
#define GEMV_CHAINS 8
#define GEMV_SPLIT_BYTES (96 << 10)
#define GEMV_COLS_MIN 16        /* a block's width is a multiple of this */

typedef struct {
  const G(kern) *kr;            /* borrowed (static) */
  bool ta, tb, fma;
  int64_t n, k, lda, ldb;
  int64_t width;                /* columns a block */
  const GEMM_T *a, *b;
  GEMM_T *c;
  eager_gemm_epilogue ep;
  void *ep_ctx;
} G(gemv_job);

static inline GEMM_T G(gemv_step)(bool fma, GEMM_T x, GEMM_T y, GEMM_T s)
{
  return fma ? GEMM_FMA_FN(x, y, s) : s + x * y;
}

/* GEMV_CHAINS dot products of a with rows of w, one scalar chain each.
** Kept scalar: GCC's SLP vectorizer packs the chains into vectors with
** inserts, which costs more than the loads it saves. The loop is written
** once; the two calls below make a copy per constant fma. */
static inline __attribute__((always_inline)) void
G(gemv_chains_loop)(const bool fma, int64_t k, const GEMM_T *a, int64_t as,
                    const GEMM_T *w, int64_t ldw, GEMM_T *c)
{
  GEMM_T s[GEMV_CHAINS] = { 0 };
  for (int64_t p = 0; p < k; p++) {
    GEMM_T x = a[p * as];
    for (int q = 0; q < GEMV_CHAINS; q++)
      s[q] = G(gemv_step)(fma, x, w[q * ldw + p], s[q]);
  }
  for (int q = 0; q < GEMV_CHAINS; q++)
    c[q] = s[q];
}

__attribute__((optimize("no-tree-slp-vectorize"))) static void
G(gemv_chains)(bool fma, int64_t k, const GEMM_T *a, int64_t as,
               const GEMM_T *w, int64_t ldw, GEMM_T *c)
{
  if (fma)
    G(gemv_chains_loop)(true, k, a, as, w, ldw, c);
  else
    G(gemv_chains_loop)(false, k, a, as, w, ldw, c);
}

/* acc[j] (j < w) += the dot product of a with column j of b: row by row
** of b, each row one vectorized update of every chain. Written once; the
** caller makes a copy per constant fma. */
static inline __attribute__((always_inline)) void
G(gemv_rows_loop)(const bool fma, int64_t k, const GEMM_T *a, int64_t as,
                  const GEMM_T *b, int64_t ldb, int64_t w, GEMM_T *acc)
{
  for (int64_t p = 0; p < k; p++) {
    GEMM_T x = a[p * as];
    const GEMM_T *row = b + p * ldb;
    for (int64_t j = 0; j < w; j++)
      acc[j] = G(gemv_step)(fma, x, row[j], acc[j]);
  }
}

static void G(gemv_cols)(const G(gemv_job) *J, int64_t j0, int64_t j1)
{
  const GEMM_T *a = J->a, *b = J->b;
  int64_t as = J->ta ? J->lda : 1;   /* op(A)(0, p) = a[p * as] */
  GEMM_T *c = J->c;
  if (!J->tb) {
    GEMM_T acc[GEMV_COLS];
    int64_t w = j1 - j0;
    for (int64_t j = 0; j < w; j++)
      acc[j] = 0;
    if (J->fma)
      G(gemv_rows_loop)(true, J->k, a, as, b + j0, J->ldb, w, acc);
    else
      G(gemv_rows_loop)(false, J->k, a, as, b + j0, J->ldb, w, acc);
    memcpy(c + j0, acc, sizeof *acc * (size_t)w);
    return;
  }
  int64_t j = j0;
  if (J->kr->dots)
    for (; j + J->kr->ndots <= j1; j += J->kr->ndots)
      J->kr->dots(J->k, a, as, b + j * J->ldb, J->ldb, c + j);
  for (; j + GEMV_CHAINS <= j1; j += GEMV_CHAINS)
    G(gemv_chains)(J->fma, J->k, a, as, b + j * J->ldb, J->ldb, c + j);
  for (; j < j1; j++) {
    GEMM_T s = 0;
    for (int64_t p = 0; p < J->k; p++)
      s = G(gemv_step)(J->fma, a[p * as], b[j * J->ldb + p], s);
    c[j] = s;
  }
}

static void G(gemv_range)(void *ctx, int64_t lo, int64_t hi)
{
  const G(gemv_job) *J = ctx;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t j0 = blk * J->width, j1 = min64(j0 + J->width, J->n);
    G(gemv_cols)(J, j0, j1);
    if (J->ep)
      J->ep(J->ep_ctx, 0, 1, j0, j1);
  }
}

static void G(gemv)(const G(kern) *kr, bool ta, bool tb, int64_t n,
                    int64_t k, const GEMM_T *a, int64_t lda,
                    const GEMM_T *b, int64_t ldb, GEMM_T *c,
                    eager_gemm_epilogue ep, void *ep_ctx)
{
  G(gemv_job) J = { kr, ta, tb, kr->fma, n, k, lda, ldb, GEMV_COLS,
                    a, b, c, ep, ep_ctx };
  int threads = eager_cfg()->threads;
  double bytes = (double)n * (double)k * (double)sizeof(GEMM_T);
  if (bytes < GEMV_SPLIT_BYTES || threads < 2 || n < 2 * GEMV_COLS_MIN) {
    G(gemv_range)(&J, 0, ceil_div(n, J.width));
    return;
  }
  /* Equal blocks, a whole number per thread: 300 f32 columns on two
  ** threads are blocks of 80, 80 | 80, 60, not 128, 128 | 44. */
  int64_t blocks = round_up(ceil_div(n, GEMV_COLS), threads);
  J.width = round_up(ceil_div(n, blocks), GEMV_COLS_MIN);
  tensor_parallel(ceil_div(n, J.width), 1, G(gemv_range), &J);
}

/* The own kernel for any m, n, k >= 0 (gemm.h). */
static void G(own)(gemm_path path, bool ta, bool tb, int64_t m, int64_t n,
                   int64_t k, const GEMM_T *a, int64_t lda, const GEMM_T *b,
                   int64_t ldb, GEMM_T *c, int64_t ldc,
                   eager_gemm_epilogue ep, void *ep_ctx)
{
  if (m <= 0 || n <= 0)
    return;
  const G(kern) *kr = G(kern_of)(path);
  if (m == 1 && k > 0) {
    G(gemv)(kr, ta, tb, n, k, a, lda, b, ldb, c, ep, ep_ctx);
    return;
  }
  G(job) J = { .kr = kr, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
               .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b, .c = c,
               .ep = ep, .ep_ctx = ep_ctx };
  J.epw = GEMM_EP_BYTES / (int64_t)sizeof(GEMM_T);
  double flops = 2.0 * (double)m * (double)n * (double)k;
  int threads = flops < GEMM_MIN_FLOPS ? 1 : eager_cfg()->threads;
  G(plan)(&J, threads);
  atomic_init(&J.next, 0);
  if (k <= 0) {                 /* C = 0 (A, B unread), the epilogues */
    for (int64_t t = 0; t < J.ntasks; t++)
      G(task_unpacked)(&J, t);
    return;
  }
  int64_t parts = min64(threads, J.ntasks);
  if (parts <= 1)
    G(worker)(&J, 0, 1);
  else
    tensor_parallel(parts, 1, G(worker), &J);
}

void G(eager_gemm_portable)(bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const GEMM_T *a, int64_t lda,
                            const GEMM_T *b, int64_t ldb, GEMM_T *c,
                            int64_t ldc)
{
  G(own)(GEMM_PORTABLE, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, NULL, NULL);
}

#undef G
#undef PT_FMA
#undef GEMM_T
#undef GEMM_SFX
#undef GEMM_FMA_FN
#undef GEMM_KCP
#undef GEMM_PT_VL
#undef GEMM_PT_MR
#undef GEMM_PT_NR

#endif /* GEMM_T */
