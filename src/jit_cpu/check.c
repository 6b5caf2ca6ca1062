/*
** check.c -- what the CPU backend accepts: a kernel is checked before any
** code is built, so malformed or unsupported IR becomes JCPU_E_UNSUPPORTED
** with a one-line reason instead of a libgccjit error (or worse, wrong
** code). The rules are expr.h's: operands of arithmetic have the
** instruction's dtype, comparisons take two operands of one dtype,
** transcendentals/DIV/SQRT are float only, a ROWVAR is read only by later
** passes, a STORE_ROW value loads nothing along the row; the storage
** dtypes (f16, bf16) are only loaded, converted and stored.
*/
#include <stdio.h>

#include "jcpu_impl.h"

#define BAD(...) (snprintf(reason, rlen, __VA_ARGS__), -1)

void jcpu_closure(const kir_kernel *k, int v, uint8_t *mark)
{
  if (v < 0 || mark[v])
    return;
  mark[v] = 1;
  for (int a = 0; a < kir_arity[k->ins[v].op]; a++)
    jcpu_closure(k, k->ins[v].arg[a], mark);
}

static int check_instr(const kir_kernel *k, int i, char *reason, size_t rlen)
{
  const kir_instr *in = &k->ins[i];
  if (in->op >= KOP__MAX || !tensor_dtype_valid((tc_dtype)in->dtype))
    return BAD("%%%d: bad opcode or dtype", i);
  int n = kir_arity[in->op];
  for (int a = 0; a < n; a++)
    if (in->arg[a] < 0 || in->arg[a] >= i)
      return BAD("%%%d: operand %d out of order", i, a);
  int dt = in->dtype;
  int d0 = n > 0 ? k->ins[in->arg[0]].dtype : dt;
  int d1 = n > 1 ? k->ins[in->arg[1]].dtype : dt;
  const char *nm = kir_opname[in->op];
  if (jcpu_is_half(dt) && in->op != KOP_LOAD && in->op != KOP_GATHER &&
      in->op != KOP_CAST && in->op != KOP_CONST)   /* computed in f32 */
    return BAD("%%%d: %s of %s", i, nm, tc_dtype_name((tc_dtype)dt));
  switch (in->op) {
  case KOP_ADD: case KOP_SUB: case KOP_MUL: case KOP_MAXIMUM:
  case KOP_MINIMUM:
    if (d0 != dt || d1 != dt)
      return BAD("%%%d: %s operands differ from its dtype", i, nm);
    return 0;
  case KOP_NEG: case KOP_ABS: case KOP_FLOOR: case KOP_CEIL: case KOP_ROUND:
  case KOP_TRUNC:
    return d0 != dt ? BAD("%%%d: %s operand dtype", i, nm) : 0;
  case KOP_DIV: case KOP_POW:
    if (!jcpu_is_float(dt))
      return BAD("%%%d: %s of %s", i, nm, tc_dtype_name((tc_dtype)dt));
    return d0 != dt || d1 != dt ? BAD("%%%d: %s operand dtype", i, nm) : 0;
  case KOP_SQRT: case KOP_EXP: case KOP_LOG: case KOP_TANH:
  case KOP_SIGMOID: case KOP_SIN: case KOP_COS: case KOP_GELU:
  case KOP_EXPM1: case KOP_LOG1P: case KOP_ERF:
    if (!jcpu_is_float(dt))
      return BAD("%%%d: %s of %s", i, nm, tc_dtype_name((tc_dtype)dt));
    return d0 != dt ? BAD("%%%d: %s operand dtype", i, nm) : 0;
  case KOP_EQ: case KOP_NE: case KOP_LT: case KOP_LE: case KOP_GT:
  case KOP_GE:
    return d0 != d1 ? BAD("%%%d: %s operands differ", i, nm) : 0;
  case KOP_SEL:
    if (d1 != dt || k->ins[in->arg[2]].dtype != dt)
      return BAD("%%%d: SEL arms differ from its dtype", i);
    return 0;
  case KOP_CONST: case KOP_CAST:
    return 0;
  case KOP_SCALAR:
    if (in->ref < 0 || in->ref >= k->nscalars || in->ref >= KIR_MAX_SCALARS)
      return BAD("%%%d: scalar s%d out of range", i, in->ref);
    return 0;
  case KOP_LOAD:
    if (in->ref < 0 || in->ref >= k->nbufs)
      return BAD("%%%d: LOAD of buf%d", i, in->ref);
    if (k->buf[in->ref].dtype != dt)
      return BAD("%%%d: LOAD dtype differs from buf%d", i, in->ref);
    return 0;
  case KOP_GATHER:
    if (in->ref < 0 || in->ref >= k->nbufs || !k->buf[in->ref].gather ||
        k->buf[in->ref].role != KIR_IN)
      return BAD("%%%d: GATHER of buf%d, not a gather input", i, in->ref);
    if (k->buf[in->ref].dtype != dt || d0 != TC_I64)
      return BAD("%%%d: GATHER dtype or index dtype", i);
    return 0;
  case KOP_ROWVAR:
    if (k->kind != KIR_ROWS || in->ref < 0 || in->ref >= k->npasses ||
        k->pass[in->ref].kind != KIR_PASS_REDUCE)
      return BAD("%%%d: ROWVAR of pass%d is not a reduction", i, in->ref);
    if (k->ins[k->pass[in->ref].value].dtype != dt)
      return BAD("%%%d: ROWVAR dtype", i);
    return 0;
  }
  return BAD("%%%d: unknown opcode", i);
}

int jcpu_check(const kir_kernel *k, char *reason, size_t rlen)
{
  if (k->kind != KIR_MAP && k->kind != KIR_ROWS)
    return BAD("bad kernel kind");
  if (k->ndim < 0 || k->ndim > TC_MAX_DIMS || k->nbufs < 0 ||
      k->nbufs > KIR_MAX_BUFS || k->ninstrs < 0 ||
      k->ninstrs > KIR_MAX_INSTRS || k->npasses < 0 ||
      k->npasses > KIR_MAX_PASSES || k->nscalars < 0 ||
      k->nscalars > KIR_MAX_SCALARS)
    return BAD("kernel counts out of range");
  for (int d = 0; d < k->ndim; d++)
    if (k->size[d] < 0)
      return BAD("negative size");
  if (k->kind == KIR_ROWS && k->row_len < 0)
    return BAD("negative row length");
  for (int b = 0; b < k->nbufs; b++)
    if (!tensor_dtype_valid((tc_dtype)k->buf[b].dtype))
      return BAD("buf%d: bad dtype", b);
  for (int i = 0; i < k->ninstrs; i++)
    if (check_instr(k, i, reason, rlen) < 0)
      return -1;
  for (int p = 0; p < k->npasses; p++) {
    const kir_pass *ps = &k->pass[p];
    if (ps->value < 0 || ps->value >= k->ninstrs)
      return BAD("pass%d: bad value", p);
    if (k->kind == KIR_MAP && ps->kind != KIR_PASS_STORE)
      return BAD("pass%d: a map kernel only stores", p);
    if (ps->kind == KIR_PASS_SCAN || ps->kind == KIR_PASS_SCATTER)
      return BAD("pass%d: sequential passes are the CUDA backend's (the "
                 "CPU runs cumsum and scatter_add eagerly)", p);
    if (ps->kind > KIR_PASS_SCATTER)
      return BAD("pass%d: bad kind", p);
    if (ps->kind == KIR_PASS_REDUCE && ps->red > KIR_RED_MIN)
      return BAD("pass%d: bad reduction", p);
    if (ps->kind == KIR_PASS_REDUCE && ps->red == KIR_RED_SUM &&
        (k->ins[ps->value].dtype == TC_I32 ||
         k->ins[ps->value].dtype == TC_BOOL))
      return BAD("pass%d: sums of i32/bool are taken in i64 (cast first)", p);
    if (ps->kind == KIR_PASS_REDUCE && ps->out >= 0 &&
        (ps->out >= k->nbufs || k->buf[ps->out].role != KIR_OUT))
      return BAD("pass%d: a storing reduction into buf%d, not an output", p,
                 ps->out);
    if (ps->kind != KIR_PASS_REDUCE &&
        (ps->out < 0 || ps->out >= k->nbufs ||
         k->buf[ps->out].role != KIR_OUT))
      return BAD("pass%d: store to buf%d, not an output", p, ps->out);
    uint8_t mark[KIR_MAX_INSTRS] = { 0 };
    jcpu_closure(k, ps->value, mark);
    for (int i = 0; i < k->ninstrs; i++) {
      if (!mark[i])
        continue;
      if (k->ins[i].op == KOP_ROWVAR && k->ins[i].ref >= p)
        return BAD("pass%d uses the result of pass%d", p, k->ins[i].ref);
      /* A STORE_ROW value may load per-row values: they are read at the
      ** row's first position (the fuser loads them with row stride 0). */
      if ((k->ins[i].op == KOP_LOAD || k->ins[i].op == KOP_GATHER) &&
          ps->kind == KIR_PASS_STORE_ROW &&
          !k->dynamic && k->buf[k->ins[i].ref].stride[k->ndim] != 0)
        return BAD("pass%d: store_row value loads along the row", p);
    }
  }
  return 0;
}
