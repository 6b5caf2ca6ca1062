/*
** test_kir.c -- kir_parse, the inverse of kir_print (tc-dump renders a
** stored kernel's CUDA C from it): hand-built kernels with every kind of
** instruction and pass (sequential ones too) come back equal and print
** identically; every kernel that fused programs build does too (through
** the launch hook);
** malformed text gets a clear reason, and truncations and byte flips of
** real printed kernels never crash it (each either fails or is canonical
** text of some kernel: a cut after a whole line may be a smaller one).
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/trace/trace.h"
#include "kir_roundtrip.h"

static void assert_round_trip(const kir_kernel *k)
{
  char why[256];
  if (kir_rt_problem(k, why, sizeof why))
    fail_msg("round trip: %s", why);
}

/* A map kernel: every leaf, constants that only hex prints exactly, a
** gather, a select. */
static kir_kernel *map_kernel(void)
{
  kir_kernel *k = kir_new();
  k->kind = KIR_MAP;
  k->dynamic = true;
  k->ndim = 2;
  k->size[0] = 3;
  k->size[1] = 7;
  k->nbufs = 4;
  k->buf[0] = (kir_buf){ KIR_IN, TC_F32, false, { 7, 1 }, 0, 0 };
  k->buf[1] = (kir_buf){ KIR_IN, TC_I64, false, { 0, 1 }, 0, 0 };
  k->buf[2] = (kir_buf){ KIR_IN, TC_F32, true, { 0, 1 }, 7, 5 };
  k->buf[3] = (kir_buf){ KIR_OUT, TC_F64, false, { -7, 1 }, 0, 0 };
  int x = kir_load(k, 0);
  int idx = kir_load(k, 1);
  int g = kir_gather(k, 2, idx);
  int s = kir_scalar(k, TC_F32, 1);
  int c1 = kir_const(k, TC_F32, 0.1);
  int c2 = kir_const(k, TC_F32, -0.0);
  int c3 = kir_const(k, TC_F32, INFINITY);
  int c4 = kir_const(k, TC_F32, NAN);
  int c5 = kir_const(k, TC_F64, 0x1.fffffffffffffp+1023);
  int a = kir_emit(k, KOP_ADD, TC_F32, x, g, -1);
  int m = kir_emit(k, KOP_MUL, TC_F32, a, s, -1);
  int lt = kir_emit(k, KOP_LT, TC_BOOL, m, c1, -1);
  int sel = kir_emit(k, KOP_SEL, TC_F32, lt, c2, c3);
  int mx = kir_emit(k, KOP_MAXIMUM, TC_F32, sel, c4, -1);
  int e = kir_emit(k, KOP_EXP, TC_F32, mx, -1, -1);
  int y = kir_cast(k, TC_F64, e);
  int z = kir_emit(k, KOP_MINIMUM, TC_F64, y, c5, -1);
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE, 0, 3, z, -1 };
  return k;
}

/* A rows kernel: a reduce that also stores, a rowvar, a store, a
** store_row (a softmax-like pass list). */
static kir_kernel *rows_kernel(void)
{
  kir_kernel *k = kir_new();
  k->kind = KIR_ROWS;
  k->ndim = 1;
  k->size[0] = 4;
  k->row_len = 33;
  k->nbufs = 4;
  k->buf[0] = (kir_buf){ KIR_IN, TC_F64, false, { 33, 1 }, 0, 0 };
  k->buf[1] = (kir_buf){ KIR_OUT, TC_F64, false, { 33, 1 }, 0, 0 };
  k->buf[2] = (kir_buf){ KIR_OUT, TC_F64, false, { 33, 1 }, 0, 0 };
  k->buf[3] = (kir_buf){ KIR_OUT, TC_F64, false, { 1, 0 }, 0, 0 };
  int x = kir_load(k, 0);
  int e = kir_emit(k, KOP_EXP, TC_F64, x, -1, -1);
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, KIR_RED_MAX, 1, e, -1 };
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, KIR_RED_SUM, -1, e, -1 };
  int r = kir_rowvar(k, 1);
  int d = kir_emit(k, KOP_DIV, TC_F64, e, r, -1);
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE, 0, 2, d, -1 };
  int l = kir_emit(k, KOP_LOG, TC_F64, r, -1, -1);
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE_ROW, 0, 3, l, -1 };
  return k;
}

/* A sequential kernel: a cumsum's scan and a scatter_add's scatter. */
static kir_kernel *seq_kernel(void)
{
  kir_kernel *k = kir_new();
  k->kind = KIR_ROWS;
  k->dynamic = true;
  k->ndim = 1;
  k->size[0] = 6;
  k->row_len = 9;
  k->nbufs = 4;
  k->buf[0] = (kir_buf){ KIR_IN, TC_I32, false, { 1, 6 }, 0, 0 };
  k->buf[1] = (kir_buf){ KIR_OUT, TC_I64, false, { 9, 1 }, 0, 0 };
  k->buf[2] = (kir_buf){ KIR_IN, TC_I64, false, { 1, 6 }, 0, 0 };
  k->buf[3] = (kir_buf){ KIR_OUT, TC_F64, true, { 1, 0 }, 6, 5 };
  int x = kir_cast(k, TC_I64, kir_load(k, 0));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCAN, KIR_RED_SUM, 1, x, -1 };
  int at = kir_load(k, 2);
  int v = kir_cast(k, TC_F64, kir_load(k, 0));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCATTER, KIR_RED_SUM, 3, v,
                                      at };
  return k;
}

static void test_hand_built(void **state)
{
  (void)state;
  kir_kernel *m = map_kernel(), *r = rows_kernel(), *q = seq_kernel();
  assert_round_trip(m);
  assert_round_trip(r);
  assert_round_trip(q);
  char *text = kir_text(q);
  assert_non_null(strstr(text, "  pass0 scan sum %1, store buf1\n"
                               "  pass1 scatter sum buf3 at %2 = %4\n"));
  free(text);
  assert_true(kir_sequential(q) && !kir_sequential(r));
  kir_kernel *other = seq_kernel();   /* the index is part of the code */
  other->pass[1].index = 1;
  assert_false(kir_same_code(q, other));
  assert_false(kir_code_hash(q) == kir_code_hash(other));
  kir_free(other);
  kir_free(q);
  r->ndim = 0;   /* one row: a sum_all's shape */
  r->buf[0].stride[0] = 1;
  assert_round_trip(r);
  kir_free(m);
  kir_free(r);
}

/* Parsing `text` fails with a reason containing `want`. */
static void assert_refused(const char *text, const char *want)
{
  char why[256] = "";
  kir_kernel *k = kir_parse(text, why, sizeof why);
  if (k)
    fail_msg("accepted: %s", text);
  if (!strstr(why, want))
    fail_msg("reason \"%s\" lacks \"%s\" for:\n%s", why, want, text);
}

static void test_malformed(void **state)
{
  (void)state;
  const char *head = "kernel map [4] scalars 0\n"
                     "  buf0 in f32 strides [1]\n"
                     "  buf1 out f32 strides [1]\n";
  char t[1024];
  assert_refused("", "line 1: expected \"kernel \"");
  assert_refused(head, "no pass");
  assert_refused("kernel maps [4] scalars 0\n", "line 1");
  assert_refused("kernel map [4, 1, 1, 1, 1, 1, 1, 1, 1] scalars 0\n",
                 "more than 8 size");
  assert_refused("kernel map [-4] scalars 0\n", "size");
  assert_refused("kernel map [99999999999999999999] scalars 0\n",
                 "out of range");
  assert_refused("kernel map [4] scalars 65\n", "scalar count");
  assert_refused("kernel map [4] scalars 0\n  buf1 in f32 strides [1]\n",
                 "line 2: buffer number");
  assert_refused("kernel map [4] scalars 0\n  buf0 in f33 strides [1]\n",
                 "unknown dtype \"f33\"");
  assert_refused("kernel map [4] scalars 0\n  buf0 in f32 strides [1, 1]\n",
                 "not 1 strides");
  /* After the header and buffers above: the instructions and passes, and
  ** the reason wanted. */
  static const struct { const char *body, *want; } cases[] = {
    { "  %0 = f32 LOAD buf2\n", "line 4: buffer 2 out of range" },
    { "  %0 = f32 FROB %0\n", "unknown opcode \"FROB\"" },
    { "  %0 = f32 NEG %0\n", "operand 0 out of range" },
    { "  %0 = f32 SCALAR s0\n", "scalar 0 out of range" },
    { "  %0 = f64 LOAD buf0\n  pass0 store buf1 = %0\n",
      "not of buffer 0's dtype" },
    { "  %0 = f32 LOAD buf0\n  pass0 store buf0 = %0\n", "an input" },
    { "  %0 = f32 LOAD buf0\n  pass0 reduce sum %0\n",
      "a map kernel only stores" },
    { "  %0 = f32 ROWVAR pass0\n  pass0 store buf1 = %0\n",
      "not a reduction" },
    { "  %0 = f32 CONST 0.5\n  pass0 store buf1 = %0\n",
      "not in canonical form" },
    { "  %0 = f32 CONST 0x1p-1 junk\n", "at the end of the line" },
    { "  %0 = f32 LOAD buf0\n  pass0 store buf1 = %0",   /* no newline */
      "at the end of the line" },
    { "  %0 = f32 LOAD buf0\n  pass0 store buf1 = %0\ntrailing\n",
      "unexpected \"trailing" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(t, sizeof t, "%s%s", head, cases[i].body);
    assert_refused(t, cases[i].want);
  }
  /* sequential passes: rows kernels of them alone, gather targets for
  ** scatters, i64 indices, folds in f32, f64, i32 or i64 */
  const char *rows = "kernel rows [4] row 3 scalars 0\n"
                     "  buf0 in f32 strides [3, 1]\n"
                     "  buf1 out f32 strides [3, 1]\n"
                     "  buf2 out f32 strides [1, 0] gather stride 1 size 4\n"
                     "  buf3 in i64 strides [3, 1]\n"
                     "  %0 = f32 LOAD buf0\n"
                     "  %1 = i64 LOAD buf3\n";
  static const struct { const char *body, *want; } seq[] = {
    { "  pass0 scan sum %0, store buf1\n  pass1 store buf1 = %0\n",
      "has only those" },
    { "  pass0 reduce sum %0\n  pass1 scan sum %0, store buf1\n",
      "has only those" },
    { "  pass0 scatter sum buf1 at %1 = %0\n", "not a gather buffer" },
    { "  pass0 scatter sum buf2 at %0 = %0\n", "non-i64 index" },
    { "  pass0 scatter sum buf2 at %1 = %1\n", "another dtype" },
    { "  pass0 scan sum %0, store buf2\n", "into a gather buffer" },
    { "  pass0 scan sum %0, store buf0\n", "an input" },
    { "  pass0 scan prod %0, store buf1\n", "unknown reduction" },
  };
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
    snprintf(t, sizeof t, "%s%s", rows, seq[i].body);
    assert_refused(t, seq[i].want);
  }
  snprintf(t, sizeof t, "kernel map [4] scalars 0\n  buf0 in f32 strides [1]\n"
           "  buf1 out f32 strides [1]\n  %%0 = f32 LOAD buf0\n"
           "  pass0 scan sum %%0, store buf1\n");
  assert_refused(t, "a map kernel only stores");
  snprintf(t, sizeof t, "kernel rows [4] row 3 scalars 0\n"
           "  buf0 in f16 strides [3, 1]\n  buf1 out f16 strides [3, 1]\n"
           "  %%0 = f16 LOAD buf0\n  pass0 scan sum %%0, store buf1\n");
  assert_refused(t, "scans a value not of f32");
  snprintf(t, sizeof t, "%s  %%0 = f32 LOAD buf0\n  pass0 store buf1 = %%0\n",
           head);
  char why[128];
  kir_kernel *k = kir_parse(t, why, sizeof why);   /* the well-formed one */
  assert_non_null(k);
  kir_free(k);
  assert_null(kir_parse(NULL, NULL, 0));
}

/* Every truncation and many byte flips of real printed kernels: no crash
** (the sanitizers watch), and whatever parses is canonical text. */
static void fuzz_text(const char *text)
{
  size_t n = strlen(text);
  char *t = malloc(n + 1), why[256];
  for (size_t cut = 0; cut < n; cut++) {
    memcpy(t, text, cut);
    t[cut] = '\0';
    kir_kernel *k = kir_parse(t, why, sizeof why);
    if (k && t[cut - 1] != '\n')   /* whole lines: a smaller kernel */
      fail_msg("a truncation at %zu parsed", cut);
    kir_free(k);
  }
  static const char flips[] = { 0x01, 0x02, 0x10, 0x20, 0x7f, '\n', '%',
                                '-', '9', ' ' };
  uint32_t seed = 12345;
  for (size_t i = 0; i < n; i++)
    for (size_t f = 0; f < sizeof flips; f++) {
      memcpy(t, text, n + 1);
      seed = seed * 1103515245u + 12345u;
      t[i] = f < 5 ? (char)(t[i] ^ flips[f]) : flips[f];
      if (!t[i])
        continue;
      kir_kernel *k = kir_parse(t, why, sizeof why);
      if (k) {
        char *again = kir_text(k);
        assert_string_equal(again, t);
        free(again);
      }
      kir_free(k);
    }
  free(t);
}

static void test_fuzz(void **state)
{
  (void)state;
  kir_kernel *ks[] = { map_kernel(), rows_kernel(), seq_kernel() };
  for (int i = 0; i < 3; i++) {
    char *text = kir_text(ks[i]);
    fuzz_text(text);
    free(text);
    kir_free(ks[i]);
  }
}

/* -- Kernels fused from real programs -------------------------------------- */

static int round_trips;

static int round_trip_hook(const kir_kernel *k, char *const *bufs,
                           const double *scalars, const int64_t *dims,
                           int64_t lo, int64_t hi)
{
  (void)bufs; (void)scalars; (void)dims; (void)lo; (void)hi;
  assert_round_trip(k);
  if (round_trips++ < 3) {   /* a few of them fuzzed too */
    char *text = kir_text(k);
    fuzz_text(text);
    free(text);
  }
  return -1;   /* the CPU backend runs it */
}

static tc_tensor *program(int variant)
{
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(6, 40), 1 + variant);
  tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(40), 2);
  tc_tensor *b = tc_randn(TC_F32, TC_SHAPE(40), 3);
  tc_tensor *ids = tc_from_data(TC_I64, TC_SHAPE(3), (int64_t[]){ 2, 0, 5 },
                                 3 * sizeof(int64_t));
  tc_tensor *e = tc_embedding(x, ids);
  tc_tensor *y = tc_add(tc_layer_norm(x, w, b, 1e-5), tc_softmax(x, -1));
  y = tc_sub(y, tc_transpose(tc_log_softmax(tc_transpose(x, 0, 1), 0), 0, 1));
  tc_tensor *s = tc_add(tc_sum(tc_gelu(y), -1, true),
                        tc_mean(tc_mul_scalar(x, 0.5), -1, true));
  tc_tensor *r = tc_add(tc_sum_all(tc_exp(e)), tc_sum_all(s));
  tc_tensor *c = tc_cast(tc_max(tc_sqrt(tc_abs(r)), 0, false), TC_F64);
  tc_add_(x, c);   /* in place, broadcast */
  return tc_sum_all(tc_mul(x, tc_cast(tc_gt(x, tc_full(TC_F32, TC_SHAPE(1),
                                                       0.25)), TC_F32)));
}

static void test_fused_kernels(void **state)
{
  (void)state;
  trace_launch_hook = round_trip_hook;
  tc_compile_set(true);
  for (int v = 0; v < 3; v++) {
    size_t mark = tc_scope_begin();
    double d;
    assert_int_equal(tc_item(program(v), &d), 0);
    tc_scope_end(mark);
  }
  tc_compile_set(false);
  trace_launch_hook = NULL;
  if (round_trips < 5)
    fail_msg("only %d kernels launched", round_trips);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_hand_built),
    cmocka_unit_test(test_malformed),
    cmocka_unit_test(test_fuzz),
    cmocka_unit_test(test_fused_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
