/*
** test_fusion.c -- fusion end to end: compiled regions give bitwise the
** results of the eager kernels (principle 2) for every op and composite on
** contiguous, transposed, sliced and broadcast inputs in f32 and f64; known
** patterns become the expected number of kernels; an injected compile
** failure falls back to eager with the same results.
**
** With TC_TEST_STORE (tests/run-all.sh) the CPU kernels go through that
** kernel store: fusion-cuda runs these programs too, and each of the three
** runs of them in a test run (fusion, fusion-cuda, the sanitized fusion)
** loads what another compiled. So the kernels a program "compiled" count
** those loaded, and the tests that inject a compile failure close the
** store (a stored kernel would skip the compile).
**
** "Eager" here is the same program run with compile mode off: bitwise
** equality between the two modes is the property under test.
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
#include "../../src/jit_cpu/jit_cpu.h"
#include "../../src/cache/store.h"

typedef tc_tensor *(*prog_fn)(tc_tensor *const *in);

/* Kernels compiled, or loaded from the shared store in their place. */
static uint64_t kernels_made(const tc_stats *s)
{
  return s->kernels_compiled + s->kernels_loaded;
}

/* The shared store (TC_TEST_STORE), or NULL. */
static const char *shared_store(void)
{
  const char *dir = getenv("TC_TEST_STORE");
  return dir && *dir ? dir : NULL;
}

/* Opened by the test itself, with TC_CACHE=0 so that tc never opens
** another; closed around a test that injects compile failures. 0, or -1
** with a message. */
static int shared_store_open(void)
{
  char why[256];
  if (!shared_store() || store_open(shared_store(), why, sizeof why) == 0)
    return 0;
  fprintf(stderr, "test_fusion: cannot open the shared store %s: %s\n",
          shared_store(), why);
  return -1;
}

static void shared_store_pause(void) { store_close(); }

/* Run prog eagerly and compiled (hot at once) and compare bit for bit;
** returns the kernels compiled for it. */
/* prog run eagerly, then compiled: the results must be the same bits.
** Whether a region ran compiled, and the kernels compiled (*kernels). */
static bool same_in_both_modes(const char *name, prog_fn prog,
                               tc_tensor *const *in, uint64_t *kernels)
{
  tc_compile_set(false);
  tc_tensor *want = prog(in);
  assert_non_null(want);
  size_t nb = (size_t)tc_numel(want) * tc_dtype_size(tc_dtype_of(want));
  void *w = malloc(nb + 1), *g = malloc(nb + 1);
  assert_int_equal(tc_copy_to(want, w, nb), 0);
  tc_compile_set(true);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  tc_tensor *got = prog(in);
  assert_non_null(got);
  assert_int_equal(tc_dtype_of(got), tc_dtype_of(want));
  assert_int_equal(tc_copy_to(got, g, nb), 0);
  tc_stats_get(&s1);
  if (memcmp(w, g, nb) != 0)
    fail_msg("%s: compiled result differs from eager", name);
  tc_release(want);
  tc_release(got);
  free(w);
  free(g);
  *kernels = kernels_made(&s1) - kernels_made(&s0);
  return s1.regions_compiled > s0.regions_compiled;
}

/* The same, and a region must have run compiled: the kernels compiled. */
static uint64_t check_prog(const char *name, prog_fn prog, int nin,
                           tc_tensor *const *in)
{
  uint64_t kernels;
  if (!same_in_both_modes(name, prog, in, &kernels))
    fail_msg("%s: region was not compiled", name);
  (void)nin;
  return kernels;
}

static int setup(void **state)
{
  (void)state;
  trace_init();   /* links trace in (static test) */
  cache_clear();
  cache_configure(&(cache_config){ .hot = 1, .recompile_limit = 8 });
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  tc_compile_set(false);
  cache_clear();
  cache_configure(&(cache_config){ .hot = 2, .recompile_limit = 8 });
  return 0;
}

/* -- Every op on every layout -------------------------------------------------- */

static tc_op cur_op;

static tc_tensor *one_op(tc_tensor *const *in)
{
  switch (cur_op) {
  case TC_OP_NEG: return tc_neg(in[0]);
  case TC_OP_ABS: return tc_abs(in[0]);
  case TC_OP_EXP: return tc_exp(in[0]);
  case TC_OP_LOG: return tc_log(tc_abs(in[0]));
  case TC_OP_SQRT: return tc_sqrt(tc_abs(in[0]));
  case TC_OP_RSQRT: return tc_rsqrt(tc_abs(in[0]));
  case TC_OP_SIN: return tc_sin(in[0]);
  case TC_OP_COS: return tc_cos(in[0]);
  case TC_OP_TANH: return tc_tanh(in[0]);
  case TC_OP_SIGMOID: return tc_sigmoid(in[0]);
  case TC_OP_EXPM1: return tc_expm1(tc_mul_scalar(in[0], 8));
  /* past -1 too: NaN and -inf compare bitwise as well */
  case TC_OP_LOG1P: return tc_log1p(tc_mul_scalar(in[0], 2));
  case TC_OP_ERF: return tc_erf(tc_mul_scalar(in[0], 2));
  /* both sides of softplus's threshold */
  case TC_OP_SOFTPLUS: return tc_softplus(tc_mul_scalar(in[0], 12));
  case TC_OP_GELU_ERF: return tc_gelu_erf(tc_mul_scalar(in[0], 3));
  case TC_OP_RELU: return tc_relu(in[0]);
  case TC_OP_GELU: return tc_gelu(in[0]);
  case TC_OP_SILU: return tc_silu(in[0]);
  case TC_OP_FLOOR: return tc_floor(tc_mul_scalar(in[0], 3));
  case TC_OP_CEIL: return tc_ceil(tc_mul_scalar(in[0], 3));
  /* halves exactly, so half-to-even is exercised */
  case TC_OP_ROUND:
    return tc_round(tc_mul_scalar(tc_round(tc_mul_scalar(in[0], 4)), 0.5));
  case TC_OP_TRUNC: return tc_trunc(tc_mul_scalar(in[0], 3));
  case TC_OP_CAST: return tc_cast(in[0], TC_I32);
  case TC_OP_ADD: return tc_add(in[0], in[1]);
  case TC_OP_SUB: return tc_sub(in[0], in[1]);
  case TC_OP_MUL: return tc_mul(in[0], in[1]);
  case TC_OP_DIV: return tc_div(in[0], in[1]);
  case TC_OP_POW: return tc_pow(tc_abs(in[0]), in[1]);
  case TC_OP_MAXIMUM: return tc_maximum(in[0], in[1]);
  case TC_OP_MINIMUM: return tc_minimum(in[0], in[1]);
  case TC_OP_EQ: return tc_eq(in[0], in[1]);
  case TC_OP_NE: return tc_ne(in[0], in[1]);
  case TC_OP_LT: return tc_lt(in[0], in[1]);
  case TC_OP_LE: return tc_le(in[0], in[1]);
  case TC_OP_GT: return tc_gt(in[0], in[1]);
  case TC_OP_GE: return tc_ge(in[0], in[1]);
  case TC_OP_WHERE: return tc_where(tc_gt(in[0], in[1]), in[0], in[1]);
  case TC_OP_MASKED_FILL: return tc_masked_fill(in[0], tc_gt(in[1], in[0]), -7.5);
  case TC_OP_ADDS: return tc_add_scalar(in[0], 0.75);
  case TC_OP_SUBS: return tc_sub_scalar(in[0], -2.5);
  case TC_OP_MULS: return tc_mul_scalar(in[0], 3.25);
  case TC_OP_DIVS: return tc_div_scalar(in[0], 7.0);
  case TC_OP_POWS: return tc_pow_scalar(tc_abs(in[0]), 2.5);
  case TC_OP_RSUBS: return tc_rsub_scalar(in[0], 1.25);
  case TC_OP_RDIVS: return tc_rdiv_scalar(in[0], -3.0);
  case TC_OP_CLAMP: return tc_clamp(in[0], -0.5, 0.25);
  case TC_OP_EQS: return tc_eq_scalar(tc_round(in[0]), 1);
  case TC_OP_NES: return tc_ne_scalar(tc_round(in[0]), 0);
  case TC_OP_LTS: return tc_lt_scalar(in[0], 0.25);
  case TC_OP_LES: return tc_le_scalar(in[0], -0.5);
  case TC_OP_GTS: return tc_gt_scalar(in[0], 1.5);
  case TC_OP_GES: return tc_ge_scalar(in[0], 0);
  case TC_OP_SUM: return tc_sum(in[0], 0, false);
  case TC_OP_MAX: return tc_max(in[0], -1, true);
  case TC_OP_MIN: return tc_min(in[0], 0, true);
  case TC_OP_ARGMIN: return tc_argmin(tc_round(tc_mul_scalar(in[0], 2)), 0, false);
  /* an extern step between a producer and a consumer */
  case TC_OP_CUMSUM:
    return tc_add_scalar(tc_cumsum(tc_mul_scalar(in[0], 2), 0), 1);
  case TC_OP_SUM_ALL: return tc_sum_all(tc_mul(in[0], in[1]));
  case TC_OP_MEAN: return tc_mean(in[0], -1, false);
  case TC_OP_SOFTMAX: return tc_softmax(in[0], -1);
  case TC_OP_LOG_SOFTMAX: return tc_log_softmax(in[0], 0);
  case TC_OP_LAYER_NORM: return tc_layer_norm(in[0], NULL, NULL, 1e-5);
  /* extern steps among fused kernels: lazy operands, pointwise consumers */
  case TC_OP_CAT:
    return tc_cat((tc_tensor *[]){ in[0], tc_exp(in[1]), in[0] }, 3, -1);
  case TC_OP_TAKE:
    return tc_add_scalar(tc_embedding(in[0], tc_arange(TC_I64, 36, -1, -3)),
                         1);
  case TC_OP_GATHER: return tc_gather(in[0], 1, tc_argmax(in[1], 1, true));
  case TC_OP_SCATTER_ADD:
    return tc_scatter_add(in[0], 0, tc_argmax(in[1], 0, true),
                          tc_mul_scalar(in[1], 2));
  case TC_OP_TOPK: {
    tc_tensor *v = NULL, *i = NULL;
    if (tc_topk(tc_neg(in[0]), 5, -1, true, true, &v, &i) < 0)
      return NULL;
    return tc_mul(v, tc_cast(i, tc_dtype_of(v)));
  }
  case TC_OP_MULTINOMIAL:
    return tc_multinomial(tc_softmax(in[0], -1), 7, false, 1234567890123u);
  default: return NULL;
  }
}

/* Layouts of a (rows x cols) operand: contiguous, transposed, sliced with
** step, and broadcast (a row expanded). */
static tc_tensor *layout(tc_dtype dt, int which, uint64_t seed)
{
  const int64_t R = 37, C = 53;
  tc_tensor *t = NULL, *base;
  switch (which) {
  case 0:
    base = tc_randn(TC_F64, TC_SHAPE(R, C), seed);
    t = tc_cast(base, dt);
    break;
  case 1:
    base = tc_randn(TC_F64, TC_SHAPE(C, R), seed);
    t = tc_transpose(tc_cast(base, dt), 0, 1);
    break;
  case 2:
    base = tc_randn(TC_F64, TC_SHAPE(2 * R, 3 * C), seed);
    t = tc_slice(tc_slice(tc_cast(base, dt), 0, 0, 2 * R, 2), 1, 1, 3 * C,
                 3);
    break;
  default:
    base = tc_randn(TC_F64, TC_SHAPE(1, C), seed);
    t = tc_expand(tc_cast(base, dt), 2, (int64_t[]){ R, C });
    break;
  }
  tc_release(base);
  return t;
}

static void test_fusion_every_op_bitwise(void **state)
{
  (void)state;
  static const char *const lname[] = { "contiguous", "transposed", "sliced",
                                       "broadcast" };
  const tc_dtype dts[2] = { TC_F32, TC_F64 };
  for (int di = 0; di < 2; di++)
    for (int l = 0; l < 4; l++) {
      size_t mark = tc_scope_begin();
      tc_compile_set(false);   /* inputs are materialized */
      tc_tensor *in[2] = { layout(dts[di], l, 11), layout(dts[di], 0, 12) };
      for (int op = 0; op < TC_OP__MAX; op++) {
        cur_op = (tc_op)op;
        size_t m2 = tc_scope_begin();
        tc_compile_set(false);
        tc_tensor *probe = one_op(in);
        tc_scope_end(m2);
        if (!probe)
          continue;
        char name[96];
        snprintf(name, sizeof name, "%s %s %s", op_table[op].name,
                 tc_dtype_name(dts[di]), lname[l]);
        size_t m3 = tc_scope_begin();
        check_prog(name, one_op, 2, in);
        tc_scope_end(m3);
      }
      tc_scope_end(mark);
    }
}

/* -- Known patterns -------------------------------------------------------------- */

static tc_tensor *gelu_by_hand(tc_tensor *const *in)
{
  tc_tensor *x = in[0];
  tc_tensor *x3 = tc_mul(tc_mul(x, x), x);
  tc_tensor *u = tc_mul_scalar(tc_add(x, tc_mul_scalar(x3, 0.044715)),
                               0.7978845608028654);
  return tc_mul(tc_mul_scalar(x, 0.5), tc_add_scalar(tc_tanh(u), 1.0));
}

static tc_tensor *softmax_prog(tc_tensor *const *in)
{
  return tc_softmax(in[0], -1);
}

static tc_tensor *sum_of_squares(tc_tensor *const *in)
{
  return tc_sum_all(tc_mul(in[0], in[0]));
}

static void test_fusion_kernel_counts(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(64, 1000), 3);
  tc_tensor *in[1] = { x };
  assert_int_equal(check_prog("gelu chain", gelu_by_hand, 1, in), 1);
  assert_int_equal(check_prog("softmax", softmax_prog, 1, in), 1);
  assert_int_equal(check_prog("sum of squares", sum_of_squares, 1, in), 1);
  tc_scope_end(mark);
}

/* -- Transposed operands: the MAP kernel's tiled walk ---------------------- */

/* x^T * 0.5 + y: x is read down its columns (stride 131 through the
** innermost dim, 1 through the one outside it). */
static tc_tensor *transposed_add(tc_tensor *const *in)
{
  return tc_add(tc_mul_scalar(tc_transpose(in[0], 0, 1), 0.5), in[1]);
}

/* The same into a transposed destination, in place: y^T += x * x. */
static tc_tensor *transposed_update(tc_tensor *const *in)
{
  tc_tensor *y = tc_mul_scalar(in[1], 1.0);   /* a fresh y each run */
  tc_tensor *yt = tc_transpose(y, 0, 1);
  assert_int_equal(tc_add_(yt, tc_mul(in[0], in[0])), 0);
  return y;
}

/* A converting transpose of a 3-D view's last two dims, with an exp. */
static tc_tensor *transposed_exp_f64(tc_tensor *const *in)
{
  return tc_exp(tc_cast(tc_transpose(in[2], 1, 2), TC_F64));
}

/* Compiled, these run the tiled walk (whole rows of the result at once,
** 64 x 64 tiles, partial tiles at the edges and rows split between
** threads) and must equal eager bit for bit. */
static void test_fusion_transposed_tiles(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(70, 131), 21);
  tc_tensor *y = tc_randn(TC_F32, TC_SHAPE(131, 70), 22);
  tc_tensor *z = tc_randn(TC_F32, TC_SHAPE(3, 150, 97), 23);
  tc_tensor *in[3] = { x, y, z };
  assert_int_equal(check_prog("x^T + y", transposed_add, 3, in), 1);
  assert_true(check_prog("y^T += x*x", transposed_update, 3, in) >= 1);
  assert_int_equal(check_prog("exp(f64(z^T))", transposed_exp_f64, 3, in),
                   1);
  /* and against values worked out here: x^T * 0.5 + y */
  tc_compile_set(true);
  tc_tensor *got = transposed_add(in);
  float *g = malloc(sizeof(float) * 131 * 70);
  float *xv = malloc(sizeof(float) * 70 * 131), *yv = malloc(sizeof(float) * 131 * 70);
  assert_int_equal(tc_copy_to(got, g, sizeof(float) * 131 * 70), 0);
  assert_int_equal(tc_copy_to(x, xv, sizeof(float) * 70 * 131), 0);
  assert_int_equal(tc_copy_to(y, yv, sizeof(float) * 131 * 70), 0);
  for (int i = 0; i < 131; i++)
    for (int j = 0; j < 70; j++) {
      float want = xv[j * 131 + i] * 0.5f + yv[i * 70 + j];
      if (g[i * 70 + j] != want)
        fail_msg("x^T + y [%d][%d] = %.9g, expected %.9g", i, j,
                 g[i * 70 + j], want);
    }
  free(g);
  free(xv);
  free(yv);
  tc_scope_end(mark);
}

/* -- Gathers: an embedding lookup as an indexed load ------------------------- */

/* in: table [50, 16], positions [5, 16], indices [2, 5] (i64), a 1-D
** index [7] (i32), the table's transpose base [16, 50]. */
static uint64_t launches(prog_fn prog, tc_tensor *const *in);

static tc_tensor *tok_plus_pos(tc_tensor *const *in)
{
  return tc_mul_scalar(tc_add(tc_embedding(in[0], in[2]), in[1]), 2);
}

static tc_tensor *lookup_row_sums(tc_tensor *const *in)
{
  return tc_sum(tc_mul(tc_embedding(in[0], in[2]), in[1]), -1, false);
}

static tc_tensor *transposed_table(tc_tensor *const *in)
{
  return tc_add_scalar(tc_embedding(tc_transpose(in[4], 0, 1), in[2]), 1);
}

static tc_tensor *lazy_index(tc_tensor *const *in)
{
  tc_tensor *i = tc_rsub_scalar(in[2], 49);   /* 49 - idx: in range */
  return tc_sub(tc_embedding(in[0], i), tc_embedding(in[0], in[2]));
}

static tc_tensor *columns(tc_tensor *const *in)
{
  return tc_exp(tc_index_select(in[0], 1, in[3]));
}

static tc_tensor *sum_of_lookup(tc_tensor *const *in)
{
  return tc_sum_all(tc_mul(tc_embedding(in[0], in[2]), in[1]));
}

/* The table is written back in the same region: the lookup must read the
** old rows (not fused: other points than the one being written). */
static tc_tensor *lookup_then_update(tc_tensor *const *in)
{
  tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(3000, 16), 5);
  tc_tensor *i = tc_arange(TC_I64, 2999, -1, -1);   /* rows reversed */
  tc_tensor *e = tc_embedding(w, i);
  if (tc_add_(w, e) < 0 || tc_sync() < 0)   /* w itself written */
    return NULL;
  (void)in;
  return tc_add_scalar(w, 0);
}

static void test_fusion_embedding_gather(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  int64_t iv[10] = { 3, 49, 0, 7, 7, 12, 1, 48, 3, 20 };
  int32_t cv[7] = { 15, 0, 3, 3, 9, 1, 15 };
  tc_tensor *in[5] = {
    tc_randn(TC_F32, TC_SHAPE(50, 16), 1),
    tc_randn(TC_F32, TC_SHAPE(5, 16), 2),
    tc_from_data(TC_I64, TC_SHAPE(2, 5), iv, sizeof iv),
    tc_from_data(TC_I32, TC_SHAPE(7), cv, sizeof cv),
    tc_randn(TC_F64, TC_SHAPE(16, 50), 3),
  };
  /* lookup, position add and scale: one kernel, one launch */
  assert_int_equal(check_prog("token + position", tok_plus_pos, 5, in), 1);
  assert_int_equal(launches(tok_plus_pos, in), 1);
  /* inlined into a row reduction */
  assert_int_equal(check_prog("row sums of a lookup", lookup_row_sums, 5,
                              in), 1);
  assert_int_equal(launches(lookup_row_sums, in), 1);
  assert_int_equal(check_prog("transposed table", transposed_table, 5, in),
                   1);
  check_prog("index computed in the program", lazy_index, 5, in);
  assert_int_equal(check_prog("index_select of columns", columns, 5, in), 1);
  check_prog("sum_all of a lookup", sum_of_lookup, 5, in);
  check_prog("lookup, then the table updated", lookup_then_update, 5, in);
  /* more index shapes than TC_RECOMPILE_LIMIT: shape-dynamic kernels read
  ** the index's sizes and strides at run time (the table's axis baked) */
  for (int t = 1; t <= 12; t++) {
    tc_tensor *v[5] = { in[0], tc_slice(in[1], 0, 0, t % 5 + 1, 1),
                        tc_slice(in[2], 1, 0, t % 5 + 1, 1), in[3], in[4] };
    v[2] = t > 5 ? tc_expand(tc_slice(v[2], 0, 0, 1, 1), 2,
                             (int64_t[]){ t, t % 5 + 1 }) : v[2];
    char name[64];
    snprintf(name, sizeof name, "token + position, variant %d", t);
    check_prog(name, tok_plus_pos, 5, v);
  }
  tc_scope_end(mark);
}

/* -- torch.gather as an indexed load ---------------------------------------- */

/* in: x [6, 10] (f32), idx [6, 3] (i64, along dim 1), idx0 [4, 10] (i64,
** along dim 0), xt base [10, 6] (f64), targets [6, 1] (i64). */
static tc_tensor *gather_scaled(tc_tensor *const *in)
{
  return tc_mul_scalar(tc_gather(in[0], 1, in[1]), 2);
}

static tc_tensor *gather_rows(tc_tensor *const *in)
{
  return tc_add_scalar(tc_gather(in[0], 0, in[2]), 1);   /* 4 rows of 6 */
}

/* an index with fewer rows than the table: the table's rows follow the
** point's own */
static tc_tensor *gather_fewer_rows(tc_tensor *const *in)
{
  return tc_exp(tc_gather(in[0], 1, tc_slice(in[1], 0, 1, 5, 1)));
}

static tc_tensor *gather_transposed(tc_tensor *const *in)
{
  return tc_neg(tc_gather(tc_transpose(in[3], 0, 1), 1, in[1]));
}

static tc_tensor *gather_row_sums(tc_tensor *const *in)
{
  return tc_sum(tc_mul(tc_gather(in[0], 1, in[1]), in[1]), -1, false);
}

/* A negative log-likelihood as a user writes it: the table is computed in
** the region (not an input), so that gather stays an extern step. */
static tc_tensor *nll_by_hand(tc_tensor *const *in)
{
  tc_tensor *lp = tc_log_softmax(in[0], -1);
  return tc_neg(tc_mean(tc_gather(lp, 1, in[4]), 0, false));
}

static void test_fusion_gather(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  int64_t iv[18] = { 0, 9, 3, 4, 4, 4, 7, 1, 0, 9, 8, 2, 5, 5, 1, 3, 0, 6 };
  int64_t rv[40], tv[6] = { 3, 0, 9, 9, 1, 4 };
  for (int i = 0; i < 40; i++)
    rv[i] = (i * 7 + 3) % 6;
  tc_tensor *in[5] = {
    tc_randn(TC_F32, TC_SHAPE(6, 10), 11),
    tc_from_data(TC_I64, TC_SHAPE(6, 3), iv, sizeof iv),
    tc_from_data(TC_I64, TC_SHAPE(4, 10), rv, sizeof rv),
    tc_randn(TC_F64, TC_SHAPE(10, 6), 12),
    tc_from_data(TC_I64, TC_SHAPE(6, 1), tv, sizeof tv),
  };
  /* the gather and its pointwise users: one kernel */
  assert_int_equal(check_prog("gather along dim 1", gather_scaled, 5, in), 1);
  assert_int_equal(launches(gather_scaled, in), 1);
  assert_int_equal(check_prog("gather along dim 0", gather_rows, 5, in), 1);
  assert_int_equal(launches(gather_rows, in), 1);
  assert_int_equal(check_prog("gather with fewer index rows",
                              gather_fewer_rows, 5, in), 1);
  assert_int_equal(check_prog("gather from a transposed table",
                              gather_transposed, 5, in), 1);
  /* inlined into a row reduction */
  assert_int_equal(check_prog("row sums of a gather", gather_row_sums, 5,
                              in), 1);
  assert_int_equal(launches(gather_row_sums, in), 1);
  check_prog("negative log-likelihood", nll_by_hand, 5, in);
  /* more shapes than TC_RECOMPILE_LIMIT: shape-dynamic kernels */
  for (int t = 1; t <= 12; t++) {
    tc_tensor *v[5] = { tc_slice(in[0], 0, 0, t % 6 + 1, 1),
                        tc_slice(in[1], 0, 0, t % 6 + 1, 1), in[2], in[3],
                        in[4] };
    char name[64];
    snprintf(name, sizeof name, "gather, variant %d", t);
    check_prog(name, gather_scaled, 5, v);
  }
  tc_scope_end(mark);
}

/* Random gathers: a table of 1 to 3 dims (contiguous, transposed or a
** slice with a step), an index along a random dim with at most the
** table's size in the other dims and values in range, then a pointwise
** or row consumer. Structures repeat with other shapes, so past
** TC_RECOMPILE_LIMIT the plans are shape-dynamic. */
static int rg_dim, rg_use;

static tc_tensor *random_gather(tc_tensor *const *in)
{
  tc_tensor *y = tc_gather(in[0], rg_dim, in[1]);
  switch (rg_use) {
  case 0: return tc_mul_scalar(y, -1.5);
  case 1: return tc_exp(tc_add(y, y));
  case 2: return tc_sum(y, -1, true);
  default: return tc_softmax(y, 0);
  }
}

static uint64_t rg_next(uint64_t *s)   /* splitmix64 */
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void test_fusion_gather_random(void **state)
{
  (void)state;
  uint64_t s = 29;
  int compiled = 0;
  for (int c = 0; c < 150; c++) {
    size_t mark = tc_scope_begin();
    int r = 1 + (int)(rg_next(&s) % 3), lay = (int)(rg_next(&s) % 3);
    int64_t ts[3], is[3], n = 1;
    rg_dim = (int)(rg_next(&s) % (uint64_t)r);
    rg_use = (int)(rg_next(&s) % 4);
    for (int d = 0; d < r; d++)
      ts[d] = 1 + (int64_t)(rg_next(&s) % 6);
    for (int d = 0; d < r; d++) {
      is[d] = 1 + (int64_t)(rg_next(&s) % (d == rg_dim ? 5 : (uint64_t)ts[d]));
      n *= is[d];
    }
    tc_tensor *t;
    if (lay == 1 && r >= 2) {   /* a transposed view of [ts1, ts0, ...] */
      int64_t sw[3] = { ts[1], ts[0], r > 2 ? ts[2] : 1 };
      t = tc_transpose(tc_randn(TC_F32, r, sw, (uint64_t)c), 0, 1);
    } else if (lay == 2) {      /* every other row of [2 ts0, ...] */
      int64_t tall[3] = { 2 * ts[0], ts[1], ts[2] };
      t = tc_slice(tc_randn(TC_F32, r, tall, (uint64_t)c), 0, 1, 2 * ts[0],
                   2);
    } else {
      t = tc_randn(TC_F32, r, ts, (uint64_t)c);
    }
    int64_t iv[5 * 6 * 6];
    for (int64_t i = 0; i < n; i++)
      iv[i] = (int64_t)(rg_next(&s) % (uint64_t)ts[rg_dim]);
    tc_tensor *in[2] = { t, tc_from_data(TC_I64, r, is, iv,
                                         sizeof(int64_t) * (size_t)n) };
    assert_non_null(in[0]);
    assert_non_null(in[1]);
    char name[96];
    snprintf(name, sizeof name, "random gather %d (rank %d, dim %d, layout "
             "%d, use %d)", c, r, rg_dim, lay, rg_use);
    uint64_t kernels;
    compiled += same_in_both_modes(name, random_gather, in, &kernels);
    tc_scope_end(mark);
  }
  /* a shape-dynamic plan runs eagerly where its gathered axis's size (baked
  ** into the code) differs; the rest ran compiled */
  print_message("random gathers: %d of 150 ran compiled\n", compiled);
  assert_true(compiled >= 100);
}

/* -- Row fusion of programs written from primitives ---------------------------- */

/* Kernels launched by one more (compiled, hot) run of prog. */
static uint64_t launches(prog_fn prog, tc_tensor *const *in)
{
  tc_compile_set(true);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  tc_tensor *y = prog(in);
  assert_int_equal(tc_realize(y), 0);
  tc_stats_get(&s1);
  tc_release(y);
  assert_int_equal(s1.regions_compiled - s0.regions_compiled, 1);
  return s1.kernels_launched - s0.kernels_launched;
}

static tc_tensor *softmax_by_hand(tc_tensor *const *in)
{
  tc_tensor *m = tc_max(in[0], -1, true);
  tc_tensor *e = tc_exp(tc_sub(in[0], m));
  return tc_div(e, tc_sum(e, -1, true));
}

static tc_tensor *log_softmax_by_hand(tc_tensor *const *in)
{
  tc_tensor *s = tc_sub(in[0], tc_max(in[0], 1, true));
  return tc_sub(s, tc_log(tc_sum(tc_exp(s), 1, true)));
}

static tc_tensor *logsumexp(tc_tensor *const *in)
{
  tc_tensor *m = tc_max(in[0], -1, true);
  return tc_add(tc_log(tc_sum(tc_exp(tc_sub(in[0], m)), -1, true)), m);
}

static tc_tensor *layer_norm_by_hand(tc_tensor *const *in)
{
  tc_tensor *xc = tc_sub(in[0], tc_mean(in[0], -1, true));
  tc_tensor *var = tc_mean(tc_mul(xc, xc), -1, true);
  tc_tensor *y = tc_mul(xc, tc_rsqrt(tc_add_scalar(var, 1e-5)));
  return tc_add(tc_mul(y, in[1]), in[2]);
}

static tc_tensor *rms_norm(tc_tensor *const *in)
{
  tc_tensor *ms = tc_mean(tc_mul(in[0], in[0]), -1, true);
  return tc_mul(tc_mul(in[0], tc_rsqrt(tc_add_scalar(ms, 1e-6))), in[1]);
}

/* Standard deviation over dim 0, keepdim false (the reduced dim leads). */
static tc_tensor *std_dim0(tc_tensor *const *in)
{
  tc_tensor *xc = tc_sub(in[0], tc_mean(in[0], 0, false));
  return tc_sqrt(tc_div_scalar(tc_sum(tc_mul(xc, xc), 0, false), 63.0));
}

/* tc_var and tc_std: mean and squared deviations in one ROWS kernel. */
static tc_tensor *var_rows(tc_tensor *const *in)
{
  return tc_var(in[0], -1, 1, false);
}

static tc_tensor *std_dim0_keep(tc_tensor *const *in)
{
  return tc_std(in[0], 0, 0, true);
}

/* Over two trailing dims, merged into one row (a view: no copy). */
static tc_tensor *var_two_dims(tc_tensor *const *in)
{
  tc_tensor *x3 = tc_reshape(in[0], TC_SHAPE(64, 10, 100));
  return tc_var_dims(x3, 2, (const int[]){ -1, 1 }, 1, true);
}

/* A causal mask: the triangle's index comparison and fill fuse with the
** product into one MAP kernel. */
static tc_tensor *tril_scaled(tc_tensor *const *in)
{
  return tc_mul(tc_tril(in[0], 0), in[1]);
}

/* Cross-entropy's per-row terms from log_softmax and a one-hot target. */
static tc_tensor *nll_rows(tc_tensor *const *in)
{
  return tc_neg(tc_sum(tc_mul(in[3], log_softmax_by_hand(in)), 1, false));
}

/* ... and the loss: their mean over the batch (a second row space). */
static tc_tensor *cross_entropy(tc_tensor *const *in)
{
  return tc_mean(nll_rows(in), 0, false);
}

static void test_fusion_row_patterns(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  for (int dt = 0; dt < 2; dt++) {
    tc_dtype t = dt ? TC_F64 : TC_F32;
    tc_tensor *x = tc_cast(tc_randn(TC_F64, TC_SHAPE(64, 1000), 3), t);
    tc_tensor *w = tc_cast(tc_randn(TC_F64, TC_SHAPE(1000), 4), t);
    tc_tensor *b = tc_cast(tc_randn(TC_F64, TC_SHAPE(1000), 5), t);
    tc_tensor *oh = tc_cast(tc_gt(tc_rand(TC_F64, TC_SHAPE(64, 1000), 6),
                                  tc_full(TC_F64, TC_SHAPE(1), 0.999)), t);
    tc_tensor *in[4] = { x, w, b, oh };
    static const struct {
      const char *name;
      prog_fn prog;
      uint64_t kernels;
    } pats[] = {
      { "softmax by hand", softmax_by_hand, 1 },
      { "log_softmax by hand", log_softmax_by_hand, 1 },
      { "logsumexp", logsumexp, 1 },
      { "layer norm by hand", layer_norm_by_hand, 1 },
      { "rms norm", rms_norm, 1 },
      { "std over dim 0", std_dim0, 1 },
      { "tc_var over rows", var_rows, 1 },
      { "tc_std over dim 0", std_dim0_keep, 1 },
      { "tc_var_dims over two dims", var_two_dims, 1 },
      { "tril then a product", tril_scaled, 1 },
      { "nll per row", nll_rows, 1 },
      { "cross-entropy", cross_entropy, 2 },
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
      check_prog(pats[i].name, pats[i].prog, 4, in);
      uint64_t n = launches(pats[i].prog, in);
      if (n != pats[i].kernels)
        fail_msg("%s (%s): %llu kernels, expected %llu", pats[i].name,
                 tc_dtype_name(t), (unsigned long long)n,
                 (unsigned long long)pats[i].kernels);
      tc_compile_set(false);
    }
  }
  tc_scope_end(mark);
}

/* Statistics saved for a backward pass: mean and rstd are extra outputs of
** the layer norm's one kernel. */
static void test_fusion_row_stats_outputs(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(32, 300), 9);
  float want[3][32 * 300], got[3][32 * 300];
  for (int mode = 0; mode < 3; mode++) {
    tc_compile_set(mode > 0);
    tc_stats s0, s1;
    tc_stats_get(&s0);
    size_t inner = tc_scope_begin();
    tc_tensor *mean = tc_mean(x, 1, true);
    tc_tensor *xc = tc_sub(x, mean);
    tc_tensor *rstd = tc_rsqrt(tc_add_scalar(tc_mean(tc_mul(xc, xc), 1, true),
                                             1e-5));
    tc_tensor *y = tc_mul(xc, rstd);
    float (*dst)[32 * 300] = mode ? got : want;
    assert_int_equal(tc_copy_to(y, dst[0], sizeof dst[0]), 0);
    assert_int_equal(tc_copy_to(mean, dst[1], 32 * 4), 0);
    assert_int_equal(tc_copy_to(rstd, dst[2], 32 * 4), 0);
    tc_scope_end(inner);
    tc_stats_get(&s1);
    if (mode == 2)   /* y, mean and rstd: one region, one kernel */
      assert_int_equal(s1.kernels_launched - s0.kernels_launched, 1);
    if (mode)
      for (int o = 0; o < 3; o++)
        assert_memory_equal(want[o], got[o], o ? 32 * 4 : sizeof want[0]);
  }
  tc_scope_end(mark);
}

/* -- Kernel limits are a scheduling decision --------------------------------- */

static int big_kind;

static tc_tensor *big_program(tc_tensor *const *in)
{
  tc_tensor *y = in[0];
  switch (big_kind) {
  case 0:   /* 150 tensors summed in one expression (buffers) */
    for (int i = 1; i < 150; i++)
      y = tc_add(y, in[i % 7]);
    break;
  case 1:   /* 200 scalar ops (scalars) */
    for (int i = 0; i < 200; i++)
      y = tc_add_scalar(tc_mul_scalar(y, 0.999), 0.001 * i);
    break;
  default:  /* 60 sin-exp pairs (instructions, inlining) */
    for (int i = 0; i < 60; i++)
      y = tc_exp(tc_mul_scalar(tc_sin(y), 0.5));
  }
  return y;
}

/* Adam over n parameters: 3n in-place updates synced as one region. */
static void adam_many(tc_tensor **st, int n, int t)
{
  for (int i = 0; i < n; i++) {
    tc_tensor **s = st + 4 * i;
    size_t mark = tc_scope_begin();
    tc_mul_scalar_(s[2], 0.9);
    tc_add_(s[2], tc_mul_scalar(s[1], 0.1));
    tc_mul_scalar_(s[3], 0.999);
    tc_add_(s[3], tc_mul_scalar(tc_mul(s[1], s[1]), 0.001));
    tc_tensor *mhat = tc_div_scalar(s[2], 1 - pow(0.9, t));
    tc_tensor *vhat = tc_div_scalar(s[3], 1 - pow(0.999, t));
    tc_sub_(s[0], tc_mul_scalar(tc_div(mhat, tc_add_scalar(tc_sqrt(vhat),
                                                            1e-8)), 1e-3));
    tc_scope_end(mark);
  }
  assert_int_equal(tc_sync(), 0);
}

static void test_fusion_no_fallback_for_size(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  tc_tensor *in[7];
  for (int i = 0; i < 7; i++)
    in[i] = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(8, 33), 20 + i), 0.1);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  for (big_kind = 0; big_kind < 3; big_kind++)
    check_prog("big program", big_program, 7, in);
  /* 3 and 12 parameters: 9 and 36 outputs of one shape. */
  for (int n = 3; n <= 12; n += 9) {
    tc_tensor *st[2][48];
    for (int mode = 0; mode < 2; mode++)
      for (int i = 0; i < 4 * n; i++) {
        tc_compile_set(false);
        st[mode][i] = i % 4 < 2 ? tc_randn(TC_F32, TC_SHAPE(1000), 40 + i)
                                : tc_zeros(TC_F32, TC_SHAPE(1000));
      }
    for (int t = 1; t <= 3; t++) {
      tc_compile_set(false);
      adam_many(st[0], n, t);
      tc_compile_set(true);
      adam_many(st[1], n, t);
    }
    tc_compile_set(false);
    float a[1000], b[1000];
    for (int i = 0; i < 4 * n; i++) {
      assert_int_equal(tc_copy_to(st[0][i], a, sizeof a), 0);
      assert_int_equal(tc_copy_to(st[1][i], b, sizeof b), 0);
      assert_memory_equal(a, b, sizeof a);
      tc_release(st[0][i]);
      tc_release(st[1][i]);
    }
  }
  tc_stats_get(&s1);
  assert_int_equal(s1.compile_failures, s0.compile_failures);
  tc_scope_end(mark);
}

/* An Adam step over p, m, v, in place: one kernel writing three tensors. */
static void adam_step(tc_tensor *p, tc_tensor *g, tc_tensor *m, tc_tensor *v,
                      int t)
{
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  size_t mark = tc_scope_begin();
  tc_mul_scalar_(m, b1);
  tc_add_(m, tc_mul_scalar(g, 1 - b1));
  tc_mul_scalar_(v, b2);
  tc_add_(v, tc_mul_scalar(tc_mul(g, g), 1 - b2));
  tc_tensor *mhat = tc_div_scalar(m, 1 - pow(b1, t));
  tc_tensor *vhat = tc_div_scalar(v, 1 - pow(b2, t));
  tc_sub_(p, tc_mul_scalar(tc_div(mhat, tc_add_scalar(tc_sqrt(vhat), eps)),
                           lr));
  tc_scope_end(mark);
  assert_int_equal(tc_sync(), 0);
}

/* The same step with tc_sync() inside the scope, the temporaries (mhat,
** vhat, the update) still alive: they read the state the step writes, but
** are never read, so they are not stored (each would be a full tensor);
** the step stays one kernel writing p, m and v. */
static void adam_step_synced_in_scope(tc_tensor *p, tc_tensor *g,
                                      tc_tensor *m, tc_tensor *v, int t,
                                      int64_t *stored)
{
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  size_t mark = tc_scope_begin();
  tc_stats s0, s1;
  tc_stats_get(&s0);
  tc_mul_scalar_(m, b1);
  tc_add_(m, tc_mul_scalar(g, 1 - b1));
  tc_mul_scalar_(v, b2);
  tc_add_(v, tc_mul_scalar(tc_mul(g, g), 1 - b2));
  tc_tensor *mhat = tc_div_scalar(m, 1 - pow(b1, t));
  tc_tensor *vhat = tc_div_scalar(v, 1 - pow(b2, t));
  tc_sub_(p, tc_mul_scalar(tc_div(mhat, tc_add_scalar(tc_sqrt(vhat), eps)),
                           lr));
  assert_int_equal(tc_sync(), 0);
  tc_stats_get(&s1);
  *stored = (int64_t)(s1.bytes_allocated - s0.bytes_allocated);
  tc_scope_end(mark);
}

static void test_fusion_sync_inside_scope(void **state)
{
  (void)state;
  tc_tensor *st[2][4];
  for (int mode = 0; mode < 2; mode++) {
    tc_compile_set(false);
    st[mode][0] = tc_randn(TC_F32, TC_SHAPE(1 << 16), 1);
    st[mode][1] = tc_randn(TC_F32, TC_SHAPE(1 << 16), 2);
    st[mode][2] = tc_zeros(TC_F32, TC_SHAPE(1 << 16));
    st[mode][3] = tc_zeros(TC_F32, TC_SHAPE(1 << 16));
  }
  for (int t = 1; t <= 4; t++) {
    int64_t stored;
    tc_compile_set(false);
    adam_step_synced_in_scope(st[0][0], st[0][1], st[0][2], st[0][3], t,
                              &stored);
    tc_compile_set(true);
    tc_stats s0, s1;
    tc_stats_get(&s0);
    adam_step_synced_in_scope(st[1][0], st[1][1], st[1][2], st[1][3], t,
                              &stored);
    tc_stats_get(&s1);
    assert_int_equal(s1.kernels_launched - s0.kernels_launched, 1);
    assert_int_equal(s1.compile_failures, s0.compile_failures);
    if (stored > 0)
      fail_msg("step %d: %lld bytes of temporaries stored", t,
               (long long)stored);
  }
  tc_compile_set(false);
  size_t nb = sizeof(float) << 16;
  void *a = malloc(nb), *b = malloc(nb);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tc_copy_to(st[0][i], a, nb), 0);
    assert_int_equal(tc_copy_to(st[1][i], b, nb), 0);
    assert_memory_equal(a, b, nb);
  }
  free(a);
  free(b);
  for (int mode = 0; mode < 2; mode++)
    for (int i = 0; i < 4; i++)
      tc_release(st[mode][i]);
}

static void test_fusion_adam_one_kernel(void **state)
{
  (void)state;
  tc_tensor *st[2][4];
  for (int mode = 0; mode < 2; mode++) {
    tc_compile_set(false);
    st[mode][0] = tc_randn(TC_F32, TC_SHAPE(1 << 16), 1);
    st[mode][1] = tc_randn(TC_F32, TC_SHAPE(1 << 16), 2);
    st[mode][2] = tc_zeros(TC_F32, TC_SHAPE(1 << 16));
    st[mode][3] = tc_zeros(TC_F32, TC_SHAPE(1 << 16));
  }
  tc_stats s0, s1;
  for (int t = 1; t <= 4; t++) {
    tc_compile_set(false);
    adam_step(st[0][0], st[0][1], st[0][2], st[0][3], t);
    tc_compile_set(true);
    tc_stats_get(&s0);
    adam_step(st[1][0], st[1][1], st[1][2], st[1][3], t);
    tc_stats_get(&s1);
    /* One kernel, compiled at most once (an earlier test may have). */
    assert_int_equal(s1.kernels_launched - s0.kernels_launched, 1);
    assert_true(kernels_made(&s1) - kernels_made(&s0) <= (t == 1));
    assert_int_equal(s1.regions_compiled - s0.regions_compiled, 1);
  }
  tc_compile_set(false);
  size_t nb = sizeof(float) << 16;
  void *a = malloc(nb), *b = malloc(nb);
  for (int i = 0; i < 4; i += 2) {   /* p and m, bitwise */
    assert_int_equal(tc_copy_to(st[0][i], a, nb), 0);
    assert_int_equal(tc_copy_to(st[1][i], b, nb), 0);
    assert_memory_equal(a, b, nb);
  }
  free(a);
  free(b);
  for (int mode = 0; mode < 2; mode++)
    for (int i = 0; i < 4; i++)
      tc_release(st[mode][i]);
}

/* -- Matmul epilogues ------------------------------------------------------------- */

/* in: x [.., m, k], w [k, n], b [n], res [.., m, n] */
static tc_tensor *mm_gelu_bias(tc_tensor *const *in)
{
  return tc_gelu(tc_add(tc_matmul(in[0], in[1]), in[2]));
}

static tc_tensor *mm_relu_bias_residual(tc_tensor *const *in)
{
  return tc_add(tc_relu(tc_add(tc_matmul(in[0], in[1]), in[2])), in[3]);
}

static tc_tensor *mm_scale_residual(tc_tensor *const *in)
{
  return tc_add(tc_mul_scalar(tc_matmul(in[0], in[1]), 0.5), in[3]);
}

/* Not an epilogue: the consumer reads the product transposed (square). */
static tc_tensor *mm_plus_transpose(tc_tensor *const *in)
{
  tc_tensor *p = tc_matmul(in[0], in[1]);
  return tc_add(p, tc_transpose(p, -1, -2));
}

/* Run prog eagerly, then compiled twice; the compiled results must equal
** the eager ones bit for bit. Returns the launches of the second compiled
** run (the region is compiled by then). */
static uint64_t mm_check(const char *name, prog_fn prog, tc_dtype dt,
                         int64_t batch, int64_t m, int64_t k, int64_t n)
{
  size_t mark = tc_scope_begin();
  int64_t xs[3] = { batch, m, k }, rs[3] = { batch, m, n };
  int nd = batch ? 3 : 2;
  tc_tensor *in[2][4];
  for (int mode = 0; mode < 2; mode++) {
    in[mode][0] = tc_randn(dt, nd, batch ? xs : xs + 1, 11);
    in[mode][1] = tc_mul_scalar(tc_randn(dt, TC_SHAPE(k, n), 12), 0.2);
    in[mode][2] = tc_randn(dt, TC_SHAPE(n), 13);
    in[mode][3] = tc_randn(dt, nd, batch ? rs : rs + 1, 14);
  }
  tc_compile_set(false);
  tc_tensor *want = prog(in[0]);
  uint64_t launches = 0;
  for (int run = 0; run < 2; run++) {
    tc_compile_set(true);
    tc_stats s0, s1;
    tc_stats_get(&s0);
    tc_tensor *got = prog(in[1]);
    assert_non_null(got);
    size_t nb = (size_t)tc_numel(got) * tc_dtype_size(dt);
    void *w = malloc(nb + 1), *g = malloc(nb + 1);
    assert_int_equal(tc_copy_to(got, g, nb), 0);
    tc_stats_get(&s1);
    tc_compile_set(false);
    assert_int_equal(tc_copy_to(want, w, nb), 0);
    if (memcmp(w, g, nb) != 0)
      fail_msg("%s %s: compiled result differs from eager", name,
               tc_dtype_name(dt));
    free(w);
    free(g);
    launches = s1.kernels_launched - s0.kernels_launched;
  }
  tc_scope_end(mark);
  return launches;
}

static void test_fusion_matmul_epilogue(void **state)
{
  (void)state;
  static const struct { int64_t batch, m, k, n; } shapes[] = {
    { 0, 300, 64, 200 },   /* tiles of 128 / 64 columns, rows cut */
    { 0, 5, 7, 3 },        /* one small tile */
    { 3, 70, 33, 150 },    /* batched, a 2-D w and bias */
  };
  for (int d = 0; d < 2; d++) {
    tc_dtype dt = d ? TC_F64 : TC_F32;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t b = shapes[s].batch, m = shapes[s].m, k = shapes[s].k,
              n = shapes[s].n;
      /* One launch: the matmul, its epilogue inside it. */
      assert_int_equal(mm_check("gelu(x@w+b)", mm_gelu_bias, dt, b, m, k, n),
                       1);
      assert_int_equal(mm_check("relu(x@w+b)+r", mm_relu_bias_residual, dt,
                                b, m, k, n), 1);
      assert_int_equal(mm_check("(x@w)*0.5+r", mm_scale_residual, dt, b, m,
                                k, n), 1);
      /* Square ones that must not fuse, and still match. */
      assert_int_equal(mm_check("x@w + (x@w)^T", mm_plus_transpose, dt, b, m,
                                m, m), 2);
    }
  }
}

/* Not an epilogue: x = relu(x @ w + b) written into x itself (a view, so
** the kernel writes x's storage). Few rows and many columns: the matmul
** cuts C into column blocks, and a tile written early would be read as A
** by the blocks after it (it was, with the check in mark_epilogues off). */
static void test_fusion_matmul_epilogue_hazard(void **state)
{
  (void)state;
  const int64_t n = 4096;
  double sums[2][3];
  for (int mode = 0; mode < 2; mode++) {
    tc_compile_set(mode == 1);
    size_t mark = tc_scope_begin();
    tc_tensor *base = tc_randn(TC_F32, TC_SHAPE(8, 2 * n), 1);
    tc_tensor *w = tc_randn(TC_F32, TC_SHAPE(n, n), 2);
    tc_tensor *b = tc_randn(TC_F32, TC_SHAPE(n), 3);
    tc_tensor *x = tc_slice(base, 1, 0, n, 1);
    for (int i = 0; i < 3; i++) {
      size_t it = tc_scope_begin();
      tc_copy_(x, tc_relu(tc_add(tc_matmul(x, w), b)));
      assert_int_equal(tc_item(tc_sum_all(base), &sums[mode][i]), 0);
      tc_scope_end(it);
    }
    tc_scope_end(mark);
  }
  tc_compile_set(false);
  assert_memory_equal(sums[0], sums[1], sizeof sums[0]);
}

/* -- Fallback ---------------------------------------------------------------------- */

/* A kernel that fails to compile runs its ops eagerly; the region's other
** kernels stay compiled. Here softmax (x * 2) is one kernel and the column
** sums added back another; the first compile fails. */
static tc_tensor *two_kernels(tc_tensor *x)
{
  tc_tensor *s = tc_softmax(tc_mul_scalar(x, 2), -1);
  return tc_add(s, tc_sum(s, 0, true));
}

static void test_fusion_compile_failure_falls_back(void **state)
{
  (void)state;
  shared_store_pause();
  size_t mark = tc_scope_begin();
  tc_compile_set(false);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(32, 100), 9);
  tc_tensor *want = two_kernels(x);
  size_t nb = sizeof(float) * 3200;
  float a[3200], b[3200];
  assert_int_equal(tc_copy_to(want, b, nb), 0);
  tc_compile_set(true);
  char *log = NULL;
  size_t len = 0;
  FILE *lf = open_memstream(&log, &len);
  tensor_log_to(lf, TC_LOG_FALLBACK);
  jcpu_fail_next(1);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(tc_copy_to(two_kernels(x), a, nb), 0);
    assert_memory_equal(a, b, nb);
  }
  tc_stats_get(&s1);
  fflush(lf);
  assert_int_equal(s1.compile_failures - s0.compile_failures, 1);
  assert_non_null(strstr(log, "a kernel failed to compile; its ops run "
                              "eagerly, the rest compiled: injected"));
  assert_null(strchr(strchr(log, '\n') + 1, '\n'));   /* one line */
  /* Compiled again with the failed kernel's ops eager: the column-sum
  ** kernel still runs compiled. */
  assert_true(s1.regions_compiled - s0.regions_compiled >= 2);
  tc_stats_get(&s0);
  assert_int_equal(tc_copy_to(two_kernels(x), a, nb), 0);
  tc_stats_get(&s1);
  assert_int_equal(s1.regions_compiled - s0.regions_compiled, 1);
  assert_int_equal(s1.kernels_compiled, s0.kernels_compiled);
  tensor_log_to(NULL, tensor_cfg()->log);
  fclose(lf);
  free(log);
  tc_scope_end(mark);
  assert_int_equal(shared_store_open(), 0);
}

/* The compile worker dies during a region's compile: the region runs
** eagerly (bitwise as before), one fallback line gives the worker's end as
** the reason, and the next region compiles in a new worker. */
static void test_fusion_worker_death_falls_back(void **state)
{
  (void)state;
  shared_store_pause();
  size_t mark = tc_scope_begin();
  size_t nb = sizeof(float) * 4800;
  float *a = malloc(nb), *b = malloc(nb);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(16, 300), 11);
  tc_compile_set(false);
  assert_int_equal(tc_copy_to(tc_gelu(tc_add_scalar(x, 0.5)), b, nb), 0);
  tc_compile_set(true);
  char *log = NULL;
  size_t len = 0;
  FILE *lf = open_memstream(&log, &len);
  assert_non_null(lf);
  tensor_log_to(lf, TC_LOG_FALLBACK);
  jcpu_worker_fault_next(JCPU_FAULT_CRASH);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(tc_copy_to(tc_gelu(tc_add_scalar(x, 0.5)), a, nb), 0);
    assert_memory_equal(a, b, nb);
  }
  tc_stats_get(&s1);
  assert_int_equal(s1.compile_failures - s0.compile_failures, 1);
  fflush(lf);
  assert_non_null(strstr(log, "its ops run eagerly, the rest compiled: "
                              "compile worker died (signal 11)"));
  assert_null(strchr(strchr(log, '\n') + 1, '\n'));   /* one line */
  /* the next region compiles, in a new worker */
  for (int i = 0; i < 3; i++)
    assert_int_equal(tc_copy_to(tc_sigmoid(tc_mul_scalar(x, 3)), a, nb), 0);
  tc_stats_get(&s0);
  assert_int_equal(s0.compile_failures, s1.compile_failures);
  assert_true(s0.kernels_compiled > s1.kernels_compiled);
  assert_true(s0.regions_compiled > s1.regions_compiled);
  /* With a disk store, a compile that fails to its file is tried again in
  ** a private file (a full disk); one whose worker died is not: the
  ** injected crash is used up, so a retry would have compiled. */
  char dir[] = "/tmp/tc-test-fusion-store-XXXXXX", why[256];
  assert_non_null(mkdtemp(dir));
  assert_int_equal(store_open(dir, why, sizeof why), 0);
  jcpu_worker_fault_next(JCPU_FAULT_KILL);
  tc_stats_get(&s0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tc_copy_to(tc_tanh(tc_mul_scalar(x, 5)), a, nb), 0);
  tc_stats_get(&s1);
  assert_int_equal(s1.compile_failures - s0.compile_failures, 1);
  assert_int_equal(s1.kernels_compiled - s0.kernels_compiled, 0);
  store_close();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  tensor_log_to(NULL, tensor_cfg()->log);
  fclose(lf);
  free(log);
  free(a);
  free(b);
  tc_scope_end(mark);
  assert_int_equal(shared_store_open(), 0);
}

/* Per-row values of a ROWS kernel written straight into their targets:
** each pass must see the targets as they were (plan.c: order_row_stores).
** a' = rowsum(x) + b and b' = rowsum(x) * a read each other's targets (a
** cycle: one goes through a temporary); c' = c * 0.5 + a' reads a's target
** through a' only (ordered after nothing, before a's write). */
static void rows_writeback(bool compiled, float *out)
{
  size_t mark = tc_scope_begin();
  tc_compile_set(compiled);
  float av[5] = { 1, -2, 3, 0.5f, 7 }, bv[5] = { 0.25f, 4, -1, 2, 3 };
  tc_tensor *a = tc_from_data(TC_F32, TC_SHAPE(5), av, sizeof av);
  tc_tensor *b = tc_from_data(TC_F32, TC_SHAPE(5), bv, sizeof bv);
  tc_tensor *c = tc_from_data(TC_F32, TC_SHAPE(5), bv, sizeof bv);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(5, 9), 3);
  for (int it = 0; it < 4; it++) {
    size_t m = tc_scope_begin();
    tc_tensor *sx = tc_sum(x, 1, false);
    tc_tensor *na = tc_add(sx, b), *nb = tc_mul(sx, a);
    tc_tensor *nc = tc_add(tc_mul_scalar(c, 0.5), na);
    assert_int_equal(tc_copy_(a, na), 0);
    assert_int_equal(tc_copy_(b, nb), 0);
    assert_int_equal(tc_copy_(c, nc), 0);
    assert_int_equal(tc_sync(), 0);
    tc_scope_end(m);
  }
  assert_int_equal(tc_copy_to(a, out, 5 * sizeof(float)), 0);
  assert_int_equal(tc_copy_to(b, out + 5, 5 * sizeof(float)), 0);
  assert_int_equal(tc_copy_to(c, out + 10, 5 * sizeof(float)), 0);
  tc_compile_set(false);
  tc_scope_end(mark);
}

static void test_fusion_rows_writeback_order(void **state)
{
  (void)state;
  float want[15], got[15];
  rows_writeback(false, want);
  tc_stats s0, s1;
  tc_stats_get(&s0);
  rows_writeback(true, got);
  tc_stats_get(&s1);
  assert_true(s1.regions_compiled - s0.regions_compiled >= 3);
  for (int i = 0; i < 15; i++)
    if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
      fail_msg("float %d: eager %.9g, compiled %.9g", i, (double)want[i],
               (double)got[i]);
}

/* -- Compiled training steps ------------------------------------------------ */

/* The distinct fused kernels launched while the hook is set (a matmul
** epilogue's tiles are one kernel); the CPU backend still runs them. */
static const kir_kernel *step_kernels[256];
static int nstep_kernels;

static int count_kernel(const kir_kernel *k, char *const *bufs,
                        const double *scalars, const int64_t *dims,
                        int64_t lo, int64_t hi)
{
  (void)bufs, (void)scalars, (void)dims, (void)lo, (void)hi;
  int i = 0;
  while (i < nstep_kernels && step_kernels[i] != k)
    i++;
  if (i == nstep_kernels && nstep_kernels < 256)
    step_kernels[nstep_kernels++] = k;
  return -1;   /* not run here */
}

/* An MLP of `layers` same-shaped layers (W [D, D], b [D], relu between),
** cross-entropy over D classes, then the optimizer: in compile mode
** forward, backward and update are one region per step. */
enum { LAYERS = 12, DD = 32, BATCH = 24, STEPS = 5 };
enum { DEEP_N = LAYERS * (DD * DD + DD) };

typedef struct {
  float params[DEEP_N];
  double loss[STEPS];
  int kernels;                 /* fused kernels of the last step */
  uint64_t compiled, eager;    /* regions the last step ran each way */
} deep_run;

static void train_deep(bool compiled, bool sgd, int layers, deep_run *r)
{
  size_t mark0 = tc_scope_begin();
  tc_compile_set(compiled);
  tc_tensor *x = tc_randn(TC_F32, TC_SHAPE(BATCH, DD), 11);
  int64_t tv[BATCH];
  for (int i = 0; i < BATCH; i++)
    tv[i] = (i * 5) % DD;
  tc_tensor *t = tc_from_data(TC_I64, TC_SHAPE(BATCH), tv, sizeof tv);
  tc_tensor *ps[2 * LAYERS];
  for (int l = 0; l < layers; l++) {
    ps[2 * l] = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(DD, DD), 20 + l),
                              0.25);
    ps[2 * l + 1] = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(DD), 40 + l),
                                  0.1);
  }
  for (int i = 0; i < 2 * layers; i++)
    assert_int_equal(tc_set_requires_grad(ps[i], true), 0);
  tc_optimizer *o = sgd ? tc_sgd(ps, 2 * layers, 0.05, 0.9, 0.01)
                        : tc_adamw(ps, 2 * layers, 0.01, 0.9, 0.999, 1e-8,
                                   0.01);
  assert_non_null(o);
  for (int k = 0; k < STEPS; k++) {
    tc_stats s0, s1;
    tc_stats_get(&s0);
    nstep_kernels = 0;
    trace_launch_hook = count_kernel;
    size_t mark = tc_scope_begin();
    assert_int_equal(tc_optimizer_zero_grad(o), 0);
    tc_tensor *h = x;
    for (int l = 0; l < layers; l++) {
      h = tc_add(tc_matmul(h, ps[2 * l]), ps[2 * l + 1]);
      if (l + 1 < layers)
        h = tc_relu(h);
    }
    tc_tensor *l = tc_cross_entropy(h, t);
    assert_non_null(l);
    assert_int_equal(tc_backward(l), 0);
    assert_int_equal(tc_optimizer_step(o), 0);
    assert_int_equal(tc_item(l, &r->loss[k]), 0);
    tc_scope_end(mark);
    trace_launch_hook = NULL;
    tc_stats_get(&s1);
    r->kernels = nstep_kernels;
    r->compiled = s1.regions_compiled - s0.regions_compiled;
    r->eager = s1.regions_eager - s0.regions_eager;
  }
  size_t off = 0;
  for (int i = 0; i < 2 * layers; i++) {
    size_t nb = (size_t)tc_numel(ps[i]) * sizeof(float);
    assert_true(off + nb <= sizeof r->params);
    assert_int_equal(tc_copy_to(ps[i], (char *)r->params + off, nb), 0);
    off += nb;
  }
  tc_optimizer_free(o);
  tc_compile_set(false);
  tc_scope_end(mark0);
}

/* Compiled steps equal eager ones bitwise (losses and parameters), and the
** last step is one compiled region of `kernels` fused kernels. */
static void check_training(bool sgd, int layers, int kernels)
{
  static deep_run eager, compiled;
  train_deep(false, sgd, layers, &eager);
  train_deep(true, sgd, layers, &compiled);
  for (int k = 0; k < STEPS; k++)
    if (memcmp(&eager.loss[k], &compiled.loss[k], sizeof(double)) != 0)
      fail_msg("step %d loss: eager %.9g, compiled %.9g", k, eager.loss[k],
               compiled.loss[k]);
  for (int i = 0; i < layers * (DD * DD + DD); i++)
    if (memcmp(&eager.params[i], &compiled.params[i], sizeof(float)) != 0)
      fail_msg("parameter float %d: eager %.9g, compiled %.9g", i,
               (double)eager.params[i], (double)compiled.params[i]);
  assert_int_equal(compiled.compiled, 1);
  assert_int_equal(compiled.eager, 0);
  if (compiled.kernels != kernels)
    fail_msg("%s step, %d layers: %d kernels, expected %d",
             sgd ? "SGD" : "AdamW", layers, compiled.kernels, kernels);
}

/* Kernels of one step: the four layers' matmul epilogues (bias, relu;
** the last one also computes the target mask and the masked gradient,
** with the backward's seed and the mean's gradient inlined through their
** broadcast views), log_softmax forward and backward with the picked
** target (one ROWS kernel), three relu backward epilogues, the four
** biases' gradients (sums over the batch) and updates (one ROWS kernel),
** the four weights' updates (one MAP kernel: horizontal fusion), the loss
** (sum_all): 11. Before horizontal fusion and view inlining it was 18 (a
** bias and a weight kernel per layer, the mask apart from the masked
** gradient, two tiny kernels for the seed). SGD with momentum has the same
** structure. */
static void test_fusion_training_step_adamw(void **state)
{
  (void)state;
  check_training(false, 4, 11);
  /* 12 layers: the weights' and biases' updates exceed one kernel's
  ** limits (kir.h: 64 scalars, 32 passes) and are split: 12 forward
  ** epilogues, log_softmax, 11 relu backward epilogues, 2 ROWS kernels of
  ** 6 biases, 2 MAP kernels of 9 and 3 weights, the loss */
  check_training(false, LAYERS, 29);
}

static void test_fusion_training_step_sgd(void **state)
{
  (void)state;
  check_training(true, 4, 11);
  /* SGD's updates need fewer scalars and passes: one kernel for the 12
  ** weights */
  check_training(true, LAYERS, 28);
}

int main(void)
{
  setenv("TC_CACHE", "0", 1);
  if (shared_store_open() < 0)
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_fusion_transposed_tiles, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_kernel_counts, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_row_patterns, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_embedding_gather, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_gather, setup, teardown),
    cmocka_unit_test_setup_teardown(test_fusion_gather_random, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_row_stats_outputs, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_no_fallback_for_size, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_sync_inside_scope, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_adam_one_kernel, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_matmul_epilogue, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_matmul_epilogue_hazard,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_fusion_compile_failure_falls_back,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_fusion_worker_death_falls_back,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_fusion_every_op_bitwise, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_rows_writeback_order, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_training_step_adamw, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_fusion_training_step_sgd, setup,
                                    teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
