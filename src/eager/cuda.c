/*
** cuda.c -- the CUDA dispatch key. Device storage comes from jit_cuda's
** caching allocator (registered with tensor at init); tc_to moves tensors
** between devices. Eager CUDA ops are one-op kernel IR (DESIGN.md): the
** call becomes a one-node fuse graph, fuse_build plans it shape-dynamic (so
** one kernel serves every shape), jit_cuda renders each kernel step, NVRTC
** compiles it on first use (kept in memory by its code, and on disk
** through the store hooks trace sets: eager_cuda_store) and it is launched
** on tc's stream. In-place ops run their functional twin into
** the target (as trace functionalizes them). Matmul goes to cuBLAS; the
** other extern ops (argmax, cumsum, scatter_add, topk, multinomial) are
** built here from pointwise ops, reductions and hand-built kernels, each
** giving the CPU's result bit for bit. Every op runs on the device.
*/
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "eager.h"
#include "../fuse/fuse.h"
#include "eager_cuda.h"

/* -- Device memory, for tensor ----------------------------------------------- */

/* Has this process put anything on the device? (tc_sync waits for the
** device only then, so CPU programs never load the driver.) */
static atomic_bool device_used;

int eager_cuda_sync(void)
{
  return atomic_load_explicit(&device_used, memory_order_acquire)
         ? jcuda_sync() : 0;
}

static int dev_alloc(void **p, size_t nbytes)
{
  atomic_store_explicit(&device_used, true, memory_order_release);
  jcuda_ptr d = 0;
  int rc = jcuda_alloc(&d, nbytes);
  *p = (void *)(uintptr_t)d;
  return rc;
}

static void dev_free(void *p, size_t nbytes)
{
  jcuda_free((jcuda_ptr)(uintptr_t)p, nbytes);
}

static int dev_to_device(void *dst, const void *src, size_t nbytes)
{
  return jcuda_copy_htod((jcuda_ptr)(uintptr_t)dst, src, nbytes);
}

static int dev_to_host(void *dst, const void *src, size_t nbytes)
{
  return jcuda_copy_dtoh(dst, (jcuda_ptr)(uintptr_t)src, nbytes);
}

static int dev_to_dev(void *dst, const void *src, size_t nbytes)
{
  return jcuda_copy_dtod((jcuda_ptr)(uintptr_t)dst,
                         (jcuda_ptr)(uintptr_t)src, nbytes);
}

static const tensor_device_ops cuda_ops = {
  dev_alloc, dev_free, dev_to_device, dev_to_host, dev_to_dev,
};

/* -- Moving tensors -------------------------------------------------------------- */

static size_t nbytes_of(const tc_tensor *t)
{
  return (size_t)t->numel * tensor_dtype_size[t->dtype];
}

tc_tensor *eager_cuda_from_host(const char *fn, tc_tensor *t)
{
  if (!jcuda_device_available()) {
    tc_seterr(TC_E_DEVICE, "%s: CUDA is not available: %s", fn,
              jcuda_device_reason());
    return NULL;
  }
  tc_tensor *src = tensor_is_contiguous(t) ? tensor_ref(t)
                   : eager_contiguous_copy(t, (tc_dtype)t->dtype);
  tc_tensor *d = src ? tensor_new_on(TC_DEV_CUDA, (tc_dtype)t->dtype,
                                     t->ndim, t->shape) : NULL;
  if (d && nbytes_of(d) &&
      cuda_ops.to_device(tensor_ptr(d), tensor_ptr(src), nbytes_of(d)) < 0) {
    tensor_unref(d);
    d = NULL;
  }
  tensor_unref(src);
  return d;
}

/* The elements t (a view of device storage; strides >= 0) can reach:
** [offset, offset + span). */
static int64_t span_of(const tc_tensor *t)
{
  int64_t last = 0;
  for (int i = 0; i < t->ndim; i++)
    last += (t->shape[i] - 1) * t->stride[i];
  return t->numel ? last + 1 : 0;
}

tc_tensor *eager_cuda_to_host(tc_tensor *t)
{
  const int64_t span = span_of(t);
  tc_tensor *raw = tensor_new((tc_dtype)t->dtype, 1, &span);
  if (!raw)
    return NULL;
  size_t n = (size_t)span * tensor_dtype_size[t->dtype];
  if (n && cuda_ops.to_host(tensor_ptr(raw), tensor_ptr(t), n) < 0) {
    tensor_unref(raw);
    return NULL;
  }
  tc_tensor *v = tensor_new_view(raw, t->ndim, t->shape, t->stride, 0);
  tensor_unref(raw);
  if (!v || tensor_is_contiguous(t))   /* the span is the tensor */
    return v;
  tc_tensor *c = eager_contiguous_copy(v, (tc_dtype)t->dtype);
  tensor_unref(v);
  return c;
}

tc_tensor *eager_on_host(tc_tensor *t)
{
  return tensor_device_of(t) == TC_DEV_CPU ? tensor_ref(t)
                                           : eager_cuda_to_host(t);
}

/* -- Kernels: compiled on first use, kept by their code ---------------------
** Every kernel here is shape-dynamic (sizes and strides are arguments), so
** kernels with the same code (kir_same_code) are one kernel: a call finds
** its compiled function by the code's hash, with no rendering on a hit. A
** miss asks the disk store (the hooks) before NVRTC, and enters a fresh
** cubin there. */

typedef struct cuda_kernel {
  struct cuda_kernel *next;
  uint64_t hash;             /* kir_code_hash(k) */
  kir_kernel *k;             /* owned: the code it was compiled from */
  jcuda_function fn;
} cuda_kernel;

static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_kernel *kernels;

static eager_cuda_store store_hooks;   /* set once, at init */

void eager_cuda_store_set(const eager_cuda_store *hooks)
{
  store_hooks = *hooks;
}

static char *nvrtc_cubin(const char *fn, const char *src, const char *arch,
                         size_t *len)
{
  char *image = NULL, *log = NULL;
  if (jcuda_nvrtc_compile(src, arch, JCUDA_CUBIN, &image, len, &log) < 0) {
    tc_seterr(TC_E_DEVICE, "%s: NVRTC failed: %.160s", fn,
              log ? log : "no log");
    if (log)
      tensor_log(TC_LOG_COMPILE, "NVRTC failed:\n%s", log);
  }
  free(log);
  return image;
}

/* Render, compile and load k, and enter the cubin in the store; NULL with
** the error set. */
static jcuda_function compile_kernel(const char *fn, const kir_kernel *k,
                                     const char *arch)
{
  char why[160];
  double t0 = tensor_now_ms();
  char *src = jcuda_render(k, why, sizeof why);
  if (!src) {
    tc_seterr(TC_E_DEVICE, "%s: cannot render the CUDA kernel: %s", fn, why);
    return NULL;
  }
  size_t len = 0;
  char *image = nvrtc_cubin(fn, src, arch, &len);
  jcuda_function f = NULL;
  if (image && jcuda_module_load(image, &f) < 0)
    f = NULL;
  if (f) {
    double ms = tensor_now_ms() - t0;
    eager_add_compile_ms(ms);
    if (store_hooks.enter)
      store_hooks.enter(k, arch, image, len, src, ms);
  }
  free(image);
  free(src);
  return f;
}

/* k's kernel from the disk store, or NULL (then it is compiled). */
static jcuda_function stored_kernel(const kir_kernel *k, const char *arch)
{
  size_t len = 0;
  void *image = store_hooks.load ? store_hooks.load(k, arch, &len) : NULL;
  jcuda_function f = NULL;
  if (image && jcuda_module_load(image, &f) < 0) {
    tensor_log(TC_LOG_CACHE, "a stored CUDA kernel does not load (%s); "
               "compiling it", tc_last_error());
    f = NULL;
  }
  free(image);
  return f;
}

/* The miss path: the store, else NVRTC; counted as loaded or compiled. */
static jcuda_function load_or_compile(const char *fn, const kir_kernel *k)
{
  char arch[16];
  if (jcuda_arch(arch, sizeof arch) < 0)
    return NULL;
  jcuda_function f = stored_kernel(k, arch);
  if (f) {
    eager_count(ST_KERNELS_LOADED);
    return f;
  }
  if ((f = compile_kernel(fn, k, arch)) != NULL)
    eager_count(ST_KERNELS_COMPILED);
  return f;
}

jcuda_function eager_cuda_kernel(const char *fn, const kir_kernel *k)
{
  TC_ASSERT(k->dynamic, "eager CUDA kernels are shape-dynamic");
  uint64_t h = kir_code_hash(k);
  pthread_mutex_lock(&kernels_lock);
  cuda_kernel *ck = kernels;
  while (ck && !(ck->hash == h && kir_same_code(ck->k, k)))
    ck = ck->next;
  jcuda_function f = ck ? ck->fn : NULL;
  if (!ck && (f = load_or_compile(fn, k)) != NULL) {
    ck = malloc(sizeof *ck);
    kir_kernel *copy = ck ? malloc(sizeof *copy) : NULL;
    if (copy) {
      kir_copy(copy, k);
      *ck = (cuda_kernel){ kernels, h, copy, f };
      kernels = ck;
    } else {
      free(ck);
      tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
      f = NULL;
    }
  }
  pthread_mutex_unlock(&kernels_lock);
  return f;
}

/* -- Running one op's plan -------------------------------------------------------- */

typedef struct {
  const eager_call *c;
  const fuse_plan *p;
  tc_tensor *const *inputs;
  tc_tensor **temp;          /* per plan temporary (owned) */
  tc_tensor *out;            /* the result (owned) */
  tc_tensor *dst;            /* in-place: the target (borrowed) */
} op_run;

static tc_tensor *ref_tensor(op_run *r, fuse_ref ref)
{
  const eager_call *c = r->c;
  switch (ref.kind) {
  case FREF_INPUT:
    return r->inputs[ref.index];
  case FREF_DEST:
    return r->dst;
  case FREF_TEMP:
    if (!r->temp[ref.index]) {
      const fuse_temp *t = &r->p->temps[ref.index];
      r->temp[ref.index] = tensor_new_on(TC_DEV_CUDA, (tc_dtype)t->dtype,
                                         t->ndim, t->shape);
    }
    return r->temp[ref.index];
  case FREF_OUTPUT:
    if (!r->out)
      r->out = tensor_new_on(TC_DEV_CUDA, c->dtype, c->ndim, c->shape);
    return r->out;
  }
  tc_seterr(TC_E_INTERNAL, "%s: a CUDA plan refers to an unknown value",
            c->fn);
  return NULL;
}

int eager_cuda_launch(const char *fn, jcuda_function f, const kir_kernel *k,
                      char *const *bufs, const double *scal,
                      const int64_t *dims)
{
  int64_t units = kir_units(k);
  if (units == 0)
    return 0;
  void *params = malloc(jcuda_params_size(k));
  if (!params)
    return tc_seterr(TC_E_NOMEM, "%s: out of memory", fn), -1;
  jcuda_params_pack(k, params, bufs, scal, dims, 0, units);
  int rc = jcuda_launch_kernel(f, k, params);   /* split reductions too */
  eager_count(ST_KERNELS_LAUNCHED);
  free(params);
  return rc;
}

static int run_kernel_step(op_run *r, const fuse_step *st)
{
  const kir_kernel *k = st->k;
  char *bufs[KIR_MAX_BUFS];
  double scal[KIR_MAX_SCALARS];
  for (int i = 0; i < k->nbufs; i++) {
    tc_tensor *t = ref_tensor(r, st->buf[i]);
    if (!t)
      return -1;
    bufs[i] = (char *)tensor_ptr(t) +
              st->buf_off[i] * (int64_t)tensor_dtype_size[k->buf[i].dtype];
  }
  for (int i = 0; i < st->nscal; i++)
    scal[i] = st->scal[i].which == FUSE_SCALAR_ROW_LEN ? (double)k->row_len
              : r->c->s[st->scal[i].which];
  if (kir_units(k) == 0)
    return 0;
  jcuda_function f = eager_cuda_kernel(r->c->fn, k);
  if (!f)
    return -1;
  int ndyn = k->dynamic ? kir_dyn_len(k) : 0;
  int64_t *dims = ndyn ? malloc(sizeof(int64_t) * (size_t)ndyn) : NULL;
  if (ndyn && !dims)
    return tc_seterr(TC_E_NOMEM, "%s: out of memory", r->c->fn), -1;
  if (dims)
    kir_dyn_fill(k, dims);
  int rc = eager_cuda_launch(r->c->fn, f, k, bufs, scal, dims);
  free(dims);
  return rc;
}

static int run_plan(op_run *r)
{
  for (int s = 0; s < r->p->nsteps; s++) {
    const fuse_step *st = &r->p->steps[s];
    if (st->kind != FSTEP_KERNEL) {
      tc_seterr(TC_E_DEVICE, "%s: %s is not available on cuda yet", r->c->fn,
                op_table[st->kind == FSTEP_EXTERN ? st->op : r->c->op].name);
      return -1;
    }
    if (run_kernel_step(r, st) < 0)
      return -1;
  }
  return 0;
}

/* Index of t among the graph's inputs, added when new. */
static int input_index(tc_tensor *t, tc_tensor **inputs, int *ninputs)
{
  int j = 0;
  while (j < *ninputs && inputs[j] != t)
    j++;
  if (j == *ninputs)
    inputs[(*ninputs)++] = t;
  return j;
}

/* The one-node graph of call c over its (distinct) input tensors: the op
** itself, or for an in-place op its functional twin over the inputs the
** twin takes (the last ones: COPY_ is CAST of the source), as trace's
** functionalization records it. */
static void graph_of(const eager_call *c, tc_op op, fuse_node *n,
                     tc_tensor **inputs, int *ninputs)
{
  int skip = c->nin > op_table[op].nin ? c->nin - op_table[op].nin : 0;
  memset(n, 0, sizeof *n);
  n->op = (uint16_t)op;
  n->dtype = (uint8_t)c->dtype;
  n->cdtype = (uint8_t)c->cdtype;
  n->ndim = c->ndim;
  memcpy(n->shape, c->shape, sizeof(int64_t) * (size_t)c->ndim);
  n->nin = c->nin - skip;
  n->dim = c->dim;
  n->keepdim = c->keepdim;
  n->sc[0] = (fuse_scalar){ 0, 0 };
  n->sc[1] = (fuse_scalar){ 1, 0 };
  *ninputs = 0;
  for (int e = 0; e < n->nin; e++)
    n->in[e].src = c->in[skip + e]
                   ? -input_index(c->in[skip + e], inputs, ninputs) - 1
                   : FUSE_ABSENT;
}

/* Run call c as a one-node plan of op; with dst, the result is written
** into dst (a graph input) and dst returned (no new reference). */
static tc_tensor *run_one_node(const eager_call *c, tc_op op, tc_tensor *dst)
{
  fuse_node node;
  tc_tensor *inputs[4];
  int ninputs;
  graph_of(c, op, &node, inputs, &ninputs);
  const int out_node = 0;
  const int out_dest = dst ? input_index(dst, inputs, &ninputs) : -1;
  fuse_graph g = { 1, &node, NULL, ninputs,
                   (const tc_tensor *const *)inputs, 1, &out_node,
                   &out_dest };
  char reason[160];
  fuse_plan *p = fuse_build(&g, true, reason, sizeof reason);
  if (!p) {
    tc_seterr(TC_E_DEVICE, "%s: %s is not available on cuda yet (%s)", c->fn,
              op_table[c->op].name, reason);
    return NULL;
  }
  op_run r = { c, p, inputs, calloc((size_t)p->ntemps + 1, sizeof(void *)),
               NULL, dst };
  int rc = r.temp ? run_plan(&r) : -1;
  tc_tensor *result = NULL;
  if (rc == 0) {
    fuse_ref ref = p->out_ref[0];
    tc_tensor *v = ref.kind == FREF_OUTPUT || ref.kind == FREF_TEMP
                   ? ref_tensor(&r, ref) : NULL;
    if (ref.kind == FREF_DEST && dst)
      v = dst;
    result = v == dst ? v : tensor_ref(v);
    if (!v)
      tc_seterr(TC_E_DEVICE, "%s: %s is not available on cuda yet", c->fn,
                op_table[c->op].name);
  }
  for (int i = 0; r.temp && i < p->ntemps; i++)
    tensor_unref(r.temp[i]);
  free(r.temp);
  tensor_unref(r.out);
  fuse_plan_free(p);
  return result;
}

/* -- The CUDA key's handlers --------------------------------------------------------- */

/* A 0-d CPU tensor is a scalar that may meet CUDA tensors (as in
** PyTorch): autograd's seeds and constants are made so. */
static bool cpu_scalar(const tc_tensor *t)
{
  return t->ndim == 0 && tensor_device_of(t) == TC_DEV_CPU;
}

/* Every tensor of c on the device (0-d CPU operands aside)? Else the error
** the contract names. */
static bool one_device(const eager_call *c)
{
  bool cpu = false, cuda = false;
  for (int e = 0; e < c->nin; e++)
    if (c->in[e] && !cpu_scalar(c->in[e])) {
      cpu |= tensor_device_of(c->in[e]) == TC_DEV_CPU;
      cuda |= tensor_device_of(c->in[e]) == TC_DEV_CUDA;
    }
  if (c->dst) {
    cpu |= tensor_device_of(c->dst) == TC_DEV_CPU;
    cuda |= tensor_device_of(c->dst) == TC_DEV_CUDA;
  }
  if (cpu && cuda) {
    tc_seterr(TC_E_DEVICE, "%s expects tensors on one device (cpu and "
              "cuda)", c->fn);
    return false;
  }
  return true;
}

static tc_tensor *cuda_view(const eager_call *c)
{
  const tensor_geom *g = &c->view;
  return tensor_new_view(c->in[0], g->ndim, g->shape, g->stride, g->offset);
}

static tc_tensor *cuda_contiguous(const eager_call *c)
{
  const tc_tensor *t = c->in[0];
  if (tensor_is_contiguous(t) && t->dtype == c->dtype)
    return tensor_new_view(t, t->ndim, t->shape, t->stride, t->offset);
  eager_call cast = *c;
  cast.op = TC_OP_CAST;   /* a pointwise copy into a fresh tensor */
  return run_one_node(&cast, TC_OP_CAST, NULL);
}

/* -- Matmul: cuBLAS ------------------------------------------------------------- */

/* Matmul operand t as a contiguous device tensor of dtype dt. */
static tc_tensor *gemm_operand(const eager_call *c, tc_tensor *t, tc_dtype dt)
{
  eager_call cc = { .op = TC_OP_CONTIGUOUS, .fn = c->fn, .nin = 1,
                    .in = { t }, .dtype = dt, .cdtype = dt,
                    .ndim = t->ndim };
  memcpy(cc.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return cuda_contiguous(&cc);
}

/* The batch stride of an operand of `count` matrices of `size` elements
** against the result's `batch`: its own, 0 when one matrix serves every
** batch, or -1 for a broadcast cuBLAS's strides cannot express. */
static int64_t batch_stride(int64_t count, int64_t size, int64_t batch)
{
  return count == batch ? size : count == 1 ? 0 : -1;
}

/* Operand t of matmul c (at least 3-D) as a view with the result's batch
** dims: stride 0 where t has a 1 or lacks the dim (then made contiguous,
** a batch of copies, so that one strided-batched call serves). */
static tc_tensor *batch_broadcast(const eager_call *c, tc_tensor *t)
{
  int nd = c->ndim, lead = c->ndim - t->ndim;
  int64_t shape[TC_MAX_DIMS], stride[TC_MAX_DIMS];
  for (int d = 0; d < nd - 2; d++) {
    int td = d - lead;
    shape[d] = c->shape[d];
    stride[d] = td < 0 || t->shape[td] == 1 ? 0 : t->stride[td];
  }
  for (int d = nd - 2; d < nd; d++) {
    shape[d] = t->shape[d - lead];
    stride[d] = t->stride[d - lead];
  }
  return tensor_new_view(t, nd, shape, stride, t->offset);
}

/* torch.matmul (1-D operands as a row or a column; batch dims broadcast)
** in f32 or f64; f16 and bf16 as the CPU computes them (half.c): the
** operands converted to f32 exactly, the product rounded to the dtype. */
static tc_tensor *cuda_matmul(const eager_call *c)
{
  const tc_tensor *a = c->in[0], *b = c->in[1];
  tc_dtype dt = tensor_compute_of(c->dtype);
  if (dt != TC_F32 && dt != TC_F64) {
    tc_seterr(TC_E_DEVICE, "%s: matmul of %s is not available on cuda",
              c->fn, tc_dtype_name(c->dtype));
    return NULL;
  }
  int64_t m = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
  int64_t k = a->shape[a->ndim - 1];
  int64_t n = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
  int64_t cnum = 1;
  for (int d = 0; d < c->ndim; d++)
    cnum *= c->shape[d];
  int64_t batch = m > 0 && n > 0 ? cnum / (m * n) : 0;
  int64_t sa = batch_stride(m > 0 && k > 0 ? a->numel / (m * k) : batch,
                            m * k, batch);
  int64_t sb = batch_stride(k > 0 && n > 0 ? b->numel / (k * n) : batch,
                            k * n, batch);
  /* A partial broadcast (batch dims 2 x 1 against 1 x 3) has no one batch
  ** stride: that operand is broadcast to the result's batch first, a
  ** matrix a batch. Both operands have batch dims then, so the result has
  ** its full rank. */
  tc_tensor *wa = sa < 0 ? batch_broadcast(c, c->in[0])
                         : tensor_ref(c->in[0]);
  tc_tensor *wb = sb < 0 ? batch_broadcast(c, c->in[1])
                         : tensor_ref(c->in[1]);
  sa = sa < 0 ? m * k : sa;
  sb = sb < 0 ? k * n : sb;
  tc_tensor *ca = wa ? gemm_operand(c, wa, dt) : NULL;
  tc_tensor *cb = wb ? gemm_operand(c, wb, dt) : NULL;
  tc_tensor *out = ca && cb ? tensor_new_on(TC_DEV_CUDA, dt, c->ndim,
                                            c->shape) : NULL;
  if (out && jcuda_gemm(dt, m, n, k, batch,
                        (jcuda_ptr)(uintptr_t)tensor_ptr(ca), sa,
                        (jcuda_ptr)(uintptr_t)tensor_ptr(cb), sb,
                        (jcuda_ptr)(uintptr_t)tensor_ptr(out), m * n) < 0) {
    tensor_unref(out);
    out = NULL;
  }
  tensor_unref(wa);
  tensor_unref(wb);
  tensor_unref(ca);
  tensor_unref(cb);
  if (out && dt != c->dtype) {   /* rounded to the storage dtype */
    eager_call cast = { .op = TC_OP_CAST, .fn = c->fn, .nin = 1,
                        .in = { out }, .dtype = c->dtype,
                        .cdtype = c->dtype, .ndim = c->ndim };
    memcpy(cast.shape, c->shape, sizeof(int64_t) * (size_t)c->ndim);
    tc_tensor *narrow = run_one_node(&cast, TC_OP_CAST, NULL);
    tensor_unref(out);
    out = narrow;
  }
  return out;
}

/* -- Joining: copies into the result's slices ------------------------------------ */

/* CAT: each operand copied (converted to the result's dtype, as the CPU's
** kernel converts) into its slice of the result along dim, in order. */
static tc_tensor *cuda_cat(const eager_call *c)
{
  tc_tensor *out = tensor_new_on(TC_DEV_CUDA, c->dtype, c->ndim, c->shape);
  int64_t at = 0;
  for (int e = 0; e < c->nin && out; e++) {
    tc_tensor *t = c->in[e];
    if (!t || t->numel == 0)
      continue;
    tc_tensor *slice = tensor_new_view(out, t->ndim, t->shape, out->stride,
                                       out->offset + at * out->stride[c->dim]);
    at += t->shape[c->dim];
    if (!slice || eager_cuda_copy_into(slice, t) < 0) {
      tensor_unref(out);
      out = NULL;
    }
    tensor_unref(slice);
  }
  return out;
}

/* -- Argmax, argmin: composed of the device's own kernels -----------------------
** The CPU's rule (reduce.c: the first best value, and a NaN before any
** number): the row's best m (MAX or MIN, NaN when the row has one), then
** the least position whose value is m, or NaN. Each step is a call the
** CUDA key runs directly (the op's own call did the checks, the tracing
** and autograd's part). */

static tc_tensor *cuda_dispatch(const eager_call *c);

/* Drop the references of an array of intermediates (NULLs skipped). */
static void unref_all(tc_tensor *const *ts, size_t n)
{
  for (size_t i = 0; i < n; i++)
    tensor_unref(ts[i]);
}
#define UNREF_ALL(arr) unref_all(arr, sizeof arr / sizeof *arr)

/* Pointwise op of in[0..nin) on the device. */
static tc_tensor *cuda_pointwise(const char *fn, tc_op op, int nin,
                                 tc_tensor *const *in)
{
  eager_call c = { .op = op, .fn = fn, .nin = nin };
  for (int i = 0; i < nin; i++)
    c.in[i] = in[i];
  if (tensor_infer_pointwise(fn, op, nin, (const tc_tensor *const *)in, c.s,
                             &c.ndim, c.shape, &c.dtype, &c.cdtype) < 0)
    return NULL;
  return cuda_dispatch(&c);
}

/* Reduction op of a over dim d (kept as a dim of 1 when keepdim). */
static tc_tensor *cuda_reduce(const char *fn, tc_op op, tc_tensor *a, int d,
                              bool keepdim)
{
  eager_call c = { .op = op, .fn = fn, .nin = 1, .in = { a }, .dim = d,
                   .keepdim = keepdim, .ndim = 0 };
  c.dtype = tensor_result_dtype(fn, op, 1, (const tc_tensor *const *)&a,
                                NULL);
  if (c.dtype == TC_DTYPE__MAX)
    return NULL;
  c.cdtype = tensor_compute_of(c.dtype);
  for (int i = 0; i < a->ndim; i++)
    if (i != d || keepdim)
      c.shape[c.ndim++] = i == d ? 1 : a->shape[i];
  return cuda_dispatch(&c);
}

/* An i64 device tensor of `shape` whose element j along dim d is j (or
** every element n when d < 0). */
static tc_tensor *cuda_positions(const char *fn, int ndim,
                                 const int64_t *shape, int d, int64_t n)
{
  tc_tensor *h = tensor_new(TC_I64, ndim, shape);
  if (!h)
    return NULL;
  int64_t *p = tensor_ptr(h);
  for (int64_t j = 0; j < h->numel; j++)
    p[j] = d < 0 ? n : j;
  tc_tensor *dv = eager_cuda_from_host(fn, h);
  tensor_unref(h);
  return dv;
}

static tc_tensor *cuda_argbest(const eager_call *c)
{
  tc_tensor *x = c->in[0], *row = NULL;
  int d = c->dim;
  if (x->ndim == 0)   /* one row of one */
    x = row = tensor_new_view(x, 1, (int64_t[]){ 1 }, (int64_t[]){ 1 },
                              x->offset);
  if (!x)
    return NULL;
  int64_t n = x->shape[d], pshape[TC_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++)
    pshape[i] = i == d ? n : 1;
  tc_op best_op = c->op == TC_OP_ARGMAX ? TC_OP_MAX : TC_OP_MIN;
  const char *fn = c->fn;
  tc_tensor *best = NULL, *is_best = NULL, *is_nan = NULL, *pos = NULL,
            *none = NULL, *at_best = NULL, *at = NULL, *r = NULL;
  if ((best = cuda_reduce(fn, best_op, x, d, true)) &&
      (is_best = cuda_pointwise(fn, TC_OP_EQ, 2, (tc_tensor *[]){ x, best })) &&
      (is_nan = cuda_pointwise(fn, TC_OP_NE, 2, (tc_tensor *[]){ x, x })) &&
      (pos = cuda_positions(fn, x->ndim, pshape, d, n)) &&
      (none = cuda_positions(fn, 0, NULL, -1, n)) &&
      (at_best = cuda_pointwise(fn, TC_OP_WHERE, 3,
                                (tc_tensor *[]){ is_best, pos, none })) &&
      (at = cuda_pointwise(fn, TC_OP_WHERE, 3,
                           (tc_tensor *[]){ is_nan, pos, at_best })))
    r = cuda_reduce(fn, TC_OP_MIN, at, d, c->keepdim && !row);
  tc_tensor *temps[] = { best, is_best, is_nan, pos, none, at_best, at, row };
  UNREF_ALL(temps);
  return r;
}

/* -- Cumsum and scatter_add: sequential kernels -----------------------------
** The CPU adds along the dim one element after another (reduce.c,
** index.c). Here a thread per row does the same (kir.h's sequential
** passes), so the sums are the CPU's bit for bit. The halves compute in
** f32 and round the result, as half.c runs them on the CPU. */

/* A shape-dynamic ROWS kernel over `shape` (ndim dims) with dim d as its
** row axis: a 0-d shape is one row of one. */
static kir_kernel *seq_kernel(const char *fn, int ndim, const int64_t *shape,
                              int d)
{
  kir_kernel *k = kir_new();
  if (!k) {
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return NULL;
  }
  k->kind = KIR_ROWS;
  k->dynamic = true;
  for (int i = 0; i < ndim; i++)
    if (i != d)
      k->size[k->ndim++] = shape[i];
  k->row_len = ndim ? shape[d] : 1;
  return k;
}

/* A buffer of k for t, read at k's positions (t's strides, dim d last). */
static int seq_buf(kir_kernel *k, kir_buf_role role, const tc_tensor *t,
                   int d)
{
  kir_buf *b = &k->buf[k->nbufs];
  *b = (kir_buf){ .role = (uint8_t)role, .dtype = t->dtype };
  int n = 0;
  for (int i = 0; i < t->ndim; i++)
    if (i != d)
      b->stride[n++] = t->stride[i];
  b->stride[n] = t->ndim ? t->stride[d] : 0;
  return k->nbufs++;
}

/* Run k (a hand-built kernel, consumed) over the tensors of its buffers. */
static int run_built(const char *fn, kir_kernel *k, tc_tensor *const *ts)
{
  char *bufs[KIR_MAX_BUFS];
  for (int b = 0; b < k->nbufs; b++)
    bufs[b] = tensor_ptr(ts[b]);
  kir_collapse(k, true);
  int64_t dims[(TC_MAX_DIMS + 1) * (KIR_MAX_BUFS + 1)];
  kir_dyn_fill(k, dims);
  int rc = 0;
  if (kir_units(k) > 0 && (k->kind == KIR_MAP || k->row_len > 0)) {
    jcuda_function f = eager_cuda_kernel(fn, k);
    rc = f ? eager_cuda_launch(fn, f, k, bufs, (double[]){ 0 }, dims) : -1;
  }
  kir_free(k);
  return rc;
}

/* t (on the device) as a new contiguous tensor of dtype dt. */
static tc_tensor *cuda_copy_as(const eager_call *c, tc_tensor *t, tc_dtype dt)
{
  eager_call cc = { .op = TC_OP_CAST, .fn = c->fn, .nin = 1, .in = { t },
                    .dtype = dt, .cdtype = dt, .ndim = t->ndim };
  memcpy(cc.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return run_one_node(&cc, TC_OP_CAST, NULL);
}

static tc_tensor *cuda_cumsum(const eager_call *c)
{
  tc_tensor *x = c->in[0];
  tc_tensor *out = tensor_new_on(TC_DEV_CUDA, c->dtype, c->ndim, c->shape);
  kir_kernel *k = out ? seq_kernel(c->fn, x->ndim, x->shape, c->dim) : NULL;
  if (!k)
    return tensor_unref(out), NULL;
  int bx = seq_buf(k, KIR_IN, x, c->dim);
  int bo = seq_buf(k, KIR_OUT, out, c->dim);
  int v = kir_cast(k, tensor_compute_of(c->dtype), kir_load(k, bx));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCAN, KIR_RED_SUM,
                                      (int16_t)bo, v, -1 };
  if (run_built(c->fn, k, (tc_tensor *[]){ x, out }) < 0)
    return tensor_unref(out), NULL;
  return out;
}

/* a's copy (in the compute dtype), then src's values added into it at the
** index positions, each row of the index (along dim) in order. */
static tc_tensor *cuda_scatter_add(const eager_call *c)
{
  tc_tensor *a = c->in[0], *idx = c->in[1], *src = c->in[2];
  int d = c->dim;
  tc_dtype w = tensor_compute_of(c->dtype);
  if (!kir_seq_dtype(w))
    return tc_seterr(TC_E_DTYPE, "%s: unsupported dtype %s", c->fn,
                     tc_dtype_name(c->dtype)), NULL;
  tc_tensor *out = cuda_copy_as(c, a, w);
  kir_kernel *k = out ? seq_kernel(c->fn, idx->ndim, idx->shape, d) : NULL;
  if (!k)
    return tensor_unref(out), NULL;
  int bi = seq_buf(k, KIR_IN, idx, d), bs = seq_buf(k, KIR_IN, src, d);
  int bo = seq_buf(k, KIR_OUT, out, d);
  kir_buf *ob = &k->buf[bo];   /* the index picks the place along d */
  ob->gather = true;
  ob->gstride = ob->stride[k->ndim];
  ob->gsize = out->ndim ? out->shape[d] : 1;
  ob->stride[k->ndim] = 0;
  int at = kir_cast(k, TC_I64, kir_load(k, bi));
  int v = kir_cast(k, w, kir_load(k, bs));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_SCATTER, KIR_RED_SUM,
                                      (int16_t)bo, v, at };
  if (run_built(c->fn, k, (tc_tensor *[]){ idx, src, out }) < 0)
    return tensor_unref(out), NULL;
  if (w == c->dtype)
    return out;
  tc_tensor *r = cuda_copy_as(c, out, c->dtype);
  tensor_unref(out);
  return r;
}

/* -- Topk: ranks under the CPU's order ---------------------------------------
** TOPK gives indices only (its values are a gather at them) and the CPU's
** order is total (NaN above every number, then the value, ties to the
** lower index), so any exact method gives the CPU's indices. An element's
** rank is the count of elements before it (a ROWS kernel comparing along
** its row axis), and place t of the result holds the element ranked t (in
** index order: the t-th of the chosen by position), picked by a ROWS
** kernel: the MAX over a row of the one value whose key is t.
**
** Ranks over a whole row take n^2 compares. A long row with a small k is
** cut into C chunks of B instead, the last filled out past the row's end
** with pads (after every element): each of the top k is in its chunk's
** top min(k, B), so only those candidates (M = C min(k, B)) are ranked
** among themselves, n B + M^2 compares in all. The kernels work on
** [R, G, m] views (R rows, G groups of m: a chunk, or a row as G = 1). */

/* Topk's chunk sizes: powers of two from TOPK_CHUNK_MIN, for rows of at
** least TOPK_CHUNKED_MIN (a shorter row's compares cost less than the
** extra launches). */
#define TOPK_CHUNK_MIN 64
#define TOPK_CHUNK_MAX 8192
#define TOPK_CHUNKED_MIN 1024

/* The rank kernel's value: is element i (xi, pi) before element j? */
static int before(kir_kernel *k, int xi, int xj, int pi, int pj, bool desc,
                  bool is_float)
{
  int no = kir_const(k, TC_BOOL, 0), yes = kir_const(k, TC_BOOL, 1);
  int gt = kir_emit(k, desc ? KOP_GT : KOP_LT, TC_BOOL, xi, xj, -1);
  int eq = kir_emit(k, KOP_EQ, TC_BOOL, xi, xj, -1);
  int better = gt, tie = eq;
  if (is_float) {   /* a NaN is above every number, equal to a NaN */
    int ni = kir_emit(k, KOP_NE, TC_BOOL, xi, xi, -1);
    int nj = kir_emit(k, KOP_NE, TC_BOOL, xj, xj, -1);
    int top = desc ? ni : nj, other = desc ? nj : ni;
    int not_other = kir_emit(k, KOP_SEL, TC_BOOL, other, no, yes);
    better = kir_emit(k, KOP_SEL, TC_BOOL, top, not_other, gt);
    tie = kir_emit(k, KOP_SEL, TC_BOOL, ni, nj, eq);
  }
  int lower = kir_emit(k, KOP_LT, TC_BOOL, pi, pj, -1);
  int first = kir_emit(k, KOP_SEL, TC_BOOL, tie, lower, no);
  return kir_emit(k, KOP_SEL, TC_BOOL, better, yes, first);
}

/* A ROWS kernel over [R, G, m] groups, its row axis along m, its points
** [R, G, slots]; buffers added with group_buf. */
static kir_kernel *group_kernel(const char *fn, const int64_t *rgm,
                                int64_t slots)
{
  kir_kernel *k = kir_new();
  if (!k) {
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return NULL;
  }
  k->kind = KIR_ROWS;
  k->dynamic = true;
  k->ndim = 3;
  k->size[0] = rgm[0];
  k->size[1] = rgm[1];
  k->size[2] = slots;
  k->row_len = rgm[2];
  return k;
}

/* A buffer of k for t ([R, G, m], or 0-d: the same element everywhere),
** of dtype dt, its last dim read along the points (along_row false) or
** along the row axis (true). */
static int group_buf(kir_kernel *k, kir_buf_role role, const tc_tensor *t,
                     tc_dtype dt, bool along_row)
{
  kir_buf *b = &k->buf[k->nbufs];
  *b = (kir_buf){ .role = (uint8_t)role, .dtype = (uint8_t)dt };
  if (t->ndim == 3) {
    b->stride[0] = t->stride[0];
    b->stride[1] = t->stride[1];
    b->stride[along_row ? 3 : 2] = t->stride[2];
  }
  return k->nbufs++;
}

/* Run a group kernel: its value v summed (REDUCE SUM, i64) or the MAX of
** its values (pick) per point, stored at each point of out. */
static int run_group(const char *fn, kir_kernel *k, kir_red red,
                     const int *v, int nv, tc_tensor *const *ts)
{
  for (int i = 0; i < nv; i++)
    k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, (uint8_t)red, -1,
                                        v[i], -1 };
  for (int i = 0; i < nv; i++)
    k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE_ROW, (uint8_t)red,
                                        (int16_t)(k->nbufs - nv + i),
                                        kir_rowvar(k, i), -1 };
  return run_built(fn, k, ts);
}

/* i64 [R, G, m]: each element's rank in its group of v (by the order, ties
** by the i64 positions p, [R, G, m]); positions at or above the 0-d n are
** pads, after every element and in position order among themselves (so
** the ranks are a permutation, and a pick finds each). */
static tc_tensor *group_ranks(const char *fn, tc_tensor *v, tc_tensor *p,
                              tc_tensor *n, bool desc)
{
  tc_tensor *rank = tensor_new_on(TC_DEV_CUDA, TC_I64, 3, v->shape);
  kir_kernel *k = rank ? group_kernel(fn, v->shape, v->shape[2]) : NULL;
  if (!k)
    return tensor_unref(rank), NULL;
  tc_dtype vt = (tc_dtype)v->dtype;
  int xj = kir_load(k, group_buf(k, KIR_IN, v, vt, false));
  int xi = kir_load(k, group_buf(k, KIR_IN, v, vt, true));
  int pj = kir_load(k, group_buf(k, KIR_IN, p, TC_I64, false));
  int pi = kir_load(k, group_buf(k, KIR_IN, p, TC_I64, true));
  int end = kir_load(k, group_buf(k, KIR_IN, n, TC_I64, false));
  group_buf(k, KIR_OUT, rank, TC_I64, false);
  int no = kir_const(k, TC_BOOL, 0), yes = kir_const(k, TC_BOOL, 1);
  int pad_i = kir_emit(k, KOP_GE, TC_BOOL, pi, end, -1);
  int pad_j = kir_emit(k, KOP_GE, TC_BOOL, pj, end, -1);
  int real = before(k, xi, xj, pi, pj, desc, tensor_dtype_is_float(vt));
  int lower = kir_emit(k, KOP_LT, TC_BOOL, pi, pj, -1);
  int by_i = kir_emit(k, KOP_SEL, TC_BOOL, pad_j, lower, no);   /* pad i */
  int by_j = kir_emit(k, KOP_SEL, TC_BOOL, pad_j, yes, real);   /* real i */
  int b = kir_cast(k, TC_I64, kir_emit(k, KOP_SEL, TC_BOOL, pad_i, by_i,
                                       by_j));
  if (run_group(fn, k, KIR_RED_SUM, &b, 1,
                (tc_tensor *[]){ v, v, p, p, n, rank }) < 0)
    return tensor_unref(rank), NULL;
  return rank;
}

/* The value no element is below in MAX's order: a pick's filler. */
static int lowest(kir_kernel *k, tc_dtype dt)
{
  double v = tensor_dtype_is_float(dt) ? -(double)INFINITY
             : dt == TC_I32 ? (double)INT32_MIN : (double)INT64_MIN;
  return kir_const(k, dt, v);
}

/* Picks: for each group of key (i64 [R, G, m]) and each slot t < slots,
** the element of each of v[0..nv) (like key) whose key is t, in
** out[0..nv) ([R, G, slots]; a half value in f32). Every slot must be one
** element's key. */
static int group_pick(const char *fn, tc_tensor *key, int nv,
                      tc_tensor *const *v, int64_t slots, tc_tensor **out)
{
  tc_tensor *t = cuda_positions(fn, 1, &slots, 0, slots);
  tc_tensor *tv = t ? tensor_new_view(t, 3, (int64_t[]){ 1, 1, slots },
                                      (int64_t[]){ 0, 0, 1 }, 0) : NULL;
  int64_t shape[3] = { key->shape[0], key->shape[1], slots };
  tc_dtype dt[2];
  bool ok = tv != NULL;
  for (int i = 0; i < nv; i++) {
    dt[i] = tensor_compute_of((tc_dtype)v[i]->dtype);
    out[i] = ok ? tensor_new_on(TC_DEV_CUDA, dt[i], 3, shape) : NULL;
    ok = out[i] != NULL;
  }
  kir_kernel *k = ok ? group_kernel(fn, key->shape, slots) : NULL;
  int rc = -1;
  if (k) {
    int ki = kir_load(k, group_buf(k, KIR_IN, key, TC_I64, true));
    int ti = kir_load(k, group_buf(k, KIR_IN, tv, TC_I64, false));
    int is_t = kir_emit(k, KOP_EQ, TC_BOOL, ki, ti, -1), val[2];
    for (int i = 0; i < nv; i++) {
      int x = kir_cast(k, dt[i], kir_load(k, group_buf(k, KIR_IN, v[i],
                                                      (tc_dtype)v[i]->dtype,
                                                      true)));
      val[i] = kir_emit(k, KOP_SEL, dt[i], is_t, x, lowest(k, dt[i]));
    }
    for (int i = 0; i < nv; i++)
      group_buf(k, KIR_OUT, out[i], dt[i], false);
    tc_tensor *ts[6] = { key, tv };
    int nb = 2;
    for (int i = 0; i < nv; i++)
      ts[nb++] = v[i];
    for (int i = 0; i < nv; i++)
      ts[nb++] = out[i];
    rc = run_group(fn, k, KIR_RED_MAX, val, nv, ts);
  }
  tensor_unref(t);
  tensor_unref(tv);
  for (int i = 0; i < nv && rc < 0; i++) {
    tensor_unref(out[i]);
    out[i] = NULL;
  }
  return rc;
}

/* i64 [R, 1, M]: for a candidate of rank g (< the 0-d k: chosen) at
** position p, how many chosen candidates have a lower position; M for the
** others (no slot's key). */
static tc_tensor *index_order(const char *fn, tc_tensor *g, tc_tensor *p,
                              tc_tensor *k0)
{
  tc_tensor *key = tensor_new_on(TC_DEV_CUDA, TC_I64, 3, g->shape);
  kir_kernel *k = key ? group_kernel(fn, g->shape, g->shape[2]) : NULL;
  if (!k)
    return tensor_unref(key), NULL;
  int gj = kir_load(k, group_buf(k, KIR_IN, g, TC_I64, false));
  int gi = kir_load(k, group_buf(k, KIR_IN, g, TC_I64, true));
  int pj = kir_load(k, group_buf(k, KIR_IN, p, TC_I64, false));
  int pi = kir_load(k, group_buf(k, KIR_IN, p, TC_I64, true));
  int kk = kir_load(k, group_buf(k, KIR_IN, k0, TC_I64, false));
  group_buf(k, KIR_OUT, key, TC_I64, false);
  int no = kir_const(k, TC_BOOL, 0), yes = kir_const(k, TC_BOOL, 1);
  int cj = kir_emit(k, KOP_LT, TC_BOOL, gj, kk, -1);
  int ci = kir_emit(k, KOP_LT, TC_BOOL, gi, kk, -1);
  int lower = kir_emit(k, KOP_LT, TC_BOOL, pi, pj, -1);
  int both = kir_emit(k, KOP_SEL, TC_BOOL, ci, lower, no);
  int b = kir_cast(k, TC_I64, kir_emit(k, KOP_SEL, TC_BOOL, cj, both, yes));
  if (run_group(fn, k, KIR_RED_SUM, &b, 1,
                (tc_tensor *[]){ g, g, p, p, k0, key }) < 0)
    return tensor_unref(key), NULL;
  return key;
}

/* A view of t (contiguous [R, m], at element off) as `shape`, its dim d
** along m (stride 1) and its other dims, in order, over R. */
static tc_tensor *rows_view(tc_tensor *t, int ndim, const int64_t *shape,
                            int d, int64_t m, int64_t off)
{
  int64_t st[TC_MAX_DIMS], s = m;
  for (int i = ndim - 1; i >= 0; i--) {
    if (i == d)
      continue;
    st[i] = s;
    s *= shape[i];
  }
  st[d] = 1;
  return tensor_new_view(t, ndim, shape, st, t->offset + off);
}

/* x (any strides) as a new contiguous [R, cb] along its dim d, filled out
** past its length with copies of the last element (pads: never read as
** values). */
static tc_tensor *topk_pack(tc_tensor *x, int d, int64_t r, int64_t cb)
{
  int nd = x->ndim;
  int64_t n = x->shape[d], ps[TC_MAX_DIMS], xst[TC_MAX_DIMS];
  tc_tensor *xp = tensor_new_on(TC_DEV_CUDA, (tc_dtype)x->dtype, 2,
                                (int64_t[]){ r, cb });
  tc_tensor *body = xp ? rows_view(xp, nd, x->shape, d, cb, 0) : NULL;
  bool ok = body && eager_cuda_copy_into(body, x) == 0;
  tensor_unref(body);
  if (ok && cb > n) {
    memcpy(ps, x->shape, sizeof(int64_t) * (size_t)nd);
    memcpy(xst, x->stride, sizeof(int64_t) * (size_t)nd);
    ps[d] = cb - n;
    xst[d] = 0;
    tc_tensor *pad = rows_view(xp, nd, ps, d, cb, n);
    tc_tensor *last = tensor_new_view(x, nd, ps, xst,
                                      x->offset + (n - 1) * x->stride[d]);
    ok = pad && last && eager_cuda_copy_into(pad, last) == 0;
    tensor_unref(pad);
    tensor_unref(last);
  }
  if (!ok)
    return tensor_unref(xp), NULL;
  return xp;
}

/* Compares topk makes over a row of n, in chunks of b (b = n: whole). */
static double topk_cost(int64_t n, int64_t k, int64_t b, bool sorted)
{
  double c = (double)((n + b - 1) / b), kb = (double)(k < b ? k : b);
  double m = c == 1 ? (double)n : c * kb;
  double ranks = c * (double)b * (double)b + (c == 1 ? 0 : 2 * kb * c * b +
                                              m * m);
  return ranks + (double)k * m + (sorted ? 0 : m * m);
}

/* The chunk size for a row of n: the cheapest B when it takes under half
** the compares of the whole row (the extra launches' worth), else n. */
static int64_t topk_chunk(int64_t n, int64_t k, bool sorted)
{
  int64_t best = n;
  double cost = topk_cost(n, k, n, sorted) / 2;
  if (n < TOPK_CHUNKED_MIN)
    return n;
  for (int64_t b = TOPK_CHUNK_MIN; b <= TOPK_CHUNK_MAX && b < n; b *= 2) {
    double c = topk_cost(n, k, b, sorted);
    if (c < cost) {
      best = b;
      cost = c;
    }
  }
  return best;
}

static tc_tensor *cuda_topk(const eager_call *c)
{
  const char *fn = c->fn;
  tc_tensor *x = c->in[0];
  int d = c->dim;
  int64_t n = x->shape[d], k = c->shape[d];
  if (k == 0 || x->numel == 0)
    return tensor_new_on(TC_DEV_CUDA, TC_I64, c->ndim, c->shape);
  bool desc = c->s[0] != 0, sorted = c->s[1] != 0;
  int64_t r = x->numel / n, b = topk_chunk(n, k, sorted);
  int64_t nc = (n + b - 1) / b, kb = k < b ? k : b, m = nc * kb;
  tc_tensor *xp = NULL, *pos = NULL, *end = NULL, *kt = NULL, *xg = NULL,
            *pg = NULL, *rank = NULL, *cand[2] = { NULL, NULL }, *cv = NULL,
            *cp = NULL, *g = NULL, *key = NULL, *out = NULL, *ov = NULL,
            *res = NULL;
  int64_t cb = nc * b, rgb[3] = { r, nc, b };
  if (!(xp = topk_pack(x, d, r, cb)) ||
      !(pos = cuda_positions(fn, 1, &cb, 0, cb)) ||
      !(end = cuda_positions(fn, 0, NULL, -1, n)) ||
      !(kt = cuda_positions(fn, 0, NULL, -1, k)) ||
      !(xg = tensor_new_view(xp, 3, rgb, (int64_t[]){ cb, b, 1 }, 0)) ||
      !(pg = tensor_new_view(pos, 3, rgb, (int64_t[]){ 0, b, 1 }, 0)) ||
      !(rank = group_ranks(fn, xg, pg, end, desc)))
    goto done;
  int64_t rm[3] = { r, 1, m };
  if (nc == 1) {   /* the ranks are the row's */
    g = tensor_ref(rank);
    cp = tensor_ref(pg);
  } else {   /* the chunks' candidates ranked among themselves */
    if (group_pick(fn, rank, 2, (tc_tensor *[]){ pg, xg }, kb, cand) < 0 ||
        !(cp = tensor_new_view(cand[0], 3, rm, (int64_t[]){ m, m, 1 }, 0)) ||
        !(cv = tensor_new_view(cand[1], 3, rm, (int64_t[]){ m, m, 1 }, 0)) ||
        !(g = group_ranks(fn, cv, cp, end, desc)))
      goto done;
  }
  if (!sorted && !(key = index_order(fn, g, cp, kt)))
    goto done;
  tc_tensor *place[1];
  if (group_pick(fn, sorted ? g : key, 1, &cp, k, place) < 0)
    goto done;
  out = place[0];   /* [R, 1, k], as c's shape with d the last */
  if (!(ov = rows_view(out, c->ndim, c->shape, d, k, 0)))
    goto done;
  res = tensor_is_contiguous(ov) ? tensor_ref(ov)
                                 : cuda_copy_as(c, ov, TC_I64);
done:;
  tc_tensor *temps[] = { xp, pos, end, kt, xg, pg, rank, cand[0], cand[1],
                         cv, cp, g, key, out, ov };
  UNREF_ALL(temps);
  return res;
}

/* -- Multinomial: the CPU's draws from the same uniforms ---------------------
** The CPU (index.c) draws index i for uniform x from weights w (in f64) as
** the first i whose running sum exceeds u = x * total; a u that rounds up
** to the total takes the last positive weight. Here the running sums are
** cumsum's kernel (the CPU's sums bit for bit, in the scan order); as they
** never decrease, the first i above u is the count of sums at or below u.
** One ROWS kernel over the draws counts them, finds the last positive
** weight and picks between the two (draw_kernel). The uniforms are
** eager_uniform's, made on the host (a row's n values) and copied over.
** Without replacement the draws go one at a time, each zeroing the weight
** it drew for the later ones: three launches a draw. */

/* The draws into out (i64 (R, k), any strides) from weights w (f64 (R, m)),
** their running sums cum (f64 (R, m)) and uniforms x (f64 (R, k)); pos:
** i64 (1, m), the positions along a row. Per draw u = x * total: the count
** of sums at or below u when u < total, else the last positive weight. */
static int draw_kernel(const char *fn, tc_tensor *w, tc_tensor *cum,
                       tc_tensor *x, tc_tensor *pos, tc_tensor *out)
{
  int64_t m = cum->shape[1];
  kir_kernel *k = kir_new();
  tc_tensor *total = tensor_new_view(cum, 2, (int64_t[]){ cum->shape[0], 1 },
                                     cum->stride,
                                     cum->offset + (m - 1) * cum->stride[1]);
  if (!k || !total) {
    kir_free(k);
    tensor_unref(total);
    return tc_seterr(TC_E_NOMEM, "%s: out of memory", fn), -1;
  }
  k->kind = KIR_ROWS;
  k->dynamic = true;
  k->ndim = 2;
  k->size[0] = out->shape[0];
  k->size[1] = out->shape[1];
  k->row_len = m;
  k->nbufs = 6;   /* along the row: sums, weights, positions; per draw:
                     its uniform, the row's total; the draws */
  k->buf[0] = (kir_buf){ .role = KIR_IN, .dtype = TC_F64,
                         .stride = { cum->stride[0], 0, cum->stride[1] } };
  k->buf[1] = (kir_buf){ .role = KIR_IN, .dtype = TC_F64,
                         .stride = { w->stride[0], 0, w->stride[1] } };
  k->buf[2] = (kir_buf){ .role = KIR_IN, .dtype = TC_I64,
                         .stride = { 0, 0, pos->stride[1] } };
  k->buf[3] = (kir_buf){ .role = KIR_IN, .dtype = TC_F64,
                         .stride = { x->stride[0], x->stride[1], 0 } };
  k->buf[4] = (kir_buf){ .role = KIR_IN, .dtype = TC_F64,
                         .stride = { total->stride[0], 0, 0 } };
  k->buf[5] = (kir_buf){ .role = KIR_OUT, .dtype = TC_I64,
                         .stride = { out->stride[0], out->stride[1], 0 } };
  int s = kir_load(k, 0), t = kir_load(k, 4);
  int u = kir_emit(k, KOP_MUL, TC_F64, kir_load(k, 3), t, -1);
  int le = kir_cast(k, TC_I64, kir_emit(k, KOP_LE, TC_BOOL, s, u, -1));
  int pos_w = kir_emit(k, KOP_GT, TC_BOOL, kir_load(k, 1),
                       kir_const(k, TC_F64, 0), -1);
  int at = kir_emit(k, KOP_SEL, TC_I64, pos_w, kir_load(k, 2),
                    kir_const(k, TC_I64, 0));
  int below = kir_cast(k, TC_I64, kir_emit(k, KOP_LT, TC_BOOL, u, t, -1));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, KIR_RED_SUM, -1, le,
                                      -1 };
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, KIR_RED_MAX, -1, at,
                                      -1 };
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_REDUCE, KIR_RED_MAX, -1,
                                      below, -1 };
  int pick = kir_emit(k, KOP_SEL, TC_I64,
                      kir_cast(k, TC_BOOL, kir_rowvar(k, 2)),
                      kir_rowvar(k, 0), kir_rowvar(k, 1));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE_ROW, KIR_RED_SUM, 5,
                                      pick, -1 };
  int rc = run_built(fn, k, (tc_tensor *[]){ cum, w, pos, x, total, out });
  tensor_unref(total);
  return rc;
}

/* Draws into out (i64 (R, k)) from weights w (f64 (R, m)) for uniforms x
** (f64 (R, k)): their running sums, then the draw kernel. */
static int cuda_draws(const char *fn, tc_tensor *w, tc_tensor *x,
                      tc_tensor *pos, tc_tensor *out)
{
  eager_call cc = { .op = TC_OP_CUMSUM, .fn = fn, .nin = 1, .in = { w },
                    .dim = 1, .dtype = TC_F64, .cdtype = TC_F64, .ndim = 2,
                    .shape = { w->shape[0], w->shape[1] } };
  tc_tensor *cum = cuda_cumsum(&cc);
  int rc = cum ? draw_kernel(fn, w, cum, x, pos, out) : -1;
  tensor_unref(cum);
  return rc;
}

/* f64 (rows, n) on the device: draw j of row r has uniform
** eager_uniform(seed, r * n + j), as on the CPU. */
static tc_tensor *cuda_uniforms(const char *fn, uint64_t seed, int64_t rows,
                                int64_t n)
{
  tc_tensor *h = tensor_new(TC_F64, 2, (int64_t[]){ rows, n });
  if (!h)
    return NULL;
  double *x = tensor_ptr(h);
  for (int64_t i = 0; i < rows * n; i++)
    x[i] = eager_uniform(seed, (uint64_t)i);
  tc_tensor *d = eager_cuda_from_host(fn, h);
  tensor_unref(h);
  return d;
}

/* w (f64 (R, m)) with each row's drawn weight zeroed: a new tensor,
** where(pos == drawn, 0, w) in one MAP kernel (drawn: i64 (R, 1)). */
static tc_tensor *zero_drawn(const char *fn, tc_tensor *w, tc_tensor *pos,
                             tc_tensor *drawn)
{
  tc_tensor *left = tensor_new_on(TC_DEV_CUDA, TC_F64, 2, w->shape);
  kir_kernel *k = left ? kir_new() : NULL;
  if (!k) {
    if (left)
      tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
    return tensor_unref(left), NULL;
  }
  k->kind = KIR_MAP;
  k->dynamic = true;
  k->ndim = 2;
  k->size[0] = w->shape[0];
  k->size[1] = w->shape[1];
  k->nbufs = 4;
  k->buf[0] = (kir_buf){ .role = KIR_IN, .dtype = TC_F64,
                         .stride = { w->stride[0], w->stride[1] } };
  k->buf[1] = (kir_buf){ .role = KIR_IN, .dtype = TC_I64,
                         .stride = { 0, pos->stride[1] } };
  k->buf[2] = (kir_buf){ .role = KIR_IN, .dtype = TC_I64,
                         .stride = { drawn->stride[0], 0 } };
  k->buf[3] = (kir_buf){ .role = KIR_OUT, .dtype = TC_F64,
                         .stride = { left->stride[0], left->stride[1] } };
  int hit = kir_emit(k, KOP_EQ, TC_BOOL, kir_load(k, 1), kir_load(k, 2), -1);
  int v = kir_emit(k, KOP_SEL, TC_F64, hit, kir_const(k, TC_F64, 0),
                   kir_load(k, 0));
  k->pass[k->npasses++] = (kir_pass){ KIR_PASS_STORE, KIR_RED_SUM, 3, v, -1 };
  if (run_built(fn, k, (tc_tensor *[]){ w, pos, drawn, left }) < 0)
    return tensor_unref(left), NULL;
  return left;
}

/* Without replacement: draw j of every row, then the weight it drew
** zeroed for the later draws. w is consumed. */
static int draw_one_at_a_time(const char *fn, tc_tensor *w, tc_tensor *x,
                              tc_tensor *pos, tc_tensor *out)
{
  int64_t rows = w->shape[0], n = x->shape[1];
  int rc = 0;
  for (int64_t j = 0; j < n && rc == 0; j++) {
    tc_tensor *xj = tensor_new_view(x, 2, (int64_t[]){ rows, 1 }, x->stride,
                                    x->offset + j);
    tc_tensor *slot = tensor_new_view(out, 2, (int64_t[]){ rows, 1 },
                                      out->stride, out->offset + j);
    rc = xj && slot ? cuda_draws(fn, w, xj, pos, slot) : -1;
    tc_tensor *left = rc == 0 && j + 1 < n ? zero_drawn(fn, w, pos, slot)
                                           : NULL;
    if (j + 1 < n && !left)
      rc = -1;
    tensor_unref(w);
    w = left;
    tensor_unref(xj);
    tensor_unref(slot);
  }
  tensor_unref(w);
  return rc;
}

static tc_tensor *cuda_multinomial(const eager_call *c)
{
  const char *fn = c->fn;
  tc_tensor *p = c->in[0];
  int64_t m = p->shape[p->ndim - 1], n = c->shape[c->ndim - 1];
  int64_t rows = p->ndim == 2 ? p->shape[0] : 1;
  uint64_t seed = (uint64_t)c->s[0] << 32 | (uint64_t)c->s[1];
  tc_tensor *pos = cuda_positions(fn, 2, (int64_t[]){ 1, m }, 1, m);
  tc_tensor *w0 = pos ? cuda_copy_as(c, p, TC_F64) : NULL;
  tc_tensor *w = w0 ? tensor_new_view(w0, 2, (int64_t[]){ rows, m },
                                      (int64_t[]){ m, 1 }, w0->offset)
                    : NULL;
  tc_tensor *x = w ? cuda_uniforms(fn, seed, rows, n) : NULL;
  tc_tensor *out = x ? tensor_new_on(TC_DEV_CUDA, TC_I64, 2,
                                     (int64_t[]){ rows, n }) : NULL;
  if (out && (c->keepdim   /* with replacement: every draw at once */
              ? cuda_draws(fn, w, x, pos, out)
              : draw_one_at_a_time(fn, tensor_ref(w), x, pos, out)) < 0)
    out = (tensor_unref(out), NULL);
  tc_tensor *r = out ? tensor_new_view(out, c->ndim, c->shape,
                                       out->stride + 2 - c->ndim,
                                       out->offset) : NULL;
  tc_tensor *temps[] = { pos, w0, w, x, out };
  UNREF_ALL(temps);
  return r;
}

/* An in-place op: its twin computed into the target. A source that
** overlaps the target as another view is copied first (each point must
** read the values from before the write). */
static tc_tensor *twin_into_target(const eager_call *c)
{
  eager_call fc = *c;
  tc_tensor *copy = NULL;
  for (int e = 1; e < c->nin; e++)
    if (c->in[e] && tensor_shares_storage(c->in[e], c->dst) &&
        !tensor_same_view(c->in[e], c->dst)) {
      eager_call cc = { .op = TC_OP_CAST, .fn = c->fn, .nin = 1,
                        .in = { c->in[e] }, .dtype = (tc_dtype)c->in[e]->dtype,
                        .cdtype = (tc_dtype)c->in[e]->dtype,
                        .ndim = c->in[e]->ndim };
      memcpy(cc.shape, c->in[e]->shape, sizeof(int64_t) * (size_t)cc.ndim);
      copy = run_one_node(&cc, TC_OP_CAST, NULL);
      if (!copy)
        return NULL;
      fc.in[e] = copy;
    }
  tc_tensor *r = run_one_node(&fc, (tc_op)op_table[c->op].twin, c->dst);
  tensor_unref(copy);
  return r;
}

static tc_tensor *cuda_inplace(const eager_call *c)
{
  tc_tensor *r = twin_into_target(c);
  if (r)
    atomic_fetch_add(&c->dst->storage->version, 1);   /* as eager CPU */
  return r;
}

int eager_cuda_operands(const eager_call *c, eager_call *dc,
                        tc_tensor *moved[3])
{
  *dc = *c;
  moved[0] = moved[1] = moved[2] = NULL;
  if (!one_device(c))
    return -1;
  for (int e = 0; e < c->nin; e++)
    if (c->in[e] && cpu_scalar(c->in[e]) && c->op != TC_OP_VIEW) {
      if (tensor_make_readable(c->in[e]) < 0 ||
          !(moved[e] = eager_cuda_from_host(c->fn, c->in[e]))) {
        for (int i = 0; i < 3; i++)
          tensor_unref(moved[i]);
        return -1;
      }
      dc->in[e] = moved[e];
    }
  return 0;
}

/* c with its 0-d CPU operands copied to the device first. */
static tc_tensor *cuda_op(const eager_call *c)
{
  eager_call dc;
  tc_tensor *moved[3];
  if (eager_cuda_operands(c, &dc, moved) < 0)
    return NULL;
  tc_tensor *r = cuda_dispatch(&dc);
  for (int e = 0; e < 3; e++)
    tensor_unref(moved[e]);
  return r;
}

int eager_cuda_copy_into(tc_tensor *dst, tc_tensor *src)
{
  eager_call c = { .op = TC_OP_COPY_, .fn = "copy", .nin = 2,
                   .in = { dst, src }, .dtype = (tc_dtype)dst->dtype,
                   .cdtype = (tc_dtype)dst->dtype, .ndim = dst->ndim,
                   .dst = dst };
  memcpy(c.shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim);
  return twin_into_target(&c) ? 0 : -1;   /* a write-back: no new version */
}

static tc_tensor *cuda_dispatch(const eager_call *c)
{
  switch (c->op) {
  case TC_OP_VIEW:
    return cuda_view(c);
  case TC_OP_CONTIGUOUS:
    return cuda_contiguous(c);
  case TC_OP_MATMUL:
    return cuda_matmul(c);
  case TC_OP_CAT:
    return cuda_cat(c);
  case TC_OP_ARGMAX: case TC_OP_ARGMIN:
    return cuda_argbest(c);
  case TC_OP_CUMSUM:
    return cuda_cumsum(c);
  case TC_OP_SCATTER_ADD:
    return cuda_scatter_add(c);
  case TC_OP_TOPK:
    return cuda_topk(c);
  case TC_OP_MULTINOMIAL:
    return cuda_multinomial(c);
  default:
    break;
  }
  if (op_table[c->op].flags & OPF_M)
    return cuda_inplace(c);
  return run_one_node(c, c->op, NULL);
}

void eager_register_cuda(void)
{
  tensor_device_register(TC_DEV_CUDA, &cuda_ops);
  for (int op = 0; op < TC_OP__MAX; op++)
    eager_register(TC_KEY_CUDA, (tc_op)op, cuda_op);
}
