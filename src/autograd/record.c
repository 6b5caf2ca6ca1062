/*
** record.c -- the AUTOGRAD key's handler (PyTorch's VariableType): an op
** with an input that requires grad runs below this key, then gets a graph
** node holding what its derivative reads; in-place ops follow PyTorch's
** rules. Also the tensor-level public functions (requires_grad, grad,
** zero_grad, detach, grad mode) and the module's init.
*/
#include <stdlib.h>
#include <string.h>

#include "autograd.h"

static _Thread_local bool grad_off;   /* per thread, as torch.no_grad */
static pthread_mutex_t grad_mutex = PTHREAD_MUTEX_INITIALIZER;

bool ag_grad_enabled(void) { return !grad_off; }
void ag_grad_lock(void) { pthread_mutex_lock(&grad_mutex); }
void ag_grad_unlock(void) { pthread_mutex_unlock(&grad_mutex); }

/* -- Tensor records --------------------------------------------------------- */

ag_meta *ag_meta_of(tc_tensor *t)
{
  if (!t->grad_meta) {
    ag_meta *m = calloc(1, sizeof *m);
    if (!m) {
      tc_seterr(TC_E_NOMEM, "out of memory recording autograd state");
      return NULL;
    }
    t->grad_meta = m;
  }
  t->keys |= AG_KEY;
  return t->grad_meta;
}

/* Does t require grad: a leaf that asked for it, or a recorded result? */
static bool requires(const tc_tensor *t)
{
  const ag_meta *m = ag_needs_grad(t) ? t->grad_meta : NULL;
  return m && (m->requires_grad || m->fn);
}

static void meta_free(tc_tensor *t)
{
  ag_meta *m = t->grad_meta;
  t->grad_meta = NULL;
  ag_node_release(m->fn);
  tensor_unref(m->grad);
  free(m);
}

/* Nodes are freed iteratively: a long chain must not recurse. A node
** joins the work list only once its last reference is gone (then nothing
** else can reach it), so an input used twice is never listed twice. */
void ag_node_release(ag_node *n)
{
  if (!n || atomic_fetch_sub(&n->refs, 1) != 1)
    return;
  n->work_next = NULL;
  while (n) {
    ag_node *x = n;
    n = x->work_next;
    for (int s = 0; s < AG_SLOTS; s++)
      tensor_unref(x->saved[s]);
    tensor_unref(x->grad);
    for (int i = 0; i < x->nin; i++) {
      tensor_unref(x->next[i].leaf);
      ag_node *m = x->next[i].fn;
      if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
        m->work_next = n;
        n = m;
      }
    }
    free(x);
  }
}

tc_tensor *ag_alias(tc_tensor *t)
{
  eager_call c = { .op = TC_OP_VIEW, .fn = "autograd", .nin = 1, .in = { t },
                   .dtype = (tc_dtype)t->dtype, .cdtype = (tc_dtype)t->dtype,
                   .ndim = t->ndim };
  tensor_geom_of(t, &c.view);
  c.rel = c.view;
  tensor_contiguous_strides(t->ndim, t->shape, c.rel.stride);
  c.rel.offset = 0;
  memcpy(c.shape, t->shape, sizeof(int64_t) * t->ndim);
  return eager_redispatch(&c, TC_KEY_AUTOGRAD);
}

/* A copy of t's current value (an in-place op's old value, when its
** derivative reads it). */
static tc_tensor *copy_of(tc_tensor *t)
{
  eager_call c = { .op = TC_OP_CAST, .fn = "autograd", .nin = 1, .in = { t },
                   .dtype = (tc_dtype)t->dtype, .cdtype = (tc_dtype)t->dtype,
                   .ndim = t->ndim };
  memcpy(c.shape, t->shape, sizeof(int64_t) * t->ndim);
  return eager_redispatch(&c, TC_KEY_AUTOGRAD);
}

uint64_t ag_version(const tc_tensor *t)
{
  return t->storage ? atomic_load(&t->storage->version) : 0;
}

tc_tensor *ag_internal(tc_tensor *t)
{
  if (t) {
    tensor_ref(t);
    tc_release(t);
  }
  return t;
}

/* -- Recording ---------------------------------------------------------------- */

/* Where input t's gradient goes: its node, or itself as a leaf. */
static ag_edge edge_of(tc_tensor *t)
{
  ag_edge e = { NULL, NULL };
  if (!requires(t) || !tensor_dtype_is_float((tc_dtype)t->dtype))
    return e;
  ag_meta *m = t->grad_meta;
  if (m->fn) {
    e.fn = m->fn;
    atomic_fetch_add(&e.fn->refs, 1);
  } else {
    e.leaf = tensor_ref(t);
  }
  return e;
}

/* A view of a non-leaf whose storage was written after the view was taken
** no longer shows what its graph says: using it is an error (PyTorch
** rebuilds such a view's node; tc asks for the view to be taken again). */
static bool stale_view(const char *fn, const tc_tensor *t)
{
  const ag_meta *m = ag_needs_grad(t) ? t->grad_meta : NULL;
  if (!m || !m->is_view || !m->fn || !m->fn->next[0].fn ||
      ag_version(t) == m->view_version)
    return false;
  tc_seterr(TC_E_ARG, "%s: a view of a tensor that requires grad is used "
            "after its base was modified in place; take the view again "
            "after the in-place op", fn);
  return true;
}

/* PyTorch's rules for in-place ops while grad mode is on. */
static bool inplace_refused(const eager_call *c)
{
  tc_tensor *dst = c->dst;
  const ag_meta *m = ag_needs_grad(dst) ? dst->grad_meta : NULL;
  if (m && m->requires_grad && !m->fn) {
    tc_seterr(TC_E_ARG, "%s: a leaf tensor that requires grad is used in an "
              "in-place op (turn grad mode off around it: "
              "tc_set_grad_enabled(false))", c->fn);
    return true;
  }
  if (m && m->is_view && m->fn) {
    tc_seterr(TC_E_ARG, "%s: in-place op on a view of a tensor that "
              "requires grad (not supported: write the base, or use "
              "out-of-place ops)", c->fn);
    return true;
  }
  if (!requires(dst) && dst->storage &&
      atomic_load(&dst->storage->refs) > 1) {
    tc_seterr(TC_E_ARG, "%s: in-place op writing a value that requires grad "
              "into a tensor that shares its storage (a view, or a value "
              "saved for backward): not supported", c->fn);
    return true;
  }
  return false;
}

static ag_node *node_new(const eager_call *c)
{
  ag_node *n = calloc(1, sizeof *n);
  if (!n) {
    tc_seterr(TC_E_NOMEM, "%s: out of memory recording autograd state",
              c->fn);
    return NULL;
  }
  atomic_init(&n->refs, 1);
  n->call = *c;
  n->nin = c->nin;
  for (int i = 0; i < c->nin; i++) {
    const tc_tensor *t = c->in[i];
    n->call.in[i] = NULL;
    if (!t)   /* layer_norm's absent gamma or beta */
      continue;
    n->in_dtype[i] = (tc_dtype)t->dtype;
    n->in_ndim[i] = t->ndim;
    memcpy(n->in_shape[i], t->shape, sizeof(int64_t) * t->ndim);
  }
  n->call.dst = NULL;
  return n;
}

/* Keep an alias (or, for an in-place op's destination, a copy) of each
** input the derivative reads, with its version now. */
static int save_inputs(ag_node *n, const eager_call *c)
{
  int sv = ag_deriv_saves(c->op);
  for (int i = 0; i < c->nin; i++) {
    if (!(sv & (1 << i)) || !c->in[i])
      continue;
    bool old_dst = c->dst && i == 0;
    tc_tensor *s = old_dst ? copy_of(c->in[i]) : ag_alias(c->in[i]);
    if (!s)
      return -1;
    n->saved[i] = s;
    n->saved_version[i] = ag_version(s);
  }
  return 0;
}

static int save_result(ag_node *n, tc_tensor *out)
{
  if (!(ag_deriv_saves(n->call.op) & SV_Y))
    return 0;
  n->saved[3] = ag_alias(out);
  if (!n->saved[3])
    return -1;
  n->saved_version[3] = ag_version(n->saved[3]);
  return 0;
}

/* The result (or an in-place op's destination) now comes from node n. */
static int attach(tc_tensor *out, ag_node *n, bool inplace)
{
  ag_meta *m = ag_meta_of(out);
  if (!m)
    return -1;
  ag_node_release(m->fn);
  m->fn = n;
  m->requires_grad = false;
  if (!inplace && n->call.op == TC_OP_VIEW) {
    m->is_view = true;
    m->view_version = ag_version(out);
  }
  return 0;
}

static tc_tensor *record(const eager_call *c)
{
  bool inplace = op_table[c->op].flags & OPF_M;
  bool any = false;
  for (int i = 0; i < c->nin; i++)
    any |= requires(c->in[i]);
  if (!any || grad_off || ag_deriv[c->op].kind == DK_NONDIFF ||
      !tensor_dtype_is_float(c->dtype))
    return eager_redispatch(c, TC_KEY_AUTOGRAD);
  for (int i = 0; i < c->nin; i++)
    if (c->in[i] && stale_view(c->fn, c->in[i]))
      return NULL;
  if (inplace && inplace_refused(c))
    return NULL;
  ag_node *n = node_new(c);
  if (!n || save_inputs(n, c) < 0) {
    ag_node_release(n);
    return NULL;
  }
  tc_tensor *out = eager_redispatch(c, TC_KEY_AUTOGRAD);
  if (!out || save_result(n, out) < 0) {
    ag_node_release(n);
    if (out && !inplace)
      tensor_unref(out);
    return NULL;
  }
  for (int i = 0; i < c->nin; i++)
    n->next[i] = edge_of(c->in[i]);   /* dst: its node before the write */
  if (attach(out, n, inplace) < 0) {
    ag_node_release(n);
    if (!inplace)
      tensor_unref(out);
    return NULL;
  }
  return out;
}

/* -- Public: tensors ---------------------------------------------------------- */

int tc_set_requires_grad(tc_tensor *t, bool on)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, t))
    return -1;
  if (!tensor_dtype_is_float((tc_dtype)t->dtype))
    return tc_seterr(TC_E_DTYPE, "%s: only floating-point tensors can "
                     "require grad (got %s)", fn,
                     tc_dtype_name((tc_dtype)t->dtype)), -1;
  ag_meta *m = ag_needs_grad(t) ? t->grad_meta : NULL;
  if (m && m->fn)
    return tc_seterr(TC_E_ARG, "%s: only leaf tensors can change "
                     "requires_grad (this one is the result of an op that "
                     "requires grad; tc_detach gives a leaf)", fn), -1;
  if (!on && !m)
    return 0;
  m = ag_meta_of(t);
  if (!m)
    return -1;
  m->requires_grad = on;
  return 0;
}

bool tc_requires_grad(const tc_tensor *t)
{
  return t && t->live == TENSOR_LIVE && requires(t);
}

tc_tensor *tc_grad(tc_tensor *t)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, t))
    return NULL;
  ag_grad_lock();
  ag_meta *m = ag_needs_grad(t) ? t->grad_meta : NULL;
  tc_tensor *g = m && m->grad ? ag_alias(m->grad) : NULL;
  bool none = !m || !m->grad;
  ag_grad_unlock();
  if (none) {
    tc_seterr(TC_E_ARG, "%s: the tensor has no gradient (it does not "
              "require grad, backward has not reached it, or it was "
              "zeroed)", fn);
    return NULL;
  }
  if (g)
    tensor_scope_track(g);
  return g;
}

int tc_zero_grad(tc_tensor *t)
{
  eager_init();
  if (!tensor_arg_ok(__func__, t))
    return -1;
  ag_grad_lock();
  ag_meta *m = ag_needs_grad(t) ? t->grad_meta : NULL;
  tc_tensor *g = m ? m->grad : NULL;
  if (m)
    m->grad = NULL;
  ag_grad_unlock();
  tensor_unref(g);
  return 0;
}

bool tc_set_grad_enabled(bool on)
{
  bool was = !grad_off;
  grad_off = !on;
  return was;
}

tc_tensor *tc_detach(tc_tensor *t)
{
  eager_init();
  if (!tensor_arg_ok(__func__, t))
    return NULL;
  tc_tensor *d = ag_alias(t);
  if (d)
    tensor_scope_track(d);
  return d;
}

/* -- Init ------------------------------------------------------------------------ */

static void release_hook(tc_tensor *t) { meta_free(t); }

static void init_once(void)
{
  tensor_grad_release_hook = release_hook;
  for (int op = 0; op < TC_OP__MAX; op++)
    eager_register(TC_KEY_AUTOGRAD, (tc_op)op, record);
}

/* Called by eager's one-time init, after trace_init (the AUTOGRAD handlers
** sit above TRACE's). Idempotent. */
void autograd_init(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
}
