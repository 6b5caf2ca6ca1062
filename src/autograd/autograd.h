/*
** autograd.h -- the AUTOGRAD dispatch key: ops on tensors that require
** grad record a graph node and pass the call on (record.c); tc_backward
** walks the graph and runs each node's derivative, written once in
** src/tensor/derivatives.def as ordinary tc ops (derivatives.c,
** backward.c), so that under TRACE the backward is traced and fused too.
*/
#ifndef TC_AUTOGRAD_H
#define TC_AUTOGRAD_H

#include <pthread.h>

#include "../eager/eager.h"

#define AG_KEY TC_KEYSET(TC_KEY_AUTOGRAD)

/* Saved values a derivative reads (derivatives.def's `saves` column). */
enum { SV_NONE = 0, SV_A = 1, SV_B = 2, SV_C = 4, SV_Y = 8 };
enum { AG_SLOTS = 4 };   /* A, B, C, Y: ORDER SAVED */

struct ag_node;

/* Where the gradient of one input goes: the node that made it, or the
** leaf itself (accumulated into its grad). At most one is set. */
typedef struct {
  struct ag_node *fn;   /* owned ref */
  tc_tensor *leaf;      /* owned (tc's own) ref */
} ag_edge;

/* One recorded op: what its derivative needs, and where each input's
** gradient goes. */
typedef struct ag_node {
  atomic_int refs;      /* tensors' grad_meta and later nodes' edges */
  eager_call call;      /* the forward call; in[] and dst are cleared */
  ag_edge next[3];
  int nin;
  tc_dtype in_dtype[3];
  int in_ndim[3];
  int64_t in_shape[3][TC_MAX_DIMS];
  tc_tensor *saved[AG_SLOTS];   /* owned aliases of the values read */
  uint64_t saved_version[AG_SLOTS];
  bool consumed;        /* backward ran through it; saved values freed */
  /* backward's scratch (one backward at a time walks a node) */
  int deps;
  tc_tensor *grad;      /* gradient of the result, accumulated (owned) */
  struct ag_node *work_next;
} ag_node;

/* A tensor's autograd record (tc_tensor.grad_meta). */
typedef struct {
  bool requires_grad;   /* a leaf the program asked gradients for */
  bool is_view;         /* made by a view op from a tensor needing grad */
  uint64_t view_version;   /* storage version when the view was made */
  ag_node *fn;          /* owned ref: the op that made it (NULL: leaf) */
  tc_tensor *grad;      /* owned (tc's own) ref; NULL: none */
} ag_meta;

/* -- record.c --------------------------------------------------------------- */

/* Does t take part in autograd (a leaf requiring grad or a result of a
** recorded op)? One flag test for every other tensor. */
static inline bool ag_needs_grad(const tc_tensor *t)
{
  return t && (t->keys & AG_KEY) && t->grad_meta;
}
bool ag_grad_enabled(void);
ag_meta *ag_meta_of(tc_tensor *t);          /* made on first use; NULL: OOM */
void ag_node_release(ag_node *n);           /* iterative, deep graphs ok */
/* A new handle on t's value, outside autograd (saved values, detach). */
tc_tensor *ag_alias(tc_tensor *t);
/* The storage version of t as autograd compares it (0 while lazy). */
uint64_t ag_version(const tc_tensor *t);
/* Turn a reference the public API returned into one of tc's own (the
** scope, if any, forgets it). */
tc_tensor *ag_internal(tc_tensor *t);
/* t moved to the device of `like` (t's reference passes to the result;
** NULLs pass through). Autograd's own constants, seeds and zeros are made
** by the public creation functions, on the default device: this puts them
** beside the tensors they meet. */
tc_tensor *ag_on_device_of(const tc_tensor *like, tc_tensor *t);
/* Leaf gradients are written under one lock (backward on many threads). */
void ag_grad_lock(void);
void ag_grad_unlock(void);

/* -- derivatives.c -------------------------------------------------------- */

typedef enum { DK_NONE, DK_ROW, DK_TWIN, DK_NONDIFF, DK_VIEW } ag_deriv_kind;
typedef struct {
  const char *name;     /* the op's name, as in ops.def */
  uint8_t kind;         /* ag_deriv_kind */
  uint8_t saves;        /* SV_* */
} ag_deriv_info;
extern const ag_deriv_info ag_deriv[TC_OP__MAX];
/* The SV_ flags of op's row (an in-place op's: its twin's). */
int ag_deriv_saves(tc_op op);

/* The gradients of node n's inputs given g, the gradient of its result,
** as new references of the public API (in the caller's scope), each of
** its input's shape and dtype; gin[i] NULL for inputs that need none.
** 0, or -1 with the error set. Grad mode must be off. */
int ag_node_grads(const ag_node *n, tc_tensor *g, tc_tensor *gin[3]);

/* -- backward.c ------------------------------------------------------------- */

int ag_backward(tc_tensor *loss);

#endif
