/*
** api_composed.c -- public ops written as compositions of tc ops: variance
** and standard deviation, sum / mean / var / std over several dims, and
** triu / tril. They have no kernels of their own: eager mode runs the
** parts, compile mode records them like any program, so the row fuser makes
** var's two passes (mean, then the sum of squared deviations) one ROWS
** kernel, and a triangle's mask is fused into its consumer's kernel.
*/
#include <math.h>

#include "eager.h"

/* Releases an intermediate and passes the next value through. */
static tc_tensor *then(tc_tensor *done, tc_tensor *next)
{
  tc_release(done);
  return next;
}

/* -- Variance over one dim ---------------------------------------------------- */

/* A live float tensor (mean, var and std of integers are errors, as in
** torch), or false with the error set. */
static bool float_arg(const char *fn, tc_tensor *a)
{
  if (!tensor_arg_ok(fn, a))
    return false;
  if (!tensor_dtype_is_float((tc_dtype)a->dtype)) {
    tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s (needs a floating-point "
              "tensor; cast it first)", fn, tc_dtype_name((tc_dtype)a->dtype));
    return false;
  }
  return true;
}

/* The wrapped dim for var and std, or -1 with the error set. */
static int var_dim(const char *fn, tc_tensor *a, int dim)
{
  return float_arg(fn, a) ? tensor_wrap_dim(fn, dim, a->ndim) : -1;
}

/* sum((a - mean(a))^2) / max(0, n - correction) over dim d, as torch.var:
** two passes, so no cancellation of a one-pass sum of squares. */
static tc_tensor *variance(tc_tensor *a, int d, double correction,
                           bool keepdim)
{
  int64_t n = a->ndim ? a->shape[d] : 1;
  double denom = fmax(0.0, (double)n - correction);
  tc_tensor *m = tc_mean(a, d, true);
  tc_tensor *xc = tc_sub(a, m);
  tc_release(m);
  tc_tensor *sq = then(xc, tc_mul(xc, xc));
  tc_tensor *s = then(sq, tc_sum(sq, d, keepdim));
  return then(s, tc_div_scalar(s, denom));
}

tc_tensor *tc_var(tc_tensor *a, int dim, double correction, bool keepdim)
{
  int d = var_dim(__func__, a, dim);
  return d < 0 ? NULL : variance(a, d, correction, keepdim);
}

tc_tensor *tc_std(tc_tensor *a, int dim, double correction, bool keepdim)
{
  int d = var_dim(__func__, a, dim);
  if (d < 0)
    return NULL;
  tc_tensor *v = variance(a, d, correction, keepdim);
  return then(v, tc_sqrt(v));
}

/* -- Several dims ----------------------------------------------------------------
** The reduced dims are moved last (in their order in a) and merged into one
** row: a view where a's strides allow it, else a copy, as a reduction over
** one non-innermost dim copies too. The one-dim reduction of that row then
** sums in the canonical order over all the reduced elements at once. */

typedef enum { MD_SUM, MD_MEAN, MD_VAR, MD_STD } multi_kind;

typedef struct {
  bool reduced[TC_MAX_DIMS];
  int ndim;                      /* of the result with keepdim */
  int64_t shape[TC_MAX_DIMS];
} dim_set;

/* Validates dims (negative ones count from the end; each at most once). */
static bool dim_set_of(const char *fn, const tc_tensor *a, int ndims,
                       const int *dims, dim_set *ds)
{
  int n = a->ndim > 0 ? a->ndim : 1;
  if (ndims < 1 || ndims > n || !dims) {
    tc_seterr(TC_E_ARG, "%s: %d dims given for a tensor of %d dims (at "
              "least 1, each at most once)", fn, ndims, a->ndim);
    return false;
  }
  for (int i = 0; i < TC_MAX_DIMS; i++)
    ds->reduced[i] = false;
  for (int i = 0; i < ndims; i++) {
    int d = tensor_wrap_dim(fn, dims[i], a->ndim);
    if (d < 0)
      return false;
    if (ds->reduced[d]) {
      tc_seterr(TC_E_ARG, "%s: dim %d appears more than once in dims", fn,
                dims[i]);
      return false;
    }
    ds->reduced[d] = true;
  }
  ds->ndim = a->ndim;
  for (int i = 0; i < a->ndim; i++)
    ds->shape[i] = ds->reduced[i] ? 1 : a->shape[i];
  return true;
}

/* a as (kept dims..., product of the reduced dims): a new reference. */
static tc_tensor *merged_rows(tc_tensor *a, const dim_set *ds)
{
  int perm[TC_MAX_DIMS], k = 0, nd = 0;
  int64_t shape[TC_MAX_DIMS], row = 1;
  for (int i = 0; i < a->ndim; i++)
    if (!ds->reduced[i]) {
      perm[k++] = i;
      shape[nd++] = a->shape[i];
    }
  for (int i = 0; i < a->ndim; i++)
    if (ds->reduced[i]) {
      perm[k++] = i;
      row *= a->shape[i];
    }
  shape[nd++] = row;
  tc_tensor *p = tc_permute(a, a->ndim, perm);
  return then(p, tc_reshape(p, nd, shape));
}

static tc_tensor *reduce_dims(const char *fn, multi_kind kind, tc_tensor *a,
                              int ndims, const int *dims, double correction,
                              bool keepdim)
{
  if (kind == MD_SUM ? !tensor_arg_ok(fn, a) : !float_arg(fn, a))
    return NULL;
  dim_set ds;
  if (!dim_set_of(fn, a, ndims, dims, &ds))
    return NULL;
  tc_tensor *x = a->ndim ? merged_rows(a, &ds) : tc_retain(a);
  tc_tensor *r = NULL;
  switch (kind) {
  case MD_SUM: r = tc_sum(x, -1, false); break;
  case MD_MEAN: r = tc_mean(x, -1, false); break;
  case MD_VAR:
  case MD_STD:
    r = x ? variance(x, x->ndim - 1, correction, false) : NULL;
    if (kind == MD_STD)
      r = then(r, tc_sqrt(r));
    break;
  }
  tc_release(x);
  if (keepdim && a->ndim)
    r = then(r, tc_reshape(r, ds.ndim, ds.shape));
  return r;
}

tc_tensor *tc_sum_dims(tc_tensor *a, int ndims, const int *dims,
                       bool keepdim)
{
  return reduce_dims(__func__, MD_SUM, a, ndims, dims, 0, keepdim);
}

tc_tensor *tc_mean_dims(tc_tensor *a, int ndims, const int *dims,
                        bool keepdim)
{
  return reduce_dims(__func__, MD_MEAN, a, ndims, dims, 0, keepdim);
}

tc_tensor *tc_var_dims(tc_tensor *a, int ndims, const int *dims,
                       double correction, bool keepdim)
{
  return reduce_dims(__func__, MD_VAR, a, ndims, dims, correction, keepdim);
}

tc_tensor *tc_std_dims(tc_tensor *a, int ndims, const int *dims,
                       double correction, bool keepdim)
{
  return reduce_dims(__func__, MD_STD, a, ndims, dims, correction, keepdim);
}

/* -- Triangles ------------------------------------------------------------------
** The kernel IR has no element-index expression; the mask comes from two
** small index tensors instead (arange over the rows, a column, and over the
** columns), compared pointwise: col - row against k. They are tiny inputs,
** and the comparison and the fill fuse with the op's neighbours. */

static tc_tensor *triangle(const char *fn, tc_tensor *a, int64_t k,
                           bool lower)
{
  if (!tensor_arg_ok(fn, a))
    return NULL;
  if (a->ndim < 2) {
    tc_seterr(TC_E_SHAPE, "%s: needs a tensor of at least 2 dims (got %d)",
              fn, a->ndim);
    return NULL;
  }
  int64_t rows = a->shape[a->ndim - 2], cols = a->shape[a->ndim - 1];
  tc_tensor *row = tc_arange(TC_I64, 0, (double)rows, 1);
  row = then(row, tc_reshape(row, TC_SHAPE(rows, 1)));
  tc_tensor *col = tc_arange(TC_I64, 0, (double)cols, 1);
  tc_tensor *diag = tc_sub(col, row);         /* col - row, (rows, cols) */
  tc_release(col);
  tc_release(row);
  tc_tensor *drop = lower ? tc_gt_scalar(diag, (double)k)
                          : tc_lt_scalar(diag, (double)k);
  tc_release(diag);
  tc_tensor *out = tc_masked_fill(a, drop, 0);
  tc_release(drop);
  return out;
}

tc_tensor *tc_tril(tc_tensor *a, int64_t k)
{
  return triangle(__func__, a, k, true);
}

tc_tensor *tc_triu(tc_tensor *a, int64_t k)
{
  return triangle(__func__, a, k, false);
}
