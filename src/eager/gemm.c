/*
** gemm.c -- C = op(A) @ op(B) for the eager CPU backend: the BLAS when the
** build found one (TC_HAVE_CBLAS), else our own cache-blocked kernel, which
** is always compiled (eager_gemm_blocked_*, gemm.h) so that it stays tested.
**
** The blocked kernel is the Goto/BLIS scheme: for each NC-column slab of C
** and each KC-deep slice of k, pack op(B) into NR-wide micro-panels (L3);
** for each MC-row block, pack op(A) into MR-tall micro-panels (L2); then a
** register-blocked MR x NR micro-kernel runs over the tiles, its B
** micro-panel (KC x NR) staying in L1. The trans flags are absorbed by the
** packing, so one micro-kernel serves all four cases. The micro-kernel is
** plain C on GCC vector extensions (32 bytes: AVX2 at -march=x86-64-v3);
** there is no FMA (-ffp-contract=off), but Zen 3 issues two multiplies and
** two adds per cycle on separate pipes, so mul + add reaches the FMA peak
** in principle.
**
** Threads split C into contiguous slabs of whole micro-tiles (columns when
** n >= m, else rows); each thread packs its own panels. Every element of C
** is summed in the same order whatever the split (gemm.h), so results do
** not depend on the thread count (DESIGN.md, principle 2).
**
** Measured on the 2-core AMD EPYC (Zen 3) dev machine, GCC 12 -O3
** -march=x86-64-v3 -ffp-contract=off, no trans, GFLOP/s (best of many
** runs; the machine was shared). "OpenBLAS" is 0.3.21 as called here
** (single-threaded BLAS on fixed tiles, see BLAS_TILE); in brackets, one
** plain multi-threaded cblas call, which is not thread-count invariant:
**
**                          blocked 1T  OpenBLAS 1T  blocked 2T  OpenBLAS 2T
**   f32 256x1024 @ 1024x4096     87       87 [91]     168       171 [179]
**   f32 256x4096 @ 4096x1024     86       87 [92]     167       174 [179]
**   f64 256x1024 @ 1024x4096     40       40 [43]      77        80 [84]
**
** With tb the B packing is a strided gather and costs ~5% more; at -O2
** instead of -O3 the blocked kernel loses ~7%.
*/
#ifndef GEMM_T   /* ---- the file proper; the template is at the end ---- */

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef TC_HAVE_CBLAS
#include <cblas.h>
#endif

#include "eager.h"
#include "gemm.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Round n up to a multiple of r. */
static inline int64_t round_up(int64_t n, int64_t r)
{
  return (n + r - 1) / r * r;
}

/* Below this many flops per range a thread is not worth waking. */
#define GEMM_MIN_FLOPS (1 << 20)

/* -- Instantiations ---------------------------------------------------------
** The template below is compiled once per element type. MR x NR is the
** register tile: MR rows x (NR / VL) vectors = 12 accumulators, leaving 4
** of the 16 ymm registers for the B vectors, the broadcast and a product.
** MC x KC of A fits in L2 (512 KiB); KC x NR of B in L1 (32 KiB). */

#define GEMM_T float
#define GEMM_SFX f32
#define GEMM_VL 8
#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_MC 120
#define GEMM_NC 4096
#include "gemm.c"

#define GEMM_T double
#define GEMM_SFX f64
#define GEMM_VL 4
#define GEMM_MR 6
#define GEMM_NR 8
#define GEMM_MC 96
#define GEMM_NC 2048
#include "gemm.c"

/* -- Entry points ------------------------------------------------------------ */

#ifdef TC_HAVE_CBLAS

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
** repacking A once per tile column and B once per tile row costs ~5%. */
#define BLAS_TILE 256

static void blas_init(void)
{
#ifdef OPENBLAS_VERSION
  static atomic_bool done;
  if (!atomic_load_explicit(&done, memory_order_acquire)) {
    openblas_set_num_threads(1);
    atomic_store_explicit(&done, true, memory_order_release);
  }
#endif
}

/* One call, split into tiles; a, b, c are float or double (f64). */
typedef struct {
  bool ta, tb, f64;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t tm, tn;               /* tile size */
  int64_t tiles_n;              /* tiles per row of tiles */
  const void *a, *b;            /* borrowed */
  void *c;                      /* borrowed */
} blas_args;

/* Tile t of C (row-major order over tiles), one BLAS call. */
static void blas_tile(const blas_args *g, int64_t t)
{
  int64_t i0 = t / g->tiles_n * g->tm, j0 = t % g->tiles_n * g->tn;
  int mt = (int)min64(g->tm, g->m - i0), nt = (int)min64(g->tn, g->n - j0);
  int64_t ao = g->ta ? i0 : i0 * g->lda, bo = g->tb ? j0 * g->ldb : j0;
  int64_t co = i0 * g->ldc + j0;
  enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
  if (g->f64)
    cblas_dgemm(CblasRowMajor, ta, tb, mt, nt, (int)g->k, 1.0,
                (const double *)g->a + ao, (int)g->lda,
                (const double *)g->b + bo, (int)g->ldb, 0.0,
                (double *)g->c + co, (int)g->ldc);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, mt, nt, (int)g->k, 1.0f,
                (const float *)g->a + ao, (int)g->lda,
                (const float *)g->b + bo, (int)g->ldb, 0.0f,
                (float *)g->c + co, (int)g->ldc);
}

/* Split len into even tiles of at most BLAS_TILE (multiples of 16 when
** split); returns the count and sets *size. */
static int64_t tile_count(int64_t len, int64_t *size)
{
  int64_t count = (len + BLAS_TILE - 1) / BLAS_TILE;
  *size = count == 1 ? len : round_up((len + count - 1) / count, 16);
  return (len + *size - 1) / *size;
}

/* eager_range_fn over tiles: each tile is its own call, never merged, so
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
  blas_init();
  int64_t tiles_m = tile_count(g->m, &g->tm);
  g->tiles_n = tile_count(g->n, &g->tn);
  double tile_flops = 2.0 * (double)g->tm * (double)g->tn * (double)g->k;
  int64_t grain = (int64_t)(GEMM_MIN_FLOPS / tile_flops) + 1;
  eager_parallel(tiles_m * g->tiles_n, grain, blas_range, g);
  return true;
}

#endif /* TC_HAVE_CBLAS */

void eager_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc)
{
#ifdef TC_HAVE_CBLAS
  blas_args g = { .ta = ta, .tb = tb, .f64 = false, .m = m, .n = n, .k = k,
                  .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b,
                  .c = c };
  if (m > 0 && n > 0 && k > 0 && blas_gemm(&g))
    return;
#endif
  eager_gemm_blocked_f32(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

void eager_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const double *a, int64_t lda, const double *b,
                    int64_t ldb, double *c, int64_t ldc)
{
#ifdef TC_HAVE_CBLAS
  blas_args g = { .ta = ta, .tb = tb, .f64 = true, .m = m, .n = n, .k = k,
                  .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b,
                  .c = c };
  if (m > 0 && n > 0 && k > 0 && blas_gemm(&g))
    return;
#endif
  eager_gemm_blocked_f64(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

/* At library init: OpenBLAS's own threads would otherwise spin (yielding)
** after load and steal cycles from every op until the first matmul. */
void eager_gemm_init(void)
{
#ifdef TC_HAVE_CBLAS
  blas_init();
#endif
}

const char *eager_gemm_backend(void)
{
#if defined(TC_HAVE_CBLAS) && defined(OPENBLAS_VERSION)
  return "openblas (cblas)";
#elif defined(TC_HAVE_CBLAS)
  return "cblas";
#else
  return "blocked";
#endif
}

#else /* GEMM_T: ---- the template, included above once per type ---- */

/* Names and types of this instantiation. */
#define G(name) CAT(CAT(name, _), GEMM_SFX)
#define NV (GEMM_NR / GEMM_VL)          /* vectors per tile row */

typedef GEMM_T G(vec) __attribute__((vector_size(GEMM_VL * sizeof(GEMM_T))));
/* The same vector at element alignment, for loads and stores of C. */
typedef GEMM_T G(uvec) __attribute__((vector_size(GEMM_VL * sizeof(GEMM_T)),
                                      aligned(sizeof(GEMM_T))));

_Static_assert(GEMM_NR % GEMM_VL == 0, "NR is whole vectors");
_Static_assert(GEMM_MC % GEMM_MR == 0, "MC is whole micro-panels");
_Static_assert(GEMM_NC % GEMM_NR == 0, "NC is whole micro-panels");

/* Everything a range of C needs. */
typedef struct {
  bool ta, tb;
  int64_t m, n, k;
  const GEMM_T *a, *b;          /* borrowed */
  int64_t lda, ldb, ldc;
  GEMM_T *c;                    /* borrowed */
  bool split_n;                 /* ranges are NR-column units, else MR rows */
} G(gemm_args);

/* -- Packing ------------------------------------------------------------------ */

/* Pack op(A)[i0 .. i0+mc, p0 .. p0+kc) into MR-row micro-panels: panel r
** holds ap[r*kc*MR + p*MR + i] = op(A)[i0 + r*MR + i][p0 + p], zero-padded
** to whole panels. */
static void G(pack_a)(const G(gemm_args) *g, int64_t i0, int64_t mc,
                      int64_t p0, int64_t kc, GEMM_T *restrict ap)
{
  for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
    int64_t mr = min64(GEMM_MR, mc - ir);
    GEMM_T *restrict dst = ap + ir * kc;
    if (g->ta) {                /* A is k x m: rows of op(A) are columns */
      const GEMM_T *src = g->a + p0 * g->lda + (i0 + ir);
      for (int64_t p = 0; p < kc; p++, src += g->lda, dst += GEMM_MR) {
        int64_t i = 0;
        for (; i < mr; i++)
          dst[i] = src[i];
        for (; i < GEMM_MR; i++)
          dst[i] = 0;
      }
    } else {
      const GEMM_T *src = g->a + (i0 + ir) * g->lda + p0;
      if (mr == GEMM_MR) {
        for (int64_t p = 0; p < kc; p++, dst += GEMM_MR)
          for (int64_t i = 0; i < GEMM_MR; i++)
            dst[i] = src[i * g->lda + p];
      } else {
        for (int64_t p = 0; p < kc; p++, dst += GEMM_MR) {
          int64_t i = 0;
          for (; i < mr; i++)
            dst[i] = src[i * g->lda + p];
          for (; i < GEMM_MR; i++)
            dst[i] = 0;
        }
      }
    }
  }
}

/* Pack op(B)[p0 .. p0+kc, j0 .. j0+nc) into NR-column micro-panels:
** bp[r*kc*NR + p*NR + j] = op(B)[p0 + p][j0 + r*NR + j], zero-padded. */
static void G(pack_b)(const G(gemm_args) *g, int64_t p0, int64_t kc,
                      int64_t j0, int64_t nc, GEMM_T *restrict bp)
{
  for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
    int64_t nr = min64(GEMM_NR, nc - jr);
    GEMM_T *restrict dst = bp + jr * kc;
    if (g->tb) {                /* B is n x k: gather NR rows, write along */
      const GEMM_T *src = g->b + (j0 + jr) * g->ldb + p0;
      if (nr == GEMM_NR) {
        for (int64_t p = 0; p < kc; p++, dst += GEMM_NR)
#pragma GCC unroll 16
          for (int64_t j = 0; j < GEMM_NR; j++)
            dst[j] = src[j * g->ldb + p];
      } else {
        for (int64_t p = 0; p < kc; p++, dst += GEMM_NR) {
          int64_t j = 0;
          for (; j < nr; j++)
            dst[j] = src[j * g->ldb + p];
          for (; j < GEMM_NR; j++)
            dst[j] = 0;
        }
      }
    } else {
      const GEMM_T *src = g->b + p0 * g->ldb + (j0 + jr);
      if (nr == GEMM_NR) {
        for (int64_t p = 0; p < kc; p++, src += g->ldb, dst += GEMM_NR)
          memcpy(dst, src, sizeof(GEMM_T) * GEMM_NR);
      } else {
        for (int64_t p = 0; p < kc; p++, src += g->ldb, dst += GEMM_NR) {
          int64_t j = 0;
          for (; j < nr; j++)
            dst[j] = src[j];
          for (; j < GEMM_NR; j++)
            dst[j] = 0;
        }
      }
    }
  }
}

/* -- Micro-kernel ------------------------------------------------------------- */

/* C tile (mr x nr valid of MR x NR) = or += the sum over kc of the packed
** panels' outer products. Accumulators start at +0 and run in k order;
** first: C = acc, else C = C + acc (the order gemm.h promises). */
static void G(micro)(int64_t kc, const GEMM_T *restrict ap,
                     const GEMM_T *restrict bp, GEMM_T *restrict c,
                     int64_t ldc, int64_t mr, int64_t nr, bool first)
{
  G(vec) acc[GEMM_MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < GEMM_MR; i++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++)
      acc[i][v] = (G(vec)){ 0 };

  for (int64_t p = 0; p < kc; p++, ap += GEMM_MR, bp += GEMM_NR) {
    G(vec) bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++)
      bv[v] = *(const G(vec) *)(bp + v * GEMM_VL);
#pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++) {
      GEMM_T ai = ap[i];
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++)
        acc[i][v] += bv[v] * ai;
    }
  }

  if (mr == GEMM_MR && nr == GEMM_NR) {
#pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++) {
      G(uvec) *row = (G(uvec) *)(c + i * ldc);
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++)
        row[v] = first ? acc[i][v] : row[v] + acc[i][v];
    }
    return;
  }
  /* Edge tile: spill the accumulators and copy the valid part. */
  GEMM_T tile[GEMM_MR][GEMM_NR] __attribute__((aligned(64)));
  memcpy(tile, acc, sizeof tile);
  for (int64_t i = 0; i < mr; i++)
    for (int64_t j = 0; j < nr; j++)
      c[i * ldc + j] = first ? tile[i][j] : c[i * ldc + j] + tile[i][j];
}

/* -- Blocking ----------------------------------------------------------------- */

/* Without packing buffers (out of memory): the same sums in the same order,
** one element at a time. Slow, but results match the blocked path. */
static void G(unpacked)(const G(gemm_args) *g, int64_t i0, int64_t i1,
                        int64_t j0, int64_t j1)
{
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++)
      for (int64_t p0 = 0; p0 < g->k; p0 += GEMM_KC) {
        int64_t p1 = min64(p0 + GEMM_KC, g->k);
        GEMM_T s = 0;
        for (int64_t p = p0; p < p1; p++) {
          GEMM_T x = g->ta ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
          GEMM_T y = g->tb ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
          s += x * y;
        }
        GEMM_T *cij = g->c + i * g->ldc + j;
        *cij = p0 == 0 ? s : *cij + s;
      }
}

/* C[i0 .. i1, j0 .. j1) with this thread's own packing buffers. */
static void G(block)(const G(gemm_args) *g, int64_t i0, int64_t i1,
                     int64_t j0, int64_t j1)
{
  int64_t kcmax = min64(GEMM_KC, g->k);
  int64_t mcmax = round_up(min64(GEMM_MC, i1 - i0), GEMM_MR);
  int64_t ncmax = round_up(min64(GEMM_NC, j1 - j0), GEMM_NR);
  size_t asz = (size_t)round_up(mcmax * kcmax * (int64_t)sizeof(GEMM_T), 64);
  size_t bsz = (size_t)round_up(ncmax * kcmax * (int64_t)sizeof(GEMM_T), 64);
  GEMM_T *ap = aligned_alloc(64, asz);
  GEMM_T *bp = aligned_alloc(64, bsz);
  if (!ap || !bp) {
    free(ap);
    free(bp);
    G(unpacked)(g, i0, i1, j0, j1);
    return;
  }
  for (int64_t jc = j0; jc < j1; jc += GEMM_NC) {
    int64_t nc = min64(GEMM_NC, j1 - jc);
    for (int64_t pc = 0; pc < g->k; pc += GEMM_KC) {
      int64_t kc = min64(GEMM_KC, g->k - pc);
      G(pack_b)(g, pc, kc, jc, nc, bp);
      for (int64_t ic = i0; ic < i1; ic += GEMM_MC) {
        int64_t mc = min64(GEMM_MC, i1 - ic);
        G(pack_a)(g, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
          for (int64_t ir = 0; ir < mc; ir += GEMM_MR)
            G(micro)(kc, ap + ir * kc, bp + jr * kc,
                     g->c + (ic + ir) * g->ldc + (jc + jr), g->ldc,
                     min64(GEMM_MR, mc - ir), min64(GEMM_NR, nc - jr),
                     pc == 0);
      }
    }
  }
  free(ap);
  free(bp);
}

/* eager_range_fn: units of NR columns or MR rows (g->split_n). */
static void G(range)(void *ctx, int64_t lo, int64_t hi)
{
  const G(gemm_args) *g = ctx;
  if (g->split_n)
    G(block)(g, 0, g->m, lo * GEMM_NR, min64(hi * GEMM_NR, g->n));
  else
    G(block)(g, lo * GEMM_MR, min64(hi * GEMM_MR, g->m), 0, g->n);
}

void G(eager_gemm_blocked)(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const GEMM_T *a, int64_t lda, const GEMM_T *b,
                           int64_t ldb, GEMM_T *c, int64_t ldc)
{
  if (m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; i++)
      memset(c + i * ldc, 0, sizeof(GEMM_T) * (size_t)n);
    return;
  }
  G(gemm_args) g = { .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .a = a,
                     .b = b, .lda = lda, .ldb = ldb, .c = c, .ldc = ldc,
                     .split_n = n >= m };
  /* Splitting columns repeats the packing of A in every thread, splitting
  ** rows that of B; repeat the smaller one. */
  int64_t units = g.split_n ? (n + GEMM_NR - 1) / GEMM_NR
                            : (m + GEMM_MR - 1) / GEMM_MR;
  double unit_flops = 2.0 * (double)k * (double)(g.split_n ? m * GEMM_NR
                                                           : n * GEMM_MR);
  int64_t grain = (int64_t)(GEMM_MIN_FLOPS / unit_flops) + 1;
  eager_parallel(units, grain, G(range), &g);
}

#undef G
#undef NV
#undef GEMM_T
#undef GEMM_SFX
#undef GEMM_VL
#undef GEMM_MR
#undef GEMM_NR
#undef GEMM_MC
#undef GEMM_NC

#endif /* GEMM_T */
