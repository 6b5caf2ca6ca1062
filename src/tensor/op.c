/*
** op.c -- op metadata and dtype facts, expanded from ops.def.
*/
#include "tensor.h"

const op_info op_table[TC_OP__MAX] = {
#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) \
  [TC_OP_##n] = { #n, OPK_##k, ni, ns, OPF_##fl, TR_##ty, TC_OP_##tw },
#include "ops.def"
};

const size_t tensor_dtype_size[TC_DTYPE__MAX] = {
  [TC_BOOL] = 1, [TC_I32] = 4, [TC_I64] = 8, [TC_F32] = 4, [TC_F64] = 8,
  [TC_F16] = 2, [TC_BF16] = 2,
};
static const char *const dtype_names[TC_DTYPE__MAX] = {
  [TC_BOOL] = "bool", [TC_I32] = "i32", [TC_I64] = "i64",
  [TC_F32] = "f32", [TC_F64] = "f64", [TC_F16] = "f16", [TC_BF16] = "bf16",
};

/* Promotion ranks: category first (bool < integer < float), then width. */
const int8_t tensor_dtype_rank[TC_DTYPE__MAX] = {
  [TC_BOOL] = 0, [TC_I32] = 1, [TC_I64] = 2, [TC_F16] = 3, [TC_BF16] = 3,
  [TC_F32] = 4, [TC_F64] = 5,
};

const char *tc_dtype_name(tc_dtype dt)
{
  return tensor_dtype_valid(dt) ? dtype_names[dt] : "invalid";
}

size_t tc_dtype_size(tc_dtype dt)
{
  return tensor_dtype_valid(dt) ? tensor_dtype_size[dt] : 0;
}

tc_dtype tc_promote(tc_dtype a, tc_dtype b)
{
  if (!tensor_dtype_valid(a) || !tensor_dtype_valid(b))
    return TC_DTYPE__MAX;
  return tensor_promote(a, b);
}
