/*
** test_cuda_store.c -- CUDA kernels in the disk store, through the fake
** driver and NVRTC (tests/jit_cuda/fake, first on LD_LIBRARY_PATH): a
** first process compiles and stores its kernels, a second loads every one
** and compiles none; a corrupted cubin, an entry forged under another
** kernel's key and a device of another arch are each refused and compiled
** again, with the same results; tc-dump lists the entries as cuda and shows
** their CUDA C (and PTX when the real NVRTC is installed). Each run is this
** binary re-executed (--child OP) with its own environment.
*/
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <tc.h>

/* -- The child: device ops, then its counters and a hash of the results ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_of(tc_tensor *t, uint64_t h)
{
  size_t n = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  void *buf = malloc(n);
  if (!buf || tc_copy_to(t, buf, n) != 0)
    exit(3);
  h = fnv(h, buf, n);
  free(buf);
  return h;
}

static int child(const char *op)
{
  size_t mark = tc_scope_begin();   /* releases every tensor made here */
  tc_tensor *x = tc_to(tc_randn(TC_F32, TC_SHAPE(37, 64), 1), "cuda");
  if (!x) {
    fprintf(stderr, "child: %s\n", tc_last_error());
    return 3;
  }
  uint64_t h = 0xcbf29ce484222325ull;
  if (strcmp(op, "cpu") == 0) {   /* a fused CPU kernel (TC_COMPILE=1) */
    tc_tensor *c = tc_randn(TC_F32, TC_SHAPE(37, 64), 1);
    for (int i = 0; i < 2; i++)
      h = hash_of(tc_gelu(tc_mul_scalar(c, 0.5)), h);
  } else if (strcmp(op, "exp") == 0) {
    h = hash_of(tc_exp(x), h);
  } else if (strcmp(op, "neg") == 0) {
    h = hash_of(tc_neg(x), h);
  } else {   /* "mix": pointwise, a row reduction, a whole sum */
    h = hash_of(tc_softmax(tc_mul(x, x), -1), h);
    h = hash_of(tc_sum_all(tc_exp(x)), h);
  }
  tc_scope_end(mark);
  tc_stats st;
  tc_stats_get(&st);
  printf("%llu %llu %016llx\n", (unsigned long long)st.kernels_compiled,
         (unsigned long long)st.kernels_loaded, (unsigned long long)h);
  return 0;
}

/* -- The parent ---------------------------------------------------------------- */

typedef struct {
  unsigned long long compiled, loaded, hash;
} run_out;

static char self[4096];

static run_out run(const char *dir, const char *op, const char *env)
{
  char tmpl[] = "/tmp/tc-cuda-store-out-XXXXXX";
  int fd = mkstemp(tmpl);
  assert_true(fd >= 0);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TC_CACHE_DIR", dir, 1);
    setenv("TC_CACHE", "1", 1);
    setenv("TC_ASYNC", "0", 1);
    if (env)
      putenv((char *)env);
    dup2(fd, 1);
    execl(self, self, "--child", op, (char *)NULL);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  run_out r;
  FILE *f = fdopen(fd, "r");
  rewind(f);
  assert_int_equal(fscanf(f, "%llu %llu %llx", &r.compiled, &r.loaded,
                          &r.hash), 3);
  fclose(f);
  unlink(tmpl);
  return r;
}

static char root[64];

static int setup(void **state)
{
  (void)state;
  snprintf(root, sizeof root, "/tmp/tc-cuda-store-XXXXXX");
  return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  return system(cmd) == 0 ? 0 : -1;
}

/* A fresh store directory under root. */
static void fresh_dir(const char *name, char *dir, size_t len)
{
  snprintf(dir, len, "%s/%s", root, name);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -m 700 %s", dir, dir);
  assert_int_equal(system(cmd), 0);
}

/* The output of a shell command (first line at most len bytes). */
static void sh(const char *cmd, char *out, size_t len)
{
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  out[0] = '\0';
  if (!fgets(out, (int)len, p))
    out[0] = '\0';
  out[strcspn(out, "\n")] = '\0';
  pclose(p);
}

static int count_files(const char *dir, const char *suffix)
{
  char cmd[512], out[32];
  snprintf(cmd, sizeof cmd, "find %s -name '*%s' | wc -l", dir, suffix);
  sh(cmd, out, sizeof out);
  return atoi(out);
}

static void test_warm_start(void **state)
{
  (void)state;
  char dir[128];
  fresh_dir("warm", dir, sizeof dir);
  run_out cold = run(dir, "mix", NULL);
  assert_true(cold.compiled >= 3);
  assert_int_equal(cold.loaded, 0);
  assert_int_equal(count_files(dir, ".cubin"), (int)cold.compiled);
  run_out warm = run(dir, "mix", NULL);
  assert_int_equal(warm.compiled, 0);          /* no NVRTC compile */
  assert_int_equal(warm.loaded, cold.compiled);
  assert_true(warm.hash == cold.hash);
  /* TC_CACHE=0: the store is neither read nor written. */
  run_out off = run(dir, "mix", "TC_CACHE=0");
  assert_int_equal(off.compiled, cold.compiled);
  assert_int_equal(off.loaded, 0);
}

static void test_corrupt_cubin(void **state)
{
  (void)state;
  char dir[128], cmd[512], path[512];
  fresh_dir("corrupt", dir, sizeof dir);
  run_out cold = run(dir, "exp", NULL);
  assert_int_equal(cold.compiled, 1);
  snprintf(cmd, sizeof cmd, "find %s -name '*.cubin'", dir);
  sh(cmd, path, sizeof path);
  assert_true(path[0]);
  /* Flip one byte of the cubin itself (its size stays right). */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 40, SEEK_SET), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, 40, SEEK_SET), 0);
  fputc(c ^ 0x20, f);
  fclose(f);
  run_out again = run(dir, "exp", NULL);
  assert_int_equal(again.compiled, 1);         /* refused, compiled */
  assert_int_equal(again.loaded, 0);
  assert_true(again.hash == cold.hash);
  run_out warm = run(dir, "exp", NULL);        /* the new entry serves */
  assert_int_equal(warm.compiled, 0);
  assert_int_equal(warm.loaded, 1);
}

/* An entry forged under another kernel's key: exp's meta and cubin, with
** every mention of exp's key in the meta made neg's (so the meta itself
** checks out). The key-bound checksum and the key marker refuse it: neg
** is compiled again and computes neg, not exp. */
static void test_wrong_key(void **state)
{
  (void)state;
  char a[128], b[128], cmd[2048], ka[64], kb[64];
  fresh_dir("key-exp", a, sizeof a);
  fresh_dir("key-neg", b, sizeof b);
  run_out exp1 = run(a, "exp", NULL);
  run_out neg1 = run(b, "neg", NULL);
  assert_int_equal(exp1.compiled, 1);
  assert_int_equal(neg1.compiled, 1);
  snprintf(cmd, sizeof cmd, "basename $(find %s -name '*.meta') .meta", a);
  sh(cmd, ka, sizeof ka);
  snprintf(cmd, sizeof cmd, "basename $(find %s -name '*.meta') .meta", b);
  sh(cmd, kb, sizeof kb);
  assert_int_equal(strlen(ka), 32);
  assert_int_equal(strlen(kb), 32);
  snprintf(cmd, sizeof cmd,
           "set -e; da=%s/v2/%.2s; db=%s/v2/%.2s; rm -f $db/*; "
           "for f in $da/*.cubin; do n=$(basename $f); "
           "cp $f $db/%s${n#%s}; done; "
           "sed 's/%s/%s/g' $da/%s.meta > $db/%s.meta; chmod 600 $db/*",
           a, ka, b, kb, kb, ka, ka, kb, ka, kb);
  assert_int_equal(system(cmd), 0);
  run_out neg2 = run(b, "neg", NULL);
  assert_int_equal(neg2.loaded, 0);
  assert_int_equal(neg2.compiled, 1);
  assert_true(neg2.hash == neg1.hash);
  assert_true(neg2.hash != exp1.hash);
}

/* Another arch (or NVRTC) is another key: nothing of sm_90's is loaded. */
static void test_other_arch(void **state)
{
  (void)state;
  char dir[128];
  fresh_dir("arch", dir, sizeof dir);
  run_out sm90 = run(dir, "mix", NULL);
  run_out sm86 = run(dir, "mix", "TC_FAKE_CUDA_CC=8.6");
  assert_int_equal(sm86.loaded, 0);
  assert_int_equal(sm86.compiled, sm90.compiled);
  assert_true(sm86.hash == sm90.hash);
  assert_int_equal(count_files(dir, ".cubin"), 2 * (int)sm90.compiled);
  run_out again = run(dir, "mix", NULL);
  assert_int_equal(again.compiled, 0);
  assert_int_equal(again.loaded, sm90.compiled);
}

/* tc-dump: list names the backend; show prints the CUDA C, and PTX from
** the real NVRTC when installed (the fake one is not on tc-dump's path). */
static void test_dump_show(void **state)
{
  (void)state;
  const char *dump = getenv("TC_TEST_DUMP");
  if (!dump || !*dump)
    skip();
  char dir[128], cmd[1024], out[512], key[64];
  fresh_dir("dump", dir, sizeof dir);
  run(dir, "exp", NULL);
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s %s list | grep -c ' cuda '",
           dir, dump);
  sh(cmd, out, sizeof out);
  assert_string_equal(out, "1");
  snprintf(cmd, sizeof cmd, "basename $(find %s -name '*.meta') .meta", dir);
  sh(cmd, key, sizeof key);
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s LD_LIBRARY_PATH= %s show %.8s "
           "| grep -c -e '^backend: *cuda$' -e '^--- source ---$' "
           "-e 'tck_entry' -e '^target: *sm_90$'", dir, dump, key);
  sh(cmd, out, sizeof out);
  assert_true(atoi(out) >= 4);
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s LD_LIBRARY_PATH= %s show %.8s "
           "| grep -c -e '^--- ptx (compute_90' -e '^(none: NVRTC not found' "
           "-e '^[.]version '", dir, dump, key);
  sh(cmd, out, sizeof out);
  if (access("/usr/local/cuda/lib64/libnvrtc.so.13", R_OK) == 0)
    assert_int_equal(atoi(out), 2);   /* the header and PTX's .version */
  else
    assert_int_equal(atoi(out), 1);   /* the reason, one line */
}

/* show --cuda: a CPU entry's IR parsed, rendered as CUDA C, and its PTX. */
static void test_dump_cpu_as_cuda(void **state)
{
  (void)state;
  const char *dump = getenv("TC_TEST_DUMP");
  if (!dump || !*dump)
    skip();
  char dir[128], cmd[1024], out[512];
  fresh_dir("dump-cpu", dir, sizeof dir);
  run(dir, "cpu", "TC_COMPILE=1");
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s %s list | grep -c ' cpu '",
           dir, dump);
  sh(cmd, out, sizeof out);
  assert_string_equal(out, "1");
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s LD_LIBRARY_PATH= %s show "
           "--cuda '' | grep -c -e '^--- cuda ---$' -e '^TCK_KERNEL "
           "tck_main' -e '^--- ptx (compute_90' -e '^(none: NVRTC not "
           "found'", dir, dump);
  sh(cmd, out, sizeof out);
  assert_int_equal(atoi(out), 3);
  snprintf(cmd, sizeof cmd, "TC_CACHE_DIR=%s %s show '' | grep -c "
           "'^--- cuda ---$'", dir, dump);
  sh(cmd, out, sizeof out);
  assert_string_equal(out, "0");   /* only when asked */
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0)
    return child(argv[2]);
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return 1;
  self[n] = '\0';
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_warm_start),
    cmocka_unit_test(test_corrupt_cubin),
    cmocka_unit_test(test_wrong_key),
    cmocka_unit_test(test_other_arch),
    cmocka_unit_test(test_dump_show),
    cmocka_unit_test(test_dump_cpu_as_cuda),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
