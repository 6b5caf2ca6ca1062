/*
** test_warm.c -- the disk store end to end, through the public API only:
** a second process compiles nothing and loads every kernel; a truncated
** artifact is detected and recompiled; 8 processes racing on an empty
** directory all succeed; a full, read-only or unwritable store degrades to
** memory with compile mode still on; and the results never change. Each
** run is this binary re-executed (--child) with its own environment, and
** where asked inside its own mount namespace (sandbox.h).
*/
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <tc.h>

#include "sandbox.h"

/* -- The child: a small model loop, then its stats and result ---------------- */

static int child(void)
{
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(64, 256), 1);
  tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(256), 2);
  double acc = 0;
  for (int it = 0; it < 4; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *h = tc_gelu(tc_add_scalar(tc_mul(x, w), 0.1 * it));
    tc_tensor *s = tc_sum_all(tc_mul(tc_softmax(h, -1), h));
    double v;
    if (tc_item(s, &v) != 0)
      return 3;
    acc += v;
    tc_scope_end(mark);
  }
  tc_stats st;
  tc_stats_get(&st);
  uint64_t bits;
  memcpy(&bits, &acc, sizeof bits);
  printf("%llu %llu %016llx %llu %llu\n",
         (unsigned long long)st.kernels_compiled,
         (unsigned long long)st.kernels_loaded, (unsigned long long)bits,
         (unsigned long long)st.compile_failures,
         (unsigned long long)st.regions_compiled);
  tc_release(x);
  tc_release(w);
  return 0;
}

/* -- The parent ---------------------------------------------------------------- */

typedef struct {
  unsigned long long compiled, loaded, bits, failures, regions_compiled;
  bool skipped;                 /* the sandbox asked for is unavailable */
} run_out;

static char self[4096];

/* How a child sees the store's directory. */
typedef enum {
  SEE_PLAIN,
  SEE_FULL,       /* a tiny tmpfs, filled up: every write gets ENOSPC */
  SEE_READONLY    /* a read-only bind mount: every write gets EROFS */
} view;

static pid_t spawn_in(const char *dir, const char *extra_env, int fd_out,
                      view v)
{
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TC_COMPILE", "1", 1);
    setenv("TC_HOT", "1", 1);
    setenv("TC_ASYNC", "0", 1);
    setenv("TC_CACHE_DIR", dir, 1);
    if (extra_env)
      putenv((char *)extra_env);
    if (v != SEE_PLAIN &&
        (sandbox_enter() < 0 ||
         (v == SEE_FULL && (sandbox_tmpfs(dir, 256, 0) < 0 ||
                            sandbox_fill(dir) < 0)) ||
         (v == SEE_READONLY && sandbox_readonly(dir) < 0)))
      _exit(SANDBOX_SKIP);
    dup2(fd_out, 1);
    execl(self, self, "--child", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static pid_t spawn(const char *dir, const char *extra_env, int fd_out)
{
  return spawn_in(dir, extra_env, fd_out, SEE_PLAIN);
}

static run_out run_in(const char *dir, const char *extra_env, view v)
{
  char tmpl[] = "/tmp/tc-warm-out-XXXXXX";
  int fd = mkstemp(tmpl);
  assert_true(fd >= 0);
  pid_t pid = spawn_in(dir, extra_env, fd, v);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  run_out r = { 0, 0, 0, 0, 0, false };
  if (WIFEXITED(status) && WEXITSTATUS(status) == SANDBOX_SKIP) {
    r.skipped = true;
    close(fd);
    unlink(tmpl);
    return r;
  }
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FILE *f = fdopen(fd, "r");
  rewind(f);
  assert_int_equal(fscanf(f, "%llu %llu %llx %llu %llu", &r.compiled,
                          &r.loaded, &r.bits, &r.failures,
                          &r.regions_compiled), 5);
  fclose(f);
  unlink(tmpl);
  return r;
}

static run_out run(const char *dir, const char *extra_env)
{
  return run_in(dir, extra_env, SEE_PLAIN);
}

static char root[64];

static int setup(void **state)
{
  (void)state;
  snprintf(root, sizeof root, "/tmp/tc-warm-XXXXXX");
  return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
  (void)state;
  char cmd[256];
  if (snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", root, root) >=
      (int)sizeof cmd)
    return -1;
  return system(cmd) == 0 ? 0 : -1;
}

/* The path of one artifact (.so) under root, or "" when none. */
static void find_artifact(const char *dir, char *out, size_t len)
{
  DIR *d = opendir(dir);
  out[0] = '\0';
  if (!d)
    return;
  struct dirent *e;
  while (!out[0] && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    size_t n = strlen(e->d_name);
    struct stat st;
    if (n > 3 && strcmp(e->d_name + n - 3, ".so") == 0)
      snprintf(out, len, "%s", p);
    else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
      find_artifact(p, out, len);
  }
  closedir(d);
}

/* Does some .meta under dir have a header line starting with prefix (and,
** with hex16, followed by exactly 16 hex digits)? */
static bool meta_has(const char *dir, const char *prefix, bool hex16)
{
  DIR *d = opendir(dir);
  bool found = false;
  if (!d)
    return false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char p[512], line[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    size_t n = strlen(e->d_name);
    struct stat st;
    if (n > 5 && strcmp(e->d_name + n - 5, ".meta") == 0) {
      FILE *f = fopen(p, "r");
      while (f && !found && fgets(line, sizeof line, f) && line[0] != '\n') {
        size_t pl = strlen(prefix);
        if (strncmp(line, prefix, pl) != 0)
          continue;
        const char *v = line + pl;
        size_t vl = strcspn(v, "\n");
        found = !hex16 || (vl == 16 && strspn(v, "0123456789abcdef") == 16);
      }
      if (f)
        fclose(f);
    } else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
      found = meta_has(p, prefix, hex16);
    }
  }
  closedir(d);
  return found;
}

static void test_warm_start_loads_everything(void **state)
{
  (void)state;
  run_out a = run(root, NULL);
  assert_true(a.compiled > 0);
  assert_int_equal(a.loaded, 0);
  /* Each entry says which ops it fused and which region it came from. */
  assert_true(meta_has(root, "ops: MUL ADD GELU", false));
  assert_true(meta_has(root, "regions: ", true));
  run_out b = run(root, NULL);
  assert_int_equal(b.compiled, 0);
  assert_int_equal(b.loaded, a.compiled);
  assert_true(b.bits == a.bits);
}

static void test_truncated_artifact_recompiled(void **state)
{
  (void)state;
  run_out a = run(root, NULL);
  char so[512];
  find_artifact(root, so, sizeof so);
  assert_true(so[0] != '\0');
  assert_int_equal(truncate(so, 100), 0);
  run_out b = run(root, NULL);
  assert_int_equal(b.compiled, 1);          /* just the damaged one */
  assert_int_equal(b.loaded, a.compiled - 1);
  assert_true(b.bits == a.bits);
  run_out c = run(root, NULL);               /* and it is stored again */
  assert_int_equal(c.compiled, 0);
}

static void test_eight_processes_race(void **state)
{
  (void)state;
  int fds[8];
  pid_t pids[8];
  char names[8][32];
  for (int i = 0; i < 8; i++) {
    snprintf(names[i], sizeof names[i], "/tmp/tc-race-XXXXXX");
    fds[i] = mkstemp(names[i]);
    pids[i] = spawn(root, NULL, fds[i]);
  }
  unsigned long long bits = 0;
  for (int i = 0; i < 8; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    FILE *f = fdopen(fds[i], "r");
    rewind(f);
    run_out r;
    assert_int_equal(fscanf(f, "%llu %llu %llx %llu %llu", &r.compiled,
                            &r.loaded, &r.bits, &r.failures,
                            &r.regions_compiled), 5);
    fclose(f);
    unlink(names[i]);
    if (i == 0)
      bits = r.bits;
    assert_true(r.bits == bits);
  }
  run_out after = run(root, NULL);          /* one good entry per kernel */
  assert_int_equal(after.compiled, 0);
  assert_true(after.bits == bits);
}

/* Compiled in memory, compile mode on, results unchanged. */
static void expect_in_memory(run_out r, run_out ref)
{
  assert_false(r.skipped);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.compiled, ref.compiled);
  assert_int_equal(r.loaded, 0);
  assert_true(r.regions_compiled > 0);
  assert_true(r.bits == ref.bits);
}

static void test_unwritable_store_degrades(void **state)
{
  (void)state;
  run_out a = run(root, "TC_CACHE=0");
  assert_true(a.compiled > 0);
  assert_int_equal(a.loaded, 0);
  assert_int_equal(a.failures, 0);
  /* Read-only (EROFS stops root too): cannot create the store. */
  run_out b = run_in(root, NULL, SEE_READONLY);
  if (!b.skipped) {
    expect_in_memory(b, a);
    return;
  }
  if (geteuid() == 0) {
    /* root writes through permission bits */
    printf("skipped: running as root without mount namespaces, so the "
           "store cannot be made unwritable\n");
    skip();
  }
  assert_int_equal(chmod(root, 0500), 0);
  b = run(root, NULL);                      /* cannot create v2: memory */
  expect_in_memory(b, a);
}

/* The documented promise (principle 5): a full disk keeps compiled kernels
** in memory. The store's directory is a filled tmpfs, so the compile to
** file and every store write fail with ENOSPC; compile mode must stay on,
** with no compile failure and the same results. */
static void test_full_disk_keeps_kernels(void **state)
{
  (void)state;
  run_out a = run(root, "TC_CACHE=0");
  run_out b = run_in(root, NULL, SEE_FULL);
  if (b.skipped) {
    printf("skipped: no private mount namespace here, so no tmpfs to "
           "fill\n");
    skip();
  }
  expect_in_memory(b, a);
}

/* A read-only store that holds kernels still serves them: nothing is
** compiled, every kernel loads, though no hit can be recorded. */
static void test_readonly_store_still_loads(void **state)
{
  (void)state;
  run_out a = run(root, NULL);
  assert_true(a.compiled > 0);
  run_out b = run_in(root, NULL, SEE_READONLY);
  if (b.skipped) {
    printf("skipped: no private mount namespace here for a read-only "
           "bind\n");
    skip();
  }
  assert_int_equal(b.failures, 0);
  assert_int_equal(b.compiled, 0);
  assert_int_equal(b.loaded, a.compiled);
  assert_true(b.bits == a.bits);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--child") == 0)
    return child();
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return 1;
  self[n] = '\0';
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_warm_start_loads_everything, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_truncated_artifact_recompiled, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_eight_processes_race, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_unwritable_store_degrades, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_full_disk_keeps_kernels, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_readonly_store_still_loads, setup,
                                    teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
