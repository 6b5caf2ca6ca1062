/*
** tensor.h -- the ground floor: dtypes, shapes and strides, storage, tensor
** handles, views, scopes, errors and the op table. Every other module reads
** this vocabulary; this module includes nothing else of the project.
*/
#ifndef TC_TENSOR_H
#define TC_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tc.h"
#include "tune.h"

/* -- Errors ---------------------------------------------------------------- */

typedef enum {
  TC_OK = 0,
  TC_E_ARG,      /* bad argument: NULL, dim out of range, bad step */
  TC_E_SHAPE,    /* shapes do not broadcast / wrong size */
  TC_E_DTYPE,    /* unsupported dtype */
  TC_E_NOMEM,    /* out of memory */
  TC_E_DEVICE,   /* device error */
  TC_E_INTERNAL  /* an internal invariant failed */
} tc_status;

/* Set the thread-local error (printf format); returns code. */
tc_status tc_seterr(tc_status code, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
tc_status tc_errcode(void);
/* For a NULL argument: keep an error already set (the first one), else
** report "fn: argument is NULL". */
void tc_seterr_null(const char *fn);

#ifdef NDEBUG
#define TC_ASSERT(c, ...) ((void)0)
#else
#define TC_ASSERT(c, ...) \
  ((c) ? (void)0 : tensor_assert_fail(__FILE__, __LINE__, #c))
#endif
void tensor_assert_fail(const char *file, int line, const char *cond)
  __attribute__((noreturn));

/* -- Dtypes ---------------------------------------------------------------- */

extern const size_t tensor_dtype_size[TC_DTYPE__MAX];
static inline bool tensor_dtype_valid(tc_dtype dt)
{
  return (unsigned)dt < TC_DTYPE__MAX;
}
static inline bool tensor_dtype_is_half(tc_dtype dt)
{
  return dt == TC_F16 || dt == TC_BF16;
}
static inline bool tensor_dtype_is_float(tc_dtype dt)
{
  return dt == TC_F32 || dt == TC_F64 || tensor_dtype_is_half(dt);
}
/* The dtype a value of dtype dt is computed in: f32 for the storage types. */
static inline tc_dtype tensor_compute_of(tc_dtype dt)
{
  return tensor_dtype_is_half(dt) ? TC_F32 : dt;
}
/* PyTorch's promotion among tensors of equal standing (valid dtypes): the
** higher category (bool < integer < float) wins, then the wider type;
** f16 with bf16 is f32. */
extern const int8_t tensor_dtype_rank[TC_DTYPE__MAX];
static inline tc_dtype tensor_promote(tc_dtype a, tc_dtype b)
{
  if (tensor_dtype_rank[a] == tensor_dtype_rank[b] && a != b)
    return tensor_dtype_is_half(a) ? TC_F32 : a > b ? a : b;
  return tensor_dtype_rank[a] > tensor_dtype_rank[b] ? a : b;
}

/* -- Op table -------------------------------------------------------------- */

typedef enum {
#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) TC_OP_##n,
#include "ops.def"
  TC_OP__MAX
} tc_op;

typedef enum { OPK_PW, OPK_RD, OPK_VW, OPK_EX, OPK_CP, OPK_CR } op_kind;
enum { OPF_N = 0, OPF_F = 1, OPF_C = 2, OPF_M = 4, OPF_FC = OPF_F | OPF_C };
typedef enum {
  TR_SAME, TR_ARITH, TR_FLT, TR_CMP, TR_INT, TR_IDX, TR_ARG, TR_DST
} type_rule;

typedef struct {
  const char *name;
  uint8_t kind;     /* op_kind */
  uint8_t nin;      /* tensor inputs */
  uint8_t nsc;      /* scalar arguments */
  uint8_t flags;    /* OPF_* */
  uint8_t type;     /* type_rule */
  uint16_t twin;    /* tc_op */
} op_info;

extern const op_info op_table[TC_OP__MAX];

/* -- Storage and tensors --------------------------------------------------- */

enum { TC_DEV_CPU = 0, TC_DEV_CUDA = 1, TC_DEV__MAX };

/* Data of one or more tensors. Refcounted separately from tensor handles,
** so views share it. */
typedef struct tensor_storage {
  atomic_int refs;
  int device;
  size_t nbytes;
  void *data;           /* owned, from the caching allocator; or the
                           caller's memory when `external` (tc_from_blob) */
  bool external;        /* data is not ours: free calls `deleter` instead */
  void (*deleter)(void *data, void *ctx);   /* may be NULL (caller keeps) */
  void *deleter_ctx;    /* borrowed; passed to deleter */
  atomic_uint_fast64_t version;  /* bumped by every in-place write */
  uint32_t pending;     /* traced in-place writes not yet written (trace) */
  atomic_int exposed;   /* live handles the program took a raw pointer
                           through (tc_data): ops that read or write this
                           storage then run at once, as eagerly */
} tensor_storage;

/* Dispatch keys, in priority order (highest set bit wins). ORDER KEY */
typedef enum { TC_KEY_CPU = 0, TC_KEY_CUDA = 1, TC_KEY_TRACE = 2,
               TC_KEY_AUTOGRAD = 3, TC_KEY__MAX } tc_key;
#define TC_KEYSET(k) (1u << (k))

struct tc_tensor {
  atomic_int refs;      /* all references: the program's and tc's own */
  atomic_int user_refs; /* the program's: creation, tc_retain, minus
                           tc_release; a scope holds the creation one */
  uint8_t dtype;        /* tc_dtype */
  uint8_t ndim;
  uint8_t keys;         /* dispatch key set, TC_KEYSET bits */
  uint8_t kept;         /* tc_keep()ed in the innermost scope */
  uint8_t exposed;      /* tc_data() was called on it (storage->exposed) */
  uint8_t lazy_plain;   /* trace's, while lazy: the handle shows its node's
                           value as it is (no view); set when it is bound */
  uint8_t lazy_replay;  /* trace's, while lazy: a replayed op's handle (its
                           lazy is a tape's template node, trace/replay.c) */
  int32_t scope_slot;   /* index in its scope's stack, -1 if none */
  uint32_t scope_owner; /* that scope's thread (scope.c's id), 0 if none */
  uint32_t live;        /* TENSOR_LIVE; TENSOR_DEAD once freed */
  int32_t trace_refs;   /* trace's, under its lock: graph edges reading
                           this tensor; together they hold one reference
                           in refs (an edge costs no atomic) */
  int64_t numel;
  int64_t offset;       /* in elements, into storage */
  int64_t shape[TC_MAX_DIMS];
  int64_t stride[TC_MAX_DIMS];   /* in elements; 0 for broadcast dims */
  tensor_storage *storage;       /* owned ref; NULL while lazy */
  void *lazy;           /* trace's node while lazy: a ref owned by trace;
                           shape/stride/offset then index that node's
                           contiguous value (a lazy view) */
  tc_tensor *lazy_next; /* trace's list of the handles of one node */
  void *grad_meta;      /* autograd's record (owned by autograd): set on
                           tensors that require grad or have a grad_fn
                           (keys then hold TC_KEY_AUTOGRAD); else NULL */
};

/* Hooks trace sets at init, so lower layers can ask for realization
** without depending on it. Each returns 0 or -1 (error set). */
typedef struct {
  int (*realize)(tc_tensor *t);   /* t lazy, or its storage has pending
                                     writes: compute them now */
  int (*sync)(void);              /* complete every pending write */
  int (*realize_all)(void);       /* realize every lazy tensor too */
  int (*expose)(tc_tensor *t);    /* t (readable) is about to hand out a raw
                                     pointer: compute every lazy value that
                                     reads its storage now */
  void (*lock)(void);             /* hold trace's lock over many releases */
  void (*unlock)(void);
} tensor_trace_hooks;
extern tensor_trace_hooks tensor_hooks;
/* A lazy handle may be shared between threads (tc.h) and becomes
** materialized under trace's lock: trace_handle_bind sets its storage and
** offset, then publishes lazy = NULL and the keys without TC_KEY_TRACE
** (release). A thread that decides from either without that lock whether
** the tensor is still lazy reads them with these (acquire), so once it
** sees the tensor materialized it sees its storage and offset too. */
static inline void *tensor_lazy(const tc_tensor *t)
{
  return __atomic_load_n(&t->lazy, __ATOMIC_ACQUIRE);
}

static inline uint32_t tensor_keys(const tc_tensor *t)
{
  return __atomic_load_n(&t->keys, __ATOMIC_ACQUIRE);
}

/* Likewise a storage's count of pending writes: they may be written by a
** tc_sync on another thread, which then drops the count with release
** order (trace's pending_drop). */
static inline uint32_t tensor_pending(const tensor_storage *s)
{
  return __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
}

/* Make t readable (materialized, no pending writes); 0 or -1. */
static inline int tensor_make_readable(tc_tensor *t)
{
  if ((tensor_lazy(t) || (t->storage && tensor_pending(t->storage))) &&
      tensor_hooks.realize)
    return tensor_hooks.realize(t);
  return 0;
}

/* -- Configuration (config.c): the one reader of the environment ---------- */

/* Every TC_* variable, read once at first use (documented in
** docs/ARCHITECTURE.md). Booleans take 0/false/no/off and 1/true/yes/on;
** a value that is not understood gets one warning line and the default. */
typedef struct {
  bool compile;            /* TC_COMPILE: trace and compile (0) */
  int hot;                 /* TC_HOT: sightings before a compile (2) */
  int recompile_limit;     /* TC_RECOMPILE_LIMIT: variants before a
                              shape-dynamic compile (8; sooner when
                              the sizes march) */
  int node_limit;          /* TC_NODE_LIMIT: live nodes before all is
                              realized (2048) */
  bool async;              /* TC_ASYNC: compile in the background (1) */
  bool jit;                /* TC_JIT: 0 traces but never compiles (1) */
  char jit_isa[16];        /* TC_JIT_ISA: compile kernels for this x86-64
                              level (at most the CPU's); "" detects it */
  int jit_opt;             /* TC_JIT_OPT: GCC's -O level for kernels (3;
                              0 compiles about 2x faster, runs slower) */
  char gccjit[256];        /* TC_GCCJIT: the libgccjit to load (a name for
                              dlopen or a path; "": libgccjit.so.0) */
  bool jit_worker;         /* TC_JIT_WORKER: libgccjit runs in a compile
                              worker process; 0 runs it here, inline (1) */
  int compile_workers;     /* TC_COMPILE_WORKERS: compile worker processes
                              at most (0: a core each, up to 4) */
  int threads;             /* TC_THREADS (0: all cores) */
  int spin_us;             /* TC_SPIN_US: how long an idle pool thread
                              spins before it sleeps (50; 0: never) */
  bool cache;              /* TC_CACHE: the disk store (1) */
  char cache_dir[4096];    /* TC_CACHE_DIR, else $XDG_CACHE_HOME/tc, else
                              $HOME/.cache/tc; "" when none */
  uint64_t cache_max_mb;   /* TC_CACHE_MAX_MB: the store's cap (1024) */
  int64_t pool_max_mb;     /* TC_POOL_MAX_MB: allocator cache (-1: RAM/4;
                              0 caches nothing) */
  int regions_max;         /* TC_REGIONS_MAX: region table entries (4096) */
  int kernels_max;         /* TC_KERNELS_MAX: loaded kernels (1024) */
  unsigned log;            /* TC_LOG: tc_log_cat bits */
  bool debug;              /* TC_DEBUG: print plans and generated code */
  bool check_layout;       /* TC_CHECK_LAYOUT: build each shape-dynamic
                              layout again with fuse_build as well and
                              abort if it differs (tests) */
  bool stats;              /* TC_STATS: print counters at exit */
} tensor_config;

const tensor_config *tensor_cfg(void);
/* Read the environment again (tests that change it; not thread-safe). */
void tensor_config_reload(void);

/* -- Logging (TC_LOG=cat,cat,...) ------------------------------------------ */

typedef enum {
  TC_LOG_REGIONS = 1, TC_LOG_GUARDS = 2, TC_LOG_RECOMPILES = 4,
  TC_LOG_FUSION = 8, TC_LOG_COMPILE = 16, TC_LOG_CACHE = 32,
  TC_LOG_FALLBACK = 64,
  TC_LOG_ERROR = 128     /* misuse the program must hear of: always shown */
} tc_log_cat;
/* Categories enabled by TC_LOG (or by tensor_log_to). */
unsigned tensor_log_mask(void);
const char *tensor_log_cat_name(unsigned bit);
/* Milliseconds on the monotonic clock (compile times, first-run marks). */
double tensor_now_ms(void);
static inline bool tensor_log_on(tc_log_cat c) { return (tensor_log_mask() & c) != 0; }
/* Send events of categories cats to f (NULL: stderr); for tests. */
void tensor_log_to(FILE *f, unsigned cats);
/* One line "tc[cat]: ..." to stderr. */
void tensor_log(tc_log_cat c, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

/* Handle liveness, so a released handle passed back in gets an error, not
** silent garbage. Best effort: detected while the handle's memory has not
** been reused (freed handles wait in a free list; AddressSanitizer builds
** catch the rest). */
#define TENSOR_LIVE 0x7c7e11feu
#define TENSOR_DEAD 0xdeadc7c7u

/* Is t usable as an argument of public function fn? NULL keeps the first
** error of a chain (or says "argument is NULL"); a released handle says
** so. */
static inline bool tensor_arg_ok(const char *fn, const tc_tensor *t)
{
  if (t && t->live == TENSOR_LIVE)
    return true;
  if (!t)
    tc_seterr_null(fn);
  else
    tc_seterr(TC_E_ARG, "%s: tensor was already released (used after "
              "tc_release or tc_scope_end)", fn);
  return false;
}

/* Raw handle memory (per-thread free list); callers initialize it. */
tc_tensor *tensor_handle_alloc(void);
void tensor_handle_dealloc(tc_tensor *t);
/* Allocate a contiguous tensor (uninitialized data). */
tc_tensor *tensor_new(tc_dtype dt, int ndim, const int64_t *shape);
/* A contiguous tensor over the caller's memory (no copy, no allocation of
** data): deleter(data, ctx) runs once when the storage's last reference
** goes (NULL: the caller keeps ownership). data must be aligned to the
** element size; the caller checks. NULL on out of memory (error set; the
** deleter is then not called). */
tc_tensor *tensor_new_external(tc_dtype dt, int ndim, const int64_t *shape,
                               void *data,
                               void (*deleter)(void *data, void *ctx),
                               void *ctx);
/* A contiguous tensor on `device` (uninitialized data; keys: that
** device's). TC_DEV_CPU is tensor_new. */
tc_tensor *tensor_new_on(int device, tc_dtype dt, int ndim,
                         const int64_t *shape);
/* The device a tensor's data is on; a lazy tensor's will be there, as
** its key set says (trace gives a lazy handle its node's device key). */
static inline int tensor_device_of(const tc_tensor *t)
{
  if (t->storage)
    return t->storage->device;
  return t->keys & TC_KEYSET(TC_KEY_CUDA) ? TC_DEV_CUDA : TC_DEV_CPU;
}
/* A new handle over t's storage with the given geometry (a view). */
tc_tensor *tensor_new_view(const tc_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset);
/* Set by trace: frees a lazy tensor's node when its handle dies. */
extern void (*tensor_lazy_release_hook)(tc_tensor *t);
/* Set by autograd: frees t->grad_meta when its handle dies. */
extern void (*tensor_grad_release_hook)(tc_tensor *t);
/* References tc itself holds (views of work tensors, graph leaves): never
** the program's, so they do not touch scope bookkeeping. */
/* Free a handle whose refcount reached zero (scope bookkeeping included). */
void tensor_free(tc_tensor *t);
/* (Inline: every op takes and drops a few.) */
static inline tc_tensor *tensor_ref(tc_tensor *t)
{
  if (t)
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}
/* The last reference is the only one: no other thread holds one to take
** another, so it is dropped with a load instead of a read-modify-write
** (an uncontended atomic costs as much as the rest of releasing a small
** tensor). The acquire load orders the free after other threads' earlier
** releases, as the acq_rel decrement does. */
static inline void tensor_unref(tc_tensor *t)
{
  if (!t)
    return;
  if (atomic_load_explicit(&t->refs, memory_order_acquire) == 1) {
    atomic_store_explicit(&t->refs, 0, memory_order_relaxed);
    tensor_free(t);
  } else if (atomic_fetch_sub_explicit(&t->refs, 1,
                                       memory_order_acq_rel) == 1) {
    tensor_free(t);
  }
}

static inline void *tensor_ptr(const tc_tensor *t)
{
  return (char *)t->storage->data
         + t->offset * (int64_t)tensor_dtype_size[t->dtype];
}
bool tensor_is_contiguous(const tc_tensor *t);
/* Validate a user shape: 0 <= ndim <= TC_MAX_DIMS, sizes >= 0, numel fits
** in int64 and in memory. Returns numel, or -1 with the error set. */
int64_t tensor_check_shape(const char *fn, int ndim, const int64_t *shape);
/* Row-major strides of shape (a size 0 or 1 counts as 1). Inline: a lazy
** handle is made on every traced op. */
static inline void tensor_contiguous_strides(int ndim, const int64_t *shape,
                                             int64_t *stride)
{
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    stride[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1;
  }
}
static inline int64_t tensor_shape_numel(int ndim, const int64_t *shape)
{
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  return n;
}
/* Normalize a possibly negative dim against ndim; -1 with error if bad. */
int tensor_wrap_dim(const char *fn, int dim, int ndim);
/* Do a and b's storages overlap in memory? (same storage object) */
static inline bool tensor_shares_storage(const tc_tensor *a,
                                         const tc_tensor *b)
{
  return a->storage && a->storage == b->storage;
}
bool tensor_same_view(const tc_tensor *a, const tc_tensor *b);

/* -- The caching allocator (principle 11) ---------------------------------- */

void *tensor_alloc(size_t nbytes);     /* 64-byte aligned; NULL on failure */
void tensor_free_block(void *p, size_t nbytes);
void tensor_alloc_stats(uint64_t *live, uint64_t *hits, uint64_t *misses);
void tensor_alloc_trim(void);          /* return cached blocks to the OS */
/* Grow the array *arr of *cap elements of esz bytes (doubling, 16 at
** least) to hold need; 0, or -1 (out of memory; *arr unchanged). */
int tensor_grow(void **arr, int *cap, int need, size_t esz);
void tensor_alloc_reset_stats(void);

/* -- Device memory: ops a backend registers --------------------------------
** The ground floor knows no device API. The module that drives a device
** (eager, from jit_cuda, at init) registers how its memory is allocated,
** freed and copied; storage on that device uses them. */
typedef struct {
  /* *p = a block of nbytes (NULL when nbytes is 0); 0 or -1, error set */
  int (*alloc)(void **p, size_t nbytes);
  void (*free)(void *p, size_t nbytes);     /* nbytes: as allocated */
  /* between this device and the host (to_device) or within it (both
  ** device addresses, when dev_to_dev); 0 or -1 with the error set */
  int (*to_device)(void *dst, const void *src, size_t nbytes);
  int (*to_host)(void *dst, const void *src, size_t nbytes);
  int (*dev_to_dev)(void *dst, const void *src, size_t nbytes);
} tensor_device_ops;
extern const tensor_device_ops *tensor_device[TC_DEV__MAX];
void tensor_device_register(int device, const tensor_device_ops *ops);

/* -- Scopes ---------------------------------------------------------------- */

/* Register a new tensor with the calling thread's innermost open scope
** (no-op if none). */
void tensor_scope_track(tc_tensor *t);
/* The program dropped its last reference to tracked tensor t. On the
** scope's own thread its slot is cleared and true returned (the caller
** frees t as usual); on another thread false: the scope's slot keeps t
** alive (the caller's reference passes to it) until the scope ends. */
bool tensor_scope_forget(tc_tensor *t);

/* -- Shape inference (infer.c): the checks every op makes at its call ------ */

/* Broadcast shapes of n tensors into out; -1 with a message naming fn. */
int tensor_broadcast(const char *fn, int n, const tc_tensor *const *ts,
                     int *ndim, int64_t *shape);
/* Result dtype of op for the given inputs and scalar arguments s (NULL
** when the op has none), or TC_DTYPE__MAX with the error set. */
tc_dtype tensor_result_dtype(const char *fn, tc_op op, int n,
                             const tc_tensor *const *ts, const double *s);
/* The dtype a pointwise op computes in (comparisons: the promoted inputs). */
tc_dtype tensor_compute_dtype(tc_op op, int n, const tc_tensor *const *ts,
                              const double *s, tc_dtype result);
/* The three above for a pointwise op's call, in one pass when its inputs
** share a float dtype and a shape (most calls): 0, or -1 with the error
** set. */
int tensor_infer_pointwise(const char *fn, tc_op op, int n,
                           const tc_tensor *const *ts, const double *s,
                           int *ndim, int64_t *shape, tc_dtype *dtype,
                           tc_dtype *cdtype);

/* -- Geometry of views (view.c): pure functions, used by eager and trace -- */

typedef struct {
  int ndim;
  int64_t shape[TC_MAX_DIMS];
  int64_t stride[TC_MAX_DIMS];
  int64_t offset;
} tensor_geom;

void tensor_geom_of(const tc_tensor *t, tensor_geom *g);
/* Each returns 0, or -1 with the error set (naming fn). reshape returns 1
** when the strides do not allow a view (a copy is needed). */
int tensor_geom_reshape(const char *fn, tensor_geom *g, int ndim,
                        const int64_t *shape);
int tensor_geom_permute(const char *fn, tensor_geom *g, int ndim,
                        const int *perm);
int tensor_geom_transpose(const char *fn, tensor_geom *g, int d0, int d1);
int tensor_geom_slice(const char *fn, tensor_geom *g, int dim, int64_t start,
                      int64_t end, int64_t step);
int tensor_geom_expand(const char *fn, tensor_geom *g, int ndim,
                       const int64_t *shape);
int tensor_geom_unsqueeze(const char *fn, tensor_geom *g, int dim);
int tensor_geom_squeeze(const char *fn, tensor_geom *g, int dim);

/* -- Thread pool (pool.c): shared by eager kernels and compiled ones ------- */

/* The threads tc runs on: TC_THREADS, else every online core. */
int tensor_threads(void);
/* Run fn over [0, n) split into at most tensor_threads() contiguous
** ranges. Ranges shorter than grain run on the calling thread. fn never
** sees an empty range. The split must not change results: callers that
** reduce use fixed chunks (the canonical order below). */
typedef void (*tensor_range_fn)(void *ctx, int64_t lo, int64_t hi);
void tensor_parallel(int64_t n, int64_t grain, tensor_range_fn fn, void *ctx);

/* -- The canonical reduction order (reduce_order.c, principle 2) ----------
** Shared by every kernel that sums, eager or compiled on any backend:
** chunks of TENSOR_RED_CHUNK elements; within a chunk TENSOR_RED_LANES lane
** accumulators (element i goes to lane i % TENSOR_RED_LANES, starting from
** the identity, +0 for sums), combined by halving (lane j = lane j (+)
** lane j + w, for w = LANES/2 .. 1); chunk partials combined pairwise by
** levels (p[i] = p[2i] (+) p[2i+1], an odd last one carried up). */
#define TENSOR_RED_LANES 16
#define TENSOR_RED_CHUNK 4096
/* The chunks of a row of n elements: at least 1 (an empty row has one
** empty chunk, which yields the identity). */
static inline int64_t tensor_red_chunks(int64_t n)
{
  return n > 0 ? (n + TENSOR_RED_CHUNK - 1) / TENSOR_RED_CHUNK : 1;
}
/* The combines: sums wrap on integers; max and min propagate NaN (x wins
** when it is NaN or larger/smaller, as torch.maximum). */
#define TENSOR_COMB_ADD(x, y)  ((x) + (y))
#define TENSOR_COMB_ADDW(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define TENSOR_COMB_MAX(x, y)  (((x) > (y) || (x) != (x)) ? (x) : (y))
#define TENSOR_COMB_MIN(x, y)  (((x) < (y) || (x) != (x)) ? (x) : (y))
/* The reductions that exist, one X per (kind, dtype): X(kind, dtype, C
** type, name, combine, identity); kind 0 sum, 1 max, 2 min (ORDER RED:
** kir_red's order). Sums exist for f32, f64 and i64 (narrower integers sum
** in i64); max and min for f32, f64, i32, i64 and bool. Eager's chunk
** kernels and the combine below are both expanded from it. */
#define TENSOR_RED_CASES(X)                                                  \
  X(0, TC_F32, float, sum_f32, TENSOR_COMB_ADD, 0.0f)                        \
  X(0, TC_F64, double, sum_f64, TENSOR_COMB_ADD, 0.0)                        \
  X(0, TC_I64, int64_t, sum_i64, TENSOR_COMB_ADDW, 0)                        \
  X(1, TC_F32, float, max_f32, TENSOR_COMB_MAX, -INFINITY)                   \
  X(1, TC_F64, double, max_f64, TENSOR_COMB_MAX, -INFINITY)                  \
  X(1, TC_I32, int32_t, max_i32, TENSOR_COMB_MAX, INT32_MIN)                 \
  X(1, TC_I64, int64_t, max_i64, TENSOR_COMB_MAX, INT64_MIN)                 \
  X(1, TC_BOOL, uint8_t, max_b8, TENSOR_COMB_MAX, 0)                         \
  X(2, TC_F32, float, min_f32, TENSOR_COMB_MIN, INFINITY)                    \
  X(2, TC_F64, double, min_f64, TENSOR_COMB_MIN, INFINITY)                   \
  X(2, TC_I32, int32_t, min_i32, TENSOR_COMB_MIN, INT32_MAX)                 \
  X(2, TC_I64, int64_t, min_i64, TENSOR_COMB_MIN, INT64_MAX)                 \
  X(2, TC_BOOL, uint8_t, min_b8, TENSOR_COMB_MIN, 1)
#define TENSOR_RED_KEY(kind, dt) ((kind) * TC_DTYPE__MAX + (dt))
/* Combine m chunk partials p (of dtype dt) in the canonical pairwise order
** into *out, for a (kind, dtype) of TENSOR_RED_CASES. Returns -1 for a
** pair it does not do. */
int tensor_combine(int kind, tc_dtype dt, void *p, int64_t m, void *out);
/* Sum chunk partials in place, canonical pairwise order. */
float tensor_combine_f32(float *p, int64_t m);
double tensor_combine_f64(double *p, int64_t m);

/* -- The canonical scan order (reduce_order.c, principle 2) ---------------
** Shared by every inclusive sum along a row (cumsum, multinomial's running
** sums), eager or on a device: the row is cut into segments of
** TENSOR_SCAN_SEG positions; each segment is folded in order from the
** identity (L_i, the fold up to position i within its segment), and the
** carry (C, the segments before folded in order: C = C (+) T after each
** segment, T its total, from the identity) is combined in front:
** out[i] = C (+) L_i. A row of one segment is the plain running sum. One
** thread walks it in one pass; a device folds the segments in parallel,
** then the carries in order, then writes each segment (jit_cuda). */
#define TENSOR_SCAN_SEG 256
/* out[0..n): the scan of x[0..n) in that order, sums wrapping on
** integers. */
void tensor_scan_f32(const float *x, float *out, int64_t n);
void tensor_scan_f64(const double *x, double *out, int64_t n);
void tensor_scan_i64(const int64_t *x, int64_t *out, int64_t n);
/* The same scan down ncols <= TENSOR_SCAN_COLS columns side by side: x and
** out hold n rows `inner` elements apart, column j scanned on its own (a
** cumsum along a dim that is not the last, vectorized across the columns,
** reading and writing rows in order). */
#define TENSOR_SCAN_COLS 1024
void tensor_scan_cols_f32(const float *x, float *out, int64_t n,
                          int64_t inner, int64_t ncols);
void tensor_scan_cols_f64(const double *x, double *out, int64_t n,
                          int64_t inner, int64_t ncols);
void tensor_scan_cols_i64(const int64_t *x, int64_t *out, int64_t n,
                          int64_t inner, int64_t ncols);

/* -- Debug ----------------------------------------------------------------- */

void tensor_dump(const tc_tensor *t, FILE *out);

#endif
