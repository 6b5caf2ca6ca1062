/*
** derivatives.c -- derivatives.def expanded: one gradient function per
** differentiable op, the helpers its rows use, the inverse of views, and
** fitting each gradient to its input's shape and dtype. Everything here is
** ordinary tc ops called through the public API (grad mode is off), so a
** traced backward is recorded, fused and compiled like forward code.
*/
#include <math.h>
#include <string.h>

#include "autograd.h"

/* -- The table and its order check ------------------------------------------ */

/* Row k of derivatives.def must be op k of ops.def: a missing, extra or
** misplaced row is a compile error here. ORDER OP */
enum {
#define DERIV(op, sv, grads) DROW_##op,
#define NONDIFF(op) DROW_##op,
#define TWIN(op) DROW_##op,
#define VIEWOP(op) DROW_##op,
#include "../tensor/derivatives.def"
  DROW__MAX
};
#define ROW_AT(op) _Static_assert((int)DROW_##op == (int)TC_OP_##op, \
  "derivatives.def: the row for " #op " is not at its ops.def position");
#define DERIV(op, sv, grads) ROW_AT(op)
#define NONDIFF(op) ROW_AT(op)
#define TWIN(op) ROW_AT(op)
#define VIEWOP(op) ROW_AT(op)
#include "../tensor/derivatives.def"
_Static_assert((int)DROW__MAX == (int)TC_OP__MAX,
               "derivatives.def needs one row for every op of ops.def");

const ag_deriv_info ag_deriv[TC_OP__MAX] = {
#define DERIV(op, sv, grads) [TC_OP_##op] = { #op, DK_ROW, sv },
#define NONDIFF(op) [TC_OP_##op] = { #op, DK_NONDIFF, SV_NONE },
#define TWIN(op) [TC_OP_##op] = { #op, DK_TWIN, SV_NONE },
#define VIEWOP(op) [TC_OP_##op] = { #op, DK_VIEW, SV_NONE },
#include "../tensor/derivatives.def"
};

/* -- Helpers the rows use --------------------------------------------------- */

/* The name of the device g is on (a new handle there is g itself). */
static const char *device_of(const tc_tensor *g)
{
  return g && tensor_device_of(g) == TC_DEV_CUDA ? "cuda" : "cpu";
}

#define on_device_of ag_on_device_of

static tc_tensor *same(tc_tensor *g) { return tc_to(g, device_of(g)); }

static tc_tensor *zeros_like(tc_tensor *g)
{
  return on_device_of(g, tc_zeros(tc_dtype_of(g), g ? g->ndim : 0,
                                  g ? g->shape : NULL));
}

/* A 0-d zero of g's dtype (broadcasts anywhere). */
static tc_tensor *zero0(tc_tensor *g)
{
  return on_device_of(g, tc_zeros(tc_dtype_of(g), 0, NULL));
}

/* sign(a) in a's dtype: 1, -1, or 0 at 0 (torch.sgn). */
static tc_tensor *sign_of(tc_tensor *a)
{
  tc_dtype dt = tc_dtype_of(a);
  return tc_sub(tc_cast(tc_gt_scalar(a, 0), dt),
                tc_cast(tc_lt_scalar(a, 0), dt));
}

/* d/da of the tanh-form GELU 0.5 a (1 + tanh u), u = k (a + c a^3):
** 0.5 (1 + t) + 0.5 a (1 - t^2) k (1 + 3 c a^2), t = tanh u. */
static tc_tensor *gelu_slope(tc_tensor *a)
{
  const double k = 0.7978845608028654, c = 0.044715;
  tc_tensor *a2 = tc_mul(a, a);
  tc_tensor *t = tc_tanh(tc_mul_scalar(tc_add(a, tc_mul_scalar(tc_mul(a2, a),
                                                              c)), k));
  tc_tensor *left = tc_mul_scalar(tc_add_scalar(t, 1), 0.5);
  tc_tensor *du = tc_mul_scalar(tc_add_scalar(tc_mul_scalar(a2, 3 * c), 1), k);
  tc_tensor *right = tc_mul(tc_mul_scalar(a, 0.5),
                            tc_mul(tc_rsub_scalar(tc_mul(t, t), 1), du));
  return tc_add(left, right);
}

/* d/da a sigmoid(a) = s (1 + a (1 - s)), s = sigmoid(a). */
static tc_tensor *silu_slope(tc_tensor *a)
{
  tc_tensor *s = tc_sigmoid(a);
  return tc_mul(s, tc_add_scalar(tc_mul(a, tc_rsub_scalar(s, 1)), 1));
}

/* d/da erf(a) = 2/sqrt(pi) exp(-a^2). */
static tc_tensor *erf_slope(tc_tensor *a)
{
  return tc_mul_scalar(tc_exp(tc_neg(tc_mul(a, a))), 1.1283791670955126);
}

/* d/da a Phi(a) = Phi(a) + a phi(a): 0.5 (1 + erf(a / sqrt 2)) +
** a exp(-a^2 / 2) / sqrt(2 pi). */
static tc_tensor *gelu_erf_slope(tc_tensor *a)
{
  tc_tensor *cdf = tc_mul_scalar(tc_add_scalar(tc_erf(tc_mul_scalar(
                                   a, 0.70710678118654752)), 1), 0.5);
  tc_tensor *pdf = tc_mul_scalar(tc_exp(tc_mul_scalar(tc_mul(a, a), -0.5)),
                                 0.3989422804014327);
  return tc_add(cdf, tc_mul(a, pdf));
}

/* Zeros of input i's shape in g's dtype, for a scatter_add to add into:
** one zero expanded, so the scatter's copy of them only writes its result
** (a stored table of zeros would be written, then read and written). */
static tc_tensor *in_zeros(const ag_node *x, tc_tensor *g, int i)
{
  return tc_expand(zero0(g), x->in_ndim[i], x->in_shape[i]);
}

/* Input i's part of a concatenation's gradient: its slice along the dim. */
static tc_tensor *cat_part(const ag_node *x, tc_tensor *g, int i)
{
  int d = x->call.dim;
  int64_t off = 0;
  for (int j = 0; j < i; j++)
    off += x->in_shape[j][d];
  return tc_slice(g, d, off, off + x->in_shape[i][d], 1);
}

/* TAKE (a's slices along dim at indices b, b's dims replacing dim): g
** scatter-added back into zeros of a's shape, b flattened and broadcast
** over the other dims (a view: scatter_add reads it through its strides,
** and its check reads b's values once). */
static tc_tensor *take_grad(const ag_node *x, tc_tensor *g, tc_tensor *b)
{
  int d = x->call.dim, nd = x->in_ndim[0];
  const int64_t *as = x->in_shape[0];
  int64_t gs[TC_MAX_DIMS], is[TC_MAX_DIMS];
  for (int k = 0; k < nd; k++) {
    gs[k] = k == d ? tc_numel(b) : as[k];
    is[k] = k == d ? tc_numel(b) : 1;
  }
  tc_tensor *g2 = tc_reshape(g, nd, gs);
  tc_tensor *idx = tc_expand(tc_reshape(b, nd, is), nd, gs);
  return tc_scatter_add(in_zeros(x, g, 0), d, idx, g2);
}

/* MATMUL's gradient for b, a^T @ g. When b is one matrix and a has batch
** dims (x @ W, x [..., m, k]), they fold into the rows as torch does: one
** GEMM reshape(a, [-1, k])^T @ reshape(g, [-1, n]), each element one chain
** over every row, instead of a product per batch that the engine would
** then sum over the batch (a batch of results written, then reduced). */
static tc_tensor *matmul_grad_b(tc_tensor *a, tc_tensor *b, tc_tensor *g)
{
  int nd = tc_ndim(a);
  if (tc_ndim(b) == 2 && nd > 2 && tc_ndim(g) == nd) {
    int64_t k = tc_size(a, nd - 1), n = tc_size(g, nd - 1);
    return tc_matmul(tc_transpose(tc_reshape(a, TC_SHAPE(-1, k)), 0, 1),
                     tc_reshape(g, TC_SHAPE(-1, n)));
  }
  return tc_matmul(tc_transpose(a, -2, -1), g);
}

/* pow's exponent gradient is 0 where the base is 0 and the exponent >= 0. */
static tc_tensor *zero_base(tc_tensor *a, tc_tensor *b)
{
  return tc_where(tc_eq_scalar(a, 0), tc_ge_scalar(b, 0),
                  on_device_of(a, tc_zeros(TC_BOOL, 0, NULL)));
}

static tc_tensor *tie_half(tc_tensor *g, tc_tensor *a, tc_tensor *b)
{
  return tc_where(tc_eq(a, b), tc_mul_scalar(g, 0.5), g);
}

/* A reduction's gradient g back at every position of its input. */
static tc_tensor *unreduce(const ag_node *x, tc_tensor *g)
{
  int nd = x->in_ndim[0];
  if (x->call.op != TC_OP_SUM_ALL && !x->call.keepdim && nd > 0)
    g = tc_unsqueeze(g, x->call.dim);
  return tc_expand(g, nd, x->in_shape[0]);
}

static double reduced_size(const ag_node *x)
{
  return x->in_ndim[0] ? (double)x->in_shape[0][x->call.dim] : 1.0;
}

/* max/min over a dim: g shared by the positions that equal the result. */
static tc_tensor *extreme_share(const ag_node *x, tc_tensor *g, tc_tensor *a,
                                tc_tensor *y)
{
  tc_dtype dt = tc_dtype_of(a);
  tc_tensor *hit = tc_cast(tc_eq(a, unreduce(x, y)), dt);
  int d = x->in_ndim[0] ? x->call.dim : 0;
  tc_tensor *count = x->in_ndim[0] ? tc_sum(hit, d, true)
                     : on_device_of(a, tc_ones(dt, 0, NULL));
  return tc_mul(hit, tc_div(unreduce(x, g), count));
}

/* layer_norm's normalized input (x - mean) rstd and rstd, over the last
** dim, recomputed from x (cheaper to fuse again than to store). */
static tc_tensor *layer_norm_rstd(const ag_node *x, tc_tensor *a,
                                  tc_tensor **xc)
{
  *xc = tc_sub(a, tc_mean(a, -1, true));
  return tc_rsqrt(tc_add_scalar(tc_mean(tc_mul(*xc, *xc), -1, true),
                                x->call.s[0]));
}

static tc_tensor *layer_norm_xhat(const ag_node *x, tc_tensor *a)
{
  tc_tensor *xc, *rstd = layer_norm_rstd(x, a, &xc);
  return tc_mul(xc, rstd);
}

static tc_tensor *layer_norm_dx(const ag_node *x, tc_tensor *g, tc_tensor *a,
                                tc_tensor *gamma)
{
  tc_tensor *xc, *rstd = layer_norm_rstd(x, a, &xc);
  tc_tensor *xhat = tc_mul(xc, rstd);
  tc_tensor *gx = gamma ? tc_mul(g, gamma) : g;
  tc_tensor *inner = tc_sub(tc_sub(gx, tc_mean(gx, -1, true)),
                            tc_mul(xhat, tc_mean(tc_mul(gx, xhat), -1, true)));
  return tc_mul(rstd, inner);
}

/* -- The rows, expanded ----------------------------------------------------- */

typedef void (*grad_row)(const ag_node *x, tc_tensor *G, tc_tensor *const *sv,
                         tc_tensor **gin, const bool *need, bool *has);

#define GA(e) if (need[0]) { has[0] = true; gin[0] = (e); }
#define GB(e) if (need[1]) { has[1] = true; gin[1] = (e); }
#define GC(e) if (need[2]) { has[2] = true; gin[2] = (e); }
#define DERIV(op, sv_, grads)                                              \
  static void grad_##op(const ag_node *x, tc_tensor *G,                    \
                        tc_tensor *const *sv, tc_tensor **gin,             \
                        const bool *need, bool *has)                       \
  {                                                                        \
    tc_tensor *A = sv[0], *B = sv[1], *C = sv[2], *Y = sv[3];              \
    double S0 = x->call.s[0], S1 = x->call.s[1];                           \
    int DIM = x->call.dim;                                                 \
    (void)A; (void)B; (void)C; (void)Y; (void)S0; (void)S1; (void)DIM;     \
    (void)G; (void)gin; (void)need; (void)has;                             \
    grads                                                                  \
  }
#define NONDIFF(op)
#define TWIN(op)
#define VIEWOP(op)
#include "../tensor/derivatives.def"
#undef GA
#undef GB
#undef GC

static const grad_row rows[TC_OP__MAX] = {
#define DERIV(op, sv, grads) [TC_OP_##op] = grad_##op,
#define NONDIFF(op)
#define TWIN(op)
#define VIEWOP(op)
#include "../tensor/derivatives.def"
};

/* -- Views ------------------------------------------------------------------ */

/* Are the dims of size > 1, ordered by decreasing stride, a dense C-order
** layout from offset 0? Then the view visits each input element once and
** perm gets that order (size-1 dims last). */
static bool dense_order(int nd, const int64_t *sh, const int64_t *st,
                        int *perm)
{
  int n = 0;
  for (int d = 0; d < nd; d++)
    if (sh[d] > 1)
      perm[n++] = d;
  for (int i = 1; i < n; i++)   /* insertion sort, stable, stride desc */
    for (int j = i; j > 0 && st[perm[j - 1]] < st[perm[j]]; j--) {
      int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  int64_t want = 1;
  for (int i = n - 1; i >= 0; i--) {
    if (st[perm[i]] != want)
      return false;
    want *= sh[perm[i]];
  }
  for (int d = 0; d < nd; d++)
    if (sh[d] <= 1)
      perm[n++] = d;
  return true;
}

/* Is the view (of shape sh, broadcast dims summed) a box of its input:
** every dim kept, each a contiguous range [start[d], start[d] + sh[d])
** (slices with step 1: tc_slice, tc_chunk, tc_split, narrowing)? */
static bool box_of(const ag_node *x, const int64_t *sh, int64_t *start)
{
  const tensor_geom *r = &x->call.rel;
  int nd = x->in_ndim[0];
  if (r->ndim != nd || r->offset < 0)
    return false;
  int64_t contig[TC_MAX_DIMS];
  tensor_contiguous_strides(nd, x->in_shape[0], contig);
  for (int d = 0; d < nd; d++) {
    start[d] = r->offset / contig[d] % x->in_shape[0][d];
    if ((r->stride[d] != contig[d] && sh[d] != 1) || sh[d] < 1 ||
        start[d] + sh[d] > x->in_shape[0][d])
      return false;
  }
  return true;
}

/* A box view's gradient: g with zeros concatenated before and after it in
** every dim the view narrows. Traced like any op, so a chunk's gradient
** fuses into its consumers instead of being a fill and a write into a
** slice (which would end the region being recorded). */
static tc_tensor *pad_box(const ag_node *x, tc_tensor *g, const int64_t *sh,
                          const int64_t *start)
{
  int nd = x->in_ndim[0];
  tc_tensor *zero = g ? on_device_of(g, tc_zeros(x->in_dtype[0], 0, NULL))
                   : NULL;
  int64_t ps[TC_MAX_DIMS];
  memcpy(ps, sh, sizeof(int64_t) * (size_t)nd);
  for (int d = 0; zero && g && d < nd; d++) {
    int64_t full = x->in_shape[0][d], end = start[d] + sh[d];
    if (sh[d] == full)
      continue;
    tc_tensor *parts[3];
    int n = 0;
    if (start[d] > 0) {
      ps[d] = start[d];
      parts[n++] = tc_expand(zero, nd, ps);
    }
    parts[n++] = g;
    if (end < full) {
      ps[d] = full - end;
      parts[n++] = tc_expand(zero, nd, ps);
    }
    g = tc_cat(parts, n, d);
    ps[d] = full;   /* dims before d+1 are whole from here on */
  }
  return zero ? g : NULL;
}

/* The gradient of a view's input: the view's geometry relative to its
** input (eager_call.rel) run backwards. Broadcast dims are summed; a view
** that visits every element once (reshape, permute, transpose, squeeze)
** is permuted back and reshaped; any other (slices) is scattered into
** zeros. */
static tc_tensor *view_grad(const ag_node *x, tc_tensor *g)
{
  const tensor_geom *r = &x->call.rel;
  int nd = r->ndim;
  int64_t sh[TC_MAX_DIMS], numel = 1, in_numel = 1;
  for (int d = 0; d < nd; d++) {
    sh[d] = r->shape[d];
    if (r->stride[d] == 0 && sh[d] > 1) {
      g = tc_sum(g, d, true);
      sh[d] = 1;
    }
    numel *= sh[d];
  }
  for (int d = 0; d < x->in_ndim[0]; d++)
    in_numel *= x->in_shape[0][d];
  int perm[TC_MAX_DIMS];
  if (numel == in_numel && r->offset == 0 &&
      dense_order(nd, sh, r->stride, perm))
    return tc_reshape(tc_permute(g, nd, perm), x->in_ndim[0],
                      x->in_shape[0]);
  int64_t start[TC_MAX_DIMS];
  if (box_of(x, sh, start))
    return pad_box(x, g, sh, start);
  tc_tensor *z = on_device_of(g, tc_zeros(x->in_dtype[0], x->in_ndim[0],
                                          x->in_shape[0]));
  if (!z || !g)
    return NULL;
  eager_call c = { .op = TC_OP_VIEW, .fn = "tc_backward", .nin = 1,
                   .in = { z }, .dtype = x->in_dtype[0],
                   .cdtype = x->in_dtype[0], .ndim = nd };
  c.view.ndim = c.rel.ndim = nd;
  memcpy(c.view.shape, sh, sizeof(int64_t) * (size_t)nd);
  memcpy(c.view.stride, r->stride, sizeof(int64_t) * (size_t)nd);
  c.view.offset = r->offset;
  memcpy(c.shape, sh, sizeof(int64_t) * (size_t)nd);
  c.rel = c.view;
  tc_tensor *v = eager_dispatch(&c);
  int rc = v ? tc_copy_(v, g) : -1;
  tensor_unref(v);
  return rc == 0 ? z : NULL;
}

/* -- Fitting a gradient to its input ------------------------------------------ */

/* g summed over the dims its input broadcast, expanded over the dims it
** lacks, cast to the input's dtype. */
static tc_tensor *fit(tc_tensor *g, int nd, const int64_t *shape,
                      tc_dtype dt)
{
  while (g && g->ndim > nd)
    g = tc_sum(g, 0, false);
  int off = g ? nd - g->ndim : 0;
  for (int d = off; g && d < nd; d++)
    if (shape[d] == 1 && g->shape[d - off] != 1)
      g = tc_sum(g, d - off, true);
  bool same_shape = g && g->ndim == nd;
  for (int d = 0; same_shape && d < nd; d++)
    same_shape = g->shape[d] == shape[d];
  if (g && !same_shape)
    g = tc_expand(g, nd, shape);
  if (g && g->dtype != dt)
    g = tc_cast(g, dt);
  return g;
}

/* The row of op (an in-place op's is its twin's). */
static tc_op row_op(tc_op op)
{
  return ag_deriv[op].kind == DK_TWIN ? (tc_op)op_table[op].twin : op;
}

int ag_deriv_saves(tc_op op) { return ag_deriv[row_op(op)].saves; }

int ag_node_grads(const ag_node *n, tc_tensor *g, tc_tensor *gin[3])
{
  bool need[3], has[3] = { false, false, false };
  for (int i = 0; i < 3; i++) {
    gin[i] = NULL;
    need[i] = i < n->nin && (n->next[i].fn || n->next[i].leaf);
  }
  tc_op op = n->call.op;
  if (ag_deriv[op].kind == DK_VIEW) {
    has[0] = need[0];
    gin[0] = need[0] ? view_grad(n, g) : NULL;
  } else {
    rows[row_op(op)](n, g, n->saved, gin, need, has);
  }
  for (int i = 0; i < 3; i++) {
    if (has[i] && gin[i])
      gin[i] = fit(gin[i], n->in_ndim[i], n->in_shape[i], n->in_dtype[i]);
    if (has[i] && !gin[i])
      return -1;   /* the error of the op that failed is set */
  }
  return 0;
}
