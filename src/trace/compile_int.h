/*
** compile_int.h -- the compile path's private interface, shared by
** compile.c (the compile hook: region -> fuse graph -> plan, and the
** background compile queue), kernels.c (the process's table of compiled
** kernels, the disk store and the JIT) and run.c (running a plan).
*/
#ifndef TC_COMPILE_INT_H
#define TC_COMPILE_INT_H

#include "trace_int.h"
#include "../fuse/fuse.h"
#include "../jit_cpu/jit_cpu.h"
#include "../cache/store.h"

/* A shape-dynamic plan runs its kernels with the sizes and strides of a
** layout made for each run's shapes (run.c: layout_of), kept by the exact
** shapes and strides of the region's inputs: the last TUNE_DYNAMIC_LAYOUTS
** derived ones, and apart the last TUNE_BUILT_LAYOUTS planned again. */
typedef struct {
  uint64_t key;          /* guard_key_of the inputs, exactly (0: empty) */
  uint64_t used;
  fuse_plan *layout;     /* owned */
} trace_layout;

/* A region's compiled plan, as its region table entry keeps it. */
typedef struct {
  fuse_plan *plan;   /* owned; each kernel step holds a reference to its
                        kernel table entry */
  trace_layout derived[TUNE_DYNAMIC_LAYOUTS];
  trace_layout built[TUNE_BUILT_LAYOUTS];
  uint64_t clock;
  const bool *eager;   /* the region nodes it runs eagerly (its entry's
                          eager_nodes), or NULL */
  int device;          /* TC_DEV_*: where its kernels run and its
                          temporaries and outputs live */
  bool fixed;          /* its guards fix every size and stride: the plan
                          as built runs every time (a CUDA plan's kernels
                          are shape-dynamic even then) */
} trace_plan;

void trace_plan_free(void *plan);   /* cache_entry.plan_free */

/* -- The region as a fuse graph (compile.c) -------------------------------- */

typedef struct {
  fuse_graph g;
  fuse_node *nodes;
  int *out_node, *out_dest;
} trace_graph;

/* 0, or -1 (out of memory, or an output with no place in the region). */
int trace_graph_of(const trace_region *r, trace_graph *gb);
void trace_graph_free(trace_graph *gb);

/* -- Kernels (kernels.c) ----------------------------------------------------- */

/* An entry of the process-wide kernel table: a loaded kernel, refcounted
** (the table's reference while in it, one per plan step using it). */
typedef struct trace_kernel trace_kernel;

/* The compiled kernel for k (of the region with structure hash `region`,
** for the store's metadata; guards likewise): from this process's table,
** the disk store, or a fresh compile (then entered in both). A new
** reference, or NULL with a one-line reason. */
trace_kernel *trace_kernel_get(const kir_kernel *k, const char *guards,
                               uint64_t region, char *reason, size_t rlen);
/* Open the disk store once (TC_CACHE, TC_CACHE_DIR); is it open? */
bool trace_store_open(void);
/* The store metadata every backend's kernel shares (store.h: ops, kind,
** shape, instrs, texts borrowed; region 0: none); the caller fills
** backend, target and compiler. */
void trace_meta_fill(store_meta *m, const kir_kernel *k, const char *ir,
                     const char *source, const char *guards, double ms,
                     uint64_t region);
/* The CUDA function for shape-dynamic kernel k, from the CUDA key's
** kernel memo (eager_cuda.h: eager ops and compiled regions share it;
** NVRTC compiles on a miss, counted and timed here). It lives as long as
** the process. NULL with a one-line reason. */
jcuda_function trace_cuda_kernel_get(const kir_kernel *k, char *reason,
                                     size_t rlen);
/* Drop a reference (a fuse_plan's compiled_free). */
void trace_kernel_put(void *kernel);
const jcpu_kernel *trace_kernel_code(const trace_kernel *k);

/* Exit: from trace_kernels_stop on no compile starts; trace_kernels_wait
** waits (bounded) until every compile in flight has renamed its artifact
** into the store or removed it. */
void trace_kernels_stop(void);
bool trace_kernels_exiting(void);
void trace_kernels_wait(void);

/* -- Running a plan (run.c) ---------------------------------------------------- */

/* trace_run_fn: run plan (a trace_plan) for region r. */
int trace_run_plan(void *plan, trace_region *r);

#endif
