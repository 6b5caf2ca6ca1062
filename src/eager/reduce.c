/*
** reduce.c -- eager reductions in the canonical order (eager.h, principle
** 2): results never depend on the thread count or on compile mode.
** The reduced dim is made innermost and contiguous first (a copy when it is
** not), so every kernel here reduces contiguous rows, except over a dim that
** is not innermost of a contiguous tensor: columns side by side, no copy.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eager.h"

#define REDUCE_GRAIN_ROWS 64

/* -- Canonical chunk kernels -------------------------------------------------
** One chunk (<= TENSOR_RED_CHUNK elements): lane i % LANES accumulates element i,
** lanes start at the identity and combine by halving. The lane loop stays a
** loop (GCC unroll 1), which GCC vectorizes as two 8-wide steps; completely
** unrolled, GCC 12 left max and min scalar: 0.89 vs 0.11 ns per element
** (the JIT keeps its lane loops for the same reason, see jit.c). So does
** each halving level, into an array of its own: done in place, the levels
** were scalar, and max/min a compare and branch on data each (a row of 16
** f32: max 90 ns, sum 10; as loops 4 and 2). */

#define CHUNK_FN(name, T, ident, comb)                                       \
  static T name(const T *x, int64_t n)                                       \
  {                                                                          \
    T acc[TENSOR_RED_LANES];                                                 \
    for (int l = 0; l < TENSOR_RED_LANES; l++)                               \
      acc[l] = (ident);                                                      \
    int64_t i = 0;                                                           \
    for (; i + TENSOR_RED_LANES <= n; i += TENSOR_RED_LANES)                 \
      _Pragma("GCC unroll 1")   /* see above */                              \
      for (int l = 0; l < TENSOR_RED_LANES; l++)                             \
        acc[l] = comb(acc[l], x[i + l]);                                     \
    for (int l = 0; i + l < n; l++)                                          \
      acc[l] = comb(acc[l], x[i + l]);                                       \
    T h8[8], h4[4], h2[2];                                                   \
    _Pragma("GCC unroll 1")                                                  \
    for (int l = 0; l < 8; l++)                                              \
      h8[l] = comb(acc[l], acc[l + 8]);                                      \
    _Pragma("GCC unroll 1")                                                  \
    for (int l = 0; l < 4; l++)                                              \
      h4[l] = comb(h8[l], h8[l + 4]);                                        \
    _Pragma("GCC unroll 1")                                                  \
    for (int l = 0; l < 2; l++)                                              \
      h2[l] = comb(h4[l], h4[l + 2]);                                        \
    return comb(h2[0], h2[1]);                                               \
  }
_Static_assert(TENSOR_RED_LANES == 16, "CHUNK_FN halves 16 lanes");

#define X(kind, dt, T, nm, comb, ident) CHUNK_FN(chunk_##nm, T, ident, comb)
TENSOR_RED_CASES(X)
#undef X

/* -- Reducing one row ------------------------------------------------------- */

/* ORDER RED (TENSOR_RED_CASES' kinds) */
typedef enum { RK_SUM, RK_MAX, RK_MIN, RK__MAX } reduce_kind;

/* Reduce n contiguous elements into *out (both of dtype dt). Chunks are
** computed by up to `threads` workers when par; the split never changes
** the result because partials are combined in one fixed order. */
typedef struct {
  reduce_kind rk;
  tc_dtype dt;
  const char *x;
  int64_t n;
  void *partial;
} row_job;

static void chunks_range(void *ctx, int64_t lo, int64_t hi)
{
  const row_job *j = ctx;
  for (int64_t c = lo; c < hi; c++) {
    int64_t start = c * TENSOR_RED_CHUNK;
    int64_t len = j->n - start < TENSOR_RED_CHUNK ? j->n - start : TENSOR_RED_CHUNK;
    switch (TENSOR_RED_KEY(j->rk, j->dt)) {
#define X(kind, dt, T, nm, comb, ident)                                      \
    case TENSOR_RED_KEY(kind, dt):                                           \
      ((T *)j->partial)[c] = chunk_##nm((const T *)j->x + start, len);       \
      break;
    TENSOR_RED_CASES(X)
#undef X
    default:
      TC_ASSERT(0, "bad reduction");
    }
  }
}

static void combine_into(reduce_kind rk, tc_dtype dt, void *p, int64_t m,
                         void *out)
{
  int rc = tensor_combine(rk, dt, p, m, out);
  TC_ASSERT(rc == 0, "bad reduction");
  (void)rc;
}

/* Reduce one row; returns -1 on allocation failure. */
static int reduce_row(reduce_kind rk, tc_dtype dt, const void *x, int64_t n,
                      void *out, bool par)
{
  int64_t m = tensor_red_chunks(n);
  _Alignas(64) char small[64 * 8];
  void *partial = m <= 64 ? small : malloc((size_t)m * 8);
  if (!partial)
    return -1;
  row_job j = { rk, dt, x, n, partial };
  if (n == 0)
    chunks_range(&j, 0, 1);   /* a zero-length chunk yields the identity */
  else if (par)
    tensor_parallel(m, 4, chunks_range, &j);
  else
    chunks_range(&j, 0, m);
  combine_into(rk, dt, partial, m, out);
  if (partial != small)
    free(partial);
  return 0;
}

float eager_sum_f32(const float *x, int64_t n)
{
  float r = 0;
  reduce_row(RK_SUM, TC_F32, x, n, &r, false);
  return r;
}

double eager_sum_f64(const double *x, int64_t n)
{
  double r = 0;
  reduce_row(RK_SUM, TC_F64, x, n, &r, false);
  return r;
}

/* -- Rows of a tensor ------------------------------------------------------- */

/* t with dim moved innermost, as contiguous rows in dtype dt: a view when
** t is already so laid out, else a copy (new reference either way). */
tc_tensor *eager_rows_of(const tc_tensor *t, int dim, tc_dtype dt)
{
  tensor_geom g;
  tensor_geom_of(t, &g);
  if (t->ndim > 0) {
    int perm[TC_MAX_DIMS], k = 0;
    for (int d = 0; d < t->ndim; d++)
      if (d != dim)
        perm[k++] = d;
    perm[k] = dim;
    tensor_geom_permute("reduce", &g, t->ndim, perm);
  }
  tc_tensor *v = tensor_new_view(t, g.ndim, g.shape, g.stride, g.offset);
  if (!v || (tensor_is_contiguous(v) && v->dtype == dt))
    return v;
  tc_tensor *c = eager_contiguous_copy(v, dt);
  tensor_unref(v);
  return c;
}

typedef struct {
  reduce_kind rk;
  tc_dtype dt;
  const char *x;
  char *out;
  int64_t n;
  int failed;
} rows_job;

static void rows_range(void *ctx, int64_t lo, int64_t hi)
{
  rows_job *j = ctx;
  size_t esz = tensor_dtype_size[j->dt];
  if (j->n > 0 && j->n <= TENSOR_RED_CHUNK) {   /* one chunk: no partials */
    switch (TENSOR_RED_KEY(j->rk, j->dt)) {
#define X(kind, dt, T, nm, comb, ident)                                      \
    case TENSOR_RED_KEY(kind, dt):                                           \
      for (int64_t r = lo; r < hi; r++)                                      \
        ((T *)j->out)[r] = chunk_##nm((const T *)j->x + r * j->n, j->n);     \
      return;
    TENSOR_RED_CASES(X)
#undef X
    default:
      TC_ASSERT(0, "bad reduction");
    }
  }
  for (int64_t r = lo; r < hi; r++)
    if (reduce_row(j->rk, j->dt, j->x + r * j->n * (int64_t)esz, j->n,
                   j->out + r * (int64_t)esz, false) < 0)
      j->failed = 1;
}

/* -- Columns -------------------------------------------------------------------
** A reduction over a dim that is not innermost, of a contiguous tensor in
** the accumulating dtype: [outer, n, inner] -> [outer, inner]. Blocks of up
** to RED_COLS adjacent outputs side by side, each reduced in the canonical
** order (CHUNK_FN's lanes and halving per output, chunk partials combined
** by tensor_combine), read at each position as one contiguous run instead
** of copying the tensor to make the dim innermost (the JIT's column mode
** does the same, emit.c). */

#define RED_COLS 128

#define COLCHUNK_FN(name, T, ident, comb)                                    \
  static void name(const T *x, int64_t len, int64_t stride, int w, T *part)  \
  {                                                                          \
    T acc[TENSOR_RED_LANES][RED_COLS];                                       \
    for (int l = 0; l < TENSOR_RED_LANES; l++)                               \
      for (int c = 0; c < w; c++)                                            \
        acc[l][c] = (ident);                                                 \
    for (int64_t i = 0; i < len; i++) {                                      \
      T *a = acc[i % TENSOR_RED_LANES];                                      \
      const T *r = x + i * stride;                                           \
      for (int c = 0; c < w; c++)                                            \
        a[c] = comb(a[c], r[c]);                                             \
    }                                                                        \
    for (int h = TENSOR_RED_LANES / 2; h >= 1; h /= 2)                       \
      for (int l = 0; l < h; l++)                                            \
        for (int c = 0; c < w; c++)                                          \
          acc[l][c] = comb(acc[l][c], acc[l + h][c]);                        \
    memcpy(part, acc[0], (size_t)w * sizeof(T));                             \
  }

#define X(kind, dt, T, nm, comb, ident) COLCHUNK_FN(colchunk_##nm, T, ident, comb)
TENSOR_RED_CASES(X)
#undef X

typedef struct {
  reduce_kind rk;
  tc_dtype dt;
  const char *x;
  char *out;
  int64_t n, inner, nblocks;
  int failed;
} cols_job;

/* Chunk [cs, cs + len) of the w columns at x into part[0, w). */
static void colchunk(const cols_job *j, const char *x, int64_t len, int w,
                     void *part)
{
  switch (TENSOR_RED_KEY(j->rk, j->dt)) {
#define X(kind, dt, T, nm, comb, ident)                                      \
  case TENSOR_RED_KEY(kind, dt):                                             \
    colchunk_##nm((const T *)x, len, j->inner, w, part);                     \
    break;
  TENSOR_RED_CASES(X)
#undef X
  default:
    TC_ASSERT(0, "bad reduction");
  }
}

/* Units are (outer index, block of columns). Rows of several chunks keep
** every chunk's partials ([m][w]) and combine each column's in turn. */
static void cols_range(void *ctx, int64_t lo, int64_t hi)
{
  cols_job *j = ctx;
  int64_t esz = (int64_t)tensor_dtype_size[j->dt];
  int64_t m = tensor_red_chunks(j->n);
  _Alignas(64) char col[64 * 8];
  char *parts = m > 1 ? malloc((size_t)(m * RED_COLS * esz)) : NULL;
  char *colp = m <= 64 ? col : malloc((size_t)(m * esz));
  if ((m > 1 && !parts) || !colp) {
    j->failed = 1;
    free(parts);
    if (colp != col)
      free(colp);
    return;
  }
  for (int64_t u = lo; u < hi; u++) {
    int64_t o = u / j->nblocks, c0 = (u % j->nblocks) * RED_COLS;
    int w = (int)(j->inner - c0 < RED_COLS ? j->inner - c0 : RED_COLS);
    const char *x = j->x + (o * j->n * j->inner + c0) * esz;
    char *out = j->out + (o * j->inner + c0) * esz;
    if (m == 1) {
      colchunk(j, x, j->n, w, out);
      continue;
    }
    for (int64_t c = 0; c < m; c++) {
      int64_t cs = c * TENSOR_RED_CHUNK;
      int64_t len = j->n - cs < TENSOR_RED_CHUNK ? j->n - cs : TENSOR_RED_CHUNK;
      colchunk(j, x + cs * j->inner * esz, len, w, parts + c * w * esz);
    }
    for (int c = 0; c < w; c++) {
      for (int64_t q = 0; q < m; q++)
        memcpy(colp + q * esz, parts + (q * w + c) * esz, (size_t)esz);
      combine_into(j->rk, j->dt, colp, m, out + c * esz);
    }
  }
  free(parts);
  if (colp != col)
    free(colp);
}

/* Reduce contiguous t (dtype = out's) over dim, not its innermost, by
** columns; returns -1 on allocation failure. */
static int reduce_cols(reduce_kind rk, const tc_tensor *t, int dim,
                       tc_tensor *out)
{
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++)
    outer *= t->shape[d];
  for (int d = dim + 1; d < t->ndim; d++)
    inner *= t->shape[d];
  int64_t nblocks = (inner + RED_COLS - 1) / RED_COLS;
  cols_job j = { rk, (tc_dtype)out->dtype, tensor_ptr(t), tensor_ptr(out),
                 t->shape[dim], inner, nblocks, 0 };
  int64_t work = (j.n ? j.n : 1) * (inner < RED_COLS ? inner : RED_COLS);
  tensor_parallel(outer * nblocks, work >= 16384 ? 1 : 16384 / work,
                  cols_range, &j);
  return j.failed ? -1 : 0;
}

/* Is the reduction of t over dim a column reduction (reduce_cols)? */
static bool by_cols(const tc_tensor *t, int dim, tc_dtype dt)
{
  if (t->ndim == 0 || t->dtype != dt || !tensor_is_contiguous(t) ||
      t->numel == 0)
    return false;
  int64_t inner = 1;
  for (int d = dim + 1; d < t->ndim; d++)
    inner *= t->shape[d];
  return inner >= 8;
}

/* Reduce t over dim into out (contiguous, dtype dt = the accumulation
** dtype); rows is out's numel. */
static int reduce_rows(reduce_kind rk, const tc_tensor *t, int dim,
                       tc_tensor *out)
{
  tc_dtype dt = (tc_dtype)out->dtype;
  if (by_cols(t, dim, dt)) {
    int rc = reduce_cols(rk, t, dim, out);
    eager_count(ST_KERNELS_LAUNCHED);
    if (rc < 0)
      return tc_seterr(TC_E_NOMEM, "out of memory in a reduction"), -1;
    return 0;
  }
  tc_tensor *x = eager_rows_of(t, dim, dt);
  if (!x)
    return -1;
  int64_t n = t->ndim ? t->shape[dim] : 1;
  int64_t rows = out->numel;
  rows_job j = { rk, dt, tensor_ptr(x), tensor_ptr(out), n, 0 };
  if (rows == 1) {
    j.failed = reduce_row(rk, dt, j.x, n, j.out, true) < 0;
  } else if (rows > 0) {
    int64_t grain = n >= TENSOR_RED_CHUNK ? 1 : REDUCE_GRAIN_ROWS;
    tensor_parallel(rows, grain, rows_range, &j);
  }
  tensor_unref(x);
  eager_count(ST_KERNELS_LAUNCHED);
  if (j.failed)
    return tc_seterr(TC_E_NOMEM, "out of memory in a reduction"), -1;
  return 0;
}

/* -- Argmax, argmin ------------------------------------------------------------
** First index of the maximum (minimum); a NaN counts as both (PyTorch): the
** first NaN wins. `better` is > for argmax and < for argmin. */

#define ARGBEST_FN(name, T, better)                                          \
  static int64_t name(const T *x, int64_t n)                                 \
  {                                                                          \
    int64_t best = 0;                                                        \
    for (int64_t i = 1; i < n; i++) {                                        \
      if (x[best] != x[best])                                                \
        break;                                                               \
      if (x[i] better x[best] || x[i] != x[i])                               \
        best = i;                                                            \
    }                                                                        \
    return best;                                                             \
  }
#define ARGBEST_TYPES(X)                                                     \
  X(f32, float) X(f64, double) X(i32, int32_t) X(i64, int64_t) X(b8, uint8_t)
#define X(nm, T)                                                             \
  ARGBEST_FN(argmax_##nm, T, >)                                              \
  ARGBEST_FN(argmin_##nm, T, <)
ARGBEST_TYPES(X)
#undef X

typedef struct {
  tc_dtype dt;
  bool min;
  const char *x;
  int64_t *out;
  int64_t n;
} argbest_job;

static int64_t argbest_row(const argbest_job *j, const void *row)
{
  switch (j->dt) {
  case TC_F32: return j->min ? argmin_f32(row, j->n) : argmax_f32(row, j->n);
  case TC_F64: return j->min ? argmin_f64(row, j->n) : argmax_f64(row, j->n);
  case TC_I32: return j->min ? argmin_i32(row, j->n) : argmax_i32(row, j->n);
  case TC_I64: return j->min ? argmin_i64(row, j->n) : argmax_i64(row, j->n);
  default:     return j->min ? argmin_b8(row, j->n) : argmax_b8(row, j->n);
  }
}

static void argbest_range(void *ctx, int64_t lo, int64_t hi)
{
  const argbest_job *j = ctx;
  size_t esz = tensor_dtype_size[j->dt];
  for (int64_t r = lo; r < hi; r++)
    j->out[r] = argbest_row(j, j->x + r * j->n * (int64_t)esz);
}

/* -- Cumulative sum ------------------------------------------------------------
** In the canonical scan order (tensor.h), in the accumulating dtype. Along
** the last dim each row is scanned on its own; along another, x keeps its
** order ([outer][n][inner], contiguous) and blocks of columns are scanned
** side by side, so rows are read and written in order and the columns'
** adds are vector adds. */

typedef struct {
  tc_dtype dt;
  const char *x;
  char *out;
  int64_t n, inner;
  int64_t cols, nblk;   /* a block's columns; blocks of an outer index */
} cumsum_job;

/* A column block's width: up to TENSOR_SCAN_COLS, so that each row visit
** reads a long piece of the row (down a [2048, 4096] f32, blocks of 64
** columns read 256 bytes at a 16 KiB stride, a page each, and took 7.2-8.8
** ms on a Xeon, blocks of 1024 1.8-3.5), halved down to 64 while that
** leaves fewer than two units a thread. */
static int64_t scan_block_cols(int64_t outer, int64_t inner)
{
  int64_t want = 2 * (int64_t)eager_cfg()->threads, w = TENSOR_SCAN_COLS;
  while (w > 64 && outer * ((inner + w - 1) / w) < want)
    w /= 2;
  return inner < w ? inner : w;
}

/* Units are (outer index, column block); along the last dim (inner 1) a
** unit is one row. */
static void cumsum_range(void *ctx, int64_t lo, int64_t hi)
{
  const cumsum_job *j = ctx;
  int64_t esz = (int64_t)tensor_dtype_size[j->dt];
  for (int64_t u = lo; u < hi; u++) {
    int64_t o = u / j->nblk, c0 = u % j->nblk * j->cols;
    int64_t nc = j->inner - c0 < j->cols ? j->inner - c0 : j->cols;
    int64_t at = (o * j->n * j->inner + c0) * esz;
    const void *x = j->x + at;
    void *out = j->out + at;
    bool row = j->inner == 1;
    switch (j->dt) {
    case TC_F32:
      row ? tensor_scan_f32(x, out, j->n)
          : tensor_scan_cols_f32(x, out, j->n, j->inner, nc);
      break;
    case TC_F64:
      row ? tensor_scan_f64(x, out, j->n)
          : tensor_scan_cols_f64(x, out, j->n, j->inner, nc);
      break;
    default:
      row ? tensor_scan_i64(x, out, j->n)
          : tensor_scan_cols_i64(x, out, j->n, j->inner, nc);
    }
  }
}

/* out: contiguous, t's shape, the accumulating dtype. */
static int cumsum_into(const tc_tensor *t, int dim, tc_tensor *out)
{
  int64_t n = 1, inner = 1, outer = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (d == dim)
      n = t->shape[d];
    else if (d > dim)
      inner *= t->shape[d];
    else
      outer *= t->shape[d];
  }
  if (outer * inner == 0 || n == 0)
    return 0;
  tc_tensor *x = tensor_is_contiguous(t) && t->dtype == out->dtype
                 ? tensor_ref((tc_tensor *)t)
                 : eager_contiguous_copy(t, (tc_dtype)out->dtype);
  if (!x)
    return -1;
  int64_t cols = scan_block_cols(outer, inner);
  int64_t nblk = (inner + cols - 1) / cols;
  cumsum_job j = { (tc_dtype)out->dtype, tensor_ptr(x), tensor_ptr(out), n,
                   inner, cols, nblk };
  tensor_parallel(outer * nblk, n * cols >= TENSOR_RED_CHUNK
                  ? 1 : REDUCE_GRAIN_ROWS, cumsum_range, &j);
  tensor_unref(x);
  eager_count(ST_KERNELS_LAUNCHED);
  return 0;
}

/* -- Handlers --------------------------------------------------------------- */

static tc_tensor *cpu_reduce(const eager_call *c)
{
  const tc_tensor *t = c->in[0];
  tc_tensor *out = tensor_new(c->dtype, c->ndim, c->shape);
  if (!out)
    return NULL;
  int rc = 0;
  switch (c->op) {
  case TC_OP_SUM:
    rc = reduce_rows(RK_SUM, t, c->dim, out);
    break;
  case TC_OP_MAX:
    rc = reduce_rows(RK_MAX, t, c->dim, out);
    break;
  case TC_OP_MIN:
    rc = reduce_rows(RK_MIN, t, c->dim, out);
    break;
  case TC_OP_SUM_ALL: {   /* flatten in C order (a copy if strided) */
    tc_tensor *dense = tensor_is_contiguous(t)
                       ? tensor_ref((tc_tensor *)t)
                       : eager_contiguous_copy(t, (tc_dtype)t->dtype);
    tc_tensor *flat = dense ? tensor_new_view(dense, 1, &t->numel,
                                              &(int64_t){ 1 }, dense->offset)
                            : NULL;
    tensor_unref(dense);
    rc = flat ? reduce_rows(RK_SUM, flat, 0, out) : -1;
    tensor_unref(flat);
    break;
  }
  case TC_OP_CUMSUM:
    rc = cumsum_into(t, c->dim, out);
    break;
  case TC_OP_ARGMAX: case TC_OP_ARGMIN: {
    tc_tensor *x = eager_rows_of(t, c->dim, (tc_dtype)t->dtype);
    if (!x) {
      rc = -1;
      break;
    }
    argbest_job j = { (tc_dtype)t->dtype, c->op == TC_OP_ARGMIN,
                      tensor_ptr(x), tensor_ptr(out),
                      t->ndim ? t->shape[c->dim] : 1 };
    tensor_parallel(out->numel, REDUCE_GRAIN_ROWS, argbest_range, &j);
    eager_count(ST_KERNELS_LAUNCHED);
    tensor_unref(x);
    break;
  }
  default:
    tc_seterr(TC_E_INTERNAL, "%s: not a reduction", c->fn);
    rc = -1;
  }
  if (rc < 0) {
    tensor_unref(out);
    return NULL;
  }
  return out;
}

void eager_register_cpu_reduce(void)
{
  eager_register(TC_KEY_CPU, TC_OP_SUM, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_MAX, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_MIN, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_ARGMAX, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_ARGMIN, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_CUMSUM, cpu_reduce);
  eager_register(TC_KEY_CPU, TC_OP_SUM_ALL, cpu_reduce);
}

/* -- Shared with composite.c ------------------------------------------------ */

float eager_max_f32(const float *x, int64_t n)
{
  float r = 0;
  reduce_row(RK_MAX, TC_F32, x, n, &r, false);
  return r;
}

double eager_max_f64(const double *x, int64_t n)
{
  double r = 0;
  reduce_row(RK_MAX, TC_F64, x, n, &r, false);
  return r;
}

int eager_reduce_into(tc_op op, const tc_tensor *t, int dim, tc_tensor *out)
{
  reduce_kind rk = op == TC_OP_MAX ? RK_MAX : op == TC_OP_MIN ? RK_MIN
                                                              : RK_SUM;
  return reduce_rows(rk, t, dim, out);
}
