/*
** op.c -- op metadata and dtype facts, expanded from ops.def and ORDER DTYPE.
*/
#include "tensor.h"

const op_info op_table[TC_OP__MAX] = {
#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) \
  [TC_OP_##n] = { #n, OPK_##k, ni, ns, OPF_##fl, TR_##ty, TC_OP_##tw },
#include "ops.def"
};

/* ORDER DTYPE */
const size_t tensor_dtype_size[TC_DTYPE__MAX] = {
  [TC_BOOL] = 1, [TC_I32] = 4, [TC_I64] = 8, [TC_F32] = 4, [TC_F64] = 8,
};
static const char *const dtype_names[TC_DTYPE__MAX] = {
  [TC_BOOL] = "bool", [TC_I32] = "i32", [TC_I64] = "i64",
  [TC_F32] = "f32", [TC_F64] = "f64",
};
_Static_assert(TC_BOOL < TC_I32 && TC_I32 < TC_I64 && TC_I64 < TC_F32 &&
               TC_F32 < TC_F64, "promotion relies on ORDER DTYPE");

const char *tc_dtype_name(tc_dtype dt)
{
  return tensor_dtype_valid(dt) ? dtype_names[dt] : "invalid";
}

size_t tc_dtype_size(tc_dtype dt)
{
  return tensor_dtype_valid(dt) ? tensor_dtype_size[dt] : 0;
}

/* PyTorch's promotion among tensors of equal standing: the higher category
** (bool < integer < float) wins, then the wider type; ORDER DTYPE encodes
** both, so it is the maximum. */
tc_dtype tc_promote(tc_dtype a, tc_dtype b)
{
  if (!tensor_dtype_valid(a) || !tensor_dtype_valid(b))
    return TC_DTYPE__MAX;
  return a > b ? a : b;
}
