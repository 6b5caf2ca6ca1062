/*
** kernels.c -- the process's compiled kernels. Every kernel is known by its
** key (store.h): the canonical IR text, backend, target and compiler. One
** process-wide table maps keys to loaded kernels, so equal kernels of
** different regions compile once; the disk store makes a second process
** load instead of compiling (principle 7); compiles run in the compile
** worker (jit_cpu.h).
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compile_int.h"
#include "../cache/store.h"

static bool debug_on(void) { return tensor_cfg()->debug; }

struct trace_kernel {
  char key[STORE_KEY_LEN + 1];
  jcpu_kernel *jk;              /* owned; NULL while being made */
  int refs;                     /* the table's while in it, one per plan
                                   step that uses it, one per thread waiting
                                   for it (under ktab_lock) */
  bool in_table;
  bool making;                  /* a thread loads or compiles it now, with
                                   ktab_lock released; others wait (made) */
  char failed[256];             /* why making it failed (for the waiters) */
  uint64_t last_use;            /* the table's clock at the last lookup */
  struct trace_kernel *next;
};

typedef struct trace_kernel kentry;

static pthread_mutex_t ktab_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t made = PTHREAD_COND_INITIALIZER;   /* making ends */
static kentry *ktab[TUNE_KERNEL_BUCKETS];
_Static_assert(TUNE_KERNEL_BUCKETS == 256,
               "a kernel's bucket is its key's first two hex digits");
static int ktab_count;          /* entries in the table */
static uint64_t ktab_clock;
static atomic_bool store_warned;

/* Drop one reference (ktab_lock held); the last one unloads the kernel.
** Plans run under the trace lock and are freed under it, so no thread is
** inside a kernel whose last reference goes. */
static void kentry_put_locked(kentry *e)
{
  if (--e->refs > 0)
    return;
  jcpu_free(e->jk);
  free(e);
}

void trace_kernel_put(void *p)
{
  pthread_mutex_lock(&ktab_lock);
  kentry_put_locked(p);
  pthread_mutex_unlock(&ktab_lock);
}

/* Take the entry at *at out of the table (ktab_lock held); the table's
** reference is the caller's to drop. */
static kentry *ktab_unlink_locked(kentry **at)
{
  kentry *e = *at;
  *at = e->next;
  e->in_table = false;
  ktab_count--;
  return e;
}

/* Keep the table under TC_KERNELS_MAX entries: the least recently looked
** up leave it (and are unloaded once no plan uses them); entries being
** made stay. */
static void ktab_trim_locked(void)
{
  while (ktab_count >= tensor_cfg()->kernels_max) {
    kentry **victim = NULL;
    for (int b = 0; b < TUNE_KERNEL_BUCKETS; b++)
      for (kentry **p = &ktab[b]; *p; p = &(*p)->next)
        if (!(*p)->making &&
            (!victim || (*p)->last_use < (*victim)->last_use))
          victim = p;
    if (!victim)
      return;
    kentry *e = *victim;
    if (tensor_log_on(TC_LOG_CACHE))
      tensor_log(TC_LOG_CACHE, "kernel %.12s leaves the table "
                 "(TC_KERNELS_MAX %d)", e->key, tensor_cfg()->kernels_max);
    kentry_put_locked(ktab_unlink_locked(victim));
  }
}

static void store_open_once(void)
{
  char why[256];
  if (store_open(NULL, why, sizeof why) < 0 && tensor_log_on(TC_LOG_CACHE))
    tensor_log(TC_LOG_CACHE, "disk store off, kernels stay in memory: %s",
               why);
}

bool trace_store_open(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, store_open_once);
  return store_is_open();
}

/* Append name to the space-separated list in buf; false (with " ...")
** once it is full. */
static bool ops_add(char *buf, size_t len, size_t *n, const char *name)
{
  if (*n + strlen(name) + 6 >= len) {
    snprintf(buf + *n, len - *n, "%s...", *n ? " " : "");
    return false;
  }
  *n += (size_t)snprintf(buf + *n, len - *n, "%s%s", *n ? " " : "", name);
  return true;
}

/* The ops fused into k, in order, for the store's `ops:` field: its
** primitives and casts, and each reduction where its result is read. */
static void ops_text(const kir_kernel *k, char *buf, size_t len)
{
  static const char *const red[] = { "SUM", "MAX", "MIN" };  /* kir_red */
  bool named[KIR_MAX_PASSES] = { false };
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < k->ninstrs; i++) {
    const kir_instr *in = &k->ins[i];
    const char *name = NULL;
    if (in->op == KOP_ROWVAR && in->ref >= 0 && in->ref < k->npasses &&
        !named[in->ref]) {
      named[in->ref] = true;
      name = red[k->pass[in->ref].red % 3];
    } else if (in->op < KOP_CONST || in->op == KOP_CAST ||
               in->op == KOP_GATHER) {
      name = kir_opname[in->op];
    }
    if (name && !ops_add(buf, len, &n, name))
      return;
  }
  for (int p = 0; p < k->npasses; p++)    /* reductions nothing reads */
    if (k->pass[p].kind == KIR_PASS_REDUCE && !named[p] &&
        !ops_add(buf, len, &n, red[k->pass[p].red % 3]))
      return;
}

void trace_meta_fill(store_meta *m, const kir_kernel *k, const char *ir,
                     const char *source, const char *guards, double ms,
                     uint64_t region)
{
  memset(m, 0, sizeof *m);
  ops_text(k, m->ops, sizeof m->ops);
  if (region)
    snprintf(m->regions, sizeof m->regions, "%016llx",
             (unsigned long long)region);
  snprintf(m->codegen, sizeof m->codegen, "%s", STORE_CODEGEN_VERSION);
  snprintf(m->kind, sizeof m->kind, "%s%s",
           k->kind == KIR_MAP ? "map" : "rows", k->dynamic ? " dyn" : "");
  int n = 0;
  n += snprintf(m->shape + n, sizeof m->shape - (size_t)n, "[");
  for (int d = 0; d < k->ndim && n < (int)sizeof m->shape - 24; d++)
    n += snprintf(m->shape + n, sizeof m->shape - (size_t)n, "%s%lld",
                  d ? "," : "", (long long)k->size[d]);
  n += snprintf(m->shape + n, sizeof m->shape - (size_t)n, "]");
  if (k->kind == KIR_ROWS && n < (int)sizeof m->shape - 24)
    snprintf(m->shape + n, sizeof m->shape - (size_t)n, " row %lld",
             (long long)k->row_len);
  m->instrs = k->ninstrs;
  m->compile_ms = ms;
  m->ir = (char *)ir;
  m->source = (char *)source;
  m->guards = (char *)guards;
}

/* Compiles in flight, on the compile thread or inline on any thread, are
** counted: exit waits (bounded) for each to rename its artifact into the
** store or remove it, and once exit has begun none starts. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int inflight;
  double since;               /* when inflight last became nonzero (ms) */
  bool exiting;
} ex = { .lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static bool compile_begin(void)
{
  pthread_mutex_lock(&ex.lock);
  bool ok = !ex.exiting;
  if (ok && ex.inflight++ == 0)
    ex.since = tensor_now_ms();
  pthread_mutex_unlock(&ex.lock);
  return ok;
}

static void compile_end(void)
{
  pthread_mutex_lock(&ex.lock);
  if (--ex.inflight == 0) {
    eager_add_compile_wall_ms(tensor_now_ms() - ex.since);
    pthread_cond_broadcast(&ex.done);
  }
  pthread_mutex_unlock(&ex.lock);
}

bool trace_kernels_exiting(void)
{
  pthread_mutex_lock(&ex.lock);
  bool x = ex.exiting;
  pthread_mutex_unlock(&ex.lock);
  return x;
}

void trace_kernels_stop(void)
{
  pthread_mutex_lock(&ex.lock);
  ex.exiting = true;
  pthread_mutex_unlock(&ex.lock);
}

void trace_kernels_wait(void)
{
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  pthread_mutex_lock(&ex.lock);
  while (ex.inflight > 0 &&
         pthread_cond_timedwait(&ex.done, &ex.lock, &until) == 0)
    ;
  pthread_mutex_unlock(&ex.lock);
}

const jcpu_kernel *trace_kernel_code(const trace_kernel *k) { return k->jk; }

/* TC_JIT_WORKER=0 runs libgccjit in this process (debugging: gdb, perf),
** with every compile inline. Otherwise compiles run in the compile worker
** (jit_cpu.h), so libgccjit's memory, exits and crashes stay out of here. */
static bool worker_on(void) { return tensor_cfg()->jit_worker; }

/* The JIT and the store spell the key marker alike (a test compares the
** strings; C cannot at compile time). */
_Static_assert(sizeof JCPU_KEY_MARKER == sizeof STORE_KEY_MARKER,
               "key markers differ");

/* Load kernel k (key, canonical IR ir) from the disk store, or compile it
** (entering it into the store): the kernel, or NULL with reason. Runs
** without ktab_lock, on as many threads as are making kernels. */
static jcpu_kernel *kernel_make(const kir_kernel *k, const char *key,
                                const char *ir, const char *guards,
                                uint64_t region, char *reason, size_t rlen)
{
  jcpu_kernel *jk = NULL;
  trace_store_open();
  char path[4096];
  store_meta m;
  if (store_is_open() && store_get(key, &m, path, sizeof path) == 0) {
    char why[256];
    if (jcpu_load(k, key, path, &jk, why, sizeof why) == JCPU_OK) {
      eager_count(ST_KERNELS_LOADED);
      if (tensor_log_on(TC_LOG_CACHE))
        tensor_log(TC_LOG_CACHE, "kernel %.12s loaded from disk", key);
    } else if (tensor_log_on(TC_LOG_CACHE)) {
      tensor_log(TC_LOG_CACHE, "kernel %.12s: cannot load (%s), compiling",
                 key, why);
    }
    store_meta_free(&m);
  }
  if (jk)
    return jk;
  if (!compile_begin()) {
    snprintf(reason, rlen, "compile cancelled: the process is exiting");
    return NULL;
  }
  double t0 = tensor_now_ms();
  jcpu_status rc;
  bool to_disk = store_is_open() &&
                 store_tmp_path(key, path, sizeof path) == 0;
  if (worker_on())   /* libgccjit runs in the compile worker */
    rc = jcpu_worker_compile(k, key, to_disk ? path : NULL, &jk, reason,
                             rlen);
  else
    rc = to_disk ? jcpu_compile_to_file(k, key, path, &jk, reason, rlen)
                 : jcpu_compile(k, &jk, reason, rlen);
  if (to_disk && (rc == JCPU_E_COMPILE || rc == JCPU_E_LOAD)) {
    /* A full or read-only disk fails the compile to file: compile the
    ** same kernel to a private file or in memory (principle 5), and say
    ** so once. Not after JCPU_E_WORKER: a worker that died or hung on
    ** this kernel would only do it again. */
    char why[256];
    snprintf(why, sizeof why, "%s", reason);
    unlink(path);
    to_disk = false;
    rc = worker_on()
           ? jcpu_worker_compile(k, key, NULL, &jk, reason, rlen)
           : jcpu_compile(k, &jk, reason, rlen);
    if (rc == JCPU_OK && !atomic_exchange(&store_warned, true))
      tensor_log(TC_LOG_CACHE, "cannot write the disk store (%s: %s); "
                 "kernels stay in memory", store_root(), why);
  }
  double ms = tensor_now_ms() - t0;
  eager_add_compile_ms(ms);
  if (rc != JCPU_OK) {
    if (to_disk)
      unlink(path);
    compile_end();
    return NULL;
  }
  eager_count(ST_KERNELS_COMPILED);
  if (tensor_log_on(TC_LOG_COMPILE))
    tensor_log(TC_LOG_COMPILE, "kernel %.12s: %.1f ms, %.1f in libgccjit "
               "(%s, %s, %d instructions)", key, ms,
               jcpu_last_compile_ms(jk), jcpu_target(),
               k->kind == KIR_MAP ? "map" : "rows", k->ninstrs);
  if (to_disk) {
    trace_meta_fill(&m, k, ir, jcpu_source(jk), guards, ms, region);
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.target, sizeof m.target, "%s", jcpu_target());
    snprintf(m.compiler, sizeof m.compiler, "%s", jcpu_compiler_version());
    if (store_put(key, path, &m) < 0) {
      unlink(path);
      if (!atomic_exchange(&store_warned, true))   /* principle 5: one
                                                       line, even unasked */
        tensor_log(TC_LOG_CACHE, "cannot write the disk store (%s); "
                   "kernels stay in memory", store_root());
    }
  }
  compile_end();
  if (debug_on()) {
    fprintf(stderr, "tc[debug]: kernel %s IR:\n%s", key, ir);
    jcpu_dump_source(jk, stderr);
  }
  return jk;
}

/* The entry's kernel once no thread is making it (ktab_lock held; the
** caller holds a reference): its jk, or NULL with the maker's reason. */
static jcpu_kernel *kentry_wait_locked(kentry *e, char *reason, size_t rlen)
{
  while (e->making)
    pthread_cond_wait(&made, &ktab_lock);
  if (!e->jk)
    snprintf(reason, rlen, "%s", e->failed);
  return e->jk;
}

/* Equal kernels (one key) are made once: the first thread to miss enters
** an entry being made and makes it with the table unlocked, so kernels
** with other keys load and compile side by side (one compile worker
** each); a thread asking for the same key meanwhile waits for the maker
** and shares its kernel, or its failure. A failed entry leaves the table,
** so a later request tries again. */
trace_kernel *trace_kernel_get(const kir_kernel *k,
                               const char *guards, uint64_t region,
                               char *reason, size_t rlen)
{
  char *ir = kir_text(k);
  if (!ir) {
    snprintf(reason, rlen, "out of memory");
    return NULL;
  }
  char key[STORE_KEY_LEN + 1];
  store_key(ir, "cpu", jcpu_target(), jcpu_compiler_version(), key);
  unsigned b = (unsigned)strtoul((char[]){ key[0], key[1], 0 }, NULL, 16);
  pthread_mutex_lock(&ktab_lock);
  kentry *e = ktab[b];
  while (e && strcmp(e->key, key) != 0)
    e = e->next;
  if (e) {
    e->last_use = ++ktab_clock;
    e->refs++;   /* the caller's */
    if (!kentry_wait_locked(e, reason, rlen)) {
      kentry_put_locked(e);
      e = NULL;
    }
    goto out;
  }
  if (!(e = calloc(1, sizeof *e))) {
    snprintf(reason, rlen, "out of memory");
    goto out;
  }
  ktab_trim_locked();
  memcpy(e->key, key, sizeof e->key);
  e->refs = 2;   /* the table's and the caller's */
  e->in_table = true;
  e->making = true;
  e->last_use = ++ktab_clock;
  e->next = ktab[b];
  ktab[b] = e;
  ktab_count++;
  pthread_mutex_unlock(&ktab_lock);
  jcpu_kernel *jk = kernel_make(k, key, ir, guards, region, reason, rlen);
  pthread_mutex_lock(&ktab_lock);
  e->making = false;
  e->jk = jk;
  pthread_cond_broadcast(&made);
  if (!jk) {
    snprintf(e->failed, sizeof e->failed, "%s", reason);
    for (kentry **p = &ktab[b]; e->in_table && *p; p = &(*p)->next)
      if (*p == e) {
        ktab_unlink_locked(p)->refs--;   /* the table's: not the last */
        break;
      }
    kentry_put_locked(e);
    e = NULL;
  }
out:
  pthread_mutex_unlock(&ktab_lock);
  free(ir);
  return e;
}

jcuda_function trace_cuda_kernel_get(const kir_kernel *k, char *reason,
                                     size_t rlen)
{
  if (!compile_begin()) {
    snprintf(reason, rlen, "compile cancelled: the process is exiting");
    return NULL;
  }
  /* A miss loads from the store or compiles inside the memo, which counts
  ** and times it (compile_ms); the compile count tells this call's compile
  ** from a hit, for the log. */
  tc_status code = tc_errcode();   /* the thread's error is kept: a
                                      failed compile is no op's error */
  char saved[256] = "";
  if (code)
    snprintf(saved, sizeof saved, "%s", tc_last_error());
  uint64_t before = eager_stat_total(ST_KERNELS_COMPILED);
  double t0 = tensor_now_ms();
  jcuda_function f = eager_cuda_kernel("compiled region", k);
  double ms = tensor_now_ms() - t0;
  if (!f) {
    snprintf(reason, rlen, "%s", tc_last_error() ? tc_last_error()
                                                 : "CUDA kernel failed");
    if (code)
      tc_seterr(code, "%s", saved);
    else
      tc_clear_error();
  } else if (eager_stat_total(ST_KERNELS_COMPILED) != before) {
    if (tensor_log_on(TC_LOG_COMPILE))
      tensor_log(TC_LOG_COMPILE, "cuda kernel %016llx: %.1f ms (%s, %d "
                 "instructions)", (unsigned long long)kir_code_hash(k), ms,
                 k->kind == KIR_MAP ? "map" : "rows", k->ninstrs);
  }
  compile_end();
  return f;
}

/* The kernel table is not freed at exit: another thread may still be
** running a kernel while exit() runs (dlclose would unmap its code), and
** the table stays reachable, so leak checkers do not count it. */

