/*
** jit.c -- driving libgccjit (contexts, options, ISA detection, the compile
** lock, in-memory and to-file compiles, dlopen of artifacts) and the CPU
** launcher that runs a compiled kernel on eager's thread pool.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jcpu_impl.h"
#include "../tensor/approx.h"

struct jcpu_kernel {
  gcc_jit_result *res;        /* owned: in-memory compile; or NULL */
  void *dl;                   /* owned: dlopen handle; or NULL */
  kir_fn main;                /* row mode */
  kir_pass_fn pass[KIR_MAX_PASSES];   /* split mode */
  int npasses;
  bool row, split;                    /* which entries exist (jcpu_modes) */
  char *source;               /* owned: libgccjit's dump; NULL if loaded */
  double compile_ms;
};

/* -- Process-wide state --------------------------------------------------------- */

/* libgccjit contexts are independent, but GCC's own state is not: one
** compile at a time per process (DESIGN.md facts). */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int fail_next;
static char *vec_report;        /* owned; under compile_lock */

void jcpu_fail_next(int n) { atomic_store(&fail_next, n < 0 ? 0 : n); }

void jcpu_compile_lock(void) { pthread_mutex_lock(&compile_lock); }
void jcpu_compile_unlock(void) { pthread_mutex_unlock(&compile_lock); }

void jcpu_set_vec_report(const char *path)
{
  pthread_mutex_lock(&compile_lock);
  free(vec_report);
  vec_report = path ? strdup(path) : NULL;
  pthread_mutex_unlock(&compile_lock);
}

/* libgccjit rejects -march=native, so name the level the CPU reaches. */
static const char *detect_target(void)
{
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
      && __builtin_cpu_supports("avx512bw")
      && __builtin_cpu_supports("avx512dq"))
    return "x86-64-v4";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return "x86-64-v3";
  if (__builtin_cpu_supports("sse4.2"))
    return "x86-64-v2";
  return "x86-64";
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *target;
static char version[48];

static void init_once(void)
{
  target = detect_target();
  /* TC_JIT_ISA may ask for a lower level (a store shared with older
  ** machines; tools that do not know the newest instructions), never a
  ** higher one than this CPU runs. */
  const char *want = tensor_cfg()->jit_isa;
  if (*want && strcmp(want, target) < 0)
    target = want;
  else if (*want && strcmp(want, target) > 0)
    tensor_log(TC_LOG_ERROR, "TC_JIT_ISA=%s: this CPU runs %s at most; "
               "using %s", want, target, target);
  /* Kernels differ with approx.h's multiply-add mode (APPROX_FMA), so a
  ** store shared by builds that differ in it must not mix their kernels. */
  /* The -O level too: it changes the code, never the results. */
  if (jcpu_gccjit_load(NULL, 0) < 0)   /* nothing compiles: no key meets
                                           a stored kernel's */
    snprintf(version, sizeof version, "libgccjit none");
  else
    snprintf(version, sizeof version, "libgccjit %d.%d.%d -O%d%s",
             gcc_jit_version_major(), gcc_jit_version_minor(),
             gcc_jit_version_patchlevel(), tensor_cfg()->jit_opt,
             APPROX_FMA ? " fma" : "");
}

bool jcpu_available(char *why, size_t len)
{
  return jcpu_gccjit_load(why, len) == 0;
}

const char *jcpu_target(void)
{
  pthread_once(&once, init_once);
  return target;
}

const char *jcpu_compiler_version(void)
{
  pthread_once(&once, init_once);
  return version;
}

static void set_reason(char *reason, size_t rlen, const char *fmt,
                       const char *arg)
{
  if (!reason || rlen == 0)
    return;
  snprintf(reason, rlen, fmt, arg ? arg : "");
  /* one line */
  for (char *c = reason; *c; c++)
    if (*c == '\n')
      *c = ' ';
}

/* -- Contexts -------------------------------------------------------------------- */

/* A context with tc's options (principle 2: no contraction, no fast-math;
** -fno-trapping-math lets GCC if-convert selects inside loops). */
static gcc_jit_context *new_context(char *why, size_t len)
{
  if (jcpu_gccjit_load(why, len) < 0)
    return NULL;
  gcc_jit_context *ctx = gcc_jit_context_acquire();
  if (!ctx) {
    snprintf(why, len, "gcc_jit_context_acquire failed");
    return NULL;
  }
  gcc_jit_context_set_int_option(ctx, GCC_JIT_INT_OPTION_OPTIMIZATION_LEVEL,
                                 tensor_cfg()->jit_opt);
  gcc_jit_context_set_bool_option(ctx, GCC_JIT_BOOL_OPTION_DEBUGINFO, 0);
  gcc_jit_context_set_bool_print_errors_to_stderr(ctx, 0);
  char march[32];
  snprintf(march, sizeof march, "-march=%s", jcpu_target());
  gcc_jit_context_add_command_line_option(ctx, march);
  gcc_jit_context_add_command_line_option(ctx, "-ffp-contract=off");
  gcc_jit_context_add_command_line_option(ctx, "-fno-trapping-math");
  gcc_jit_context_add_command_line_option(ctx, "-fno-math-errno");
  /* GCC's early complete unrolling (cunrolli) flattens a reduction's
  ** 16-lane loop when the value is cheap (a plain max over a load), and
  ** the flattened loop no longer vectorizes: measured 38 ms vs 29 ms for a
  ** 4096x4096 softmax. Allowing only 1-iteration peels keeps the lane loop
  ** a loop; nothing else in a kernel depends on complete unrolling. */
  gcc_jit_context_add_command_line_option(ctx,
                                          "--param=max-completely-peel-times=1");
  /* The transcendentals are always_inline (so loops vectorize); a kernel
  ** with many of them must not hit GCC's growth limits, which turn an
  ** always_inline that cannot be inlined into a compile error. */
  gcc_jit_context_add_command_line_option(ctx,
                                          "--param=large-function-growth=100000");
  gcc_jit_context_add_command_line_option(ctx,
                                          "--param=large-function-insns=1000000");
  gcc_jit_context_add_command_line_option(ctx,
                                          "--param=inline-unit-growth=100000");
  gcc_jit_context_add_command_line_option(ctx,
                                          "--param=max-inline-insns-single=100000");
  /* A kernel's buffers are pointers GCC cannot prove apart (libgccjit 12
  ** has no restrict), so a loop vectorizes behind run-time overlap checks,
  ** about one per pair of a stored buffer and another buffer it accesses.
  ** At GCC's default limit of 10 a kernel with a few outputs stayed scalar
  ** (GELU's backward beside its forward, 8 buffers, 3 stored: 18 checks);
  ** this bound covers KIR_MAX_BUFS stored against KIR_MAX_BUFS. The checks
  ** run once per loop entry, and an overlap they find runs the scalar
  ** copy of the loop, which computes the same bits. */
  char checks[64];
  snprintf(checks, sizeof checks, "--param=vect-max-version-for-alias-checks=%d",
           KIR_MAX_BUFS * KIR_MAX_BUFS);
  gcc_jit_context_add_command_line_option(ctx, checks);
  /* A kernel's shared object needs nothing from the C library's start
  ** files or libgcc, and the odd memcpy GCC emits binds at dlopen to the
  ** process's C library, so the link skips them: ld reading libc took
  ** 10-15 ms of every compile (tc-compile-rss: 137 -> 120 ms a kernel). */
  if (gcc_jit_context_add_driver_option)
    gcc_jit_context_add_driver_option(ctx, "-nostdlib");
  if (vec_report) {
    char opt[4200];
    snprintf(opt, sizeof opt, "-fopt-info-vec-optimized=%s", vec_report);
    gcc_jit_context_add_command_line_option(ctx, opt);
  }
  return ctx;
}

/* libgccjit's C-like dump of what ctx holds, as a malloc'd string. The API
** only writes to a path, so go through a private temporary file. */
static char *dump_source(gcc_jit_context *ctx)
{
  const char *dir = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tc-jcpu-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0)
    return NULL;
  close(fd);
  gcc_jit_context_dump_to_file(ctx, path, 0);
  char *text = NULL;
  FILE *f = fopen(path, "rb");
  if (f) {
    if (fseek(f, 0, SEEK_END) == 0) {
      long n = ftell(f);
      if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
          (text = malloc((size_t)n + 1)) != NULL) {
        size_t got = fread(text, 1, (size_t)n, f);
        text[got] = '\0';
      }
    }
    fclose(f);
  }
  unlink(path);
  return text;
}

/* Resolve k's entries through `get` (gcc_jit_result_get_code or dlsym). */
static int resolve(jcpu_kernel *jk, const kir_kernel *k,
                   void *(*get)(void *, const char *), void *h,
                   char *missing, size_t mlen)
{
  jcpu_modes(k, &jk->row, &jk->split);
  jk->npasses = k->npasses;
  char name[16];
  if (jk->row) {
    kir_entry_name(-1, name, sizeof name);
    void *p = get(h, name);
    if (!p) {
      snprintf(missing, mlen, "%s", name);
      return -1;
    }
    memcpy(&jk->main, &p, sizeof p);   /* object -> function pointer */
  }
  for (int pass = 0; jk->split && pass < k->npasses; pass++) {
    kir_entry_name(pass, name, sizeof name);
    void *p = get(h, name);
    if (!p) {
      snprintf(missing, mlen, "%s", name);
      return -1;
    }
    memcpy(&jk->pass[pass], &p, sizeof p);
  }
  return 0;
}

static void *get_result(void *h, const char *name)
{
  return gcc_jit_result_get_code(h, name);
}

static void *get_dl(void *h, const char *name) { return dlsym(h, name); }

bool jcpu_take_fault(void)
{
  int n = atomic_load(&fail_next);
  while (n > 0 && !atomic_compare_exchange_weak(&fail_next, &n, n - 1))
    ;
  return n > 0;
}

void jcpu_clear_faults(void) { atomic_store(&fail_next, 0); }

/* The artifact's key marker: a global `const char tc_kernel_key[]` holding
** JCPU_KEY_MARKER <key> and its NUL, so the bytes of the file name the
** kernel they were compiled for (the store scans for them before dlopen;
** jcpu_load checks the symbol after). */
static void emit_key(gcc_jit_context *ctx, const char *key)
{
  char text[sizeof JCPU_KEY_MARKER + 64];
  int n = snprintf(text, sizeof text, "%s%s", JCPU_KEY_MARKER, key);
  gcc_jit_type *ch = gcc_jit_type_get_const(
    gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_CHAR));
  gcc_jit_type *arr = gcc_jit_context_new_array_type(ctx, NULL, ch, n + 1);
  gcc_jit_lvalue *g = gcc_jit_context_new_global(
    ctx, NULL, GCC_JIT_GLOBAL_EXPORTED, arr, JCPU_KEY_SYMBOL);
  gcc_jit_global_set_initializer(g, text, (size_t)n + 1);
}

/* Shared front half of the compiles: checks, a context with k (and, for an
** artifact, its key) emitted into it. Callers hold compile_lock, or are
** the compile worker (one thread). */
static jcpu_status prepare(const kir_kernel *k, const char *key,
                           gcc_jit_context **out, char *reason, size_t rlen)
{
  *out = NULL;
  char why[320];
  if (jcpu_check(k, why, sizeof why) < 0) {
    set_reason(reason, rlen, "unsupported kernel: %s", why);
    return JCPU_E_UNSUPPORTED;
  }
  gcc_jit_context *ctx = new_context(why, sizeof why);
  if (!ctx) {
    set_reason(reason, rlen, "%s", why);
    return JCPU_E_COMPILE;
  }
  if (key)
    emit_key(ctx, key);
  if (jcpu_emit(ctx, k) < 0) {
    set_reason(reason, rlen, "out of memory building the kernel%s", NULL);
    gcc_jit_context_release(ctx);
    return JCPU_E_COMPILE;
  }
  const char *err = gcc_jit_context_get_first_error(ctx);
  if (err) {
    set_reason(reason, rlen, "libgccjit: %s", err);
    gcc_jit_context_release(ctx);
    return JCPU_E_COMPILE;
  }
  *out = ctx;
  return JCPU_OK;
}

jcpu_status jcpu_compile(const kir_kernel *k, jcpu_kernel **out, char *reason,
                         size_t rlen)
{
  *out = NULL;
  double t0 = tensor_now_ms();
  jcpu_kernel *jk = calloc(1, sizeof *jk);
  if (!jk) {
    set_reason(reason, rlen, "out of memory%s", NULL);
    return JCPU_E_COMPILE;
  }
  pthread_mutex_lock(&compile_lock);
  gcc_jit_context *ctx;
  jcpu_status st = JCPU_E_COMPILE;
  if (jcpu_take_fault())
    set_reason(reason, rlen, "injected compile failure%s", NULL);
  else
    st = prepare(k, NULL, &ctx, reason, rlen);
  if (st == JCPU_OK) {
    jk->source = dump_source(ctx);
    jk->res = gcc_jit_context_compile(ctx);
    if (!jk->res) {
      const char *err = gcc_jit_context_get_first_error(ctx);
      set_reason(reason, rlen, "libgccjit: %s",
                 err ? err : "compile failed");
      st = JCPU_E_COMPILE;
    }
    gcc_jit_context_release(ctx);
  }
  pthread_mutex_unlock(&compile_lock);
  char missing[16];
  if (st == JCPU_OK &&
      resolve(jk, k, get_result, jk->res, missing, sizeof missing) < 0) {
    set_reason(reason, rlen, "entry %s missing from the result", missing);
    st = JCPU_E_COMPILE;
  }
  if (st != JCPU_OK) {
    jcpu_free(jk);
    return st;
  }
  jk->compile_ms = tensor_now_ms() - t0;
  *out = jk;
  return JCPU_OK;
}

/* Does the loaded object name `key` as its kernel? 1 yes, 0 another key,
** -1 no key at all. */
static int key_matches(void *dl, const char *key)
{
  const char *got = dlsym(dl, JCPU_KEY_SYMBOL);
  if (!got)
    return -1;
  size_t m = sizeof JCPU_KEY_MARKER - 1;
  return strncmp(got, JCPU_KEY_MARKER, m) == 0 && strcmp(got + m, key) == 0;
}

jcpu_status jcpu_load(const kir_kernel *k, const char *key,
                      const char *so_path, jcpu_kernel **out, char *reason,
                      size_t rlen)
{
  *out = NULL;
  jcpu_kernel *jk = calloc(1, sizeof *jk);
  if (!jk) {
    set_reason(reason, rlen, "out of memory%s", NULL);
    return JCPU_E_LOAD;
  }
  jk->dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!jk->dl) {
    const char *e = dlerror();
    set_reason(reason, rlen, "dlopen: %s", e ? e : so_path);
    free(jk);
    return JCPU_E_LOAD;
  }
  /* Before any entry point is handed out: the artifact must be key's. */
  int km = key_matches(jk->dl, key);
  if (km <= 0) {
    set_reason(reason, rlen, "%s", km < 0 ? "artifact carries no kernel key"
                                          : "artifact is for another kernel");
    jcpu_free(jk);
    return JCPU_E_LOAD;
  }
  char missing[16];
  if (resolve(jk, k, get_dl, jk->dl, missing, sizeof missing) < 0) {
    set_reason(reason, rlen, "dlsym: no entry %s", missing);
    jcpu_free(jk);
    return JCPU_E_LOAD;
  }
  *out = jk;
  return JCPU_OK;
}

jcpu_status jcpu_compile_file(const kir_kernel *k, const char *key,
                              const char *so_path, char **source,
                              char *reason, size_t rlen)
{
  *source = NULL;
  gcc_jit_context *ctx;
  jcpu_status st = prepare(k, key, &ctx, reason, rlen);
  if (st != JCPU_OK)
    return st;
  *source = dump_source(ctx);
  gcc_jit_context_compile_to_file(ctx, GCC_JIT_OUTPUT_KIND_DYNAMIC_LIBRARY,
                                  so_path);
  const char *err = gcc_jit_context_get_first_error(ctx);
  if (err) {
    set_reason(reason, rlen, "libgccjit: %s", err);
    st = JCPU_E_COMPILE;
    free(*source);
    *source = NULL;
  }
  gcc_jit_context_release(ctx);
  return st;
}

jcpu_status jcpu_compile_to_file(const kir_kernel *k, const char *key,
                                 const char *so_path, jcpu_kernel **out,
                                 char *reason, size_t rlen)
{
  *out = NULL;
  double t0 = tensor_now_ms();
  char *source = NULL;
  jcpu_status st = JCPU_E_COMPILE;
  pthread_mutex_lock(&compile_lock);
  if (jcpu_take_fault())
    set_reason(reason, rlen, "injected compile failure%s", NULL);
  else
    st = jcpu_compile_file(k, key, so_path, &source, reason, rlen);
  pthread_mutex_unlock(&compile_lock);
  if (st == JCPU_OK)
    st = jcpu_load(k, key, so_path, out, reason, rlen);
  if (st != JCPU_OK) {
    free(source);
    return st;
  }
  (*out)->source = source;
  (*out)->compile_ms = tensor_now_ms() - t0;
  return JCPU_OK;
}

void jcpu_free(jcpu_kernel *jk)
{
  if (!jk)
    return;
  if (jk->res)
    gcc_jit_result_release(jk->res);
  if (jk->dl)
    dlclose(jk->dl);
  free(jk->source);
  free(jk);
}

void jcpu_kernel_adopt(jcpu_kernel *jk, char *source, double ms)
{
  free(jk->source);
  jk->source = source;
  jk->compile_ms = ms;
}

const char *jcpu_source(const jcpu_kernel *jk) { return jk->source; }

void jcpu_dump_source(const jcpu_kernel *jk, FILE *out)
{
  fputs(jk->source ? jk->source : "/* no source: loaded from disk */\n", out);
}

double jcpu_last_compile_ms(const jcpu_kernel *jk) { return jk->compile_ms; }

/* -- Launcher -------------------------------------------------------------------- */

/* Units per thread range below which a launch stays on one thread. */
#define MAP_GRAIN 32768
#define ROW_GRAIN_ELEMS 16384

typedef struct {
  const jcpu_kernel *jk;
  char *const *bufs;
  const double *scalars;
  const int64_t *dims;
  kir_pass_fn fn;
  void *rowvars, *partials;
} launch_job;

static void run_main(void *ctx, int64_t lo, int64_t hi)
{
  const launch_job *l = ctx;
  l->jk->main(l->bufs, l->scalars, l->dims, lo, hi);
}

static void run_pass(void *ctx, int64_t lo, int64_t hi)
{
  const launch_job *l = ctx;
  l->fn(l->bufs, l->scalars, l->dims, l->rowvars, l->partials, lo, hi);
}

_Static_assert(KIR_RED_SUM == 0 && KIR_RED_MAX == 1 && KIR_RED_MIN == 2,
               "ORDER RED: tensor_combine takes kir_red's kinds");

/* Split mode: one long row shared by the threads, pass by pass. */
static int launch_split(const jcpu_kernel *jk, const kir_kernel *k,
                        launch_job *l)
{
  int64_t n = k->dynamic ? l->dims[k->ndim] : k->row_len;
  int64_t m = tensor_red_chunks(n);
  _Alignas(8) char small[64 * 8];
  void *parts = m <= 64 ? small : malloc((size_t)m * 8);
  if (!parts)
    return -1;
  _Alignas(8) char rowvars[KIR_MAX_PASSES * 8] = { 0 };
  l->rowvars = rowvars;
  l->partials = parts;
  for (int p = 0; p < k->npasses; p++) {
    const kir_pass *ps = &k->pass[p];
    l->fn = jk->pass[p];
    if (ps->kind == KIR_PASS_REDUCE) {
      /* chunks are 4096 elements of work each: split them freely */
      tensor_parallel(m, 2, run_pass, l);
      /* the canonical pairwise order: the eager reductions' own code */
      tensor_combine(ps->red, (tc_dtype)k->ins[ps->value].dtype, parts, m,
                    rowvars + 8 * p);
    } else if (ps->kind == KIR_PASS_STORE) {
      tensor_parallel(n, MAP_GRAIN, run_pass, l);
    } else {
      run_pass(l, 0, 1);
    }
  }
  if (parts != small)
    free(parts);
  return 0;
}

void jcpu_run_points(const jcpu_kernel *jk, char *const *bufs,
                     const double *scalars, const int64_t *dims, int64_t lo,
                     int64_t hi)
{
  if (lo < hi)
    jk->main(bufs, scalars, dims, lo, hi);
}

int jcpu_launch(const jcpu_kernel *jk, const kir_kernel *k, char *const *bufs,
                const double *scalars, const int64_t *dims)
{
  launch_job l = { jk, bufs, scalars, dims, NULL, NULL, NULL };
  TC_ASSERT(jk->npasses == k->npasses, "kernel does not match its IR");
  int64_t units = 1;
  for (int d = 0; d < k->ndim; d++)
    units *= k->dynamic ? dims[d] : k->size[d];
  if (k->kind == KIR_ROWS && (!jk->row || (jk->split && units == 1)))
    return launch_split(jk, k, &l);
  if (units <= 0)
    return 0;
  if (k->kind == KIR_MAP) {
    tensor_parallel(units, MAP_GRAIN, run_main, &l);
    return 0;
  }
  int64_t n = k->dynamic ? dims[k->ndim] : k->row_len;
  int64_t grain = n >= ROW_GRAIN_ELEMS ? 1 : ROW_GRAIN_ELEMS / (n ? n : 1);
  tensor_parallel(units, grain, run_main, &l);
  return 0;
}
