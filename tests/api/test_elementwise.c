/*
** test_elementwise.c -- every unary and binary elementwise op, the scalar
** forms, where, clamp and cast, against references computed here with libm
** in double (transcendentals, with a tolerance) or in the tensor's own
** float type (arithmetic, which must match bitwise). Each op runs on four
** layouts (contiguous, transposed, sliced with a step, broadcast/expanded)
** plus a large contiguous case, in f32 and f64; then type promotion and
** special values (NaN, infinities, division by zero).
*/
#include "testutil.h"

#define R 19 /* odd sizes, so vector loops have tails */
#define C 37
#define BIG 100003

static const tc_dtype FDT[2] = {TC_F32, TC_F64};

/* Tolerance for approximated functions: about 8 f32 ulp, ~45 f64 ulp, plus
** an absolute term near zero (scaled by |x| where the function's absolute
** error grows with its argument: sin and cos after range reduction, and
** gelu's cancellation in 1 + tanh for negative x). */
static double rtol_of(tc_dtype dt) { return dt == TC_F32 ? 1e-6 : 1e-14; }
static double atol_of(tc_dtype dt, double ascale, double x) {
  return (dt == TC_F32 ? 2e-7 : 1e-15) * (1 + ascale * fabs(x));
}

/* -- Unary ops ----------------------------------------------------------- */

static double r_neg(double x) { return -x; }
static double r_abs(double x) { return fabs(x); }
static double r_relu(double x) { return isnan(x) ? x : x > 0 ? x : 0; }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_gelu(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / TU_PI) * (x + 0.044715 * x * x * x)));
}
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_gelu_erf(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static float f_neg(float x) { return -x; }
static float f_abs(float x) { return fabsf(x); }
static float f_relu(float x) { return x > 0 ? x : 0; }
static float f_sqrt(float x) { return sqrtf(x); }

typedef struct {
  const char *name;
  tc_tensor *(*fn)(tc_tensor *);
  double (*ref)(double);
  float (*fref)(float); /* exact ops: the f32 computation in float */
  double lo, hi;        /* value range (f32) */
  double lo64, hi64;    /* value range for f64 (0, 0: same) */
  int logdist;          /* values log-uniform in [lo, hi] */
  int exact;            /* 1 bitwise, 2 equal value (0 == -0) */
  double ascale;
} unop_t;

static const unop_t UNOPS[] = {
    {"neg", tc_neg, r_neg, f_neg, -100, 100, 0, 0, 0, 1, 0},
    {"abs", tc_abs, r_abs, f_abs, -100, 100, 0, 0, 0, 1, 0},
    {"relu", tc_relu, r_relu, f_relu, -100, 100, 0, 0, 0, 2, 0},
    {"sqrt", tc_sqrt, sqrt, f_sqrt, 1e-30, 1e30, 1e-300, 1e300, 1, 1, 0},
    {"exp", tc_exp, exp, NULL, -87, 88, -700, 700, 0, 0, 0},
    {"log", tc_log, log, NULL, 1e-30, 1e30, 1e-300, 1e300, 1, 0, 0},
    {"rsqrt", tc_rsqrt, r_rsqrt, NULL, 1e-30, 1e30, 1e-300, 1e300, 1, 0, 0},
    {"sin", tc_sin, sin, NULL, -30, 30, 0, 0, 0, 0, 1},
    {"cos", tc_cos, cos, NULL, -30, 30, 0, 0, 0, 0, 1},
    {"tanh", tc_tanh, tanh, NULL, -12, 12, -25, 25, 0, 0, 0},
    {"sigmoid", tc_sigmoid, r_sigmoid, NULL, -40, 40, 0, 0, 0, 0, 0},
    {"gelu", tc_gelu, r_gelu, NULL, -10, 10, 0, 0, 0, 0, 1},
    {"silu", tc_silu, r_silu, NULL, -40, 40, 0, 0, 0, 0, 0},
    {"expm1", tc_expm1, expm1, NULL, -20, 20, -40, 60, 0, 0, 0},
    {"log1p", tc_log1p, log1p, NULL, -0.999, 50, 0, 0, 0, 0, 0},
    {"erf", tc_erf, erf, NULL, -5, 5, -7, 7, 0, 0, 0},
    {"softplus", tc_softplus, r_softplus, NULL, -30, 30, 0, 0, 0, 0, 0},
    {"gelu_erf", tc_gelu_erf, r_gelu_erf, NULL, -10, 10, 0, 0, 0, 0, 1},
};
#define NUNOPS (sizeof UNOPS / sizeof UNOPS[0])

static double *unop_values(const unop_t *op, tc_dtype dt, int64_t n,
                           uint64_t seed) {
  double lo = op->lo, hi = op->hi;
  if (dt == TC_F64 && (op->lo64 != 0 || op->hi64 != 0)) {
    lo = op->lo64;
    hi = op->hi64;
  }
  double *v = op->logdist ? tu_uniform(n, log(lo), log(hi), seed)
                          : tu_uniform(n, lo, hi, seed);
  if (op->logdist)
    for (int64_t i = 0; i < n; i++) v[i] = exp(v[i]);
  return v;
}

static double unop_want(const unop_t *op, tc_dtype dt, double x) {
  if (op->exact && dt == TC_F32) return (double)op->fref((float)x);
  return tu_round(dt, op->ref(x));
}

static bool unop_ok(const unop_t *op, tc_dtype dt, double got, double want,
                    double x) {
  if (op->exact == 1) return tu_same(got, want);
  if (op->exact == 2) return tu_same_value(got, want);
  return tu_close(got, op->ref(x), rtol_of(dt), atol_of(dt, op->ascale, x));
}

static void check_unary_on(const unop_t *op, tc_dtype dt, tu_arr *a,
                           const char *lay) {
  tc_tensor *r = TU_NN(op->fn(a->t));
  TU_SHAPE_IS(r, a->ndim, a->shape);
  assert_int_equal(tc_dtype_of(r), dt);
  double *got = tu_read(r);
  tu_cmp c;
  tu_cmp_init(&c, "%s %s %s", op->name, tc_dtype_name(dt), lay);
  for (int64_t i = 0; i < a->n; i++) {
    double want = unop_want(op, dt, a->v[i]);
    if (!unop_ok(op, dt, got[i], want, a->v[i]))
      tu_cmp_bad(&c, i, got[i], want, a->v[i]);
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_unary_layouts(void **state) {
  (void)state;
  const int64_t shape[2] = {R, C};
  for (size_t k = 0; k < NUNOPS; k++) {
    for (int d = 0; d < 2; d++) {
      for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
        double *v = unop_values(&UNOPS[k], FDT[d], R * C, k * 10 + lay);
        tu_arr a = tu_make(FDT[d], lay, 2, shape, v);
        free(v);
        check_unary_on(&UNOPS[k], FDT[d], &a, tu_layout_name[lay]);
        tu_free(&a);
      }
      /* A large contiguous case: vector bodies, threads, tails. */
      double *v = unop_values(&UNOPS[k], FDT[d], BIG, 1000 + k);
      tu_arr a = tu_make(FDT[d], TU_CONTIG, 1, (const int64_t[]){BIG}, v);
      free(v);
      check_unary_on(&UNOPS[k], FDT[d], &a, "large");
      tu_free(&a);
    }
  }
}

/* Special values: NaN in gives NaN out, infinities and saturation. */
static void test_unary_special_values(void **state) {
  (void)state;
  const double I = INFINITY, N = NAN;
  struct { tc_tensor *(*fn)(tc_tensor *); const char *name; double x, want; }
  const cases[] = {
      {tc_exp, "exp", -I, 0}, {tc_exp, "exp", I, I}, {tc_exp, "exp", N, N},
      {tc_exp, "exp", 0, 1}, {tc_exp, "exp", -1000, 0},
      {tc_exp, "exp", 1000, I}, {tc_log, "log", 0, -I},
      {tc_log, "log", -1, N}, {tc_log, "log", I, I}, {tc_log, "log", 1, 0},
      {tc_log, "log", N, N}, {tc_sqrt, "sqrt", -1, N},
      {tc_sqrt, "sqrt", I, I}, {tc_sqrt, "sqrt", 0, 0},
      {tc_rsqrt, "rsqrt", 0, I}, {tc_rsqrt, "rsqrt", I, 0},
      {tc_rsqrt, "rsqrt", -1, N}, {tc_rsqrt, "rsqrt", 4, 0.5},
      {tc_sin, "sin", N, N}, {tc_sin, "sin", I, N}, {tc_sin, "sin", 0, 0},
      {tc_cos, "cos", N, N}, {tc_cos, "cos", -I, N}, {tc_cos, "cos", 0, 1},
      {tc_tanh, "tanh", I, 1}, {tc_tanh, "tanh", -I, -1},
      {tc_tanh, "tanh", 100, 1}, {tc_tanh, "tanh", -100, -1},
      {tc_tanh, "tanh", N, N}, {tc_tanh, "tanh", 0, 0},
      {tc_sigmoid, "sigmoid", I, 1}, {tc_sigmoid, "sigmoid", -I, 0},
      {tc_sigmoid, "sigmoid", 0, 0.5}, {tc_sigmoid, "sigmoid", -1000, 0},
      {tc_sigmoid, "sigmoid", 1000, 1}, {tc_sigmoid, "sigmoid", N, N},
      {tc_relu, "relu", N, N}, {tc_relu, "relu", -I, 0},
      {tc_relu, "relu", I, I}, {tc_gelu, "gelu", 0, 0},
      {tc_gelu, "gelu", I, I}, {tc_gelu, "gelu", N, N},
      {tc_gelu, "gelu", -100, 0}, {tc_gelu, "gelu", 100, 100},
      {tc_gelu, "gelu", -I, 0},   /* the limit (-0), not -inf * 0 */
      {tc_silu, "silu", 0, 0}, {tc_silu, "silu", I, I},
      {tc_silu, "silu", N, N}, {tc_silu, "silu", -1000, 0},
      {tc_expm1, "expm1", -I, -1}, {tc_expm1, "expm1", I, I},
      {tc_expm1, "expm1", N, N}, {tc_expm1, "expm1", 1e-20, 1e-20},
      {tc_expm1, "expm1", -100, -1}, {tc_expm1, "expm1", 1000, I},
      {tc_log1p, "log1p", -1, -I}, {tc_log1p, "log1p", -2, N},
      {tc_log1p, "log1p", I, I}, {tc_log1p, "log1p", N, N},
      {tc_log1p, "log1p", 1e-20, 1e-20}, {tc_log1p, "log1p", -1e-20, -1e-20},
      {tc_erf, "erf", I, 1}, {tc_erf, "erf", -I, -1}, {tc_erf, "erf", N, N},
      {tc_erf, "erf", 1e-20, 1.1283791670955126e-20}, {tc_erf, "erf", 10, 1},
      {tc_softplus, "softplus", -I, 0}, {tc_softplus, "softplus", I, I},
      {tc_softplus, "softplus", N, N}, {tc_softplus, "softplus", -200, 0},
      {tc_softplus, "softplus", 1000, 1000}, {tc_softplus, "softplus", 0,
                                              0.69314718055994531},
      {tc_gelu_erf, "gelu_erf", 0, 0}, {tc_gelu_erf, "gelu_erf", I, I},
      {tc_gelu_erf, "gelu_erf", N, N}, {tc_gelu_erf, "gelu_erf", -100, 0},
      {tc_gelu_erf, "gelu_erf", 100, 100},
      {tc_neg, "neg", I, -I}, {tc_neg, "neg", N, N}, {tc_abs, "abs", -I, I},
      {tc_abs, "abs", N, N},
  };
  for (int d = 0; d < 2; d++) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      tc_tensor *t = TU_NN(tc_full(FDT[d], TC_SHAPE(1), cases[i].x));
      tc_tensor *r = TU_NN(cases[i].fn(t));
      double got = tu_item(r);
      /* gelu(-100): 0.5*x*(1 + tanh(..)) cancels; a few ulp of error in
      ** tanh near -1 is scaled by |x| (as in the layout tests). */
      bool gelu = cases[i].fn == tc_gelu && isfinite(cases[i].x);
      double atol = gelu ? atol_of(FDT[d], 1, cases[i].x) : 1e-37;
      if (!tu_close(got, cases[i].want, rtol_of(FDT[d]), atol))
        fail_msg("%s(%g) %s = %.9g, expected %g", cases[i].name, cases[i].x,
                 tc_dtype_name(FDT[d]), got, cases[i].want);
      tc_release(r);
      tc_release(t);
    }
    /* expm1, log1p and erf keep the sign of zero, as libm does. */
    tc_tensor *(*const odd[3])(tc_tensor *) = {tc_expm1, tc_log1p, tc_erf};
    for (int k = 0; k < 3; k++) {
      tc_tensor *m0 = TU_NN(tc_full(FDT[d], TC_SHAPE(1), -0.0));
      tc_tensor *r = TU_NN(odd[k](m0));
      assert_true(signbit(tu_item(r)) && tu_item(r) == 0);
      tc_release(r);
      tc_release(m0);
    }
    /* Signs of zero are IEEE's. */
    tc_tensor *z = TU_NN(tc_full(FDT[d], TC_SHAPE(1), 0.0));
    tc_tensor *mz = TU_NN(tc_full(FDT[d], TC_SHAPE(1), -0.0));
    tc_tensor *n = TU_NN(tc_neg(z)), *a = TU_NN(tc_abs(mz));
    assert_true(signbit(tu_item(n)) && tu_item(n) == 0);
    assert_true(!signbit(tu_item(a)) && tu_item(a) == 0);
    tc_release(z);
    tc_release(mz);
    tc_release(n);
    tc_release(a);
  }
}

/* -- Binary ops ---------------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN,
       B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE };

typedef struct {
  const char *name;
  tc_tensor *(*fn)(tc_tensor *, tc_tensor *);
  int kind;
  double alo, ahi, blo, bhi;
  int quant; /* values on a 0.5 grid, so that ties occur */
} binop_t;

static const binop_t BINOPS[] = {
    {"add", tc_add, B_ADD, -100, 100, -100, 100, 0},
    {"sub", tc_sub, B_SUB, -100, 100, -100, 100, 0},
    {"mul", tc_mul, B_MUL, -100, 100, -100, 100, 0},
    {"div", tc_div, B_DIV, -100, 100, 0.25, 50, 0},
    {"pow", tc_pow, B_POW, 0.1, 10, -3, 3, 0},
    {"maximum", tc_maximum, B_MAX, -4, 4, -4, 4, 1},
    {"minimum", tc_minimum, B_MIN, -4, 4, -4, 4, 1},
    {"eq", tc_eq, B_EQ, -2, 2, -2, 2, 1},
    {"ne", tc_ne, B_NE, -2, 2, -2, 2, 1},
    {"lt", tc_lt, B_LT, -2, 2, -2, 2, 1},
    {"le", tc_le, B_LE, -2, 2, -2, 2, 1},
    {"gt", tc_gt, B_GT, -2, 2, -2, 2, 1},
    {"ge", tc_ge, B_GE, -2, 2, -2, 2, 1},
};
#define NBINOPS (sizeof BINOPS / sizeof BINOPS[0])

static bool is_cmp(int kind) { return kind >= B_EQ; }

/* The op computed in dtype dt (f32: in float; ints: in int64). */
static double bin_ref(int kind, double a, double b, tc_dtype dt) {
  if (kind == B_POW) return tu_round(dt, pow(a, b));
  if (kind == B_MAX || kind == B_MIN) {
    if (isnan(a) || isnan(b)) return NAN;
    return kind == B_MAX ? (a > b ? a : b) : (a < b ? a : b);
  }
  switch (kind) {
  case B_EQ: return a == b;
  case B_NE: return a != b;
  case B_LT: return a < b;
  case B_LE: return a <= b;
  case B_GT: return a > b;
  case B_GE: return a >= b;
  default: break;
  }
  if (dt == TC_F32) {
    float x = (float)a, y = (float)b;
    switch (kind) {
    case B_ADD: return (double)(x + y);
    case B_SUB: return (double)(x - y);
    case B_MUL: return (double)(x * y);
    default: return (double)(x / y);
    }
  }
  if (dt == TC_I32 || dt == TC_I64) {
    int64_t x = (int64_t)a, y = (int64_t)b;
    switch (kind) {
    case B_ADD: return (double)(x + y);
    case B_SUB: return (double)(x - y);
    case B_MUL: return (double)(x * y);
    default: return (double)((float)x / (float)y); /* true division, f32 */
    }
  }
  switch (kind) {
  case B_ADD: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  default: return a / b;
  }
}

static tu_arr bin_operand(const binop_t *op, int which, tc_dtype dt, int lay,
                          int ndim, const int64_t *shape, uint64_t seed) {
  int64_t n = tu_numel(ndim, shape);
  double lo = which ? op->blo : op->alo, hi = which ? op->bhi : op->ahi;
  double *v = tu_uniform(n, lo, hi, seed);
  tu_rng r = {seed};
  for (int64_t i = 0; i < n; i++) {
    if (op->quant) v[i] = round(v[i] * 2) / 2;
    if (which && op->kind == B_DIV && (tu_next(&r) & 1)) v[i] = -v[i];
  }
  tu_arr a = tu_make(dt, lay, ndim, shape, v);
  free(v);
  return a;
}

static void check_binary(const binop_t *op, tu_arr *A, tu_arr *B,
                         tc_dtype cdt, const char *ctx) {
  tc_tensor *r = TU_NN(op->fn(A->t, B->t));
  int64_t os[TC_MAX_DIMS];
  int on = tu_bshape(A->ndim, A->shape, B->ndim, B->shape, os);
  TU_SHAPE_IS(r, on, os);
  tc_dtype rdt = is_cmp(op->kind) ? TC_BOOL : cdt;
  if (op->kind == B_DIV && !tu_is_float(cdt)) rdt = TC_F32;
  assert_int_equal(tc_dtype_of(r), rdt);
  double *got = tu_read(r);
  int64_t n = tu_numel(on, os);
  tu_cmp c;
  tu_cmp_init(&c, "%s %s %s", op->name, tc_dtype_name(cdt), ctx);
  for (int64_t i = 0; i < n; i++) {
    double a = A->v[tu_bidx(on, os, i, A->ndim, A->shape)];
    double b = B->v[tu_bidx(on, os, i, B->ndim, B->shape)];
    double want = bin_ref(op->kind, a, b, cdt);
    bool ok;
    if (op->kind == B_POW)
      ok = tu_close(got[i], pow(a, b), cdt == TC_F32 ? 2e-6 : 2e-14, 1e-300);
    else if (op->kind == B_MAX || op->kind == B_MIN || is_cmp(op->kind))
      ok = tu_same_value(got[i], want);
    else
      ok = tu_same(got[i], want);
    if (!ok) tu_cmp_bad(&c, i, got[i], want, a);
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void run_binary_case(const binop_t *op, tc_dtype dt, int la,
                            int an, const int64_t *as, int lb, int bn,
                            const int64_t *bs, const char *ctx, uint64_t s) {
  tu_arr A = bin_operand(op, 0, dt, la, an, as, s);
  tu_arr B = bin_operand(op, 1, dt, lb, bn, bs, s + 1);
  check_binary(op, &A, &B, dt, ctx);
  tu_free(&A);
  tu_free(&B);
}

static void test_binary_layouts(void **state) {
  (void)state;
  const int64_t rc[2] = {R, C}, r1[2] = {R, 1}, c1[2] = {1, C};
  const int64_t s315[3] = {3, 1, 5}, s45[2] = {4, 5}, big[1] = {BIG};
  for (size_t k = 0; k < NBINOPS; k++) {
    const binop_t *op = &BINOPS[k];
    for (int d = 0; d < 2; d++) {
      tc_dtype dt = FDT[d];
      uint64_t s = 100 * k + 10 * d;
      run_binary_case(op, dt, TU_CONTIG, 2, rc, TU_CONTIG, 2, rc,
                      "contiguous", s);
      run_binary_case(op, dt, TU_TRANS, 2, rc, TU_TRANS, 2, rc, "transposed",
                      s + 2);
      run_binary_case(op, dt, TU_SLICED, 2, rc, TU_SLICED, 2, rc, "sliced",
                      s + 4);
      run_binary_case(op, dt, TU_CONTIG, 2, r1, TU_CONTIG, 2, c1,
                      "broadcast (R,1)x(1,C)", s + 6);
      run_binary_case(op, dt, TU_SLICED, 2, r1, TU_TRANS, 2, c1,
                      "broadcast sliced (R,1) x transposed (1,C)", s + 8);
      run_binary_case(op, dt, TU_CONTIG, 3, s315, TU_CONTIG, 2, s45,
                      "broadcast (3,1,5)x(4,5)", s + 10);
      run_binary_case(op, dt, TU_TRANS, 2, rc, TU_EXPAND, 2, rc,
                      "transposed x expanded", s + 12);
      run_binary_case(op, dt, TU_SLICED, 2, rc, TU_CONTIG, 0, NULL,
                      "sliced x 0-d", s + 14);
      run_binary_case(op, dt, TU_CONTIG, 1, big, TU_CONTIG, 1, big, "large",
                      s + 16);
    }
  }
}

static void test_binary_special_values(void **state) {
  (void)state;
  const double I = INFINITY, N = NAN;
  struct { int kind; double a, b, want; } cases[] = {
      {B_DIV, 1, 0, I}, {B_DIV, -1, 0, -I}, {B_DIV, 0, 0, N},
      {B_DIV, 1, -0.0, -I}, {B_POW, -2, 2, 4}, {B_POW, -2, 3, -8},
      {B_POW, -2, 0.5, N}, {B_POW, 0, 0, 1}, {B_POW, 2, -1, 0.5},
      {B_POW, 0, -1, I}, {B_POW, 3, 0, 1}, {B_POW, 0, 2, 0},
      {B_MAX, N, 1, N}, {B_MAX, 1, N, N}, {B_MIN, N, 1, N}, {B_MIN, 1, N, N},
      {B_MAX, -I, 1, 1}, {B_MIN, -I, 1, -I}, {B_EQ, N, N, 0},
      {B_NE, N, N, 1}, {B_LT, N, 1, 0}, {B_GE, N, 1, 0}, {B_ADD, I, -I, N},
      {B_MUL, 0, I, N}, {B_SUB, I, 1, I},
  };
  for (int d = 0; d < 2; d++) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const binop_t *op = NULL;
      for (size_t k = 0; k < NBINOPS; k++)
        if (BINOPS[k].kind == cases[i].kind) op = &BINOPS[k];
      tc_tensor *a = TU_NN(tc_full(FDT[d], TC_SHAPE(2), cases[i].a));
      tc_tensor *b = TU_NN(tc_full(FDT[d], TC_SHAPE(2), cases[i].b));
      tc_tensor *r = TU_NN(op->fn(a, b));
      double *got = tu_read(r);
      for (int j = 0; j < 2; j++)
        if (!tu_close(got[j], cases[i].want, rtol_of(FDT[d]), 0))
          fail_msg("%s(%g, %g) %s = %.9g, expected %g", op->name, cases[i].a,
                   cases[i].b, tc_dtype_name(FDT[d]), got[j], cases[i].want);
      free(got);
      tc_release(a);
      tc_release(b);
      tc_release(r);
    }
  }
}

/* -- Scalar forms -------------------------------------------------------- */

static void test_scalar_forms_layouts(void **state) {
  (void)state;
  const int64_t shape[2] = {R, C};
  struct { const char *name; tc_tensor *(*fn)(tc_tensor *, double); int kind;
           double s; } ops[] = {
      {"add_scalar", tc_add_scalar, B_ADD, -2.5},
      {"sub_scalar", tc_sub_scalar, B_SUB, 3.25},
      {"mul_scalar", tc_mul_scalar, B_MUL, -1.5},
      {"div_scalar", tc_div_scalar, B_DIV, 3.0},
      {"div_scalar", tc_div_scalar, B_DIV, -0.375},
      {"pow_scalar", tc_pow_scalar, B_POW, 2},
      {"pow_scalar", tc_pow_scalar, B_POW, 3},
      {"pow_scalar", tc_pow_scalar, B_POW, -1.5},
      {"pow_scalar", tc_pow_scalar, B_POW, 0.5},
  };
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    for (int d = 0; d < 2; d++) {
      tc_dtype dt = FDT[d];
      bool positive = ops[k].kind == B_POW && ops[k].s != floor(ops[k].s);
      for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
        tu_arr a = tu_make_unif(dt, lay, 2, shape, positive ? 0.1 : -10, 10,
                                k * 7 + lay);
        tc_tensor *r = TU_NN(ops[k].fn(a.t, ops[k].s));
        TU_SHAPE_IS(r, 2, shape);
        assert_int_equal(tc_dtype_of(r), dt);
        double *got = tu_read(r);
        tu_cmp c;
        tu_cmp_init(&c, "%s(%g) %s %s", ops[k].name, ops[k].s,
                    tc_dtype_name(dt), tu_layout_name[lay]);
        for (int64_t i = 0; i < a.n; i++) {
          double want = bin_ref(ops[k].kind, a.v[i], ops[k].s, dt);
          bool ok = ops[k].kind == B_POW
                        ? tu_close(got[i], pow(a.v[i], ops[k].s),
                                   dt == TC_F32 ? 2e-6 : 2e-14, 1e-300)
                        : tu_same(got[i], want);
          if (!ok) tu_cmp_bad(&c, i, got[i], want, a.v[i]);
        }
        free(got);
        tc_release(r);
        tu_free(&a);
        TU_CMP_DONE(c);
      }
    }
  }
}

/* s - a and s / a: the scalar is the left operand. */
static void test_reversed_scalar_forms(void **state) {
  (void)state;
  const int64_t shape[2] = {R, C};
  struct { const char *name; tc_tensor *(*fn)(tc_tensor *, double); int kind;
           double s; } ops[] = {
      {"rsub_scalar", tc_rsub_scalar, B_SUB, 3.25},
      {"rsub_scalar", tc_rsub_scalar, B_SUB, -0.1},
      {"rdiv_scalar", tc_rdiv_scalar, B_DIV, 1.0},
      {"rdiv_scalar", tc_rdiv_scalar, B_DIV, -7.5},
  };
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    for (int d = 0; d < 2; d++)
      for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
        tc_dtype dt = FDT[d];
        tu_arr a = tu_make_unif(dt, lay, 2, shape, -10, 10, k * 5 + lay);
        tc_tensor *r = TU_NN(ops[k].fn(a.t, ops[k].s));
        assert_int_equal(tc_dtype_of(r), dt);
        double *got = tu_read(r);
        tu_cmp c;
        tu_cmp_init(&c, "%s(%g) %s %s", ops[k].name, ops[k].s,
                    tc_dtype_name(dt), tu_layout_name[lay]);
        for (int64_t i = 0; i < a.n; i++) {
          double want = bin_ref(ops[k].kind, ops[k].s, a.v[i], dt);
          if (!tu_same(got[i], want)) tu_cmp_bad(&c, i, got[i], want, a.v[i]);
        }
        free(got);
        tc_release(r);
        tu_free(&a);
        TU_CMP_DONE(c);
      }
  /* Integers: rsub keeps an i32 tensor's dtype; rdiv gives f32. */
  tc_tensor *i = TU_NN(tc_arange(TC_I32, 1, 5, 1));
  tc_tensor *rs = TU_NN(tc_rsub_scalar(i, 10)), *rd = TU_NN(tc_rdiv_scalar(i, 1));
  assert_int_equal(tc_dtype_of(rs), TC_I32);
  assert_int_equal(tc_dtype_of(rd), TC_F32);
  double *gs = tu_read(rs), *gd = tu_read(rd);
  for (int k = 0; k < 4; k++) {
    assert_true(gs[k] == 9 - k);
    assert_true(gd[k] == (double)(1.0f / (float)(k + 1)));
  }
  free(gs);
  free(gd);
  tc_release(i);
  tc_release(rs);
  tc_release(rd);
}

/* floor, ceil, round (half to even), trunc against libm in double (exact
** for any float: the f32 result is the double result of the f32 value),
** on halves, signed zeros, NaN, infinities, huge values and the largest
** float below 0.5; every layout; integers keep their values and dtype;
** bool is refused. */
static void test_rounding(void **state) {
  (void)state;
  static const double special[] = {
    0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 0.0, -0.0,
    1e30, -1e30, 8388609.5, 4503599627370497.0, 2.0, -3.0, 1e-40, -1e-40,
  };
  struct { const char *name; tc_tensor *(*fn)(tc_tensor *);
           double (*ref)(double); } ops[] = {
    {"floor", tc_floor, floor}, {"ceil", tc_ceil, ceil},
    {"round", tc_round, nearbyint}, {"trunc", tc_trunc, trunc},
  };
  const int64_t shape[2] = {9, 13};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    for (int d = 0; d < 2; d++) {
      tc_dtype dt = FDT[d];
      for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
        tu_arr a = tu_make_unif(dt, lay, 2, shape, -6, 6, 40 + k * 7 + lay);
        tc_tensor *r = TU_NN(ops[k].fn(a.t));
        assert_int_equal(tc_dtype_of(r), dt);
        double *got = tu_read(r);
        tu_cmp c;
        tu_cmp_init(&c, "%s %s %s", ops[k].name, tc_dtype_name(dt),
                    tu_layout_name[lay]);
        for (int64_t i = 0; i < a.n; i++)
          if (!tu_same(got[i], ops[k].ref(a.v[i])))
            tu_cmp_bad(&c, i, got[i], ops[k].ref(a.v[i]), a.v[i]);
        free(got);
        tc_release(r);
        tu_free(&a);
        TU_CMP_DONE(c);
      }
      int n = (int)(sizeof special / sizeof special[0]);
      double v[32];
      for (int i = 0; i < n; i++)   /* the values as the dtype holds them */
        v[i] = dt == TC_F32 ? (double)(float)special[i] : special[i];
      v[n] = NAN;
      v[n + 1] = INFINITY;
      v[n + 2] = -INFINITY;
      tc_tensor *t = tu_from(dt, TC_SHAPE(n + 3), v);
      tc_tensor *r = TU_NN(ops[k].fn(t));
      double *got = tu_read(r);
      for (int i = 0; i < n + 3; i++) {
        double want = ops[k].ref(v[i]);
        bool ok = isnan(want) ? isnan(got[i])
                  : got[i] == want && signbit(got[i]) == signbit(want);
        if (!ok)
          fail_msg("%s %s(%a) = %a, expected %a", tc_dtype_name(dt),
                   ops[k].name, v[i], got[i], want);
      }
      free(got);
      tc_release(t);
      tc_release(r);
    }
  /* Integers are integral already: same values, same dtype. */
  double iv[5] = {-7, -1, 0, 3, 2147483647};
  tc_tensor *i32 = tu_from(TC_I32, TC_SHAPE(5), iv);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    tc_tensor *r = TU_NN(ops[k].fn(i32));
    assert_int_equal(tc_dtype_of(r), TC_I32);
    double *got = tu_read(r);
    for (int i = 0; i < 5; i++)
      assert_true(got[i] == iv[i]);
    free(got);
    tc_release(r);
  }
  tc_release(i32);
  tc_tensor *b = TU_NN(tc_ones(TC_BOOL, TC_SHAPE(3)));
  assert_null(tc_floor(b));
  assert_non_null(strstr(tc_last_error(), "bool"));
  tc_release(b);
}

/* Comparisons with a scalar: bool results, computed in the tensor's dtype
** (the scalar rounded to it), or in f32 for an integer tensor and a
** fractional scalar; NaN compares unequal to everything. */
static void test_scalar_comparisons(void **state) {
  (void)state;
  enum { EQ_, NE_, LT_, LE_, GT_, GE_ };
  struct { const char *name; tc_tensor *(*fn)(tc_tensor *, double);
           int cmp; } ops[] = {
    {"eq_scalar", tc_eq_scalar, EQ_}, {"ne_scalar", tc_ne_scalar, NE_},
    {"lt_scalar", tc_lt_scalar, LT_}, {"le_scalar", tc_le_scalar, LE_},
    {"gt_scalar", tc_gt_scalar, GT_}, {"ge_scalar", tc_ge_scalar, GE_},
  };
  const double scalars[] = {0.1, 1.0, -2.0, 2.5};
  double v[8] = {0.1, 1.0, -2.0, 2.5, 2.0, (double)0.1f, NAN, -INFINITY};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    for (size_t s = 0; s < sizeof scalars / sizeof scalars[0]; s++)
      for (int d = 0; d < 3; d++) {
        tc_dtype dt = d == 0 ? TC_F32 : d == 1 ? TC_F64 : TC_I32;
        int n = dt == TC_I32 ? 5 : 8;   /* integers: the whole numbers */
        double iv[5] = {1, -2, 2, 3, 0};
        tc_tensor *t = tu_from(dt, TC_SHAPE(n), dt == TC_I32 ? iv : v);
        tc_tensor *r = TU_NN(ops[k].fn(t, scalars[s]));
        assert_int_equal(tc_dtype_of(r), TC_BOOL);
        double *got = tu_read(r);
        for (int i = 0; i < n; i++) {
          double x = dt == TC_I32 ? iv[i] : v[i], sc = scalars[s];
          if (dt == TC_F32 || (dt == TC_I32 && sc != floor(sc))) {
            x = (float)x;   /* computed in f32 */
            sc = (float)sc;
          }
          bool want = ops[k].cmp == EQ_ ? x == sc : ops[k].cmp == NE_ ? x != sc
                      : ops[k].cmp == LT_ ? x < sc : ops[k].cmp == LE_ ? x <= sc
                      : ops[k].cmp == GT_ ? x > sc : x >= sc;
          if (got[i] != (double)want)
            fail_msg("%s %s(%g, %g) = %g, expected %d", tc_dtype_name(dt),
                     ops[k].name, x, scalars[s], got[i], want);
        }
        free(got);
        tc_release(t);
        tc_release(r);
      }
}

/* masked_fill against a loop: every layout of a, a mask broadcast from a
** row, a's dtype kept (the value converted to it, truncated for integers);
** a non-bool mask and values an integer cannot hold are errors. */
static void test_masked_fill(void **state) {
  (void)state;
  const int64_t shape[2] = {7, 11};
  double mv[11];
  for (int j = 0; j < 11; j++) mv[j] = (j * 5) % 3 == 0;
  tc_tensor *mask = tu_from(TC_BOOL, TC_SHAPE(1, 11), mv);
  const double values[] = {-2.75, 0.1, 1e30, NAN};
  for (int d = 0; d < 3; d++) {
    tc_dtype dt = d == 0 ? TC_F32 : d == 1 ? TC_F64 : TC_I32;
    for (int lay = 0; lay < TU_NLAYOUTS; lay++)
      for (size_t vi = 0; vi < sizeof values / sizeof values[0]; vi++) {
        double val = values[vi];
        if (dt == TC_I32 && (isnan(val) || val > 1e10))
          continue;   /* errors, below */
        tu_arr a = tu_make_unif(dt, lay, 2, shape, -10, 10, 70 + lay);
        tc_tensor *r = TU_NN(tc_masked_fill(a.t, mask, val));
        assert_int_equal(tc_dtype_of(r), dt);
        double *got = tu_read(r);
        double conv = dt == TC_F32 ? (double)(float)val
                      : dt == TC_I32 ? trunc(val) : val;
        tu_cmp c;
        tu_cmp_init(&c, "masked_fill(%g) %s %s", val, tc_dtype_name(dt),
                    tu_layout_name[lay]);
        for (int64_t i = 0; i < a.n; i++) {
          double want = mv[i % 11] != 0 ? conv : a.v[i];
          bool ok = dt == TC_I32 ? tu_same_value(got[i], want)   /* no -0 */
                                 : tu_same(got[i], want);
          if (!ok) tu_cmp_bad(&c, i, got[i], want, a.v[i]);
        }
        free(got);
        tc_release(r);
        tu_free(&a);
        TU_CMP_DONE(c);
      }
  }
  tc_tensor *i = TU_NN(tc_zeros(TC_I32, TC_SHAPE(1, 11)));
  assert_null(tc_masked_fill(i, mask, 3e9));
  assert_non_null(strstr(tc_last_error(), "does not fit"));
  assert_null(tc_masked_fill(i, mask, NAN));
  tc_tensor *fmask = TU_NN(tc_ones(TC_F32, TC_SHAPE(11)));
  assert_null(tc_masked_fill(i, fmask, 1));
  assert_non_null(strstr(tc_last_error(), "mask must be bool"));
  tc_release(fmask);
  tc_release(i);
  tc_release(mask);
}

/* PyTorch converts the scalar to the tensor's dtype: an f32 tensor plus 0.1
** is computed as float + (float)0.1, an f64 one in double. */
static void test_scalar_rounded_to_tensor_dtype(void **state) {
  (void)state;
  double v[4] = {1.0, 3.0, -7.0, 1e-3};
  tc_tensor *a32 = tu_from(TC_F32, TC_SHAPE(4), v);
  tc_tensor *a64 = tu_from(TC_F64, TC_SHAPE(4), v);
  tc_tensor *r32 = TU_NN(tc_add_scalar(a32, 0.1));
  tc_tensor *m32 = TU_NN(tc_mul_scalar(a32, 0.1));
  tc_tensor *r64 = TU_NN(tc_add_scalar(a64, 0.1));
  assert_int_equal(tc_dtype_of(r64), TC_F64);
  double *g32 = tu_read(r32), *gm = tu_read(m32), *g64 = tu_read(r64);
  for (int i = 0; i < 4; i++) {
    float x = (float)v[i];
    if (g32[i] != (double)(x + 0.1f) || gm[i] != (double)(x * 0.1f))
      fail_msg("f32 %g + 0.1 = %a, * 0.1 = %a; expected %a, %a", v[i], g32[i],
               gm[i], (double)(x + 0.1f), (double)(x * 0.1f));
    assert_true(g64[i] == v[i] + 0.1);
  }
  free(g32);
  free(gm);
  free(g64);
  tc_release(a32);
  tc_release(a64);
  tc_release(r32);
  tc_release(m32);
  tc_release(r64);
}

/* -- Type promotion ------------------------------------------------------ */

static void test_promotion(void **state) {
  (void)state;
  double iv[6] = {7, -7, 1, 0, 3, -2};
  double fv[6] = {2, 2, 3, 0.5, 3, 0.25};
  double jv[6] = {2, 2, 3, 4, 3, 5};
  tc_tensor *i32 = tu_from(TC_I32, TC_SHAPE(6), iv);
  tc_tensor *j32 = tu_from(TC_I32, TC_SHAPE(6), jv);
  tc_tensor *i64 = tu_from(TC_I64, TC_SHAPE(6), jv);
  tc_tensor *f32 = tu_from(TC_F32, TC_SHAPE(6), fv);
  tc_tensor *f64 = tu_from(TC_F64, TC_SHAPE(6), fv);
  tc_tensor *bl = tu_from(TC_BOOL, TC_SHAPE(6), iv);
  struct { tc_tensor *r; tc_dtype want; int kind; const double *a, *b;
           tc_dtype cdt; } cases[] = {
      {tc_add(i32, f32), TC_F32, B_ADD, iv, fv, TC_F32},
      {tc_mul(f32, i64), TC_F32, B_MUL, fv, jv, TC_F32},
      {tc_add(i32, i64), TC_I64, B_ADD, iv, jv, TC_I64},
      {tc_sub(i32, j32), TC_I32, B_SUB, iv, jv, TC_I32},
      {tc_mul(i32, j32), TC_I32, B_MUL, iv, jv, TC_I32},
      {tc_add(f32, f64), TC_F64, B_ADD, fv, fv, TC_F64},
      {tc_div(i32, j32), TC_F32, B_DIV, iv, jv, TC_I32}, /* true division */
      {tc_div(i32, i64), TC_F32, B_DIV, iv, jv, TC_I64},
      {tc_maximum(i32, i64), TC_I64, B_MAX, iv, jv, TC_I64},
      {tc_eq(i32, f32), TC_BOOL, B_EQ, iv, fv, TC_F32},
      {tc_lt(i32, f64), TC_BOOL, B_LT, iv, fv, TC_F64},
      {tc_add(bl, f32), TC_F32, B_ADD, NULL, fv, TC_F32},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tc_tensor *r = TU_NN(cases[k].r);
    if (tc_dtype_of(r) != cases[k].want)
      fail_msg("promotion case %zu: dtype %s, expected %s", k,
               tc_dtype_name(tc_dtype_of(r)), tc_dtype_name(cases[k].want));
    double *got = tu_read(r);
    for (int i = 0; i < 6; i++) {
      double a = cases[k].a ? cases[k].a[i] : (iv[i] != 0);
      double want = bin_ref(cases[k].kind, a, cases[k].b[i], cases[k].cdt);
      if (!tu_same_value(got[i], want))
        fail_msg("promotion case %zu [%d]: got %.9g expected %.9g", k, i,
                 got[i], want);
    }
    free(got);
    tc_release(r);
  }
  /* Unary transcendental of an int tensor gives f32. */
  tc_tensor *e = TU_NN(tc_exp(j32)), *q = TU_NN(tc_sqrt(i64));
  assert_int_equal(tc_dtype_of(e), TC_F32);
  assert_int_equal(tc_dtype_of(q), TC_F32);
  double *ge = tu_read(e), *gq = tu_read(q);
  for (int i = 0; i < 6; i++) {
    assert_true(tu_close(ge[i], exp(jv[i]), 1e-6, 0));
    assert_true(gq[i] == (double)sqrtf((float)jv[i]));
  }
  free(ge);
  free(gq);
  tc_release(e);
  tc_release(q);
  /* ... and so do the newer float ops, for i32, i64 and bool alike. */
  tc_tensor *(*const fops[5])(tc_tensor *) = {tc_expm1, tc_log1p, tc_erf,
                                               tc_softplus, tc_gelu_erf};
  double (*const frefs[5])(double) = {expm1, log1p, erf, r_softplus,
                                      r_gelu_erf};
  tc_tensor *b8 = TU_NN(tc_gt_scalar(j32, 0));
  tc_tensor *ins[3] = {j32, i64, b8};
  for (int k = 0; k < 5; k++)
    for (int w = 0; w < 3; w++) {
      tc_tensor *r = TU_NN(fops[k](ins[w]));
      assert_int_equal(tc_dtype_of(r), TC_F32);
      tc_tensor *xf = TU_NN(tc_cast(ins[w], TC_F64));
      double *gx = tu_read(xf), *gr = tu_read(r);
      for (int64_t i = 0; i < tc_numel(r); i++)
        if (!tu_close(gr[i], frefs[k](gx[i]), 1e-6, 1e-7))
          fail_msg("float op %d of %s [%d]: got %.9g expected %.9g", k,
                   tc_dtype_name(tc_dtype_of(ins[w])), (int)i, gr[i],
                   frefs[k](gx[i]));
      free(gx);
      free(gr);
      tc_release(xf);
      tc_release(r);
    }
  tc_release(b8);
  /* neg/abs/relu keep integer dtypes. */
  tc_tensor *n = TU_NN(tc_neg(i32)), *ab = TU_NN(tc_abs(i32)),
            *re = TU_NN(tc_relu(i32));
  assert_int_equal(tc_dtype_of(n), TC_I32);
  assert_int_equal(tc_dtype_of(ab), TC_I32);
  assert_int_equal(tc_dtype_of(re), TC_I32);
  double *gn = tu_read(n), *ga = tu_read(ab), *gr = tu_read(re);
  for (int i = 0; i < 6; i++)
    assert_true(gn[i] == -iv[i] && ga[i] == fabs(iv[i]) &&
                gr[i] == (iv[i] > 0 ? iv[i] : 0));
  free(gn);
  free(ga);
  free(gr);
  tc_release(n);
  tc_release(ab);
  tc_release(re);
  /* Scalars with int/bool tensors: a whole number acts like a Python int
  ** (int dtype kept, bool -> i64), any other like a Python float (f32);
  ** division and pow always give a float dtype (see tc.h). */
  struct { tc_tensor *r; tc_dtype want; const double *in; bool isbool;
           int kind; double s; } sc[] = {
      {tc_add_scalar(i32, 0.5), TC_F32, iv, false, B_ADD, 0.5},
      {tc_add_scalar(i32, 3), TC_I32, iv, false, B_ADD, 3},
      {tc_mul_scalar(i64, 2), TC_I64, jv, false, B_MUL, 2},
      {tc_sub_scalar(i64, -1.5), TC_F32, jv, false, B_SUB, -1.5},
      {tc_add_scalar(bl, 1), TC_I64, iv, true, B_ADD, 1},
      {tc_mul_scalar(bl, 0.25), TC_F32, iv, true, B_MUL, 0.25},
      {tc_div_scalar(i32, 2), TC_F32, iv, false, B_DIV, 2},
      {tc_pow_scalar(j32, 2), TC_F32, jv, false, B_POW, 2},
      {tc_mul_scalar(f64, 0.1), TC_F64, fv, false, B_MUL, 0.1},
      {tc_add_scalar(f32, 3), TC_F32, fv, false, B_ADD, 3},
  };
  for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
    tc_tensor *r = TU_NN(sc[k].r);
    if (tc_dtype_of(r) != sc[k].want)
      fail_msg("scalar case %zu: dtype %s, expected %s", k,
               tc_dtype_name(tc_dtype_of(r)), tc_dtype_name(sc[k].want));
    double *got = tu_read(r);
    for (int i = 0; i < 6; i++) {
      double x = sc[k].isbool ? (sc[k].in[i] != 0) : sc[k].in[i];
      double want = bin_ref(sc[k].kind, x, sc[k].s,
                            sc[k].want == TC_F64 ? TC_F64 : TC_F32);
      if (!tu_same_value(got[i], want))
        fail_msg("scalar case %zu [%d]: got %.9g expected %.9g", k, i, got[i],
                 want);
    }
    free(got);
    tc_release(r);
  }
  tc_release(i32);
  tc_release(j32);
  tc_release(i64);
  tc_release(f32);
  tc_release(f64);
  tc_release(bl);
}

/* Integer arithmetic is done in integers, not through double. */
static void test_int64_exact(void **state) {
  (void)state;
  int64_t a[3] = {INT64_C(3037000499), (INT64_C(1) << 60) + 1,
                  -(INT64_C(1) << 62) - 3};
  int64_t b[3] = {INT64_C(3037000499), INT64_C(1) << 60, 5};
  tc_tensor *ta = TU_NN(tc_from_data(TC_I64, TC_SHAPE(3), a, sizeof a));
  tc_tensor *tb = TU_NN(tc_from_data(TC_I64, TC_SHAPE(3), b, sizeof b));
  tc_tensor *m = TU_NN(tc_mul(ta, tb)), *s = TU_NN(tc_sub(ta, tb)),
            *g = TU_NN(tc_gt(ta, tb)), *n = TU_NN(tc_neg(ta));
  int64_t om[3], os[3], on[3];
  uint8_t og[3];
  TU_OK(tc_copy_to(m, om, sizeof om));
  TU_OK(tc_copy_to(s, os, sizeof os));
  TU_OK(tc_copy_to(g, og, sizeof og));
  TU_OK(tc_copy_to(n, on, sizeof on));
  assert_true(om[0] == INT64_C(9223372030926249001));
  assert_true(os[1] == 1 && os[2] == -(INT64_C(1) << 62) - 8);
  assert_true(og[0] == 0 && og[1] == 1 && og[2] == 0);
  assert_true(on[1] == -(INT64_C(1) << 60) - 1);
  tc_release(ta);
  tc_release(tb);
  tc_release(m);
  tc_release(s);
  tc_release(g);
  tc_release(n);
}

/* -- where, clamp, cast -------------------------------------------------- */

static void check_where(tu_arr *cond, tu_arr *a, tu_arr *b, tc_dtype rdt,
                        const char *ctx) {
  tc_tensor *r = TU_NN(tc_where(cond->t, a->t, b->t));
  int64_t s1[TC_MAX_DIMS], os[TC_MAX_DIMS];
  int n1 = tu_bshape(cond->ndim, cond->shape, a->ndim, a->shape, s1);
  int on = tu_bshape(n1, s1, b->ndim, b->shape, os);
  TU_SHAPE_IS(r, on, os);
  assert_int_equal(tc_dtype_of(r), rdt);
  double *got = tu_read(r);
  tu_cmp c;
  tu_cmp_init(&c, "where %s", ctx);
  for (int64_t i = 0; i < tu_numel(on, os); i++) {
    double cv = cond->v[tu_bidx(on, os, i, cond->ndim, cond->shape)];
    double want = cv != 0 ? a->v[tu_bidx(on, os, i, a->ndim, a->shape)]
                          : b->v[tu_bidx(on, os, i, b->ndim, b->shape)];
    if (!tu_same(got[i], want)) tu_cmp_bad(&c, i, got[i], want, cv);
  }
  free(got);
  tc_release(r);
  TU_CMP_DONE(c);
}

static void test_where(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++) {
    tc_dtype dt = FDT[d];
    double cv[4] = {1, 0, 0, 1};
    tu_arr cond = tu_make(TC_BOOL, TU_CONTIG, 2, (const int64_t[]){4, 1}, cv);
    tu_arr a = tu_make_unif(dt, TU_SLICED, 3, (const int64_t[]){3, 1, 5}, -5,
                            5, 1);
    tu_arr b = tu_make_unif(dt, TU_CONTIG, 1, (const int64_t[]){5}, 10, 20, 2);
    check_where(&cond, &a, &b, dt, "bool (4,1), sliced (3,1,5), (5)");
    tu_arr b0 = tu_make_unif(dt, TU_CONTIG, 0, NULL, 10, 20, 3);
    check_where(&cond, &a, &b0, dt, "bool (4,1), sliced (3,1,5), 0-d");
    /* A float condition is converted to bool (x != 0). */
    double *v = tu_uniform(R * C, -1, 1, 5);
    for (int64_t i = 0; i < R * C; i += 3) v[i] = 0;
    tu_arr fc = tu_make(dt, TU_TRANS, 2, (const int64_t[]){R, C}, v);
    free(v);
    tu_arr x = tu_make_unif(dt, TU_EXPAND, 2, (const int64_t[]){R, C}, -3, 3,
                            6);
    tu_arr y = tu_make_unif(dt, TU_SLICED, 2, (const int64_t[]){R, C}, 5, 9, 7);
    check_where(&fc, &x, &y, dt, "float cond transposed, expanded, sliced");
    tu_free(&cond);
    tu_free(&a);
    tu_free(&b);
    tu_free(&b0);
    tu_free(&fc);
    tu_free(&x);
    tu_free(&y);
  }
  /* where(cond, i32, f32) promotes to f32. */
  double cv[3] = {1, 0, 1}, iv[3] = {1, 2, 3}, fv[3] = {0.5, 1.5, 2.5};
  tu_arr cond = tu_make(TC_BOOL, TU_CONTIG, 1, (const int64_t[]){3}, cv);
  tu_arr ia = tu_make(TC_I32, TU_CONTIG, 1, (const int64_t[]){3}, iv);
  tu_arr fb = tu_make(TC_F32, TU_CONTIG, 1, (const int64_t[]){3}, fv);
  check_where(&cond, &ia, &fb, TC_F32, "promotion i32/f32");
  tu_free(&cond);
  tu_free(&ia);
  tu_free(&fb);
}

static void test_clamp(void **state) {
  (void)state;
  const int64_t shape[2] = {R, C};
  for (int d = 0; d < 2; d++) {
    for (int lay = 0; lay < TU_NLAYOUTS; lay++) {
      tu_arr a = tu_make_unif(FDT[d], lay, 2, shape, -4, 4, 50 + lay);
      tc_tensor *r = TU_NN(tc_clamp(a.t, -1.5, 2.25));
      tc_tensor *h = TU_NN(tc_clamp(a.t, -INFINITY, 0.5));
      assert_int_equal(tc_dtype_of(r), FDT[d]);
      double *g = tu_read(r), *gh = tu_read(h);
      tu_cmp c;
      tu_cmp_init(&c, "clamp %s %s", tc_dtype_name(FDT[d]),
                  tu_layout_name[lay]);
      for (int64_t i = 0; i < a.n; i++) {
        double x = a.v[i];
        double want = x < -1.5 ? -1.5 : x > 2.25 ? 2.25 : x;
        if (!tu_same_value(g[i], want)) tu_cmp_bad(&c, i, g[i], want, x);
        if (!tu_same_value(gh[i], x > 0.5 ? 0.5 : x))
          tu_cmp_bad(&c, i, gh[i], x > 0.5 ? 0.5 : x, x);
      }
      free(g);
      free(gh);
      tc_release(r);
      tc_release(h);
      tu_free(&a);
      TU_CMP_DONE(c);
    }
  }
  /* NaN propagates; an integer tensor with integral bounds stays integer. */
  double nv[3] = {NAN, -10, 10}, iv[4] = {-5, 0, 3, 9};
  tc_tensor *n = tu_from(TC_F32, TC_SHAPE(3), nv);
  tc_tensor *cn = TU_NN(tc_clamp(n, -1, 1));
  double *g = tu_read(cn);
  assert_true(isnan(g[0]) && g[1] == -1 && g[2] == 1);
  free(g);
  tc_tensor *i = tu_from(TC_I32, TC_SHAPE(4), iv);
  tc_tensor *ci = TU_NN(tc_clamp(i, -3, 4));
  /* torch keeps int for integral bounds; tc's scalars are doubles, which
  ** (as for the *_scalar ops) may give f32. Either way the values are
  ** exact. */
  assert_true(tc_dtype_of(ci) == TC_I32 || tc_dtype_of(ci) == TC_F32);
  g = tu_read(ci);
  assert_true(g[0] == -3 && g[1] == 0 && g[2] == 3 && g[3] == 4);
  free(g);
  tc_release(n);
  tc_release(cn);
  tc_release(i);
  tc_release(ci);
}

static double cast_ref(tc_dtype to, double x) {
  switch (to) {
  case TC_BOOL: return x != 0; /* NaN -> true */
  case TC_I32: case TC_I64: return trunc(x);
  case TC_F32: return (double)(float)x;
  default: return x;
  }
}

static void test_cast(void **state) {
  (void)state;
  double fv[12] = {2.7, -2.7, 0.5, -0.5, 0.0, -0.0, 1e6 + 0.75, -123.99,
                   100.1, 1.0 / 3, 7, -8};
  struct { tc_dtype from, to; } pairs[] = {
      {TC_F32, TC_I32}, {TC_F32, TC_I64}, {TC_F64, TC_I32}, {TC_F64, TC_F32},
      {TC_F32, TC_F64}, {TC_F32, TC_BOOL}, {TC_F64, TC_BOOL},
      {TC_F32, TC_F32}, {TC_F64, TC_I64},
  };
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    for (int lay = 0; lay < 2; lay++) {
      double v[12];
      memcpy(v, fv, sizeof v);
      tu_arr a = tu_make(pairs[k].from, lay ? TU_TRANS : TU_CONTIG, 2,
                         (const int64_t[]){3, 4}, v);
      tc_tensor *r = TU_NN(tc_cast(a.t, pairs[k].to));
      assert_int_equal(tc_dtype_of(r), pairs[k].to);
      TU_SHAPE_IS(r, 2, ((const int64_t[]){3, 4}));
      double *g = tu_read(r);
      tu_cmp c;
      tu_cmp_init(&c, "cast %s -> %s", tc_dtype_name(pairs[k].from),
                  tc_dtype_name(pairs[k].to));
      for (int i = 0; i < 12; i++)
        if (!tu_same_value(g[i], cast_ref(pairs[k].to, a.v[i])))
          tu_cmp_bad(&c, i, g[i], cast_ref(pairs[k].to, a.v[i]), a.v[i]);
      free(g);
      tc_release(r);
      tu_free(&a);
      TU_CMP_DONE(c);
    }
  }
  /* NaN -> bool is true; bool/int -> float; i64 -> f32 rounds. */
  double nv[2] = {NAN, 0};
  tc_tensor *n = tu_from(TC_F32, TC_SHAPE(2), nv);
  tc_tensor *nb = TU_NN(tc_cast(n, TC_BOOL));
  double *g = tu_read(nb);
  assert_true(g[0] == 1 && g[1] == 0);
  free(g);
  double bv[3] = {1, 0, 1};
  tc_tensor *b = tu_from(TC_BOOL, TC_SHAPE(3), bv);
  tc_tensor *bf = TU_NN(tc_cast(b, TC_F32)), *bi = TU_NN(tc_cast(b, TC_I64));
  g = tu_read(bf);
  assert_true(g[0] == 1 && g[1] == 0 && g[2] == 1);
  free(g);
  g = tu_read(bi);
  assert_true(g[0] == 1 && g[1] == 0 && g[2] == 1);
  free(g);
  int64_t big[2] = {(INT64_C(1) << 60) + 1, -(INT64_C(1) << 40) - 1};
  tc_tensor *ib = TU_NN(tc_from_data(TC_I64, TC_SHAPE(2), big, sizeof big));
  tc_tensor *fb = TU_NN(tc_cast(ib, TC_F32)), *db = TU_NN(tc_cast(ib, TC_F64));
  float of[2];
  double od[2];
  TU_OK(tc_copy_to(fb, of, sizeof of));
  TU_OK(tc_copy_to(db, od, sizeof od));
  assert_true(of[0] == (float)big[0] && of[1] == (float)big[1]);
  assert_true(od[0] == (double)big[0] && od[1] == (double)big[1]);
  tc_release(n);
  tc_release(nb);
  tc_release(b);
  tc_release(bf);
  tc_release(bi);
  tc_release(ib);
  tc_release(fb);
  tc_release(db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_layouts),
      cmocka_unit_test(test_unary_special_values),
      cmocka_unit_test(test_binary_layouts),
      cmocka_unit_test(test_binary_special_values),
      cmocka_unit_test(test_scalar_forms_layouts),
      cmocka_unit_test(test_reversed_scalar_forms),
      cmocka_unit_test(test_scalar_rounded_to_tensor_dtype),
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_masked_fill),
      cmocka_unit_test(test_scalar_comparisons),
      cmocka_unit_test(test_promotion),
      cmocka_unit_test(test_int64_exact),
      cmocka_unit_test(test_where),
      cmocka_unit_test(test_clamp),
      cmocka_unit_test(test_cast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
