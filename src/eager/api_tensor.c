/*
** api_tensor.c -- the public creation, reading, view and device functions.
** Views dispatch too (trace records them as lazy views); creation makes
** materialized CPU tensors directly.
*/
#include <math.h>
#include <string.h>

#include "eager.h"
#include "../tensor/half.h"
#include "../jit_cuda/jit_cuda.h"

static tc_tensor *on_default_device(const char *fn, tc_tensor *t);

static tc_tensor *handed_out(tc_tensor *t)
{
  tensor_scope_track(t);
  return t;
}

/* -- Creation ---------------------------------------------------------------- */

static bool dtype_ok(const char *fn, tc_dtype dt)
{
  if (tensor_dtype_valid(dt))
    return true;
  tc_seterr(TC_E_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
  return false;
}

static tc_tensor *create(const char *fn, tc_dtype dt, int ndim,
                         const int64_t *shape)
{
  eager_init();
  if (!dtype_ok(fn, dt) || tensor_check_shape(fn, ndim, shape) < 0)
    return NULL;
  tc_tensor *t = tensor_new(dt, ndim, shape);
  if (!t)
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
  return t;
}

typedef struct {
  tc_dtype dt;
  char *p;
  double v;
} fill_job;

static void fill_range(void *ctx, int64_t lo, int64_t hi)
{
  const fill_job *j = ctx;
  eager_convert(j->dt, j->p + lo * (int64_t)tensor_dtype_size[j->dt], 1,
                TC_F64, &j->v, 0, hi - lo);
}

static tc_tensor *filled(const char *fn, tc_dtype dt, int ndim,
                         const int64_t *shape, double v)
{
  tc_tensor *t = create(fn, dt, ndim, shape);
  if (t) {
    fill_job j = { dt, tensor_ptr(t), v };
    tensor_parallel(t->numel, 1 << 16, fill_range, &j);
  }
  return handed_out(on_default_device(fn, t));
}

tc_tensor *tc_empty(tc_dtype dt, int ndim, const int64_t *shape)
{
  return handed_out(on_default_device(__func__,
                                      create(__func__, dt, ndim, shape)));
}

tc_tensor *tc_zeros(tc_dtype dt, int ndim, const int64_t *shape)
{
  return filled(__func__, dt, ndim, shape, 0.0);
}

tc_tensor *tc_ones(tc_dtype dt, int ndim, const int64_t *shape)
{
  return filled(__func__, dt, ndim, shape, 1.0);
}

tc_tensor *tc_full(tc_dtype dt, int ndim, const int64_t *shape, double v)
{
  return filled(__func__, dt, ndim, shape, v);
}

tc_tensor *tc_arange(tc_dtype dt, double start, double end, double step)
{
  const char *fn = __func__;
  eager_init();
  if (!isfinite(start) || !isfinite(end) || !isfinite(step) || step == 0) {
    tc_seterr(TC_E_ARG, "%s: start, end and step must be finite and step "
              "non-zero", fn);
    return NULL;
  }
  double count = ceil((end - start) / step);
  if (count > 0x1p50) {
    tc_seterr(TC_E_SHAPE, "%s: %g elements is too many", fn, count);
    return NULL;
  }
  int64_t n = count > 0 ? (int64_t)count : 0;
  tc_tensor *t = create(fn, dt, 1, &n);
  if (!t)
    return NULL;
  /* Computed in double, then converted: exact for every integer dtype. */
  size_t esz = tensor_dtype_size[dt];
  char *p = tensor_ptr(t);
  for (int64_t i = 0; i < n; i++) {
    double v = start + (double)i * step;
    eager_convert(dt, p + i * (int64_t)esz, 1, TC_F64, &v, 1, 1);
  }
  return handed_out(on_default_device(__func__, t));
}

typedef struct {
  tc_tensor *t;
  uint64_t seed;
  bool normal;
} rand_job;

static void rand_range(void *ctx, int64_t lo, int64_t hi)
{
  const rand_job *j = ctx;
  for (int64_t i = lo; i < hi; i++) {
    double v;
    if (!j->normal) {
      v = eager_uniform(j->seed, (uint64_t)i);
    } else {   /* Box-Muller over the pair (i & ~1, i | 1) */
      uint64_t p = (uint64_t)i & ~(uint64_t)1;
      double u1 = 1.0 - eager_uniform(j->seed, p);
      double u2 = eager_uniform(j->seed, p + 1);
      double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
      v = (i & 1) ? r * sin(th) : r * cos(th);
    }
    tc_dtype dt = (tc_dtype)j->t->dtype;
    if (dt == TC_F64) {
      ((double *)tensor_ptr(j->t))[i] = v;
      continue;
    }
    float f = (float)v;
    if (!j->normal && f >= 1.0f)   /* rounding up to 1 leaves [0, 1) */
      f = 0x1.fffffep-1f;
    if (dt == TC_F32) {
      ((float *)tensor_ptr(j->t))[i] = f;
      continue;
    }
    /* the storage types: rounded from f32, and [0, 1) kept below 1 */
    uint16_t h = dt == TC_F16 ? half_f16_from_f32(f) : half_bf16_from_f32(f);
    if (!j->normal && (dt == TC_F16 ? half_f32_from_f16(h)
                                    : half_f32_from_bf16(h)) >= 1.0f)
      h--;   /* the largest value below 1 */
    ((uint16_t *)tensor_ptr(j->t))[i] = h;
  }
}

static tc_tensor *random_tensor(const char *fn, tc_dtype dt, int ndim,
                                const int64_t *shape, uint64_t seed,
                                bool normal)
{
  if (tensor_dtype_valid(dt) && !tensor_dtype_is_float(dt)) {
    tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s (needs a float dtype)", fn,
              tc_dtype_name(dt));
    return NULL;
  }
  tc_tensor *t = create(fn, dt, ndim, shape);
  if (t) {
    rand_job j = { t, seed, normal };
    tensor_parallel(t->numel, 1 << 15, rand_range, &j);
  }
  return handed_out(on_default_device(fn, t));
}

tc_tensor *tc_rand(tc_dtype dt, int ndim, const int64_t *shape, uint64_t s)
{
  return random_tensor(__func__, dt, ndim, shape, s, false);
}

tc_tensor *tc_randn(tc_dtype dt, int ndim, const int64_t *shape, uint64_t s)
{
  return random_tensor(__func__, dt, ndim, shape, s, true);
}

/* The checks of a tensor made from the caller's memory: its dtype, its
** shape, and data present unless empty. Returns numel, or -1. */
static int64_t caller_data_ok(const char *fn, tc_dtype dt, int ndim,
                              const int64_t *shape, const void *data)
{
  eager_init();
  if (!dtype_ok(fn, dt))
    return -1;
  int64_t n = tensor_check_shape(fn, ndim, shape);
  if (n < 0)
    return -1;
  if (!data && n > 0) {
    tc_seterr_null(fn);
    return -1;
  }
  return n;
}

tc_tensor *tc_from_data(tc_dtype dt, int ndim, const int64_t *shape,
                        const void *data, size_t nbytes)
{
  const char *fn = __func__;
  int64_t n = caller_data_ok(fn, dt, ndim, shape, data);
  if (n < 0)
    return NULL;
  size_t want = (size_t)n * tensor_dtype_size[dt];
  if (nbytes != want) {
    tc_seterr(TC_E_ARG, "%s: nbytes is %zu but the shape needs %zu", fn,
              nbytes, want);
    return NULL;
  }
  tc_tensor *t = create(fn, dt, ndim, shape);
  if (t && n > 0)   /* the bytes as they are (f16 NaN payloads too) */
    memcpy(tensor_ptr(t), data, want);
  if (t && dt == TC_BOOL) {   /* normalize bytes to 0/1 */
    uint8_t *b = tensor_ptr(t);
    for (int64_t i = 0; i < n; i++)
      b[i] = b[i] != 0;
  }
  return handed_out(on_default_device(fn, t));
}

/* Kernels load whole elements (GCC may vectorize with that alignment in
** mind, and a misaligned load is undefined behaviour), so wrapped memory
** must be aligned to its element size; bool bytes must be 0 or 1, which
** every kernel assumes. */
static bool blob_ok(const char *fn, tc_dtype dt, const void *data, int64_t n)
{
  size_t esz = tensor_dtype_size[dt];
  if ((uintptr_t)data % esz != 0) {
    tc_seterr(TC_E_ARG, "%s: data %p is not aligned to %zu bytes (the size "
              "of one %s element)", fn, data, esz, tc_dtype_name(dt));
    return false;
  }
  if (dt == TC_BOOL) {
    const uint8_t *b = data;
    for (int64_t i = 0; i < n; i++)
      if (b[i] > 1) {
        tc_seterr(TC_E_ARG, "%s: bool element %lld is %u, not 0 or 1", fn,
                  (long long)i, b[i]);
        return false;
      }
  }
  return true;
}

tc_tensor *tc_from_blob(tc_dtype dt, int ndim, const int64_t *shape,
                        void *data, void (*deleter)(void *data, void *ctx),
                        void *ctx)
{
  const char *fn = __func__;
  int64_t n = caller_data_ok(fn, dt, ndim, shape, data);
  if (n < 0 || !blob_ok(fn, dt, data, n))
    return NULL;
  return handed_out(tensor_new_external(dt, ndim, shape, data, deleter, ctx));
}

/* -- Reading ----------------------------------------------------------------- */

/* Reading is a realization point: lazy values and pending writes are
** computed first. */
static bool materialized(const char *fn, tc_tensor *t)
{
  if (!tensor_arg_ok(fn, t))
    return false;
  if (tensor_make_readable(t) < 0)
    return false;
  if (t->lazy || !t->storage) {
    tc_seterr(TC_E_INTERNAL, "%s: tensor is not materialized", fn);
    return false;
  }
  return true;
}

/* t's values (a host tensor) in C order into dst (want bytes). */
static void copy_out(const tc_tensor *t, void *dst, size_t want)
{
  if (tensor_is_contiguous(t)) {
    memcpy(dst, tensor_ptr(t), want);
    return;
  }
  /* Gather straight into the caller's buffer through a borrowed storage. */
  tensor_storage s = { .device = TC_DEV_CPU, .nbytes = want, .data = dst };
  atomic_init(&s.refs, 1);
  tc_tensor out = *t;
  atomic_init(&out.refs, 1);
  out.storage = &s;
  out.offset = 0;
  out.scope_slot = -1;
  tensor_contiguous_strides(t->ndim, t->shape, out.stride);
  eager_copy_into(&out, t);
}

int tc_copy_to(tc_tensor *t, void *dst, size_t nbytes)
{
  const char *fn = __func__;
  eager_init();
  if (!materialized(fn, t))
    return -1;
  size_t want = (size_t)t->numel * tensor_dtype_size[t->dtype];
  if (nbytes != want)
    return tc_seterr(TC_E_ARG, "%s: nbytes is %zu but the tensor holds %zu",
                     fn, nbytes, want), -1;
  if (!dst && want > 0)
    return tc_seterr_null(fn), -1;
  if (want == 0)
    return 0;
  tc_tensor *h = eager_on_host(t);   /* a device tensor comes back first */
  if (!h)
    return -1;
  copy_out(h, dst, want);
  tensor_unref(h);
  return 0;
}

int tc_item(tc_tensor *t, double *out)
{
  const char *fn = __func__;
  eager_init();
  if (!materialized(fn, t))
    return -1;
  if (!out)
    return tc_seterr_null(fn), -1;
  if (t->numel != 1)
    return tc_seterr(TC_E_SHAPE, "%s: tensor has %lld elements, not 1", fn,
                     (long long)t->numel), -1;
  tc_tensor *h = eager_on_host(t);
  if (!h)
    return -1;
  eager_convert(TC_F64, out, 1, (tc_dtype)t->dtype, tensor_ptr(h), 1, 1);
  tensor_unref(h);
  return 0;
}

void *tc_data(tc_tensor *t)
{
  const char *fn = __func__;
  eager_init();
  if (!materialized(fn, t))
    return NULL;
  if (tensor_device_of(t) != TC_DEV_CPU) {
    tc_seterr(TC_E_DEVICE, "%s: the tensor is on cuda; its data is not "
              "host memory (tc_to(t, \"cpu\") gives a CPU copy, tc_copy_to "
              "and tc_item copy values back)", fn);
    return NULL;
  }
  if (!tensor_is_contiguous(t)) {
    /* A copy would detach t from the storage it views: writes through the
    ** pointer would reach neither the base nor its other views. */
    tc_seterr(TC_E_ARG, "%s: the tensor is a non-contiguous view; its "
              "elements are not one array (tc_contiguous(t) gives a "
              "contiguous copy, tc_copy_to copies them out)", fn);
    return NULL;
  }
  if (!t->exposed) {
    if (tensor_hooks.expose && tensor_hooks.expose(t) < 0)
      return NULL;
    t->exposed = 1;
    atomic_fetch_add(&t->storage->exposed, 1);
  }
  return tensor_ptr(t);
}

int tc_realize(tc_tensor *t)
{
  eager_init();
  if (!tensor_arg_ok(__func__, t))
    return -1;
  return tensor_make_readable(t);
}

int tc_sync(void)
{
  eager_init();
  if (tensor_hooks.sync && tensor_hooks.sync() < 0)
    return -1;
  return eager_cuda_sync();
}

/* -- Views --------------------------------------------------------------------- */

/* The geometry of a contiguous tensor of t's shape: views apply the same
** change to it, giving the view relative to t (eager_call.rel). */
static void geom_identity(const tc_tensor *t, tensor_geom *r)
{
  tensor_geom_of(t, r);
  tensor_contiguous_strides(t->ndim, t->shape, r->stride);
  r->offset = 0;
}

static tc_tensor *view_of(const char *fn, tc_tensor *a, const tensor_geom *g,
                          const tensor_geom *r)
{
  eager_call c = { .op = TC_OP_VIEW, .fn = fn, .nin = 1, .in = { a },
                   .dtype = (tc_dtype)a->dtype, .view = *g, .rel = *r,
                   .ndim = g->ndim };
  c.cdtype = c.dtype;
  memcpy(c.shape, g->shape, sizeof(int64_t) * g->ndim);
  return eager_dispatch(&c);
}

static tc_tensor *contiguous_of(const char *fn, tc_tensor *a)
{
  eager_call c = { .op = TC_OP_CONTIGUOUS, .fn = fn, .nin = 1, .in = { a },
                   .dtype = (tc_dtype)a->dtype, .ndim = a->ndim };
  c.cdtype = c.dtype;
  memcpy(c.shape, a->shape, sizeof(int64_t) * a->ndim);
  return eager_dispatch(&c);
}

#define VIEW_BEGIN(a)                  \
  eager_init();                        \
  if (!tensor_arg_ok(__func__, a))     \
    return NULL;                       \
  tensor_geom g, r;                    \
  tensor_geom_of(a, &g);               \
  geom_identity(a, &r)

tc_tensor *tc_reshape(tc_tensor *a, int ndim, const int64_t *shape)
{
  VIEW_BEGIN(a);
  int rc = tensor_geom_reshape(__func__, &g, ndim, shape);
  if (rc < 0)
    return NULL;
  tensor_geom_reshape(__func__, &r, ndim, shape);   /* always a view */
  if (rc == 0)
    return handed_out(view_of(__func__, a, &g, &r));
  /* The strides do not allow a view: copy, then view the copy. */
  tc_tensor *c = contiguous_of(__func__, a);
  tc_tensor *v = c ? view_of(__func__, c, &g, &r) : NULL;
  tensor_unref(c);
  return handed_out(v);
}

tc_tensor *tc_permute(tc_tensor *a, int ndim, const int *perm)
{
  VIEW_BEGIN(a);
  if (tensor_geom_permute(__func__, &g, ndim, perm) < 0)
    return NULL;
  tensor_geom_permute(__func__, &r, ndim, perm);
  return handed_out(view_of(__func__, a, &g, &r));
}

tc_tensor *tc_transpose(tc_tensor *a, int d0, int d1)
{
  VIEW_BEGIN(a);
  if (tensor_geom_transpose(__func__, &g, d0, d1) < 0)
    return NULL;
  tensor_geom_transpose(__func__, &r, d0, d1);
  return handed_out(view_of(__func__, a, &g, &r));
}

tc_tensor *tc_slice(tc_tensor *a, int dim, int64_t start, int64_t end,
                    int64_t step)
{
  VIEW_BEGIN(a);
  if (tensor_geom_slice(__func__, &g, dim, start, end, step) < 0)
    return NULL;
  tensor_geom_slice(__func__, &r, dim, start, end, step);
  return handed_out(view_of(__func__, a, &g, &r));
}

/* Views [k * size, (k + 1) * size) of a along dim, for every k; with
** chunks > 0, size is ceil(n / chunks). */
static int split_views(const char *fn, tc_tensor *a, int64_t size,
                       int chunks, int dim, tc_tensor **out, int max_out)
{
  eager_init();
  if (!tensor_arg_ok(fn, a))
    return -1;
  if (!out)
    return tc_seterr_null(fn), -1;
  if (a->ndim == 0)
    return tc_seterr(TC_E_ARG, "%s: cannot split a 0-d tensor", fn), -1;
  int d = tensor_wrap_dim(fn, dim, a->ndim);
  if (d < 0)
    return -1;
  int64_t n = a->shape[d];
  if (chunks > 0)
    size = n == 0 ? 1 : (n + chunks - 1) / chunks;
  int64_t pieces = n == 0 ? 1 : (n - 1) / size + 1;
  if (pieces > max_out)
    return tc_seterr(TC_E_ARG, "%s: %lld pieces, room for %d", fn,
                     (long long)pieces, max_out), -1;
  for (int64_t k = 0; k < pieces; k++) {
    tensor_geom g, r;
    tensor_geom_of(a, &g);
    geom_identity(a, &r);
    tc_tensor *v = NULL;
    if (tensor_geom_slice(fn, &g, d, k * size, k * size + size, 1) == 0 &&
        tensor_geom_slice(fn, &r, d, k * size, k * size + size, 1) == 0)
      v = handed_out(view_of(fn, a, &g, &r));
    if (!v) {
      while (k-- > 0)
        tc_release(out[k]);
      return -1;
    }
    out[k] = v;
  }
  return (int)pieces;
}

int tc_split(tc_tensor *a, int64_t size, int dim, tc_tensor **out,
             int max_out)
{
  if (size <= 0) {
    tc_seterr(TC_E_ARG, "%s: size must be positive, got %lld", __func__,
              (long long)size);
    return -1;
  }
  return split_views(__func__, a, size, 0, dim, out, max_out);
}

int tc_chunk(tc_tensor *a, int chunks, int dim, tc_tensor **out)
{
  if (chunks <= 0) {
    tc_seterr(TC_E_ARG, "%s: chunks must be positive, got %d", __func__,
              chunks);
    return -1;
  }
  return split_views(__func__, a, 0, chunks, dim, out, chunks);
}

tc_tensor *tc_expand(tc_tensor *a, int ndim, const int64_t *shape)
{
  VIEW_BEGIN(a);
  if (tensor_geom_expand(__func__, &g, ndim, shape) < 0)
    return NULL;
  tensor_geom_expand(__func__, &r, ndim, shape);
  return handed_out(view_of(__func__, a, &g, &r));
}

tc_tensor *tc_unsqueeze(tc_tensor *a, int dim)
{
  VIEW_BEGIN(a);
  if (tensor_geom_unsqueeze(__func__, &g, dim) < 0)
    return NULL;
  tensor_geom_unsqueeze(__func__, &r, dim);
  return handed_out(view_of(__func__, a, &g, &r));
}

tc_tensor *tc_squeeze(tc_tensor *a, int dim)
{
  VIEW_BEGIN(a);
  if (tensor_geom_squeeze(__func__, &g, dim) < 0)
    return NULL;
  tensor_geom_squeeze(__func__, &r, dim);
  return handed_out(view_of(__func__, a, &g, &r));
}

tc_tensor *tc_contiguous(tc_tensor *a)
{
  eager_init();
  if (!tensor_arg_ok(__func__, a))
    return NULL;
  return handed_out(contiguous_of(__func__, a));
}

/* -- Devices ------------------------------------------------------------------- */

/* TC_DEV_* of a device name ("cpu", "cuda", "cuda:0"), or -1 (error). */
static int device_named(const char *fn, const char *device)
{
  if (!device)
    return tc_seterr_null(fn), -1;
  if (strcmp(device, "cpu") == 0)
    return TC_DEV_CPU;
  if (strcmp(device, "cuda") == 0 || strcmp(device, "cuda:0") == 0)
    return TC_DEV_CUDA;
  tc_seterr(TC_E_ARG, "%s: unknown device \"%s\" (expected \"cpu\" or "
            "\"cuda\")", fn, device);
  return -1;
}

tc_tensor *tc_to(tc_tensor *t, const char *device)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, t))
    return NULL;
  int want = device_named(fn, device);
  if (want < 0)
    return NULL;
  if (want == tensor_device_of(t)) {   /* a new handle on the same data */
    tensor_geom g, r;                  /* (a lazy tensor stays lazy, on
                                          the device its node is for) */
    tensor_geom_of(t, &g);
    geom_identity(t, &r);
    return handed_out(view_of(fn, t, &g, &r));
  }
  if (tensor_make_readable(t) < 0)   /* a copy reads the values */
    return NULL;
  return handed_out(want == TC_DEV_CUDA ? eager_cuda_from_host(fn, t)
                                        : eager_cuda_to_host(t));
}

const char *tc_device(const tc_tensor *t)
{
  if (!t)
    return NULL;
  return tensor_device_of(t) == TC_DEV_CUDA ? "cuda" : "cpu";
}

static _Atomic int default_device = TC_DEV_CPU;

int tc_set_default_device(const char *device)
{
  const char *fn = __func__;
  eager_init();
  int d = device_named(fn, device);
  if (d < 0)
    return -1;
  if (d == TC_DEV_CUDA && !jcuda_device_available())
    return tc_seterr(TC_E_DEVICE, "%s: CUDA is not available: %s", fn,
                     jcuda_device_reason()), -1;
  default_device = d;
  return 0;
}

const char *tc_default_device(void)
{
  return default_device == TC_DEV_CUDA ? "cuda" : "cpu";
}

/* A tensor just created on the CPU, moved to the default device (t's
** reference passes to the result). */
static tc_tensor *on_default_device(const char *fn, tc_tensor *t)
{
  if (!t || default_device == TC_DEV_CPU)
    return t;
  tc_tensor *d = eager_cuda_from_host(fn, t);
  tensor_unref(t);
  return d;
}
