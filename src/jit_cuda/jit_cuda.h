/*
** jit_cuda.h -- the CUDA backend: kernel IR (src/fuse/kir.h) -> CUDA C ->
** NVRTC -> PTX / cubin, and the CUDA Driver API. Both libraries are loaded
** with dlopen at first use, so libtc has no link-time CUDA dependency and
** runs unchanged where CUDA is absent: a missing driver, the toolkit's stub
** libcuda.so or no device all mean "no device", with a reason.
**
** The renderer is the part that exists in full (render.c). Its contract is
** the CPU backend's: the CUDA C computes what tc's eager kernels compute,
** bit for bit. Every primitive is written with expr.h's semantics for the
** instruction's dtype; the transcendentals are approx.h itself, compiled as
** CUDA C (the rendered source embeds the file, built with the host's
** APPROX_FMA, so fused multiply-adds are exactly where the CPU has them);
** NVRTC runs with -fmad=false -prec-div=true -prec-sqrt=true -ftz=false;
** reductions follow the canonical order whatever the launch configuration.
**
** The rendered source is plain C with a few macros (TCK_KERNEL, TCK_SHARED,
** TCK_SYNC, threadIdx/blockIdx/blockDim/gridDim): under NVRTC its prelude
** maps them to CUDA; tests/jit_cuda/shim.h maps them to a host execution
** model, so gcc can compile and run the same text on a machine with no GPU.
*/
#ifndef TC_JIT_CUDA_H
#define TC_JIT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../fuse/kir.h"

/* -- The device -------------------------------------------------------------- */

/* Is there a usable CUDA device? Loads libcuda.so.1 and calls cuInit and
** cuDeviceGetCount once per process (thread-safe); false with a reason
** ("no CUDA driver (libcuda.so.1: ...)", "the CUDA driver is the toolkit's
** stub library", "cuInit failed: ...", "no CUDA device") otherwise. */
bool jcuda_device_available(void);
const char *jcuda_device_reason(void);   /* NULL when available */

/* A device address (CUdeviceptr), and a loaded kernel (CUfunction). */
typedef unsigned long long jcuda_ptr;
typedef void *jcuda_function;

/* Each returns 0, or -1 with a tc error (TC_E_DEVICE) naming the driver
** call and carrying the driver's error string, or saying why there is no
** device. All work goes to one stream in order; host copies wait for it. */
int jcuda_arch(char *buf, size_t len);   /* "sm_90": NVRTC's -arch */
int jcuda_sm_count(void);                /* multiprocessors (0: none) */
int jcuda_sync(void);                    /* wait for the stream */
int jcuda_copy_htod(jcuda_ptr dst, const void *src, size_t nbytes);
int jcuda_copy_dtoh(void *dst, jcuda_ptr src, size_t nbytes);
int jcuda_copy_dtod(jcuda_ptr dst, jcuda_ptr src, size_t nbytes);
int jcuda_memset(jcuda_ptr dst, int byte, size_t nbytes);
/* Load a cubin (cuModuleLoadData) and find JCUDA_LAUNCH_ENTRY in it. */
int jcuda_module_load(const void *image, jcuda_function *fn);
/* Launch fn on grid x block threads; params is its tck_params
** (jcuda_params_pack), copied by the driver at the call. */
int jcuda_launch(jcuda_function fn, unsigned grid, unsigned block,
                 void *params);
/* tc's stream (a CUstream, for cuBLAS), or NULL without a device. */
void *jcuda_stream(void);
/* A CUDA toolkit library (NVRTC, cuBLAS) opened with dlopen: the first of
** sonames[0..n) that opens from the loader's search path, else from the
** toolkit's own folder ($CUDA_HOME/lib64, $CUDA_PATH/lib64,
** /usr/local/cuda/lib64), as a toolkit installed without an ld.so.conf
** entry has it. NULL when none opens. */
void *jcuda_open_toolkit_lib(const char *const *sonames, int n);
/* Row-major C[i] = A[i] @ B[i] for i < batch through cuBLAS (cublas.c):
** A m x k, B k x n, C m x n, each contiguous, batch strides in elements (0
** repeats one matrix); dt TC_F32 or TC_F64. 0, or -1 with the error set
** (cuBLAS missing, its status string). */
int jcuda_gemm(tc_dtype dt, int64_t m, int64_t n, int64_t k, int64_t batch,
               jcuda_ptr a, int64_t stride_a, jcuda_ptr b, int64_t stride_b,
               jcuda_ptr c, int64_t stride_c);
/* The driver's own allocation (cuMemAlloc / cuMemFree): devalloc.c's. */
int jcuda_raw_alloc(jcuda_ptr *p, size_t nbytes);
int jcuda_raw_free(jcuda_ptr p);
void jcuda_release_staging(void);

/* -- The caching device allocator (devalloc.c) -------------------------------
** PyTorch's idea, simplified for one stream: freed blocks go to a free
** list by size class and the next request of that class takes one back at
** once (on one stream, work queued before the free is ordered before any
** reuse). Size classes: requests up to 1 MiB round up to a multiple of
** 512 B; larger ones to a multiple of 2 MiB. A request is served only by
** a cached block of exactly its class (no splitting), so a block's size is
** known from the request. When cuMemAlloc fails, the cache is released
** and the allocation tried once more. The cache is released at exit. */
typedef struct {
  uint64_t bytes_in_use;     /* blocks handed out (class sizes) */
  uint64_t bytes_reserved;   /* in use + cached: what the driver holds */
  uint64_t cache_hits;       /* requests served from the cache */
  uint64_t driver_allocs;    /* requests that called cuMemAlloc */
} jcuda_alloc_stats;

size_t jcuda_alloc_class(size_t nbytes);   /* the class size of a request */
/* A block of at least nbytes (0 for nbytes == 0: no block), or 0 with the
** error set. */
int jcuda_alloc(jcuda_ptr *p, size_t nbytes);
void jcuda_free(jcuda_ptr p, size_t nbytes);   /* nbytes: as allocated */
void jcuda_alloc_stats_get(jcuda_alloc_stats *out);
/* Give every cached block back to the driver. */
void jcuda_alloc_release_cache(void);

/* -- Rendering ------------------------------------------------------------------ */

/* Entry point of every rendered kernel:
**   TCK_KERNEL tck_main(char *const *bufs, const double *scalars,
**                       const int64_t *dims, int64_t lo, int64_t hi)
** bufs, scalars and dims as in kir.h (device pointers on a GPU). [lo, hi)
** is a range of flat points (KIR_MAP: grid-stride loop, one point per
** thread per step, or 4 where aligned: jcuda_map_points_per_thread) or of
** flat rows (KIR_ROWS: a block per row, grid-stride
** over rows; blockDim.x a power of two from 16 to JCUDA_MAX_THREADS; a
** sequential kernel, kir_sequential: a thread per row, as MAP, except as
** jcuda_scan_parallel says). Results never depend on the grid or block
** size. */
#define JCUDA_ENTRY "tck_main"
#define JCUDA_MAX_THREADS 1024
/* The most threads a launch puts in a block. A module's one entry serves
** every form and phase of its kernel, with no launch bounds, so NVRTC may
** give it up to 255 registers a thread; 256 such threads still fit a
** multiprocessor's 64K registers, where 1024 fit only at 64 a thread (and
** the launch would fail, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, for a kernel
** whose math needs more). The rendered code works for any block size up
** to JCUDA_MAX_THREADS (the tests run it so); launches use at most this. */
#define JCUDA_LAUNCH_THREADS 256

/* The launch ABI. Under NVRTC tck_main is a device function; the kernel
** launched is
**   extern "C" __global__ void tck_entry(const __grid_constant__ tck_params p)
** whose one by-value parameter holds, as 8-byte words in order: bufs
** (nbufs device pointers), scalars (nscalars doubles), dims (the dynamic
** layout, kir_dyn_len words), lo, hi; each array at least one word long.
** A host build of the same text gets `void tck_entry(const tck_params *)`
** instead (the fake driver of tests/jit_cuda calls it). */
#define JCUDA_LAUNCH_ENTRY "tck_entry"
void jcuda_params_counts(const kir_kernel *k, int *nbufs, int *nscalars,
                         int *ndims);
size_t jcuda_params_size(const kir_kernel *k);   /* bytes */
/* Fill out (jcuda_params_size(k) bytes); dims may be NULL (static). */
void jcuda_params_pack(const kir_kernel *k, void *out, char *const *bufs,
                       const double *scalars, const int64_t *dims,
                       int64_t lo, int64_t hi);

/* -- Split reductions ---------------------------------------------------------
** A ROWS kernel whose rows are few and long (sum_all: one row that is the
** whole tensor) would run on a few blocks of the device. When its first
** pass is its only REDUCE and every later pass is a STORE_ROW (one value
** per row: sum, mean, max, min, sum_all, with any pointwise prologue and
** epilogue), its rendered text also holds two split phases, and the launch
** entry picks one by the params' phase word (jcuda_params_split):
**   1  JCUDA_SPLIT_PARTIALS: blocks take rounds of blockDim/16 chunks of
**      any row (grid-stride over rows x rounds) and write each chunk's
**      partial (TENSOR_RED_LANES lanes combined by halving) to scratch,
**      rows x nch values of the reduction's dtype, 8 bytes apart at most;
**   2  JCUDA_SPLIT_COMBINE: a block per row combines the row's nch
**      partials pairwise by levels (the canonical tree) and runs the
**      STORE_ROW passes.
** Both compute tensor.h's canonical order, so results equal the
** block-per-row form and eager bit for bit, whatever the grids and blocks.
** Kernels with later passes that need the row value at every position
** (softmax, layer_norm) are not split: they run a block per row. */
#define JCUDA_SPLIT_PARTIALS "tck_split_partials"
#define JCUDA_SPLIT_COMBINE "tck_split_combine"
/* Does k's text hold the split phases (its structure, not its sizes)? */
bool jcuda_splittable(const kir_kernel *k);
/* Bytes of scratch a split launch of rows [lo, hi) of k needs. */
size_t jcuda_split_scratch(const kir_kernel *k, int64_t rows);
/* Set the scratch address and phase (0: the block-per-row form, 1, 2)
** of params packed for a splittable k (zero after jcuda_params_pack). */
void jcuda_params_split(const kir_kernel *k, void *params, jcuda_ptr scratch,
                        int phase);

/* How k's units [0, kir_units(k)) are launched on a device of sm_count
** multiprocessors (launch.c). MAP and sequential ROWS: 256 threads, a block
** per 256 points (rows) up to 4 per multiprocessor; a parallel scan
** (jcuda_scan_parallel): a block per row, up to 4 per multiprocessor, of
** 32 to 256 threads sized to the row's segments. ROWS: a block per row
** (16 to 256 threads sized to the row), unless k is splittable, its row
** spans at least 2 chunks and it
** has fewer than 2 rows per multiprocessor: then split (phase 1 with 256
** threads, fewer down to 32 until there are 2 rounds per multiprocessor,
** up to 8 blocks per multiprocessor; phase 2 a block per row of 32 to 256
** threads sized to the chunk count). No launch asks for more than
** JCUDA_LAUNCH_THREADS threads a block. */
typedef struct {
  unsigned grid, block;       /* the launch, or phase 1 */
  bool split;
  unsigned grid2, block2;     /* phase 2 */
  size_t scratch;             /* bytes, when split */
} jcuda_launch_cfg;
void jcuda_launch_config(const kir_kernel *k, int sm_count,
                         jcuda_launch_cfg *lc);
/* Launch fn (k's compiled text) over params packed for [0, kir_units(k))
** as jcuda_launch_config says: one launch, or phase 1 and phase 2 with
** scratch from the caching allocator (returned at once: the stream orders
** its next user after both phases). 0, or -1 with the error set. */
int jcuda_launch_kernel(jcuda_function fn, const kir_kernel *k,
                        void *params);

/* Does k's text hold the parallel scan? A sequential kernel of SCAN passes
** alone does: each launch whose rows span more than one TENSOR_SCAN_SEG
** segment and are at most JCUDA_SCAN_BLOCK_ROWS (hi - lo) runs a block per
** row, the segments folded in parallel (the kernel tests this itself; the
** launch sizes the block by it); other launches, and kernels with a
** SCATTER, a thread per row. Both forms give tensor.h's scan order. */
#define JCUDA_SCAN_BLOCK_ROWS 65536
bool jcuda_scan_parallel(const kir_kernel *k);

/* Render k as a self-contained CUDA C translation unit (approx.h included
** in the text). Returns a malloc'd string, or NULL with a one-line reason
** when k uses something the renderer does not emit (an integer DIV, a
** transcendental of an integer) or memory runs out. */
char *jcuda_render(const kir_kernel *k, char *reason, size_t rlen);
/* Points a thread of MAP kernel k takes at a time (render.c's vector loop:
** aligned 4-to-16-byte loads and stores): 4 where k's sizes and strides
** (a dynamic kernel's: this call's) let the loop take them, else 1. The
** launch sizes its grid by it. */
int jcuda_map_points_per_thread(const kir_kernel *k);
/* The APPROX_FMA the rendered kernels define (the host build's, 0 or 1). */
int jcuda_render_fma(void);

/* -- NVRTC -------------------------------------------------------------------- */

/* Is NVRTC loadable? (libnvrtc.so.13 / .so.12 / .so, by the loader's path,
** then /usr/local/cuda/lib64). False with a reason otherwise. */
bool jcuda_nvrtc_available(void);
const char *jcuda_nvrtc_reason(void);   /* NULL when available */
/* "nvrtc 13.0", or "nvrtc none". */
const char *jcuda_nvrtc_version(void);
/* The options every compile uses, space-separated (without -arch). */
const char *jcuda_nvrtc_options(void);

typedef enum { JCUDA_PTX, JCUDA_CUBIN } jcuda_image;

/* Compile CUDA C `src` for `arch` ("sm_90" for a cubin, "compute_90" for
** PTX). Returns 0 and a malloc'd *image of *len bytes (PTX: NUL-terminated
** text), or -1 with *log (malloc'd, may be NULL) holding NVRTC's full log
** or the reason NVRTC could not run. On success *log gets any warnings. */
int jcuda_nvrtc_compile(const char *src, const char *arch, jcuda_image kind,
                        char **image, size_t *len, char **log);

/* The text the cache key of a CUDA kernel hashes besides the IR: backend,
** NVRTC version, options and arch, the renderer's version and the
** APPROX_FMA it pastes into every kernel (the host build's: a store shared
** by builds that differ in it must not mix their cubins)
** ("cuda nvrtc 13.0 sm_90 render 4 fma 1 -fmad=false ..."). Into buf;
** returns buf. */
#define JCUDA_RENDER_VERSION 10
const char *jcuda_key_text(const char *arch, char *buf, size_t len);

#endif
