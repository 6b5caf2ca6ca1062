/*
** test_worker.c -- src/jit_cpu/worker.c: libgccjit in a child process. A
** kernel compiled by the worker runs here and equals eager bitwise; the
** artifact carries its key and a wrong key is refused; whatever the child
** does (crash, SIGKILL, exit(1) as on "virtual memory exhausted", a real
** out-of-memory, a hang) the request fails with the reason, this process
** lives on and the next compile gets a new worker; what it started (as,
** ld) dies with it; the child holds none of
** our descriptors and runs none of our exit handlers; it is replaced after
** its limits, ends when we die, and leaves nothing in TMPDIR. Workers are
** this build's tc-worker program, which starts clean where a fork inherits
** a lock held by another thread; a program that is not this build's is
** given up for fork; one started after the environment changed builds
** with this process's settings; and the forked workers behave the same.
**
** main() points TMPDIR at a fresh directory first, so the tests can look
** at everything the workers put there. Nothing here compiles in this
** process: libgccjit reads TMPDIR once per process, and the workers must
** read their own (a fork inherits what the parent has read).
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jit_cpu.h"
#include "eager.h"
#include "../../src/cache/store.h"
#include "exp_kernel.h"

#define KEY_A "0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210"

static char tmpdir[256];

/* -- Helpers ------------------------------------------------------------------- */

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Compile in the worker; fails the test unless it works. */
static jcpu_kernel *wcompile(const kir_kernel *k, const char *key,
                             const char *path)
{
  jcpu_kernel *jk = NULL;
  char why[256] = "";
  jcpu_status st = jcpu_worker_compile(k, key, path, &jk, why, sizeof why);
  if (st != JCPU_OK)
    fail_msg("worker compile failed (%d): %s", st, why);
  assert_non_null(jk);
  return jk;
}

/* The compile must fail; returns the reason. */
static void wfail(const kir_kernel *k, char *why, size_t len)
{
  jcpu_kernel *jk = (jcpu_kernel *)(void *)why;   /* must become NULL */
  why[0] = '\0';
  assert_int_equal(jcpu_worker_compile(k, KEY_A, NULL, &jk, why, len),
                   JCPU_E_WORKER);
  assert_null(jk);
  assert_true(strlen(why) > 0);
  assert_null(strchr(why, '\n'));
}

/* Run k's kernel on x (n floats) and check it against eager, bitwise. */
static void check_runs(const jcpu_kernel *jk, const kir_kernel *k, double c)
{
  int64_t n = k->size[0];
  tc_tensor *x = tc_randn(TC_F32, 1, &n, 7);
  float *got = calloc((size_t)n, sizeof *got), *want = calloc((size_t)n, 4);
  char *bufs[2] = { tc_data(x), (char *)got };
  assert_int_equal(jcpu_launch(jk, k, bufs, NULL, NULL), 0);
  tc_tensor *e = tc_exp(x), *m = tc_mul_scalar(e, c), *r = tc_add(m, x);
  assert_int_equal(tc_copy_to(r, want, (size_t)n * 4), 0);
  assert_memory_equal(got, want, (size_t)n * 4);
  tc_release(r); tc_release(m); tc_release(e); tc_release(x);
  free(got);
  free(want);
}

/* Entries of a directory other than . and .., into names (count). */
static int list_dir(const char *dir, char names[][256], int max)
{
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && n < max)
      snprintf(names[n++], 256, "%s", e->d_name);
  closedir(d);
  return n;
}

/* Nothing left in dir (what is, is listed). */
static void assert_empty(const char *dir)
{
  char names[8][256];
  int n = list_dir(dir, names, 8);
  for (int i = 0; i < n; i++)
    printf("# left in %s: %s\n", dir, names[i]);
  assert_int_equal(n, 0);
}

/* Running: a zombie is not (an orphan's new parent may be slow to reap). */
static bool alive(long pid)
{
  if (pid <= 0 || kill((pid_t)pid, 0) != 0)
    return false;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] != 'Z';
}

/* Processes of group pgid that are not zombies (a zombie writes nothing;
** init may be slow to reap one), from ps. */
static int group_alive(pid_t pgid)
{
  char line[256];
  FILE *ps = popen("ps -e -o pgid=,stat=,pid=,comm=", "r");
  assert_non_null(ps);
  int n = 0;
  while (fgets(line, sizeof line, ps)) {
    int g;
    char stat[16];
    if (sscanf(line, "%d %15s", &g, stat) == 2 && g == pgid &&
        stat[0] != 'Z') {
      printf("# still running: %s", line);
      n++;
    }
  }
  assert_int_equal(pclose(ps), 0);
  return n;
}

/* End the running worker (an injected SIGKILL), so the next compile starts
** a fresh one. */
static void fresh_worker(void)
{
  kir_kernel *k = exp_kernel(99, 1.5);
  char why[256];
  jcpu_worker_fault_next(JCPU_FAULT_KILL);
  jcpu_kernel *jk = NULL;
  jcpu_worker_compile(k, KEY_A, NULL, &jk, why, sizeof why);
  jcpu_free(jk);
  assert_int_equal(jcpu_worker_pid(), 0);
  free(k);
}

/* -- A compiled kernel ------------------------------------------------------------ */

static void test_worker_kernel_equals_eager(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(100003, 2.0);
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
  assert_true(jcpu_worker_pid() > 0);
  assert_true(jcpu_worker_pid() != getpid());
  /* the dump and compile time came back from the child */
  assert_non_null(jcpu_source(jk));
  assert_non_null(strstr(jcpu_source(jk), "main ("));
  assert_true(jcpu_last_compile_ms(jk) > 0);
  check_runs(jk, k, 2.0);
  jcpu_free(jk);
  free(k);
}

/* Without a store path, the artifact lives in the worker's private TMPDIR
** only until it is loaded: the folder holds nothing afterwards. */
static void test_worker_private_files(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(1000, 3.0);
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
  char names[8][256], sub[600];
  assert_int_equal(list_dir(tmpdir, names, 8), 1);   /* tc-jit-XXXXXX */
  assert_true(strncmp(names[0], "tc-jit-", 7) == 0);
  snprintf(sub, sizeof sub, "%s/%s", tmpdir, names[0]);
  assert_int_equal(list_dir(sub, names, 8), 0);
  check_runs(jk, k, 3.0);   /* unlinked, still mapped */
  jcpu_free(jk);
  free(k);
}

/* -- The artifact carries its key ------------------------------------------------- */

static void test_worker_artifact_key(void **state)
{
  (void)state;
  char dir[] = "/tmp/tc-test-worker-XXXXXX", path[128];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/k.so", dir);
  kir_kernel *k = exp_kernel(5000, 4.0);
  jcpu_kernel *jk = wcompile(k, KEY_A, path);
  check_runs(jk, k, 4.0);
  jcpu_free(jk);
  /* the bytes of the file hold the marker, the key and a NUL */
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char bytes[1 << 20];
  size_t n = fread(bytes, 1, sizeof bytes, f);
  fclose(f);
  assert_string_equal(JCPU_KEY_MARKER, STORE_KEY_MARKER);   /* one spelling */
  const char want[] = JCPU_KEY_MARKER KEY_A;   /* sizeof counts the NUL */
  assert_true(store_artifact_has_key(bytes, n, KEY_A));    /* as the store sees it */
  bool found = false;
  for (size_t i = 0; !found && i + sizeof want <= n; i++)
    found = memcmp(bytes + i, want, sizeof want) == 0;
  assert_true(found);
  /* loaded under its key it works, under another it is refused */
  char why[256];
  assert_int_equal(jcpu_load(k, KEY_A, path, &jk, why, sizeof why), JCPU_OK);
  check_runs(jk, k, 4.0);
  jcpu_free(jk);
  jk = (jcpu_kernel *)(void *)why;
  assert_int_equal(jcpu_load(k, KEY_B, path, &jk, why, sizeof why),
                   JCPU_E_LOAD);
  assert_null(jk);
  assert_string_equal(why, "artifact is for another kernel");
  /* a shared object with no key at all (libc) is refused too */
  Dl_info info;
  assert_true(dladdr((void *)&fclose, &info) != 0);
  assert_int_equal(jcpu_load(k, KEY_A, info.dli_fname, &jk, why, sizeof why),
                   JCPU_E_LOAD);
  assert_null(jk);
  assert_string_equal(why, "artifact carries no kernel key");
  unlink(path);
  rmdir(dir);
  free(k);
}

/* -- Whatever the child does, this process lives on ------------------------------- */

static pid_t test_pid;
static char marker[300];

/* Registered before the worker exists: if the child ran our exit handlers
** (libgccjit calls exit), this would leave a file behind. */
static void exit_handler(void)
{
  if (getpid() != test_pid) {
    int fd = open(marker, O_WRONLY | O_CREAT, 0600);
    if (fd >= 0)
      close(fd);
  }
}

/* One fault: the request fails with a reason starting with `want`, the
** worker is gone, and the next compile works in a new one. */
static void fault_case(jcpu_fault kind, const char *want, char *why,
                       size_t len)
{
  kir_kernel *k = exp_kernel(777, 5.0);
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);   /* a worker is running */
  jcpu_free(jk);
  long before = jcpu_worker_pid();
  assert_true(alive(before));
  jcpu_worker_fault_next(kind);
  wfail(k, why, len);
  if (strncmp(why, want, strlen(want)) != 0)
    fail_msg("fault %d: reason \"%s\", want \"%s...\"", kind, why, want);
  assert_int_equal(jcpu_worker_pid(), 0);
  assert_false(alive(before));   /* reaped */
  jk = wcompile(k, KEY_A, NULL);
  assert_true(jcpu_worker_pid() != before);
  check_runs(jk, k, 5.0);
  jcpu_free(jk);
  free(k);
}

static void test_worker_crash(void **state)
{
  (void)state;
  char why[256];
  fault_case(JCPU_FAULT_CRASH, "compile worker died (signal 11)", why,
             sizeof why);
  assert_string_equal(why, "compile worker died (signal 11)");
  fault_case(JCPU_FAULT_KILL, "compile worker died (signal 9)", why,
             sizeof why);
}

/* What the worker started (the driver's as and ld, in its process group)
** ends with it: nothing of it runs on to write into TMPDIR or the store
** after the request has failed. */
static void test_worker_orphan(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(778, 6.0);
  jcpu_free(wcompile(k, KEY_A, NULL));
  pid_t before = (pid_t)jcpu_worker_pid();
  assert_true(alive(before));
  jcpu_worker_fault_next(JCPU_FAULT_ORPHAN);
  char why[256];
  wfail(k, why, sizeof why);
  assert_string_equal(why, "compile worker died (signal 9)");
  assert_int_equal(group_alive(before), 0);
  assert_empty(tmpdir);
  free(k);
}

/* libgccjit's xmalloc prints "virtual memory exhausted" and calls exit(1):
** the child's exit, its last words as the reason, our handlers not run. */
static void test_worker_exit(void **state)
{
  (void)state;
  char why[256];
  fault_case(JCPU_FAULT_EXIT, "compile worker exited (status 1)", why,
             sizeof why);
  assert_string_equal(why, "compile worker exited (status 1): virtual "
                           "memory exhausted: Cannot allocate memory");
  struct stat st;
  assert_int_equal(stat(marker, &st), -1);
}

/* A real out-of-memory: the child's address space is capped a little above
** its size, and libgccjit runs out during the compile. However it ends
** (libgccjit's exit, a crash, or an error it reports), this process
** carries on and the next compile works. */
static void test_worker_nomem(void **state)
{
  (void)state;
  char why[256];
  fault_case(JCPU_FAULT_NOMEM, "", why, sizeof why);
  printf("# out of memory in the worker: %s\n", why);
  struct stat st;
  assert_int_equal(stat(marker, &st), -1);
}

/* A compile past the deadline is killed, quickly, and reported. */
/* The deadline leaves room for an ordinary compile on a loaded machine
** under ASan (the hang never ends, so any deadline shows the kill); the
** teardown restores it even when the test fails. */
static void test_worker_hang(void **state)
{
  (void)state;
  char why[256];
  jcpu_worker_set_timeout(3000);
  double t0 = now_ms();
  fault_case(JCPU_FAULT_HANG, "compile took longer than 3000 ms; worker killed",
             why, sizeof why);
  assert_true(now_ms() - t0 < 20000);
}

static int restore_timeout(void **state)
{
  (void)state;
  jcpu_worker_set_timeout(0);
  return 0;
}

/* -- Descriptors ---------------------------------------------------------------------- */

/* A pipe opened before the worker starts: once we close its write end, the
** read end sees EOF, so the child holds no copy. And the child has exactly
** its four descriptors. */
static void test_worker_fds(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(999, 6.0);
  fresh_worker();
  int p[2];
  assert_int_equal(pipe(p), 0);   /* inheritable, as a user's might be */
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
  long pid = jcpu_worker_pid();
  assert_true(alive(pid));
  close(p[1]);
  struct pollfd pf = { p[0], POLLIN, 0 };
  assert_int_equal(poll(&pf, 1, 5000), 1);
  char c;
  assert_int_equal(read(p[0], &c, 1), 0);   /* EOF */
  close(p[0]);
  char dir[64], names[64][256];
  snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
  int n = list_dir(dir, names, 64);
  if (n != 4) {
    for (int i = 0; i < n; i++)
      printf("# child fd %s\n", names[i]);
    fail_msg("the worker holds %d descriptors, want 4", n);
  }
  jcpu_free(jk);
  free(k);
}

/* -- Limits, parent death ------------------------------------------------------------- */

/* After max compiles, or once it has grown past the bound, the next request
** goes to a new worker. */
static void test_worker_limits(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(555, 7.0);
  fresh_worker();
  jcpu_worker_set_limits(2, 0);
  jcpu_free(wcompile(k, KEY_A, NULL));
  long a = jcpu_worker_pid();
  jcpu_free(wcompile(k, KEY_A, NULL));
  assert_int_equal(jcpu_worker_pid(), a);   /* 2 served: retired ... */
  jcpu_free(wcompile(k, KEY_A, NULL));
  long b = jcpu_worker_pid();
  assert_true(b != a);                      /* ... and replaced */
  assert_false(alive(a));
  /* 1 MB: every compile grows libgccjit's process by more */
  jcpu_worker_set_limits(1000, 1);
  jcpu_free(wcompile(k, KEY_A, NULL));
  jcpu_free(wcompile(k, KEY_A, NULL));
  assert_true(jcpu_worker_pid() != b);
  jcpu_worker_set_limits(0, 0);
  free(k);
}

/* A process that dies without stopping its worker (SIGKILL), while the
** worker is idle or in the middle of a request: the worker sees EOF, or
** fails to send its answer (EPIPE, never SIGPIPE), removes its TMPDIR and
** exits. Mid-request, a timer kills the process (no thread: a fork of a
** threaded process may not start one under ThreadSanitizer). */
static void die_now(int sig)
{
  (void)sig;
  raise(SIGKILL);
}

static void parent_dies(bool mid_request)
{
  char dir[] = "/tmp/tc-test-orphan-XXXXXX";
  assert_non_null(mkdtemp(dir));
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t child = fork();
  if (child == 0) {
    close(p[0]);
    setenv("TMPDIR", dir, 1);
    kir_kernel *k = exp_kernel(100, 8.0);
    jcpu_kernel *jk = NULL;
    char why[256];
    if (jcpu_worker_compile(k, KEY_A, NULL, &jk, why, sizeof why) != JCPU_OK)
      _exit(1);
    long pid = jcpu_worker_pid();
    if (write(p[1], &pid, sizeof pid) != sizeof pid)
      _exit(1);
    if (mid_request) {   /* dies 100 ms into the worker's 300 ms wait */
      signal(SIGALRM, die_now);
      struct itimerval at = { { 0, 0 }, { 0, 100 * 1000 } };
      setitimer(ITIMER_REAL, &at, NULL);
      jcpu_worker_fault_next(JCPU_FAULT_SLOW);
      jcpu_worker_compile(k, KEY_B, NULL, &jk, why, sizeof why);
      _exit(1);   /* not reached: the compile outlasts the timer */
    }
    raise(SIGKILL);
  }
  close(p[1]);
  long wpid = 0;
  assert_int_equal(read(p[0], &wpid, sizeof wpid), (ssize_t)sizeof wpid);
  close(p[0]);
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status));
  char names[8][256];
  double t0 = now_ms();
  while ((alive(wpid) || list_dir(dir, names, 8) > 0) &&
         now_ms() - t0 < 10000)
    usleep(10000);
  assert_false(alive(wpid));
  assert_empty(dir);   /* its folder went too */
  rmdir(dir);
}

static void test_worker_parent_dies(void **state)
{
  (void)state;
  parent_dies(false);
  parent_dies(true);
}

/* -- Unsupported kernels, shutdown ---------------------------------------------------- */

static void test_worker_unsupported(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(10, 1.0);
  k->buf[0].dtype = k->buf[1].dtype = TC_I32;
  int x = kir_load(k, 0);
  k->pass[0].value = kir_emit(k, KOP_DIV, TC_I32, x, x, -1);
  jcpu_kernel *jk = NULL;
  char why[256];
  assert_int_equal(jcpu_worker_compile(k, KEY_A, NULL, &jk, why, sizeof why),
                   JCPU_E_UNSUPPORTED);
  assert_non_null(strstr(why, "unsupported kernel: "));
  jcpu_fail_next(1);   /* the injection applies to worker compiles too */
  free(k);
  k = exp_kernel(10, 1.0);
  assert_int_equal(jcpu_worker_compile(k, KEY_A, NULL, &jk, why, sizeof why),
                   JCPU_E_COMPILE);
  assert_string_equal(why, "injected compile failure");
  free(k);
}

/* -- The pool ------------------------------------------------------------------ */

/* A compile on another thread that hangs (injected) until the deadline. */
typedef struct {
  jcpu_status st;
  char why[256];
  double end;
} hung;

static void *compile_hung(void *arg)
{
  hung *h = arg;
  kir_kernel *k = exp_kernel(77, 7.0);
  jcpu_kernel *jk = NULL;
  h->st = jcpu_worker_compile(k, KEY_B, NULL, &jk, h->why, sizeof h->why);
  h->end = now_ms();
  jcpu_free(jk);
  free(k);
  return NULL;
}

/* While one worker hangs on a request, a second request: with a pool of
** two it gets a worker of its own and finishes (right) long before the
** hung one is killed; with a pool of one it waits for the slot, and only
** then compiles (right, in the slot's new worker). */
static void pool_case(int size, int want_running)
{
  jcpu_worker_set_max(size);
  jcpu_worker_set_timeout(3000);
  fresh_worker();
  int before = jcpu_worker_running();
  jcpu_worker_fault_next(JCPU_FAULT_HANG);
  hung h = { .st = JCPU_OK };
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, compile_hung, &h), 0);
  /* the fault is bound once the hung request holds a slot, which its
  ** worker's start shows */
  double t0 = now_ms();
  while (jcpu_worker_running() == before && now_ms() - t0 < 10000)
    nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
  assert_int_equal(jcpu_worker_running(), before + 1);
  kir_kernel *k = exp_kernel(4096, 8.0);
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
  double end = now_ms();
  assert_int_equal(jcpu_worker_running(), want_running);
  check_runs(jk, k, 8.0);
  jcpu_free(jk);
  free(k);
  pthread_join(t, NULL);
  assert_int_equal(h.st, JCPU_E_WORKER);
  assert_string_equal(h.why, "compile took longer than 3000 ms; worker "
                      "killed");
  if (size > 1)
    assert_true(end < h.end);    /* side by side */
  else
    assert_true(end >= h.end);   /* after the slot came free */
  jcpu_worker_set_timeout(0);
}

static void test_worker_pool(void **state)
{
  (void)state;
  /* one slot: the hung worker is killed, then the slot starts another */
  pool_case(1, 1);
  /* two: slot 0's worker hangs (then is killed), slot 1's compiles */
  pool_case(2, 2);
  jcpu_worker_set_max(0);
}

static int restore_pool(void **state)
{
  (void)state;
  jcpu_worker_set_max(0);
  jcpu_worker_set_timeout(0);
  return 0;
}

/* -- How a worker starts -------------------------------------------------------------
** A fork copies the locks other threads hold at that moment; the child
** that needs one waits forever (an allocator without fork handlers, such as
** ASan's, did this to the pool's workers). held stands for such a lock:
** this thread holds it while a worker starts, and the fork handler takes
** it in the child, as a library's handler would. A program started afresh
** (tc-worker) inherits no lock and runs no fork handler. */

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static volatile bool take_held_in_child;
static void child_takes_held(void)
{
  if (take_held_in_child)
    pthread_mutex_lock(&held);
}

static void register_child_handler(void)
{
  pthread_atfork(NULL, NULL, child_takes_held);
}

static jcpu_status compile_holding_lock(kir_kernel *k, char *why, size_t len)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_child_handler);
  fresh_worker();
  pthread_mutex_lock(&held);
  take_held_in_child = true;
  jcpu_kernel *jk = NULL;
  jcpu_status st = jcpu_worker_compile(k, KEY_A, NULL, &jk, why, len);
  take_held_in_child = false;
  pthread_mutex_unlock(&held);
  if (jk)
    check_runs(jk, k, 2.5);
  jcpu_free(jk);
  return st;
}

/* This build's tc-worker is found (one folder up from this test) and
** starts clean. */
static void test_worker_program_starts_clean(void **state)
{
  (void)state;
  const char *prog = jcpu_worker_program();
  const char *base = strrchr(prog, '/');
  if (!base || strcmp(base, "/tc-worker") != 0)
    fail_msg("no tc-worker found (got \"%s\")", prog);
  kir_kernel *k = exp_kernel(1000, 2.5);
  char why[256] = "";
  jcpu_status st = compile_holding_lock(k, why, sizeof why);
  if (st != JCPU_OK)
    fail_msg("compile failed (%d): %s", st, why);
  free(k);
}

/* The same by fork: the child waits on the lock until the deadline. */
static void test_worker_fork_inherits_locks(void **state)
{
  (void)state;
  jcpu_worker_set_program("");
  assert_string_equal(jcpu_worker_program(), "");
  jcpu_worker_set_timeout(2000);
  kir_kernel *k = exp_kernel(1001, 2.5);
  char why[256] = "";
  assert_int_equal(compile_holding_lock(k, why, sizeof why), JCPU_E_WORKER);
  assert_string_equal(why, "the compile worker did not start in 2000 ms");
  assert_int_equal(jcpu_worker_pid(), 0);   /* killed and reaped */
  jcpu_free(wcompile(k, KEY_A, NULL));      /* the next one starts */
  free(k);
}

/* A program that is not this build's worker (it ends at once; it says
** something else first), or that others may write (it never runs), is
** given up for good: the compile still works, by fork, and later workers
** are forked. */
static void test_worker_program_refused(void **state)
{
  (void)state;
  char script[300], ran[300];
  snprintf(script, sizeof script, "%s/not-tc-worker.sh", tmpdir);
  snprintf(ran, sizeof ran, "%s/it-ran", tmpdir);
  static const struct { const char *body; mode_t mode; } cases[] = {
    { "#!/bin/sh\nexit 0\n", 0700 },
    { "#!/bin/sh\nhead -c 4096 /dev/zero | tr '\\0' x >&3\n", 0700 },
    { "#!/bin/sh\ntouch \"$2/../it-ran\"\n", 0722 },
  };
  kir_kernel *k = exp_kernel(1002, 3.5);
  for (int i = 0; i < 3; i++) {
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs(cases[i].body, f);
    fclose(f);
    assert_int_equal(chmod(script, cases[i].mode), 0);
    fresh_worker();
    jcpu_worker_set_program(script);
    assert_string_equal(jcpu_worker_program(), script);
    jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
    assert_string_equal(jcpu_worker_program(), "");   /* forked */
    check_runs(jk, k, 3.5);
    jcpu_free(jk);
  }
  assert_int_equal(access(ran, F_OK), -1);   /* the writable one never ran */
  unlink(script);
  free(k);
}

/* A worker started after the program changed its environment still builds
** with this process's settings (a new program would read them afresh): a
** libgccjit name that cannot load would fail every compile there. */
static void test_worker_settings_pinned(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(1003, 4.5);
  fresh_worker();
  setenv("TC_GCCJIT", "libtc-no-such-gccjit.so.0", 1);
  jcpu_kernel *jk = wcompile(k, KEY_A, NULL);
  check_runs(jk, k, 4.5);
  jcpu_free(jk);
  free(k);
}

static int restore_program(void **state)
{
  (void)state;
  jcpu_worker_set_program(NULL);
  jcpu_worker_set_timeout(0);
  return 0;
}

static int restore_environment(void **state)
{
  (void)state;
  unsetenv("TC_GCCJIT");
  return 0;
}

/* Last: after shutdown no worker runs or starts, and TMPDIR is empty. */
static void test_worker_shutdown(void **state)
{
  (void)state;
  kir_kernel *k = exp_kernel(321, 9.0);
  jcpu_free(wcompile(k, KEY_A, NULL));
  long pid = jcpu_worker_pid();
  jcpu_worker_shutdown(1000);
  assert_int_equal(jcpu_worker_pid(), 0);
  assert_false(alive(pid));
  char why[256];
  wfail(k, why, sizeof why);
  assert_string_equal(why, "compile cancelled: the process is exiting");
  assert_int_equal(jcpu_worker_pid(), 0);
  assert_empty(tmpdir);
  free(k);
}

static int use_fork(void **state)
{
  (void)state;
  jcpu_worker_set_program("");
  return 0;
}

int main(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tc-test-worker-tmp-XXXXXX");
  if (!mkdtemp(tmpdir))
    return 1;
  setenv("TMPDIR", tmpdir, 1);
  test_pid = getpid();
  snprintf(marker, sizeof marker, "/tmp/tc-test-worker-marker-%ld",
           (long)test_pid);
  atexit(exit_handler);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_worker_kernel_equals_eager),
    cmocka_unit_test(test_worker_private_files),
    cmocka_unit_test(test_worker_artifact_key),
    cmocka_unit_test(test_worker_crash),
    cmocka_unit_test(test_worker_orphan),
    cmocka_unit_test(test_worker_exit),
    cmocka_unit_test(test_worker_nomem),
    cmocka_unit_test_teardown(test_worker_hang, restore_timeout),
    cmocka_unit_test(test_worker_fds),
    cmocka_unit_test(test_worker_limits),
    cmocka_unit_test(test_worker_parent_dies),
    cmocka_unit_test(test_worker_unsupported),
    cmocka_unit_test(test_worker_program_starts_clean),
    cmocka_unit_test_teardown(test_worker_fork_inherits_locks,
                              restore_program),
    cmocka_unit_test_teardown(test_worker_program_refused, restore_program),
    cmocka_unit_test_teardown(test_worker_settings_pinned,
                              restore_environment),
    cmocka_unit_test_teardown(test_worker_pool, restore_pool),
    cmocka_unit_test(test_worker_shutdown),
  };
  /* Where no tc-worker is found, workers are forked: the same behaviour.
  ** First: the pool test leaves a second worker running. */
  const struct CMUnitTest forked[] = {
    cmocka_unit_test(test_worker_kernel_equals_eager),
    cmocka_unit_test(test_worker_crash),
    cmocka_unit_test(test_worker_orphan),
    cmocka_unit_test(test_worker_exit),
    cmocka_unit_test(test_worker_fds),
    cmocka_unit_test(test_worker_limits),
    cmocka_unit_test(test_worker_parent_dies),
  };
  int rc = cmocka_run_group_tests_name("forked", forked, use_fork,
                                       restore_program);
  rc |= cmocka_run_group_tests_name("started as tc-worker", tests, NULL,
                                    NULL);
  unlink(marker);
  rmdir(tmpdir);
  return rc;
}
