/*
** test_determinism.c -- reductions, softmax, layer_norm and matmul give
** bitwise identical results whatever the thread count. TC_THREADS is read
** at library init, so the test re-executes its own binary (/proc/self/exe)
** with TC_THREADS=1, 2 and 3 and the flag --emit; the child prints every
** result as hex (a value's bits, or an FNV-1a hash of a tensor's bytes) and
** the parent compares the outputs line by line.
*/
#define _POSIX_C_SOURCE 200809L
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Prints "name <hash of t's bytes>" and releases t. Returns 0, or 1 on
** a NULL tensor (the failing op's error is printed). */
static int emit(const char *name, tc_tensor *t) {
  if (!t) {
    printf("%s ERROR %s\n", name, tc_last_error() ? tc_last_error() : "?");
    return 1;
  }
  int64_t n = tc_numel(t);
  size_t nb = (size_t)n * tu_elsize(tc_dtype_of(t));
  void *buf = malloc(nb ? nb : 1);
  if (!buf || tc_copy_to(t, buf, nb) != 0) {
    printf("%s ERROR copy\n", name);
    free(buf);
    tc_release(t);
    return 1;
  }
  printf("%s %016llx", name, (unsigned long long)fnv1a(buf, nb));
  if (n == 1 && tc_dtype_of(t) == TC_F32) printf(" %a", (double)*(float *)buf);
  if (n == 1 && tc_dtype_of(t) == TC_F64) printf(" %a", *(double *)buf);
  printf("\n");
  free(buf);
  tc_release(t);
  return 0;
}

/* The child: compute and print. Everything is seeded, so the only thing
** that differs between children is the thread count. */
static int emit_all(void) {
  int bad = 0;
  printf("threads %d\n", tc_threads());
  size_t mark = tc_scope_begin();
  tc_tensor *v = tc_rand(TC_F32, TC_SHAPE(INT64_C(1) << 24), 5);
  bad |= emit("sum_all_16M_f32", tc_retain(tc_sum_all(v)));
  tc_tensor *x = tc_reshape(v, TC_SHAPE(4096, 4096));
  bad |= emit("sum_dim0_4096", tc_retain(tc_sum(x, 0, false)));
  bad |= emit("sum_dim1_4096", tc_retain(tc_sum(x, 1, false)));
  bad |= emit("mean_dim1_4096", tc_retain(tc_mean(x, -1, true)));
  tc_tensor *xt = tc_transpose(x, 0, 1);
  bad |= emit("sum_dim1_transposed", tc_retain(tc_sum(xt, 1, false)));
  bad |= emit("sum_all_transposed", tc_retain(tc_sum_all(xt)));
  tc_tensor *d = tc_randn(TC_F64, TC_SHAPE(INT64_C(1) << 22), 6);
  bad |= emit("sum_all_4M_f64", tc_retain(tc_sum_all(d)));
  tc_tensor *s = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(1024, 1000), 7), 4);
  bad |= emit("softmax_dim-1", tc_retain(tc_softmax(s, -1)));
  bad |= emit("softmax_dim0", tc_retain(tc_softmax(s, 0)));
  bad |= emit("log_softmax_dim-1", tc_retain(tc_log_softmax(s, -1)));
  tc_tensor *ln = tc_randn(TC_F32, TC_SHAPE(2048, 1024), 8);
  tc_tensor *g = tc_rand(TC_F32, TC_SHAPE(1024), 9);
  bad |= emit("layer_norm", tc_retain(tc_layer_norm(ln, g, NULL, 1e-5)));
  tc_tensor *a = tc_randn(TC_F32, TC_SHAPE(256, 512), 10);
  tc_tensor *b = tc_randn(TC_F32, TC_SHAPE(512, 384), 11);
  bad |= emit("matmul_f32", tc_retain(tc_matmul(a, b)));
  tc_tensor *a3 = tc_randn(TC_F64, TC_SHAPE(4, 64, 300), 12);
  tc_tensor *b3 = tc_randn(TC_F64, TC_SHAPE(4, 300, 96), 13);
  bad |= emit("matmul_batched_f64", tc_retain(tc_matmul(a3, b3)));
  /* attention's shape: small GEMMs, their batches split across threads */
  tc_tensor *q = tc_randn(TC_F32, TC_SHAPE(16, 4, 64, 32), 14);
  tc_tensor *k = tc_transpose(tc_randn(TC_F32, TC_SHAPE(16, 4, 64, 32), 15), 2, 3);
  bad |= emit("matmul_small_batches_f32", tc_retain(tc_matmul(q, k)));
  tc_scope_end(mark);
  fflush(stdout);
  return bad;
}

/* Runs this binary with TC_THREADS=threads --emit; returns its stdout. */
static char *run_child(int threads) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = 0;
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char tv[16];
    snprintf(tv, sizeof tv, "%d", threads);
    setenv("TC_THREADS", tv, 1);
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(self, self, "--emit", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  for (;;) {
    if (len + 1024 > cap) out = realloc(out, cap *= 2);
    ssize_t r = read(fd[0], out + len, cap - len - 1);
    if (r <= 0) break;
    len += (size_t)r;
  }
  out[len] = 0;
  close(fd[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("child with TC_THREADS=%d failed (status %d), output:\n%s",
             threads, status, out);
  return out;
}

static char *outs[3]; /* children's outputs for TC_THREADS = 1, 2, 3 */

static int setup(void **state) {
  (void)state;
  for (int t = 0; t < 3; t++) outs[t] = run_child(t + 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int t = 0; t < 3; t++) free(outs[t]);
  return 0;
}

/* The line of out that starts with "name ", or NULL. */
static const char *find_line(const char *out, const char *name, size_t *len) {
  size_t n = strlen(name);
  for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, name, n) == 0 && p[n] == ' ') {
      *len = strcspn(p, "\n");
      return p;
    }
  }
  return NULL;
}

static void test_children_ran_with_their_thread_count(void **state) {
  (void)state;
  char want[32];
  for (int t = 0; t < 3; t++) {
    snprintf(want, sizeof want, "threads %d\n", t + 1);
    if (strncmp(outs[t], want, strlen(want)) != 0)
      fail_msg("child did not run with TC_THREADS=%d:\n%s", t + 1, outs[t]);
    if (strstr(outs[t], "ERROR"))
      fail_msg("child with TC_THREADS=%d had errors:\n%s", t + 1, outs[t]);
  }
}

/* Every named result is bitwise the same for 1, 2 and 3 threads. */
static void compare(const char *const *names, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l[3];
    const char *p[3];
    for (int t = 0; t < 3; t++) {
      p[t] = find_line(outs[t], names[i], &l[t]);
      if (!p[t]) fail_msg("no result %s for %d threads", names[i], t + 1);
    }
    for (int t = 1; t < 3; t++)
      if (l[t] != l[0] || memcmp(p[t], p[0], l[0]) != 0) {
        print_error("  %s differs: 1 thread: %.*s; %d threads: %.*s\n",
                    names[i], (int)l[0], p[0], t + 1, (int)l[t], p[t]);
        bad++;
      }
  }
  if (bad) fail_msg("%d results depend on the thread count", bad);
}

static void test_reductions_thread_count_independent(void **state) {
  (void)state;
  static const char *const names[] = {
      "sum_all_16M_f32", "sum_dim0_4096", "sum_dim1_4096", "mean_dim1_4096",
      "sum_dim1_transposed", "sum_all_transposed", "sum_all_4M_f64",
      "softmax_dim-1", "softmax_dim0", "log_softmax_dim-1", "layer_norm"};
  compare(names, sizeof names / sizeof names[0]);
}

/* Principle 2 covers matmul too (a reduction over k). */
static void test_matmul_thread_count_independent(void **state) {
  (void)state;
  static const char *const names[] = {"matmul_f32", "matmul_batched_f64"};
  compare(names, sizeof names / sizeof names[0]);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--emit") == 0) return emit_all();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_children_ran_with_their_thread_count),
      cmocka_unit_test(test_reductions_thread_count_independent),
      cmocka_unit_test(test_matmul_thread_count_independent),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
