/*
** eager.h -- the dispatcher, the eager CPU kernels and the thread pool.
** Public ops validate their arguments (tensor/infer.c), fill an eager_call
** and dispatch it; the handler registered for the winning key runs it.
*/
#ifndef TC_EAGER_H
#define TC_EAGER_H

#include "../tensor/tensor.h"
#include "../fuse/kir.h"

/* -- Calls and the dispatcher --------------------------------------------- */

/* One op call, already validated: every field a handler needs. */
typedef struct eager_call {
  tc_op op;
  const char *fn;               /* public name, for messages */
  int nin;
  tc_tensor *in[3];             /* borrowed */
  double s[2];                  /* scalar arguments (op_table[op].nsc) */
  int dim;                      /* reductions, softmax: normalized dim */
  bool keepdim;
  tc_dtype dtype;               /* result dtype */
  tc_dtype cdtype;              /* compute dtype (pointwise) */
  int ndim;                     /* result shape */
  int64_t shape[TC_MAX_DIMS];
  tensor_geom view;             /* VIEW: geometry of the result */
  tensor_geom rel;              /* VIEW: the same view taken of a
                                   contiguous tensor of in[0]'s shape
                                   (offset 0): what autograd inverts */
  tc_tensor *dst;               /* M ops: the in-place target (borrowed) */
} eager_call;

/* A handler returns a new reference, or NULL with the error set. For M ops
** it returns c->dst (no new reference) on success. */
typedef tc_tensor *(*eager_kernel)(const eager_call *c);

void eager_register(tc_key key, tc_op op, eager_kernel fn);
/* The handler registered for (key, op), or NULL. */
eager_kernel eager_lookup(tc_key key, tc_op op);
/* Run c on the highest key of (input keys | include) - exclude that has a
** handler for c->op. */
tc_tensor *eager_dispatch(const eager_call *c);
/* Run c on the highest key below `below` (a handler passing the call on,
** as autograd does after recording); not counted as a second op. */
tc_tensor *eager_redispatch(const eager_call *c, tc_key below);

/* Thread-local include and exclude key sets (PyTorch's TLS key sets);
** the global include set holds TRACE while compile mode is on. */
typedef struct {
  uint32_t include, exclude;
} eager_tls_keys;
eager_tls_keys eager_tls_get(void);
void eager_tls_set(eager_tls_keys k);
void eager_global_include(uint32_t keys, bool on);

/* -- Process state: configuration and counters ---------------------------- */

typedef struct {
  int threads;          /* TC_THREADS, default all cores */
  bool compile;         /* TC_COMPILE */
  bool stats_at_exit;   /* TC_STATS */
} eager_config;

const eager_config *eager_cfg(void);
void eager_init(void);   /* idempotent; called by every entry point */

typedef enum {
  ST_OPS, ST_REGIONS, ST_REGIONS_COMPILED, ST_REGIONS_EAGER,
  ST_KERNELS_COMPILED, ST_KERNELS_LOADED, ST_KERNELS_LAUNCHED,
  ST_GUARD_FAILURES, ST_COMPILE_FAILURES, ST_LAYOUTS_DERIVED,
  ST_LAYOUTS_BUILT, ST__MAX
} eager_stat;
/* The counters are per thread, so counting is a plain add where a locked
** one cost about 5% of a small op's time (one per op, one per launch);
** tc_stats_get sums every thread's block. A block outlives its thread
** (the next new thread takes it over, values and all). */
typedef struct eager_stat_block {
  _Atomic uint64_t v[ST__MAX];   /* written by its thread only, read by any */
  struct eager_stat_block *next;
  bool in_use;
} eager_stat_block;
extern _Thread_local eager_stat_block *eager_stat_mine;
eager_stat_block *eager_stat_claim(void);
static inline void eager_count(eager_stat s)
{
  eager_stat_block *b = eager_stat_mine ? eager_stat_mine : eager_stat_claim();
  atomic_store_explicit(
    &b->v[s], atomic_load_explicit(&b->v[s], memory_order_relaxed) + 1,
    memory_order_relaxed);
}
/* Counter s summed over all threads, since the last tc_stats_reset. */
uint64_t eager_stat_total(eager_stat s);
void eager_add_compile_ms(double ms);
/* The wall time of a stretch with a compile in flight (tc_stats). */
void eager_add_compile_wall_ms(double ms);
/* Note that a region is realized / just ran compiled (the first times
** give tc_stats.first_compiled_ms). */
void eager_note_region(void);
void eager_note_compiled_run(void);

/* -- Kernels (CPU) ---------------------------------------------------------- */

/* Convert n elements between dtypes; strides in elements (src may be 0). */
void eager_convert(tc_dtype dd, void *dst, int64_t dstride, tc_dtype sd,
                   const void *src, int64_t sstride, int64_t n);
/* Copy src (any layout) into dst (any layout, same shape), converting. */
void eager_copy_into(tc_tensor *dst, const tc_tensor *src);
/* A new contiguous tensor with t's values (dtype dt). */
tc_tensor *eager_contiguous_copy(const tc_tensor *t, tc_dtype dt);

void eager_register_cpu_pointwise(void);
void eager_register_cpu_reduce(void);
void eager_register_cpu_composite(void);
void eager_register_cpu_matmul(void);
void eager_register_cpu_misc(void);
void eager_register_cpu_half(void);
void eager_register_cpu_index(void);
/* The CUDA key (cuda.c): device storage and one-op device kernels. */
void eager_register_cuda(void);
/* t (CPU, materialized) copied to a new contiguous CUDA tensor, and back
** (t on CUDA: a new contiguous CPU tensor); NULL with the error set. */
tc_tensor *eager_cuda_from_host(const char *fn, tc_tensor *t);
tc_tensor *eager_cuda_to_host(tc_tensor *t);
/* t's values where the host can read them: a new reference to t on the
** CPU, a host copy (eager_cuda_to_host) of a device tensor. t must be
** materialized. NULL with the error set. */
tc_tensor *eager_on_host(tc_tensor *t);
/* Wait for the work queued on the device (none used: returns at once). */
int eager_cuda_sync(void);
/* The disk store for the one-op CUDA kernels. The store is in cache,
** above eager in the layering, so the kernel memo reaches it through these
** hooks, which trace (on top, where the store and the JIT backends meet)
** sets at init; unset (NULL) they cost nothing and kernels stay in memory.
**   load:  a verified cubin for k's code, compiled for arch ("sm_90"):
**          malloc'd, *len bytes with a NUL after them; NULL when absent,
**          bad (removed) or the store is off (TC_CACHE=0).
**   enter: a fresh cubin for k's code (NVRTC's, from source src, ms to
**          render and compile); failures are logged, never fatal. */
typedef struct {
  void *(*load)(const kir_kernel *k, const char *arch, size_t *len);
  void (*enter)(const kir_kernel *k, const char *arch, const void *cubin,
                size_t len, const char *src, double ms);
} eager_cuda_store;
void eager_cuda_store_set(const eager_cuda_store *hooks);

/* The random stream of tc_rand (and of every seeded op): splitmix64 of
** (seed, index), counter-based, so any element can be made independently
** and results depend on neither threads nor compile mode. */
static inline uint64_t eager_mix(uint64_t seed, uint64_t i)
{
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline double eager_uniform(uint64_t seed, uint64_t i)   /* [0, 1) */
{
  return (double)(eager_mix(seed, i) >> 11) * 0x1p-53;
}

/* Sum n contiguous values in canonical order (f32 and f64). Serial. */
float eager_sum_f32(const float *x, int64_t n);
double eager_sum_f64(const double *x, int64_t n);
float eager_max_f32(const float *x, int64_t n);   /* NaN propagates */
double eager_max_f64(const double *x, int64_t n);
/* t with dim moved innermost, as contiguous rows in dtype dt: a view when
** already so laid out, else a copy (a new reference either way). */
tc_tensor *eager_rows_of(const tc_tensor *t, int dim, tc_dtype dt);
/* Reduce t over dim (SUM, MAX or MIN) into out, whose dtype is the
** accumulation dtype; 0 or -1. */
int eager_reduce_into(tc_op op, const tc_tensor *t, int dim, tc_tensor *out);
/* Matmul: C (m x n, row-major, ldc) = op(A) @ op(B), where op(A) is m x k
** and op(B) is k x n. A is stored row-major with leading dim lda, or, when
** ta, as its transpose (k x m row-major: a column-major view); B likewise.
** C is overwritten, never read; k == 0 gives zeros (A and B unread). Runs
** on the thread pool. Results are bitwise independent of the thread count
** (gemm.h says exactly what they depend on). tc's own packed kernel, or
** the BLAS on CPUs it has no kernel for (gemm.h, "paths"). */
void eager_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc);
void eager_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const double *a, int64_t lda, const double *b,
                    int64_t ldb, double *c, int64_t ldc);

/* An epilogue: called as ep(ctx, i0, i1, j0, j1) for the tile of C rows
** [i0, i1) x columns [j0, j1). */
/* Below this many flops a GEMM runs on the calling thread (gemm.c); a
** batched matmul of GEMMs this small splits its batches across the pool
** instead (matmul.c). */
#define EAGER_GEMM_SPLIT_FLOPS (1 << 22)

typedef void (*eager_gemm_epilogue)(void *ctx, int64_t i0, int64_t i1,
                                    int64_t j0, int64_t j1);
/* eager_gemm_* with an epilogue (ep NULL: none). The tiles partition C:
** each element is in exactly one, and ep is called once per tile, right
** after that tile's values are final, on the thread that computed them
** (while they are in its cache), possibly at the same time as other
** tiles on other threads; in no particular order. So ep may read and
** rewrite its tile of C in place (an elementwise function of C, bias,
** activation, residual: the result is the same as applying it to all of
** C afterwards, bitwise) but must not touch C outside its tile. Tiles are
** at most 280 rows x 512 bytes of a row (own kernel: 128 f32 or 64 f64
** columns; 256 x 256 elements on the BLAS path). Which tiles, and which
** thread runs each, may change with the thread count (the own kernel cuts
** C for it), so an epilogue must be elementwise: then its result cannot.
** ep usually runs inside a pool job, where its own tensor_parallel calls
** run serially. */
void eager_gemm_f32_ep(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       const float *a, int64_t lda, const float *b,
                       int64_t ldb, float *c, int64_t ldc,
                       eager_gemm_epilogue ep, void *ctx);
void eager_gemm_f64_ep(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       const double *a, int64_t lda, const double *b,
                       int64_t ldb, double *c, int64_t ldc,
                       eager_gemm_epilogue ep, void *ctx);

/* The MATMUL op (c as the dispatcher gives it: in[0] @ in[1], each of at
** least 2 dims, batch dims broadcast to c's leading dims (one GEMM call per
** batch), any layouts and float dtypes) with an epilogue: returns the
** new contiguous result (one reference; NULL with the error set), and has
** called ep(ctx, out, batch, i0, i1, j0, j1) once for each tile of each
** batch's m x n matrix, as eager_gemm_*_ep promise (element (batch, i, j)
** of out is at tensor_ptr(out) + ((batch * m + i) * n + j) elements;
** 2-D: batch 0). ep may rewrite its tile of out in place, or write the
** same tile of other buffers. ep NULL: the plain MATMUL kernel. */
typedef void (*eager_matmul_epilogue)(void *ctx, tc_tensor *out,
                                      int64_t batch, int64_t i0, int64_t i1,
                                      int64_t j0, int64_t j1);
tc_tensor *eager_matmul_ep(const eager_call *c, eager_matmul_epilogue ep,
                           void *ctx);
const char *eager_gemm_backend(void);
void eager_gemm_init(void);   /* at init: the path chosen (and loaded) */

#endif
