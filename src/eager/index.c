/*
** index.c -- the CPU kernels of the indexing, joining and sampling ops
** (CAT, TAKE, GATHER, SCATTER_ADD, TOPK, MULTINOMIAL): data movement by
** index, run as extern steps inside compiled regions. The public calls
** (api_index.c) validate indices before recording; these kernels check
** again so that no index can reach memory it should not.
*/
#include <stdlib.h>
#include <string.h>

#include "eager.h"

/* t as a contiguous tensor of dtype dt: t itself (a new reference) when it
** already is one, else a copy. */
static tc_tensor *dense(const tc_tensor *t, tc_dtype dt)
{
  if (tensor_is_contiguous(t) && t->dtype == dt)
    return tensor_ref((tc_tensor *)t);
  return eager_contiguous_copy(t, dt);
}

static int64_t prod(const int64_t *shape, int lo, int hi)
{
  int64_t p = 1;
  for (int d = lo; d < hi; d++)
    p *= shape[d];
  return p;
}

/* The error every kernel gives for an index outside [0, size). */
static tc_tensor *bad_index(const eager_call *c, int64_t v, int64_t size)
{
  tc_seterr(TC_E_ARG, "%s: index %lld is out of range for dim %d of size "
            "%lld", c->fn, (long long)v, c->dim, (long long)size);
  return NULL;
}

/* -- CAT --------------------------------------------------------------------- */

/* Each input's block of dim x inner elements, per outer index, in turn. */
static tc_tensor *cpu_cat(const eager_call *c)
{
  tc_tensor *out = tensor_new(c->dtype, c->ndim, c->shape);
  if (!out)
    return NULL;
  size_t esz = tensor_dtype_size[c->dtype];
  int64_t outer = prod(c->shape, 0, c->dim);
  int64_t inner = prod(c->shape, c->dim + 1, c->ndim);
  tc_tensor *in[3] = { NULL, NULL, NULL };
  int64_t block[3] = { 0, 0, 0 };
  for (int i = 0; i < c->nin; i++) {
    if (!c->in[i])
      continue;
    if (!(in[i] = dense(c->in[i], c->dtype)))
      goto fail;
    block[i] = c->in[i]->shape[c->dim] * inner * (int64_t)esz;
  }
  char *o = tensor_ptr(out);
  for (int64_t r = 0; r < outer; r++)
    for (int i = 0; i < 3; i++)
      if (in[i] && block[i]) {
        memcpy(o, (char *)tensor_ptr(in[i]) + r * block[i], (size_t)block[i]);
        o += block[i];
      }
  for (int i = 0; i < 3; i++)
    tensor_unref(in[i]);
  eager_count(ST_KERNELS_LAUNCHED);
  return out;
fail:
  for (int i = 0; i < 3; i++)
    tensor_unref(in[i]);
  tensor_unref(out);
  return NULL;
}

/* -- TAKE -------------------------------------------------------------------- */

/* out[o, j, q] = a[o, idx[j], q] with o over a's dims before dim, j over
** the index's elements and q over a's dims after dim. */
static tc_tensor *cpu_take(const eager_call *c)
{
  const tc_tensor *a0 = c->in[0];
  int d = c->dim;
  int64_t size = a0->shape[d];
  tc_tensor *a = dense(a0, c->dtype);
  tc_tensor *idx = a ? dense(c->in[1], TC_I64) : NULL;
  tc_tensor *out = idx ? tensor_new(c->dtype, c->ndim, c->shape) : NULL;
  if (!out)
    goto done;
  const int64_t *ix = tensor_ptr(idx);
  int64_t nidx = idx->numel;
  for (int64_t j = 0; j < nidx; j++)
    if (ix[j] < 0 || ix[j] >= size) {
      bad_index(c, ix[j], size);
      tensor_unref(out);
      out = NULL;
      goto done;
    }
  size_t row = (size_t)prod(a0->shape, d + 1, a0->ndim) *
               tensor_dtype_size[c->dtype];
  int64_t outer = prod(a0->shape, 0, d);
  const char *src = tensor_ptr(a);
  char *o = tensor_ptr(out);
  for (int64_t r = 0; r < outer; r++)
    for (int64_t j = 0; j < nidx; j++, o += row)
      memcpy(o, src + ((size_t)(r * size + ix[j])) * row, row);
  eager_count(ST_KERNELS_LAUNCHED);
done:
  tensor_unref(a);
  tensor_unref(idx);
  return out;
}

/* -- GATHER and SCATTER_ADD ----------------------------------------------- */

/* Walks the C-order positions of an index tensor's shape, keeping the
** element offset of the same position in a strided tensor t, with t's
** offset along `dim` left out (the caller adds idx * stride[dim]). */
typedef struct {
  int ndim;
  const int64_t *shape;
  int64_t pos[TC_MAX_DIMS];
  int64_t stride[TC_MAX_DIMS];   /* t's strides, 0 along dim */
  int64_t off;
} walker;

static void walker_init(walker *w, int ndim, const int64_t *shape,
                        const tc_tensor *t, int dim)
{
  w->ndim = ndim;
  w->shape = shape;
  w->off = 0;
  for (int d = 0; d < ndim; d++) {
    w->pos[d] = 0;
    w->stride[d] = d == dim ? 0 : t->stride[d];
  }
}

static void walker_next(walker *w)
{
  for (int d = w->ndim - 1; d >= 0; d--) {
    w->off += w->stride[d];
    if (++w->pos[d] < w->shape[d])
      return;
    w->off -= w->stride[d] * w->pos[d];
    w->pos[d] = 0;
  }
}

/* out (index's shape, contiguous) = a at each index position with dim
** replaced by the index value. Reads a through its own strides. */
static tc_tensor *cpu_gather(const eager_call *c)
{
  const tc_tensor *a = c->in[0];
  int d = c->dim;
  tc_tensor *idx = dense(c->in[1], TC_I64);
  tc_tensor *out = idx ? tensor_new(c->dtype, c->ndim, c->shape) : NULL;
  if (!out) {
    tensor_unref(idx);
    return NULL;
  }
  size_t esz = tensor_dtype_size[c->dtype];
  const int64_t *ix = tensor_ptr(idx);
  const char *src = tensor_ptr(a);
  char *o = tensor_ptr(out);
  walker w;
  walker_init(&w, c->ndim, c->shape, a, d);
  for (int64_t i = 0; i < out->numel; i++, walker_next(&w)) {
    if (ix[i] < 0 || ix[i] >= a->shape[d]) {
      tensor_unref(idx);
      tensor_unref(out);
      return bad_index(c, ix[i], a->shape[d]);
    }
    int64_t at = w.off + ix[i] * a->stride[d];
    memcpy(o + (size_t)i * esz, src + at * (int64_t)esz, esz);
  }
  tensor_unref(idx);
  eager_count(ST_KERNELS_LAUNCHED);
  return out;
}

/* SCATTER_ADD's work: the index's positions cut into blocks, each one
** coordinate tuple of the dims other than dim and the last (the "outer"
** dims) and a run of INNER_RUN positions along the last; a block walks dim
** in order, and for each step the run. Any one element of the result is
** reached only from positions of one block (they differ from it only
** along dim), always in increasing order along dim: the CPU's order, the
** same whatever thread runs a block. With dim the last, a block is one row
** along it. */
#define INNER_RUN 256

typedef struct {
  const eager_call *c;
  const char *ix;           /* the index: i32 or i64, by its own strides */
  bool ix64;
  const char *s;            /* src, by its own strides */
  char *o;                  /* the result (a's contiguous copy) */
  int nouter;               /* the outer dims: sizes and each one's strides */
  int64_t oshape[TC_MAX_DIMS], ostr[3][TC_MAX_DIMS];
  int64_t n, str[3];        /* along dim: steps; index, src, result strides */
  int64_t inner, istr[3];   /* along the last dim (1 and 0s with dim last) */
  int64_t runs;             /* runs per outer tuple */
  int64_t size;             /* the result's size along dim */
  _Atomic int64_t bad;      /* an index out of range (INT64_MIN: none) */
} scatter_job;

#define SCATTER_ADD_BLOCK(T)                                               \
  for (int64_t j = 0; j < jb->n; j++)                                      \
    for (int64_t q = q0; q < q1; q++) {                                    \
      int64_t ip = off[0] + j * jb->str[0] + q * jb->istr[0];              \
      int64_t v = jb->ix64 ? ((const int64_t *)jb->ix)[ip]                 \
                           : ((const int32_t *)jb->ix)[ip];                \
      if (v < 0 || v >= jb->size) {                                        \
        atomic_store(&jb->bad, v);                                         \
        return;                                                            \
      }                                                                    \
      ((T *)jb->o)[off[2] + v * jb->str[2] + q * jb->istr[2]] +=           \
        ((const T *)jb->s)[off[1] + j * jb->str[1] + q * jb->istr[1]];     \
    }

static void scatter_block(scatter_job *jb, int64_t blk)
{
  int64_t t = blk / jb->runs, q0 = blk % jb->runs * INNER_RUN;
  int64_t q1 = q0 + INNER_RUN < jb->inner ? q0 + INNER_RUN : jb->inner;
  int64_t off[3] = { 0, 0, 0 };
  for (int e = jb->nouter - 1; e >= 0; e--) {
    int64_t at = t % jb->oshape[e];
    t /= jb->oshape[e];
    for (int k = 0; k < 3; k++)
      off[k] += at * jb->ostr[k][e];
  }
  switch (jb->c->dtype) {
  case TC_F32: SCATTER_ADD_BLOCK(float) break;
  case TC_F64: SCATTER_ADD_BLOCK(double) break;
  case TC_I32: SCATTER_ADD_BLOCK(int32_t) break;
  case TC_I64: SCATTER_ADD_BLOCK(int64_t) break;
  default: break;
  }
}

static void scatter_range(void *ctx, int64_t lo, int64_t hi)
{
  scatter_job *jb = ctx;
  for (int64_t b = lo; b < hi && atomic_load(&jb->bad) == INT64_MIN; b++)
    scatter_block(jb, b);
}

/* A contiguous copy of a, then src's values added at the index positions
** (scatter_job: each element's adds in increasing order along dim, a fixed
** order, so float sums do not depend on threads or on being run eagerly
** or compiled). Indices were checked by the caller; one out of range here
** still fails the op. */
static tc_tensor *cpu_scatter_add(const eager_call *c)
{
  const tc_tensor *a = c->in[0];
  int d = c->dim;
  if (c->dtype != TC_F32 && c->dtype != TC_F64 && c->dtype != TC_I32 &&
      c->dtype != TC_I64)
    return tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s", c->fn,
                     tc_dtype_name(c->dtype)), NULL;
  /* read where they are when their dtypes are the kernel's (the API's
  ** checks make them so), else converted */
  tc_tensor *idx = c->in[1]->dtype == TC_I32 || c->in[1]->dtype == TC_I64
                   ? tensor_ref(c->in[1]) : dense(c->in[1], TC_I64);
  tc_tensor *src = !idx ? NULL : c->in[2]->dtype == c->dtype
                   ? tensor_ref(c->in[2]) : dense(c->in[2], c->dtype);
  tc_tensor *out = src ? eager_contiguous_copy(a, c->dtype) : NULL;
  if (!out || idx->numel == 0)
    goto done;
  int last = idx->ndim - 1;
  const tc_tensor *ts[3] = { idx, src, out };
  scatter_job jb = { .c = c, .ix = tensor_ptr(idx),
                     .ix64 = idx->dtype == TC_I64, .s = tensor_ptr(src),
                     .o = tensor_ptr(out), .n = idx->shape[d], .inner = 1,
                     .size = a->shape[d] };
  atomic_init(&jb.bad, INT64_MIN);
  for (int k = 0; k < 3; k++) {
    jb.str[k] = ts[k]->stride[d];
    jb.istr[k] = 0;
  }
  if (d != last) {
    jb.inner = idx->shape[last];
    for (int k = 0; k < 3; k++)
      jb.istr[k] = ts[k]->stride[last];
  }
  int64_t outer = 1;
  for (int e = 0; e < idx->ndim; e++)
    if (e != d && (e != last || d == last)) {
      jb.oshape[jb.nouter] = idx->shape[e];
      for (int k = 0; k < 3; k++)
        jb.ostr[k][jb.nouter] = ts[k]->stride[e];
      jb.nouter++;
      outer *= idx->shape[e];
    }
  jb.runs = (jb.inner + INNER_RUN - 1) / INNER_RUN;
  int64_t work = jb.n * (jb.inner < INNER_RUN ? jb.inner : INNER_RUN);
  tensor_parallel(outer * jb.runs, work >= (1 << 15) ? 1 : (1 << 15) / work,
                  scatter_range, &jb);
  int64_t bad = atomic_load(&jb.bad);
  if (bad != INT64_MIN) {
    tensor_unref(out);
    out = bad_index(c, bad, a->shape[d]);
  }
done:
  tensor_unref(idx);
  tensor_unref(src);
  if (out)
    eager_count(ST_KERNELS_LAUNCHED);
  return out;
}

/* -- TOPK -------------------------------------------------------------------- */

/* A row element: its value as a sort key and its index. Integers sort as
** integers (i64 values beyond 2^53 stay exact), floats as doubles. */
typedef struct {
  double f;
  int64_t i;
  int64_t at;
} topk_key;

/* Order: NaN above everything; then by value; ties by lower index. desc:
** largest first. Returns <0 when x goes first. */
static int key_cmp(const topk_key *x, const topk_key *y, bool is_int,
                   bool desc)
{
  int c;
  if (is_int) {
    c = x->i < y->i ? -1 : x->i > y->i;
  } else {
    bool xn = x->f != x->f, yn = y->f != y->f;
    c = xn || yn ? (int)xn - (int)yn : x->f < y->f ? -1 : x->f > y->f;
  }
  if (desc)
    c = -c;
  return c ? c : (x->at < y->at ? -1 : 1);
}

/* Stable merge sort of n keys (tmp: room for n). */
static void key_sort(topk_key *k, topk_key *tmp, int64_t n, bool is_int,
                     bool desc)
{
  if (n < 2)
    return;
  int64_t h = n / 2;
  key_sort(k, tmp, h, is_int, desc);
  key_sort(k + h, tmp, n - h, is_int, desc);
  int64_t i = 0, j = h, o = 0;
  while (i < h && j < n)
    tmp[o++] = key_cmp(&k[j], &k[i], is_int, desc) < 0 ? k[j++] : k[i++];
  while (i < h)
    tmp[o++] = k[i++];
  while (j < n)
    tmp[o++] = k[j++];
  memcpy(k, tmp, sizeof *k * (size_t)n);
}

static int at_cmp(const void *x, const void *y)
{
  int64_t a = ((const topk_key *)x)->at, b = ((const topk_key *)y)->at;
  return a < b ? -1 : a > b;
}

static tc_tensor *cpu_topk(const eager_call *c)
{
  const tc_tensor *a = c->in[0];
  int d = c->dim;
  bool desc = c->s[0] != 0, sorted = c->s[1] != 0;
  bool is_int = !tensor_dtype_is_float((tc_dtype)a->dtype);
  int64_t n = a->ndim ? a->shape[d] : 1, k = c->ndim ? c->shape[d] : 1;
  tc_tensor *rows = eager_rows_of(a, d, is_int ? TC_I64 : TC_F64);
  tc_tensor *out = rows ? tensor_new(TC_I64, c->ndim, c->shape) : NULL;
  topk_key *key = out ? malloc(sizeof *key * (size_t)(2 * n + 1)) : NULL;
  if (!key) {
    if (out)
      tc_seterr(TC_E_NOMEM, "%s: out of memory", c->fn);
    tensor_unref(rows);
    tensor_unref(out);
    return NULL;
  }
  int64_t inner = a->ndim ? prod(a->shape, d + 1, a->ndim) : 1;
  int64_t nrows = n ? rows->numel / n : 0;
  int64_t *o = tensor_ptr(out);
  for (int64_t r = 0; r < nrows && k; r++) {
    for (int64_t j = 0; j < n; j++) {
      key[j].at = j;
      if (is_int)
        key[j].i = ((const int64_t *)tensor_ptr(rows))[r * n + j];
      else
        key[j].f = ((const double *)tensor_ptr(rows))[r * n + j];
    }
    key_sort(key, key + n, n, is_int, desc);
    if (!sorted)
      qsort(key, (size_t)k, sizeof *key, at_cmp);
    /* row r is (outer o, inner q) of a with dim left out */
    int64_t ro = r / inner, rq = r % inner;
    for (int64_t j = 0; j < k; j++)
      o[(ro * k + j) * inner + rq] = key[j].at;
  }
  free(key);
  tensor_unref(rows);
  eager_count(ST_KERNELS_LAUNCHED);
  return out;
}

/* -- MULTINOMIAL ------------------------------------------------------------- */

/* The seed of a call, carried as two exact halves in s[0], s[1]. */
static uint64_t call_seed(const eager_call *c)
{
  return (uint64_t)c->s[0] << 32 | (uint64_t)c->s[1];
}

/* First i with cum[i] > u (cum non-decreasing, cum[m-1] > u assumed). */
static int64_t first_above(const double *cum, int64_t m, double u)
{
  int64_t lo = 0, hi = m - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (cum[mid] > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* A row's running sums in the canonical scan order (cum) and its last
** positive weight, what its draws need; recomputed only after a draw
** without replacement zeroed a weight. */
typedef struct {
  double *cum;
  int64_t last;
} row_sums;

static void sums_of(const double *w, int64_t m, row_sums *rs)
{
  tensor_scan_f64(w, rs->cum, m);
  rs->last = 0;
  for (int64_t i = 0; i < m; i++)
    if (w[i] > 0)
      rs->last = i;
}

/* One draw: u = uniform * total falls in the bucket of exactly one
** positive weight; a u that rounds up to the total takes the last positive
** one. */
static int64_t draw(const row_sums *rs, int64_t m, double unif)
{
  double s = rs->cum[m - 1], u = unif * s;
  return u < s ? first_above(rs->cum, m, u) : rs->last;
}

/* Per row: draw j uses eager_uniform(seed, row * n + j); without
** replacement a drawn weight becomes 0 for the later draws. The call
** checked that weights are finite, >= 0, with a positive sum, and that a
** draw without replacement has enough of them. */
static tc_tensor *cpu_multinomial(const eager_call *c)
{
  const tc_tensor *p = c->in[0];
  int64_t m = p->shape[p->ndim - 1], n = c->shape[c->ndim - 1];
  int64_t nrows = p->ndim == 2 ? p->shape[0] : 1;
  uint64_t seed = call_seed(c);
  tc_tensor *w = eager_contiguous_copy(p, TC_F64);
  tc_tensor *out = w ? tensor_new(TC_I64, c->ndim, c->shape) : NULL;
  row_sums rs = { out ? malloc(sizeof *rs.cum * (size_t)m) : NULL, 0 };
  if (!rs.cum) {
    if (out)
      tc_seterr(TC_E_NOMEM, "%s: out of memory", c->fn);
    tensor_unref(w);
    tensor_unref(out);
    return NULL;
  }
  int64_t *o = tensor_ptr(out);
  for (int64_t r = 0; r < nrows; r++) {
    double *wr = (double *)tensor_ptr(w) + r * m;
    sums_of(wr, m, &rs);
    for (int64_t j = 0; j < n; j++) {
      int64_t i = draw(&rs, m, eager_uniform(seed, (uint64_t)(r * n + j)));
      o[r * n + j] = i;
      if (!c->keepdim && j + 1 < n) {
        wr[i] = 0;
        sums_of(wr, m, &rs);
      }
    }
  }
  free(rs.cum);
  tensor_unref(w);
  eager_count(ST_KERNELS_LAUNCHED);
  return out;
}

void eager_register_cpu_index(void)
{
  eager_register(TC_KEY_CPU, TC_OP_CAT, cpu_cat);
  eager_register(TC_KEY_CPU, TC_OP_TAKE, cpu_take);
  eager_register(TC_KEY_CPU, TC_OP_GATHER, cpu_gather);
  eager_register(TC_KEY_CPU, TC_OP_SCATTER_ADD, cpu_scatter_add);
  eager_register(TC_KEY_CPU, TC_OP_TOPK, cpu_topk);
  eager_register(TC_KEY_CPU, TC_OP_MULTINOMIAL, cpu_multinomial);
}
