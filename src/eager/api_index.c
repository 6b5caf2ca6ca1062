/*
** api_index.c -- the public indexing, joining and sampling ops: tc_cat,
** tc_stack, tc_index_select, tc_embedding, tc_gather, tc_scatter_add,
** tc_topk, tc_multinomial, tc_dropout. Shapes, dtypes and index values are
** checked here, at the call (indices are read, realizing a lazy index
** tensor), so eager and compiled mode raise the same errors at the same
** place; the ops then dispatch like any other (index.c runs them).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eager.h"

/* Every tensor the API hands out is tracked by the innermost open scope. */
static tc_tensor *handed_out(tc_tensor *t)
{
  tensor_scope_track(t);
  return t;
}

static bool all_ok(const char *fn, int n, tc_tensor *const *ts)
{
  for (int i = 0; i < n; i++)
    if (!tensor_arg_ok(fn, ts[i]))
      return false;
  return true;
}

/* -- Index checks ------------------------------------------------------------ */

static bool index_dtype_ok(const char *fn, const tc_tensor *idx)
{
  if (idx->dtype == TC_I32 || idx->dtype == TC_I64)
    return true;
  tc_seterr(TC_E_DTYPE, "%s: indices must be i32 or i64, got %s", fn,
            tc_dtype_name((tc_dtype)idx->dtype));
  return false;
}

/* t's values (realized) as a contiguous host tensor of dtype dt: a
** device tensor is copied back first, since the checks read them here. */
static tc_tensor *host_values(tc_tensor *t, tc_dtype dt)
{
  if (tensor_make_readable(t) < 0)
    return NULL;
  tc_tensor *h = eager_on_host(t);
  if (!h)
    return NULL;
  tc_tensor *v = tensor_is_contiguous(h) && h->dtype == dt
                 ? tensor_ref(h) : eager_contiguous_copy(h, dt);
  tensor_unref(h);
  return v;
}

/* idx without its broadcast dims (stride 0: one element seen again), so
** a check reads each value once: an expanded index (an embedding's
** gradient, take_grad) costs what its source does. The first bad value in
** C order is in it (zero the broadcast coordinates of the first bad
** position: a bad position no later). */
static tc_tensor *distinct_view(tc_tensor *idx)
{
  int64_t shape[TC_MAX_DIMS];
  for (int e = 0; e < idx->ndim; e++)
    shape[e] = idx->stride[e] == 0 && idx->shape[e] > 1 ? 1 : idx->shape[e];
  return tensor_new_view(idx, idx->ndim, shape, idx->stride, idx->offset);
}

/* Are idx's values all in [0, size)? They are read (a lazy idx is realized
** first), so a bad index is reported here in both modes, naming the first
** one in C order. */
static bool indices_in_range(const char *fn, tc_tensor *idx, int dim,
                             int64_t size)
{
  if (!index_dtype_ok(fn, idx) || tensor_make_readable(idx) < 0)
    return false;
  tc_tensor *once = distinct_view(idx);
  tc_tensor *v = once ? host_values(once, TC_I64) : NULL;
  tensor_unref(once);
  if (!v)
    return false;
  const int64_t *ix = tensor_ptr(v);
  bool ok = true;
  for (int64_t i = 0; i < v->numel && ok; i++)
    if (ix[i] < 0 || ix[i] >= size) {
      tc_seterr(TC_E_ARG, "%s: index %lld is out of range for dim %d of "
                "size %lld", fn, (long long)ix[i], dim, (long long)size);
      ok = false;
    }
  tensor_unref(v);
  return ok;
}

/* -- Cat and stack ----------------------------------------------------------- */

/* One CAT of up to three tensors (absent ones NULL) along dim d. */
static tc_tensor *cat_call(const char *fn, tc_tensor *const *in, int n,
                           int d, tc_dtype dt)
{
  eager_call c = { .op = TC_OP_CAT, .fn = fn, .nin = 3, .dim = d,
                   .dtype = dt, .cdtype = dt, .ndim = in[0]->ndim };
  memcpy(c.shape, in[0]->shape, sizeof(int64_t) * (size_t)c.ndim);
  c.shape[d] = 0;
  for (int i = 0; i < n; i++) {
    c.in[i] = in[i];
    c.shape[d] += in[i]->shape[d];
  }
  return eager_dispatch(&c);
}

/* Does t match ref's shape in every dim but d? (error set when not) */
static bool cat_shape_ok(const char *fn, const tc_tensor *ref,
                         const tc_tensor *t, int i, int d)
{
  if (t->ndim != ref->ndim) {
    tc_seterr(TC_E_SHAPE, "%s: tensor %d has %d dims, tensor 0 has %d", fn,
              i, t->ndim, ref->ndim);
    return false;
  }
  for (int e = 0; e < t->ndim; e++)
    if (e != d && t->shape[e] != ref->shape[e]) {
      tc_seterr(TC_E_SHAPE, "%s: sizes must match except in dim %d: tensor "
                "%d has %lld in dim %d, tensor 0 has %lld", fn, d, i,
                (long long)t->shape[e], e, (long long)ref->shape[e]);
      return false;
    }
  return true;
}

/* A 1-D tensor of size 0 joins anything (torch's legacy rule): skipped. */
static bool legacy_empty(const tc_tensor *t)
{
  return t->ndim == 1 && t->shape[0] == 0;
}

/* Joins list[0..n) (owned references) three at a time, level by level,
** until one is left: each element is copied once per level, and one level
** suffices for up to three tensors. */
static tc_tensor *cat_tree(const char *fn, tc_tensor **list, int n, int d,
                           tc_dtype dt)
{
  do {
    int m = 0;
    for (int i = 0; i < n; i += 3) {
      int k = n - i < 3 ? n - i : 3;
      tc_tensor *r = cat_call(fn, list + i, k, d, dt);
      for (int j = 0; j < k; j++)
        tensor_unref(list[i + j]);
      list[m++] = r;
      if (!r) {
        for (int j = i + k; j < n; j++)
          tensor_unref(list[j]);
        for (int j = 0; j < m - 1; j++)
          tensor_unref(list[j]);
        return NULL;
      }
    }
    n = m;
  } while (n > 1);
  return list[0];
}

static tc_tensor *cat(const char *fn, tc_tensor **ts, int n, int dim)
{
  eager_init();
  if (!ts || n <= 0) {
    tc_seterr(TC_E_ARG, "%s: needs at least one tensor", fn);
    return NULL;
  }
  if (!all_ok(fn, n, ts))
    return NULL;
  int first = 0;
  while (first < n - 1 && legacy_empty(ts[first]))
    first++;
  const tc_tensor *ref = ts[first];
  if (ref->ndim == 0) {
    tc_seterr(TC_E_SHAPE, "%s: a 0-d tensor cannot be concatenated", fn);
    return NULL;
  }
  int d = tensor_wrap_dim(fn, dim, ref->ndim);
  if (d < 0)
    return NULL;
  tc_dtype dt = (tc_dtype)ts[0]->dtype;
  for (int i = 0; i < n; i++) {
    dt = tc_promote(dt, (tc_dtype)ts[i]->dtype);
    if (!legacy_empty(ts[i]) && !cat_shape_ok(fn, ref, ts[i], i, d))
      return NULL;
  }
  tc_tensor **list = malloc(sizeof *list * (size_t)n);
  if (!list) {
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return NULL;
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (i == first || !legacy_empty(ts[i]))
      list[m++] = tensor_ref(ts[i]);
  tc_tensor *r = cat_tree(fn, list, m, d, dt);
  free(list);
  return handed_out(r);
}

tc_tensor *tc_cat(tc_tensor **ts, int n, int dim)
{
  return cat(__func__, ts, n, dim);
}

tc_tensor *tc_stack(tc_tensor **ts, int n, int dim)
{
  const char *fn = __func__;
  eager_init();
  if (!ts || n <= 0) {
    tc_seterr(TC_E_ARG, "%s: needs at least one tensor", fn);
    return NULL;
  }
  if (!all_ok(fn, n, ts))
    return NULL;
  for (int i = 1; i < n; i++) {
    bool same = ts[i]->ndim == ts[0]->ndim;
    for (int e = 0; same && e < ts[0]->ndim; e++)
      same = ts[i]->shape[e] == ts[0]->shape[e];
    if (!same) {
      tc_seterr(TC_E_SHAPE, "%s: every tensor must have the same shape; "
                "tensor %d differs from tensor 0", fn, i);
      return NULL;
    }
  }
  if (ts[0]->ndim >= TC_MAX_DIMS) {
    tc_seterr(TC_E_SHAPE, "%s: the result would have more than %d dims", fn,
              TC_MAX_DIMS);
    return NULL;
  }
  int d = tensor_wrap_dim(fn, dim, ts[0]->ndim + 1);
  if (d < 0)
    return NULL;
  tc_tensor **u = calloc((size_t)n, sizeof *u);
  if (!u) {
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return NULL;
  }
  tc_tensor *r = NULL;
  int i = 0;
  while (i < n && (u[i] = tc_unsqueeze(ts[i], d)))
    i++;
  if (i == n)
    r = cat(fn, u, n, d);
  for (int j = 0; j < i; j++)
    tc_release(u[j]);
  free(u);
  return r;
}

/* -- Index select, embedding, gather, scatter ------------------------------- */

/* The dim an indexing op selects along: a must have one; dim may count
** from the end. Returns it, or -1 with the error set. */
static int indexed_dim(const char *fn, const tc_tensor *a, int dim)
{
  if (a->ndim == 0) {
    tc_seterr(TC_E_SHAPE, "%s: a must have at least 1 dim", fn);
    return -1;
  }
  return tensor_wrap_dim(fn, dim, a->ndim);
}

/* TAKE: a's slices along d at idx's values; the result's dims are a's with
** d replaced by (nidx, ishape). */
static tc_tensor *take(const char *fn, tc_tensor *a, int d, tc_tensor *idx,
                       int nidx, const int64_t *ishape)
{
  if (a->ndim - 1 + nidx > TC_MAX_DIMS) {
    tc_seterr(TC_E_SHAPE, "%s: the result would have more than %d dims", fn,
              TC_MAX_DIMS);
    return NULL;
  }
  if (!indices_in_range(fn, idx, d, a->shape[d]))
    return NULL;
  eager_call c = { .op = TC_OP_TAKE, .fn = fn, .nin = 2, .in = { a, idx },
                   .dim = d, .dtype = (tc_dtype)a->dtype,
                   .cdtype = (tc_dtype)a->dtype };
  for (int e = 0; e < d; e++)
    c.shape[c.ndim++] = a->shape[e];
  for (int e = 0; e < nidx; e++)
    c.shape[c.ndim++] = ishape[e];
  for (int e = d + 1; e < a->ndim; e++)
    c.shape[c.ndim++] = a->shape[e];
  return handed_out(eager_dispatch(&c));
}

tc_tensor *tc_index_select(tc_tensor *a, int dim, tc_tensor *index)
{
  const char *fn = __func__;
  eager_init();
  if (!all_ok(fn, 2, (tc_tensor *[]){ a, index }))
    return NULL;
  int d = indexed_dim(fn, a, dim);
  if (d < 0)
    return NULL;
  if (index->ndim > 1) {
    tc_seterr(TC_E_SHAPE, "%s: index must be 0-d or 1-D, got %d dims", fn,
              index->ndim);
    return NULL;
  }
  return take(fn, a, d, index, 1, &index->numel);
}

tc_tensor *tc_embedding(tc_tensor *weight, tc_tensor *indices)
{
  const char *fn = __func__;
  eager_init();
  if (!all_ok(fn, 2, (tc_tensor *[]){ weight, indices }))
    return NULL;
  if (weight->ndim != 2) {
    tc_seterr(TC_E_SHAPE, "%s: weight must be 2-D [rows, dim], got %d dims",
              fn, weight->ndim);
    return NULL;
  }
  return take(fn, weight, 0, indices, indices->ndim, indices->shape);
}

/* index's sizes may not exceed t's, in every dim but skip (-1: none). */
static bool fits_within(const char *fn, const tc_tensor *index,
                        const tc_tensor *t, const char *tname, int skip)
{
  if (index->ndim != t->ndim) {
    tc_seterr(TC_E_SHAPE, "%s: index has %d dims, %s has %d", fn,
              index->ndim, tname, t->ndim);
    return false;
  }
  for (int e = 0; e < t->ndim; e++)
    if (e != skip && index->shape[e] > t->shape[e]) {
      tc_seterr(TC_E_SHAPE, "%s: index has size %lld in dim %d, larger "
                "than %s's %lld", fn, (long long)index->shape[e], e, tname,
                (long long)t->shape[e]);
      return false;
    }
  return true;
}

/* GATHER of checked arguments (the result has index's shape). */
static tc_tensor *gather_call(const char *fn, tc_tensor *a, int d,
                              tc_tensor *index)
{
  eager_call c = { .op = TC_OP_GATHER, .fn = fn, .nin = 2,
                   .in = { a, index }, .dim = d,
                   .dtype = (tc_dtype)a->dtype, .cdtype = (tc_dtype)a->dtype,
                   .ndim = index->ndim };
  memcpy(c.shape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
  return eager_dispatch(&c);
}

tc_tensor *tc_gather(tc_tensor *a, int dim, tc_tensor *index)
{
  const char *fn = __func__;
  eager_init();
  if (!all_ok(fn, 2, (tc_tensor *[]){ a, index }))
    return NULL;
  int d = indexed_dim(fn, a, dim);
  if (d < 0 || !index_dtype_ok(fn, index) ||
      !fits_within(fn, index, a, "a", d) ||
      !indices_in_range(fn, index, d, a->shape[d]))
    return NULL;
  return handed_out(gather_call(fn, a, d, index));
}

static tc_tensor *scatter_add(const char *fn, tc_tensor *a, int dim,
                              tc_tensor *index, tc_tensor *src)
{
  eager_init();
  if (!all_ok(fn, 3, (tc_tensor *[]){ a, index, src }))
    return NULL;
  int d = indexed_dim(fn, a, dim);
  if (d < 0)
    return NULL;
  if (src->dtype != a->dtype || a->dtype == TC_BOOL) {
    tc_seterr(TC_E_DTYPE, "%s: src must have a's dtype, and it may not be "
              "bool (a is %s, src is %s)", fn,
              tc_dtype_name((tc_dtype)a->dtype),
              tc_dtype_name((tc_dtype)src->dtype));
    return NULL;
  }
  if (!index_dtype_ok(fn, index) ||
      !fits_within(fn, index, src, "src", -1) ||
      !fits_within(fn, index, a, "a", d) ||
      !indices_in_range(fn, index, d, a->shape[d]))
    return NULL;
  eager_call c = { .op = TC_OP_SCATTER_ADD, .fn = fn, .nin = 3,
                   .in = { a, index, src }, .dim = d,
                   .dtype = (tc_dtype)a->dtype, .cdtype = (tc_dtype)a->dtype,
                   .ndim = a->ndim };
  memcpy(c.shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  return eager_dispatch(&c);
}

tc_tensor *tc_scatter_add(tc_tensor *a, int dim, tc_tensor *index,
                          tc_tensor *src)
{
  return handed_out(scatter_add(__func__, a, dim, index, src));
}

int tc_scatter_add_(tc_tensor *a, int dim, tc_tensor *index, tc_tensor *src)
{
  tc_tensor *r = scatter_add(__func__, a, dim, index, src);
  if (!r)
    return -1;
  int rc = tc_copy_(a, r);
  tensor_unref(r);
  return rc;
}

/* -- Top-k ------------------------------------------------------------------- */

int tc_topk(tc_tensor *a, int64_t k, int dim, bool largest, bool sorted,
            tc_tensor **values, tc_tensor **indices)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, a))
    return -1;
  if (!values && !indices)
    return tc_seterr(TC_E_ARG, "%s: values and indices are both NULL", fn),
           -1;
  if (a->ndim == 0 || a->dtype == TC_BOOL)
    return tc_seterr(TC_E_ARG, "%s: a must have at least 1 dim and not be "
                     "bool", fn), -1;
  int d = tensor_wrap_dim(fn, dim, a->ndim);
  if (d < 0)
    return -1;
  if (k < 0 || k > a->shape[d])
    return tc_seterr(TC_E_ARG, "%s: k %lld is out of range for dim %d of "
                     "size %lld", fn, (long long)k, d,
                     (long long)a->shape[d]), -1;
  eager_call c = { .op = TC_OP_TOPK, .fn = fn, .nin = 1, .in = { a },
                   .s = { largest, sorted }, .dim = d, .dtype = TC_I64,
                   .cdtype = TC_I64, .ndim = a->ndim };
  memcpy(c.shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  c.shape[d] = k;
  /* The values are a gather at the indices, which are in range by
  ** construction: no check, so they stay lazy in compile mode. */
  tc_tensor *idx = eager_dispatch(&c);
  tc_tensor *val = idx && values ? gather_call(fn, a, d, idx) : NULL;
  if (!idx || (values && !val)) {
    tensor_unref(idx);
    return -1;
  }
  if (values)
    *values = handed_out(val);
  if (indices)
    *indices = handed_out(idx);
  else
    tensor_unref(idx);
  return 0;
}

/* -- Sampling ---------------------------------------------------------------- */

/* Rows of finite, non-negative weights with a positive sum, and (without
** replacement) at least n positive ones. Reads p (realizing it). */
static bool weights_ok(const char *fn, tc_tensor *p, int64_t n,
                       bool replacement)
{
  tc_tensor *w = host_values(p, TC_F64);
  if (!w)
    return false;
  int64_t m = p->shape[p->ndim - 1], rows = m ? w->numel / m : 0;
  const double *v = tensor_ptr(w);
  bool ok = true;
  for (int64_t r = 0; r < rows && ok; r++) {
    double sum = 0;
    int64_t pos = 0;
    for (int64_t i = 0; i < m && ok; i++) {
      double x = v[r * m + i];
      if (!(x >= 0) || isinf(x)) {
        tc_seterr(TC_E_ARG, "%s: probabilities must be finite and >= 0 "
                  "(row %lld has %g)", fn, (long long)r, x);
        ok = false;
      }
      sum += x;
      pos += x > 0;
    }
    if (ok && !(sum > 0) ) {
      tc_seterr(TC_E_ARG, "%s: row %lld of the probabilities sums to 0", fn,
                (long long)r);
      ok = false;
    } else if (ok && !replacement && pos < n) {
      tc_seterr(TC_E_ARG, "%s: cannot draw %lld samples without "
                "replacement from row %lld, which has %lld nonzero "
                "probabilities", fn, (long long)n, (long long)r,
                (long long)pos);
      ok = false;
    }
  }
  tensor_unref(w);
  return ok;
}

tc_tensor *tc_multinomial(tc_tensor *probs, int64_t n, bool replacement,
                          uint64_t seed)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, probs))
    return NULL;
  if (probs->ndim < 1 || probs->ndim > 2 ||
      !tensor_dtype_is_float((tc_dtype)probs->dtype)) {
    tc_seterr(TC_E_ARG, "%s: probs must be a 1-D or 2-D float tensor (got "
              "%d dims, %s)", fn, probs->ndim,
              tc_dtype_name((tc_dtype)probs->dtype));
    return NULL;
  }
  if (n <= 0 || probs->shape[probs->ndim - 1] == 0) {
    tc_seterr(TC_E_ARG, "%s: n must be positive and probs not empty (n "
              "%lld)", fn, (long long)n);
    return NULL;
  }
  if (!weights_ok(fn, probs, n, replacement))
    return NULL;
  eager_call c = { .op = TC_OP_MULTINOMIAL, .fn = fn, .nin = 1,
                   .in = { probs },
                   .s = { (double)(seed >> 32), (double)(seed & 0xffffffffu) },
                   .keepdim = replacement, .dtype = TC_I64, .cdtype = TC_I64,
                   .ndim = probs->ndim };
  c.shape[0] = probs->shape[0];
  c.shape[c.ndim - 1] = n;
  return handed_out(eager_dispatch(&c));
}

/* Pointwise ops over tc_rand's stream, so it fuses and is the same in both
** modes: element i (C order of a's shape) is kept when u_i >= p, u_i being
** tc_rand(seed)'s element i in a's dtype; kept ones are scaled by
** 1 / (1 - p), the others are 0. */
tc_tensor *tc_dropout(tc_tensor *a, double p, bool train, uint64_t seed)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, a))
    return NULL;
  if (!tensor_dtype_is_float((tc_dtype)a->dtype)) {
    tc_seterr(TC_E_DTYPE, "%s: a must be floating (f32, f64, f16 or bf16), "
              "got %s", fn,
              tc_dtype_name((tc_dtype)a->dtype));
    return NULL;
  }
  if (!(p >= 0 && p <= 1)) {
    tc_seterr(TC_E_ARG, "%s: p must be in [0, 1], got %g", fn, p);
    return NULL;
  }
  if (!train || p == 0)
    return tc_contiguous(a);
  tc_tensor *u = tc_rand((tc_dtype)a->dtype, a->ndim, a->shape, seed);
  tc_tensor *drop = tc_lt_scalar(u, p);
  tc_tensor *scaled = tc_mul_scalar(a, p < 1 ? 1 / (1 - p) : 0);
  tc_tensor *r = tc_masked_fill(scaled, drop, 0);
  tc_release(u);
  tc_release(drop);
  tc_release(scaled);
  return r;
}
