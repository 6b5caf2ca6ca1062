/*
** record.c -- the TRACE key's handlers: ops on traced tensors record lazy
** nodes (their arguments were already checked at the call, so errors are
** raised exactly as in eager mode); views of lazy tensors are lazy views;
** in-place ops are functionalized. Realization lives in region.c.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

trace_state trace_g;

/* -- Nodes ------------------------------------------------------------------ */

/* Does lazy handle t show its node's value as it is (no view)? */
static bool shows_node(const tc_tensor *t, const trace_node *n)
{
  if (t->offset != 0 || t->ndim != n->ndim)
    return false;
  int64_t st = 1;
  for (int d = n->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != n->shape[d] || (n->shape[d] != 1 && t->stride[d] != st))
      return false;
    st *= n->shape[d] > 1 ? n->shape[d] : 1;
  }
  return true;
}

/* Nodes come from a free list (under the lock): recording is on every op's
** path (issue 3: tracing costs at most 1.5x an eager op). Emptied at
** process exit. */
#ifdef __SANITIZE_ADDRESS__
#define NODE_CACHE 0   /* AddressSanitizer sees every use after free */
#else
#define NODE_CACHE TUNE_NODE_CACHE
#endif

/* Under the lock: exit() on one thread leaves the others running, and
** they may be recording. */
__attribute__((destructor)) static void node_cache_at_exit(void)
{
  trace_lock();
  while (trace_g.free_nodes) {
    trace_node *n = trace_g.free_nodes;
    trace_g.free_nodes = (trace_node *)n->handles;
    free(n);
  }
  trace_g.nfree = 0;
  trace_unlock();
}

/* An uninitialized node; node_for_call sets every field it reads. */
trace_node *trace_node_alloc(void)
{
  trace_node *n = trace_g.free_nodes;
  if (n) {
    trace_g.free_nodes = (trace_node *)n->handles;
    trace_g.nfree--;
  } else if (!(n = malloc(sizeof *n))) {
    tc_seterr(TC_E_NOMEM, "out of memory recording an op");
  }
  return n;
}

void trace_node_retain(trace_node *n) { n->refs++; }

/* A leaf edge's reference: a program reads the same few leaves (weights,
** inputs) in op after op, so the edges share one reference to each, and
** taking another is a plain increment under the lock. */
tc_tensor *trace_leaf_ref(tc_tensor *t)
{
  if (t->trace_refs++ == 0)
    tensor_ref(t);
  return t;
}

void trace_leaf_unref(tc_tensor *t)
{
  if (--t->trace_refs == 0)
    tensor_unref(t);
}

void trace_node_free(trace_node *n)
{
  do {
    /* Free iteratively along the first input; recurse on the others. */
    trace_node *next = NULL;
    for (int i = 0; i < n->nin; i++) {
      trace_node *in = n->in[i].node;
      if (n->in[i].leaf) {
        trace_leaf_unref(n->in[i].leaf);
        trace_g.live_nodes--;
      }
      if (!in)
        continue;
      if (!next)
        next = in;
      else
        trace_node_release(in);
    }
    tensor_unref(n->value);
    trace_g.live_nodes--;
    if (trace_g.nfree < NODE_CACHE) {
      n->handles = (tc_tensor *)trace_g.free_nodes;
      trace_g.free_nodes = n;
      trace_g.nfree++;
    } else {
      free(n);
    }
    n = next;
  } while (n && --n->refs <= 0);
}

/* -- Structure hashes ------------------------------------------------------ */

/* The structure hash of a leaf edge depends on the tensor's rank alone:
** its dtype is guarded, not structure (a region that casts its input first
** is the same region for any input dtype), and which tensor it is enters
** the region's input pattern. Hashed like a node of no op (TC_OP__MAX) and
** that rank; made once at init. */
static uint64_t leaf_hashes[TC_MAX_DIMS + 1];

static void leaf_hashes_init(void)
{
  for (int d = 0; d <= TC_MAX_DIMS; d++)
    leaf_hashes[d] = trace_hash_word(TRACE_HASH_SEED, (uint64_t)TC_OP__MAX |
                                          (uint64_t)d << 32);
}

uint64_t trace_leaf_hash(int ndim) { return leaf_hashes[ndim]; }

/* A view's geometry as read by an edge (rank word marked, so a viewed edge
** never reads like an unviewed one followed by another edge). */
static uint64_t geom_hash(uint64_t h, const tensor_geom *g)
{
  h = trace_hash_word(h, (uint64_t)g->ndim | (uint64_t)1 << 32);
  for (int d = 0; d < g->ndim; d++) {
    h = trace_hash_word(h, (uint64_t)g->shape[d]);
    h = trace_hash_word(h, (uint64_t)g->stride[d]);
  }
  return trace_hash_word(h, (uint64_t)g->offset);
}

/* The structure hash of a node, by itself: its op and attributes, and for
** each input what kind of edge it is (a node's value, or a leaf of some
** rank) and the view geometry it reads through. Scalar values are runtime
** arguments and stay out; whether an op has scalars is implied by the op.
** Which node an edge reads is not in it: the region's hash (region.c)
** adds that as it walks the region, so a region's hash does not depend on
** what came before it (a decoder's layers are one structure).
** O(1) per op. */
static uint64_t node_hash(const trace_node *n)
{
  uint64_t h = trace_hash_word(TRACE_HASH_SEED,
                         (uint64_t)n->op | (uint64_t)n->dtype << 16 |
                         (uint64_t)n->cdtype << 24 | (uint64_t)n->ndim << 32 |
                         (uint64_t)n->nin << 40 | (uint64_t)n->keepdim << 48 |
                         (uint64_t)n->device << 56);
  h = trace_hash_word(h, (uint64_t)(int64_t)n->dim);
  for (int i = 0; i < n->nin; i++) {
    const trace_edge *e = &n->in[i];
    h = trace_hash_word(h, e->node   ? TRACE_NODE_EDGE
                     : e->leaf ? leaf_hashes[e->leaf->ndim]
                               : 0);
    if (e->viewed)
      h = geom_hash(h, &e->geom);
  }
  return h;
}

/* -- Handles ---------------------------------------------------------------- */

/* The held list: nodes with live handles, for realizations that must
** find them (close_writes, realize_all). A node keeps its index, so
** removal is a swap with the last. Best effort on OOM: such a node is
** not found by those walks, as before (held = -1). */
static void held_add(trace_node *n)
{
  trace_state *s = &trace_g;
  if (tensor_grow((void **)&s->held, &s->cap_held, s->nheld + 1,
                  sizeof *s->held) < 0) {
    n->held = -1;
    return;
  }
  n->held = s->nheld;
  s->held[s->nheld++] = n;
}

static void held_remove(trace_node *n)
{
  trace_state *s = &trace_g;
  if (n->held < 0)
    return;
  trace_node *last = s->held[--s->nheld];
  s->held[n->held] = last;
  last->held = n->held;
}

void trace_handle_link(trace_node *n, tc_tensor *h)
{
  if (!n->handles)
    held_add(n);
  h->lazy_next = n->handles;
  n->handles = h;
  trace_node_retain(n);
}

static void handle_unlink(trace_node *n, tc_tensor *h)
{
  for (tc_tensor **p = &n->handles; *p; p = &(*p)->lazy_next)
    if (*p == h) {
      *p = h->lazy_next;
      break;
    }
  h->lazy_next = NULL;
  if (!n->handles)
    held_remove(n);
}

/* Handle h (raw memory) made a lazy handle over node n with geometry g
** (NULL: n's contiguous shape), not in n's list. */
void trace_handle_fill(tc_tensor *h, trace_node *n, const tensor_geom *g)
{
  int ndim = g ? g->ndim : n->ndim;
  const int64_t *shape = g ? g->shape : n->shape;
  /* Every field set once (no memset: this is on every traced op's path). */
  atomic_init(&h->refs, 1);
  atomic_init(&h->user_refs, 1);
  h->dtype = n->dtype;
  h->ndim = (uint8_t)ndim;
  h->keys = TC_KEYSET(n->device == TC_DEV_CUDA ? TC_KEY_CUDA : TC_KEY_CPU) |
            TC_KEYSET(TC_KEY_TRACE);
  h->kept = 0;
  h->exposed = 0;
  h->scope_slot = -1;
  h->scope_owner = 0;
  h->live = TENSOR_LIVE;
  h->trace_refs = 0;
  h->offset = 0;
  h->storage = NULL;
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    h->shape[d] = shape[d];
    numel *= shape[d];
  }
  h->numel = numel;
  if (g) {
    memcpy(h->stride, g->stride, sizeof(int64_t) * (size_t)ndim);
    h->offset = g->offset;
  } else {
    tensor_contiguous_strides(ndim, shape, h->stride);
  }
  h->lazy = n;
  h->lazy_plain = !g || shows_node(h, n);   /* asked of every edge read */
  h->lazy_replay = 0;
  h->grad_meta = NULL;
}

tc_tensor *trace_handle_new(trace_node *n, const tensor_geom *g)
{
  tc_tensor *h = tensor_handle_alloc();
  if (!h) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating a tensor handle");
    return NULL;
  }
  trace_handle_fill(h, n, g);
  trace_handle_link(n, h);
  return h;
}

/* tensor_lazy_release_hook: a lazy handle died. */
static void handle_released(tc_tensor *h)
{
  trace_node *n = h->lazy;
  h->lazy = NULL;
  handle_unlink(n, h);
  trace_node_release(n);
}

/* Lazy handle h (out of its node's list) shows value v (contiguous) from
** now on. */
void trace_handle_bind(tc_tensor *h, tc_tensor *v)
{
  h->storage = v->storage;
  atomic_fetch_add(&v->storage->refs, 1);
  h->offset += v->offset;
  h->lazy_replay = 0;
  /* published last: another thread that reads h without the trace lock
  ** (tensor_lazy, tensor_keys) sees it materialized only with the above */
  __atomic_store_n(&h->lazy, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&h->keys, (uint8_t)(h->keys & ~TC_KEYSET(TC_KEY_TRACE)),
                   __ATOMIC_RELEASE);   /* autograd's stays */
}

/* Bind every handle of n to its computed value v (contiguous). */
void trace_materialize_handles(trace_node *n, tc_tensor *v)
{
  trace_node_retain(n);   /* n outlives the loop */
  while (n->handles) {
    tc_tensor *h = n->handles;
    handle_unlink(n, h);
    trace_handle_bind(h, v);
    trace_node_release(n);
  }
  trace_node_release(n);
}

/* -- Edges: how an op reads a tensor ---------------------------------------- */

/* Make every input readable as an edge: a materialized input whose storage
** has pending writes that it does not read exactly (another view of the
** storage) gets them written back first. All of this happens before any
** edge is taken: a write-back may compute and overwrite what an edge taken
** earlier would still read lazily (a pending write's node reading the
** storage it is written to), and nothing outside the graph would tell the
** realization that such an edge exists. */
static int flush_inputs(tc_tensor *const *in, int n)
{
  for (int i = 0; i < n; i++) {
    tc_tensor *t = in[i];
    if (t && !t->lazy && t->storage && t->storage->pending &&
        !trace_pending_find(t) && trace_flush_storage(t->storage) < 0)
      return -1;
  }
  return 0;
}

/* The edge for reading t (after flush_inputs): its node (with t's
** geometry) when lazy; the pending write's node when t is exactly a view
** with a pending write; else t itself (a leaf edge). A leaf edge counts as
** a node against the node limit: the region builder visits it like one.
** e is empty on entry. */
static void edge_of(tc_tensor *t, trace_edge *e)
{
  if (t->lazy) {
    trace_node *n = t->lazy;
    e->viewed = !t->lazy_plain;
    if (e->viewed)
      tensor_geom_of(t, &e->geom);
    e->node = n;
    trace_node_retain(n);
    return;
  }
  trace_pending *w = t->storage->pending ? trace_pending_find(t) : NULL;
  if (w) {
    e->node = w->node;
    trace_node_retain(w->node);
    return;
  }
  e->leaf = trace_leaf_ref(t);
  trace_g.live_nodes++;
}

/* Set every field of node n but its input edges (left absent) and hash:
** the op of call c (whose first `skip` inputs it does not read), on
** device. This is on every traced op's path: each field is stored once. */
void trace_node_init(trace_node *n, const eager_call *c, tc_op op, int skip,
                     int device)
{
  n->refs = 0;
  n->op = op;
  n->dtype = (uint8_t)c->dtype;
  n->cdtype = (uint8_t)c->cdtype;
  n->device = (uint8_t)device;
  n->ndim = c->ndim;
  for (int d = 0; d < c->ndim; d++)
    n->shape[d] = c->shape[d];
  n->nin = c->nin - skip;
  n->s[0] = c->s[0];
  n->s[1] = c->s[1];
  n->dim = c->dim;
  n->keepdim = c->keepdim;
  n->hash = 0;
  n->value = NULL;
  n->handles = NULL;
  n->mark = 0;
  n->born = trace_g.realizations;
  n->seq = trace_g.recorded++;
  n->plain_op = false;
  n->slot = -1;
  n->binds = false;
  n->costly = op == TC_OP_MATMUL;
  trace_g.live_nodes++;
  for (int i = 0; i < n->nin; i++) {
    n->in[i].node = NULL;
    n->in[i].leaf = NULL;
    n->in[i].viewed = false;   /* geom only when viewed */
  }
}

/* Once its edges are set: what n inherits from them, and its hash. */
void trace_node_seal(trace_node *n, int skip)
{
  for (int i = 0; i < n->nin; i++) {
    const trace_node *in = n->in[i].node;
    if (in && !in->value)
      n->costly |= in->costly;
  }
  n->hash = node_hash(n);
  /* An in-place twin that does not read its target (COPY_ is CAST(src),
  ** FILL_ is FILL()) has the target's shape, which nothing it reads
  ** implies: a region that reads it must not be reused for another shape
  ** (no guard would see the difference), so the shape is structure. */
  for (int d = 0; skip > 0 && d < n->ndim; d++)
    n->hash = trace_hash_word(n->hash, (uint64_t)n->shape[d]);
}

/* How many of c's first inputs a node computing op does not read: its
** inputs are the last op_table[op].nin of c's, since an in-place op's twin
** may read fewer than the op (COPY_(dst, src) is CAST(src), FILL_(dst) is
** FILL()). */
static int skipped_inputs(const eager_call *c, tc_op op)
{
  return c->nin > op_table[op].nin ? c->nin - op_table[op].nin : 0;
}

/* A node computing op for call c, NULL on failure. */
static trace_node *node_for_call(const eager_call *c, tc_op op)
{
  int skip = skipped_inputs(c, op);
  if (flush_inputs(c->in + skip, c->nin - skip) < 0)
    return NULL;
  trace_node *n = trace_node_alloc();
  if (!n)
    return NULL;
  trace_node_init(n, c, op, skip, eager_call_device(c));
  for (int i = 0; i < n->nin; i++)
    if (c->in[skip + i])
      edge_of(c->in[skip + i], &n->in[i]);
  trace_node_seal(n, skip);
  return n;
}

/* Realize everything when the live graph grows past the node limit. */
static int check_limit(void)
{
  if (trace_g.live_nodes < trace_cfg()->node_limit)
    return 0;
  if (tensor_log_on(TC_LOG_REGIONS))
    tensor_log(TC_LOG_REGIONS, "node limit %d reached: realizing everything",
           trace_cfg()->node_limit);
  return trace_realize_all();
}

/* -- Handlers ------------------------------------------------------------- */

static bool any_lazy(const eager_call *c)
{
  for (int i = 0; i < c->nin; i++)
    if (c->in[i] && c->in[i]->lazy)
      return true;
  return false;
}

/* The eager kernel of c's device. */
static eager_kernel backend_of(const eager_call *c)
{
  return trace_backend(eager_call_device(c), c->op);
}

static tc_tensor *run_now(const eager_call *c)
{
  for (int i = 0; i < c->nin; i++)
    if (c->in[i] && tensor_make_readable(c->in[i]) < 0)
      return NULL;
  return backend_of(c)(c);
}

/* Does node n read a storage the program holds a raw pointer into? Then
** it is computed at once, as eagerly: a raw write may come at any time
** after the op and must not reach it (tc_data). */
static bool reads_exposed(const trace_node *n)
{
  for (int i = 0; i < n->nin; i++)
    if (n->in[i].leaf && atomic_load_explicit(&n->in[i].leaf->storage->exposed,
                                              memory_order_relaxed))
      return true;
  return false;
}

/* Functional ops: one new node, one new lazy handle. */
static tc_tensor *trace_functional(const eager_call *c)
{
  if (check_limit() < 0)
    return NULL;
  trace_node *n = node_for_call(c, c->op);
  if (!n)
    return NULL;
  tc_tensor *h = trace_handle_new(n, NULL);
  if (!h) {
    n->refs = 1;
    trace_node_release(n);
    return NULL;
  }
  if (reads_exposed(n) && trace_realize_tensor(h) < 0) {
    tensor_unref(h);
    return NULL;
  }
  return h;
}

/* Views: a lazy input gets a new handle on the same node with the view's
** geometry; a materialized input gets an ordinary (eager) view. */
static tc_tensor *trace_view(const eager_call *c)
{
  tc_tensor *a = c->in[0];
  if (!a->lazy)
    return backend_of(c)(c);
  return trace_handle_new(a->lazy, &c->view);
}

/* contiguous(): a lazy value is contiguous already unless viewed. */
static tc_tensor *trace_contiguous(const eager_call *c)
{
  tc_tensor *a = c->in[0];
  if (!a->lazy)
    return run_now(c);
  trace_node *n = a->lazy;
  if (a->lazy_plain && a->dtype == c->dtype)
    return trace_handle_new(n, NULL);   /* a new handle, same value */
  return trace_functional(c);
}

/* In-place: functionalize. A lazy dst that is the only, unviewed handle of
** its node is rebound to twin(node, src). Otherwise dst is materialized
** first, and a pending write (dst, twin(read dst, src)) is kept. */
static tc_tensor *trace_inplace(const eager_call *c)
{
  tc_tensor *dst = c->dst;
  tc_op twin = (tc_op)op_table[c->op].twin;
  if (check_limit() < 0)
    return NULL;
  /* The twin's inputs are flushed before dst is looked at, not inside
  ** node_for_call: the write-back may compute dst's own node (a value that
  ** reads the storage written: add_(x, v) with x = a + v, v a view with a
  ** pending write), after which dst is no longer the lazy handle it was,
  ** and rebinding it would unlink it from a node already freed. */
  int skip = skipped_inputs(c, twin);
  if (flush_inputs(c->in + skip, c->nin - skip) < 0)
    return NULL;
  if (dst->lazy) {
    trace_node *old = dst->lazy;
    bool sole = old->handles == dst && !dst->lazy_next && dst->lazy_plain;
    if (!sole && tensor_hooks.realize(dst) < 0)
      return NULL;
    if (sole) {
      trace_node *n = node_for_call(c, twin);
      if (!n)
        return NULL;
      /* Rebind: the handle now shows twin(old, src). */
      handle_unlink(old, dst);
      dst->lazy = n;
      dst->lazy_plain = shows_node(dst, n);
      trace_handle_link(n, dst);
      trace_node_release(old);
      if (reads_exposed(n) && trace_realize_tensor(dst) < 0)
        return NULL;
      return dst;
    }
  }
  /* dst is materialized: a pending write, chained onto an earlier one. */
  trace_pending *w = trace_pending_find(dst);
  if (!w && dst->storage->pending && trace_flush_storage(dst->storage) < 0)
    return NULL;
  trace_node *n = node_for_call(c, twin);
  if (!n)
    return NULL;
  if (trace_pending_set(dst, n) < 0) {
    n->refs = 1;
    trace_node_release(n);
    return NULL;
  }
  /* The version counts writes when they are made, as eagerly: autograd
  ** compares it with the one a saved tensor had when it was saved. */
  atomic_fetch_add(&dst->storage->version, 1);
  /* A write to a storage the program has a raw pointer into, or reading
  ** one, happens now (tc_data). */
  if ((atomic_load_explicit(&dst->storage->exposed, memory_order_relaxed)
       || reads_exposed(n)) && trace_flush_storage(dst->storage) < 0)
    return NULL;
  return dst;
}

/* Ops that trace does not record run eagerly on realized inputs. */
static tc_tensor *trace_eager(const eager_call *c)
{
  if (!any_lazy(c) && !(c->dst && c->dst->storage->pending))
    return backend_of(c)(c);
  return run_now(c);
}

/* A call on the device is checked as eager checks it (all its tensors on
** one device, or eager's error now), its 0-d CPU operands are copied to
** the device (a region's inputs are all on its device), and then recorded
** by handler. */
static tc_tensor *on_device(eager_kernel handler, const eager_call *c)
{
  if (eager_call_device(c) != TC_DEV_CUDA)
    return handler(c);
  eager_call dc;
  tc_tensor *moved[3];
  if (eager_cuda_operands(c, &dc, moved) < 0)
    return NULL;
  tc_tensor *r = handler(&dc);
  for (int e = 0; e < 3; e++)
    tensor_unref(moved[e]);
  return r;
}

/* Every handler runs under the trace lock, and sees the graph whole: a
** replay in flight is left first. */
#define LOCKED(name)                                  \
  static tc_tensor *locked_##name(const eager_call *c) \
  {                                                   \
    trace_lock();                                     \
    trace_replay_leave();                             \
    tc_tensor *r = on_device(name, c);                \
    trace_unlock();                                   \
    return r;                                         \
  }
LOCKED(trace_view)
LOCKED(trace_inplace)
LOCKED(trace_contiguous)
LOCKED(trace_eager)
#undef LOCKED

/* A functional op is replayed when it is the next op of the tape armed;
** else recorded (its node marked as one a replay could match). */
static tc_tensor *locked_trace_functional(const eager_call *c)
{
  trace_lock();
  tc_tensor *r;
  if (!trace_replay_op(c, &r)) {
    r = on_device(trace_functional, c);
    if (r && r->lazy && eager_call_device(c) == TC_DEV_CPU)
      ((trace_node *)r->lazy)->plain_op = true;
  }
  trace_unlock();
  return r;
}

static void register_handlers(void)
{
  for (int op = 0; op < TC_OP__MAX; op++) {
    eager_kernel k;
    switch (op_table[op].kind) {
    case OPK_VW:
      k = locked_trace_view;
      break;
    case OPK_PW:
      k = (op_table[op].flags & OPF_M) ? locked_trace_inplace
                                       : locked_trace_functional;
      break;
    case OPK_RD:
    case OPK_CP:
      k = locked_trace_functional;
      break;
    default:
      /* Extern ops are recorded: each runs as a step of its region. */
      k = op == TC_OP_CONTIGUOUS ? locked_trace_contiguous
          : op_table[op].kind == OPK_EX ? locked_trace_functional
                                        : locked_trace_eager;
    }
    eager_register(TC_KEY_TRACE, (tc_op)op, k);
  }
}

/* The hooks lower layers call, under the lock. */
static void locked_handle_released(tc_tensor *h)
{
  trace_lock();
  if (h->lazy_replay)   /* a replayed op's: no node to release */
    trace_replay_release(h);
  else if (h->lazy)   /* another thread may have bound it since
                         tensor_free looked */
    handle_released(h);
  trace_unlock();
}

static int locked_realize(tc_tensor *t)
{
  trace_lock();
  int rc = 0;
  /* Another thread may have realized t since the caller looked. */
  if (!trace_replay_realize(t, &rc) &&
      (t->lazy || (t->storage && t->storage->pending)))
    rc = trace_realize_tensor(t);
  trace_unlock();
  return rc;
}

static int locked_sync(void)
{
  trace_lock();
  trace_replay_leave();
  int rc = trace_sync();
  trace_unlock();
  return rc;
}

static int locked_expose(tc_tensor *t)
{
  trace_lock();
  trace_replay_leave();
  int rc = trace_expose(t);
  trace_unlock();
  return rc;
}

static int locked_realize_all(void)
{
  trace_lock();
  trace_replay_leave();
  int rc = trace_realize_all();
  trace_unlock();
  return rc;
}

/* -- Init ------------------------------------------------------------------- */

static void init_once(void)
{
  trace_config_load();
  trace_lock_init();
  leaf_hashes_init();
  register_handlers();
  tensor_lazy_release_hook = locked_handle_released;
  tensor_hooks.realize = locked_realize;
  tensor_hooks.sync = locked_sync;
  tensor_hooks.realize_all = locked_realize_all;
  tensor_hooks.expose = locked_expose;
  tensor_hooks.lock = trace_lock;
  tensor_hooks.unlock = trace_unlock;
  trace_compile_register();
  trace_cuda_store_register();
}

/* Called by eager's one-time init (the library's composition root), so a
** static link that pulls in any op pulls in tracing too: no constructor
** that a linker could drop. Idempotent. */
void trace_init(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
}

int trace_live_nodes(void) { return trace_g.live_nodes; }
