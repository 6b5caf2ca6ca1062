/*
** hostrun.c -- compile CUDA C with gcc + shim.h and run it on the host as a
** grid of blocks of fiber threads; see hostrun.h.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <ucontext.h>   /* where hr_fiber_switch is not */
#include <unistd.h>

#include "hostrun.h"

#ifndef HX_SHIM
#error "HX_SHIM (the path of shim.h) must be defined by the build"
#endif

/* -- Compiled objects, by source text --------------------------------------- */

struct dim3 { unsigned x, y, z; };

struct hr_module {
  hr_module *next;
  uint64_t hash;
  char *src;                          /* owned */
  void *so;
  struct dim3 *tidx, *bidx, *bdim, *gdim;
  void (**sync)(void);
};

static hr_module *modules;
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static char workdir[256];
static unsigned long ncompiled;

uint64_t hr_hash(const char *s)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* At exit, under the compile lock: a compile thread may still be making an
** object in the folder (ThreadSanitizer saw the race). */
void hr_cleanup(void)
{
  pthread_mutex_lock(&compile_lock);
  if (workdir[0]) {
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0)
      fprintf(stderr, "hostrun: could not remove %s\n", workdir);
    workdir[0] = 0;
  }
  pthread_mutex_unlock(&compile_lock);
}

static int ensure_workdir(char *why, size_t wlen)
{
  if (workdir[0])
    return 0;
  const char *tmp = getenv("TMPDIR");
  snprintf(workdir, sizeof workdir, "%s/tc-hostrun-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(workdir)) {
    snprintf(why, wlen, "mkdtemp %s failed", workdir);
    workdir[0] = 0;
    return -1;
  }
  atexit(hr_cleanup);
  return 0;
}

const char *hr_workdir(char *why, size_t wlen)
{
  pthread_mutex_lock(&compile_lock);
  int rc = ensure_workdir(why, wlen);
  pthread_mutex_unlock(&compile_lock);
  return rc < 0 ? NULL : workdir;
}

int hr_write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  size_t n = strlen(text);
  int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
  return fclose(f) == 0 ? rc : -1;
}

/* -- The cross-process cache (TC_TEST_CUDA_CACHE) --------------------------
** The same kernels are compiled by the release and the sanitized suite, and
** by several tests of each: with TC_TEST_CUDA_CACHE=DIR (tests/run-all.sh
** sets one for the whole run) each object is kept as DIR/<hash>.so beside
** its source DIR/<hash>.c, and used again only when that source equals the
** text byte for byte. Files appear by rename, so a reader sees whole files
** or none; two writers of one text write the same thing. */

const char *hr_cache_dir(void)
{
  const char *d = getenv("TC_TEST_CUDA_CACHE");
  return d && *d ? d : NULL;
}

char *hr_read_bytes(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
    if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
      buf[n] = 0;
      if (len)
        *len = (size_t)n;
    } else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

char *hr_read_file(const char *path) { return hr_read_bytes(path, NULL); }

bool hr_cache_has(const char *name, const char *text)
{
  const char *dir = hr_cache_dir();
  if (!dir)
    return false;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *kept = hr_read_file(path);
  bool same = kept && strcmp(kept, text) == 0;
  free(kept);
  return same;
}

bool hr_cache_accepted(const char *text, const char *what, char *name,
                       size_t nlen)
{
  snprintf(name, nlen, "%016llx.%s", (unsigned long long)hr_hash(text), what);
  return hr_cache_has(name, text);
}

/* Move file `from` to DIR/name (best effort: a failure only costs a
** compile next time). */
static void cache_adopt(const char *from, const char *name)
{
  char to[512];
  snprintf(to, sizeof to, "%s/%s", hr_cache_dir(), name);
  if (rename(from, to) != 0)
    unlink(from);
}

/* Write text to path by rename, so a reader sees all of it or none. */
static int write_by_rename(const char *path, const char *text)
{
  char tmp[600];
  if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >=
      (int)sizeof tmp)
    return -1;
  if (hr_write_file(tmp, text) == 0 && rename(tmp, path) == 0)
    return 0;
  unlink(tmp);
  return -1;
}

void hr_cache_put(const char *name, const char *text)
{
  const char *dir = hr_cache_dir();
  char path[512];
  if (dir &&
      snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path)
    write_by_rename(path, text);   /* best effort: a compile next time */
}

/* gcc compiles the CUDA C as C11 with the shim: the same flags as libtc's
** own eager code (no contraction, no fast-math), so the host run computes
** what the text says, in the order it says it. The object links with
** libm only (-nostdlib): the C library's start files and libgcc add nothing
** to a kernel but a sixth of gcc's time, and what it calls of libc binds to
** the test process's at dlopen. */
#define GCC_FLAGS "gcc -std=gnu11 -O0 -fPIC -ffp-contract=off " \
  "-fno-strict-aliasing -fno-math-errno -fno-trapping-math -Wall -Werror " \
  "-Wno-unused-function -Wno-unused-variable"

/* Every kernel's text opens with the same prelude (types, the shim's names
** and approx.h: some 1300 of its lines, in a few variants by the
** precisions a kernel leaves out), and parsing it is most of gcc's time on
** a kernel. So the text is cut after approx.h: the prelude becomes a
** header (shim.h first, as -include put it) that is precompiled once per
** variant, and the kernel's own lines are compiled with it: gcc reads the
** same text (a .gch it cannot use, it ignores and reads the header). */
#define PRELUDE_END "#endif /* TC_APPROX_H */\n"

/* The precompiled header for src's prelude (its path into hdr, beside its
** .gch, in the cache or the work folder): the length of the prelude in
** src, or 0 when src has none or the header cannot be made (then the text
** is compiled whole). Under the compile lock. */
static size_t prelude_header(const char *src, char *hdr, size_t hlen)
{
  const char *end = strstr(src, PRELUDE_END);
  if (!end)
    return 0;
  size_t n = (size_t)(end - src) + strlen(PRELUDE_END);
  size_t tlen = n + strlen(HX_SHIM) + 16;
  char *text = malloc(tlen);
  if (!text)
    return 0;
  snprintf(text, tlen, "#include \"%s\"\n%.*s", HX_SHIM, (int)n, src);
  const char *dir = hr_cache_dir() ? hr_cache_dir() : workdir;
  /* named by the shim's text too: the .gch holds what it included */
  static uint64_t shim_hash;
  if (!shim_hash) {
    char *shim = hr_read_file(HX_SHIM);
    shim_hash = shim ? hr_hash(shim) | 1 : 1;
    free(shim);
  }
  char name[64], gch[600], cmd[1600];
  snprintf(name, sizeof name, "prelude-%016llx.h",
           (unsigned long long)(hr_hash(text) ^ shim_hash));
  if (snprintf(hdr, hlen, "%s/%s", dir, name) >= (int)hlen ||
      snprintf(gch, sizeof gch, "%s.gch", hdr) >= (int)sizeof gch) {
    free(text);
    return 0;
  }
  char *kept = hr_read_file(hdr);
  bool ready = kept && strcmp(kept, text) == 0 && access(gch, R_OK) == 0;
  free(kept);
  if (!ready && write_by_rename(hdr, text) == 0) {
    char tmp[640];
    ready = snprintf(tmp, sizeof tmp, "%s.%ld.tmp", gch, (long)getpid()) <
                (int)sizeof tmp &&
            snprintf(cmd, sizeof cmd, GCC_FLAGS " -x c-header -o '%s' '%s' "
                     "2>/dev/null", tmp, hdr) < (int)sizeof cmd &&
            system(cmd) == 0 && rename(tmp, gch) == 0;
    if (!ready)
      unlink(tmp);
  }
  free(text);
  return ready ? n : 0;
}

static int gcc_so(const char *src, const char *c, const char *so,
                  char *why, size_t wlen)
{
  char cmd[1800], hdr[512], inc[600];
  size_t skip = prelude_header(src, hdr, sizeof hdr);
  snprintf(inc, sizeof inc, "-include '%s'", skip ? hdr : HX_SHIM);
  if (hr_write_file(c, src + skip) < 0) {
    snprintf(why, wlen, "cannot write %s", c);
    return -1;
  }
  snprintf(cmd, sizeof cmd, GCC_FLAGS " -shared -nostdlib %s -o '%s' '%s' "
           "-lm 2>'%s.log'", inc, so, c, c);
  if (system(cmd) != 0) {
    snprintf(why, wlen, "gcc failed on the CUDA C (%s%s%s, log %s.log)", c,
             skip ? " after " : "", skip ? hdr : "", c);
    return -1;
  }
  unlink(c);
  return 0;
}

/* The object for m's text: from the cache when it holds this text, else
** compiled (and entered in the cache). Its path goes to so. */
static int object_of(hr_module *m, char *so, size_t solen, char *why,
                     size_t wlen)
{
  char name[64], c[300];
  snprintf(name, sizeof name, "%016llx", (unsigned long long)m->hash);
  const char *dir = hr_cache_dir();
  char cname[80], soname[80];
  snprintf(cname, sizeof cname, "%s.c", name);
  snprintf(soname, sizeof soname, "%s.so", name);
  snprintf(so, solen, "%s/%s", dir ? dir : "", soname);
  if (dir && hr_cache_has(cname, m->src) && access(so, R_OK) == 0)
    return 0;
  unsigned long id = ncompiled++;
  snprintf(c, sizeof c, "%s/k%lu.c", workdir, id);
  snprintf(so, solen, "%s/k%lu.so", workdir, id);
  if (gcc_so(m->src, c, so, why, wlen) < 0)
    return -1;
  if (dir) {   /* the object first: a reader checks the source, then it */
    char kept[300];
    snprintf(kept, sizeof kept, "%s/k%lu.kept.so", workdir, id);
    if (link(so, kept) == 0)
      cache_adopt(kept, soname);
    hr_cache_put(cname, m->src);
  }
  return 0;
}

static int compile_so(hr_module *m, char *why, size_t wlen)
{
  if (ensure_workdir(why, wlen) < 0)
    return -1;
  char so[300];
  if (object_of(m, so, sizeof so, why, wlen) < 0)
    return -1;
  m->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) {
    snprintf(why, wlen, "dlopen: %s", dlerror());
    return -1;
  }
  m->tidx = dlsym(m->so, "threadIdx");
  m->bidx = dlsym(m->so, "blockIdx");
  m->bdim = dlsym(m->so, "blockDim");
  m->gdim = dlsym(m->so, "gridDim");
  m->sync = dlsym(m->so, "tck_sync_hook");
  if (!m->tidx || !m->bidx || !m->bdim || !m->gdim || !m->sync) {
    snprintf(why, wlen, "the object lacks the shim's variables");
    return -1;
  }
  return 0;
}

static hr_module *find_or_add(const char *src, char *why, size_t wlen)
{
  uint64_t h = hr_hash(src);
  for (hr_module *m = modules; m; m = m->next)
    if (m->hash == h && strcmp(m->src, src) == 0)
      return m;
  hr_module *m = calloc(1, sizeof *m);
  char *copy = strdup(src);
  if (!m || !copy) {
    free(m);
    free(copy);
    snprintf(why, wlen, "out of memory");
    return NULL;
  }
  m->hash = h;
  m->src = copy;
  m->next = modules;
  modules = m;
  return m;
}

hr_module *hr_compile(const char *src, char *why, size_t wlen)
{
  pthread_mutex_lock(&compile_lock);
  hr_module *m = find_or_add(src, why, wlen);
  if (m && !m->so && compile_so(m, why, wlen) < 0)
    m = NULL;
  pthread_mutex_unlock(&compile_lock);
  return m;
}

void *hr_symbol(hr_module *m, const char *name)
{
  return m && m->so ? dlsym(m->so, name) : NULL;
}

/* -- Fibers: one block's threads ------------------------------------------- */

#define FIBER_STACK (128 * 1024)

/* AddressSanitizer must be told of each stack switch, or it misreads the
** fibers' frames; without it these are no-ops. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SWITCH_START(save, bottom, size) \
  __sanitizer_start_switch_fiber(save, bottom, size)
#define SWITCH_FINISH(save, bottom, size) \
  __sanitizer_finish_switch_fiber(save, bottom, size)
#include <sanitizer/asan_interface.h>
#define STACK_CLEAN(p, n) __asan_unpoison_memory_region(p, n)
#else
#define SWITCH_START(save, bottom, size) ((void)(save), (void)(bottom), \
                                          (void)(size))
#define SWITCH_FINISH(save, bottom, size) ((void)(save), (void)(bottom), \
                                           (void)(size))
#define STACK_CLEAN(p, n) ((void)(p), (void)(n))
#endif

/* ThreadSanitizer, likewise: each fiber has its own context, switched to
** just before each switch, or it reads the scheduler's and the fibers'
** frames as one ever deeper stack (and runs out of room for it). */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TSAN_SWITCH_TO(ctx) __tsan_switch_to_fiber(ctx, 0)
#define TSAN_CURRENT() __tsan_get_current_fiber()
#else
#define TSAN_SWITCH_TO(ctx) ((void)(ctx))
#define TSAN_CURRENT() NULL
#endif

/* -- Switching stacks ----------------------------------------------------------
** On x86-64 a switch is hr_fiber_switch: the callee-saved registers and the
** floating-point control words pushed on the current stack, its pointer
** saved in *from, the same popped from the stack at `to`, and a return
** there. swapcontext, used elsewhere, also saves the signal mask (a system
** call) and the x87 environment on every switch, and under AddressSanitizer
** clears the shadow of the whole stack it enters: with a barrier every few
** lines of a block reduction, that was most of a host run's time. Not
** where control-flow protection may keep a shadow stack (__CET__), which
** a return to a new fiber's first frame would break. */
#if defined(__x86_64__) && !defined(__CET__)
#define FAST_SWITCH 1
void hr_fiber_switch(void **from, void *to);
__asm__(".text\n"
        ".globl hr_fiber_switch\n"
        ".hidden hr_fiber_switch\n"
        ".type hr_fiber_switch, @function\n"
        "hr_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n"
        "  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n"
        "  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size hr_fiber_switch, .-hr_fiber_switch\n");
#else
#define FAST_SWITCH 0
#endif

typedef struct {
#if FAST_SWITCH
  void *sp;                  /* its stack pointer while suspended */
#else
  ucontext_t ctx;
#endif
  char *stack;
  void *tsan;                /* its ThreadSanitizer context, or NULL */
  bool done, at_barrier;
} fiber;

static struct {
#if FAST_SWITCH
  void *sched_sp;
#else
  ucontext_t sched;
#endif
  fiber *f;
  unsigned cap;
  unsigned cur;
  const void *sched_bottom;   /* the scheduler's stack (sanitizer) */
  void *sched_tsan;           /* its ThreadSanitizer context */
  size_t sched_size;
  hr_module *m;
  void (*call)(void *ctx);
  void *ctx;
} run;

/* From the running fiber to the scheduler; returns when resumed. */
static void to_scheduler(fiber *f)
{
  TSAN_SWITCH_TO(run.sched_tsan);
#if FAST_SWITCH
  hr_fiber_switch(&f->sp, run.sched_sp);
#else
  swapcontext(&f->ctx, &run.sched);
#endif
}

static void on_sync(void)
{
  fiber *f = &run.f[run.cur];
  f->at_barrier = true;
  void *save = NULL;
  SWITCH_START(&save, run.sched_bottom, run.sched_size);
  to_scheduler(f);
  SWITCH_FINISH(save, &run.sched_bottom, &run.sched_size);
}

/* A thread's whole life; it ends in the scheduler, never to be resumed. */
static void fiber_main(void)
{
  SWITCH_FINISH(NULL, &run.sched_bottom, &run.sched_size);
  run.call(run.ctx);
  fiber *f = &run.f[run.cur];
  f->done = true;
  SWITCH_START(NULL, run.sched_bottom, run.sched_size);  /* stack ends */
#if FAST_SWITCH
  to_scheduler(f);
  __builtin_unreachable();
#endif
  /* swapcontext: returns to uc_link, the scheduler */
}

/* A fresh ThreadSanitizer context for a fiber (re)started on its stack. */
static void tsan_fresh(fiber *f)
{
#if defined(__SANITIZE_THREAD__)
  if (f->tsan)
    __tsan_destroy_fiber(f->tsan);
  f->tsan = __tsan_create_fiber(0);
#else
  (void)f;
#endif
}

static int fibers_reserve(unsigned n)
{
  if (n <= run.cap)
    return 0;
  fiber *f = realloc(run.f, n * sizeof *f);
  if (!f)
    return -1;
  run.f = f;
  for (unsigned i = run.cap; i < n; i++) {
    f[i].stack = malloc(FIBER_STACK);
    f[i].tsan = NULL;
    if (!f[i].stack)
      return -1;
    run.cap = i + 1;
  }
  return 0;
}

#if FAST_SWITCH
/* A new fiber's stack holds what hr_fiber_switch pops: the control words
** (this thread's), six registers (zero), and fiber_main as the return
** address; above that a null return address for fiber_main, which starts
** as if called (its stack pointer 8 past a multiple of 16). For
** AddressSanitizer the words are unpoisoned first: a fiber that returned
** left its frames clean, and run_block cleans the stacks of fibers parked
** at a divergence, but these words are written from outside any frame. */
static void fiber_start(fiber *f)
{
  uintptr_t top = ((uintptr_t)f->stack + FIBER_STACK) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)(top - 72);
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
  STACK_CLEAN(sp, 72);
  memset(sp, 0, 72);
  memcpy(sp, &mxcsr, sizeof mxcsr);
  memcpy((char *)sp + 4, &fpucw, sizeof fpucw);
  sp[7] = (uint64_t)(uintptr_t)fiber_main;
  f->sp = sp;
  f->done = f->at_barrier = false;
  tsan_fresh(f);
}
#else
/* getcontext and swapcontext return twice: kept out of run_block's loops
** (whose counters GCC would otherwise warn may be clobbered). */
__attribute__((noinline)) static void fiber_start(fiber *f)
{
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = FIBER_STACK;
  f->ctx.uc_link = &run.sched;
  makecontext(&f->ctx, fiber_main, 0);
  f->done = f->at_barrier = false;
  tsan_fresh(f);
}
#endif

/* Run thread t until it reaches a barrier or returns. */
__attribute__((noinline)) static void fiber_resume(fiber *f, unsigned t)
{
  f->at_barrier = false;
  run.cur = t;
  run.m->tidx->x = t;
  void *save = NULL;
  SWITCH_START(&save, f->stack, FIBER_STACK);
  TSAN_SWITCH_TO(f->tsan);
#if FAST_SWITCH
  hr_fiber_switch(&run.sched_sp, f->sp);
#else
  swapcontext(&run.sched, &f->ctx);
#endif
  SWITCH_FINISH(save, NULL, NULL);
}

/* -- The schedule ------------------------------------------------------------
** A device runs a block's threads, and a grid's blocks, in no fixed order,
** so a kernel whose result depends on that order has a race: a thread
** reading shared memory that another writes before the barrier between
** them, or blocks sharing an output. The host runs one order at a time, and
** a race can only show as a result that differs from eager's if the order
** changes: so launches alternate between forward order (threads and blocks
** by index) and reverse order, and every bitwise test of a kernel launched
** more than once runs it both ways. TC_FAKE_ORDER=forward or reverse fixes
** the order (to see whether a failure is a race). */

static bool launch_reversed(void)
{
  static unsigned long nlaunch;
  const char *o = getenv("TC_FAKE_ORDER");
  if (o && strcmp(o, "forward") == 0)
    return false;
  if (o && strcmp(o, "reverse") == 0)
    return true;
  return nlaunch++ & 1;
}

/* The t-th thread or block to run of n. */
static unsigned in_order(unsigned t, unsigned n, bool reversed)
{
  return reversed ? n - 1 - t : t;
}

/* Run one block: every thread up to its next barrier, in the launch's
** order, until all have returned. A barrier some threads skip is an error
** (on a device: a hang or undefined behaviour). */
static int run_block(unsigned nthreads, bool reversed, char *why, size_t wlen)
{
  for (unsigned t = 0; t < nthreads; t++)
    fiber_start(&run.f[t]);
  for (;;) {
    unsigned waiting = 0, done = 0;
    for (unsigned i = 0; i < nthreads; i++) {
      unsigned t = in_order(i, nthreads, reversed);
      fiber *f = &run.f[t];
      if (f->done)
        continue;
      fiber_resume(f, t);
    }
    for (unsigned t = 0; t < nthreads; t++) {
      waiting += run.f[t].at_barrier;
      done += run.f[t].done;
    }
    if (done == nthreads)
      return 0;
    if (waiting != nthreads) {
      snprintf(why, wlen, "barrier divergence: %u of %u threads at the "
               "barrier, %u returned", waiting, nthreads, done);
      for (unsigned t = 0; t < nthreads; t++)   /* the parked fibers' */
        STACK_CLEAN(run.f[t].stack, FIBER_STACK);
      return -1;   /* the parked fibers are dropped with their stacks */
    }
  }
}

int hr_launch(hr_module *m, unsigned grid, unsigned block,
              void (*call)(void *ctx), void *ctx, char *why, size_t wlen)
{
  if (block < 1 || block > 1024 || grid < 1) {
    snprintf(why, wlen, "bad launch configuration");
    return -1;
  }
  pthread_mutex_lock(&launch_lock);
  int rc = -1;
  if (fibers_reserve(block) < 0) {
    snprintf(why, wlen, "out of memory");
    goto out;
  }
  *m->sync = on_sync;
  *m->gdim = (struct dim3){ grid, 1, 1 };
  *m->bdim = (struct dim3){ block, 1, 1 };
  *m->tidx = (struct dim3){ 0, 0, 0 };
  run.m = m;
  run.sched_tsan = TSAN_CURRENT();
  run.call = call;
  run.ctx = ctx;
  rc = 0;
  bool reversed = launch_reversed();
  for (unsigned i = 0; i < grid && rc == 0; i++) {
    *m->bidx = (struct dim3){ in_order(i, grid, reversed), 0, 0 };
    rc = run_block(block, reversed, why, wlen);
  }
out:
  pthread_mutex_unlock(&launch_lock);
  return rc;
}
