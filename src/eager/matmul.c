/*
** matmul.c -- the MATMUL extern op: maps tensors onto GEMM calls (gemm.c).
** Row-major and transposed (column-major) operands go to the GEMM as they
** are; any other layout or dtype is copied first. eager_matmul_ep is the
** same op with an epilogue on each finished tile (the fuser's hook).
*/
#include "eager.h"

/* How a (rows x cols) matrix with strides (rs, cs) can be handed to GEMM. */
static bool mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                       bool *trans, int64_t *ld)
{
  int64_t c1 = cols > 1 ? cols : 1, r1 = rows > 1 ? rows : 1;
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= c1)) {
    *trans = false;
    *ld = rows <= 1 ? c1 : rs;
    return true;
  }
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= r1)) {
    *trans = true;
    *ld = cols <= 1 ? r1 : cs;
    return true;
  }
  return false;
}

/* The operand as-is when GEMM can read it, else a contiguous copy in dt. */
static tc_tensor *gemm_operand(const tc_tensor *t, tc_dtype dt, bool *trans,
                               int64_t *ld)
{
  int nd = t->ndim;
  if (t->dtype == dt && mat_layout(t->shape[nd - 2], t->shape[nd - 1],
                                   t->stride[nd - 2], t->stride[nd - 1],
                                   trans, ld))
    return tensor_ref((tc_tensor *)t);
  tc_tensor *c = eager_contiguous_copy(t, dt);
  if (c) {
    *trans = false;
    *ld = t->shape[nd - 1] > 1 ? t->shape[nd - 1] : 1;
  }
  return c;
}

/* Per batch: the gemm epilogue that calls the matmul one with its batch. */
typedef struct {
  eager_matmul_epilogue ep;
  void *ctx;                    /* borrowed */
  tc_tensor *out;               /* borrowed */
  int64_t batch;
  int64_t rows;                 /* folded batches (eager_matmul_ep): rows
                                   per batch; 0: not folded */
} batch_ep;

static void batch_ep_run(void *ctx, int64_t i0, int64_t i1, int64_t j0,
                         int64_t j1)
{
  const batch_ep *e = ctx;
  if (!e->rows) {
    e->ep(e->ctx, e->out, e->batch, i0, i1, j0, j1);
    return;
  }
  /* A tile of folded rows: the epilogue sees each batch's part of it. */
  for (int64_t i = i0; i < i1;) {
    int64_t b = i / e->rows, r0 = i - b * e->rows;
    int64_t r1 = r0 + (i1 - i < e->rows - r0 ? i1 - i : e->rows - r0);
    e->ep(e->ctx, e->out, b, r0, r1, j0, j1);
    i += r1 - r0;
  }
}

/* The element offset of flat batch i (of c's batch dims) in operand t:
** t's batch dims are aligned to the right of c's, and a size-1 dim
** broadcasts (the same matrix for every index there). */
static int64_t batch_offset(const tc_tensor *t, const eager_call *c,
                            int64_t i)
{
  int nb = c->ndim - 2, tb = t->ndim - 2;
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) {
    int64_t size = c->shape[d], pos = size ? i % size : 0;
    i = size ? i / size : 0;
    int e = d - (nb - tb);
    if (e >= 0 && t->shape[e] != 1)
      off += pos * t->stride[e];
  }
  return off;
}

/* Can a's batch dims fold into its rows (see eager_matmul_ep)? b must be
** the same matrix for every batch, a not transposed, not broadcast, and
** each batch's rows right after the previous batch's. */
static bool fold_rows(const tc_tensor *a, const tc_tensor *b,
                      const eager_call *c, bool ta, int64_t m, int64_t lda)
{
  if (ta || a->ndim != c->ndim)
    return false;
  for (int d = 0; d < b->ndim - 2; d++)
    if (b->shape[d] != 1)
      return false;
  int64_t want = m * lda;
  for (int d = a->ndim - 3; d >= 0; d--) {
    if (a->shape[d] != c->shape[d])
      return false;
    if (a->shape[d] != 1 && a->stride[d] != want)
      return false;
    want *= a->shape[d];
  }
  return true;
}

/* Batches [lo, hi) of one matmul. */
typedef struct {
  const eager_call *c;
  tc_tensor *a, *b, *out;
  bool ta, tb;
  int64_t m, n, k, lda, ldb;
  int64_t rows;                 /* folded: rows per batch (batch_ep) */
  eager_matmul_epilogue ep;
  void *ctx;
} batch_job;

static void batch_range(void *ctx, int64_t lo, int64_t hi)
{
  const batch_job *J = ctx;
  tc_dtype dt = J->out->dtype;
  int64_t m = J->m, n = J->n, esz = (int64_t)tensor_dtype_size[dt];
  for (int64_t i = lo; i < hi; i++) {
    char *pa = (char *)tensor_ptr(J->a) + batch_offset(J->a, J->c, i) * esz;
    char *pb = (char *)tensor_ptr(J->b) + batch_offset(J->b, J->c, i) * esz;
    char *pc = (char *)tensor_ptr(J->out) + i * m * n * esz;
    batch_ep e = { J->ep, J->ctx, J->out, i, J->rows };
    eager_gemm_epilogue gep = J->ep ? batch_ep_run : NULL;
    if (dt == TC_F32)
      eager_gemm_f32_ep(J->ta, J->tb, m, n, J->k, (float *)pa, J->lda,
                        (float *)pb, J->ldb, (float *)pc, n > 1 ? n : 1, gep,
                        &e);
    else
      eager_gemm_f64_ep(J->ta, J->tb, m, n, J->k, (double *)pa, J->lda,
                        (double *)pb, J->ldb, (double *)pc, n > 1 ? n : 1,
                        gep, &e);
  }
}

tc_tensor *eager_matmul_ep(const eager_call *c, eager_matmul_epilogue ep,
                           void *ctx)
{
  tc_dtype dt = c->dtype;
  tc_tensor *out = tensor_new(dt, c->ndim, c->shape);
  if (!out)
    return NULL;
  bool ta, tb;
  int64_t lda, ldb;
  tc_tensor *a = gemm_operand(c->in[0], dt, &ta, &lda);
  tc_tensor *b = a ? gemm_operand(c->in[1], dt, &tb, &ldb) : NULL;
  if (!b) {
    tensor_unref(a);
    tensor_unref(out);
    return NULL;
  }
  int nd = c->ndim;
  int64_t m = c->shape[nd - 2], n = c->shape[nd - 1];
  int64_t k = a->shape[a->ndim - 1];
  int64_t batch = 1;
  for (int d = 0; d < nd - 2; d++)
    batch *= c->shape[d];
  /* x @ W with x [..., m, k] and W one matrix: when x's rows follow one
  ** another across its batch dims (lda apart), the batch folds into the
  ** rows, one GEMM of batch * m rows instead of batch small ones (the
  ** same chains, so the same bits; the epilogue still sees each batch's
  ** rows apart). */
  int64_t rows = 0;
  if (batch > 1 && fold_rows(a, b, c, ta, m, lda)) {
    rows = m;
    m *= batch;
    batch = 1;
  }
  batch_job J = { c, a, b, out, ta, tb, m, n, k, lda, ldb, rows, ep, ctx };
  /* Small matrices (attention's per-head products): one GEMM per batch
  ** would run on one thread (too small to split), so batches are split
  ** across the pool instead, each GEMM on the thread that takes it (a
  ** nested tensor_parallel runs serially). Every element of C is the same
  ** chain either way (gemm.h), so the bits do not change. */
  double flops = 2.0 * (double)m * (double)n * (double)k;
  if (batch > 1 && flops < EAGER_GEMM_SPLIT_FLOPS)
    tensor_parallel(batch, (int64_t)(EAGER_GEMM_SPLIT_FLOPS / (flops + 1)) + 1,
                   batch_range, &J);
  else
    batch_range(&J, 0, batch);
  eager_count(ST_KERNELS_LAUNCHED);
  tensor_unref(a);
  tensor_unref(b);
  return out;
}

static tc_tensor *cpu_matmul(const eager_call *c)
{
  return eager_matmul_ep(c, NULL, NULL);
}

/* -- Views and contiguous ---------------------------------------------------- */

static tc_tensor *cpu_view(const eager_call *c)
{
  const tensor_geom *g = &c->view;
  return tensor_new_view(c->in[0], g->ndim, g->shape, g->stride, g->offset);
}

/* Already contiguous: a new handle on the same data (its own reference,
** so a scope tracks it like any result); else a copy. */
static tc_tensor *cpu_contiguous(const eager_call *c)
{
  const tc_tensor *t = c->in[0];
  if (tensor_is_contiguous(t) && t->dtype == c->dtype)
    return tensor_new_view(t, t->ndim, t->shape, t->stride, t->offset);
  return eager_contiguous_copy(t, c->dtype);
}

void eager_register_cpu_matmul(void)
{
  eager_register(TC_KEY_CPU, TC_OP_MATMUL, cpu_matmul);
}

void eager_register_cpu_misc(void)
{
  eager_register(TC_KEY_CPU, TC_OP_VIEW, cpu_view);
  eager_register(TC_KEY_CPU, TC_OP_CONTIGUOUS, cpu_contiguous);
}
