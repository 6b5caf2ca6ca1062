/*
** trace_int.h -- trace's private state and functions, shared by record.c
** (recording) and region.c (realization).
*/
#ifndef TC_TRACE_INT_H
#define TC_TRACE_INT_H

#include <stdatomic.h>

#include "trace.h"
#include "../eager/eager_cuda.h"

typedef struct {
  int hot;              /* TC_HOT */
  int recompile_limit;  /* TC_RECOMPILE_LIMIT */
  int node_limit;       /* TC_NODE_LIMIT */
} trace_config;

void trace_config_load(void);
extern trace_config trace_config_cur;   /* set by trace_config_load */
/* Inline: the node limit is checked on every recorded op. */
static inline const trace_config *trace_cfg(void) { return &trace_config_cur; }

/* A traced in-place write not yet written back. */
typedef struct {
  tc_tensor *dst;       /* owned ref: the view written */
  trace_node *node;     /* owned ref: its new value */
} trace_pending;

/* The graph being recorded: one per process, shared by every thread and
** guarded by trace_lock (a lazy tensor may be made on one thread and used,
** read or released on another; a write-back must see every lazy reader of
** the storage it overwrites, whichever thread recorded it). */
typedef struct {
  int live_nodes;
  trace_pending *pending;   /* owned array */
  int npending, cap_pending;
  trace_node **held;        /* nodes with live handles (borrowed; each
                               knows its index: removal is O(1)) */
  int nheld, cap_held;
  uint64_t epoch;           /* walk marks */
  uint64_t realizations;    /* regions realized on this thread */
  trace_node *free_nodes;   /* recycled nodes, linked through handles */
  int nfree;
  uint64_t recorded;        /* nodes recorded so far (their seq) */
} trace_state;

extern trace_state trace_g;

/* The trace lock: held by every TRACE handler and hook while it reads or
** changes the graph, nodes, lazy handles or pending writes. Reentrant on
** one thread (a realization may release handles or realize again). */
void trace_lock_init(void);   /* once, before the first trace_lock */

/* The lock's state (lock.c), read by its fast paths inline: they run
** twice per traced op, so they are not calls. */
typedef struct {
  atomic_uint owner;     /* the bias owner's thread id; 0 none yet */
  atomic_int held;       /* the owner holds it through the bias */
  atomic_int revoked;    /* 1: no bias, ever again */
} trace_lock_bias;
typedef struct {
  int depth;             /* reentrant holds */
  bool by_bias;          /* this hold is the bias's */
  unsigned self_id;      /* 0 until the first slow path */
} trace_lock_thread;
extern trace_lock_bias trace_bias;
extern _Thread_local trace_lock_thread trace_lock_me;
void trace_lock_slow(void);
void trace_unlock_slow(void);

static inline void trace_lock(void)
{
  trace_lock_thread *me = &trace_lock_me;
  if (me->depth++ > 0)
    return;
  if (me->self_id && atomic_load_explicit(&trace_bias.owner,
                                          memory_order_relaxed) ==
                     me->self_id) {
    atomic_store_explicit(&trace_bias.held, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);   /* (lock.c: why) */
    if (!atomic_load_explicit(&trace_bias.revoked, memory_order_relaxed)) {
      atomic_signal_fence(memory_order_seq_cst);   /* the section stays
                                                      after */
      me->by_bias = true;
      return;
    }
  }
  trace_lock_slow();
}

static inline void trace_unlock(void)
{
  trace_lock_thread *me = &trace_lock_me;
  if (--me->depth > 0)
    return;
  if (me->by_bias) {
    me->by_bias = false;
    atomic_store_explicit(&trace_bias.held, 0, memory_order_release);
    return;
  }
  trace_unlock_slow();
}

/* One word into a structure hash: the 128-bit product of (state ^ word) and
** an odd constant, folded to 64 bits (foldhash's folded multiply). Each
** product bit depends on every lower bit of both factors and the high half
** on all of them, so the fold is well mixed; one multiply per word keeps
** hashing off the recording path's cost (it runs for every traced op, and
** for every edge of a region realized). */
#define TRACE_HASH_SEED 0x243f6a8885a308d3u   /* pi: any nonzero start */
/* What a node's hash says of an edge that reads another node (which one,
** the region's walk adds). */
#define TRACE_NODE_EDGE 0xb7e151628aed2a6bu   /* e */

static inline uint64_t trace_hash_word(uint64_t h, uint64_t v)
{
  __extension__ typedef unsigned __int128 u128;
  u128 p = (u128)(h ^ v) * 0x9e3779b97f4a7c15u;   /* odd: 2^64 / phi */
  return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/* Recording (record.c). */
trace_node *trace_node_alloc(void);   /* uninitialized; NULL, error set */
void trace_node_init(trace_node *n, const eager_call *c, tc_op op, int skip,
                     int device);
void trace_node_seal(trace_node *n, int skip);
/* A leaf edge's reference to t: the edges to one tensor share one. */
tc_tensor *trace_leaf_ref(tc_tensor *t);
void trace_leaf_unref(tc_tensor *t);
void trace_handle_fill(tc_tensor *h, trace_node *n, const tensor_geom *g);
void trace_handle_link(trace_node *n, tc_tensor *h);
void trace_handle_bind(tc_tensor *h, tc_tensor *v);
void trace_node_retain(trace_node *n);
/* The structure hash a leaf edge of a tensor of ndim dims contributes. */
uint64_t trace_leaf_hash(int ndim);
/* Free n, whose last reference is gone, and release its inputs. */
void trace_node_free(trace_node *n);
/* Inline: most releases (a handle's, an edge's) leave the node alive. */
static inline void trace_node_release(trace_node *n)
{
  if (n && --n->refs <= 0)
    trace_node_free(n);
}
tc_tensor *trace_handle_new(trace_node *n, const tensor_geom *g);
void trace_materialize_handles(trace_node *n, tc_tensor *v);

trace_pending *trace_pending_find(const tc_tensor *t);
int trace_pending_set(tc_tensor *dst, trace_node *n);


/* The eager kernel of op on device (TC_DEV_*): the CPU's or the CUDA
** key's handler. Regions run their nodes and extern steps with it. */
static inline eager_kernel trace_backend(int device, tc_op op)
{
  return eager_lookup(device == TC_DEV_CUDA ? TC_KEY_CUDA : TC_KEY_CPU, op);
}

/* Copy src into dst (same shape and device), converting: a write-back or a
** plan's copy step. 0, or -1 with the error set. */
int trace_copy_into(tc_tensor *dst, tc_tensor *src);

/* The eager_call that runs node n (inputs left NULL). */
void trace_call_of(const trace_node *n, eager_call *c);

/* Realization (region.c). Each returns 0 or -1 with the error set. */
int trace_realize_tensor(tc_tensor *t);
int trace_flush_storage(tensor_storage *s);
int trace_sync(void);
int trace_realize_all(void);
/* Before a raw pointer to t's storage is handed out: compute every lazy
** value and pending write that reads or writes that storage. */
int trace_expose(tc_tensor *t);

/* Op-level replay (replay.c), under the trace lock. A region run compiled
** is offered as a tape (r NULL: the region realized had no plan; nreq:
** the values asked for); the ops that follow are matched against the tape
** armed, without graph nodes, and a read of its result runs the plan. */
void trace_replay_offer(const trace_region *r, int nreq);
/* Op c replayed? Then *out is its handle (NULL: failed, error set). When
** not, any run in flight has been left: record c. */
bool trace_replay_op(const eager_call *c, tc_tensor **out);
/* t realized by replay (*rc its status)? When not, any run in flight has
** been left: realize t as recorded. */
bool trace_replay_realize(tc_tensor *t, int *rc);
/* A replayed op's handle died (t->lazy_replay). */
void trace_replay_release(tc_tensor *t);
/* Leave the run in flight, if any: its ops become the graph nodes that
** recording would have made. Every trace entry that is not one of the
** above calls it first. */
void trace_replay_leave(void);
/* region.c: run region r of a replay with its entry's compiled plan (0),
** or 1 when its entry has no plan that runs without the graph, or -1 when
** the plan failed (error set). */
int trace_region_replay(trace_region *r);

#endif
