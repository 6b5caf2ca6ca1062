/*
** half.c -- the storage dtypes (f16, bf16) for the kernels that compute in
** their own dtype (reductions, composites, matmul): each runs in f32 on its
** inputs converted (exactly) to f32, and its result is rounded to the
** storage dtype, as the fuser plans the same ops (compute dtype f32,
** rounded where a value is stored). Pointwise kernels need none of this:
** their iterator converts per tile (pointwise.c).
*/
#include "eager.h"

static eager_kernel inner[TC_OP__MAX];
#define MAX_IN (sizeof ((eager_call *)0)->in / sizeof(tc_tensor *))

static bool reads_or_makes_half(const eager_call *c)
{
  if (tensor_dtype_is_half(c->dtype))
    return true;
  for (int i = 0; i < c->nin; i++)
    if (c->in[i] && tensor_dtype_is_half((tc_dtype)c->in[i]->dtype))
      return true;
  return false;
}

static tc_tensor *cpu_via_f32(const eager_call *c)
{
  if (!reads_or_makes_half(c))
    return inner[c->op](c);
  eager_call f = *c;
  tc_tensor *wide[MAX_IN] = { NULL };
  tc_tensor *r = NULL;
  for (int i = 0; i < c->nin; i++)
    if (c->in[i] && tensor_dtype_is_half((tc_dtype)c->in[i]->dtype)) {
      if (!(wide[i] = eager_contiguous_copy(c->in[i], TC_F32)))
        goto done;
      f.in[i] = wide[i];
    }
  f.dtype = tensor_compute_of(c->dtype);
  f.cdtype = tensor_compute_of(c->cdtype);
  r = inner[c->op](&f);
  if (r && r->dtype != c->dtype) {
    tc_tensor *narrow = eager_contiguous_copy(r, c->dtype);
    tensor_unref(r);
    r = narrow;
  }
done:
  for (int i = 0; i < c->nin; i++)
    tensor_unref(wide[i]);
  return r;
}

void eager_register_cpu_half(void)
{
  for (int op = 0; op < TC_OP__MAX; op++) {
    op_kind k = (op_kind)op_table[op].kind;
    eager_kernel fn = eager_lookup(TC_KEY_CPU, (tc_op)op);
    if (!fn || k == OPK_PW || k == OPK_VW || k == OPK_CR ||
        op == TC_OP_CONTIGUOUS)
      continue;
    inner[op] = fn;
    eager_register(TC_KEY_CPU, (tc_op)op, cpu_via_f32);
  }
}
