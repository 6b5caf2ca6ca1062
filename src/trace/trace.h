/*
** trace.h -- the TRACE dispatch key: ops on traced tensors record lazy
** nodes; realization points cut regions, which are recognised by their
** structure hash and guards in the region table (src/cache), run eagerly
** while cold and through the compile hook's plan once hot.
**
** The graph
**   A node is one op's value (logically contiguous). A lazy handle points
**   at a node and carries a geometry (shape/strides/offset) over that
**   value, so views of lazy tensors are lazy views, never nodes. An input
**   edge likewise carries the geometry of the handle it was read through.
**   An edge that reads a materialized tensor holds the tensor itself (a
**   leaf edge); no node is made for it.
**   In-place ops are functionalized: on a lazy tensor the handle is
**   rebound to twin(old, src); on a materialized one a pending write
**   (dst, node) is kept and written back when realized.
*/
#ifndef TC_TRACE_H
#define TC_TRACE_H

#include "../eager/eager.h"
#include "../cache/cache.h"
#include "../fuse/kir.h"

typedef struct trace_node trace_node;

/* An input: a node's value (lazy), a materialized tensor (leaf), or
** neither (an absent optional input). */
typedef struct {
  trace_node *node;      /* owned ref, or NULL */
  tc_tensor *leaf;       /* owned ref (tensor_ref), or NULL */
  bool viewed;           /* node edges: geom differs from node's layout */
  tensor_geom geom;      /* valid when viewed */
} trace_edge;

struct trace_node {
  int refs;
  uint16_t op;           /* tc_op */
  uint8_t dtype, cdtype;
  uint8_t device;        /* TC_DEV_*: where its value is computed (every
                            tensor it reads is there: checked at the call) */
  bool keepdim;
  int ndim;
  int nin;
  int dim;
  double s[2];
  int64_t shape[TC_MAX_DIMS];
  uint64_t hash;         /* structure of the subgraph, kept incrementally */
  tc_tensor *value;      /* computed value (contiguous, owned ref) */
  tc_tensor *handles;    /* lazy handles over this node (borrowed list) */
  int held;              /* index in the thread's held list while handles */
  uint64_t mark;         /* walk epoch */
  uint64_t born;         /* realizations done when the node was made */
  uint64_t seq;          /* nodes recorded before it (recording order) */
  bool plain_op;         /* recorded by a functional op's own handler (so a
                            replay can match the same call: replay.c) */
  bool costly;           /* computing it runs a matmul: a small value
                            the program holds is stored, not recomputed */
  int slot;              /* index in the region being realized */
  bool binds;            /* the region being realized writes it back to a
                            target that then holds its value (region.c) */
  bool reads;            /* memo of the closure's walk at epoch `mark` */
  trace_edge in[3];      /* last: an op's attributes above share its first
                            cache lines (a replay matches and sets them) */
};

/* A region being realized: its nodes in topological order, its inputs
** (leaf tensors, in first-visit order, then write-back destinations) and
** its outputs. Plans produced by the compile hook run it. */
typedef struct {
  int nnodes;
  trace_node **nodes;        /* pending nodes, operands first */
  int ninputs;
  tc_tensor **inputs;        /* leaf tensors / computed values (borrowed) */
  int noutputs;
  trace_node **outputs;      /* output nodes, in request order */
  tc_tensor **dest;          /* write-back target per output, or NULL */
  tc_tensor **result;        /* per output, set by the run: its value */
  uint64_t hash;             /* structure hash (nodes, alias pattern,
                                outputs) */
  int device;                /* TC_DEV_* of every node (realization
                                cuts one region per device) */
} trace_region;

/* The compile hook, called (table unlocked) once a region is hot, its entry
** in state CACHE_COMPILING. It makes a plan and publishes it under the
** table lock (trace_table_lock): e->plan, e->plan_free and state COMPILED,
** or state FAILED with one log line; at once or later, from another thread
** (TC_ASYNC). Until then the region runs eagerly. */
typedef void (*trace_compile_fn)(const trace_region *r, cache_entry *e);
/* Run a plan: write every output's value into r->result[i] (new
** references) or, for write-backs, into r->dest[i]. 0 or -1. */
typedef int (*trace_run_fn)(void *plan, trace_region *r);
/* Does plan run a region from its nodes' attributes alone (op, dtype,
** shape, scalars), never walking its edges? Then a replay can run it. */
typedef bool (*trace_graphless_fn)(const void *plan);
void trace_set_compiler(trace_compile_fn compile, trace_run_fn run,
                        trace_graphless_fn graphless);
void trace_table_lock(void);
void trace_table_unlock(void);
/* Install fusion + the CPU JIT as the compile hook (done by trace_init,
** unless TC_JIT=0). */
void trace_compile_register(void);
/* Give eager's CUDA kernel memo the disk store (cuda_kernels.c; done by
** trace_init). */
void trace_cuda_store_register(void);
/* Wait until no background compile is queued or running. */
void trace_compile_wait(void);

/* Testing hook: when set, each compiled kernel's launch (and a matmul
** epilogue's run on a tile's points) is offered to it first, with the
** kernel's units [lo, hi) (kir.h: points or rows); it returns 0 when it
** ran the kernel, else the CPU backend runs it. tests/jit_cuda installs
** one that runs the kernel's CUDA C on the host. NULL in the library. */
typedef int (*trace_launch_fn)(const kir_kernel *k, char *const *bufs,
                               const double *scalars, const int64_t *dims,
                               int64_t lo, int64_t hi);
extern trace_launch_fn trace_launch_hook;

/* Registered at load; also callable (idempotent). */
void trace_init(void);

/* Node count of the live graph (tests). */
int trace_live_nodes(void);
/* Regions realized by op-level replay (replay.c) so far (tests). */
uint64_t trace_replay_count(void);

#endif
