/*
** loss.c -- differentiable losses, composed of recorded tc ops (so their
** backward is the ops' own rows, and they trace and fuse like any code).
*/
#include "autograd.h"

tc_tensor *tc_cross_entropy(tc_tensor *logits, tc_tensor *targets)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, logits) || !tensor_arg_ok(fn, targets))
    return NULL;
  if (logits->ndim != 2 || !tensor_dtype_is_float((tc_dtype)logits->dtype)) {
    tc_seterr(TC_E_SHAPE, "%s: logits must be a 2-D (batch, classes) float "
              "tensor", fn);
    return NULL;
  }
  int64_t n = logits->shape[0], k = logits->shape[1];
  if (targets->dtype != TC_I64 || targets->ndim != 1 ||
      targets->shape[0] != n) {
    tc_seterr(TC_E_SHAPE, "%s: targets must be an i64 tensor of %lld class "
              "indices (one per row of logits)", fn, (long long)n);
    return NULL;
  }
  /* The smallest and largest target, read in place (one pass in C: no
  ** region and no kernel launch for each training step's check); a device
  ** tensor's from its copy on the host. */
  tc_tensor *h = tensor_make_readable(targets) < 0 ? NULL
                 : eager_on_host(targets);
  if (!h)
    return NULL;
  int64_t lo = 0, hi = 0;
  const int64_t *tv = (const int64_t *)h->storage->data + h->offset;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = tv[i * h->stride[0]];
    lo = i == 0 || v < lo ? v : lo;
    hi = i == 0 || v > hi ? v : hi;
  }
  tensor_unref(h);
  size_t mark = tc_scope_begin();
  tc_tensor *loss = NULL;
  if (lo < 0 || hi >= k) {
    tc_seterr(TC_E_ARG, "%s: target %lld is out of range [0, %lld)", fn,
              (long long)(lo < 0 ? lo : hi), (long long)k);
    goto out;
  }
  /* -mean over rows of log_softmax(logits)[row, target[row]]: the target
  ** column picked by comparing class numbers (no gather needed). */
  tc_tensor *logp = tc_log_softmax(logits, 1);
  tc_tensor *classes = tc_reshape(ag_on_device_of(targets,
                                  tc_arange(TC_I64, 0, (double)k, 1)),
                                  TC_SHAPE(1, k));
  tc_tensor *hit = tc_eq(tc_reshape(targets, TC_SHAPE(n, 1)), classes);
  tc_tensor *zero = ag_on_device_of(logits,
                                    tc_zeros((tc_dtype)logits->dtype, 0,
                                             NULL));
  tc_tensor *picked = tc_sum(tc_where(hit, logp, zero), 1, false);
  loss = tc_keep(tc_neg(tc_mean(picked, 0, false)));
out:
  tc_scope_end(mark);
  return loss;
}

tc_tensor *tc_mse_loss(tc_tensor *a, tc_tensor *b)
{
  eager_init();
  if (!tensor_arg_ok(__func__, a) || !tensor_arg_ok(__func__, b))
    return NULL;
  size_t mark = tc_scope_begin();
  tc_tensor *d = tc_sub(a, b);
  tc_tensor *sq = tc_reshape(tc_mul(d, d), TC_SHAPE(-1));
  tc_tensor *loss = tc_keep(tc_mean(sq, 0, false));
  tc_scope_end(mark);
  return loss;
}
