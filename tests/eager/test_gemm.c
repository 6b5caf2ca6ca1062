/*
** test_gemm.c -- eager_gemm_f32/f64 on every path this machine can run
** (own kernel: AVX-512, AVX2, portable; the BLAS when built with one)
** against a naive double-precision triple loop: odd sizes, all four trans
** cases, padded leading dims, k and n beyond one block, k == 0, m == 0,
** n == 0. The own kernel's contract bit for bit (each element is the
** in-order fma chain, so no split of C or k and no FMA path changes it).
** The epilogue hook: tiles cover C once, each is final when its epilogue
** runs, and an elementwise function applied per tile equals applying it
** to all of C afterwards, bitwise; eager_matmul_ep, the same for the op.
** Thread counts: the binary re-executes
** itself with TC_THREADS=1, 2, 3 and compares every result's hash.
** OpenBLAS is loaded only when the BLAS path is asked about (it must run
** first, before another test asks).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tc.h"
#include "eager.h"
#include "gemm.h"

typedef void (*gemm_f32_fn)(bool, bool, int64_t, int64_t, int64_t,
                            const float *, int64_t, const float *, int64_t,
                            float *, int64_t);
typedef void (*gemm_f64_fn)(bool, bool, int64_t, int64_t, int64_t,
                            const double *, int64_t, const double *, int64_t,
                            double *, int64_t);

/* What C's padding (columns n .. ldc) holds; the kernel must not touch it. */
#define GUARD 12345.0

/* Every path, in ORDER GEMM_PATH; the tests skip those not available. */
static const gemm_path paths[] = { GEMM_AVX512, GEMM_AVX2, GEMM_PORTABLE,
                                   GEMM_BLAS };
#define NPATHS (sizeof paths / sizeof paths[0])

static bool own_path(gemm_path p) { return p != GEMM_BLAS; }

/* Take path p for the following calls; false when it cannot run here. */
static bool use_path(gemm_path p)
{
  if (!eager_gemm_path_available(p))
    return false;
  assert_true(eager_gemm_set_path(p));
  assert_int_equal(eager_gemm_path(), p);
  return true;
}

static int restore_path(void **state)
{
  (void)state;
  assert_true(eager_gemm_set_path(GEMM_AUTO));
  return 0;
}

/* -- Helpers --------------------------------------------------------------- */

/* Deterministic values in [-1, 1) (a 64-bit LCG); with ints, whole numbers
** in [-2, 2], whose products sum exactly in f32 for the sizes used here. */
static double next_val(uint64_t *s, bool ints)
{
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  uint32_t r = (uint32_t)(*s >> 33);
  if (ints)
    return (double)(int)(r % 5) - 2.0;
  return (double)r / 2147483648.0 * 2.0 - 1.0;
}

/* Elements a rows x cols matrix with leading dim ld needs, exactly: the
** last row has no padding, so ASan catches a read past it. */
static size_t span(int64_t rows, int64_t cols, int64_t ld)
{
  return rows > 0 && cols > 0 ? (size_t)((rows - 1) * ld + cols) : 1;
}

/* One case: op(A) m x k, op(B) k x n, each stored matrix padded by pad. */
typedef struct {
  bool ta, tb;
  int64_t m, n, k, pad;
  bool ints;
} gcase;

static const char *case_str(const gcase *g, char *buf, size_t len)
{
  snprintf(buf, len, "m=%lld n=%lld k=%lld ta=%d tb=%d pad=%lld%s",
           (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb,
           (long long)g->pad, g->ints ? " ints" : "");
  return buf;
}

/* The stored shapes of A and B and all leading dims. */
typedef struct {
  int64_t ar, ac, lda, br, bc, ldb, ldc;
} layout;

static layout layout_of(const gcase *g)
{
  layout l;
  l.ar = g->ta ? g->k : g->m;
  l.ac = g->ta ? g->m : g->k;
  l.br = g->tb ? g->n : g->k;
  l.bc = g->tb ? g->k : g->n;
  l.lda = l.ac + g->pad;
  l.ldb = l.bc + g->pad;
  l.ldc = g->n + g->pad + 1;    /* always some padding to guard */
  return l;
}

/* Reference in double from double copies of the inputs; also returns the
** bound sum |a||b| per element. */
static void reference(const gcase *g, const layout *l, const double *a,
                      const double *b, double *ref, double *mag)
{
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      double s = 0, t = 0;
      for (int64_t p = 0; p < g->k; p++) {
        double x = g->ta ? a[p * l->lda + i] : a[i * l->lda + p];
        double y = g->tb ? b[j * l->ldb + p] : b[p * l->ldb + j];
        s += x * y;
        t += fabs(x) * fabs(y);
      }
      ref[i * g->n + j] = s;
      mag[i * g->n + j] = t;
    }
}

/* Compare C against the reference: within rel * sqrt(k) * sum|a||b| (exact
** for integer inputs), and the padding columns untouched. */
static void check_result(const gcase *g, const layout *l, const char *who,
                         const double *c, const double *ref,
                         const double *mag, double rel)
{
  char buf[128];
  double tol = g->ints ? 0 : rel * sqrt((double)(g->k > 0 ? g->k : 1));
  int bad = 0;
  for (int64_t i = 0; i < g->m; i++) {
    for (int64_t j = 0; j < g->n; j++) {
      double got = c[i * l->ldc + j], want = ref[i * g->n + j];
      if (!(fabs(got - want) <= tol * mag[i * g->n + j]) && bad++ < 5)
        print_error("%s %s: C[%lld][%lld] = %.17g, want %.17g\n", who,
                    case_str(g, buf, sizeof buf), (long long)i, (long long)j,
                    got, want);
    }
    for (int64_t j = g->n; i + 1 < g->m && j < l->ldc; j++)
      if (c[i * l->ldc + j] != GUARD && bad++ < 5)
        print_error("%s %s: padding C[%lld][%lld] written\n", who,
                    case_str(g, buf, sizeof buf), (long long)i,
                    (long long)j);
  }
  if (bad)
    fail_msg("%s %s: %d bad elements", who, case_str(g, buf, sizeof buf),
             bad);
}

/* -- Per-type drivers ----------------------------------------------------
** The same code for float and double: fill A and B, run fn into a C full of
** NaN (C must not be read) with GUARD padding, compare to the reference. */

#define DEFINE_RUN(T, SFX, REL)                                              \
  static void run_##SFX(gemm_##SFX##_fn fn, const char *who,                 \
                        const gcase *g, uint64_t seed)                       \
  {                                                                          \
    layout l = layout_of(g);                                                 \
    size_t na = span(l.ar, l.ac, l.lda), nb = span(l.br, l.bc, l.ldb);       \
    size_t nc = span(g->m, g->n, l.ldc);                                     \
    T *a = malloc(na * sizeof(T)), *b = malloc(nb * sizeof(T));              \
    T *c = malloc(nc * sizeof(T));                                           \
    double *da = malloc(na * sizeof(double));                                \
    double *db = malloc(nb * sizeof(double));                                \
    double *dc = malloc(nc * sizeof(double));                                \
    size_t nr = (size_t)(g->m * g->n) + 1;                                   \
    double *ref = malloc(nr * sizeof(double));                               \
    double *mag = malloc(nr * sizeof(double));                               \
    assert_true(a && b && c && da && db && dc && ref && mag);                \
    for (size_t i = 0; i < na; i++)                                          \
      da[i] = (double)(a[i] = (T)next_val(&seed, g->ints));                  \
    for (size_t i = 0; i < nb; i++)                                          \
      db[i] = (double)(b[i] = (T)next_val(&seed, g->ints));                  \
    for (size_t i = 0; i < nc; i++)                                          \
      c[i] = (T)(i % (size_t)l.ldc < (size_t)g->n ? NAN : GUARD);            \
    reference(g, &l, da, db, ref, mag);                                      \
    fn(g->ta, g->tb, g->m, g->n, g->k, a, l.lda, b, l.ldb, c, l.ldc);        \
    for (size_t i = 0; i < nc; i++)                                          \
      dc[i] = (double)c[i];                                                  \
    check_result(g, &l, who, dc, ref, mag, REL);                             \
    free(a); free(b); free(c); free(da); free(db); free(dc);                 \
    free(ref); free(mag);                                                    \
  }

DEFINE_RUN(float, f32, 1e-6)
DEFINE_RUN(double, f64, 1e-14)

/* m x n x k shapes: tiny, odd, every remainder of the 14- and 6-row
** micro-panels, past NR (32/16/8), past KC (256, with a remainder), past
** a row block (~256 rows) and a task (<= 1024 columns), long thin ones. */
static const int64_t shapes[][3] = {
  { 1, 1, 1 }, { 7, 13, 5 }, { 17, 33, 65 }, { 130, 257, 66 },
  { 6, 16, 256 }, { 5, 21, 600 }, { 3, 1100, 7 }, { 250, 19, 300 },
  { 1, 40, 9 }, { 40, 1, 9 }, { 300, 5, 3 }, { 27, 70, 513 },
  { 13, 48, 31 }, { 281, 161, 40 },
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Every shape, trans case and padding, through both dtypes' fn. */
static void sweep(gemm_f32_fn f32, gemm_f64_fn f64, const char *who)
{
  uint64_t seed = 1;
  for (size_t s = 0; s < NSHAPES; s++)
    for (int t = 0; t < 4; t++)
      for (int64_t pad = 0; pad <= 3; pad += 3) {
        gcase g = { .ta = t & 1, .tb = t >> 1, .m = shapes[s][0],
                    .n = shapes[s][1], .k = shapes[s][2], .pad = pad };
        run_f32(f32, who, &g, seed++);
        run_f64(f64, who, &g, seed++);
      }
}

/* -- Against the reference ---------------------------------------------- */

static void test_gemm_paths_match_reference(void **state)
{
  (void)state;
  int ran = 0;
  for (size_t i = 0; i < NPATHS; i++)
    if (use_path(paths[i])) {
      sweep(eager_gemm_f32, eager_gemm_f64, eager_gemm_path_name(paths[i]));
      ran++;
    }
  assert_true(ran >= 2);        /* portable and the default at least */
}

/* The portable entry point, whatever the default is. */
static void test_gemm_portable_matches_reference(void **state)
{
  (void)state;
  sweep(eager_gemm_portable_f32, eager_gemm_portable_f64, "portable");
}

/* Small integers: every partial sum is exact, so any order gives the exact
** answer; this pins down indexing without tolerance. */
static void test_gemm_integers_exact(void **state)
{
  (void)state;
  uint64_t seed = 99;
  for (size_t i = 0; i < NPATHS; i++) {
    if (!use_path(paths[i]))
      continue;
    for (int t = 0; t < 4; t++) {
      gcase g = { .ta = t & 1, .tb = t >> 1, .m = 29, .n = 35, .k = 513,
                  .pad = 2, .ints = true };
      run_f32(eager_gemm_f32, eager_gemm_path_name(paths[i]), &g, seed++);
      run_f64(eager_gemm_f64, eager_gemm_path_name(paths[i]), &g, seed++);
    }
  }
}

/* k == 0: C = 0 (from NaN), A and B never read (NULL here), padding kept. */
static void test_gemm_k0_zeroes(void **state)
{
  (void)state;
  enum { M = 5, N = 7, LDC = 9 };
  float cf[M * LDC];
  double cd[M * LDC];
  for (size_t p = 0; p < NPATHS; p++) {
    if (!use_path(paths[p]))
      continue;
    for (int i = 0; i < M * LDC; i++) {
      cf[i] = i % LDC < N ? NAN : (float)GUARD;
      cd[i] = i % LDC < N ? NAN : GUARD;
    }
    eager_gemm_f32(false, true, M, N, 0, NULL, 0, NULL, 0, cf, LDC);
    eager_gemm_f64(true, false, M, N, 0, NULL, 0, NULL, 0, cd, LDC);
    for (int i = 0; i < M * LDC; i++) {
      double want = i % LDC < N ? 0 : GUARD;
      assert_true(cf[i] == (float)want);
      assert_true(cd[i] == want);
    }
  }
}

/* m == 0 or n == 0: nothing to write; C is left alone. */
static void test_gemm_empty_untouched(void **state)
{
  (void)state;
  float af[12] = { 0 }, bf[12] = { 0 }, cf[12];
  double ad[12] = { 0 }, bd[12] = { 0 }, cd[12];
  for (size_t p = 0; p < NPATHS; p++) {
    if (!use_path(paths[p]))
      continue;
    for (int pass = 0; pass < 2; pass++) {
      int64_t m = pass ? 3 : 0, n = pass ? 0 : 3;
      for (int i = 0; i < 12; i++)
        cf[i] = (float)(cd[i] = GUARD);
      eager_gemm_f32(false, false, m, n, 4, af, 4, bf, 3, cf, 4);
      eager_gemm_f64(true, true, m, n, 4, ad, 3, bd, 4, cd, 4);
      for (int i = 0; i < 12; i++) {
        assert_true(cf[i] == (float)GUARD);
        assert_true(cd[i] == GUARD);
      }
    }
  }
}

/* -- The own kernel's contract, bit for bit --------------------------------
** C[i][j] is s = fma(a, b, s) over p in order from +0 (s + a*b without
** FMA): computed here one element at a time and compared bitwise, for C
** whole and for C computed as four sub-blocks at odd offsets (what any
** split does). */

#define DEFINE_CHAIN(T, SFX, FMA)                                            \
  static void chain_##SFX(bool ta, bool tb, bool fused, int64_t m,          \
                          int64_t n, int64_t k)                              \
  {                                                                          \
    int64_t lda = ta ? m : k, ldb = tb ? k : n;                              \
    T *a = malloc(sizeof(T) * (size_t)(m * k));                              \
    T *b = malloc(sizeof(T) * (size_t)(k * n));                              \
    T *c1 = malloc(sizeof(T) * (size_t)(m * n));                             \
    T *c2 = malloc(sizeof(T) * (size_t)(m * n));                             \
    T *want = malloc(sizeof(T) * (size_t)(m * n));                           \
    assert_true(a && b && c1 && c2 && want);                                 \
    uint64_t seed = 7;                                                       \
    for (int64_t i = 0; i < m * k; i++)                                      \
      a[i] = (T)next_val(&seed, false);                                      \
    for (int64_t i = 0; i < k * n; i++)                                      \
      b[i] = (T)next_val(&seed, false);                                      \
    for (int64_t i = 0; i < m; i++)                                          \
      for (int64_t j = 0; j < n; j++) {                                      \
        T s = 0;                                                             \
        for (int64_t p = 0; p < k; p++) {                                    \
          T x = ta ? a[p * lda + i] : a[i * lda + p];                        \
          T y = tb ? b[j * ldb + p] : b[p * ldb + j];                        \
          s = fused ? FMA(x, y, s) : s + x * y;                              \
        }                                                                    \
        want[i * n + j] = s;                                                 \
      }                                                                      \
    eager_gemm_##SFX(ta, tb, m, n, k, a, lda, b, ldb, c1, n);                \
    const int64_t r0[] = { 0, m / 3 + 1, m }, c0[] = { 0, n / 2 + 3, n };    \
    for (int bi = 0; bi < 2; bi++)                                           \
      for (int bj = 0; bj < 2; bj++) {                                       \
        int64_t i = r0[bi], j = c0[bj];                                      \
        eager_gemm_##SFX(ta, tb, r0[bi + 1] - i, c0[bj + 1] - j, k,          \
                         ta ? a + i : a + i * lda, lda,                      \
                         tb ? b + j * ldb : b + j, ldb, c2 + i * n + j, n);  \
      }                                                                      \
    assert_memory_equal(c1, want, sizeof(T) * (size_t)(m * n));              \
    assert_memory_equal(c2, want, sizeof(T) * (size_t)(m * n));              \
    free(a); free(b); free(c1); free(c2); free(want);                        \
  }

DEFINE_CHAIN(float, f32, fmaf)
DEFINE_CHAIN(double, f64, fma)

static void test_gemm_own_kernel_is_the_fma_chain(void **state)
{
  (void)state;
  static const int64_t cs[][3] = {
    { 131, 150, 600 }, { 29, 67, 257 }, { 300, 40, 31 }, { 15, 33, 1 },
    /* one row (the vector path) beside packed blocks of the same C; for
    ** a transposed B, whole register blocks of rows and k steps, with and
    ** without scalar tails */
    { 1, 700, 300 }, { 1, 5, 9 }, { 3, 301, 129 }, { 1, 64, 48 },
  };
  for (size_t p = 0; p < NPATHS; p++) {
    if (!own_path(paths[p]) || !use_path(paths[p]))
      continue;
    bool fma = eager_gemm_path_fma(paths[p]);
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++)
      for (int t = 0; t < 4; t++) {
        chain_f32(t & 1, t >> 1, fma, cs[s][0], cs[s][1], cs[s][2]);
        chain_f64(t & 1, t >> 1, fma, cs[s][0], cs[s][1], cs[s][2]);
      }
  }
}

/* -- The epilogue hook -------------------------------------------------------
** ep checks, for its tile: every element seen once in all, the tile's
** values already final (equal to a plain run's, bitwise), the tile within
** the promised size; then it applies f in place. The result must equal f
** applied to the plain run's C afterwards, bitwise. */

typedef struct {
  bool f64;
  void *c;                      /* the C being computed (borrowed) */
  const void *final;            /* a plain run's C (borrowed) */
  const void *bias;             /* per column (borrowed) */
  int64_t n, ldc;
  unsigned char *seen;          /* m x n, per element */
  int64_t max_rows, max_bytes;  /* a tile's limits */
  atomic_int bad, tiles;
} ep_check;

/* An elementwise function with a bias by column: nonlinear, cheap. */
static float f_f32(float x, float b)
{
  float y = x + b;
  return y > 0 ? y * 0.5f + y * y : y * 0.125f;
}
static double f_f64(double x, double b)
{
  double y = x + b;
  return y > 0 ? y * 0.5 + y * y : y * 0.125;
}

static void ep_fn(void *ctx, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
  ep_check *e = ctx;
  atomic_fetch_add(&e->tiles, 1);
  size_t esz = e->f64 ? sizeof(double) : sizeof(float);
  if (i0 >= i1 || j0 >= j1 || i1 - i0 > e->max_rows
      || (j1 - j0) * (int64_t)esz > e->max_bytes)
    atomic_fetch_add(&e->bad, 1);
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++) {
      if (e->seen[i * e->n + j]++)
        atomic_fetch_add(&e->bad, 1);
      if (e->f64) {
        double *c = (double *)e->c + i * e->ldc + j;
        if (memcmp(c, (const double *)e->final + i * e->n + j, esz))
          atomic_fetch_add(&e->bad, 1);
        *c = f_f64(*c, ((const double *)e->bias)[j]);
      } else {
        float *c = (float *)e->c + i * e->ldc + j;
        if (memcmp(c, (const float *)e->final + i * e->n + j, esz))
          atomic_fetch_add(&e->bad, 1);
        *c = f_f32(*c, ((const float *)e->bias)[j]);
      }
    }
}

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* One case with the current path; returns a hash of the plain C and the
** epilogued C (for the thread-count comparison), or 0 and a message on a
** failed check. */
#define DEFINE_EP(T, SFX)                                                    \
  static uint64_t ep_case_##SFX(bool ta, bool tb, int64_t m, int64_t n,      \
                                int64_t k, char *why, size_t wlen)           \
  {                                                                          \
    int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;     \
    T *a = malloc(sizeof(T) * span(ta ? k : m, ta ? m : k, lda));            \
    T *b = malloc(sizeof(T) * span(tb ? n : k, tb ? k : n, ldb));            \
    T *c = malloc(sizeof(T) * span(m, n, ldc));                              \
    T *plain = malloc(sizeof(T) * (size_t)(m * n + 1));                      \
    T *bias = malloc(sizeof(T) * (size_t)(n + 1));                           \
    unsigned char *seen = calloc((size_t)(m * n + 1), 1);                    \
    assert_true(a && b && c && plain && bias && seen);                       \
    uint64_t seed = (uint64_t)(m * 1000003 + n * 1009 + k);                  \
    for (size_t i = 0; i < span(ta ? k : m, ta ? m : k, lda); i++)           \
      a[i] = (T)next_val(&seed, false);                                      \
    for (size_t i = 0; i < span(tb ? n : k, tb ? k : n, ldb); i++)           \
      b[i] = (T)next_val(&seed, false);                                      \
    for (int64_t j = 0; j < n; j++)                                          \
      bias[j] = (T)next_val(&seed, false);                                   \
    eager_gemm_##SFX(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);               \
    for (int64_t i = 0; i < m; i++)                                          \
      memcpy(plain + i * n, c + i * ldc, sizeof(T) * (size_t)n);             \
    for (size_t i = 0; i < span(m, n, ldc); i++)                             \
      c[i] = (T)NAN;                                                         \
    bool blas = eager_gemm_path() == GEMM_BLAS;                              \
    ep_check e = { .f64 = sizeof(T) == 8, .c = c, .final = plain,            \
                   .bias = bias, .n = n, .ldc = ldc, .seen = seen,           \
                   .max_rows = blas ? 256 : 280,                             \
                   .max_bytes = blas ? 256 * (int64_t)sizeof(T) : 512 };     \
    eager_gemm_##SFX##_ep(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, ep_fn,    \
                          &e);                                               \
    int bad = atomic_load(&e.bad), miss = 0, diff = 0;                       \
    for (int64_t i = 0; i < m; i++)                                          \
      for (int64_t j = 0; j < n; j++) {                                      \
        T want = f_##SFX(plain[i * n + j], bias[j]);                         \
        miss += seen[i * n + j] != 1;                                        \
        diff += memcmp(&want, c + i * ldc + j, sizeof(T)) != 0;              \
      }                                                                      \
    uint64_t h = fnv1a(plain, sizeof(T) * (size_t)(m * n),                   \
                       0xcbf29ce484222325ull);                               \
    for (int64_t i = 0; i < m; i++)                                          \
      h = fnv1a(c + i * ldc, sizeof(T) * (size_t)n, h);                      \
    if (bad || miss || diff) {                                               \
      snprintf(why, wlen, "%s %s m=%lld n=%lld k=%lld ta=%d tb=%d: %d "      \
               "tile checks failed, %d elements not seen once, %d differ "   \
               "from f applied afterwards (%d tiles)",                       \
               eager_gemm_path_name(eager_gemm_path()), #SFX, (long long)m,  \
               (long long)n, (long long)k, ta, tb, bad, miss, diff,          \
               atomic_load(&e.tiles));                                       \
      h = 0;                                                                 \
    }                                                                        \
    free(a); free(b); free(c); free(plain); free(bias); free(seen);          \
    return h;                                                                \
  }

DEFINE_EP(float, f32)
DEFINE_EP(double, f64)

/* Odd sizes, several row blocks and tasks, big enough to use threads;
** the leading dimensions are padded (ep_case). */
static const int64_t ep_shapes[][3] = {
  { 1, 1, 1 }, { 7, 13, 0 }, { 37, 1000, 50 }, { 300, 530, 700 },
  { 600, 45, 300 }, { 14, 129, 257 }, { 257, 300, 33 },
  { 1, 700, 300 },             /* a vector: gemv, split by bytes */
};
#define NEP (sizeof ep_shapes / sizeof ep_shapes[0])

/* Runs every epilogue case on every path; prints "name hash" lines to out
** (NULL: none). Returns the number of failed cases. */
static int ep_all(FILE *out)
{
  int failed = 0;
  char why[256];
  for (size_t p = 0; p < NPATHS; p++) {
    if (!use_path(paths[p]))
      continue;
    for (size_t s = 0; s < NEP; s++)
      for (int t = 0; t < 4; t++)
        for (int d = 0; d < 2; d++) {
          const int64_t *sh = ep_shapes[s];
          uint64_t h = d ? ep_case_f64(t & 1, t >> 1, sh[0], sh[1], sh[2],
                                       why, sizeof why)
                         : ep_case_f32(t & 1, t >> 1, sh[0], sh[1], sh[2],
                                       why, sizeof why);
          if (!h) {
            failed++;
            if (out)
              fprintf(out, "FAIL %s\n", why);
            else
              print_error("%s\n", why);
          }
          if (out)
            fprintf(out, "%s_%s_%lldx%lldx%lld_t%d %016llx\n",
                    eager_gemm_path_name(paths[p]), d ? "f64" : "f32",
                    (long long)sh[0], (long long)sh[1], (long long)sh[2], t,
                    (unsigned long long)h);
        }
  }
  assert_true(eager_gemm_set_path(GEMM_AUTO));
  return failed;
}

static void test_gemm_epilogue_equals_after(void **state)
{
  (void)state;
  int failed = ep_all(NULL);
  if (failed)
    fail_msg("%d epilogue cases failed", failed);
}

/* eager_matmul_ep (the fuser's hook): batched, a 2-D operand broadcast
** over the batch and a transposed view; ep adds a bias by column in place,
** which must give tc_matmul's result plus the bias, bitwise. */
typedef struct {
  const float *bias;
  int64_t m, n;
  atomic_int calls, bad;
} mm_ep;

static void mm_ep_fn(void *ctx, tc_tensor *out, int64_t batch, int64_t i0,
                     int64_t i1, int64_t j0, int64_t j1)
{
  mm_ep *e = ctx;
  atomic_fetch_add(&e->calls, 1);
  if (batch < 0 || i0 < 0 || i1 > e->m || j0 < 0 || j1 > e->n)
    atomic_fetch_add(&e->bad, 1);
  float *c = (float *)tensor_ptr(out) + batch * e->m * e->n;
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++)
      c[i * e->n + j] += e->bias[j];
}

static void test_gemm_matmul_ep(void **state)
{
  (void)state;
  enum { B = 3, M = 45, K = 300, N = 530 };
  tc_tensor *a = tc_randn(TC_F32, TC_SHAPE(B, M, K), 1);
  tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(N, K), 2);
  tc_tensor *wt = tc_transpose(w, 0, 1);       /* K x N, column-major */
  tc_tensor *bias = tc_randn(TC_F32, TC_SHAPE(N), 3);
  tc_tensor *mm = tc_matmul(a, wt);
  tc_tensor *ref = tc_add(mm, bias);
  assert_true(a && w && wt && bias && mm && ref);
  eager_call c = { .op = TC_OP_MATMUL, .fn = "test", .nin = 2,
                   .in = { a, wt }, .dtype = TC_F32, .ndim = 3,
                   .shape = { B, M, N } };
  mm_ep e = { .bias = tc_data(bias), .m = M, .n = N };
  tc_tensor *got = eager_matmul_ep(&c, mm_ep_fn, &e);
  assert_non_null(got);
  assert_int_equal(atomic_load(&e.bad), 0);
  assert_true(atomic_load(&e.calls) >= B);
  assert_memory_equal(tc_data(got), tc_data(ref), sizeof(float) * B * M * N);
  tensor_unref(got);
  tc_release(a);
  tc_release(w);
  tc_release(wt);
  tc_release(bias);
  tc_release(mm);
  tc_release(ref);
}

/* -- Thread counts -----------------------------------------------------------
** TC_THREADS is read at init: the binary re-runs itself with --emit and
** TC_THREADS = 1, 2, 3; each child runs the epilogue cases (checking them)
** and prints each result's hash; all three outputs must be the same. */

static char *run_child(int threads)
{
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = 0;
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char tv[16];
    snprintf(tv, sizeof tv, "%d", threads);
    setenv("TC_THREADS", tv, 1);
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(self, self, "--emit", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  for (;;) {
    if (len + 1024 > cap) {
      out = realloc(out, cap *= 2);
      assert_non_null(out);
    }
    ssize_t r = read(fd[0], out + len, cap - len - 1);
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  out[len] = 0;
  close(fd[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("child with TC_THREADS=%d failed (status %d), output:\n%s",
             threads, status, out);
  return out;
}

static void test_gemm_thread_count_independent(void **state)
{
  (void)state;
  char *outs[3];
  for (int t = 0; t < 3; t++) {
    outs[t] = run_child(t + 1);
    char want[32];
    snprintf(want, sizeof want, "threads %d\n", t + 1);
    if (strncmp(outs[t], want, strlen(want)) != 0)
      fail_msg("child did not run with TC_THREADS=%d:\n%.400s", t + 1,
               outs[t]);
  }
  /* Past the first line, the outputs are the same, line for line. */
  const char *p[3];
  for (int t = 0; t < 3; t++)
    p[t] = strchr(outs[t], '\n') + 1;
  assert_true(strlen(p[0]) > 100);
  for (int t = 1; t < 3; t++)
    if (strcmp(p[0], p[t]) != 0)
      fail_msg("results differ between 1 and %d threads:\n%s\n---\n%s",
               t + 1, p[0], p[t]);
  for (int t = 0; t < 3; t++)
    free(outs[t]);
}

static void test_gemm_backend_name(void **state)
{
  (void)state;
  const char *name = eager_gemm_backend();
  assert_non_null(name);
  gemm_path p = eager_gemm_path();
  if (p == GEMM_BLAS)
    assert_non_null(strstr(name, "blas"));
  else
    assert_non_null(strstr(name, eager_gemm_path_name(p)));
  /* The default is the widest own kernel this CPU runs. */
  if (eager_gemm_path_available(GEMM_AVX512))
    assert_int_equal(p, GEMM_AVX512);
  else if (eager_gemm_path_available(GEMM_AVX2))
    assert_int_equal(p, GEMM_AVX2);
  assert_false(eager_gemm_set_path(GEMM__MAX));
  assert_int_equal(eager_gemm_path(), p);
}

/* OpenBLAS is in the process only once the BLAS path is asked about (or
** chosen: a CPU with neither AVX2 nor AVX-512): loading it starts its
** thread pool. Runs first, before any other test asks. */
static void test_gemm_blas_loaded_when_asked(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *t = tc_matmul(tc_ones(TC_F32, TC_SHAPE(2, 3)),
                           tc_ones(TC_F32, TC_SHAPE(3, 2)));   /* an op ran */
  double v;
  assert_int_equal(tc_item(tc_sum_all(t), &v), 0);
  assert_true(v == 12.0);
  tc_scope_end(mark);
  if (eager_gemm_path() != GEMM_BLAS)
    assert_null(dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD));
  if (!eager_gemm_path_available(GEMM_BLAS)) {
    skip();   /* no OpenBLAS here, or a -Dblas=disabled build */
    return;
  }
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    h = dlopen("libopenblas.so", RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(h);
  dlclose(h);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--emit") == 0) {
    printf("threads %d\n", eager_cfg()->threads);
    int failed = ep_all(stdout);
    fflush(stdout);
    return failed ? 1 : 0;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gemm_blas_loaded_when_asked),   /* first */
    cmocka_unit_test_teardown(test_gemm_paths_match_reference, restore_path),
    cmocka_unit_test(test_gemm_portable_matches_reference),
    cmocka_unit_test_teardown(test_gemm_integers_exact, restore_path),
    cmocka_unit_test_teardown(test_gemm_k0_zeroes, restore_path),
    cmocka_unit_test_teardown(test_gemm_empty_untouched, restore_path),
    cmocka_unit_test_teardown(test_gemm_own_kernel_is_the_fma_chain,
                              restore_path),
    cmocka_unit_test_teardown(test_gemm_epilogue_equals_after, restore_path),
    cmocka_unit_test(test_gemm_matmul_ep),
    cmocka_unit_test(test_gemm_thread_count_independent),
    cmocka_unit_test(test_gemm_backend_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
