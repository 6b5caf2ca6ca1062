/*
** tests/api/test_autograd.c -- reverse-mode gradients through tc.h.
**
** Every differentiable op is checked against central finite differences in
** f64 (an independent reference: only forward values are used), on shapes
** with broadcasting, keepdim reductions, views and batched matmul; then
** accumulation, no-grad mode, detach, each error, and SGD / AdamW steps
** against a double-precision transcription of torch.optim's rules. Runs
** eagerly and traced (api-traced); the last test trains in both modes in
** one process and compares the results bit for bit.
*/
#include "testutil.h"

/* -- Gradcheck ---------------------------------------------------------------- */

enum { ANY, POS, AWAY };   /* input domains: any, (0.5, 2), |x| in (0.3, 2) */

typedef tc_tensor *(*fwd_fn)(tc_tensor **x);

typedef struct {
  const char *name;
  fwd_fn f;
  int nin;
  int ndim[3];
  int64_t shape[3][4];
  int domain[3];
  int nograd;   /* bit i: input i reaches the result only through
                   comparisons, so it gets no gradient */
} gcase;

static double *random_values(int64_t n, int domain, uint64_t seed)
{
  tu_rng r = {seed * 1000003u + 11u};
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) {
    double u = tu_unif(&r, -2, 2);
    if (domain == POS)
      u = tu_unif(&r, 0.5, 2);
    else if (domain == AWAY)
      u = (u < 0 ? -1 : 1) * (0.3 + fabs(u) * 0.85);
    v[i] = u;
  }
  return v;
}

/* L = sum(f(x) * w), w fixed weights of f's result shape (so every
** element's gradient differs). Grad mode as the caller set it. */
static tc_tensor *objective(const gcase *c, tc_tensor **x, tc_tensor **w)
{
  size_t mark = tc_scope_begin();
  tc_tensor *y = TU_NN(c->f(x));
  if (!*w) {
    int64_t n = tc_numel(y);
    double *v = random_values(n, ANY, 99);
    int64_t shape[TC_MAX_DIMS];
    for (int d = 0; d < tc_ndim(y); d++) shape[d] = tc_size(y, d);
    *w = tc_keep(tu_from(TC_F64, tc_ndim(y), shape, v));
    free(v);
  }
  tc_tensor *l = tc_keep(TU_NN(tc_sum_all(tc_mul(tc_cast(y, TC_F64), *w))));
  tc_scope_end(mark);
  return l;
}

static double value_at(const gcase *c, double **vals, tc_tensor *w)
{
  bool was = tc_set_grad_enabled(false);
  tc_tensor *x[3];
  for (int i = 0; i < c->nin; i++)
    x[i] = tu_from(TC_F64, c->ndim[i], c->shape[i], vals[i]);
  tc_tensor *l = objective(c, x, &w);
  double v = tu_item(l);
  tc_release(l);
  for (int i = 0; i < c->nin; i++) tc_release(x[i]);
  tc_set_grad_enabled(was);
  return v;
}

static void gradcheck(const gcase *c)
{
  double *vals[3];
  tc_tensor *x[3], *w = NULL;
  for (int i = 0; i < c->nin; i++) {
    vals[i] = random_values(tu_numel(c->ndim[i], c->shape[i]), c->domain[i],
                            (uint64_t)i + 1);
    x[i] = tu_from(TC_F64, c->ndim[i], c->shape[i], vals[i]);
    TU_OK(tc_set_requires_grad(x[i], true));
  }
  tc_tensor *l = objective(c, x, &w);
  assert_true(tc_requires_grad(l));
  TU_OK(tc_backward(l));
  const double h = 1e-6;
  for (int i = 0; i < c->nin; i++) {
    int64_t n = tu_numel(c->ndim[i], c->shape[i]);
    if (c->nograd & (1 << i)) {
      assert_null(tc_grad(x[i]));
      tc_clear_error();
      continue;
    }
    tc_tensor *g = tc_grad(x[i]);
    if (!g) fail_msg("%s: input %d: %s", c->name, i, tc_last_error());
    TU_SHAPE_IS(g, c->ndim[i], c->shape[i]);
    assert_int_equal(tc_dtype_of(g), TC_F64);
    double *got = tu_read(g);
    for (int64_t j = 0; j < n; j++) {
      double keep = vals[i][j];
      vals[i][j] = keep + h;
      double up = value_at(c, vals, w);
      vals[i][j] = keep - h;
      double down = value_at(c, vals, w);
      vals[i][j] = keep;
      double want = (up - down) / (2 * h);
      if (!(fabs(got[j] - want) <= 1e-5 + 1e-5 * fabs(want)))
        fail_msg("%s: d/dx%d[%lld] = %.10g, finite differences %.10g",
                 c->name, i, (long long)j, got[j], want);
    }
    free(got);
    tc_release(g);
  }
  tc_release(l);
  tc_release(w);
  for (int i = 0; i < c->nin; i++) {
    tc_release(x[i]);
    free(vals[i]);
  }
}

/* The forward functions: each one op (or a short chain) under test. */
#define F1(name, expr) \
  static tc_tensor *f_##name(tc_tensor **x) { (void)x; return (expr); }
F1(neg, tc_neg(x[0]))
F1(abs, tc_abs(x[0]))
F1(exp, tc_exp(x[0]))
F1(log, tc_log(x[0]))
F1(sqrt, tc_sqrt(x[0]))
F1(rsqrt, tc_rsqrt(x[0]))
F1(sin, tc_sin(x[0]))
F1(cos, tc_cos(x[0]))
F1(tanh, tc_tanh(x[0]))
F1(sigmoid, tc_sigmoid(x[0]))
F1(relu, tc_relu(x[0]))
F1(gelu, tc_gelu(x[0]))
F1(silu, tc_silu(x[0]))
F1(floor, tc_floor(tc_mul_scalar(x[0], 3.3)))
F1(ceil, tc_ceil(tc_mul_scalar(x[0], 3.3)))
F1(round, tc_round(tc_mul_scalar(x[0], 3.3)))
F1(trunc, tc_trunc(tc_mul_scalar(x[0], 3.3)))
F1(cast, tc_mul(tc_cast(x[0], TC_F64), x[0]))
F1(add, tc_add(x[0], x[1]))
F1(sub, tc_sub(x[0], x[1]))
F1(mul, tc_mul(x[0], x[1]))
F1(div, tc_div(x[0], x[1]))
F1(pow, tc_pow(x[0], x[1]))
F1(maximum, tc_maximum(x[0], x[1]))
F1(minimum, tc_minimum(x[0], x[1]))
F1(where, tc_where(tc_gt_scalar(x[0], 0), x[1], x[2]))
F1(masked_fill, tc_masked_fill(x[0], tc_lt_scalar(x[1], 0), 7))
F1(adds, tc_add_scalar(x[0], 1.5))
F1(subs, tc_sub_scalar(x[0], 1.5))
F1(muls, tc_mul_scalar(x[0], -2.5))
F1(divs, tc_div_scalar(x[0], 4))
F1(pows, tc_pow_scalar(x[0], 2.5))
F1(rsubs, tc_rsub_scalar(x[0], 3))
F1(rdivs, tc_rdiv_scalar(x[0], 3))
F1(clamp, tc_clamp(x[0], -1, 0.8))
F1(sum, tc_sum(x[0], 1, false))
F1(sum_keep, tc_sum(x[0], -1, true))
F1(mean, tc_mean(x[0], 0, false))
F1(mean_keep, tc_mean(x[0], 1, true))
F1(max, tc_max(x[0], 1, false))
F1(min_keep, tc_min(x[0], 0, true))
F1(sum_all, tc_sum_all(x[0]))
F1(softmax, tc_softmax(x[0], 1))
F1(log_softmax, tc_log_softmax(x[0], -1))
F1(layer_norm, tc_layer_norm(x[0], x[1], x[2], 1e-5))
F1(layer_norm_plain, tc_layer_norm(x[0], NULL, NULL, 1e-5))
F1(matmul, tc_matmul(x[0], x[1]))
F1(contiguous, tc_contiguous(tc_transpose(x[0], 0, 1)))
F1(transpose, tc_mul(tc_transpose(x[0], 0, 1), x[1]))
F1(permute, tc_permute(x[0], 3, (const int[]){2, 0, 1}))
F1(reshape, tc_reshape(x[0], TC_SHAPE(3, 4)))
F1(reshape_copy, tc_reshape(tc_transpose(x[0], 0, 1), TC_SHAPE(12)))
F1(slice, tc_slice(x[0], 1, 1, 6, 2))
F1(slice_of_t, tc_slice(tc_transpose(x[0], 0, 1), 0, 0, 5, 3))
/* Step-1 slices are padded back with zeros (box views): in the middle of a
** dim, in two dims at once, of a transposed input, and a single row. */
F1(box_mid, tc_slice(x[0], 1, 2, 5, 1))
F1(box_2d, tc_slice(tc_slice(x[0], 0, 1, 3, 1), 2, 1, 3, 1))
F1(box_of_t, tc_slice(tc_transpose(x[0], 0, 1), 0, 3, 7, 1))
F1(box_row, tc_slice(x[0], 0, 1, 2, 1))
F1(expand, tc_mul(tc_expand(x[0], TC_SHAPE(2, 3, 4)), x[1]))
F1(unsqueeze, tc_unsqueeze(x[0], 1))
F1(squeeze, tc_squeeze(x[0], 1))
F1(mse, tc_mse_loss(x[0], x[1]))
F1(chain, tc_tanh(tc_add(tc_matmul(x[0], x[1]), x[2])))
F1(expm1, tc_expm1(x[0]))
F1(log1p, tc_log1p(x[0]))
F1(erf, tc_erf(x[0]))
F1(softplus, tc_softplus(tc_mul_scalar(x[0], 12)))   /* both sides of 20 */
F1(gelu_erf, tc_gelu_erf(x[0]))
F1(cumsum, tc_cumsum(x[0], 1))
F1(var, tc_var(x[0], 1, 1, true))
F1(std, tc_std(x[0], 0, 0, false))
F1(sum_dims, tc_sum_dims(x[0], 2, (const int[]){0, 2}, false))
F1(tril, tc_tril(x[0], 0))
F1(cat2, tc_cat((tc_tensor *[]){x[0], x[1]}, 2, 1))
F1(cat3, tc_cat((tc_tensor *[]){x[0], x[1], x[2]}, 3, 0))
F1(stack, tc_stack((tc_tensor *[]){x[0], x[1]}, 2, 1))
#define IDX(...) tc_from_data(TC_I64, TC_SHAPE(sizeof((int64_t[]){__VA_ARGS__}) \
  / 8), (int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}))
F1(index_select, tc_index_select(x[0], 1, IDX(3, 0, 3, 1)))
F1(embedding, tc_embedding(x[0], tc_reshape(IDX(2, 0, 2, 4, 1, 2), TC_SHAPE(2, 3))))
F1(gather, tc_gather(x[0], 1, tc_reshape(IDX(0, 2, 2, 1, 0, 0), TC_SHAPE(3, 2))))
F1(scatter_add, tc_scatter_add(x[0], 1, tc_reshape(IDX(0, 2, 2, 1, 0, 0),
                                                  TC_SHAPE(3, 2)), x[1]))

static tc_tensor *f_split(tc_tensor **x) {
  tc_tensor *p[3];
  assert_int_equal(tc_chunk(x[0], 3, 1, p), 3);
  tc_tensor *r = tc_add(tc_mul(p[0], p[2]), p[1]);
  for (int i = 0; i < 3; i++) tc_release(p[i]);
  return r;
}

static tc_tensor *f_cross_entropy(tc_tensor **x) {
  tc_tensor *t = tc_from_data(TC_I64, TC_SHAPE(4), (int64_t[]){2, 0, 1, 2},
                              4 * sizeof(int64_t));
  tc_tensor *l = tc_cross_entropy(x[0], t);
  tc_release(t);
  return l;
}

/* In-place ops on a non-leaf (the result of a copy of x[0]). */
#define FINPLACE(name, call)                                  \
  static tc_tensor *f_##name(tc_tensor **x) {                 \
    tc_tensor *t = TU_NN(tc_mul_scalar(x[0], 1.5));           \
    TU_OK(call);                                              \
    return t;                                                 \
  }
FINPLACE(add_, tc_add_(t, x[1]))
FINPLACE(sub_, tc_sub_(t, x[1]))
FINPLACE(mul_, tc_mul_(t, x[1]))
FINPLACE(div_, tc_div_(t, x[1]))
FINPLACE(copy_, tc_copy_(t, x[1]))
FINPLACE(adds_, tc_add_scalar_(t, 2))
FINPLACE(subs_, tc_sub_scalar_(t, 2))
FINPLACE(muls_, tc_mul_scalar_(t, -3))
FINPLACE(divs_, tc_div_scalar_(t, 5))
FINPLACE(fill_, tc_fill_(t, 2))
/* An in-place write on a value that does not require grad, from one that
** does: the destination becomes part of the graph. */
static tc_tensor *f_into_plain(tc_tensor **x) {
  tc_tensor *t = TU_NN(tc_ones(TC_F64, TC_SHAPE(3, 4)));
  TU_OK(tc_mul_(t, x[0]));
  TU_OK(tc_add_(t, x[0]));
  return t;
}

#define C1(nm, dom, nd, ...) \
  {#nm, f_##nm, 1, {nd}, {{__VA_ARGS__}}, {dom}, 0}
#define C2(nm, d0, d1, nd0, s0, nd1, s1) \
  {#nm, f_##nm, 2, {nd0, nd1}, {s0, s1}, {d0, d1}, 0}
#define C3(nm, d0, d1, d2, nd0, s0, nd1, s1, nd2, s2) \
  {#nm, f_##nm, 3, {nd0, nd1, nd2}, {s0, s1, s2}, {d0, d1, d2}, 0}
#define SH(...) {__VA_ARGS__}

static const gcase cases[] = {
  C1(neg, ANY, 2, 3, 4),
  C1(abs, AWAY, 2, 3, 4),
  C1(exp, ANY, 2, 3, 4),
  C1(log, POS, 2, 3, 4),
  C1(sqrt, POS, 2, 3, 4),
  C1(rsqrt, POS, 2, 3, 4),
  C1(sin, ANY, 2, 3, 4),
  C1(cos, ANY, 2, 3, 4),
  C1(tanh, ANY, 2, 3, 4),
  C1(sigmoid, ANY, 2, 3, 4),
  C1(relu, AWAY, 2, 3, 4),
  C1(gelu, ANY, 2, 3, 4),
  C1(silu, ANY, 2, 3, 4),
  C1(floor, AWAY, 1, 5),
  C1(ceil, AWAY, 1, 5),
  C1(round, AWAY, 1, 5),
  C1(trunc, AWAY, 1, 5),
  C1(cast, ANY, 2, 3, 4),
  C2(add, ANY, ANY, 2, SH(3, 4), 1, SH(4)),
  C2(sub, ANY, ANY, 2, SH(3, 1), 2, SH(1, 4)),
  C2(mul, ANY, ANY, 3, SH(2, 3, 4), 2, SH(3, 1)),
  C2(div, ANY, AWAY, 2, SH(3, 4), 2, SH(3, 4)),
  C2(pow, POS, ANY, 2, SH(3, 4), 1, SH(4)),
  C2(maximum, ANY, ANY, 2, SH(3, 4), 2, SH(1, 4)),
  C2(minimum, ANY, ANY, 2, SH(3, 4), 0, SH(0)),
  {"where", f_where, 3, {2, 1, 2}, {SH(3, 4), SH(4), SH(3, 1)},
   {AWAY, ANY, ANY}, 1},
  {"masked_fill", f_masked_fill, 2, {2, 1}, {SH(3, 4), SH(4)}, {ANY, AWAY},
   2},
  C1(adds, ANY, 2, 3, 4),
  C1(subs, ANY, 2, 3, 4),
  C1(muls, ANY, 2, 3, 4),
  C1(divs, ANY, 2, 3, 4),
  C1(pows, POS, 2, 3, 4),
  C1(rsubs, ANY, 2, 3, 4),
  C1(rdivs, AWAY, 2, 3, 4),
  C1(clamp, AWAY, 2, 3, 4),
  C1(sum, ANY, 3, 2, 3, 4),
  C1(sum_keep, ANY, 2, 3, 4),
  C1(mean, ANY, 2, 3, 4),
  C1(mean_keep, ANY, 3, 2, 3, 4),
  C1(max, ANY, 2, 3, 5),
  C1(min_keep, ANY, 2, 3, 5),
  C1(sum_all, ANY, 3, 2, 3, 4),
  C1(softmax, ANY, 2, 3, 5),
  C1(log_softmax, ANY, 2, 3, 5),
  C3(layer_norm, ANY, ANY, ANY, 2, SH(3, 5), 1, SH(5), 1, SH(5)),
  C1(layer_norm_plain, ANY, 3, 2, 2, 6),
  C2(matmul, ANY, ANY, 2, SH(3, 4), 2, SH(4, 5)),
  {"matmul_batched", f_matmul, 2, {3, 3}, {SH(2, 3, 4), SH(2, 4, 2)},
   {ANY, ANY}, 0},
  {"matmul_bcast", f_matmul, 2, {2, 3}, {SH(3, 4), SH(2, 4, 2)}, {ANY, ANY},
   0},
  {"matmul_bcast1", f_matmul, 2, {3, 3}, {SH(2, 3, 4), SH(1, 4, 2)},
   {ANY, ANY}, 0},
  C1(contiguous, ANY, 2, 3, 4),
  C2(transpose, ANY, ANY, 2, SH(3, 4), 2, SH(4, 3)),
  C1(permute, ANY, 3, 2, 3, 4),
  C1(reshape, ANY, 3, 2, 3, 2),
  C1(reshape_copy, ANY, 2, 3, 4),
  C1(slice, ANY, 2, 3, 7),
  C1(slice_of_t, ANY, 2, 3, 7),
  C1(box_mid, ANY, 2, 3, 7),
  C1(box_2d, ANY, 3, 4, 3, 4),
  C1(box_of_t, ANY, 2, 3, 8),
  C1(box_row, ANY, 2, 3, 7),
  C2(expand, ANY, ANY, 2, SH(3, 1), 3, SH(2, 3, 4)),
  C1(unsqueeze, ANY, 2, 3, 4),
  C1(squeeze, ANY, 3, 3, 1, 4),
  C1(split, ANY, 2, 2, 6),
  C1(cross_entropy, ANY, 2, 4, 3),
  C2(mse, ANY, ANY, 2, SH(3, 4), 1, SH(4)),
  C3(chain, ANY, ANY, ANY, 2, SH(3, 4), 2, SH(4, 2), 1, SH(2)),
  C2(add_, ANY, ANY, 2, SH(3, 4), 1, SH(4)),
  C2(sub_, ANY, ANY, 2, SH(3, 4), 2, SH(3, 1)),
  C2(mul_, ANY, ANY, 2, SH(3, 4), 1, SH(4)),
  C2(div_, ANY, AWAY, 2, SH(3, 4), 2, SH(3, 4)),
  C2(copy_, ANY, ANY, 2, SH(3, 4), 1, SH(4)),
  C1(adds_, ANY, 2, 3, 4),
  C1(subs_, ANY, 2, 3, 4),
  C1(muls_, ANY, 2, 3, 4),
  C1(divs_, ANY, 2, 3, 4),
  C1(fill_, ANY, 2, 3, 4),
  C1(into_plain, ANY, 2, 3, 4),
  C1(expm1, ANY, 2, 3, 4),
  C1(log1p, POS, 2, 3, 4),
  C1(erf, ANY, 2, 3, 4),
  C1(softplus, AWAY, 2, 3, 4),
  C1(gelu_erf, ANY, 2, 3, 4),
  C1(cumsum, ANY, 2, 3, 5),
  C1(var, ANY, 2, 3, 5),
  C1(std, ANY, 2, 4, 3),
  C1(sum_dims, ANY, 3, 2, 3, 4),
  C1(tril, ANY, 2, 4, 3),
  C2(cat2, ANY, ANY, 2, SH(3, 2), 2, SH(3, 4)),
  C3(cat3, ANY, ANY, ANY, 2, SH(1, 4), 2, SH(2, 4), 2, SH(3, 4)),
  C2(stack, ANY, ANY, 2, SH(3, 4), 2, SH(3, 4)),
  C1(index_select, ANY, 2, 3, 5),
  C1(embedding, ANY, 2, 5, 3),
  C1(gather, ANY, 2, 3, 4),
  C2(scatter_add, ANY, ANY, 2, SH(3, 4), 2, SH(3, 2)),
};

static void test_gradcheck_every_op(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (getenv("TU_VERBOSE")) fprintf(stderr, "gradcheck %s\n", cases[i].name);
    gradcheck(&cases[i]);
  }
}

/* -- Tape behaviour ------------------------------------------------------------ */

static tc_tensor *vec(const double *v, int64_t n) {
  return tu_from(TC_F64, 1, &n, v);
}

static void expect_values(tc_tensor *t, const double *want, int64_t n) {
  assert_int_equal(tc_numel(t), n);
  double *got = tu_read(t);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i]))))
      fail_msg("[%lld] = %.17g, expected %.17g", (long long)i, got[i],
               want[i]);
  free(got);
}

/* Two backwards add up; tc_zero_grad starts again from nothing. */
static void test_accumulates_over_two_backwards(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2, 3}, 3);
  TU_OK(tc_set_requires_grad(x, true));
  for (int k = 0; k < 2; k++) {   /* d/dx sum(x^2 * 3) = 6x */
    tc_tensor *l = TU_NN(tc_sum_all(tc_mul_scalar(tc_mul(x, x), 3)));
    TU_OK(tc_backward(l));
    tc_release(l);
  }
  tc_tensor *g = TU_NN(tc_grad(x));
  expect_values(g, (double[]){12, 24, 36}, 3);
  tc_release(g);
  TU_OK(tc_zero_grad(x));
  assert_null(tc_grad(x));
  TU_EXPECT_ERR("tc_grad", "no gradient");
  tc_clear_error();
  tc_tensor *l = TU_NN(tc_sum_all(x));
  TU_OK(tc_backward(l));
  g = TU_NN(tc_grad(x));
  expect_values(g, (double[]){1, 1, 1}, 3);
  tc_release(g);
  tc_release(l);
  tc_release(x);
}

/* A value used twice sums both paths; an unused leaf gets no gradient. */
static void test_shared_value_and_unused_leaf(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, -2}, 2);
  tc_tensor *u = vec((double[]){5, 5}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  TU_OK(tc_set_requires_grad(u, true));
  tc_tensor *y = TU_NN(tc_exp(x));
  tc_tensor *l = TU_NN(tc_sum_all(tc_add(tc_mul(y, y), y)));  /* e^2x + e^x */
  TU_OK(tc_backward(l));
  tc_tensor *g = TU_NN(tc_grad(x));
  expect_values(g, (double[]){2 * exp(2.0) + exp(1.0),
                              2 * exp(-4.0) + exp(-2.0)}, 2);
  assert_null(tc_grad(u));
  tc_clear_error();
  tc_release(g);
  tc_release(l);
  tc_release(y);
  tc_release(u);
  tc_release(x);
}

/* No-grad mode records nothing and is per thread; the mode is returned. */
static void test_no_grad(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  assert_true(tc_set_grad_enabled(false));
  tc_tensor *y = TU_NN(tc_mul(x, x));
  assert_false(tc_requires_grad(y));
  assert_false(tc_set_grad_enabled(true));
  tc_tensor *l = TU_NN(tc_sum_all(y));
  assert_int_equal(tc_backward(l), -1);
  TU_EXPECT_ERR("tc_backward", "does not require grad");
  tc_clear_error();
  tc_tensor *z = TU_NN(tc_mul(x, x));
  assert_true(tc_requires_grad(z));
  assert_true(tc_requires_grad(x));
  tc_release(z);
  tc_release(l);
  tc_release(y);
  tc_release(x);
}

/* detach cuts the graph but shares the data. */
static void test_detach(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  tc_tensor *y = TU_NN(tc_mul_scalar(x, 3));
  tc_tensor *d = TU_NN(tc_detach(y));
  assert_false(tc_requires_grad(d));
  expect_values(d, (double[]){3, 6}, 2);
  /* l = sum(y * detach(y)): d/dx = 3 * detach(y) = 9x */
  tc_tensor *l = TU_NN(tc_sum_all(tc_mul(y, d)));
  TU_OK(tc_backward(l));
  tc_tensor *g = TU_NN(tc_grad(x));
  expect_values(g, (double[]){9, 18}, 2);
  tc_release(g);
  tc_release(l);
  tc_release(d);
  tc_release(y);
  tc_release(x);
}

/* -- Errors -------------------------------------------------------------------- */

static void test_error_non_scalar_loss(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  tc_tensor *y = TU_NN(tc_mul(x, x));
  assert_int_equal(tc_backward(y), -1);
  assert_string_equal(tc_last_error(), "tc_backward: the loss must have one "
                      "element, got 2 (reduce it first: tc_sum_all, tc_mean)");
  tc_clear_error();
  assert_int_equal(tc_backward(NULL), -1);
  tc_clear_error();
  tc_release(y);
  tc_release(x);
}

static void test_error_backward_twice(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  tc_tensor *l = TU_NN(tc_sum_all(tc_exp(x)));
  TU_OK(tc_backward(l));
  assert_int_equal(tc_backward(l), -1);
  assert_string_equal(tc_last_error(), "tc_backward: backward through a graph "
                      "a second time (the first backward freed its saved "
                      "values; run the forward again)");
  tc_clear_error();
  tc_release(l);
  tc_release(x);
}

static void test_error_saved_modified(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);   /* saved by mul, no grad */
  tc_tensor *w = vec((double[]){3, 4}, 2);
  TU_OK(tc_set_requires_grad(w, true));
  tc_tensor *l = TU_NN(tc_sum_all(tc_mul(x, w)));
  TU_OK(tc_mul_scalar_(x, 2));
  assert_int_equal(tc_backward(l), -1);
  TU_EXPECT_ERR("tc_backward", "modified by an in-place op");
  tc_clear_error();
  assert_null(tc_grad(w));   /* nothing was accumulated */
  tc_clear_error();
  tc_release(l);
  /* The same with a saved result (exp saves its output). */
  tc_tensor *y = TU_NN(tc_exp(w));
  tc_tensor *l2 = TU_NN(tc_sum_all(y));
  TU_OK(tc_add_scalar_(y, 1));
  tc_release(l2);
  l2 = TU_NN(tc_sum_all(tc_mul(y, y)));
  TU_OK(tc_mul_scalar_(y, 2));
  assert_int_equal(tc_backward(l2), -1);
  TU_EXPECT_ERR("tc_backward", "modified by an in-place op");
  tc_clear_error();
  tc_release(l2);
  tc_release(y);
  tc_release(x);
  tc_release(w);
}

static void test_error_requires_grad_dtype_and_leaf(void **state) {
  (void)state;
  tc_tensor *i = TU_NN(tc_zeros(TC_I64, TC_SHAPE(2)));
  assert_int_equal(tc_set_requires_grad(i, true), -1);
  assert_string_equal(tc_last_error(), "tc_set_requires_grad: only "
                      "floating-point tensors can require grad (got i64)");
  tc_clear_error();
  assert_false(tc_requires_grad(i));
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  tc_tensor *y = TU_NN(tc_neg(x));
  assert_int_equal(tc_set_requires_grad(y, false), -1);
  TU_EXPECT_ERR("tc_set_requires_grad", "only leaf");
  tc_clear_error();
  tc_release(y);
  tc_release(x);
  tc_release(i);
}

static void test_error_inplace_on_leaf(void **state) {
  (void)state;
  tc_tensor *x = vec((double[]){1, 2}, 2);
  TU_OK(tc_set_requires_grad(x, true));
  assert_int_equal(tc_add_scalar_(x, 1), -1);
  TU_EXPECT_ERR("tc_add_scalar_", "leaf tensor that requires grad");
  tc_clear_error();
  expect_values(x, (double[]){1, 2}, 2);   /* unchanged */
  /* A view of it neither. */
  tc_tensor *v = TU_NN(tc_slice(x, 0, 0, 1, 1));
  assert_int_equal(tc_mul_scalar_(v, 2), -1);
  TU_EXPECT_ERR("tc_mul_scalar_", "view");
  tc_clear_error();
  /* With grad mode off, as an optimizer does, it is allowed. */
  bool was = tc_set_grad_enabled(false);
  TU_OK(tc_add_scalar_(x, 1));
  tc_set_grad_enabled(was);
  expect_values(x, (double[]){2, 3}, 2);
  tc_release(v);
  tc_release(x);
}

/* -- Optimizers against torch.optim's rules, in double ---------------------- */

enum { NP = 6 };

/* Gradients of l = sum(p^3 * c) (c fixed), by hand: 3 p^2 c. */
static void ref_grad(const double *p, const double *c, double *g) {
  for (int i = 0; i < NP; i++) g[i] = 3 * p[i] * p[i] * c[i];
}

static void step_tc(tc_optimizer *o, tc_tensor *p, tc_tensor *c) {
  size_t mark = tc_scope_begin();
  TU_OK(tc_optimizer_zero_grad(o));
  tc_tensor *l = TU_NN(tc_sum_all(tc_mul(tc_pow_scalar(p, 3), c)));
  TU_OK(tc_backward(l));
  TU_OK(tc_optimizer_step(o));
  tc_scope_end(mark);
}

static void expect_close(tc_tensor *t, const double *want, double tol) {
  double *got = tu_read(t);
  for (int i = 0; i < NP; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
      fail_msg("p[%d] = %.10g, reference %.10g", i, got[i], want[i]);
  free(got);
}

static void test_sgd_matches_torch_rule(void **state) {
  (void)state;
  double p[NP], c[NP], buf[NP], g[NP];
  double *init = random_values(NP, ANY, 5), *cv = random_values(NP, ANY, 6);
  memcpy(p, init, sizeof p);
  memcpy(c, cv, sizeof c);
  const double lr = 0.05, mom = 0.9, wd = 0.01;
  tc_tensor *tp = tu_from(TC_F64, 1, (int64_t[]){NP}, init);
  tc_tensor *tcv = tu_from(TC_F64, 1, (int64_t[]){NP}, cv);
  TU_OK(tc_set_requires_grad(tp, true));
  tc_optimizer *o = tc_sgd(&tp, 1, lr, mom, wd);
  assert_non_null(o);
  for (int k = 0; k < 5; k++) {
    step_tc(o, tp, tcv);
    ref_grad(p, c, g);   /* torch.optim.SGD, dampening 0, no nesterov */
    for (int i = 0; i < NP; i++) {
      double d = g[i] + wd * p[i];
      buf[i] = k == 0 ? d : mom * buf[i] + d;
      p[i] -= lr * buf[i];
    }
  }
  expect_close(tp, p, 1e-12);
  tc_optimizer_free(o);
  tc_release(tcv);
  tc_release(tp);
  free(init);
  free(cv);
}

static void test_adamw_matches_torch_rule(void **state) {
  (void)state;
  double p[NP], c[NP], m[NP] = {0}, v[NP] = {0}, g[NP];
  double *init = random_values(NP, ANY, 7), *cv = random_values(NP, ANY, 8);
  memcpy(p, init, sizeof p);
  memcpy(c, cv, sizeof c);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  for (int dt = 0; dt < 2; dt++) {   /* f64 tight, f32 as f32 allows */
    tc_dtype type = dt ? TC_F32 : TC_F64;
    tc_tensor *tp = tu_from(type, 1, (int64_t[]){NP}, init);
    tc_tensor *tcv = tu_from(type, 1, (int64_t[]){NP}, cv);
    TU_OK(tc_set_requires_grad(tp, true));
    tc_optimizer *o = tc_adamw(&tp, 1, lr, b1, b2, eps, wd);
    assert_non_null(o);
    memcpy(p, init, sizeof p);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    for (int k = 1; k <= 5; k++) {
      step_tc(o, tp, tcv);
      ref_grad(p, c, g);   /* torch.optim.AdamW */
      for (int i = 0; i < NP; i++) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        double mh = m[i] / (1 - pow(b1, k));
        double denom = sqrt(v[i]) / sqrt(1 - pow(b2, k)) + eps;
        p[i] -= lr * mh / denom;
      }
    }
    expect_close(tp, p, dt ? 1e-5 : 1e-12);
    tc_optimizer_free(o);
    tc_release(tcv);
    tc_release(tp);
  }
  free(init);
  free(cv);
}

static void test_optimizer_errors(void **state) {
  (void)state;
  assert_null(tc_sgd(NULL, 0, 0.1, 0, 0));
  TU_EXPECT_ERR("tc_sgd", "at least one");
  tc_tensor *i = TU_NN(tc_zeros(TC_I32, TC_SHAPE(2)));
  assert_null(tc_adamw(&i, 1, 0.1, 0.9, 0.999, 1e-8, 0));
  TU_EXPECT_ERR("tc_adamw", "floating");
  tc_tensor *x = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2)));
  assert_null(tc_adamw(&x, 1, 0.1, 1.5, 0.999, 1e-8, 0));
  TU_EXPECT_ERR("tc_adamw", "betas");
  assert_int_equal(tc_optimizer_step(NULL), -1);
  tc_clear_error();
  tc_optimizer_free(NULL);
  tc_release(x);
  tc_release(i);
}

static void test_cross_entropy_errors(void **state) {
  (void)state;
  tc_tensor *lg = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2, 3)));
  tc_tensor *t = TU_NN(tc_from_data(TC_I64, TC_SHAPE(2), (int64_t[]){0, 3},
                                    16));
  assert_null(tc_cross_entropy(lg, t));
  assert_string_equal(tc_last_error(),
                      "tc_cross_entropy: target 3 is out of range [0, 3)");
  tc_clear_error();
  tc_tensor *tf = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2)));
  assert_null(tc_cross_entropy(lg, tf));
  TU_EXPECT_ERR("tc_cross_entropy", "i64");
  tc_clear_error();
  /* The value against a hand computation: uniform logits give log 3. */
  tc_tensor *ok = TU_NN(tc_from_data(TC_I64, TC_SHAPE(2), (int64_t[]){0, 2},
                                     16));
  tc_tensor *l = TU_NN(tc_cross_entropy(lg, ok));
  assert_true(fabs(tu_item(l) - log(3.0)) < 1e-6);
  tc_release(l);
  tc_release(ok);
  tc_release(tf);
  tc_release(t);
  tc_release(lg);
}

/* -- Compiled equals eager -------------------------------------------------- */

/* A few AdamW steps of a small MLP with cross-entropy, in one mode: the
** parameters' bytes after the steps. */
static void train_steps(bool compiled, float *out, size_t nbytes) {
  bool was = tc_compile_enabled();
  tc_compile_set(compiled);
  tc_tensor *x = TU_NN(tc_randn(TC_F32, TC_SHAPE(16, 5), 1));
  int64_t tv[16];
  for (int i = 0; i < 16; i++) tv[i] = (i * 7) % 3;
  tc_tensor *t = TU_NN(tc_from_data(TC_I64, TC_SHAPE(16), tv, sizeof tv));
  tc_tensor *w1 = TU_NN(tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(5, 8), 2), 0.4));
  tc_tensor *b1 = TU_NN(tc_zeros(TC_F32, TC_SHAPE(8)));
  tc_tensor *w2 = TU_NN(tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(8, 3), 3), 0.4));
  tc_tensor *ps[3] = {w1, b1, w2};
  for (int i = 0; i < 3; i++) TU_OK(tc_set_requires_grad(ps[i], true));
  tc_optimizer *o = tc_adamw(ps, 3, 0.01, 0.9, 0.999, 1e-8, 0.01);
  assert_non_null(o);
  for (int k = 0; k < 6; k++) {
    size_t mark = tc_scope_begin();
    TU_OK(tc_optimizer_zero_grad(o));
    tc_tensor *h = tc_relu(tc_add(tc_matmul(x, w1), b1));
    tc_tensor *l = TU_NN(tc_cross_entropy(tc_matmul(h, w2), t));
    TU_OK(tc_backward(l));
    TU_OK(tc_optimizer_step(o));
    tu_item(l);
    tc_scope_end(mark);
  }
  size_t off = 0;
  for (int i = 0; i < 3; i++) {
    size_t nb = (size_t)tc_numel(ps[i]) * sizeof(float);
    assert_true(off + nb <= nbytes);
    TU_OK(tc_copy_to(ps[i], (char *)out + off, nb));
    off += nb;
  }
  tc_optimizer_free(o);
  for (int i = 0; i < 3; i++) tc_release(ps[i]);
  tc_release(t);
  tc_release(x);
  tc_compile_set(was);
}

static void test_training_compiled_equals_eager(void **state) {
  (void)state;
  enum { N = 5 * 8 + 8 + 8 * 3 };
  float eager[N], compiled[N];
  train_steps(false, eager, sizeof eager);
  train_steps(true, compiled, sizeof compiled);
  for (int i = 0; i < N; i++)
    if (memcmp(&eager[i], &compiled[i], sizeof(float)) != 0)
      fail_msg("parameter byte %d: eager %.9g, compiled %.9g", i,
               (double)eager[i], (double)compiled[i]);
  tc_stats st;
  tc_stats_get(&st);
  assert_true(st.regions > 0);   /* the compiled run did trace */
}

/* Each test's temporaries (chained ops) go with a scope around it. */
static size_t marks[64];
static int scope_open(void **state) {
  static int next;
  marks[next % 64] = tc_scope_begin();
  *state = &marks[next++ % 64];
  return 0;
}
static int scope_close(void **state) {
  tc_scope_end(*(size_t *)*state);
  return 0;
}
#undef cmocka_unit_test
#define cmocka_unit_test(f) cmocka_unit_test_setup_teardown(f, scope_open, scope_close)

int main(void) {
  /* Traced runs compile every region on first sight, in the foreground. */
  setenv("TC_HOT", "1", 1);
  setenv("TC_ASYNC", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck_every_op),
      cmocka_unit_test(test_accumulates_over_two_backwards),
      cmocka_unit_test(test_shared_value_and_unused_leaf),
      cmocka_unit_test(test_no_grad),
      cmocka_unit_test(test_detach),
      cmocka_unit_test(test_error_non_scalar_loss),
      cmocka_unit_test(test_error_backward_twice),
      cmocka_unit_test(test_error_saved_modified),
      cmocka_unit_test(test_error_requires_grad_dtype_and_leaf),
      cmocka_unit_test(test_error_inplace_on_leaf),
      cmocka_unit_test(test_sgd_matches_torch_rule),
      cmocka_unit_test(test_adamw_matches_torch_rule),
      cmocka_unit_test(test_optimizer_errors),
      cmocka_unit_test(test_cross_entropy_errors),
      cmocka_unit_test(test_training_compiled_equals_eager),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
