/*
** test_store.c -- the on-disk kernel store on its own (store.h): round
** trips, every kind of damage, things that are not regular files, entries
** moved under another key, hostile metadata, unsafe permissions, write
** failures (a full or read-only disk), several processes at once,
** eviction, verify and clear. Each test gets a fresh mkdtemp() root and
** runs with the key marker required (the codegen's final state).
** `test_store --populate DIR N [KB]` fills DIR with N fake entries for
** tests/cache/test_dump.sh.
*/
#define XXH_STATIC_LINKING_ONLY
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "../../src/cache/store.h"
#include "../../src/tensor/tensor.h"
#include "sandbox.h"

static char root[256];
static const char src_text[] =
  "void k(float *y, const float *x) {\n  y[i] = x[i] * 2;\n}";       /* a mkdtemp name: short */

/* -- Helpers --------------------------------------------------------------- */

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw)
{
  (void)st; (void)flag; (void)ftw;
  chmod(p, 0700);              /* tests leave read-only dirs behind */
  return remove(p);
}

static void rm_rf(const char *p)
{
  chmod(p, 0700);
  nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup(void **state)
{
  (void)state;
  snprintf(root, sizeof root, "/tmp/tc-store-XXXXXX");
  if (!mkdtemp(root))
    return -1;
  char why[256];
  unsetenv("TC_CACHE_MAX_MB");
  store_require_marker(true);
  return store_open(root, why, sizeof why);
}

static int teardown(void **state)
{
  (void)state;
  store_close();
  tensor_log_to(NULL, 0);
  rm_rf(root);
  return 0;
}

static void key_for(int i, char key[STORE_KEY_LEN + 1])
{
  char ir[64];
  snprintf(ir, sizeof ir, "kernel %d: y = x * 2", i);
  store_key(ir, "cpu", "x86-64-v3", "libgccjit 12.2.0", key);
}

#define MARKER_LEN (sizeof STORE_KEY_MARKER - 1 + STORE_KEY_LEN + 1)

/* Deterministic artifact bytes for entry i (size n); with a key, they
** embed its marker as a compiled kernel does (when n has room). */
static void fill_key(char *buf, size_t n, int i, const char *key)
{
  for (size_t j = 0; j < n; j++)
    buf[j] = (char)(i * 31 + (int)(j * 7) + (int)(j >> 8));
  if (key && n >= 2 * MARKER_LEN)
    snprintf(buf + n / 2, MARKER_LEN, "%s%s", STORE_KEY_MARKER, key);
}

static void key_for(int i, char key[STORE_KEY_LEN + 1]);
static void fill(char *buf, size_t n, int i)
{
  char key[STORE_KEY_LEN + 1];
  key_for(i, key);
  fill_key(buf, n, i, key);
}

/* The store's checksum: xxh3-128 of the key's digits, then the bytes. */
static void sum_of(const char *key, const void *buf, size_t n,
                   char out[STORE_KEY_LEN + 1])
{
  XXH3_state_t *st = XXH3_createState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, key, STORE_KEY_LEN);
  XXH3_128bits_update(st, buf, n);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  snprintf(out, STORE_KEY_LEN + 1, "%016" PRIx64 "%016" PRIx64,
           (uint64_t)h.high64, (uint64_t)h.low64);
}

static char *big_source;     /* when set, every meta carries it */

static void meta_fields(store_meta *m, int i)
{
  snprintf(m->backend, sizeof m->backend, "cpu");
  snprintf(m->target, sizeof m->target, "x86-64-v3");
  snprintf(m->compiler, sizeof m->compiler, "libgccjit 12.2.0");
  snprintf(m->kind, sizeof m->kind, i % 2 ? "rows" : "map");
  snprintf(m->shape, sizeof m->shape, "[%d,4096] row 4096", i + 1);
  snprintf(m->ops, sizeof m->ops, "MUL ADD EXP SUM");
  snprintf(m->regions, sizeof m->regions, "%016x", 0xabc00 + i);
  m->instrs = 3 + i;
  m->compile_ms = 50.25 + i;
  m->source = big_source ? big_source : (char *)src_text;
  m->guards = "in0: f32 [4096] contiguous\n";
}

/* Put entry i with n bytes of content through the real path: tmp, put. */
static int put_n(int i, size_t n)
{
  char key[STORE_KEY_LEN + 1], tmp[PATH_MAX], ir[64];
  key_for(i, key);
  if (store_tmp_path(key, tmp, sizeof tmp) < 0)
    return -1;
  char *buf = malloc(n);
  fill(buf, n, i);
  FILE *f = fopen(tmp, "wb");
  int ok = f && fwrite(buf, 1, n, f) == n;
  if (f)
    ok = fclose(f) == 0 && ok;
  free(buf);
  if (!ok)
    return -1;
  store_meta m = { 0 };
  meta_fields(&m, i);
  snprintf(ir, sizeof ir, "kernel %d: y = x * 2", i);
  m.ir = ir;
  return store_put(key, tmp, &m);
}

static int put_one(int i) { return put_n(i, 1000 + (size_t)i); }

static void path_of(const char *key, const char *suffix, char *out, size_t len)
{
  snprintf(out, len, "%s/%.2s/%s%s", store_root(), key, key, suffix);
}

/* The artifact path of entry i, from its meta (without a get). */
static void art_of(int i, char *out, size_t len)
{
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX], line[256];
  key_for(i, key);
  path_of(key, ".meta", meta, sizeof meta);
  FILE *f = fopen(meta, "r");
  assert_non_null(f);
  out[0] = '\0';
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "artifact: ", 10) == 0) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(out, len, "%s/%.2s/%s", store_root(), key, line + 10);
    }
  fclose(f);
  assert_true(out[0]);
}

static bool exists(const char *p)
{
  struct stat st;
  return lstat(p, &st) == 0;
}

/* Files in the key's directory: metas, artifacts, temps. */
static void count_files(const char *key, int *metas, int *sos, int *tmps)
{
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/%.2s", store_root(), key);
  *metas = *sos = *tmps = 0;
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *de; (de = readdir(d));) {
    size_t n = strlen(de->d_name);
    if (strncmp(de->d_name, ".tmp-", 5) == 0)
      (*tmps)++;
    else if (n > 5 && strcmp(de->d_name + n - 5, ".meta") == 0)
      (*metas)++;
    else if (n > 3 && strcmp(de->d_name + n - 3, ".so") == 0)
      (*sos)++;
  }
  closedir(d);
}

static int get_i(int i, store_meta *m, char *so, size_t len)
{
  char key[STORE_KEY_LEN + 1];
  key_for(i, key);
  return store_get(key, m, so, len);
}

/* Capture TC_LOG=cache lines in a memory file. */
static char *logbuf;
static size_t loglen;
static FILE *log_start(void)
{
  FILE *f = open_memstream(&logbuf, &loglen);
  tensor_log_to(f, TC_LOG_CACHE);
  return f;
}

static void log_expect(FILE *f, const char *needle)
{
  tensor_log_to(NULL, 0);
  fclose(f);
  if (!strstr(logbuf, needle))
    print_error("log lacks \"%s\": %s\n", needle, logbuf);
  assert_non_null(strstr(logbuf, needle));
  free(logbuf);
  logbuf = NULL;
}

/* Damage entry i in some way, then expect get to fail, log and remove. */
static void expect_removed(int i, const char *log_needle)
{
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX], so[PATH_MAX];
  store_meta m;
  key_for(i, key);
  path_of(key, ".meta", meta, sizeof meta);
  FILE *lf = log_start();
  assert_int_equal(store_get(key, &m, so, sizeof so), -1);
  log_expect(lf, log_needle);
  assert_false(exists(meta));
  assert_int_equal(store_get(key, &m, so, sizeof so), -1);
}

/* -- Keys and round trips -------------------------------------------------- */

static void test_store_key(void **state)
{
  (void)state;
  char a[STORE_KEY_LEN + 1], b[STORE_KEY_LEN + 1], c[STORE_KEY_LEN + 1];
  store_key("ab", "c", "t", "v", a);
  store_key("a", "bc", "t", "v", b);
  store_key("ab", "c", "t", "v", c);
  assert_int_equal(strlen(a), STORE_KEY_LEN);
  assert_int_equal(strspn(a, "0123456789abcdef"), STORE_KEY_LEN);
  assert_string_not_equal(a, b);
  assert_string_equal(a, c);
  store_key("ab", "c", "t", "w", b);   /* compiler version is in the key */
  assert_string_not_equal(a, b);
}

static void test_store_roundtrip(void **state)
{
  (void)state;
  char key[STORE_KEY_LEN + 1], so[PATH_MAX], want[STORE_KEY_LEN + 1];
  store_meta m;
  key_for(0, key);
  assert_int_equal(store_get(key, &m, so, sizeof so), -1);   /* absent */
  time_t t0 = time(NULL);
  assert_int_equal(put_one(0), 0);
  assert_int_equal(store_get(key, &m, so, sizeof so), 0);
  assert_string_equal(m.key, key);
  assert_string_equal(m.backend, "cpu");
  assert_string_equal(m.target, "x86-64-v3");
  assert_string_equal(m.compiler, "libgccjit 12.2.0");
  assert_string_equal(m.codegen, STORE_CODEGEN_VERSION);
  assert_string_equal(m.kind, "map");
  assert_string_equal(m.shape, "[1,4096] row 4096");
  assert_string_equal(m.ops, "MUL ADD EXP SUM");
  assert_string_equal(m.regions, "00000000000abc00");
  assert_int_equal(m.instrs, 3);
  assert_true(m.compile_ms > 50.2 && m.compile_ms < 50.3);
  assert_int_equal(m.bytes, 1000);
  assert_true(m.created >= t0 && m.last_used >= m.created);
  assert_int_equal(m.hits, 1);
  assert_string_equal(m.ir, "kernel 0: y = x * 2");
  assert_string_equal(m.source, src_text);
  assert_string_equal(m.guards, "in0: f32 [4096] contiguous\n");
  /* The artifact: named by its key-bound checksum, private, the bytes we
  ** wrote (with the key's marker). */
  char buf[1000];
  fill(buf, sizeof buf, 0);
  assert_true(store_artifact_has_key(buf, sizeof buf, key));
  sum_of(key, buf, sizeof buf, want);
  assert_string_equal(m.checksum, want);
  char name[128];
  snprintf(name, sizeof name, "/%s-%s.so", key, want);
  assert_non_null(strstr(so, name));
  assert_non_null(strstr(so, store_root()));
  struct stat st;
  assert_int_equal(stat(so, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, 1000);
  char got[1000];
  FILE *f = fopen(so, "rb");
  assert_non_null(f);
  assert_int_equal(fread(got, 1, sizeof got, f), sizeof got);
  fclose(f);
  assert_memory_equal(got, buf, sizeof buf);
  store_meta_free(&m);
  /* Hits count up; the temp is gone; the layout is the documented one. */
  assert_int_equal(store_get(key, &m, so, sizeof so), 0);
  assert_int_equal(m.hits, 2);
  store_meta_free(&m);
  int metas, sos, tmps;
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(metas, 1);
  assert_int_equal(sos, 1);
  assert_int_equal(tmps, 0);
  char meta[PATH_MAX];
  path_of(key, ".meta", meta, sizeof meta);
  assert_int_equal(stat(meta, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(stat(store_root(), &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  uint64_t n, bytes, hits;
  store_totals(&n, &bytes, &hits);
  assert_int_equal(n, 1);
  assert_int_equal(bytes, 1000);
  assert_int_equal(hits, 2);
}

static void test_store_open_env(void **state)
{
  (void)state;
  char why[256], dir[PATH_MAX], want[PATH_MAX + 8];
  snprintf(dir, sizeof dir, "%s/env/a/b", root);
  setenv("TC_CACHE_DIR", dir, 1);
  tensor_config_reload();
  setenv("TC_CACHE", "0", 1);
  tensor_config_reload();
  assert_int_equal(store_open(NULL, why, sizeof why), -1);
  assert_non_null(strstr(why, "TC_CACHE=0"));
  unsetenv("TC_CACHE");
  tensor_config_reload();
  assert_int_equal(store_open(NULL, why, sizeof why), 0);
  snprintf(want, sizeof want, "%s/" STORE_LAYOUT, dir);
  assert_string_equal(store_root(), want);
  unsetenv("TC_CACHE_DIR");
  tensor_config_reload();
  setenv("XDG_CACHE_HOME", dir, 1);
  tensor_config_reload();
  assert_int_equal(store_open(NULL, why, sizeof why), 0);
  snprintf(want, sizeof want, "%s/tc/" STORE_LAYOUT, dir);
  assert_string_equal(store_root(), want);
  unsetenv("XDG_CACHE_HOME");
  tensor_config_reload();
  store_close();
  assert_false(store_is_open());
  assert_null(store_root());
}

/* -- Damage ---------------------------------------------------------------- */

static void test_store_truncated(void **state)
{
  (void)state;
  char so[PATH_MAX];
  assert_int_equal(put_one(1), 0);
  art_of(1, so, sizeof so);
  assert_int_equal(truncate(so, 500), 0);
  expect_removed(1, "500 bytes, meta says 1001");
  assert_false(exists(so));    /* ours and bad: gone too */
  assert_int_equal(put_one(1), 0);   /* and it can be stored again */
  store_meta m;
  assert_int_equal(get_i(1, &m, so, sizeof so), 0);
  store_meta_free(&m);
}

static void test_store_corrupted_byte(void **state)
{
  (void)state;
  char so[PATH_MAX];
  assert_int_equal(put_one(2), 0);
  art_of(2, so, sizeof so);
  int fd = open(so, O_RDWR);
  assert_true(fd >= 0);
  char c;
  assert_int_equal(pread(fd, &c, 1, 123), 1);
  c ^= 0x40;
  assert_int_equal(pwrite(fd, &c, 1, 123), 1);
  close(fd);
  expect_removed(2, "checksum");
  assert_false(exists(so));
}

static void test_store_missing_artifact(void **state)
{
  (void)state;
  char so[PATH_MAX];
  assert_int_equal(put_one(3), 0);
  art_of(3, so, sizeof so);
  assert_int_equal(unlink(so), 0);
  expect_removed(3, "No such file");
}

static void write_meta(int i, const char *text)
{
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX];
  key_for(i, key);
  path_of(key, ".meta", meta, sizeof meta);
  FILE *f = fopen(meta, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  chmod(meta, 0600);
}

static void copy_file(const char *from, const char *to)
{
  char buf[1 << 16];
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  assert_non_null(in);
  assert_non_null(out);
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  chmod(to, 0600);
}

static void test_store_garbage_meta(void **state)
{
  (void)state;
  char so[PATH_MAX], key[STORE_KEY_LEN + 1], text[1024];
  assert_int_equal(put_one(4), 0);
  art_of(4, so, sizeof so);
  write_meta(4, "\x7f" "ELF garbage\n\x01\x02 no fields here");
  expect_removed(4, "malformed");
  assert_true(exists(so));     /* not proven bad: verify reaps orphans */
  /* A well-formed meta must not name a file outside its artifact name. */
  key_for(4, key);
  snprintf(text, sizeof text, "key: %s\nartifact: ../../../etc/passwd\n"
           "checksum: %032d\nbytes: 1\n\n", key, 0);
  write_meta(4, text);
  expect_removed(4, "malformed");
  /* A truncated header (no blank line) and a meta for another key. */
  snprintf(text, sizeof text, "key: %s\nartifact: %s-", key, key);
  write_meta(4, text);
  expect_removed(4, "malformed");
  /* Another key's whole, valid meta copied over this one. */
  char okey[STORE_KEY_LEN + 1], other[PATH_MAX], meta[PATH_MAX];
  assert_int_equal(put_one(5), 0);
  key_for(5, okey);
  path_of(okey, ".meta", other, sizeof other);
  path_of(key, ".meta", meta, sizeof meta);
  copy_file(other, meta);
  expect_removed(4, "meta is for key");
}

/* -- Unsafe entries -------------------------------------------------------- */

static void test_store_permissions(void **state)
{
  (void)state;
  char so[PATH_MAX], key[STORE_KEY_LEN + 1], meta[PATH_MAX], dir[PATH_MAX];
  store_meta m;
  assert_int_equal(put_one(6), 0);
  key_for(6, key);
  path_of(key, ".meta", meta, sizeof meta);
  art_of(6, so, sizeof so);
  /* A world-writable artifact is not loaded, and not deleted either. */
  assert_int_equal(chmod(so, 0666), 0);
  FILE *lf = log_start();
  assert_int_equal(get_i(6, &m, so, sizeof so), -1);
  log_expect(lf, "not loaded");
  assert_true(exists(meta));
  art_of(6, so, sizeof so);
  assert_int_equal(chmod(so, 0600), 0);
  assert_int_equal(get_i(6, &m, so, sizeof so), 0);
  store_meta_free(&m);
  /* A group-writable meta, then an open directory: not loaded. */
  assert_int_equal(chmod(meta, 0620), 0);
  assert_int_equal(get_i(6, &m, so, sizeof so), -1);
  assert_int_equal(chmod(meta, 0600), 0);
  snprintf(dir, sizeof dir, "%s/%.2s", store_root(), key);
  assert_int_equal(chmod(dir, 0777), 0);
  assert_int_equal(get_i(6, &m, so, sizeof so), -1);
  assert_int_equal(put_one(6), -1);  /* nor written to */
  assert_int_equal(chmod(dir, 0700), 0);
  assert_int_equal(get_i(6, &m, so, sizeof so), 0);
  store_meta_free(&m);
  /* A root that others may write to is refused at open. */
  char v1[PATH_MAX], why[256];
  snprintf(v1, sizeof v1, "%s", store_root());
  assert_int_equal(chmod(v1, 0777), 0);
  store_close();
  assert_int_equal(store_open(root, why, sizeof why), -1);
  assert_non_null(strstr(why, "writable by group or others"));
  assert_int_equal(chmod(v1, 0700), 0);
  assert_int_equal(store_open(root, why, sizeof why), 0);
}

/* -- Write failures -------------------------------------------------------- */

static void test_store_readonly_root(void **state)
{
  (void)state;
  char probe[PATH_MAX], tmp[PATH_MAX], key[STORE_KEY_LEN + 1];
  assert_int_equal(put_one(7), 0);
  char v1[PATH_MAX - 64];
  snprintf(v1, sizeof v1, "%s", store_root() ? store_root() : "?");
  assert_int_equal(chmod(v1, 0500), 0);
  snprintf(probe, sizeof probe, "%s/probe", v1);
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {               /* root (CAP_DAC_OVERRIDE) ignores the bits */
    close(fd);
    unlink(probe);
    chmod(v1, 0700);
    print_message("skipped: running with privileges that write into a "
                  "mode-0500 directory, so a read-only root cannot be "
                  "simulated with permission bits\n");
    skip();
  }
  key_for(8, key);
  assert_int_equal(store_tmp_path(key, tmp, sizeof tmp), -1);
  assert_int_equal(put_one(8), -1);
  /* A put into an existing (now read-only) directory fails cleanly. */
  char dir[PATH_MAX];
  key_for(7, key);
  snprintf(dir, sizeof dir, "%s/%.2s", v1, key);
  assert_int_equal(chmod(dir, 0500), 0);
  assert_int_equal(put_one(7), -1);
  int metas, sos, tmps;
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(tmps, 0);
  store_meta m;
  char so[PATH_MAX];
  assert_int_equal(get_i(7, &m, so, sizeof so), 0);  /* still readable */
  store_meta_free(&m);
  chmod(dir, 0700);
  chmod(v1, 0700);
}

/* Disk full, simulated for any user: a file size limit makes the meta
** write fail (EFBIG). The put must fail and leave nothing behind. */
static void test_store_write_fails(void **state)
{
  (void)state;
  char key[STORE_KEY_LEN + 1], tmp[PATH_MAX], meta[PATH_MAX];
  key_for(9, key);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    FILE *f = store_tmp_path(key, tmp, sizeof tmp) == 0 ? fopen(tmp, "wb")
                                                         : NULL;
    if (!f)
      _exit(2);                /* no cmocka asserts in a child */
    char art[2 * MARKER_LEN];
    fill_key(art, sizeof art, 9, key);
    fwrite(art, 1, sizeof art, f);
    fclose(f);
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = 64;          /* the artifact fits, the meta does not */
    setrlimit(RLIMIT_FSIZE, &rl);
    store_meta m = { 0 };
    m.ir = "a long IR text that does not fit in 64 bytes of meta at all";
    _exit(store_put(key, tmp, &m) == -1 && !exists(tmp) ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  int metas, sos, tmps;
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(metas + sos + tmps, 0);
  /* A meta path that cannot be replaced (a directory): same outcome. */
  path_of(key, ".meta", meta, sizeof meta);
  assert_int_equal(mkdir(meta, 0700), 0);
  assert_int_equal(put_one(9), -1);
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(sos + tmps, 0);
  rmdir(meta);
}

/* -- Several processes ----------------------------------------------------- */

/* Fork n children running fn(i) after a common start signal; all must
** exit 0. */
static void run_procs(int n, int (*fn)(int))
{
  int gate[2];
  pid_t pid[16];
  assert_int_equal(pipe(gate), 0);
  for (int i = 0; i < n; i++) {
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      char c;
      close(gate[1]);
      if (read(gate[0], &c, 1) != 0)
        _exit(3);
      _exit(fn(i));
    }
  }
  close(gate[0]);
  close(gate[1]);              /* EOF: every child starts at once */
  int failed = 0;
  for (int i = 0; i < n; i++) {
    int status;
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed++;
  }
  assert_int_equal(failed, 0);
}

static int child_put_same(int i)
{
  (void)i;
  return put_n(10, 200000) == 0 ? 0 : 1;
}

static void test_store_concurrent_put(void **state)
{
  (void)state;
  char key[STORE_KEY_LEN + 1], so[PATH_MAX];
  run_procs(8, child_put_same);
  key_for(10, key);
  int metas, sos, tmps;
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(metas, 1);
  assert_int_equal(sos, 1);
  assert_int_equal(tmps, 0);
  store_meta m;
  assert_int_equal(get_i(10, &m, so, sizeof so), 0);
  assert_int_equal(m.bytes, 200000);
  store_meta_free(&m);
}

/* Puts replace entry 11 with alternating contents while gets read it:
** every get must find a whole entry (old or new), never a broken one. */
static int child_put_or_get(int i)
{
  for (int r = 0; r < 60; r++) {
    if (i < 3) {
      char key[STORE_KEY_LEN + 1], tmp[PATH_MAX];
      key_for(11, key);
      if (store_tmp_path(key, tmp, sizeof tmp) < 0)
        return 1;
      char buf[50000];
      fill_key(buf, sizeof buf, 11 + (r + i) % 2, key);
      FILE *f = fopen(tmp, "wb");
      fwrite(buf, 1, sizeof buf, f);
      fclose(f);
      store_meta m = { 0 };
      if (store_put(key, tmp, &m) < 0)
        return 2;
    } else {
      store_meta m;
      char so[PATH_MAX];
      if (get_i(11, &m, so, sizeof so) < 0)
        return 4;
      store_meta_free(&m);
    }
  }
  return 0;
}

static void test_store_get_races_put(void **state)
{
  (void)state;
  assert_int_equal(put_n(11, 50000), 0);
  run_procs(8, child_put_or_get);
  store_meta m;
  char so[PATH_MAX];
  assert_int_equal(get_i(11, &m, so, sizeof so), 0);
  store_meta_free(&m);
}

/* -- Eviction, verify, clear ----------------------------------------------- */

static void pause_ms(int ms)
{
  struct timespec ts = { 0, ms * 1000000L };
  nanosleep(&ts, NULL);
}

/* Bytes entry i takes on disk: its meta and its artifact. */
static int64_t entry_bytes(int i)
{
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX], so[PATH_MAX];
  struct stat a, b;
  key_for(i, key);
  path_of(key, ".meta", meta, sizeof meta);
  art_of(i, so, sizeof so);
  assert_int_equal(stat(meta, &a), 0);
  assert_int_equal(stat(so, &b), 0);
  return (int64_t)a.st_size + (int64_t)b.st_size;
}

static void test_store_prune_lru(void **state)
{
  (void)state;
  store_meta m;
  char so[PATH_MAX];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(put_n(20 + i, 4096), 0);
    pause_ms(30);              /* distinct mtimes order same-second entries */
  }
  assert_int_equal(get_i(20, &m, so, sizeof so), 0);   /* 20 is now newest */
  store_meta_free(&m);
  int64_t all = store_size(), lru = entry_bytes(21);
  assert_int_equal(all, entry_bytes(20) + lru + entry_bytes(22));
  assert_int_equal(store_prune((uint64_t)all - 1), lru);
  assert_int_equal(get_i(21, &m, so, sizeof so), -1);  /* the LRU one went */
  assert_int_equal(get_i(20, &m, so, sizeof so), 0);
  store_meta_free(&m);
  assert_int_equal(get_i(22, &m, so, sizeof so), 0);
  store_meta_free(&m);
  assert_int_equal(store_prune(1 << 30), 0);
  all = store_size();
  assert_int_equal(store_prune(0), all);
  uint64_t n, bytes;
  store_totals(&n, &bytes, NULL);
  assert_int_equal(n + bytes, 0);
  assert_int_equal(store_size(), 0);
}

static void test_store_max_mb(void **state)
{
  (void)state;
  store_meta m;
  char so[PATH_MAX];
  setenv("TC_CACHE_MAX_MB", "1", 1);
  tensor_config_reload();
  for (int i = 0; i < 3; i++) {  /* 3 x 400 KiB under a 1 MiB cap */
    assert_int_equal(put_n(30 + i, 400 << 10), 0);
    pause_ms(30);
  }
  unsetenv("TC_CACHE_MAX_MB");
  tensor_config_reload();
  assert_int_equal(get_i(30, &m, so, sizeof so), -1);
  assert_int_equal(get_i(31, &m, so, sizeof so), 0);
  store_meta_free(&m);
  assert_int_equal(get_i(32, &m, so, sizeof so), 0);
  store_meta_free(&m);
}

/* A put scans the store (to evict) only when this process's idea of its
** size passes the cap, or once it has itself put a sixteenth of the cap
** since its last scan: what another process adds meanwhile goes then. */
static void test_store_prune_amortized(void **state)
{
  (void)state;
  store_meta m;
  char so[PATH_MAX];
  setenv("TC_CACHE_MAX_MB", "1", 1);
  tensor_config_reload();
  assert_int_equal(put_n(70, 1000), 0);       /* the first put scans */
  pause_ms(30);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {                             /* another process: 1.2 MiB */
    char why[256];
    unsetenv("TC_CACHE_MAX_MB");
    tensor_config_reload();
    int rc = store_open(root, why, sizeof why);
    for (int i = 0; i < 3 && rc == 0; i++) {
      rc = put_n(71 + i, 400 << 10);
      pause_ms(30);
    }
    _exit(rc == 0 ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(put_n(74, 1000), 0);       /* too little to look */
  assert_true(store_size() > (1 << 20));
  assert_int_equal(put_n(75, 70 << 10), 0);   /* over a sixteenth: scans */
  assert_true(store_size() <= (1 << 20));
  assert_int_equal(get_i(70, &m, so, sizeof so), -1);   /* oldest first */
  assert_int_equal(get_i(71, &m, so, sizeof so), -1);
  assert_int_equal(get_i(75, &m, so, sizeof so), 0);
  store_meta_free(&m);
  unsetenv("TC_CACHE_MAX_MB");
  tensor_config_reload();
}

/* A file made to look old enough for verify to reap. */
static void make_old(const char *path)
{
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("leftover", f);
  fclose(f);
  struct timespec t[2] = { { time(NULL) - 7200, 0 }, { time(NULL) - 7200, 0 } };
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void test_store_verify(void **state)
{
  (void)state;
  char so[PATH_MAX], key[STORE_KEY_LEN + 1], p[PATH_MAX + 80];
  assert_int_equal(put_one(40), 0);
  assert_int_equal(put_one(41), 0);
  assert_int_equal(store_verify(NULL, NULL), 0);
  art_of(40, so, sizeof so);
  assert_int_equal(truncate(so, 10), 0);
  key_for(41, key);
  snprintf(p, sizeof p, "%s/%.2s/.tmp-1-2-3", store_root(), key);
  make_old(p);                 /* a crashed writer's temp */
  snprintf(p, sizeof p, "%s/%.2s/%s-%032d.so", store_root(), key, key, 7);
  make_old(p);                 /* an artifact no meta names */
  char *rep = NULL;
  size_t len;
  FILE *f = open_memstream(&rep, &len);
  int failed = -1;
  assert_int_equal(store_verify(f, &failed), 3);
  assert_int_equal(failed, 0);
  fclose(f);
  assert_non_null(strstr(rep, "10 bytes, meta says 1040"));
  assert_non_null(strstr(rep, "stale temporary"));
  assert_non_null(strstr(rep, "orphaned artifact"));
  free(rep);
  assert_false(exists(so));
  assert_false(exists(p));
  assert_int_equal(store_verify(NULL, NULL), 0);
  store_meta m;
  assert_int_equal(get_i(41, &m, so, sizeof so), 0);
  store_meta_free(&m);
  assert_int_equal(get_i(40, &m, so, sizeof so), -1);
}

static int count_visit(void *ctx, const char *path, const store_meta *m)
{
  int *c = ctx;
  (void)path;
  c[m ? 0 : 1]++;
  return 0;
}

static void test_store_each_clear(void **state)
{
  (void)state;
  for (int i = 0; i < 5; i++)
    assert_int_equal(put_one(50 + i), 0);
  write_meta(52, "garbage\n");
  int c[2] = { 0, 0 };
  assert_int_equal(store_each(count_visit, c), 5);
  assert_int_equal(c[0], 4);
  assert_int_equal(c[1], 1);   /* the unparsable one, passed as NULL */
  int failed = -1;
  assert_int_equal(store_clear(NULL, &failed), 5);
  assert_int_equal(failed, 0);
  uint64_t n;
  store_totals(&n, NULL, NULL);
  assert_int_equal(n, 0);
  assert_int_equal(store_each(count_visit, c), 0);
  store_meta m;
  char so[PATH_MAX];
  assert_int_equal(get_i(50, &m, so, sizeof so), -1);
  assert_int_equal(put_one(50), 0);   /* usable after a clear */
  assert_int_equal(get_i(50, &m, so, sizeof so), 0);
  store_meta_free(&m);
}

/* -- Names that are not regular files --------------------------------------- */

/* Any of these would hang a reader that opens it (a FIFO), or make it load
** someone else's file (a link): store_get must refuse them at once, and
** verify report and remove them, never opening them. */
static void test_store_not_regular(void **state)
{
  (void)state;
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX], so[PATH_MAX], far[PATH_MAX];
  store_meta m;
  for (int i = 60; i < 66; i++)
    assert_int_equal(put_one(i), 0);
  alarm(20);                   /* a hang fails the test instead */
  /* 60: a FIFO as the meta. */
  key_for(60, key);
  path_of(key, ".meta", meta, sizeof meta);
  assert_int_equal(unlink(meta), 0);
  assert_int_equal(mkfifo(meta, 0600), 0);
  expect_removed(60, "meta is a FIFO");
  /* 61: a FIFO as the artifact. */
  art_of(61, so, sizeof so);
  assert_int_equal(unlink(so), 0);
  assert_int_equal(mkfifo(so, 0600), 0);
  expect_removed(61, "artifact is a FIFO");
  assert_false(exists(so));
  /* 62: the artifact a link to a valid copy of itself elsewhere. */
  art_of(62, so, sizeof so);
  snprintf(far, sizeof far, "%s/elsewhere.so", root);
  assert_int_equal(rename(so, far), 0);
  assert_int_equal(symlink(far, so), 0);
  expect_removed(62, "artifact is a symbolic link");
  assert_false(exists(so));
  assert_true(exists(far));    /* the link went, never its target */
  /* 63: a directory named like the meta. */
  key_for(63, key);
  path_of(key, ".meta", meta, sizeof meta);
  assert_int_equal(unlink(meta), 0);
  assert_int_equal(mkdir(meta, 0700), 0);
  expect_removed(63, "meta is a directory");
  /* 64, 65: the same four kinds, now for verify (and the tools' walk). */
  key_for(64, key);
  path_of(key, ".meta", meta, sizeof meta);
  assert_int_equal(unlink(meta), 0);
  assert_int_equal(mkfifo(meta, 0600), 0);
  char linkname[PATH_MAX];
  art_of(65, so, sizeof so);
  snprintf(linkname, sizeof linkname, "%s", so);
  assert_int_equal(unlink(so), 0);
  assert_int_equal(symlink(far, so), 0);
  int c[2] = { 0, 0 };
  assert_int_equal(store_each(count_visit, c), 2);
  assert_int_equal(c[1], 1);   /* the FIFO meta: passed as unreadable */
  char *rep = NULL;
  size_t len;
  FILE *f = open_memstream(&rep, &len);
  int failed = -1;
  assert_int_equal(store_verify(f, &failed), 2);
  fclose(f);
  assert_int_equal(failed, 0);
  assert_non_null(strstr(rep, "meta is a FIFO: removed"));
  assert_non_null(strstr(rep, "artifact is a symbolic link: removed"));
  free(rep);
  assert_false(exists(meta));
  assert_false(exists(linkname));
  assert_true(exists(far));
  assert_int_equal(store_verify(NULL, NULL), 0);
  /* A FIFO where a temporary goes, young or not, is not a put in flight. */
  snprintf(meta, sizeof meta, "%s/%.2s/.tmp-1-2-fifo", store_root(), key);
  assert_int_equal(mkfifo(meta, 0600), 0);
  assert_int_equal(store_verify(NULL, NULL), 1);
  assert_false(exists(meta));
  /* A key directory that is a link to a private directory elsewhere: not
  ** used for reading or writing. */
  char kdir[PATH_MAX], moved[PATH_MAX];
  assert_int_equal(put_one(66), 0);
  key_for(66, key);
  snprintf(kdir, sizeof kdir, "%s/%.2s", store_root(), key);
  snprintf(moved, sizeof moved, "%s/moved", root);
  assert_int_equal(rename(kdir, moved), 0);
  assert_int_equal(symlink(moved, kdir), 0);
  assert_int_equal(get_i(66, &m, so, sizeof so), -1);
  assert_int_equal(put_one(66), -1);
  c[0] = c[1] = 0;
  assert_int_equal(store_each(count_visit, c), 0);
  assert_int_equal(store_verify(NULL, NULL), 1);   /* the link: removed */
  assert_false(exists(kdir));
  assert_true(exists(moved));
  alarm(0);
  /* And everything can be stored and loaded again. */
  for (int i = 60; i < 67; i++) {
    assert_int_equal(put_one(i), 0);
    assert_int_equal(get_i(i, &m, so, sizeof so), 0);
    store_meta_free(&m);
  }
}

/* -- Each artifact is tied to its key --------------------------------------- */

static void test_store_marker_helper(void **state)
{
  (void)state;
  char key[STORE_KEY_LEN + 1], other[STORE_KEY_LEN + 1], buf[300];
  key_for(1, key);
  key_for(2, other);
  assert_string_equal(STORE_KEY_MARKER, "tc-kernel-key:");
  fill_key(buf, sizeof buf, 1, key);
  assert_true(store_artifact_has_key(buf, sizeof buf, key));
  assert_false(store_artifact_has_key(buf, sizeof buf, other));
  assert_false(store_artifact_has_key(buf, sizeof buf, "nothex"));
  /* The NUL is part of it: a longer string is not this marker. */
  char *at = memmem(buf, sizeof buf, STORE_KEY_MARKER, 14);
  assert_non_null(at);
  at[14 + STORE_KEY_LEN] = '0';
  assert_false(store_artifact_has_key(buf, sizeof buf, key));
  /* Right at the end of the bytes, and cut short by one. */
  size_t n = (size_t)snprintf(buf, sizeof buf, "xx" STORE_KEY_MARKER "%s",
                              key) + 1;
  assert_true(store_artifact_has_key(buf, n, key));
  assert_false(store_artifact_has_key(buf, n - 1, key));
}

/* Move entry `from` (meta and artifact) under key `to` as a person or a
** buggy tool might: renamed files, the meta's lines rewritten (key and
** artifact name; with resum, the checksum recomputed for the new key). */
static void move_entry(int from, int to, bool rewrite_key, bool resum)
{
  char fkey[STORE_KEY_LEN + 1], tkey[STORE_KEY_LEN + 1];
  char fmeta[PATH_MAX], tmeta[PATH_MAX], fso[PATH_MAX], tso[PATH_MAX + 80];
  char sum[STORE_KEY_LEN + 1], line[4096];
  key_for(from, fkey);
  key_for(to, tkey);
  path_of(fkey, ".meta", fmeta, sizeof fmeta);
  path_of(tkey, ".meta", tmeta, sizeof tmeta);
  art_of(from, fso, sizeof fso);
  /* The artifact's bytes, to sum them for the new key. */
  struct stat st;
  assert_int_equal(stat(fso, &st), 0);
  char *bytes = malloc((size_t)st.st_size);
  FILE *f = fopen(fso, "rb");
  assert_int_equal(fread(bytes, 1, (size_t)st.st_size, f), st.st_size);
  fclose(f);
  sum_of(tkey, bytes, (size_t)st.st_size, sum);
  free(bytes);
  const char *newsum = resum ? sum : strrchr(fso, '-') + 1;
  const char *akey = rewrite_key ? tkey : fkey;   /* meta stays coherent */
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/%.2s", store_root(), tkey);
  mkdir(dir, 0700);
  snprintf(tso, sizeof tso, "%s/%s-%.32s.so", dir, akey, newsum);
  assert_int_equal(rename(fso, tso), 0);
  FILE *in = fopen(fmeta, "r"), *out = fopen(tmeta, "w");
  assert_non_null(in);
  assert_non_null(out);
  bool header = true;
  while (fgets(line, sizeof line, in)) {
    if (header && strcmp(line, "\n") == 0)
      header = false;
    if (header && strncmp(line, "key: ", 5) == 0 && rewrite_key)
      fprintf(out, "key: %s\n", tkey);
    else if (header && strncmp(line, "artifact: ", 10) == 0)
      fprintf(out, "artifact: %s-%.32s.so\n", akey, newsum);
    else if (header && strncmp(line, "checksum: ", 10) == 0)
      fprintf(out, "checksum: %.32s\n", newsum);
    else
      fputs(line, out);
  }
  fclose(in);
  fclose(out);
  chmod(tmeta, 0600);
  assert_int_equal(unlink(fmeta), 0);
}

static void test_store_key_binding(void **state)
{
  (void)state;
  store_meta m;
  char so[PATH_MAX];
  /* A copy under another key, names and key line made to fit: the
  ** checksum binds the key, so it no longer matches. */
  assert_int_equal(put_one(70), 0);
  move_entry(70, 71, true, false);
  expect_removed(71, "checksum");
  /* The key line left as it was: the meta is for another key. */
  assert_int_equal(put_one(72), 0);
  move_entry(72, 73, false, false);
  expect_removed(73, "meta is for key");
  /* Checksum recomputed for the new key (a buggy writer, or a careful
  ** person): the artifact still carries the old key's marker. */
  assert_int_equal(put_one(74), 0);
  move_entry(74, 75, true, true);
  expect_removed(75, "key marker of kernel");
  /* And a well-formed entry whose artifact has no marker at all: refused
  ** while the marker is required, accepted before (the codegen that does
  ** not embed one yet); store_put applies the same rule. */
  char key[STORE_KEY_LEN + 1], tmp[PATH_MAX], buf[2000];
  key_for(76, key);
  fill_key(buf, sizeof buf, 76, NULL);
  store_meta pm = { 0 };
  meta_fields(&pm, 76);
  assert_int_equal(store_tmp_path(key, tmp, sizeof tmp), 0);
  FILE *f = fopen(tmp, "wb");
  fwrite(buf, 1, sizeof buf, f);
  fclose(f);
  FILE *lf = log_start();
  assert_int_equal(store_put(key, tmp, &pm), -1);
  log_expect(lf, "no key marker; not stored");
  assert_false(exists(tmp));
  store_require_marker(false);
  assert_int_equal(store_tmp_path(key, tmp, sizeof tmp), 0);
  f = fopen(tmp, "wb");
  fwrite(buf, 1, sizeof buf, f);
  fclose(f);
  assert_int_equal(store_put(key, tmp, &pm), 0);
  assert_int_equal(get_i(76, &m, so, sizeof so), 0);
  store_meta_free(&m);
  store_require_marker(true);
  expect_removed(76, "no key marker");
  /* Another key's marker is refused whatever the setting, by put too. */
  store_require_marker(false);
  char okey[STORE_KEY_LEN + 1];
  key_for(77, okey);
  fill_key(buf, sizeof buf, 76, okey);
  assert_int_equal(store_tmp_path(key, tmp, sizeof tmp), 0);
  f = fopen(tmp, "wb");
  fwrite(buf, 1, sizeof buf, f);
  fclose(f);
  lf = log_start();
  assert_int_equal(store_put(key, tmp, &pm), -1);
  log_expect(lf, "key marker of kernel");
  store_require_marker(true);
  int metas, sos, tmps;
  count_files(key, &metas, &sos, &tmps);
  assert_int_equal(metas + sos + tmps, 0);
}

/* -- Hostile metadata --------------------------------------------------------- */

/* Rewrite entry i's meta, replacing the header line that starts with
** `name: ` by `repl` (a whole line, or "" to drop it; NULL appends repl
** to the header). */
static void edit_meta(int i, const char *name, const char *repl)
{
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX];
  key_for(i, key);
  path_of(key, ".meta", meta, sizeof meta);
  FILE *f = fopen(meta, "rb");
  assert_non_null(f);
  char *text = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&text, &cap, '\0', f);
  fclose(f);
  assert_true(n > 0);
  char *out = NULL;
  size_t olen;
  FILE *o = open_memstream(&out, &olen);
  char *line = text, *nl;
  size_t nlen = name ? strlen(name) : 0;
  bool header = true;
  for (; (nl = strchr(line, '\n')); line = nl + 1) {
    if (header && nl == line) {
      if (!name)
        fputs(repl, o);
      header = false;
    }
    if (header && name && strncmp(line, name, nlen) == 0 &&
        line[nlen] == ':')
      fputs(repl, o);
    else
      fwrite(line, 1, (size_t)(nl - line) + 1, o);
  }
  fputs(line, o);
  fclose(o);
  free(text);
  f = fopen(meta, "wb");
  fwrite(out, 1, olen, f);
  fclose(f);
  free(out);
}

static void test_store_hostile_meta(void **state)
{
  (void)state;
  static const struct { const char *name, *repl; } cases[] = {
    { "bytes", "bytes: 99999999999999999999999\n" },     /* overflows */
    { "bytes", "bytes: 1000000000000\n" },               /* absurd */
    { "bytes", "bytes: -1\n" },
    { "instrs", "instrs: -5\n" },
    { "instrs", "instrs: 4000000000\n" },
    { "compile_ms", "compile_ms: nan\n" },
    { "compile_ms", "compile_ms: inf\n" },
    { "compile_ms", "compile_ms: -3\n" },
    { "created", "created: -1\n" },
    { "last_used", "last_used: 99999999999999999\n" },
    { "hits", "hits: many\n" },
    { "kind", "kind: map\033[2J\n" },                    /* a control char */
    { "hits", "" },                                      /* missing */
    { "backend", "" },
    { "codegen", "" },
    { "ops", "" },
    { NULL, "hits: 3\n" },                               /* twice */
    { "shape", NULL },                                   /* too long */
    { NULL, NULL },                                      /* huge line */
  };
  char *longv = malloc(STORE_LINE_MAX + 64);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int i = 80 + (int)c;
    assert_int_equal(put_one(i), 0);
    const char *repl = cases[c].repl;
    if (!repl) {               /* a value longer than any field or line */
      size_t n = cases[c].name ? 200 : STORE_LINE_MAX + 10;
      int k = snprintf(longv, 64, "%s: ",
                       cases[c].name ? cases[c].name : "comment");
      memset(longv + k, 'z', n);
      strcpy(longv + k + n, "\n");
      repl = longv;
    }
    edit_meta(i, cases[c].name, repl);
    expect_removed(i, "malformed");
    assert_int_equal(put_one(i), 0);   /* and it is stored again */
  }
  free(longv);
  /* An unknown field (a newer writer's) is fine. */
  assert_int_equal(put_one(99), 0);
  edit_meta(99, NULL, "future_field: whatever\n");
  store_meta m;
  char so[PATH_MAX];
  assert_int_equal(get_i(99, &m, so, sizeof so), 0);
  store_meta_free(&m);
  /* A NUL inside the text, and a meta far larger than any of ours. */
  char key[STORE_KEY_LEN + 1], meta[PATH_MAX];
  key_for(99, key);
  path_of(key, ".meta", meta, sizeof meta);
  FILE *f = fopen(meta, "r+b");
  fseek(f, 10, SEEK_SET);
  fputc('\0', f);
  fclose(f);
  expect_removed(99, "malformed");
  assert_int_equal(put_one(99), 0);
  assert_int_equal(truncate(meta, 17 << 20), 0);
  expect_removed(99, "malformed");
}

/* -- The cap counts every byte ------------------------------------------------ */

static void test_store_cap_counts_metas(void **state)
{
  (void)state;
  store_meta m;
  char so[PATH_MAX];
  /* Three 1000-byte artifacts whose metas hold 400 KiB of source each:
  ** 1.2 MiB in all, over a 1 MiB cap, though the artifacts are 3 KB. */
  big_source = malloc(400 << 10);
  memset(big_source, 's', (400 << 10) - 1);
  big_source[(400 << 10) - 1] = '\0';
  setenv("TC_CACHE_MAX_MB", "1", 1);
  tensor_config_reload();
  for (int i = 0; i < 3; i++) {
    assert_int_equal(put_n(100 + i, 1000), 0);
    pause_ms(30);
  }
  unsetenv("TC_CACHE_MAX_MB");
  tensor_config_reload();
  free(big_source);
  big_source = NULL;
  assert_int_equal(get_i(100, &m, so, sizeof so), -1);   /* the LRU went */
  assert_int_equal(get_i(101, &m, so, sizeof so), 0);
  store_meta_free(&m);
  pause_ms(30);                /* file times are coarse: keep the order */
  assert_int_equal(get_i(102, &m, so, sizeof so), 0);
  store_meta_free(&m);
  assert_true(store_size() <= 1 << 20);
  /* Leftover temporaries count too: a fresh one (a put in flight) is
  ** kept, so entries make room for it; a stale one is removed first. */
  char key[STORE_KEY_LEN + 1], tmp[PATH_MAX + 32];
  key_for(101, key);
  snprintf(tmp, sizeof tmp, "%s/%.2s/.tmp-9-9-inflight", store_root(), key);
  FILE *f = fopen(tmp, "wb");
  char *z = calloc(1, 500 << 10);
  fwrite(z, 1, 500 << 10, f);
  fclose(f);
  free(z);
  int64_t before = store_size();
  assert_true(before > 1 << 20);
  assert_true(store_prune(1 << 20) > 0);
  assert_true(store_size() <= 1 << 20);
  assert_true(exists(tmp));
  assert_int_equal(get_i(101, &m, so, sizeof so), -1);  /* older: evicted */
  assert_int_equal(get_i(102, &m, so, sizeof so), 0);
  store_meta_free(&m);
  struct timespec t[2] = { { time(NULL) - 7200, 0 }, { time(NULL) - 7200, 0 } };
  assert_int_equal(utimensat(AT_FDCWD, tmp, t, 0), 0);
  assert_int_equal(store_prune(1 << 20), 0);   /* nothing evicted... */
  assert_false(exists(tmp));                   /* ...the stale temp went */
  assert_int_equal(get_i(102, &m, so, sizeof so), 0);
  store_meta_free(&m);
}

/* -- Opening without creating ---------------------------------------------- */

static void test_store_open_existing(void **state)
{
  (void)state;
  char why[256], dir[PATH_MAX];
  store_close();
  snprintf(dir, sizeof dir, "%s/typo", root);
  assert_int_equal(store_open_existing(dir, why, sizeof why), -1);
  assert_non_null(strstr(why, "no such directory"));
  assert_false(exists(dir));
  assert_false(store_is_open());
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(store_open_existing(dir, why, sizeof why), -1);
  assert_non_null(strstr(why, "no kernel store here"));
  snprintf(dir, sizeof dir, "%s/typo/" STORE_LAYOUT, root);
  assert_false(exists(dir));
  /* A file or a link where the store's directory goes is refused. */
  char target[PATH_MAX];
  snprintf(target, sizeof target, "%s/real", root);
  assert_int_equal(mkdir(target, 0700), 0);
  assert_int_equal(symlink(target, dir), 0);
  snprintf(dir, sizeof dir, "%s/typo", root);
  assert_int_equal(store_open_existing(dir, why, sizeof why), -1);
  assert_non_null(strstr(why, "not a directory (a symbolic link)"));
  assert_int_equal(store_open(dir, why, sizeof why), -1);
  /* The real thing opens, and store_open creates. */
  assert_int_equal(store_open_existing(root, why, sizeof why), 0);
  assert_true(store_is_open());
  snprintf(dir, sizeof dir, "%s/new", root);
  assert_int_equal(store_open(dir, why, sizeof why), 0);
  snprintf(dir, sizeof dir, "%s/new/" STORE_LAYOUT, root);
  assert_true(exists(dir));
}

/* -- A full or read-only disk ----------------------------------------------- */

/* In a child with a private mount namespace: a tiny tmpfs root, filled,
** then puts (no space), temp paths (no inodes) and a read-only store. The
** child exits 0 when every check holds, SANDBOX_SKIP without namespaces. */
static int disk_child(void)
{
  char dir[PATH_MAX], why[256], key[STORE_KEY_LEN + 1], tmp[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/disk", root);
  if (mkdir(dir, 0700) < 0 || sandbox_enter() < 0 ||
      sandbox_tmpfs(dir, 256, 0) < 0)
    return SANDBOX_SKIP;
  signal(SIGXFSZ, SIG_IGN);
  store_close();
  if (store_open(dir, why, sizeof why) < 0)
    return 10;
  /* Entry 0 fits; then the disk fills up. */
  if (put_one(0) < 0)
    return 11;
  if (sandbox_fill(dir) < 0)
    return 12;
  /* A put whose artifact was written before the disk filled: the meta
  ** cannot be written; -1, and nothing of it is left. */
  key_for(1, key);
  int metas, sos, tmps;
  char big[PATH_MAX + 16];
  snprintf(big, sizeof big, "%s/ballast", dir);
  if (truncate(big, 0) < 0 || store_tmp_path(key, tmp, sizeof tmp) < 0)
    return 13;
  char buf[8192];
  fill(buf, sizeof buf, 1);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(buf, 1, sizeof buf, f) != sizeof buf || fclose(f) != 0)
    return 14;
  if (sandbox_fill(dir) < 0)
    return 15;
  store_meta m = { 0 };
  meta_fields(&m, 1);
  if (store_put(key, tmp, &m) != -1 || exists(tmp))
    return 16;
  count_files(key, &metas, &sos, &tmps);
  if (metas + sos + tmps != 0)
    return 17;
  /* A put whose artifact cannot even be written (the backend's write
  ** fails): put is handed a short file and must still clean up. */
  if (sandbox_fill(dir) < 0 || store_tmp_path(key, tmp, sizeof tmp) < 0)
    return 18;
  f = fopen(tmp, "wb");
  bool wrote = f && fwrite(buf, 1, sizeof buf, f) == sizeof buf;
  if (f)
    wrote = fclose(f) == 0 && wrote;
  if (wrote)
    return 19;                 /* the disk was not full after all */
  if (store_put(key, tmp, &m) != -1 || exists(tmp))
    return 20;
  count_files(key, &metas, &sos, &tmps);
  if (metas + sos + tmps != 0)
    return 21;
  /* What is stored still loads (the hit's meta rewrite just fails). */
  store_meta g;
  char so[PATH_MAX];
  if (get_i(0, &g, so, sizeof so) != 0)
    return 22;
  store_meta_free(&g);
  /* No inodes left: a temp path cannot be made, cleanly. */
  char idir[PATH_MAX];
  snprintf(idir, sizeof idir, "%s/inodes", root);
  if (mkdir(idir, 0700) < 0 || sandbox_tmpfs(idir, 1024, 4) < 0)
    return 23;
  store_close();
  if (store_open(idir, why, sizeof why) < 0)
    return 24;
  for (int i = 0; i < 8; i++)    /* fill the inodes with key dirs */
    if (store_tmp_path(key, tmp, sizeof tmp) < 0)
      break;
  if (store_tmp_path(key, tmp, sizeof tmp) != -1 || put_one(2) != -1)
    return 25;
  /* Read-only (EROFS, which stops root too): no temp path, no put, and
  ** gets still work. */
  store_close();
  if (store_open(dir, why, sizeof why) < 0 || truncate(big, 0) < 0 ||
      sandbox_readonly(dir) < 0)
    return 26;
  if (store_tmp_path(key, tmp, sizeof tmp) != -1 || put_one(3) != -1)
    return 27;
  if (get_i(0, &g, so, sizeof so) != 0)
    return 28;
  store_meta_free(&g);
  return 0;
}

static void test_store_disk_full(void **state)
{
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    _exit(disk_child());
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == SANDBOX_SKIP) {
    print_message("skipped: no private mount namespace here, so no tmpfs "
                  "to fill; test_store_write_fails covers EFBIG\n");
    skip();
  }
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* -- Main ------------------------------------------------------------------ */

/* `--populate DIR N [KB]`: N fake entries in DIR, for test_dump.sh; with
** KB, each meta carries KB KiB of source text (artifacts stay ~1000 B). */
static int populate(const char *dir, int n, int kb)
{
  char why[256];
  if (kb > 0) {
    big_source = malloc((size_t)kb * 1024 + 1);
    for (int i = 0; i < kb * 1024; i++)
      big_source[i] = i % 64 == 63 ? '\n' : 'a' + i % 26;
    big_source[kb * 1024] = '\0';
  }
  if (store_open(dir, why, sizeof why) < 0) {
    fprintf(stderr, "test_store: %s\n", why);
    return 1;
  }
  for (int i = 0; i < n; i++)
    if (put_one(i) < 0) {
      fprintf(stderr, "test_store: put %d failed\n", i);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv)
{
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "--populate") == 0)
    return populate(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 0);
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    T(test_store_key),
    T(test_store_roundtrip),
    T(test_store_open_env),
    T(test_store_truncated),
    T(test_store_corrupted_byte),
    T(test_store_missing_artifact),
    T(test_store_garbage_meta),
    T(test_store_permissions),
    T(test_store_readonly_root),
    T(test_store_write_fails),
    T(test_store_concurrent_put),
    T(test_store_get_races_put),
    T(test_store_prune_lru),
    T(test_store_max_mb),
    T(test_store_prune_amortized),
    T(test_store_verify),
    T(test_store_each_clear),
    T(test_store_not_regular),
    T(test_store_marker_helper),
    T(test_store_key_binding),
    T(test_store_hostile_meta),
    T(test_store_cap_counts_metas),
    T(test_store_open_existing),
    T(test_store_disk_full),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
