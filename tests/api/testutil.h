/*
** tests/api/testutil.h -- shared helpers for the public-API tests.
**
** Header only (every helper is static inline, so unused ones cost nothing).
** Written against include/tc.h alone: tensors are built from double arrays
** with tc_from_data and read back with tc_copy_to; element sizes and value
** rounding are computed here, independently of the library.
*/
#ifndef TC_API_TESTUTIL_H
#define TC_API_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc.h"

#define TU_PI 3.14159265358979323846

/* -- Failing with context ----------------------------------------------- */

/* Evaluates to the tensor, failing the test (with tc_last_error()) on NULL. */
#define TU_NN(expr) tu_nn_((expr), #expr, __FILE__, __LINE__)
static inline tc_tensor *tu_nn_(tc_tensor *t, const char *expr,
                                const char *file, int line) {
  if (!t) {
    const char *e = tc_last_error();
    print_error("%s:%d: %s returned NULL (tc_last_error: %s)\n", file, line,
                expr, e ? e : "(none)");
    _fail(file, line);
  }
  return t;
}

/* An int-returning call that must give 0. */
#define TU_OK(expr) tu_ok_((expr), #expr, __FILE__, __LINE__)
static inline void tu_ok_(int rc, const char *expr, const char *file,
                          int line) {
  if (rc != 0) {
    const char *e = tc_last_error();
    print_error("%s:%d: %s returned %d (tc_last_error: %s)\n", file, line,
                expr, rc, e ? e : "(none)");
    _fail(file, line);
  }
}

/* Case-insensitive substring search. */
static inline bool tu_contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return true;
  }
  return n == 0;
}

/* Checks that an error is set, that it starts with "<fn>: ", and that it
** contains (case-insensitively) one of the '|'-separated words of needles
** (NULL: no content check). */
#define TU_EXPECT_ERR(fn, needles) \
  tu_expect_err_((fn), (needles), __FILE__, __LINE__)
static inline void tu_expect_err_(const char *fn, const char *needles,
                                  const char *file, int line) {
  const char *e = tc_last_error();
  if (!e) {
    print_error("%s:%d: expected an error from %s, none is set\n", file, line,
                fn);
    _fail(file, line);
    return;
  }
  size_t l = strlen(fn);
  if (strncmp(e, fn, l) != 0 || strncmp(e + l, ": ", 2) != 0) {
    print_error("%s:%d: error should start with \"%s: \", got \"%s\"\n", file,
                line, fn, e);
    _fail(file, line);
  }
  if (!needles) return;
  char buf[256];
  const char *p = needles;
  while (*p) {
    size_t k = strcspn(p, "|");
    if (k >= sizeof buf) k = sizeof buf - 1;
    memcpy(buf, p, k);
    buf[k] = 0;
    if (tu_contains_ci(e + l + 2, buf)) return;
    p += k;
    if (*p == '|') p++;
  }
  print_error("%s:%d: error \"%s\" should mention one of \"%s\"\n", file, line,
              e, needles);
  _fail(file, line);
}

/* -- Dtypes, packing ---------------------------------------------------- */

static const tc_dtype tu_all_dtypes[] = {TC_BOOL, TC_I32, TC_I64, TC_F32,
                                         TC_F64};

/* Element sizes as this suite expects them (bool is one byte, as in torch). */
static inline size_t tu_elsize(tc_dtype dt) {
  switch (dt) {
  case TC_BOOL: return 1;
  case TC_I32: case TC_F32: return 4;
  case TC_I64: case TC_F64: return 8;
  case TC_F16: case TC_BF16: return 2;
  default: return 0;
  }
}

static inline bool tu_is_float(tc_dtype dt) {
  return dt == TC_F32 || dt == TC_F64;
}

/* The value x takes when stored in dt (ints: x must be integral). */
static inline double tu_round(tc_dtype dt, double x) {
  switch (dt) {
  case TC_BOOL: return x != 0;
  case TC_I32: return (double)(int32_t)x;
  case TC_I64: return (double)(int64_t)x;
  case TC_F32: return (double)(float)x;
  default: return x;
  }
}

static inline int64_t tu_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

/* malloc'd buffer of n elements of dt holding v (converted). */
static inline void *tu_pack(tc_dtype dt, const double *v, int64_t n) {
  void *buf = malloc(n > 0 ? (size_t)n * tu_elsize(dt) : 1);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case TC_BOOL: ((uint8_t *)buf)[i] = v[i] != 0; break;
    case TC_I32: ((int32_t *)buf)[i] = (int32_t)v[i]; break;
    case TC_I64: ((int64_t *)buf)[i] = (int64_t)v[i]; break;
    case TC_F32: ((float *)buf)[i] = (float)v[i]; break;
    default: ((double *)buf)[i] = v[i]; break;
    }
  }
  return buf;
}

static inline void tu_unpack(tc_dtype dt, const void *buf, int64_t n,
                             double *out) {
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case TC_BOOL: out[i] = ((const uint8_t *)buf)[i]; break;
    case TC_I32: out[i] = ((const int32_t *)buf)[i]; break;
    case TC_I64: out[i] = (double)((const int64_t *)buf)[i]; break;
    case TC_F32: out[i] = ((const float *)buf)[i]; break;
    default: out[i] = ((const double *)buf)[i]; break;
    }
  }
}

/* A C-order tensor of dt holding v[0..numel). Fails the test on error. */
static inline tc_tensor *tu_from(tc_dtype dt, int ndim, const int64_t *shape,
                                 const double *v) {
  int64_t n = tu_numel(ndim, shape);
  void *buf = tu_pack(dt, v, n);
  tc_tensor *t = tc_from_data(dt, ndim, shape, buf, (size_t)n * tu_elsize(dt));
  free(buf);
  return TU_NN(t);
}

/* Raw copy of t (C order) into a malloc'd buffer; nbytes_out optional. */
static inline void *tu_read_raw(tc_tensor *t, size_t *nbytes_out) {
  assert_non_null(t);
  int64_t n = tc_numel(t);
  assert_true(n >= 0);
  size_t nb = (size_t)n * tu_elsize(tc_dtype_of(t));
  void *buf = malloc(nb ? nb : 1);
  assert_non_null(buf);
  TU_OK(tc_copy_to(t, buf, nb));
  if (nbytes_out) *nbytes_out = nb;
  return buf;
}

/* Values of t (C order) as a malloc'd double array. */
static inline double *tu_read(tc_tensor *t) {
  void *raw = tu_read_raw(t, NULL);
  int64_t n = tc_numel(t);
  double *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  assert_non_null(out);
  tu_unpack(tc_dtype_of(t), raw, n, out);
  free(raw);
  return out;
}

static inline double tu_item(tc_tensor *t) {
  double v = -12345.0;
  TU_OK(tc_item(t, &v));
  return v;
}

/* Fails unless t has exactly this shape. */
#define TU_SHAPE_IS(t, ndim, shape) \
  tu_shape_is_((t), (ndim), (shape), __FILE__, __LINE__)
static inline void tu_shape_is_(tc_tensor *t, int ndim, const int64_t *shape,
                                const char *file, int line) {
  bool ok = tc_ndim(t) == ndim;
  for (int d = 0; ok && d < ndim; d++) ok = tc_size(t, d) == shape[d];
  if (!ok) {
    char got[160] = "", want[160] = "";
    for (int d = 0; d < tc_ndim(t) && d < 8; d++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%lld,",
               (long long)tc_size(t, d));
    for (int d = 0; d < ndim && d < 8; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%lld,",
               (long long)shape[d]);
    print_error("%s:%d: shape (ndim %d) [%s] expected (ndim %d) [%s]\n", file,
                line, tc_ndim(t), got, ndim, want);
    _fail(file, line);
  }
}

/* -- Random values (splitmix64; independent of the library's RNG) ------- */

typedef struct { uint64_t s; } tu_rng;

static inline uint64_t tu_next(tu_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline double tu_unif(tu_rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(tu_next(r) >> 11) * 0x1.0p-53);
}

/* n values uniform in [lo, hi), malloc'd. */
static inline double *tu_uniform(int64_t n, double lo, double hi,
                                 uint64_t seed) {
  tu_rng r = {seed * 7919u + 17u};
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = tu_unif(&r, lo, hi);
  return v;
}

/* -- Layouts ------------------------------------------------------------ */

/* How a logical tensor is laid out in memory:
**   TU_CONTIG  C-order tensor from tc_from_data
**   TU_TRANS   tc_transpose(base, 0, ndim-1) of a base holding the data
**              with its first and last dims swapped (ndim >= 2)
**   TU_SLICED  dim 0 is base[1::3] and the last dim base[0::2] of a larger
**              base whose other elements are filler (NaN for floats)
**   TU_EXPAND  tc_expand of a base whose dim 0 has size 1 (stride 0); the
**              logical values repeat along dim 0 (vals[row 0] is used) */
enum { TU_CONTIG, TU_TRANS, TU_SLICED, TU_EXPAND, TU_NLAYOUTS };
static const char *const tu_layout_name[] = {"contiguous", "transposed",
                                             "sliced", "expanded"};

typedef struct {
  tc_tensor *t;
  tc_dtype dt;
  int ndim;
  int64_t shape[TC_MAX_DIMS];
  int64_t n;
  double *v; /* logical values in C order, exactly as stored in dt */
} tu_arr;

static inline void tu_unravel(int64_t flat, int ndim, const int64_t *shape,
                              int64_t *m) {
  for (int d = ndim - 1; d >= 0; d--) {
    m[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
}

static inline int64_t tu_ravel(int ndim, const int64_t *shape,
                               const int64_t *m) {
  int64_t f = 0;
  for (int d = 0; d < ndim; d++) f = f * shape[d] + m[d];
  return f;
}

static inline double tu_filler(tc_dtype dt) {
  switch (dt) {
  case TC_BOOL: return 1;
  case TC_I32: case TC_I64: return -77777;
  default: return NAN;
  }
}

/* Builds a tensor of the given logical shape and layout holding vals
** (rounded to dt; for TU_EXPAND, row 0 repeated). Fails the test on error. */
static inline tu_arr tu_make(tc_dtype dt, int layout, int ndim,
                             const int64_t *shape, const double *vals) {
  tu_arr a;
  memset(&a, 0, sizeof a);
  a.dt = dt;
  a.ndim = ndim;
  if (ndim > 0) memcpy(a.shape, shape, (size_t)ndim * sizeof(int64_t));
  a.n = tu_numel(ndim, shape);
  a.v = malloc((size_t)(a.n > 0 ? a.n : 1) * sizeof(double));
  assert_non_null(a.v);
  for (int64_t i = 0; i < a.n; i++) a.v[i] = tu_round(dt, vals[i]);
  if (layout == TU_TRANS) assert_true(ndim >= 2);
  if (layout == TU_SLICED || layout == TU_EXPAND) assert_true(ndim >= 1);
  int64_t inner = (ndim && shape[0]) ? a.n / shape[0] : 1;
  if (layout == TU_EXPAND)
    for (int64_t i = 0; i < a.n; i++) a.v[i] = a.v[i % inner];

  int last = ndim - 1;
  int64_t bshape[TC_MAX_DIMS] = {0};
  if (ndim > 0) memcpy(bshape, shape, (size_t)ndim * sizeof(int64_t));
  if (layout == TU_TRANS) {
    bshape[0] = shape[last];
    bshape[last] = shape[0];
  } else if (layout == TU_SLICED) {
    bshape[0] = 3 * shape[0] + 1;
    if (ndim > 1) bshape[last] = 2 * shape[last];
  } else if (layout == TU_EXPAND) {
    bshape[0] = 1;
  }
  int64_t bn = tu_numel(ndim, bshape);
  double *bv = malloc((size_t)(bn > 0 ? bn : 1) * sizeof(double));
  assert_non_null(bv);
  for (int64_t i = 0; i < bn; i++) bv[i] = tu_filler(dt);
  int64_t m[TC_MAX_DIMS], b[TC_MAX_DIMS];
  for (int64_t i = 0; i < a.n; i++) {
    tu_unravel(i, ndim, shape, m);
    if (ndim > 0) memcpy(b, m, (size_t)ndim * sizeof(int64_t));
    if (layout == TU_TRANS) {
      b[0] = m[last];
      b[last] = m[0];
    } else if (layout == TU_SLICED) {
      b[0] = 1 + 3 * m[0];
      if (ndim > 1) b[last] = 2 * m[last];
    } else if (layout == TU_EXPAND) {
      b[0] = 0;
    }
    bv[tu_ravel(ndim, bshape, b)] = a.v[i];
  }
  tc_tensor *base = tu_from(dt, ndim, bshape, bv);
  free(bv);
  tc_tensor *t = NULL;
  switch (layout) {
  case TU_CONTIG: t = base; base = NULL; break;
  case TU_TRANS: t = TU_NN(tc_transpose(base, 0, last)); break;
  case TU_SLICED: {
    tc_tensor *s0 = TU_NN(tc_slice(base, 0, 1, bshape[0], 3));
    if (ndim > 1) {
      t = TU_NN(tc_slice(s0, last, 0, bshape[last], 2));
      tc_release(s0);
    } else {
      t = s0;
    }
    break;
  }
  default: t = TU_NN(tc_expand(base, ndim, shape)); break;
  }
  tc_release(base);
  TU_SHAPE_IS(t, ndim, shape);
  assert_int_equal(tc_dtype_of(t), dt);
  a.t = t;
  return a;
}

/* A contiguous tu_arr of dt with values uniform in [lo, hi). */
static inline tu_arr tu_make_unif(tc_dtype dt, int layout, int ndim,
                                  const int64_t *shape, double lo, double hi,
                                  uint64_t seed) {
  double *v = tu_uniform(tu_numel(ndim, shape), lo, hi, seed);
  tu_arr a = tu_make(dt, layout, ndim, shape, v);
  free(v);
  return a;
}

static inline void tu_free(tu_arr *a) {
  tc_release(a->t);
  free(a->v);
  a->t = NULL;
  a->v = NULL;
}

/* -- Broadcasting (computed here, NumPy rules) -------------------------- */

/* Output shape of broadcasting a and b; returns its ndim. */
static inline int tu_bshape(int an, const int64_t *as, int bn,
                            const int64_t *bs, int64_t *out) {
  int n = an > bn ? an : bn;
  for (int i = 0; i < n; i++) {
    int ai = an - n + i, bi = bn - n + i;
    int64_t x = ai >= 0 ? as[ai] : 1, y = bi >= 0 ? bs[bi] : 1;
    out[i] = x == 1 ? y : x;
  }
  return n;
}

/* Index into a C-order input of shape ishape for output element flat. */
static inline int64_t tu_bidx(int ondim, const int64_t *oshape, int64_t flat,
                              int indim, const int64_t *ishape) {
  int64_t idx = 0, stride = 1;
  for (int d = ondim - 1, e = indim - 1; d >= 0; d--, e--) {
    int64_t m = flat % oshape[d];
    flat /= oshape[d];
    if (e >= 0) {
      if (ishape[e] != 1) idx += m * stride;
      stride *= ishape[e];
    }
  }
  return idx;
}

/* -- Comparisons -------------------------------------------------------- */

/* Same value and same sign of zero; NaN matches NaN. */
static inline bool tu_same(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && signbit(got) == signbit(want);
}

/* Same value (0 == -0); NaN matches NaN. */
static inline bool tu_same_value(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want;
}

/* |got - want| <= rtol*|want| + atol; NaN and infinities must match. */
static inline bool tu_close(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  if (!isfinite(got)) return false;
  return fabs(got - want) <= rtol * fabs(want) + atol;
}

/* Mismatch counter that prints the first few mismatches. */
typedef struct {
  char what[200];
  int64_t bad;
} tu_cmp;

static inline void tu_cmp_init(tu_cmp *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->what, sizeof c->what, fmt, ap);
  va_end(ap);
  c->bad = 0;
}

static inline void tu_cmp_bad(tu_cmp *c, int64_t i, double got, double want,
                              double input) {
  if (c->bad++ < 4)
    print_error("  %s: [%lld] got %.9g (%a) expected %.9g (%a) input %.9g\n",
                c->what, (long long)i, got, got, want, want, input);
}

#define TU_CMP_DONE(c) tu_cmp_done_(&(c), __FILE__, __LINE__)
static inline void tu_cmp_done_(tu_cmp *c, const char *file, int line) {
  if (c->bad) {
    print_error("%s:%d: %s: %lld mismatches\n", file, line, c->what,
                (long long)c->bad);
    _fail(file, line);
  }
}

/* Compares t's values against want[0..n) with tolerance. */
static inline int64_t tu_check_close(tu_cmp *c, tc_tensor *t,
                                     const double *want, int64_t n,
                                     double rtol, double atol) {
  assert_int_equal(tc_numel(t), n);
  double *got = tu_read(t);
  for (int64_t i = 0; i < n; i++)
    if (!tu_close(got[i], want[i], rtol, atol))
      tu_cmp_bad(c, i, got[i], want[i], NAN);
  free(got);
  return c->bad;
}

#endif
