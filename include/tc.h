/*
** tc.h -- the public API of tc, a tracing tensor runtime with kernel fusion.
**
** Eager by default: every op runs when it is called, as in PyTorch. With
** TC_COMPILE=1 (or tc_compile_set(true)) the same program is traced, fused
** and JIT-compiled; results stay bitwise equal on CPU.
**
** Conventions
**   - Every function returning tc_tensor * returns a NEW reference (release it
**     with tc_release) or NULL on error. Tensor arguments are borrowed.
**   - On error a thread-local message is set (tc_last_error()). An op given a
**     NULL tensor returns NULL and keeps the first error, so calls can be
**     chained and checked once at the end. Inputs are never modified by a
**     failing op, and no op aborts the process on bad input.
**   - Successful calls do not clear the error: check the return value first,
**     as with errno. tc_clear_error() resets it.
**   - Shapes are (int ndim, const int64_t *shape); TC_SHAPE(2, 3) expands to
**     `2, (const int64_t[]){2, 3}`.
**   - Dims may be negative (counting from the end), as in PyTorch.
**   - A released tensor passed back in gets an error ("tensor was already
**     released"), and a release of more references than the program holds
**     is refused with a message on stderr (detected while the handle's
**     memory has not been reused; AddressSanitizer builds catch the rest).
**
** Threads
**   - Tensors may be shared between threads in both modes: any thread may
**     read a tensor, use it as an input, retain it and release it, whichever
**     thread made it (lazy tensors of compile mode included).
**   - Writing a tensor (an in-place op, or raw writes through tc_data) while
**     another thread reads or writes the same storage is a data race, as in
**     PyTorch: order such accesses yourself (a mutex, a join).
**   - Per thread: the last error, and scopes. A scope manages the tensors
**     the API returned to its own thread; another thread may release one of
**     them early (the scope then lets it go when it ends). A thread that
**     exits with scopes open ends them.
**   - Process-wide: compile mode (tc_compile_set, TC_COMPILE), statistics,
**     the region and kernel caches, and pending in-place writes: tc_sync()
**     completes every pending write, whichever thread made it, and a write
**     made on a thread that then exits is never lost.
**   - In compile mode one lock orders recording and realization across
**     threads: programs with several threads are correct, but their traced
**     ops and compiled regions do not run concurrently (each kernel still
**     uses tc's own thread pool, TC_THREADS).
*/
#ifndef TC_H
#define TC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TC_BUILDING) && defined(__GNUC__)
#define TC_API __attribute__((visibility("default")))
#else
#define TC_API
#endif

#define TC_MAX_DIMS 8

/* -- Types ----------------------------------------------------------------- */

typedef struct tc_tensor tc_tensor;   /* opaque, refcounted handle */

/* Promotion follows PyTorch: bool < integers < floats, then the wider type;
** f16 with bf16 is f32. TC_F16 (IEEE half) and TC_BF16 (bfloat16) are
** storage types: ops compute in f32 and round to nearest even when they
** store; C data of them is uint16_t bits. */
typedef enum {
  TC_BOOL,
  TC_I32,
  TC_I64,
  TC_F32,
  TC_F64,
  TC_F16,
  TC_BF16,
  TC_DTYPE__MAX
} tc_dtype;

/* Counters; see tc_stats_get(). All are per process. */
typedef struct {
  uint64_t ops;               /* ops dispatched */
  uint64_t regions;           /* regions realized (compile mode) */
  uint64_t regions_compiled;  /* ... run through compiled kernels */
  uint64_t regions_eager;     /* ... run by eager kernels */
  uint64_t kernels_compiled;  /* JIT compiles in this process */
  uint64_t kernels_loaded;    /* kernels loaded from the disk store */
  uint64_t kernels_launched;  /* kernel launches, eager and compiled */
  uint64_t guard_failures;
  uint64_t compile_failures;
  double compile_ms;          /* total JIT compile time */
  double first_compiled_ms;   /* from the first region realized to the end
                                 of the first one run compiled (0: none) */
  uint64_t bytes_allocated;   /* bytes currently held by live storages */
  uint64_t pool_hits;         /* allocations served from the caching pool */
  uint64_t pool_misses;       /* allocations that went to the system */
  uint64_t layouts_derived;   /* a shape-dynamic region's sizes and strides
                                 for new shapes, derived from its plan */
  uint64_t layouts_built;     /* ... planned again (the new sizes relate
                                 otherwise than the plan's did) */
  double compile_wall_ms;     /* wall time with a JIT compile in flight:
                                 compile_ms counts compiles running side by
                                 side (TC_COMPILE_WORKERS) once each, this
                                 counts the time once */
} tc_stats;

#define TC_SHAPE(...) \
  (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
  (const int64_t[]){__VA_ARGS__}

/* -- Lifetime and scopes --------------------------------------------------- */

TC_API tc_tensor *tc_retain(tc_tensor *t);   /* returns t; NULL-safe */
TC_API void tc_release(tc_tensor *t);        /* NULL-safe */

/* A scope owns every tensor created on this thread after its mark.
** tc_scope_end(mark) releases them all except those passed to tc_keep(),
** which move to the enclosing scope (or to the caller when none is open).
** Releasing a scoped tensor yourself before the scope ends is allowed, on
** any thread. Ending an outer scope ends the scopes opened inside it; a
** mark of no open scope is an error (nothing is released). A thread that
** exits with scopes open ends them. */
TC_API size_t tc_scope_begin(void);
TC_API void tc_scope_end(size_t mark);
TC_API tc_tensor *tc_keep(tc_tensor *t);     /* returns t */

/* -- Creation (CPU) -------------------------------------------------------- */

TC_API tc_tensor *tc_empty(tc_dtype dt, int ndim, const int64_t *shape);
TC_API tc_tensor *tc_zeros(tc_dtype dt, int ndim, const int64_t *shape);
TC_API tc_tensor *tc_ones(tc_dtype dt, int ndim, const int64_t *shape);
TC_API tc_tensor *tc_full(tc_dtype dt, int ndim, const int64_t *shape,
                          double value);
/* 1-D [start, start+step, ...) below end (above end for negative step). */
TC_API tc_tensor *tc_arange(tc_dtype dt, double start, double end,
                            double step);
/* Uniform [0, 1) and standard normal; deterministic for a given seed. */
TC_API tc_tensor *tc_rand(tc_dtype dt, int ndim, const int64_t *shape,
                          uint64_t seed);
TC_API tc_tensor *tc_randn(tc_dtype dt, int ndim, const int64_t *shape,
                           uint64_t seed);
/* Copies nbytes = numel * element size from data (C order); TC_F16 and
** TC_BF16 data are uint16_t bit patterns (as tc_copy_to writes them). */
TC_API tc_tensor *tc_from_data(tc_dtype dt, int ndim, const int64_t *shape,
                               const void *data, size_t nbytes);

/* Wraps the caller's memory (C order) without copying, as torch::from_blob.
** deleter(data, ctx) runs exactly once, when the last reference to the
** storage is gone (views and compile mode's pending readers included), on
** whichever thread drops it; it must not call tc. A NULL deleter leaves
** ownership with the caller, whose memory must outlive every such tensor.
** In-place ops write into data. data must be aligned to the element size
** (bool bytes 0 or 1; f16 and bf16 are uint16_t bits). On error (NULL) the
** deleter is not called. */
TC_API tc_tensor *tc_from_blob(tc_dtype dt, int ndim, const int64_t *shape,
                               void *data,
                               void (*deleter)(void *data, void *ctx),
                               void *ctx);

/* -- Reading (realization points) ----------------------------------------- */

/* Copy t in C order into dst; nbytes must equal numel * element size. */
TC_API int tc_copy_to(tc_tensor *t, void *dst, size_t nbytes);
/* The single element of a one-element tensor, converted to double. */
TC_API int tc_item(tc_tensor *t, double *out);
/* Pointer to t's data (C order), valid while t lives: reads see every
** earlier op, and raw writes are seen by every later op, in compile mode
** too: while t lives, ops that read or write its storage run at once, as
** eagerly, so no lazy op runs before or after a raw access it should not.
** To keep compiled regions fused around such a tensor, take the pointer
** through a short-lived alias (tc_to(t, "cpu")) and release it when done.
** NULL with an error for a non-contiguous view (its elements are not one
** array; tc_contiguous copies them). */
TC_API void *tc_data(tc_tensor *t);
TC_API int tc_realize(tc_tensor *t);
/* Completes every pending in-place write and, when the program has used a
** CUDA device, waits for the work queued there (CUDA ops are launched on
** one stream and return before it finishes, like PyTorch's; reading
** values back waits by itself). */
TC_API int tc_sync(void);

/* -- Metadata -------------------------------------------------------------- */

TC_API int tc_ndim(const tc_tensor *t);                /* -1 on NULL */
TC_API int64_t tc_size(const tc_tensor *t, int dim);   /* -1 on error */
TC_API int64_t tc_stride(const tc_tensor *t, int dim); /* in elements */
TC_API int64_t tc_numel(const tc_tensor *t);           /* -1 on NULL */
TC_API tc_dtype tc_dtype_of(const tc_tensor *t);       /* TC_DTYPE__MAX on NULL */
TC_API bool tc_is_contiguous(const tc_tensor *t);
TC_API const char *tc_dtype_name(tc_dtype dt);
TC_API size_t tc_dtype_size(tc_dtype dt);              /* 0 if invalid */
/* The dtype binary ops produce (PyTorch's promotion, see docs/ARCHITECTURE.md, "Type promotion"). */
TC_API tc_dtype tc_promote(tc_dtype a, tc_dtype b);

/* -- Elementwise (NumPy broadcasting, PyTorch type promotion) -------------- */

TC_API tc_tensor *tc_neg(tc_tensor *a);
TC_API tc_tensor *tc_abs(tc_tensor *a);
TC_API tc_tensor *tc_exp(tc_tensor *a);
TC_API tc_tensor *tc_log(tc_tensor *a);
TC_API tc_tensor *tc_sqrt(tc_tensor *a);
TC_API tc_tensor *tc_rsqrt(tc_tensor *a);
TC_API tc_tensor *tc_sin(tc_tensor *a);
TC_API tc_tensor *tc_cos(tc_tensor *a);
TC_API tc_tensor *tc_tanh(tc_tensor *a);
TC_API tc_tensor *tc_sigmoid(tc_tensor *a);
TC_API tc_tensor *tc_relu(tc_tensor *a);
TC_API tc_tensor *tc_gelu(tc_tensor *a);      /* tanh approximation */
/* Exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)) (torch's approximate='none'). */
TC_API tc_tensor *tc_gelu_erf(tc_tensor *a);
TC_API tc_tensor *tc_silu(tc_tensor *a);
TC_API tc_tensor *tc_expm1(tc_tensor *a);     /* e^x - 1, accurate near 0 */
TC_API tc_tensor *tc_log1p(tc_tensor *a);     /* log(1 + x), accurate near 0 */
TC_API tc_tensor *tc_erf(tc_tensor *a);
/* log(1 + e^x), and x itself where x > 20 (torch's beta 1, threshold 20). */
TC_API tc_tensor *tc_softplus(tc_tensor *a);
/* Rounding to integral values (an integer tensor is returned as a new
** tensor of the same values; bool is an error). tc_round rounds half to
** even, as torch.round. */
TC_API tc_tensor *tc_floor(tc_tensor *a);
TC_API tc_tensor *tc_ceil(tc_tensor *a);
TC_API tc_tensor *tc_round(tc_tensor *a);
TC_API tc_tensor *tc_trunc(tc_tensor *a);

TC_API tc_tensor *tc_add(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_sub(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_mul(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_div(tc_tensor *a, tc_tensor *b);   /* true division */
TC_API tc_tensor *tc_pow(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_maximum(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_minimum(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_eq(tc_tensor *a, tc_tensor *b);    /* -> TC_BOOL */
TC_API tc_tensor *tc_ne(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_lt(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_le(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_gt(tc_tensor *a, tc_tensor *b);
TC_API tc_tensor *tc_ge(tc_tensor *a, tc_tensor *b);
/* cond ? a : b, elementwise; cond is converted to bool. */
TC_API tc_tensor *tc_where(tc_tensor *cond, tc_tensor *a, tc_tensor *b);
/* mask ? value : a, elementwise (mask a TC_BOOL tensor broadcast with a),
** in a's dtype; a value an integer or bool a cannot hold (NaN, infinite,
** out of range) is an error; a fractional one is truncated, as in torch. */
TC_API tc_tensor *tc_masked_fill(tc_tensor *a, tc_tensor *mask, double value);
/* The lower (tril) or upper (triu) triangle of the last two dims, the rest
** zero: element (i, j) is kept when j - i <= k (tril) or j - i >= k (triu);
** k = 0 is the main diagonal, k > 0 above it. a's dtype; at least 2-D. */
TC_API tc_tensor *tc_tril(tc_tensor *a, int64_t k);
TC_API tc_tensor *tc_triu(tc_tensor *a, int64_t k);
TC_API tc_tensor *tc_clamp(tc_tensor *a, double lo, double hi);
TC_API tc_tensor *tc_cast(tc_tensor *a, tc_dtype dt);

/* Scalars are doubles. A float tensor keeps its dtype. With an integer or
** bool tensor, a whole-number scalar acts like a Python int (the integer
** dtype is kept; bool becomes i64) and any other like a Python float (the
** result is f32). Division and pow always give a float dtype. */
TC_API tc_tensor *tc_add_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_sub_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_mul_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_div_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_pow_scalar(tc_tensor *a, double s);
/* Reversed operands: s - a and s / a. */
TC_API tc_tensor *tc_rsub_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_rdiv_scalar(tc_tensor *a, double s);
/* Comparisons with a scalar -> TC_BOOL, computed in a's dtype (in f32 for
** an integer or bool tensor and a fractional scalar). */
TC_API tc_tensor *tc_eq_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_ne_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_lt_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_le_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_gt_scalar(tc_tensor *a, double s);
TC_API tc_tensor *tc_ge_scalar(tc_tensor *a, double s);

/* -- Reductions ------------------------------------------------------------ */

TC_API tc_tensor *tc_sum(tc_tensor *a, int dim, bool keepdim);
TC_API tc_tensor *tc_mean(tc_tensor *a, int dim, bool keepdim);
TC_API tc_tensor *tc_max(tc_tensor *a, int dim, bool keepdim);
TC_API tc_tensor *tc_min(tc_tensor *a, int dim, bool keepdim);
/* Index (TC_I64) of the first maximum / minimum along dim; a NaN counts as
** both, so the first NaN's index is returned, as in PyTorch. */
TC_API tc_tensor *tc_argmax(tc_tensor *a, int dim, bool keepdim);
TC_API tc_tensor *tc_argmin(tc_tensor *a, int dim, bool keepdim);
TC_API tc_tensor *tc_sum_all(tc_tensor *a);                       /* 0-d */
/* Variance sum((a - mean)^2) / max(0, n - correction) over dim, as
** torch.var (correction 1: unbiased; 0: population), computed in two passes
** (mean, then squared deviations); n - correction <= 0 gives inf or NaN, as
** division by zero does. tc_std is its square root. Float tensors only. */
TC_API tc_tensor *tc_var(tc_tensor *a, int dim, double correction,
                         bool keepdim);
TC_API tc_tensor *tc_std(tc_tensor *a, int dim, double correction,
                         bool keepdim);
/* Reductions over the ndims dims listed in dims (negative ones count from
** the end; in any order; a dim listed twice is an error), as one reduction
** of all the reduced elements together; keepdim keeps each as size 1. */
TC_API tc_tensor *tc_sum_dims(tc_tensor *a, int ndims, const int *dims,
                              bool keepdim);
TC_API tc_tensor *tc_mean_dims(tc_tensor *a, int ndims, const int *dims,
                               bool keepdim);
TC_API tc_tensor *tc_var_dims(tc_tensor *a, int ndims, const int *dims,
                              double correction, bool keepdim);
TC_API tc_tensor *tc_std_dims(tc_tensor *a, int ndims, const int *dims,
                              double correction, bool keepdim);

/* Inclusive cumulative sum along dim; same shape as a. The order, on
** every device: segments of 256 positions, each summed in order from 0,
** with the sum of the segments before (summed in order) added in front
** (a row of at most 256 is the plain running sum; docs/NUMERICS.md).
** Integers and bool accumulate in (and return) TC_I64, as torch.cumsum. */
TC_API tc_tensor *tc_cumsum(tc_tensor *a, int dim);

/* -- Composites ------------------------------------------------------------ */

TC_API tc_tensor *tc_softmax(tc_tensor *a, int dim);
TC_API tc_tensor *tc_log_softmax(tc_tensor *a, int dim);
/* Over the last dim; gamma and beta have that dim's size, or may be NULL. */
TC_API tc_tensor *tc_layer_norm(tc_tensor *x, tc_tensor *gamma,
                                tc_tensor *beta, double eps);

/* -- Matmul ---------------------------------------------------------------- */

/* torch.matmul: [..., m, k] @ [..., k, n] -> [..., m, n], the batch dims
** (all but the last two, any number) broadcasting as in NumPy; a 1-D a is
** a row [1, k] and a 1-D b a column [k, 1], that dim then removed from the
** result (1-D @ 1-D is a 0-d dot product). Floating after promotion (f16
** and bf16 are computed in f32 and rounded once to the result dtype).
** Each element is one in-order chain over k (docs/ARCHITECTURE.md). */
TC_API tc_tensor *tc_matmul(tc_tensor *a, tc_tensor *b);

/* -- Joining, indexing and sampling ---------------------------------------- */

/* The n tensors joined along dim (torch.cat): sizes equal except in dim,
** dtypes promoted; a 1-D tensor of size 0 is skipped (torch's legacy
** rule). Always a new tensor, even for n == 1. */
TC_API tc_tensor *tc_cat(tc_tensor **ts, int n, int dim);
/* The n tensors, all of one shape, stacked along a new dim (torch.stack). */
TC_API tc_tensor *tc_stack(tc_tensor **ts, int n, int dim);
/* a's slices along dim at index (0-d or 1-D, i32 or i64). Index values are
** read at the call (a lazy index is computed then): one outside [0, size)
** is an error naming it, in eager and compiled mode alike. */
TC_API tc_tensor *tc_index_select(tc_tensor *a, int dim, tc_tensor *index);
/* Rows of weight [rows, dim] at indices (i32 or i64, any shape): the
** result is indices.shape + [dim]; a bad index is an error as above. */
TC_API tc_tensor *tc_embedding(tc_tensor *weight, tc_tensor *indices);
/* out[i][j][k] = a[index[i][j][k]][j][k] for dim 0 (torch.gather): index
** has a's rank and at most a's sizes outside dim; the result its shape. */
TC_API tc_tensor *tc_gather(tc_tensor *a, int dim, tc_tensor *index);
/* A copy of a with src[i][j][k] added at [index[i][j][k]][j][k] (dim 0),
** in C order of index (torch.scatter_add). src has a's dtype (not bool);
** index has a's rank and at most src's sizes, and a's outside dim.
** tc_scatter_add_ writes the result into a (0, or -1 with a unchanged). */
TC_API tc_tensor *tc_scatter_add(tc_tensor *a, int dim, tc_tensor *index,
                                 tc_tensor *src);
TC_API int tc_scatter_add_(tc_tensor *a, int dim, tc_tensor *index,
                           tc_tensor *src);
/* The k largest (or smallest) values along dim and their i64 indices
** (either out pointer may be NULL). Ties go to the lower index; NaN counts
** as larger than any number. sorted: best first; else in index order.
** Returns 0, or -1 with nothing written. */
TC_API int tc_topk(tc_tensor *a, int64_t k, int dim, bool largest,
                   bool sorted, tc_tensor **values, tc_tensor **indices);
/* n i64 category indices drawn per row of probs (1-D [m] -> [n], 2-D
** [r, m] -> [r, n]; weights finite, >= 0, not all 0; need not sum to 1).
** Draw j of row r uses tc_rand's stream element r * n + j for the seed, so
** results are deterministic: it is the first category whose running sum
** of the weights (in f64, in tc_cumsum's order) exceeds that uniform times
** the row's total. Without replacement a category is drawn once
** (n may not exceed a row's nonzero weights). */
TC_API tc_tensor *tc_multinomial(tc_tensor *probs, int64_t n,
                                 bool replacement, uint64_t seed);
/* train: each element is zeroed with probability p (0 <= p <= 1) and the
** rest scaled by 1 / (1 - p); element i is dropped when element i of
** tc_rand(dtype of a, a's shape, seed) is < p. Pointwise, so it fuses,
** and equal in eager and compiled mode. !train: tc_contiguous(a). */
TC_API tc_tensor *tc_dropout(tc_tensor *a, double p, bool train,
                             uint64_t seed);

/* -- Views (never copy) ---------------------------------------------------- */

/* One dim may be -1 (inferred). Copies only when the strides do not allow a
** view (like torch.reshape); tc_view-like strictness is not offered. */
TC_API tc_tensor *tc_reshape(tc_tensor *a, int ndim, const int64_t *shape);
TC_API tc_tensor *tc_permute(tc_tensor *a, int ndim, const int *perm);
TC_API tc_tensor *tc_transpose(tc_tensor *a, int d0, int d1);
/* Python's a[start:end:step] along dim; step > 0; start/end clamp. */
TC_API tc_tensor *tc_slice(tc_tensor *a, int dim, int64_t start, int64_t end,
                           int64_t step);
/* Consecutive pieces of a along dim, as views: tc_split gives pieces of
** `size` (the last may be shorter), tc_chunk at most `chunks` pieces of
** ceil(n / chunks) each (so possibly fewer, as torch.chunk); a dim of size
** 0 gives one empty piece. The new handles go to out (room for max_out;
** tc_chunk: for `chunks`); returns their number, or -1 with the error set
** and nothing written. */
TC_API int tc_split(tc_tensor *a, int64_t size, int dim, tc_tensor **out,
                    int max_out);
TC_API int tc_chunk(tc_tensor *a, int chunks, int dim, tc_tensor **out);
/* Size-1 dims broadcast to the new size (stride 0); -1 keeps a size. */
TC_API tc_tensor *tc_expand(tc_tensor *a, int ndim, const int64_t *shape);
TC_API tc_tensor *tc_unsqueeze(tc_tensor *a, int dim);
/* dim of size 1 removed; dim == TC_ALL_DIMS removes every size-1 dim. */
#define TC_ALL_DIMS (-128)
TC_API tc_tensor *tc_squeeze(tc_tensor *a, int dim);
/* A new handle on a's data when a is already contiguous (no copy), else a
** contiguous copy. Either way a new reference of its own. */
TC_API tc_tensor *tc_contiguous(tc_tensor *a);

/* -- In-place (write through views into the shared storage) ---------------- */

/* Each returns 0, or -1 with dst unchanged. src broadcasts to dst's shape
** (dst itself never broadcasts). The op computes in the promoted dtype and
** the result is cast to dst's dtype, as in PyTorch: a result of a higher
** category (bool < integer < float) than dst is an error, except for
** tc_copy_, which casts anything. Writes go through views: every tensor
** sharing dst's storage sees them. */
TC_API int tc_copy_(tc_tensor *dst, tc_tensor *src);
TC_API int tc_add_(tc_tensor *dst, tc_tensor *src);
TC_API int tc_sub_(tc_tensor *dst, tc_tensor *src);
TC_API int tc_mul_(tc_tensor *dst, tc_tensor *src);
TC_API int tc_div_(tc_tensor *dst, tc_tensor *src);
TC_API int tc_add_scalar_(tc_tensor *dst, double s);
TC_API int tc_sub_scalar_(tc_tensor *dst, double s);
TC_API int tc_mul_scalar_(tc_tensor *dst, double s);
TC_API int tc_div_scalar_(tc_tensor *dst, double s);
TC_API int tc_fill_(tc_tensor *dst, double value);

/* -- Printing ---------------------------------------------------------------- */

/* t as PyTorch prints it (precision 4; more than 1000 elements are
** summarized with "..." and 3 items at each end), e.g.
** "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]])". Like snprintf:
** writes at most size bytes (NUL-terminated when size > 0; buf may be NULL
** when size is 0) and returns the length the whole text needs, or -1. A
** realization point. */
TC_API int tc_format(tc_tensor *t, char *buf, size_t size);
/* tc_format's text and a newline on stdout; 0 or -1. */
TC_API int tc_print(tc_tensor *t);

/* -- Weights on disk (the safetensors format) ------------------------------ */

/* Writes tensors under names to path in the safetensors format (names
** unique, UTF-8, not "__metadata__"), atomically: a temporary file beside
** path is renamed over it, so a file that is mapped stays intact. Lazy
** tensors are computed first; device tensors are copied back one at a time
** as they are written. 0, or -1 with the error set (no file made). */
TC_API int tc_save(const char *path, int n, const char *const *names,
                   tc_tensor *const *tensors);
/* tc_save with a "__metadata__" map of nmeta string pairs. */
TC_API int tc_save_meta(const char *path, int n, const char *const *names,
                        tc_tensor *const *tensors, int nmeta,
                        const char *const *keys, const char *const *values);

/* A safetensors file mapped into memory (copy-on-write). tc_load checks the
** whole header (an untrusted file gives an error, never a crash): dtypes,
** shapes, offsets inside the data and tiling it exactly. The file must not
** be truncated by anyone while mapped (that would raise SIGBUS). */
typedef struct tc_file tc_file;
TC_API tc_file *tc_load(const char *path);   /* NULL with the error set */
TC_API int tc_file_count(const tc_file *f);  /* tensors in the file */
/* Name of tensor i (in data order), valid until tc_file_close. */
TC_API const char *tc_file_name(const tc_file *f, int i);
/* The tensor named name, over the mapping without a copy (a copy only when
** the file placed it misaligned for its dtype). It keeps the mapping alive
** after tc_file_close; in-place writes change memory, never the file. */
TC_API tc_tensor *tc_file_get(tc_file *f, const char *name);
/* The "__metadata__" value of key, or NULL; valid until tc_file_close. */
TC_API const char *tc_file_metadata(const tc_file *f, const char *key);
TC_API void tc_file_close(tc_file *f);       /* NULL-safe */

/* -- Autograd -------------------------------------------------------------- */

/* Reverse-mode gradients, as in PyTorch. While grad mode is on (per
** thread, the default), an op with an input that requires grad records how
** its result was made; tc_backward(loss) then adds d loss / d leaf into
** the gradient of every leaf that requires grad. Views and in-place ops
** follow PyTorch: in-place on a leaf that requires grad is an error while
** grad mode is on, and a value saved for backward and then written in
** place makes backward fail rather than give a wrong gradient. A graph is
** used by one backward (its saved values are then freed). Under
** TC_COMPILE=1 the backward's ops are traced and fused like any others.
** Threads: grad mode is per thread; backwards of different graphs may run
** on several threads at once (leaf gradients are updated under a lock),
** but one graph must not be walked by two backwards at the same time. */
typedef struct tc_optimizer tc_optimizer;

/* Floating leaf tensors only; -1 with the error set otherwise. */
TC_API int tc_set_requires_grad(tc_tensor *t, bool on);
/* A leaf that requires grad, or a result recorded from one. */
TC_API bool tc_requires_grad(const tc_tensor *t);
/* One-element loss; adds d loss / d leaf into every leaf's gradient. */
TC_API int tc_backward(tc_tensor *loss);
/* New reference to t's accumulated gradient; NULL + message if none. */
TC_API tc_tensor *tc_grad(tc_tensor *t);
/* Drops t's gradient (set to none; the next backward starts from 0). */
TC_API int tc_zero_grad(tc_tensor *t);
/* Per thread; returns the previous mode (false: no_grad). */
TC_API bool tc_set_grad_enabled(bool on);
/* A new handle on t's data that does not require grad (shares storage). */
TC_API tc_tensor *tc_detach(tc_tensor *t);

/* Optimizers over n parameters (the optimizer holds a reference to each),
** with torch.optim.SGD's (dampening 0, no Nesterov) and torch.optim.AdamW's
** update rules, written as in-place tc ops run with grad mode off (so a
** compiled step fuses them). A parameter without a gradient is skipped.
** tc_optimizer_step ends with tc_sync(): under TC_COMPILE=1 a training
** step (forward, backward, update) is then one region. */
TC_API tc_optimizer *tc_sgd(tc_tensor **params, int n, double lr,
                            double momentum, double weight_decay);
TC_API tc_optimizer *tc_adamw(tc_tensor **params, int n, double lr,
                              double beta1, double beta2, double eps,
                              double weight_decay);
TC_API int tc_optimizer_step(tc_optimizer *opt);
TC_API int tc_optimizer_zero_grad(tc_optimizer *opt);   /* tc_zero_grad each */
TC_API void tc_optimizer_free(tc_optimizer *opt);       /* NULL-safe */

/* Differentiable losses. logits (batch, classes) with i64 class indices
** targets (batch): mean over the batch of -log_softmax(logits)[target]; a
** target out of [0, classes) is an error (it reads targets). */
TC_API tc_tensor *tc_cross_entropy(tc_tensor *logits, tc_tensor *targets);
/* mean((a - b)^2) over every element (a and b broadcast). */
TC_API tc_tensor *tc_mse_loss(tc_tensor *a, tc_tensor *b);

/* -- Devices --------------------------------------------------------------- */

/* Is a CUDA device usable? The driver (libcuda.so.1) is loaded at run time;
** without it, with the toolkit's stub library or with no device this is
** false, and tc_to(t, "cuda") fails naming the reason. */
TC_API bool tc_cuda_available(void);
/* Copy to "cpu" or "cuda" ("cuda:0"): a new contiguous tensor on that
** device with t's values, or a new handle on t's data when t is already
** there. Reading a CUDA tensor: tc_copy_to and tc_item copy its values
** back to the host; tc_data fails (the data is device memory: take
** tc_to(t, "cpu") first). Ops take tensors on one device: mixing CPU and
** CUDA tensors fails with "... expects tensors on one device (cpu and
** cuda)", except that a 0-d CPU tensor is a scalar that may meet CUDA
** tensors (as in PyTorch). Autograd works on CUDA tensors. Every op runs
** on CUDA: eagerly as one-op kernels compiled with NVRTC, in-place ops
** too, and under TC_COMPILE as fused regions; matmul runs through cuBLAS
** (f32, f64, and the halves through f32). */
TC_API tc_tensor *tc_to(tc_tensor *t, const char *device);
/* The device t is on: "cpu" or "cuda" (a lazy tensor's too); NULL for
** NULL. */
TC_API const char *tc_device(const tc_tensor *t);
/* The device new tensors are made on: creation functions (tc_empty,
** tc_zeros, tc_ones, tc_full, tc_arange, tc_rand, tc_randn, tc_from_data)
** make their values on the CPU and, when the default is "cuda", return
** them copied to the device. tc_from_blob always wraps host memory.
** "cpu" (the start) or "cuda"; 0, or -1 (unknown name, or no CUDA
** device: the error says why). Process-wide. */
TC_API int tc_set_default_device(const char *device);
TC_API const char *tc_default_device(void);   /* "cpu" or "cuda" */

/* -- Control and introspection --------------------------------------------- */

/* Overrides TC_COMPILE for this process. */
TC_API void tc_compile_set(bool on);
TC_API bool tc_compile_enabled(void);
/* Threads used by CPU kernels (TC_THREADS, default: all cores). */
TC_API int tc_threads(void);
TC_API void tc_stats_get(tc_stats *out);
TC_API void tc_stats_reset(void);

/* -- Errors ---------------------------------------------------------------- */

TC_API const char *tc_last_error(void);   /* NULL when no error is set */
TC_API void tc_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
