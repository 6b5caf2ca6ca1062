/*
** plan.c -- fusion: group a region graph into kernels and lower each group
** to the kernel IR. The pointwise semantics come from ops.def's `ex`
** column, expanded here with builder definitions of the expression
** primitives, so a fused kernel computes the same operations in the same
** order as the eager kernels (principle 2).
**
** Grouping, in topological order:
**   - extern ops (matmul, argmax, argmin, cumsum) run alone on stored
**     operands;
**   - each reduction or composite anchors a ROWS kernel (reduced dim =
**     row axis) with its single-use pointwise producers inlined;
**   - a pointwise value that must be stored (an output, used twice, read
**     through a view or by an extern/anchor it cannot be inlined into)
**     joins the latest MAP group of its shape whose inputs are ready, else
**     starts one; single-use pointwise values are inlined into their user.
*/
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "layout.h"

typedef enum { NK_PW, NK_ROWS, NK_EXTERN } node_kind;

/* A value's coordinates as kernel dims: map[j] is the kernel dim that value
** dim j follows, or -1 where the value is broadcast (coordinate 0). */
typedef struct {
  int ndim;
  int map[TC_MAX_DIMS];
} vmap;

/* The space a reduction walks: its operand's shape (a 0-d operand is one
** row of one) and the reduced dim, the row axis. */
typedef struct {
  int r, d;
  int64_t shape[TC_MAX_DIMS];
} rowspace;

/* How a value's shape relates to a row space: the full shape (one value
** per row position), per row with the reduced dim kept as 1, per row with
** it dropped, or none of these. */
typedef enum { RC_NONE, RC_FULL, RC_ROWK, RC_ROWR } row_class;

typedef struct {
  int first_member;     /* its first stored node, or -1 */
  bool general;         /* a ROWS step of reductions over one row space and
                           the pointwise values around them */
  rowspace rs;          /* general: the row space */
} step_info;

typedef struct {
  const fuse_graph *g;
  fuse_plan *p;
  bool dynamic;
  int *consumers;       /* consumer edges per node */
  bool *store;          /* value must be stored */
  int *step;            /* step that computes the node, or -1 (inlined) */
  int *eval_step;       /* step whose kernel evaluates the node */
  step_info *si;        /* per step: what the grouping knows of it */
  int *last_user;       /* per node: its last consumer node, or -1 */
  fuse_ref *where;      /* where a stored value lives */
  int cap_steps;
  char *reason;
  size_t rlen;
  /* kernel being built */
  kir_kernel *k;
  fuse_step *st;
  int cur;              /* its step index */
  int *cache;           /* node -> instruction, per kernel ... */
  vmap *cache_vm;       /* ... for these coordinates */
  int *rowval;          /* node -> instruction holding a reduction's value
                           for the current row (its own ROWS kernel) */
  /* SUM_ALL walks its operand's shape as one flat row */
  bool flat;
  int flat_ndim;
  const int64_t *flat_shape;
  int flat_node;        /* ... the sum_all node whose operand it is */
  /* shape-dynamic plans: where lowering read each layout number (layout.h),
  ** or NULL (static plans; recording ran out of memory) */
  fuse_recipe *rec;
  /* retries: what the last attempt asked for */
  bool *force;          /* node values to store (persist across attempts) */
  bool *copy;           /* SUM_ALL nodes whose operand is copied dense */
  int *copy_temp;       /* ... into this temp */
  bool *fresh;          /* nodes that start a kernel of their own */
  bool *nodirect;       /* per-row values of a ROWS kernel not to store
                           straight into their write-back target */
  int *seen;            /* per node: loads_storage's visit stamp */
  int seen_stamp;
  int retry;            /* 1 when the attempt asked for another one */
  /* a kernel limit hit: which member was being built, and whether it was
  ** the first of its kernel */
  bool over;
  int member;
  bool first;
} fb;

static node_kind kind_of(const fuse_node *n)
{
  const op_info *o = &op_table[n->op];
  if (n->eager)
    return NK_EXTERN;
  if (n->gather)
    return NK_PW;
  if ((o->kind == OPK_EX && n->op != TC_OP_CONTIGUOUS) ||
      n->op == TC_OP_ARGMAX || n->op == TC_OP_ARGMIN)
    return NK_EXTERN;
  if (o->kind == OPK_RD || o->kind == OPK_CP)
    return NK_ROWS;
  return NK_PW;   /* pointwise ops and CONTIGUOUS (a copy) */
}

static int fail(fb *b, const char *msg)
{
  snprintf(b->reason, b->rlen, "%s", msg);
  return -1;
}

/* A kernel limit (kir.h) was hit: the attempt fails, and the next one
** splits the group there (fuse_build). */
static int over_limit(fb *b, const char *msg)
{
  b->over = true;
  return fail(b, msg);
}

/* -- Steps ------------------------------------------------------------------ */

static int step_new(fb *b, fuse_step_kind kind)
{
  fuse_plan *p = b->p;
  if (p->nsteps == b->cap_steps) {
    int cap = b->cap_steps ? b->cap_steps * 2 : 8;
    fuse_step *s = realloc(p->steps, sizeof *s * (size_t)cap);
    if (s)
      p->steps = s;
    step_info *si = s ? realloc(b->si, sizeof *si * (size_t)cap) : NULL;
    if (!si)
      return fail(b, "out of memory");
    b->si = si;
    b->cap_steps = cap;
  }
  fuse_step *s = &p->steps[p->nsteps];
  memset(s, 0, sizeof *s);
  s->kind = (uint8_t)kind;
  s->node = -1;
  memset(&b->si[p->nsteps], 0, sizeof b->si[p->nsteps]);
  b->si[p->nsteps].first_member = -1;
  if (kind == FSTEP_KERNEL) {
    s->k = kir_new();
    if (!s->k)
      return fail(b, "out of memory");
  }
  return p->nsteps++;
}

/* After recording into the recipe: out of memory (rc < 0) drops it, and
** the plan's layouts are planned again for each shape. */
static void recorded(fb *b, int rc)
{
  if (rc < 0) {
    recipe_free(b->rec);
    b->rec = NULL;
  }
}

/* A temporary of n's dtype and shape: that of node `node`, or (edge) of
** the operand it reads. */
static int temp_new(fb *b, const fuse_node *n, int node, bool edge)
{
  fuse_plan *p = b->p;
  if (b->rec)
    recorded(b, recipe_temp(b->rec, p->ntemps, node, edge));
  fuse_temp *t = realloc(p->temps, sizeof *t * (size_t)(p->ntemps + 1));
  if (!t)
    return fail(b, "out of memory");
  p->temps = t;
  t[p->ntemps].dtype = n->dtype;
  t[p->ntemps].ndim = n->ndim;
  memcpy(t[p->ntemps].shape, n->shape, sizeof(int64_t) * (size_t)n->ndim);
  return p->ntemps++;
}

/* The shape an edge reads: its view's, else its source's. */
static const int64_t *edge_shape(const fuse_graph *g, const fuse_edge *e,
                                 int *ndim)
{
  return layout_edge_shape(g, e, ndim);
}

/* -- Row spaces ------------------------------------------------------------ */

/* Reductions that join a general ROWS step (SUM_ALL walks a flat row of its
** own; the composites keep their own kernels). */
static bool row_reduction(const fuse_node *n)
{
  return n->op == TC_OP_SUM || n->op == TC_OP_MAX || n->op == TC_OP_MIN ||
         n->op == TC_OP_MEAN;
}

static void rowspace_of(const fuse_graph *g, int n, rowspace *rs)
{
  const fuse_node *nd = &g->nodes[n];
  const int64_t *shape = edge_shape(g, &nd->in[0], &rs->r);
  if (rs->r == 0) {   /* a 0-d operand: one row of one */
    rs->r = 1;
    rs->shape[0] = 1;
    rs->d = 0;
    return;
  }
  memcpy(rs->shape, shape, sizeof(int64_t) * (size_t)rs->r);
  rs->d = nd->dim;
}

static bool rowspace_eq(const rowspace *a, const rowspace *b)
{
  return a->r == b->r && a->d == b->d &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->r) == 0;
}

static row_class row_class_of(const rowspace *rs, int ndim,
                              const int64_t *shape)
{
  if (ndim == rs->r) {
    bool full = true, rowk = true;
    for (int j = 0; j < ndim; j++) {
      full &= shape[j] == rs->shape[j];
      rowk &= j == rs->d ? shape[j] == 1 : shape[j] == rs->shape[j];
    }
    return full ? RC_FULL : rowk ? RC_ROWK : RC_NONE;
  }
  if (ndim == rs->r - 1) {
    for (int j = 0; j < ndim; j++)
      if (shape[j] != rs->shape[j < rs->d ? j : j + 1])
        return RC_NONE;
    return RC_ROWR;
  }
  return RC_NONE;
}

/* Can a value of class `reader` read one of class `src` computed in the
** same ROWS kernel over rs? Only at its own position (full from full) or
** its own row (from a per-row value of the same alignment): broadcasting in
** any other way would read another row's or position's value. A per-row
** value with the reduced dim dropped aligns (right-aligned, NumPy's rule)
** with the full and kept shapes only when that dim is the first. */
static bool row_read_ok(const rowspace *rs, row_class reader, row_class src)
{
  if (src == RC_ROWR)
    return reader == RC_ROWR || rs->d == 0;
  return (reader == RC_FULL && (src == RC_FULL || src == RC_ROWK)) ||
         (reader == RC_ROWK && src == RC_ROWK);
}

static bool in_step(const fb *b, int n, int s);

/* Can node n be evaluated in general ROWS step s at coordinates of class
** c? Values of other steps and graph inputs are loaded (any broadcast);
** values made in step s (its members, and producers inlined into it) are
** read only where row_read_ok allows, never through a view. */
static bool row_compatible(const fb *b, int n, int s, row_class c)
{
  const fuse_graph *g = b->g;
  const fuse_node *nd = &g->nodes[n];
  const rowspace *rs = &b->si[s].rs;
  bool reduction = kind_of(nd) != NK_PW;
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src < 0 || !in_step(b, src, s))
      continue;
    if (nd->in[e].viewed)
      return false;
    const fuse_node *sn = &g->nodes[src];
    row_class sc = row_class_of(rs, sn->ndim, sn->shape);
    /* A reduction reads its operand at every position of the row. */
    if (!row_read_ok(rs, reduction ? RC_FULL : c, sc))
      return false;
    if (!b->store[src] && !row_compatible(b, src, s, sc))
      return false;
  }
  return true;
}

/* -- Analysis --------------------------------------------------------------- */

static bool same_shape(const fuse_node *a, const fuse_node *b)
{
  if (a->ndim != b->ndim)
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d])
      return false;
  return true;
}

/* Is edge e a view that is index arithmetic over its source's value: no
** offset, and each dim either broadcast (stride 0), of size 1, or walking
** one whole dim of the source (its contiguous stride and size; each source
** dim at most once, in any order: unsqueeze, squeeze, expand, permute,
** transpose, reshapes that only add or drop 1s)? Then a pointwise user
** can evaluate the source at the view's coordinates (view_map) instead of
** loading it stored. *vm gets, per source dim, the view dim it follows
** (-1: coordinate 0). */
static bool view_mappable(const fuse_graph *g, const fuse_edge *e, int *vm)
{
  if (!e->viewed || e->src < 0 || e->geom.offset != 0)
    return false;
  const fuse_node *sn = &g->nodes[e->src];
  int64_t cst[TC_MAX_DIMS];
  tensor_contiguous_strides(sn->ndim, sn->shape, cst);
  for (int i = 0; i < sn->ndim; i++)
    vm[i] = -1;
  for (int j = 0; j < e->geom.ndim; j++) {
    int64_t size = e->geom.shape[j], st = e->geom.stride[j];
    if (size == 1 || st == 0)
      continue;
    int i = 0;
    while (i < sn->ndim && !(sn->shape[i] == size && cst[i] == st))
      i++;
    if (i == sn->ndim || vm[i] >= 0)
      return false;
    vm[i] = j;
  }
  /* a source dim nobody walks is read at 0 only: fine with no offset */
  return true;
}

static void analyse(fb *b)
{
  const fuse_graph *g = b->g;
  for (int i = 0; i < g->nnodes; i++) {
    const fuse_node *n = &g->nodes[i];
    for (int e = 0; e < n->nin; e++) {
      int s = n->in[e].src;
      if (s < 0)
        continue;
      b->consumers[s]++;
      /* Views and externs read stored values; a pointwise user evaluates
      ** a view that is index arithmetic (view_mappable) in place. */
      int vm[TC_MAX_DIMS];
      if ((n->in[e].viewed &&
           !(kind_of(n) == NK_PW && view_mappable(g, &n->in[e], vm))) ||
          kind_of(n) == NK_EXTERN)
        b->store[s] = true;
    }
    if (kind_of(n) != NK_PW)
      b->store[i] = true;
  }
  for (int i = 0; i < g->nnodes; i++)
    if (b->consumers[i] != 1 || b->force[i])
      b->store[i] = true;
  for (int o = 0; o < g->noutputs; o++)
    b->store[g->out_node[o]] = true;
}

/* The walks below follow inlined producers, which a DAG shares (x in
** x * rsqrt(mean(x * x))): each visits a node once per b->seen_stamp, so
** a query costs the size of the inlined subgraph, not its paths. */
static bool first_visit(fb *b, int n)
{
  if (b->seen[n] == b->seen_stamp)
    return false;
  b->seen[n] = b->seen_stamp;
  return true;
}

/* deps_ready's walk; a node seen before passed (a failure ends the walk). */
static bool deps_ready_from(fb *b, int n, int before)
{
  const fuse_node *nd = &b->g->nodes[n];
  for (int e = 0; e < nd->nin; e++) {
    int s = nd->in[e].src;
    if (s < 0)
      continue;
    if (b->store[s]) {
      /* Read through a view, a value must be fully stored first: a view
      ** visits other points than the one being computed. */
      if (b->step[s] > before || (b->step[s] == before && nd->in[e].viewed))
        return false;
    } else if (first_visit(b, s) && !deps_ready_from(b, s, before)) {
      return false;
    }
  }
  return true;
}

/* Are node n's stored dependencies (through inlined producers) all
** computed by steps before `before`, or by step `before` itself? */
static bool deps_ready(fb *b, int n, int before)
{
  b->seen_stamp++;
  return deps_ready_from(b, n, before);
}

static bool in_step(const fb *b, int n, int s)
{
  return b->store[n] ? b->step[n] == s : true;   /* inlined: evaluated by
                                                    its user */
}

/* reads_step's walk; a node seen before found nothing (a find ends it). */
static bool reads_step_from(fb *b, int n, int s)
{
  const fuse_node *nd = &b->g->nodes[n];
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src < 0)
      continue;
    if (b->store[src] ? b->step[src] == s
                      : first_visit(b, src) && reads_step_from(b, src, s))
      return true;
  }
  return false;
}

/* Does node n (with its inlined producers) read a value stored by step s? */
static bool reads_step(fb *b, int n, int s)
{
  b->seen_stamp++;
  return reads_step_from(b, n, s);
}

/* The general ROWS step node n joins, or -1: the latest whose row space
** fits (a reduction over the same space; a pointwise value of its full or
** per-row shape that reads one of its values), whose values n needs are
** ready, and whose own values n reads only at their row or position. */
static int rows_step_for(fb *b, int n)
{
  const fuse_node *nd = &b->g->nodes[n];
  bool red = kind_of(nd) != NK_PW;
  rowspace rs;
  if (red)
    rowspace_of(b->g, n, &rs);
  for (int s = b->p->nsteps - 1; s >= 0; s--) {
    if (!b->si[s].general)
      continue;
    row_class c = RC_FULL;
    if (red ? !rowspace_eq(&rs, &b->si[s].rs)
            : (c = row_class_of(&b->si[s].rs, nd->ndim, nd->shape)) ==
                RC_NONE || !reads_step(b, n, s))
      continue;
    if (deps_ready(b, n, s) && row_compatible(b, n, s, c))
      return s;
  }
  return -1;
}

static int assign_steps(fb *b)
{
  const fuse_graph *g = b->g;
  for (int i = 0; i < g->nnodes; i++) {
    const fuse_node *n = &g->nodes[i];
    node_kind k = kind_of(n);
    if (k == NK_PW && !b->store[i]) {
      b->step[i] = -1;
      continue;
    }
    if (k == NK_EXTERN) {
      int s = step_new(b, FSTEP_EXTERN);
      if (s < 0)
        return -1;
      b->p->steps[s].node = i;
      b->step[i] = s;
      continue;
    }
    if (k == NK_ROWS && row_reduction(n)) {
      int s = b->fresh[i] ? -1 : rows_step_for(b, i);
      if (s < 0) {
        if ((s = step_new(b, FSTEP_KERNEL)) < 0)
          return -1;
        b->p->steps[s].node = i;
        b->si[s].general = true;
        rowspace_of(g, i, &b->si[s].rs);
      }
      b->step[i] = s;
      continue;
    }
    if (k == NK_ROWS && b->copy[i]) {   /* a dense copy of the operand */
      int c = step_new(b, FSTEP_COPY);
      if (c < 0)
        return -1;
      b->p->steps[c].node = i;
      fuse_node tmp = *n;
      const fuse_edge *e0 = &n->in[0];
      const tc_tensor *src = e0->src < 0 ? g->inputs[-e0->src - 1] : NULL;
      tmp.dtype = e0->src >= 0 ? g->nodes[e0->src].dtype : src->dtype;
      const int64_t *shape = edge_shape(g, e0, &tmp.ndim);
      memcpy(tmp.shape, shape, sizeof(int64_t) * (size_t)tmp.ndim);
      if ((b->copy_temp[i] = temp_new(b, &tmp, i, true)) < 0)
        return -1;
      b->p->steps[c].out = (fuse_ref){ FREF_TEMP, b->copy_temp[i] };
    }
    if (k == NK_ROWS) {
      int s = step_new(b, FSTEP_KERNEL);
      if (s < 0)
        return -1;
      b->p->steps[s].node = i;
      b->step[i] = s;
      continue;
    }
    /* A stored pointwise value: join the ROWS kernel whose row values it
    ** reads, else the latest MAP group of its shape. */
    int join = b->fresh[i] ? -1 : rows_step_for(b, i);
    if (join >= 0) {
      b->step[i] = join;
      continue;
    }
    for (int s = b->p->nsteps - 1; s >= 0 && !b->fresh[i]; s--) {
      fuse_step *st = &b->p->steps[s];
      int member = b->si[s].first_member;
      if (st->kind != FSTEP_KERNEL || st->node >= 0 || member < 0)
        continue;
      if (same_shape(&g->nodes[member], n)) {
        if (deps_ready(b, i, s))
          join = s;
        break;
      }
    }
    if (join < 0 && (join = step_new(b, FSTEP_KERNEL)) < 0)
      return -1;
    b->step[i] = join;
    if (b->si[join].first_member < 0)
      b->si[join].first_member = i;
  }
  /* Which step evaluates each node: an inlined one goes with its last
  ** user, whose step is known first when walking backwards. */
  for (int i = 0; i < g->nnodes; i++)
    b->last_user[i] = -1;
  for (int c = 0; c < g->nnodes; c++)
    for (int e = 0; e < g->nodes[c].nin; e++)
      if (g->nodes[c].in[e].src >= 0)
        b->last_user[g->nodes[c].in[e].src] = c;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    int u = b->last_user[i];
    b->eval_step[i] = b->step[i] >= 0 || u < 0 ? b->step[i] : b->eval_step[u];
  }
  return 0;
}

/* -- Horizontal fusion ------------------------------------------------------
** Grouping is greedy and in order: a value joins the latest group of its
** shape whose inputs are ready, else starts one. Groups of one shape that
** do not depend on each other stay apart when something between them
** (an extern op: a matmul of the backward) computes what the later one
** needs: each parameter's optimizer update is then a kernel of its own.
** This pass moves such a group forward into the next group of its shape
** (a MAP group over the same points, or a general ROWS group over the
** same row space) when nothing between them reads its values, so
** independent same-shape work is one kernel with several outputs. Values
** are still computed by the same expressions (bitwise the same); only the
** moment changes, and place_values then decides write-backs from the new
** order. */

typedef enum { GK_NONE, GK_MAP, GK_ROWS } group_kind;

static group_kind group_of(const fb *b, int s)
{
  const fuse_step *st = &b->p->steps[s];
  if (st->kind != FSTEP_KERNEL)
    return GK_NONE;
  if (b->si[s].general)
    return GK_ROWS;
  return st->node < 0 && b->si[s].first_member >= 0 ? GK_MAP : GK_NONE;
}

static bool same_group_shape(const fb *b, group_kind k, int s, int t)
{
  if (k == GK_ROWS)
    return rowspace_eq(&b->si[s].rs, &b->si[t].rs);
  return same_shape(&b->g->nodes[b->si[s].first_member],
                    &b->g->nodes[b->si[t].first_member]);
}

/* Does step s read the fresh result of the matmul just before it (so it
** may run as that matmul's per-tile epilogue: mark_epilogues)? */
static bool epilogue_candidate(const fb *b, int s)
{
  const fuse_graph *g = b->g;
  const fuse_step *m = s > 0 ? &b->p->steps[s - 1] : NULL;
  if (!m || m->kind != FSTEP_EXTERN || g->nodes[m->node].op != TC_OP_MATMUL)
    return false;
  for (int c = 0; c < g->nnodes; c++)
    if (b->eval_step[c] == s)
      for (int e = 0; e < g->nodes[c].nin; e++)
        if (g->nodes[c].in[e].src == m->node)
          return true;
  return false;
}

/* Does step s hold a node that must start a kernel, or a write-back? */
static bool step_has(const fb *b, int s, bool fresh, bool dest)
{
  const fuse_graph *g = b->g;
  for (int i = 0; i < g->nnodes; i++) {
    if (b->step[i] != s)
      continue;
    if (fresh && b->fresh[i])
      return true;
    for (int o = 0; dest && o < g->noutputs; o++)
      if (g->out_node[o] == i && g->out_dest[o] >= 0)
        return true;
  }
  return false;
}

/* What steps s and t together would need of a kernel's limits (kir.h),
** over-estimated: each evaluated node a few instructions and all of its
** op's scalars, each stored value or reduction a pass and a buffer, each
** distinct stored source a buffer (a viewed read one more). */
static bool fits_together(const fb *b, int s, int t, int *mark, int stamp)
{
  const fuse_graph *g = b->g;
  int bufs = 0, ins = 0, scal = 0, passes = 0;
  for (int c = 0; c < g->nnodes; c++) {
    int es = b->eval_step[c];
    if (es != s && es != t)
      continue;
    const fuse_node *nd = &g->nodes[c];
    ins += 8;
    scal += op_table[nd->op].nsc + (kind_of(nd) != NK_PW);
    if (b->step[c] == es) {
      passes += 1 + (kind_of(nd) != NK_PW);
      bufs++;
    }
    for (int e = 0; e < nd->nin; e++) {
      int src = nd->in[e].src;
      if (src == FUSE_ABSENT || (src >= 0 && !b->store[src]) ||
          (src >= 0 && b->step[src] == es && !nd->in[e].viewed))
        continue;
      int key = src < 0 ? g->nnodes + (-src - 1) : src;
      if (nd->in[e].viewed || mark[key] != stamp)
        bufs++;
      mark[key] = stamp;
    }
  }
  return bufs <= KIR_MAX_BUFS && ins <= KIR_MAX_INSTRS &&
         scal <= KIR_MAX_SCALARS && passes <= KIR_MAX_PASSES;
}

/* May group a move to group z (a < z)? Nothing evaluated between them may
** read a's values (and a sum_all's copy between them neither); z itself
** may read them at its own points (a MAP group: as its members read each
** other), never through a view, and a ROWS group not at all (its row
** reads are checked by grouping, which did not see them together). */
static bool can_move(const fb *b, int a, int z, bool rows)
{
  const fuse_graph *g = b->g;
  for (int c = 0; c < g->nnodes; c++) {
    int es = b->eval_step[c];
    if (es <= a || es > z)
      continue;
    for (int e = 0; e < g->nodes[c].nin; e++) {
      int src = g->nodes[c].in[e].src;
      if (src >= 0 && b->store[src] && b->step[src] == a &&
          (es < z || rows || g->nodes[c].in[e].viewed))
        return false;
    }
  }
  for (int t = a + 1; t < z; t++) {
    const fuse_step *st = &b->p->steps[t];
    if (st->kind == FSTEP_COPY && st->node >= 0) {
      int src = g->nodes[st->node].in[0].src;
      if (src >= 0 && b->store[src] && b->step[src] == a)
        return false;
    }
  }
  return true;
}

/* Drop the steps that merging emptied, renumbering the rest. */
static int compact_steps(fb *b, const bool *gone)
{
  fuse_plan *p = b->p;
  const fuse_graph *g = b->g;
  int *to = malloc(sizeof *to * ((size_t)p->nsteps + 1));
  if (!to)
    return fail(b, "out of memory");
  int n = 0;
  for (int s = 0; s < p->nsteps; s++) {
    if (gone[s]) {
      kir_free(p->steps[s].k);
      to[s] = -1;
      continue;
    }
    to[s] = n;
    p->steps[n] = p->steps[s];
    b->si[n] = b->si[s];
    n++;
  }
  for (int i = 0; i < g->nnodes; i++) {
    if (b->step[i] >= 0)
      b->step[i] = to[b->step[i]];
    if (b->eval_step[i] >= 0)
      b->eval_step[i] = to[b->eval_step[i]];
  }
  p->nsteps = n;
  free(to);
  return 0;
}

/* -- Recomputing cheap values ------------------------------------------------
** A pointwise value stored only because it has several users (it is no
** output, no view or extern reads it) whose users are all evaluated by one
** kernel other than its own needs no buffer: that kernel computes it (once
** per point: eval caches it) from what it reads. Done when the value is
** cheap (a few arithmetic, comparison or select nodes) and its operands
** move no more bytes per point than storing and loading it would (a
** broadcast operand counts nothing). So the target mask that a
** cross-entropy's forward and backward both read, and the masked gradient
** that log_softmax's backward reads twice, are recomputed inside the ROWS
** kernel that reads them, as AOT Autograd's partitioner recomputes cheap
** forward values in the backward instead of saving them. */

static bool cheap_op(tc_op op)
{
  switch (op) {
  case TC_OP_NEG: case TC_OP_ABS: case TC_OP_RELU: case TC_OP_CAST:
  case TC_OP_ADD: case TC_OP_SUB: case TC_OP_MUL: case TC_OP_MAXIMUM:
  case TC_OP_MINIMUM: case TC_OP_EQ: case TC_OP_NE: case TC_OP_LT:
  case TC_OP_LE: case TC_OP_GT: case TC_OP_GE: case TC_OP_WHERE:
  case TC_OP_MASKED_FILL: case TC_OP_ADDS: case TC_OP_SUBS: case TC_OP_MULS:
  case TC_OP_RSUBS: case TC_OP_CLAMP: case TC_OP_EQS: case TC_OP_NES:
  case TC_OP_LTS: case TC_OP_LES: case TC_OP_GTS: case TC_OP_GES:
  case TC_OP_FILL: case TC_OP_DIV: case TC_OP_DIVS: case TC_OP_RDIVS:
    return true;
  default:
    return false;
  }
}

/* Node n's inlined tree: its size in *nodes, whether every node is cheap,
** and the bytes per point of its reads that are not broadcast (numel
** ones; *bytes). */
static bool cheap_tree(const fb *b, int n, int64_t numel, int *nodes,
                       int64_t *bytes)
{
  const fuse_graph *g = b->g;
  const fuse_node *nd = &g->nodes[n];
  if (kind_of(nd) != NK_PW || nd->gather ||
      !cheap_op((tc_op)nd->op) || ++*nodes > 8)
    return false;
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src, sndim;
    if (src == FUSE_ABSENT)
      continue;
    if (src >= 0 && !b->store[src]) {   /* inlined (maybe by a view) */
      if (!cheap_tree(b, src, numel, nodes, bytes))
        return false;
      continue;
    }
    const int64_t *sh = edge_shape(g, &nd->in[e], &sndim);
    tc_dtype dt = src < 0 ? (tc_dtype)g->inputs[-src - 1]->dtype
                          : (tc_dtype)g->nodes[src].dtype;
    if (tensor_shape_numel(sndim, sh) == numel)
      *bytes += (int64_t)tensor_dtype_size[dt];
  }
  return true;
}

static void set_eval_step(fb *b, int n, int s)
{
  const fuse_node *nd = &b->g->nodes[n];
  b->eval_step[n] = s;
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src >= 0 && !b->store[src])
      set_eval_step(b, src, s);
  }
}

static void recompute_cheap(fb *b, bool *gone)
{
  const fuse_graph *g = b->g;
  bool *out = calloc((size_t)g->nnodes + 1, sizeof *out);
  if (!out)
    return;   /* nothing recomputed: still a valid plan */
  for (int o = 0; o < g->noutputs; o++)
    out[g->out_node[o]] = true;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const fuse_node *nd = &g->nodes[i];
    int t = b->step[i];
    if (!b->store[i] || out[i] || b->force[i] || kind_of(nd) != NK_PW ||
        t < 0 || group_of(b, t) != GK_MAP || b->consumers[i] < 2)
      continue;
    int s = -1;
    bool ok = true;
    for (int c = i + 1; c < g->nnodes && ok; c++)
      for (int e = 0; e < g->nodes[c].nin && ok; e++) {
        if (g->nodes[c].in[e].src != i)
          continue;
        int es = b->eval_step[c];
        ok = !g->nodes[c].in[e].viewed && kind_of(&g->nodes[c]) != NK_EXTERN
             && es >= 0 && es != t && (s < 0 || es == s);
        s = es;
      }
    if (!ok || s < 0 || group_of(b, s) == GK_NONE ||
        (group_of(b, s) == GK_ROWS && reads_step(b, i, s)))
      continue;
    int nodes = 0;
    int64_t bytes = 0;
    bool was = b->store[i];
    b->store[i] = false;   /* as cheap_tree sees an inlined root */
    ok = cheap_tree(b, i, tensor_shape_numel(nd->ndim, nd->shape), &nodes,
                    &bytes) &&
         bytes <= 2 * (int64_t)tensor_dtype_size[nd->dtype];
    if (!ok) {
      b->store[i] = was;
      continue;
    }
    b->step[i] = -1;
    set_eval_step(b, i, s);
    int first = -1;
    for (int j = 0; j < g->nnodes && first < 0; j++)
      if (b->step[j] == t)
        first = j;
    b->si[t].first_member = first;
    gone[t] = first < 0;
  }
  free(out);
}

static int merge_groups(fb *b)
{
  const fuse_graph *g = b->g;
  fuse_plan *p = b->p;
  bool *gone = calloc((size_t)p->nsteps + 1, sizeof *gone);
  int *mark = calloc((size_t)(g->nnodes + g->ninputs) + 1, sizeof *mark);
  if (!gone || !mark) {
    free(gone);
    free(mark);
    return fail(b, "out of memory");
  }
  recompute_cheap(b, gone);
  int stamp = 0;
  bool any = false;
  for (int a = 0; a < p->nsteps; a++)
    any |= gone[a];
  for (int a = 0; a < p->nsteps; a++) {
    group_kind k = gone[a] ? GK_NONE : group_of(b, a);
    if (k == GK_NONE || step_has(b, a, true, false))
      continue;
    /* A group that writes back is no matmul's epilogue (mark_epilogues),
    ** and would stop z from being one. */
    bool dest = step_has(b, a, false, true);
    if (!dest && epilogue_candidate(b, a))
      continue;
    for (int z = a + 1; z < p->nsteps; z++) {
      if (gone[z] || group_of(b, z) != k || !same_group_shape(b, k, a, z))
        continue;
      if (!can_move(b, a, z, k == GK_ROWS))
        break;   /* a later group is past the same reader */
      bool epi = dest && !step_has(b, z, false, true) &&
                 epilogue_candidate(b, z);
      if (epi || !fits_together(b, a, z, mark, ++stamp))
        continue;
      for (int i = 0; i < g->nnodes; i++) {
        if (b->step[i] == a)
          b->step[i] = z;
        if (b->eval_step[i] == a)
          b->eval_step[i] = z;
      }
      gone[a] = any = true;
      break;
    }
  }
  int rc = any ? compact_steps(b, gone) : 0;
  free(gone);
  free(mark);
  return rc;
}

/* Can output node n (write-back to input `dest`) be stored straight into
** the target? Only when no step reads the target's storage after n's step,
** and n's own (MAP) step reads it only at the point it writes. */
static bool dest_direct(fb *b, int n, int dest)
{
  const fuse_graph *g = b->g;
  const tc_tensor *d = g->inputs[dest];
  int s = b->step[n];
  if (b->p->steps[s].node >= 0) {
    /* A ROWS kernel rereads its rows. Only a per-row value of a general
    ** one (one STORE_ROW element per row, read in this kernel only at its
    ** own element: the checks below) goes straight to its target, its
    ** pass placed after every pass that reads the target
    ** (build_rows_general: order_row_stores). */
    const fuse_node *nd = &g->nodes[n];
    row_class c = b->si[s].general
                  ? row_class_of(&b->si[s].rs, nd->ndim, nd->shape)
                  : RC_NONE;
    if (b->nodirect[n] || (c != RC_ROWK && c != RC_ROWR))
      return false;
  }
  for (int o = 0; o < g->noutputs; o++) {   /* one writer per storage */
    int od = g->out_dest[o];
    if (od >= 0 && od != dest && g->inputs[od]->storage == d->storage)
      return false;
  }
  for (int c = 0; c < g->nnodes; c++) {
    const fuse_node *cn = &g->nodes[c];
    for (int e = 0; e < cn->nin; e++) {
      int src = cn->in[e].src;
      if (src >= 0 || src == FUSE_ABSENT)
        continue;
      const tc_tensor *t = g->inputs[-src - 1];
      if (t->storage != d->storage)
        continue;
      int es = b->eval_step[c];
      if (es < s)
        continue;
      if (es > s || !tensor_same_view(t, d) || cn->in[e].viewed ||
          !same_shape(cn, &g->nodes[n]))
        return false;
    }
  }
  return true;
}

static int place_values(fb *b)
{
  const fuse_graph *g = b->g;
  fuse_plan *p = b->p;
  for (int i = 0; i < g->nnodes; i++)
    b->where[i] = (fuse_ref){ FREF_NONE, 0 };
  for (int o = 0; o < g->noutputs; o++) {
    int n = g->out_node[o], dest = g->out_dest[o];
    if (dest < 0) {
      if (b->where[n].kind == FREF_NONE)
        b->where[n] = (fuse_ref){ FREF_OUTPUT, o };
      p->out_ref[o] = b->where[n];
    } else if (kind_of(&g->nodes[n]) == NK_PW && dest_direct(b, n, dest) &&
               b->where[n].kind == FREF_NONE) {
      b->where[n] = (fuse_ref){ FREF_DEST, o };
      p->out_ref[o] = b->where[n];
    } else {
      p->out_ref[o] = (fuse_ref){ FREF_NONE, -1 };   /* copied below */
    }
  }
  for (int i = 0; i < g->nnodes; i++) {
    if (!b->store[i] || b->where[i].kind != FREF_NONE)
      continue;
    /* A value used only inside its own MAP group, or a reduction used only
    ** inside its own general ROWS kernel, needs no store. */
    bool outside = kind_of(&g->nodes[i]) == NK_EXTERN ||
                   (kind_of(&g->nodes[i]) == NK_ROWS &&
                    !b->si[b->step[i]].general);
    for (int c = i + 1; c < g->nnodes && !outside; c++)
      for (int e = 0; e < g->nodes[c].nin; e++)
        if (g->nodes[c].in[e].src == i &&
            (b->eval_step[c] != b->step[i] || g->nodes[c].in[e].viewed))
          outside = true;
    for (int o = 0; o < g->noutputs; o++)
      outside |= g->out_node[o] == i;
    if (!outside)
      continue;
    int t = temp_new(b, &g->nodes[i], i, false);
    if (t < 0)
      return -1;
    b->where[i] = (fuse_ref){ FREF_TEMP, t };
  }
  /* Write-backs that could not go straight to their target: copy last. */
  for (int o = 0; o < g->noutputs; o++) {
    if (g->out_dest[o] < 0 || p->out_ref[o].kind != FREF_NONE)
      continue;
    int s = step_new(b, FSTEP_COPY);
    if (s < 0)
      return -1;
    p->steps[s].from = b->where[g->out_node[o]];
    p->steps[s].out = (fuse_ref){ FREF_DEST, o };
    p->out_ref[o] = p->steps[s].out;
  }
  return 0;
}

/* -- Lowering to the kernel IR ----------------------------------------------- */

/* The map of an operand of shape (ndim, shape) read by a user whose own
** coordinates are `um` over shape ushape: NumPy broadcasting, right
** aligned. */
static vmap operand_map(const vmap *um, const int64_t *ushape, int ndim,
                        const int64_t *shape)
{
  vmap m = { .ndim = ndim };
  int lead = um->ndim - ndim;
  for (int j = 0; j < ndim; j++)
    m.map[j] = (shape[j] == 1 && ushape[lead + j] != 1) ? -1
               : um->map[lead + j];
  return m;
}

/* A gather buffer's gathered axis (kir_buf.gstride, gsize). */
typedef struct {
  bool on;
  int64_t stride, size;
} gaxis;

/* Record where buffer i's numbers come from (lb), as its own or (alias)
** as another load's that shares it; recording stops when out of memory. */
static void record_buffer(fb *b, int i, const lbuf *lb, bool alias)
{
  int nst = b->k->ndim + (b->k->kind == KIR_ROWS);
  if (b->rec)
    recorded(b, alias ? recipe_alias(b->rec, b->cur, i, nst, lb)
                      : recipe_buffer(b->rec, b->cur, i, nst, lb));
}

/* The kernel buffer for (role, ref, off, dtype, strides over kernel dims,
** gathered axis), made on first use; lb: where those numbers come from. */
static int buffer_of(fb *b, kir_buf_role role, fuse_ref ref, int64_t off,
                     tc_dtype dt, const int64_t *kst, gaxis ga,
                     const lbuf *lb)
{
  kir_kernel *k = b->k;
  int nst = k->ndim + (k->kind == KIR_ROWS);
  for (int i = 0; i < k->nbufs; i++) {
    const kir_buf *bf = &k->buf[i];
    if (bf->role == role && bf->dtype == dt && b->st->buf[i].kind == ref.kind
        && b->st->buf[i].index == ref.index && b->st->buf_off[i] == off &&
        memcmp(bf->stride, kst, sizeof(int64_t) * (size_t)nst) == 0 &&
        bf->gather == ga.on && bf->gstride == ga.stride &&
        bf->gsize == ga.size) {
      record_buffer(b, i, lb, true);
      return i;
    }
  }
  if (k->nbufs == KIR_MAX_BUFS)
    return over_limit(b, "too many buffers in one kernel");
  int i = k->nbufs++;
  record_buffer(b, i, lb, false);
  k->buf[i].role = (uint8_t)role;
  k->buf[i].dtype = (uint8_t)dt;
  memset(k->buf[i].stride, 0, sizeof k->buf[i].stride);
  memcpy(k->buf[i].stride, kst, sizeof(int64_t) * (size_t)nst);
  k->buf[i].gather = ga.on;
  k->buf[i].gstride = ga.stride;
  k->buf[i].gsize = ga.size;
  b->st->buf[i] = ref;
  b->st->buf_off[i] = off;
  return i;
}

static int buffer(fb *b, kir_buf_role role, fuse_ref ref, int64_t off,
                  tc_dtype dt, const int64_t *kst, const lbuf *lb)
{
  return buffer_of(b, role, ref, off, dt, kst, (gaxis){ false, 0, 0 }, lb);
}

static lsrc src_of(lsrc_kind kind, int a, int e, int j)
{
  return (lsrc){ (uint8_t)kind, (uint8_t)e, (uint8_t)j, a };
}

static lterm term_of(lsrc s)
{
  return (lterm){ s, src_of(LS_ONE, 0, 0, 0) };
}

/* Source kind `kind` of operand e (a pointer into g's nodes), dim j. */
static lsrc edge_src(const fb *b, const fuse_edge *e, lsrc_kind kind, int j)
{
  const fuse_node *nodes = b->g->nodes;
  int n = (int)(((const char *)e - (const char *)nodes) /
                (ptrdiff_t)sizeof *nodes);
  return src_of(kind, n, (int)(e - nodes[n].in), j);
}

/* A buffer's sources with no gathered axis, at offset source `off`. */
static void lbuf_init(lbuf *lb, lsrc off)
{
  lb->same = false;
  lb->off = term_of(off);
  lb->gstride = lb->gsize = term_of(src_of(LS_ZERO, 0, 0, 0));
}

/* Fold a value's per-dim strides onto kernel dims through its map (and
** their sources vs into lb). */
static void fold(const fb *b, const vmap *m, const int64_t *vst, int64_t *kst,
                 const lsrc *vs, lbuf *lb)
{
  int nst = b->k->ndim + (b->k->kind == KIR_ROWS);
  for (int d = 0; d < nst; d++)
    kst[d] = 0, lb->n[d] = 0;
  for (int j = 0; j < m->ndim; j++)
    if (m->map[j] >= 0) {
      int d = m->map[j];
      kst[d] += vst[j];
      lb->t[d][lb->n[d]++] = term_of(vs[j]);
    }
}

/* Where a stored value is, as a tensor layout: strides (their sources in
** vs) and dtype. */
static void ref_layout(fb *b, fuse_ref r, int node, int64_t *vst,
                       tc_dtype *dt, lsrc *vs)
{
  const fuse_graph *g = b->g;
  const tc_tensor *t = NULL;
  int input = -1;
  if (r.kind == FREF_INPUT)
    input = r.index;
  else if (r.kind == FREF_DEST)
    input = g->out_dest[r.index];
  if (input >= 0)
    t = g->inputs[input];
  if (t) {
    memcpy(vst, t->stride, sizeof(int64_t) * t->ndim);
    *dt = (tc_dtype)t->dtype;
    for (int j = 0; j < t->ndim; j++)
      vs[j] = src_of(LS_ISTRIDE, input, 0, j);
  } else {
    const fuse_node *n = &g->nodes[node];
    tensor_contiguous_strides(n->ndim, n->shape, vst);
    *dt = (tc_dtype)n->dtype;
    for (int j = 0; j < n->ndim; j++)
      vs[j] = src_of(LS_NCST, node, 0, j);
  }
}

/* In a flat row (SUM_ALL), a load must step through the row's shape in C
** order at one stride (dense) or not at all (a scalar). */
static int flat_stride(fb *b, const int64_t *vst, const vmap *m, int64_t *st,
                       const lsrc *vs, lbuf *lb)
{
  int64_t cst[TC_MAX_DIMS];
  tensor_contiguous_strides(b->flat_ndim, b->flat_shape, cst);
  int64_t c = -1;
  int lead = b->flat_ndim - m->ndim;
  for (int j = 0; j < m->ndim; j++) {
    int64_t size = b->flat_shape[lead + j];
    if (size == 1)
      continue;
    if (m->map[j] < 0)
      return fail(b, "sum_all over a broadcast operand");
    if (vst[j] % cst[lead + j] != 0)
      return fail(b, "sum_all over a strided operand");
    int64_t cj = vst[j] / cst[lead + j];
    if (c >= 0 && cj != c)
      return fail(b, "sum_all over a strided operand");
    /* the stride as the recipe computes it: every dim's must agree */
    lb->t[0][lb->n[0]++] = (lterm){ vs[j],
                                    src_of(LS_ECST, b->flat_node, 0,
                                           lead + j) };
    lb->same = true;
    c = cj;
  }
  if (lead > 0 && c != 0 && c != -1) {
    /* a lower-rank dense operand repeats: not one stride */
    for (int j = 0; j < lead; j++)
      if (b->flat_shape[j] != 1)
        return fail(b, "sum_all over a broadcast operand");
  }
  *st = c < 0 ? 0 : c;
  if (c < 0)
    lb->n[0] = 0;
  return 0;
}

/* vs, os: where the value's strides and the offset come from. */
static int load(fb *b, fuse_ref r, int64_t off, tc_dtype dt,
                const int64_t *vst, const vmap *m, const lsrc *vs, lsrc os)
{
  int64_t kst[TC_MAX_DIMS + 1];
  lbuf lb;
  lbuf_init(&lb, os);
  if (b->flat) {
    lb.n[0] = 0;
    if (flat_stride(b, vst, m, &kst[0], vs, &lb) < 0)
      return -1;
  } else {
    fold(b, m, vst, kst, vs, &lb);
  }
  int buf = buffer(b, KIR_IN, r, off, dt, kst, &lb);
  return buf < 0 ? -1 : kir_load(b->k, buf);
}

static int scalar_slot(fb *b, int node, int which, tc_dtype dt)
{
  fuse_step *st = b->st;
  for (int i = 0; i < st->nscal; i++)
    if (st->scal[i].node == node && st->scal[i].which == which)
      return kir_scalar(b->k, dt, i);
  if (st->nscal == KIR_MAX_SCALARS)
    return over_limit(b, "too many scalars in one kernel");
  st->scal[st->nscal].node = node;
  st->scal[st->nscal].which = which;
  return kir_scalar(b->k, dt, st->nscal++);
}

/* Scalar argument i of node n: a slot bound to its region node's argument,
** or the constant of a composite's decomposition. */
static int scalar_of(fb *b, int n, int i, tc_dtype dt)
{
  const fuse_scalar *sc = &b->g->nodes[n].sc[i];
  return sc->which < 0 ? kir_const(b->k, dt, sc->lit)
                       : scalar_slot(b, b->g->nodes[n].orig, sc->which, dt);
}

/* -- ops.def's `ex`, expanded into IR ---------------------------------------- */

#define K(v)          kir_const(K_, T_, (double)(v))
#define S(i)          scalar_of(fz, node, i, T_)
#define B2(op, x, y)  kir_emit(K_, KOP_##op, T_, x, y, -1)
#define B1(op, x)     kir_emit(K_, KOP_##op, T_, x, -1, -1)
#define ADD(x, y)     B2(ADD, x, y)
#define SUB(x, y)     B2(SUB, x, y)
#define MUL(x, y)     B2(MUL, x, y)
#define DIV(x, y)     B2(DIV, x, y)
#define NEG(x)        B1(NEG, x)
#define ABS(x)        B1(ABS, x)
#define EQ(x, y)      B2(EQ, x, y)
#define NE(x, y)      B2(NE, x, y)
#define LT(x, y)      B2(LT, x, y)
#define LE(x, y)      B2(LE, x, y)
#define GT(x, y)      B2(GT, x, y)
#define GE(x, y)      B2(GE, x, y)
#define MAXIMUM(x, y) B2(MAXIMUM, x, y)
#define MINIMUM(x, y) B2(MINIMUM, x, y)
#define SEL(p, x, y)  kir_emit(K_, KOP_SEL, T_, p, x, y)
#define SQRT(x)       B1(SQRT, x)
#define EXP(x)        B1(EXP, x)
#define LOG(x)        B1(LOG, x)
#define TANH(x)       B1(TANH, x)
#define SIGMOID(x)    B1(SIGMOID, x)
#define GELU(x)       B1(GELU, x)
#define SIN(x)        B1(SIN, x)
#define COS(x)        B1(COS, x)
#define POW(x, y)     B2(POW, x, y)
#define FLOOR(x)      B1(FLOOR, x)
#define CEIL(x)       B1(CEIL, x)
#define ROUND(x)      B1(ROUND, x)
#define TRUNC(x)      B1(TRUNC, x)
#define EXPM1(x)      B1(EXPM1, x)
#define LOG1P(x)      B1(LOG1P, x)
#define ERF(x)        B1(ERF, x)

#define EXK_PW(ex) return (ex);
#define EXK_RD(ex) break;
#define EXK_VW(ex) break;
#define EXK_EX(ex) break;
#define EXK_CP(ex) break;
#define EXK_CR(ex) break;

/* The expression of pointwise op `op` over operands a, b, c (already in
** the compute dtype T_). */
static int emit_ex(fb *fz, int node, tc_op op, tc_dtype T_, int a, int b,
                   int c)
{
  kir_kernel *K_ = fz->k;
  (void)a;
  (void)b;
  (void)c;
  switch (op) {
#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) \
  case TC_OP_##n:                         \
    EXK_##k(ex)
#include "../tensor/ops.def"
  default:
    break;
  }
  return fail(fz, "op has no pointwise expression");
}

#undef K
#undef S

/* -- Evaluating values inside one kernel ------------------------------------- */

static int eval(fb *b, int n, const vmap *m);

/* Where operand e is stored, as a tensor layout (its view's when viewed):
** the reference, element offset, strides and dtype; -1 when it is a view
** of a value that is not stored contiguously. */
static int edge_layout(fb *b, const fuse_edge *e, fuse_ref *r, int64_t *off,
                       int64_t *vst, tc_dtype *dt, lsrc *vs, lsrc *os)
{
  const fuse_graph *g = b->g;
  int src = e->src;
  *os = src_of(LS_ZERO, 0, 0, 0);
  if (src < 0) {
    *r = (fuse_ref){ FREF_INPUT, -src - 1 };
    ref_layout(b, *r, -1, vst, dt, vs);
  } else {
    *r = b->where[src];
    if (r->kind != FREF_TEMP && r->kind != FREF_OUTPUT)
      return fail(b, "a view of a value that is not stored contiguously");
    *dt = (tc_dtype)g->nodes[src].dtype;
  }
  *off = 0;
  if (e->viewed) {
    memcpy(vst, e->geom.stride, sizeof(int64_t) * (size_t)e->geom.ndim);
    *off = e->geom.offset;
    for (int j = 0; j < e->geom.ndim; j++)
      vs[j] = edge_src(b, e, LS_ESTRIDE, j);
    *os = edge_src(b, e, LS_EOFF, 0);
  }
  return 0;
}

/* The value of operand e read at coordinates om (over e's own dims). */
static int eval_edge_at(fb *b, const fuse_edge *e, const vmap *om)
{
  if (!e->viewed && e->src >= 0)
    return eval(b, e->src, om);
  int vm[TC_MAX_DIMS];
  if (e->src >= 0 && !b->store[e->src]) {
    /* an inlined value read through a view (analyse: view_mappable) */
    if (b->flat)   /* a flat row steps at one stride: store it (retry) */
      return fail(b, "sum_all over a view");
    if (!view_mappable(b->g, e, vm))
      return fail(b, "a view of an inlined value");
    vmap sm = { .ndim = b->g->nodes[e->src].ndim };
    for (int i = 0; i < sm.ndim; i++)
      sm.map[i] = vm[i] < 0 ? -1 : om->map[vm[i]];
    return eval(b, e->src, &sm);
  }
  fuse_ref r;
  int64_t off, vst[TC_MAX_DIMS];
  tc_dtype dt;
  lsrc vs[TC_MAX_DIMS], os;
  if (edge_layout(b, e, &r, &off, vst, &dt, vs, &os) < 0)
    return -1;
  return load(b, r, off, dt, vst, om, vs, os);
}

/* The value of operand e of a user with coordinates um over ushape. */
static int eval_edge(fb *b, const fuse_edge *e, int ndim_u,
                     const int64_t *ushape, const vmap *um)
{
  int sndim;
  const int64_t *sshape = edge_shape(b->g, e, &sndim);
  (void)ndim_u;
  vmap om = operand_map(um, ushape, sndim, sshape);
  return eval_edge_at(b, e, &om);
}

/* -- Gathers: TAKE and GATHER as indexed loads ------------------------------- */

/* Gather node n (TAKE or GATHER) at coordinates m: the index at its
** coordinates, then a GATHER from the table's buffer, whose other dims
** follow the point. TAKE's result puts the index's dims in place of the
** table's dim d; GATHER's is the index's shape, the table's dim d read at
** the index and its other dims at the point's own coordinates. */
static int eval_gather(fb *b, int n, const vmap *m)
{
  const fuse_graph *g = b->g;
  const fuse_node *nd = &g->nodes[n];
  const fuse_edge *ea = &nd->in[0], *ei = &nd->in[1];
  if (b->flat)   /* a flat row steps at one stride: store it (retry) */
    return fail(b, "sum_all over a gather");
  int an, in;
  const int64_t *ashape = edge_shape(g, ea, &an);
  edge_shape(g, ei, &in);
  int d = nd->dim;
  bool take = nd->op == TC_OP_TAKE;
  int nidx = take ? nd->ndim - (an - 1) : 0;
  vmap im = { .ndim = in }, am = { .ndim = an };
  for (int j = 0; j < in; j++)
    im.map[j] = m->map[take ? d + j : j];
  for (int e = 0; e < an; e++)
    am.map[e] = e == d ? -1 : !take || e < d ? m->map[e]
                                            : m->map[e - 1 + nidx];
  int iv = eval_edge_at(b, ei, &im);
  fuse_ref r;
  int64_t off, vst[TC_MAX_DIMS], kst[TC_MAX_DIMS + 1];
  tc_dtype dt;
  lsrc vs[TC_MAX_DIMS], os;
  lbuf lb;
  if (iv < 0 || edge_layout(b, ea, &r, &off, vst, &dt, vs, &os) < 0)
    return -1;
  lbuf_init(&lb, os);
  fold(b, &am, vst, kst, vs, &lb);
  lb.gstride = term_of(vs[d]);
  lb.gsize = term_of(edge_src(b, ea, LS_ESHAPE, d));
  int buf = buffer_of(b, KIR_IN, r, off, dt, kst,
                      (gaxis){ true, vst[d], ashape[d] }, &lb);
  return buf < 0 ? -1 : kir_gather(b->k, buf, kir_cast(b->k, TC_I64, iv));
}

/* May TAKE or GATHER node c be an indexed load? Its table must be a region
** input (so it is stored, unchanged by the region: no write-back target
** shares its storage), and a TAKE's index must have the dims it puts in
** the result (or none, for a 0-d index; GATHER's is the result's shape). */
static bool gather_fusible(const fuse_graph *g, const fuse_node *c)
{
  const fuse_edge *ea = &c->in[0], *ei = &c->in[1];
  if ((c->op != TC_OP_TAKE && c->op != TC_OP_GATHER) || c->eager ||
      ea->src >= 0)
    return false;
  const tc_tensor *t = g->inputs[-ea->src - 1];
  for (int o = 0; o < g->noutputs; o++)
    if (g->out_dest[o] >= 0 &&
        g->inputs[g->out_dest[o]]->storage == t->storage)
      return false;
  int an, in;
  edge_shape(g, ea, &an);
  edge_shape(g, ei, &in);
  return c->op == TC_OP_GATHER ? in == an
                               : in == 0 || in == c->ndim - (an - 1);
}

static int eval(fb *b, int n, const vmap *m)
{
  const fuse_node *nd = &b->g->nodes[n];
  /* One instruction per (node, coordinates) in a kernel. */
  if (b->cache[n] >= 0 && memcmp(&b->cache_vm[n], m, sizeof *m) == 0)
    return b->cache[n];
  int v;
  if (b->store[n] && b->step[n] != b->cur) {
    if (b->step[n] > b->cur || b->where[n].kind == FREF_NONE)
      return fail(b, "a value is used before it is computed");
    int64_t vst[TC_MAX_DIMS];
    tc_dtype dt;
    lsrc vs[TC_MAX_DIMS];
    ref_layout(b, b->where[n], n, vst, &dt, vs);
    v = load(b, b->where[n], 0, dt, vst, m, vs, src_of(LS_ZERO, 0, 0, 0));
  } else if (kind_of(nd) != NK_PW) {
    /* A reduction of this kernel: its value for the row (grouping made
    ** sure it is read only at its own row). */
    if (b->rowval[n] < 0)
      return fail(b, "a reduction result is used before its pass");
    v = b->rowval[n];
  } else if (nd->gather) {
    v = eval_gather(b, n, m);
  } else {
    int in[3] = { -1, -1, -1 };
    for (int e = 0; e < nd->nin; e++) {
      in[e] = eval_edge(b, &nd->in[e], nd->ndim, nd->shape, m);
      if (in[e] < 0)
        return -1;
    }
    tc_dtype dt = (tc_dtype)nd->dtype, cd = (tc_dtype)nd->cdtype;
    if (nd->op == TC_OP_CAST || nd->op == TC_OP_CONTIGUOUS) {
      v = kir_cast(b->k, dt, in[0]);
    } else if (nd->op == TC_OP_FILL) {
      v = kir_cast(b->k, dt, scalar_of(b, n, 0, TC_F64));
    } else {
      for (int e = 0; e < nd->nin; e++)
        in[e] = kir_cast(b->k, cd, in[e]);
      v = kir_cast(b->k, dt, emit_ex(b, n, (tc_op)nd->op, cd, in[0], in[1],
                                     in[2]));
    }
  }
  if (v < 0)   /* kir_emit is out of room for instructions */
    return b->reason[0] ? -1 : over_limit(b, "too many instructions");
  b->cache[n] = v;
  b->cache_vm[n] = *m;
  return v;
}

/* The OUT buffer that holds node n's value (coordinates m). */
static int out_buffer(fb *b, int n, const vmap *m)
{
  int64_t vst[TC_MAX_DIMS], kst[TC_MAX_DIMS + 1];
  tc_dtype dt;
  lsrc vs[TC_MAX_DIMS];
  lbuf lb;
  lbuf_init(&lb, src_of(LS_ZERO, 0, 0, 0));
  ref_layout(b, b->where[n], n, vst, &dt, vs);
  fold(b, m, vst, kst, vs, &lb);
  return buffer(b, KIR_OUT, b->where[n], 0, dt, kst, &lb);
}

static int store(fb *b, int n, const vmap *m, kir_pass_kind kind, int value)
{
  int buf = out_buffer(b, n, m);
  tc_dtype dt = buf < 0 ? TC_F32 : (tc_dtype)b->k->buf[buf].dtype;
  if (buf < 0)
    return -1;
  if (b->k->npasses == KIR_MAX_PASSES)
    return over_limit(b, "too many passes");
  b->k->pass[b->k->npasses++] = (kir_pass){ (uint8_t)kind, 0, (int16_t)buf,
                                            kir_cast(b->k, dt, value), -1 };
  return 0;
}

/* Record the kernel's sizes and row length (before kir_collapse). */
static void record_kernel(fb *b, const lsrc *size, lsrc row_len)
{
  if (b->rec)
    recorded(b, recipe_kernel(b->rec, b->cur, b->k->ndim, size, row_len));
}

/* Record that step s (extern, copy) reads node n's operands' views. */
static void record_step_node(fb *b, int s, int n)
{
  if (b->rec)
    recorded(b, recipe_step_node(b->rec, s, n));
}

static void kernel_begin(fb *b, int s)
{
  b->cur = s;
  b->st = &b->p->steps[s];
  b->k = b->st->k;
  b->k->dynamic = b->dynamic;
  b->member = -1;
  for (int i = 0; i < b->g->nnodes; i++)
    b->cache[i] = b->rowval[i] = -1;
}

/* A MAP kernel: every stored pointwise value of the group, one pass. */
static int build_map(fb *b, int s)
{
  const fuse_graph *g = b->g;
  kernel_begin(b, s);
  int first = -1;
  for (int i = 0; i < g->nnodes && first < 0; i++)
    if (b->step[i] == s)
      first = i;
  kir_kernel *k = b->k;
  k->kind = KIR_MAP;
  k->ndim = g->nodes[first].ndim;
  memcpy(k->size, g->nodes[first].shape, sizeof(int64_t) * (size_t)k->ndim);
  lsrc size[TC_MAX_DIMS];
  for (int d = 0; d < k->ndim; d++)
    size[d] = src_of(LS_NSHAPE, first, 0, d);
  record_kernel(b, size, src_of(LS_ZERO, 0, 0, 0));
  vmap id = { .ndim = k->ndim };
  for (int d = 0; d < k->ndim; d++)
    id.map[d] = d;
  for (int i = 0; i < g->nnodes; i++) {
    if (b->step[i] != s)
      continue;
    b->first = b->member < 0;
    b->member = i;
    int v = eval(b, i, &id);
    if (v < 0)
      return -1;
    if (b->where[i].kind != FREF_NONE &&
        store(b, i, &id, KIR_PASS_STORE, v) < 0)
      return -1;
    k->inplace |= b->where[i].kind == FREF_DEST;
  }
  if (k->npasses == 0)
    return fail(b, "a kernel with nothing to store");
  kir_collapse(k, !b->dynamic);
  return 0;
}

/* A REDUCE pass folding value; with out >= 0 it also stores each value. */
static int reduce_pass_to(fb *b, kir_red red, int value, int out)
{
  kir_kernel *k = b->k;
  if (value < 0)
    return -1;
  if (k->npasses == KIR_MAX_PASSES)
    return over_limit(b, "too many passes");
  int p = k->npasses++;
  k->pass[p] = (kir_pass){ KIR_PASS_REDUCE, (uint8_t)red, (int16_t)out,
                           value, -1 };
  return kir_rowvar(k, p);
}

static int reduce_pass(fb *b, kir_red red, int value)
{
  return reduce_pass_to(b, red, value, -1);
}

/* The row length as a value of dtype dt (mean's and layer_norm's
** divisor): a scalar that each launch fills with its row length, (T)(double)n
** as the eager kernels' K(n). Never a constant: a shape-dynamic kernel must
** not bake it in, and a static one would let GCC fold an empty row's 0 / 0
** into a NaN of another sign than the one the eager kernel computes. */
static int row_len_value(fb *b, int n, tc_dtype dt)
{
  return scalar_slot(b, b->g->nodes[n].orig, FUSE_SCALAR_ROW_LEN, dt);
}

/* Does evaluating node n in step s load from storage st (through its
** inputs, values stored into write-back targets, and the pointwise values
** it computes in place)? Each node is visited once per b->seen_stamp. */
static bool loads_storage(fb *b, int n, int s, const tensor_storage *st)
{
  const fuse_graph *g = b->g;
  const fuse_node *nd = &g->nodes[n];
  if (b->seen[n] == b->seen_stamp)
    return false;
  b->seen[n] = b->seen_stamp;
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src == FUSE_ABSENT)
      continue;
    if (src < 0) {
      if (g->inputs[-src - 1]->storage == st)
        return true;
    } else if (b->store[src] && b->step[src] != s) {
      fuse_ref r = b->where[src];
      if (r.kind == FREF_DEST &&
          g->inputs[g->out_dest[r.index]]->storage == st)
        return true;
    } else if (kind_of(&g->nodes[src]) == NK_PW &&
               loads_storage(b, src, s, st)) {
      return true;
    }
  }
  return false;
}

/* The storage that per-row value n of a ROWS kernel writes in place, or
** NULL. */
static const tensor_storage *row_target(const fb *b, int n)
{
  fuse_ref r = b->where[n];
  return r.kind == FREF_DEST ? b->g->inputs[b->g->out_dest[r.index]]->storage
                             : NULL;
}

/* Order the per-row stores vals[0..n) so that a pass writing a target in
** place comes after every pass that loads it: each pass then sees the
** buffers as they were when the kernel started, whether the backend runs
** a row's passes together (row mode) or each pass over all rows (split
** mode). A cycle (two values that read each other's targets) is not
** ordered: those values go through temporaries on the next attempt. */
static int order_row_stores(fb *b, int s, int *vals, int n)
{
  for (int done = 0; done < n; done++) {
    int pick = -1;
    for (int i = done; i < n && pick < 0; i++) {
      const tensor_storage *w = row_target(b, vals[i]);
      bool ok = true;
      for (int j = done; j < n && ok && w; j++) {
        if (j == i)
          continue;
        b->seen_stamp++;
        ok = !loads_storage(b, vals[j], s, w);
      }
      if (ok)
        pick = i;
    }
    if (pick < 0) {
      for (int i = done; i < n; i++)
        if (row_target(b, vals[i]))
          b->nodirect[vals[i]] = true;
      b->retry = 1;
      return fail(b, "per-row write-backs that read each other");
    }
    int v = vals[pick];
    memmove(&vals[done + 1], &vals[done], sizeof *vals * (size_t)(pick - done));
    vals[done] = v;
  }
  return 0;
}

/* A general ROWS kernel: a REDUCE pass per reduction, in order (each
** folds its operand, which may use the earlier ones' row values), then a
** STORE pass for each value to store of the full row shape, then a
** STORE_ROW pass for each per-row one. */
static int build_rows_general(fb *b, int s)
{
  const fuse_graph *g = b->g;
  const rowspace *rs = &b->si[s].rs;
  kernel_begin(b, s);
  kir_kernel *k = b->k;
  k->kind = KIR_ROWS;
  k->ndim = rs->r - 1;
  k->row_len = rs->shape[rs->d];
  /* Coordinates of the three classes of values over the row space. */
  vmap full = { .ndim = rs->r }, rowk = { .ndim = rs->r },
       rowr = { .ndim = rs->r - 1 };
  /* the row space is the shape the step's first reduction reads (a 0-d
  ** one: a row of one) */
  int rn = b->p->steps[s].node, rsn;
  edge_shape(g, &g->nodes[rn].in[0], &rsn);
  lsrc size[TC_MAX_DIMS], row_len = rsn == 0 ? src_of(LS_ONE, 0, 0, 0)
                                   : src_of(LS_ESHAPE, rn, 0, rs->d);
  for (int j = 0, o = 0; j < rs->r; j++) {
    full.map[j] = j == rs->d ? k->ndim : o;
    rowk.map[j] = j == rs->d ? -1 : o;
    if (j != rs->d) {
      rowr.map[o] = o;
      size[o] = src_of(LS_ESHAPE, rn, 0, j);
      k->size[o++] = rs->shape[j];
    }
  }
  record_kernel(b, size, row_len);
  /* A value that a REDUCE pass folds and later passes read again (softmax's
  ** exps) is kept rather than computed twice: stored by that pass into the
  ** buffer of the kernel's one full-row value that goes to memory, which
  ** its own store overwrites at the end, position by position. */
  int only = -1, nfull = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (b->step[i] == s && b->where[i].kind != FREF_NONE &&
        row_class_of(rs, g->nodes[i].ndim, g->nodes[i].shape) == RC_FULL) {
      only = i;
      nfull++;
    }
  bool kept = false;
  for (int i = 0; i < g->nnodes; i++) {
    const fuse_node *nd = &g->nodes[i];
    if (b->step[i] != s || kind_of(nd) == NK_PW)
      continue;
    /* accumulated in the compute dtype, rounded to the node's dtype */
    tc_dtype dt = tensor_compute_of((tc_dtype)nd->dtype);
    b->first = b->member < 0;
    b->member = i;
    int x = kir_cast(k, dt, eval_edge(b, &nd->in[0], rs->r, rs->shape,
                                      &full));
    kir_red red = nd->op == TC_OP_MAX ? KIR_RED_MAX
                  : nd->op == TC_OP_MIN ? KIR_RED_MIN : KIR_RED_SUM;
    int v = nd->in[0].src, out = -1;
    if (!kept && nfull == 1 && v >= 0 && v != only && !nd->in[0].viewed &&
        b->store[v] && b->step[v] == s && b->where[v].kind == FREF_NONE &&
        g->nodes[v].dtype == dt && g->nodes[only].dtype == dt &&
        row_class_of(rs, g->nodes[v].ndim, g->nodes[v].shape) == RC_FULL &&
        (out = out_buffer(b, only, &full)) >= 0)
      kept = true;
    int rv = x < 0 ? -1 : reduce_pass_to(b, red, x, out);
    if (rv >= 0 && out >= 0) {   /* later reads of v load it back */
      b->cache[v] = kir_load(k, out);
      b->cache_vm[v] = full;
    }
    if (rv >= 0 && nd->op == TC_OP_MEAN)
      rv = kir_emit(k, KOP_DIV, dt, rv, row_len_value(b, i, dt), -1);
    rv = kir_cast(k, (tc_dtype)nd->dtype, rv);
    if (rv < 0)
      return b->reason[0] ? -1 : fail(b, "kernel too large");
    b->rowval[i] = rv;
  }
  /* full-row stores, then per-row ones (ordered: order_row_stores) */
  int nvals = 0, *vals = malloc(sizeof *vals * ((size_t)g->nnodes + 1));
  if (!vals)
    return fail(b, "out of memory");
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < g->nnodes; i++) {
      const fuse_node *nd = &g->nodes[i];
      if (b->step[i] != s || b->where[i].kind == FREF_NONE)
        continue;
      row_class c = row_class_of(rs, nd->ndim, nd->shape);
      if ((c == RC_FULL) == (pass == 0))
        vals[nvals++] = i;
    }
  int nfullv = 0;
  while (nfullv < nvals &&
         row_class_of(rs, g->nodes[vals[nfullv]].ndim,
                      g->nodes[vals[nfullv]].shape) == RC_FULL)
    nfullv++;
  if (order_row_stores(b, s, vals + nfullv, nvals - nfullv) < 0) {
    free(vals);
    return -1;
  }
  for (int x = 0; x < nvals; x++) {
    int i = vals[x];
    const fuse_node *nd = &g->nodes[i];
    row_class c = row_class_of(rs, nd->ndim, nd->shape);
    const vmap *m = c == RC_FULL ? &full : c == RC_ROWK ? &rowk : &rowr;
    if (kind_of(nd) == NK_PW) {   /* (a reduction's was built above) */
      b->first = b->member < 0;
      b->member = i;
    }
    int v = eval(b, i, m);
    if (v < 0 || store(b, i, m, c == RC_FULL ? KIR_PASS_STORE
                                : KIR_PASS_STORE_ROW, v) < 0) {
      free(vals);
      return -1;
    }
  }
  free(vals);
  kir_collapse(k, !b->dynamic);
  return 0;
}

/* A ROWS kernel for sum_all n: one flat row over its operand's shape,
** split across the threads (kir_split), producers inlined. */
static int build_sum_all(fb *b, int s, int n)
{
  const fuse_graph *g = b->g;
  const fuse_node *nd = &g->nodes[n];
  kernel_begin(b, s);
  kir_kernel *k = b->k;
  k->kind = KIR_ROWS;
  const fuse_edge *e0 = &nd->in[0];
  int r;
  const int64_t *ishape = edge_shape(g, e0, &r);
  tc_dtype dt = tensor_compute_of((tc_dtype)nd->dtype);
  int x;
  vmap um = { .ndim = r };
  b->first = true;
  b->member = n;
  /* One flat row over the operand's shape, producers inlined. */
  k->ndim = 0;
  int64_t numel = 1;
  for (int j = 0; j < r; j++)
    numel *= ishape[j];
  k->row_len = numel;
  record_kernel(b, NULL, src_of(LS_ENUMEL, n, 0, 0));
  b->flat = true;
  b->flat_ndim = r;
  b->flat_shape = ishape;
  b->flat_node = n;
  for (int j = 0; j < r; j++)
    um.map[j] = 0;
  if (b->copy[n]) {
    int64_t cst[TC_MAX_DIMS];
    lsrc vs[TC_MAX_DIMS];
    tensor_contiguous_strides(r, ishape, cst);
    for (int j = 0; j < r; j++)
      vs[j] = src_of(LS_ECST, n, 0, j);
    fuse_ref t = { FREF_TEMP, b->copy_temp[n] };
    x = load(b, t, 0, (tc_dtype)b->p->temps[t.index].dtype, cst, &um, vs,
             src_of(LS_ZERO, 0, 0, 0));
  } else {
    x = eval_edge(b, e0, r, ishape, &um);
  }
  b->flat = false;
  if (x < 0) {
    /* Not one dense row: store the producer, or copy a strided input,
    ** and try again. */
    if (e0->src >= 0 && !b->store[e0->src] && !e0->viewed)
      b->force[e0->src] = true;
    else
      b->copy[n] = true;
    b->retry = 1;
    return -1;
  }
  int rv = reduce_pass(b, KIR_RED_SUM, kir_cast(k, dt, x));
  vmap none = { .ndim = 0 };
  if (rv < 0 || store(b, n, &none, KIR_PASS_STORE_ROW, rv) < 0)
    return fail(b, "kernel too large");
  return 0;
}

static int build_extern(fb *b, int s, int n)
{
  const fuse_node *nd = &b->g->nodes[n];
  fuse_step *st = &b->p->steps[s];
  record_step_node(b, s, n);
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src == FUSE_ABSENT) {
      st->in[e] = (fuse_ref){ FREF_NONE, 0 };
      continue;
    }
    st->in[e] = src < 0 ? (fuse_ref){ FREF_INPUT, -src - 1 }
                        : b->where[src];
    if (st->in[e].kind == FREF_NONE)
      return fail(b, "an extern op's operand is not stored");
    st->in_viewed[e] = nd->in[e].viewed;
    st->in_geom[e] = nd->in[e].geom;
    if (nd->in[e].viewed && src >= 0 && b->where[src].kind == FREF_DEST)
      return fail(b, "a view of a write-back target");
  }
  st->out = b->where[n];
  return 0;
}

/* -- Matmul epilogues ------------------------------------------------------ */

static bool same_ref(fuse_ref a, fuse_ref b)
{
  return a.kind == b.kind && a.index == b.index;
}

/* Does kernel k read or write buffer i at its own point, row-major over
** the kernel's sizes (the layout of a matmul's contiguous result)? */
static bool pointwise_buf(const kir_kernel *k, int i, int64_t off)
{
  int64_t want = 1;
  for (int d = k->ndim - 1; d >= 0; d--) {
    if (k->size[d] != 1 && k->buf[i].stride[d] != want)
      return false;
    want *= k->size[d];
  }
  return off == 0;
}

/* Mark each matmul whose next step can run as its per-tile epilogue: a
** MAP kernel over exactly the points of the matmul's fresh result, reading
** that result only at its own point, and writing nothing the matmul reads
** (its tiles run while other tiles of the matmul still read the operands)
** nor any write-back target. Any split of a MAP kernel's points computes
** the same bits, so the fused pair equals the two steps run in turn. */
static void mark_epilogues(const fuse_graph *g, fuse_plan *p)
{
  for (int s = 0; s + 1 < p->nsteps; s++) {
    fuse_step *e = &p->steps[s];
    const fuse_step *st = &p->steps[s + 1];
    if (e->kind != FSTEP_EXTERN || e->op != TC_OP_MATMUL ||
        st->kind != FSTEP_KERNEL || st->k->kind != KIR_MAP ||
        (e->out.kind != FREF_TEMP && e->out.kind != FREF_OUTPUT))
      continue;
    int ndim;
    const int64_t *shape;
    tc_dtype dt;
    if (e->out.kind == FREF_TEMP) {
      ndim = p->temps[e->out.index].ndim;
      shape = p->temps[e->out.index].shape;
      dt = (tc_dtype)p->temps[e->out.index].dtype;
    } else {
      const fuse_node *n = &g->nodes[g->out_node[e->out.index]];
      ndim = n->ndim;
      shape = n->shape;
      dt = (tc_dtype)n->dtype;
    }
    if (tensor_dtype_is_half(dt))   /* computed in f32 by eager's wrapper */
      continue;
    int64_t numel = 1, units = 1;
    for (int d = 0; d < ndim; d++)
      numel *= shape[d];
    for (int d = 0; d < st->k->ndim; d++)
      units *= st->k->size[d];
    bool ok = units == numel && numel > 0, reads = false;
    for (int i = 0; i < st->k->nbufs && ok; i++) {
      fuse_ref r = st->buf[i];
      if (same_ref(r, e->out)) {
        ok = pointwise_buf(st->k, i, st->buf_off[i]);
        reads |= st->k->buf[i].role == KIR_IN;
        continue;
      }
      if (st->k->buf[i].role != KIR_OUT)
        continue;
      ok = r.kind == FREF_TEMP || r.kind == FREF_OUTPUT;
      for (int j = 0; j < 3 && ok; j++)
        ok = !same_ref(r, e->in[j]);
    }
    e->epilogue = ok && reads;
  }
}

/* -- Public to the project ------------------------------------------------ */

/* Each kernel step's region nodes (its stored values and the producers
** inlined into them): what runs eagerly if that kernel fails to compile. */
static int record_origins(fb *b)
{
  const fuse_graph *g = b->g;
  fuse_plan *p = b->p;
  for (int s = 0; s < p->nsteps; s++) {
    fuse_step *st = &p->steps[s];
    if (st->kind != FSTEP_KERNEL)
      continue;
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
      n += b->eval_step[i] == s;
    if (!(st->orig = malloc(sizeof *st->orig * ((size_t)n + 1))))
      return fail(b, "out of memory");
    for (int i = 0; i < g->nnodes; i++) {
      if (b->eval_step[i] != s)
        continue;
      int o = g->nodes[i].orig, k = 0;
      while (k < st->norig && st->orig[k] != o)
        k++;
      if (k == st->norig)
        st->orig[st->norig++] = o;
    }
  }
  return 0;
}

/* Nodes in n's inlined tree (n included). */
static int inlined_size(const fb *b, int n)
{
  int k = 1;
  const fuse_node *nd = &b->g->nodes[n];
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    if (src >= 0 && !b->store[src])
      k += inlined_size(b, src);
  }
  return k;
}

/* n's largest inlined operand and its tree's size, or -1. */
static int largest_inlined(const fb *b, int n, int *size)
{
  const fuse_node *nd = &b->g->nodes[n];
  int best = -1;
  *size = 0;
  for (int e = 0; e < nd->nin; e++) {
    int src = nd->in[e].src;
    int k = src >= 0 && !b->store[src] ? inlined_size(b, src) : 0;
    if (k > *size) {
      best = src;
      *size = k;
    }
  }
  return best;
}

/* After a kernel limit was hit building member m: split there. A member
** after the first starts a kernel of its own; a first member too large by
** itself has the middle of its inlined tree (going down its largest
** operands to half its size) stored by a kernel before its own, so a few
** halvings fit any expression. Returns false when nothing can be split. */
static bool split_at(fb *b, int m, bool first)
{
  if (!first) {
    /* A general ROWS kernel is split between its reductions: the second
    ** half starts a kernel, and the per-row values that read them follow
    ** (a value split off alone would leave its reduction's kernel for a
    ** MAP kernel of its own, one value per attempt). */
    int s = b->cur, nred = 0, half = -1;
    for (int i = 0; s >= 0 && b->si[s].general && i < b->g->nnodes; i++)
      nred += b->step[i] == s && kind_of(&b->g->nodes[i]) != NK_PW;
    for (int i = 0, k = 0; nred >= 2 && half < 0; i++)
      if (b->step[i] == s && kind_of(&b->g->nodes[i]) != NK_PW &&
          k++ == nred / 2)
        half = i;
    b->fresh[half >= 0 ? half : m] = true;
    return true;
  }
  int total = inlined_size(b, m), size, cut = largest_inlined(b, m, &size);
  if (cut < 0)
    return false;
  for (int next, k; (next = largest_inlined(b, cut, &k)) >= 0 &&
                    size > total / 2;) {
    cut = next;
    size = k;
  }
  b->force[cut] = b->fresh[cut] = b->fresh[m] = true;
  return true;
}

static fuse_plan *build_once(const fuse_graph *g, bool dynamic, bool *force,
                             bool *copy, int *copy_temp, bool *fresh,
                             bool *nodirect, int *retry, char *reason,
                             size_t rlen)
{
  fb b;
  memset(&b, 0, sizeof b);
  b.force = force;
  b.copy = copy;
  b.copy_temp = copy_temp;
  b.fresh = fresh;
  b.nodirect = nodirect;
  b.member = -1;
  b.g = g;
  b.dynamic = dynamic;
  b.reason = reason;
  b.rlen = rlen;
  reason[0] = '\0';
  fuse_plan *p = calloc(1, sizeof *p);
  size_t nn = (size_t)g->nnodes + 1;
  b.consumers = calloc(nn, sizeof *b.consumers);
  b.store = calloc(nn, sizeof *b.store);
  b.step = calloc(nn, sizeof *b.step);
  b.eval_step = calloc(nn, sizeof *b.eval_step);
  b.last_user = calloc(nn, sizeof *b.last_user);
  b.where = calloc(nn, sizeof *b.where);
  b.cache = calloc(nn, sizeof *b.cache);
  b.cache_vm = calloc(nn, sizeof *b.cache_vm);
  b.rowval = calloc(nn, sizeof *b.rowval);
  b.seen = calloc(nn, sizeof *b.seen);
  int rc = -1;
  if (!p || !b.consumers || !b.store || !b.step || !b.eval_step ||
      !b.last_user || !b.where || !b.cache || !b.cache_vm || !b.rowval ||
      !b.seen) {
    fail(&b, "out of memory");
    goto done;
  }
  b.p = p;
  b.rec = dynamic ? recipe_new() : NULL;
  p->dynamic = dynamic;
  p->nregion = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i].orig >= p->nregion)
      p->nregion = g->nodes[i].orig + 1;
  p->noutputs = g->noutputs;
  p->out_ref = calloc((size_t)g->noutputs + 1, sizeof *p->out_ref);
  if (!p->out_ref) {
    fail(&b, "out of memory");
    goto done;
  }
  analyse(&b);
  if (assign_steps(&b) < 0 || merge_groups(&b) < 0 ||
      place_values(&b) < 0)
    goto done;
  rc = 0;
  for (int s = 0; s < p->nsteps && rc == 0; s++) {
    fuse_step *st = &p->steps[s];
    if (st->kind == FSTEP_COPY && st->node >= 0) {
      const fuse_edge *e0 = &g->nodes[st->node].in[0];
      st->from = e0->src < 0 ? (fuse_ref){ FREF_INPUT, -e0->src - 1 }
                             : b.where[e0->src];
      st->in_viewed[0] = e0->viewed;
      st->in_geom[0] = e0->geom;
      record_step_node(&b, s, st->node);
      if (st->from.kind == FREF_NONE)
        rc = fail(&b, "a copied operand is not stored");
    } else if (st->kind == FSTEP_EXTERN) {
      rc = build_extern(&b, s, st->node);
      st->op = g->nodes[st->node].op;
      st->node = g->nodes[st->node].orig;   /* the runner's name for it */
    } else if (st->kind == FSTEP_KERNEL)
      rc = b.si[s].general ? build_rows_general(&b, s)
           : st->node >= 0 ? build_sum_all(&b, s, st->node)
                           : build_map(&b, s);
  }
  if (rc == 0)
    rc = record_origins(&b);
  if (rc == 0)
    mark_epilogues(g, p);
  if (rc == 0 && b.rec && recipe_seal(b.rec, g, p->nsteps) == 0) {
    p->recipe = b.rec;
    b.rec = NULL;
  }
done:
  if (rc < 0 && b.over && b.member >= 0 && split_at(&b, b.member, b.first))
    b.retry = 1;
  free(b.consumers);
  free(b.store);
  free(b.step);
  free(b.eval_step);
  free(b.last_user);
  free(b.si);
  free(b.cache_vm);
  free(b.rowval);
  free(b.seen);
  free(b.where);
  free(b.cache);
  recipe_free(b.rec);
  *retry = b.retry;
  if (rc < 0) {
    if (!reason[0])
      snprintf(reason, rlen, "fusion failed");
    fuse_plan_free(p);
    return NULL;
  }
  return p;
}

/* -- Composites as primitive nodes (tensor/composites.def) ------------------
** Before grouping, each composite node becomes the primitive nodes of its
** row program, so the row fusion above schedules it like a program written
** from primitives (and fuses it with what is around it), computing what
** the eager kernel, expanded from the same text, computes. */

typedef struct {
  const fuse_graph *g;     /* the region's graph */
  fuse_node *nodes;        /* the expanded graph's nodes (owned) */
  int n, cap;
  bool nomem;
} xgraph;

static const int64_t *xshape(const xgraph *x, const fuse_edge *e, int *ndim)
{
  if (e->viewed) {
    *ndim = e->geom.ndim;
    return e->geom.shape;
  }
  if (e->src < 0) {
    *ndim = x->g->inputs[-e->src - 1]->ndim;
    return x->g->inputs[-e->src - 1]->shape;
  }
  *ndim = x->nodes[e->src].ndim;
  return x->nodes[e->src].shape;
}

static int xappend(xgraph *x, const fuse_node *nd)
{
  if (tensor_grow((void **)&x->nodes, &x->cap, x->n + 1,
                  sizeof *x->nodes) < 0) {
    x->nomem = true;
    return -1;
  }
  x->nodes[x->n] = *nd;
  return x->n++;
}

/* A node of composite c's decomposition: op over a (and b), in c's dtype;
** a reduction over c's row dim keeps it (as 1), a pointwise op broadcasts
** its operands. */
static fuse_edge xop(xgraph *x, const fuse_node *c, tc_op op, int nin,
                     fuse_edge a, fuse_edge b, fuse_scalar sc)
{
  fuse_node nd = *c;
  nd.op = op;
  nd.nin = nin;
  nd.in[0] = a;
  nd.in[1] = b;
  nd.in[2] = (fuse_edge){ .src = FUSE_ABSENT };
  nd.sc[0] = sc;
  nd.sc[1] = (fuse_scalar){ -1, 0 };
  nd.dtype = nd.cdtype = c->cdtype;   /* decompose() sets the result's */
  fuse_edge out = { .src = FUSE_ABSENT };
  if (x->nomem)
    return out;
  int an, bn = 0;
  const int64_t *as = xshape(x, &a, &an), *bs = nin > 1 ? xshape(x, &b, &bn)
                                                        : NULL;
  if (op_table[op].kind != OPK_PW) {   /* over the row dim, kept */
    nd.dim = c->op == TC_OP_LAYER_NORM ? an - 1 : c->dim;
    nd.keepdim = true;
    nd.ndim = an;
    memcpy(nd.shape, as, sizeof(int64_t) * (size_t)an);
    if (an > 0)
      nd.shape[nd.dim] = 1;
  } else {                               /* NumPy broadcasting */
    nd.ndim = an > bn ? an : bn;
    for (int j = 0; j < nd.ndim; j++) {
      int ja = j - (nd.ndim - an), jb = j - (nd.ndim - bn);
      int64_t sa = ja >= 0 ? as[ja] : 1, sb = jb >= 0 ? bs[jb] : 1;
      nd.shape[j] = sa == 1 ? sb : sa;
    }
  }
  out.src = xappend(x, &nd);
  return out;
}

#define NOSC           ((fuse_scalar){ -1, 0 })
#define X              (c->in[0])
#define R(k)           r_##k
#define V(k)           v_##k
#define SC(k)          ((fuse_scalar){ (int8_t)(k), 0 })
#define LIT(v)         ((fuse_scalar){ -1, (double)(v) })
#define GAMMA(e)       (c->in[1].src != FUSE_ABSENT ? MUL_(e, c->in[1]) : (e))
#define BETA(e)        (c->in[2].src != FUSE_ABSENT ? ADD_(e, c->in[2]) : (e))
#define REDX(k, red)   fuse_edge r_##k = xop(x, c, TC_OP_##red, 1, X, X, NOSC);
#define REDV(k, red, j) \
  fuse_edge r_##k = xop(x, c, TC_OP_##red, 1, v_##j, v_##j, NOSC);
#define RED(k, red, e) fuse_edge r_##k = xop(x, c, TC_OP_##red, 1, e, e, NOSC);
#define KEEP(k, e)     fuse_edge v_##k = (e);
#define OUT(e)         out = (e);
#define SUB_(a, b)     xop(x, c, TC_OP_SUB, 2, a, b, NOSC)
#define MUL_(a, b)     xop(x, c, TC_OP_MUL, 2, a, b, NOSC)
#define ADD_(a, b)     xop(x, c, TC_OP_ADD, 2, a, b, NOSC)
#define EXP_(a)        xop(x, c, TC_OP_EXP, 1, a, a, NOSC)
#define LOG_(a)        xop(x, c, TC_OP_LOG, 1, a, a, NOSC)
#define RSQRT_(a)      xop(x, c, TC_OP_RSQRT, 1, a, a, NOSC)
#define ADDS_(a, sc)   xop(x, c, TC_OP_ADDS, 1, a, a, sc)
#define RDIVS_(a, sc)  xop(x, c, TC_OP_RDIVS, 1, a, a, sc)

/* Append composite c's decomposition; returns the node of its result. */
static int decompose(xgraph *x, const fuse_node *c)
{
  fuse_edge out = { .src = FUSE_ABSENT };
  switch (c->op) {
#define COMPOSITE(OP, body) \
  case TC_OP_##OP: {        \
    body                    \
    break;                  \
  }
#include "../tensor/composites.def"
  default:
    break;
  }
  if (x->nomem || out.src < 0)
    return x->nomem ? -1 : out.src;
  x->nodes[out.src].dtype = c->dtype;   /* rounded once, when stored */
  return out.src;
}

#undef NOSC
#undef X
#undef R
#undef V
#undef SC
#undef LIT
#undef GAMMA
#undef BETA
#undef REDX
#undef REDV
#undef RED
#undef KEEP
#undef OUT
#undef SUB_
#undef MUL_
#undef ADD_
#undef EXP_
#undef LOG_
#undef RSQRT_
#undef ADDS_
#undef RDIVS_

static bool is_composite(const fuse_node *n)
{
  return n->op == TC_OP_SOFTMAX || n->op == TC_OP_LOG_SOFTMAX ||
         n->op == TC_OP_LAYER_NORM;
}

/* g with its composites decomposed, into *out (nodes and out_node owned by
** the caller); 0, or -1 when out of memory. */
static int expand(const fuse_graph *g, fuse_graph *out)
{
  /* Sized once: at most this many nodes a composite (layer_norm's 12), so
  ** a layout derived every run copies no growing array. */
  enum { NODES_PER_COMPOSITE = 16 };
  xgraph x = { .g = g, .cap = g->nnodes };
  for (int i = 0; i < g->nnodes; i++)
    x.cap += is_composite(&g->nodes[i]) ? NODES_PER_COMPOSITE : 0;
  x.nodes = malloc(sizeof *x.nodes * ((size_t)x.cap + 1));
  if (!x.nodes)
    x.cap = 0;
  int *map = malloc(sizeof *map * ((size_t)g->nnodes + 1));
  int *out_node = malloc(sizeof *out_node * ((size_t)g->noutputs + 1));
  if (!map || !out_node)
    x.nomem = true;
  for (int i = 0; i < g->nnodes && !x.nomem; i++) {
    fuse_node c = g->nodes[i];
    for (int e = 0; e < c.nin; e++)
      if (c.in[e].src >= 0)
        c.in[e].src = map[c.in[e].src];
    c.eager = g->eager && g->eager[i];
    c.gather = gather_fusible(g, &c);
    map[i] = is_composite(&c) && !c.eager ? decompose(&x, &c)
                                          : xappend(&x, &c);
  }
  for (int o = 0; o < g->noutputs && !x.nomem; o++)
    out_node[o] = map[g->out_node[o]];
  free(map);
  if (x.nomem) {
    free(x.nodes);
    free(out_node);
    return -1;
  }
  *out = *g;
  out->nnodes = x.n;
  out->nodes = x.nodes;
  out->eager = NULL;   /* now in each node */
  out->out_node = out_node;
  return 0;
}

/* p's kernels, finished, in memory for their instructions only: a region
** table of decoder variants held some 55 KB a kernel step. */
static void compact_kernels(fuse_plan *p)
{
  for (int s = 0; s < p->nsteps; s++) {
    kir_kernel *k = p->steps[s].k;
    kir_kernel *c = k && !k->compact ? kir_compact_copy(k) : NULL;
    if (c) {   /* (else it stays whole) */
      kir_free(k);
      p->steps[s].k = c;
    }
  }
}

fuse_plan *fuse_build(const fuse_graph *g0, bool dynamic, char *reason,
                      size_t rlen)
{
  fuse_graph gx;
  if (expand(g0, &gx) < 0) {
    snprintf(reason, rlen, "out of memory");
    return NULL;
  }
  const fuse_graph *g = &gx;
  size_t nn = (size_t)g->nnodes + 1;
  bool *force = calloc(nn, sizeof *force), *copy = calloc(nn, sizeof *copy);
  bool *fresh = calloc(nn, sizeof *fresh);
  bool *nodirect = calloc(nn, sizeof *nodirect);
  int *copy_temp = calloc(nn, sizeof *copy_temp);
  fuse_plan *p = NULL;
  if (!force || !copy || !copy_temp || !fresh || !nodirect) {
    snprintf(reason, rlen, "out of memory");
  } else {
    /* Each retry stores or copies one more operand, or splits a kernel
    ** that hit a limit in two: at most a few per node. */
    for (int attempt = 0; attempt < TUNE_FUSE_ATTEMPTS(g->nnodes) && !p;
         attempt++) {
      int retry = 0;
      p = build_once(g, dynamic, force, copy, copy_temp, fresh, nodirect,
                     &retry,
                     reason, rlen);
      if (!retry)
        break;
    }
  }
  free(force);
  free(copy);
  free(fresh);
  free(nodirect);
  free(copy_temp);
  free((void *)gx.nodes);
  free((void *)gx.out_node);
  if (p)
    compact_kernels(p);
  return p;
}

fuse_plan *fuse_relayout(const fuse_plan *code, const fuse_graph *g0,
                         fuse_plan *reuse)
{
  if (!code->recipe) {
    fuse_plan_free(reuse);
    return NULL;
  }
  /* The recipe names nodes of the graph with its composites decomposed;
  ** without any, that is g0 itself. */
  bool composites = false;
  for (int i = 0; i < g0->nnodes && !composites; i++)
    composites = is_composite(&g0->nodes[i]) && !(g0->eager && g0->eager[i]);
  if (!composites)
    return recipe_apply(code->recipe, code, g0, reuse, mark_epilogues);
  fuse_graph gx;
  if (expand(g0, &gx) < 0) {
    fuse_plan_free(reuse);
    return NULL;
  }
  fuse_plan *p = recipe_apply(code->recipe, code, &gx, reuse, mark_epilogues);
  free((void *)gx.nodes);
  free((void *)gx.out_node);
  return p;
}

void fuse_plan_adopt_recipe(fuse_plan *code, fuse_plan *from)
{
  /* Made where sizes coincided (a KV length equal to the head size), a
  ** recipe would fit only those shapes: keep the one that tells more
  ** numbers apart. */
  if (!from->recipe || (code->recipe && recipe_distinct(from->recipe) <
                                          recipe_distinct(code->recipe)))
    return;
  recipe_free(code->recipe);
  code->recipe = from->recipe;
  from->recipe = NULL;
}

void fuse_plan_free(fuse_plan *p)
{
  if (!p)
    return;
  for (int s = 0; s < p->nsteps; s++) {
    kir_free(p->steps[s].k);
    free(p->steps[s].orig);
    if (p->steps[s].compiled && p->compiled_free)
      p->compiled_free(p->steps[s].compiled);
  }
  free(p->steps);
  free(p->temps);
  free(p->out_ref);
  recipe_free(p->recipe);
  free(p);
}

int fuse_plan_kernels(const fuse_plan *p)
{
  int n = 0;
  for (int s = 0; s < p->nsteps; s++)
    n += p->steps[s].kind == FSTEP_KERNEL;
  return n;
}

static const char *const ref_name[] = { "none", "input", "temp", "output",
                                        "dest" };

void fuse_plan_dump(const fuse_plan *p, FILE *out)
{
  fprintf(out, "plan: %d steps, %d kernels, %d temps%s\n", p->nsteps,
          fuse_plan_kernels(p), p->ntemps, p->dynamic ? ", dynamic" : "");
  for (int s = 0; s < p->nsteps; s++) {
    const fuse_step *st = &p->steps[s];
    if (st->kind == FSTEP_KERNEL) {
      fprintf(out, "step %d: kernel\n", s);
      for (int i = 0; i < st->k->nbufs; i++)
        fprintf(out, "  buf%d = %s %d%+lld\n", i, ref_name[st->buf[i].kind],
                st->buf[i].index, (long long)st->buf_off[i]);
      kir_print(st->k, out);
    } else if (st->kind == FSTEP_EXTERN) {
      fprintf(out, "step %d: extern node %d -> %s %d%s\n", s, st->node,
              ref_name[st->out.kind], st->out.index,
              st->epilogue ? " (next step: its epilogue)" : "");
    } else {
      fprintf(out, "step %d: copy %s %d -> %s %d\n", s,
              ref_name[st->from.kind], st->from.index,
              ref_name[st->out.kind], st->out.index);
    }
  }
}
