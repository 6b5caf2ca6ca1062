/*
** test_cuda.c -- the CUDA backend without a GPU: device probing and its
** errors, and hand-built kernels whose CUDA C runs on the host (hostexec.h)
** under several launch configurations, each result checked against an
** independent reference: approx.h's functions called directly, eager's
** canonical sums (eager_sum_f32/f64, eager_max_f32), and values worked out
** by hand. NVRTC must accept every kernel here, and ptxas must make the
** same machine code from NVRTC's PTX, when the toolkit is present.
*/
#include <dlfcn.h>
#include <fenv.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostexec.h"
#include "hostrun.h"
#include "../../include/tc.h"
#include "../../src/eager/eager.h"
#include "../../src/jit_cuda/jit_cuda.h"
#include "../../src/tensor/approx.h"
#include "../../src/tensor/half.h"

#define B(g, b) { .grid = g, .block = b }
static const hx_config configs[] = {
  B(1, 16), B(2, 32), B(3, 64), B(1, 256), B(5, 1024),
};
#define NCONFIGS (int)(sizeof configs / sizeof configs[0])

static bool same_bits_f32(float a, float b) { return memcmp(&a, &b, 4) == 0; }
static bool same_bits_f64(double a, double b) { return memcmp(&a, &b, 8) == 0; }

static kir_kernel *new_kernel(kir_kind kind, int ndim)
{
  kir_kernel *k = calloc(1, sizeof *k);
  assert_non_null(k);
  k->kind = (uint8_t)kind;
  k->ndim = ndim;
  return k;
}

static int add_buf(kir_kernel *k, kir_buf_role role, tc_dtype dt,
                   const int64_t *strides)
{
  int b = k->nbufs++;
  k->buf[b].role = (uint8_t)role;
  k->buf[b].dtype = (uint8_t)dt;
  for (int d = 0; d <= k->ndim; d++)
    k->buf[b].stride[d] = strides[d];
  return b;
}

static void add_pass(kir_kernel *k, kir_pass_kind kind, kir_red red, int out,
                     int value)
{
  k->pass[k->npasses++] = (kir_pass){ (uint8_t)kind, (uint8_t)red,
                                      (int16_t)out, value, -1 };
}

/* Run k under every configuration; before each, fill(ctx) resets the
** outputs; after each, check(ctx) asserts them. */
static void run_all(const kir_kernel *k, char *const *bufs,
                    const double *scalars, const int64_t *dims,
                    void (*fill)(void *), void (*check)(void *), void *ctx)
{
  int64_t units = kir_units(k);
  for (int c = 0; c < NCONFIGS; c++) {
    char why[200] = "";
    fill(ctx);
    int rc = hx_run(k, bufs, scalars, dims, 0, units, configs[c], why,
                    sizeof why);
    if (rc != 0)
      fail_msg("host run (grid %u, block %u): %s", configs[c].grid,
               configs[c].block, why);
    check(ctx);
  }
}

static void nvrtc_accepts(const kir_kernel *k)
{
  char why[200] = "";
  /* NVRTC's cubin, and here also ptxas on NVRTC's PTX, which must make
  ** the same machine code: so the other tests' cubin check (hx_nvrtc) is
  ** ptxas's too */
  int rc = hx_ptxas_agrees(k, why, sizeof why);
  if (rc == 1)   /* no ptxas */
    rc = hx_nvrtc(k, why, sizeof why);
  if (rc < 0)
    fail_msg("NVRTC or ptxas: %s", why);
}

/* -- The device ------------------------------------------------------------- */

static void test_no_device_is_a_clear_error(void **state)
{
  (void)state;
  if (tc_cuda_available())
    skip();   /* a machine with a GPU: nothing to check here */
  const char *why = jcuda_device_reason();
  assert_non_null(why);
  tc_tensor *t = tc_zeros(TC_F32, TC_SHAPE(2, 3));
  assert_null(tc_to(t, "cuda"));
  const char *msg = tc_last_error();
  assert_non_null(msg);
  char want[400];
  snprintf(want, sizeof want, "tc_to: CUDA is not available: %s", why);
  assert_string_equal(msg, want);
  /* the reason names what is missing */
  assert_true(strstr(why, "driver") || strstr(why, "device"));
  /* CPU work is unaffected */
  tc_tensor *u = tc_to(t, "cpu");
  assert_non_null(u);
  tc_release(u);
  tc_release(t);
}

/* The toolkit's stub libcuda.so (for linking only) found as libcuda.so.1:
** "no device", saying so. Run in a child whose loader path holds it. */
#define STUB_LIB "/usr/local/cuda/lib64/stubs/libcuda.so"

static void test_stub_library_is_no_device(void **state)
{
  (void)state;
  if (access(STUB_LIB, R_OK) != 0)
    skip();
  char dir[] = "/tmp/tc-cuda-stub-XXXXXX", link[64], self[512], cmd[1200];
  assert_non_null(mkdtemp(dir));
  snprintf(link, sizeof link, "%s/libcuda.so.1", dir);
  assert_int_equal(symlink(STUB_LIB, link), 0);
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = 0;
  snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s' '%s' --probe", dir, self);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[400] = "";
  char *got = fgets(line, sizeof line, p);
  int rc = pclose(p);
  unlink(link);
  rmdir(dir);
  assert_non_null(got);
  assert_int_equal(rc, 0);
  assert_string_equal(line, "unavailable: the CUDA driver is the toolkit's "
                            "stub library (no NVIDIA driver installed)\n");
}

/* The path of the mapped file whose name contains `part`, from
** /proc/self/maps. */
static bool mapped_path(const char *part, char *out, size_t len)
{
  FILE *f = fopen("/proc/self/maps", "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) {
    char *path = strchr(line, '/');
    if (path && strstr(path, part)) {
      path[strcspn(path, "\n")] = 0;
      found = snprintf(out, len, "%s", path) < (int)len;
    }
  }
  if (f)
    fclose(f);
  return found;
}

/* A toolkit library that is not on the loader's path (a toolkit installed
** without an ld.so.conf entry) is found in $CUDA_HOME/lib64, then in
** $CUDA_PATH/lib64; the first soname that opens wins. libm stands in for
** the library, under a soname nothing else has. */
static void test_toolkit_lib_from_cuda_home(void **state)
{
  (void)state;
  char libm[512], dir[] = "/tmp/tc-cuda-home-XXXXXX", sub[64], link[128];
  assert_true(mapped_path("libm.so", libm, sizeof libm));
  assert_non_null(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/lib64", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(link, sizeof link, "%s/libtc-toolkit-probe.so.9", sub);
  assert_int_equal(symlink(libm, link), 0);
  const char *names[] = { "libtc-no-such-library.so.1",
                          "libtc-toolkit-probe.so.9" };
  char *home = getenv("CUDA_HOME"), *path = getenv("CUDA_PATH");
  home = home ? strdup(home) : NULL;
  path = path ? strdup(path) : NULL;
  unsetenv("CUDA_HOME");
  unsetenv("CUDA_PATH");
  void *none = jcuda_open_toolkit_lib(names, 2);
  setenv("CUDA_HOME", dir, 1);
  void *by_home = jcuda_open_toolkit_lib(names, 2);
  setenv("CUDA_HOME", "", 1);
  setenv("CUDA_PATH", dir, 1);
  void *by_path = jcuda_open_toolkit_lib(names, 2);
  void *first = jcuda_open_toolkit_lib(names + 1, 1);
  home ? setenv("CUDA_HOME", home, 1) : unsetenv("CUDA_HOME");
  path ? setenv("CUDA_PATH", path, 1) : unsetenv("CUDA_PATH");
  free(home);
  free(path);
  unlink(link);
  rmdir(sub);
  rmdir(dir);
  assert_null(none);
  assert_non_null(by_home);
  assert_non_null(dlsym(by_home, "cos"));   /* it is libm */
  assert_ptr_equal(by_path, by_home);
  assert_ptr_equal(first, by_home);
  dlclose(by_home);
  dlclose(by_path);
  dlclose(first);
}

/* -- MAP: pointwise math, broadcasting, scalars, dynamic shapes ------------- */

typedef struct {
  float a[6][7], b[7], out[6][7];
  double s;
} map_case;

static void map_fill(void *p)
{
  map_case *m = p;
  memset(m->out, 0xff, sizeof m->out);
}

static void map_check(void *p)
{
  map_case *m = p;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 7; j++) {
      float e = approx_exp_f32(m->a[i][j]) * m->b[j];
      float want = approx_tanh_f32(e + (float)m->s);
      if (!same_bits_f32(m->out[i][j], want))
        fail_msg("[%d][%d]: %a, want %a", i, j, (double)m->out[i][j],
                 (double)want);
    }
}

/* out = tanh(exp(a) * b + s), b broadcast along rows */
static kir_kernel *map_kernel(bool dynamic)
{
  kir_kernel *k = new_kernel(KIR_MAP, 2);
  k->dynamic = dynamic;
  k->size[0] = 6;
  k->size[1] = 7;
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 7, 1, 0 });
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 0, 1, 0 });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 7, 1, 0 });
  k->nscalars = 1;
  int a = kir_load(k, 0), b = kir_load(k, 1);
  int e = kir_emit(k, KOP_EXP, TC_F32, a, -1, -1);
  int m = kir_emit(k, KOP_MUL, TC_F32, e, b, -1);
  int s = kir_scalar(k, TC_F32, 0);
  int t = kir_emit(k, KOP_TANH, TC_F32, kir_emit(k, KOP_ADD, TC_F32, m, s,
                                                 -1), -1, -1);
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 2, t);
  return k;
}

static void test_map_matches_approx(void **state)
{
  (void)state;
  map_case m;
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 7; j++)
      m.a[i][j] = (float)(i * 7 + j) * 0.173f - 3.9f;
  for (int j = 0; j < 7; j++)
    m.b[j] = 0.5f - (float)j * 0.31f;
  m.s = 0.1;
  for (int dyn = 0; dyn < 2; dyn++) {
    kir_kernel *k = map_kernel(dyn);
    int64_t dims[32];
    assert_true(kir_dyn_len(k) <= 32);
    kir_dyn_fill(k, dims);
    char *bufs[] = { (char *)m.a, (char *)m.b, (char *)m.out };
    run_all(k, bufs, &m.s, dyn ? dims : NULL, map_fill, map_check, &m);
    nvrtc_accepts(k);
    free(k);
  }
}

/* -- MAP, 4 points a thread where buffers allow ------------------------------ */

/* A [VR, VC] space whose last dim is a multiple of 4, so render.c's vector
** loop applies: contiguous f32 and f16 inputs (vector loads), a per-row f64
** and i64 (stride 0 along the last dim: one element per group), a gathered
** f32 table (each point's own element), and f32, bool, f16 outputs (vector
** stores). Each run names a range and may shift a base off its alignment:
** either stops the vector loop for some or all points, and every point
** must come out the same. */
#define VR 5
#define VC 12
#define VT 3

typedef struct {
  _Alignas(16) float a[VR * VC + 1];
  _Alignas(16) uint16_t h[VR * VC + 1];
  double r[VR];
  int64_t idx[VR];
  float table[VT][VC];
  _Alignas(16) float out[VR * VC + 1];
  _Alignas(16) uint8_t gt[VR * VC + 1];
  _Alignas(16) uint16_t hout[VR * VC + 1];
  int shift;            /* 1: a, h and out start one element in */
  int64_t cols, lo, hi;
} vec_case;

static void vec_fill(void *p)
{
  vec_case *c = p;
  memset(c->out, 0xff, sizeof c->out);
  memset(c->gt, 0x55, sizeof c->gt);
  memset(c->hout, 0x77, sizeof c->hout);
}

static void vec_check(void *p)
{
  vec_case *c = p;
  int64_t units = VR * c->cols;
  for (int64_t u = 0; u < units; u++) {
    int64_t i = u / c->cols, j = u % c->cols, at = u + c->shift;
    float wout, got = c->out[at];
    uint8_t wgt, ggt = c->gt[at];
    uint16_t wh, gh = c->hout[at];
    if (u >= c->lo && u < c->hi) {   /* a * r + h + table[idx][j] */
      float m = c->a[at] * (float)c->r[i];
      float s = m + half_f32_from_f16(c->h[at]);
      wout = s + c->table[c->idx[i]][j];
      wgt = c->a[at] > 0.0f;
      wh = half_f16_from_f32(wout);
    } else {   /* outside the range: untouched */
      memset(&wout, 0xff, sizeof wout);
      wgt = 0x55;
      wh = 0x7777;
    }
    if (!same_bits_f32(got, wout) || ggt != wgt || gh != wh)
      fail_msg("cols %lld shift %d range [%lld, %lld) point %lld: %a %u "
               "%04x, want %a %u %04x", (long long)c->cols, c->shift,
               (long long)c->lo, (long long)c->hi, (long long)u, (double)got,
               ggt, gh, (double)wout, wgt, wh);
  }
}

static kir_kernel *vec_kernel(int64_t cols, bool dynamic)
{
  kir_kernel *k = new_kernel(KIR_MAP, 2);
  k->dynamic = dynamic;
  k->size[0] = VR;
  k->size[1] = cols;
  int a = add_buf(k, KIR_IN, TC_F32, (int64_t[]){ cols, 1, 0 });
  int r = add_buf(k, KIR_IN, TC_F64, (int64_t[]){ 1, 0, 0 });
  int h = add_buf(k, KIR_IN, TC_F16, (int64_t[]){ cols, 1, 0 });
  int idx = add_buf(k, KIR_IN, TC_I64, (int64_t[]){ 1, 0, 0 });
  int t = add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 0, 1, 0 });
  k->buf[t].gather = true;
  k->buf[t].gstride = VC;
  k->buf[t].gsize = VT;
  int out = add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ cols, 1, 0 });
  int gt = add_buf(k, KIR_OUT, TC_BOOL, (int64_t[]){ cols, 1, 0 });
  int hout = add_buf(k, KIR_OUT, TC_F16, (int64_t[]){ cols, 1, 0 });
  int va = kir_load(k, a);
  int m = kir_emit(k, KOP_MUL, TC_F32, va,
                   kir_cast(k, TC_F32, kir_load(k, r)), -1);
  int s = kir_emit(k, KOP_ADD, TC_F32, m, kir_load(k, h), -1);
  int v = kir_emit(k, KOP_ADD, TC_F32, s,
                   kir_gather(k, t, kir_load(k, idx)), -1);
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, out, v);
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, gt,
           kir_emit(k, KOP_GT, TC_BOOL, va, kir_const(k, TC_F32, 0), -1));
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, hout, v);
  return k;
}

static void test_map_vector_loop(void **state)
{
  (void)state;
  vec_case *c = calloc(1, sizeof *c);
  assert_non_null(c);
  for (int u = 0; u < VR * VC + 1; u++) {
    c->a[u] = (float)(u % 23) * 0.37f - 3.1f;
    c->h[u] = half_f16_from_f32((float)(u % 11) * 0.71f - 2.0f);
  }
  for (int i = 0; i < VR; i++) {
    c->r[i] = 0.3 + 0.77 * i;
    c->idx[i] = (i * 2) % VT;
  }
  for (int i = 0; i < VT; i++)
    for (int j = 0; j < VC; j++)
      c->table[i][j] = (float)(i * VC + j) * 0.013f;
  /* 4 points a thread only where the last dim is a multiple of 4 */
  kir_kernel *k12 = vec_kernel(12, false), *k10 = vec_kernel(10, false);
  assert_int_equal(jcuda_map_points_per_thread(k12), 4);
  assert_int_equal(jcuda_map_points_per_thread(k10), 1);
  k12->buf[0].stride[1] = 2;   /* a strided input: one point a thread */
  assert_int_equal(jcuda_map_points_per_thread(k12), 1);
  free(k12);
  free(k10);
  /* a dynamic kernel always has the loop; this call's sizes decide */
  k12 = vec_kernel(12, true);
  k10 = vec_kernel(10, true);
  assert_int_equal(jcuda_map_points_per_thread(k12), 4);
  assert_int_equal(jcuda_map_points_per_thread(k10), 1);
  char why[200] = "", *src = jcuda_render(k10, why, sizeof why);
  assert_non_null(src);
  assert_non_null(strstr(src, "tck_vec_float"));
  free(src);
  free(k10);
  k10 = vec_kernel(10, false);   /* a static one only where it runs */
  assert_non_null(src = jcuda_render(k10, why, sizeof why));
  assert_null(strstr(src, "tck_vec_float"));
  free(src);
  free(k12);
  free(k10);
  static const int64_t cols[] = { 12, 10 };
  for (int ci = 0; ci < 2; ci++)
    for (int dyn = 0; dyn < 2; dyn++) {
      kir_kernel *k = vec_kernel(cols[ci], dyn);
      int64_t dims[32], units = VR * cols[ci];
      assert_true(kir_dyn_len(k) <= 32);
      kir_dyn_fill(k, dims);
      const int64_t ranges[][2] = { { 0, units }, { 1, units - 2 },
                                    { 4, units - 3 }, { 8, 8 } };
      for (int ri = 0; ri < 4; ri++)
        for (c->shift = 0; c->shift < 2; c->shift++) {
          c->cols = cols[ci];
          c->lo = ranges[ri][0];
          c->hi = ranges[ri][1];
          char *bufs[] = { (char *)(c->a + c->shift), (char *)c->r,
                           (char *)(c->h + c->shift), (char *)c->idx,
                           (char *)c->table, (char *)(c->out + c->shift),
                           (char *)(c->gt + c->shift),
                           (char *)(c->hout + c->shift) };
          for (int g = 0; g < NCONFIGS; g++) {
            char why[200] = "";
            vec_fill(c);
            if (hx_run(k, bufs, NULL, dyn ? dims : NULL, c->lo, c->hi,
                       configs[g], why, sizeof why) != 0)
              fail_msg("host run: %s", why);
            vec_check(c);
          }
        }
      nvrtc_accepts(k);
      free(k);
    }
  free(c);
}

/* -- Integer semantics: wrap-around, saturating casts ------------------------ */

typedef struct {
  float f[8];
  int32_t x[8], cast[8], sum[8];
  uint8_t nz[8];
} int_case;

static void int_fill(void *p)
{
  int_case *c = p;
  memset(c->cast, 0x55, sizeof c->cast);
  memset(c->sum, 0x55, sizeof c->sum);
  memset(c->nz, 0x55, sizeof c->nz);
}

static void int_check(void *p)
{
  int_case *c = p;
  /* eager_convert's rules, worked out by hand */
  static const int32_t want_cast[8] = {
    0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, -2, 2, 0,
  };
  static const uint8_t want_nz[8] = { 1, 1, 1, 1, 1, 1, 1, 0 };
  for (int i = 0; i < 8; i++) {
    assert_int_equal(c->cast[i], want_cast[i]);
    assert_int_equal(c->nz[i], want_nz[i]);
    /* x + 1 wraps (two's complement), as PyTorch's integers do */
    int32_t want = (int32_t)((uint32_t)c->x[i] + 1u);
    assert_int_equal(c->sum[i], want);
  }
}

static void test_integer_semantics(void **state)
{
  (void)state;
  int_case c = {
    .f = { NAN, INFINITY, -INFINITY, 3e9f, -3e9f, -2.5f, 2.75f, 0.0f },
    .x = { INT32_MAX, -1, 0, 5, INT32_MIN, 7, -8, 100 },
  };
  kir_kernel *k = new_kernel(KIR_MAP, 1);
  k->size[0] = 8;
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 1, 0 });
  add_buf(k, KIR_IN, TC_I32, (int64_t[]){ 1, 0 });
  add_buf(k, KIR_OUT, TC_I32, (int64_t[]){ 1, 0 });
  add_buf(k, KIR_OUT, TC_I32, (int64_t[]){ 1, 0 });
  add_buf(k, KIR_OUT, TC_BOOL, (int64_t[]){ 1, 0 });
  int f = kir_load(k, 0), x = kir_load(k, 1);
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 2, kir_cast(k, TC_I32, f));
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 3,
           kir_emit(k, KOP_ADD, TC_I32, x, kir_const(k, TC_I32, 1), -1));
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 4, f);   /* f32 -> bool */
  char *bufs[] = { (char *)c.f, (char *)c.x, (char *)c.cast, (char *)c.sum,
                   (char *)c.nz };
  run_all(k, bufs, NULL, NULL, int_fill, int_check, &c);
  nvrtc_accepts(k);
  free(k);
}

/* -- ROWS: the canonical reduction order ------------------------------------ */

/* Row lengths around the chunk and round boundaries: empty, one lane, one
** chunk, one past it, an odd number of chunks, more chunks than any block
** has rounds for. */
static const int64_t row_lens[] = { 0, 1, 17, 4096, 4097, 3 * 4096 + 5,
                                    9 * 4096 + 3, 37 * 4096 + 1 };
#define NROWLENS (int)(sizeof row_lens / sizeof row_lens[0])

typedef struct {
  int64_t n;
  float *x;
  double *xd;
  float sum, max, *soft;
  double sumd;
} row_case;

static void row_fill(void *p)
{
  row_case *r = p;
  r->sum = r->max = -1.0f;
  r->sumd = -1.0;
  for (int64_t i = 0; i < r->n; i++)
    r->soft[i] = -1.0f;
}

static void row_check(void *p)
{
  row_case *r = p;
  float want = eager_sum_f32(r->x, r->n);
  float wmax = eager_max_f32(r->x, r->n);
  double wantd = eager_sum_f64(r->xd, r->n);
  if (!same_bits_f32(r->sum, want))
    fail_msg("n %lld: sum %a, canonical %a", (long long)r->n, (double)r->sum,
             (double)want);
  if (!same_bits_f32(r->max, wmax))
    fail_msg("n %lld: max %a, canonical %a", (long long)r->n, (double)r->max,
             (double)wmax);
  if (!same_bits_f64(r->sumd, wantd))
    fail_msg("n %lld: f64 sum %a, canonical %a", (long long)r->n, r->sumd,
             wantd);
  /* x / sum at each position: a STORE pass reading the row value */
  for (int64_t i = 0; i < r->n; i++)
    if (!same_bits_f32(r->soft[i], r->x[i] / want))
      fail_msg("n %lld: [%lld] %a, want %a", (long long)r->n, (long long)i,
               (double)r->soft[i], (double)(r->x[i] / want));
}

/* One row of n: sum, max (with a NaN-free input), f64 sum, x / sum. */
static kir_kernel *row_kernel(int64_t n, bool dynamic)
{
  kir_kernel *k = new_kernel(KIR_ROWS, 0);
  k->dynamic = dynamic;
  k->row_len = n;
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 1 });
  add_buf(k, KIR_IN, TC_F64, (int64_t[]){ 1 });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 0 });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 0 });
  add_buf(k, KIR_OUT, TC_F64, (int64_t[]){ 0 });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 1 });
  int x = kir_load(k, 0), xd = kir_load(k, 1);
  add_pass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, x);
  add_pass(k, KIR_PASS_REDUCE, KIR_RED_MAX, -1, x);
  add_pass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, xd);
  int s = kir_rowvar(k, 0);
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 2, s);
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 3, kir_rowvar(k, 1));
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 4, kir_rowvar(k, 2));
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 5,
           kir_emit(k, KOP_DIV, TC_F32, kir_load(k, 0), s, -1));
  return k;
}

static void test_rows_follow_the_canonical_order(void **state)
{
  (void)state;
  for (int t = 0; t < NROWLENS; t++) {
    row_case r = { .n = row_lens[t] };
    size_t n = (size_t)(r.n ? r.n : 1);
    r.x = malloc(n * sizeof *r.x);
    r.xd = malloc(n * sizeof *r.xd);
    r.soft = malloc(n * sizeof *r.soft);
    assert_true(r.x && r.xd && r.soft);
    /* values of mixed magnitude, so a different order rounds differently */
    uint32_t seed = 12345u + (uint32_t)t;
    for (int64_t i = 0; i < r.n; i++) {
      seed = seed * 1664525u + 1013904223u;
      float v = (float)(seed >> 8) / 16777216.0f - 0.3f;
      r.x[i] = v * (i % 7 == 0 ? 1000.0f : 1.0f);
      r.xd[i] = (double)r.x[i] * 1.0000001;
    }
    for (int dyn = 0; dyn < 2; dyn++) {
      kir_kernel *k = row_kernel(r.n, dyn);
      int64_t dims[16];
      kir_dyn_fill(k, dims);
      char *bufs[] = { (char *)r.x, (char *)r.xd, (char *)&r.sum,
                       (char *)&r.max, (char *)&r.sumd, (char *)r.soft };
      run_all(k, bufs, NULL, dyn ? dims : NULL, row_fill, row_check, &r);
      if (t == NROWLENS - 1)
        nvrtc_accepts(k);
      free(k);
    }
    free(r.x);
    free(r.xd);
    free(r.soft);
  }
}

/* Many rows with strides: row r of a transposed [rows x len] matrix. */
typedef struct {
  int64_t rows, len;
  float *m, *sum;
} rows_case;

static void rows_fill(void *p)
{
  rows_case *c = p;
  for (int64_t r = 0; r < c->rows; r++)
    c->sum[r] = NAN;
}

static void rows_check(void *p)
{
  rows_case *c = p;
  float *row = malloc((size_t)c->len * sizeof *row);
  assert_non_null(row);
  for (int64_t r = 0; r < c->rows; r++) {
    for (int64_t j = 0; j < c->len; j++)
      row[j] = c->m[j * c->rows + r];
    float want = eager_sum_f32(row, c->len);
    if (!same_bits_f32(c->sum[r], want))
      fail_msg("row %lld: %a, canonical %a", (long long)r,
               (double)c->sum[r], (double)want);
  }
  free(row);
}

static void test_rows_strided(void **state)
{
  (void)state;
  rows_case c = { .rows = 5, .len = 2 * 4096 + 77 };
  c.m = malloc((size_t)(c.rows * c.len) * sizeof *c.m);
  c.sum = malloc((size_t)c.rows * sizeof *c.sum);
  assert_true(c.m && c.sum);
  for (int64_t i = 0; i < c.rows * c.len; i++)
    c.m[i] = (float)((i * 7919) % 1000) * 0.001f + (i % 3 ? 0.0f : 100.0f);
  kir_kernel *k = new_kernel(KIR_ROWS, 1);
  k->size[0] = c.rows;
  k->row_len = c.len;
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 1, c.rows });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, 0 });
  add_pass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, kir_load(k, 0));
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 1, kir_rowvar(k, 0));
  char *bufs[] = { (char *)c.m, (char *)c.sum };
  run_all(k, bufs, NULL, NULL, rows_fill, rows_check, &c);
  nvrtc_accepts(k);
  free(k);
  free(c.m);
  free(c.sum);
}

/* -- Sequential passes: a thread per row, positions in order --------------- */

typedef struct {
  int64_t rows, len, places;
  const float *x;
  const int64_t *idx;
  float *cum;          /* rows x len, row-major */
  double *acc;         /* places x rows: column r gets row r's scatter */
} seq_case;

static void seq_fill(void *ctx)
{
  seq_case *c = ctx;
  memset(c->cum, 0xff, sizeof(float) * (size_t)(c->rows * c->len));
  for (int64_t i = 0; i < c->places * c->rows; i++)
    c->acc[i] = 0.25 * (double)i;
}

/* The scan order of tensor.h, written out: segments of 256 positions, each
** summed from 0, the segments before (summed in order) added in front. */
#define SEG 256
static float scan_step(float *carry, float *run, int64_t j, float v)
{
  if (j % SEG == 0) {
    *carry += *run;
    *run = 0.0f;
  }
  *run += v;
  return *carry + *run;
}

/* The loops the passes stand for, in double where the scatter folds and in
** float, in the scan order, where the scan does. */
static void seq_check(void *ctx)
{
  seq_case *c = ctx;
  for (int64_t r = 0; r < c->rows; r++) {
    float run = 0.0f, carry = 0.0f;
    double *want = malloc(sizeof(double) * (size_t)c->places);
    for (int64_t p = 0; p < c->places; p++)
      want[p] = 0.25 * (double)(p * c->rows + r);
    for (int64_t j = 0; j < c->len; j++) {
      float v = c->x[r * c->len + j];
      float w = scan_step(&carry, &run, j, v);
      if (!same_bits_f32(c->cum[r * c->len + j], w))
        fail_msg("scan row %lld at %lld: %a, want %a", (long long)r,
                 (long long)j, (double)c->cum[r * c->len + j], (double)w);
      int64_t at = c->idx[r * c->len + j];
      at = at < 0 ? 0 : at >= c->places ? c->places - 1 : at;   /* clamped */
      want[at] += (double)v;
    }
    for (int64_t p = 0; p < c->places; p++)
      if (!same_bits_f64(c->acc[p * c->rows + r], want[p]))
        fail_msg("scatter row %lld place %lld: %a, want %a", (long long)r,
                 (long long)p, c->acc[p * c->rows + r], want[p]);
    free(want);
  }
}

/* Rows of len: the scan's loads go in batches of 16, then one at a time. */
static void check_sequential(int64_t len)
{
  seq_case c = { .rows = 7, .len = len, .places = 5 };
  size_t n = (size_t)(c.rows * c.len);
  float *x = malloc(n * sizeof *x);
  int64_t *idx = malloc(n * sizeof *idx);
  c.cum = malloc(n * sizeof *c.cum);
  c.acc = malloc((size_t)(c.places * c.rows) * sizeof *c.acc);
  assert_true(x && idx && c.cum && c.acc);
  for (size_t i = 0; i < n; i++) {   /* big and small: order shows */
    x[i] = (float)((i * 7919) % 1000) * 0.001f + (i % 5 ? 0.0f : 3e7f);
    idx[i] = (int64_t)((i * 31) % 7) - 1;   /* -1 and 5: clamped */
  }
  c.x = x;
  c.idx = idx;
  kir_kernel *k = new_kernel(KIR_ROWS, 1);
  k->size[0] = c.rows;
  k->row_len = c.len;
  int bx = add_buf(k, KIR_IN, TC_F32, (int64_t[]){ c.len, 1 });
  int bc = add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ c.len, 1 });
  int bi = add_buf(k, KIR_IN, TC_I64, (int64_t[]){ c.len, 1 });
  int ba = add_buf(k, KIR_OUT, TC_F64, (int64_t[]){ 1, 0 });
  k->buf[ba].gather = true;
  k->buf[ba].gstride = c.rows;
  k->buf[ba].gsize = c.places;
  add_pass(k, KIR_PASS_SCAN, KIR_RED_SUM, bc, kir_load(k, bx));
  int v = kir_cast(k, TC_F64, kir_load(k, bx));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCATTER, KIR_RED_SUM,
                                      (int16_t)ba, v, kir_load(k, bi) };
  assert_true(kir_sequential(k));
  jcuda_launch_cfg lc;   /* a thread per row */
  jcuda_launch_config(k, 132, &lc);
  assert_false(lc.split);
  assert_int_equal(lc.block, 256);
  assert_int_equal(lc.grid, 1);
  char *bufs[] = { (char *)x, (char *)c.cum, (char *)idx, (char *)c.acc };
  run_all(k, bufs, NULL, NULL, seq_fill, seq_check, &c);
  nvrtc_accepts(k);
  free(k);
  free(x);
  free(idx);
  free(c.cum);
  free(c.acc);
}

static void test_sequential_passes(void **state)
{
  (void)state;
  static const int64_t lens[] = { 1, 15, 16, 17, 255, 256, 257, 1003 };
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    check_sequential(lens[i]);
}

/* -- Scatter batches: loads ahead, folds in order --------------------------- */

typedef struct {
  int64_t rows, len, places;
  const float *x;
  const int64_t *idx;
  float *out;          /* rows x places */
  bool self;           /* the value is x + the row's place 0 (read back) */
} sbatch_case;

static void sbatch_fill(void *ctx)
{
  sbatch_case *c = ctx;
  for (int64_t i = 0; i < c->rows * c->places; i++)
    c->out[i] = (float)i * 0.5f;
}

/* The loop a scatter stands for, in float, position by position. */
static void sbatch_check(void *ctx)
{
  sbatch_case *c = ctx;
  float *want = malloc(sizeof *want * (size_t)c->places);
  assert_non_null(want);
  for (int64_t r = 0; r < c->rows; r++) {
    for (int64_t p = 0; p < c->places; p++)
      want[p] = (float)(r * c->places + p) * 0.5f;
    for (int64_t j = 0; j < c->len; j++) {
      float v = c->x[r * c->len + j] + (c->self ? want[0] : 0.0f);
      want[c->idx[r * c->len + j]] += v;
    }
    for (int64_t p = 0; p < c->places; p++)
      if (!same_bits_f32(c->out[r * c->places + p], want[p]))
        fail_msg("scatter (%lld places, len %lld%s) row %lld place %lld: "
                 "%a, want %a", (long long)c->places, (long long)c->len,
                 c->self ? ", self" : "", (long long)r, (long long)p,
                 (double)c->out[r * c->places + p], (double)want[p]);
  }
  free(want);
}

/* f32 folds, where every order but the loop's rounds otherwise: rows
** whose places repeat inside a batch of 16 (one place, three, runs of the
** same place) and across batches, rows shorter than a batch and with a
** tail; and a value that reads the element it folds into, which must go
** one position at a time. Static and dynamic. */
static void test_scatter_batches(void **state)
{
  (void)state;
  static const int64_t lens[] = { 5, 16, 33, 1000 };
  static const int64_t places[] = { 1, 3, 40 };
  for (int self = 0; self < 2; self++)
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
      for (size_t pi = 0; pi < sizeof places / sizeof *places; pi++)
        for (int dyn = 0; dyn < 2; dyn++) {
          sbatch_case c = { .rows = 3, .len = lens[li],
                            .places = places[pi], .self = self };
          size_t n = (size_t)(c.rows * c.len);
          float *x = malloc(n * sizeof *x);
          int64_t *idx = malloc(n * sizeof *idx);
          c.out = malloc(sizeof *c.out * (size_t)(c.rows * c.places));
          assert_true(x && idx && c.out);
          for (size_t i = 0; i < n; i++) {
            x[i] = i % 7 ? (float)((i * 7919) % 1000) * 1e-3f : 4e6f;
            idx[i] = (int64_t)((i / 3 + i * i) % (size_t)c.places);
          }
          c.x = x;
          c.idx = idx;
          kir_kernel *k = new_kernel(KIR_ROWS, 1);
          k->dynamic = dyn;
          k->size[0] = c.rows;
          k->row_len = c.len;
          int bx = add_buf(k, KIR_IN, TC_F32, (int64_t[]){ c.len, 1 });
          int bi = add_buf(k, KIR_IN, TC_I64, (int64_t[]){ c.len, 1 });
          int bo = add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ c.places, 0 });
          k->buf[bo].gather = true;
          k->buf[bo].gstride = 1;
          k->buf[bo].gsize = c.places;
          int v = kir_load(k, bx);
          if (self)
            v = kir_emit(k, KOP_ADD, TC_F32, v, kir_load(k, bo), -1);
          k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCATTER, KIR_RED_SUM,
                                              (int16_t)bo, v,
                                              kir_load(k, bi) };
          int64_t dims[(TC_MAX_DIMS + 1) * (KIR_MAX_BUFS + 1)];
          kir_dyn_fill(k, dims);
          char *bufs[] = { (char *)x, (char *)idx, (char *)c.out };
          run_all(k, bufs, NULL, dyn ? dims : NULL, sbatch_fill,
                  sbatch_check, &c);
          if (li == 2 && pi == 1)
            nvrtc_accepts(k);
          free(k);
          free(x);
          free(idx);
          free(c.out);
        }
}

/* -- The parallel scan: a block per row, segments side by side ------------- */

typedef struct {
  int64_t rows, len;
  const float *x;      /* len x rows: row r is column r */
  uint16_t *cum;       /* rows x len, f16 bits */
  double *cumd;        /* rows x len */
} pscan_case;

static void pscan_fill(void *ctx)
{
  pscan_case *c = ctx;
  memset(c->cum, 0xff, sizeof *c->cum * (size_t)(c->rows * c->len));
  memset(c->cumd, 0xff, sizeof *c->cumd * (size_t)(c->rows * c->len));
}

/* f32 sums in the scan order, stored as f16; the same of 2x in double. */
static void pscan_check(void *ctx)
{
  pscan_case *c = ctx;
  for (int64_t r = 0; r < c->rows; r++) {
    float run = 0.0f, carry = 0.0f;
    double rund = 0.0, carryd = 0.0;
    for (int64_t j = 0; j < c->len; j++) {
      float v = c->x[j * c->rows + r];
      float w = scan_step(&carry, &run, j, v);
      if (j % SEG == 0) {
        carryd += rund;
        rund = 0.0;
      }
      rund += 2.0 * (double)v;
      uint16_t h = half_f16_from_f32(w);
      if (c->cum[r * c->len + j] != h)
        fail_msg("f16 scan row %lld at %lld: %#x, want %#x", (long long)r,
                 (long long)j, c->cum[r * c->len + j], h);
      if (!same_bits_f64(c->cumd[r * c->len + j], carryd + rund))
        fail_msg("f64 scan row %lld at %lld: %a, want %a", (long long)r,
                 (long long)j, c->cumd[r * c->len + j], carryd + rund);
    }
  }
}

/* Two SCAN passes over strided rows: rows of one segment and less run a
** thread per row; longer ones a block per row (more segments than a
** block's threads in the longest: several rounds of carries), the same
** bits under every launch configuration, static and dynamic. */
static void test_parallel_scan(void **state)
{
  (void)state;
  static const int64_t lens[] = { 100, 257, 600, 32 * 256 + 5, 70000 };
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
    for (int dyn = 0; dyn < 2; dyn++) {
      pscan_case c = { .rows = i % 2 ? 3 : 1, .len = lens[i] };
      size_t n = (size_t)(c.rows * c.len);
      float *x = malloc(n * sizeof *x);
      c.cum = malloc(n * sizeof *c.cum);
      c.cumd = malloc(n * sizeof *c.cumd);
      assert_true(x && c.cum && c.cumd);
      for (size_t j = 0; j < n; j++)   /* small values and big: order shows */
        x[j] = (float)((j * 7919) % 1000) * 1e-4f + (j % 9 ? 0.0f : 5.0f);
      c.x = x;
      kir_kernel *k = new_kernel(KIR_ROWS, 1);
      k->dynamic = dyn;
      k->size[0] = c.rows;
      k->row_len = c.len;
      int bx = add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 1, c.rows });
      int bh = add_buf(k, KIR_OUT, TC_F16, (int64_t[]){ c.len, 1 });
      int bd = add_buf(k, KIR_OUT, TC_F64, (int64_t[]){ c.len, 1 });
      add_pass(k, KIR_PASS_SCAN, KIR_RED_SUM, bh, kir_load(k, bx));
      int twice = kir_emit(k, KOP_MUL, TC_F64, kir_cast(k, TC_F64,
                                                       kir_load(k, bx)),
                           kir_const(k, TC_F64, 2.0), -1);
      add_pass(k, KIR_PASS_SCAN, KIR_RED_SUM, bd, twice);
      assert_true(jcuda_scan_parallel(k));
      jcuda_launch_cfg lc;
      jcuda_launch_config(k, 132, &lc);
      int64_t nseg = (c.len + SEG - 1) / SEG;
      unsigned want_block = c.len <= SEG ? 256 : 32;   /* then sized */
      while (c.len > SEG && want_block < 256 && (int64_t)want_block < nseg)
        want_block *= 2;
      assert_int_equal(lc.block, want_block);
      assert_int_equal(lc.grid, c.len <= SEG ? 1 : c.rows);
      int64_t dims[(TC_MAX_DIMS + 1) * (KIR_MAX_BUFS + 1)];
      kir_dyn_fill(k, dims);
      char *bufs[] = { (char *)x, (char *)c.cum, (char *)c.cumd };
      run_all(k, bufs, NULL, dyn ? dims : NULL, pscan_fill, pscan_check, &c);
      if (i == 2)
        nvrtc_accepts(k);
      free(k);
      free(x);
      free(c.cum);
      free(c.cumd);
    }
}

/* -- Split reductions: phases across blocks, the same canonical order ------- */

#define S(g, b, g2, b2) { .grid = g, .block = b, .split = true, .grid2 = g2, \
                          .block2 = b2 }
static const hx_config split_configs[] = {
  S(1, 16, 1, 16), S(3, 64, 2, 32), S(7, 256, 1, 1024), S(2, 1024, 3, 64),
  S(4, 32, 1, 16),
};
#define NSPLIT (int)(sizeof split_configs / sizeof split_configs[0])

/* Sizes around the chunk boundaries, and one of many rounds. */
static const int64_t split_lens[] = { 1, 4095, 4096, 4097, 3 * 4096 + 5,
                                      (1 << 20) + 3 };
#define NSPLITLENS (int)(sizeof split_lens / sizeof split_lens[0])

/* One row of n values of dt reduced by red (REDUCE first, then two
** STORE_ROW passes: the value and the value plus itself). */
static kir_kernel *split_kernel(tc_dtype dt, kir_red red, int64_t n,
                                bool dynamic)
{
  kir_kernel *k = new_kernel(KIR_ROWS, 0);
  k->dynamic = dynamic;
  k->row_len = n;
  add_buf(k, KIR_IN, dt, (int64_t[]){ 1 });
  add_buf(k, KIR_OUT, dt, (int64_t[]){ 0 });
  add_buf(k, KIR_OUT, dt, (int64_t[]){ 0 });
  add_pass(k, KIR_PASS_REDUCE, red, -1, kir_load(k, 0));
  int v = kir_rowvar(k, 0);
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 1, v);
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 2,
           kir_emit(k, KOP_ADD, dt, v, v, -1));
  return k;
}

/* eager's result (the CPU kernels) for red over data: its bytes */
static void eager_reduce(tc_dtype dt, kir_red red, const void *data,
                         int64_t n, void *out)
{
  size_t esz = tc_dtype_size(dt);
  tc_tensor *t = tc_from_data(dt, TC_SHAPE(n), data, (size_t)n * esz);
  assert_non_null(t);
  tc_tensor *r = red == KIR_RED_SUM ? tc_sum_all(t)
                 : red == KIR_RED_MAX ? tc_max(t, 0, false)
                 : tc_min(t, 0, false);
  assert_non_null(r);
  assert_int_equal(tc_dtype_of(r), dt);
  assert_int_equal(tc_copy_to(r, out, esz), 0);
  tc_release(r);
  tc_release(t);
}

static void test_split_reductions_equal_eager(void **state)
{
  (void)state;
  static const tc_dtype dts[] = { TC_F32, TC_F64, TC_I64 };
  static const kir_red reds[] = { KIR_RED_SUM, KIR_RED_MAX, KIR_RED_MIN };
  for (int t = 0; t < NSPLITLENS; t++) {
    int64_t n = split_lens[t];
    for (int d = 0; d < 3; d++) {
      tc_dtype dt = dts[d];
      size_t esz = tc_dtype_size(dt);
      char *x = malloc((size_t)n * esz);
      assert_non_null(x);
      uint32_t seed = 777u + (uint32_t)(t * 3 + d);
      for (int64_t i = 0; i < n; i++) {   /* mixed magnitudes */
        seed = seed * 1664525u + 1013904223u;
        double v = (double)(seed >> 8) / 16777216.0 - 0.3;
        v *= i % 7 == 0 ? 1000.0 : 1.0;
        if (dt == TC_F32)
          ((float *)x)[i] = (float)v;
        else if (dt == TC_F64)
          ((double *)x)[i] = v * 1.0000001;
        else
          ((int64_t *)x)[i] =   /* sums wrap: multiply as unsigned */
              (int64_t)((uint64_t)(int64_t)(v * 1e15) * (i % 5 ? 1u : 4000u));
      }
      for (int rd = 0; rd < 3; rd++) {
        char want[8], got[8], twice[8];
        eager_reduce(dt, reds[rd], x, n, want);
        for (int dyn = 0; dyn < 2; dyn++) {
          kir_kernel *k = split_kernel(dt, reds[rd], n, dyn);
          assert_true(jcuda_splittable(k));
          int64_t dims[8];
          kir_dyn_fill(k, dims);
          char *bufs[] = { x, got, twice };
          for (int c = 0; c < NSPLIT + NCONFIGS; c++) {
            hx_config cfg = c < NSPLIT ? split_configs[c]
                                       : configs[c - NSPLIT];
            char why[200] = "";
            memset(got, 0x5a, sizeof got);
            if (hx_run(k, bufs, NULL, dyn ? dims : NULL, 0, 1, cfg, why,
                       sizeof why) != 0)
              fail_msg("host run: %s", why);
            if (memcmp(got, want, esz) != 0)
              fail_msg("n %lld, %s, red %d, %s, config %d: not eager's",
                       (long long)n, tc_dtype_name(dt), (int)reds[rd],
                       dyn ? "dynamic" : "static", c);
          }
          if (t == NSPLITLENS - 1 && dyn)
            nvrtc_accepts(k);
          free(k);
        }
      }
      free(x);
    }
  }
}

/* Several long rows split at once (rows x rounds across the blocks). */
static void test_split_many_rows(void **state)
{
  (void)state;
  rows_case c = { .rows = 3, .len = 5 * 4096 + 77 };
  c.m = malloc((size_t)(c.rows * c.len) * sizeof *c.m);
  c.sum = malloc((size_t)c.rows * sizeof *c.sum);
  assert_true(c.m && c.sum);
  for (int64_t i = 0; i < c.rows * c.len; i++)
    c.m[i] = (float)((i * 7919) % 1000) * 0.001f + (i % 3 ? 0.0f : 100.0f);
  kir_kernel *k = new_kernel(KIR_ROWS, 1);
  k->size[0] = c.rows;
  k->row_len = c.len;
  add_buf(k, KIR_IN, TC_F32, (int64_t[]){ 1, c.rows });
  add_buf(k, KIR_OUT, TC_F32, (int64_t[]){ 1, 0 });
  add_pass(k, KIR_PASS_REDUCE, KIR_RED_SUM, -1, kir_load(k, 0));
  add_pass(k, KIR_PASS_STORE_ROW, KIR_RED_SUM, 1, kir_rowvar(k, 0));
  char *bufs[] = { (char *)c.m, (char *)c.sum };
  for (int s = 0; s < NSPLIT; s++) {
    char why[200] = "";
    rows_fill(&c);
    if (hx_run(k, bufs, NULL, NULL, 0, c.rows, split_configs[s], why,
               sizeof why) != 0)
      fail_msg("host run: %s", why);
    rows_check(&c);
  }
  free(k);
  free(c.m);
  free(c.sum);
}

/* What is split, and how it is launched. */
static void test_split_launch_config(void **state)
{
  (void)state;
  kir_kernel *k = split_kernel(TC_F32, KIR_RED_SUM, (1 << 20) + 3, true);
  jcuda_launch_cfg lc;
  jcuda_launch_config(k, 132, &lc);   /* an H200 */
  assert_true(lc.split);
  assert_int_equal(lc.block, 32);     /* 257 chunks: 129 rounds of 2 */
  assert_int_equal(lc.grid, 129);
  assert_int_equal(lc.block2, JCUDA_LAUNCH_THREADS);   /* not 512: registers */
  assert_int_equal(lc.grid2, 1);
  assert_int_equal(lc.scratch, 257 * 8);
  k->row_len = 4096;                  /* one chunk: a block suffices */
  jcuda_launch_config(k, 132, &lc);
  assert_false(lc.split);
  free(k);
  /* a row value needed at every position (softmax-like): never split */
  k = row_kernel(3 * 4096, true);
  assert_false(jcuda_splittable(k));
  jcuda_launch_config(k, 132, &lc);
  assert_false(lc.split);
  assert_int_equal(lc.block, 256);
  free(k);
}

/* -- What the renderer refuses ------------------------------------------------ */

static void test_render_refuses_integer_division(void **state)
{
  (void)state;
  kir_kernel *k = new_kernel(KIR_MAP, 1);
  k->size[0] = 4;
  add_buf(k, KIR_IN, TC_I32, (int64_t[]){ 1, 0 });
  add_buf(k, KIR_OUT, TC_I32, (int64_t[]){ 1, 0 });
  int x = kir_load(k, 0);
  add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 1,
           kir_emit(k, KOP_DIV, TC_I32, x, x, -1));
  char why[160] = "";
  char *src = jcuda_render(k, why, sizeof why);
  assert_null(src);
  assert_non_null(strstr(why, "DIV of i32"));
  free(k);
}

/* A kernel's text carries only the math it uses: approx.h's functions in
** the precisions its transcendentals compute in, half.h's conversions where
** a buffer is 16-bit (NVRTC parses and optimizes all it is given). Each
** text still compiles with NVRTC, and runs on the host to approx.h's own
** values (and half.h's rounding) bit for bit. */
typedef struct {
  tc_dtype in;     /* the input buffer's dtype */
  kir_opcode op;   /* of the loaded value, in f32 (f64 for an f64 input) */
  bool f32, f64, half;   /* what the text must carry */
} math_case;

static double math_reference(const math_case *c, double x)
{
  if (c->in == TC_F64)
    return c->op == KOP_TANH ? approx_tanh_f64(x) : -x;
  float v = (float)x;
  return c->op == KOP_EXP ? approx_exp_f32(v) : -v;
}

static void test_render_carries_only_the_math_it_uses(void **state)
{
  (void)state;
  static const math_case cases[] = {
    { TC_F32, KOP_NEG, false, false, false },
    { TC_F32, KOP_EXP, true, false, false },
    { TC_F64, KOP_TANH, false, true, false },
    { TC_F16, KOP_EXP, true, false, true },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const math_case *c = &cases[i];
    tc_dtype vt = c->in == TC_F64 ? TC_F64 : TC_F32;
    kir_kernel *k = new_kernel(KIR_MAP, 1);
    k->size[0] = 5;
    add_buf(k, KIR_IN, c->in, (int64_t[]){ 1, 0 });
    add_buf(k, KIR_OUT, vt, (int64_t[]){ 1, 0 });
    int x = kir_load(k, 0);
    if (c->in == TC_F16)
      x = kir_emit(k, KOP_CAST, TC_F32, x, -1, -1);
    add_pass(k, KIR_PASS_STORE, KIR_RED_SUM, 1,
             kir_emit(k, c->op, vt, x, -1, -1));
    char why[200] = "", *src = jcuda_render(k, why, sizeof why);
    assert_non_null(src);
    assert_int_equal(strstr(src, "#define APPROX_OMIT_F32") == NULL, c->f32);
    assert_int_equal(strstr(src, "#define APPROX_OMIT_F64") == NULL, c->f64);
    assert_int_equal(strstr(src, "half_f32_from_f16(uint16_t") != NULL,
                     c->half);
    free(src);
    nvrtc_accepts(k);

    double in64[5], out64[5];
    float in32[5], out32[5];
    uint16_t in16[5];
    for (int j = 0; j < 5; j++) {
      double v = -1.3 + 0.7 * j;
      in16[j] = half_f16_from_f32((float)v);
      in32[j] = (float)v;
      in64[j] = c->in == TC_F16 ? half_f32_from_f16(in16[j]) : v;
    }
    char *in = c->in == TC_F64 ? (char *)in64
             : c->in == TC_F16 ? (char *)in16 : (char *)in32;
    char *out = vt == TC_F64 ? (char *)out64 : (char *)out32;
    char *bufs[] = { in, out };
    assert_int_equal(hx_run(k, bufs, NULL, NULL, 0, 5, configs[1], why,
                            sizeof why), 0);
    for (int j = 0; j < 5; j++) {
      double want = math_reference(c, c->in == TC_F32 ? in32[j] : in64[j]);
      if (vt == TC_F64)
        assert_true(same_bits_f64(out64[j], want));
      else
        assert_true(same_bits_f32(out32[j], (float)want));
    }
    free(k);
  }
}

/* A failed compile hands back NVRTC's whole log, naming the line. */
static void test_nvrtc_failure_gives_the_log(void **state)
{
  (void)state;
  if (!jcuda_nvrtc_available())
    skip();
  char *image = NULL, *log = NULL;
  size_t len = 0;
  const char *bad = "extern \"C\" __global__ void f(float *x)\n"
                    "{\n  x[0] = undeclared_name;\n}\n";
  assert_int_equal(jcuda_nvrtc_compile(bad, "sm_90", JCUDA_CUBIN, &image,
                                       &len, &log), -1);
  assert_null(image);
  assert_non_null(log);
  assert_non_null(strstr(log, "undeclared_name"));
  assert_non_null(strstr(log, "(3)"));   /* the line */
  free(log);
}

/* A cubin of src for sm_90 (malloc'd; *len). */
static char *cubin_of(const char *src, size_t *len)
{
  char *image = NULL, *log = NULL;
  if (jcuda_nvrtc_compile(src, "sm_90", JCUDA_CUBIN, &image, len, &log) < 0)
    fail_msg("NVRTC: %s", log ? log : "(no log)");
  free(log);
  return image;
}

/* The machine-code comparison behind hx_ptxas_agrees sees a change: one
** kernel compiled twice agrees, a kernel that adds 2 instead of 1 does
** not, nor does the first with one bit of its code flipped, nor a file
** that is no cubin. */
static void test_machine_code_comparison(void **state)
{
  (void)state;
  if (!jcuda_nvrtc_available())
    skip();
  const char *one = "extern \"C\" __global__ void f(float *x)\n"
                    "{ x[threadIdx.x] += 1.0f; }\n";
  const char *two = "extern \"C\" __global__ void f(float *x)\n"
                    "{ x[threadIdx.x] += 2.0f; }\n";
  size_t na, nb, nc;
  char *a = cubin_of(one, &na), *b = cubin_of(one, &nb);
  char *c = cubin_of(two, &nc);
  assert_true(hx_same_machine_code(a, na, b, nb));
  assert_false(hx_same_machine_code(a, na, c, nc));
  /* one byte of the code changed: the add's immediate, 1.0f's bits */
  const unsigned char imm[4] = { 0x00, 0x00, 0x80, 0x3f };
  char *at = memmem(b, nb, imm, sizeof imm);
  assert_non_null(at);
  at[3] ^= 0x01;
  assert_false(hx_same_machine_code(a, na, b, nb));
  at[3] ^= 0x01;
  assert_true(hx_same_machine_code(a, na, b, nb));
  assert_false(hx_same_machine_code(a, na, "not an ELF file", 15));
  assert_false(hx_same_machine_code(a, 16, a, 16));   /* cut short */
  free(a);
  free(b);
  free(c);
}

/* The key names what changes the binary: NVRTC, arch, options, renderer,
** and the host's APPROX_FMA that the renderer pastes in. */
static void test_key_text(void **state)
{
  (void)state;
  char buf[512];
  jcuda_key_text("sm_90", buf, sizeof buf);
  assert_non_null(strstr(buf, "sm_90"));
  assert_non_null(strstr(buf, "-fmad=false"));
  assert_non_null(strstr(buf, jcuda_nvrtc_version()));
  assert_non_null(strstr(buf, "render"));
  int major = 0, minor = 0;   /* -minimal from NVRTC 12.4 on */
  bool minimal = sscanf(jcuda_nvrtc_version(), "nvrtc %d.%d", &major,
                        &minor) == 2 &&
                 (major > 12 || (major == 12 && minor >= 4));
  assert_int_equal(strstr(buf, " -minimal") != NULL, minimal);
  char fma[16];
  snprintf(fma, sizeof fma, " fma %d ", jcuda_render_fma());
  assert_non_null(strstr(buf, fma));
}

/* -- The host run's fibers ------------------------------------------------------ */

/* A block sum over shared memory with a barrier at every step (the shape
** of render.c's block reductions), a division under the caller's rounding
** mode, and a kernel whose odd threads alone reach a barrier. */
static const char fiber_src[] =
  "TCK_SHARED int sm[256];\n"
  "void tri(int *out, const float *x, float *q)\n"
  "{\n"
  "  unsigned t = threadIdx.x, n = blockDim.x;\n"
  "  sm[t] = (int)(t * t + 1 + blockIdx.x);\n"
  "  TCK_SYNC();\n"
  "  for (unsigned h = n / 2; h > 0; h /= 2) {\n"
  "    int v = t < h ? sm[t + h] : 0;\n"
  "    TCK_SYNC();\n"
  "    if (t < h) sm[t] += v;\n"
  "    TCK_SYNC();\n"
  "  }\n"
  "  if (t == 0) out[blockIdx.x] = sm[0];\n"
  "  q[blockIdx.x * n + t] = x[0] / x[1];\n"
  "}\n"
  "void diverge(void) { if (threadIdx.x % 2) TCK_SYNC(); }\n";

typedef struct {
  void (*tri)(int *, const float *, float *);
  int *out;
  const float *x;
  float *q;
} tri_args;

static void call_tri(void *ctx)
{
  tri_args *a = ctx;
  a->tri(a->out, a->x, a->q);
}

static void call_diverge(void *ctx) { ((void (*)(void))ctx)(); }

/* Each thread is a fiber with its own stack, switched at every barrier:
** the sums need every thread's writes before each barrier and none after
** (launches alternate forward and reverse order), each fiber computes in
** the launching thread's floating-point mode, and a barrier that only
** some threads reach is reported, after which the next launch is sound. */
static void test_host_fibers(void **state)
{
  (void)state;
  char why[300];
  hr_module *m = hr_compile(fiber_src, why, sizeof why);
  if (!m)
    fail_msg("%s", why);
  tri_args a = { .tri = (void (*)(int *, const float *, float *))
                          hr_symbol(m, "tri") };
  void (*diverge)(void) = (void (*)(void))hr_symbol(m, "diverge");
  assert_non_null(a.tri);
  assert_non_null(diverge);
  const float x[2] = { 1, 3 };
  volatile float one = x[0], three = x[1];
  const int prev = fegetround();
  assert_int_equal(fesetround(FE_DOWNWARD), 0);
  const float third_down = one / three;
  assert_int_equal(fesetround(prev), 0);
  assert_false(same_bits_f32(third_down, one / three));
  static const unsigned shapes[][2] = { { 3, 64 }, { 2, 256 }, { 1, 1 },
                                        { 4, 32 } };
  for (int round = 0; round < 2; round++)
    for (int c = 0; c < 4; c++) {
      unsigned grid = shapes[c][0], block = shapes[c][1];
      int out[4] = { 0 };
      float q[4 * 256];
      a.out = out;
      a.x = x;
      a.q = q;
      assert_int_equal(fesetround(FE_DOWNWARD), 0);
      int rc = hr_launch(m, grid, block, call_tri, &a, why, sizeof why);
      assert_int_equal(fesetround(prev), 0);
      if (rc < 0)
        fail_msg("%s", why);
      for (unsigned b = 0; b < grid; b++) {
        long want = 0;
        for (unsigned t = 0; t < block; t++)
          want += (long)t * t + 1 + b;
        assert_int_equal(out[b], want);
      }
      for (unsigned i = 0; i < grid * block; i++)
        assert_true(same_bits_f32(q[i], third_down));
      if (round == 0 && c == 1) {   /* a divergence between launches */
        assert_int_equal(hr_launch(m, 2, 8, call_diverge, (void *)diverge,
                                   why, sizeof why), -1);
        assert_non_null(strstr(why, "barrier divergence: 4 of 8 threads"));
      }
    }
}

int main(int argc, char **argv)
{
  if (argc == 2 && strcmp(argv[1], "--probe") == 0) {   /* the stub test */
    const char *why = jcuda_device_reason();
    printf("%s%s\n", why ? "unavailable: " : "available", why ? why : "");
    return 0;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_no_device_is_a_clear_error),
    cmocka_unit_test(test_stub_library_is_no_device),
    cmocka_unit_test(test_toolkit_lib_from_cuda_home),
    cmocka_unit_test(test_map_matches_approx),
    cmocka_unit_test(test_map_vector_loop),
    cmocka_unit_test(test_integer_semantics),
    cmocka_unit_test(test_rows_follow_the_canonical_order),
    cmocka_unit_test(test_rows_strided),
    cmocka_unit_test(test_sequential_passes),
    cmocka_unit_test(test_scatter_batches),
    cmocka_unit_test(test_parallel_scan),
    cmocka_unit_test(test_split_reductions_equal_eager),
    cmocka_unit_test(test_split_many_rows),
    cmocka_unit_test(test_split_launch_config),
    cmocka_unit_test(test_render_refuses_integer_division),
    cmocka_unit_test(test_render_carries_only_the_math_it_uses),
    cmocka_unit_test(test_nvrtc_failure_gives_the_log),
    cmocka_unit_test(test_machine_code_comparison),
    cmocka_unit_test(test_key_text),
    cmocka_unit_test(test_host_fibers),
  };
  if (!jcuda_nvrtc_available())
    fprintf(stderr, "test_cuda: NVRTC checks skipped: %s\n",
            jcuda_nvrtc_reason());
  return cmocka_run_group_tests(tests, NULL, NULL);
}
