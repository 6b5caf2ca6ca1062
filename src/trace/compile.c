/*
** compile.c -- the compile hook: a hot region becomes a fuse graph, the
** graph a plan (src/fuse), and the plan's kernels are fetched or compiled
** (kernels.c), inline or on the background compile thread (TC_ASYNC); the
** plan then runs in place of the eager kernels after the guard check
** (run.c). Any failure leaves the region eager, with one log line
** (principle 5). At exit, compiles stop cleanly.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compile_int.h"

static bool debug_on(void) { return tensor_cfg()->debug; }
static bool worker_on(void) { return tensor_cfg()->jit_worker; }

/* -- Region -> fuse graph ---------------------------------------------------- */

void trace_graph_free(trace_graph *gb)
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

int trace_graph_of(const trace_region *r, trace_graph *gb)
{
  memset(gb, 0, sizeof *gb);
  /* not cleared: every field a reader uses is set below (a shape-dynamic
  ** region makes this graph on every run with new shapes; clearing its 20
  ** KB was the largest cost of deriving the layout) */
  gb->nodes = malloc(sizeof *gb->nodes * ((size_t)r->nnodes + 1));
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
    f->eager = false;
    f->gather = false;
    f->sc[0] = (fuse_scalar){ 0, 0 };
    f->sc[1] = (fuse_scalar){ 1, 0 };
    for (int e = 0; e < 3; e++) {
      f->in[e].src = FUSE_ABSENT;
      f->in[e].viewed = false;
    }
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
  gb->g = (fuse_graph){ r->nnodes, gb->nodes, NULL, r->ninputs,
                        (const tc_tensor *const *)r->inputs, r->noutputs,
                        gb->out_node, gb->out_dest };
  return 0;
}

/* -- Compiling a region ----------------------------------------------------- */

void trace_plan_free(void *p)
{
  trace_plan *tp = p;
  if (tp) {
    fuse_plan_free(tp->plan);
    for (int i = 0; i < TUNE_DYNAMIC_LAYOUTS; i++)
      fuse_plan_free(tp->derived[i].layout);
    for (int i = 0; i < TUNE_BUILT_LAYOUTS; i++)
      fuse_plan_free(tp->built[i].layout);
  }
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

/* The kernel steps of one plan, fetched or compiled by several threads at
** once: each takes the next step (trace_kernel_get compiles equal kernels
** once, and different ones side by side, one compile worker each). */
typedef struct {
  fuse_plan *fp;
  const char *guards;
  uint64_t region;
  int device;
  atomic_int next;            /* the next step to take */
  char (*why)[256];           /* per step: why it failed */
} step_work;

static void *steps_fetch(void *arg)
{
  step_work *sw = arg;
  for (;;) {
    int s = atomic_fetch_add(&sw->next, 1);
    if (s >= sw->fp->nsteps)
      return NULL;
    fuse_step *st = &sw->fp->steps[s];
    if (st->kind != FSTEP_KERNEL)
      continue;
    st->compiled = sw->device == TC_DEV_CUDA
                   ? trace_cuda_kernel_get(st->k, sw->why[s], sizeof *sw->why)
                   : (void *)trace_kernel_get(st->k, sw->guards, sw->region,
                                              sw->why[s], sizeof *sw->why);
  }
}

/* Threads to fetch fp's kernels with: one per compile worker, when
** libgccjit runs in workers (NVRTC and libgccjit in this process compile
** one kernel at a time), and no more than there are kernels. */
static int steps_threads(const fuse_plan *fp, int device)
{
  if (device == TC_DEV_CUDA || !worker_on())
    return 1;
  int n = jcpu_worker_limit(), kernels = fuse_plan_kernels(fp);
  return n < kernels ? n : kernels > 0 ? kernels : 1;
}

/* Compile every kernel of plan fp: 0; or 1 when some failed, with *eager
** (allocated) marking the region nodes they compute and reason the first
** failure's (in step order); or -1 with reason (out of memory). */
static int plan_compile(fuse_plan *fp, int device, const char *guards,
                        uint64_t region, bool **eager, char *reason,
                        size_t rlen)
{
  /* A CPU step holds a reference to its kernel table entry; a CUDA step's
  ** function belongs to the memo, for the process's life. */
  fp->compiled_free = device == TC_DEV_CUDA ? NULL : trace_kernel_put;
  *eager = NULL;
  step_work sw = { fp, guards, region, device, 0,
                   calloc((size_t)fp->nsteps + 1, sizeof *sw.why) };
  if (!sw.why) {
    snprintf(reason, rlen, "out of memory");
    return -1;
  }
  pthread_t helper[JCPU_WORKERS_MAX];
  int nhelpers = 0, want = steps_threads(fp, device) - 1;
  while (nhelpers < want &&
         pthread_create(&helper[nhelpers], NULL, steps_fetch, &sw) == 0)
    nhelpers++;
  steps_fetch(&sw);
  for (int i = 0; i < nhelpers; i++)
    pthread_join(helper[i], NULL);
  for (int s = 0; s < fp->nsteps; s++) {
    fuse_step *st = &fp->steps[s];
    if (st->kind != FSTEP_KERNEL || st->compiled)
      continue;
    if (!trace_kernels_exiting())   /* a compile cut by exit failed nothing */
      eager_count(ST_COMPILE_FAILURES);
    if (!*eager) {
      snprintf(reason, rlen, "%s", sw.why[s]);
      if (!(*eager = calloc((size_t)fp->nregion + 1, sizeof **eager))) {
        free(sw.why);
        return -1;
      }
    }
    for (int i = 0; i < st->norig; i++)
      (*eager)[st->orig[i]] = true;
  }
  free(sw.why);
  return *eager ? 1 : 0;
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
  int device;                /* TC_DEV_* of the region */
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

/* Times a region is compiled again with more of its nodes eager after
** kernels failed to compile; then it runs eagerly for good. */
#define FALLBACK_ROUNDS 8

/* Publish the outcome of a compile: the plan (rc 0); or (rc 1: some
** kernels failed) the region nodes to run eagerly next time, the region
** cold again so that it is compiled again without fusing them, the other
** kernels coming from the kernel table; or (rc -1) eager for good. */
static void publish(cache_entry *e, fuse_plan *fp, int device, int rc,
                    bool *eager, const char *why, uint64_t hash)
{
  trace_plan *tp = rc == 0 ? calloc(1, sizeof *tp) : NULL;
  if (rc == 0 && !tp) {
    rc = -1;
    why = "out of memory";
  }
  bool again = false;
  trace_table_lock();
  if (rc == 0) {
    tp->plan = fp;
    tp->eager = e->eager_nodes;   /* the entry outlives its plan */
    tp->device = device;
    tp->fixed = !e->guards->dynamic;
    e->plan = tp;
    e->plan_free = trace_plan_free;
    e->state = CACHE_COMPILED;
  } else {
    int n = fp ? fp->nregion : 0;
    if (rc == 1 && e->fallback_rounds < FALLBACK_ROUNDS) {
      if (!e->eager_nodes) {
        e->eager_nodes = eager;
        eager = NULL;
      } else {
        for (int i = 0; i < n; i++)
          e->eager_nodes[i] |= eager[i];
      }
      e->fallback_rounds++;
      e->hits = 0;   /* hot again after TC_HOT more runs */
      e->state = CACHE_COLD;
      again = true;
    } else {
      e->state = CACHE_FAILED;
    }
    fuse_plan_free(fp);
    if (rc < 0)
      eager_count(ST_COMPILE_FAILURES);
  }
  trace_table_unlock();
  free(eager);
  /* principle 5: one line, even unasked; not for compiles cut by exit */
  if (rc != 0 && !trace_kernels_exiting())
    tensor_log(TC_LOG_FALLBACK, "region %016llx: %s: %s",
               (unsigned long long)hash,
               again ? "a kernel failed to compile; its ops run eagerly, "
                       "the rest compiled"
                     : "compile failed, running eagerly", why);
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
    bool *eager;
    int rc = plan_compile(j->plan, j->device, j->guards, j->hash, &eager,
                          reason, sizeof reason);
    publish(j->e, j->plan, j->device, rc, eager, reason, j->hash);
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
  trace_kernels_stop();
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
  trace_kernels_wait();
}

static pthread_once_t stop_once = PTHREAD_ONCE_INIT;
static void stop_register(void) { atexit(compile_stop); }

static bool async_on(void) { return tensor_cfg()->async; }

static int enqueue(cache_entry *e, fuse_plan *fp, char *guards, uint64_t hash,
                   int device)
{
  job *j = malloc(sizeof *j);
  if (!j)
    return -1;
  *j = (job){ e, fp, guards, hash, device, NULL };
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

/* Without libgccjit no CPU region compiles: each runs eagerly for good,
** said once per process (principle 5) rather than once a region, and, as
** with TC_JIT=0, no compile is tried, so none is counted as failed. */
static bool cpu_jit_ready(cache_entry *e)
{
  char why[320];
  if (jcpu_available(why, sizeof why))
    return true;
  static atomic_flag said = ATOMIC_FLAG_INIT;
  if (!atomic_flag_test_and_set(&said))
    tensor_log(TC_LOG_FALLBACK, "CPU regions run eagerly: %s", why);
  trace_table_lock();
  e->state = CACHE_FAILED;
  trace_table_unlock();
  return false;
}

/* The compile hook (called with the table unlocked): fuse now (fast),
** compile now or in the background. */
static void compile_region(const trace_region *r, cache_entry *e)
{
  if (r->device == TC_DEV_CPU && !cpu_jit_ready(e))
    return;
  /* CUDA kernels are always shape-dynamic: the memo knows a kernel by its
  ** code, sizes being arguments, so one NVRTC compile serves every shape
  ** (guards still tell shape variants apart, as on the CPU). */
  bool dynamic = e->guards->dynamic || r->device == TC_DEV_CUDA;
  char reason[256] = "";
  trace_graph gb;
  fuse_plan *fp = NULL;
  if (trace_graph_of(r, &gb) < 0) {
    snprintf(reason, sizeof reason, "an output or input of the region has "
             "no place in it");
  } else {
    gb.g.eager = e->eager_nodes;   /* nodes whose kernel failed before */
    fp = fuse_build(&gb.g, dynamic, reason, sizeof reason);
  }
  trace_graph_free(&gb);
  if (!fp) {
    publish(e, NULL, r->device, -1, NULL, reason, r->hash);
    return;
  }
  if (tensor_log_on(TC_LOG_FUSION))
    tensor_log(TC_LOG_FUSION, "region %016llx: %d nodes -> %d kernels, %d "
               "steps%s%s", (unsigned long long)r->hash, r->nnodes,
               fuse_plan_kernels(fp), fp->nsteps,
               dynamic ? " (shape-dynamic)" : "",
               r->device == TC_DEV_CUDA ? " on cuda" : "");
  if (debug_on())
    fuse_plan_dump(fp, stderr);
  char *guards = guards_text(r, dynamic);
  pthread_once(&stop_once, stop_register);
  /* TC_JIT_WORKER=0 compiles inline: libgccjit in this process registers
  ** exit-time destructors that a background compile could race (NVRTC
  ** runs in this process either way). */
  if (async_on() && (worker_on() || r->device == TC_DEV_CUDA) &&
      enqueue(e, fp, guards, r->hash, r->device) == 0)
    return;   /* the compile thread owns fp and guards now */
  bool *eager;
  int rc = plan_compile(fp, r->device, guards, r->hash, &eager, reason,
                        sizeof reason);
  free(guards);
  publish(e, fp, r->device, rc, eager, reason, r->hash);
}

/* Called by trace_init: fusion and the JITs become the compile hook. */
/* trace_graphless_fn: a CPU plan whose layout is fixed reads a region's
** inputs, outputs and nodes' attributes (run.c); a shape-dynamic one
** plans each run's layout from the region's graph. */
static bool plan_graphless(const void *plan)
{
  const trace_plan *tp = plan;
  return tp->device == TC_DEV_CPU && (!tp->plan->dynamic || tp->fixed);
}

void trace_compile_register(void)
{
  if (!tensor_cfg()->jit)
    return;   /* TC_JIT=0: trace and count, but never compile */
  trace_set_compiler(compile_region, trace_run_plan, plan_graphless);
}
