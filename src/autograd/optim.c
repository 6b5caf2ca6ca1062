/*
** optim.c -- SGD and AdamW with torch.optim's update rules, written as
** in-place tc ops with grad mode off: eagerly they run op by op; under
** TC_COMPILE=1 a step's ops over a parameter fuse into one kernel that
** writes the parameter and its state.
*/
#include <math.h>
#include <stdlib.h>

#include "autograd.h"

typedef enum { OPT_SGD, OPT_ADAMW } opt_kind;

struct tc_optimizer {
  opt_kind kind;
  int n;
  tc_tensor **params;   /* owned (tc's own) refs */
  tc_tensor **m;        /* SGD momentum buffers / AdamW exp_avg; owned */
  tc_tensor **v;        /* AdamW exp_avg_sq; owned */
  double lr, momentum, weight_decay, beta1, beta2, eps;
  int64_t steps;
};

static tc_optimizer *opt_new(const char *fn, opt_kind kind,
                             tc_tensor **params, int n, double lr,
                             double weight_decay)
{
  eager_init();
  if (!params || n <= 0) {
    tc_seterr(TC_E_ARG, "%s: needs at least one parameter", fn);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    if (!tensor_arg_ok(fn, params[i]))
      return NULL;
    if (!tensor_dtype_is_float((tc_dtype)params[i]->dtype)) {
      tc_seterr(TC_E_DTYPE, "%s: parameter %d is not floating-point", fn, i);
      return NULL;
    }
  }
  if (!(lr >= 0) || isinf(lr) || !(weight_decay >= 0) || isinf(weight_decay)) {
    tc_seterr(TC_E_ARG, "%s: lr and weight_decay must be finite and >= 0",
              fn);
    return NULL;
  }
  tc_optimizer *o = calloc(1, sizeof *o);
  tc_tensor **arrays = o ? calloc(3 * (size_t)n, sizeof *arrays) : NULL;
  if (!arrays) {
    free(o);
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return NULL;
  }
  o->kind = kind;
  o->n = n;
  o->params = arrays;
  o->m = arrays + n;
  o->v = arrays + 2 * n;
  o->lr = lr;
  o->weight_decay = weight_decay;
  for (int i = 0; i < n; i++)
    o->params[i] = tensor_ref(params[i]);
  return o;
}

tc_optimizer *tc_sgd(tc_tensor **params, int n, double lr, double momentum,
                     double weight_decay)
{
  if (!(momentum >= 0) || isinf(momentum)) {
    tc_seterr(TC_E_ARG, "%s: momentum must be finite and >= 0", __func__);
    return NULL;
  }
  tc_optimizer *o = opt_new(__func__, OPT_SGD, params, n, lr, weight_decay);
  if (o)
    o->momentum = momentum;
  return o;
}

tc_optimizer *tc_adamw(tc_tensor **params, int n, double lr, double beta1,
                       double beta2, double eps, double weight_decay)
{
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) ||
      !(eps >= 0) || isinf(eps)) {
    tc_seterr(TC_E_ARG, "%s: betas must be in [0, 1) and eps finite and "
              ">= 0", __func__);
    return NULL;
  }
  tc_optimizer *o = opt_new(__func__, OPT_ADAMW, params, n, lr,
                            weight_decay);
  if (o) {
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
  }
  return o;
}

/* A new zero tensor like p, as optimizer state (tc's own reference). */
static tc_tensor *state_zeros(tc_tensor *p)
{
  return ag_internal(ag_on_device_of(p, tc_zeros((tc_dtype)p->dtype,
                                                 p->ndim, p->shape)));
}

/* torch.optim.SGD, dampening 0: d = g + wd p; buf = d (first step) or
** momentum buf + d; p -= lr buf (or lr d without momentum). */
static int sgd_update(tc_optimizer *o, int i, tc_tensor *g)
{
  tc_tensor *p = o->params[i];
  tc_tensor *d = o->weight_decay ? tc_add(g, tc_mul_scalar(p, o->weight_decay))
                                 : g;
  if (o->momentum) {
    if (!o->m[i]) {
      o->m[i] = ag_internal(tc_cast(d, (tc_dtype)p->dtype));
      if (!o->m[i])
        return -1;
    } else if (tc_mul_scalar_(o->m[i], o->momentum) < 0 ||
               tc_add_(o->m[i], d) < 0) {
      return -1;
    }
    d = o->m[i];
  }
  return tc_sub_(p, tc_mul_scalar(d, o->lr));
}

/* torch.optim.AdamW: p *= 1 - lr wd; m += (1 - b1)(g - m);
** v = b2 v + (1 - b2) g g; p -= lr / (1 - b1^t) * m /
** (sqrt(v) / sqrt(1 - b2^t) + eps). */
static int adamw_update(tc_optimizer *o, int i, tc_tensor *g)
{
  tc_tensor *p = o->params[i];
  if (!o->m[i]) {
    o->m[i] = state_zeros(p);
    o->v[i] = state_zeros(p);
    if (!o->m[i] || !o->v[i])
      return -1;
  }
  double t = (double)o->steps;
  double step_size = o->lr / (1 - pow(o->beta1, t));
  double bc2_sqrt = sqrt(1 - pow(o->beta2, t));
  if (o->weight_decay && tc_mul_scalar_(p, 1 - o->lr * o->weight_decay) < 0)
    return -1;
  if (tc_add_(o->m[i], tc_mul_scalar(tc_sub(g, o->m[i]), 1 - o->beta1)) < 0 ||
      tc_mul_scalar_(o->v[i], o->beta2) < 0 ||
      tc_add_(o->v[i], tc_mul_scalar(tc_mul(g, g), 1 - o->beta2)) < 0)
    return -1;
  tc_tensor *denom = tc_add_scalar(tc_div_scalar(tc_sqrt(o->v[i]), bc2_sqrt),
                                   o->eps);
  return tc_sub_(p, tc_mul_scalar(tc_div(o->m[i], denom), step_size));
}

/* The parameter's gradient (tc's own reference), or NULL when it has none. */
static tc_tensor *grad_of(tc_tensor *p)
{
  ag_grad_lock();
  ag_meta *m = ag_needs_grad(p) ? p->grad_meta : NULL;
  tc_tensor *g = m ? tensor_ref(m->grad) : NULL;
  ag_grad_unlock();
  return g;
}

int tc_optimizer_step(tc_optimizer *o)
{
  eager_init();
  if (!o)
    return tc_seterr_null(__func__), -1;
  /* Under TC_COMPILE=1 a lazily made parameter or state tensor (a scaled
  ** randn, SGD's first momentum buffer) would take the update as a new lazy
  ** value rather than a pending write: tc_sync below would have nothing to
  ** complete and every step would extend one lazy chain. Compute such
  ** tensors first (once: afterwards they are stored and written in place). */
  int rc = 0;
  for (int i = 0; rc == 0 && i < 3 * o->n; i++)
    if (o->params[i] && o->params[i]->lazy)
      rc = tc_realize(o->params[i]);
  if (rc < 0)
    return -1;
  bool was = tc_set_grad_enabled(false);
  o->steps++;
  for (int i = 0; rc == 0 && i < o->n; i++) {
    tc_tensor *g = grad_of(o->params[i]);
    if (!g)
      continue;
    size_t mark = tc_scope_begin();
    rc = o->kind == OPT_SGD ? sgd_update(o, i, g) : adamw_update(o, i, g);
    tc_scope_end(mark);
    tensor_unref(g);
  }
  tc_set_grad_enabled(was);
  /* The step ends here: under TC_COMPILE=1 the writes are made now, so the
  ** next step's forward reads parameters instead of chaining onto this
  ** step's lazy update (a region that would grow every step), and
  ** forward, backward and update are one region. */
  if (rc == 0)
    rc = tc_sync();
  return rc;
}

int tc_optimizer_zero_grad(tc_optimizer *o)
{
  eager_init();
  if (!o)
    return tc_seterr_null(__func__), -1;
  for (int i = 0; i < o->n; i++)
    tc_zero_grad(o->params[i]);
  return 0;
}

void tc_optimizer_free(tc_optimizer *o)
{
  if (!o)
    return;
  for (int i = 0; i < 3 * o->n; i++)
    tensor_unref(o->params[i]);
  free(o->params);
  free(o);
}
