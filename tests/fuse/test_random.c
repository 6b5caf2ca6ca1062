/*
** test_random.c -- the differential test: random programs (randprog.h),
** each run eagerly and compiled (every region compiled on first sight,
** TC_HOT=1, TC_ASYNC=0, TC_CACHE=0), must show the same things: every
** op's success or error message, every shape and dtype, and every value
** read, bit for bit (any NaN equals any NaN). A program is run with several
** size assignments in a row, and all programs share one process, so the
** region table and kernel caches carry state from one to the next.
**
** Under meson (no arguments) it reads the environment:
**   TC_RANDOM_PROGRAMS  programs to run (default 1000); a program run with
**                       one size assignment counts as one
**   TC_RANDOM_SEED      first program seed (default 0)
**   TC_RANDOM_SHRINK    failures to shrink (default 1)
**   TC_RANDOM_SHRINK_SECONDS  time for each (default 120)
**   TC_RANDOM_VERBOSE   1: one line per program
**   TC_RANDOM_LOOP      compiled runs of each program (default 1), each
**                       compared with its eager run: later runs see their
**                       regions again, as a loop does, and replay them
**   TC_RANDOM_INSTANCES  size assignments run per structure (default all):
**                       fewer make more structures in the same time
**   TC_TEST_STORE       a kernel store to use (TC_CACHE=1; tests/run-all.sh
**                       sets one for the whole run): a second run of the
**                       same seeds loads their kernels from it
**   TC_RANDOM_AVOID     features to leave out, to look past a known defect
**                       (changes every seed's program): zerod, mean,
**                       twoviews, lazydst (see randprog.h)
** Command line (tools/random-programs.sh drives it):
**   test_random -n COUNT [-s SEED]    COUNT programs from seed SEED
**   test_random --seeds A B           every program of seeds [A, B)
**   test_random --split COUNT SEED JOBS  print JOBS seed ranges that
**                                     together hold COUNT programs
**   test_random --print SEED          print the program for SEED
**   test_random --replay SPEC         run one (shrunk) program in a fresh
**                                     process: exit 0 same, 3 differs
**                                     (with -c first: print it as C)
**   options: -k N (shrink the first N failures), -c (print failures as
**   standalone C files), -v (one line per program)
** TC_RECOMPILE_LIMIT, TC_NODE_LIMIT and TC_HOT are read as usual (the
** meson sub-runs set them); TC_ASYNC and TC_CACHE default to 0 here.
*/
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/trace/trace.h"
#include "../../src/eager/gemm.h"
#include "randprog.h"

extern char **environ;

typedef struct {
  uint64_t first, end;      /* seeds [first, end) when end > first */
  long count;               /* else: programs to run from first */
  int shrink;               /* failures to shrink */
  bool emit_c;
  bool verbose;
} config;

typedef struct {
  long programs, compiled, failed, failed_seeds;
  long structures;
  uint64_t kernels, compile_failures, guard_failures;
  uint64_t replays;         /* regions realized by op-level replay */
  long fallback_programs;   /* programs with a compile failure */
  long steps, error_steps;  /* steps run; steps that failed (eagerly) */
  long skipped;             /* structures not run (on_device) */
} totals;

/* -- Crash reports ------------------------------------------------------- */

/* The program being run, rendered before it runs: a crash may come from a
** corrupted heap, so the handler only calls write(). */
static char crash_text[1 << 18];
static size_t crash_step_at[RP_MAXS + 1], crash_inst_at[RP_MAXINST + 1];
static size_t crash_body_at, crash_len;

static void crash_prepare(const rp_prog *p, const uint8_t *on)
{
  FILE *f = fmemopen(crash_text, sizeof crash_text - 1, "w");
  if (!f)
    return;
  for (int i = 0; i < p->nsteps; i++) {
    crash_step_at[i] = (size_t)ftell(f);
    if (on[i])
      rp_print_step(p, i, f);
  }
  crash_step_at[p->nsteps] = (size_t)ftell(f);
  for (int j = 0; j <= p->ninst; j++) {
    crash_inst_at[j] = (size_t)ftell(f);
    if (j < p->ninst)
      rp_print_sizes(p, &j, 1, f);
  }
  crash_body_at = (size_t)ftell(f);
  fprintf(f, "program:\n");
  rp_print_body(p, on, -1, f);
  fflush(f);
  crash_len = (size_t)ftell(f);
  fclose(f);
}

static void put(const char *s, size_t n)
{
  while (n > 0) {
    ssize_t k = write(2, s, n);
    if (k <= 0)
      return;
    s += k;
    n -= (size_t)k;
  }
}

static void crash_report(void)
{
  if (!rp_now.active)
    return;
  rp_now.active = false;
  char line[256];
  int n = snprintf(line, sizeof line,
                   "\nCRASH seed %" PRIu64 " instance %d step %d (%s)\n",
                   rp_now.seed, rp_now.inst, rp_now.step,
                   rp_now.compiled ? "compiled" : "eager");
  put(line, (size_t)n);
  if (!crash_len)
    return;
  if (rp_now.step >= 0) {
    put("at: ", 4);
    put(crash_text + crash_step_at[rp_now.step],
        crash_step_at[rp_now.step + 1] - crash_step_at[rp_now.step]);
  }
  int j = rp_now.inst < 0 ? 0 : rp_now.inst;
  put("\nsizes:\n", 8);
  put(crash_text + crash_inst_at[0], crash_inst_at[j + 1] - crash_inst_at[0]);
  put(crash_text + crash_body_at, crash_len - crash_body_at);
}

static void on_signal(int sig)
{
  crash_report();
  signal(sig, SIG_DFL);
  raise(sig);
}

#if defined(__SANITIZE_ADDRESS__)
void __sanitizer_set_death_callback(void (*cb)(void));
#define HAVE_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
void __sanitizer_set_death_callback(void (*cb)(void));
#define HAVE_SANITIZER 1
#endif
#endif

/* cmocka catches fatal signals while a test runs and longjmps out of tc
** (which may hold locks: the process then hangs at exit). The handlers in
** force before cmocka started (ours, or the sanitizer's) are saved here and
** put back inside the test. */
static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
static struct sigaction saved[5];

static void handlers_save(void)
{
  for (int i = 0; i < 5; i++)
    sigaction(fatal[i], NULL, &saved[i]);
}

static void handlers_restore(void)
{
  for (int i = 0; i < 5; i++)
    sigaction(fatal[i], &saved[i], NULL);
}

static void crash_handlers(void)
{
  signal(SIGABRT, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGILL, on_signal);
#ifdef HAVE_SANITIZER
  __sanitizer_set_death_callback(crash_report);
#else
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
#endif
}

/* -- One program, both modes --------------------------------------------- */

static rp_obs obs_e[RP_MAXS], obs_c[RP_MAXS];
static int verbose_level;

/* Compiled runs of each instance (TC_RANDOM_LOOP): past the first, a
** program's regions are seen again as a loop sees them, and replayed. */
static int loops = 1;
/* Size assignments run per structure (TC_RANDOM_INSTANCES; default all). */
static int max_instances = RP_MAXINST;
/* TC_RANDOM_DEVICE=cuda (through the fake driver of tests/jit_cuda/fake):
** the compiled runs make every tensor on the CUDA device
** (tc_set_default_device) and must still give the CPU eager run's
** observations bit for bit; tc_data reads are copies in both runs.
** Skipped there: programs with a matmul unless the CPU's GEMM is the fma
** chain the fake cuBLAS computes (a real cuBLAS sums in its own order,
** NUMERICS.md: with TC_TEST_CUDA_DEVICE=real, on a GPU, they always are). */
static bool on_device, real_cublas;

static bool device_can_run(const rp_prog *p, const uint8_t *on)
{
  if (!real_cublas && eager_gemm_path_fma(eager_gemm_path()))
    return true;
  for (int i = 0; i < p->nsteps; i++)
    if (on[i] && p->step[i].op == RP_MATMUL)
      return false;
  return true;
}

static int instances(uint64_t seed)
{
  int n = rp_instances(seed);
  return n < max_instances ? n : max_instances;
}

/* Run instance inst eagerly, then compiled `loops` times; -1 when every
** compiled run agrees with the eager one, else the differing step (why/kind
** set). */
static int run_both(const rp_prog *p, const uint8_t *on, int inst,
                    totals *t, char *why, size_t len, char *kind)
{
  rp_now.inst = inst;
  rp_now.compiled = false;
  tc_compile_set(false);
  rp_run(p, on, inst, obs_e);
  if (t)
    for (int i = 0; i < p->nsteps; i++) {
      t->steps += obs_e[i].ran;
      t->error_steps += obs_e[i].failed;
    }
  int d = -1;
  bool compiled = false, fell_back = false;
  for (int k = 0; k < loops && d < 0; k++) {
    rp_now.compiled = true;
    tc_compile_set(true);
    if (on_device && tc_set_default_device("cuda") < 0)
      fail_msg("TC_RANDOM_DEVICE=cuda: %s", tc_last_error());
    tc_stats s0, s1;
    tc_stats_get(&s0);
    uint64_t r0 = trace_replay_count();
    rp_run(p, on, inst, obs_c);
    tc_stats_get(&s1);
    tc_set_default_device("cpu");
    tc_compile_set(false);
    rp_now.compiled = false;
    compiled |= s1.regions_compiled > s0.regions_compiled;
    fell_back |= s1.compile_failures > s0.compile_failures;
    if (t) {
      t->kernels += s1.kernels_compiled - s0.kernels_compiled;
      t->compile_failures += s1.compile_failures - s0.compile_failures;
      t->guard_failures += s1.guard_failures - s0.guard_failures;
      t->replays += trace_replay_count() - r0;
    }
    if (verbose_level > 1)
      printf("  instance %d run %d: %" PRIu64 " regions, %" PRIu64
             " compiled, %" PRIu64 " kernels compiled, %" PRIu64
             " guard failures, %" PRIu64 " replayed\n", inst, k,
             s1.regions - s0.regions,
             s1.regions_compiled - s0.regions_compiled,
             s1.kernels_compiled - s0.kernels_compiled,
             s1.guard_failures - s0.guard_failures,
             trace_replay_count() - r0);
    d = rp_compare(p, on, obs_e, obs_c, why, len, kind);
    rp_obs_free(obs_c, p->nsteps);
  }
  rp_obs_free(obs_e, p->nsteps);
  if (t) {
    t->programs++;
    t->compiled += compiled;
    t->fallback_programs += fell_back;
  }
  return d;
}

/* Run the instances listed, in order, from an empty region table (kernels
** compiled before stay in the kernel table: they are keyed by their IR).
** The first difference of kind `want` (any kind when 0) counts. */
static bool fails_fresh(const rp_prog *p, const uint8_t *on, const int *insts,
                        int n, char want, char *why, size_t len)
{
  cache_clear();
  for (int i = 0; i < n; i++) {
    char kind = 0;
    if (run_both(p, on, insts[i], NULL, why, len, &kind) >= 0 &&
        (!want || kind == want))
      return true;
  }
  return false;
}

/* -- Replay (a fresh process per candidate, for crashes) ----------------- */

static void spec_format(const rp_prog *p, const uint8_t *on, const int *insts,
                        int n, bool sizes, char *buf, size_t len)
{
  int k = rp_avoid ? snprintf(buf, len, "%" PRIu64 "a%u/", p->seed, rp_avoid)
                   : snprintf(buf, len, "%" PRIu64 "/", p->seed);
  for (int i = 0; i < n; i++)
    k += snprintf(buf + k, len - (size_t)k, "%s%d", i ? "," : "", insts[i]);
  k += snprintf(buf + k, len - (size_t)k, "/");
  for (int i = 0; i < p->nsteps; i += 4) {
    int x = 0;
    for (int b = 0; b < 4 && i + b < p->nsteps; b++)
      x |= on[i + b] ? 1 << b : 0;
    k += snprintf(buf + k, len - (size_t)k, "%x", x);
  }
  for (int i = 0; sizes && i < n && k < (int)len; i++) {
    const int64_t *z = p->size[insts[i]];
    k += snprintf(buf + k, len - (size_t)k, "%c%" PRId64 ",%" PRId64 ",%"
                  PRId64 ",%" PRId64, i ? ';' : '/', z[0], z[1], z[2], z[3]);
  }
}

/* Parse a spec (seed[a<avoid>]/inst,inst,.../step mask in hex[/R,C,K,B;
** R,C,K,B;... one per instance]) into p, on and insts. */
static int spec_parse(const char *spec, rp_prog *p, uint8_t *on, int *insts)
{
  char *end;
  uint64_t seed = strtoull(spec, &end, 10);
  if (*end == 'a')   /* the TC_RANDOM_AVOID features it was made with */
    rp_avoid = (unsigned)strtoul(end + 1, &end, 10);
  rp_generate(p, seed);
  int n = 0;
  if (*end != '/')
    return -1;
  do {
    insts[n++] = (int)strtol(end + 1, &end, 10);
  } while (*end == ',' && n < RP_MAXINST);
  if (*end != '/')
    return -1;
  const char *m = end + 1;
  for (int i = 0; i < p->nsteps; i += 4) {
    char h[2] = { *m ? *m++ : '0', 0 };
    int x = (int)strtol(h, NULL, 16);
    for (int b = 0; b < 4 && i + b < p->nsteps; b++)
      on[i + b] = (uint8_t)((x >> b) & 1);
  }
  for (int i = 0; i < n && (*m == '/' || *m == ';'); i++) {
    int64_t *z = p->size[insts[i]];
    sscanf(m + 1, "%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64, &z[0],
           &z[1], &z[2], &z[3]);
    m = strpbrk(m + 1, ";");
    if (!m)
      break;
  }
  rp_normalize(p, on);
  return n;
}

static const char *self_exe;

/* Run the candidate with --replay in a fresh process; its wait status. */
static int replay_status(const rp_prog *p, const uint8_t *on,
                         const int *insts, int n)
{
  static char spec[4096];
  spec_format(p, on, insts, n, true, spec, sizeof spec);
  char *argv[] = { (char *)self_exe, "--replay", spec, "--quiet", NULL };
  pid_t pid;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawn(&pid, self_exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return st;
}

/* Does the candidate crash (die by a signal or a sanitizer) in a fresh
** process? */
static bool crashes(const rp_prog *p, const uint8_t *on, const int *insts,
                    int n)
{
  int st = replay_status(p, on, insts, n);
  return st != -1 && (WIFSIGNALED(st) ||
                      (WIFEXITED(st) && WEXITSTATUS(st) != 0 &&
                       WEXITSTATUS(st) != 3));
}

/* Does the (shrunk) candidate still differ in a fresh process? Shrinking
** runs candidates in this one (region table cleared, kernel table kept),
** so a failure that needs a compiled kernel left by an earlier candidate,
** or reads memory it does not own, may not. */
static bool differs_fresh(const rp_prog *p, const uint8_t *on,
                          const int *insts, int n)
{
  int st = replay_status(p, on, insts, n);
  return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 3;
}

/* -- Shrinking ----------------------------------------------------------- */

typedef struct {
  bool crash;
  char kind;
  int budget;        /* candidate runs left */
  double deadline;   /* and a time limit (CLOCK_MONOTONIC seconds) */
  char why[512];
} shrink_ctx;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double shrink_seconds = 120;

static bool still(shrink_ctx *x, const rp_prog *p, const uint8_t *on,
                  const int *insts, int n)
{
  if (x->budget <= 0 || now_s() > x->deadline) {
    x->budget = 0;
    return false;
  }
  x->budget--;
  if (x->crash)
    return crashes(p, on, insts, n);
  char why[512];
  if (!fails_fresh(p, on, insts, n, x->kind, why, sizeof why))
    return false;
  memcpy(x->why, why, sizeof why);
  return true;
}

/* Drop instances, then steps (halves, quarters, ... single steps, until
** nothing more goes), then make the sizes small. */
static void shrink(rp_prog *p, uint8_t *on, int *insts, int *n,
                   shrink_ctx *x)
{
  uint8_t cand[RP_MAXS];
  int ci[RP_MAXINST];
  /* instances: the failing one alone, else drop from the front */
  if (*n > 1) {
    ci[0] = insts[*n - 1];
    if (still(x, p, on, ci, 1)) {
      insts[0] = ci[0];
      *n = 1;
    }
  }
  for (int i = 0; *n > 1 && i < *n - 1;) {
    int k = 0;
    for (int j = 0; j < *n; j++)
      if (j != i)
        ci[k++] = insts[j];
    if (still(x, p, on, ci, k)) {
      memcpy(insts, ci, sizeof(int) * (size_t)k);
      *n = k;
    } else {
      i++;
    }
  }
  /* steps */
  int idx[RP_MAXS], m = 0;
  for (int i = 0; i < p->nsteps; i++)
    if (on[i])
      idx[m++] = i;
  for (int chunk = m / 2 > 0 ? m / 2 : 1; chunk >= 1 && x->budget > 0;) {
    bool progress = false;
    for (int start = 0; start < m && x->budget > 0;) {
      memcpy(cand, on, (size_t)p->nsteps);
      int dropped = 0;
      for (int j = start; j < start + chunk && j < m; j++)
        if (cand[idx[j]]) {
          cand[idx[j]] = 0;
          dropped++;
        }
      if (dropped == 0 || rp_normalize(p, cand) == 0) {
        start += chunk;
        continue;
      }
      if (still(x, p, cand, insts, *n)) {
        memcpy(on, cand, (size_t)p->nsteps);
        progress = true;
      } else {
        start += chunk;
      }
    }
    m = 0;
    for (int i = 0; i < p->nsteps; i++)
      if (on[i])
        idx[m++] = i;
    if (chunk == 1 && !progress)
      break;
    if (chunk > 1)
      chunk /= 2;
  }
  /* sizes of several instances: smaller where the failure stays (while
  ** time is left; each candidate compiles for the new sizes) */
  for (int i = 0; *n > 1 && i < *n && x->budget > 0; i++) {
    int64_t *z = p->size[insts[i]];
    for (int k = 0; k < RP_NIN; k++) {
      int64_t tries[] = { 2, z[k] / 2 };
      for (int t = 0; t < 2; t++) {
        int64_t old = z[k];
        if (tries[t] >= old || tries[t] < 1)
          continue;
        z[k] = tries[t];
        if (still(x, p, on, insts, *n))
          break;
        z[k] = old;
      }
    }
  }
  /* sizes, when one instance is left */
  if (*n == 1) {
    int64_t *z = p->size[insts[0]];
    for (int k = 0; k < RP_NIN; k++) {
      int64_t tries[] = { 1, 2, 3, z[k] / 2 };
      for (int t = 0; t < 4; t++) {
        int64_t old = z[k];
        if (tries[t] >= old || tries[t] < 1)
          continue;
        z[k] = tries[t];
        if (still(x, p, on, insts, 1))
          break;
        z[k] = old;
      }
    }
  }
}

/* -- Failures ------------------------------------------------------------ */

static void report(const config *cf, rp_prog *p, uint8_t *on, int inst,
                   int step, char kind, const char *why, bool do_shrink)
{
  int insts[RP_MAXINST], n = 0;
  for (int j = 0; j <= inst; j++)
    insts[n++] = j;
  printf("\nFAIL seed %" PRIu64 " instance %d: %s\n", p->seed, inst, why);
  printf("  at: ");
  rp_print_step(p, step, stdout);
  printf("\n");
  if (!do_shrink) {
    printf("  sizes (in order):\n");
    rp_print_sizes(p, insts, n, stdout);
    printf("  program:\n");
    rp_print_body(p, on, step, stdout);
    fflush(stdout);
    return;
  }
  shrink_ctx x = { .crash = false, .kind = kind, .budget = 600,
                   .deadline = now_s() + shrink_seconds };
  char fresh[512];
  if (!fails_fresh(p, on, insts, n, kind, fresh, sizeof fresh)) {
    printf("  (does not fail from an empty region table: it needs the "
           "programs run before it in this process; rerun from an earlier "
           "seed)\n  sizes (in order):\n");
    rp_print_sizes(p, insts, n, stdout);
    printf("  program:\n");
    rp_print_body(p, on, step, stdout);
    fflush(stdout);
    return;
  }
  memcpy(x.why, fresh, sizeof fresh);
  shrink(p, on, insts, &n, &x);
  char spec[4096];
  spec_format(p, on, insts, n, true, spec, sizeof spec);
  int left = 0;
  for (int i = 0; i < p->nsteps; i++)
    left += on[i];
  printf("  shrunk to %d steps, %d instance(s)%s: %s\n", left, n,
         x.budget ? "" : " (stopped at its time or run limit)", x.why);
  printf("  replay: test_random --replay %s%s\n  sizes (in order):\n", spec,
         differs_fresh(p, on, insts, n) ? ""
         : " (but this shrunk program does not differ in a fresh process: "
           "the failure needs state left by the programs or candidates run "
           "before it, or memory contents; rerun with ASan, or from the "
           "seed)");
  rp_print_sizes(p, insts, n, stdout);
  printf("  program:\n");
  int mark = -1;
  sscanf(x.why, "step %d", &mark);
  rp_print_body(p, on, mark, stdout);
  if (cf->emit_c) {
    char note[700];
    snprintf(note, sizeof note, "Differs: %s", x.why);
    rp_print_c(p, on, insts, n, note, stdout);
  }
  fflush(stdout);
}

/* -- The loop over seeds ------------------------------------------------- */

static rp_prog prog;
static uint8_t prog_on[RP_MAXS];

static bool in_range(const config *cf, uint64_t seed, const totals *t)
{
  if (cf->end > cf->first)
    return seed < cf->end;
  return t->programs < cf->count;
}

static void run_all(const config *cf, totals *t)
{
  int shrinks = 0, printed = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t seed;
  for (seed = cf->first; in_range(cf, seed, t); seed++) {
    rp_generate(&prog, seed);
    memset(prog_on, 1, sizeof prog_on);
    rp_normalize(&prog, prog_on);
    crash_prepare(&prog, prog_on);
    rp_now.seed = seed;
    rp_now.active = true;
    t->structures++;
    long before = t->programs;
    uint64_t kbefore = t->kernels;
    long cbefore = t->compiled, fbefore = t->failed;
    /* Every instance runs; the first failure is reported (and shrunk)
    ** after the last, so shrinking does not disturb the tables. */
    int fj = -1, fd = -1;
    char fwhy[512], fkind = 0;
    int ninst = on_device && !device_can_run(&prog, prog_on) ? 0
                : instances(seed);
    t->skipped += ninst == 0;
    for (int j = 0; j < ninst; j++) {
      char why[512], kind = 0;
      int d = run_both(&prog, prog_on, j, t, why, sizeof why, &kind);
      if (d < 0)
        continue;
      t->failed++;
      if (fj < 0) {
        fj = j;
        fd = d;
        fkind = kind;
        memcpy(fwhy, why, sizeof why);
      }
    }
    rp_now.active = false;
    if (fj >= 0) {
      t->failed_seeds++;
      if (printed++ < 5 || shrinks < cf->shrink)
        report(cf, &prog, prog_on, fj, fd, fkind, fwhy,
               shrinks++ < cf->shrink);
      else
        printf("FAIL seed %" PRIu64 " instance %d: %s\n", seed, fj, fwhy);
    }
    rp_now.active = false;
    if (cf->verbose) {
      printf("seed %" PRIu64 ": %ld programs, %ld compiled, %ld failed, %"
             PRIu64 " kernels, %d steps\n", seed, t->programs - before,
             t->compiled - cbefore, t->failed - fbefore, t->kernels - kbefore,
             prog.nsteps);
      fflush(stdout);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec -
                                                               t0.tv_nsec);
  printf("random programs: seeds %" PRIu64 "..%" PRIu64 ": %ld programs run "
         "(%ld seeds), %ld with compiled regions, %ld failed (%ld seeds); "
         "%" PRIu64
         " kernels compiled, %" PRIu64 " compile failures in %ld programs, "
         "%" PRIu64 " guard failures, %" PRIu64 " replayed regions; "
         "%ld steps, %ld op errors; %.1f s\n",
         cf->first, seed, t->programs, t->structures, t->compiled, t->failed,
         t->failed_seeds,
         t->kernels, t->compile_failures, t->fallback_programs,
         t->guard_failures, t->replays, t->steps, t->error_steps, s);
  if (on_device)
    printf("random programs on the CUDA device: %ld structures skipped "
           "(with a matmul, which %s sums otherwise)\n",
           t->skipped, real_cublas ? "cuBLAS" : "the fake cuBLAS");
  fflush(stdout);
}

/* -- Entry points -------------------------------------------------------- */

static config cfg;

static void test_random_programs(void **state)
{
  (void)state;
  handlers_restore();
  totals t = { 0 };
  run_all(&cfg, &t);
  /* Most programs must really have run compiled code. */
  if (t.compiled < t.programs * 3 / 4)
    fail_msg("only %ld of %ld programs ran compiled regions", t.compiled,
             t.programs);
  /* Looped, some regions must have been replayed (a few in every hundred
  ** programs are: only regions of functional ops with no view qualify). */
  if (loops > 1 && t.programs >= 30 && t.replays == 0)
    fail_msg("%ld programs run %d times each, and no region replayed",
             t.programs, loops);
  if (t.failed)
    fail_msg("%ld of %ld random programs differ between eager and compiled",
             t.failed, t.programs);
}

static long env_long(const char *name, long dflt)
{
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

static void usage(void)
{
  fprintf(stderr, "usage: test_random [-n COUNT] [-s SEED] [--seeds A B] "
          "[-k N] [-c] [-v]\n       test_random --split COUNT SEED JOBS\n"
          "       test_random --print SEED | --replay SPEC\n");
  exit(2);
}

/* Seed ranges [a, b) for jobs: together COUNT programs from SEED (whole
** seeds), split into runs of about equal program counts. */
static void split(long count, uint64_t seed, int jobs)
{
  long total = 0;
  uint64_t end = seed;
  while (total < count)
    total += instances(end++);
  long per = (total + jobs - 1) / jobs, acc = 0;
  uint64_t a = seed;
  for (uint64_t s = seed; s < end; s++) {
    acc += instances(s);
    if (acc >= per || s + 1 == end) {
      printf("%" PRIu64 " %" PRIu64 " %ld\n", a, s + 1, acc);
      a = s + 1;
      acc = 0;
    }
  }
}

static int replay(const char *spec, bool quiet)
{
  static uint8_t on[RP_MAXS];
  int insts[RP_MAXINST];
  int n = spec_parse(spec, &prog, on, insts);
  if (n < 0) {
    fprintf(stderr, "bad spec %s\n", spec);
    return 2;
  }
  crash_prepare(&prog, on);
  rp_now.seed = prog.seed;
  rp_now.active = true;
  if (cfg.emit_c) {   /* just the program, as a standalone C file */
    rp_print_c(&prog, on, insts, n, spec, stdout);
    return 0;
  }
  if (!quiet) {
    printf("seed %" PRIu64 ", sizes (in order):\n", prog.seed);
    rp_print_sizes(&prog, insts, n, stdout);
    rp_print_body(&prog, on, -1, stdout);
  }
  int differ = 0;
  for (int i = 0; i < n; i++) {
    char why[512], kind;
    if (run_both(&prog, on, insts[i], NULL, why, sizeof why, &kind) >= 0) {
      differ++;
      if (!quiet)
        printf("instance %d differs: %s\n", insts[i], why);
    }
  }
  rp_now.active = false;
  if (!quiet && !differ)
    printf("same results\n");
  return differ ? 3 : 0;
}

/* A seed whose program crashed the process: find the first instance that
** crashes in a fresh process, shrink it there, print it. */
static int shrink_crash(uint64_t seed)
{
  static uint8_t on[RP_MAXS];
  rp_generate(&prog, seed);
  memset(on, 1, sizeof on);
  rp_normalize(&prog, on);
  int insts[RP_MAXINST], n = 0;
  bool found = false;
  for (int j = 0; j < prog.ninst && !found; j++) {
    insts[n++] = j;
    found = crashes(&prog, on, insts, n);
  }
  if (!found) {
    printf("seed %" PRIu64 ": no crash in a fresh process (it needs the "
           "programs run before it)\n", seed);
    return 1;
  }
  shrink_ctx x = { .crash = true, .budget = 400,
                   .deadline = now_s() + 5 * shrink_seconds };
  shrink(&prog, on, insts, &n, &x);
  char spec[4096];
  spec_format(&prog, on, insts, n, true, spec, sizeof spec);
  int left = 0;
  for (int i = 0; i < prog.nsteps; i++)
    left += on[i];
  printf("CRASH seed %" PRIu64 " shrunk to %d steps, %d instance(s)\n"
         "  replay: test_random --replay %s\n  sizes (in order):\n", seed,
         left, n, spec);
  rp_print_sizes(&prog, insts, n, stdout);
  printf("  program:\n");
  rp_print_body(&prog, on, -1, stdout);
  if (cfg.emit_c)
    rp_print_c(&prog, on, insts, n, "Crashes when compiled.", stdout);
  return 0;
}

int main(int argc, char **argv)
{
  self_exe = "/proc/self/exe";
  setenv("TC_ASYNC", "0", 0);
  setenv("TC_CACHE", "0", 0);
  /* One store for a whole test run: the sanitized suite runs the release
  ** suite's seeds again, and loads their kernels instead of compiling
  ** them (libgccjit is nearly all of this test's time; its output is the
  ** same code in both builds). */
  const char *store = getenv("TC_TEST_STORE");
  if (store && *store) {
    setenv("TC_CACHE", "1", 1);
    setenv("TC_CACHE_DIR", store, 1);
  }
  trace_init();
  cache_configure(&(cache_config){
    .hot = (int)env_long("TC_HOT", 1),
    .recompile_limit = (int)env_long("TC_RECOMPILE_LIMIT", 8) });
  crash_handlers();
  handlers_save();
  cfg.count = env_long("TC_RANDOM_PROGRAMS", 1000);
  cfg.first = (uint64_t)env_long("TC_RANDOM_SEED", 0);
  cfg.shrink = (int)env_long("TC_RANDOM_SHRINK", 1);
  shrink_seconds = (double)env_long("TC_RANDOM_SHRINK_SECONDS", 120);
  cfg.verbose = env_long("TC_RANDOM_VERBOSE", 0) != 0;
  loops = (int)env_long("TC_RANDOM_LOOP", 1);
  if (loops < 1)
    loops = 1;
  max_instances = (int)env_long("TC_RANDOM_INSTANCES", RP_MAXINST);
  if (max_instances < 1)
    max_instances = 1;
  const char *device = getenv("TC_RANDOM_DEVICE");
  on_device = device && strcmp(device, "cuda") == 0;
  const char *which = getenv("TC_TEST_CUDA_DEVICE");
  real_cublas = which && strcmp(which, "real") == 0;
  rp_data_as_copy = on_device;
  rp_indexing = env_long("TC_RANDOM_INDEXING", 0) != 0;
  const char *avoid = getenv("TC_RANDOM_AVOID");
  if (avoid && strstr(avoid, "zerod"))
    rp_avoid |= RP_AVOID_ZEROD;
  if (avoid && strstr(avoid, "mean"))
    rp_avoid |= RP_AVOID_MEAN;
  if (avoid && strstr(avoid, "twoviews"))
    rp_avoid |= RP_AVOID_TWOVIEWS;
  if (avoid && strstr(avoid, "lazydst"))
    rp_avoid |= RP_AVOID_LAZYDST;
  if (argc == 1) {
    const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_programs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  bool quiet = false;
  const char *spec = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool more = i + 1 < argc;
    if (!strcmp(a, "-n") && more)
      cfg.count = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "-s") && more)
      cfg.first = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--seeds") && i + 2 < argc) {
      cfg.first = strtoull(argv[++i], NULL, 10);
      cfg.end = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(a, "-k") && more)
      cfg.shrink = (int)strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "-c"))
      cfg.emit_c = true;
    else if (!strcmp(a, "-v"))
      cfg.verbose = true, verbose_level++;
    else if (!strcmp(a, "--quiet"))
      quiet = true;
    else if (!strcmp(a, "--split") && i + 3 < argc) {
      long count = strtol(argv[i + 1], NULL, 10);
      uint64_t seed = strtoull(argv[i + 2], NULL, 10);
      split(count, seed, (int)strtol(argv[i + 3], NULL, 10));
      return 0;
    } else if (!strcmp(a, "--print") && more) {
      rp_generate(&prog, strtoull(argv[++i], NULL, 10));
      memset(prog_on, 1, sizeof prog_on);
      rp_normalize(&prog, prog_on);
      int insts[RP_MAXINST];
      for (int j = 0; j < prog.ninst; j++)
        insts[j] = j;
      if (cfg.emit_c) {
        rp_print_c(&prog, prog_on, insts, prog.ninst, "", stdout);
      } else {
        rp_print_sizes(&prog, insts, prog.ninst, stdout);
        rp_print_body(&prog, prog_on, -1, stdout);
      }
      return 0;
    } else if (!strcmp(a, "--replay") && more)
      spec = argv[++i];
    else if (!strcmp(a, "--crash") && more)
      return shrink_crash(strtoull(argv[++i], NULL, 10));
    else
      usage();
  }
  if (spec)
    return replay(spec, quiet);
  totals t = { 0 };
  run_all(&cfg, &t);
  return t.failed ? 1 : 0;
}
