/*
** infer.c -- what every op checks at its call, in eager and traced mode
** alike: NumPy broadcasting and PyTorch type promotion (docs/ARCHITECTURE.md, "Type promotion").
*/
#include "tensor.h"

/* Do all n operands have the first one's shape? (Most calls: one test
** instead of the general merge, on every op's path.) */
static bool same_shapes(int n, const tc_tensor *const *ts)
{
  const tc_tensor *a = ts[0];
  for (int i = 1; i < n; i++) {
    if (ts[i]->ndim != a->ndim)
      return false;
    for (int d = 0; d < a->ndim; d++)
      if (ts[i]->shape[d] != a->shape[d])
        return false;
  }
  return true;
}

/* The general merge (kept out of line, so the common case saves no
** registers). */
static __attribute__((noinline)) int
broadcast_merge(const char *fn, int n, const tc_tensor *const *ts, int *ndim,
                int64_t *shape)
{
  int nd = 0;
  for (int i = 0; i < n; i++)
    if (ts[i]->ndim > nd)
      nd = ts[i]->ndim;
  for (int d = 0; d < nd; d++)
    shape[d] = 1;
  for (int i = 0; i < n; i++) {
    const tc_tensor *t = ts[i];
    int lead = nd - t->ndim;
    for (int d = 0; d < t->ndim; d++) {
      int64_t have = shape[lead + d], s = t->shape[d];
      if (s == have || s == 1)
        continue;
      if (have == 1) {
        shape[lead + d] = s;
        continue;
      }
      /* Name the dim from the right, as NumPy's message does. */
      tc_seterr(TC_E_SHAPE, "%s: shapes do not broadcast: dim %d (from the "
                "right) is %lld in operand %d but %lld before it", fn,
                t->ndim - d, (long long)s, i, (long long)have);
      return -1;
    }
  }
  *ndim = nd;
  return 0;
}

int tensor_broadcast(const char *fn, int n, const tc_tensor *const *ts,
                     int *ndim, int64_t *shape)
{
  if (n == 0 || !same_shapes(n, ts))
    return broadcast_merge(fn, n, ts, ndim, shape);
  for (int d = 0; d < ts[0]->ndim; d++)
    shape[d] = ts[0]->shape[d];
  *ndim = ts[0]->ndim;
  return 0;
}

/* Is every scalar argument a whole number that an integer dtype holds? */
static bool integral_scalars(tc_op op, const double *s)
{
  for (int i = 0; i < op_table[op].nsc; i++)
    if (!s || s[i] != (double)(int64_t)s[i] || s[i] < -0x1p62 ||
        s[i] > 0x1p62)
      return false;
  return true;
}

/* Promoted dtype of the value inputs (WHERE's condition does not take
** part). Scalars are C doubles, so their kind is read from their value, as
** PyTorch reads it from the Python type: a whole number acts like an int
** (an integer tensor keeps its dtype, bool becomes i64), any other like a
** float (integers and bool become f32). */
static tc_dtype promoted(tc_op op, int n, const tc_tensor *const *ts,
                         const double *s)
{
  int first = op == TC_OP_WHERE ? 1 : 0;
  tc_dtype dt = TC_BOOL;
  for (int i = first; i < n; i++)
    dt = tensor_promote(dt, (tc_dtype)ts[i]->dtype);
  if (op_table[op].nsc > 0 && !tensor_dtype_is_float(dt)) {
    if (!integral_scalars(op, s))
      dt = TC_F32;
    else if (dt == TC_BOOL)
      dt = TC_I64;
  }
  return dt;
}

/* The result dtype of op under its type rule, its inputs promoted to dt. */
static tc_dtype rule_dtype(const char *fn, tc_op op, tc_dtype dt)
{
  switch ((type_rule)op_table[op].type) {
  case TR_SAME:
    return dt;
  case TR_ARITH:
    if (dt == TC_BOOL) {
      tc_seterr(TC_E_DTYPE, "%s: unsupported dtype bool for arithmetic "
                "(cast it first)", fn);
      return TC_DTYPE__MAX;
    }
    return dt;
  case TR_FLT:
    return tensor_dtype_is_float(dt) ? dt : TC_F32;
  case TR_CMP:
    return TC_BOOL;
  case TR_INT:
    return tensor_dtype_is_float(dt) ? dt : TC_I64;
  case TR_IDX:
    return TC_I64;
  case TR_ARG:
  case TR_DST:
    break;
  }
  tc_seterr(TC_E_INTERNAL, "%s: op %s takes its dtype from the call", fn,
            op_table[op].name);
  return TC_DTYPE__MAX;
}

tc_dtype tensor_result_dtype(const char *fn, tc_op op, int n,
                             const tc_tensor *const *ts, const double *s)
{
  return rule_dtype(fn, op, promoted(op, n, ts, s));
}

/* The dtype a pointwise op computes in: its result dtype, except that
** comparisons compute in the promoted input dtype; f32 for the storage
** types. */
static tc_dtype compute_dtype(tc_op op, tc_dtype promoted_dt, tc_dtype result)
{
  return tensor_compute_of(op_table[op].type == TR_CMP ? promoted_dt : result);
}

tc_dtype tensor_compute_dtype(tc_op op, int n, const tc_tensor *const *ts,
                              const double *s, tc_dtype result)
{
  return compute_dtype(op, op_table[op].type == TR_CMP
                           ? promoted(op, n, ts, s) : result, result);
}

/* Do the inputs share one float dtype and one shape? Then broadcasting and
** promotion are the identity (a scalar leaves a float dtype as it is):
** most calls, answered with one pass. WHERE's condition takes no part in
** promotion, so it takes the general path. */
static bool uniform_float(tc_op op, int n, const tc_tensor *const *ts)
{
  if (n == 0 || op == TC_OP_WHERE ||
      !tensor_dtype_is_float((tc_dtype)ts[0]->dtype))
    return false;
  for (int i = 1; i < n; i++)
    if (ts[i]->dtype != ts[0]->dtype)
      return false;
  return same_shapes(n, ts);
}

int tensor_infer_pointwise(const char *fn, tc_op op, int n,
                           const tc_tensor *const *ts, const double *s,
                           int *ndim, int64_t *shape, tc_dtype *dtype,
                           tc_dtype *cdtype)
{
  tc_dtype dt;
  if (uniform_float(op, n, ts)) {
    for (int d = 0; d < ts[0]->ndim; d++)
      shape[d] = ts[0]->shape[d];
    *ndim = ts[0]->ndim;
    dt = (tc_dtype)ts[0]->dtype;
  } else {
    if (tensor_broadcast(fn, n, ts, ndim, shape) < 0)
      return -1;
    dt = promoted(op, n, ts, s);
  }
  *dtype = rule_dtype(fn, op, dt);
  if (*dtype == TC_DTYPE__MAX)
    return -1;
  *cdtype = compute_dtype(op, dt, *dtype);
  return 0;
}
