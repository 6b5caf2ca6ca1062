/*
** layout.h -- how a shape-dynamic plan's layout follows from its graph
** (fuse's private interface, between plan.c and layout.c).
**
** A shape-dynamic plan runs the same kernels for every shape of its
** region; what changes from run to run is its layout: each kernel's sizes,
** row length and buffer strides, each buffer's element offset, the
** temporaries' shapes and the views extern steps read. fuse_build records,
** while it lowers the plan, where in the graph it read each of those
** numbers (a recipe), and the equalities between the graph's numbers that
** its grouping decisions could have depended on (the graph's facts). For a
** graph with the same facts, the same decisions follow, and the recipe
** gives the layout directly: fuse_relayout, without grouping or lowering
** again.
*/
#ifndef TC_FUSE_LAYOUT_H
#define TC_FUSE_LAYOUT_H

#include "fuse.h"

/* Where a number is in the graph. a: a node (input for LS_ISTRIDE and
** LS_ISHAPE); e: the node's operand; j: a dim. */
typedef enum {
  LS_ZERO, LS_ONE,
  LS_NSHAPE,    /* node a's shape[j] */
  LS_NCST,      /* the contiguous stride j of node a's shape */
  LS_ESHAPE,    /* the shape operand e of node a reads (its view's, else
                   its source's): dim j */
  LS_ECST,      /* its contiguous stride j */
  LS_ENUMEL,    /* its element count */
  LS_ESTRIDE,   /* operand e's view: stride j */
  LS_EOFF,      /* ... and offset */
  LS_ISTRIDE,   /* graph input a's stride j */
  LS_ISHAPE     /* graph input a's shape[j] */
} lsrc_kind;

typedef struct {
  uint8_t kind, e, j;
  int32_t a;
} lsrc;

/* A quotient num / den (den LS_ONE but for a flat row's stride); a layout
** number is the sum of its terms (a buffer's stride over a kernel dim that
** several of the value's dims follow). */
typedef struct {
  lsrc num, den;
} lterm;

/* Terms [first, first + n) of the recipe's term list, summed (n = 0 is
** 0); with `same`, not summed: each must give the same number, which it
** is (a flat row's stride, one per dim of its operand). */
typedef struct {
  int first, n;
  bool same;
} lnum;

/* A buffer's layout numbers as terms, while lowering builds them. */
typedef struct {
  int n[TC_MAX_DIMS + 1];              /* per kernel dim */
  lterm t[TC_MAX_DIMS + 1][TC_MAX_DIMS];
  bool same;                           /* kernel dim 0's terms: `same` */
  lterm off, gstride, gsize;
} lbuf;

typedef struct fuse_recipe fuse_recipe;

fuse_recipe *recipe_new(void);
void recipe_free(fuse_recipe *r);
/* Recording, while plan.c lowers step s; each returns 0, or -1 when out of
** memory (then the plan gets no recipe and relayout is not offered). */
int recipe_kernel(fuse_recipe *r, int s, int ndim, const lsrc *size,
                  lsrc row_len);
int recipe_buffer(fuse_recipe *r, int s, int buf, int nst, const lbuf *b);
int recipe_alias(fuse_recipe *r, int s, int buf, int nst, const lbuf *b);
int recipe_temp(fuse_recipe *r, int t, int node, bool edge);
int recipe_step_node(fuse_recipe *r, int s, int node);
/* Done: the facts of g (the expanded graph it was built from). */
int recipe_seal(fuse_recipe *r, const fuse_graph *g, int nsteps);

/* The layout of code (built with recipe r) for expanded graph g, or NULL
** when g's facts differ or a number does not fit the code. reuse: a layout
** of code no longer wanted, whose memory it takes (consumed either way),
** or NULL. mark_epilogues is plan.c's, run over the result. */
fuse_plan *recipe_apply(const fuse_recipe *r, const fuse_plan *code,
                        const fuse_graph *g, fuse_plan *reuse,
                        void (*mark_epilogues)(const fuse_graph *,
                                               fuse_plan *));

/* How many different numbers the recorded graph's facts hold. */
int recipe_distinct(const fuse_recipe *r);

/* The shape operand e of a node reads (plan.c's edge_shape). */
const int64_t *layout_edge_shape(const fuse_graph *g, const fuse_edge *e,
                                 int *ndim);

#endif
