/*
** compile.c -- the compile hook: a hot region is fused (src/fuse) and its
** kernels compiled (src/jit_cpu); the plan then runs in place of the eager
** kernels after the guard check. Any failure leaves the region eager, with
** one log line (principle 5).
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace_int.h"
#include "../fuse/fuse.h"
#include "../jit_cpu/jit_cpu.h"

static bool debug_on(void)
{
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("TC_DEBUG");
    on = v && *v && strcmp(v, "0") != 0;
  }
  return on;
}

/* -- Region -> fuse graph ---------------------------------------------------- */

typedef struct {
  fuse_graph g;
  fuse_node *nodes;
  int *out_node, *out_dest;
} graph_buf;

static void graph_free(graph_buf *gb)
{
  free(gb->nodes);
  free(gb->out_node);
  free(gb->out_dest);
}

/* The region input a leaf or computed node stands for (several LEAF nodes
** may read one tensor). */
static int input_of(const trace_region *r, const trace_node *n)
{
  const tc_tensor *t = n->op == TRACE_OP_LEAF ? n->leaf : n->value;
  for (int j = 0; j < r->ninputs; j++)
    if (r->inputs[j] == t)
      return j;
  return -1;
}

static int graph_of(const trace_region *r, graph_buf *gb)
{
  memset(gb, 0, sizeof *gb);
  gb->nodes = calloc((size_t)r->nnodes + 1, sizeof *gb->nodes);
  gb->out_node = calloc((size_t)r->noutputs + 1, sizeof(int));
  gb->out_dest = calloc((size_t)r->noutputs + 1, sizeof(int));
  if (!gb->nodes || !gb->out_node || !gb->out_dest)
    return -1;
  for (int i = 0; i < r->nnodes; i++) {
    const trace_node *n = r->nodes[i];
    fuse_node *f = &gb->nodes[i];
    f->op = n->op;
    f->dtype = n->dtype;
    f->cdtype = n->cdtype;
    f->ndim = n->ndim;
    memcpy(f->shape, n->shape, sizeof(int64_t) * (size_t)n->ndim);
    f->nin = n->nin;
    f->dim = n->dim;
    f->keepdim = n->keepdim;
    for (int e = 0; e < n->nin; e++) {
      const trace_edge *te = &n->in[e];
      fuse_edge *fe = &f->in[e];
      if (!te->node) {
        fe->src = FUSE_ABSENT;
        continue;
      }
      if (te->node->slot >= 0 && !te->node->value &&
          te->node->op != TRACE_OP_LEAF) {
        fe->src = te->node->slot;
      } else {
        int j = input_of(r, te->node);
        if (j < 0)
          return -1;
        fe->src = -j - 1;
      }
      fe->viewed = te->viewed;
      fe->geom = te->geom;
    }
  }
  for (int o = 0; o < r->noutputs; o++) {
    gb->out_node[o] = r->outputs[o]->slot;
    if (gb->out_node[o] < 0)
      return -1;   /* an output that is not computed here */
    gb->out_dest[o] = -1;
    for (int j = 0; r->dest[o] && j < r->ninputs; j++)
      if (r->inputs[j] == r->dest[o])
        gb->out_dest[o] = j;
  }
  gb->g = (fuse_graph){ r->nnodes, gb->nodes, r->ninputs,
                        (const tc_tensor *const *)r->inputs, r->noutputs,
                        gb->out_node, gb->out_dest };
  return 0;
}

/* -- Compiling ---------------------------------------------------------------- */

typedef struct {
  fuse_plan *plan;   /* owned; steps own their compiled kernels */
} trace_plan;

static void compiled_free(void *c) { jcpu_free(c); }

static void plan_free(void *p)
{
  trace_plan *tp = p;
  fuse_plan_free(tp->plan);
  free(tp);
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int compile_region(const trace_region *r, bool dynamic, void **plan,
                          void (**pfree)(void *), char *reason, size_t rlen)
{
  graph_buf gb;
  if (graph_of(r, &gb) < 0) {
    graph_free(&gb);
    snprintf(reason, rlen, "an output or input of the region has no place "
             "in it");
    return -1;
  }
  fuse_plan *fp = fuse_build(&gb.g, dynamic, reason, rlen);
  graph_free(&gb);
  if (!fp)
    return -1;
  fp->compiled_free = compiled_free;
  if (tensor_log_on(TC_LOG_FUSION))
    tensor_log(TC_LOG_FUSION, "region %016llx: %d nodes -> %d kernels, %d "
               "steps%s", (unsigned long long)r->hash, r->nnodes,
               fuse_plan_kernels(fp), fp->nsteps,
               dynamic ? " (shape-dynamic)" : "");
  for (int s = 0; s < fp->nsteps; s++) {
    fuse_step *st = &fp->steps[s];
    if (st->kind != FSTEP_KERNEL)
      continue;
    jcpu_kernel *jk = NULL;
    double t0 = now_ms();
    jcpu_status rc = jcpu_compile(st->k, &jk, reason, rlen);
    double ms = now_ms() - t0;
    eager_add_compile_ms(ms);
    if (rc != JCPU_OK) {
      fuse_plan_free(fp);
      return -1;
    }
    eager_count(ST_KERNELS_COMPILED);
    st->compiled = jk;
    if (tensor_log_on(TC_LOG_COMPILE))
      tensor_log(TC_LOG_COMPILE, "region %016llx kernel %d: %.1f ms (%s, "
                 "%d instructions)", (unsigned long long)r->hash, s, ms,
                 jcpu_target(), st->k->ninstrs);
    if (debug_on()) {
      fprintf(stderr, "tc[debug]: region %016llx step %d IR:\n",
              (unsigned long long)r->hash, s);
      kir_print(st->k, stderr);
      jcpu_dump_source(jk, stderr);
    }
  }
  trace_plan *tp = malloc(sizeof *tp);
  if (!tp) {
    fuse_plan_free(fp);
    snprintf(reason, rlen, "out of memory");
    return -1;
  }
  tp->plan = fp;
  *plan = tp;
  *pfree = plan_free;
  return 0;
}

/* -- Running ------------------------------------------------------------------ */

typedef struct {
  tc_tensor **temp;
  tc_tensor **out;
} run_state;

static tc_tensor *ref_tensor(const trace_region *r, const fuse_plan *p,
                             run_state *rs, fuse_ref ref)
{
  switch (ref.kind) {
  case FREF_INPUT:
    return r->inputs[ref.index];
  case FREF_DEST:
    return r->dest[ref.index];
  case FREF_TEMP:
    if (!rs->temp[ref.index]) {
      const fuse_temp *t = &p->temps[ref.index];
      rs->temp[ref.index] = tensor_new((tc_dtype)t->dtype, t->ndim,
                                       t->shape);
    }
    return rs->temp[ref.index];
  case FREF_OUTPUT:
    if (!rs->out[ref.index]) {
      const trace_node *n = r->outputs[ref.index];
      rs->out[ref.index] = tensor_new((tc_dtype)n->dtype, n->ndim, n->shape);
    }
    return rs->out[ref.index];
  }
  return NULL;
}

static int run_kernel(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st,
                      const jcpu_kernel *jk)
{
  const kir_kernel *k = st->k;
  char *bufs[KIR_MAX_BUFS];
  double scal[KIR_MAX_SCALARS];
  for (int i = 0; i < k->nbufs; i++) {
    tc_tensor *t = ref_tensor(r, p, rs, st->buf[i]);
    if (!t)
      return -1;
    bufs[i] = (char *)tensor_ptr(t) +
              st->buf_off[i] * (int64_t)tensor_dtype_size[k->buf[i].dtype];
  }
  for (int i = 0; i < st->nscal; i++)
    scal[i] = r->nodes[st->scal[i].node]->s[st->scal[i].which];
  int64_t dimsbuf[64], *dims = NULL;
  if (k->dynamic) {
    int n = kir_dyn_len(k);
    dims = n <= 64 ? dimsbuf : malloc(sizeof(int64_t) * (size_t)n);
    if (!dims)
      return -1;
    kir_dyn_fill(k, dims);
  }
  int rc = jcpu_launch(jk, k, bufs, scal, dims);
  eager_count(ST_KERNELS_LAUNCHED);
  if (dims && dims != dimsbuf)
    free(dims);
  return rc;
}

static int run_extern(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st)
{
  const trace_node *n = r->nodes[st->node];
  eager_call c;
  memset(&c, 0, sizeof c);
  c.op = (tc_op)n->op;
  c.fn = op_table[n->op].name;
  c.nin = n->nin;
  c.dim = n->dim;
  c.keepdim = n->keepdim;
  c.dtype = (tc_dtype)n->dtype;
  c.cdtype = (tc_dtype)n->cdtype;
  c.ndim = n->ndim;
  memcpy(c.shape, n->shape, sizeof(int64_t) * (size_t)n->ndim);
  int rc = 0;
  for (int e = 0; e < n->nin && rc == 0; e++) {
    if (st->in[e].kind == FREF_NONE)
      continue;
    tc_tensor *t = ref_tensor(r, p, rs, st->in[e]);
    if (!t) {
      rc = -1;
      break;
    }
    const tensor_geom *g = &st->in_geom[e];
    c.in[e] = st->in_viewed[e]
              ? tensor_new_view(t, g->ndim, g->shape, g->stride,
                                t->offset + g->offset)
              : tensor_ref(t);
    if (!c.in[e])
      rc = -1;
  }
  tc_tensor *out = rc == 0 ? eager_lookup(TC_KEY_CPU, c.op)(&c) : NULL;
  for (int e = 0; e < 3; e++)
    tensor_unref(c.in[e]);
  if (!out)
    return -1;
  /* The extern kernel made its own tensor: adopt it as the value. */
  if (st->out.kind == FREF_TEMP) {
    tensor_unref(rs->temp[st->out.index]);
    rs->temp[st->out.index] = out;
  } else if (st->out.kind == FREF_OUTPUT) {
    tensor_unref(rs->out[st->out.index]);
    rs->out[st->out.index] = out;
  } else {
    tc_tensor *dst = ref_tensor(r, p, rs, st->out);
    eager_copy_into(dst, out);
    tensor_unref(out);
  }
  return 0;
}

/* Run plan p (its layouts: sizes, strides, temps, bindings) with the
** kernels compiled for `code` (p itself, or for a shape-dynamic plan the
** plan first compiled). */
static int run_plan_with(const fuse_plan *p, const fuse_plan *code,
                         trace_region *r)
{
  run_state rs;
  rs.temp = calloc((size_t)p->ntemps + 1, sizeof *rs.temp);
  rs.out = calloc((size_t)r->noutputs + 1, sizeof *rs.out);
  int rc = rs.temp && rs.out ? 0 : -1;
  for (int s = 0; s < p->nsteps && rc == 0; s++) {
    const fuse_step *st = &p->steps[s];
    if (st->kind == FSTEP_KERNEL) {
      rc = run_kernel(r, p, &rs, st, code->steps[s].compiled);
    } else if (st->kind == FSTEP_EXTERN) {
      rc = run_extern(r, p, &rs, st);
    } else {
      tc_tensor *src = ref_tensor(r, p, &rs, st->from);
      tc_tensor *dst = ref_tensor(r, p, &rs, st->out);
      const tensor_geom *g = &st->in_geom[0];
      tc_tensor *v = !src || !st->in_viewed[0] ? tensor_ref(src)
                     : tensor_new_view(src, g->ndim, g->shape, g->stride,
                                       src->offset + g->offset);
      if (v && dst)
        eager_copy_into(dst, v);
      else
        rc = -1;
      tensor_unref(v);
    }
  }
  for (int o = 0; o < r->noutputs && rc == 0; o++) {
    fuse_ref ref = p->out_ref[o];
    if (ref.kind == FREF_DEST)
      continue;   /* written in place */
    tc_tensor *v = ref_tensor(r, p, &rs, ref);
    if (!v)
      rc = -1;
    else
      r->result[o] = tensor_ref(v);
  }
  for (int i = 0; i < p->ntemps && rs.temp; i++)
    tensor_unref(rs.temp[i]);
  for (int i = 0; i < r->noutputs && rs.out; i++)
    tensor_unref(rs.out[i]);
  free(rs.temp);
  free(rs.out);
  return rc;
}

static int run_region(void *plan, trace_region *r)
{
  trace_plan *tp = plan;
  if (!tp->plan->dynamic)
    return run_plan_with(tp->plan, tp->plan, r);
  /* Shape-dynamic: the same kernels, with this run's sizes and strides. */
  graph_buf gb;
  char reason[128];
  fuse_plan *now = NULL;
  if (graph_of(r, &gb) == 0)
    now = fuse_build(&gb.g, true, reason, sizeof reason);
  graph_free(&gb);
  if (!now)
    return -1;
  int rc = now->nsteps == tp->plan->nsteps ? run_plan_with(now, tp->plan, r)
                                           : -1;
  fuse_plan_free(now);
  return rc;
}

/* Called by trace_init: fusion and the CPU JIT become the compile hook. */
void trace_compile_register(void)
{
  const char *jit = getenv("TC_JIT");
  if (jit && strcmp(jit, "0") == 0)
    return;   /* TC_JIT=0: trace and count, but never compile */
  trace_set_compiler(compile_region, run_region);
}
