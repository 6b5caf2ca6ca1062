/*
** pointwise.c -- eager CPU kernels for every pointwise op, expanded from the
** `ex` column of ops.def, and the strided iterator that feeds them.
**
** A compute kernel sees contiguous arrays of its compute type only; the
** iterator collapses dims, and per tile either hands it pointers straight
** into storage (contiguous, same dtype: the fast path GCC vectorizes) or
** gathers/converts operands into tile buffers and scatters the result.
*/
#include <string.h>

#include "eager.h"
#include "../tensor/expr.h"
#include "../tensor/half.h"

typedef void (*pw_fn)(int64_t n, void *out, const void *const *in,
                      const double *s);

/* -- Compute kernels, one per (op, compute dtype) --------------------------- */

#define KBODY0(T, ex) for (int64_t i = 0; i < n; i++) out[i] = (T)(ex);
#define KBODY1(T, ex) \
  for (int64_t i = 0; i < n; i++) { T a = A[i]; out[i] = (T)(ex); }
#define KBODY2(T, ex) \
  for (int64_t i = 0; i < n; i++) { \
    T a = A[i], b = B[i]; out[i] = (T)(ex); }
#define KBODY3(T, ex) \
  for (int64_t i = 0; i < n; i++) { \
    T a = A[i], b = B[i], c = C[i]; out[i] = (T)(ex); }

#define KDEF(name, ni, CT, tn, ex)                                           \
  static void k_##name##_##tn(int64_t n, void *out_, const void *const *in,  \
                              const double *s)                               \
  {                                                                          \
    typedef CT T;                                                            \
    T *out = out_;                                                           \
    const T *A = in[0], *B = in[1], *C = in[2];                              \
    (void)A; (void)B; (void)C; (void)s;                                      \
    KBODY##ni(T, ex)                                                         \
  }

#define INST_ARITH(n, ni, ex) KDEF(n, ni, int32_t, i32, ex) \
  KDEF(n, ni, int64_t, i64, ex) KDEF(n, ni, float, f32, ex) \
  KDEF(n, ni, double, f64, ex)
#define INST_FLT(n, ni, ex) KDEF(n, ni, float, f32, ex) \
  KDEF(n, ni, double, f64, ex)
#define INST_SAME(n, ni, ex) INST_ARITH(n, ni, ex) \
  KDEF(n, ni, uint8_t, b8, ex)
#define INST_CMP(n, ni, ex) INST_SAME(n, ni, ex)
#define INST_INT(n, ni, ex)
#define INST_IDX(n, ni, ex)
#define INST_ARG(n, ni, ex)
#define INST_DST(n, ni, ex)
#define INSTK_PW(ty, n, ni, ex) INST_##ty(n, ni, ex)
#define INSTK_RD(ty, n, ni, ex)
#define INSTK_VW(ty, n, ni, ex)
#define INSTK_EX(ty, n, ni, ex)
#define INSTK_CP(ty, n, ni, ex)
#define INSTK_CR(ty, n, ni, ex)

#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) INSTK_##k(ty, n, ni, ex)
#include "../tensor/ops.def"

/* The table of compute kernels; NULL where an op/dtype is not computed. */
#define ROW_ARITH(n) [TC_I32] = k_##n##_i32, [TC_I64] = k_##n##_i64, \
  [TC_F32] = k_##n##_f32, [TC_F64] = k_##n##_f64
#define ROW_FLT(n) [TC_F32] = k_##n##_f32, [TC_F64] = k_##n##_f64
#define ROW_SAME(n) ROW_ARITH(n), [TC_BOOL] = k_##n##_b8
#define ROW_CMP(n) ROW_SAME(n)
#define ROW_INT(n) 0
#define ROW_IDX(n) 0
#define ROW_ARG(n) 0
#define ROW_DST(n) 0
#define ROWK_PW(ty, n) [TC_OP_##n] = { ROW_##ty(n) },
#define ROWK_RD(ty, n)
#define ROWK_VW(ty, n)
#define ROWK_EX(ty, n)
#define ROWK_CP(ty, n)
#define ROWK_CR(ty, n)

static const pw_fn pw_table[TC_OP__MAX][TC_DTYPE__MAX] = {
#define TC_OP(n, k, ni, ns, fl, ty, tw, ex) ROWK_##k(ty, n)
#include "../tensor/ops.def"
};

/* -- Conversion ------------------------------------------------------------- */

/* Float to integer saturates and maps NaN to 0 (C leaves it undefined);
** anything to bool is (x != 0). The JIT emits the same rules. */
#define SAT(FT, IT, lo, hi, x) \
  ((x) != (x) ? (IT)0 : (x) <= (FT)(lo) ? (IT)(lo) \
   : (x) >= (FT)(hi) ? (IT)(hi) : (IT)(x))
#define CV_b8(x)  ((uint8_t)((x) != 0))
#define CVF_i32(FT, x) SAT(FT, int32_t, INT32_MIN, INT32_MAX, x)
#define CVF_i64(FT, x) SAT(FT, int64_t, INT64_MIN, INT64_MAX, x)

#define CONV_LOOP(DT, ST, expr)                                              \
  {                                                                          \
    DT *d = dst;                                                             \
    const ST *p = src;                                                       \
    if (dstride == 1 && sstride == 1)                                        \
      for (int64_t i = 0; i < n; i++) { ST x = p[i]; d[i] = (DT)(expr); }    \
    else                                                                     \
      for (int64_t i = 0; i < n; i++) {                                      \
        ST x = p[i * sstride];                                               \
        d[i * dstride] = (DT)(expr);                                         \
      }                                                                      \
    return;                                                                  \
  }

#define PAIR(d, s) ((d) * TC_DTYPE__MAX + (s))

/* To and from the storage types: through f32, as PyTorch's c10::Half and
** c10::BFloat16 convert (a double or a wide integer is rounded to f32
** first). The JIT emits the same rules (half.h). */
#define TO_F16(x)  half_f16_from_f32((float)(x))
#define TO_BF16(x) half_bf16_from_f32((float)(x))
#define HALF_TO(d, h) \
  case PAIR(d, TC_BOOL): CONV_LOOP(uint16_t, uint8_t, h(x))   \
  case PAIR(d, TC_I32):  CONV_LOOP(uint16_t, int32_t, h(x))   \
  case PAIR(d, TC_I64):  CONV_LOOP(uint16_t, int64_t, h(x))   \
  case PAIR(d, TC_F32):  CONV_LOOP(uint16_t, float, h(x))     \
  case PAIR(d, TC_F64):  CONV_LOOP(uint16_t, double, h(x))    \
  case PAIR(d, TC_F16):  CONV_LOOP(uint16_t, uint16_t, h(half_f32_from_f16(x))) \
  case PAIR(d, TC_BF16): CONV_LOOP(uint16_t, uint16_t, h(half_f32_from_bf16(x)))
#define HALF_FROM(s, f) \
  case PAIR(TC_BOOL, s): CONV_LOOP(uint8_t, uint16_t, CV_b8(f(x)))           \
  case PAIR(TC_I32, s):  CONV_LOOP(int32_t, uint16_t, CVF_i32(float, f(x)))  \
  case PAIR(TC_I64, s):  CONV_LOOP(int64_t, uint16_t, CVF_i64(float, f(x)))  \
  case PAIR(TC_F32, s):  CONV_LOOP(float, uint16_t, f(x))                    \
  case PAIR(TC_F64, s):  CONV_LOOP(double, uint16_t, (double)f(x))

void eager_convert(tc_dtype dd, void *dst, int64_t dstride, tc_dtype sd,
                   const void *src, int64_t sstride, int64_t n)
{
  switch (PAIR(dd, sd)) {
  case PAIR(TC_BOOL, TC_BOOL): CONV_LOOP(uint8_t, uint8_t, x)
  case PAIR(TC_BOOL, TC_I32):  CONV_LOOP(uint8_t, int32_t, CV_b8(x))
  case PAIR(TC_BOOL, TC_I64):  CONV_LOOP(uint8_t, int64_t, CV_b8(x))
  case PAIR(TC_BOOL, TC_F32):  CONV_LOOP(uint8_t, float, CV_b8(x))
  case PAIR(TC_BOOL, TC_F64):  CONV_LOOP(uint8_t, double, CV_b8(x))
  case PAIR(TC_I32, TC_BOOL):  CONV_LOOP(int32_t, uint8_t, x)
  case PAIR(TC_I32, TC_I32):   CONV_LOOP(int32_t, int32_t, x)
  case PAIR(TC_I32, TC_I64):   CONV_LOOP(int32_t, int64_t, (uint32_t)x)
  case PAIR(TC_I32, TC_F32):   CONV_LOOP(int32_t, float, CVF_i32(float, x))
  case PAIR(TC_I32, TC_F64):   CONV_LOOP(int32_t, double, CVF_i32(double, x))
  case PAIR(TC_I64, TC_BOOL):  CONV_LOOP(int64_t, uint8_t, x)
  case PAIR(TC_I64, TC_I32):   CONV_LOOP(int64_t, int32_t, x)
  case PAIR(TC_I64, TC_I64):   CONV_LOOP(int64_t, int64_t, x)
  case PAIR(TC_I64, TC_F32):   CONV_LOOP(int64_t, float, CVF_i64(float, x))
  case PAIR(TC_I64, TC_F64):   CONV_LOOP(int64_t, double, CVF_i64(double, x))
  case PAIR(TC_F32, TC_BOOL):  CONV_LOOP(float, uint8_t, x)
  case PAIR(TC_F32, TC_I32):   CONV_LOOP(float, int32_t, x)
  case PAIR(TC_F32, TC_I64):   CONV_LOOP(float, int64_t, x)
  case PAIR(TC_F32, TC_F32):   CONV_LOOP(float, float, x)
  case PAIR(TC_F32, TC_F64):   CONV_LOOP(float, double, x)
  case PAIR(TC_F64, TC_BOOL):  CONV_LOOP(double, uint8_t, x)
  case PAIR(TC_F64, TC_I32):   CONV_LOOP(double, int32_t, x)
  case PAIR(TC_F64, TC_I64):   CONV_LOOP(double, int64_t, x)
  case PAIR(TC_F64, TC_F32):   CONV_LOOP(double, float, x)
  case PAIR(TC_F64, TC_F64):   CONV_LOOP(double, double, x)
  HALF_TO(TC_F16, TO_F16)
  HALF_TO(TC_BF16, TO_BF16)
  HALF_FROM(TC_F16, half_f32_from_f16)
  HALF_FROM(TC_BF16, half_f32_from_bf16)
  }
  TC_ASSERT(0, "bad dtype pair");
}

/* -- The strided iterator --------------------------------------------------- */

#define TILE 1024
#define PW_GRAIN 32768

/* Operand 0 is the output, 1..nin the inputs. */
typedef struct {
  pw_fn fn;                 /* NULL: plain converting copy of input 1 */
  tc_dtype cd;              /* compute dtype */
  const double *s;
  int nops;
  int nd;                   /* collapsed dims, >= 1 */
  int64_t shape[TC_MAX_DIMS];
  int64_t st[4][TC_MAX_DIMS];
  char *base[4];
  tc_dtype dt[4];
} pw_plan;

static void plan_build(pw_plan *p, tc_tensor *out, int nin,
                       const tc_tensor *const *in)
{
  int nd = out->ndim;
  p->nops = nin + 1;
  const tc_tensor *ops[4] = { out, nin > 0 ? in[0] : NULL,
                              nin > 1 ? in[1] : NULL, nin > 2 ? in[2] : NULL };
  int64_t shape[TC_MAX_DIMS], st[4][TC_MAX_DIMS];
  for (int o = 0; o < p->nops; o++) {
    const tc_tensor *t = ops[o];
    int lead = nd - t->ndim;
    for (int d = 0; d < nd; d++) {
      int td = d - lead;
      st[o][d] = (td < 0 || t->shape[td] == 1) ? 0 : t->stride[td];
    }
    p->base[o] = tensor_ptr(t);
    p->dt[o] = (tc_dtype)t->dtype;
  }
  /* Drop size-1 dims, then merge an outer dim into its inner neighbour
  ** whenever every operand steps through both as one. */
  int k = 0;
  for (int d = 0; d < nd; d++) {
    if (out->shape[d] == 1)
      continue;
    shape[k] = out->shape[d];
    for (int o = 0; o < p->nops; o++)
      st[o][k] = st[o][d];
    k++;
  }
  if (k == 0) {
    shape[0] = 1;
    for (int o = 0; o < p->nops; o++)
      st[o][0] = 0;
    k = 1;
  }
  int m = 0;
  for (int d = 1; d < k; d++) {
    bool merge = true;
    for (int o = 0; o < p->nops; o++)
      if (st[o][m] != st[o][d] * shape[d])
        merge = false;
    if (merge) {
      shape[m] *= shape[d];
      for (int o = 0; o < p->nops; o++)
        st[o][m] = st[o][d];
    } else {
      m++;
      shape[m] = shape[d];
      for (int o = 0; o < p->nops; o++)
        st[o][m] = st[o][d];
    }
  }
  p->nd = m + 1;
  memcpy(p->shape, shape, sizeof(int64_t) * (size_t)p->nd);
  for (int o = 0; o < p->nops; o++)
    memcpy(p->st[o], st[o], sizeof(int64_t) * (size_t)p->nd);
}

/* Run one inner segment of len elements starting at the given pointers. */
static void run_segment(const pw_plan *p, char *const *ptr, int64_t len)
{
  int last = p->nd - 1;
  if (!p->fn) {   /* converting copy: no compute step */
    eager_convert(p->dt[0], ptr[0], p->st[0][last], p->dt[1], ptr[1],
                  p->st[1][last], len);
    return;
  }
  bool direct[4];
  for (int o = 0; o < p->nops; o++)
    direct[o] = p->dt[o] == p->cd && p->st[o][last] == 1;
  _Alignas(64) char buf[4][TILE * 8];
  for (int64_t done = 0; done < len;) {
    bool all = true;
    for (int o = 0; o < p->nops; o++)
      all &= direct[o];
    int64_t n = all ? len - done : (len - done < TILE ? len - done : TILE);
    const void *in[3] = { NULL, NULL, NULL };
    for (int o = 1; o < p->nops; o++) {
      size_t esz = tensor_dtype_size[p->dt[o]];
      char *src = ptr[o] + done * p->st[o][last] * (int64_t)esz;
      if (direct[o]) {
        in[o - 1] = src;
      } else {
        eager_convert(p->cd, buf[o], 1, p->dt[o], src, p->st[o][last], n);
        in[o - 1] = buf[o];
      }
    }
    char *dst = ptr[0] + done * p->st[0][last]
                         * (int64_t)tensor_dtype_size[p->dt[0]];
    if (direct[0]) {
      p->fn(n, dst, in, p->s);
    } else {
      p->fn(n, buf[0], in, p->s);
      eager_convert(p->dt[0], dst, p->st[0][last], p->cd, buf[0], 1, n);
    }
    done += n;
  }
}

/* Each operand's element at position idx. */
static void plan_ptrs(const pw_plan *p, const int64_t *idx, char **ptr)
{
  for (int o = 0; o < p->nops; o++) {
    int64_t off = 0;
    for (int d = 0; d < p->nd; d++)
      off += idx[d] * p->st[o][d];
    ptr[o] = p->base[o] + off * (int64_t)tensor_dtype_size[p->dt[o]];
  }
}

/* Walk linear output indices [lo, hi): decompose lo once, then step. */
static void plan_range(void *ctx, int64_t lo, int64_t hi)
{
  const pw_plan *p = ctx;
  int last = p->nd - 1;
  int64_t idx[TC_MAX_DIMS];
  int64_t rem = lo;
  for (int d = last; d >= 0; d--) {
    idx[d] = rem % p->shape[d];
    rem /= p->shape[d];
  }
  while (lo < hi) {
    char *ptr[4];
    plan_ptrs(p, idx, ptr);
    int64_t len = p->shape[last] - idx[last];
    if (len > hi - lo)
      len = hi - lo;
    run_segment(p, ptr, len);
    lo += len;
    idx[last] += len;
    for (int d = last; d > 0 && idx[d] == p->shape[d]; d--) {
      idx[d] = 0;
      idx[d - 1]++;
    }
  }
}

/* -- The tiled walk: transposes ------------------------------------------- */

/* Walking the output's order, an operand that strides through the innermost
** dim touches one element per cache line (and, at a large stride, one per
** page): a transposing copy of a 4096x4096 f32 took 170 ms on one thread,
** for 128 MB of traffic. When such an operand steps by one element along
** another dim, the walk goes by TB x TB tiles of that dim and the innermost:
** each line it reads or writes is then used whole while the tile is in
** cache. Pointwise, so the order changes no value (an input that overlaps
** the output through another view was copied first). */
#define TB 64           /* tile edge, elements */
#define TB_MIN 16       /* both dims at least this long, or no tiles */

typedef struct {
  const pw_plan *p;
  int t;                /* the tiled dim besides the innermost */
  int64_t nt, nl;       /* tiles along t and along the innermost */
} tile_walk;

/* The dim to tile with the innermost, or -1 for the plain walk. */
static int tile_dim(const pw_plan *p)
{
  int last = p->nd - 1;
  if (p->nd < 2 || p->shape[last] < TB_MIN)
    return -1;
  for (int o = 0; o < p->nops; o++) {
    if (p->st[o][last] == 0 || p->st[o][last] == 1)
      continue;
    for (int d = last - 1; d >= 0; d--)
      if (p->st[o][d] == 1 && p->shape[d] >= TB_MIN)
        return d;
  }
  return -1;
}

#define COPY_TILE(T)                                                         \
  {                                                                          \
    T *d = dst;                                                              \
    const T *q = src;                                                        \
    for (int64_t a = 0; a < na; a++)                                         \
      for (int64_t b = 0; b < nb; b++)                                       \
        d[a * dsa + b * dsb] = q[a * ssa + b * ssb];                         \
    return;                                                                  \
  }

/* Copy an na x nb tile of elements of `size` bytes (strides in elements). */
static void copy_tile(size_t size, void *dst, int64_t dsa, int64_t dsb,
                      const void *src, int64_t ssa, int64_t ssb, int64_t na,
                      int64_t nb)
{
  switch (size) {
  case 1: COPY_TILE(uint8_t)
  case 2: COPY_TILE(uint16_t)
  case 4: COPY_TILE(uint32_t)
  default: COPY_TILE(uint64_t)
  }
}

/* Tiles [lo, hi), numbered with the innermost dim's tile fastest, then
** t's, then the other dims' indices in order. */
static void tile_range(void *ctx, int64_t lo, int64_t hi)
{
  const tile_walk *w = ctx;
  const pw_plan *p = w->p;
  int last = p->nd - 1;
  for (int64_t u = lo; u < hi; u++) {
    int64_t idx[TC_MAX_DIMS], rem = u;
    int64_t l0 = rem % w->nl * TB;
    rem /= w->nl;
    int64_t t0 = rem % w->nt * TB;
    rem /= w->nt;
    for (int d = last - 1; d >= 0; d--)
      if (d != w->t) {
        idx[d] = rem % p->shape[d];
        rem /= p->shape[d];
      }
    int64_t t1 = t0 + TB < p->shape[w->t] ? t0 + TB : p->shape[w->t];
    int64_t len = l0 + TB < p->shape[last] ? TB : p->shape[last] - l0;
    idx[last] = l0;
    if (!p->fn && p->dt[0] == p->dt[1]) {   /* a plain copy: one tight 2-D loop */
      idx[w->t] = t0;
      char *ptr[4];
      plan_ptrs(p, idx, ptr);
      copy_tile(tensor_dtype_size[p->dt[0]], ptr[0], p->st[0][w->t],
                p->st[0][last], ptr[1], p->st[1][w->t], p->st[1][last],
                t1 - t0, len);
      continue;
    }
    for (idx[w->t] = t0; idx[w->t] < t1; idx[w->t]++) {
      char *ptr[4];
      plan_ptrs(p, idx, ptr);
      run_segment(p, ptr, len);
    }
  }
}

static void pw_launch(pw_fn fn, tc_dtype cd, tc_tensor *out, int nin,
                      const tc_tensor *const *in, const double *s)
{
  if (out->numel == 0)
    return;
  pw_plan p;
  p.fn = fn;
  p.cd = cd;
  p.s = s;
  plan_build(&p, out, nin, in);
  eager_count(ST_KERNELS_LAUNCHED);
  int t = tile_dim(&p);
  if (t < 0) {
    tensor_parallel(out->numel, PW_GRAIN, plan_range, &p);
    return;
  }
  int last = p.nd - 1;
  tile_walk w = { &p, t, (p.shape[t] + TB - 1) / TB,
                  (p.shape[last] + TB - 1) / TB };
  int64_t tiles = out->numel / p.shape[t] / p.shape[last] * w.nt * w.nl;
  tensor_parallel(tiles, PW_GRAIN / (TB * TB), tile_range, &w);
}

/* -- Public to the module --------------------------------------------------- */

void eager_copy_into(tc_tensor *dst, const tc_tensor *src)
{
  pw_launch(NULL, (tc_dtype)dst->dtype, dst, 1, &src, NULL);
}

tc_tensor *eager_contiguous_copy(const tc_tensor *t, tc_dtype dt)
{
  tc_tensor *out = tensor_new(dt, t->ndim, t->shape);
  if (out)
    eager_copy_into(out, t);
  return out;
}

/* -- Handlers --------------------------------------------------------------- */

/* A range of the contiguous fast path: all operands dense, one dtype. */
typedef struct {
  pw_fn fn;
  size_t esz;
  char *out;
  const char *in[3];
  const double *s;
} dense_job;

static void dense_range(void *ctx, int64_t lo, int64_t hi)
{
  const dense_job *j = ctx;
  const void *in[3];
  for (int i = 0; i < 3; i++)
    in[i] = j->in[i] ? j->in[i] + lo * (int64_t)j->esz : NULL;
  j->fn(hi - lo, j->out + lo * (int64_t)j->esz, in, j->s);
}

static bool dense_ok(const tc_tensor *out, int nin,
                     const tc_tensor *const *in, tc_dtype cd)
{
  if (out->dtype != cd || !tensor_is_contiguous(out))
    return false;
  for (int i = 0; i < nin; i++)
    if (in[i]->dtype != cd || in[i]->numel != out->numel ||
        !tensor_is_contiguous(in[i]))
      return false;
  return true;
}

static void pw_run(tc_op op, tc_dtype cd, tc_tensor *out, int nin,
                   const tc_tensor *const *in, const double *s)
{
  pw_fn fn = pw_table[op][cd];
  TC_ASSERT(fn, "no compute kernel");
  if (dense_ok(out, nin, in, cd)) {
    if (out->numel == 0)
      return;
    dense_job j = { fn, tensor_dtype_size[cd], tensor_ptr(out),
                    { NULL, NULL, NULL }, s };
    for (int i = 0; i < nin; i++)
      j.in[i] = tensor_ptr(in[i]);
    eager_count(ST_KERNELS_LAUNCHED);
    tensor_parallel(out->numel, PW_GRAIN, dense_range, &j);
    return;
  }
  pw_launch(fn, cd, out, nin, in, s);
}

static tc_tensor *cpu_pointwise(const eager_call *c)
{
  tc_tensor *out = tensor_new(c->dtype, c->ndim, c->shape);
  if (!out)
    return NULL;
  if (c->op == TC_OP_CAST)
    eager_copy_into(out, c->in[0]);
  else if (c->op == TC_OP_FILL)
    eager_convert(c->dtype, tensor_ptr(out), 1, TC_F64, &c->s[0], 0,
                  out->numel);
  else
    pw_run(c->op, c->cdtype, out, c->nin, (const tc_tensor *const *)c->in,
           c->s);
  return out;
}

/* In-place: compute the twin op into dst. An input that shares dst's
** storage through a different view is copied first, so no element is read
** after it was overwritten. */
static tc_tensor *cpu_inplace(const eager_call *c)
{
  tc_tensor *dst = c->dst;
  const tc_tensor *in[3];
  tc_tensor *tmp[3] = { NULL, NULL, NULL };
  for (int i = 0; i < c->nin; i++) {
    in[i] = c->in[i];
    if (in[i] != dst && tensor_shares_storage(in[i], dst) &&
        !tensor_same_view(in[i], dst)) {
      tmp[i] = eager_contiguous_copy(in[i], (tc_dtype)in[i]->dtype);
      if (!tmp[i])
        goto fail;
      in[i] = tmp[i];
    }
  }
  tc_op twin = (tc_op)op_table[c->op].twin;
  if (twin == TC_OP_CAST)
    eager_copy_into(dst, in[1]);
  else if (twin == TC_OP_FILL) {   /* broadcast a 0-d f64 into dst */
    tc_tensor *val = tensor_new(TC_F64, 0, NULL);
    if (!val)
      goto fail;
    *(double *)tensor_ptr(val) = c->s[0];
    eager_copy_into(dst, val);
    tensor_unref(val);
  } else
    pw_run(twin, c->cdtype, dst, c->nin, in, c->s);
  atomic_fetch_add(&dst->storage->version, 1);
  for (int i = 0; i < 3; i++)
    tensor_unref(tmp[i]);
  return dst;
fail:
  for (int i = 0; i < 3; i++)
    tensor_unref(tmp[i]);
  return NULL;
}

void eager_register_cpu_pointwise(void)
{
  for (int op = 0; op < TC_OP__MAX; op++) {
    if (op_table[op].kind != OPK_PW)
      continue;
    eager_register(TC_KEY_CPU, (tc_op)op,
                   (op_table[op].flags & OPF_M) ? cpu_inplace : cpu_pointwise);
  }
}
