/*
** test_exit.c -- exit is safe whatever is compiling (issue 9): a program
** makes a dozen regions hot with background compiles (TC_ASYNC=1) and
** leaves while they are queued and one is in flight, by returning from
** main or by exit() from another thread while the main thread is still
** running ops. Against a cold store and a warm one (some kernels load,
** others compile), 20 runs, each with a fresh TMPDIR: every run exits 0,
** prints all of its output (equal to an eager run's), and leaves no
** libgccjit-* folder or temporary in TMPDIR or in the store.
** Public API only; each run is this binary re-executed (--child).
*/
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <tc.h>

#define NREGIONS 12

/* -- The child ------------------------------------------------------------------ */

/* Region r of run `salt`: a chain chosen by r; even regions have a fixed
** shape (their kernels are in a warm store), odd ones a shape that depends
** on the salt (new kernels every run). Returns the sum as bits. */
static int region(int r, int salt, unsigned long long *bits)
{
  int64_t n = 3000 + r * 17 + (r % 2 ? salt * 3 : 0);
  size_t mark = tc_scope_begin();
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(4, n), (uint64_t)r + 1);
  tc_tensor *v = tc_add_scalar(x, 0.25 * r);
  switch (r % 4) {
  case 0: v = tc_tanh(tc_mul(v, x)); break;
  case 1: v = tc_softmax(v, -1); break;
  case 2: v = tc_gelu(tc_sub(v, x)); break;
  default: v = tc_exp(tc_mul_scalar(tc_sigmoid(v), 0.5)); break;
  }
  double out;
  int rc = tc_item(tc_sum_all(v), &out);
  memcpy(bits, &out, sizeof out);
  tc_scope_end(mark);
  return rc;
}

static volatile int stop_work;

static void *exit_later(void *arg)
{
  (void)arg;
  nanosleep(&(struct timespec){ 0, 5 * 1000000 }, NULL);
  exit(0);
}

static int child(const char *how, int salt)
{
  /* twice each: the second sighting makes the region hot (TC_HOT=1) and
  ** queues its compile; the runs go on eagerly meanwhile */
  for (int pass = 0; pass < 2; pass++)
    for (int r = 0; r < NREGIONS; r++) {
      unsigned long long bits;
      if (region(r, salt, &bits) != 0)
        return 3;
      if (pass == 1)
        printf("region %d: %016llx\n", r, bits);
    }
  printf("done\n");
  if (strcmp(how, "thread") != 0)
    return 0;   /* return from main: the compiles are queued or running */
  fflush(stdout);
  pthread_t t;
  if (pthread_create(&t, NULL, exit_later, NULL) != 0)
    return 4;
  /* keep tracing, realizing and compiling until the other thread exits */
  for (int i = 0; !stop_work; i++) {
    unsigned long long bits;
    region(i % NREGIONS, salt + 1 + i / NREGIONS, &bits);
  }
  return 5;
}

/* -- The parent ------------------------------------------------------------------- */

static char self[4096];

/* Run the child with env; its stdout into *out (malloc'd). Returns the
** wait status. */
static int run(const char *how, int salt, const char *compile,
               const char *store, const char *tmp, char **out)
{
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TC_COMPILE", compile, 1);
    setenv("TC_HOT", "1", 1);
    setenv("TC_ASYNC", "1", 1);
    setenv("TC_CACHE_DIR", store, 1);
    setenv("TMPDIR", tmp, 1);
    char s[16];
    snprintf(s, sizeof s, "%d", salt);
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(self, self, "--child", how, s, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  ssize_t n;
  while ((n = read(p[0], buf + len, cap - len - 1)) > 0) {
    len += (size_t)n;
    if (cap - len < 2)
      buf = realloc(buf, cap *= 2);
  }
  buf[len] = '\0';
  close(p[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  *out = buf;
  return status;
}

/* Entries under dir (recursively) whose name starts with one of the
** prefixes, reported; the count of them. */
static int count_leftovers(const char *dir, bool any)
{
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    bool bad = any || strncmp(e->d_name, "libgccjit-", 10) == 0 ||
               strncmp(e->d_name, ".tmp-", 5) == 0 ||
               strncmp(e->d_name, "tc-jit-", 7) == 0;
    if (bad) {
      printf("# left behind: %s\n", p);
      n++;
    }
    struct stat st;
    if (!bad && lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      n += count_leftovers(p, any);
  }
  closedir(d);
  return n;
}

static void test_exit_while_compiling(void **state)
{
  (void)state;
  char base[] = "/tmp/tc-exit-XXXXXX";
  assert_non_null(mkdtemp(base));
  char warm[600];
  snprintf(warm, sizeof warm, "%s/warm-store", base);
  int problems = 0;
  for (int i = 0; i < 20; i++) {
    const char *how = i % 2 ? "thread" : "return";
    bool cold = i % 4 < 2;
    char tmp[600], store[600];
    snprintf(tmp, sizeof tmp, "%s/tmp%d", base, i);
    assert_int_equal(mkdir(tmp, 0700), 0);
    snprintf(store, sizeof store, "%s/cold%d", base, i);
    char *want, *got;
    /* eager reference, in a store of its own */
    int st = run(how, i, "0", store, tmp, &want);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st = run(how, i, "1", cold ? store : warm, tmp, &got);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("# run %d (%s, %s store): %s %d\n", i, how, cold ? "cold" : "warm",
             WIFSIGNALED(st) ? "signal" : "exit status",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      problems++;
    }
    if (strcmp(got, want) != 0) {
      printf("# run %d (%s): output differs:\n%s# want:\n%s", i, how, got,
             want);
      problems++;
    }
    assert_non_null(strstr(want, "done\n"));
    problems += count_leftovers(tmp, true);
    problems += count_leftovers(cold ? store : warm, false);
    free(want);
    free(got);
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(problems, 0);
}

int main(int argc, char **argv)
{
  if (argc == 4 && strcmp(argv[1], "--child") == 0)
    return child(argv[2], atoi(argv[3]));
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return 1;
  self[n] = '\0';
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_exit_while_compiling),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
