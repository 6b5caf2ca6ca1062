/*
** tensor.c -- tensor handles over refcounted storage: creation, lifetime,
** metadata. Handles are cheap; views share storage and never copy data.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

/* Hook for lazy tensors: trace frees its node when a handle dies. */
void (*tensor_lazy_release_hook)(tc_tensor *t);
void (*tensor_grad_release_hook)(tc_tensor *t);

/* -- Storage ------------------------------------------------------------- */

static tensor_storage *storage_alloc(void);
static void storage_dealloc(tensor_storage *s);

static void storage_init(tensor_storage *s, size_t nbytes)
{
  atomic_init(&s->refs, 1);
  atomic_init(&s->version, 0);
  atomic_init(&s->exposed, 0);
  s->device = TC_DEV_CPU;
  s->nbytes = nbytes;
  s->pending = 0;
  s->external = false;
  s->deleter = NULL;
  s->deleter_ctx = NULL;
}

static tensor_storage *storage_new(size_t nbytes)
{
  tensor_storage *s = storage_alloc();
  if (!s)
    return NULL;
  s->data = tensor_alloc(nbytes);
  if (!s->data) {
    storage_dealloc(s);
    return NULL;
  }
  storage_init(s, nbytes);
  return s;
}

/* Storage over memory tc does not own: its deleter frees it (or nobody). */
static tensor_storage *storage_wrap(void *data, size_t nbytes,
                                    void (*deleter)(void *, void *),
                                    void *ctx)
{
  tensor_storage *s = storage_alloc();
  if (!s)
    return NULL;
  storage_init(s, nbytes);
  s->data = data;
  s->external = true;
  s->deleter = deleter;
  s->deleter_ctx = ctx;
  return s;
}

/* -- Device storage: the ops a backend registered ------------------------- */

const tensor_device_ops *tensor_device[TC_DEV__MAX];

void tensor_device_register(int device, const tensor_device_ops *ops)
{
  tensor_device[device] = ops;
}

/* Storage of nbytes on a device other than the CPU (its ops allocate). */
static tensor_storage *storage_new_on(int device, size_t nbytes)
{
  const tensor_device_ops *ops = tensor_device[device];
  if (!ops) {
    tc_seterr(TC_E_DEVICE, "no backend registered for device %d", device);
    return NULL;
  }
  tensor_storage *s = storage_alloc();
  if (!s) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating a storage record");
    return NULL;
  }
  if (ops->alloc(&s->data, nbytes) < 0) {
    storage_dealloc(s);
    return NULL;
  }
  storage_init(s, nbytes);
  s->device = device;
  return s;
}

static void storage_release(tensor_storage *s)
{
  if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
    if (s->device != TC_DEV_CPU)
      tensor_device[s->device]->free(s->data, s->nbytes);
    else if (!s->external)
      tensor_free_block(s->data, s->nbytes);
    else if (s->deleter)
      s->deleter(s->data, s->deleter_ctx);
    storage_dealloc(s);
  }
}

/* -- Shapes -------------------------------------------------------------- */

int64_t tensor_check_shape(const char *fn, int ndim, const int64_t *shape)
{
  if (ndim < 0 || ndim > TC_MAX_DIMS) {
    tc_seterr(TC_E_SHAPE, "%s: ndim %d is out of range [0, %d]", fn, ndim,
              TC_MAX_DIMS);
    return -1;
  }
  if (ndim > 0 && !shape) {
    tc_seterr_null(fn);
    return -1;
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      tc_seterr(TC_E_SHAPE, "%s: size %lld of dim %d is negative", fn,
                (long long)shape[i], i);
      return -1;
    }
    if (__builtin_mul_overflow(n, shape[i], &n)) {
      tc_seterr(TC_E_SHAPE, "%s: shape overflows: element count exceeds "
                "int64", fn);
      return -1;
    }
  }
  /* Bytes must fit too, with headroom for the widest dtype. */
  if (n > (INT64_MAX >> 4)) {
    tc_seterr(TC_E_SHAPE, "%s: shape overflows: %lld elements is too many",
              fn, (long long)n);
    return -1;
  }
  return n;
}

int tensor_wrap_dim(const char *fn, int dim, int ndim)
{
  int n = ndim > 0 ? ndim : 1;   /* a 0-d tensor accepts dim 0 and -1 */
  if (dim < -n || dim >= n) {
    tc_seterr(TC_E_ARG, "%s: dim %d is out of range for a tensor of %d "
              "dims", fn, dim, ndim);
    return -1;
  }
  return dim < 0 ? dim + n : dim;
}

bool tensor_is_contiguous(const tc_tensor *t)
{
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s)
      return t->numel == 0;
    s *= t->shape[i];
  }
  return true;
}

bool tensor_same_view(const tc_tensor *a, const tc_tensor *b)
{
  if (a->storage != b->storage || a->offset != b->offset ||
      a->ndim != b->ndim || a->dtype != b->dtype)
    return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i] ||
        (a->shape[i] > 1 && a->stride[i] != b->stride[i]))
      return false;
  return true;
}

/* -- Handles ------------------------------------------------------------- */

/* Handles and storage records come from small per-thread free lists: an
** op on small tensors is dominated by its allocations (W5). Under
** AddressSanitizer the lists are off, so it sees every use after free. */
#ifdef __SANITIZE_ADDRESS__

tc_tensor *tensor_handle_alloc(void) { return malloc(sizeof(tc_tensor)); }
void tensor_handle_dealloc(tc_tensor *t) { free(t); }
static tensor_storage *storage_alloc(void)
{
  return malloc(sizeof(tensor_storage));
}
static void storage_dealloc(tensor_storage *s) { free(s); }

#else


/* A bounded LIFO of freed records of one size. */
typedef struct {
  void *v[TUNE_HANDLE_CACHE];
  int n;
} free_list;

static _Thread_local struct {
  free_list handles, storages;
} fl;

static void list_drain(free_list *l)
{
  while (l->n)
    free(l->v[--l->n]);
}

static void free_lists_fini(void *unused)
{
  (void)unused;
  list_drain(&fl.handles);
  list_drain(&fl.storages);
}

/* A thread's lists are emptied when it exits (and at process exit). */
static pthread_key_t fl_key;
static pthread_once_t fl_once = PTHREAD_ONCE_INIT;
static _Thread_local bool fl_registered;

static void fl_key_make(void) { pthread_key_create(&fl_key, free_lists_fini); }

__attribute__((destructor)) static void free_lists_at_exit(void)
{
  free_lists_fini(NULL);
}

static void *list_pop(free_list *l, size_t size)
{
  return l->n ? l->v[--l->n] : malloc(size);
}

static void list_push(free_list *l, void *p)
{
  if (!fl_registered) {
    pthread_once(&fl_once, fl_key_make);
    pthread_setspecific(fl_key, &fl);
    fl_registered = true;
  }
  if (l->n < TUNE_HANDLE_CACHE)
    l->v[l->n++] = p;
  else
    free(p);
}

tc_tensor *tensor_handle_alloc(void)
{
  return list_pop(&fl.handles, sizeof(tc_tensor));
}

void tensor_handle_dealloc(tc_tensor *t)
{
  t->live = TENSOR_DEAD;
  list_push(&fl.handles, t);
}

static tensor_storage *storage_alloc(void)
{
  return list_pop(&fl.storages, sizeof(tensor_storage));
}

static void storage_dealloc(tensor_storage *s) { list_push(&fl.storages, s); }

#endif

static tc_tensor *handle_new(tc_dtype dt, int ndim, const int64_t *shape)
{
  tc_tensor *t = tensor_handle_alloc();
  if (!t) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating a tensor handle");
    return NULL;
  }
  atomic_init(&t->refs, 1);
  atomic_init(&t->user_refs, 1);
  t->dtype = (uint8_t)dt;
  t->ndim = (uint8_t)ndim;
  t->keys = TC_KEYSET(TC_KEY_CPU);
  t->kept = 0;
  t->exposed = 0;
  t->lazy_plain = 0;
  t->lazy_replay = 0;
  t->scope_slot = -1;
  t->scope_owner = 0;
  t->live = TENSOR_LIVE;
  t->trace_refs = 0;
  t->offset = 0;
  t->storage = NULL;
  t->lazy = NULL;
  t->lazy_next = NULL;
  t->grad_meta = NULL;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    n *= shape[i];
  }
  t->numel = n;
  return t;
}

tc_tensor *tensor_new(tc_dtype dt, int ndim, const int64_t *shape)
{
  tc_tensor *t = handle_new(dt, ndim, shape);
  if (!t)
    return NULL;
  tensor_contiguous_strides(ndim, shape, t->stride);
  size_t nbytes = (size_t)t->numel * tensor_dtype_size[dt];
  t->storage = storage_new(nbytes);
  if (!t->storage) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating %zu bytes", nbytes);
    tensor_handle_dealloc(t);
    return NULL;
  }
  return t;
}

tc_tensor *tensor_new_on(int device, tc_dtype dt, int ndim,
                         const int64_t *shape)
{
  if (device == TC_DEV_CPU)
    return tensor_new(dt, ndim, shape);
  tc_tensor *t = handle_new(dt, ndim, shape);
  if (!t)
    return NULL;
  tensor_contiguous_strides(ndim, shape, t->stride);
  t->keys = TC_KEYSET(TC_KEY_CUDA);
  t->storage = storage_new_on(device,
                              (size_t)t->numel * tensor_dtype_size[dt]);
  if (!t->storage) {
    tensor_handle_dealloc(t);
    return NULL;
  }
  return t;
}

tc_tensor *tensor_new_external(tc_dtype dt, int ndim, const int64_t *shape,
                               void *data,
                               void (*deleter)(void *data, void *ctx),
                               void *ctx)
{
  tc_tensor *t = handle_new(dt, ndim, shape);
  if (!t)
    return NULL;
  tensor_contiguous_strides(ndim, shape, t->stride);
  t->storage = storage_wrap(data, (size_t)t->numel * tensor_dtype_size[dt],
                            deleter, ctx);
  if (!t->storage) {
    tc_seterr(TC_E_NOMEM, "out of memory allocating a storage record");
    tensor_handle_dealloc(t);
    return NULL;
  }
  return t;
}

tc_tensor *tensor_new_view(const tc_tensor *src, int ndim,
                           const int64_t *shape, const int64_t *stride,
                           int64_t offset)
{
  tc_tensor *t = handle_new((tc_dtype)src->dtype, ndim, shape);
  if (!t)
    return NULL;
  memcpy(t->stride, stride, sizeof(int64_t) * (size_t)ndim);
  t->offset = offset;
  t->keys = src->keys & ~TC_KEYSET(TC_KEY_AUTOGRAD);   /* no grad_meta */
  t->storage = src->storage;
  if (t->storage)
    atomic_fetch_add_explicit(&t->storage->refs, 1, memory_order_relaxed);
  return t;
}

void tensor_free(tc_tensor *t)
{
  if (t->lazy && tensor_lazy_release_hook)
    tensor_lazy_release_hook(t);
  if (t->grad_meta)
    tensor_grad_release_hook(t);
  if (t->exposed)
    atomic_fetch_sub(&t->storage->exposed, 1);
  storage_release(t->storage);
  tensor_handle_dealloc(t);
}

tc_tensor *tc_retain(tc_tensor *t)
{
  if (!t)
    return NULL;
  if (!tensor_arg_ok(__func__, t)) {
    tensor_log(TC_LOG_ERROR, "%s", tc_last_error());
    return NULL;
  }
  atomic_fetch_add_explicit(&t->user_refs, 1, memory_order_relaxed);
  return tensor_ref(t);
}

/* The program's release: one of its references (creation or tc_retain).
** When the last one goes and a scope tracks t, the scope forgets it (on
** the scope's thread) or keeps it until it ends (on another thread). A
** release of more references than the program holds would free what tc or
** a scope still uses: it is refused with an error and one line on stderr
** (the program has a bug that would otherwise corrupt memory). */
void tc_release(tc_tensor *t)
{
  if (!t)
    return;
  if (!tensor_arg_ok(__func__, t)) {
    tensor_log(TC_LOG_ERROR, "%s", tc_last_error());
    return;
  }
  int u = atomic_load_explicit(&t->user_refs, memory_order_relaxed);
  do {
    if (u <= 0) {
      tc_seterr(TC_E_ARG, "tc_release: tensor released more times than it "
                "was created or retained (its scope released it already?)");
      tensor_log(TC_LOG_ERROR, "%s", tc_last_error());
      return;
    }
  } while (!atomic_compare_exchange_weak_explicit(
             &t->user_refs, &u, u - 1, memory_order_acquire,
             memory_order_relaxed));
  /* the last user reference, still in a scope: its slot drops it (scope.c's
  ** release_slot, whose slot and owner this acquire orders) */
  if (u == 1 && t->scope_slot >= 0 && !tensor_scope_forget(t))
    return;
  tensor_unref(t);
}

/* -- Metadata ------------------------------------------------------------ */

int tc_ndim(const tc_tensor *t)
{
  return tensor_arg_ok(__func__, t) ? t->ndim : -1;
}

int64_t tc_numel(const tc_tensor *t)
{
  return tensor_arg_ok(__func__, t) ? t->numel : -1;
}

tc_dtype tc_dtype_of(const tc_tensor *t)
{
  return tensor_arg_ok(__func__, t) ? (tc_dtype)t->dtype : TC_DTYPE__MAX;
}

bool tc_is_contiguous(const tc_tensor *t)
{
  return tensor_arg_ok(__func__, t) && tensor_is_contiguous(t);
}

int64_t tc_size(const tc_tensor *t, int dim)
{
  if (!tensor_arg_ok(__func__, t))
    return -1;
  int d = tensor_wrap_dim(__func__, dim, t->ndim);
  if (d < 0)
    return -1;
  return t->ndim ? t->shape[d] : 1;
}

int64_t tc_stride(const tc_tensor *t, int dim)
{
  if (!tensor_arg_ok(__func__, t))
    return -1;
  int d = tensor_wrap_dim(__func__, dim, t->ndim);
  if (d < 0)
    return -1;
  return t->ndim ? t->stride[d] : 1;
}

void tensor_dump(const tc_tensor *t, FILE *out)
{
  fprintf(out, "tensor %s [", tc_dtype_name((tc_dtype)t->dtype));
  for (int i = 0; i < t->ndim; i++)
    fprintf(out, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  fprintf(out, "] strides [");
  for (int i = 0; i < t->ndim; i++)
    fprintf(out, "%s%lld", i ? ", " : "", (long long)t->stride[i]);
  fprintf(out, "] offset %lld%s\n", (long long)t->offset,
          t->lazy ? " lazy" : "");
}
