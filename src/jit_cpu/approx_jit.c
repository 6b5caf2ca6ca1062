/*
** approx_jit.c -- tc's transcendentals (src/tensor/approx_body.h) expanded
** as libgccjit functions: the same body text approx.h expands as C, here in
** the builder dialect below, so compiled kernels run the eager kernels'
** sequence of operations (same types, order and constants) and agree with
** them bitwise. Each op is built once per context as ALWAYS_INLINE, so it
** disappears into the kernel's loop and the loop still vectorizes.
**
** The dialect: a value is an rvalue of a local (jb_let, named as in the
** body, so a dump reads like approx.h); A_SET binds a new local of the same
** name (GCC's SSA makes no difference); a DSL function is a C function that
** emits its body into the current block and returns its result's rvalue
** (aj_<name>_f32 / _f64, inlined at build time), an out-parameter a
** gcc_jit_rvalue **. A_SEL evaluates both arms, as C's select of two
** computed values does (no traps, no side effects). test_jit's sweeps (1M
** inputs per function and precision, compared bit for bit) check the two
** expansions agree.
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

/* approx_fma_*: the fused builtin where the eager build fuses (APPROX_FMA,
** from approx.h as this file was compiled, like the eager kernels), else a
** multiply and an add: both sides make the same choice. */
static gcc_jit_rvalue *fma_(pr *p, gcc_jit_rvalue *a, gcc_jit_rvalue *b,
                            gcc_jit_rvalue *c)
{
  if (!APPROX_FMA)
    return jb_bin(p->j, GCC_JIT_BINARY_OP_PLUS,
                  jb_bin(p->j, GCC_JIT_BINARY_OP_MULT, a, b), c);
  gcc_jit_function *fn = gcc_jit_context_get_builtin_function(
    p->j->ctx, p->t == p->j->t->f32 ? "__builtin_fmaf" : "__builtin_fma");
  gcc_jit_rvalue *args[3] = { a, b, c };
  return gcc_jit_context_new_call(p->j->ctx, NULL, fn, 3, args);
}

/* -- The builder dialect of approx_body.h ------------------------------------ */

#define A_FN(n, ...)   static gcc_jit_rvalue *A_NAME(n)(pr *ajp, __VA_ARGS__)
#define A_NAME(n)      A_PICK(aj_##n##_f32, aj_##n##_f64)
#define A_X(x)         gcc_jit_rvalue *x
#define A_XU(x)        gcc_jit_rvalue *x
#define A_OUT(x)       gcc_jit_rvalue **x
#define A_DECL(x)      gcc_jit_rvalue *x
#define A_F(n, e)      gcc_jit_rvalue *n = jb_let(ajp->j, #n, ajp->t, (e))
#define A_U(n, e)      gcc_jit_rvalue *n = jb_let(ajp->j, #n, ajp->u, (e))
#define A_SET(n, e)    n = jb_let(ajp->j, #n, ajp->t, (e))
#define A_RET(e)       return jb_let(ajp->j, "ret", ajp->t, (e))
#define A_CALL(n, ...) A_NAME(n)(ajp, __VA_ARGS__)
/* constants through double (every float one is exact there; NaN keeps its
** quiet default bits, jb_fconst) and uint64_t */
#define A_K(v)         jb_fconst(ajp->j, ajp->t, (double)(v))
#define A_KU(v)        jb_uconst(ajp->j, ajp->u, (uint64_t)(v))
#define A_BITS(x)      jb_bitcast(ajp->j, x, ajp->u)
#define A_FLOAT(u)     jb_bitcast(ajp->j, u, ajp->t)
#define A_FMA(a, b, c) fma_(ajp, a, b, c)
#define A_NEG(a)       gcc_jit_context_new_unary_op(ajp->j->ctx, NULL, \
                         GCC_JIT_UNARY_OP_MINUS, ajp->t, a)
#define A_BIN(op, a, b) jb_bin(ajp->j, GCC_JIT_BINARY_OP_##op, a, b)
#define A_ADD(a, b)    A_BIN(PLUS, a, b)
#define A_SUB(a, b)    A_BIN(MINUS, a, b)
#define A_MUL(a, b)    A_BIN(MULT, a, b)
#define A_DIV(a, b)    A_BIN(DIVIDE, a, b)
#define A_AND(a, b)    A_BIN(BITWISE_AND, a, b)
#define A_OR(a, b)     A_BIN(BITWISE_OR, a, b)
#define A_SHL(a, n)    A_BIN(LSHIFT, a, A_KU(n))
#define A_SHR(a, n)    A_BIN(RSHIFT, a, A_KU(n))
#define A_CMP(op, a, b) jb_cmp(ajp->j, GCC_JIT_COMPARISON_##op, a, b)
#define A_LT(a, b)     A_CMP(LT, a, b)
#define A_GT(a, b)     A_CMP(GT, a, b)
#define A_GE(a, b)     A_CMP(GE, a, b)
#define A_EQ(a, b)     A_CMP(EQ, a, b)
#define A_NE(a, b)     A_CMP(NE, a, b)
#define A_SEL(c, a, b) jb_sel(ajp->j, gcc_jit_rvalue_get_type(a), c, a, b)

#define APPROX_BITS 32
#include "../tensor/approx_body.h"
#undef APPROX_BITS
#define APPROX_BITS 64
#include "../tensor/approx_body.h"
#undef APPROX_BITS

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
#define OP1(K, n) \
  case KOP_##K: r = f32 ? aj_##n##_f32(&p, x) : aj_##n##_f64(&p, x); break;
  OP1(EXP, exp)
  OP1(LOG, log)
  OP1(TANH, tanh)
  OP1(SIGMOID, sigmoid)
  OP1(GELU, gelu)
  OP1(EXPM1, expm1)
  OP1(LOG1P, log1p)
  OP1(ERF, erf)
  OP1(SIN, sin)
  OP1(COS, cos)
#undef OP1
  case KOP_POW: r = f32 ? aj_pow_f32(&p, x, y) : aj_pow_f64(&p, x, y); break;
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
