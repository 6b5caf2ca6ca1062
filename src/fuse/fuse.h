/*
** fuse.h -- fusion: a region graph becomes a plan of steps, each either a
** fused kernel in the kernel IR (kir.h) or an extern op run by its eager
** kernel (matmul, argmax, argmin, cumsum). Elementwise chains and
** broadcasts fuse into one MAP kernel (several outputs when they share a
** shape); reductions and the composites (softmax, log_softmax,
** layer_norm, mean) become one ROWS kernel each, with their elementwise
** producers inlined. Values that nothing outside a kernel needs are never
** stored.
**
** The graph is trace's region, in a form that depends on tensor only.
*/
#ifndef TC_FUSE_H
#define TC_FUSE_H

#include <stdio.h>

#include "kir.h"

/* Where a value lives while a plan runs. */
typedef enum {
  FREF_NONE,
  FREF_INPUT,    /* graph input i (a materialized tensor) */
  FREF_TEMP,     /* plan temporary i (contiguous, allocated per run) */
  FREF_OUTPUT,   /* graph output i's fresh result tensor (contiguous) */
  FREF_DEST      /* graph output i's write-back target (a view) */
} fuse_ref_kind;

typedef struct {
  uint8_t kind;  /* fuse_ref_kind */
  int index;
} fuse_ref;

typedef struct {
  int src;              /* >= 0: node index; < 0: graph input -src - 1 */
  bool viewed;          /* read through geom (over the source's contiguous
                           value) */
  tensor_geom geom;
} fuse_edge;

/* Where a node's scalar argument comes from at run time. */
typedef struct {
  int8_t which;         /* that scalar argument of region node `orig`, or
                           -1: the constant lit */
  double lit;
} fuse_scalar;

typedef struct {
  uint16_t op;          /* tc_op */
  uint8_t dtype, cdtype;
  int ndim;
  int64_t shape[TC_MAX_DIMS];
  int nin;
  fuse_edge in[3];      /* src == INT32_MIN: absent optional input */
  int dim;
  bool keepdim;
  int orig;             /* the region's node it stands for (the composite,
                           for the nodes of a composite's decomposition) */
  bool eager;           /* an extern step of its own (fuse_graph.eager) */
  bool gather;          /* TAKE or GATHER read as an indexed load
                           (KOP_GATHER) by the kernel of its user, not an
                           extern step: set by fuse_build where that is
                           safe (plan.c) */
  fuse_scalar sc[2];    /* its scalar arguments */
} fuse_node;

#define FUSE_ABSENT INT32_MIN

typedef struct {
  int nnodes;
  const fuse_node *nodes;          /* topological: operands first */
  const bool *eager;               /* per node, or NULL: run it with its
                                      eager kernel (an extern step), not
                                      fused (its kernel failed to compile) */
  int ninputs;
  const tc_tensor *const *inputs;  /* materialized tensors */
  int noutputs;
  const int *out_node;             /* node index of each output */
  const int *out_dest;             /* its write-back target (an input
                                      index), or -1 for a fresh result */
} fuse_graph;

typedef enum { FSTEP_KERNEL, FSTEP_EXTERN, FSTEP_COPY } fuse_step_kind;

/* A scalar slot bound to the kernel's row length rather than to a node's
** scalar argument: shape-dynamic kernels read size-derived values (mean's
** divisor) at run time, like their sizes and strides. */
#define FUSE_SCALAR_ROW_LEN 2

typedef struct {
  uint8_t kind;                    /* fuse_step_kind */
  kir_kernel *k;                   /* KERNEL: owned */
  fuse_ref buf[KIR_MAX_BUFS];      /* KERNEL: what each buffer binds to */
  int64_t buf_off[KIR_MAX_BUFS];   /* ... and at which element (views) */
  int nscal;
  struct { int node, which; } scal[KIR_MAX_SCALARS];  /* scalar slot ->
                                      that region node's scalar argument
                                      `which`, or (FUSE_SCALAR_ROW_LEN) the
                                      kernel's row length */
  int node;                        /* EXTERN: the region node it runs */
  uint16_t op;                     /* EXTERN: its op (tc_op) */
  bool epilogue;                   /* EXTERN (a matmul): the next step, a
                                      MAP kernel over the points of this
                                      one's result that reads it point by
                                      point, runs on each finished tile of
                                      it while it is in cache
                                      (eager_matmul_ep), not as a pass of
                                      its own */
  fuse_ref in[3];                  /* EXTERN: its operands (NONE: absent) */
  bool in_viewed[3];               /* EXTERN: operand read through a view */
  tensor_geom in_geom[3];
  fuse_ref out;                    /* EXTERN / COPY: where it writes */
  int norig;                       /* KERNEL: the region nodes it computes */
  int *orig;                       /* (owned) */
  fuse_ref from;                   /* COPY: source */
  void *compiled;                  /* KERNEL: the backend's (not owned
                                      here: see fuse_plan.compiled_free) */
} fuse_step;

typedef struct {
  uint8_t dtype;
  int ndim;
  int64_t shape[TC_MAX_DIMS];
} fuse_temp;

typedef struct fuse_plan {
  bool dynamic;
  int nregion;                     /* the region graph's nodes */
  int nsteps;
  fuse_step *steps;                /* owned */
  int ntemps;
  fuse_temp *temps;                /* owned */
  int noutputs;
  fuse_ref *out_ref;               /* where each output's value is */
  void (*compiled_free)(void *);   /* frees steps[i].compiled */
  struct fuse_recipe *recipe;      /* dynamic plans: how the layout follows
                                      from the graph (layout.h), or NULL */
  const struct fuse_plan *code;    /* a layout from fuse_relayout: the plan
                                      whose steps and kernels it has (only
                                      compared, never read) */
} fuse_plan;

/* Build the plan for g (its composites decomposed into primitive nodes by
** tensor/composites.def first). Plan steps and scalar slots name region
** nodes by fuse_node.orig. Returns NULL with a one-line reason when some part
** cannot be fused (the caller runs the region eagerly). Static plans bake
** sizes and strides into the kernels; dynamic ones read them at run time
** (fuse_relayout gives the layout for another run's shapes). */
fuse_plan *fuse_build(const fuse_graph *g, bool dynamic, char *reason,
                      size_t rlen);
/* Dynamic plan code's layout for g, a graph of its region's structure with
** other sizes and strides: code's steps and kernels with g's sizes,
** strides, offsets and temporaries' shapes, computed from the numbers of g
** where fuse_build read them for code, without grouping or lowering again.
** NULL when that would not be the plan fuse_build makes for g (sizes that
** were equal now differ, or the other way round, so the grouping may
** differ: build g, and compare its code), or out of memory. The result
** runs code's compiled kernels (its steps' `compiled` are NULL). reuse: a
** layout of code no longer wanted, whose memory the result takes (it is
** consumed either way), or NULL. */
fuse_plan *fuse_relayout(const fuse_plan *code, const fuse_graph *g,
                         fuse_plan *reuse);
/* Give code the recipe of `from`, a plan built for other shapes whose
** code is the same (its sizes related otherwise than code's did), unless
** code's tells more of its graph's numbers apart. */
void fuse_plan_adopt_recipe(fuse_plan *code, fuse_plan *from);
void fuse_plan_free(fuse_plan *p);
/* Groups, kernels (canonical IR) and bindings, for TC_DEBUG and TC_LOG. */
void fuse_plan_dump(const fuse_plan *p, FILE *out);
int fuse_plan_kernels(const fuse_plan *p);

#endif
