/*
** randprog.h -- random tensor programs for the differential test
** (test_random.c): a generator that writes programs the way users write
** them, through tc.h only; an interpreter that runs one in the current mode
** and records everything the program can observe; a printer (C-like lines,
** or a standalone C file); and a shrinker.
**
** A program is a straight line of steps over values v0, v1, ... Shapes are
** symbolic: every dim is a size variable (R, C, K, B: the program's inputs;
** slices and products of them; or the literal 1), so one program is valid
** for every assignment of sizes and is run with several (its "instances"):
** the same structure over many shapes, as a training loop over batches of
** different sizes sees it. Size variables are chosen so that broadcasting
** and matmul are valid for every assignment; dims that become 1 or 0 are
** part of the game.
*/
#ifndef RANDPROG_H
#define RANDPROG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tc.h"

#define RP_MAXV 320      /* values per program */
#define RP_MAXS 480      /* steps per program */
#define RP_MAXVARS 64    /* size variables (inputs and derived) */
#define RP_NIN 4         /* input size variables: R, C, K, B */
#define RP_MAXINST 36    /* size assignments (instances) per program */

/* -- Size variables ------------------------------------------------------ */

/* Variable 0 is the literal 1; 1..RP_NIN are the inputs. */
enum { SV_ONE, SV_IN, SV_SLICE, SV_PROD };

typedef struct {
  uint8_t kind;
  uint8_t a, b;          /* SV_IN: input index; SLICE: parent; PROD: factors */
  int8_t start, end;     /* SLICE: start; end 0 = to the end, else -end */
  int8_t step;
} rp_var;

typedef struct {
  int8_t ndim;
  uint8_t d[TC_MAX_DIMS];   /* size variable of each dim */
} rp_shape;

/* -- Steps --------------------------------------------------------------- */

enum {
  RP_INPUT,        /* k: 0 randn, 1 rand, 2 full(s0); dtype; shape; s1 seed */
  RP_UNARY,        /* k: RP_U_* */
  RP_BINARY,       /* k: RP_B_* */
  RP_SCALAR,       /* k: RP_S_*; s0 */
  RP_CLAMP,        /* s0, s1 */
  RP_WHERE,        /* in 0 cond, 1, 2 */
  RP_CAST,         /* dtype */
  RP_REDUCE,       /* k: RP_R_*; dim; keepdim */
  RP_SUM_ALL,
  RP_SOFTMAX,      /* dim */
  RP_LOG_SOFTMAX,  /* dim */
  RP_LAYER_NORM,   /* in 0 x, 1 gamma or -1, 2 beta or -1; s0 eps */
  RP_MATMUL,
  RP_RESHAPE,      /* shape; infer: dim printed as -1, or -1 */
  RP_PERMUTE,      /* perm */
  RP_TRANSPOSE,    /* dim, dim2 */
  RP_SLICE,        /* dim, start, end, step */
  RP_EXPAND,       /* shape */
  RP_UNSQUEEZE,    /* dim */
  RP_SQUEEZE,      /* dim */
  RP_CONTIGUOUS,
  RP_INPLACE,      /* k: RP_I_*; in 0 dst, 1 src */
  RP_INPLACE_S,    /* k: RP_IS_*; in 0 dst; s0 */
  RP_READ,         /* k: RP_RD_*; in 0 */
  RP_SYNC,
  RP_SCOPE_BEGIN,
  RP_SCOPE_END,
  RP_KEEP,         /* in 0 */
  RP_RELEASE,      /* in 0 */
  RP_GATHER,       /* k: RP_G_*; in 0 the table; dim; s1 the index's seed */
  RP__NOPS
};

/* GATHER: tc_gather along dim with an index of the table's shape,
** tc_index_select with a 1-D index of the dim's size, or tc_scatter_add of
** the table into itself with an index of its shape (many adds into some
** places, none into others), or the table sorted along dim (rp_sorted:
** tc_topk of every element, largest first when s1 is odd, its values plus
** its indices so that both are observed); either way the result has the
** table's shape. The index is drawn when the step runs, uniform in
** [0, size along dim) (rp_index). */
enum { RP_G_GATHER, RP_G_INDEX_SELECT, RP_G_SCATTER_ADD, RP_G_SORT,
       RP_G__N };

enum { RP_U_NEG, RP_U_ABS, RP_U_EXP, RP_U_LOG, RP_U_SQRT, RP_U_RSQRT,
       RP_U_SIN, RP_U_COS, RP_U_TANH, RP_U_SIGMOID, RP_U_RELU, RP_U_GELU,
       RP_U_SILU, RP_U_EXPM1, RP_U_LOG1P, RP_U_ERF, RP_U_SOFTPLUS,
       RP_U_GELU_ERF, RP_U__N };
enum { RP_B_ADD, RP_B_SUB, RP_B_MUL, RP_B_DIV, RP_B_POW, RP_B_MAXIMUM,
       RP_B_MINIMUM, RP_B_EQ, RP_B_NE, RP_B_LT, RP_B_LE, RP_B_GT, RP_B_GE,
       RP_B__N };
enum { RP_S_ADD, RP_S_SUB, RP_S_MUL, RP_S_DIV, RP_S_POW, RP_S__N };
/* VAR is tc_var with correction 1, STD tc_std with correction 0; CUMSUM
** keeps the shape (keepdim unused). */
enum { RP_R_SUM, RP_R_MEAN, RP_R_MAX, RP_R_MIN, RP_R_ARGMAX, RP_R_ARGMIN,
       RP_R_VAR, RP_R_STD, RP_R_CUMSUM, RP_R__N };
enum { RP_I_COPY, RP_I_ADD, RP_I_SUB, RP_I_MUL, RP_I_DIV, RP_I__N };
enum { RP_IS_ADD, RP_IS_SUB, RP_IS_MUL, RP_IS_DIV, RP_IS_FILL, RP_IS__N };
enum { RP_RD_COPY, RP_RD_ITEM, RP_RD_DATA, RP_RD_REALIZE, RP_RD__N };

typedef struct {
  uint8_t op, k;
  uint8_t dtype;
  bool keepdim;
  bool vary;             /* scalars scale with the instance (s0 * sc) */
  int8_t dim, dim2;
  int8_t infer;          /* RESHAPE: the dim written as -1, or -1 */
  int16_t out;           /* value made, or -1 */
  int16_t in[3];         /* values read, or -1 */
  double s0, s1;
  int64_t start, end, step;
  rp_shape shape;        /* INPUT, RESHAPE, EXPAND */
  int8_t perm[TC_MAX_DIMS];
} rp_step;

typedef struct {
  rp_shape shape;
  uint8_t dtype;
  bool state;            /* made to be written in place (printed s<n>) */
  int16_t step;          /* the step that makes it */
} rp_val;

typedef struct {
  uint64_t seed;
  int nvars;
  rp_var var[RP_MAXVARS];
  int nvals;
  rp_val val[RP_MAXV];
  int nsteps;
  rp_step step[RP_MAXS];
  int ninst;
  int64_t size[RP_MAXINST][RP_NIN];   /* per instance: R, C, K, B */
} rp_prog;

/* -- Generator ----------------------------------------------------------- */

/* Generate GATHER steps too (TC_RANDOM_INDEXING=1). Off, every seed's
** program is what it was before the step existed. */
extern bool rp_indexing;

/* Program features to leave out, to look past a known defect (it changes
** the programs of every seed). Set from TC_RANDOM_AVOID, a comma list of
** their names: zerod (no reduction, softmax or layer norm of a 0-d value),
** mean (sums for means, no layer norm), twoviews (the write-then-read
** pattern reads x through one view only), lazydst (no in-place op into a
** computed value: only into states, their views and inputs). */
#define RP_AVOID_ZEROD 1u
#define RP_AVOID_MEAN 2u
#define RP_AVOID_TWOVIEWS 4u
#define RP_AVOID_LAZYDST 8u
extern unsigned rp_avoid;

/* The program for seed: deterministic, independent of the process. */
void rp_generate(rp_prog *p, uint64_t seed);
/* How many instances the program for seed has, without generating it. */
int rp_instances(uint64_t seed);

/* The value of size variable v under instance inst's sizes. */
int64_t rp_var_eval(const rp_prog *p, int v, const int64_t *size);

/* -- Effective steps ----------------------------------------------------- */

/* on[i]: step i is kept. Drops every kept step that would read a value that
** is not alive at that point (not made, released, or freed by its scope),
** unmatched scope ends and their keeps, so what is left is a valid program.
** Returns the number of steps left. */
int rp_normalize(const rp_prog *p, uint8_t *on);

/* -- Interpreter --------------------------------------------------------- */

/* What a step showed: its status (and error message when it failed) and,
** for reads, the bytes read. */
typedef struct {
  bool ran;
  bool failed;
  uint8_t dtype;
  char err[200];
  int ndim;
  int64_t shape[TC_MAX_DIMS];
  size_t nbytes;
  void *bytes;
} rp_obs;

/* Where the interpreter is, for the crash handler (plain data). */
typedef struct {
  uint64_t seed;
  int inst;
  int step;
  bool compiled;
  bool active;
} rp_where;
extern volatile rp_where rp_now;

/* Run the kept steps of p under instance inst in the current mode (the
** caller sets it), recording one observation per step into obs (RP_MAXS
** entries, freed with rp_obs_free). Releases everything it made and syncs
** before it returns. */
void rp_run(const rp_prog *p, const uint8_t *on, int inst, rp_obs *obs);
/* Run tc_data reads as tc_copy_to reads (in every mode): a run on the CUDA
** device has no host pointers to compare against the CPU's. */
extern bool rp_data_as_copy;
/* GATHER's index for table t along dim (a new tensor, or NULL). */
tc_tensor *rp_index(tc_tensor *t, int dim, int kind, uint64_t seed);
/* SORT's result for t along dim (a new tensor, or NULL). */
tc_tensor *rp_sorted(tc_tensor *t, int dim, bool largest);
void rp_obs_free(rp_obs *obs, int n);

/* First step whose observations differ (status, error text, shape, dtype or
** bits, where any NaN equals any NaN), or -1. why gets one line; kind is
** 'S' (status or error text), 'M' (shape or dtype) or 'V' (values). */
int rp_compare(const rp_prog *p, const uint8_t *on, const rp_obs *e,
               const rp_obs *c, char *why, size_t whylen, char *kind);

/* -- Printing ------------------------------------------------------------ */

/* The kept steps as C lines over the symbolic sizes R, C, K, B and the
** instance scale sc; mark (>= 0) flags that step. */
void rp_print_body(const rp_prog *p, const uint8_t *on, int mark, FILE *out);
/* The instance list ("R=3 C=1 ..."), those listed in insts (n of them). */
void rp_print_sizes(const rp_prog *p, const int *insts, int n, FILE *out);
/* A standalone C file: build it against tc.pc and diff its output under
** TC_COMPILE=0 and TC_COMPILE=1. */
void rp_print_c(const rp_prog *p, const uint8_t *on, const int *insts,
                int n, const char *note, FILE *out);
/* One line for step i. */
void rp_print_step(const rp_prog *p, int i, FILE *out);

#endif
