/*
** builder.c -- the thin layer over libgccjit that emit.c and approx_jit.c
** write code with: named locals, blocks, selects as if/else into a local,
** typed constants built so GCC never sees a constant wider than its type.
*/
#include <string.h>

#include "jcpu_impl.h"

gcc_jit_lvalue *jb_local(jb *j, gcc_jit_type *t, const char *hint)
{
  char name[48];
  snprintf(name, sizeof name, "%s_%d", hint, j->nloc++);
  return gcc_jit_function_new_local(j->fn, NULL, t, name);
}

gcc_jit_block *jb_block(jb *j, const char *hint)
{
  char name[48];
  snprintf(name, sizeof name, "%s_%d", hint, j->nblk++);
  return gcc_jit_function_new_block(j->fn, name);
}

void jb_assign(jb *j, gcc_jit_lvalue *lv, gcc_jit_rvalue *v)
{
  gcc_jit_block_add_assignment(j->b, NULL, lv, v);
}

gcc_jit_rvalue *jb_let(jb *j, const char *hint, gcc_jit_type *t,
                       gcc_jit_rvalue *v)
{
  gcc_jit_lvalue *lv = jb_local(j, t, hint);
  jb_assign(j, lv, v);
  return gcc_jit_lvalue_as_rvalue(lv);
}

gcc_jit_rvalue *jb_sel(jb *j, gcc_jit_type *t, gcc_jit_rvalue *c,
                       gcc_jit_rvalue *x, gcc_jit_rvalue *y)
{
  gcc_jit_lvalue *r = jb_local(j, t, "sel");
  jb_assign(j, r, y);
  gcc_jit_block *then = jb_block(j, "then"), *join = jb_block(j, "join");
  gcc_jit_block_end_with_conditional(j->b, NULL, c, then, join);
  gcc_jit_block_add_assignment(then, NULL, r, x);
  gcc_jit_block_end_with_jump(then, NULL, join);
  j->b = join;
  return gcc_jit_lvalue_as_rvalue(r);
}

gcc_jit_rvalue *jb_bin(jb *j, enum gcc_jit_binary_op op, gcc_jit_rvalue *a,
                       gcc_jit_rvalue *b)
{
  return gcc_jit_context_new_binary_op(j->ctx, NULL, op,
                                       gcc_jit_rvalue_get_type(a), a, b);
}

gcc_jit_rvalue *jb_cmp(jb *j, enum gcc_jit_comparison op, gcc_jit_rvalue *a,
                       gcc_jit_rvalue *b)
{
  return gcc_jit_context_new_comparison(j->ctx, NULL, op, a, b);
}

gcc_jit_rvalue *jb_cast(jb *j, gcc_jit_rvalue *v, gcc_jit_type *t)
{
  return gcc_jit_context_new_cast(j->ctx, NULL, v, t);
}

gcc_jit_rvalue *jb_bitcast(jb *j, gcc_jit_rvalue *v, gcc_jit_type *t)
{
  return gcc_jit_context_new_bitcast(j->ctx, NULL, v, t);
}

/* A float constant of type t (f32 values are rounded here, in C, so GCC
** never sees a REAL_CST wider than its type). NaN is built from its exact
** bit pattern. */
gcc_jit_rvalue *jb_fconst(jb *j, gcc_jit_type *t, double v)
{
  if (t == j->t->f32) {
    float f = (float)v;
    if (f != f) {
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      return jb_bitcast(j, jb_uconst(j, j->t->u32, u), t);
    }
    return gcc_jit_context_new_rvalue_from_double(j->ctx, t, (double)f);
  }
  if (v != v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return jb_bitcast(j, jb_uconst(j, j->t->u64, u), t);
  }
  return gcc_jit_context_new_rvalue_from_double(j->ctx, t, v);
}

gcc_jit_rvalue *jb_iconst(jb *j, gcc_jit_type *t, int64_t v)
{
  return gcc_jit_context_new_rvalue_from_long(j->ctx, t, (long)v);
}

/* Unsigned constants go through long: libgccjit builds the INTEGER_CST in
** the target type, so the two's complement bits are kept. */
gcc_jit_rvalue *jb_uconst(jb *j, gcc_jit_type *t, uint64_t v)
{
  return gcc_jit_context_new_rvalue_from_long(j->ctx, t, (long)v);
}

void jcpu_types_init(gcc_jit_context *ctx, jb_types *t)
{
  t->v = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_VOID);
  t->b = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_BOOL);
  t->i = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT);
  t->u8 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT8_T);
  t->u16 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT16_T);
  t->i32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT32_T);
  t->u32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT32_T);
  t->i64 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT64_T);
  t->u64 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT64_T);
  t->f32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_FLOAT);
  t->f64 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_DOUBLE);
  t->cp = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_CHAR);
  t->cp = gcc_jit_type_get_pointer(t->cp);
  t->cpp = gcc_jit_type_get_pointer(t->cp);
  t->dp = gcc_jit_type_get_pointer(t->f64);
  t->i64p = gcc_jit_type_get_pointer(t->i64);
  t->vp = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_VOID_PTR);
}
