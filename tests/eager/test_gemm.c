/*
** test_gemm.c -- eager_gemm_f32/f64 (the BLAS when built with one) and the
** blocked kernel eager_gemm_blocked_f32/f64 against a naive double-precision
** triple loop: odd sizes, all four trans cases, padded leading dims, k and
** n beyond one cache block, k == 0, m == 0, n == 0, and the promise that the
** blocked result does not depend on how C is split (so not on threads).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* m x n x k shapes: tiny, odd, past MR/NR/MC, past KC (256, with a
** remainder), past NC (4096 f32, 2048 f64), and several BLAS tiles (256)
** in either direction. */
static const int64_t shapes[][3] = {
  { 1, 1, 1 }, { 7, 13, 5 }, { 17, 33, 65 }, { 130, 257, 66 },
  { 6, 16, 256 }, { 5, 21, 600 }, { 3, 4100, 7 }, { 250, 19, 300 },
  { 1, 40, 9 }, { 40, 1, 9 }, { 300, 5, 3 },
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

/* -- Tests ----------------------------------------------------------------- */

static void test_gemm_blocked_matches_reference(void **state)
{
  (void)state;
  sweep(eager_gemm_blocked_f32, eager_gemm_blocked_f64, "blocked");
}

static void test_gemm_dispatch_matches_reference(void **state)
{
  (void)state;
  sweep(eager_gemm_f32, eager_gemm_f64, eager_gemm_backend());
}

/* Small integers: every partial sum is exact, so any order gives the exact
** answer; this pins down indexing without tolerance. */
static void test_gemm_integers_exact(void **state)
{
  (void)state;
  uint64_t seed = 99;
  for (int t = 0; t < 4; t++) {
    gcase g = { .ta = t & 1, .tb = t >> 1, .m = 29, .n = 35, .k = 513,
                .pad = 2, .ints = true };
    run_f32(eager_gemm_blocked_f32, "blocked", &g, seed++);
    run_f64(eager_gemm_blocked_f64, "blocked", &g, seed++);
    run_f32(eager_gemm_f32, eager_gemm_backend(), &g, seed++);
    run_f64(eager_gemm_f64, eager_gemm_backend(), &g, seed++);
  }
}

/* k == 0: C = 0 (from NaN), A and B never read (NULL here), padding kept. */
static void test_gemm_k0_zeroes(void **state)
{
  (void)state;
  enum { M = 5, N = 7, LDC = 9 };
  float cf[M * LDC];
  double cd[M * LDC];
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < M * LDC; i++) {
      cf[i] = i % LDC < N ? NAN : (float)GUARD;
      cd[i] = i % LDC < N ? NAN : GUARD;
    }
    if (pass == 0) {
      eager_gemm_blocked_f32(false, true, M, N, 0, NULL, 0, NULL, 0, cf, LDC);
      eager_gemm_blocked_f64(true, false, M, N, 0, NULL, 0, NULL, 0, cd, LDC);
    } else {
      eager_gemm_f32(false, true, M, N, 0, NULL, 0, NULL, 0, cf, LDC);
      eager_gemm_f64(true, false, M, N, 0, NULL, 0, NULL, 0, cd, LDC);
    }
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
  for (int pass = 0; pass < 4; pass++) {
    int64_t m = pass & 1 ? 3 : 0, n = pass & 1 ? 0 : 3;
    for (int i = 0; i < 12; i++)
      cf[i] = (float)(cd[i] = GUARD);
    if (pass < 2) {
      eager_gemm_blocked_f32(false, false, m, n, 4, af, 4, bf, 3, cf, 4);
      eager_gemm_blocked_f64(true, true, m, n, 4, ad, 3, bd, 4, cd, 4);
    } else {
      eager_gemm_f32(false, false, m, n, 4, af, 4, bf, 3, cf, 4);
      eager_gemm_f64(true, true, m, n, 4, ad, 3, bd, 4, cd, 4);
    }
    for (int i = 0; i < 12; i++) {
      assert_true(cf[i] == (float)GUARD);
      assert_true(cd[i] == GUARD);
    }
  }
}

/* The blocked result is bitwise the same when C is computed in pieces at
** odd offsets, which is what any thread split does (gemm.h). */
#define DEFINE_SPLIT(T, SFX)                                                 \
  static void split_##SFX(bool ta, bool tb)                                  \
  {                                                                          \
    enum { M = 131, N = 150, K = 600, R = 37, C = 45 };                      \
    int64_t lda = ta ? M : K, ldb = tb ? K : N;                              \
    T *a = malloc(sizeof(T) * M * K), *b = malloc(sizeof(T) * K * N);        \
    T *c1 = malloc(sizeof(T) * M * N), *c2 = malloc(sizeof(T) * M * N);      \
    assert_true(a && b && c1 && c2);                                         \
    uint64_t seed = 7;                                                       \
    for (int i = 0; i < M * K; i++)                                          \
      a[i] = (T)next_val(&seed, false);                                      \
    for (int i = 0; i < K * N; i++)                                          \
      b[i] = (T)next_val(&seed, false);                                      \
    eager_gemm_blocked_##SFX(ta, tb, M, N, K, a, lda, b, ldb, c1, N);        \
    const int64_t r0[] = { 0, R, M }, c0[] = { 0, C, N };                    \
    for (int bi = 0; bi < 2; bi++)                                           \
      for (int bj = 0; bj < 2; bj++) {                                       \
        int64_t i = r0[bi], j = c0[bj];                                      \
        eager_gemm_blocked_##SFX(ta, tb, r0[bi + 1] - i, c0[bj + 1] - j, K,  \
                                 ta ? a + i : a + i * lda, lda,              \
                                 tb ? b + j * ldb : b + j, ldb,              \
                                 c2 + i * N + j, N);                         \
      }                                                                      \
    assert_memory_equal(c1, c2, sizeof(T) * M * N);                          \
    free(a); free(b); free(c1); free(c2);                                    \
  }

DEFINE_SPLIT(float, f32)
DEFINE_SPLIT(double, f64)

static void test_gemm_blocked_split_invariant(void **state)
{
  (void)state;
  for (int t = 0; t < 4; t++) {
    split_f32(t & 1, t >> 1);
    split_f64(t & 1, t >> 1);
  }
}

static void test_gemm_backend_name(void **state)
{
  (void)state;
  const char *name = eager_gemm_backend();
  assert_non_null(name);
#ifdef TC_HAVE_CBLAS
  assert_non_null(strstr(name, "blas"));
#else
  assert_string_equal(name, "blocked");
#endif
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gemm_blocked_matches_reference),
    cmocka_unit_test(test_gemm_dispatch_matches_reference),
    cmocka_unit_test(test_gemm_integers_exact),
    cmocka_unit_test(test_gemm_k0_zeroes),
    cmocka_unit_test(test_gemm_empty_untouched),
    cmocka_unit_test(test_gemm_blocked_split_invariant),
    cmocka_unit_test(test_gemm_backend_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
