/*
** compile.c -- the compile hook: a hot region is fused (src/fuse) and its
** kernels compiled (src/jit_cpu); the plan then runs in place of the eager
** kernels after the guard check. Any failure leaves the region eager, with
** one log line (principle 5).
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_int.h"
#include "../cache/store.h"
#include "../fuse/fuse.h"
#include "../jit_cpu/jit_cpu.h"

static bool debug_on(void) { return tensor_cfg()->debug; }

/* -- Region -> fuse graph ---------------------------------------------------- */

typedef struct {
  fuse_graph g;
  fuse_node *nodes;
  int *out_node, *out_dest;
} graph_buf;

static void graph_free(graph_buf *gb)
{
  free(gb->nodes);
  free(gb->out_node);
  free(gb->out_dest);
}

/* The region input index of a leaf tensor or computed value. */
static int input_of(const trace_region *r, const tc_tensor *t)
{
  for (int j = 0; j < r->ninputs; j++)
    if (r->inputs[j] == t)
      return j;
  return -1;
}

static int graph_of(const trace_region *r, graph_buf *gb)
{
  memset(gb, 0, sizeof *gb);
  gb->nodes = calloc((size_t)r->nnodes + 1, sizeof *gb->nodes);
  gb->out_node = calloc((size_t)r->noutputs + 1, sizeof(int));
  gb->out_dest = calloc((size_t)r->noutputs + 1, sizeof(int));
  if (!gb->nodes || !gb->out_node || !gb->out_dest)
    return -1;
  for (int i = 0; i < r->nnodes; i++) {
    const trace_node *n = r->nodes[i];
    fuse_node *f = &gb->nodes[i];
    f->op = n->op;
    f->dtype = n->dtype;
    f->cdtype = n->cdtype;
    f->ndim = n->ndim;
    memcpy(f->shape, n->shape, sizeof(int64_t) * (size_t)n->ndim);
    f->nin = n->nin;
    f->dim = n->dim;
    f->keepdim = n->keepdim;
    f->orig = i;
    f->sc[0] = (fuse_scalar){ 0, 0 };
    f->sc[1] = (fuse_scalar){ 1, 0 };
    for (int e = 0; e < n->nin; e++) {
      const trace_edge *te = &n->in[e];
      fuse_edge *fe = &f->in[e];
      if (!te->node && !te->leaf) {
        fe->src = FUSE_ABSENT;
        continue;
      }
      if (te->node && te->node->slot >= 0 && !te->node->value) {
        fe->src = te->node->slot;
      } else {
        int j = input_of(r, te->leaf ? te->leaf : te->node->value);
        if (j < 0)
          return -1;
        fe->src = -j - 1;
      }
      fe->viewed = te->viewed;
      fe->geom = te->geom;
    }
  }
  for (int o = 0; o < r->noutputs; o++) {
    gb->out_node[o] = r->outputs[o]->slot;
    if (gb->out_node[o] < 0)
      return -1;   /* an output that is not computed here */
    gb->out_dest[o] = -1;
    for (int j = 0; r->dest[o] && j < r->ninputs; j++)
      if (r->inputs[j] == r->dest[o])
        gb->out_dest[o] = j;
  }
  gb->g = (fuse_graph){ r->nnodes, gb->nodes, r->ninputs,
                        (const tc_tensor *const *)r->inputs, r->noutputs,
                        gb->out_node, gb->out_dest };
  return 0;
}

/* -- Kernels: in memory, on disk, or compiled ------------------------------
** Every kernel is known by its key (store.h): the canonical IR text,
** backend, target and compiler. One process-wide table maps keys to loaded
** kernels, so equal kernels of different regions compile once; the disk
** store makes a second process load instead of compiling (principle 7). */

typedef struct kentry {
  char key[STORE_KEY_LEN + 1];
  jcpu_kernel *jk;              /* owned */
  int refs;                     /* the table's while in it, and one per
                                   plan step that uses it (under ktab_lock) */
  bool in_table;
  uint64_t last_use;            /* the table's clock at the last lookup */
  struct kentry *next;
} kentry;

static pthread_mutex_t ktab_lock = PTHREAD_MUTEX_INITIALIZER;
static kentry *ktab[256];
static int ktab_count;          /* entries in the table */
static uint64_t ktab_clock;
static bool store_tried, store_warned;

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

/* A plan step's reference (fuse_plan.compiled_free). */
static void kernel_put(void *p)
{
  pthread_mutex_lock(&ktab_lock);
  kentry_put_locked(p);
  pthread_mutex_unlock(&ktab_lock);
}

/* Keep the table under TC_KERNELS_MAX entries: the least recently looked
** up leave it (and are unloaded once no plan uses them). */
static void ktab_trim_locked(void)
{
  while (ktab_count >= tensor_cfg()->kernels_max) {
    kentry **victim = NULL;
    for (int b = 0; b < 256; b++)
      for (kentry **p = &ktab[b]; *p; p = &(*p)->next)
        if (!victim || (*p)->last_use < (*victim)->last_use)
          victim = p;
    if (!victim)
      return;
    kentry *e = *victim;
    *victim = e->next;
    e->in_table = false;
    ktab_count--;
    if (tensor_log_on(TC_LOG_CACHE))
      tensor_log(TC_LOG_CACHE, "kernel %.12s leaves the table "
                 "(TC_KERNELS_MAX %d)", e->key, tensor_cfg()->kernels_max);
    kentry_put_locked(e);
  }
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void store_lazy_open(void)
{
  if (store_tried)
    return;
  store_tried = true;
  char why[256];
  if (store_open(NULL, why, sizeof why) < 0 && tensor_log_on(TC_LOG_CACHE))
    tensor_log(TC_LOG_CACHE, "disk store off, kernels stay in memory: %s",
               why);
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
    } else if (in->op < KOP_CONST || in->op == KOP_CAST) {
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

static void meta_fill(store_meta *m, const kir_kernel *k, const char *ir,
                      const char *source, const char *guards, double ms,
                      uint64_t region)
{
  memset(m, 0, sizeof *m);
  ops_text(k, m->ops, sizeof m->ops);
  snprintf(m->regions, sizeof m->regions, "%016llx",
           (unsigned long long)region);
  snprintf(m->backend, sizeof m->backend, "cpu");
  snprintf(m->target, sizeof m->target, "%s", jcpu_target());
  snprintf(m->compiler, sizeof m->compiler, "%s", jcpu_compiler_version());
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
  bool exiting;
} ex = { .lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static bool compile_begin(void)
{
  pthread_mutex_lock(&ex.lock);
  bool ok = !ex.exiting;
  ex.inflight += ok;
  pthread_mutex_unlock(&ex.lock);
  return ok;
}

static void compile_end(void)
{
  pthread_mutex_lock(&ex.lock);
  if (--ex.inflight == 0)
    pthread_cond_broadcast(&ex.done);
  pthread_mutex_unlock(&ex.lock);
}

static bool exiting(void)
{
  pthread_mutex_lock(&ex.lock);
  bool x = ex.exiting;
  pthread_mutex_unlock(&ex.lock);
  return x;
}

/* TC_JIT_WORKER=0 runs libgccjit in this process (debugging: gdb, perf),
** with every compile inline. Otherwise compiles run in the compile worker
** (jit_cpu.h), so libgccjit's memory, exits and crashes stay out of here. */
static bool worker_on(void) { return tensor_cfg()->jit_worker; }

/* The compiled kernel for k (of the region with structure hash `region`):
** from this process's table, the disk store, or a fresh compile (then
** entered in both). NULL with reason on failure. */
/* The JIT and the store spell the key marker alike (a test compares the
** strings; C cannot at compile time). */
_Static_assert(sizeof JCPU_KEY_MARKER == sizeof STORE_KEY_MARKER,
               "key markers differ");

static kentry *kernel_get(const kir_kernel *k, const char *guards,
                          uint64_t region, char *reason, size_t rlen)
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
  jcpu_kernel *jk = NULL;
  kentry *e = ktab[b];
  while (e && strcmp(e->key, key) != 0)
    e = e->next;
  if (e) {
    e->last_use = ++ktab_clock;
    e->refs++;   /* the caller's */
    goto out;
  }
  store_lazy_open();
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
  if (!jk && !compile_begin()) {
    snprintf(reason, rlen, "compile cancelled: the process is exiting");
    goto out;
  }
  if (!jk) {
    double t0 = now_ms();
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
      if (rc == JCPU_OK && !store_warned)
        tensor_log(TC_LOG_CACHE, "cannot write the disk store (%s: %s); "
                   "kernels stay in memory", store_root(), why);
      store_warned |= rc == JCPU_OK;
    }
    double ms = now_ms() - t0;
    eager_add_compile_ms(ms);
    if (rc != JCPU_OK) {
      if (to_disk)
        unlink(path);
      compile_end();
      jk = NULL;
      goto out;
    }
    eager_count(ST_KERNELS_COMPILED);
    if (tensor_log_on(TC_LOG_COMPILE))
      tensor_log(TC_LOG_COMPILE, "kernel %.12s: %.1f ms, %.1f in libgccjit "
                 "(%s, %s, %d instructions)", key, ms,
                 jcpu_last_compile_ms(jk), jcpu_target(),
                 k->kind == KIR_MAP ? "map" : "rows", k->ninstrs);
    if (to_disk) {
      meta_fill(&m, k, ir, jcpu_source(jk), guards, ms, region);
      if (store_put(key, path, &m) < 0) {
        unlink(path);
        if (!store_warned)   /* principle 5: one line, even unasked */
          tensor_log(TC_LOG_CACHE, "cannot write the disk store (%s); "
                     "kernels stay in memory", store_root());
        store_warned = true;
      }
    }
    compile_end();
    if (debug_on()) {
      fprintf(stderr, "tc[debug]: kernel %s IR:\n%s", key, ir);
      jcpu_dump_source(jk, stderr);
    }
  }
  if (!(e = malloc(sizeof *e))) {
    jcpu_free(jk);
    snprintf(reason, rlen, "out of memory");
    goto out;
  }
  ktab_trim_locked();
  memcpy(e->key, key, sizeof e->key);
  e->jk = jk;
  e->refs = 2;   /* the table's and the caller's */
  e->in_table = true;
  e->last_use = ++ktab_clock;
  e->next = ktab[b];
  ktab[b] = e;
  ktab_count++;
out:
  pthread_mutex_unlock(&ktab_lock);
  free(ir);
  return e;
}

/* The kernel table is not freed at exit: another thread may still be
** running a kernel while exit() runs (dlclose would unmap its code), and
** the table stays reachable, so leak checkers do not count it. */

/* -- Compiling a region ----------------------------------------------------- */

typedef struct {
  fuse_plan *plan;   /* owned; each kernel step holds a reference to its
                        kernel table entry */
} trace_plan;

static void plan_free(void *p)
{
  trace_plan *tp = p;
  if (tp)
    fuse_plan_free(tp->plan);
  free(tp);
}

static char *guards_text(const trace_region *r, bool dynamic)
{
  guard_set *g = guard_build(r->ninputs, (const tc_tensor *const *)r->inputs,
                             dynamic);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = g ? open_memstream(&buf, &len) : NULL;
  if (f) {
    guard_dump(g, f);
    fclose(f);
  }
  guard_free(g);
  return buf;
}

/* Compile every kernel of plan fp; 0 or -1 with reason. */
static int plan_compile(fuse_plan *fp, const char *guards, uint64_t region,
                        char *reason, size_t rlen)
{
  fp->compiled_free = kernel_put;   /* each step holds its kernel */
  for (int s = 0; s < fp->nsteps; s++) {
    fuse_step *st = &fp->steps[s];
    if (st->kind == FSTEP_KERNEL &&
        !(st->compiled = kernel_get(st->k, guards, region, reason, rlen)))
      return -1;
  }
  return 0;
}

/* Background compiles (TC_ASYNC, default on): a hot region keeps running
** eagerly while the compile thread compiles its kernels (each in the
** compile worker process); the plan is published under
** the region table's lock when done. */
typedef struct job {
  cache_entry *e;            /* borrowed: the table outlives jobs */
  fuse_plan *plan;           /* owned until published */
  char *guards;              /* owned */
  uint64_t hash;
  struct job *next;
} job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond, idle;
  job *head, *tail;
  int busy;
  bool started, stopping;
} q = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
        .idle = PTHREAD_COND_INITIALIZER };

static void publish(cache_entry *e, fuse_plan *fp, int rc, const char *why,
                    uint64_t hash)
{
  trace_plan *tp = rc == 0 ? malloc(sizeof *tp) : NULL;
  if (rc == 0 && !tp) {
    rc = -1;
    why = "out of memory";
  }
  trace_table_lock();
  if (rc == 0) {
    tp->plan = fp;
    e->plan = tp;
    e->plan_free = plan_free;
    e->state = CACHE_COMPILED;
  } else {
    fuse_plan_free(fp);
    e->state = CACHE_FAILED;
    eager_count(ST_COMPILE_FAILURES);
  }
  trace_table_unlock();
  /* principle 5: one line, even unasked; not for compiles cut by exit */
  if (rc != 0 && !exiting())
    tensor_log(TC_LOG_FALLBACK, "region %016llx: compile failed, running "
               "eagerly: %s", (unsigned long long)hash, why);
}

static void *compile_thread(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&q.lock);
  for (;;) {
    while (!q.head)
      pthread_cond_wait(&q.cond, &q.lock);
    job *j = q.head;
    q.head = j->next;
    if (!q.head)
      q.tail = NULL;
    q.busy++;
    pthread_mutex_unlock(&q.lock);
    char reason[256] = "";
    int rc = plan_compile(j->plan, j->guards, j->hash, reason,
                          sizeof reason);
    publish(j->e, j->plan, rc, reason, j->hash);
    free(j->guards);
    free(j);
    pthread_mutex_lock(&q.lock);
    q.busy--;
    if (!q.head && !q.busy)
      pthread_cond_broadcast(&q.idle);
  }
  return NULL;
}

void trace_compile_wait(void)
{
  pthread_mutex_lock(&q.lock);
  while (q.head || q.busy)
    pthread_cond_wait(&q.idle, &q.lock);
  pthread_mutex_unlock(&q.lock);
}

/* At exit: no compile starts any more, queued ones are dropped, the one in
** flight gets JCPU_WORKER_EXIT_GRACE_MS to finish (then its worker is
** killed and it fails), the worker is stopped, and every compile in flight
** (the compile thread's, or inline ones of other threads still running
** while this one exits) gets a bounded time to rename its artifact into
** the store or remove it, so nothing of a compile is left behind. With
** libgccjit out of the process no library finalizer can race a compile,
** so the order of exit handlers does not matter here. */
static void compile_stop(void)
{
  pthread_mutex_lock(&ex.lock);
  ex.exiting = true;
  pthread_mutex_unlock(&ex.lock);
  pthread_mutex_lock(&q.lock);
  q.stopping = true;
  while (q.head) {
    job *j = q.head;
    q.head = j->next;
    fuse_plan_free(j->plan);
    free(j->guards);
    free(j);
  }
  q.tail = NULL;
  pthread_mutex_unlock(&q.lock);
  jcpu_worker_shutdown(JCPU_WORKER_EXIT_GRACE_MS);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  pthread_mutex_lock(&ex.lock);
  while (ex.inflight > 0 &&
         pthread_cond_timedwait(&ex.done, &ex.lock, &until) == 0)
    ;
  pthread_mutex_unlock(&ex.lock);
}

static pthread_once_t stop_once = PTHREAD_ONCE_INIT;
static void stop_register(void) { atexit(compile_stop); }

static bool async_on(void) { return tensor_cfg()->async; }

static int enqueue(cache_entry *e, fuse_plan *fp, char *guards, uint64_t hash)
{
  job *j = malloc(sizeof *j);
  if (!j)
    return -1;
  *j = (job){ e, fp, guards, hash, NULL };
  pthread_mutex_lock(&q.lock);
  if (q.stopping) {
    pthread_mutex_unlock(&q.lock);
    free(j);
    return -1;
  }
  if (!q.started) {
    pthread_t t;
    if (pthread_create(&t, NULL, compile_thread, NULL) != 0) {
      pthread_mutex_unlock(&q.lock);
      free(j);
      return -1;
    }
    pthread_detach(t);
    q.started = true;
  }
  if (q.tail)
    q.tail->next = j;
  else
    q.head = j;
  q.tail = j;
  pthread_cond_signal(&q.cond);
  pthread_mutex_unlock(&q.lock);
  return 0;
}

/* The compile hook (called with the table unlocked): fuse now (fast),
** compile now or in the background. */
static void compile_region(const trace_region *r, cache_entry *e)
{
  bool dynamic = e->guards->dynamic;
  char reason[256] = "";
  graph_buf gb;
  fuse_plan *fp = NULL;
  if (graph_of(r, &gb) < 0)
    snprintf(reason, sizeof reason, "an output or input of the region has "
             "no place in it");
  else
    fp = fuse_build(&gb.g, dynamic, reason, sizeof reason);
  graph_free(&gb);
  if (!fp) {
    publish(e, NULL, -1, reason, r->hash);
    return;
  }
  if (tensor_log_on(TC_LOG_FUSION))
    tensor_log(TC_LOG_FUSION, "region %016llx: %d nodes -> %d kernels, %d "
               "steps%s", (unsigned long long)r->hash, r->nnodes,
               fuse_plan_kernels(fp), fp->nsteps,
               dynamic ? " (shape-dynamic)" : "");
  if (debug_on())
    fuse_plan_dump(fp, stderr);
  char *guards = guards_text(r, dynamic);
  pthread_once(&stop_once, stop_register);
  /* TC_JIT_WORKER=0 compiles inline: libgccjit in this process registers
  ** exit-time destructors that a background compile could race. */
  if (async_on() && worker_on() && enqueue(e, fp, guards, r->hash) == 0)
    return;   /* the compile thread owns fp and guards now */
  int rc = plan_compile(fp, guards, r->hash, reason, sizeof reason);
  free(guards);
  publish(e, fp, rc, reason, r->hash);
}

/* -- Running ------------------------------------------------------------------ */

typedef struct {
  tc_tensor **temp;
  tc_tensor **out;
} run_state;

static tc_tensor *ref_tensor(const trace_region *r, const fuse_plan *p,
                             run_state *rs, fuse_ref ref)
{
  switch (ref.kind) {
  case FREF_INPUT:
    return r->inputs[ref.index];
  case FREF_DEST:
    return r->dest[ref.index];
  case FREF_TEMP:
    if (!rs->temp[ref.index]) {
      const fuse_temp *t = &p->temps[ref.index];
      rs->temp[ref.index] = tensor_new((tc_dtype)t->dtype, t->ndim,
                                       t->shape);
    }
    return rs->temp[ref.index];
  case FREF_OUTPUT:
    if (!rs->out[ref.index]) {
      const trace_node *n = r->outputs[ref.index];
      rs->out[ref.index] = tensor_new((tc_dtype)n->dtype, n->ndim, n->shape);
    }
    return rs->out[ref.index];
  }
  return NULL;
}

static int run_kernel(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st,
                      const jcpu_kernel *jk)
{
  const kir_kernel *k = st->k;
  char *bufs[KIR_MAX_BUFS];
  double scal[KIR_MAX_SCALARS];
  for (int i = 0; i < k->nbufs; i++) {
    tc_tensor *t = ref_tensor(r, p, rs, st->buf[i]);
    if (!t)
      return -1;
    bufs[i] = (char *)tensor_ptr(t) +
              st->buf_off[i] * (int64_t)tensor_dtype_size[k->buf[i].dtype];
  }
  for (int i = 0; i < st->nscal; i++)
    scal[i] = st->scal[i].which == FUSE_SCALAR_ROW_LEN
              ? (double)k->row_len
              : r->nodes[st->scal[i].node]->s[st->scal[i].which];
  int64_t dimsbuf[64], *dims = NULL;
  if (k->dynamic) {
    int n = kir_dyn_len(k);
    dims = n <= 64 ? dimsbuf : malloc(sizeof(int64_t) * (size_t)n);
    if (!dims)
      return -1;
    kir_dyn_fill(k, dims);
  }
  int rc = jcpu_launch(jk, k, bufs, scal, dims);
  eager_count(ST_KERNELS_LAUNCHED);
  if (dims && dims != dimsbuf)
    free(dims);
  return rc;
}

static int run_extern(const trace_region *r, const fuse_plan *p,
                      run_state *rs, const fuse_step *st)
{
  const trace_node *n = r->nodes[st->node];
  eager_call c;
  trace_call_of(n, &c);
  int rc = 0;
  for (int e = 0; e < n->nin && rc == 0; e++) {
    if (st->in[e].kind == FREF_NONE)
      continue;
    tc_tensor *t = ref_tensor(r, p, rs, st->in[e]);
    if (!t) {
      rc = -1;
      break;
    }
    const tensor_geom *g = &st->in_geom[e];
    c.in[e] = st->in_viewed[e]
              ? tensor_new_view(t, g->ndim, g->shape, g->stride,
                                t->offset + g->offset)
              : tensor_ref(t);
    if (!c.in[e])
      rc = -1;
  }
  tc_tensor *out = rc == 0 ? eager_lookup(TC_KEY_CPU, c.op)(&c) : NULL;
  for (int e = 0; e < 3; e++)
    tensor_unref(c.in[e]);
  if (!out)
    return -1;
  /* The extern kernel made its own tensor: adopt it as the value. */
  if (st->out.kind == FREF_TEMP) {
    tensor_unref(rs->temp[st->out.index]);
    rs->temp[st->out.index] = out;
  } else if (st->out.kind == FREF_OUTPUT) {
    tensor_unref(rs->out[st->out.index]);
    rs->out[st->out.index] = out;
  } else {
    tc_tensor *dst = ref_tensor(r, p, rs, st->out);
    eager_copy_into(dst, out);
    tensor_unref(out);
  }
  return 0;
}

/* Run plan p (its layouts: sizes, strides, temps, bindings) with the
** kernels compiled for `code` (p itself, or for a shape-dynamic plan the
** plan first compiled). */
static int run_plan_with(const fuse_plan *p, const fuse_plan *code,
                         trace_region *r)
{
  run_state rs;
  rs.temp = calloc((size_t)p->ntemps + 1, sizeof *rs.temp);
  rs.out = calloc((size_t)r->noutputs + 1, sizeof *rs.out);
  int rc = rs.temp && rs.out ? 0 : -1;
  for (int s = 0; s < p->nsteps && rc == 0; s++) {
    const fuse_step *st = &p->steps[s];
    if (st->kind == FSTEP_KERNEL) {
      rc = run_kernel(r, p, &rs, st,
                      ((const kentry *)code->steps[s].compiled)->jk);
    } else if (st->kind == FSTEP_EXTERN) {
      rc = run_extern(r, p, &rs, st);
    } else {
      tc_tensor *src = ref_tensor(r, p, &rs, st->from);
      tc_tensor *dst = ref_tensor(r, p, &rs, st->out);
      const tensor_geom *g = &st->in_geom[0];
      tc_tensor *v = !src || !st->in_viewed[0] ? tensor_ref(src)
                     : tensor_new_view(src, g->ndim, g->shape, g->stride,
                                       src->offset + g->offset);
      if (v && dst)
        eager_copy_into(dst, v);
      else
        rc = -1;
      tensor_unref(v);
    }
  }
  for (int o = 0; o < r->noutputs && rc == 0; o++) {
    fuse_ref ref = p->out_ref[o];
    if (ref.kind == FREF_DEST)
      continue;   /* written in place */
    tc_tensor *v = ref_tensor(r, p, &rs, ref);
    if (!v)
      rc = -1;
    else
      r->result[o] = tensor_ref(v);
  }
  for (int i = 0; i < p->ntemps && rs.temp; i++)
    tensor_unref(rs.temp[i]);
  for (int i = 0; i < r->noutputs && rs.out; i++)
    tensor_unref(rs.out[i]);
  free(rs.temp);
  free(rs.out);
  return rc;
}

/* Does plan `now` (built for this run's shapes) run the same code as
** `code`, whose kernels are compiled? Sizes and strides may differ (they
** are arguments of shape-dynamic kernels); nothing else may, or the
** compiled kernels would compute something else (a size baked in). */
static bool same_code(const fuse_plan *now, const fuse_plan *code)
{
  if (now->nsteps != code->nsteps)
    return false;
  for (int s = 0; s < now->nsteps; s++) {
    const fuse_step *a = &now->steps[s], *b = &code->steps[s];
    if (a->kind != b->kind ||
        (a->kind == FSTEP_KERNEL && !kir_same_code(a->k, b->k)))
      return false;
  }
  return true;
}

static int run_region(void *plan, trace_region *r)
{
  trace_plan *tp = plan;
  if (!tp->plan->dynamic)
    return run_plan_with(tp->plan, tp->plan, r);
  /* Shape-dynamic: the same kernels, with this run's sizes and strides. */
  graph_buf gb;
  char reason[128];
  fuse_plan *now = NULL;
  if (graph_of(r, &gb) == 0)
    now = fuse_build(&gb.g, true, reason, sizeof reason);
  graph_free(&gb);
  if (!now)
    return -1;
  int rc = -1;
  if (same_code(now, tp->plan))
    rc = run_plan_with(now, tp->plan, r);
  else if (tensor_log_on(TC_LOG_RECOMPILES))
    tensor_log(TC_LOG_RECOMPILES, "region %016llx: its shape-dynamic "
               "kernels do not fit these shapes; running eagerly",
               (unsigned long long)r->hash);
  fuse_plan_free(now);
  return rc;
}

/* Called by trace_init: fusion and the CPU JIT become the compile hook. */
void trace_compile_register(void)
{
  if (!tensor_cfg()->jit)
    return;   /* TC_JIT=0: trace and count, but never compile */
  trace_set_compiler(compile_region, run_region);
}
