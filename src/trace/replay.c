/*
** replay.c -- op-level replay of compiled regions.
**
** A program that reads a small result every iteration records the same
** ops each time, and recording them as graph nodes costs as much as the
** ops themselves. Once a region has run compiled, it is kept as a tape:
** its ops in the order the program recorded them, each with its attributes
** and where its inputs come from (an earlier op of the tape, or a region
** input). The tape is then armed: the next ops are matched against it one
** by one, and a matched op makes a lazy handle over the tape's template
** node and nothing else. When the program reads the result the tape asks
** for, with every op matched and the same values held, the region's plan
** runs on the bound inputs at once: no graph is walked or hashed.
**
** Anything else leaves the replay: an op that differs, any other trace
** entry (a view, an in-place op, a sync, a read of another value). Leaving
** turns the ops matched so far into the graph nodes recording would have
** made (same fields, edges, hashes and birth), rebinds their live handles
** to them, and recording goes on as if replay had never been: the graph
** the program sees is always the one it would have recorded. Deoptimizing
** cannot fail: the nodes it needs are reserved when a run starts.
**
** Everything here runs under the trace lock. One run is in flight at a
** time, process-wide, as the graph is one per process.
*/
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/* Where a taped op's input comes from. */
enum { TAPE_NONE, TAPE_SLOT, TAPE_INPUT };
typedef struct {
  uint8_t kind;
  int16_t at;            /* TAPE_SLOT: region slot; TAPE_INPUT: input */
} tape_edge;

/* An op as the tape matches it, in recording order: what a call must
** equal (the shape is its template node's). */
typedef struct {
  uint64_t key;          /* op_key of its attributes */
  int dim;
  int16_t slot;          /* its region slot */
  trace_node *node;      /* its template node */
  tape_edge in[3];
  tc_tensor *const *want[3];   /* where the tensor each input must be is
                                  kept, once bound or made (no_tensor: no
                                  input) */
} tape_op;

static tc_tensor *const no_tensor = NULL;

/* An op's attributes in one word: op, dtypes, rank, inputs, keepdim. */
static inline uint64_t op_key(unsigned op, unsigned dtype, unsigned cdtype,
                              unsigned ndim, unsigned nin, bool keepdim)
{
  return op | (uint64_t)dtype << 16 | (uint64_t)cdtype << 24 |
         (uint64_t)ndim << 32 | (uint64_t)nin << 40 | (uint64_t)keepdim << 48;
}

typedef struct {
  uint64_t hash;         /* the region's structure hash; 0: a free entry */
  uint64_t next_hash;    /* the region realized after it, last time */
  uint64_t made;         /* tape clock when made (the oldest goes) */
  int nnodes, ninputs, noutputs;
  int request;           /* the slot the program reads */
  trace_node *nodes;     /* templates, in region order: the plan reads
                            their attributes, and this run's scalars */
  trace_node **node_at;  /* &nodes[i]: the region's node array */
  int16_t *order;        /* slots in recording order */
  int16_t *pos_of;       /* per slot: its place in that order */
  tape_op *ops;          /* in recording order */
  tc_tensor *image;      /* per slot: the handle a replayed op returns, as
                            it is made (copied: no field computed) */
  bool *held;            /* per slot: the program held it when realized */
  trace_node **outputs;  /* the region's outputs (templates) */
  tc_tensor **dest;      /* noutputs NULLs: no write-backs */
  tc_tensor **result;    /* per output, during a run of the plan */
  /* The run in flight (replay.run is this tape). */
  tc_tensor **handle;    /* per slot: its live lazy handle (borrowed) */
  tc_tensor **value;     /* per slot, once realized: an output's value */
  tc_tensor **inputs;    /* bound region inputs (trace_leaf_ref) */
  uint8_t (*input_kind)[2];   /* per input: the rank and dtype it had (the
                                 rank is structure: a leaf edge hashes it) */
  trace_node **spare;    /* nodes reserved for leaving: nnodes when a run
                            starts */
  int nspare;
  int misses;            /* runs in a row that left the replay */
  bool off;              /* misses reached TUNE_REPLAY_MISSES */
} tape;

static tape tapes[TUNE_REPLAY_TAPES];
static uint64_t tape_clock;

static struct {
  tape *armed;           /* the ops to come are matched against it */
  tape *run;             /* the run in flight (== armed until realized) */
  int pos;               /* its ops matched so far */
  bool done;             /* realized; handles of other values may live */
  int live;              /* its lazy handles alive */
  uint64_t born;         /* realizations before it (its nodes' birth) */
  tape *last;            /* the tape realized last, if the last region had
                            one (to learn which comes next) */
  uint64_t replays;      /* regions run by replay (tests) */
} rp;

uint64_t trace_replay_count(void) { return rp.replays; }

/* -- Tapes ------------------------------------------------------------------ */

static tape *tape_find(uint64_t hash)
{
  for (int i = 0; hash && i < TUNE_REPLAY_TAPES; i++)
    if (tapes[i].hash == hash)
      return &tapes[i];
  return NULL;
}

/* Free t's arrays; it becomes a free entry. No run may be in flight on it. */
static void tape_clear(tape *t)
{
  if (rp.armed == t)
    rp.armed = NULL;
  if (rp.last == t)
    rp.last = NULL;
  for (int i = 0; i < t->nspare; i++)
    free(t->spare[i]);
  free(t->nodes);
  free(t->node_at);
  free(t->order);
  free(t->pos_of);
  free(t->ops);
  free(t->image);
  free(t->held);
  free(t->outputs);
  free(t->dest);
  free(t->result);
  free(t->handle);
  free(t->value);
  free(t->inputs);
  free(t->input_kind);
  free(t->spare);
  memset(t, 0, sizeof *t);
}

/* Under the lock: exit() on one thread leaves the others running, and
** they may be replaying these tapes. */
__attribute__((destructor)) static void tapes_at_exit(void)
{
  trace_lock();
  if (!rp.run)   /* a run still in flight keeps its inputs: let them go */
    for (int i = 0; i < TUNE_REPLAY_TAPES; i++)
      if (tapes[i].hash)
        tape_clear(&tapes[i]);
  trace_unlock();
}

/* Can region r (realized for a read of one value, outputs[0], its plan
** run) be replayed? Its nodes were all recorded since the last
** realization by functional ops on the CPU, read only leaves and each
** other through plain edges, and each is held through at most one plain
** handle; nothing is written back. */
static bool tapeable(const trace_region *r, int nreq)
{
  if (nreq != 1 || r->device != TC_DEV_CPU ||
      r->nnodes > TUNE_REPLAY_MAX_OPS || r->ninputs > TUNE_REPLAY_MAX_INPUTS)
    return false;
  for (int o = 0; o < r->noutputs; o++)
    if (r->dest[o] || r->outputs[o]->slot < 0)
      return false;
  for (int i = 0; i < r->nnodes; i++) {
    const trace_node *n = r->nodes[i];
    if (!n->plain_op || n->born + 1 != trace_g.realizations ||
        (n->handles && (n->handles->lazy_next || !n->handles->lazy_plain)))
      return false;
    for (int k = 0; k < n->nin; k++) {
      const trace_edge *e = &n->in[k];
      if (e->viewed || (e->node && (e->node->value || e->node->slot < 0)))
        return false;
    }
  }
  return true;
}

/* The input index of leaf t in r. */
static int input_index(const trace_region *r, const tc_tensor *t)
{
  for (int i = 0; i < r->ninputs; i++)
    if (r->inputs[i] == t)
      return i;
  return -1;
}

/* r's slots in recording order, into order (r->nnodes): an insertion sort
** by seq (a region's postorder is mostly its recording order already). */
static void recording_order(const trace_region *r, int16_t *order)
{
  for (int i = 0; i < r->nnodes; i++) {
    int j = i;
    for (; j > 0 && r->nodes[order[j - 1]]->seq > r->nodes[i]->seq; j--)
      order[j] = order[j - 1];
    order[j] = (int16_t)i;
  }
}

/* Does tape t describe region r exactly (order given)? */
static bool tape_fits(const tape *t, const trace_region *r,
                      const int16_t *order)
{
  if (t->nnodes != r->nnodes || t->ninputs != r->ninputs ||
      t->noutputs != r->noutputs ||
      memcmp(t->order, order, sizeof *order * (size_t)r->nnodes) != 0)
    return false;
  for (int i = 0; i < r->nnodes; i++)
    if (t->held[i] != (r->nodes[i]->handles != NULL))
      return false;
  for (int o = 0; o < r->noutputs; o++)
    if (t->outputs[o] != &t->nodes[r->outputs[o]->slot])
      return false;
  return true;
}

/* Fill tape t (cleared) from region r; -1 when out of memory. */
static int tape_make(tape *t, const trace_region *r, int16_t *order)
{
  size_t n = (size_t)r->nnodes, no = (size_t)r->noutputs;
  t->nodes = calloc(n, sizeof *t->nodes);
  t->node_at = calloc(n, sizeof *t->node_at);
  t->held = calloc(n, sizeof *t->held);
  t->outputs = calloc(no, sizeof *t->outputs);
  t->dest = calloc(no, sizeof *t->dest);
  t->result = calloc(no, sizeof *t->result);
  t->handle = calloc(n, sizeof *t->handle);
  t->value = calloc(n, sizeof *t->value);
  t->inputs = calloc((size_t)r->ninputs + 1, sizeof *t->inputs);
  t->input_kind = calloc((size_t)r->ninputs + 1, sizeof *t->input_kind);
  t->spare = calloc(n, sizeof *t->spare);
  t->pos_of = calloc(n, sizeof *t->pos_of);
  t->ops = calloc(n, sizeof *t->ops);
  t->image = calloc(n, sizeof *t->image);
  t->order = order;
  if (!t->nodes || !t->node_at || !t->held || !t->outputs ||
      !t->dest || !t->result || !t->handle || !t->value || !t->inputs ||
      !t->spare || !t->pos_of || !t->ops || !t->image || !t->input_kind)
    return -1;
  for (int i = 0; i < r->ninputs; i++) {
    t->input_kind[i][0] = r->inputs[i]->ndim;
    t->input_kind[i][1] = r->inputs[i]->dtype;
  }
  for (int p = 0; p < r->nnodes; p++)
    t->pos_of[order[p]] = (int16_t)p;
  t->hash = r->hash;
  t->made = ++tape_clock;
  t->nnodes = r->nnodes;
  t->ninputs = r->ninputs;
  t->noutputs = r->noutputs;
  t->request = r->outputs[0]->slot;
  for (int i = 0; i < r->nnodes; i++) {
    const trace_node *src = r->nodes[i];
    trace_node *m = &t->nodes[i];
    *m = *src;   /* op, attributes, shape, hash; the rest is cleared */
    m->refs = 1;   /* never freed through the graph */
    m->value = NULL;
    m->handles = NULL;
    m->held = -1;
    m->binds = false;
    m->mark = 0;
    m->slot = i;
    t->node_at[i] = m;
    t->held[i] = src->handles != NULL;
    tape_edge *in = t->ops[t->pos_of[i]].in;
    for (int k = 0; k < src->nin; k++) {
      const trace_edge *e = &src->in[k];
      m->in[k] = (trace_edge){ 0 };
      in[k] = e->node ? (tape_edge){ TAPE_SLOT, (int16_t)e->node->slot }
              : e->leaf ? (tape_edge){ TAPE_INPUT,
                                       (int16_t)input_index(r, e->leaf) }
                        : (tape_edge){ TAPE_NONE, 0 };
    }
  }
  for (int o = 0; o < r->noutputs; o++)
    t->outputs[o] = &t->nodes[r->outputs[o]->slot];
  for (int p = 0; p < r->nnodes; p++) {
    trace_node *m = &t->nodes[order[p]];
    tape_op *op = &t->ops[p];
    op->key = op_key(m->op, m->dtype, m->cdtype, (unsigned)m->ndim,
                     (unsigned)m->nin, m->keepdim);   /* in: set above */
    op->dim = m->dim;
    op->slot = order[p];
    op->node = m;
    for (int k = 0; k < 3; k++)
      op->want[k] = k >= m->nin ? &no_tensor
                    : op->in[k].kind == TAPE_SLOT ? &t->handle[op->in[k].at]
                    : op->in[k].kind == TAPE_INPUT ? &t->inputs[op->in[k].at]
                                                   : &no_tensor;
  }
  for (int i = 0; i < r->nnodes; i++) {
    trace_handle_fill(&t->image[i], &t->nodes[i], NULL);
    t->image[i].lazy_replay = 1;
  }
  return 0;
}

/* The tape for region r, made if it has none or one for another order of
** the same ops; NULL when it cannot be replayed. */
static tape *tape_for(const trace_region *r)
{
  int16_t *order = malloc(sizeof *order * (size_t)r->nnodes);
  if (!order)
    return NULL;
  recording_order(r, order);
  tape *t = tape_find(r->hash);
  if (t && (t->off || tape_fits(t, r, order))) {
    free(order);
    return t->off ? NULL : t;
  }
  int misses = t ? t->misses : 0;   /* two orders in turn still end off */
  if (!t) {
    t = &tapes[0];
    for (int i = 0; i < TUNE_REPLAY_TAPES; i++)
      if (tapes[i].made < t->made)
        t = &tapes[i];
  }
  tape_clear(t);
  if (tape_make(t, r, order) < 0) {
    tape_clear(t);   /* frees order too */
    return NULL;
  }
  t->misses = misses;
  if (tensor_log_on(TC_LOG_REGIONS))
    tensor_log(TC_LOG_REGIONS, "region %016llx: taped for replay: %d ops, "
               "%d inputs, %d outputs", (unsigned long long)t->hash,
               t->nnodes, t->ninputs, t->noutputs);
  return t;
}

/* Tape t was realized: learn that it followed the last one, and arm the
** tape that followed it last time (else t itself: loops repeat). */
static void tape_realized(tape *t)
{
  if (rp.last)
    rp.last->next_hash = t->hash;
  rp.last = t;
  tape *next = t->next_hash == t->hash ? t : tape_find(t->next_hash);
  rp.armed = next && !next->off ? next : t;
}

void trace_replay_offer(const trace_region *r, int nreq)
{
  TC_ASSERT(!rp.run, "a region realized during a replay");
  tape *t = r && tapeable(r, nreq) ? tape_for(r) : NULL;
  if (t)
    tape_realized(t);
  else
    rp.last = NULL;
}

/* -- A run ------------------------------------------------------------------ */

/* Reserve the nodes leaving may need, and start a run of t. */
static bool run_start(tape *t)
{
  while (t->nspare < t->nnodes) {
    trace_node *n = trace_node_alloc();
    if (!n)
      return false;
    t->spare[t->nspare++] = n;
  }
  rp.run = t;
  rp.pos = 0;
  rp.done = false;
  rp.live = 0;
  rp.born = trace_g.realizations;
  return true;
}

/* End the run (no lazy handle of it left): drop its inputs and values. */
static void run_end(void)
{
  tape *t = rp.run;
  for (int i = 0; i < t->ninputs; i++)
    if (t->inputs[i]) {
      trace_leaf_unref(t->inputs[i]);
      t->inputs[i] = NULL;
    }
  for (int i = 0; i < t->nnodes; i++) {
    TC_ASSERT(!t->handle[i], "a replayed handle outlived its run");
    if (t->value[i]) {
      tensor_unref(t->value[i]);
      t->value[i] = NULL;
    }
  }
  rp.run = NULL;
  rp.pos = 0;
  rp.done = false;
  rp.live = 0;
}

/* Record the run's matched ops as the graph nodes recording would have
** made (the reserved nodes, by place in recording order), and rebind
** their live handles to them. */
static void deoptimize(tape *t)
{
  int count = rp.done ? t->nnodes : rp.pos;
  trace_node **real = t->spare;
  TC_ASSERT(t->nspare == t->nnodes, "replay: nodes not reserved");
  for (int p = 0; p < count; p++) {
    int slot = t->order[p];
    const trace_node *m = &t->nodes[slot];
    trace_node *n = real[p];
    eager_call c;
    trace_call_of(m, &c);
    trace_node_init(n, &c, (tc_op)m->op, 0, m->device);
    n->born = rp.born;
    n->plain_op = true;
    for (int k = 0; k < m->nin; k++) {
      tape_edge e = t->ops[p].in[k];
      if (e.kind == TAPE_SLOT) {
        n->in[k].node = real[t->pos_of[e.at]];
        trace_node_retain(n->in[k].node);
      } else if (e.kind == TAPE_INPUT) {
        n->in[k].leaf = trace_leaf_ref(t->inputs[e.at]);
        trace_g.live_nodes++;   /* as recording counts a leaf edge */
      }
    }
    trace_node_seal(n, 0);
    TC_ASSERT(n->hash == m->hash, "replay: a node differs from its tape");
    if (t->value[slot])
      n->value = tensor_ref(t->value[slot]);
    n->refs++;   /* this loop's, until every consumer is made */
    tc_tensor *h = t->handle[slot];
    if (h) {
      t->handle[slot] = NULL;
      h->lazy = n;
      h->lazy_replay = 0;
      h->lazy_plain = 1;
      trace_handle_link(n, h);
    }
  }
  /* Consumers first: a node nothing reads or holds is freed with it. */
  for (int p = count - 1; p >= 0; p--)
    trace_node_release(real[p]);
  /* The nodes not made stay reserved; the made ones are the graph's. */
  int left = 0;
  for (int p = count; p < t->nnodes; p++)
    real[left++] = real[p];
  t->nspare = left;
  rp.live = 0;
}

/* Leave the run in flight, if any: its ops become graph nodes. */
void trace_replay_leave(void)
{
  tape *t = rp.run;
  if (!t)
    return;
  if (rp.live > 0)
    deoptimize(t);
  run_end();
  if (++t->misses >= TUNE_REPLAY_MISSES && !t->off) {
    t->off = true;
    if (rp.armed == t)
      rp.armed = NULL;
    if (tensor_log_on(TC_LOG_REGIONS))
      tensor_log(TC_LOG_REGIONS, "region %016llx: replay off: the program "
                 "left it %d runs in a row", (unsigned long long)t->hash,
                 t->misses);
  }
}

/* -- Matching ops ----------------------------------------------------------- */

/* Is x, read by a taped op as region input m, one: of the rank and dtype
** the tape's input had (the guards check the rest when the region runs),
** materialized on the CPU, nothing pending on its storage and no raw
** pointer into it (those take recording's paths), and bound to m alone? */
static bool input_fits(const tape *t, int m, const tc_tensor *x)
{
  if (t->inputs[m])   /* checked when bound; a write or a raw pointer
                         since would have left the run */
    return t->inputs[m] == x;
  if (!x || x->ndim != t->input_kind[m][0] ||
      x->dtype != t->input_kind[m][1] || x->lazy || !x->storage ||
      x->storage->pending ||
      x->storage->device != TC_DEV_CPU ||
      atomic_load_explicit(&x->storage->exposed, memory_order_relaxed))
    return false;
  for (int i = 0; i < t->ninputs; i++)
    if (t->inputs[i] == x)
      return false;   /* another input: recording would share its index */
  return true;
}

/* Does call c match the op at place p of tape t? Binds the region inputs it
** reads first (referenced by the caller), listed in newly[]. */
static bool op_fits(tape *t, int p, const eager_call *c, int *newly,
                    int *nnew)
{
  const tape_op *op = &t->ops[p];
  const tape_edge *edge = op->in;
  *nnew = 0;
  if (op_key(c->op, c->dtype, c->cdtype, (unsigned)c->ndim, (unsigned)c->nin,
             c->keepdim) != op->key || c->dim != op->dim)
    return false;   /* (a functional op has no dst) */
  for (int d = 0; d < c->ndim; d++)
    if (c->shape[d] != op->node->shape[d])
      return false;
  bool ok = true;
  for (int k = 0; k < c->nin && ok; k++) {
    const tc_tensor *x = c->in[k];
    switch (edge[k].kind) {
    case TAPE_NONE:
      ok = !x;
      break;
    case TAPE_SLOT:
      ok = x && x == t->handle[edge[k].at];
      break;
    default:
      ok = input_fits(t, edge[k].at, x);
      if (ok && !t->inputs[edge[k].at]) {
        t->inputs[edge[k].at] = (tc_tensor *)x;
        newly[(*nnew)++] = edge[k].at;
      }
    }
  }
  if (!ok) {
    for (int i = 0; i < *nnew; i++)
      t->inputs[newly[i]] = NULL;
    *nnew = 0;
  }
  return ok;
}

/* Is call c op, reading only tensors already bound or made? The common
** case, tested without a branch per field and input. */
static inline bool op_same(const tape_op *op, const eager_call *c)
{
  bool bad = (op_key(c->op, c->dtype, c->cdtype, (unsigned)c->ndim,
                     (unsigned)c->nin, c->keepdim) != op->key) |
             (c->dim != op->dim) | (c->in[0] != *op->want[0]) |
             (c->in[1] != *op->want[1]) | (c->in[2] != *op->want[2]);
  for (int d = 0; d < c->ndim && d < TC_MAX_DIMS; d++)
    bad |= c->shape[d] != op->node->shape[d];
  return !bad;
}

bool trace_replay_op(const eager_call *c, tc_tensor **out)
{
  if (rp.run && rp.done)   /* handles of the last run still lazy */
    trace_replay_leave();
  tape *t = rp.armed;
  if (!t)
    return false;
  int newly[3], nnew = 0;
  if (!rp.run) {   /* a run starts with the tape's first op, or not at all */
    if (!op_fits(t, 0, c, newly, &nnew))
      return false;
    if (!run_start(t)) {
      for (int i = 0; i < nnew; i++)
        t->inputs[newly[i]] = NULL;
      return false;
    }
  } else if (rp.pos == t->nnodes ||
             (!op_same(&t->ops[rp.pos], c) &&
              !op_fits(t, rp.pos, c, newly, &nnew))) {
    trace_replay_leave();
    return false;
  }
  TC_ASSERT(rp.run == t, "replay: a run of another tape");
  const tape_op *op = &t->ops[rp.pos];
  int slot = op->slot;
  trace_node *m = op->node;
  tc_tensor *h = tensor_handle_alloc();
  if (!h) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating a tensor handle");
    for (int i = 0; i < nnew; i++)
      t->inputs[newly[i]] = NULL;
    *out = NULL;   /* the error is set */
    return true;
  }
  for (int i = 0; i < nnew; i++)
    trace_leaf_ref(t->inputs[newly[i]]);
  m->s[0] = c->s[0];   /* this run's scalars, as the plan reads them */
  m->s[1] = c->s[1];
  memcpy(h, &t->image[slot], sizeof *h);   /* a fresh object: no atomics
                                              needed to set its counts */
  t->handle[slot] = h;
  rp.live++;
  rp.pos++;
  *out = h;
  return true;
}

void trace_replay_release(tc_tensor *h)
{
  tape *t = rp.run;
  TC_ASSERT(t, "replay: a handle of no run");
  int slot = (int)((trace_node *)h->lazy - t->nodes);
  TC_ASSERT(slot >= 0 && slot < t->nnodes && t->handle[slot] == h,
            "replay: a handle of another run");
  t->handle[slot] = NULL;
  h->lazy = NULL;
  h->lazy_replay = 0;
  if (--rp.live == 0 && rp.done)
    run_end();
}

/* -- Realizing -------------------------------------------------------------- */

/* Is the run complete and does the program hold what it held when the
** tape was made (so the region, its survivors included, is the tape's)? */
static bool run_complete(const tape *t, const tc_tensor *h)
{
  if (rp.done || rp.pos != t->nnodes || h != t->handle[t->request])
    return false;
  for (int i = 0; i < t->nnodes; i++)
    if ((t->handle[i] != NULL) != t->held[i])
      return false;
  return true;
}

bool trace_replay_realize(tc_tensor *h, int *rc)
{
  tape *t = rp.run;
  if (!t)
    return false;
  if (!h->lazy_replay || !run_complete(t, h)) {
    trace_replay_leave();
    return false;
  }
  trace_region r = {
    .nnodes = t->nnodes, .nodes = t->node_at,
    .ninputs = t->ninputs, .inputs = t->inputs,
    .noutputs = t->noutputs, .outputs = t->outputs,
    .dest = t->dest, .result = t->result,
    .hash = t->hash, .device = TC_DEV_CPU,
  };
  memset(t->result, 0, sizeof *t->result * (size_t)t->noutputs);
  if (trace_region_replay(&r) != 0) {   /* no plan now, or it failed:
                                           recording's path runs it */
    for (int o = 0; o < t->noutputs; o++)
      tensor_unref(t->result[o]);
    trace_replay_leave();
    return false;
  }
  for (int o = 0; o < t->noutputs; o++) {
    int slot = t->outputs[o]->slot;
    tc_tensor *v = t->result[o], *oh = t->handle[slot];
    if (oh) {
      trace_handle_bind(oh, v);
      t->handle[slot] = NULL;
      rp.live--;
    }
    t->value[slot] = v;   /* for a later leave: the node's value */
  }
  rp.done = true;
  rp.replays++;
  t->misses = 0;
  tape_realized(t);
  if (rp.live == 0)
    run_end();
  *rc = 0;
  return true;
}
