/*
** kir.h -- the kernel IR: the backend-neutral loop IR that fusion produces
** and the JIT backends consume. One kernel = an iteration space, buffers
** addressed by affine (stride) index expressions, a list of typed SSA
** instructions in tc's expression primitives, and passes that store values
** or reduce them in the canonical order. Its canonical text form
** (kir_print) is both the cache key's input and what dumps show.
**
** Two shapes of kernel:
**   KIR_MAP   for each point of an N-d space (dims d0..dN-1, row-major):
**             evaluate, store the outputs. Parallel over flat point index.
**   KIR_ROWS  for each row r of an N-d outer space, a row axis of length
**             `row_len`; passes run in order over the row: a REDUCE pass
**             folds a value over the row (canonical order: chunks of
**             TENSOR_RED_CHUNK, 16 lanes, halving, pairwise chunk combine) into
**             a row variable; a STORE pass writes values at each row
**             position; a STORE_ROW pass writes a row-variable-only value
**             once per row (e.g. a sum with keepdim). Parallel over rows.
**
** Every buffer has one stride per outer dim plus one for the row axis
** (elements; 0 broadcasts). Sizes and strides are constants in static
** kernels; in shape-dynamic ones (dynamic = true) they are read at run time
** from the `dims` argument (see kir_dyn_layout).
*/
#ifndef TC_KIR_H
#define TC_KIR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../tensor/tensor.h"

/* The limits of one kernel. A group that would exceed one is split into
** several kernels by the fuser (plan.c), so they bound a kernel's size, not
** a program's. */
#define KIR_MAX_BUFS 64
#define KIR_MAX_INSTRS 2048
#define KIR_MAX_PASSES 32
#define KIR_MAX_SCALARS 64

/* Instruction opcodes. ORDER KOP: the primitives of expr.h, then the IR's
** own leaves. Semantics are exactly expr.h's for the instruction's dtype. */
#define KIR_PRIMS(X)                                                         \
  X(ADD, 2) X(SUB, 2) X(MUL, 2) X(DIV, 2) X(NEG, 1) X(ABS, 1)               \
  X(EQ, 2) X(NE, 2) X(LT, 2) X(LE, 2) X(GT, 2) X(GE, 2)                     \
  X(MAXIMUM, 2) X(MINIMUM, 2) X(SEL, 3)                                     \
  X(SQRT, 1) X(EXP, 1) X(LOG, 1) X(TANH, 1) X(SIGMOID, 1) X(SIN, 1)         \
  X(COS, 1) X(POW, 2) X(GELU, 1)                                            \
  X(FLOOR, 1) X(CEIL, 1) X(ROUND, 1) X(TRUNC, 1)                           \
  X(EXPM1, 1) X(LOG1P, 1) X(ERF, 1)
typedef enum {
#define X(n, a) KOP_##n,
  KIR_PRIMS(X)
#undef X
  KOP_CONST,    /* cval converted to dtype (as (T)(v) in C) */
  KOP_SCALAR,   /* scalar argument `ref` (a double), converted to dtype */
  KOP_LOAD,     /* element of buffer `ref` at the current point */
  KOP_ROWVAR,   /* result of REDUCE pass `ref` for the current row */
  KOP_CAST,     /* arg0 converted to dtype (eager_convert's rules) */
  KOP_GATHER,   /* element of gather buffer `ref` at the current point, its
                   gathered axis at index arg0 (i64) clamped to
                   [0, gsize - 1] (an indexed load: tc_embedding) */
  KOP__MAX
} kir_opcode;

extern const char *const kir_opname[KOP__MAX];
extern const uint8_t kir_arity[KOP__MAX];

typedef struct {
  uint8_t op;         /* kir_opcode */
  uint8_t dtype;      /* result dtype (tc_dtype) */
  int16_t ref;        /* LOAD buffer / SCALAR index / ROWVAR pass */
  int32_t arg[3];     /* operand instruction indices (earlier ones) */
  double cval;        /* CONST */
} kir_instr;

typedef enum { KIR_IN, KIR_OUT } kir_buf_role;

typedef struct {
  uint8_t role;                  /* kir_buf_role */
  uint8_t dtype;
  bool gather;                   /* read by GATHER: element (point) +
                                    index * gstride, the index checked by
                                    the op's call and clamped to
                                    [0, gsize - 1] by the kernel */
  int64_t stride[TC_MAX_DIMS + 1];  /* outer dims, then the row axis */
  int64_t gstride, gsize;        /* gather buffers: the gathered axis */
} kir_buf;

typedef enum {
  KIR_PASS_REDUCE,   /* rowvar[pass] = fold(op, value) over the row; with
                        out >= 0 the value is also stored at each position
                        (a later pass may LOAD that OUT buffer back: same
                        row, same position) */
  KIR_PASS_STORE,    /* buf[out] = value at each row position (or point) */
  KIR_PASS_STORE_ROW,/* buf[out] = value once per row (row axis unused;
                        its value uses no LOAD) */
  /* The sequential passes: one after another along the row, position 0
  ** first, as a loop in C would (cumsum, scatter_add). A kernel with one
  ** has only such passes (a sequential kernel: kir_sequential). */
  KIR_PASS_SCAN,     /* buf[out] = the fold of the values up to each
                        position in tensor.h's canonical scan order
                        (segments folded from the identity, the carry of
                        the segments before in front; value of a
                        kir_seq_dtype) */
  KIR_PASS_SCATTER   /* buf[out] at the current point with its gathered
                        axis at `index` (an i64, clamped to [0, gsize - 1]
                        like GATHER's) = fold(op, that element, value), at
                        each position in turn; value has the buffer's
                        dtype */
} kir_pass_kind;

typedef enum { KIR_RED_SUM, KIR_RED_MAX, KIR_RED_MIN } kir_red;

typedef struct {
  uint8_t kind;      /* kir_pass_kind */
  uint8_t red;       /* kir_red: REDUCE, SCAN, SCATTER */
  int16_t out;       /* STORE*, SCAN, SCATTER: buffer index; REDUCE: -1,
                        or a buffer to store the folded values in */
  int32_t value;     /* instruction whose value is folded or stored */
  int32_t index;     /* SCATTER: the instruction of the index (unread by
                        other kinds) */
} kir_pass;

typedef enum { KIR_MAP, KIR_ROWS } kir_kind;

typedef struct {
  uint8_t kind;                   /* kir_kind */
  bool dynamic;                   /* sizes/strides read at run time */
  bool inplace;                   /* MAP: an output may be an input, read
                                     and written at the same point (the
                                     backend must not let the alias stop
                                     vectorization) */
  int ndim;                       /* outer dims (MAP: all dims) */
  int64_t size[TC_MAX_DIMS];      /* outer sizes */
  int64_t row_len;                /* ROWS */
  int nbufs;
  kir_buf buf[KIR_MAX_BUFS];
  int nscalars;
  int npasses;
  kir_pass pass[KIR_MAX_PASSES];
  bool compact;                   /* holds ins[0, ninstrs) only
                                     (kir_compact_copy) */
  int ninstrs;
  kir_instr ins[KIR_MAX_INSTRS];  /* last: a compact kernel ends at
                                     ins[ninstrs] */
} kir_kernel;

/* -- Building -------------------------------------------------------------- */

/* An empty kernel, and its end. Planning makes one per kernel step (a
** finished plan keeps compact copies), an eager CUDA op one per call;
** clearing 55 KB for each was 7% of a compiled decoding step when decoding
** planned every step. So kir_free keeps a few kernels for kir_new to
** hand out again with only the counts, sizes and buffers cleared: their
** instruction and pass arrays keep old (initialized) entries, which no one
** reads past ninstrs and npasses. */
kir_kernel *kir_new(void);
void kir_free(kir_kernel *k);   /* NULL-safe */
/* A copy of c in memory for its instructions only (7 KB for a typical
** kernel instead of 55): a finished plan's kernels (fuse_build's, and the
** copies a shape-dynamic plan's layouts keep, fuse/layout.c) never grow.
** Nothing may emit into it or copy it by assignment (kir_copy does).
** NULL when out of memory. */
kir_kernel *kir_compact_copy(const kir_kernel *c);
/* *dst (a whole kernel) = *src, which may be compact: its instructions
** past ninstrs are not read. */
void kir_copy(kir_kernel *dst, const kir_kernel *src);

/* Each returns the new instruction's index, or -1 when the kernel is full
** (the caller then leaves the group to eager). */
int kir_emit(kir_kernel *k, kir_opcode op, tc_dtype dt, int a, int b, int c);
int kir_const(kir_kernel *k, tc_dtype dt, double v);
int kir_scalar(kir_kernel *k, tc_dtype dt, int index);
int kir_load(kir_kernel *k, int buf);
int kir_gather(kir_kernel *k, int buf, int index);   /* index: an i64 */
int kir_rowvar(kir_kernel *k, int pass);
int kir_cast(kir_kernel *k, tc_dtype dt, int a);   /* no-op if same dtype */
/* Does k have sequential passes (SCAN, SCATTER)? Its rows are then each
** walked by one thread, in order. */
bool kir_sequential(const kir_kernel *k);
/* The dtypes a sequential pass folds in: f32, f64, i32, i64. */
static inline bool kir_seq_dtype(int dt)
{
  return dt == TC_F32 || dt == TC_F64 || dt == TC_I32 || dt == TC_I64;
}

/* -- Canonical text -------------------------------------------------------- */

/* The canonical text form: stable across runs and processes, so it can be
** hashed for the cache key. Instructions are printed in index order, which
** the fuser makes canonical (operands before users, depth-first from the
** passes in pass order). */
void kir_print(const kir_kernel *k, FILE *out);
/* kir_print into a malloc'd string (caller frees); NULL on failure. */
char *kir_text(const kir_kernel *k);
/* The inverse of kir_print: the kernel (from kir_new; kir_free it) whose
** canonical text is exactly `text`, or NULL with a one-line reason ("line
** N: ..."). The text is untrusted (a store's meta): every malformed,
** out-of-range or inconsistent field is refused (operands that are not
** earlier instructions, buffers, scalars or passes that do not exist,
** counts past the KIR_MAX_* limits, a LOAD, GATHER or ROWVAR not of its
** source's dtype, a store into an input), and so is any text kir_print
** would not write (so a key made from the text names one kernel). Fields
** kir_print does not write are as kir_new leaves them (a MAP kernel's row
** length and row strides 0). */
kir_kernel *kir_parse(const char *text, char *why, size_t wlen);

/* -- Dynamic layout -------------------------------------------------------- */
/* For dynamic kernels the `dims` argument holds, in order: the outer sizes
** (ndim), the row length, then for each buffer its ndim + 1 strides. */
int kir_dyn_len(const kir_kernel *k);
void kir_dyn_fill(const kir_kernel *k, int64_t *dims);

/* -- The calling convention of a compiled kernel ----------------------------
** Row mode (KIR_MAP, and KIR_ROWS with more than one row): one function
**   void main(char *const *bufs, const double *scalars,
**             const int64_t *dims, int64_t lo, int64_t hi);
** bufs[i] points at buffer i's element (0, .., 0); scalars are the scalar
** arguments; dims is NULL for static kernels. [lo, hi) is a range of flat
** points (KIR_MAP) or of flat outer rows (KIR_ROWS).
**
** Split mode (KIR_ROWS with exactly one row, so one long row is shared by
** the threads): one function per pass p,
**   void pass_p(char *const *bufs, const double *scalars,
**               const int64_t *dims, const void *rowvars, void *partials,
**               int64_t lo, int64_t hi);
** REDUCE pass: [lo, hi) is a range of chunks (TENSOR_RED_CHUNK row positions
**   each); writes the chunk partials (lanes combined) to partials[c] (an
**   array of the value's dtype); the launcher combines them pairwise (the
**   canonical order) into rowvar slot p.
** STORE pass: [lo, hi) is a range of row positions.
** STORE_ROW pass: called once with [0, 1).
** rowvars is an array of 8-byte slots, slot p holding REDUCE pass p's
** result as its dtype at the slot's start.
**
** The launcher splits ranges across the thread pool in fixed chunks;
** results never depend on the split. */
typedef void (*kir_fn)(char *const *bufs, const double *scalars,
                       const int64_t *dims, int64_t lo, int64_t hi);
typedef void (*kir_pass_fn)(char *const *bufs, const double *scalars,
                            const int64_t *dims, const void *rowvars,
                            void *partials, int64_t lo, int64_t hi);

/* Does this kernel run in split mode? */
static inline bool kir_split(const kir_kernel *k)
{
  int64_t rows = 1;
  for (int d = 0; d < k->ndim; d++)
    rows *= k->size[d];
  return k->kind == KIR_ROWS && rows == 1;
}
/* Entry names: "main", or "pass0", "pass1", ... */
void kir_entry_name(int pass, char *buf, size_t len);

/* Drop size-1 dims and, when merge, fuse adjacent dims that every buffer
** walks as one (so inner loops are long and contiguous). */
void kir_collapse(kir_kernel *k, bool merge);

/* Do a and b compute the same thing, sizes and strides aside (what a
** shape-dynamic kernel takes as arguments)? */
bool kir_same_code(const kir_kernel *a, const kir_kernel *b);
/* A hash of what kir_same_code compares (equal code, equal hash): a
** table's bucket; confirm a hit with kir_same_code. */
uint64_t kir_code_hash(const kir_kernel *k);

/* Number of parallel units: points (MAP) or rows (ROWS). */
int64_t kir_units(const kir_kernel *k);

#endif
