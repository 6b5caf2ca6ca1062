/*
** jit_cpu.h -- the CPU backend: kernel IR (src/fuse/kir.h) -> libgccjit ->
** callable, and the launcher that runs a compiled kernel on the thread pool.
**
** The contract that matters: a compiled kernel computes bitwise what tc's
** eager kernels compute (DESIGN.md principle 2). Every primitive is emitted
** with expr.h's exact semantics for the instruction's dtype, the
** transcendentals re-express approx.h operation for operation, casts follow
** eager_convert, and reductions use the canonical order (chunks of
** TENSOR_RED_CHUNK, TENSOR_RED_LANES lanes combined by halving, chunk partials
** combined pairwise by levels). Code is built with -O3 for the detected ISA,
** -ffp-contract=off, -fno-trapping-math, -fno-math-errno and never
** -ffast-math.
**
** Compile failures are not user errors (principle 5): every entry point
** returns a status and a one-line reason, never aborts, and leaves nothing
** allocated on failure. Compiles in this process are serialized by one
** process-wide lock; the runtime runs them in a pool of compile worker
** processes (below), side by side.
*/
#ifndef TC_JIT_CPU_H
#define TC_JIT_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../fuse/kir.h"

/* A compiled kernel: owns its gcc_jit_result or dlopen handle, the entry
** points and (when compiled in this process) libgccjit's C-like dump. */
typedef struct jcpu_kernel jcpu_kernel;

typedef enum {
  JCPU_OK,
  JCPU_E_UNSUPPORTED,   /* the IR uses something this backend does not emit
                           (e.g. an integer DIV, a transcendental of an
                           integer, a ROWVAR used before its pass) */
  JCPU_E_COMPILE,       /* libgccjit failed (or a fault was injected) */
  JCPU_E_LOAD,          /* dlopen/dlsym of an artifact failed */
  JCPU_E_WORKER         /* the compile worker could not do it: it could
                           not start, died, exited or timed out, or the
                           process is exiting (trying again at once would
                           fail the same way) */
} jcpu_status;

/* An artifact (.so) names the kernel it was compiled for: it exports
** `const char tc_kernel_key[]` whose bytes are JCPU_KEY_MARKER, the 32 hex
** digits of the key, and a NUL. The store scans files for the marker
** (its STORE_KEY_MARKER is the same string); jcpu_load checks the symbol. */
#define JCPU_KEY_SYMBOL "tc_kernel_key"
#define JCPU_KEY_MARKER "tc-kernel-key:"

/* Compile k in memory, in this process (libgccjit runs here: for unit
** tests and TC_JIT_WORKER=0). On success *out owns the result; on failure
** *out is NULL and `reason` (when non-NULL) gets one line. */
jcpu_status jcpu_compile(const kir_kernel *k, jcpu_kernel **out, char *reason,
                         size_t rlen);
/* Compile k, in this process, to a shared object at so_path (written by
** libgccjit in place: callers that need atomicity pass a temporary path and
** rename) with `key` embedded, then load it as jcpu_load does. */
jcpu_status jcpu_compile_to_file(const kir_kernel *k, const char *key,
                                 const char *so_path, jcpu_kernel **out,
                                 char *reason, size_t rlen);
/* Load a .so compiled for kernel k under `key`: dlopen, then, before any
** entry point is resolved, the artifact's tc_kernel_key must equal
** JCPU_KEY_MARKER key (else JCPU_E_LOAD "artifact is for another kernel",
** or "artifact carries no kernel key", and it is closed again); then dlsym
** of k's entries. The kernel has no source text (jcpu_source is NULL). */
jcpu_status jcpu_load(const kir_kernel *k, const char *key,
                      const char *so_path, jcpu_kernel **out, char *reason,
                      size_t rlen);
/* Free a kernel: dlclose / release its code. The caller guarantees no
** thread is still running it. */
void jcpu_free(jcpu_kernel *jk);   /* NULL-safe */

/* Run the whole kernel k (the one jk was compiled from): units split across
** tensor_parallel in fixed ranges; in split mode pass by pass, REDUCE
** partials combined in the canonical pairwise order. bufs/scalars as in
** kir.h; dims NULL for static kernels (kir_dyn_fill layout otherwise).
** Results never depend on the thread count. Returns 0, or -1 when the
** partials of a long split-mode row could not be allocated. */
int jcpu_launch(const jcpu_kernel *jk, const kir_kernel *k, char *const *bufs,
                const double *scalars, const int64_t *dims);

/* Run MAP kernel jk on its points [lo, hi) (row-major over the kernel's
** sizes) on the calling thread: a piece of a launch, for callers that
** split the work themselves (a matmul's per-tile epilogue). Any split of
** the points gives the same results as jcpu_launch. */
void jcpu_run_points(const jcpu_kernel *jk, char *const *bufs,
                     const double *scalars, const int64_t *dims, int64_t lo,
                     int64_t hi);

/* libgccjit's C-like dump of the generated code, captured at compile time
** (gcc_jit_context_dump_to_file). Loaded kernels have none. */
void jcpu_dump_source(const jcpu_kernel *jk, FILE *out);
const char *jcpu_source(const jcpu_kernel *jk);   /* owned by jk; or NULL */

/* Can this process compile CPU kernels? Loads libgccjit (TC_GCCJIT, else
** libgccjit.so.0) at the first call; false with the reason in why
** ("libgccjit not available (...)"): every compile then fails with it. */
bool jcpu_available(char *why, size_t len);
/* The -march this process compiles for ("x86-64-v4", "x86-64-v3", ...),
** part of the cache key. */
const char *jcpu_target(void);
/* "libgccjit 12.2.0", from gcc_jit_version_*, plus " fma" when approx.h
** fuses multiply-adds (APPROX_FMA); part of the cache key. */
const char *jcpu_compiler_version(void);
/* Wall time of the compile that produced jk (0 for loaded kernels). */
double jcpu_last_compile_ms(const jcpu_kernel *jk);

/* -- The compile worker (worker.c) ------------------------------------------
** libgccjit grows its process by about 0.8 MB per compile, calls exit()
** when memory runs out and can crash; so the runtime compiles in a child
** process, started at the first compile, that serves requests over a
** socket: one kir_kernel, its key and an output path in; status, a reason,
** compile ms and the C-like dump out. The child is this build's tc-worker
** program (jcpu_worker_main), or a fork of this process where that is not
** found; it touches only libgccjit, its socket, its stderr pipe and a
** private TMPDIR. This
** process never enters libgccjit's compiler on this path: it dlopens the
** result with jcpu_load. The workers are a pool: up to jcpu_worker_limit()
** of them, each serving one request at a time, started as requests find
** the running ones busy (threads compiling side by side each get one; a
** request waits while all are busy). A worker that dies, exits or hangs
** past JCPU_WORKER_TIMEOUT_MS fails that request with a reason ("compile
** worker died (signal 9)") and the next request in its slot starts a new
** one; a worker is replaced after JCPU_WORKER_MAX_COMPILES compiles or
** once it has grown by JCPU_WORKER_MAX_GROWTH_MB. */
#define JCPU_WORKER_TIMEOUT_MS 60000
#define JCPU_WORKER_MAX_COMPILES 256
#define JCPU_WORKER_MAX_GROWTH_MB 256
/* At exit, how long a compile in flight may run on before it is killed. */
#define JCPU_WORKER_EXIT_GRACE_MS 1000
/* The pool's size: TC_COMPILE_WORKERS, else a worker a core up to
** JCPU_WORKERS_AUTO (each may grow by JCPU_WORKER_MAX_GROWTH_MB), never
** more than JCPU_WORKERS_MAX. */
#define JCPU_WORKERS_AUTO 4
#define JCPU_WORKERS_MAX 16
int jcpu_worker_limit(void);

/* Compile k in the worker to so_path, with key embedded, and load it here.
** so_path NULL: a private temporary file, unlinked once loaded (no disk
** store). Statuses and reasons as jcpu_compile_to_file, plus JCPU_E_WORKER
** for a worker that could not start, died or timed out. */
jcpu_status jcpu_worker_compile(const kir_kernel *k, const char *key,
                                const char *so_path, jcpu_kernel **out,
                                char *reason, size_t rlen);
/* At process exit: no worker starts after this; a compile in flight gets
** until grace_ms from now, then its worker is killed (the request fails);
** then the worker is stopped and reaped and its private TMPDIR removed, so
** nothing of it is left in $TMPDIR. Idempotent. */
void jcpu_worker_shutdown(int grace_ms);
/* tc-worker's main: serve requests on fd 3 (argv: --serve <TMPDIR>). */
int jcpu_worker_main(int argc, char **argv);
/* The worker program new workers run ("": they are forked). */
const char *jcpu_worker_program(void);
/* The pid of the first running worker of the pool, or 0 when none is
** running; how many are running (tests). */
long jcpu_worker_pid(void);
int jcpu_worker_running(void);

/* -- Testing hooks ------------------------------------------------------------ */

/* Make the next n compiles fail with JCPU_E_COMPILE (fault injection). */
void jcpu_fail_next(int n);
/* Make the worker misbehave on its next request, as libgccjit or the
** system might: JCPU_FAULT_CRASH raises SIGSEGV; JCPU_FAULT_KILL is
** SIGKILL (the OOM killer); JCPU_FAULT_EXIT prints "virtual memory
** exhausted" and calls exit(1), as libgccjit's xmalloc does; JCPU_FAULT_NOMEM
** caps the child's address space (RLIMIT_AS) a little above its size, so
** the compile itself runs out of memory; JCPU_FAULT_HANG sleeps past the
** timeout; JCPU_FAULT_ORPHAN starts a process that runs on (as the driver
** starts as and ld) and is killed while it runs; JCPU_FAULT_SLOW waits
** 300 ms, then compiles (a request long in flight). */
typedef enum {
  JCPU_FAULT_NONE, JCPU_FAULT_CRASH, JCPU_FAULT_KILL, JCPU_FAULT_EXIT,
  JCPU_FAULT_NOMEM, JCPU_FAULT_HANG, JCPU_FAULT_ORPHAN, JCPU_FAULT_SLOW
} jcpu_fault;
void jcpu_worker_fault_next(jcpu_fault kind);
/* Override JCPU_WORKER_TIMEOUT_MS, JCPU_WORKER_MAX_COMPILES and
** JCPU_WORKER_MAX_GROWTH_MB (values <= 0: back to those). */
void jcpu_worker_set_timeout(int ms);
void jcpu_worker_set_limits(int max_compiles, int max_growth_mb);
/* Override the pool's size (n <= 0: back to jcpu_worker_limit's rule).
** Workers above a smaller size stay idle until shutdown. */
void jcpu_worker_set_max(int n);
/* Start workers from this program (path), by fork (""), or as found (NULL:
** back to the search). A program that is not trusted, fails to start or
** does not say it is of this build is given up for the process, as a found
** one is: fork. */
void jcpu_worker_set_program(const char *path);
/* Add -fopt-info-vec-optimized=<path> to later compiles (NULL: stop), so a
** test can assert that loops vectorized. GCC appends to the file; each
** loop is reported as "<entry>.<what>:1:1" (see emit.c's loop_begin). */
void jcpu_set_vec_report(const char *path);

#endif
