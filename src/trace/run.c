/*
** run.c -- running a compiled plan: bind each step's buffers to the
** region's inputs, write-back targets, temporaries and fresh outputs, and
** launch its kernels (extern steps run their eager kernel). A shape-dynamic
** plan runs its kernels with this run's sizes and strides. One runner for
** both devices: a CUDA plan's tensors are device tensors, its kernels are
** launched on tc's stream (eager_cuda.h) and its extern steps run the
** CUDA key's kernels.
*/
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "compile_int.h"

trace_launch_fn trace_launch_hook;

typedef struct {
  tc_tensor **temp;
  tc_tensor **out;
  int device;        /* TC_DEV_*: where temporaries and outputs are made
                        and kernels launched */
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
      rs->temp[ref.index] = tensor_new_on(rs->device, (tc_dtype)t->dtype,
                                          t->ndim, t->shape);
    }
    return rs->temp[ref.index];
  case FREF_OUTPUT:
    if (!rs->out[ref.index]) {
      const trace_node *n = r->outputs[ref.index];
      rs->out[ref.index] = tensor_new_on(rs->device, (tc_dtype)n->dtype,
                                         n->ndim, n->shape);
    }
    return rs->out[ref.index];
  }
  return NULL;
}

/* A kernel step's arguments for this run. */
typedef struct {
  char *bufs[KIR_MAX_BUFS];
  double scal[KIR_MAX_SCALARS];
  int64_t dimsbuf[64], *dims;
} kernel_args;

/* Bind st's buffers (except those bound to `skip`, which the caller fills
** in), scalars and sizes. Returns 0, or -1 (out of memory). */
static int kernel_args_bind(const trace_region *r, const fuse_plan *p,
                            run_state *rs, const fuse_step *st,
                            fuse_ref skip, kernel_args *a)
{
  const kir_kernel *k = st->k;
  for (int i = 0; i < k->nbufs; i++) {
    a->bufs[i] = NULL;
    if (st->buf[i].kind == skip.kind && st->buf[i].index == skip.index)
      continue;
    tc_tensor *t = ref_tensor(r, p, rs, st->buf[i]);
    if (!t)
      return -1;
    a->bufs[i] = (char *)tensor_ptr(t) +
                 st->buf_off[i] * (int64_t)tensor_dtype_size[k->buf[i].dtype];
  }
  for (int i = 0; i < st->nscal; i++)
    a->scal[i] = st->scal[i].which == FUSE_SCALAR_ROW_LEN
                 ? (double)k->row_len
                 : r->nodes[st->scal[i].node]->s[st->scal[i].which];
  a->dims = NULL;
  if (k->dynamic) {
    int n = kir_dyn_len(k);
    a->dims = n <= 64 ? a->dimsbuf : malloc(sizeof(int64_t) * (size_t)n);
    if (!a->dims)
      return -1;
    kir_dyn_fill(k, a->dims);
  }
  return 0;
}

static void kernel_args_free(kernel_args *a)
{
  if (a->dims != a->dimsbuf)
    free(a->dims);
}

/* Kernel step st, compiled as `compiled` (a trace_kernel on the CPU, a
** jcuda_function on CUDA): the per-backend launch. */
static int run_kernel(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st, void *compiled)
{
  kernel_args a;
  if (kernel_args_bind(r, p, rs, st, (fuse_ref){ FREF_NONE, -1 }, &a) < 0)
    return -1;
  if (rs->device == TC_DEV_CUDA) {   /* counts its launch */
    int rc = eager_cuda_launch("compiled region", compiled, st->k, a.bufs,
                               a.scal, a.dims);
    kernel_args_free(&a);
    return rc;
  }
  const jcpu_kernel *jk = trace_kernel_code(compiled);
  int rc = trace_launch_hook &&
           trace_launch_hook(st->k, a.bufs, a.scal, a.dims, 0,
                             kir_units(st->k)) == 0
           ? 0 : jcpu_launch(jk, st->k, a.bufs, a.scal, a.dims);
  eager_count(ST_KERNELS_LAUNCHED);
  kernel_args_free(&a);
  return rc;
}

/* A matmul's epilogue: kernel step st (a MAP kernel over the points of the
** matmul's result, plan.c: mark_epilogues) run on one finished tile. */
typedef struct {
  const fuse_step *st;
  const jcpu_kernel *jk;
  kernel_args a;                 /* the bufs bound to the matmul's result
                                    are NULL: filled per tile */
} tile_epilogue;

static void tile_epilogue_run(void *ctx, tc_tensor *out, int64_t batch,
                              int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
  const tile_epilogue *e = ctx;
  const kir_kernel *k = e->st->k;
  char *bufs[KIR_MAX_BUFS];
  for (int i = 0; i < k->nbufs; i++)
    bufs[i] = e->a.bufs[i] ? e->a.bufs[i] : (char *)tensor_ptr(out);
  int64_t m = out->shape[out->ndim - 2], n = out->shape[out->ndim - 1];
  for (int64_t i = i0; i < i1; i++) {
    int64_t lo = (batch * m + i) * n + j0;
    int64_t hi = lo + (j1 - j0);
    if (!trace_launch_hook ||
        trace_launch_hook(k, bufs, e->a.scal, e->a.dims, lo, hi) != 0)
      jcpu_run_points(e->jk, bufs, e->a.scal, e->a.dims, lo, hi);
  }
}

/* Extern step st; with ep, its epilogue (the kernel step after it). */
static int run_extern(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st,
                      const fuse_step *ep, const jcpu_kernel *ep_jk)
{
  tile_epilogue te = { ep, ep_jk, { .dims = NULL } };
  if (ep && kernel_args_bind(r, p, rs, ep, st->out, &te.a) < 0)
    return -1;
  const trace_node *n = r->nodes[st->node];
  eager_call c;
  trace_call_of(n, &c);
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
  tc_tensor *out = rc < 0 ? NULL
                   : ep ? eager_matmul_ep(&c, tile_epilogue_run, &te)
                        : trace_backend(rs->device, c.op)(&c);
  if (ep)
    kernel_args_free(&te.a);
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
    rc = dst ? trace_copy_into(dst, out) : -1;
    tensor_unref(out);
  }
  return rc;
}

/* Does an output after o read the same value as o? */
static bool later_output(const fuse_plan *p, const trace_region *r, int o)
{
  for (int q = o + 1; q < r->noutputs; q++)
    if (p->out_ref[q].kind == p->out_ref[o].kind &&
        p->out_ref[q].index == p->out_ref[o].index)
      return true;
  return false;
}

/* Run plan p (its layouts: sizes, strides, temps, bindings) with the
** kernels compiled for `code` (p itself, or for a shape-dynamic plan the
** plan first compiled). */
static int run_plan_with(const fuse_plan *p, const fuse_plan *code,
                         int device, trace_region *r)
{
  /* Small plans (every plan of a small region run each iteration) keep
  ** their temporaries and outputs on the stack: no allocation per run. */
  enum { INLINE = 16 };
  tc_tensor *temp_inl[INLINE] = { 0 }, *out_inl[INLINE] = { 0 };
  run_state rs;
  rs.temp = p->ntemps <= INLINE ? temp_inl
            : calloc((size_t)p->ntemps, sizeof *rs.temp);
  rs.out = r->noutputs <= INLINE ? out_inl
           : calloc((size_t)r->noutputs, sizeof *rs.out);
  rs.device = device;
  int rc = rs.temp && rs.out ? 0 : -1;
  for (int s = 0; s < p->nsteps && rc == 0; s++) {
    const fuse_step *st = &p->steps[s];
    if (st->kind == FSTEP_KERNEL) {
      rc = run_kernel(r, p, &rs, st, code->steps[s].compiled);
    } else if (st->kind == FSTEP_EXTERN && st->epilogue &&
               device == TC_DEV_CPU) {   /* on CUDA: cuBLAS, then the
                                            epilogue as a kernel over the
                                            whole result */
      rc = run_extern(r, p, &rs, st, st + 1,
                      trace_kernel_code(code->steps[s + 1].compiled));
      s++;   /* the epilogue ran inside it */
    } else if (st->kind == FSTEP_EXTERN) {
      rc = run_extern(r, p, &rs, st, NULL, NULL);
    } else {
      tc_tensor *src = ref_tensor(r, p, &rs, st->from);
      tc_tensor *dst = ref_tensor(r, p, &rs, st->out);
      const tensor_geom *g = &st->in_geom[0];
      tc_tensor *v = !src || !st->in_viewed[0] ? tensor_ref(src)
                     : tensor_new_view(src, g->ndim, g->shape, g->stride,
                                       src->offset + g->offset);
      rc = v && dst ? trace_copy_into(dst, v) : -1;
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
    else if (ref.kind == FREF_OUTPUT && !later_output(p, r, o))
      rs.out[ref.index] = NULL, r->result[o] = v;   /* its last use: the
                                                      reference moves */
    else
      r->result[o] = tensor_ref(v);
  }
  for (int i = 0; i < p->ntemps && rs.temp; i++)
    tensor_unref(rs.temp[i]);
  for (int i = 0; i < r->noutputs && rs.out; i++)
    tensor_unref(rs.out[i]);
  if (rs.temp != temp_inl)
    free(rs.temp);
  if (rs.out != out_inl)
    free(rs.out);
  return rc;
}

/* Does plan `now` (built for this run's shapes) run the same code as
** `code`, whose kernels are compiled? Sizes and strides may differ (they
** are arguments of shape-dynamic kernels); nothing else may, or the
** compiled kernels would compute something else (a size baked in). */
static bool same_code(const fuse_plan *now, const fuse_plan *code)
{
  if (now->nsteps != code->nsteps)
    return false;
  for (int s = 0; s < now->nsteps; s++) {
    const fuse_step *a = &now->steps[s], *b = &code->steps[s];
    if (a->kind != b->kind ||
        (a->kind == FSTEP_KERNEL && !kir_same_code(a->k, b->k)))
      return false;
  }
  return true;
}

static bool same_geom(const tensor_geom *a, const tensor_geom *b)
{
  return a->ndim == b->ndim && a->offset == b->offset &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0 &&
         memcmp(a->stride, b->stride, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* Do layouts a and b (of one code) agree on every number a run reads? */
static bool same_layout(const fuse_plan *a, const fuse_plan *b)
{
  if (a->nsteps != b->nsteps || a->ntemps != b->ntemps)
    return false;
  for (int t = 0; t < a->ntemps; t++)
    if (a->temps[t].ndim != b->temps[t].ndim ||
        memcmp(a->temps[t].shape, b->temps[t].shape,
               sizeof(int64_t) * (size_t)a->temps[t].ndim) != 0)
      return false;
  for (int s = 0; s < a->nsteps; s++) {
    const fuse_step *x = &a->steps[s], *y = &b->steps[s];
    if (x->epilogue != y->epilogue)
      return false;
    for (int e = 0; e < 3 && x->kind != FSTEP_KERNEL; e++)
      if (x->in_viewed[e] && !same_geom(&x->in_geom[e], &y->in_geom[e]))
        return false;
    if (x->kind != FSTEP_KERNEL)
      continue;
    const kir_kernel *k = x->k, *l = y->k;
    int nst = k->ndim + (k->kind == KIR_ROWS);
    if (k->ndim != l->ndim || k->row_len != l->row_len ||
        memcmp(k->size, l->size, sizeof(int64_t) * (size_t)k->ndim) != 0)
      return false;
    for (int i = 0; i < k->nbufs; i++)
      if (x->buf_off[i] != y->buf_off[i] ||
          memcmp(k->buf[i].stride, l->buf[i].stride,
                 sizeof(int64_t) * (size_t)nst) != 0)
        return false;
  }
  return true;
}

/* fuse_build's plan for graph g, or NULL (no graph, or no plan). */
static fuse_plan *build_layout(const fuse_graph *g)
{
  char reason[128];
  return g ? fuse_build(g, true, reason, sizeof reason) : NULL;
}

/* The layout of set[0..n) kept for key (its use counted), or NULL. */
static const fuse_plan *layout_find(trace_plan *tp, trace_layout *set, int n,
                                    uint64_t key)
{
  for (int i = 0; i < n; i++)
    if (set[i].layout && set[i].key == key) {
      set[i].used = ++tp->clock;
      return set[i].layout;
    }
  return NULL;
}

/* The entry of set[0..n) used longest ago (an empty one first). */
static trace_layout *layout_victim(trace_layout *set, int n)
{
  trace_layout *v = &set[0];
  for (int i = 1; i < n; i++)
    if (set[i].used < v->used)
      v = &set[i];
  return v;
}

/* Keep layout `now` for key in entry e (its old layout already gone). */
static void layout_keep(trace_plan *tp, trace_layout *e, uint64_t key,
                        fuse_plan *now)
{
  e->layout = now;
  e->key = key;
  e->used = ++tp->clock;
}

/* The layout of shape-dynamic plan tp for region r's shapes: the code's
** recipe applied to them (fuse_relayout), else a plan built for them whose
** code is the compiled one; kept (derived ones with the last
** TUNE_DYNAMIC_LAYOUTS, built ones apart with the last TUNE_BUILT_LAYOUTS),
** or NULL when its kernels are not the compiled ones (then the region runs
** eagerly). */
static const fuse_plan *layout_of(trace_plan *tp, trace_region *r)
{
  uint64_t key = guard_key_of(r->ninputs, (const tc_tensor *const *)r->inputs,
                              false);
  const fuse_plan *kept = layout_find(tp, tp->derived, TUNE_DYNAMIC_LAYOUTS,
                                      key);
  if (!kept)
    kept = layout_find(tp, tp->built, TUNE_BUILT_LAYOUTS, key);
  if (kept)
    return kept;
  /* The derived layout used longest ago is no longer wanted: this one
  ** takes its memory. */
  trace_layout *slot = layout_victim(tp->derived, TUNE_DYNAMIC_LAYOUTS);
  fuse_plan *now = NULL, *reuse = slot->layout;
  *slot = (trace_layout){ 0 };
  trace_graph gb;
  const fuse_graph *g = NULL;
  if (trace_graph_of(r, &gb) == 0) {
    gb.g.eager = tp->eager;
    g = &gb.g;
  }
  if (g && tp->plan->recipe) {
    now = fuse_relayout(tp->plan, g, reuse);
    reuse = NULL;
  }
  fuse_plan_free(reuse);
  if (now && tensor_cfg()->check_layout) {
    /* (fuse_build may find fewer buffers: strides that now coincide) */
    fuse_plan *built = build_layout(g);
    if (built && same_code(built, tp->plan) && !same_layout(now, built)) {
      fprintf(stderr, "tc: TC_CHECK_LAYOUT: region %016llx: fuse_relayout "
              "differs from fuse_build\n", (unsigned long long)r->hash);
      fuse_plan_dump(now, stderr);
      fuse_plan_dump(built, stderr);
      abort();
    }
    fuse_plan_free(built);
  }
  if (now) {
    eager_count(ST_LAYOUTS_DERIVED);
  } else {
    /* Sizes relate otherwise than when the recipe was made: build. */
    if (tp->plan->recipe && tensor_log_on(TC_LOG_RECOMPILES))
      tensor_log(TC_LOG_RECOMPILES, "region %016llx: these sizes relate "
                 "otherwise than its shape-dynamic plan's did (two are "
                 "equal that were not, or the other way round); planning "
                 "this layout again", (unsigned long long)r->hash);
    now = build_layout(g);
    eager_count(ST_LAYOUTS_BUILT);
    if (now && !same_code(now, tp->plan)) {
      if (tensor_log_on(TC_LOG_RECOMPILES))
        tensor_log(TC_LOG_RECOMPILES, "region %016llx: its shape-dynamic "
                   "kernels do not fit these shapes; running eagerly",
                   (unsigned long long)r->hash);
      fuse_plan_free(now);
      now = NULL;
    } else if (now) {
      if (now->recipe)   /* these shapes' relations may be the ones that
                            last */
        fuse_plan_adopt_recipe(tp->plan, now);
      slot = layout_victim(tp->built, TUNE_BUILT_LAYOUTS);
      fuse_plan_free(slot->layout);
    }
  }
  trace_graph_free(&gb);
  if (now)
    layout_keep(tp, slot, key, now);
  return now;
}

int trace_run_plan(void *plan, trace_region *r)
{
  trace_plan *tp = plan;
  if (!tp->plan->dynamic || tp->fixed)
    return run_plan_with(tp->plan, tp->plan, tp->device, r);
  /* Shape-dynamic: the same kernels, with this run's sizes and strides. */
  const fuse_plan *now = layout_of(tp, r);
  return now ? run_plan_with(now, tp->plan, tp->device, r) : -1;
}
