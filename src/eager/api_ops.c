/*
** api_ops.c -- the public compute ops: validate at the call (so traced and
** eager modes raise the same errors at the same place), fill an eager_call,
** dispatch. Inputs are never modified by a failing op.
*/
#include <math.h>
#include <string.h>

#include "eager.h"

/* Every tensor the API hands out is tracked by the innermost open scope. */
static tc_tensor *handed_out(tc_tensor *t)
{
  tensor_scope_track(t);
  return t;
}

/* Is any argument NULL or a released handle? (error set) */
static bool any_bad(const char *fn, int n, tc_tensor *const *ts)
{
  for (int i = 0; i < n; i++)
    if (!tensor_arg_ok(fn, ts[i]))
      return true;
  return false;
}

static void call_init(eager_call *c, const char *fn, tc_op op, int nin,
                      tc_tensor *const *in)
{
  c->op = op;
  c->fn = fn;
  c->nin = nin;
  c->in[0] = c->in[1] = c->in[2] = NULL;
  for (int i = 0; i < nin; i++)
    c->in[i] = in[i];
  c->s[0] = c->s[1] = 0;
  c->dim = 0;
  c->keepdim = false;
  c->dst = NULL;
}

/* -- Pointwise --------------------------------------------------------------- */

static tc_tensor *pointwise(const char *fn, tc_op op, int nin,
                            tc_tensor *const *in, double s0, double s1)
{
  eager_init();
  if (any_bad(fn, nin, in))
    return NULL;
  eager_call c;
  call_init(&c, fn, op, nin, in);
  c.s[0] = s0;
  c.s[1] = s1;
  if (tensor_infer_pointwise(fn, op, nin, (const tc_tensor *const *)in, c.s,
                             &c.ndim, c.shape, &c.dtype, &c.cdtype) < 0)
    return NULL;
  return handed_out(eager_dispatch(&c));
}

#define UNARY(fname, OP) \
  tc_tensor *fname(tc_tensor *a) \
  { return pointwise(__func__, TC_OP_##OP, 1, &a, 0, 0); }
#define BINARY(fname, OP) \
  tc_tensor *fname(tc_tensor *a, tc_tensor *b) \
  { return pointwise(__func__, TC_OP_##OP, 2, (tc_tensor *[]){ a, b }, 0, 0); }
#define SCALAR(fname, OP) \
  tc_tensor *fname(tc_tensor *a, double s) \
  { return pointwise(__func__, TC_OP_##OP, 1, &a, s, 0); }

UNARY(tc_neg, NEG)
UNARY(tc_abs, ABS)
UNARY(tc_exp, EXP)
UNARY(tc_log, LOG)
UNARY(tc_sqrt, SQRT)
UNARY(tc_rsqrt, RSQRT)
UNARY(tc_sin, SIN)
UNARY(tc_cos, COS)
UNARY(tc_tanh, TANH)
UNARY(tc_sigmoid, SIGMOID)
UNARY(tc_relu, RELU)
UNARY(tc_gelu, GELU)
UNARY(tc_silu, SILU)
UNARY(tc_floor, FLOOR)
UNARY(tc_ceil, CEIL)
UNARY(tc_round, ROUND)
UNARY(tc_trunc, TRUNC)
UNARY(tc_expm1, EXPM1)
UNARY(tc_log1p, LOG1P)
UNARY(tc_erf, ERF)
UNARY(tc_softplus, SOFTPLUS)
UNARY(tc_gelu_erf, GELU_ERF)
BINARY(tc_add, ADD)
BINARY(tc_sub, SUB)
BINARY(tc_mul, MUL)
BINARY(tc_div, DIV)
BINARY(tc_pow, POW)
BINARY(tc_maximum, MAXIMUM)
BINARY(tc_minimum, MINIMUM)
BINARY(tc_eq, EQ)
BINARY(tc_ne, NE)
BINARY(tc_lt, LT)
BINARY(tc_le, LE)
BINARY(tc_gt, GT)
BINARY(tc_ge, GE)
SCALAR(tc_add_scalar, ADDS)
SCALAR(tc_sub_scalar, SUBS)
SCALAR(tc_mul_scalar, MULS)
SCALAR(tc_div_scalar, DIVS)
SCALAR(tc_pow_scalar, POWS)
SCALAR(tc_rsub_scalar, RSUBS)
SCALAR(tc_rdiv_scalar, RDIVS)
SCALAR(tc_eq_scalar, EQS)
SCALAR(tc_ne_scalar, NES)
SCALAR(tc_lt_scalar, LTS)
SCALAR(tc_le_scalar, LES)
SCALAR(tc_gt_scalar, GTS)
SCALAR(tc_ge_scalar, GES)

tc_tensor *tc_where(tc_tensor *cond, tc_tensor *a, tc_tensor *b)
{
  return pointwise(__func__, TC_OP_WHERE, 3, (tc_tensor *[]){ cond, a, b },
                   0, 0);
}

tc_tensor *tc_clamp(tc_tensor *a, double lo, double hi)
{
  return pointwise(__func__, TC_OP_CLAMP, 1, &a, lo, hi);
}

tc_tensor *tc_masked_fill(tc_tensor *a, tc_tensor *mask, double value)
{
  const char *fn = __func__;
  eager_init();
  tc_tensor *in[2] = { a, mask };
  if (any_bad(fn, 2, in))
    return NULL;
  if (mask->dtype != TC_BOOL) {
    tc_seterr(TC_E_DTYPE, "%s: the mask must be bool, got %s", fn,
              tc_dtype_name((tc_dtype)mask->dtype));
    return NULL;
  }
  static const double limit[TC_DTYPE__MAX] = {
    [TC_I32] = 0x1p31, [TC_I64] = 0x1p63,
  };
  if (!tensor_dtype_is_float((tc_dtype)a->dtype) && a->dtype != TC_BOOL &&
      !(value > -limit[a->dtype] - 1 && value < limit[a->dtype])) {
    tc_seterr(TC_E_ARG, "%s: value %g does not fit %s", fn, value,
              tc_dtype_name((tc_dtype)a->dtype));
    return NULL;
  }
  if (a->dtype == TC_BOOL && isnan(value)) {
    tc_seterr(TC_E_ARG, "%s: value nan does not fit bool", fn);
    return NULL;
  }
  eager_call c;
  call_init(&c, fn, TC_OP_MASKED_FILL, 2, in);
  c.s[0] = value;
  if (tensor_broadcast(fn, 2, (const tc_tensor *const *)in, &c.ndim,
                       c.shape) < 0)
    return NULL;
  c.dtype = (tc_dtype)a->dtype;
  c.cdtype = tensor_compute_of(c.dtype);
  return handed_out(eager_dispatch(&c));
}

tc_tensor *tc_cast(tc_tensor *a, tc_dtype dt)
{
  eager_init();
  if (any_bad(__func__, 1, &a))
    return NULL;
  if (!tensor_dtype_valid(dt)) {
    tc_seterr(TC_E_DTYPE, "%s: invalid dtype %d", __func__, (int)dt);
    return NULL;
  }
  eager_call c;
  call_init(&c, __func__, TC_OP_CAST, 1, &a);
  c.ndim = a->ndim;
  memcpy(c.shape, a->shape, sizeof(int64_t) * a->ndim);
  c.dtype = c.cdtype = dt;
  return handed_out(eager_dispatch(&c));
}

/* -- In-place ---------------------------------------------------------------- */

/* bool < integer < float: a result may be written into a dst of its own
** category or a higher one (PyTorch's can_cast). */
static int category(tc_dtype dt)
{
  return dt == TC_BOOL ? 0 : tensor_dtype_is_float(dt) ? 2 : 1;
}

static bool has_broadcast_dims(const tc_tensor *t)
{
  for (int d = 0; d < t->ndim; d++)
    if (t->stride[d] == 0 && t->shape[d] > 1)
      return true;
  return false;
}

static int inplace(const char *fn, tc_op op, tc_tensor *dst, tc_tensor *src,
                   double s)
{
  eager_init();
  int nin = op_table[op].nin;
  tc_tensor *in[2] = { dst, src };
  if (any_bad(fn, nin, in))
    return -1;
  if (has_broadcast_dims(dst))
    return tc_seterr(TC_E_ARG, "%s: the destination has expanded "
                     "(stride 0) dims; several elements share one memory "
                     "location", fn), -1;
  eager_call c;
  call_init(&c, fn, op, nin, in);
  c.s[0] = s;
  c.dst = dst;
  if (tensor_broadcast(fn, nin, (const tc_tensor *const *)in, &c.ndim,
                       c.shape) < 0)
    return -1;
  bool same = c.ndim == dst->ndim;
  for (int d = 0; same && d < c.ndim; d++)
    same = c.shape[d] == dst->shape[d];
  if (!same)
    return tc_seterr(TC_E_SHAPE, "%s: the source does not broadcast to the "
                     "destination's shape (it would grow the destination)",
                     fn), -1;
  tc_dtype dd = (tc_dtype)dst->dtype;
  tc_op twin = (tc_op)op_table[op].twin;
  c.dtype = dd;
  if (twin == TC_OP_CAST || twin == TC_OP_FILL) {
    c.cdtype = dd;
  } else {
    tc_dtype rt = tensor_result_dtype(fn, twin, nin,
                                      (const tc_tensor *const *)in, c.s);
    if (rt == TC_DTYPE__MAX)
      return -1;
    if (category(rt) > category(dd))
      return tc_seterr(TC_E_DTYPE, "%s: result dtype %s cannot be cast to "
                       "the destination dtype %s", fn, tc_dtype_name(rt),
                       tc_dtype_name(dd)), -1;
    c.cdtype = tensor_compute_dtype(twin, nin, (const tc_tensor *const *)in,
                                    c.s, rt);
  }
  return eager_dispatch(&c) ? 0 : -1;
}

int tc_copy_(tc_tensor *d, tc_tensor *s) { return inplace(__func__, TC_OP_COPY_, d, s, 0); }
int tc_add_(tc_tensor *d, tc_tensor *s) { return inplace(__func__, TC_OP_ADD_, d, s, 0); }
int tc_sub_(tc_tensor *d, tc_tensor *s) { return inplace(__func__, TC_OP_SUB_, d, s, 0); }
int tc_mul_(tc_tensor *d, tc_tensor *s) { return inplace(__func__, TC_OP_MUL_, d, s, 0); }
int tc_div_(tc_tensor *d, tc_tensor *s) { return inplace(__func__, TC_OP_DIV_, d, s, 0); }
int tc_add_scalar_(tc_tensor *d, double s) { return inplace(__func__, TC_OP_ADDS_, d, NULL, s); }
int tc_sub_scalar_(tc_tensor *d, double s) { return inplace(__func__, TC_OP_SUBS_, d, NULL, s); }
int tc_mul_scalar_(tc_tensor *d, double s) { return inplace(__func__, TC_OP_MULS_, d, NULL, s); }
int tc_div_scalar_(tc_tensor *d, double s) { return inplace(__func__, TC_OP_DIVS_, d, NULL, s); }
int tc_fill_(tc_tensor *d, double v) { return inplace(__func__, TC_OP_FILL_, d, NULL, v); }

/* -- Reductions -------------------------------------------------------------- */

/* The checks and call of an op over one dim of a: false with the error set
** when they fail. */
static bool dim_call(eager_call *c, const char *fn, tc_op op, tc_tensor *a,
                     int dim)
{
  eager_init();
  if (any_bad(fn, 1, &a))
    return false;
  int d = tensor_wrap_dim(fn, dim, a->ndim);
  if (d < 0)
    return false;
  call_init(c, fn, op, 1, &a);
  c->dim = d;
  c->dtype = tensor_result_dtype(fn, op, 1, (const tc_tensor *const *)&a,
                                 NULL);
  c->cdtype = tensor_compute_of(c->dtype);
  return c->dtype != TC_DTYPE__MAX;
}

static tc_tensor *reduction(const char *fn, tc_op op, tc_tensor *a, int dim,
                            bool keepdim)
{
  eager_call c;
  if (!dim_call(&c, fn, op, a, dim))
    return NULL;
  int d = c.dim;
  c.keepdim = keepdim;
  if (op == TC_OP_MEAN && !tensor_dtype_is_float((tc_dtype)a->dtype)) {
    tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s (mean needs a "
              "floating-point tensor; cast it first)", fn,
              tc_dtype_name((tc_dtype)a->dtype));
    return NULL;
  }
  int64_t n = a->ndim ? a->shape[d] : 1;
  if (n == 0 && (op == TC_OP_MAX || op == TC_OP_MIN || op == TC_OP_ARGMAX ||
                 op == TC_OP_ARGMIN)) {
    tc_seterr(TC_E_SHAPE, "%s: cannot reduce dim %d of size 0 (no identity)",
              fn, dim);
    return NULL;
  }
  c.ndim = 0;
  for (int i = 0; i < a->ndim; i++) {
    if (i != d)
      c.shape[c.ndim++] = a->shape[i];
    else if (keepdim)
      c.shape[c.ndim++] = 1;
  }
  return handed_out(eager_dispatch(&c));
}

tc_tensor *tc_sum(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_SUM, a, dim, keepdim);
}
tc_tensor *tc_mean(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_MEAN, a, dim, keepdim);
}
tc_tensor *tc_max(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_MAX, a, dim, keepdim);
}
tc_tensor *tc_min(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_MIN, a, dim, keepdim);
}
tc_tensor *tc_argmax(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_ARGMAX, a, dim, keepdim);
}
tc_tensor *tc_argmin(tc_tensor *a, int dim, bool keepdim)
{
  return reduction(__func__, TC_OP_ARGMIN, a, dim, keepdim);
}

tc_tensor *tc_cumsum(tc_tensor *a, int dim)
{
  eager_call c;
  if (!dim_call(&c, __func__, TC_OP_CUMSUM, a, dim))
    return NULL;
  c.ndim = a->ndim;
  for (int i = 0; i < a->ndim; i++)
    c.shape[i] = a->shape[i];
  return handed_out(eager_dispatch(&c));
}

tc_tensor *tc_sum_all(tc_tensor *a)
{
  eager_init();
  if (any_bad(__func__, 1, &a))
    return NULL;
  eager_call c;
  call_init(&c, __func__, TC_OP_SUM_ALL, 1, &a);
  c.dtype = tensor_result_dtype(__func__, TC_OP_SUM_ALL, 1,
                                (const tc_tensor *const *)&a, NULL);
  c.cdtype = tensor_compute_of(c.dtype);
  c.ndim = 0;
  return handed_out(eager_dispatch(&c));
}

/* -- Composites -------------------------------------------------------------- */

static tc_tensor *softmax_like(const char *fn, tc_op op, tc_tensor *a,
                               int dim)
{
  eager_call c;
  if (!dim_call(&c, fn, op, a, dim))
    return NULL;
  c.ndim = a->ndim;
  memcpy(c.shape, a->shape, sizeof(int64_t) * a->ndim);
  return handed_out(eager_dispatch(&c));
}

tc_tensor *tc_softmax(tc_tensor *a, int dim)
{
  return softmax_like(__func__, TC_OP_SOFTMAX, a, dim);
}

tc_tensor *tc_log_softmax(tc_tensor *a, int dim)
{
  return softmax_like(__func__, TC_OP_LOG_SOFTMAX, a, dim);
}

tc_tensor *tc_layer_norm(tc_tensor *x, tc_tensor *gamma, tc_tensor *beta,
                         double eps)
{
  const char *fn = __func__;
  eager_init();
  if (any_bad(fn, 1, &x))
    return NULL;
  if (x->ndim < 1) {
    tc_seterr(TC_E_SHAPE, "%s: x must have at least 1 dim", fn);
    return NULL;
  }
  int64_t n = x->shape[x->ndim - 1];
  tc_tensor *gb[2] = { gamma, beta };
  for (int i = 0; i < 2; i++)
    if (gb[i] && !tensor_arg_ok(fn, gb[i]))
      return NULL;
  for (int i = 0; i < 2; i++)
    if (gb[i] && (gb[i]->ndim != 1 || gb[i]->shape[0] != n)) {
      tc_seterr(TC_E_SHAPE, "%s: %s must be 1-D of size %lld (the last dim "
                "of x)", fn, i ? "beta" : "gamma", (long long)n);
      return NULL;
    }
  if (!(eps >= 0) || isinf(eps)) {
    tc_seterr(TC_E_ARG, "%s: eps must be finite and >= 0", fn);
    return NULL;
  }
  tc_tensor *all[3] = { x, gamma, beta };
  const tc_tensor *dts[3];
  int k = 0;
  for (int i = 0; i < 3; i++)
    if (all[i])
      dts[k++] = all[i];
  eager_call c;
  call_init(&c, fn, TC_OP_LAYER_NORM, 3, all);
  c.s[0] = eps;
  c.dim = x->ndim - 1;
  c.dtype = tensor_result_dtype(fn, TC_OP_LAYER_NORM, k, dts, c.s);
  c.cdtype = tensor_compute_of(c.dtype);
  c.ndim = x->ndim;
  memcpy(c.shape, x->shape, sizeof(int64_t) * x->ndim);
  return handed_out(eager_dispatch(&c));   /* absent gamma/beta are NULL */
}

/* -- Matmul ------------------------------------------------------------------ */

/* The batch dims of a and b (all but the last two) broadcast into c's
** leading dims; false with the error set when they do not. */
static bool matmul_batch(const char *fn, const tc_tensor *a,
                         const tc_tensor *b, eager_call *c)
{
  int na = a->ndim - 2, nb = b->ndim - 2, n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int ia = na - n + i, ib = nb - n + i;
    int64_t x = ia >= 0 ? a->shape[ia] : 1, y = ib >= 0 ? b->shape[ib] : 1;
    if (x != y && x != 1 && y != 1) {
      tc_seterr(TC_E_SHAPE, "%s: batch sizes %lld and %lld do not broadcast "
                "(batch dim %d)", fn, (long long)x, (long long)y, i);
      return false;
    }
    c->shape[i] = x == 1 ? y : x;   /* a batch of 0 stays 0 */
  }
  c->ndim = n;
  return true;
}

/* MATMUL of operands of at least 2 dims: [..., m, k] @ [..., k, n]. */
static tc_tensor *matmul_nd(const char *fn, tc_tensor *a, tc_tensor *b)
{
  int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
  int64_t k2 = b->shape[b->ndim - 2], n = b->shape[b->ndim - 1];
  if (k != k2) {
    tc_seterr(TC_E_SHAPE, "%s: inner sizes do not match: a is [.., %lld, "
              "%lld] and b is [.., %lld, %lld]", fn, (long long)m,
              (long long)k, (long long)k2, (long long)n);
    return NULL;
  }
  tc_dtype dt = tc_promote((tc_dtype)a->dtype, (tc_dtype)b->dtype);
  if (!tensor_dtype_is_float(dt)) {
    tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s (matmul needs a "
              "float dtype)", fn, tc_dtype_name(dt));
    return NULL;
  }
  eager_call c;
  call_init(&c, fn, TC_OP_MATMUL, 2, (tc_tensor *[]){ a, b });
  c.dtype = dt;
  c.cdtype = tensor_compute_of(dt);
  if (!matmul_batch(fn, a, b, &c))
    return NULL;
  c.shape[c.ndim++] = m;
  c.shape[c.ndim++] = n;
  return eager_dispatch(&c);
}

/* torch.matmul: a 1-D a is a row [1, k], a 1-D b a column [k, 1], and
** that dim is removed from the result; batch dims broadcast. */
tc_tensor *tc_matmul(tc_tensor *a, tc_tensor *b)
{
  const char *fn = __func__;
  eager_init();
  tc_tensor *in[2] = { a, b };
  if (any_bad(fn, 2, in))
    return NULL;
  if (a->ndim < 1 || b->ndim < 1) {
    tc_seterr(TC_E_SHAPE, "%s: operands must have at least 1 dim, got %d-D "
              "and %d-D", fn, a->ndim, b->ndim);
    return NULL;
  }
  if (a->ndim > 1 && b->ndim > 1)
    return handed_out(matmul_nd(fn, a, b));
  tc_tensor *a2 = a->ndim == 1 ? tc_unsqueeze(a, 0) : tc_retain(a);
  tc_tensor *b2 = b->ndim == 1 ? tc_unsqueeze(b, 1) : tc_retain(b);
  tc_tensor *r = a2 && b2 ? matmul_nd(fn, a2, b2) : NULL;
  tc_release(a2);
  tc_release(b2);
  if (!r)
    return NULL;
  int64_t shape[TC_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < r->ndim; d++)
    if (!((a->ndim == 1 && d == r->ndim - 2) ||
          (b->ndim == 1 && d == r->ndim - 1)))
      shape[nd++] = r->shape[d];
  tc_tensor *v = tc_reshape(r, nd, shape);   /* a view: r is contiguous */
  tensor_unref(r);
  return v;
}
