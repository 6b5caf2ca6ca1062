/*
** composite.c -- fast eager kernels for the composite ops (mean, softmax,
** log_softmax, layer_norm). Each computes exactly its decomposition into
** primitives (the one the fuser sees), operation for operation, with the
** canonical reduction order, so eager and compiled results agree bitwise:
**
**   mean(x)        = sum(x) / n
**   softmax(x)     = e * (1 / sum(e)),      e = exp(x - max(x))
**   log_softmax(x) = (x - m) - log(sum(exp(x - m))),  m = max(x)
**   layer_norm(x)  = ((xc * (1 / sqrt(var + eps))) * gamma) + beta,
**                    xc = x - sum(x) / n,  var = sum(xc * xc) / n
*/
#include <stdlib.h>
#include <string.h>

#include "eager.h"
#include "../tensor/expr.h"

#define ROW_GRAIN 8

/* Write rows (computed with dim innermost) back into out's layout. */
static void rows_store(tc_tensor *out, tc_tensor *rows, int dim)
{
  if (dim == out->ndim - 1 || out->ndim <= 1)
    return;   /* rows is out itself */
  int perm[TC_MAX_DIMS], k = 0;
  for (int d = 0; d < out->ndim; d++)
    if (d != dim)
      perm[k++] = d;
  perm[k] = dim;
  tensor_geom g;
  tensor_geom_of(out, &g);
  tensor_geom_permute("rows", &g, out->ndim, perm);
  tc_tensor *v = tensor_new_view(out, g.ndim, g.shape, g.stride, g.offset);
  if (v)
    eager_copy_into(v, rows);
  tensor_unref(v);
}

/* -- Row kernels, per float type ------------------------------------------- */

/* A row kernel's first pass streams the row in from memory; the next one
** (the exps, the squares) is compute-bound and reads the row from cache.
** That pass prefetches the next row (`next`, NULL for the last row), one
** block at a time, so memory keeps streaming while it computes: 15% off a
** 4096x4096 softmax (the JIT's ROWS kernels do the same). */
#define PF_BLOCK 256   /* elements per block */

static void prefetch_block(const void *next, int64_t i, int64_t n,
                           size_t size)
{
  if (!next)
    return;
  int64_t end = i + PF_BLOCK < n ? i + PF_BLOCK : n;
  const char *p = (const char *)next + (size_t)i * size;
  for (size_t b = 0; b < (size_t)(end - i) * size; b += 64)
    __builtin_prefetch(p + b);
}

#define PF_END(i0, n) ((i0) + PF_BLOCK < (n) ? (i0) + PF_BLOCK : (n))

typedef struct {
  tc_op op;
  const char *x;
  char *y;
  int64_t n;
  const char *gamma, *beta;   /* layer_norm; NULL when absent */
  double eps;
} row_job;

#define ROW_KERNELS(T, tn)                                                   \
  static void softmax_rows_##tn(void *ctx, int64_t lo, int64_t hi)           \
  {                                                                          \
    const row_job *j = ctx;                                                  \
    int64_t n = j->n;                                                        \
    for (int64_t r = lo; r < hi; r++) {                                      \
      const T *x = (const T *)j->x + r * n;                                  \
      const T *next = r + 1 < hi ? x + n : NULL;                             \
      T *y = (T *)j->y + r * n;                                              \
      T m = eager_max_##tn(x, n);                                            \
      for (int64_t i0 = 0; i0 < n; i0 += PF_BLOCK) {                         \
        prefetch_block(next, i0, n, sizeof(T));                              \
        for (int64_t i = i0; i < PF_END(i0, n); i++)                         \
          y[i] = EXP(SUB(x[i], m));                                          \
      }                                                                      \
      if (j->op == TC_OP_SOFTMAX) {                                          \
        T rs = DIV(K(1), eager_sum_##tn(y, n));                              \
        for (int64_t i = 0; i < n; i++)                                      \
          y[i] = MUL(y[i], rs);                                              \
      } else {                                                               \
        T ls = LOG(eager_sum_##tn(y, n));                                    \
        for (int64_t i = 0; i < n; i++)                                      \
          y[i] = SUB(SUB(x[i], m), ls);                                      \
      }                                                                      \
    }                                                                        \
  }                                                                          \
  static void layer_norm_rows_##tn(void *ctx, int64_t lo, int64_t hi)        \
  {                                                                          \
    const row_job *j = ctx;                                                  \
    int64_t n = j->n;                                                        \
    const T *g = (const T *)j->gamma, *b = (const T *)j->beta;               \
    for (int64_t r = lo; r < hi; r++) {                                      \
      const T *x = (const T *)j->x + r * n;                                  \
      const T *next = r + 1 < hi ? x + n : NULL;                             \
      T *y = (T *)j->y + r * n;                                              \
      T mean = DIV(eager_sum_##tn(x, n), K(n));                              \
      for (int64_t i0 = 0; i0 < n; i0 += PF_BLOCK) {                         \
        prefetch_block(next, i0, n, sizeof(T));                              \
        for (int64_t i = i0; i < PF_END(i0, n); i++) {                       \
          T xc = SUB(x[i], mean);                                            \
          y[i] = MUL(xc, xc);                                                \
        }                                                                    \
      }                                                                      \
      T var = DIV(eager_sum_##tn(y, n), K(n));                               \
      T rs = DIV(K(1), SQRT(ADD(var, (T)j->eps)));                           \
      for (int64_t i = 0; i < n; i++) {                                      \
        T v = MUL(SUB(x[i], mean), rs);                                      \
        if (g)                                                               \
          v = MUL(v, g[i]);                                                  \
        if (b)                                                               \
          v = ADD(v, b[i]);                                                  \
        y[i] = v;                                                            \
      }                                                                      \
    }                                                                        \
  }

#define T float
ROW_KERNELS(float, f32)
#undef T
#define T double
ROW_KERNELS(double, f64)
#undef T

/* -- Handlers --------------------------------------------------------------- */

static tc_tensor *cpu_softmax(const eager_call *c)
{
  const tc_tensor *t = c->in[0];
  int dim = c->dim;
  tc_tensor *out = tensor_new(c->dtype, c->ndim, c->shape);
  tc_tensor *x = out ? eager_rows_of(t, dim, c->dtype) : NULL;
  bool in_place = dim == t->ndim - 1 || t->ndim <= 1;
  tc_tensor *rows = !x ? NULL : in_place ? tensor_ref(out)
                    : tensor_new(c->dtype, x->ndim, x->shape);
  if (!rows) {
    tensor_unref(x);
    tensor_unref(out);
    return NULL;
  }
  int64_t n = t->ndim ? t->shape[dim] : 1;
  row_job j = { c->op, tensor_ptr(x), tensor_ptr(rows), n, NULL, NULL, 0 };
  if (out->numel > 0)
    eager_parallel(out->numel / n, ROW_GRAIN,
                   c->dtype == TC_F32 ? softmax_rows_f32 : softmax_rows_f64,
                   &j);
  rows_store(out, rows, dim);
  eager_count(ST_KERNELS_LAUNCHED);
  tensor_unref(rows);
  tensor_unref(x);
  return out;
}

static tc_tensor *cpu_layer_norm(const eager_call *c)
{
  tc_dtype dt = c->dtype;
  const tc_tensor *t = c->in[0];
  tc_tensor *out = tensor_new(dt, c->ndim, c->shape);
  tc_tensor *x = out ? eager_rows_of(t, t->ndim - 1, dt) : NULL;
  tc_tensor *g = NULL, *b = NULL;
  bool ok = x != NULL;
  if (ok && c->in[1])
    ok = (g = eager_rows_of(c->in[1], c->in[1]->ndim - 1, dt)) != NULL;
  if (ok && c->in[2])
    ok = (b = eager_rows_of(c->in[2], c->in[2]->ndim - 1, dt)) != NULL;
  if (ok && out->numel > 0) {
    int64_t n = t->shape[t->ndim - 1];
    row_job j = { c->op, tensor_ptr(x), tensor_ptr(out), n,
                  g ? tensor_ptr(g) : NULL, b ? tensor_ptr(b) : NULL,
                  c->s[0] };
    eager_parallel(out->numel / n, ROW_GRAIN,
                   dt == TC_F32 ? layer_norm_rows_f32 : layer_norm_rows_f64,
                   &j);
    eager_count(ST_KERNELS_LAUNCHED);
  }
  tensor_unref(x);
  tensor_unref(g);
  tensor_unref(b);
  if (!ok) {
    tensor_unref(out);
    return NULL;
  }
  return out;
}

/* mean = sum / n, in the float result dtype. */
static tc_tensor *cpu_mean(const eager_call *c)
{
  const tc_tensor *t = c->in[0];
  tc_tensor *out = tensor_new(c->dtype, c->ndim, c->shape);
  if (!out)
    return NULL;
  if (eager_reduce_into(TC_OP_SUM, t, c->dim, out) < 0) {
    tensor_unref(out);
    return NULL;
  }
  int64_t n = t->ndim ? t->shape[c->dim] : 1;
  if (c->dtype == TC_F32) {
    typedef float T;
    T *y = tensor_ptr(out);
    for (int64_t i = 0; i < out->numel; i++)
      y[i] = DIV(y[i], K(n));
  } else {
    typedef double T;
    T *y = tensor_ptr(out);
    for (int64_t i = 0; i < out->numel; i++)
      y[i] = DIV(y[i], K(n));
  }
  return out;
}

void eager_register_cpu_composite(void)
{
  eager_register(TC_KEY_CPU, TC_OP_MEAN, cpu_mean);
  eager_register(TC_KEY_CPU, TC_OP_SOFTMAX, cpu_softmax);
  eager_register(TC_KEY_CPU, TC_OP_LOG_SOFTMAX, cpu_softmax);
  eager_register(TC_KEY_CPU, TC_OP_LAYER_NORM, cpu_layer_norm);
}
