/*
** test_safetensors.c -- tc_save / tc_load: the exact bytes of a written
** file, round trips of every dtype bitwise (views and lazy tensors too),
** zero-copy tensors that outlive tc_file_close, hand-written files read
** back, every kind of malformed file rejected with its message, a fuzz
** loop of truncated and corrupted files (no crash: CI runs it under ASan),
** and interop with Python's safetensors/numpy when they are installed.
*/
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char dir[64];

static int setup(void **state)
{
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tc-st-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

/* The folder holds only plain files the tests wrote. */
static int teardown(void **state)
{
  (void)state;
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  return rmdir(dir);
}

static const char *path_of(const char *name)
{
  static char p[4][128];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* -- Raw files --------------------------------------------------------------- */

static void write_bytes(const char *path, const void *b, size_t n)
{
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* A file of the given header (length field = its length, or hlen_field
** when not ~0) and data bytes. */
static void write_st(const char *path, const char *header, const void *data,
                     size_t dlen, uint64_t hlen_field)
{
  size_t hl = strlen(header);
  uint64_t field = hlen_field == ~0ull ? hl : hlen_field;
  unsigned char *b = malloc(8 + hl + dlen);
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(field >> (8 * i));
  memcpy(b + 8, header, hl);
  if (dlen)
    memcpy(b + 8 + hl, data, dlen);
  write_bytes(path, b, 8 + hl + dlen);
  free(b);
}

/* -- The bytes tc writes ----------------------------------------------------- */

/* One f32 [2] tensor: the length, the JSON, spaces to 8-byte alignment,
** then the floats, exactly. */
static void test_save_exact_bytes(void **state)
{
  (void)state;
  tc_tensor *a = TU_NN(tc_from_data(TC_F32, TC_SHAPE(2), (float[]){1, -2},
                                    8));
  const char *p = path_of("one.safetensors");
  TU_OK(tc_save(p, 1, (const char *[]){"a"}, (tc_tensor *[]){a}));
  const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                     "\"data_offsets\":[0,8]}}";
  size_t hl = strlen(json);
  while ((8 + hl) % 8)
    hl++;
  unsigned char want[256];
  for (int i = 0; i < 8; i++)
    want[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memset(want + 8, ' ', hl);
  memcpy(want + 8, json, strlen(json));
  const unsigned char data[8] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}; /* 1, -2 */
  memcpy(want + 8 + hl, data, 8);
  size_t n;
  unsigned char *got = read_bytes(p, &n);
  assert_int_equal(n, 8 + hl + 8);
  assert_memory_equal(got, want, n);
  free(got);
  tc_release(a);
}

/* -- Round trips ---------------------------------------------------------- */

typedef struct {
  const char *name;
  tc_tensor *t;
} named;

/* t's bytes in C order (malloc'd); tc_copy_to checks the size asked. */
static void *raw_of(tc_tensor *t, size_t *nbytes)
{
  *nbytes = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  void *b = malloc(*nbytes + 1);
  assert_non_null(b);
  TU_OK(tc_copy_to(t, b, *nbytes));
  return b;
}

static void expect_same(tc_tensor *got, tc_tensor *want)
{
  assert_int_equal(tc_dtype_of(got), tc_dtype_of(want));
  assert_int_equal(tc_ndim(got), tc_ndim(want));
  for (int d = 0; d < tc_ndim(want); d++)
    assert_int_equal(tc_size(got, d), tc_size(want, d));
  size_t a, b;
  void *x = raw_of(got, &a), *y = raw_of(want, &b);
  assert_int_equal(a, b);
  assert_memory_equal(x, y, a);   /* bitwise: NaN payloads and -0 too */
  free(x);
  free(y);
}

static void test_round_trip_every_dtype(void **state)
{
  (void)state;
  for (int rep = 0; rep < 3; rep++) {   /* traced: past TC_HOT */
    size_t mark = tc_scope_begin();
    tc_tensor *f = TU_NN(tc_randn(TC_F32, TC_SHAPE(3, 5), 7 + rep));
    float special[4] = {NAN, -0.0f, INFINITY, -1e-42f};
    tc_tensor *fs = TU_NN(tc_from_data(TC_F32, TC_SHAPE(4), special, 16));
    tc_tensor *d = TU_NN(tc_rand(TC_F64, TC_SHAPE(2, 2, 2), 9));
    tc_tensor *i32 = TU_NN(tc_arange(TC_I32, -5, 6, 1));
    tc_tensor *i64 = TU_NN(tc_from_data(TC_I64, TC_SHAPE(2),
                                        (int64_t[]){INT64_MIN, INT64_MAX},
                                        16));
    tc_tensor *b = TU_NN(tc_gt_scalar(f, 0.0));
    tc_tensor *s = TU_NN(tc_full(TC_F64, 0, NULL, 2.5));
    tc_tensor *e = TU_NN(tc_zeros(TC_I32, TC_SHAPE(0, 3)));
    tc_tensor *v = TU_NN(tc_transpose(f, 0, 1));            /* a view */
    tc_tensor *lazy = TU_NN(tc_exp(tc_mul_scalar(d, 2.0)));  /* traced */
    tc_tensor *h = TU_NN(tc_cast(fs, TC_F16));
    tc_tensor *bh = TU_NN(tc_cast(v, TC_BF16));
    named all[] = {{"f", f}, {"specials", fs}, {"d", d}, {"i32", i32},
                   {"i64", i64}, {"mask", b}, {"scalar", s}, {"empty", e},
                   {"f.T", v}, {"layers.0.w \"q\"\n", lazy}, {"h", h},
                   {"bh", bh}};
    enum { N = sizeof all / sizeof *all };
    const char *names[N];
    tc_tensor *ts[N];
    for (int i = 0; i < N; i++)
      names[i] = all[i].name, ts[i] = all[i].t;
    const char *p = path_of("all.safetensors");
    TU_OK(tc_save_meta(p, N, names, ts, 2, (const char *[]){"format", "k"},
                       (const char *[]){"pt", "caf\xc3\xa9 \"x\"\t"}));
    tc_file *file = tc_load(p);
    if (!file)
      fail_msg("tc_load: %s", tc_last_error());
    assert_int_equal(tc_file_count(file), N);
    assert_string_equal(tc_file_metadata(file, "format"), "pt");
    assert_string_equal(tc_file_metadata(file, "k"), "caf\xc3\xa9 \"x\"\t");
    assert_null(tc_file_metadata(file, "nope"));
    bool seen[N] = {0};
    for (int i = 0; i < N; i++) {
      const char *name = tc_file_name(file, i);
      int k = 0;
      while (k < N && strcmp(names[k], name) != 0)
        k++;
      assert_true(k < N && !seen[k]);
      seen[k] = true;
      tc_tensor *t = TU_NN(tc_file_get(file, name));
      expect_same(t, ts[k]);
      /* Over the mapping, aligned, and no copy: two gets share memory. */
      if (tc_numel(t) > 0) {
        tc_tensor *t2 = TU_NN(tc_file_get(file, name));
        void *p1 = tc_data(t), *p2 = tc_data(t2);
        assert_ptr_equal(p1, p2);
        assert_int_equal((uintptr_t)p1 % tc_dtype_size(tc_dtype_of(t)), 0);
        tc_release(t2);
      }
      tc_release(t);
    }
    tc_file_close(file);
    tc_scope_end(mark);
  }
}

/* Tensors keep the mapping after tc_file_close; in-place writes change
** memory, not the file; saving over a mapped file leaves its tensors. */
static void test_mapping_lifetime_and_writes(void **state)
{
  (void)state;
  tc_tensor *a = TU_NN(tc_arange(TC_F32, 0, 6, 1));
  const char *p = path_of("life.safetensors");
  TU_OK(tc_save(p, 1, (const char *[]){"a"}, (tc_tensor *[]){a}));
  tc_file *f = tc_load(p);
  assert_non_null(f);
  tc_tensor *t = TU_NN(tc_file_get(f, "a"));
  tc_tensor *half = TU_NN(tc_slice(t, 0, 3, 6, 1));
  tc_file_close(f);
  tc_release(t);
  TU_OK(tc_mul_scalar_(half, 10));
  /* Overwrite the file while mapped: the old inode stays. */
  tc_tensor *z = TU_NN(tc_zeros(TC_F32, TC_SHAPE(6)));
  TU_OK(tc_save(p, 1, (const char *[]){"a"}, (tc_tensor *[]){z}));
  float got[3];
  TU_OK(tc_copy_to(half, got, sizeof got));
  assert_true(got[0] == 30 && got[1] == 40 && got[2] == 50);
  tc_release(half);
  f = tc_load(p);   /* the new file: zeros, and nothing was written back */
  assert_non_null(f);
  t = TU_NN(tc_file_get(f, "a"));
  expect_same(t, z);
  tc_release(t);
  tc_file_close(f);
  tc_release(z);
  tc_release(a);
}

/* A file written by hand (another writer's choices: escapes, order of
** keys, metadata first or last, unpadded header, misaligned data). */
static void test_load_hand_written(void **state)
{
  (void)state;
  const char *h = "{\"b\\u00e9\":{\"shape\":[3],\"data_offsets\":[8,11],"
                  "\"dtype\":\"BOOL\"}, \"x\" : {\"dtype\":\"I64\","
                  "\"shape\":[],\"data_offsets\":[0,8]},"
                  "\"__metadata__\":{\"n\":\"\\ud83d\\ude00\"}}";
  unsigned char data[11] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            1, 0, 1};   /* x = -2 */
  const char *p = path_of("hand.safetensors");
  write_st(p, h, data, sizeof data, ~0ull);
  tc_file *f = tc_load(p);
  if (!f)
    fail_msg("%s", tc_last_error());
  assert_int_equal(tc_file_count(f), 2);
  assert_string_equal(tc_file_name(f, 0), "x");          /* data order */
  assert_string_equal(tc_file_name(f, 1), "b\xc3\xa9");
  assert_string_equal(tc_file_metadata(f, "n"), "\xf0\x9f\x98\x80");
  tc_tensor *x = TU_NN(tc_file_get(f, "x"));
  assert_int_equal(tc_ndim(x), 0);
  double v;
  TU_OK(tc_item(x, &v));
  assert_true(v == -2);
  tc_tensor *b = TU_NN(tc_file_get(f, "b\xc3\xa9"));
  assert_int_equal(tc_dtype_of(b), TC_BOOL);
  uint8_t bb[3];
  TU_OK(tc_copy_to(b, bb, 3));
  assert_true(bb[0] == 1 && bb[1] == 0 && bb[2] == 1);
  tc_clear_error();
  assert_null(tc_file_get(f, "y"));
  assert_string_equal(tc_last_error(), "tc_file_get: no tensor named \"y\"");
  assert_null(tc_file_name(f, 2));
  assert_string_equal(tc_last_error(),
                      "tc_file_name: index 2 is out of range [0, 2)");
  tc_release(x);
  tc_release(b);
  tc_file_close(f);
  /* The header length 5 + 2 keys leaves x's data misaligned: a copy. */
  const char *h2 = "{\"x\":{\"dtype\":\"F64\",\"shape\":[1],"
                   "\"data_offsets\":[0,8]}}";
  double one = 1.25;
  write_st(p, h2, &one, 8, ~0ull);
  f = tc_load(p);
  assert_non_null(f);
  x = TU_NN(tc_file_get(f, "x"));
  TU_OK(tc_item(x, &v));
  assert_true(v == 1.25);
  tc_release(x);
  tc_file_close(f);
}

/* -- Malformed files --------------------------------------------------------- */

/* Loading header + data must fail with exactly "tc_load: <path>: " want. */
static void expect_reject(const char *header, const void *data, size_t dlen,
                          uint64_t hlen_field, const char *want)
{
  const char *p = path_of("bad.safetensors");
  write_st(p, header, data, dlen, hlen_field);
  tc_clear_error();
  tc_file *f = tc_load(p);
  if (f) {
    tc_file_close(f);
    fail_msg("loaded a bad file: %s", header);
  }
  char full[512];
  snprintf(full, sizeof full, "tc_load: %s: %s", p, want);
  if (strcmp(tc_last_error(), full) != 0)
    fail_msg("header %s\n got: %s\nwant: %s", header, tc_last_error(), full);
}

#define ENTRY(n, dt, shape, b, e) \
  "\"" n "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" \
  #b "," #e "]}"

static void test_reject_malformed(void **state)
{
  (void)state;
  static const unsigned char z[64];
  uint64_t L = ~0ull;   /* the true header length */
  /* Lengths. */
  const char *p = path_of("short.safetensors");
  write_bytes(p, "\x02\0\0", 3);
  assert_null(tc_load(p));
  char want[256];
  snprintf(want, sizeof want, "tc_load: %s: the file has 3 bytes, fewer "
           "than the 8 of the header length", p);
  assert_string_equal(tc_last_error(), want);
  expect_reject("{}", z, 0, 3, "header length 3 exceeds the file (2 bytes "
                "after the length)");
  expect_reject("{}", z, 0, 1ull << 63, "header length 9223372036854775808 "
                "exceeds the file (2 bytes after the length)");
  expect_reject("[]", z, 0, L, "the header does not start with '{'");
  expect_reject("{", z, 0, L, "the header does not start with '{'");
  /* JSON. */
  expect_reject("{\"a\":{\"dtype\":\"F32\",}}", z, 0, L,
                "malformed header: at byte 20: expected a string key");
  expect_reject("{\"a\":1} x", z, 0, L, "malformed header: at byte 8: "
                "unexpected text after the header's object");
  expect_reject("{\"a\":true}", z, 0, L, "malformed header: at byte 5: "
                "unexpected character 't' (only objects, arrays, strings and "
                "integers are expected)");
  expect_reject("{\"a", z, 0, L, "malformed header: at byte 1: "
                "unterminated string");
  expect_reject("{\"a\\q\":1}", z, 0, L,
                "malformed header: at byte 3: bad escape '\\q'");
  expect_reject("{\"a\\u0000\":1}", z, 0, L,
                "malformed header: at byte 3: NUL (\\u0000) in a string");
  expect_reject("{\"a\\ud800\":1}", z, 0, L, "malformed header: at byte 3: "
                "unpaired surrogate in \\u escape");
  expect_reject("{\"\xc3\x28\":1}", z, 0, L, "malformed header: at byte 2: "
                "string is not valid UTF-8");
  expect_reject("{\"a\":[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}", z, 0, L,
                "malformed header: at byte 20: nested deeper than 16");
  char *big = malloc(4 * 70 + 16);   /* a shape of 70 dims */
  strcpy(big, "{\"a\":[");
  for (int i = 0; i < 70; i++)
    strcat(big, i ? ",1" : "1");
  strcat(big, "]}");
  expect_reject(big, z, 0, L, "malformed header: at byte 134: array longer "
                "than 64 elements");
  free(big);
  /* Tensor entries. */
  expect_reject("{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("a", "F32",
                "[1]", 4, 8) "}", z, 8, L, "malformed header: at byte 0: "
                "object has the key \"a\" twice");
  expect_reject("{" ENTRY("a", "U16", "[2]", 0, 4) "}", z, 4, L,
                "tensor \"a\": dtype U16 is not supported by tc");
  expect_reject("{" ENTRY("a", "F8_E4M3", "[2]", 0, 2) "}", z, 2, L,
                "tensor \"a\": dtype F8_E4M3 is not supported by tc");
  expect_reject("{" ENTRY("a", "Q7", "[2]", 0, 4) "}", z, 4, L,
                "tensor \"a\": unknown dtype \"Q7\"");
  expect_reject("{" ENTRY("a", "F32", "[-1]", 0, 4) "}", z, 4, L,
                "malformed header: at byte 29: negative number (only "
                "non-negative integers are expected)");
  expect_reject("{" ENTRY("a", "F32", "[1.0]", 0, 4) "}", z, 4, L,
                "malformed header: at byte 30: fraction or exponent (only "
                "integers are expected)");
  expect_reject("{" ENTRY("a", "F32", "[01]", 0, 4) "}", z, 4, L,
                "malformed header: at byte 29: number with a leading zero");
  expect_reject("{" ENTRY("a", "F32", "[99999999999999999999]", 0, 4) "}",
                z, 4, L, "malformed header: at byte 29: number does not fit "
                "in 64 bits");
  expect_reject("{" ENTRY("a", "F32", "[4294967296,4294967296]", 0, 4) "}",
                z, 4, L, "tensor \"a\": shape overflows (its byte count "
                "exceeds 2^63)");
  expect_reject("{" ENTRY("a", "F32", "[18446744073709551615]", 0, 4) "}",
                z, 4, L, "tensor \"a\": shape overflows (its byte count "
                "exceeds 2^63)");
  expect_reject("{" ENTRY("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", z,
                4, L, "tensor \"a\": 9 dims, more than tc's 8");
  expect_reject("{" ENTRY("a", "F32", "[\"2\"]", 0, 4) "}", z, 4, L,
                "tensor \"a\": shape entries must be integers");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", z, 4, L,
                "tensor \"a\": \"data_offsets\" must be two integers");
  expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":"
                "[0,4],\"extra\":1}}", z, 4, L,
                "tensor \"a\": unknown field \"extra\"");
  expect_reject("{\"a\":[1]}", z, 0, L,
                "tensor \"a\": its entry must be an object");
  expect_reject("{\"__metadata__\":{\"k\":1}}", z, 0, L,
                "\"__metadata__\" value of \"k\" must be a string");
  /* Offsets against the data. */
  expect_reject("{" ENTRY("a", "F32", "[2]", 0, 8) "}", z, 4, L,
                "tensor \"a\": data_offsets [0, 8] are out of range (the "
                "data has 4 bytes)");   /* truncated data */
  expect_reject("{" ENTRY("a", "F32", "[2]", 8, 4) "}", z, 8, L,
                "tensor \"a\": data_offsets [8, 4] are out of range (the "
                "data has 8 bytes)");
  expect_reject("{" ENTRY("a", "F32", "[2]", 0, 12) "}", z, 12, L,
                "tensor \"a\": data_offsets span 12 bytes but dtype and "
                "shape need 8");
  expect_reject("{" ENTRY("a", "F32", "[2]", 0, 8) "," ENTRY("b", "F32",
                "[2]", 4, 12) "}", z, 12, L,
                "tensors \"a\" and \"b\" overlap");
  expect_reject("{" ENTRY("a", "F32", "[1]", 0, 4) "," ENTRY("b", "F32",
                "[1]", 8, 12) "}", z, 12, L,
                "data bytes [4, 8) belong to no tensor");
  expect_reject("{" ENTRY("a", "F32", "[1]", 0, 4) "}", z, 6, L,
                "data bytes [4, 6) belong to no tensor");
  /* Files that are not files. */
  tc_clear_error();
  assert_null(tc_load(dir));
  snprintf(want, sizeof want, "tc_load: %s: not a regular file", dir);
  assert_string_equal(tc_last_error(), want);
  assert_null(tc_load(path_of("missing")));
  assert_non_null(strstr(tc_last_error(), "No such file"));
  tc_clear_error();
  assert_null(tc_load(NULL));
  assert_string_equal(tc_last_error(), "tc_load: argument is NULL");
  /* Bool bytes other than 0/1: the file loads, the tensor is refused. */
  write_st(p, "{" ENTRY("m", "BOOL", "[3]", 0, 3) "}",
           (const unsigned char[]){1, 7, 0}, 3, L);
  tc_file *f = tc_load(p);
  assert_non_null(f);
  assert_null(tc_file_get(f, "m"));
  assert_string_equal(tc_last_error(), "tc_file_get: tensor \"m\": bool "
                      "element 1 is 7, not 0 or 1");
  tc_file_close(f);
}

static void test_save_errors(void **state)
{
  (void)state;
  tc_tensor *a = TU_NN(tc_zeros(TC_F32, TC_SHAPE(2)));
  const char *p = path_of("err.safetensors");
  tc_clear_error();
  assert_int_equal(tc_save(p, 2, (const char *[]){"w", "w"},
                           (tc_tensor *[]){a, a}), -1);
  assert_string_equal(tc_last_error(),
                      "tc_save_meta: tensor name \"w\" appears twice");
  assert_int_equal(tc_save(p, 1, (const char *[]){"__metadata__"},
                           (tc_tensor *[]){a}), -1);
  assert_string_equal(tc_last_error(), "tc_save_meta: \"__metadata__\" is "
                      "reserved, not a tensor name");
  assert_int_equal(tc_save(p, 1, (const char *[]){NULL},
                           (tc_tensor *[]){a}), -1);
  assert_string_equal(tc_last_error(), "tc_save_meta: name 0 is NULL");
  assert_int_equal(tc_save(p, 1, (const char *[]){"\xff"},
                           (tc_tensor *[]){a}), -1);
  assert_string_equal(tc_last_error(),
                      "tc_save_meta: name 0 is not valid UTF-8");
  tc_clear_error();
  assert_int_equal(tc_save(p, 1, (const char *[]){"w"},
                           (tc_tensor *[]){NULL}), -1);
  assert_string_equal(tc_last_error(), "tc_save_meta: argument is NULL");
  assert_int_equal(tc_save_meta(p, 1, (const char *[]){"w"},
                                (tc_tensor *[]){a}, 2,
                                (const char *[]){"k", "k"},
                                (const char *[]){"1", "2"}), -1);
  assert_string_equal(tc_last_error(),
                      "tc_save_meta: metadata key \"k\" appears twice");
  struct stat st;
  assert_int_equal(stat(p, &st), -1);   /* no file was made */
  const char *nodir = path_of("no/such/dir.safetensors");
  assert_int_equal(tc_save(nodir, 1, (const char *[]){"w"},
                           (tc_tensor *[]){a}), -1);
  char want[256];
  snprintf(want, sizeof want, "tc_save_meta: %s: No such file or directory",
           nodir);
  assert_string_equal(tc_last_error(), want);
  /* Zero tensors is a valid file. */
  TU_OK(tc_save(p, 0, NULL, NULL));
  tc_file *f = tc_load(p);
  assert_non_null(f);
  assert_int_equal(tc_file_count(f), 0);
  tc_file_close(f);
  tc_release(a);
}

/* -- Fuzz: truncated and corrupted files never crash ------------------------- */

static uint64_t rng(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Load bytes b[0, n) and use whatever loads: every tensor read and
** printed. Returns whether it loaded. */
static bool try_load(const unsigned char *b, size_t n)
{
  const char *p = path_of("fuzz.safetensors");
  write_bytes(p, b, n);
  tc_file *f = tc_load(p);
  if (!f) {
    assert_non_null(tc_last_error());
    return false;
  }
  for (int i = 0; i < tc_file_count(f); i++) {
    tc_tensor *t = tc_file_get(f, tc_file_name(f, i));
    if (!t)
      continue;   /* e.g. a flipped bool byte */
    size_t nb;
    free(raw_of(t, &nb));
    char s[64];
    assert_true(tc_format(t, s, sizeof s) > 0);
    tc_release(t);
  }
  tc_file_close(f);
  return true;
}

static void test_fuzz_truncate_and_flip(void **state)
{
  (void)state;
  tc_tensor *a = TU_NN(tc_randn(TC_F32, TC_SHAPE(4, 3), 1));
  tc_tensor *b = TU_NN(tc_arange(TC_I64, 0, 5, 1));
  tc_tensor *m = TU_NN(tc_gt_scalar(a, 0.0));
  const char *p = path_of("valid.safetensors");
  TU_OK(tc_save_meta(p, 3, (const char *[]){"a", "b", "mask"},
                     (tc_tensor *[]){a, b, m}, 1, (const char *[]){"k"},
                     (const char *[]){"v"}));
  size_t n;
  unsigned char *valid = read_bytes(p, &n);
  unsigned char *buf = malloc(n);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int loaded = 0, rejected = 0;
  for (size_t cut = 0; cut <= n; cut++)   /* every truncation */
    try_load(valid, cut) ? loaded++ : rejected++;
  assert_int_equal(loaded, 1);   /* only the whole file */
  for (int it = 0; it < 2000; it++) {
    memcpy(buf, valid, n);
    int flips = 1 + (int)(rng(&s) % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = rng(&s) % n;
      if (rng(&s) % 2)   /* mostly the header: that is what is parsed */
        at %= 8 + 160;
      if (rng(&s) % 3 == 0)
        buf[at] = "{}[]\",:0123456789-.e \\u"[rng(&s) % 24];
      else
        buf[at] ^= (unsigned char)(1u << (rng(&s) % 8));
    }
    size_t len = rng(&s) % 8 == 0 ? rng(&s) % (n + 1) : n;
    try_load(buf, len) ? loaded++ : rejected++;
  }
  /* Both paths ran: corrupt data bytes load, a corrupt header does not. */
  assert_true(loaded > 100 && rejected > 100);
  free(buf);
  free(valid);
  tc_release(a);
  tc_release(b);
  tc_release(m);
}

/* -- Interop with Python's safetensors and numpy ---------------------------- */

static const char *py_script =
  "import sys, numpy as np\n"
  "from safetensors import safe_open\n"
  "from safetensors.numpy import load_file, save_file\n"
  "d = load_file(sys.argv[1])\n"
  "assert sorted(d) == ['b', 'f', 'g', 'h', 'i'], sorted(d)\n"
  "assert d['h'].dtype == np.float16\n"
  "assert d['h'].view(np.uint16).tolist() == [0x2e66, 0xfbff, 1]\n"
  "assert d['f'].dtype == np.float32 and d['f'].shape == (2, 3)\n"
  "assert (d['f'] == np.arange(6, dtype=np.float32).reshape(2, 3) / 4).all()\n"
  "assert d['g'].dtype == np.float64 and d['g'].shape == (3, 2)\n"
  "assert (d['g'] == (np.arange(6.0).reshape(2, 3) - 2.5).T).all()\n"
  "assert d['i'].dtype == np.int32 and list(d['i']) == [-7, 0, 2**31 - 1]\n"
  "assert d['b'].dtype == np.bool_ and list(d['b']) == [True, False]\n"
  "with safe_open(sys.argv[1], 'np') as f:\n"
  "    assert f.metadata() == {'by': 'tc'}, f.metadata()\n"
  "save_file({'x': np.arange(12, dtype=np.float64).reshape(3, 4) * 0.5,\n"
  "           'l': np.array([-1, 2**40], dtype=np.int64),\n"
  "           'm': np.array([True, False, True]),\n"
  "           's': np.array(3.25, dtype=np.float32),\n"
  "           'h': np.array([1/3, -np.inf, 6e-8], dtype=np.float16)},\n"
  "          sys.argv[2], metadata={'by': 'numpy'})\n";

static void test_python_interop(void **state)
{
  (void)state;
  if (system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
    printf("skipped: python3 with the safetensors and numpy packages is not "
           "installed (pip install safetensors numpy)\n");
    skip();
  }
  float fv[6];
  for (int i = 0; i < 6; i++)
    fv[i] = (float)i / 4;
  tc_tensor *f = TU_NN(tc_from_data(TC_F32, TC_SHAPE(2, 3), fv, 24));
  tc_tensor *ar = TU_NN(tc_arange(TC_F64, 0, 6, 1));
  tc_tensor *g0 = TU_NN(tc_sub_scalar(ar, 2.5));
  tc_tensor *g1 = TU_NN(tc_reshape(g0, TC_SHAPE(2, 3)));
  tc_tensor *g = TU_NN(tc_transpose(g1, 0, 1));
  tc_tensor *i = TU_NN(tc_from_data(TC_I32, TC_SHAPE(3),
                                    (int32_t[]){-7, 0, INT32_MAX}, 12));
  tc_tensor *b = TU_NN(tc_from_data(TC_BOOL, TC_SHAPE(2), (uint8_t[]){1, 0},
                                    2));
  const char *from_tc = path_of("from_tc.safetensors");
  const char *from_py = path_of("from_py.safetensors");
  const char *script = path_of("interop.py");
  tc_tensor *h = TU_NN(tc_from_data(TC_F16, TC_SHAPE(3),
                                    (uint16_t[]){0x2e66, 0xfbff, 0x0001}, 6));
  TU_OK(tc_save_meta(from_tc, 5, (const char *[]){"f", "g", "i", "b", "h"},
                     (tc_tensor *[]){f, g, i, b, h}, 1, (const char *[]){"by"},
                     (const char *[]){"tc"}));
  write_bytes(script, py_script, strlen(py_script));
  char cmd[512];
  snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s'", script, from_tc,
           from_py);
  int rc = system(cmd);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  tc_file *file = tc_load(from_py);
  if (!file)
    fail_msg("%s", tc_last_error());
  assert_int_equal(tc_file_count(file), 5);
  assert_string_equal(tc_file_metadata(file, "by"), "numpy");
  tc_tensor *hp = TU_NN(tc_file_get(file, "h"));   /* f16 from numpy */
  uint16_t hv[3];
  TU_OK(tc_copy_to(hp, hv, sizeof hv));
  assert_true(hv[0] == 0x3555 && hv[1] == 0xfc00 && hv[2] == 0x0001);
  tc_release(hp);
  tc_tensor *x = TU_NN(tc_file_get(file, "x"));
  double xv[12];
  TU_OK(tc_copy_to(x, xv, sizeof xv));
  for (int k = 0; k < 12; k++)
    assert_true(xv[k] == k * 0.5);
  assert_int_equal(tc_size(x, 0), 3);
  tc_tensor *l = TU_NN(tc_file_get(file, "l"));
  int64_t lv[2];
  TU_OK(tc_copy_to(l, lv, sizeof lv));
  assert_true(lv[0] == -1 && lv[1] == (int64_t)1 << 40);
  tc_tensor *m = TU_NN(tc_file_get(file, "m"));
  uint8_t mv[3];
  TU_OK(tc_copy_to(m, mv, 3));
  assert_true(mv[0] == 1 && mv[1] == 0 && mv[2] == 1);
  tc_tensor *s = TU_NN(tc_file_get(file, "s"));
  assert_int_equal(tc_ndim(s), 0);
  double sv;
  TU_OK(tc_item(s, &sv));
  assert_true(sv == 3.25);
  tc_file_close(file);
  tc_tensor *all[] = {f, ar, g0, g1, g, i, b, h, x, l, m, s};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++)
    tc_release(all[k]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_save_exact_bytes),
    cmocka_unit_test(test_round_trip_every_dtype),
    cmocka_unit_test(test_mapping_lifetime_and_writes),
    cmocka_unit_test(test_load_hand_written),
    cmocka_unit_test(test_reject_malformed),
    cmocka_unit_test(test_save_errors),
    cmocka_unit_test(test_fuzz_truncate_and_flip),
    cmocka_unit_test(test_python_interop),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
