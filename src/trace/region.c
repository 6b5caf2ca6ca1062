/*
** region.c -- realization: cut the region a realization point needs, hash
** it, find it in the region table by structure and guards, and run it
** (compiled plan when hot and compiled, the eager kernels otherwise).
**
** A region is the pending subgraph reachable from its outputs. Outputs are
** the lazy values being read and the pending in-place writes being
** completed; writing back to a storage pulls in every live value and write
** that still reads that storage's old contents, so nothing is computed
** from data overwritten under it. Only outputs are stored: intermediates
** still held by the program stay lazy and are recomputed if read.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>


#include "trace_int.h"

trace_config trace_config_cur = { .hot = 2, .recompile_limit = 8,
                                  .node_limit = 2048 };
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_compile_fn compile_hook;
static trace_run_fn run_hook;
static trace_graphless_fn graphless_hook;

void trace_config_load(void)
{
  const tensor_config *env = tensor_cfg();
  trace_config *c = &trace_config_cur;
  c->hot = env->hot;
  c->recompile_limit = env->recompile_limit;
  c->node_limit = env->node_limit;
  cache_configure(&(cache_config){ c->hot, c->recompile_limit,
                                   env->regions_max });
}

void trace_set_compiler(trace_compile_fn compile, trace_run_fn run,
                        trace_graphless_fn graphless)
{
  compile_hook = compile;
  run_hook = run;
  graphless_hook = graphless;
}

/* -- Bookkeeping: pending writes ------------------------------------------- */

trace_pending *trace_pending_find(const tc_tensor *t)
{
  trace_state *s = &trace_g;
  for (int i = 0; i < s->npending; i++)
    if (s->pending[i].dst == t || tensor_same_view(s->pending[i].dst, t))
      return &s->pending[i];
  return NULL;
}

int trace_pending_set(tc_tensor *dst, trace_node *n)
{
  trace_state *s = &trace_g;
  trace_node_retain(n);
  trace_pending *w = trace_pending_find(dst);
  if (w) {
    trace_node_release(w->node);
    w->node = n;
    return 0;
  }
  if (tensor_grow((void **)&s->pending, &s->cap_pending, s->npending + 1,
                  sizeof *s->pending) < 0) {
    trace_node_release(n);
    tc_seterr(TC_E_NOMEM, "out of memory recording an in-place write");
    return -1;
  }
  s->pending[s->npending++] = (trace_pending){ tensor_ref(dst), n };
  /* atomic: tensor_pending reads it without the trace lock */
  __atomic_fetch_add(&dst->storage->pending, 1, __ATOMIC_RELAXED);
  return 0;
}

static void pending_drop(tc_tensor *dst)
{
  trace_state *s = &trace_g;
  for (int i = 0; i < s->npending; i++)
    if (s->pending[i].dst == dst) {
      /* the write is done: a thread that sees the count drop (acquire,
      ** tensor_pending) sees what it wrote */
      __atomic_fetch_sub(&dst->storage->pending, 1, __ATOMIC_RELEASE);
      trace_node_release(s->pending[i].node);
      tensor_unref(s->pending[i].dst);
      s->pending[i] = s->pending[--s->npending];
      break;
    }
}

/* -- Output requests and the write-back closure ------------------------------ */

/* A value to compute: a node, and where it is written back (or NULL for
** a lazy value the program reads). */
typedef struct {
  trace_node *node;
  tc_tensor *dest;
} req;

/* A realization's requests: a few, inline (no allocation on the path of
** a small region realized every iteration), more on the heap. */
#define REQS_INLINE 8

typedef struct {
  int n, cap;
  req *at;               /* inl, or owned */
  req inl[REQS_INLINE];
} reqs;

#define REQS_INIT(q) { .n = 0, .cap = REQS_INLINE, .at = (q).inl }

static int req_add(reqs *r, trace_node *n, tc_tensor *dest)
{
  for (int i = 0; i < r->n; i++)
    if (r->at[i].node == n && r->at[i].dest == dest)
      return 0;
  if (r->n == r->cap) {
    int cap = 2 * r->cap;
    req *p = r->at == r->inl ? malloc(sizeof *p * (size_t)cap)
                             : realloc(r->at, sizeof *p * (size_t)cap);
    if (!p)
      return -1;
    if (r->at == r->inl)
      memcpy(p, r->inl, sizeof r->inl);
    r->at = p;
    r->cap = cap;
  }
  r->at[r->n++] = (req){ n, dest };
  return 0;
}

static bool writes_storage(const reqs *r, const tensor_storage *s)
{
  for (int i = 0; i < r->n; i++)
    if (r->at[i].dest && r->at[i].dest->storage == s)
      return true;
  return false;
}

/* Does n's pending subgraph read a storage written by r: a leaf's, or a
** computed value's (a handle bound to a value may be written in place, and
** the value is that handle's storage)? Memoized per epoch (n->reads), so
** one pass of the closure visits each node once. */
static bool reads_written(trace_node *n, const reqs *r, uint64_t epoch)
{
  if (n->mark == epoch)
    return n->reads;
  n->mark = epoch;
  bool reads = false;
  if (n->value)
    reads = writes_storage(r, n->value->storage);
  else if (!n->binds)   /* a binding one's value will be its target's */
    for (int i = 0; i < n->nin && !reads; i++) {
      const trace_edge *e = &n->in[i];
      reads = e->leaf ? writes_storage(r, e->leaf->storage)
                      : e->node && reads_written(e->node, r, epoch);
    }
  n->reads = reads;
  return reads;
}

/* Which write-backs will leave their value in their target: a contiguous
** target of the value's dtype and shape, the only one written on its
** storage. Such a value need not be computed for lazy readers before the
** write (they read it from the target after), so an optimizer's scope
** temporaries that read the state it updates stay lazy. Returns whether a
** node lost the role (the closure must look again). */
static bool update_binds(reqs *r)
{
  bool lost = false;
  for (int i = 0; i < r->n; i++) {
    trace_node *n = r->at[i].node;
    const tc_tensor *d = r->at[i].dest;
    if (!d)
      continue;
    bool ok = !n->value && d->dtype == n->dtype && d->ndim == n->ndim &&
              tensor_is_contiguous(d);
    for (int k = 0; ok && k < n->ndim; k++)
      ok = d->shape[k] == n->shape[k];
    for (int j = 0; ok && j < r->n; j++)
      ok = j == i || !r->at[j].dest ||
           (r->at[j].dest->storage != d->storage && r->at[j].node != n);
    lost |= n->binds && !ok;
    n->binds = ok;
  }
  return lost;
}

/* Add every live value and pending write that still reads a storage the
** region writes, until nothing more is pulled in. */
static int close_writes(reqs *r)
{
  trace_state *s = &trace_g;
  bool writes = false;
  for (int i = 0; i < r->n; i++)
    writes |= r->at[i].dest != NULL;
  if (!writes)
    return 0;   /* reading alone overwrites nothing */
  bool grew = true;
  while (grew) {
    grew = update_binds(r);
    /* One epoch per pass: what reads a written storage does not change
    ** within it (r only grows at its end, and is looked at again). */
    uint64_t epoch = ++s->epoch;
    bool added = false;
    for (int i = 0; i < s->npending; i++) {
      trace_pending *w = &s->pending[i];
      bool in = false;
      for (int j = 0; j < r->n; j++)
        in |= r->at[j].dest == w->dst;
      if (in)
        continue;
      if (writes_storage(r, w->dst->storage) ||
          reads_written(w->node, r, epoch)) {
        if (req_add(r, w->node, w->dst) < 0)
          return -1;
        added = true;
      }
    }
    for (int i = 0; i < s->nheld; i++) {
      trace_node *h = s->held[i];
      bool in = false;
      for (int j = 0; j < r->n; j++)
        in |= r->at[j].node == h && !r->at[j].dest;
      if (!in && !h->value && reads_written(h, r, epoch)) {
        if (req_add(r, h, NULL) < 0)
          return -1;
        added = true;
      }
    }
    grew |= added;
  }
  return 0;
}

static int64_t node_numel(const trace_node *n)
{
  int64_t k = 1;
  for (int d = 0; d < n->ndim; d++)
    k *= n->shape[d];
  return k;
}

/* Pending values the program still holds that already lived through an
** earlier realization (parameters made lazily, say) are stored this time
** rather than recomputed by every region that reads them. Of the values
** made since the last realization (this iteration's temporaries) only
** small ones (at most `small` elements, TUNE_SMALL_OUTPUT_DIV: per-row
** statistics a backward pass saves, say) are stored, since storing them costs little beside what the
** region computes and a later read would run them again, and so are small
** ones whose recomputation would run a matmul again (the residual stream
** of a decoding step, TUNE_COSTLY_SURVIVOR_MAX); the rest stay lazy. The
** region builder asks this of each pending node as it collects it (one
** walk of the region, not two): `before` is the count of realizations
** done before this one. */
static bool survives(const trace_node *n, int64_t small, uint64_t before)
{
  return n->handles &&
         (n->born < before || node_numel(n) <= small ||
          (n->costly && node_numel(n) <= TUNE_COSTLY_SURVIVOR_MAX));
}

/* -- Building the region ----------------------------------------------------- */

/* The region's arrays are kept from one realization to the next (under the
** trace lock, realizations do not nest; a nested one would allocate). */
typedef struct {
  trace_region r;
  int cap_nodes, cap_inputs, cap_outputs;
  uint64_t h;            /* the structure hash being built */
  bool spare;            /* its arrays are the spare's */
  reqs *q;               /* borrowed: the outputs, survivors appended */
  int64_t small;         /* survives()'s size bound */
  uint64_t before;       /* realizations done before this one */
} builder;

static builder spare;    /* arrays of the last region, for the next one */
static bool spare_busy;

/* The index of input t, appended if new (then *added, when given, is
** set); -1 when out of memory. */
static int input_of(builder *b, tc_tensor *t, bool *added)
{
  for (int i = 0; i < b->r.ninputs; i++)
    if (b->r.inputs[i] == t)
      return i;
  if (tensor_grow((void **)&b->r.inputs, &b->cap_inputs, b->r.ninputs + 1,
                  sizeof *b->r.inputs) < 0)
    return -1;
  b->r.inputs[b->r.ninputs] = t;
  if (added)
    *added = true;
  return b->r.ninputs++;
}

/* Read input t (a leaf tensor, or a value computed earlier): the hash
** records which input each read is, and at its first read its rank and
** whether it is a leaf (its dtype, sizes and strides are guarded). */
static int collect_input(builder *b, tc_tensor *t, bool leaf)
{
  bool added = false;
  int idx = input_of(b, t, &added);
  if (idx < 0)
    return -1;
  if (added)
    b->h = trace_hash_word(trace_hash_word(b->h, leaf),
                           trace_leaf_hash(t->ndim));
  b->h = trace_hash_word(b->h, (uint64_t)idx);
  return 0;
}

/* Depth-first from n: pending nodes in postorder (operands first). The
** structure hash is this walk written out: each node's own hash after its
** operands' (node_hash: op, attributes, edge kinds and views), each read
** of an input by index, each operand met again by its position. That
** determines the graph, and nothing outside the region enters it: which
** ops computed an input before is not structure. */
static int collect(builder *b, trace_node *n, uint64_t epoch)
{
  if (n->value)
    return collect_input(b, n->value, false);
  if (n->mark == epoch) {   /* a shared operand, by position */
    b->h = trace_hash_word(b->h, (uint64_t)(-2 - (int64_t)n->slot));
    return 0;
  }
  n->mark = epoch;
  /* Found before its operands, as the outputs are: the same order as a
  ** separate walk's. */
  if (survives(n, b->small, b->before) && req_add(b->q, n, NULL) < 0)
    return -1;
  for (int i = 0; i < n->nin; i++) {
    const trace_edge *e = &n->in[i];
    int rc = e->leaf   ? collect_input(b, e->leaf, true)
             : e->node ? collect(b, e->node, epoch)
                       : 0;   /* absent: the node's own hash says so */
    if (rc < 0)
      return -1;
  }
  if (tensor_grow((void **)&b->r.nodes, &b->cap_nodes, b->r.nnodes + 1,
                  sizeof *b->r.nodes) < 0)
    return -1;
  n->slot = b->r.nnodes;
  b->r.nodes[b->r.nnodes++] = n;
  b->h = trace_hash_word(b->h, n->hash);
  return 0;
}

/* Output n in the structure hash: its position in the region, or for a
** value computed before (a pending write of it), its input index. */
static uint64_t output_word(builder *b, const trace_node *n)
{
  if (!n->value)
    return (uint64_t)n->slot;
  /* collect() made it an input: found, not added */
  return (uint64_t)(-3000000 - (int64_t)input_of(b, n->value, NULL));
}

/* Done with the region; its nodes' slots must be reset already (the nodes
** may be gone by now). Its arrays go back to the spare, or are freed. */
static void region_free(builder *b)
{
  trace_region *r = &b->r;
  for (int i = 0; i < r->noutputs; i++)
    tensor_unref(r->result[i]);
  if (b->spare) {
    spare = *b;
    spare_busy = false;
    return;
  }
  free(r->nodes);
  free(r->inputs);
  free(r->outputs);
  free(r->dest);
  free(r->result);
}

/* Build the region for outputs q; the survivors it finds are appended to
** q (and are outputs too). */
static int region_build(builder *b, reqs *q, int64_t small, uint64_t before)
{
  if (!spare_busy) {
    *b = spare;
    b->spare = spare_busy = true;
  } else {
    memset(b, 0, sizeof *b);
  }
  trace_region *r = &b->r;
  r->nnodes = r->ninputs = 0;
  r->noutputs = 0;
  b->h = TRACE_HASH_SEED;
  b->q = q;
  b->small = small;
  b->before = before;
  uint64_t epoch = ++trace_g.epoch;
  for (int i = 0; i < q->n; i++)   /* q grows as survivors are found */
    if (collect(b, q->at[i].node, epoch) < 0)
      return -1;
  if (q->n > b->cap_outputs) {
    int cap = q->n < 16 ? 16 : q->n;
    trace_node **o = realloc(r->outputs, sizeof *o * (size_t)cap);
    if (o)
      r->outputs = o;
    tc_tensor **d = o ? realloc(r->dest, sizeof *d * (size_t)cap) : NULL;
    if (d)
      r->dest = d;
    tc_tensor **res = d ? realloc(r->result, sizeof *res * (size_t)cap)
                        : NULL;
    if (res)
      r->result = res;
    if (!res)
      return -1;
    b->cap_outputs = cap;
  }
  r->device = r->nnodes ? r->nodes[0]->device : TC_DEV_CPU;
  for (int i = 1; i < r->nnodes; i++)   /* realize cuts per device */
    TC_ASSERT(r->nodes[i]->device == r->device, "a region on two devices");
  r->noutputs = q->n;
  memset(r->result, 0, sizeof *r->result * (size_t)q->n);
  for (int i = 0; i < q->n; i++) {
    r->outputs[i] = q->at[i].node;
    r->dest[i] = q->at[i].dest;
  }
  /* Write-back targets are inputs too, so guards see their aliasing. */
  for (int i = 0; i < q->n; i++) {
    if (!q->at[i].dest)
      continue;
    int j = input_of(b, q->at[i].dest, NULL);
    if (j < 0)
      return -1;
    b->h = trace_hash_word(b->h, (uint64_t)(-1000000 - (int64_t)j));
  }
  for (int i = 0; i < q->n; i++) {
    b->h = trace_hash_word(b->h, output_word(b, q->at[i].node));
    b->h = trace_hash_word(b->h, q->at[i].dest != NULL);
  }
  r->hash = b->h;
  return 0;
}

/* -- Running a region eagerly ------------------------------------------------ */

static tc_tensor *edge_tensor(const trace_edge *e, tc_tensor **val)
{
  if (e->leaf)
    return tensor_ref(e->leaf);
  trace_node *s = e->node;
  tc_tensor *t = s->value ? s->value : val[s->slot];
  if (!e->viewed)
    return tensor_ref(t);
  const tensor_geom *g = &e->geom;
  return tensor_new_view(t, g->ndim, g->shape, g->stride,
                         t->offset + g->offset);
}

void trace_call_of(const trace_node *n, eager_call *c)
{
  memset(c, 0, sizeof *c);
  c->op = (tc_op)n->op;
  c->fn = op_table[n->op].name;
  c->nin = n->nin;
  c->s[0] = n->s[0];
  c->s[1] = n->s[1];
  c->dim = n->dim;
  c->keepdim = n->keepdim;
  c->dtype = (tc_dtype)n->dtype;
  c->cdtype = (tc_dtype)n->cdtype;
  c->ndim = n->ndim;
  memcpy(c->shape, n->shape, sizeof(int64_t) * (size_t)n->ndim);
}

static tc_tensor *run_node(trace_node *n, tc_tensor **val)
{
  eager_call c;
  trace_call_of(n, &c);
  bool ok = true;
  for (int i = 0; i < n->nin; i++)
    if ((n->in[i].node || n->in[i].leaf) &&
        !(c.in[i] = edge_tensor(&n->in[i], val)))
      ok = false;
  tc_tensor *out = ok ? trace_backend(n->device, c.op)(&c) : NULL;
  for (int i = 0; i < n->nin; i++)
    tensor_unref(c.in[i]);
  return out;
}

int trace_copy_into(tc_tensor *dst, tc_tensor *src)
{
  if (tensor_device_of(dst) == TC_DEV_CUDA)
    return eager_cuda_copy_into(dst, src);
  eager_copy_into(dst, src);
  return 0;
}

/* Run every node with the eager kernels, freeing each temporary after its
** last use; outputs go to r->result. */
static int run_eager(trace_region *r)
{
  int n = r->nnodes;
  tc_tensor **val = calloc((size_t)n + 1, sizeof *val);
  int *uses = calloc((size_t)n + 1, sizeof *uses);
  if (!val || !uses) {
    free(val);
    free(uses);
    return tc_seterr(TC_E_NOMEM, "out of memory running a region"), -1;
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < r->nodes[i]->nin; k++) {
      trace_node *s = r->nodes[i]->in[k].node;
      if (s && s->slot >= 0)
        uses[s->slot]++;
    }
  for (int i = 0; i < r->noutputs; i++)
    uses[r->outputs[i]->slot]++;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    trace_node *nd = r->nodes[i];
    val[i] = run_node(nd, val);
    if (!val[i]) {
      rc = -1;
      break;
    }
    for (int k = 0; k < nd->nin; k++) {
      trace_node *s = nd->in[k].node;
      if (s && s->slot >= 0 && --uses[s->slot] == 0) {
        tensor_unref(val[s->slot]);
        val[s->slot] = NULL;
      }
    }
  }
  if (rc == 0)
    for (int i = 0; i < r->noutputs; i++)
      r->result[i] = tensor_ref(val[r->outputs[i]->slot]);
  for (int i = 0; i < n; i++)
    tensor_unref(val[i]);
  free(val);
  free(uses);
  return rc;
}

/* -- The region table ------------------------------------------------------- */

static void log_guard_failure(cache_struct *s, const trace_region *r)
{
  char why[256];
  guard_explain(s->variants->guards, r->ninputs,
                (const tc_tensor *const *)r->inputs, why, sizeof why);
  if (tensor_log_on(TC_LOG_RECOMPILES) || tensor_log_on(TC_LOG_GUARDS))
    tensor_log(tensor_log_on(TC_LOG_RECOMPILES) ? TC_LOG_RECOMPILES : TC_LOG_GUARDS,
           "region %016llx: guard failed: %s (variant %d%s)",
           (unsigned long long)r->hash, why, s->nvariants + 1,
           s->want_dynamic ? ", shape-dynamic" : "");
}

/* The compiled shape-dynamic variant of s, when it takes these inputs and
** e (the variant they matched) is a cold static one. A structure that went
** shape-dynamic has shown that its shapes vary; a static variant still
** cold was made before that (a decoder's first KV lengths, met again by
** its next sequence) and compiling it now would only add a kernel for a
** shape the dynamic plan runs already. */
static cache_entry *dynamic_instead(cache_struct *s, cache_entry *e,
                                    const trace_region *r)
{
  cache_entry *d = s->dynamic;
  if (!d || d == e || d->state != CACHE_COMPILED || e->state != CACHE_COLD)
    return NULL;
  return guard_check(d->guards, r->ninputs,
                     (const tc_tensor *const *)r->inputs) ? d : NULL;
}

/* Count r's run on e (table locked); true when that made e hot: it is to
** be compiled now (and is marked compiling). */
static bool count_hit(cache_entry *e, const trace_region *r)
{
  if (!cache_hit(e))
    return false;
  if (tensor_log_on(TC_LOG_REGIONS))
    tensor_log(TC_LOG_REGIONS, "region %016llx hot after %llu runs: %d nodes, "
               "%d inputs, %d outputs", (unsigned long long)r->hash,
               (unsigned long long)e->hits, r->nnodes, r->ninputs,
               r->noutputs);
  if (!compile_hook)
    return false;
  e->state = CACHE_COMPILING;
  return true;
}

/* Find or make the entry for r (table locked); *hot says it just became
** hot and should be compiled now. *cold: the cold static variant r matched
** when the compiled shape-dynamic one is returned for it
** (dynamic_instead), its hit not counted; should the dynamic plan not
** run these shapes, the caller counts it then (count_hit). */
static cache_entry *lookup(const trace_region *r, bool *hot,
                           cache_entry **cold)
{
  const tc_tensor *const *ins = (const tc_tensor *const *)r->inputs;
  *hot = false;
  *cold = NULL;
  cache_struct *s = cache_struct_get(r->hash);
  if (!s)
    return NULL;
  cache_entry *e = cache_variant_find(s, r->ninputs, ins);
  cache_entry *d = e ? dynamic_instead(s, e, r) : NULL;
  if (d) {
    *cold = e;
    cache_hit(d);   /* compiled: never hot again */
    return d;
  }
  if (!e) {
    if (s->variants) {
      eager_count(ST_GUARD_FAILURES);
      log_guard_failure(s, r);
    }
    e = cache_variant_add(s, r->ninputs, ins);
    if (!e)
      return NULL;
    if (tensor_log_on(TC_LOG_REGIONS))
      tensor_log(TC_LOG_REGIONS, "region %016llx: new%s: %d nodes, %d "
                 "inputs, %d outputs", (unsigned long long)r->hash,
                 !e->guards->dynamic ? ""
                 : s->marched ? " (shape-dynamic) as its sizes march"
                              : " (shape-dynamic)", r->nnodes,
                 r->ninputs, r->noutputs);
  }
  *hot = count_hit(e, r);
  return e;
}

void trace_table_lock(void) { pthread_mutex_lock(&table_lock); }

void trace_table_unlock(void) { pthread_mutex_unlock(&table_lock); }

/* -- Realization ---------------------------------------------------------- */

/* Bind the outputs; -1 (error set) when a write-back's copy failed (a
** device error), the rest still bound. */
static int finish(trace_region *r)
{
  int rc = 0;
  for (int i = 0; i < r->noutputs; i++) {
    trace_node *n = r->outputs[i];
    tc_tensor *v = r->result[i];
    if (r->dest[i]) {
      if (v && trace_copy_into(r->dest[i], v) < 0)   /* eager result; a
                                                        plan writes dest */
        rc = -1;
      if (n->binds && !n->value)   /* lazy readers read it there */
        n->value = tensor_ref(r->dest[i]);
      pending_drop(r->dest[i]);
    } else if (v && !n->value) {
      n->value = tensor_ref(v);
      trace_materialize_handles(n, v);
    }
  }
  return rc;
}

static void clear_binds(reqs *q)
{
  for (int i = 0; i < q->n; i++)
    q->at[i].node->binds = false;
}

static int realize_one_device(reqs *q, bool read);
static void reqs_free(reqs *q);

/* Values on different devices share no node (every op's tensors are on
** one device), so a realization that asks for both (tc_sync, the node
** limit) is one region per device: each is compiled for its device. */
static int realize(reqs *q, bool read)
{
  bool cpu = false, cuda = false;
  for (int i = 0; i < q->n; i++) {
    cpu |= q->at[i].node->device == TC_DEV_CPU;
    cuda |= q->at[i].node->device == TC_DEV_CUDA;
  }
  if (!cpu || !cuda)
    return realize_one_device(q, read);
  /* Both parts first, their nodes held: realizing one frees nodes of q
  ** (a write-back drops its pending write's node). */
  reqs part[2] = { REQS_INIT(part[0]), REQS_INIT(part[1]) };
  int rc = 0;
  for (int i = 0; i < q->n && rc == 0; i++)
    rc = req_add(&part[q->at[i].node->device == TC_DEV_CUDA], q->at[i].node,
                 q->at[i].dest);
  if (rc < 0)
    tc_seterr(TC_E_NOMEM, "out of memory realizing");
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < part[d].n; i++)
      trace_node_retain(part[d].at[i].node);
  for (int d = 0; d < 2 && rc == 0; d++)
    rc = realize_one_device(&part[d], false);
  for (int d = 0; d < 2; d++) {
    for (int i = 0; i < part[d].n; i++)
      trace_node_release(part[d].at[i].node);
    reqs_free(&part[d]);
  }
  return rc;
}

/* A region's steps run their kernels directly: ops they make are not
** traced. Returns the keys to restore. */
static eager_tls_keys untraced(void)
{
  eager_tls_keys saved = eager_tls_get();
  eager_tls_set((eager_tls_keys){ saved.include,
                                  saved.exclude | TC_KEYSET(TC_KEY_TRACE) });
  return saved;
}

/* Count a successful run of entry e's plan. */
static void count_compiled_run(cache_entry *e)
{
  e->runs_compiled++;
  eager_count(ST_REGIONS_COMPILED);
  eager_note_compiled_run();
}

/* Entry e's compiled plan, or NULL while it has none (under table_lock). */
static void *ready_plan(const cache_entry *e)
{
  return e && e->state == CACHE_COMPILED ? e->plan : NULL;
}

/* Compile e (just hot) for r; its plan when ready now (else NULL: queued,
** or failed). */
static void *compile_now(trace_region *r, cache_entry *e)
{
  compile_hook(r, e);
  pthread_mutex_lock(&table_lock);
  void *plan = ready_plan(e);
  pthread_mutex_unlock(&table_lock);
  return plan;
}

/* Run r with e's plan (NULL: none ready); 0, or nonzero when it did not run
** (then r runs eagerly). *replayable: the plan may be taped. */
static int run_compiled(void *plan, trace_region *r, cache_entry *e,
                        bool *replayable)
{
  if (!plan || !run_hook)
    return -1;
  int rc = run_hook(plan, r);
  if (rc == 0) {
    count_compiled_run(e);
    *replayable = graphless_hook && graphless_hook(plan);
  }
  return rc;
}

/* read: q asks for one lazy value the program reads (a replay's tape may
** be made of its region). */
static int realize_one_device(reqs *q, bool read)
{
  if (q->n == 0)
    return 0;
  if (close_writes(q) < 0) {
    clear_binds(q);
    return tc_seterr(TC_E_NOMEM, "out of memory realizing"), -1;
  }
  int nreq = read ? q->n : 0;   /* before survivors are added */
  int64_t small = 0;   /* see survives */
  for (int i = 0; i < q->n; i++)
    if (node_numel(q->at[i].node) / TUNE_SMALL_OUTPUT_DIV > small)
      small = node_numel(q->at[i].node) / TUNE_SMALL_OUTPUT_DIV;
  builder b;
  trace_region *r = &b.r;
  int built = region_build(&b, q, small, trace_g.realizations++);
  if (built < 0) {
    for (int i = 0; i < r->nnodes; i++)
      r->nodes[i]->slot = -1;
    region_free(&b);
    clear_binds(q);
    return tc_seterr(TC_E_NOMEM, "out of memory realizing"), -1;
  }
  /* Keep the outputs alive while handles and writes are rebound. */
  for (int i = 0; i < r->noutputs; i++)
    trace_node_retain(r->outputs[i]);
  eager_tls_keys saved = untraced();
  bool hot;
  cache_entry *cold;
  pthread_mutex_lock(&table_lock);
  cache_entry *e = lookup(r, &hot, &cold);
  void *plan = ready_plan(e);
  pthread_mutex_unlock(&table_lock);
  if (hot)
    plan = compile_now(r, e);
  eager_count(ST_REGIONS);
  eager_note_region();
  bool replayable = false;
  int rc = run_compiled(plan, r, e, &replayable);
  if (rc != 0 && cold) {   /* the static variant after all */
    e = cold;
    pthread_mutex_lock(&table_lock);
    hot = count_hit(e, r);
    pthread_mutex_unlock(&table_lock);
    if (hot)
      rc = run_compiled(compile_now(r, e), r, e, &replayable);
  }
  trace_replay_offer(replayable ? r : NULL, nreq);
  if (rc != 0) {
    rc = run_eager(r);
    if (e)
      e->runs_eager++;
    eager_count(ST_REGIONS_EAGER);
  }
  eager_tls_set(saved);
  if (rc == 0)
    rc = finish(r);
  clear_binds(q);
  for (int i = 0; i < r->nnodes; i++)
    r->nodes[i]->slot = -1;
  for (int i = 0; i < r->noutputs; i++)
    trace_node_release(r->outputs[i]);
  region_free(&b);
  return rc;
}

int trace_region_replay(trace_region *r)
{
  pthread_mutex_lock(&table_lock);
  cache_struct *s = cache_struct_get(r->hash);
  cache_entry *e = s ? cache_variant_find(s, r->ninputs,
                                          (const tc_tensor *const *)r->inputs)
                     : NULL;
  void *plan = ready_plan(e);
  if (plan && !(run_hook && graphless_hook && graphless_hook(plan)))
    plan = NULL;
  if (plan)
    cache_hit(e);   /* a compiled entry: hot long ago */
  pthread_mutex_unlock(&table_lock);
  if (!plan)
    return 1;
  eager_tls_keys saved = untraced();
  int rc = run_hook(plan, r);
  eager_tls_set(saved);
  if (rc != 0)
    return -1;
  trace_g.realizations++;
  eager_count(ST_REGIONS);
  eager_note_region();
  count_compiled_run(e);
  return 0;
}

static void reqs_free(reqs *q)
{
  if (q->at != q->inl)
    free(q->at);
}

int trace_realize_tensor(tc_tensor *t)
{
  reqs q = REQS_INIT(q);
  int rc = 0;
  if (t->lazy)
    rc = req_add(&q, t->lazy, NULL);
  else if (t->storage && t->storage->pending)
    for (int i = 0; i < trace_g.npending && rc == 0; i++)
      if (trace_g.pending[i].dst->storage == t->storage)
        rc = req_add(&q, trace_g.pending[i].node, trace_g.pending[i].dst);
  if (rc == 0)
    rc = realize(&q, t->lazy != NULL);
  reqs_free(&q);
  return rc;
}

int trace_flush_storage(tensor_storage *s)
{
  reqs q = REQS_INIT(q);
  int rc = 0;
  for (int i = 0; i < trace_g.npending && rc == 0; i++)
    if (trace_g.pending[i].dst->storage == s)
      rc = req_add(&q, trace_g.pending[i].node, trace_g.pending[i].dst);
  if (rc == 0)
    rc = realize(&q, false);
  reqs_free(&q);
  return rc;
}

int trace_sync(void)
{
  reqs q = REQS_INIT(q);
  int rc = 0;
  for (int i = 0; i < trace_g.npending && rc == 0; i++)
    rc = req_add(&q, trace_g.pending[i].node, trace_g.pending[i].dst);
  if (rc == 0)
    rc = realize(&q, false);
  reqs_free(&q);
  return rc;
}

/* Does n's pending subgraph read storage s (a leaf's or a computed
** value's)? */
static bool reads_storage(trace_node *n, const tensor_storage *s,
                          uint64_t epoch)
{
  if (n->mark == epoch)
    return false;
  n->mark = epoch;
  if (n->value)
    return n->value->storage == s;
  for (int i = 0; i < n->nin; i++) {
    const trace_edge *e = &n->in[i];
    if (e->leaf ? e->leaf->storage == s
                : e->node && reads_storage(e->node, s, epoch))
      return true;
  }
  return false;
}

int trace_expose(tc_tensor *t)
{
  reqs q = REQS_INIT(q);
  int rc = 0;
  for (int i = 0; i < trace_g.npending && rc == 0; i++)
    if (trace_g.pending[i].dst->storage == t->storage ||
        reads_storage(trace_g.pending[i].node, t->storage, ++trace_g.epoch))
      rc = req_add(&q, trace_g.pending[i].node, trace_g.pending[i].dst);
  for (int i = 0; i < trace_g.nheld && rc == 0; i++) {
    trace_node *h = trace_g.held[i];
    if (!h->value && reads_storage(h, t->storage, ++trace_g.epoch))
      rc = req_add(&q, h, NULL);
  }
  if (rc == 0)
    rc = realize(&q, false);
  else
    tc_seterr(TC_E_NOMEM, "out of memory realizing");
  reqs_free(&q);
  return rc;
}

int trace_realize_all(void)
{
  reqs q = REQS_INIT(q);
  int rc = 0;
  for (int i = 0; i < trace_g.npending && rc == 0; i++)
    rc = req_add(&q, trace_g.pending[i].node, trace_g.pending[i].dst);
  for (int i = 0; i < trace_g.nheld && rc == 0; i++)
    if (!trace_g.held[i]->value)
      rc = req_add(&q, trace_g.held[i], NULL);
  if (rc == 0)
    rc = realize(&q, false);
  reqs_free(&q);
  return rc;
}
