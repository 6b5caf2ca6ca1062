/*
** layout.c -- a shape-dynamic plan's layout for another graph of its
** structure, from the recipe fuse_build recorded (layout.h).
**
** Soundness. fuse_build's grouping reads the graph's numbers only through
** equalities: between sizes, strides, offsets, contiguous strides and
** element counts, and with 0 and 1 (same_shape, row classes, view_mappable,
** cheap_tree's counts, tensor_same_view, kir_collapse). Those numbers are
** the graph's facts; two graphs of one structure whose facts are equal in
** the same pairs get the same decisions, so the recipe's numbers, read from
** the new graph, are the numbers lowering would compute. What lowering
** decides from sums of strides (which loads share a buffer) is checked
** directly: each load's own recipe must give its buffer's numbers.
*/
#include <stdlib.h>
#include <string.h>

#include "layout.h"

/* A kernel step's recipe: numbers [0, ndim) sizes, then the row length,
** then per buffer nst strides, its offset, gather stride and size. */
typedef struct {
  bool kernel;
  int ndim;        /* before kir_collapse */
  int nst;         /* strides per buffer: ndim (+ 1 for ROWS) */
  int nbufs;
  lnum *num;       /* owned */
  int node;        /* extern and copy steps: the node whose operands'
                      views they read (expanded graph), or -1 */
} lstep;

typedef struct {
  int step, buf;
  lnum *num;       /* nst strides, offset, gather stride, gather size */
} lalias;

struct fuse_recipe {
  int nsteps, cap_steps;
  lstep *steps;
  lterm *terms;
  int nterms, cap_terms;
  lalias *alias;
  int nalias, cap_alias;
  struct { int node; bool edge; } *temp;
  int ntemps, cap_temps;
  /* facts: the class of each (equal numbers share one), a representative
  ** of each class, and their count */
  int nnodes, ninputs;
  int nfacts, nclass;
  uint16_t *cls;
  int32_t *rep;
  bool sealed;
};

const int64_t *layout_edge_shape(const fuse_graph *g, const fuse_edge *e,
                                 int *ndim)
{
  if (e->viewed) {
    *ndim = e->geom.ndim;
    return e->geom.shape;
  }
  if (e->src < 0) {
    *ndim = g->inputs[-e->src - 1]->ndim;
    return g->inputs[-e->src - 1]->shape;
  }
  *ndim = g->nodes[e->src].ndim;
  return g->nodes[e->src].shape;
}

/* -- Recording ------------------------------------------------------------- */

fuse_recipe *recipe_new(void)
{
  return calloc(1, sizeof(fuse_recipe));
}

void recipe_free(fuse_recipe *r)
{
  if (!r)
    return;
  for (int s = 0; s < r->cap_steps; s++)
    free(r->steps[s].num);
  for (int i = 0; i < r->nalias; i++)
    free(r->alias[i].num);
  free(r->steps);
  free(r->terms);
  free(r->alias);
  free(r->temp);
  free(r->cls);
  free(r->rep);
  free(r);
}

/* Step s's entry, made (empty) on first use; NULL when out of memory. */
static lstep *step_at(fuse_recipe *r, int s)
{
  int old = r->cap_steps;
  if (tensor_grow((void **)&r->steps, &r->cap_steps, s + 1,
                  sizeof *r->steps) < 0)
    return NULL;
  for (int i = old; i < r->cap_steps; i++)
    r->steps[i] = (lstep){ .node = -1 };
  if (s >= r->nsteps)
    r->nsteps = s + 1;
  return &r->steps[s];
}

/* Append n terms; their lnum. */
static int add_terms(fuse_recipe *r, const lterm *t, int n, lnum *out)
{
  if (n == 0) {
    *out = (lnum){ 0, 0, false };
    return 0;
  }
  if (tensor_grow((void **)&r->terms, &r->cap_terms, r->nterms + n,
                  sizeof *r->terms) < 0)
    return -1;
  memcpy(r->terms + r->nterms, t, sizeof *t * (size_t)n);
  *out = (lnum){ r->nterms, n, false };
  r->nterms += n;
  return 0;
}

static int add_src(fuse_recipe *r, lsrc s, lnum *out)
{
  lterm t = { s, { LS_ONE, 0, 0, 0 } };
  return s.kind == LS_ZERO ? (*out = (lnum){ 0, 0, false }, 0)
                           : add_terms(r, &t, 1, out);
}

int recipe_kernel(fuse_recipe *r, int s, int ndim, const lsrc *size,
                  lsrc row_len)
{
  lstep *st = step_at(r, s);
  if (!st)
    return -1;
  st->kernel = true;
  st->ndim = ndim;
  st->nbufs = 0;
  free(st->num);
  st->num = malloc(sizeof *st->num * (size_t)(ndim + 1));
  if (!st->num)
    return -1;
  for (int d = 0; d < ndim; d++)
    if (add_src(r, size[d], &st->num[d]) < 0)
      return -1;
  return add_src(r, row_len, &st->num[ndim]);
}

/* Buffer b's numbers (nst strides, offset, gather stride and size) into
** num. */
static int buffer_nums(fuse_recipe *r, int nst, const lbuf *b, lnum *num)
{
  for (int d = 0; d < nst; d++)
    if (add_terms(r, b->t[d], b->n[d], &num[d]) < 0)
      return -1;
  if (nst > 0)
    num[0].same = b->same;
  if (add_terms(r, &b->off, b->off.num.kind != LS_ZERO, &num[nst]) < 0 ||
      add_terms(r, &b->gstride, b->gstride.num.kind != LS_ZERO,
                &num[nst + 1]) < 0 ||
      add_terms(r, &b->gsize, b->gsize.num.kind != LS_ZERO,
                &num[nst + 2]) < 0)
    return -1;
  return 0;
}

int recipe_buffer(fuse_recipe *r, int s, int buf, int nst, const lbuf *b)
{
  lstep *st = step_at(r, s);
  if (!st)
    return -1;
  int per = nst + 3, base = st->ndim + 1;
  lnum *num = realloc(st->num, sizeof *num * (size_t)(base + (buf + 1) * per));
  if (!num)
    return -1;
  st->num = num;
  st->nst = nst;
  st->nbufs = buf + 1;
  return buffer_nums(r, nst, b, num + base + buf * per);
}

int recipe_alias(fuse_recipe *r, int s, int buf, int nst, const lbuf *b)
{
  if (tensor_grow((void **)&r->alias, &r->cap_alias, r->nalias + 1,
                  sizeof *r->alias) < 0)
    return -1;
  lalias *a = &r->alias[r->nalias];
  if (!(a->num = malloc(sizeof *a->num * (size_t)(nst + 3))))
    return -1;
  a->step = s;
  a->buf = buf;
  r->nalias++;
  return buffer_nums(r, nst, b, a->num);
}

int recipe_temp(fuse_recipe *r, int t, int node, bool edge)
{
  if (tensor_grow((void **)&r->temp, &r->cap_temps, t + 1,
                  sizeof *r->temp) < 0)
    return -1;
  r->temp[t].node = node;
  r->temp[t].edge = edge;
  if (t >= r->ntemps)
    r->ntemps = t + 1;
  return 0;
}

int recipe_step_node(fuse_recipe *r, int s, int node)
{
  lstep *st = step_at(r, s);
  if (!st)
    return -1;
  st->node = node;
  return 0;
}

/* -- Reading numbers ------------------------------------------------------- */

/* Contiguous stride j of a shape (tensor_contiguous_strides'). */
static int64_t cstride(int ndim, const int64_t *shape, int j)
{
  int64_t cst[TC_MAX_DIMS];
  tensor_contiguous_strides(ndim, shape, cst);
  return cst[j];
}

static int64_t src_value(const fuse_graph *g, lsrc s)
{
  int nd;
  const int64_t *sh;
  switch ((lsrc_kind)s.kind) {
  case LS_ZERO: return 0;
  case LS_ONE: return 1;
  case LS_NSHAPE: return g->nodes[s.a].shape[s.j];
  case LS_NCST:
    return cstride(g->nodes[s.a].ndim, g->nodes[s.a].shape, s.j);
  case LS_ESHAPE:
    return layout_edge_shape(g, &g->nodes[s.a].in[s.e], &nd)[s.j];
  case LS_ECST:
    sh = layout_edge_shape(g, &g->nodes[s.a].in[s.e], &nd);
    return cstride(nd, sh, s.j);
  case LS_ENUMEL:
    sh = layout_edge_shape(g, &g->nodes[s.a].in[s.e], &nd);
    return tensor_shape_numel(nd, sh);
  case LS_ESTRIDE: return g->nodes[s.a].in[s.e].geom.stride[s.j];
  case LS_EOFF: return g->nodes[s.a].in[s.e].geom.offset;
  case LS_ISTRIDE: return g->inputs[s.a]->stride[s.j];
  case LS_ISHAPE: return g->inputs[s.a]->shape[s.j];
  }
  return 0;
}

/* A number; false when a quotient does not divide (flat rows: then the
** layout must be built again, and fuse_build decides). */
static bool num_value(const fuse_recipe *r, const fuse_graph *g, lnum n,
                      int64_t *v)
{
  int64_t sum = 0;
  for (int i = 0; i < n.n; i++) {
    const lterm *t = &r->terms[n.first + i];
    int64_t a = src_value(g, t->num), q = a;
    if (t->den.kind != LS_ONE) {   /* a flat row's stride */
      int64_t b = src_value(g, t->den);
      if (b == 0 || a % b != 0)
        return false;
      q = a / b;
    }
    if (n.same && i > 0 && q != sum)
      return false;
    sum = n.same ? q : sum + q;
  }
  *v = sum;
  return true;
}

/* -- Facts ----------------------------------------------------------------- */

/* Fact n on: x, kept when within cap; the next n. */
static int put(int64_t *f, int n, int cap, int64_t x)
{
  if (n < cap)
    f[n] = x;
  return n + 1;
}

/* A shape's facts: its sizes, strides (when given), contiguous strides and
** element count. */
static int put_shape(int64_t *f, int n, int cap, int ndim,
                     const int64_t *shape, const int64_t *stride)
{
  int64_t cst[TC_MAX_DIMS];
  tensor_contiguous_strides(ndim, shape, cst);
  for (int d = 0; d < ndim; d++) {
    n = put(f, n, cap, shape[d]);
    if (stride)
      n = put(f, n, cap, stride[d]);
    n = put(f, n, cap, cst[d]);
  }
  return put(f, n, cap, tensor_shape_numel(ndim, shape));
}

/* Does input i share its storage with another input? (Guarded: the
** region's guards fix which inputs share one.) */
static bool input_shares_storage(const fuse_graph *g, int i)
{
  for (int j = 0; j < g->ninputs; j++)
    if (j != i && g->inputs[j]->storage == g->inputs[i]->storage)
      return true;
  return false;
}

/* The graph's facts in a fixed order (the structure fixes the count); n
** of at most cap written, or the count needed when more. An input's own
** offset is a fact only where it shares its storage with another input:
** lowering reads it only through tensor_same_view between two such, and
** binds every input by its data pointer, which includes it. (Else the
** weights of a decoder's layers, at different offsets in one mapped
** file, and a row of a table read at a moving position, would make the
** same region relate its numbers otherwise from one run to the next.) */
static int facts_of(const fuse_graph *g, int64_t *f, int cap)
{
  int n = put(f, put(f, 0, cap, 0), cap, 1);
  for (int i = 0; i < g->ninputs; i++) {
    const tc_tensor *t = g->inputs[i];
    n = put_shape(f, n, cap, t->ndim, t->shape, t->stride);
    n = put(f, n, cap, input_shares_storage(g, i) ? t->offset : 0);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const fuse_node *nd = &g->nodes[i];
    n = put_shape(f, n, cap, nd->ndim, nd->shape, NULL);
    for (int e = 0; e < nd->nin; e++) {
      const tensor_geom *eg = &nd->in[e].geom;
      if (nd->in[e].viewed) {
        n = put_shape(f, n, cap, eg->ndim, eg->shape, eg->stride);
        n = put(f, n, cap, eg->offset);
      }
    }
  }
  return n;
}

typedef struct {
  int64_t v;
  int32_t i;
} fact;

static int by_value(const void *a, const void *b)
{
  int64_t x = ((const fact *)a)->v, y = ((const fact *)b)->v;
  return x < y ? -1 : x > y;
}

int recipe_seal(fuse_recipe *r, const fuse_graph *g, int nsteps)
{
  if (nsteps > 0 && !step_at(r, nsteps - 1))
    return -1;
  r->nsteps = nsteps;
  r->nnodes = g->nnodes;
  r->ninputs = g->ninputs;
  int n = facts_of(g, NULL, 0);
  int64_t *f = malloc(sizeof *f * (size_t)n);
  fact *by = malloc(sizeof *by * (size_t)n);
  r->cls = malloc(sizeof *r->cls * (size_t)n);
  r->rep = malloc(sizeof *r->rep * (size_t)n);
  if (!f || !by || !r->cls || !r->rep || n > UINT16_MAX) {
    free(f);
    free(by);
    return -1;
  }
  facts_of(g, f, n);
  for (int i = 0; i < n; i++)
    by[i] = (fact){ f[i], i };
  qsort(by, (size_t)n, sizeof *by, by_value);
  int c = -1;
  for (int i = 0; i < n; i++) {
    if (i == 0 || by[i].v != by[i - 1].v)
      r->rep[++c] = by[i].i;
    r->cls[by[i].i] = (uint16_t)c;
  }
  r->nfacts = n;
  r->nclass = c + 1;
  r->sealed = true;
  free(f);
  free(by);
  return 0;
}

/* Are the n values v pairwise distinct? An open-addressing set in tab
** (cap a power of two, at least 2n, zeroed; a value is stored plus one
** with 0 for empty, INT64_MAX itself checked apart). */
static bool distinct(const int64_t *v, int n, uint64_t *tab, int cap)
{
  bool max_seen = false;
  for (int i = 0; i < n; i++) {
    if (v[i] == INT64_MAX) {
      if (max_seen)
        return false;
      max_seen = true;
      continue;
    }
    uint64_t x = (uint64_t)v[i] + 1;
    for (uint64_t h = (x * 0x9E3779B97F4A7C15ull) >> 32;; h++) {
      uint64_t *slot = &tab[h & (uint64_t)(cap - 1)];
      if (*slot == 0) {
        *slot = x;
        break;
      }
      if (*slot == x)
        return false;
    }
  }
  return true;
}

/* Are g's facts equal in exactly the pairs the recorded graph's were? */
static bool same_facts(const fuse_recipe *r, const fuse_graph *g)
{
  enum { INLINE = 1024 };
  int64_t inl[INLINE], rinl[INLINE];
  if (g->nnodes != r->nnodes || g->ninputs != r->ninputs)
    return false;
  int n = facts_of(g, inl, INLINE);
  if (n != r->nfacts)
    return false;
  int64_t *f = inl, *rv = rinl;
  if (n > INLINE) {
    f = malloc(sizeof *f * (size_t)n);
    rv = malloc(sizeof *rv * (size_t)r->nclass);
    if (!f || !rv) {
      free(f);
      free(rv);
      return false;
    }
    facts_of(g, f, n);
  }
  bool ok = true;
  for (int i = 0; i < n && ok; i++)   /* equal where they were */
    ok = f[i] == f[r->rep[r->cls[i]]];
  for (int c = 0; c < r->nclass && ok; c++)
    rv[c] = f[r->rep[c]];
  int cap = 16;
  while (cap < 2 * r->nclass)
    cap *= 2;
  uint64_t tinl[2 * INLINE], *tab = cap <= 2 * INLINE ? tinl
                                    : malloc(sizeof *tab * (size_t)cap);
  if (ok && tab) {   /* ... and nowhere else */
    memset(tab, 0, sizeof *tab * (size_t)cap);
    ok = distinct(rv, r->nclass, tab, cap);
  }
  ok = ok && tab;
  if (tab != tinl)
    free(tab);
  if (f != inl) {
    free(f);
    free(rv);
  }
  return ok;
}

int recipe_distinct(const fuse_recipe *r)
{
  return r->sealed ? r->nclass : 0;
}

/* -- Applying -------------------------------------------------------------- */

/* Buffer numbers bn (nst strides, offset, gather stride and size) for g. */
static bool buffer_values(const fuse_recipe *r, const fuse_graph *g,
                          const lnum *bn, int nst, int64_t *v)
{
  for (int d = 0; d < nst + 3; d++)
    if (!num_value(r, g, bn[d], &v[d]))
      return false;
  return true;
}

/* Step s's kernel numbers for g into k (code's kernel c, or a kernel of an
** earlier layout of the same code), before collapsing; the aliases from
** *ai on that are this step's must agree. */
static bool kernel_numbers(const fuse_recipe *r, int s, const kir_kernel *c,
                           kir_kernel *k, fuse_step *st, const fuse_graph *g,
                           int *ai)
{
  const lstep *ls = &r->steps[s];
  if (!ls->kernel || ls->nbufs != c->nbufs)
    return false;
  k->ndim = ls->ndim;
  for (int d = 0; d < ls->ndim; d++)
    if (!num_value(r, g, ls->num[d], &k->size[d]))
      return false;
  if (!num_value(r, g, ls->num[ls->ndim], &k->row_len))
    return false;
  int nst = ls->nst, per = nst + 3;
  int64_t v[TC_MAX_DIMS + 4];
  for (int b = 0; b < c->nbufs; b++) {
    if (!buffer_values(r, g, ls->num + ls->ndim + 1 + b * per, nst, v))
      return false;
    kir_buf *kb = &k->buf[b];
    memcpy(kb->stride, v, sizeof(int64_t) * (size_t)nst);
    st->buf_off[b] = v[nst];
    kb->gstride = v[nst + 1];
    kb->gsize = v[nst + 2];
    if (kb->gather &&   /* baked into the code even when dynamic */
        (kb->gstride != c->buf[b].gstride || kb->gsize != c->buf[b].gsize))
      return false;
  }
  for (; *ai < r->nalias && r->alias[*ai].step == s; ++*ai) {
    const lalias *a = &r->alias[*ai];
    const kir_buf *kb = &k->buf[a->buf];
    if (!buffer_values(r, g, a->num, nst, v) ||
        memcmp(kb->stride, v, sizeof(int64_t) * (size_t)nst) != 0 ||
        st->buf_off[a->buf] != v[nst] || kb->gstride != v[nst + 1] ||
        kb->gsize != v[nst + 2])
      return false;
  }
  kir_collapse(k, false);   /* as lowering ends */
  return k->ndim == c->ndim;
}

/* Plan p's steps, temporaries and outputs as code's, its numbers still to
** fill. Each kernel step gets a compact copy of code's kernel (its
** instructions and passes; a kernel already there, p being a layout no
** longer wanted, goes): the numbers are all that differ from run to run,
** so later layouts of the same code reuse these in place. */
static bool fill_like(fuse_plan *p, const fuse_plan *code)
{
  p->dynamic = code->dynamic;
  p->nregion = code->nregion;
  p->noutputs = code->noutputs;
  p->ntemps = code->ntemps;
  if (code->noutputs > 0)
    memcpy(p->out_ref, code->out_ref,
           sizeof *p->out_ref * (size_t)code->noutputs);
  if (code->ntemps > 0)
    memcpy(p->temps, code->temps, sizeof *p->temps * (size_t)code->ntemps);
  for (int s = 0; s < code->nsteps; s++) {
    const fuse_step *cs = &code->steps[s];
    fuse_step *st = &p->steps[s];
    /* the step without its big arrays, which only kernels use */
    st->kind = cs->kind;
    st->nscal = cs->nscal;
    memcpy(st->scal, cs->scal, sizeof *st->scal * (size_t)cs->nscal);
    st->node = cs->node;
    st->op = cs->op;
    memcpy(st->in, cs->in, sizeof st->in);
    memcpy(st->in_viewed, cs->in_viewed, sizeof st->in_viewed);
    memcpy(st->in_geom, cs->in_geom, sizeof st->in_geom);
    st->out = cs->out;
    st->from = cs->from;
    st->compiled = NULL;
    if (cs->kind != FSTEP_KERNEL)
      continue;
    const kir_kernel *c = cs->k;
    memcpy(st->buf, cs->buf, sizeof *st->buf * (size_t)c->nbufs);
    kir_free(st->k);
    if (!(st->k = kir_compact_copy(c)))
      return false;
  }
  return true;
}

/* Can layout p of code take code's layout for other shapes in place? */
static bool reusable(const fuse_plan *p, const fuse_plan *code)
{
  if (!p || p->nsteps != code->nsteps || p->ntemps != code->ntemps ||
      p->noutputs != code->noutputs)
    return false;
  for (int s = 0; s < code->nsteps; s++)
    if (p->steps[s].kind != code->steps[s].kind)
      return false;
  return true;
}

/* A plan with room for code's steps, temporaries and outputs. */
static fuse_plan *plan_new(const fuse_plan *code)
{
  fuse_plan *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->steps = calloc((size_t)code->nsteps + 1, sizeof *p->steps);
  p->temps = malloc(sizeof *p->temps * ((size_t)code->ntemps + 1));
  p->out_ref = malloc(sizeof *p->out_ref * ((size_t)code->noutputs + 1));
  if (!p->steps || !p->temps || !p->out_ref) {
    fuse_plan_free(p);
    return NULL;
  }
  p->nsteps = code->nsteps;
  return p;
}

fuse_plan *recipe_apply(const fuse_recipe *r, const fuse_plan *code,
                        const fuse_graph *g, fuse_plan *reuse,
                        void (*mark_epilogues)(const fuse_graph *,
                                               fuse_plan *))
{
  if (!r->sealed || r->nsteps != code->nsteps || r->ntemps != code->ntemps ||
      !same_facts(r, g)) {
    fuse_plan_free(reuse);
    return NULL;
  }
  fuse_plan *p = reuse;
  bool ok = true;
  if (!p || p->code != code) {   /* else only its numbers change */
    if (!reusable(p, code)) {
      fuse_plan_free(p);
      p = plan_new(code);
    }
    ok = p && fill_like(p, code);
    if (ok)
      p->code = code;
  }
  for (int t = 0; t < code->ntemps && ok; t++) {
    const fuse_node *nd = &g->nodes[r->temp[t].node];
    int ndim;
    const int64_t *sh = r->temp[t].edge
                        ? layout_edge_shape(g, &nd->in[0], &ndim)
                        : (ndim = nd->ndim, nd->shape);
    ok = ndim == p->temps[t].ndim;
    if (ok)
      memcpy(p->temps[t].shape, sh, sizeof(int64_t) * (size_t)ndim);
  }
  int ai = 0;
  for (int s = 0; s < code->nsteps && ok; s++) {
    const fuse_step *cs = &code->steps[s];
    fuse_step *st = &p->steps[s];
    st->epilogue = false;
    if (cs->kind == FSTEP_KERNEL) {
      ok = kernel_numbers(r, s, cs->k, st->k, st, g, &ai);
    } else if (r->steps[s].node >= 0) {   /* the views its operands read */
      const fuse_node *nd = &g->nodes[r->steps[s].node];
      for (int e = 0; e < nd->nin && e < 3; e++)
        if (st->in_viewed[e])
          st->in_geom[e] = nd->in[e].geom;
    }
  }
  if (!ok) {
    fuse_plan_free(p);
    return NULL;
  }
  mark_epilogues(g, p);
  return p;
}
