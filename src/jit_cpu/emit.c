/*
** emit.c -- kernel IR -> libgccjit functions: loop nests with affine
** (stride) addressing, one local per IR instruction, each primitive with
** expr.h's exact semantics, casts with eager_convert's rules, and
** reductions in the canonical order (tensor.h; eager/reduce.c's CHUNK_FN).
**
** Shape of the generated code (static kernels bake sizes and strides in as
** constants; dynamic ones read them from `dims` once at entry):
**   MAP   decompose lo into coordinates once; per segment of the innermost
**         dim a counted loop with constant strides (so GCC vectorizes it,
**         versioning for aliasing at run time); carry into outer dims.
**   ROWS  per row, pass by pass: REDUCE = chunks of TENSOR_RED_CHUNK, each a
**         16-lane local accumulator array, lanes combined by halving, chunk
**         partials combined on a binary-counter stack (equal to
**         COMBINE_FN's pairwise-by-levels order); STORE = a loop over the
**         row (consecutive STORE passes share one loop); STORE_ROW = one
**         store. Split mode: one function per pass over a range of chunks
**         or positions, the launcher combining partials (jit.c).
**   COLS  ROWS with strided rows whose adjacent rows are contiguous: blocks
**         of rows side by side, every step above applied to each row of
**         the block in an inner loop over them (column mode, below).
** Instructions that use no LOAD are hoisted: CONST/SCALAR-only ones to the
** function entry, ROWVAR-dependent ones to just before the pass that needs
** them. All instructions are pure, so evaluating one earlier or more than
** once never changes a result.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jcpu_impl.h"
#include "../tensor/half.h"

_Static_assert(TENSOR_RED_LANES == 16, "the lane array and halving assume 16");

/* -- Codegen state -------------------------------------------------------------- */

enum { CL_INV, CL_UNI, CL_VAR };   /* no LOAD/ROWVAR; ROWVAR only; LOAD */

typedef struct {
  jb j;
  const kir_kernel *k;
  bool split;
  char entry[16];                       /* name of the function being built */
  /* the iteration space as emitted: nd outer dims (collapsed when static);
  ** stride index nd of a buffer is its row-axis stride (ROWS) */
  int nd;
  int64_t csize[TC_MAX_DIMS], cst[KIR_MAX_BUFS][TC_MAX_DIMS + 1], crow;
  gcc_jit_rvalue *size[TC_MAX_DIMS], *row_len;
  gcc_jit_rvalue *st[KIR_MAX_BUFS][TC_MAX_DIMS + 1];
  /* per function */
  gcc_jit_rvalue *bufs, *scalars, *dims, *rowvars, *partials, *lo, *hi;
  gcc_jit_rvalue *base[KIR_MAX_BUFS];   /* T_b * */
  gcc_jit_lvalue *pos[KIR_MAX_BUFS];    /* element (row/segment start) */
  gcc_jit_rvalue *at;                   /* position along `axis` */
  int axis;                             /* stride index of the loop */
  gcc_jit_lvalue *var[KIR_MAX_INSTRS];
  int avail[KIR_MAX_INSTRS];            /* scope where var holds the value */
  bool open[1024];                      /* scopes still open */
  int nscope, scope;
  gcc_jit_lvalue *rowvar[KIR_MAX_PASSES];
  bool prefetch;                        /* chunk(): prefetch the next row */
  /* column mode (emit_cols): up to colmax adjacent rows side by side */
  bool cols;
  int colmax;                           /* the block's width (col_width) */
  gcc_jit_lvalue *colacc[TC_DTYPE__MAX], *colstk[TC_DTYPE__MAX];
  gcc_jit_rvalue *colw;                 /* the row within the block, or NULL */
  gcc_jit_rvalue *ncols;                /* rows in the block */
  gcc_jit_lvalue *colarr[KIR_MAX_INSTRS];   /* ROWVAR-only values, per row */
  bool colready[KIR_MAX_INSTRS];        /* colarr holds them in this block */
  uint8_t cls[KIR_MAX_INSTRS];
  uint8_t used[KIR_MAX_INSTRS];         /* some pass needs it */
} cg;

static gcc_jit_type *ty(cg *g, int dt)
{
  jb_types *t = g->j.t;
  switch (dt) {
  case TC_BOOL: return t->u8;
  case TC_I32: return t->i32;
  case TC_I64: return t->i64;
  case TC_F32: case TC_F16: case TC_BF16: return t->f32;
  default: return t->f64;
  }
}

/* The type of a buffer element: a storage dtype's bits are uint16_t. */
static gcc_jit_type *sty(cg *g, int dt)
{
  return jcpu_is_half(dt) ? g->j.t->u16 : ty(g, dt);
}

static gcc_jit_rvalue *I64(cg *g, int64_t v)
{
  return jb_iconst(&g->j, g->j.t->i64, v);
}

/* Scope ids are never reused within a function (a stale avail[] entry must
** not come back to life). A function opens at most 2 + 2 per pass (entry,
** row, and per pass a store loop or the two lane loops), far below the
** array's size. */
static int scope_push(cg *g)
{
  TC_ASSERT(g->nscope + 1 < (int)(sizeof g->open / sizeof g->open[0]),
            "too many scopes");
  int s = ++g->nscope;
  g->open[s] = true;
  int prev = g->scope;
  g->scope = s;
  return prev;
}

static void scope_pop(cg *g, int prev)
{
  g->open[g->scope] = false;
  g->scope = prev;
}

/* -- Loops ------------------------------------------------------------------------ */

typedef struct {
  gcc_jit_lvalue *iv;
  gcc_jit_block *cond, *after;
  gcc_jit_location *loc;
  int64_t step;
} loop;

/* for (iv = from; iv < to; iv += step): leaves the builder in the body.
** The loop's control statements carry a location "<entry>.<what>:1:1"
** (what: map, rows, pN.chunks, pN.lanes, pN.tail, pN.store), so
** GCC's -fopt-info names the loop it reports on (tests assert on it). */
static gcc_jit_rvalue *loop_begin(cg *g, loop *L, const char *name,
                                  const char *what, gcc_jit_rvalue *from,
                                  gcc_jit_rvalue *to, int64_t step)
{
  jb *j = &g->j;
  char where[64];
  snprintf(where, sizeof where, "%s.%s", g->entry, what);
  L->loc = gcc_jit_context_new_location(j->ctx, where, 1, 1);
  L->iv = jb_local(j, j->t->i64, name);
  L->step = step;
  gcc_jit_block_add_assignment(j->b, L->loc, L->iv, from);
  L->cond = jb_block(j, "cond");
  gcc_jit_block *body = jb_block(j, "body");
  L->after = jb_block(j, "after");
  gcc_jit_block_end_with_jump(j->b, L->loc, L->cond);
  gcc_jit_block_end_with_conditional(
    L->cond, L->loc,
    jb_cmp(j, GCC_JIT_COMPARISON_LT, gcc_jit_lvalue_as_rvalue(L->iv), to),
    body, L->after);
  j->b = body;
  return gcc_jit_lvalue_as_rvalue(L->iv);
}

static void loop_end(cg *g, loop *L)
{
  jb *j = &g->j;
  gcc_jit_block_add_assignment_op(j->b, L->loc, L->iv, GCC_JIT_BINARY_OP_PLUS,
                                  I64(g, L->step));
  gcc_jit_block_end_with_jump(j->b, L->loc, L->cond);
  j->b = L->after;
}

/* if (c) { ... }: returns the join block; the builder is left in `then`. */
static gcc_jit_block *if_begin(cg *g, gcc_jit_rvalue *c)
{
  jb *j = &g->j;
  gcc_jit_block *then = jb_block(j, "then"), *join = jb_block(j, "join");
  gcc_jit_block_end_with_conditional(j->b, NULL, c, then, join);
  j->b = then;
  return join;
}

static void if_end(cg *g, gcc_jit_block *join)
{
  gcc_jit_block_end_with_jump(g->j.b, NULL, join);
  g->j.b = join;
}

/* while (c) { ... }: c is a pure expression (no jb_let), evaluated afresh
** each time round; the builder is left in the body. */
typedef struct { gcc_jit_block *cond, *after; } while_loop;

static void while_begin(cg *g, while_loop *w, const char *hint,
                        gcc_jit_rvalue *c)
{
  jb *j = &g->j;
  w->cond = jb_block(j, hint);
  gcc_jit_block *body = jb_block(j, "body");
  w->after = jb_block(j, "after");
  gcc_jit_block_end_with_jump(j->b, NULL, w->cond);
  gcc_jit_block_end_with_conditional(w->cond, NULL, c, body, w->after);
  j->b = body;
}

static void while_end(cg *g, while_loop *w)
{
  gcc_jit_block_end_with_jump(g->j.b, NULL, w->cond);
  g->j.b = w->after;
}

/* (v & 1) != 0 for an i64 local. */
static gcc_jit_rvalue *odd(cg *g, gcc_jit_lvalue *v)
{
  jb *j = &g->j;
  return jb_cmp(j, GCC_JIT_COMPARISON_NE,
                jb_bin(j, GCC_JIT_BINARY_OP_BITWISE_AND,
                       gcc_jit_lvalue_as_rvalue(v), I64(g, 1)), I64(g, 0));
}

/* -- Primitives ------------------------------------------------------------------ */

static gcc_jit_rvalue *zero_of(cg *g, int dt)
{
  return jcpu_is_float(dt) ? jb_fconst(&g->j, ty(g, dt), 0.0)
                      : jb_iconst(&g->j, ty(g, dt), 0);
}

/* (T)(bool) for any T (libgccjit has no bool -> float cast). */
static gcc_jit_rvalue *from_bool(cg *g, gcc_jit_rvalue *c, int dt)
{
  jb *j = &g->j;
  if (jcpu_is_float(dt))
    return jb_cast(j, jb_cast(j, c, j->t->i), ty(g, dt));
  return jb_cast(j, c, ty(g, dt));
}

/* Integer add/sub/mul wrap: computed on the unsigned type (expr.h TC_WRAP). */
static gcc_jit_rvalue *wrap_op(cg *g, enum gcc_jit_binary_op op, int dt,
                               gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
  jb *j = &g->j;
  if (dt == TC_I32 || dt == TC_I64) {
    gcc_jit_type *u = dt == TC_I32 ? j->t->u32 : j->t->u64;
    return jb_cast(j, jb_bin(j, op, jb_cast(j, a, u), jb_cast(j, b, u)),
                   ty(g, dt));
  }
  return jb_bin(j, op, a, b);   /* floats; bool (uint8_t) wraps anyway */
}

static gcc_jit_rvalue *neg_of(cg *g, int dt, gcc_jit_rvalue *a)
{
  jb *j = &g->j;
  if (jcpu_is_float(dt))
    return gcc_jit_context_new_unary_op(j->ctx, NULL, GCC_JIT_UNARY_OP_MINUS,
                                        ty(g, dt), a);
  return wrap_op(g, GCC_JIT_BINARY_OP_MINUS, dt, zero_of(g, dt), a);
}

/* (x > y || x != x) ? x : y and its mirror, for any dtype. */
static gcc_jit_rvalue *maxmin(cg *g, bool max, int dt, gcc_jit_rvalue *x,
                              gcc_jit_rvalue *y)
{
  jb *j = &g->j;
  gcc_jit_rvalue *c = jb_cmp(j, max ? GCC_JIT_COMPARISON_GT
                                    : GCC_JIT_COMPARISON_LT, x, y);
  if (jcpu_is_float(dt))
    c = gcc_jit_context_new_binary_op(
      j->ctx, NULL, GCC_JIT_BINARY_OP_LOGICAL_OR, j->t->b, c,
      jb_cmp(j, GCC_JIT_COMPARISON_NE, x, x));
  return jb_sel(j, ty(g, dt), c, x, y);
}

/* -- The storage dtypes: tensor/half.h's conversions ------------------------------ */

/* half.h's conversions in the JIT dialect (HJ): each value a local of the
** kernel, each operation a builder call (j in scope). */
#define HJ_U(name, e)   gcc_jit_rvalue *name = jb_let(j, #name, j->t->u32, (e))
#define HJ_F(name, e)   gcc_jit_rvalue *name = jb_let(j, #name, j->t->f32, (e))
#define HJ_K(v)         jb_uconst(j, j->t->u32, (uint32_t)(v))
#define HJ_BITS(x)      jb_bitcast(j, x, j->t->u32)
#define HJ_FLOAT(u)     jb_bitcast(j, u, j->t->f32)
#define HJ_BIN(op, a, b) jb_bin(j, GCC_JIT_BINARY_OP_##op, a, b)
#define HJ_ADD(a, b)    HJ_BIN(PLUS, a, b)
#define HJ_SUB(a, b)    HJ_BIN(MINUS, a, b)
#define HJ_AND(a, b)    HJ_BIN(BITWISE_AND, a, b)
#define HJ_OR(a, b)     HJ_BIN(BITWISE_OR, a, b)
#define HJ_XOR(a, b)    HJ_BIN(BITWISE_XOR, a, b)
#define HJ_SHL(a, n)    HJ_BIN(LSHIFT, a, HJ_K(n))
#define HJ_SHR(a, n)    HJ_BIN(RSHIFT, a, HJ_K(n))
#define HJ_GT(a, b)     jb_cmp(j, GCC_JIT_COMPARISON_GT, a, b)
#define HJ_GE(a, b)     jb_cmp(j, GCC_JIT_COMPARISON_GE, a, b)
#define HJ_LT(a, b)     jb_cmp(j, GCC_JIT_COMPARISON_LT, a, b)
#define HJ_EQ(a, b)     jb_cmp(j, GCC_JIT_COMPARISON_EQ, a, b)
#define HJ_SEL(c, a, b) jb_sel(j, j->t->u32, c, a, b)

/* half_f16_from_f32 / half_bf16_from_f32: f32 -> bits (as u32) */
static gcc_jit_rvalue *half_bits(cg *g, int dt, gcc_jit_rvalue *x)
{
  jb *j = &g->j;
  if (dt == TC_BF16) {
    HALF_BF16_FROM_F32(HJ, x, bits);
    return bits;
  }
  HALF_F16_FROM_F32(HJ, x, bits);
  return bits;
}

/* half_f32_from_f16 / half_f32_from_bf16: bits (any unsigned) -> f32 */
static gcc_jit_rvalue *half_value(cg *g, int dt, gcc_jit_rvalue *bits)
{
  jb *j = &g->j;
  HJ_U(h, jb_cast(j, bits, j->t->u32));
  if (dt == TC_BF16) {
    HALF_F32_FROM_BF16(HJ, h, v);
    return v;
  }
  HALF_F32_FROM_F16(HJ, h, v);
  return v;
}

/* An f32 rounded to storage dtype dt (an f32 again). */
static gcc_jit_rvalue *half_round(cg *g, int dt, gcc_jit_rvalue *x)
{
  return half_value(g, dt, half_bits(g, dt, x));
}

/* eager_convert's rules: float -> int saturates with NaN -> 0; anything ->
** bool is x != 0; int narrowing truncates; the rest are C conversions.
** The storage dtypes convert through f32 (their registers are f32). */
static gcc_jit_rvalue *convert(cg *g, gcc_jit_rvalue *x, int from, int to)
{
  jb *j = &g->j;
  if (from == to)
    return x;
  if (jcpu_is_half(to))
    return half_round(g, to, convert(g, x, jcpu_is_half(from) ? TC_F32 : from,
                                     TC_F32));
  if (jcpu_is_half(from))
    from = TC_F32;
  if (from == to)
    return x;
  if (to == TC_BOOL)
    return jb_cast(j, jb_cmp(j, GCC_JIT_COMPARISON_NE, x, zero_of(g, from)),
                   j->t->u8);
  if (jcpu_is_float(to))
    return jb_cast(j, x, ty(g, to));
  if (from == TC_I64 && to == TC_I32)
    return jb_cast(j, jb_cast(j, x, j->t->u32), j->t->i32);
  if (!jcpu_is_float(from))
    return jb_cast(j, x, ty(g, to));   /* bool/i32 widen */
  /* float -> int: keep the C conversion in range (it is undefined
  ** outside), then select the saturated values as SAT does. */
  gcc_jit_type *ft = ty(g, from), *it = ty(g, to);
  double lo = to == TC_I32 ? (double)INT32_MIN : (double)INT64_MIN;
  double hi = to == TC_I32 ? (double)INT32_MAX : (double)INT64_MAX;
  if (from == TC_F32) {   /* (float)INT_MAX rounds up to 2^31 / 2^63 */
    lo = (double)(float)lo;
    hi = (double)(float)hi;
  }
  gcc_jit_rvalue *flo = jb_fconst(j, ft, lo), *fhi = jb_fconst(j, ft, hi);
  gcc_jit_rvalue *z = zero_of(g, from);
  gcc_jit_rvalue *y = jb_sel(j, ft, jb_cmp(j, GCC_JIT_COMPARISON_NE, x, x),
                             z, x);
  y = jb_sel(j, ft, jb_cmp(j, GCC_JIT_COMPARISON_LE, y, flo), z, y);
  y = jb_sel(j, ft, jb_cmp(j, GCC_JIT_COMPARISON_GE, y, fhi), z, y);
  gcc_jit_rvalue *r = jb_let(j, "cv", it, jb_cast(j, y, it));
  int64_t imin = to == TC_I32 ? INT32_MIN : INT64_MIN;
  int64_t imax = to == TC_I32 ? INT32_MAX : INT64_MAX;
  r = jb_sel(j, it, jb_cmp(j, GCC_JIT_COMPARISON_GE, x, fhi),
             jb_iconst(j, it, imax), r);
  r = jb_sel(j, it, jb_cmp(j, GCC_JIT_COMPARISON_LE, x, flo),
             jb_iconst(j, it, imin), r);
  return jb_sel(j, it, jb_cmp(j, GCC_JIT_COMPARISON_NE, x, x),
                jb_iconst(j, it, 0), r);
}

/* CONST: (T)(v), folded here. Out-of-range integer constants (undefined in
** C) saturate as eager_convert would. */
static gcc_jit_rvalue *konst(cg *g, int dt, double v)
{
  jb *j = &g->j;
  switch (dt) {
  case TC_F32: case TC_F64:
    return jb_fconst(j, ty(g, dt), v);
  case TC_F16:
    return jb_fconst(j, ty(g, dt), half_f32_from_f16(half_f16_from_f32(
                                                       (float)v)));
  case TC_BF16:
    return jb_fconst(j, ty(g, dt), half_f32_from_bf16(half_bf16_from_f32(
                                                        (float)v)));
  case TC_BOOL:
    return jb_iconst(j, j->t->u8, v != v ? 0 : v >= 0 && v < 256.0
                                   ? (int64_t)(uint8_t)v : v != 0);
  case TC_I32:
    return jb_iconst(j, j->t->i32, v != v ? 0 : v <= INT32_MIN ? INT32_MIN
                                   : v >= INT32_MAX ? INT32_MAX
                                   : (int64_t)(int32_t)v);
  default:
    return jb_iconst(j, j->t->i64, v != v ? 0
                                   : v <= (double)INT64_MIN ? INT64_MIN
                                   : v >= (double)INT64_MAX ? INT64_MAX
                                   : (int64_t)v);
  }
}

static gcc_jit_rvalue *value(cg *g, int i);

/* Element of buffer b at the current position (pos[b] + at * stride; in
** column mode + colw * the stride of the block's rows). */
static gcc_jit_lvalue *elem(cg *g, int b)
{
  jb *j = &g->j;
  gcc_jit_rvalue *p = gcc_jit_lvalue_as_rvalue(g->pos[b]);
  gcc_jit_rvalue *idx;
  if (!g->at)
    idx = I64(g, 0);
  else if (g->st[b][g->axis] == NULL)
    idx = I64(g, 0);
  else
    idx = jb_bin(j, GCC_JIT_BINARY_OP_MULT, g->at, g->st[b][g->axis]);
  if (g->colw)
    idx = jb_bin(j, GCC_JIT_BINARY_OP_PLUS, idx,
                 jb_bin(j, GCC_JIT_BINARY_OP_MULT, g->colw,
                        g->st[b][g->nd - 1]));
  return gcc_jit_context_new_array_access(j->ctx, NULL, p, idx);
}

/* x[w] of a local array (column mode's per-row values). */
static gcc_jit_lvalue *at_col(cg *g, gcc_jit_lvalue *x, gcc_jit_rvalue *w)
{
  return gcc_jit_context_new_array_access(g->j.ctx, NULL,
                                          gcc_jit_lvalue_as_rvalue(x), w);
}

/* Buffer b's element here, as a register value of its dtype. */
static gcc_jit_rvalue *load_elem(cg *g, int b)
{
  gcc_jit_rvalue *x = gcc_jit_lvalue_as_rvalue(elem(g, b));
  int dt = g->k->buf[b].dtype;
  return jcpu_is_half(dt) ? half_value(g, dt, x) : x;
}

/* x (a value of buffer b's dtype, already rounded to it) as stored. */
static gcc_jit_rvalue *stored_form(cg *g, int b, gcc_jit_rvalue *x)
{
  int dt = g->k->buf[b].dtype;
  return jcpu_is_half(dt) ? jb_cast(&g->j, half_bits(g, dt, x), g->j.t->u16)
                          : x;
}

/* Element of gather buffer b at the current position with its gathered
** axis at index i, clamped into [0, gsize - 1]: the op's call checked
** every index (an error names a bad one), and the clamp keeps any data
** inside the buffer. */
static gcc_jit_lvalue *gather_elem(cg *g, int b, gcc_jit_rvalue *i)
{
  jb *j = &g->j;
  const kir_buf *bf = &g->k->buf[b];
  gcc_jit_type *t = j->t->i64;
  gcc_jit_rvalue *zero = I64(g, 0);
  gcc_jit_rvalue *hi = I64(g, bf->gsize > 0 ? bf->gsize - 1 : 0);
  i = jb_sel(j, t, jb_cmp(j, GCC_JIT_COMPARISON_LT, i, zero), zero, i);
  i = jb_sel(j, t, jb_cmp(j, GCC_JIT_COMPARISON_GT, i, hi), hi, i);
  gcc_jit_rvalue *p = gcc_jit_lvalue_get_address(elem(g, b), NULL);
  return gcc_jit_context_new_array_access(
    j->ctx, NULL, p, jb_bin(j, GCC_JIT_BINARY_OP_MULT, i,
                            I64(g, bf->gstride)));
}

/* ROWVAR p: a local in row mode (column mode: this row's element of a
** local array); slot p of `rowvars` in split mode. */
static gcc_jit_rvalue *rowvar_of(cg *g, int p, int dt)
{
  jb *j = &g->j;
  if (g->cols)
    return gcc_jit_lvalue_as_rvalue(at_col(g, g->rowvar[p], g->colw));
  if (!g->split)
    return gcc_jit_lvalue_as_rvalue(g->rowvar[p]);
  gcc_jit_rvalue *cp = jb_cast(j, g->rowvars, j->t->cp);
  gcc_jit_lvalue *slot = gcc_jit_context_new_array_access(j->ctx, NULL, cp,
                                                          I64(g, 8 * p));
  gcc_jit_rvalue *tp = jb_cast(j, gcc_jit_lvalue_get_address(slot, NULL),
                               gcc_jit_type_get_pointer(ty(g, dt)));
  return gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, tp, I64(g, 0)));
}

/* The expression for instruction i from its operands' values. */
static gcc_jit_rvalue *instr_expr(cg *g, int i)
{
  jb *j = &g->j;
  const kir_instr *in = &g->k->ins[i];
  int dt = in->dtype;
  gcc_jit_type *t = ty(g, dt);
  gcc_jit_rvalue *a = NULL, *b = NULL, *c = NULL;
  int n = kir_arity[in->op];
  if (n > 0) a = value(g, in->arg[0]);
  if (n > 1) b = value(g, in->arg[1]);
  if (n > 2) c = value(g, in->arg[2]);
  int da = n > 0 ? g->k->ins[in->arg[0]].dtype : dt;
  switch (in->op) {
  case KOP_ADD: return wrap_op(g, GCC_JIT_BINARY_OP_PLUS, dt, a, b);
  case KOP_SUB: return wrap_op(g, GCC_JIT_BINARY_OP_MINUS, dt, a, b);
  case KOP_MUL: return wrap_op(g, GCC_JIT_BINARY_OP_MULT, dt, a, b);
  case KOP_DIV: return jb_bin(j, GCC_JIT_BINARY_OP_DIVIDE, a, b);
  case KOP_NEG: return neg_of(g, dt, a);
  case KOP_ABS:
    if (jcpu_is_float(dt))
      return gcc_jit_context_new_unary_op(j->ctx, NULL, GCC_JIT_UNARY_OP_ABS,
                                          t, a);
    if (dt == TC_BOOL)
      return a;
    return jb_sel(j, t, jb_cmp(j, GCC_JIT_COMPARISON_LT, a, zero_of(g, dt)),
                  jb_let(j, "ng", t, neg_of(g, dt, a)), a);
  case KOP_EQ: case KOP_NE: case KOP_LT: case KOP_LE: case KOP_GT:
  case KOP_GE: {
    static const enum gcc_jit_comparison cmp[] = {
      GCC_JIT_COMPARISON_EQ, GCC_JIT_COMPARISON_NE, GCC_JIT_COMPARISON_LT,
      GCC_JIT_COMPARISON_LE, GCC_JIT_COMPARISON_GT, GCC_JIT_COMPARISON_GE,
    };
    return from_bool(g, jb_cmp(j, cmp[in->op - KOP_EQ], a, b), dt);
  }
  case KOP_MAXIMUM: return maxmin(g, true, dt, a, b);
  case KOP_MINIMUM: return maxmin(g, false, dt, a, b);
  case KOP_SEL:
    return jb_sel(j, t, jb_cmp(j, GCC_JIT_COMPARISON_NE, a, zero_of(g, da)),
                  b, c);
  case KOP_SQRT: {
    gcc_jit_function *fn = gcc_jit_context_get_builtin_function(
      j->ctx, dt == TC_F32 ? "__builtin_sqrtf" : "__builtin_sqrt");
    return gcc_jit_context_new_call(j->ctx, NULL, fn, 1, &a);
  }
  case KOP_FLOOR: case KOP_CEIL: case KOP_ROUND: case KOP_TRUNC: {
    /* expr.h's builtins; an integer is integral already */
    static const char *const name[4][2] = {
      { "__builtin_floorf", "__builtin_floor" },
      { "__builtin_ceilf", "__builtin_ceil" },
      { "__builtin_nearbyintf", "__builtin_nearbyint" },
      { "__builtin_truncf", "__builtin_trunc" },
    };
    if (!jcpu_is_float(dt))
      return a;
    gcc_jit_function *fn = gcc_jit_context_get_builtin_function(
      j->ctx, name[in->op - KOP_FLOOR][dt == TC_F64]);
    return gcc_jit_context_new_call(j->ctx, NULL, fn, 1, &a);
  }
  case KOP_EXP: case KOP_LOG: case KOP_TANH: case KOP_SIGMOID:
  case KOP_SIN: case KOP_COS: case KOP_POW: case KOP_GELU:
  case KOP_EXPM1: case KOP_LOG1P: case KOP_ERF:
    return jcpu_approx_call(j, in->op, t, a, b);
  case KOP_CONST: return konst(g, dt, in->cval);
  case KOP_SCALAR:
    return jb_cast(j, gcc_jit_lvalue_as_rvalue(gcc_jit_context_new_array_access(
                        j->ctx, NULL, g->scalars, I64(g, in->ref))), t);
  case KOP_LOAD: return load_elem(g, in->ref);
  case KOP_ROWVAR: return rowvar_of(g, in->ref, dt);
  case KOP_CAST: return convert(g, a, da, dt);
  case KOP_GATHER: {
    gcc_jit_rvalue *x = gcc_jit_lvalue_as_rvalue(gather_elem(g, in->ref, a));
    int bdt = g->k->buf[in->ref].dtype;
    return jcpu_is_half(bdt) ? half_value(g, bdt, x) : x;
  }
  }
  return NULL;
}

/* The value of instruction i here: reuse it where its scope is still open,
** else compute it (operands first) into its local. */
static gcc_jit_rvalue *value(cg *g, int i)
{
  if (g->cols && g->colready[i] && g->colw)
    return gcc_jit_lvalue_as_rvalue(at_col(g, g->colarr[i], g->colw));
  if (g->avail[i] && g->open[g->avail[i]])
    return gcc_jit_lvalue_as_rvalue(g->var[i]);
  gcc_jit_rvalue *e = instr_expr(g, i);
  if (!g->var[i]) {
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    g->var[i] = gcc_jit_function_new_local(g->j.fn, NULL,
                                           ty(g, g->k->ins[i].dtype), name);
  }
  jb_assign(&g->j, g->var[i], e);
  g->avail[i] = g->scope;
  return gcc_jit_lvalue_as_rvalue(g->var[i]);
}

/* Compute, in the current scope, every non-LOAD instruction that value v
** needs (so loops that follow find them hoisted). */
static void hoist(cg *g, int v)
{
  uint8_t mark[KIR_MAX_INSTRS] = { 0 };
  jcpu_closure(g->k, v, mark);
  for (int i = 0; i < g->k->ninstrs; i++)
    if (mark[i] && g->cls[i] != CL_VAR)
      value(g, i);
}

/* buf[out] at the current position = value v, converted to the buffer's
** dtype by eager_convert's rules. */
static void store(cg *g, int out, int v)
{
  gcc_jit_rvalue *x = value(g, v);
  x = convert(g, x, g->k->ins[v].dtype, g->k->buf[out].dtype);
  jb_assign(&g->j, elem(g, out), stored_form(g, out, x));
}

/* -- Reductions ------------------------------------------------------------------ */

/* The combine step of reduction red in dtype dt (C_ADD / C_ADDW / C_MAX /
** C_MIN of reduce.c). */
static gcc_jit_rvalue *comb(cg *g, int red, int dt, gcc_jit_rvalue *x,
                            gcc_jit_rvalue *y)
{
  if (red == KIR_RED_SUM)
    return wrap_op(g, GCC_JIT_BINARY_OP_PLUS, dt, x, y);
  return maxmin(g, red == KIR_RED_MAX, dt, x, y);
}

static gcc_jit_rvalue *identity(cg *g, int red, int dt)
{
  jb *j = &g->j;
  gcc_jit_type *t = ty(g, dt);
  bool max = red == KIR_RED_MAX;
  if (red == KIR_RED_SUM)
    return zero_of(g, dt);
  switch (dt) {
  case TC_F32: case TC_F64:
    return jb_fconst(j, t, max ? -(double)INFINITY : (double)INFINITY);
  case TC_BOOL: return jb_iconst(j, t, max ? 0 : 1);
  case TC_I32: return jb_iconst(j, t, max ? INT32_MIN : INT32_MAX);
  default: return jb_iconst(j, t, max ? INT64_MIN : INT64_MAX);
  }
}

/* acc[l] = comb(acc[l], value at position pos). `stored`: the pass's values
** are already in its buffer (see chunk), so read them back; else compute
** the value, and store it too for a storing reduction. */
static void lane_step(cg *g, const kir_pass *ps, gcc_jit_lvalue *acc,
                      gcc_jit_rvalue *l, gcc_jit_rvalue *pos, bool stored)
{
  jb *j = &g->j;
  int dt = g->k->ins[ps->value].dtype;
  g->at = pos;
  g->axis = TC_MAX_DIMS;   /* positions along the row axis */
  int prev = scope_push(g);
  gcc_jit_rvalue *v = stored ? gcc_jit_lvalue_as_rvalue(elem(g, ps->out))
                             : value(g, ps->value);
  gcc_jit_lvalue *al = gcc_jit_context_new_array_access(
    j->ctx, NULL, gcc_jit_lvalue_as_rvalue(acc), l);
  gcc_jit_rvalue *r = comb(g, ps->red, dt, gcc_jit_lvalue_as_rvalue(al), v);
  jb_assign(j, gcc_jit_context_new_array_access(
                 j->ctx, NULL, gcc_jit_lvalue_as_rvalue(acc), l), r);
  if (ps->out >= 0 && !stored)   /* a storing reduction: keep the value */
    jb_assign(j, elem(g, ps->out),
              stored_form(g, ps->out,
                          convert(g, v, dt, g->k->buf[ps->out].dtype)));
  scope_pop(g, prev);
  g->at = NULL;
}

static void prefetch_next_row(cg *g, gcc_jit_rvalue *at);

#define PF_BLOCK 64   /* positions per block of a prefetching store loop */

/* Positions [cs, cs + len) of a storing reduction's values, stored in a
** plain loop (see chunk). When prefetching, in blocks of PF_BLOCK with the
** block's prefetches ahead of it: spread over the compute, not in a burst. */
static void store_chunk(cg *g, const kir_pass *ps, gcc_jit_rvalue *cs,
                        gcc_jit_rvalue *len, const char *what)
{
  jb *j = &g->j;
  gcc_jit_rvalue *end = jb_let(j, "cend", j->t->i64,
                               jb_bin(j, GCC_JIT_BINARY_OP_PLUS, cs, len));
  gcc_jit_rvalue *from = cs, *to = end;
  loop lb, ls;
  if (g->prefetch) {
    from = loop_begin(g, &lb, "b", what, cs, end, PF_BLOCK);
    for (int q = 0; q < PF_BLOCK; q += TENSOR_RED_LANES)
      prefetch_next_row(g, jb_bin(j, GCC_JIT_BINARY_OP_PLUS, from, I64(g, q)));
    gcc_jit_rvalue *bend = jb_let(j, "bend", j->t->i64,
                                  jb_bin(j, GCC_JIT_BINARY_OP_PLUS, from,
                                         I64(g, PF_BLOCK)));
    to = jb_sel(j, j->t->i64, jb_cmp(j, GCC_JIT_COMPARISON_LT, bend, end),
                bend, end);
  }
  g->axis = TC_MAX_DIMS;
  g->at = loop_begin(g, &ls, "j", what, from, to, 1);
  int prev = scope_push(g);
  store(g, ps->out, ps->value);
  scope_pop(g, prev);
  g->at = NULL;
  loop_end(g, &ls);
  if (g->prefetch)
    loop_end(g, &lb);
}

/* Prefetch the inputs' next row at row position `at`: 16 positions, so one
** 64-byte line per f32 buffer (two for f64). Row mode, contiguous rows only;
** a prefetch past the last row is harmless (it never faults). */
static void prefetch_next_row(cg *g, gcc_jit_rvalue *at)
{
  jb *j = &g->j;
  const kir_kernel *k = g->k;
  gcc_jit_function *pf = gcc_jit_context_get_builtin_function(
    j->ctx, "__builtin_prefetch");
  for (int b = 0; b < k->nbufs; b++) {
    if (k->buf[b].role != KIR_IN || k->dynamic ||
        g->cst[b][TC_MAX_DIMS] != 1 || g->cst[b][g->nd - 1] == 0)
      continue;
    int size = (int)tensor_dtype_size[k->buf[b].dtype];
    for (int off = 0; off < TENSOR_RED_LANES * size; off += 64) {
      gcc_jit_rvalue *i = jb_bin(j, GCC_JIT_BINARY_OP_PLUS, at,
                                 I64(g, g->cst[b][g->nd - 1] + off / size));
      gcc_jit_rvalue *addr = gcc_jit_lvalue_get_address(
        gcc_jit_context_new_array_access(
          j->ctx, NULL, gcc_jit_lvalue_as_rvalue(g->pos[b]), i), NULL);
      gcc_jit_rvalue *arg = jb_cast(j, addr, j->t->vp);
      gcc_jit_block_add_eval(j->b, NULL,
                             gcc_jit_context_new_call(j->ctx, NULL, pf, 1,
                                                      &arg));
    }
  }
}

/* The lanes combined by halving, lane q with lane q + w, one loop a level
** into an array of its own, as CHUNK_FN: GCC vectorizes each level (a
** blend for max and min), where the levels written out in place stayed
** scalar, max and min a compare and branch on data each (a max over rows
** of 16 f32: 210 -> 70 us for 24576 rows). */
static gcc_jit_rvalue *halve(cg *g, const kir_pass *ps, gcc_jit_rvalue *acc)
{
  jb *j = &g->j;
  int dt = g->k->ins[ps->value].dtype, pn = (int)(ps - g->k->pass);
  gcc_jit_type *t = ty(g, dt);
  for (int w = TENSOR_RED_LANES / 2; w > 1; w /= 2) {
    gcc_jit_lvalue *h = jb_local(
      j, gcc_jit_context_new_array_type(j->ctx, NULL, t, w), "half");
    char what[32];
    snprintf(what, sizeof what, "p%d.halve%d", pn, w);
    loop lq;
    gcc_jit_rvalue *q = loop_begin(g, &lq, "q", what, I64(g, 0), I64(g, w), 1);
    gcc_jit_rvalue *a = gcc_jit_lvalue_as_rvalue(
      gcc_jit_context_new_array_access(j->ctx, NULL, acc, q));
    gcc_jit_rvalue *b = gcc_jit_lvalue_as_rvalue(
      gcc_jit_context_new_array_access(
        j->ctx, NULL, acc, jb_bin(j, GCC_JIT_BINARY_OP_PLUS, q, I64(g, w))));
    jb_assign(j, gcc_jit_context_new_array_access(j->ctx, NULL,
                                                  gcc_jit_lvalue_as_rvalue(h),
                                                  q),
              comb(g, ps->red, dt, a, b));
    loop_end(g, &lq);
    acc = gcc_jit_lvalue_as_rvalue(h);
  }
  gcc_jit_rvalue *a = gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, acc, I64(g, 0)));
  gcc_jit_rvalue *b = gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, acc, I64(g, 1)));
  return jb_let(j, "part", t, comb(g, ps->red, dt, a, b));
}

/* One chunk of positions [cs, cs + len) reduced as CHUNK_FN does; returns
** its partial (lanes combined by halving). */
static gcc_jit_rvalue *chunk(cg *g, const kir_pass *ps, gcc_jit_rvalue *cs,
                             gcc_jit_rvalue *len)
{
  jb *j = &g->j;
  int dt = g->k->ins[ps->value].dtype;
  gcc_jit_type *t = ty(g, dt);
  gcc_jit_lvalue *acc = jb_local(
    j, gcc_jit_context_new_array_type(j->ctx, NULL, t, TENSOR_RED_LANES), "acc");
  gcc_jit_rvalue *accr = gcc_jit_lvalue_as_rvalue(acc);
  for (int l = 0; l < TENSOR_RED_LANES; l++)
    jb_assign(j, gcc_jit_context_new_array_access(j->ctx, NULL, accr,
                                                  I64(g, l)),
              identity(g, ps->red, dt));
  /* full groups of 16: lane l takes position cs + i + l */
  gcc_jit_rvalue *nfull = jb_let(j, "nfull", j->t->i64,
                                 jb_bin(j, GCC_JIT_BINARY_OP_BITWISE_AND, len,
                                        I64(g, ~(int64_t)(TENSOR_RED_LANES - 1))));
  int pn = (int)(ps - g->k->pass);
  char w0[32], w1[32], w2[32];
  snprintf(w0, sizeof w0, "p%d.store", pn);
  snprintf(w1, sizeof w1, "p%d.lanes", pn);
  snprintf(w2, sizeof w2, "p%d.tail", pn);
  /* A storing reduction whose buffer holds the values exactly (same dtype)
  ** stores the chunk first, in one plain vectorized loop, and its lanes
  ** read the values back from cache: with the expression inside the lane
  ** loop, GCC checked aliasing every 16 positions and kept the lanes in
  ** memory (a 4096x4096 softmax on one thread: 13.3 -> 12.9 ms). */
  bool stored = ps->out >= 0 && g->k->buf[ps->out].dtype == dt;
  if (stored)
    store_chunk(g, ps, cs, len, w0);
  loop li, ll;
  gcc_jit_rvalue *i = loop_begin(g, &li, "i", w1, I64(g, 0), nfull,
                                 TENSOR_RED_LANES);
  gcc_jit_rvalue *gb = jb_let(j, "gb", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_PLUS, cs, i));
  if (g->prefetch && !stored)
    prefetch_next_row(g, gb);
  gcc_jit_rvalue *l = loop_begin(g, &ll, "l", w1, I64(g, 0),
                                 I64(g, TENSOR_RED_LANES), 1);
  lane_step(g, ps, acc, l, jb_bin(j, GCC_JIT_BINARY_OP_PLUS, gb, l), stored);
  loop_end(g, &ll);
  loop_end(g, &li);
  /* the tail: lane l takes position cs + nfull + l */
  gcc_jit_rvalue *tb = jb_let(j, "tb", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_PLUS, cs, nfull));
  gcc_jit_rvalue *rest = jb_let(j, "rest", j->t->i64,
                                jb_bin(j, GCC_JIT_BINARY_OP_MINUS, len, nfull));
  l = loop_begin(g, &ll, "l", w2, I64(g, 0), rest, 1);
  lane_step(g, ps, acc, l, jb_bin(j, GCC_JIT_BINARY_OP_PLUS, tb, l), stored);
  loop_end(g, &ll);
  return halve(g, ps, accr);
}

/* len of chunk c: min(TENSOR_RED_CHUNK, n - c * TENSOR_RED_CHUNK), into a local. */
static gcc_jit_rvalue *chunk_len(cg *g, gcc_jit_rvalue *cs)
{
  jb *j = &g->j;
  gcc_jit_rvalue *left = jb_let(j, "left", j->t->i64,
                                jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->row_len,
                                       cs));
  return jb_sel(j, j->t->i64,
                jb_cmp(j, GCC_JIT_COMPARISON_LT, left, I64(g, TENSOR_RED_CHUNK)),
                left, I64(g, TENSOR_RED_CHUNK));
}

/* Number of chunks of a row: at least 1 (an empty row has one empty chunk
** that yields the identity, as reduce_row does). */
static gcc_jit_rvalue *nchunks(cg *g)
{
  jb *j = &g->j;
  if (!g->k->dynamic)
    return I64(g, tensor_red_chunks(g->crow));
  gcc_jit_rvalue *m = jb_let(
    j, "nch", j->t->i64,
    jb_bin(j, GCC_JIT_BINARY_OP_DIVIDE,
           jb_bin(j, GCC_JIT_BINARY_OP_PLUS, g->row_len,
                  I64(g, TENSOR_RED_CHUNK - 1)), I64(g, TENSOR_RED_CHUNK)));
  return jb_sel(j, j->t->i64, jb_cmp(j, GCC_JIT_COMPARISON_LT, m, I64(g, 1)),
                I64(g, 1), m);
}

/* Row mode REDUCE: all chunks of the row, partials combined on a stack in
** binary-counter order, which is exactly COMBINE_FN's pairwise-by-levels
** tree (level-L node i covers the aligned block [i 2^L, (i+1) 2^L)); the
** final fold runs from the smallest block up. */
static void reduce_row(cg *g, int p)
{
  jb *j = &g->j;
  const kir_pass *ps = &g->k->pass[p];
  int dt = g->k->ins[ps->value].dtype;
  gcc_jit_type *t = ty(g, dt);
  gcc_jit_lvalue *rv = g->rowvar[p];
  if (!g->k->dynamic && g->crow <= TENSOR_RED_CHUNK) {   /* one chunk */
    jb_assign(j, rv, chunk(g, ps, I64(g, 0), I64(g, g->crow)));
    return;
  }
  gcc_jit_lvalue *stk = jb_local(
    j, gcc_jit_context_new_array_type(j->ctx, NULL, t, 64), "stk");
  gcc_jit_rvalue *stkr = gcc_jit_lvalue_as_rvalue(stk);
  gcc_jit_lvalue *sp = jb_local(j, j->t->i64, "sp");
  jb_assign(j, sp, I64(g, 0));
  gcc_jit_rvalue *spr = gcc_jit_lvalue_as_rvalue(sp);
  loop lc;
  gcc_jit_rvalue *m = nchunks(g);
  char w[32];
  snprintf(w, sizeof w, "p%d.chunks", p);
  gcc_jit_rvalue *c = loop_begin(g, &lc, "c", w, I64(g, 0), m, 1);
  gcc_jit_rvalue *cs = jb_let(j, "cs", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_MULT, c,
                                     I64(g, TENSOR_RED_CHUNK)));
  gcc_jit_rvalue *part = chunk(g, ps, cs, chunk_len(g, cs));
  /* x = part; t = c; while (t & 1) { x = comb(stk[--sp], x); t >>= 1; } */
  gcc_jit_lvalue *x = jb_local(j, t, "x"), *tc = jb_local(j, j->t->i64, "tc");
  jb_assign(j, x, part);
  jb_assign(j, tc, c);
  while_loop wl;
  while_begin(g, &wl, "carry", odd(g, tc));
  gcc_jit_block_add_assignment_op(j->b, NULL, sp, GCC_JIT_BINARY_OP_MINUS,
                                  I64(g, 1));
  gcc_jit_rvalue *top = gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, stkr, spr));
  jb_assign(j, x, comb(g, ps->red, dt, jb_let(j, "top", t, top),
                       gcc_jit_lvalue_as_rvalue(x)));
  gcc_jit_block_add_assignment_op(j->b, NULL, tc, GCC_JIT_BINARY_OP_RSHIFT,
                                  I64(g, 1));
  while_end(g, &wl);
  jb_assign(j, gcc_jit_context_new_array_access(j->ctx, NULL, stkr, spr),
            gcc_jit_lvalue_as_rvalue(x));
  gcc_jit_block_add_assignment_op(j->b, NULL, sp, GCC_JIT_BINARY_OP_PLUS,
                                  I64(g, 1));
  loop_end(g, &lc);
  /* fold: x = stk[sp-1]; for q = sp-2 .. 0: x = comb(stk[q], x) */
  jb_assign(j, rv, gcc_jit_lvalue_as_rvalue(gcc_jit_context_new_array_access(
                     j->ctx, NULL, stkr,
                     jb_bin(j, GCC_JIT_BINARY_OP_MINUS, spr, I64(g, 1)))));
  gcc_jit_lvalue *q = jb_local(j, j->t->i64, "q");
  jb_assign(j, q, jb_bin(j, GCC_JIT_BINARY_OP_MINUS, spr, I64(g, 2)));
  while_loop fl;
  while_begin(g, &fl, "fold", jb_cmp(j, GCC_JIT_COMPARISON_GE,
                                     gcc_jit_lvalue_as_rvalue(q), I64(g, 0)));
  gcc_jit_rvalue *sq = jb_let(j, "sq", t, gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, stkr,
                                     gcc_jit_lvalue_as_rvalue(q))));
  jb_assign(j, rv, comb(g, ps->red, dt, sq, gcc_jit_lvalue_as_rvalue(rv)));
  gcc_jit_block_add_assignment_op(j->b, NULL, q, GCC_JIT_BINARY_OP_MINUS,
                                  I64(g, 1));
  while_end(g, &fl);
}

/* -- Functions --------------------------------------------------------------------- */

/* The iteration space: static kernels drop size-1 dims and merge an outer
** dim into its inner neighbour when every buffer steps through both as one
** (as eager's plan_build does), so the innermost loop is as long as
** possible; dynamic ones keep the dims as given. */
static void space_init(cg *g)
{
  const kir_kernel *k = g->k;
  int nb = k->nbufs, rowax = k->ndim;
  if (!k->dynamic) {
    int n = 0;
    for (int d = 0; d < k->ndim; d++) {
      if (k->size[d] == 1)
        continue;
      bool merge = n > 0;
      for (int b = 0; b < nb && merge; b++)
        merge = g->cst[b][n - 1] == k->buf[b].stride[d] * k->size[d];
      if (merge) {
        g->csize[n - 1] *= k->size[d];
        for (int b = 0; b < nb; b++)
          g->cst[b][n - 1] = k->buf[b].stride[d];
      } else {
        g->csize[n] = k->size[d];
        for (int b = 0; b < nb; b++)
          g->cst[b][n] = k->buf[b].stride[d];
        n++;
      }
    }
    g->nd = n;
    g->crow = k->row_len;
    for (int b = 0; b < nb; b++)
      g->cst[b][TC_MAX_DIMS] = k->kind == KIR_ROWS ? k->buf[b].stride[rowax]
                                                   : 0;
  } else {
    g->nd = k->ndim;
  }
}

/* Per function: bases, and (dynamic) sizes and strides read from dims. */
static void fn_setup(cg *g)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  memset(g->var, 0, sizeof g->var);
  memset(g->avail, 0, sizeof g->avail);
  memset(g->open, 0, sizeof g->open);
  memset(g->pos, 0, sizeof g->pos);
  g->nscope = 0;
  g->scope = 0;
  g->open[0] = false;
  g->at = NULL;
  scope_push(g);   /* the function's scope */
  for (int b = 0; b < k->nbufs; b++) {
    gcc_jit_rvalue *raw = gcc_jit_lvalue_as_rvalue(
      gcc_jit_context_new_array_access(j->ctx, NULL, g->bufs, I64(g, b)));
    char name[16];
    snprintf(name, sizeof name, "buf%d", b);
    g->base[b] = jb_let(j, name, gcc_jit_type_get_pointer(sty(g, k->buf[b].dtype)),
                        jb_cast(j, raw, gcc_jit_type_get_pointer(
                                          sty(g, k->buf[b].dtype))));
  }
  int rowax = k->ndim;
  if (!k->dynamic) {
    for (int d = 0; d < g->nd; d++)
      g->size[d] = I64(g, g->csize[d]);
    g->row_len = I64(g, g->crow);
    for (int b = 0; b < k->nbufs; b++) {
      for (int d = 0; d < g->nd; d++)
        g->st[b][d] = I64(g, g->cst[b][d]);
      g->st[b][TC_MAX_DIMS] = I64(g, g->cst[b][TC_MAX_DIMS]);
    }
    return;
  }
  for (int d = 0; d < g->nd; d++)
    g->size[d] = jb_let(j, "size", j->t->i64, gcc_jit_lvalue_as_rvalue(
      gcc_jit_context_new_array_access(j->ctx, NULL, g->dims, I64(g, d))));
  g->row_len = jb_let(j, "rowlen", j->t->i64, gcc_jit_lvalue_as_rvalue(
    gcc_jit_context_new_array_access(j->ctx, NULL, g->dims,
                                     I64(g, rowax))));
  for (int b = 0; b < k->nbufs; b++)
    for (int d = 0; d <= rowax; d++) {
      gcc_jit_rvalue *s = jb_let(j, "st", j->t->i64, gcc_jit_lvalue_as_rvalue(
        gcc_jit_context_new_array_access(
          j->ctx, NULL, g->dims,
          I64(g, rowax + 1 + b * (rowax + 1) + d))));
      g->st[b][d == rowax ? TC_MAX_DIMS : d] = s;
    }
}

/* Compute every CONST/SCALAR-only instruction at the function's entry. */
static void hoist_invariants(cg *g)
{
  for (int i = 0; i < g->k->ninstrs; i++)
    if (g->cls[i] == CL_INV && g->used[i])
      value(g, i);
}

/* pos[b] = base[b] + sum over dims < upto of idx[d] * stride[b][d]. */
static void set_pos(cg *g, gcc_jit_lvalue **idx, int upto)
{
  jb *j = &g->j;
  for (int b = 0; b < g->k->nbufs; b++) {
    gcc_jit_rvalue *off = I64(g, 0);
    for (int d = 0; d < upto; d++)
      off = jb_bin(j, GCC_JIT_BINARY_OP_PLUS, off,
                   jb_bin(j, GCC_JIT_BINARY_OP_MULT,
                          gcc_jit_lvalue_as_rvalue(idx[d]), g->st[b][d]));
    if (!g->pos[b])
      g->pos[b] = jb_local(j, gcc_jit_rvalue_get_type(g->base[b]), "pos");
    jb_assign(j, g->pos[b], gcc_jit_lvalue_get_address(
      gcc_jit_context_new_array_access(j->ctx, NULL, g->base[b], off), NULL));
  }
}

/* idx = coordinates of flat index `flat` over dims [0, nd). */
static void decompose(cg *g, gcc_jit_lvalue **idx, gcc_jit_rvalue *flat)
{
  jb *j = &g->j;
  gcc_jit_lvalue *rem = jb_local(j, j->t->i64, "rem");
  jb_assign(j, rem, flat);
  for (int d = g->nd - 1; d >= 0; d--) {
    idx[d] = jb_local(j, j->t->i64, "idx");
    if (d == 0) {
      jb_assign(j, idx[d], gcc_jit_lvalue_as_rvalue(rem));
      break;
    }
    jb_assign(j, idx[d], jb_bin(j, GCC_JIT_BINARY_OP_MODULO,
                                gcc_jit_lvalue_as_rvalue(rem), g->size[d]));
    jb_assign(j, rem, jb_bin(j, GCC_JIT_BINARY_OP_DIVIDE,
                             gcc_jit_lvalue_as_rvalue(rem), g->size[d]));
  }
}

/* idx[last] was advanced by a whole segment or one row: carry outward. */
static void carry(cg *g, gcc_jit_lvalue **idx)
{
  jb *j = &g->j;
  for (int d = g->nd - 1; d > 0; d--) {
    gcc_jit_block *join = if_begin(
      g, jb_cmp(j, GCC_JIT_COMPARISON_EQ, gcc_jit_lvalue_as_rvalue(idx[d]),
                g->size[d]));
    jb_assign(j, idx[d], I64(g, 0));
    gcc_jit_block_add_assignment_op(j->b, NULL, idx[d - 1],
                                    GCC_JIT_BINARY_OP_PLUS, I64(g, 1));
    if_end(g, join);
  }
}

/* The walk over this call's points [lo, hi), a segment of the last dim at
** a time: idx is the next point's position (pos[] follows it), cur its
** flat index. walk_begin leaves the builder in the loop body and returns
** cur; walk_end advances by n points along the last dim and closes the
** function (walk_close: the caller has advanced idx itself). */
typedef struct { while_loop w; gcc_jit_lvalue *cur; } walk;

static gcc_jit_rvalue *walk_begin(cg *g, gcc_jit_lvalue **idx, walk *W,
                                  const char *hint)
{
  jb *j = &g->j;
  decompose(g, idx, g->lo);
  W->cur = jb_local(j, j->t->i64, "cur");
  jb_assign(j, W->cur, g->lo);
  gcc_jit_rvalue *cur = gcc_jit_lvalue_as_rvalue(W->cur);
  while_begin(g, &W->w, hint, jb_cmp(j, GCC_JIT_COMPARISON_LT, cur, g->hi));
  set_pos(g, idx, g->nd);
  return cur;
}

static void walk_close(cg *g, gcc_jit_lvalue **idx, walk *W,
                       gcc_jit_rvalue *n)
{
  jb *j = &g->j;
  gcc_jit_block_add_assignment_op(j->b, NULL, W->cur, GCC_JIT_BINARY_OP_PLUS,
                                  n);
  carry(g, idx);
  while_end(g, &W->w);
  gcc_jit_block_end_with_void_return(j->b, NULL);
}

static void walk_end(cg *g, gcc_jit_lvalue **idx, walk *W, gcc_jit_rvalue *n)
{
  gcc_jit_block_add_assignment_op(g->j.b, NULL, idx[g->nd - 1],
                                  GCC_JIT_BINARY_OP_PLUS, n);
  walk_close(g, idx, W, n);
}

static gcc_jit_function *new_entry(cg *g, int pass)
{
  jb *j = &g->j;
  jb_types *t = j->t;
  char *name = g->entry;
  kir_entry_name(pass, name, sizeof g->entry);
  gcc_jit_param *prm[7];
  int n = 0;
  prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->cpp, "bufs");
  prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->dp, "scalars");
  prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->i64p, "dims");
  if (pass >= 0) {
    prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->vp, "rowvars");
    prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->vp, "partials");
  }
  prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->i64, "lo");
  prm[n++] = gcc_jit_context_new_param(j->ctx, NULL, t->i64, "hi");
  gcc_jit_function *fn = gcc_jit_context_new_function(
    j->ctx, NULL, GCC_JIT_FUNCTION_EXPORTED, t->v, name, n, prm, 0);
  j->fn = fn;
  j->b = gcc_jit_function_new_block(fn, "entry");
  j->nloc = j->nblk = 0;
  g->bufs = gcc_jit_param_as_rvalue(prm[0]);
  g->scalars = gcc_jit_param_as_rvalue(prm[1]);
  g->dims = gcc_jit_param_as_rvalue(prm[2]);
  g->rowvars = pass >= 0 ? gcc_jit_param_as_rvalue(prm[3]) : NULL;
  g->partials = pass >= 0 ? gcc_jit_param_as_rvalue(prm[4]) : NULL;
  g->lo = gcc_jit_param_as_rvalue(prm[n - 2]);
  g->hi = gcc_jit_param_as_rvalue(prm[n - 1]);
  fn_setup(g);
  hoist_invariants(g);
  return fn;
}

/* MAP: segments of the innermost dim, every STORE pass in one loop. */
/* An in-place MAP segment of len points, in blocks: compute every output
** of a block into local arrays, then store them. libgccjit has no
** `restrict`, and an output that is also an input (same point) defeats
** GCC's runtime alias check, leaving the loop scalar; the local arrays
** alias nothing, so both loops vectorize. Same-point reads come before
** writes, as in the plain loop. */
#define MAP_BLOCK 256

static void map_blocked(cg *g, gcc_jit_rvalue *len)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  gcc_jit_lvalue *tmp[KIR_MAX_PASSES];
  for (int p = 0; p < k->npasses; p++) {
    char name[16];
    snprintf(name, sizeof name, "blk%d", p);
    gcc_jit_type *at = gcc_jit_context_new_array_type(
      j->ctx, NULL, sty(g, k->buf[k->pass[p].out].dtype), MAP_BLOCK);
    tmp[p] = gcc_jit_function_new_local(j->fn, NULL, at, name);
  }
  loop lb, l1, l2;
  gcc_jit_rvalue *bs = loop_begin(g, &lb, "bs", "map.blocks", I64(g, 0), len,
                                  MAP_BLOCK);
  gcc_jit_rvalue *rest = jb_bin(j, GCC_JIT_BINARY_OP_MINUS, len, bs);
  gcc_jit_rvalue *blen = jb_let(
    j, "blen", j->t->i64,
    jb_sel(j, j->t->i64,
           jb_cmp(j, GCC_JIT_COMPARISON_GT, rest, I64(g, MAP_BLOCK)),
           I64(g, MAP_BLOCK), rest));
  gcc_jit_rvalue *i = loop_begin(g, &l1, "i", "map", I64(g, 0), blen, 1);
  g->at = jb_bin(j, GCC_JIT_BINARY_OP_PLUS, bs, i);
  int prev = scope_push(g);
  for (int p = 0; p < k->npasses; p++) {
    const kir_pass *ps = &k->pass[p];
    gcc_jit_rvalue *x = stored_form(g, ps->out,
                                    convert(g, value(g, ps->value),
                                            k->ins[ps->value].dtype,
                                            k->buf[ps->out].dtype));
    jb_assign(j, gcc_jit_context_new_array_access(
                   j->ctx, NULL, gcc_jit_lvalue_as_rvalue(tmp[p]), i), x);
  }
  scope_pop(g, prev);
  loop_end(g, &l1);
  gcc_jit_rvalue *i2 = loop_begin(g, &l2, "i2", "map.store", I64(g, 0),
                                  blen, 1);
  g->at = jb_bin(j, GCC_JIT_BINARY_OP_PLUS, bs, i2);
  for (int p = 0; p < k->npasses; p++)
    jb_assign(j, elem(g, k->pass[p].out),
              gcc_jit_lvalue_as_rvalue(gcc_jit_context_new_array_access(
                j->ctx, NULL, gcc_jit_lvalue_as_rvalue(tmp[p]), i2)));
  g->at = NULL;
  loop_end(g, &l2);
  loop_end(g, &lb);
}

/* Every STORE pass over len points from pos[] along the innermost dim. */
static void map_segment(cg *g, gcc_jit_rvalue *len, const char *what)
{
  const kir_kernel *k = g->k;
  g->axis = g->nd - 1;
  if (k->inplace) {
    map_blocked(g, len);
    return;
  }
  loop li;
  gcc_jit_rvalue *i = loop_begin(g, &li, "i", what, I64(g, 0), len, 1);
  g->at = i;
  int prev = scope_push(g);
  for (int p = 0; p < k->npasses; p++)
    store(g, k->pass[p].out, k->pass[p].value);
  scope_pop(g, prev);
  g->at = NULL;
  loop_end(g, &li);
}

/* Tiles of a transposing MAP (eager's pointwise.c walks the same way): a
** buffer that strides through the innermost dim but steps by one element
** through the dim outside it touches one element per cache line in the
** plain walk. Such a static kernel takes whole runs of MAP_TB rows at
** once, in MAP_TB x MAP_TB tiles, so each line is used whole while the
** tile is in cache. Pointwise: the order changes no value. */
#define MAP_TB 64
#define MAP_TB_MIN 16

static bool map_tiled(const cg *g)
{
  const kir_kernel *k = g->k;
  int last = g->nd - 1;
  if (k->dynamic || g->nd < 2 || g->csize[last] < MAP_TB_MIN ||
      g->csize[last - 1] < MAP_TB_MIN)
    return false;
  for (int b = 0; b < k->nbufs; b++)
    if (g->cst[b][last] != 0 && g->cst[b][last] != 1 &&
        g->cst[b][last - 1] == 1)
      return true;
  return false;
}

/* rows (>= 2) whole rows from idx (idx[last] is 0), tile by tile: for each
** MAP_TB columns, each row's segment of them. */
static void map_tile_rows(cg *g, gcc_jit_rvalue *rows)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  int last = g->nd - 1, t = last - 1;
  gcc_jit_rvalue *start[KIR_MAX_BUFS];
  for (int b = 0; b < k->nbufs; b++)
    start[b] = jb_let(j, "tpos", gcc_jit_rvalue_get_type(g->base[b]),
                      gcc_jit_lvalue_as_rvalue(g->pos[b]));
  loop lc, lr;
  gcc_jit_rvalue *c0 = loop_begin(g, &lc, "c0", "map.tiles", I64(g, 0),
                                  g->size[last], MAP_TB);
  gcc_jit_rvalue *rest = jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->size[last], c0);
  gcc_jit_rvalue *w = jb_let(
    j, "tw", j->t->i64,
    jb_sel(j, j->t->i64, jb_cmp(j, GCC_JIT_COMPARISON_GT, rest,
                                I64(g, MAP_TB)), I64(g, MAP_TB), rest));
  gcc_jit_rvalue *r = loop_begin(g, &lr, "r", "map.tile", I64(g, 0), rows, 1);
  for (int b = 0; b < k->nbufs; b++) {
    gcc_jit_rvalue *off = jb_bin(
      j, GCC_JIT_BINARY_OP_PLUS,
      jb_bin(j, GCC_JIT_BINARY_OP_MULT, r, g->st[b][t]),
      jb_bin(j, GCC_JIT_BINARY_OP_MULT, c0, g->st[b][last]));
    jb_assign(j, g->pos[b], gcc_jit_lvalue_get_address(
      gcc_jit_context_new_array_access(j->ctx, NULL, start[b], off), NULL));
  }
  map_segment(g, w, "map");
  loop_end(g, &lr);
  loop_end(g, &lc);
}

static void emit_map(cg *g)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  new_entry(g, -1);
  if (g->nd == 0) {   /* one point: a single dim of size 1, strides 0 */
    g->nd = 1;
    g->size[0] = I64(g, 1);
    for (int b = 0; b < k->nbufs; b++)
      g->st[b][0] = I64(g, 0);
  }
  int last = g->nd - 1;
  gcc_jit_lvalue *idx[TC_MAX_DIMS];
  walk seg;
  gcc_jit_rvalue *curr = walk_begin(g, idx, &seg, "seg");
  gcc_jit_lvalue *n = jb_local(j, j->t->i64, "n");   /* points done */
  gcc_jit_block *join = NULL;   /* where the two walks meet, if tiled */
  if (map_tiled(g)) {
    /* At a row's start with MAP_TB rows (or the rest of the dim outside,
    ** if at least 2) within [cur, hi): a run of tiles. */
    int t = last - 1;
    gcc_jit_rvalue *rest = jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->size[t],
                                  gcc_jit_lvalue_as_rvalue(idx[t]));
    gcc_jit_rvalue *rows = jb_let(
      j, "trows", j->t->i64,
      jb_sel(j, j->t->i64, jb_cmp(j, GCC_JIT_COMPARISON_GT, rest,
                                  I64(g, MAP_TB)), I64(g, MAP_TB), rest));
    gcc_jit_rvalue *pts = jb_let(j, "tpts", j->t->i64,
                                 jb_bin(j, GCC_JIT_BINARY_OP_MULT, rows,
                                        g->size[last]));
    gcc_jit_rvalue *ok = jb_bin(
      j, GCC_JIT_BINARY_OP_LOGICAL_AND,
      jb_cmp(j, GCC_JIT_COMPARISON_EQ, gcc_jit_lvalue_as_rvalue(idx[last]),
             I64(g, 0)),
      jb_bin(j, GCC_JIT_BINARY_OP_LOGICAL_AND,
             jb_cmp(j, GCC_JIT_COMPARISON_GE, rows, I64(g, 2)),
             jb_cmp(j, GCC_JIT_COMPARISON_LE, pts,
                    jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->hi, curr))));
    gcc_jit_block *tiles = jb_block(j, "tiles");
    gcc_jit_block *plain = jb_block(j, "plain");
    join = jb_block(j, "stepped");
    gcc_jit_block_end_with_conditional(j->b, NULL, ok, tiles, plain);
    j->b = tiles;
    map_tile_rows(g, rows);
    jb_assign(j, n, pts);
    /* idx[last] stays 0: the rows advance the dim outside it */
    gcc_jit_block_add_assignment_op(j->b, NULL, idx[t],
                                    GCC_JIT_BINARY_OP_PLUS, rows);
    gcc_jit_block_end_with_jump(j->b, NULL, join);
    j->b = plain;
  }
  gcc_jit_rvalue *len = jb_let(
    j, "len", j->t->i64, jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->size[last],
                                gcc_jit_lvalue_as_rvalue(idx[last])));
  gcc_jit_rvalue *left = jb_let(j, "left", j->t->i64,
                                jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->hi,
                                       curr));
  len = jb_let(j, "len", j->t->i64,
               jb_sel(j, j->t->i64,
                      jb_cmp(j, GCC_JIT_COMPARISON_GT, len, left), left, len));
  map_segment(g, len, "map");
  jb_assign(j, n, len);
  gcc_jit_block_add_assignment_op(j->b, NULL, idx[last],
                                  GCC_JIT_BINARY_OP_PLUS, len);
  if (join) {
    gcc_jit_block_end_with_jump(j->b, NULL, join);
    j->b = join;
  }
  walk_close(g, idx, &seg, gcc_jit_lvalue_as_rvalue(n));
}

/* STORE passes [p0, p1) in one loop over row positions [from, to). */
static void store_loop(cg *g, int p0, int p1, gcc_jit_rvalue *from,
                       gcc_jit_rvalue *to)
{
  const kir_kernel *k = g->k;
  for (int p = p0; p < p1; p++)
    hoist(g, k->pass[p].value);
  loop lj;
  char w[32];
  snprintf(w, sizeof w, "p%d.store", p0);
  g->axis = TC_MAX_DIMS;
  gcc_jit_rvalue *pos = loop_begin(g, &lj, "j", w, from, to, 1);
  g->at = pos;
  int prev = scope_push(g);
  for (int p = p0; p < p1; p++)
    store(g, k->pass[p].out, k->pass[p].value);
  scope_pop(g, prev);
  g->at = NULL;
  loop_end(g, &lj);
}

/* STORE_ROW: the row-level value, stored once at the row's element. */
static void store_row(cg *g, int p)
{
  g->at = NULL;
  store(g, g->k->pass[p].out, g->k->pass[p].value);
}

/* -- Column mode -----------------------------------------------------------------
** A ROWS kernel whose rows are strided (a reduction over a dim that is not
** innermost: a bias gradient's sum over the batch, a softmax over dim 0)
** but whose adjacent rows are adjacent in memory reads each row's elements
** a whole row stride apart: one cache line per element, and with a
** power-of-two stride every line in the same cache set. Column mode takes
** up to COLS_MAX adjacent rows side by side: every step over a row position
** reads that many contiguous elements, and the innermost loop, over the rows
** of the block, vectorizes. Each row still reduces in the canonical order
** (its own 16 lanes, halving, chunk partials pairwise), so results equal
** row mode's bit for bit. */

#define COLS_MAX 256                 /* rows side by side, at most */
#define COLS_MIN 8
#define COLS_FRAME_BYTES (64 << 10)  /* column mode's arrays, at most */

/* The depth of reduce_row's chunk stack for rows of row_len (0: one
** chunk, no stack): at most one partial per level. */
static int chunk_levels(int64_t row_len)
{
  int64_t m = tensor_red_chunks(row_len);
  int depth = 1;
  while ((int64_t)1 << (depth - 1) < m)
    depth++;
  return m == 1 ? 0 : depth;
}

/* The block width of column mode for k, or 0 when k runs in row mode.
** Column mode: static row-mode ROWS kernels without gathers whose inputs
** all step through the rows' positions with a stride other than 1 and
** through adjacent rows (the innermost outer dim) with stride 1 or 0,
** over at least COLS_MIN rows. The width is the largest power of two up
** to COLS_MAX whose per-row arrays (lanes and stack per dtype, row values,
** hoisted values) fit in COLS_FRAME_BYTES of stack: wide blocks read long
** runs at each row position (16 x 24576 summed over dim 0 on Zen 3: 9.5
** GB/s 32 rows wide, 22 at 256). */
static int col_width(const cg *g)
{
  const kir_kernel *k = g->k;
  if (k->kind != KIR_ROWS || k->dynamic || g->nd == 0 ||
      g->csize[g->nd - 1] < COLS_MIN)
    return 0;
  for (int i = 0; i < k->ninstrs; i++)
    if (k->ins[i].op == KOP_GATHER)
      return 0;
  bool strided = false;
  for (int b = 0; b < k->nbufs; b++) {
    if (k->buf[b].role != KIR_IN)
      continue;
    int64_t across = g->cst[b][g->nd - 1], along = g->cst[b][TC_MAX_DIMS];
    if ((across != 0 && across != 1) || along == 1)
      return 0;
    strided |= along != 0;
  }
  if (!strided)
    return 0;
  int64_t per_row = 0;
  bool seen[TC_DTYPE__MAX] = { false };
  for (int p = 0; p < k->npasses; p++) {
    if (k->pass[p].kind != KIR_PASS_REDUCE)
      continue;
    int dt = k->ins[k->pass[p].value].dtype;
    per_row += 8;   /* its row value */
    if (!seen[dt])
      per_row += 8 * (TENSOR_RED_LANES + chunk_levels(g->crow));
    seen[dt] = true;
  }
  for (int i = 0; i < k->ninstrs; i++)
    if (g->cls[i] == CL_UNI && g->used[i])
      per_row += 8;
  int w = COLS_MAX;
  while (w > COLS_MIN && w * per_row > COLS_FRAME_BYTES)
    w /= 2;
  return w * per_row > COLS_FRAME_BYTES ? 0 : w;
}

/* The lanes and the chunk stack of column mode for dtype dt: one pair per
** dtype, shared by the passes (they run one after another). */
static void col_arrays(cg *g, int dt, gcc_jit_lvalue **acc,
                       gcc_jit_lvalue **stk)
{
  jb *j = &g->j;
  if (!g->colacc[dt]) {
    gcc_jit_type *rowt = gcc_jit_context_new_array_type(j->ctx, NULL,
                                                        ty(g, dt), g->colmax);
    g->colacc[dt] = jb_local(j, gcc_jit_context_new_array_type(
                                  j->ctx, NULL, rowt, TENSOR_RED_LANES),
                             "cacc");
    int depth = chunk_levels(g->crow);
    if (depth > 0)
      g->colstk[dt] = jb_local(j, gcc_jit_context_new_array_type(
                                    j->ctx, NULL, rowt, depth), "cstk");
  }
  *acc = g->colacc[dt];
  *stk = g->colstk[dt];
}

/* for (w = 0; w < ncols; w++), with colw = w: leaves the builder in the
** body inside a fresh scope (returned for col_end). */
static int col_begin(cg *g, loop *L, const char *what)
{
  g->colw = loop_begin(g, L, "w", what, I64(g, 0), g->ncols, 1);
  return scope_push(g);
}

static void col_end(cg *g, loop *L, int prev)
{
  scope_pop(g, prev);
  g->colw = NULL;
  loop_end(g, L);
}

/* Column mode's hoist: every ROWVAR-only value that v needs, computed once
** per row of the block into a local array (before the pass that needs it). */
static void col_hoist(cg *g, int v)
{
  jb *j = &g->j;
  uint8_t mark[KIR_MAX_INSTRS] = { 0 };
  jcpu_closure(g->k, v, mark);
  int todo[KIR_MAX_INSTRS], n = 0;
  for (int i = 0; i < g->k->ninstrs; i++)
    if (mark[i] && g->cls[i] == CL_UNI && !g->colready[i])
      todo[n++] = i;
  if (n == 0)
    return;
  loop lw;
  int prev = col_begin(g, &lw, "hoist");
  for (int q = 0; q < n; q++) {
    int i = todo[q];
    if (!g->colarr[i])
      g->colarr[i] = jb_local(j, gcc_jit_context_new_array_type(
                                   j->ctx, NULL, ty(g, g->k->ins[i].dtype),
                                   g->colmax), "u");
    jb_assign(j, at_col(g, g->colarr[i], g->colw), value(g, i));
  }
  col_end(g, &lw, prev);
  for (int q = 0; q < n; q++)
    g->colready[todo[q]] = true;
}

/* One chunk of positions [cs, cs + len) of every row of the block, each
** reduced as CHUNK_FN does; acc[0][w] holds row w's partial. */
static void col_chunk(cg *g, const kir_pass *ps, gcc_jit_lvalue *acc,
                      gcc_jit_rvalue *cs, gcc_jit_rvalue *len)
{
  jb *j = &g->j;
  int dt = g->k->ins[ps->value].dtype;
  loop lw, li, ll;
  int prev = col_begin(g, &lw, "init");
  for (int l = 0; l < TENSOR_RED_LANES; l++)
    jb_assign(j, at_col(g, at_col(g, acc, I64(g, l)), g->colw),
              identity(g, ps->red, dt));
  col_end(g, &lw, prev);
  gcc_jit_rvalue *nfull = jb_let(j, "nfull", j->t->i64,
                                 jb_bin(j, GCC_JIT_BINARY_OP_BITWISE_AND, len,
                                        I64(g, ~(int64_t)(TENSOR_RED_LANES - 1))));
  int pn = (int)(ps - g->k->pass);
  char w1[32], w2[32];
  snprintf(w1, sizeof w1, "p%d.cols", pn);
  snprintf(w2, sizeof w2, "p%d.tail", pn);
  gcc_jit_rvalue *i = loop_begin(g, &li, "i", w1, I64(g, 0), nfull,
                                 TENSOR_RED_LANES);
  gcc_jit_rvalue *gb = jb_let(j, "gb", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_PLUS, cs, i));
  gcc_jit_rvalue *l = loop_begin(g, &ll, "l", w1, I64(g, 0),
                                 I64(g, TENSOR_RED_LANES), 1);
  gcc_jit_rvalue *pos = jb_let(j, "at", j->t->i64,
                               jb_bin(j, GCC_JIT_BINARY_OP_PLUS, gb, l));
  gcc_jit_lvalue *row = at_col(g, acc, l);
  prev = col_begin(g, &lw, w1);
  lane_step(g, ps, row, g->colw, pos, false);
  col_end(g, &lw, prev);
  loop_end(g, &ll);
  loop_end(g, &li);
  gcc_jit_rvalue *tb = jb_let(j, "tb", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_PLUS, cs, nfull));
  gcc_jit_rvalue *rest = jb_let(j, "rest", j->t->i64,
                                jb_bin(j, GCC_JIT_BINARY_OP_MINUS, len, nfull));
  l = loop_begin(g, &ll, "l", w2, I64(g, 0), rest, 1);
  pos = jb_let(j, "at", j->t->i64, jb_bin(j, GCC_JIT_BINARY_OP_PLUS, tb, l));
  row = at_col(g, acc, l);
  prev = col_begin(g, &lw, w2);
  lane_step(g, ps, row, g->colw, pos, false);
  col_end(g, &lw, prev);
  loop_end(g, &ll);
  /* halving, per row: lane q = comb(lane q, lane q + h) */
  prev = col_begin(g, &lw, "halve");
  for (int h = TENSOR_RED_LANES / 2; h >= 1; h /= 2)
    for (int q = 0; q < h; q++) {
      gcc_jit_lvalue *a = at_col(g, at_col(g, acc, I64(g, q)), g->colw);
      gcc_jit_rvalue *b = gcc_jit_lvalue_as_rvalue(
        at_col(g, at_col(g, acc, I64(g, q + h)), g->colw));
      jb_assign(j, a, comb(g, ps->red, dt, gcc_jit_lvalue_as_rvalue(a), b));
    }
  col_end(g, &lw, prev);
}

/* dst[w] = comb(src[w], dst[w]) (or = src[w] when !fold) for every row. */
static void col_fold(cg *g, const kir_pass *ps, gcc_jit_lvalue *dst,
                     gcc_jit_lvalue *src, bool fold)
{
  int dt = g->k->ins[ps->value].dtype;
  loop lw;
  int prev = col_begin(g, &lw, "fold");
  gcc_jit_rvalue *s = gcc_jit_lvalue_as_rvalue(at_col(g, src, g->colw));
  gcc_jit_lvalue *d = at_col(g, dst, g->colw);
  jb_assign(&g->j, d, fold ? comb(g, ps->red, dt, s,
                                  gcc_jit_lvalue_as_rvalue(d)) : s);
  col_end(g, &lw, prev);
}

/* Column mode REDUCE: reduce_row's chunks and binary-counter stack, each
** step applied to every row of the block (the counter is the same for
** all of them: it counts chunks). */
static void col_reduce(cg *g, int p)
{
  jb *j = &g->j;
  const kir_pass *ps = &g->k->pass[p];
  gcc_jit_lvalue *acc, *stk;
  col_arrays(g, g->k->ins[ps->value].dtype, &acc, &stk);
  gcc_jit_lvalue *acc0 = at_col(g, acc, I64(g, 0));
  gcc_jit_lvalue *rv = g->rowvar[p];
  int64_t m = tensor_red_chunks(g->crow);
  if (m == 1) {
    col_chunk(g, ps, acc, I64(g, 0), I64(g, g->crow));
    col_fold(g, ps, rv, acc0, false);
    return;
  }
  gcc_jit_lvalue *sp = jb_local(j, j->t->i64, "sp");
  jb_assign(j, sp, I64(g, 0));
  gcc_jit_rvalue *spr = gcc_jit_lvalue_as_rvalue(sp);
  loop lc;
  char w[32];
  snprintf(w, sizeof w, "p%d.chunks", p);
  gcc_jit_rvalue *c = loop_begin(g, &lc, "c", w, I64(g, 0), I64(g, m), 1);
  gcc_jit_rvalue *cs = jb_let(j, "cs", j->t->i64,
                              jb_bin(j, GCC_JIT_BINARY_OP_MULT, c,
                                     I64(g, TENSOR_RED_CHUNK)));
  col_chunk(g, ps, acc, cs, chunk_len(g, cs));
  /* while (tc & 1) { acc0 = comb(stk[--sp], acc0); tc >>= 1; } */
  gcc_jit_lvalue *tc = jb_local(j, j->t->i64, "tc");
  jb_assign(j, tc, c);
  while_loop wl;
  while_begin(g, &wl, "carry", odd(g, tc));
  gcc_jit_block_add_assignment_op(j->b, NULL, sp, GCC_JIT_BINARY_OP_MINUS,
                                  I64(g, 1));
  col_fold(g, ps, acc0, at_col(g, stk, spr), true);
  gcc_jit_block_add_assignment_op(j->b, NULL, tc, GCC_JIT_BINARY_OP_RSHIFT,
                                  I64(g, 1));
  while_end(g, &wl);
  col_fold(g, ps, at_col(g, stk, spr), acc0, false);
  gcc_jit_block_add_assignment_op(j->b, NULL, sp, GCC_JIT_BINARY_OP_PLUS,
                                  I64(g, 1));
  loop_end(g, &lc);
  /* fold: rv = stk[sp-1]; for q = sp-2 .. 0: rv = comb(stk[q], rv) */
  col_fold(g, ps, rv, at_col(g, stk, jb_bin(j, GCC_JIT_BINARY_OP_MINUS, spr,
                                            I64(g, 1))), false);
  gcc_jit_lvalue *q = jb_local(j, j->t->i64, "q");
  jb_assign(j, q, jb_bin(j, GCC_JIT_BINARY_OP_MINUS, spr, I64(g, 2)));
  while_loop fl;
  while_begin(g, &fl, "fold", jb_cmp(j, GCC_JIT_COMPARISON_GE,
                                     gcc_jit_lvalue_as_rvalue(q), I64(g, 0)));
  col_fold(g, ps, rv, at_col(g, stk, gcc_jit_lvalue_as_rvalue(q)), true);
  gcc_jit_block_add_assignment_op(j->b, NULL, q, GCC_JIT_BINARY_OP_MINUS,
                                  I64(g, 1));
  while_end(g, &fl);
}

/* Column mode STORE passes [p0, p1): for each row position, every row of
** the block. */
static void col_store_loop(cg *g, int p0, int p1)
{
  const kir_kernel *k = g->k;
  for (int p = p0; p < p1; p++)
    col_hoist(g, k->pass[p].value);
  loop lj, lw;
  char w[32];
  snprintf(w, sizeof w, "p%d.store", p0);
  g->axis = TC_MAX_DIMS;
  gcc_jit_rvalue *pos = loop_begin(g, &lj, "j", w, I64(g, 0), g->row_len, 1);
  int prev = col_begin(g, &lw, w);
  g->at = pos;
  for (int p = p0; p < p1; p++)
    store(g, k->pass[p].out, k->pass[p].value);
  g->at = NULL;
  col_end(g, &lw, prev);
  loop_end(g, &lj);
}

/* ROWS, column mode: rows [lo, hi) in blocks of up to colmax adjacent rows
** (never past the end of the innermost outer dim), every pass per block. */
static void emit_cols(cg *g)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  new_entry(g, -1);
  g->cols = true;
  for (int p = 0; p < k->npasses; p++)
    if (k->pass[p].kind == KIR_PASS_REDUCE)
      g->rowvar[p] = jb_local(j, gcc_jit_context_new_array_type(
                                   j->ctx, NULL,
                                   ty(g, k->ins[k->pass[p].value].dtype),
                                   g->colmax), "rowvar");
  int last = g->nd - 1;
  gcc_jit_lvalue *idx[TC_MAX_DIMS];
  walk blk;
  gcc_jit_rvalue *curr = walk_begin(g, idx, &blk, "blk");
  int prev = scope_push(g);   /* the block's scope */
  gcc_jit_rvalue *n = jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->size[last],
                             gcc_jit_lvalue_as_rvalue(idx[last]));
  gcc_jit_rvalue *left = jb_bin(j, GCC_JIT_BINARY_OP_MINUS, g->hi, curr);
  n = jb_let(j, "n", j->t->i64,
             jb_sel(j, j->t->i64, jb_cmp(j, GCC_JIT_COMPARISON_LT, left, n),
                    left, n));
  g->ncols = jb_let(j, "ncols", j->t->i64,
                    jb_sel(j, j->t->i64,
                           jb_cmp(j, GCC_JIT_COMPARISON_LT, n,
                                  I64(g, g->colmax)),
                           n, I64(g, g->colmax)));
  memset(g->colready, 0, sizeof g->colready);
  for (int p = 0; p < k->npasses;) {
    const kir_pass *ps = &k->pass[p];
    if (ps->kind == KIR_PASS_REDUCE) {
      col_hoist(g, ps->value);
      col_reduce(g, p);
      p++;
    } else if (ps->kind == KIR_PASS_STORE_ROW) {
      col_hoist(g, ps->value);
      loop lw;
      int sp = col_begin(g, &lw, "store_row");
      store_row(g, p);
      col_end(g, &lw, sp);
      p++;
    } else {
      int q = p;
      while (q < k->npasses && k->pass[q].kind == KIR_PASS_STORE)
        q++;
      col_store_loop(g, p, q);
      p = q;
    }
  }
  scope_pop(g, prev);
  walk_end(g, idx, &blk, g->ncols);
  g->cols = false;
}

/* ROWS, row mode: rows [lo, hi), every pass per row. */
static void emit_rows(cg *g)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  new_entry(g, -1);
  for (int p = 0; p < k->npasses; p++)
    if (k->pass[p].kind == KIR_PASS_REDUCE)
      g->rowvar[p] = jb_local(j, ty(g, k->ins[k->pass[p].value].dtype),
                              "rowvar");
  gcc_jit_lvalue *idx[TC_MAX_DIMS];
  if (g->nd > 0)
    decompose(g, idx, g->lo);
  loop lr;
  loop_begin(g, &lr, "r", "rows", g->lo, g->hi, 1);
  int prev = scope_push(g);   /* the row's scope */
  set_pos(g, idx, g->nd);
  for (int p = 0; p < k->npasses;) {
    const kir_pass *ps = &k->pass[p];
    if (ps->kind == KIR_PASS_REDUCE) {
      hoist(g, ps->value);
      /* Pass 0 streams the row in from memory; the next reduction (exp
      ** and sum in softmax, the squares in layer_norm) is compute-bound
      ** and reads the row from cache, so it fetches the next row meanwhile:
      ** 15% off a 4096x4096 softmax on two threads. */
      g->prefetch = p == 1 && g->nd > 0;
      reduce_row(g, p);
      g->prefetch = false;
      p++;
    } else if (ps->kind == KIR_PASS_STORE_ROW) {
      store_row(g, p);
      p++;
    } else {
      int q = p;
      while (q < k->npasses && k->pass[q].kind == KIR_PASS_STORE)
        q++;
      store_loop(g, p, q, I64(g, 0), g->row_len);
      p = q;
    }
  }
  scope_pop(g, prev);
  if (g->nd > 0) {
    gcc_jit_block_add_assignment_op(j->b, NULL, idx[g->nd - 1],
                                    GCC_JIT_BINARY_OP_PLUS, I64(g, 1));
    carry(g, idx);
  }
  loop_end(g, &lr);
  gcc_jit_block_end_with_void_return(j->b, NULL);
}

/* ROWS, split mode: one function per pass over chunks or positions. */
static void emit_split_pass(cg *g, int p)
{
  const kir_kernel *k = g->k;
  jb *j = &g->j;
  const kir_pass *ps = &k->pass[p];
  new_entry(g, p);
  for (int b = 0; b < k->nbufs; b++) {   /* the one row starts at 0 */
    g->pos[b] = jb_local(j, gcc_jit_rvalue_get_type(g->base[b]), "pos");
    jb_assign(j, g->pos[b], g->base[b]);
  }
  if (ps->kind == KIR_PASS_REDUCE) {
    int dt = k->ins[ps->value].dtype;
    hoist(g, ps->value);
    gcc_jit_rvalue *parts = jb_cast(j, g->partials,
                                    gcc_jit_type_get_pointer(ty(g, dt)));
    loop lc;
    char w[32];
    snprintf(w, sizeof w, "p%d.chunks", p);
    gcc_jit_rvalue *c = loop_begin(g, &lc, "c", w, g->lo, g->hi, 1);
    gcc_jit_rvalue *cs = jb_let(j, "cs", j->t->i64,
                                jb_bin(j, GCC_JIT_BINARY_OP_MULT, c,
                                       I64(g, TENSOR_RED_CHUNK)));
    gcc_jit_rvalue *part = chunk(g, ps, cs, chunk_len(g, cs));
    jb_assign(j, gcc_jit_context_new_array_access(j->ctx, NULL, parts, c),
              part);
    loop_end(g, &lc);
  } else if (ps->kind == KIR_PASS_STORE) {
    store_loop(g, p, p + 1, g->lo, g->hi);
  } else {
    store_row(g, p);
  }
  gcc_jit_block_end_with_void_return(j->b, NULL);
}

/* -- Entry ------------------------------------------------------------------------ */

int jcpu_emit(gcc_jit_context *ctx, const kir_kernel *k)
{
  cg *g = calloc(1, sizeof *g);   /* ~40 KB: neither stack nor TLS */
  if (!g)
    return -1;
  jb_types types;
  jcpu_types_init(ctx, &types);
  gcc_jit_function *approx[KOP__MAX * 2] = { 0 };
  g->j.ctx = ctx;
  g->j.t = &types;
  g->j.approx = approx;
  g->k = k;
  /* classify instructions; mark those some pass uses */
  for (int i = 0; i < k->ninstrs; i++) {
    const kir_instr *in = &k->ins[i];
    uint8_t c = in->op == KOP_LOAD || in->op == KOP_GATHER ? CL_VAR
                : in->op == KOP_ROWVAR ? CL_UNI : CL_INV;
    for (int a = 0; a < kir_arity[in->op]; a++)
      if (g->cls[in->arg[a]] > c)
        c = g->cls[in->arg[a]];
    g->cls[i] = c;
  }
  for (int p = 0; p < k->npasses; p++)
    jcpu_closure(k, k->pass[p].value, g->used);
  space_init(g);
  bool row, split;
  jcpu_modes(k, &row, &split);
  g->split = false;
  if (k->kind == KIR_MAP)
    emit_map(g);
  else if (row && (g->colmax = col_width(g)) > 0)
    emit_cols(g);
  else if (row)
    emit_rows(g);
  g->split = true;
  if (split)
    for (int p = 0; p < k->npasses; p++)
      emit_split_pass(g, p);
  free(g);
  return 0;
}
