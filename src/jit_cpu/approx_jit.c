/*
** approx_jit.c -- tc's transcendentals (src/tensor/approx.h) re-expressed as
** libgccjit functions, statement for statement: the same operations on the
** same types in the same order with the same constants (taken from
** approx.h's own macros), so compiled kernels agree with eager ones
** bitwise. Each function is built once per context as ALWAYS_INLINE, so it
** disappears into the kernel's loop and the loop still vectorizes.
**
** Reading guide: every line `VF(name, expr)` / `VU(name, expr)` below is the
** approx.h line `float name = expr;` / `uint32_t name = expr;` (double /
** uint64_t for f64); `name = expr` reassignments are new locals (GCC's SSA
** makes no difference). C's `c ? a : b` with both arms already evaluated
** is SEL; evaluating an arm that C would skip is harmless (no traps, no
** side effects).
**
** ORDER APPROX: this file mirrors src/tensor/approx.h line by line; a change
** there needs the same change here. test_jit's sweeps (1M inputs per
** function and precision, compared bit for bit) catch any drift.
*/
#include <string.h>

#include "jcpu_impl.h"
#include "../tensor/approx.h"

/* -- The precision being built ---------------------------------------------- */

typedef struct {
  jb *j;
  gcc_jit_type *t;   /* float or double */
  gcc_jit_type *u;   /* uint32_t or uint64_t: bit patterns, wrapping ints */
} pr;

static gcc_jit_rvalue *F(pr *p, double v) { return jb_fconst(p->j, p->t, v); }
static gcc_jit_rvalue *U(pr *p, uint64_t v) { return jb_uconst(p->j, p->u, v); }
static gcc_jit_rvalue *add(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_PLUS, a, b);
}
static gcc_jit_rvalue *sub(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_MINUS, a, b);
}
static gcc_jit_rvalue *mul(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_MULT, a, b);
}
static gcc_jit_rvalue *dv(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_DIVIDE, a, b);
}
static gcc_jit_rvalue *band(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_BITWISE_AND, a, b);
}
static gcc_jit_rvalue *bor(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_BITWISE_OR, a, b);
}
static gcc_jit_rvalue *shl(pr *p, gcc_jit_rvalue *a, int n)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_LSHIFT, a, U(p, (uint64_t)n));
}
static gcc_jit_rvalue *shr(pr *p, gcc_jit_rvalue *a, int n)
{
  return jb_bin(p->j, GCC_JIT_BINARY_OP_RSHIFT, a, U(p, (uint64_t)n));
}
static gcc_jit_rvalue *neg(pr *p, gcc_jit_rvalue *a)
{
  return gcc_jit_context_new_unary_op(p->j->ctx, NULL,
                                      GCC_JIT_UNARY_OP_MINUS, p->t, a);
}
/* approx_bits_* / approx_from_bits_* */
static gcc_jit_rvalue *bits(pr *p, gcc_jit_rvalue *x)
{
  return jb_bitcast(p->j, x, p->u);
}
static gcc_jit_rvalue *fbits(pr *p, gcc_jit_rvalue *u)
{
  return jb_bitcast(p->j, u, p->t);
}
static gcc_jit_rvalue *lt(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_cmp(p->j, GCC_JIT_COMPARISON_LT, a, b);
}
static gcc_jit_rvalue *gt(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_cmp(p->j, GCC_JIT_COMPARISON_GT, a, b);
}
static gcc_jit_rvalue *ge(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_cmp(p->j, GCC_JIT_COMPARISON_GE, a, b);
}
static gcc_jit_rvalue *eq(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_cmp(p->j, GCC_JIT_COMPARISON_EQ, a, b);
}
static gcc_jit_rvalue *ne(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  return jb_cmp(p->j, GCC_JIT_COMPARISON_NE, a, b);
}
static gcc_jit_rvalue *sel(pr *p, gcc_jit_rvalue *c, gcc_jit_rvalue *x,
                           gcc_jit_rvalue *y)
{
  return jb_sel(p->j, gcc_jit_rvalue_get_type(x), c, x, y);
}

/* `float name = expr;` and `uint32_t name = expr;` of approx.h */
#define VF(name, expr) gcc_jit_rvalue *name = jb_let(p->j, #name, p->t, (expr))
#define VU(name, expr) gcc_jit_rvalue *name = jb_let(p->j, #name, p->u, (expr))
/* `name = expr;` */
#define SF(name, expr) name = jb_let(p->j, #name, p->t, (expr))

/* approx_fma_*: the fused builtin where the eager build fuses (APPROX_FMA,
** from approx.h as this file was compiled, like the eager kernels), else a
** multiply and an add: both sides make the same choice. */
static gcc_jit_rvalue *fma_(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b,
                            gcc_jit_rvalue *c)
{
  if (!APPROX_FMA)
    return add(p, mul(p, a, b), c);
  gcc_jit_function *fn = gcc_jit_context_get_builtin_function(
    p->j->ctx, p->t == p->j->t->f32 ? "__builtin_fmaf" : "__builtin_fma");
  gcc_jit_rvalue *args[3] = { a, b, c };
  return gcc_jit_context_new_call(p->j->ctx, NULL, fn, 3, args);
}

/* Quiet NaN and infinities as exact bit patterns (C's NAN is the positive
** default quiet NaN; (double)NAN keeps that). */
static gcc_jit_rvalue *nan_(pr *p)
{
  return fbits(p, U(p, p->t == p->j->t->f32 ? 0x7fc00000u
                                            : 0x7ff8000000000000u));
}
static gcc_jit_rvalue *inf_(pr *p) { return F(p, (double)INFINITY); }

/* -- Building blocks ---------------------------------------------------------- */

/* approx_expm1_poly_f32: r + r^2 E(r) */
static gcc_jit_rvalue *expm1_poly_f32(pr *p, gcc_jit_rvalue *r)
{
  VF(pp, F(p, APPROX_F32_EXP_E4));
  SF(pp, fma_(p, pp, r, F(p, APPROX_F32_EXP_E3)));
  SF(pp, fma_(p, pp, r, F(p, APPROX_F32_EXP_E2)));
  SF(pp, fma_(p, pp, r, F(p, APPROX_F32_EXP_E1)));
  SF(pp, fma_(p, pp, r, F(p, APPROX_F32_EXP_E0)));
  VF(r2, mul(p, r, r));
  return jb_let(p->j, "em", p->t, fma_(p, r2, pp, r));
}

/* approx_exp_poly_f32 */
static gcc_jit_rvalue *exp_poly_f32(pr *p, gcc_jit_rvalue *r)
{
  return jb_let(p->j, "ep", p->t, add(p, expm1_poly_f32(p, r), F(p, 1.0)));
}

/* approx_expm1_poly_f64: r + r^2 E(r) */
static gcc_jit_rvalue *expm1_poly_f64(pr *p, gcc_jit_rvalue *r)
{
  static const double e[] = {
    APPROX_F64_EXP_E8, APPROX_F64_EXP_E7, APPROX_F64_EXP_E6,
    APPROX_F64_EXP_E5, APPROX_F64_EXP_E4, APPROX_F64_EXP_E3,
    APPROX_F64_EXP_E2, APPROX_F64_EXP_E1, APPROX_F64_EXP_E0,
  };
  VF(pp, F(p, APPROX_F64_EXP_E9));
  for (int i = 0; i < 9; i++)
    SF(pp, fma_(p, pp, r, F(p, e[i])));
  VF(r2, mul(p, r, r));
  return jb_let(p->j, "em", p->t, fma_(p, r2, pp, r));
}

/* approx_exp_poly_f64 */
static gcc_jit_rvalue *exp_poly_f64(pr *p, gcc_jit_rvalue *r)
{
  return jb_let(p->j, "ep", p->t, add(p, expm1_poly_f64(p, r), F(p, 1.0)));
}

static gcc_jit_rvalue *exp_poly(pr *p, gcc_jit_rvalue *r)
{
  return p->t == p->j->t->f32 ? exp_poly_f32(p, r) : exp_poly_f64(p, r);
}

/* approx_ln2_reduce_*: returns r, *t gets the magic sum. */
static gcc_jit_rvalue *ln2_reduce(pr *p, gcc_jit_rvalue *x, gcc_jit_rvalue **t)
{
  bool f32 = p->t == p->j->t->f32;
  VF(tt, fma_(p, x, F(p, f32 ? APPROX_F32_LOG2E : APPROX_F64_LOG2E),
              F(p, f32 ? APPROX_F32_RND : APPROX_F64_RND)));
  VF(nf, sub(p, tt, F(p, f32 ? APPROX_F32_RND : APPROX_F64_RND)));
  VF(r, fma_(p, neg(p, nf),
             F(p, f32 ? APPROX_F32_LN2_HI : APPROX_F64_LN2_HI), x));
  *t = tt;
  return jb_let(p->j, "r", p->t,
                fma_(p, neg(p, nf),
                     F(p, f32 ? APPROX_F32_LN2_LO : APPROX_F64_LN2_LO), r));
}

/* approx_pow2n_*: 2^n from the magic sum t. */
static gcc_jit_rvalue *pow2n(pr *p, gcc_jit_rvalue *t)
{
  bool f32 = p->t == p->j->t->f32;
  uint64_t bias = f32 ? APPROX_F32_RND_BITS - 127u
                      : APPROX_F64_RND_BITS - 1023u;
  return fbits(p, shl(p, sub(p, bits(p, t), U(p, bias)), f32 ? 23 : 52));
}

/* approx_scale_f32 / _f64: p * 2^n as two multiplications. */
static gcc_jit_rvalue *scale(pr *p, gcc_jit_rvalue *pv, gcc_jit_rvalue *nb)
{
  bool f32 = p->t == p->j->t->f32;
  uint64_t half = f32 ? 256u : 2048u, bias = f32 ? 255u : 2047u;
  int mant = f32 ? 23 : 52;
  VU(h, shr(p, add(p, nb, U(p, half)), 1));
  VU(e1, shl(p, sub(p, h, U(p, 1)), mant));
  VU(e2, shl(p, sub(p, add(p, nb, U(p, bias)), h), mant));
  VF(y, mul(p, pv, fbits(p, e1)));
  return jb_let(p->j, "sc", p->t, mul(p, y, fbits(p, e2)));
}

/* approx_log_reduce_*: returns kf, writes f. */
static gcc_jit_rvalue *log_reduce(pr *p, gcc_jit_rvalue *x,
                                  gcc_jit_rvalue **fout)
{
  if (p->t == p->j->t->f32) {
    VF(xs, sel(p, lt(p, x, F(p, 0x1p-126f)), mul(p, x, F(p, 0x1p24f)), x));
    VU(kadj, sel(p, lt(p, x, F(p, 0x1p-126f)), U(p, 24u), U(p, 0u)));
    VU(ix, add(p, bits(p, xs), U(p, 0x3f800000u - APPROX_F32_SQRTH_BITS)));
    VU(kb, sub(p, sub(p, shr(p, ix, 23), U(p, 127u)), kadj));
    VU(mb, add(p, band(p, ix, U(p, 0x007fffffu)),
               U(p, APPROX_F32_SQRTH_BITS)));
    *fout = jb_let(p->j, "f", p->t, sub(p, fbits(p, mb), F(p, 1.0)));
    return jb_let(p->j, "kf", p->t,
                  sub(p, fbits(p, add(p, kb, U(p, APPROX_F32_RND_BITS))),
                      F(p, APPROX_F32_RND)));
  }
  VF(xs, sel(p, lt(p, x, F(p, 0x1p-1022)), mul(p, x, F(p, 0x1p54)), x));
  VU(kadj, sel(p, lt(p, x, F(p, 0x1p-1022)), U(p, 54u), U(p, 0u)));
  VU(ix, add(p, bits(p, xs),
             U(p, 0x3ff0000000000000u - APPROX_F64_SQRTH_BITS)));
  VU(kb, sub(p, sub(p, shr(p, ix, 52), U(p, 1023u)), kadj));
  VU(mb, add(p, band(p, ix, U(p, 0x000fffffffffffffu)),
             U(p, APPROX_F64_SQRTH_BITS)));
  *fout = jb_let(p->j, "f", p->t, sub(p, fbits(p, mb), F(p, 1.0)));
  return jb_let(p->j, "kf", p->t,
                sub(p, fbits(p, add(p, kb, U(p, APPROX_F64_RND_BITS))),
                    F(p, APPROX_F64_RND)));
}

/* approx_log_corr_*: s (hfsq + R) */
static gcc_jit_rvalue *log_corr(pr *p, gcc_jit_rvalue *f, gcc_jit_rvalue *hfsq)
{
  static const double g32[] = { APPROX_F32_LOG_G2, APPROX_F32_LOG_G1,
                                APPROX_F32_LOG_G0 };
  static const double g64[] = { APPROX_F64_LOG_G5, APPROX_F64_LOG_G4,
                                APPROX_F64_LOG_G3, APPROX_F64_LOG_G2,
                                APPROX_F64_LOG_G1, APPROX_F64_LOG_G0 };
  bool f32 = p->t == p->j->t->f32;
  VF(s, dv(p, f, add(p, F(p, 2.0), f)));
  VF(z, mul(p, s, s));
  VF(g, F(p, f32 ? APPROX_F32_LOG_G3 : APPROX_F64_LOG_G6));
  int n = f32 ? 3 : 6;
  for (int i = 0; i < n; i++)
    SF(g, fma_(p, g, z, F(p, f32 ? g32[i] : g64[i])));
  VF(rr, mul(p, g, z));
  return jb_let(p->j, "corr", p->t, mul(p, s, add(p, hfsq, rr)));
}

/* -- The functions -------------------------------------------------------------- */

/* approx_exp_* */
static gcc_jit_rvalue *build_exp(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  double hi = f32 ? 89.0 : 710.0, lo = f32 ? -104.0 : -746.0;
  VF(xc, sel(p, gt(p, x, F(p, hi)), F(p, hi), x));
  SF(xc, sel(p, lt(p, x, F(p, lo)), F(p, lo), xc));
  gcc_jit_rvalue *t;
  VF(r, ln2_reduce(p, xc, &t));
  VU(nb, sub(p, bits(p, t),
             U(p, f32 ? APPROX_F32_RND_BITS : APPROX_F64_RND_BITS)));
  VF(pp, exp_poly(p, r));
  return scale(p, pp, nb);
}

/* approx_log_* */
static gcc_jit_rvalue *build_log(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  gcc_jit_rvalue *f;
  VF(kf, log_reduce(p, x, &f));
  VF(hfsq, mul(p, mul(p, F(p, 0.5), f), f));
  VF(c, log_corr(p, f, hfsq));
  VF(y, add(p, c, mul(p, kf, F(p, f32 ? APPROX_F32_LN2_LO
                                      : APPROX_F64_LN2_LO))));
  SF(y, sub(p, y, hfsq));
  SF(y, add(p, y, f));
  SF(y, add(p, y, mul(p, kf, F(p, f32 ? APPROX_F32_LN2_HI
                                      : APPROX_F64_LN2_HI))));
  SF(y, sel(p, eq(p, x, F(p, 0.0)), F(p, -(double)INFINITY), y));
  SF(y, sel(p, lt(p, x, F(p, 0.0)), nan_(p), y));
  /* !(x < INFINITY) ? x : y */
  return sel(p, lt(p, x, inf_(p)), y, x);
}

/* approx_tanh_f32 / _f64 (|x| clamped at 9.5 / 22) */
static gcc_jit_rvalue *build_tanh(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  uint64_t sgn = f32 ? APPROX_F32_SIGN : APPROX_F64_SIGN;
  double hi = f32 ? 9.5 : 22.0;
  VU(sign, band(p, bits(p, x), U(p, sgn)));
  VF(ax, fbits(p, band(p, bits(p, x), U(p, ~sgn & (f32 ? 0xffffffffu
                                                    : ~0ull)))));
  SF(ax, sel(p, gt(p, ax, F(p, hi)), F(p, hi), ax));
  VF(u, add(p, ax, ax));
  gcc_jit_rvalue *t;
  VF(r, ln2_reduce(p, u, &t));
  VF(q, f32 ? expm1_poly_f32(p, r) : expm1_poly_f64(p, r));
  VF(s, pow2n(p, t));
  VF(em1, fma_(p, s, q, sub(p, s, F(p, 1.0))));
  VF(y, dv(p, em1, add(p, em1, F(p, 2.0))));
  return jb_let(p->j, "th", p->t, fbits(p, bor(p, bits(p, y), sign)));
}

/* approx_sigmoid_* (calls the exp function of the same context) */
static gcc_jit_rvalue *build_sigmoid(pr *p, gcc_jit_rvalue *x)
{
  VF(mx, sel(p, lt(p, x, F(p, 0.0)), x, neg(p, x)));
  VF(e, jcpu_approx_call(p->j, KOP_EXP, p->t, mx, NULL));
  VF(num, sel(p, lt(p, x, F(p, 0.0)), e, F(p, 1.0)));
  return jb_let(p->j, "sg", p->t, dv(p, num, add(p, F(p, 1.0), e)));
}

/* approx_gelu_* */
static gcc_jit_rvalue *build_gelu(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  double hi = f32 ? 88.0 : 709.0, lo = f32 ? -87.0 : -708.0;
  VF(x2, mul(p, x, x));
  VF(z, mul(p, fma_(p, x2, F(p, f32 ? APPROX_F32_GELU_C3 : APPROX_F64_GELU_C3),
                    F(p, f32 ? APPROX_F32_GELU_C1 : APPROX_F64_GELU_C1)), x));
  VF(zc, sel(p, gt(p, z, F(p, hi)), F(p, hi), z));
  SF(zc, sel(p, lt(p, z, F(p, lo)), F(p, lo), zc));
  gcc_jit_rvalue *t;
  VF(r, ln2_reduce(p, zc, &t));
  VF(q, f32 ? expm1_poly_f32(p, r) : expm1_poly_f64(p, r));
  VF(s, pow2n(p, t));
  VF(e, fma_(p, s, q, s));
  VF(y, dv(p, x, add(p, F(p, 1.0), e)));
  return jb_let(p->j, "gl", p->t, sel(p, gt(p, z, F(p, hi)), F(p, -0.0), y));
}

/* approx_expm1_* */
static gcc_jit_rvalue *build_expm1(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  double hi = f32 ? 89.0 : 710.0, lo = f32 ? -30.0 : -45.0;
  double top = (f32 ? APPROX_F32_RND : APPROX_F64_RND) + (f32 ? 127.0 : 1023.0);
  VF(xc, sel(p, gt(p, x, F(p, hi)), F(p, hi), x));
  SF(xc, sel(p, lt(p, x, F(p, lo)), F(p, lo), xc));
  gcc_jit_rvalue *t;
  VF(r, ln2_reduce(p, xc, &t));
  VF(q, f32 ? expm1_poly_f32(p, r) : expm1_poly_f64(p, r));
  VF(tn, sel(p, gt(p, t, F(p, top)), sub(p, t, F(p, 1.0)), t));
  VF(s, pow2n(p, tn));
  VF(em1, fma_(p, s, q, sub(p, s, F(p, 1.0))));
  SF(em1, sel(p, gt(p, t, tn), mul(p, em1, F(p, 2.0)), em1));
  return jb_let(p->j, "em1", p->t, sel(p, eq(p, x, F(p, 0.0)), x, em1));
}

/* approx_log1p_* */
static gcc_jit_rvalue *build_log1p(pr *p, gcc_jit_rvalue *x)
{
  bool f32 = p->t == p->j->t->f32;
  VF(u, add(p, F(p, 1.0), x));
  gcc_jit_rvalue *f;
  VF(kf, log_reduce(p, u, &f));
  VF(c, sub(p, x, sub(p, u, F(p, 1.0))));
  SF(c, dv(p, c, u));
  VF(hfsq, mul(p, mul(p, F(p, 0.5), f), f));
  VF(cr, log_corr(p, f, hfsq));
  VF(y, add(p, cr, add(p, mul(p, kf, F(p, f32 ? APPROX_F32_LN2_LO
                                               : APPROX_F64_LN2_LO)), c)));
  SF(y, sub(p, y, hfsq));
  SF(y, add(p, y, f));
  SF(y, add(p, y, mul(p, kf, F(p, f32 ? APPROX_F32_LN2_HI
                                      : APPROX_F64_LN2_HI))));
  SF(y, sel(p, eq(p, u, F(p, 0.0)), F(p, -(double)INFINITY), y));
  SF(y, sel(p, lt(p, u, F(p, 0.0)), nan_(p), y));
  SF(y, sel(p, lt(p, u, inf_(p)), y, u));
  return jb_let(p->j, "l1p", p->t, sel(p, eq(p, x, F(p, 0.0)), x, y));
}

/* approx_erf_* (calls the exp function of the same context) */
static gcc_jit_rvalue *build_erf(pr *p, gcc_jit_rvalue *x)
{
  static const double q32[] = { APPROX_F32_ERF_Q5, APPROX_F32_ERF_Q4,
                                APPROX_F32_ERF_Q3, APPROX_F32_ERF_Q2,
                                APPROX_F32_ERF_Q1, APPROX_F32_ERF_Q0 };
  static const double l32[] = { APPROX_F32_ERF_L5, APPROX_F32_ERF_L4,
                                APPROX_F32_ERF_L3, APPROX_F32_ERF_L2,
                                APPROX_F32_ERF_L1, APPROX_F32_ERF_L0 };
  static const double q64[] = {
    APPROX_F64_ERF_Q10, APPROX_F64_ERF_Q9, APPROX_F64_ERF_Q8,
    APPROX_F64_ERF_Q7, APPROX_F64_ERF_Q6, APPROX_F64_ERF_Q5,
    APPROX_F64_ERF_Q4, APPROX_F64_ERF_Q3, APPROX_F64_ERF_Q2,
    APPROX_F64_ERF_Q1, APPROX_F64_ERF_Q0 };
  static const double l64[] = {
    APPROX_F64_ERF_L16, APPROX_F64_ERF_L15, APPROX_F64_ERF_L14,
    APPROX_F64_ERF_L13, APPROX_F64_ERF_L12, APPROX_F64_ERF_L11,
    APPROX_F64_ERF_L10, APPROX_F64_ERF_L9, APPROX_F64_ERF_L8,
    APPROX_F64_ERF_L7, APPROX_F64_ERF_L6, APPROX_F64_ERF_L5,
    APPROX_F64_ERF_L4, APPROX_F64_ERF_L3, APPROX_F64_ERF_L2,
    APPROX_F64_ERF_L1, APPROX_F64_ERF_L0 };
  bool f32 = p->t == p->j->t->f32;
  uint64_t sgn = f32 ? APPROX_F32_SIGN : APPROX_F64_SIGN;
  double xmax = f32 ? APPROX_F32_ERF_XMAX : APPROX_F64_ERF_XMAX;
  VU(sign, band(p, bits(p, x), U(p, sgn)));
  VF(ax, fbits(p, band(p, bits(p, x), U(p, ~sgn & (f32 ? 0xffffffffu
                                                    : ~0ull)))));
  VF(z, mul(p, ax, ax));
  VF(q, F(p, f32 ? APPROX_F32_ERF_Q6 : APPROX_F64_ERF_Q11));
  for (int i = 0; i < (f32 ? 6 : 11); i++)
    SF(q, fma_(p, q, z, F(p, f32 ? q32[i] : q64[i])));
  VF(ys, fma_(p, ax, q, ax));
  VF(bx, sel(p, gt(p, ax, F(p, xmax)), F(p, xmax), ax));
  SF(bx, sel(p, ge(p, ax, F(p, 1.0)), bx, F(p, 1.0)));
  VF(l, F(p, f32 ? APPROX_F32_ERF_L6 : APPROX_F64_ERF_L17));
  for (int i = 0; i < (f32 ? 6 : 17); i++)
    SF(l, fma_(p, l, bx, F(p, f32 ? l32[i] : l64[i])));
  VF(h, fma_(p, neg(p, bx), bx, l));
  VF(yl, sub(p, F(p, 1.0), jcpu_approx_call(p->j, KOP_EXP, p->t, h, NULL)));
  VF(y, sel(p, ge(p, ax, F(p, 1.0)), yl, ys));
  return jb_let(p->j, "erf", p->t, fbits(p, bor(p, bits(p, y), sign)));
}

/* approx_sincos_f32(x, q0, smask) */
static gcc_jit_rvalue *build_sincos_f32(pr *p, gcc_jit_rvalue *x, uint32_t q0,
                                        uint32_t smask)
{
  VU(xsign, band(p, bits(p, x), U(p, smask)));
  VF(ax, fbits(p, band(p, bits(p, x), U(p, ~APPROX_F32_SIGN))));
  VF(t, add(p, mul(p, ax, F(p, APPROX_F32_2_PI)), F(p, APPROX_F32_RND)));
  VF(kf, sub(p, t, F(p, APPROX_F32_RND)));
  VU(q, add(p, sub(p, bits(p, t), U(p, APPROX_F32_RND_BITS)), U(p, q0)));
  VF(r, sub(p, ax, mul(p, kf, F(p, APPROX_F32_PIO2_1))));
  SF(r, sub(p, r, mul(p, kf, F(p, APPROX_F32_PIO2_2))));
  VF(w, mul(p, kf, F(p, APPROX_F32_PIO2_3)));
  VF(s, sub(p, r, w));
  VF(e, sub(p, sub(p, r, s), w));
  SF(w, mul(p, kf, F(p, APPROX_F32_PIO2_4)));
  VF(s2, sub(p, s, w));
  VF(e2, sub(p, sub(p, s, s2), w));
  VF(tail, mul(p, kf, F(p, APPROX_F32_PIO2_5)));
  SF(tail, sub(p, tail, e));
  SF(tail, sub(p, tail, e2));
  SF(r, sub(p, s2, tail));
  SF(r, sel(p, gt(p, r, F(p, APPROX_F32_SINCOS_RMAX)),
            F(p, APPROX_F32_SINCOS_RMAX), r));
  SF(r, sel(p, lt(p, r, F(p, -APPROX_F32_SINCOS_RMAX)),
            F(p, -APPROX_F32_SINCOS_RMAX), r));
  VF(z, mul(p, r, r));
  VF(ps, F(p, APPROX_F32_SIN_S3));
  SF(ps, fma_(p, ps, z, F(p, APPROX_F32_SIN_S2)));
  SF(ps, fma_(p, ps, z, F(p, APPROX_F32_SIN_S1)));
  SF(ps, fma_(p, ps, z, F(p, APPROX_F32_SIN_S0)));
  SF(ps, mul(p, ps, z));
  SF(ps, mul(p, ps, r));
  SF(ps, add(p, ps, r));
  VF(pc, F(p, APPROX_F32_COS_C3));
  SF(pc, fma_(p, pc, z, F(p, APPROX_F32_COS_C2)));
  SF(pc, fma_(p, pc, z, F(p, APPROX_F32_COS_C1)));
  SF(pc, fma_(p, pc, z, F(p, APPROX_F32_COS_C0)));
  SF(pc, mul(p, pc, z));
  SF(pc, mul(p, pc, z));
  VF(hz, mul(p, F(p, 0.5), z));
  VF(one_h, sub(p, F(p, 1.0), hz));
  SF(pc, add(p, one_h, add(p, sub(p, sub(p, F(p, 1.0), one_h), hz), pc)));
  VF(y, sel(p, ne(p, band(p, q, U(p, 1u)), U(p, 0)), pc, ps));
  VU(yb, add(p, bits(p, y), shl(p, band(p, q, U(p, 2u)), 30)));
  return jb_let(p->j, "sc", p->t, fbits(p, add(p, yb, xsign)));
}

/* approx_sincos_f64(x, q0, smask) */
static gcc_jit_rvalue *build_sincos_f64(pr *p, gcc_jit_rvalue *x, uint64_t q0,
                                        uint64_t smask)
{
  static const double sc[] = { APPROX_F64_SIN_S5, APPROX_F64_SIN_S4,
                               APPROX_F64_SIN_S3, APPROX_F64_SIN_S2,
                               APPROX_F64_SIN_S1, APPROX_F64_SIN_S0 };
  static const double cc[] = { APPROX_F64_COS_C5, APPROX_F64_COS_C4,
                               APPROX_F64_COS_C3, APPROX_F64_COS_C2,
                               APPROX_F64_COS_C1, APPROX_F64_COS_C0 };
  VU(xsign, band(p, bits(p, x), U(p, smask)));
  VF(ax, fbits(p, band(p, bits(p, x), U(p, ~APPROX_F64_SIGN))));
  VF(t, add(p, mul(p, ax, F(p, APPROX_F64_2_PI)), F(p, APPROX_F64_RND)));
  VF(kf, sub(p, t, F(p, APPROX_F64_RND)));
  VU(q, add(p, sub(p, bits(p, t), U(p, APPROX_F64_RND_BITS)), U(p, q0)));
  VF(r, sub(p, ax, mul(p, kf, F(p, APPROX_F64_PIO2_1))));
  VF(w, mul(p, kf, F(p, APPROX_F64_PIO2_2)));
  VF(s, sub(p, r, w));
  VF(e, sub(p, sub(p, r, s), w));
  SF(w, mul(p, kf, F(p, APPROX_F64_PIO2_3)));
  VF(s2, sub(p, s, w));
  VF(e2, sub(p, sub(p, s, s2), w));
  VF(tail, mul(p, kf, F(p, APPROX_F64_PIO2_4)));
  SF(tail, sub(p, tail, e));
  SF(tail, sub(p, tail, e2));
  SF(r, sub(p, s2, tail));
  SF(r, sel(p, gt(p, r, F(p, APPROX_F64_SINCOS_RMAX)),
            F(p, APPROX_F64_SINCOS_RMAX), r));
  SF(r, sel(p, lt(p, r, F(p, -APPROX_F64_SINCOS_RMAX)),
            F(p, -APPROX_F64_SINCOS_RMAX), r));
  VF(z, mul(p, r, r));
  VF(ps, F(p, APPROX_F64_SIN_S6));
  for (int i = 0; i < 6; i++)
    SF(ps, fma_(p, ps, z, F(p, sc[i])));
  SF(ps, mul(p, ps, z));
  SF(ps, mul(p, ps, r));
  SF(ps, add(p, ps, r));
  VF(pc, F(p, APPROX_F64_COS_C6));
  for (int i = 0; i < 6; i++)
    SF(pc, fma_(p, pc, z, F(p, cc[i])));
  SF(pc, mul(p, pc, z));
  SF(pc, mul(p, pc, z));
  VF(hz, mul(p, F(p, 0.5), z));
  VF(one_h, sub(p, F(p, 1.0), hz));
  SF(pc, add(p, one_h, add(p, sub(p, sub(p, F(p, 1.0), one_h), hz), pc)));
  VF(y, sel(p, ne(p, band(p, q, U(p, 1u)), U(p, 0)), pc, ps));
  VU(yb, add(p, bits(p, y), shl(p, band(p, q, U(p, 2u)), 62)));
  return jb_let(p->j, "sc", p->t, fbits(p, add(p, yb, xsign)));
}

/* approx_pow_* */
static gcc_jit_rvalue *build_pow(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  bool f32 = p->t == p->j->t->f32;
  uint64_t sgn = f32 ? APPROX_F32_SIGN : APPROX_F64_SIGN;
  VU(abits, bits(p, a));
  VF(ax, fbits(p, band(p, abits, U(p, ~sgn & (f32 ? 0xffffffffu
                                                  : ~0ull)))));
  VF(bx, fbits(p, band(p, bits(p, b), U(p, ~sgn & (f32 ? 0xffffffffu
                                                       : ~0ull)))));
  /* log|a| = k ln2 + log m */
  gcc_jit_rvalue *f;
  VF(kf, log_reduce(p, ax, &f));
  VF(hfsq, mul(p, mul(p, F(p, 0.5), f), f));
  VF(lm, log_corr(p, f, hfsq));
  SF(lm, sub(p, lm, hfsq));
  SF(lm, add(p, lm, f));
  /* y = yh + yl */
  VF(tl, mul(p, b, mul(p, lm, F(p, f32 ? APPROX_F32_LOG2E
                                       : APPROX_F64_LOG2E))));
  VF(bh, fbits(p, band(p, bits(p, b), U(p, f32 ? 0xfffff000u
                                               : 0xffffffff00000000u))));
  VF(bl, sub(p, b, bh));
  VF(yh, mul(p, bh, kf));
  VF(yl, add(p, mul(p, bl, kf), tl));
  VF(y, add(p, yh, yl));
  /* 2^y = 2^n 2^r */
  double rnd = f32 ? APPROX_F32_RND : APPROX_F64_RND;
  VF(tn, add(p, y, F(p, rnd)));
  VF(nf, sub(p, tn, F(p, rnd)));
  VU(nb, sub(p, bits(p, tn),
             U(p, f32 ? APPROX_F32_RND_BITS : APPROX_F64_RND_BITS)));
  VF(r, add(p, sub(p, yh, nf), yl));
  VF(pp, exp_poly(p, mul(p, r, F(p, f32 ? APPROX_F32_LN2 : APPROX_F64_LN2))));
  VF(res, scale(p, pp, nb));
  SF(res, sel(p, gt(p, y, F(p, f32 ? 130.0 : 1026.0)), inf_(p), res));
  SF(res, sel(p, lt(p, y, F(p, f32 ? -152.0 : -1078.0)), F(p, 0.0), res));
  /* a = +-0, a = +-inf, b = +-inf */
  VF(zpow, sel(p, lt(p, b, F(p, 0.0)), inf_(p), F(p, 0.0)));
  VF(ipow, sel(p, lt(p, b, F(p, 0.0)), F(p, 0.0), inf_(p)));
  SF(res, sel(p, eq(p, ax, F(p, 0.0)), zpow, res));
  SF(res, sel(p, eq(p, ax, inf_(p)), ipow, res));
  VF(bpow, sel(p, lt(p, ax, F(p, 1.0)), zpow, ipow));
  SF(bpow, sel(p, eq(p, ax, F(p, 1.0)), F(p, 1.0), bpow));
  SF(res, sel(p, eq(p, bx, inf_(p)), bpow, res));
  /* b integer? odd? */
  double two_m = f32 ? 0x1p23 : 0x1p52, two_m1 = f32 ? 0x1p24 : 0x1p53;
  VF(tb, sel(p, lt(p, bx, F(p, two_m)), add(p, bx, F(p, two_m)), bx));
  VF(rb, sel(p, lt(p, bx, F(p, two_m)), sub(p, tb, F(p, two_m)), bx));
  VF(ng, sel(p, ne(p, band(p, bits(p, tb), U(p, 1u)), U(p, 0)),
             neg(p, res), res));
  SF(ng, sel(p, lt(p, tb, F(p, two_m1)), ng, res));
  SF(ng, sel(p, eq(p, rb, bx), ng, res));
  SF(res, sel(p, ne(p, band(p, abits, U(p, sgn)), U(p, 0)), ng, res));
  /* finite a < 0 to a non-integer power is NaN */
  VF(nn, sel(p, eq(p, rb, bx), res, nan_(p)));
  SF(nn, sel(p, gt(p, a, F(p, -(double)INFINITY)), nn, res));
  SF(res, sel(p, lt(p, a, F(p, 0.0)), nn, res));
  SF(res, sel(p, ne(p, a, a), add(p, a, b), res));
  SF(res, sel(p, ne(p, b, b), add(p, a, b), res));
  /* exact cases */
  SF(res, sel(p, eq(p, b, F(p, 2.0)), mul(p, a, a), res));
  SF(res, sel(p, eq(p, b, F(p, 1.0)), a, res));
  SF(res, sel(p, eq(p, b, F(p, -1.0)), dv(p, F(p, 1.0), a), res));
  SF(res, sel(p, eq(p, b, F(p, 0.0)), F(p, 1.0), res));
  return sel(p, eq(p, a, F(p, 1.0)), F(p, 1.0), res);
}

/* -- Function cache ----------------------------------------------------------- */

static const char *const fname[KOP__MAX] = {
  [KOP_EXP] = "exp", [KOP_LOG] = "log", [KOP_TANH] = "tanh",
  [KOP_SIGMOID] = "sigmoid", [KOP_SIN] = "sin", [KOP_COS] = "cos",
  [KOP_POW] = "pow", [KOP_GELU] = "gelu", [KOP_EXPM1] = "expm1",
  [KOP_LOG1P] = "log1p", [KOP_ERF] = "erf",
};

/* Build approx_<op>_<ty> as an always-inline function of this context. */
static gcc_jit_function *build_fn(jb *j, int op, gcc_jit_type *t)
{
  bool f32 = t == j->t->f32;
  char name[32];
  snprintf(name, sizeof name, "approx_%s_%s", fname[op], f32 ? "f32" : "f64");
  gcc_jit_param *prm[2] = {
    gcc_jit_context_new_param(j->ctx, NULL, t, op == KOP_POW ? "a" : "x"),
    gcc_jit_context_new_param(j->ctx, NULL, t, "b"),
  };
  gcc_jit_function *fn = gcc_jit_context_new_function(
    j->ctx, NULL, GCC_JIT_FUNCTION_ALWAYS_INLINE, t, name,
    op == KOP_POW ? 2 : 1, prm, 0);
  /* Build in a sub-builder; the caller's position is untouched. */
  jb sub = *j;
  sub.fn = fn;
  sub.b = gcc_jit_function_new_block(fn, "entry");
  sub.nloc = sub.nblk = 0;
  pr p = { &sub, t, f32 ? j->t->u32 : j->t->u64 };
  gcc_jit_rvalue *x = gcc_jit_param_as_rvalue(prm[0]);
  gcc_jit_rvalue *y = gcc_jit_param_as_rvalue(prm[1]);
  gcc_jit_rvalue *r = NULL;
  switch (op) {
  case KOP_EXP: r = build_exp(&p, x); break;
  case KOP_LOG: r = build_log(&p, x); break;
  case KOP_TANH: r = build_tanh(&p, x); break;
  case KOP_SIGMOID: r = build_sigmoid(&p, x); break;
  case KOP_GELU: r = build_gelu(&p, x); break;
  case KOP_EXPM1: r = build_expm1(&p, x); break;
  case KOP_LOG1P: r = build_log1p(&p, x); break;
  case KOP_ERF: r = build_erf(&p, x); break;
  case KOP_SIN:
    r = f32 ? build_sincos_f32(&p, x, 0u, APPROX_F32_SIGN)
            : build_sincos_f64(&p, x, 0u, APPROX_F64_SIGN);
    break;
  case KOP_COS:
    r = f32 ? build_sincos_f32(&p, x, 1u, 0u)
            : build_sincos_f64(&p, x, 1u, 0u);
    break;
  case KOP_POW: r = build_pow(&p, x, y); break;
  }
  gcc_jit_block_end_with_return(sub.b, NULL, r);
  return fn;
}

gcc_jit_rvalue *jcpu_approx_call(jb *j, int op, gcc_jit_type *t,
                                 gcc_jit_rvalue *x, gcc_jit_rvalue *y)
{
  int slot = op * 2 + (t == j->t->f64);
  if (!j->approx[slot])
    j->approx[slot] = build_fn(j, op, t);
  gcc_jit_rvalue *args[2] = { x, y };
  return gcc_jit_context_new_call(j->ctx, NULL, j->approx[slot],
                                  op == KOP_POW ? 2 : 1, args);
}
