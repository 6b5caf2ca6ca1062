/*
** view.c -- the geometry of views: pure functions from (shape, strides,
** offset) to a new one. Eager makes handles over the same storage from
** them; trace records them as lazy views. No data is touched here.
*/
#include <string.h>

#include "tensor.h"

void tensor_geom_of(const tc_tensor *t, tensor_geom *g)
{
  g->ndim = t->ndim;
  memcpy(g->shape, t->shape, sizeof(int64_t) * t->ndim);
  memcpy(g->stride, t->stride, sizeof(int64_t) * t->ndim);
  g->offset = t->offset;
}

static int64_t geom_numel(const tensor_geom *g)
{
  int64_t n = 1;
  for (int i = 0; i < g->ndim; i++)
    n *= g->shape[i];
  return n;
}

/* Resolve one -1 in a requested shape against numel; check the size. */
static int infer_shape(const char *fn, int64_t numel, int ndim,
                       const int64_t *in, int64_t *out)
{
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    if (in[i] == -1) {
      if (infer >= 0)
        return tc_seterr(TC_E_SHAPE, "%s: only one dim may be -1", fn), -1;
      infer = i;
      out[i] = 1;
      continue;
    }
    if (in[i] < 0)
      return tc_seterr(TC_E_SHAPE, "%s: size %lld of dim %d is negative", fn,
                       (long long)in[i], i), -1;
    if (__builtin_mul_overflow(known, in[i], &known))
      return tc_seterr(TC_E_SHAPE, "%s: shape overflows", fn), -1;
    out[i] = in[i];
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return tc_seterr(TC_E_SHAPE, "%s: cannot reshape %lld elements into "
                       "a shape with -1 and %lld known elements", fn,
                       (long long)numel, (long long)known), -1;
    out[infer] = numel / known;
    known = numel;
  }
  if (known != numel)
    return tc_seterr(TC_E_SHAPE, "%s: cannot reshape %lld elements into a "
                     "shape of size %lld", fn, (long long)numel,
                     (long long)known), -1;
  return 0;
}

/* A view is possible when each group of new dims maps onto a run of old
** dims that is contiguous within itself (PyTorch's computeStride). */
static bool view_strides(const tensor_geom *g, int ndim, const int64_t *shape,
                         int64_t *stride)
{
  int64_t numel = geom_numel(g);
  if (numel == 0 || g->ndim == 0) {
    tensor_contiguous_strides(ndim, shape, stride);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk = g->stride[g->ndim - 1];   /* stride of the chunk's last dim */
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = g->ndim - 1; d >= 0; d--) {
    tensor_numel *= g->shape[d];
    if (d == 0 || (g->shape[d - 1] != 1 &&
                   g->stride[d - 1] != tensor_numel * chunk)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel)
        return false;
      if (d > 0) {
        chunk = g->stride[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

int tensor_geom_reshape(const char *fn, tensor_geom *g, int ndim,
                        const int64_t *shape)
{
  if (ndim < 0 || ndim > TC_MAX_DIMS)
    return tc_seterr(TC_E_SHAPE, "%s: ndim %d is out of range [0, %d]", fn,
                     ndim, TC_MAX_DIMS), -1;
  if (ndim > 0 && !shape)
    return tc_seterr_null(fn), -1;
  int64_t out[TC_MAX_DIMS], stride[TC_MAX_DIMS];
  if (infer_shape(fn, geom_numel(g), ndim, shape, out) < 0)
    return -1;
  bool ok = view_strides(g, ndim, out, stride);
  g->ndim = ndim;
  memcpy(g->shape, out, sizeof(int64_t) * ndim);
  if (!ok) {   /* caller copies: the result is contiguous */
    tensor_contiguous_strides(ndim, out, g->stride);
    g->offset = 0;
    return 1;
  }
  memcpy(g->stride, stride, sizeof(int64_t) * ndim);
  return 0;
}

int tensor_geom_permute(const char *fn, tensor_geom *g, int ndim,
                        const int *perm)
{
  if (!perm && ndim > 0)
    return tc_seterr_null(fn), -1;
  if (ndim != g->ndim)
    return tc_seterr(TC_E_ARG, "%s: permutation has %d dims, tensor has %d",
                     fn, ndim, g->ndim), -1;
  bool seen[TC_MAX_DIMS] = { false };
  int64_t sh[TC_MAX_DIMS], st[TC_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int d = tensor_wrap_dim(fn, perm[i], ndim);
    if (d < 0)
      return -1;
    if (seen[d])
      return tc_seterr(TC_E_ARG, "%s: dim %d is repeated in the "
                       "permutation", fn, perm[i]), -1;
    seen[d] = true;
    sh[i] = g->shape[d];
    st[i] = g->stride[d];
  }
  memcpy(g->shape, sh, sizeof(int64_t) * ndim);
  memcpy(g->stride, st, sizeof(int64_t) * ndim);
  return 0;
}

int tensor_geom_transpose(const char *fn, tensor_geom *g, int d0, int d1)
{
  int a = tensor_wrap_dim(fn, d0, g->ndim);
  int b = a < 0 ? -1 : tensor_wrap_dim(fn, d1, g->ndim);
  if (b < 0)
    return -1;
  if (g->ndim == 0)
    return 0;
  int64_t t = g->shape[a];
  g->shape[a] = g->shape[b];
  g->shape[b] = t;
  t = g->stride[a];
  g->stride[a] = g->stride[b];
  g->stride[b] = t;
  return 0;
}

int tensor_geom_slice(const char *fn, tensor_geom *g, int dim, int64_t start,
                      int64_t end, int64_t step)
{
  if (g->ndim == 0)
    return tc_seterr(TC_E_ARG, "%s: cannot slice a 0-d tensor", fn), -1;
  int d = tensor_wrap_dim(fn, dim, g->ndim);
  if (d < 0)
    return -1;
  if (step <= 0)
    return tc_seterr(TC_E_ARG, "%s: step must be positive, got %lld", fn,
                     (long long)step), -1;
  int64_t n = g->shape[d];
  /* Python semantics: negative indices count from the end, then clamp. */
  if (start < 0)
    start = start < -n ? 0 : start + n;
  if (end < 0)
    end = end < -n ? 0 : end + n;
  if (start > n)
    start = n;
  if (end > n)
    end = n;
  /* (Written so a huge step cannot overflow.) */
  int64_t len = end > start ? 1 + (end - start - 1) / step : 0;
  g->offset += start * g->stride[d];
  g->shape[d] = len;
  if (len > 1)   /* then step < n, and stride * step stays in range */
    g->stride[d] *= step;
  return 0;
}

int tensor_geom_expand(const char *fn, tensor_geom *g, int ndim,
                       const int64_t *shape)
{
  if (ndim > 0 && !shape)
    return tc_seterr_null(fn), -1;
  if (ndim < g->ndim || ndim > TC_MAX_DIMS)
    return tc_seterr(TC_E_SHAPE, "%s: cannot expand %d dims to %d", fn,
                     g->ndim, ndim), -1;
  int64_t sh[TC_MAX_DIMS], st[TC_MAX_DIMS];
  int lead = ndim - g->ndim;
  for (int i = 0; i < ndim; i++) {
    int64_t want = shape[i];
    if (i < lead) {
      if (want < 0)
        return tc_seterr(TC_E_SHAPE, "%s: size -1 is not allowed for a new "
                         "leading dim %d", fn, i), -1;
      sh[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = g->shape[i - lead];
    if (want == -1 || want == have) {
      sh[i] = have;
      st[i] = g->stride[i - lead];
    } else if (have == 1 && want >= 0) {
      sh[i] = want;
      st[i] = 0;
    } else {
      return tc_seterr(TC_E_SHAPE, "%s: dim %d of size %lld cannot be "
                       "broadcast to %lld", fn, i, (long long)have,
                       (long long)want), -1;
    }
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    if (__builtin_mul_overflow(n, sh[i], &n))
      return tc_seterr(TC_E_SHAPE, "%s: shape overflows", fn), -1;
  g->ndim = ndim;
  memcpy(g->shape, sh, sizeof(int64_t) * ndim);
  memcpy(g->stride, st, sizeof(int64_t) * ndim);
  return 0;
}

int tensor_geom_unsqueeze(const char *fn, tensor_geom *g, int dim)
{
  if (g->ndim == TC_MAX_DIMS)
    return tc_seterr(TC_E_SHAPE, "%s: tensor already has %d dims", fn,
                     TC_MAX_DIMS), -1;
  int d = tensor_wrap_dim(fn, dim, g->ndim + 1);
  if (d < 0)
    return -1;
  for (int i = g->ndim; i > d; i--) {
    g->shape[i] = g->shape[i - 1];
    g->stride[i] = g->stride[i - 1];
  }
  g->shape[d] = 1;
  g->stride[d] = d < g->ndim ? g->shape[d + 1] * g->stride[d + 1] : 1;
  g->ndim++;
  return 0;
}

int tensor_geom_squeeze(const char *fn, tensor_geom *g, int dim)
{
  int keep = 0;
  if (dim == TC_ALL_DIMS) {
    for (int i = 0; i < g->ndim; i++)
      if (g->shape[i] != 1) {
        g->shape[keep] = g->shape[i];
        g->stride[keep++] = g->stride[i];
      }
    g->ndim = keep;
    return 0;
  }
  int d = tensor_wrap_dim(fn, dim, g->ndim);
  if (d < 0)
    return -1;
  if (g->ndim == 0 || g->shape[d] != 1)
    return 0;   /* as PyTorch: squeezing a dim that is not 1 is a no-op */
  for (int i = d; i + 1 < g->ndim; i++) {
    g->shape[i] = g->shape[i + 1];
    g->stride[i] = g->stride[i + 1];
  }
  g->ndim--;
  return 0;
}
