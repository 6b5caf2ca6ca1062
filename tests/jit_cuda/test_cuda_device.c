/*
** test_cuda_device.c -- device tensors and eager CUDA ops through the whole
** device path: tc -> jit_cuda's Driver API and NVRTC -> (in CI) the fake
** driver of tests/jit_cuda/fake, which compiles each kernel's CUDA C for
** the host and runs its grid of blocks there. Eager CUDA results must equal
** eager CPU results bit for bit (the same operation order by construction).
**
** TC_TEST_CUDA_DEVICE picks what the process should see:
**   fake   the fake driver is first on LD_LIBRARY_PATH: the device tests
**   real   a real GPU (bench/gpu-check.sh): the device tests but the one
**          that needs the fake's allocation limit
**   none   no driver at all: tc_cuda_available() is false, clear errors
**   stub   the toolkit's stub libcuda: still no device
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tc.h"
#include "../../src/jit_cuda/jit_cuda.h"
#include "../../examples/gpt_model.h"
#include "../../examples/llama_model.h"
#include "../../src/eager/gemm.h"

static const char *mode(void)
{
  const char *m = getenv("TC_TEST_CUDA_DEVICE");
  return m ? m : "none";
}

/* -- Helpers -------------------------------------------------------------------- */

static tc_tensor *on_cuda(tc_tensor *t)
{
  tc_tensor *d = tc_to(t, "cuda");
  assert_non_null(d);
  tc_release(t);
  return d;
}

/* A tensor's CUDA copy, kept in the scope (the CPU original is kept). */
static tc_tensor *dev(tc_tensor *t)
{
  tc_tensor *d = tc_to(t, "cuda");
  if (!d)
    fail_msg("%s", tc_last_error());
  return d;
}

/* a and b (any devices) hold the same bytes */
static void assert_same_bits(tc_tensor *a, tc_tensor *b)
{
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(tc_dtype_of(a), tc_dtype_of(b));
  assert_int_equal(tc_numel(a), tc_numel(b));
  size_t n = (size_t)tc_numel(a) * tc_dtype_size(tc_dtype_of(a));
  char *x = malloc(n + 1), *y = malloc(n + 1);
  assert_int_equal(tc_copy_to(a, x, n), 0);
  assert_int_equal(tc_copy_to(b, y, n), 0);
  assert_memory_equal(x, y, n);
  free(x);
  free(y);
}

static tc_tensor *randn(int64_t r, int64_t c, uint64_t seed)
{
  return tc_randn(TC_F32, TC_SHAPE(r, c), seed);
}

/* -- Moving tensors ---------------------------------------------------------------- */

static void test_device_available(void **state)
{
  (void)state;
  assert_true(tc_cuda_available());
  char arch[16];
  assert_int_equal(jcuda_arch(arch, sizeof arch), 0);
  if (strcmp(mode(), "fake") == 0)   /* what the fake reports */
    assert_string_equal(arch, "sm_90");
  else
    assert_memory_equal(arch, "sm_", 3);
}

/* every dtype goes to the device and back bit for bit (odd bit patterns:
** NaN payloads, subnormals, negative zero) */
static void test_to_round_trip_every_dtype(void **state)
{
  (void)state;
  for (int dt = 0; dt < TC_DTYPE__MAX; dt++) {
    size_t esz = tc_dtype_size((tc_dtype)dt);
    enum { N = 777 };
    unsigned char *bytes = malloc(N * esz), *back = malloc(N * esz);
    for (size_t i = 0; i < N * esz; i++)
      bytes[i] = (unsigned char)(i * 131u + 7u);
    if (dt == TC_BOOL)
      for (size_t i = 0; i < N; i++)
        bytes[i] &= 1;
    tc_tensor *h = tc_from_data((tc_dtype)dt, TC_SHAPE(N), bytes, N * esz);
    assert_int_equal(tc_copy_to(h, bytes, N * esz), 0);   /* as tc holds
                                                            them */
    tc_tensor *d = tc_to(h, "cuda");
    assert_non_null(d);
    assert_int_equal(tc_copy_to(d, back, N * esz), 0);   /* straight back */
    assert_memory_equal(bytes, back, N * esz);
    tc_tensor *h2 = tc_to(d, "cpu");
    assert_non_null(h2);
    memset(back, 0, N * esz);
    assert_int_equal(tc_copy_to(h2, back, N * esz), 0);
    assert_memory_equal(bytes, back, N * esz);
    tc_release(h);
    tc_release(d);
    tc_release(h2);
    free(bytes);
    free(back);
  }
}

static void test_to_views_and_item(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();   /* the intermediate views */
  tc_tensor *h = tc_arange(TC_F64, 0, 24, 1);
  tc_tensor *h3 = tc_reshape(h, TC_SHAPE(2, 3, 4));
  tc_tensor *d = tc_to(h3, "cuda");
  tc_tensor *same = tc_to(d, "cuda");   /* a new handle, same data */
  assert_non_null(same);
  tc_tensor *hv = tc_slice(tc_transpose(h3, 0, 2), 1, 1, 3, 1);
  tc_tensor *dv = tc_slice(tc_transpose(same, 0, 2), 1, 1, 3, 1);
  assert_same_bits(hv, dv);
  tc_tensor *back = tc_to(dv, "cpu");
  assert_true(tc_is_contiguous(back));
  assert_same_bits(hv, back);
  double x = 0;
  tc_tensor *one = tc_slice(tc_reshape(d, TC_SHAPE(24)), 0, 17, 18, 1);
  assert_int_equal(tc_item(one, &x), 0);
  assert_true(x == 17.0);
  tc_release(h);
  tc_release(h3);
  tc_release(d);
  tc_release(same);
  tc_release(back);
  tc_scope_end(mark);
}

/* a device tensor prints as PyTorch prints it: its values, read back, and
** the device before the dtype */
static void test_print_on_cuda(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  float v[4] = { 1, -2.5f, 0, 3 };
  tc_tensor *h = tc_from_data(TC_F32, TC_SHAPE(2, 2), v, sizeof v);
  char buf[256];
  assert_true(tc_format(dev(h), buf, sizeof buf) > 0);
  assert_string_equal(buf, "tensor([[ 1.0000, -2.5000],\n"
                           "        [ 0.0000,  3.0000]], device='cuda:0')");
  assert_true(tc_format(dev(tc_cast(tc_slice(h, 1, 1, 2, 1), TC_F16)), buf,
                        sizeof buf) > 0);
  assert_string_equal(buf, "tensor([[-2.5000],\n        [ 3.0000]], "
                           "device='cuda:0', dtype=torch.float16)");
  tc_scope_end(mark);
}

/* tc_save writes a device tensor's values (strided or not, any dtype) as
** it writes its CPU copy's; the file loads back on the CPU */
static void test_save_from_cuda(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *h = randn(6, 5, 40);
  tc_tensor *hs[] = { h, tc_transpose(h, 0, 1), tc_cast(h, TC_BF16),
                      tc_arange(TC_I64, 0, 7, 1) };
  tc_tensor *ds[4];
  for (int i = 0; i < 4; i++)
    ds[i] = i == 1 ? tc_transpose(ds[0], 0, 1) : dev(hs[i]);
  const char *names[] = { "w", "w_t", "w_bf16", "steps" };
  const char *path = "test_cuda_device_save.safetensors";
  if (tc_save(path, 4, names, ds) != 0)
    fail_msg("%s", tc_last_error());
  tc_file *f = tc_load(path);
  assert_non_null(f);
  for (int i = 0; i < 4; i++) {
    tc_tensor *got = tc_file_get(f, names[i]);
    assert_int_equal(tc_ndim(got), tc_ndim(hs[i]));
    assert_int_equal(tc_size(got, 0), tc_size(hs[i], 0));
    assert_same_bits(hs[i], got);
  }
  tc_file_close(f);
  remove(path);
  tc_scope_end(mark);
}

static void test_data_on_cuda_is_an_error(void **state)
{
  (void)state;
  tc_tensor *d = on_cuda(tc_ones(TC_F32, TC_SHAPE(4)));
  assert_null(tc_data(d));
  assert_string_equal(tc_last_error(), "tc_data: the tensor is on cuda; its "
                      "data is not host memory (tc_to(t, \"cpu\") gives a CPU "
                      "copy, tc_copy_to and tc_item copy values back)");
  tc_release(d);
}

static void test_allocator_reuses_blocks(void **state)
{
  (void)state;
  assert_int_equal(jcuda_alloc_class(1), 512);
  assert_int_equal(jcuda_alloc_class(513), 1024);
  assert_int_equal(jcuda_alloc_class(1 << 20), 1 << 20);
  assert_int_equal(jcuda_alloc_class((1 << 20) + 1), 2 << 20);
  assert_int_equal(jcuda_alloc_class((3 << 20) - 5), 4 << 20);
  jcuda_alloc_release_cache();
  jcuda_alloc_stats s0, s1, s2;
  jcuda_alloc_stats_get(&s0);
  tc_tensor *a = on_cuda(tc_zeros(TC_F32, TC_SHAPE(1000)));
  jcuda_alloc_stats_get(&s1);
  assert_int_equal(s1.bytes_in_use - s0.bytes_in_use, 4096);
  assert_int_equal(s1.driver_allocs - s0.driver_allocs, 1);
  tc_release(a);
  jcuda_alloc_stats_get(&s2);
  assert_int_equal(s2.bytes_in_use, s0.bytes_in_use);
  assert_int_equal(s2.bytes_reserved, s1.bytes_reserved);   /* cached */
  tc_tensor *b = on_cuda(tc_zeros(TC_F32, TC_SHAPE(999)));   /* same class */
  jcuda_alloc_stats_get(&s2);
  assert_int_equal(s2.cache_hits - s1.cache_hits, 1);
  assert_int_equal(s2.driver_allocs, s1.driver_allocs);
  tc_release(b);
  jcuda_alloc_release_cache();
  jcuda_alloc_stats_get(&s2);
  assert_int_equal(s2.bytes_reserved, s2.bytes_in_use);
}

static void test_default_device(void **state)
{
  (void)state;
  assert_string_equal(tc_default_device(), "cpu");
  assert_int_equal(tc_set_default_device("cuda"), 0);
  tc_tensor *z = tc_full(TC_F32, TC_SHAPE(3), 2.5);
  assert_null(tc_data(z));   /* on the device */
  double x;
  tc_tensor *s = tc_slice(z, 0, 1, 2, 1);
  assert_int_equal(tc_item(s, &x), 0);
  assert_true(x == 2.5);
  assert_int_equal(tc_set_default_device("cpu"), 0);
  assert_int_equal(tc_set_default_device("tpu"), -1);
  assert_string_equal(tc_last_error(), "tc_set_default_device: unknown "
                      "device \"tpu\" (expected \"cpu\" or \"cuda\")");
  tc_release(s);
  tc_release(z);
}

static void test_driver_errors_carry_its_string(void **state)
{
  (void)state;
  if (strcmp(mode(), "fake") != 0) {
    print_message("skipped: a real device has no allocation limit to "
                  "set\n");
    skip();
  }
  setenv("TC_FAKE_CUDA_MEM_LIMIT", "1024", 1);
  jcuda_alloc_release_cache();
  tc_tensor *h = tc_zeros(TC_F32, TC_SHAPE(1 << 20));
  assert_null(tc_to(h, "cuda"));
  assert_string_equal(tc_last_error(), "cuMemAlloc failed: out of memory "
                      "(CUDA error 2)");
  unsetenv("TC_FAKE_CUDA_MEM_LIMIT");
  tc_release(h);
}

/* -- Eager CUDA ops equal eager CPU ops ------------------------------------------------ */

typedef tc_tensor *(*op1)(tc_tensor *);
typedef tc_tensor *(*op2)(tc_tensor *, tc_tensor *);

static void check1(op1 f, tc_tensor *h)
{
  tc_tensor *d = tc_to(h, "cuda");
  tc_tensor *want = f(h), *got = f(d);
  if (!got)
    fail_msg("%s", tc_last_error());
  assert_same_bits(want, got);
  tc_release(d);
  tc_release(want);
  tc_release(got);
}

static void check2(op2 f, tc_tensor *ha, tc_tensor *hb)
{
  tc_tensor *da = tc_to(ha, "cuda"), *db = tc_to(hb, "cuda");
  tc_tensor *want = f(ha, hb), *got = f(da, db);
  if (!got)
    fail_msg("%s", tc_last_error());
  assert_same_bits(want, got);
  tc_release(da);
  tc_release(db);
  tc_release(want);
  tc_release(got);
}

static void test_pointwise_equals_cpu(void **state)
{
  (void)state;
  tc_tensor *a = randn(37, 70, 1), *b = randn(1, 70, 2);
  check2(tc_add, a, b);          /* broadcast */
  check2(tc_div, a, b);
  check1(tc_exp, a);
  check1(tc_gelu, a);
  tc_tensor *at = tc_transpose(a, 0, 1);   /* strided input */
  check1(tc_tanh, at);
  tc_tensor *h = tc_cast(a, TC_F16);
  check1(tc_sigmoid, h);         /* a storage dtype */
  tc_tensor *d = tc_to(a, "cuda");
  tc_tensor *dt = tc_transpose(d, 0, 1);
  tc_tensor *dc = tc_contiguous(dt);
  tc_release(dt);
  assert_same_bits(at, dc);
  tc_release(dc);
  tc_release(d);
  tc_release(h);
  tc_release(at);
  tc_release(a);
  tc_release(b);
}

static tc_tensor *sum1(tc_tensor *t) { return tc_sum(t, 1, false); }
static tc_tensor *max0(tc_tensor *t) { return tc_max(t, 0, true); }
static tc_tensor *mean1(tc_tensor *t) { return tc_mean(t, -1, false); }
static tc_tensor *softmax1(tc_tensor *t) { return tc_softmax(t, 1); }
static tc_tensor *logsm0(tc_tensor *t) { return tc_log_softmax(t, 0); }

/* one op is one kernel per rank and broadcast pattern (what its collapsed
** loops look like): compiled on its first call, then found again for every
** size (shape-dynamic), and the values stay the CPU's */
static void test_kernels_compile_once(void **state)
{
  (void)state;
  static const int64_t shapes[][2] = { { 3, 5 }, { 7, 129 }, { 40, 2 },
                                       { 2, 3 } };
  tc_stats before, after;
  for (int i = 0; i < 4; i++) {
    tc_tensor *a = randn(shapes[i][0], shapes[i][1], 90 + (uint64_t)i);
    tc_tensor *b = randn(1, shapes[i][1], 95 + (uint64_t)i);
    tc_tensor *da = tc_to(a, "cuda"), *db = tc_to(b, "cuda");
    tc_stats_get(&before);
    tc_tensor *dd = tc_sub(da, db), *dy = tc_mul(dd, da);
    tc_stats_get(&after);
    /* the first shape compiles SUB and MUL (unless an earlier test did);
    ** the others compile nothing */
    uint64_t compiled = after.kernels_compiled - before.kernels_compiled;
    if (i == 0)
      assert_true(compiled <= 2);
    else
      assert_int_equal(compiled, 0);
    tc_tensor *d = tc_sub(a, b), *y = tc_mul(d, a);
    assert_same_bits(dy, y);
    tc_release(a); tc_release(b); tc_release(da); tc_release(db);
    tc_release(dd); tc_release(dy); tc_release(d); tc_release(y);
  }
}

static void test_reductions_equal_cpu(void **state)
{
  (void)state;
  tc_tensor *a = randn(9, 5000, 3);   /* rows longer than a chunk */
  check1(sum1, a);
  check1(max0, a);
  check1(mean1, a);
  check1(tc_sum_all, a);
  tc_release(a);
}

static tc_tensor *max_flat(tc_tensor *t) { return tc_max(t, 0, false); }
static tc_tensor *min_flat(tc_tensor *t) { return tc_min(t, 0, false); }
static tc_tensor *mean_flat(tc_tensor *t) { return tc_mean(t, 0, true); }

/* Whole-tensor reductions run as split reductions (jit_cuda.h: one long
** row, few rows: blocks share the row, then a second phase combines the
** chunk partials): eager CPU's bits at sizes around the chunk boundaries. */
static void test_split_reductions_equal_cpu(void **state)
{
  (void)state;
  static const int64_t lens[] = { 1, 4095, 4096, 4097, 3 * 4096 + 5,
                                  (1 << 20) + 3 };
  static const tc_dtype dts[] = { TC_F32, TC_F64, TC_I64 };
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
      tc_tensor *r = tc_randn(TC_F64, TC_SHAPE(lens[i]), 40 + i * 3 + d);
      tc_tensor *s = tc_mul_scalar(r, dts[d] == TC_I64 ? 1e12 : 1000.0);
      tc_tensor *h = tc_cast(s, dts[d]);
      check1(tc_sum_all, h);
      check1(max_flat, h);
      check1(min_flat, h);
      if (dts[d] != TC_I64)
        check1(mean_flat, h);   /* an epilogue after the reduction */
      tc_release(r);
      tc_release(s);
      tc_release(h);
    }
}

static tc_tensor *ln(tc_tensor *x, tc_tensor *g)
{
  return tc_layer_norm(x, g, g, 1e-5);
}

static void test_composites_equal_cpu(void **state)
{
  (void)state;
  tc_tensor *a = randn(6, 300, 4), *g = tc_rand(TC_F32, TC_SHAPE(300), 5);
  check1(softmax1, a);
  check1(logsm0, a);
  check2(ln, a, g);
  tc_release(a);
  tc_release(g);
}

/* cuBLAS's order is its own: close to the CPU's, not bitwise (NUMERICS.md;
** the fake's is the CPU's), within rel of each value (and of 1). */
static void assert_close_to(tc_tensor *want, tc_tensor *got, double rel)
{
  assert_non_null(got);
  assert_int_equal(tc_numel(want), tc_numel(got));
  int64_t n = tc_numel(want);
  double *x = malloc(sizeof(double) * (size_t)n + 8);
  double *y = malloc(sizeof(double) * (size_t)n + 8);
  tc_tensor *wx = tc_cast(want, TC_F64), *gy = tc_cast(got, TC_F64);
  assert_non_null(gy);
  assert_int_equal(tc_copy_to(wx, x, sizeof(double) * (size_t)n), 0);
  assert_int_equal(tc_copy_to(gy, y, sizeof(double) * (size_t)n), 0);
  for (int64_t i = 0; i < n; i++)
    assert_true(fabs(x[i] - y[i]) <= rel * (1 + fabs(x[i])));
  tc_release(wx);
  tc_release(gy);
  free(x);
  free(y);
}

/* f32 and f64: a few ulp of the sum of |a_ik b_kj| */
static void assert_close(tc_tensor *want, tc_tensor *got)
{
  assert_close_to(want, got, 1e-5);
}

static void matmul_case(tc_tensor *a, tc_tensor *b)
{
  tc_tensor *da = tc_to(a, "cuda"), *db = tc_to(b, "cuda");
  tc_tensor *want = tc_matmul(a, b), *got = tc_matmul(da, db);
  if (!got)
    fail_msg("%s", tc_last_error());
  assert_int_equal(tc_ndim(want), tc_ndim(got));
  for (int d = 0; d < tc_ndim(want); d++)
    assert_int_equal(tc_size(want, d), tc_size(got, d));
  assert_close(want, got);
  tc_release(da);
  tc_release(db);
  tc_release(want);
  tc_release(got);
}

static void test_matmul_through_cublas(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *a = randn(13, 7, 7), *b = randn(7, 5, 8);
  matmul_case(a, b);                                    /* 2-D */
  matmul_case(tc_transpose(b, 0, 1), tc_transpose(a, 0, 1));   /* strided */
  tc_tensor *a3 = tc_randn(TC_F64, TC_SHAPE(3, 4, 6), 9);
  tc_tensor *b3 = tc_randn(TC_F64, TC_SHAPE(3, 6, 2), 10);
  matmul_case(a3, b3);                                  /* batched */
  matmul_case(a3, tc_randn(TC_F64, TC_SHAPE(6, 2), 11));   /* one B */
  matmul_case(tc_randn(TC_F64, TC_SHAPE(6), 12), b3);   /* 1-D A */
  /* partly broadcast batch dims: [2, 1] against [3] and [1, 3] */
  tc_tensor *a4 = randn(4, 6, 16);
  matmul_case(tc_reshape(a4, TC_SHAPE(2, 1, 2, 6)), tc_randn(TC_F32,
              TC_SHAPE(3, 6, 5), 17));
  matmul_case(tc_randn(TC_F64, TC_SHAPE(1, 3, 2, 6), 18),
              tc_transpose(tc_randn(TC_F64, TC_SHAPE(2, 1, 4, 6), 19), 2, 3));
  /* f16 and bf16 as the CPU computes them: f32 products, rounded. The
  ** fake cuBLAS is the CPU's chain (the same bits); a real one may round
  ** a product to the neighbouring f16 */
  for (int h = 0; h < 2; h++) {
    tc_dtype hd = h ? TC_BF16 : TC_F16;
    tc_tensor *ha = tc_cast(a, hd), *hb = tc_cast(b, hd);
    tc_tensor *want = tc_matmul(ha, hb);
    tc_tensor *got = tc_matmul(dev(ha), dev(hb));
    if (!got)
      fail_msg("%s", tc_last_error());
    assert_int_equal(tc_dtype_of(got), hd);
    if (strcmp(mode(), "fake") == 0)
      assert_same_bits(want, got);
    else
      assert_close_to(want, got, h ? 8e-3 : 1e-3);
  }
  tc_scope_end(mark);
}

/* the same in-place ops on a CPU tensor and its CUDA copy */
static void test_inplace_equals_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *h = randn(8, 8, 13), *src = randn(1, 8, 14);
  tc_tensor *d = tc_to(h, "cuda"), *dsrc = tc_to(src, "cuda");
  assert_int_equal(tc_add_(h, src), 0);             /* broadcast source */
  assert_int_equal(tc_add_(d, dsrc), 0);
  assert_int_equal(tc_mul_scalar_(h, 0.75), 0);
  assert_int_equal(tc_mul_scalar_(d, 0.75), 0);
  assert_int_equal(tc_add_(h, tc_transpose(h, 0, 1)), 0);   /* overlaps */
  assert_int_equal(tc_add_(d, tc_transpose(d, 0, 1)), 0);
  assert_same_bits(h, d);
  tc_tensor *hv = tc_slice(h, 1, 2, 6, 2), *dv = tc_slice(d, 1, 2, 6, 2);
  tc_tensor *hs = tc_rand(TC_F64, TC_SHAPE(8, 2), 15);
  tc_tensor *ds = tc_to(hs, "cuda");
  assert_int_equal(tc_copy_(hv, hs), 0);            /* into a view, cast */
  assert_int_equal(tc_copy_(dv, ds), 0);
  assert_same_bits(h, d);
  assert_int_equal(tc_fill_(dv, -2.0), 0);
  assert_int_equal(tc_fill_(hv, -2.0), 0);
  assert_same_bits(h, d);
  assert_int_equal(tc_add_(d, h), -1);
  assert_string_equal(tc_last_error(), "tc_add_ expects tensors on one "
                      "device (cpu and cuda)");
  tc_scope_end(mark);
}

/* Hugging Face's rotary embedding of x [heads, hd] at cos, sin [1, hd/2],
** as a Llama program writes it: the halves joined with tc_cat. */
static tc_tensor *rope(tc_tensor *x, tc_tensor *c, tc_tensor *s)
{
  int64_t h2 = tc_size(x, -1) / 2;
  tc_tensor *x1 = tc_slice(x, -1, 0, h2, 1), *x2 = tc_slice(x, -1, h2,
                                                             2 * h2, 1);
  tc_tensor *halves[] = { tc_sub(tc_mul(x1, c), tc_mul(x2, s)),
                          tc_add(tc_mul(x2, c), tc_mul(x1, s)) };
  return tc_cat(halves, 2, -1);
}

/* cat joins by copies into the result's slices, gather, embedding and
** index_select read by indexed loads: the CPU's bits, from contiguous,
** strided and mixed-dtype operands */
static void test_join_and_gather_equal_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *a = randn(5, 7, 21), *b = randn(5, 3, 22);
  tc_tensor *c64 = tc_randn(TC_F64, TC_SHAPE(5, 4), 23);
  tc_tensor *at = tc_transpose(randn(7, 5, 24), 0, 1);   /* strided */
  tc_tensor *da = dev(a), *db = dev(b), *dc = dev(c64);
  tc_tensor *dat = tc_transpose(dev(tc_transpose(at, 0, 1)), 0, 1);
  assert_same_bits(tc_cat((tc_tensor *[]){ a, b }, 2, 1),
                   tc_cat((tc_tensor *[]){ da, db }, 2, 1));
  assert_same_bits(tc_cat((tc_tensor *[]){ a, b, c64, at }, 4, -1),
                   tc_cat((tc_tensor *[]){ da, db, dc, dat }, 4, -1));
  assert_same_bits(tc_cat((tc_tensor *[]){ a, at, a }, 3, 0),
                   tc_cat((tc_tensor *[]){ da, dat, da }, 3, 0));
  assert_same_bits(tc_stack((tc_tensor *[]){ a, at }, 2, 1),
                   tc_stack((tc_tensor *[]){ da, dat }, 2, 1));
  int64_t iv[10] = { 6, 0, 2, 2, 5, 1, 0, 6, 3, 4 };
  tc_tensor *idx = tc_from_data(TC_I64, TC_SHAPE(5, 2), iv, sizeof iv);
  tc_tensor *didx = dev(idx);
  assert_same_bits(tc_gather(a, 1, idx), tc_gather(da, 1, didx));
  assert_same_bits(tc_gather(at, 1, idx), tc_gather(dat, 1, didx));
  int64_t rv[3] = { 4, 0, 2 };
  tc_tensor *rows = tc_from_data(TC_I64, TC_SHAPE(3), rv, sizeof rv);
  assert_same_bits(tc_gather(a, 0, tc_expand(tc_reshape(rows, TC_SHAPE(3, 1)),
                                             2, (int64_t[]){ 3, 7 })),
                   tc_gather(da, 0, tc_expand(tc_reshape(dev(rows),
                                                         TC_SHAPE(3, 1)),
                                              2, (int64_t[]){ 3, 7 })));
  assert_same_bits(tc_embedding(a, rows), tc_embedding(da, dev(rows)));
  assert_same_bits(tc_index_select(a, 1, rows),
                   tc_index_select(da, 1, dev(rows)));
  /* a bad index is the CPU's error, read from the device at the call */
  int64_t bv[2] = { 1, 7 };
  tc_tensor *bad = tc_from_data(TC_I64, TC_SHAPE(1, 2), bv, sizeof bv);
  assert_null(tc_gather(a, 1, bad));
  char want[128];
  snprintf(want, sizeof want, "%s", tc_last_error());
  assert_null(tc_gather(da, 1, dev(bad)));
  assert_string_equal(tc_last_error(), want);
  assert_non_null(strstr(want, "index 7 is out of range"));
  /* a model's pieces: rotary embedding, then a negative log-likelihood */
  tc_tensor *x = randn(6, 16, 25);
  tc_tensor *cs = tc_rand(TC_F32, TC_SHAPE(1, 8), 26);
  tc_tensor *sn = tc_rand(TC_F32, TC_SHAPE(1, 8), 27);
  assert_same_bits(rope(x, cs, sn), rope(dev(x), dev(cs), dev(sn)));
  int64_t tv[5] = { 3, 0, 6, 6, 1 };
  tc_tensor *tg = tc_from_data(TC_I64, TC_SHAPE(5, 1), tv, sizeof tv);
  assert_same_bits(tc_neg(tc_gather(tc_log_softmax(a, -1), 1, tg)),
                   tc_neg(tc_gather(tc_log_softmax(da, -1), 1, dev(tg))));
  tc_scope_end(mark);
}

/* cumsum adds in the CPU's order (tensor.h's scan order: by a thread or,
** for long rows, a block per row) and scatter_add in the CPU's too (one
** element after another along the dim), so a device result is the CPU's
** bit for bit:
** known values first, then every dim, strided, each dtype, duplicate
** indices with magnitudes where the order shows, and the embedding's
** gradient (a scatter_add) in a training step */
static void test_scan_and_scatter_equal_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  float kv[4] = { 1, 2, 3, 4 }, got[4];
  tc_tensor *k4 = tc_from_data(TC_F32, TC_SHAPE(4), kv, sizeof kv);
  assert_int_equal(tc_copy_to(tc_cumsum(dev(k4), 0), got, sizeof got), 0);
  assert_true(got[0] == 1 && got[1] == 3 && got[2] == 6 && got[3] == 10);
  int64_t kiv[4] = { 0, 2, 0, 0 };
  tc_tensor *ki = tc_from_data(TC_I64, TC_SHAPE(4), kiv, sizeof kiv);
  tc_tensor *ks = tc_scatter_add(dev(tc_zeros(TC_F32, TC_SHAPE(3))), 0,
                                 dev(ki), dev(k4));
  if (!ks)
    fail_msg("%s", tc_last_error());
  assert_int_equal(tc_copy_to(ks, got, 3 * sizeof *got), 0);
  assert_true(got[0] == 8 && got[1] == 0 && got[2] == 2);

  /* 1e8 beside ones: a sum in any other order rounds otherwise */
  tc_tensor *big = tc_add(tc_mul_scalar(randn(7, 300, 41), 1e8),
                          tc_rand(TC_F32, TC_SHAPE(7, 300), 51));
  tc_tensor *xs[] = {
    big, tc_transpose(randn(300, 5, 42), 0, 1), tc_cast(big, TC_F64),
    tc_cast(big, TC_F16), tc_cast(big, TC_BF16),
    tc_cast(tc_round(tc_mul_scalar(randn(6, 9, 43), 5)), TC_I32),
    tc_gt_scalar(randn(4, 9, 44), 0), tc_full(TC_F32, 0, NULL, 2.5),
    tc_zeros(TC_F32, TC_SHAPE(3, 0)),
    /* rows of many segments of the scan order: a block per row */
    tc_add(tc_mul_scalar(randn(2, 20000, 53), 1e8),
           tc_rand(TC_F32, TC_SHAPE(2, 20000), 54)),
    tc_reshape(tc_cast(randn(1, 70001, 55), TC_F64), TC_SHAPE(70001)),
  };
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++)
    for (int dim = 0; dim < (tc_ndim(xs[i]) ? tc_ndim(xs[i]) : 1); dim++) {
      tc_tensor *r = tc_cumsum(dev(xs[i]), dim);
      if (!r)
        fail_msg("cumsum of case %zu: %s", i, tc_last_error());
      assert_same_bits(tc_cumsum(xs[i], dim), r);
    }

  /* scatter_add: many adds into few places, along either dim, with an
  ** index smaller than src and a, an i32 index, a strided a */
  int64_t n = 200;
  tc_tensor *src = tc_add(tc_mul_scalar(randn(n, 6, 45), 1e7),
                          tc_rand(TC_F32, TC_SHAPE(n, 6), 52));
  tc_tensor *idx = tc_cast(tc_floor(tc_mul_scalar(tc_rand(TC_F32,
                                                          TC_SHAPE(n, 6), 46),
                                                  5)), TC_I64);
  tc_tensor *a = randn(5, 6, 47);
  tc_tensor *at = tc_transpose(randn(6, 5, 48), 0, 1);
  tc_tensor *small = tc_slice(tc_slice(idx, 0, 0, 150, 1), 1, 0, 4, 1);
  tc_tensor *ta = tc_transpose(randn(6, n, 49), 0, 1);
  struct { tc_tensor *a; int dim; tc_tensor *idx, *src; } cs[] = {
    { a, 0, idx, src }, { at, 0, idx, src }, { a, 0, small, src },
    { a, 0, tc_cast(idx, TC_I32), src }, { ta, 1, idx, src },
    { tc_cast(a, TC_F64), 0, idx, tc_cast(src, TC_F64) },
    { tc_cast(a, TC_F16), 0, idx, tc_cast(tc_div_scalar(src, 1e7), TC_F16) },
    { tc_cast(a, TC_BF16), 0, idx, tc_cast(src, TC_BF16) },
    { tc_cast(tc_mul_scalar(a, 9), TC_I32), 0, idx,
      tc_cast(tc_div_scalar(src, 1e5), TC_I32) },
    { tc_cast(tc_mul_scalar(a, 9), TC_I64), 0, idx,
      tc_cast(tc_div_scalar(src, 1e5), TC_I64) },
  };
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
    tc_tensor *want = tc_scatter_add(cs[i].a, cs[i].dim, cs[i].idx,
                                     cs[i].src);
    if (!want)
      fail_msg("CPU scatter_add of case %zu: %s", i, tc_last_error());
    tc_tensor *r = tc_scatter_add(dev(cs[i].a), cs[i].dim, dev(cs[i].idx),
                                  dev(cs[i].src));
    if (!r)
      fail_msg("scatter_add of case %zu: %s", i, tc_last_error());
    assert_same_bits(want, r);
  }
  tc_tensor *da = dev(a);   /* in place */
  assert_int_equal(tc_scatter_add_(da, 0, dev(idx), dev(src)), 0);
  assert_same_bits(tc_scatter_add(a, 0, idx, src), da);

  /* an embedding's gradient: scatter_add of the rows' gradients */
  tc_tensor *w = randn(11, 8, 50), *dw = tc_to(w, "cuda");
  int64_t tok[9] = { 3, 3, 0, 10, 3, 7, 0, 3, 3 };
  tc_tensor *t = tc_from_data(TC_I64, TC_SHAPE(9), tok, sizeof tok);
  tc_tensor *ws[2] = { w, dw }, *ts[2] = { t, dev(t) }, *g[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(tc_set_requires_grad(ws[i], true), 0);
    tc_tensor *loss = tc_sum_all(tc_tanh(tc_embedding(ws[i], ts[i])));
    if (!loss || tc_backward(loss) != 0)
      fail_msg("%s", tc_last_error());
    g[i] = tc_grad(ws[i]);
  }
  assert_same_bits(g[0], g[1]);
  tc_scope_end(mark);
}

/* topk on the device gives the CPU's indices (NaN above every number,
** ties to the lower index, -0 and +0 equal), so its values too: largest or
** smallest, sorted or in index order, along either dim, every k, strided,
** each dtype topk takes */
static void test_topk_equals_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  float v[24] = { 1, 3, 3, -2, 0, 5,   2, NAN, 9, NAN, 1, 0,
                  -0.0f, 0, -1, -1, 4, 4,   7, 6, 5, 4, 3, NAN };
  tc_tensor *x = tc_from_data(TC_F32, TC_SHAPE(4, 6), v, sizeof v);
  tc_tensor *xs[] = {
    x, tc_transpose(x, 0, 1), tc_round(tc_mul_scalar(randn(5, 40, 60), 2)),
    tc_cast(x, TC_F64), tc_cast(x, TC_BF16),
    tc_cast(tc_round(tc_mul_scalar(randn(3, 33, 61), 3)), TC_I32),
    tc_cast(tc_round(randn(6, 7, 62)), TC_I64),
  };
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
    tc_tensor *d = dev(xs[i]);
    for (int dim = 0; dim < 2; dim++) {
      int64_t n = tc_size(xs[i], dim);
      int64_t ks[] = { 0, 1, n / 2, n };
      for (int ki = 0; ki < 4; ki++)
        for (int flags = 0; flags < 4; flags++) {
          bool largest = flags & 1, sorted = flags & 2;
          tc_tensor *wv, *wi, *gv, *gi;
          assert_int_equal(tc_topk(xs[i], ks[ki], dim, largest, sorted, &wv,
                                   &wi), 0);
          if (tc_topk(d, ks[ki], dim, largest, sorted, &gv, &gi) != 0)
            fail_msg("topk of case %zu: %s", i, tc_last_error());
          assert_string_equal(tc_device(gi), "cuda");
          assert_same_bits(wi, gi);
          assert_same_bits(wv, gv);
        }
    }
  }
  tc_scope_end(mark);
}

/* topk over long rows, which the device cuts into chunks, ranking only
** each chunk's candidates: still the CPU's indices, with ties across chunk
** boundaries, NaNs, infinities and signed zeros, a last chunk of fewer
** elements than k (pads among the candidates), a strided row, integers at
** their extremes, and halves. (Few calls: the host runs each kernel's
** blocks as fibers, slowly.) */
static void test_topk_long_rows(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  enum { N = 2200 };
  float v[N];
  int64_t w[1100];
  uint64_t s = 12345;
  for (int i = 0; i < N; i++) {   /* few distinct values: many ties */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((int)(s >> 59) - 16) * 0.5f;
  }
  v[17] = v[640] = v[1029] = NAN;
  v[3] = v[127] = v[128] = v[1028] = INFINITY;   /* across a boundary */
  for (int i = 1; i < N; i += 9)
    v[i] = -INFINITY;
  v[10] = -0.0f;
  v[11] = 0.0f;
  for (int i = 0; i < 1100; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = (int64_t)(s >> 61) - 4;
  }
  w[5] = w[1099] = INT64_MAX;
  w[1] = w[1098] = INT64_MIN;
  tc_tensor *x = tc_from_data(TC_F32, TC_SHAPE(1, N), v, sizeof v);
  tc_tensor *head = tc_slice(x, 1, 0, 1030, 1);   /* a last chunk of 6 */
  tc_tensor *wt = tc_from_data(TC_I64, TC_SHAPE(1, 1100), w, sizeof w);
  struct {
    tc_tensor *x;
    int dim;
    int64_t k;
    int flags;   /* 1: largest, 2: sorted */
  } cases[] = {
    { head, 1, 20, 0 }, { head, 1, 20, 1 }, { head, 1, 20, 2 },
    { head, 1, 20, 3 }, { head, 1, 1, 3 }, { head, 1, 1, 0 },
    { tc_transpose(tc_slice(x, 1, 0, N, 2), 0, 1), 0, 5, 0 },
    { wt, 1, 7, 3 }, { wt, 1, 7, 2 },
    { tc_cast(tc_slice(x, 1, 3, 1103, 1), TC_BF16), 1, 10, 1 },
    { tc_cast(tc_slice(x, 1, 50, 1150, 1), TC_I32), 1, 9, 2 },
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    bool largest = cases[i].flags & 1, sorted = cases[i].flags & 2;
    tc_tensor *wv, *wi, *gv, *gi;
    assert_int_equal(tc_topk(cases[i].x, cases[i].k, cases[i].dim, largest,
                             sorted, &wv, &wi), 0);
    if (tc_topk(dev(cases[i].x), cases[i].k, cases[i].dim, largest, sorted,
                &gv, &gi) != 0)
      fail_msg("topk of case %zu: %s", i, tc_last_error());
    assert_same_bits(wi, gi);
    assert_same_bits(wv, gv);
  }
  tc_scope_end(mark);
}

/* A character-level GPT (examples/gpt_model.c, ordinary tc ops) trains on
** the device: made with "cuda" the default device, three AdamW steps on
** the same batches give the CPU's losses and weights; bit for bit when the
** CPU's GEMM is the fma chain the fake cuBLAS computes (a real cuBLAS sums
** in its own order: then close) */
static void test_gpt_trains_on_cuda(void **state)
{
  (void)state;
  gpt_config c = { .vocab = 11, .ctx = 8, .dim = 16, .layers = 2,
                   .heads = 2, .batch = 3, .lr = 1e-2, .weight_decay = 0.1 };
  gpt_model m[2];
  int64_t x[24], y[24];
  uint8_t text[64];
  for (int i = 0; i < 64; i++)
    text[i] = (uint8_t)((i * 7 + i / 5) % c.vocab);
  double loss[2][3];
  for (int d = 0; d < 2; d++) {
    assert_int_equal(tc_set_default_device(d ? "cuda" : "cpu"), 0);
    if (gpt_init(&m[d], &c, 9) != 0)
      fail_msg("gpt_init: %s", tc_last_error());
    uint64_t rng = 4;
    for (int s = 0; s < 3; s++) {
      gpt_batch(text, sizeof text, c.batch, c.ctx, &rng, x, y);
      size_t mark = tc_scope_begin();
      tc_tensor *tx = tc_from_data(TC_I64, TC_SHAPE(c.batch, c.ctx), x,
                                   sizeof x);
      tc_tensor *ty = tc_from_data(TC_I64, TC_SHAPE(c.batch, c.ctx), y,
                                   sizeof y);
      assert_string_equal(tc_device(tx), d ? "cuda" : "cpu");
      if (gpt_train_step(&m[d], tx, ty, &loss[d][s]) != 0)
        fail_msg("step %d on %s: %s", s, d ? "cuda" : "cpu",
                 tc_last_error());
      tc_scope_end(mark);
    }
  }
  assert_int_equal(tc_set_default_device("cpu"), 0);
  assert_string_equal(tc_device(m[1].wte), "cuda");
  assert_true(loss[0][2] < loss[0][0]);   /* it learns */
  if (eager_gemm_path_fma(eager_gemm_path())) {
    for (int s = 0; s < 3; s++)
      assert_memory_equal(&loss[0][s], &loss[1][s], sizeof(double));
    for (int p = 0; p < m[0].nparams; p++)
      assert_same_bits(m[0].params[p], m[1].params[p]);
  } else {
    for (int s = 0; s < 3; s++)
      assert_true(fabs(loss[0][s] - loss[1][s]) <= 1e-4 * fabs(loss[0][s]));
    assert_close_to(m[0].wte, m[1].wte, 1e-3);
  }
  gpt_free(&m[0]);
  gpt_free(&m[1]);
}

static void test_mixed_devices_are_an_error(void **state)
{
  (void)state;
  tc_tensor *h = tc_ones(TC_F32, TC_SHAPE(4));
  tc_tensor *d = tc_to(h, "cuda");
  assert_null(tc_add(h, d));
  assert_string_equal(tc_last_error(), "tc_add expects tensors on one device "
                      "(cpu and cuda)");
  assert_null(tc_mul(d, h));
  assert_string_equal(tc_last_error(), "tc_mul expects tensors on one device "
                      "(cpu and cuda)");
  tc_release(h);
  tc_release(d);
}

/* A Llama decoding, written in ordinary ops (examples/llama_model.c:
** rotary embeddings joined with cat, attention over a KV cache written in
** place, SwiGLU), runs on the device: the CPU's greedy tokens fed to both
** copies of the model, the logits close at every position (cuBLAS's
** order, NUMERICS.md), and the device's argmax that of its own logits. */
static void test_llama_decodes_on_cuda(void **state)
{
  (void)state;
  llama_config c;
  llama_model cpu, gpu;
  assert_int_equal(llama_preset("tiny", &c), 0);
  assert_int_equal(llama_init(&cpu, &c, 7), 0);
  assert_int_equal(llama_init(&gpu, &c, 7), 0);
  if (llama_to(&gpu, "cuda") < 0)
    fail_msg("%s", tc_last_error());
  int tok = 1;
  for (int pos = 0; pos < 6; pos++) {
    size_t mark = tc_scope_begin();
    tc_tensor *want = llama_forward(&cpu, tok, pos);
    tc_tensor *got = llama_forward(&gpu, tok, pos);
    if (!got)
      fail_msg("position %d: %s", pos, tc_last_error());
    assert_close(want, got);
    double on_dev, on_host, next;
    assert_int_equal(tc_item(tc_argmax(got, -1, false), &on_dev), 0);
    assert_int_equal(tc_item(tc_argmax(tc_to(got, "cpu"), -1, false),
                             &on_host), 0);
    assert_true(on_dev == on_host);
    assert_int_equal(tc_item(tc_argmax(want, -1, false), &next), 0);
    tok = (int)next;
    tc_scope_end(mark);
  }
  llama_free(&cpu);
  llama_free(&gpu);
}

/* multinomial on the device draws the CPU's indices: the same uniforms,
** the same running sums in f64, so the same buckets; with and without
** replacement, 1-D and 2-D, every float dtype, zero weights (never drawn),
** a transposed view, weights far apart in size (their sum rounds), and no
** rows */
static void test_multinomial_equals_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  float v[12] = { 1, 0, 3, 2,   0, 0, 5, 0,   1e-30f, 1, 0, 1e30f };
  tc_tensor *w = tc_from_data(TC_F32, TC_SHAPE(3, 4), v, sizeof v);
  tc_tensor *ps[] = {
    w, tc_softmax(randn(5, 65, 70), -1), tc_rand(TC_F32, TC_SHAPE(40), 71),
    tc_cast(tc_rand(TC_F32, TC_SHAPE(4, 9), 72), TC_F64),
    tc_cast(tc_rand(TC_F32, TC_SHAPE(2, 30), 73), TC_BF16),
    tc_cast(tc_rand(TC_F32, TC_SHAPE(3, 8), 74), TC_F16),
    tc_transpose(tc_rand(TC_F32, TC_SHAPE(12, 6), 75), 0, 1),
    tc_zeros(TC_F32, TC_SHAPE(0, 5)),
    tc_softmax(randn(2, 3000, 76), -1),   /* sums by a block per row */
  };
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
    tc_tensor *d = dev(ps[i]);
    int64_t m = tc_size(ps[i], -1);
    for (int repl = 0; repl < 2; repl++)
      for (int64_t n = 1; n <= 7; n += 3) {
        int64_t want_n = repl || i != 0 ? n : 1;   /* row 1 has one weight */
        if (!repl && want_n > m)
          continue;
        tc_tensor *want = tc_multinomial(ps[i], want_n, repl, 80 + n);
        tc_tensor *got = tc_multinomial(d, want_n, repl, 80 + n);
        if (!got)
          fail_msg("case %zu: %s", i, tc_last_error());
        assert_string_equal(tc_device(got), "cuda");
        assert_same_bits(want, got);
      }
  }
  tc_scope_end(mark);
}

/* argmax and argmin on the device give the CPU's indices: the first best
** value, a NaN before any number, -0 and +0 equal; over either dim, kept
** or not, strided, in every dtype that has an order */
static void test_argbest_equals_cpu(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  float v[24] = { 1, 3, 3, -2, 0, 5,          /* ties: the first */
                  2, NAN, 9, NAN, 1, 0,       /* the first NaN */
                  -0.0f, 0, -1, -1, 4, 4,     /* zeros, ties at the end */
                  7, 6, 5, 4, 3, NAN };       /* NaN last */
  tc_tensor *x = tc_from_data(TC_F32, TC_SHAPE(4, 6), v, sizeof v);
  tc_tensor *xs[] = {
    x, tc_transpose(x, 0, 1), randn(9, 33, 28), tc_cast(x, TC_F64),
    tc_cast(x, TC_F16), tc_cast(tc_round(tc_mul_scalar(randn(5, 40, 29), 3)),
                                TC_I32),
    tc_cast(tc_round(randn(3, 7, 30)), TC_I64),
    tc_gt_scalar(randn(4, 9, 31), 0),
  };
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
    tc_tensor *d = dev(xs[i]);
    for (int dim = -1; dim <= 1; dim++)
      for (int keep = 0; keep < 2; keep++) {
        tc_tensor *got = tc_argmax(d, dim, keep);
        if (!got)
          fail_msg("argmax of case %zu: %s", i, tc_last_error());
        assert_int_equal(tc_ndim(got), keep ? 2 : 1);
        assert_same_bits(tc_argmax(xs[i], dim, keep), got);
        assert_same_bits(tc_argmin(xs[i], dim, keep),
                         tc_argmin(d, dim, keep));
      }
  }
  tc_tensor *s = tc_full(TC_F32, 0, NULL, 2.5);   /* 0-d: index 0 */
  assert_same_bits(tc_argmax(s, 0, true), tc_argmax(dev(s), 0, true));
  /* greedy decoding's step: the argmax of softmax'd logits */
  tc_tensor *logits = randn(1, 500, 32);
  assert_same_bits(tc_argmax(tc_softmax(logits, -1), -1, false),
                   tc_argmax(tc_softmax(dev(logits), -1), -1, false));
  tc_scope_end(mark);
}

/* backward over CUDA tensors gives the CPU's gradients bit for bit (the
** seed and autograd's zeros are made on the loss's device) */
static void test_autograd_on_cuda(void **state)
{
  (void)state;
  size_t mark = tc_scope_begin();
  tc_tensor *h = randn(4, 33, 16);
  tc_tensor *d = tc_to(h, "cuda");
  tc_tensor *grads[2];
  tc_tensor *xs[2] = { h, d };
  for (int i = 0; i < 2; i++) {
    assert_int_equal(tc_set_requires_grad(xs[i], true), 0);
    tc_tensor *y = tc_sum_all(tc_mul(tc_softmax(tc_tanh(xs[i]), 1),
                                     tc_slice(xs[i], 1, 0, 33, 1)));
    assert_non_null(y);
    if (tc_backward(y) != 0)
      fail_msg("%s", tc_last_error());
    grads[i] = tc_grad(xs[i]);
    assert_non_null(grads[i]);
  }
  assert_same_bits(grads[0], grads[1]);
  /* a 0-d CPU tensor is a scalar on any device */
  tc_tensor *two = tc_full(TC_F32, 0, NULL, 2.0);
  tc_tensor *hm = tc_mul(h, two), *dm = tc_mul(d, two);
  if (!dm)
    fail_msg("%s", tc_last_error());
  assert_same_bits(hm, dm);
  /* with "cuda" the default, autograd's own constants follow the loss */
  assert_int_equal(tc_set_default_device("cuda"), 0);
  tc_tensor *c = tc_to(randn(3, 5, 17), "cpu");   /* made on the device */
  assert_int_equal(tc_set_requires_grad(c, true), 0);
  tc_tensor *y = tc_sum_all(tc_max(tc_mul(c, c), 1, false));
  int rc = tc_backward(y);
  assert_int_equal(tc_set_default_device("cpu"), 0);
  if (rc != 0)
    fail_msg("%s", tc_last_error());
  assert_non_null(tc_data(tc_grad(c)));   /* on the CPU */
  tc_scope_end(mark);
}

/* -- Without a device ------------------------------------------------------------------ */

static void test_no_device(void **state)
{
  (void)state;
  assert_false(tc_cuda_available());
  tc_tensor *h = tc_ones(TC_F32, TC_SHAPE(4));
  assert_null(tc_to(h, "cuda"));
  const char *e = tc_last_error();
  assert_non_null(e);
  assert_true(strncmp(e, "tc_to: CUDA is not available: ", 30) == 0);
  if (strcmp(mode(), "stub") == 0)
    assert_non_null(strstr(e, "stub library"));
  else
    assert_non_null(strstr(e, "no CUDA driver"));
  assert_int_equal(tc_set_default_device("cuda"), -1);
  assert_string_equal(tc_default_device(), "cpu");
  tc_tensor *c = tc_to(h, "cpu");   /* the CPU is always there */
  assert_non_null(c);
  tc_release(c);
  tc_release(h);
}

int main(void)
{
  if (strcmp(mode(), "fake") != 0 && strcmp(mode(), "real") != 0) {
    const struct CMUnitTest none[] = { cmocka_unit_test(test_no_device) };
    return cmocka_run_group_tests(none, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_device_available),
    cmocka_unit_test(test_to_round_trip_every_dtype),
    cmocka_unit_test(test_to_views_and_item),
    cmocka_unit_test(test_data_on_cuda_is_an_error),
    cmocka_unit_test(test_print_on_cuda),
    cmocka_unit_test(test_save_from_cuda),
    cmocka_unit_test(test_allocator_reuses_blocks),
    cmocka_unit_test(test_default_device),
    cmocka_unit_test(test_driver_errors_carry_its_string),
    cmocka_unit_test(test_pointwise_equals_cpu),
    cmocka_unit_test(test_kernels_compile_once),
    cmocka_unit_test(test_reductions_equal_cpu),
    cmocka_unit_test(test_split_reductions_equal_cpu),
    cmocka_unit_test(test_composites_equal_cpu),
    cmocka_unit_test(test_matmul_through_cublas),
    cmocka_unit_test(test_inplace_equals_cpu),
    cmocka_unit_test(test_join_and_gather_equal_cpu),
    cmocka_unit_test(test_autograd_on_cuda),
    cmocka_unit_test(test_mixed_devices_are_an_error),
    cmocka_unit_test(test_argbest_equals_cpu),
    cmocka_unit_test(test_scan_and_scatter_equal_cpu),
    cmocka_unit_test(test_topk_equals_cpu),
    cmocka_unit_test(test_topk_long_rows),
    cmocka_unit_test(test_gpt_trains_on_cuda),
    cmocka_unit_test(test_llama_decodes_on_cuda),
    cmocka_unit_test(test_multinomial_equals_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
