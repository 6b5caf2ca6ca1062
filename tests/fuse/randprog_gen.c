/*
** randprog_gen.c -- the generator of random programs (see randprog.h).
** A program is chosen by its seed alone. Shapes are symbolic (size
** variables), so every decision here holds for every instance's sizes:
** operands broadcast when each pair of dims is the same variable or one is
** the literal 1, matmul's inner dims are one variable, squeeze only drops a
** literal 1.
*/
#include <stdlib.h>
#include <string.h>

#include "randprog.h"

unsigned rp_avoid;

/* -- Randomness ---------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct {
  uint64_t s;
} rng;

static uint32_t rn(rng *r, uint32_t n)
{
  r->s = mix64(r->s);
  return n ? (uint32_t)((r->s >> 11) % n) : 0;
}

static bool chance(rng *r, int percent) { return (int)rn(r, 100) < percent; }

/* -- Size variables ------------------------------------------------------ */

static int64_t slice_len(int64_t n, int64_t start, int64_t end, int64_t step)
{
  /* As tensor_geom_slice: Python's negative indices, then clamp. */
  if (start < 0)
    start = start < -n ? 0 : start + n;
  if (end < 0)
    end = end < -n ? 0 : end + n;
  if (start > n)
    start = n;
  if (end > n)
    end = n;
  return end > start ? (end - start + step - 1) / step : 0;
}

int64_t rp_var_eval(const rp_prog *p, int v, const int64_t *size)
{
  const rp_var *x = &p->var[v];
  switch (x->kind) {
  case SV_ONE: return 1;
  case SV_IN: return size[x->a];
  case SV_SLICE:
    return slice_len(rp_var_eval(p, x->a, size), x->start,
                     x->end ? -(int64_t)x->end : INT64_MAX, x->step);
  default:
    return rp_var_eval(p, x->a, size) * rp_var_eval(p, x->b, size);
  }
}

/* The variable equal to v (hash-consed: the same slice of the same size is
** the same variable), or -1 when the table is full. */
static int var_get(rp_prog *p, rp_var v)
{
  for (int i = 0; i < p->nvars; i++)
    if (memcmp(&p->var[i], &v, sizeof v) == 0)
      return i;
  if (p->nvars == RP_MAXVARS)
    return -1;
  p->var[p->nvars] = v;
  return p->nvars++;
}

static int var_slice(rp_prog *p, int parent, int start, int end, int step)
{
  if (start == 0 && end == 0 && step == 1)
    return parent;
  if (start == 0 && end == 1 && step == 1)
    start = 1, end = 0;   /* x[:-1] and x[1:] have one size */
  return var_get(p, (rp_var){ .kind = SV_SLICE, .a = (uint8_t)parent,
                              .start = (int8_t)start, .end = (int8_t)end,
                              .step = (int8_t)step });
}

static int var_prod(rp_prog *p, int a, int b)
{
  if (a == 0)
    return b;
  if (b == 0)
    return a;
  if (a > b) {
    int t = a;
    a = b;
    b = t;
  }
  return var_get(p, (rp_var){ .kind = SV_PROD, .a = (uint8_t)a,
                              .b = (uint8_t)b });
}

/* -- Symbolic shapes ----------------------------------------------------- */

static bool shape_eq(const rp_shape *a, const rp_shape *b)
{
  return a->ndim == b->ndim && memcmp(a->d, b->d, (size_t)a->ndim) == 0;
}

/* NumPy broadcasting over variables: equal, or one of them the literal 1. */
static bool bcast(const rp_shape *a, const rp_shape *b, rp_shape *out)
{
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  rp_shape r = { .ndim = (int8_t)n };
  for (int i = 0; i < n; i++) {
    int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
    int da = ia >= 0 ? a->d[ia] : 0, db = ib >= 0 ? b->d[ib] : 0;
    if (da != db && da != 0 && db != 0)
      return false;
    r.d[i] = (uint8_t)(da ? da : db);
  }
  if (out)
    *out = r;
  return true;
}

/* src broadcasts to exactly dst (an in-place source). */
static bool bcast_to(const rp_shape *src, const rp_shape *dst)
{
  rp_shape r;
  return src->ndim <= dst->ndim && bcast(src, dst, &r) && shape_eq(&r, dst);
}

static bool numel_one(const rp_shape *s)
{
  for (int i = 0; i < s->ndim; i++)
    if (s->d[i] != 0)
      return false;
  return true;
}

/* -- The generator's state ----------------------------------------------- */

#define MAXDEPTH 4
#define ALIVE_SOFT 22      /* release old values beyond this many */

typedef struct {
  rp_prog *p;
  rng r;
  int depth;
  int level[RP_MAXV];      /* scope level while alive, -1 when dead */
  int alias[RP_MAXV];      /* the state this value views, or -1 */
  bool expanded[RP_MAXV];  /* has broadcast (stride 0) dims */
  int begin[MAXDEPTH];     /* open scopes: their SCOPE_BEGIN steps */
  int states[8], nstates;
  int group[3];            /* an optimizer's p, m, v (states), or -1 */
  uint64_t seeds;          /* input data seeds */
  uint8_t dt;              /* the program's main float dtype */
  int read_pct;            /* 100: reads as often as usual; 10: quiet */
} gen;

static bool is_float(int dt)
{
  return dt == TC_F32 || dt == TC_F64 || dt == TC_F16 || dt == TC_BF16;
}

static const uint8_t float_dts[] = { TC_F32, TC_F64, TC_F16, TC_BF16 };

/* A float dtype other than dt. */
static int other_float(gen *g, int dt)
{
  int k;
  do
    k = float_dts[rn(&g->r, 4)];
  while (k == dt);
  return k;
}

static bool room(const gen *g, int steps)
{
  return g->p->nsteps + steps + 2 * g->p->nvals / 3 + 8 < RP_MAXS &&
         g->p->nvals + steps < RP_MAXV;
}

static rp_step *emit(gen *g, int op)
{
  rp_step *s = &g->p->step[g->p->nsteps++];
  memset(s, 0, sizeof *s);
  s->op = (uint8_t)op;
  s->out = s->in[0] = s->in[1] = s->in[2] = -1;
  s->infer = -1;
  return s;
}

/* Make s produce a new value of this shape and dtype. */
static int result(gen *g, rp_step *s, rp_shape sh, int dt)
{
  rp_prog *p = g->p;
  if (p->nvals == RP_MAXV) {
    fprintf(stderr, "randprog: value table full (seed %llu)\n",
            (unsigned long long)p->seed);
    abort();
  }
  int v = p->nvals++;
  p->val[v] = (rp_val){ .shape = sh, .dtype = (uint8_t)dt,
                        .step = (int16_t)(s - p->step) };
  s->out = (int16_t)v;
  g->level[v] = g->depth;
  g->alias[v] = -1;
  g->expanded[v] = false;
  return v;
}

static int alive(const gen *g, int v) { return v >= 0 && g->level[v] >= 0; }

#define PF_FLOAT 1    /* f32 or f64 */
#define PF_RANK1 2    /* at least one dim */
#define PF_RANK2 4    /* at least two dims */
#define PF_NOSTATE 8  /* not a state (may still view one) */
#define PF_BOOL 16
#define PF_MM 32      /* 2-D or 3-D */

static bool fits(const gen *g, int v, int flags)
{
  const rp_val *x = &g->p->val[v];
  if (!alive(g, v))
    return false;
  if ((flags & PF_FLOAT) && !is_float(x->dtype))
    return false;
  if ((flags & PF_BOOL) && x->dtype != TC_BOOL)
    return false;
  if ((flags & PF_RANK1) && x->shape.ndim < 1)
    return false;
  if ((flags & PF_RANK2) && x->shape.ndim < 2)
    return false;
  if ((flags & PF_MM) && (x->shape.ndim < 2 || x->shape.ndim > 3))
    return false;
  if ((flags & PF_NOSTATE) && x->state)
    return false;
  return true;
}

/* An alive value: mostly the latest or one of the latest (programs are
** chains that branch now and then), else any. */
static int pick(gen *g, int flags)
{
  int cand[RP_MAXV], n = 0;
  for (int v = 0; v < g->p->nvals; v++)
    if (fits(g, v, flags))
      cand[n++] = v;
  if (!n)
    return -1;
  int r = (int)rn(&g->r, 100);
  if (r < 45)
    return cand[n - 1];
  if (n > 4 && r < 70)
    return cand[n - 1 - (int)rn(&g->r, 4)];
  return cand[rn(&g->r, (uint32_t)n)];
}

/* An alive value that broadcasts with shape s (or to it, when exact). */
static int pick_compat(gen *g, const rp_shape *s, bool exact, int flags)
{
  int cand[RP_MAXV], n = 0;
  for (int v = 0; v < g->p->nvals; v++) {
    if (!fits(g, v, flags))
      continue;
    const rp_shape *x = &g->p->val[v].shape;
    if (exact ? bcast_to(x, s) : bcast(x, s, NULL))
      cand[n++] = v;
  }
  if (!n)
    return -1;
  if (n > 3 && chance(&g->r, 50))
    return cand[n - 1 - (int)rn(&g->r, 3)];
  return cand[rn(&g->r, (uint32_t)n)];
}

static int in_var(gen *g) { return 1 + (int)rn(&g->r, RP_NIN); }

/* -- Steps, one op each -------------------------------------------------- */

static int input(gen *g, rp_shape sh, int dt, bool state)
{
  rp_step *s = emit(g, RP_INPUT);
  s->k = (uint8_t)(chance(&g->r, 80) ? 0 : chance(&g->r, 50) ? 1 : 2);
  s->dtype = (uint8_t)dt;
  s->shape = sh;
  s->s1 = (double)(g->seeds++ % 1000003);
  static const double fills[] = { 0.0, 1.0, -0.5, 2.0 };
  s->s0 = fills[rn(&g->r, 4)];
  int v = result(g, s, sh, dt);
  g->p->val[v].state = state;
  return v;
}

static int unary_op(gen *g, int k, int a)
{
  rp_step *s = emit(g, RP_UNARY);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)a;
  int dt = g->p->val[a].dtype;
  bool keeps = k == RP_U_NEG || k == RP_U_ABS || k == RP_U_RELU;
  return result(g, s, g->p->val[a].shape, keeps || is_float(dt) ? dt : TC_F32);
}

static int promote(int a, int b)
{
  return tc_promote((tc_dtype)a, (tc_dtype)b);
}

static int binary_op(gen *g, int k, int a, int b)
{
  rp_shape sh;
  if (!bcast(&g->p->val[a].shape, &g->p->val[b].shape, &sh))
    sh = g->p->val[a].shape;   /* an error probe: both modes must agree */
  rp_step *s = emit(g, RP_BINARY);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)a;
  s->in[1] = (int16_t)b;
  int dt = promote(g->p->val[a].dtype, g->p->val[b].dtype);
  if (k >= RP_B_EQ)
    dt = TC_BOOL;
  else if ((k == RP_B_DIV || k == RP_B_POW) && !is_float(dt))
    dt = TC_F32;
  return result(g, s, sh, dt);
}

static int scalar_op(gen *g, int k, int a, double x)
{
  rp_step *s = emit(g, RP_SCALAR);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)a;
  s->s0 = x;
  s->vary = chance(&g->r, 30);
  int dt = g->p->val[a].dtype;
  return result(g, s, g->p->val[a].shape,
                is_float(dt) ? dt : k >= RP_S_DIV ? TC_F32 : dt);
}

static int reduce_op(gen *g, int k, int a, int dim, bool keep)
{
  if ((k == RP_R_MEAN || k == RP_R_VAR || k == RP_R_STD) &&
      (rp_avoid & RP_AVOID_MEAN))   /* var and std take a mean */
    k = RP_R_SUM;
  const rp_val *x = &g->p->val[a];
  rp_step *s = emit(g, RP_REDUCE);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)a;
  s->dim = (int8_t)dim;
  s->keepdim = keep;
  rp_shape sh = { 0 };
  int n = x->shape.ndim, d = dim < 0 ? dim + (n ? n : 1) : dim;
  for (int i = 0; i < n; i++)
    if (i != d)
      sh.d[sh.ndim++] = x->shape.d[i];
    else if (keep)
      sh.d[sh.ndim++] = 0;
  if (k == RP_R_CUMSUM)
    sh = x->shape;
  int dt = k == RP_R_ARGMAX || k == RP_R_ARGMIN ? TC_I64
           : (k == RP_R_SUM || k == RP_R_CUMSUM) && !is_float(x->dtype)
               ? TC_I64
               : x->dtype;
  return result(g, s, sh, dt);
}

static int rand_dim(gen *g, int ndim)
{
  int n = ndim ? ndim : 1;
  int d = (int)rn(&g->r, (uint32_t)n);
  return chance(&g->r, 40) ? d - n : d;
}

static int sum_all_op(gen *g, int a)
{
  rp_step *s = emit(g, RP_SUM_ALL);
  s->in[0] = (int16_t)a;
  int dt = g->p->val[a].dtype;
  return result(g, s, (rp_shape){ 0 }, is_float(dt) ? dt : TC_I64);
}

static int softmax_op(gen *g, bool log, int a, int dim)
{
  rp_step *s = emit(g, log ? RP_LOG_SOFTMAX : RP_SOFTMAX);
  s->in[0] = (int16_t)a;
  s->dim = (int8_t)dim;
  int dt = g->p->val[a].dtype;
  return result(g, s, g->p->val[a].shape, is_float(dt) ? dt : TC_F32);
}

static int cast_op(gen *g, int a, int dt)
{
  rp_step *s = emit(g, RP_CAST);
  s->in[0] = (int16_t)a;
  s->dtype = (uint8_t)dt;
  return result(g, s, g->p->val[a].shape, dt);
}

/* A view of a: the result aliases a's storage (and so any state a views). */
static int view_result(gen *g, rp_step *s, int a, rp_shape sh)
{
  int v = result(g, s, sh, g->p->val[a].dtype);
  g->alias[v] = g->p->val[a].state ? a : g->alias[a];
  g->expanded[v] = g->expanded[a];
  return v;
}

static int transpose_op(gen *g, int a, int d0, int d1)
{
  const rp_shape *x = &g->p->val[a].shape;
  rp_step *s = emit(g, RP_TRANSPOSE);
  s->in[0] = (int16_t)a;
  s->dim = (int8_t)d0;
  s->dim2 = (int8_t)d1;
  rp_shape sh = *x;
  int n = x->ndim;
  int i = d0 < 0 ? d0 + n : d0, j = d1 < 0 ? d1 + n : d1;
  uint8_t t = sh.d[i];
  sh.d[i] = sh.d[j];
  sh.d[j] = t;
  return view_result(g, s, a, sh);
}

static int slice_op(gen *g, int a, int dim, int start, int end, int step)
{
  const rp_shape *x = &g->p->val[a].shape;
  int n = x->ndim, d = dim < 0 ? dim + n : dim;
  int v = var_slice(g->p, x->d[d], start, end, step);
  if (v < 0)
    return -1;
  rp_step *s = emit(g, RP_SLICE);
  s->in[0] = (int16_t)a;
  s->dim = (int8_t)dim;
  s->start = start;
  s->end = end ? -end : INT64_MAX;
  s->step = step;
  rp_shape sh = *x;
  sh.d[d] = (uint8_t)v;
  return view_result(g, s, a, sh);
}

static int unsqueeze_op(gen *g, int a, int dim)
{
  const rp_shape *x = &g->p->val[a].shape;
  rp_step *s = emit(g, RP_UNSQUEEZE);
  s->in[0] = (int16_t)a;
  s->dim = (int8_t)dim;
  int d = dim < 0 ? dim + x->ndim + 1 : dim;
  rp_shape sh = { .ndim = (int8_t)(x->ndim + 1) };
  for (int i = 0, j = 0; i < sh.ndim; i++)
    sh.d[i] = i == d ? 0 : x->d[j++];
  return view_result(g, s, a, sh);
}

static int reshape_op(gen *g, int a, rp_shape sh, int infer)
{
  rp_step *s = emit(g, RP_RESHAPE);
  s->in[0] = (int16_t)a;
  s->shape = sh;
  s->infer = (int8_t)infer;
  return view_result(g, s, a, sh);
}

static int expand_op(gen *g, int a, rp_shape sh)
{
  rp_step *s = emit(g, RP_EXPAND);
  s->in[0] = (int16_t)a;
  s->shape = sh;
  int v = view_result(g, s, a, sh);
  const rp_shape *x = &g->p->val[a].shape;
  for (int i = 0; i < sh.ndim; i++) {
    int j = i - (sh.ndim - x->ndim);
    if (sh.d[i] != 0 && (j < 0 || x->d[j] == 0))
      g->expanded[v] = true;
  }
  return v;
}

static void read_op(gen *g, int v, int how)
{
  rp_step *s = emit(g, RP_READ);
  s->k = (uint8_t)how;
  s->in[0] = (int16_t)v;
}

/* A read at this point, with this chance scaled by the program's reading
** habit: some programs read often (many small regions), some almost never
** before the end (large regions, many kernels each). */
static bool reads(gen *g, int pct)
{
  return chance(&g->r, pct * g->read_pct / 100);
}

static int rand_read(gen *g, int v)
{
  int r = (int)rn(&g->r, 100);
  if (numel_one(&g->p->val[v].shape) && r < 35)
    return RP_RD_ITEM;
  return r < 55 ? RP_RD_COPY : r < 80 ? RP_RD_DATA : RP_RD_REALIZE;
}

static void inplace_op(gen *g, int k, int dst, int src)
{
  rp_step *s = emit(g, RP_INPLACE);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)dst;
  s->in[1] = (int16_t)src;
}

static void inplace_s_op(gen *g, int k, int dst, double x)
{
  rp_step *s = emit(g, RP_INPLACE_S);
  s->k = (uint8_t)k;
  s->in[0] = (int16_t)dst;
  s->s0 = x;
  s->vary = chance(&g->r, 30);
}

static void release_op(gen *g, int v)
{
  rp_step *s = emit(g, RP_RELEASE);
  s->in[0] = (int16_t)v;
  g->level[v] = -1;
}

/* -- Making operands that fit -------------------------------------------- */

static int rand_float_dt(gen *g)
{
  return chance(&g->r, 85) ? g->dt : other_float(g, g->dt);
}

/* A shape that broadcasts to s: some dims become 1, some leading dims go. */
static rp_shape weaker(gen *g, const rp_shape *s)
{
  rp_shape r = *s;
  int drop = s->ndim && chance(&g->r, 30)
                 ? (int)rn(&g->r, (uint32_t)s->ndim + 1)
                 : 0;
  r.ndim = (int8_t)(s->ndim - drop);
  for (int i = 0; i < r.ndim; i++)
    r.d[i] = s->d[i + drop];
  for (int i = 0; i < r.ndim; i++)
    if (chance(&g->r, 35))
      r.d[i] = 0;
  return r;
}

/* A float value that broadcasts to shape s (exactly when exact): an alive
** one, or one made for it (an input, a reduction of a same-shaped value
** kept as a broadcast dim, a sum_all). */
static int operand_for(gen *g, const rp_shape *s, bool exact)
{
  int v = chance(&g->r, 65) ? pick_compat(g, s, exact, PF_FLOAT) : -1;
  if (v >= 0)
    return v;
  int how = (int)rn(&g->r, 10);
  if (how < 4 || s->ndim == 0)
    return input(g, weaker(g, s), rand_float_dt(g), false);
  if (how < 8) {
    /* reduce a same-shaped value over one dim, keeping it as a 1 */
    int x = pick_compat(g, s, true, PF_FLOAT);
    if (x < 0 || g->p->val[x].shape.ndim != s->ndim)
      return input(g, weaker(g, s), rand_float_dt(g), false);
    static const int ks[] = { RP_R_SUM, RP_R_MEAN, RP_R_MAX, RP_R_MIN };
    int dim = rand_dim(g, s->ndim);
    return reduce_op(g, ks[rn(&g->r, 4)], x, dim, true);
  }
  int x = pick(g, PF_FLOAT);
  return x < 0 ? input(g, (rp_shape){ 0 }, g->dt, false) : sum_all_op(g, x);
}

/* -- Actions: a few steps each ------------------------------------------- */

static void act_unary(gen *g)
{
  int a = pick(g, PF_FLOAT);
  if (a < 0)
    return;
  int k = (int)rn(&g->r, RP_U__N);
  if ((k == RP_U_LOG || k == RP_U_SQRT || k == RP_U_RSQRT ||
       k == RP_U_LOG1P) && chance(&g->r, 75)) {
    a = unary_op(g, RP_U_ABS, a);
    if (k != RP_U_SQRT)
      a = scalar_op(g, RP_S_ADD, a, 0.5);
  }
  if ((k == RP_U_EXP || k == RP_U_EXPM1) && chance(&g->r, 50)) {
    rp_step *s = emit(g, RP_CLAMP);
    s->in[0] = (int16_t)a;
    s->s0 = -30;
    s->s1 = 30;
    a = result(g, s, g->p->val[a].shape, g->p->val[a].dtype);
  }
  unary_op(g, k, a);
}

static void act_binary(gen *g)
{
  int a = pick(g, chance(&g->r, 95) ? PF_FLOAT : 0);
  if (a < 0 || g->p->val[a].dtype == TC_BOOL)
    return;
  int b = operand_for(g, &g->p->val[a].shape, false);
  if (chance(&g->r, 50)) {
    int t = a;
    a = b;
    b = t;
  }
  int k = (int)rn(&g->r, RP_B__N);
  if (k == RP_B_DIV && chance(&g->r, 60))
    b = scalar_op(g, RP_S_ADD, unary_op(g, RP_U_ABS, b), 1);
  if (k == RP_B_POW && chance(&g->r, 70)) {
    a = unary_op(g, RP_U_ABS, a);
    b = unary_op(g, RP_U_TANH, b);
  }
  binary_op(g, k, a, b);
}

static void act_scalar(gen *g)
{
  int a = pick(g, chance(&g->r, 95) ? PF_FLOAT : 0);
  if (a < 0 || g->p->val[a].dtype == TC_BOOL)
    return;
  static const double xs[] = { 0.5, 2.0, -1.5, 0.25, 3.0, 1e-3, -0.1, 1.0,
                               0.0, 7.0 };
  int k = (int)rn(&g->r, RP_S__N);
  double x = xs[rn(&g->r, 10)];
  if (k == RP_S_POW) {
    static const double ps[] = { 2.0, 3.0, 0.5, -1.0, 1.5 };
    x = ps[rn(&g->r, 5)];
    if (x != 2.0 && x != 3.0)
      a = unary_op(g, RP_U_ABS, a);
  }
  if (k == RP_S_DIV && x == 0.0 && chance(&g->r, 80))
    x = 4.0;
  scalar_op(g, k, a, x);
}

static void act_select(gen *g)
{
  int a = pick(g, PF_FLOAT);
  if (a < 0)
    return;
  if (chance(&g->r, 40)) {
    rp_step *s = emit(g, RP_CLAMP);
    s->in[0] = (int16_t)a;
    static const double lo[] = { -1.0, 0.0, -0.5, 2.0 };
    static const double hi[] = { 1.0, 0.5, 3.0, 1.0 };
    int i = (int)rn(&g->r, 4);
    s->s0 = lo[i];
    s->s1 = hi[i];
    s->vary = chance(&g->r, 30);
    result(g, s, g->p->val[a].shape, g->p->val[a].dtype);
    return;
  }
  int b = operand_for(g, &g->p->val[a].shape, false);
  int c = pick_compat(g, &g->p->val[a].shape, false, PF_BOOL);
  rp_shape ab;
  if (!bcast(&g->p->val[a].shape, &g->p->val[b].shape, &ab))
    return;
  if (c < 0 || !bcast(&g->p->val[c].shape, &ab, NULL) || chance(&g->r, 50))
    c = binary_op(g, RP_B_EQ + (int)rn(&g->r, 6), a, b);
  rp_step *s = emit(g, RP_WHERE);
  s->in[0] = (int16_t)c;
  s->in[1] = (int16_t)(chance(&g->r, 50) ? a : b);
  s->in[2] = (int16_t)(s->in[1] == a ? b : a);
  rp_shape sh;
  bcast(&g->p->val[c].shape, &ab, &sh);
  result(g, s, sh, promote(g->p->val[a].dtype, g->p->val[b].dtype));
}

static void act_cast(gen *g)
{
  int a = pick(g, 0);
  if (a < 0)
    return;
  int dt = g->p->val[a].dtype;
  int to = is_float(dt) ? other_float(g, dt) : rand_float_dt(g);
  cast_op(g, a, to);
}

/* A 0-d value feeding the ops that treat it as a 1-element dim. */
static void zero_d_uses(gen *g, int z)
{
  int how = (int)rn(&g->r, 9);
  if ((rp_avoid & RP_AVOID_ZEROD) && how < 3)
    how = 8;
  switch (how) {
  case 0:
  case 1: {
    static const int ks[] = { RP_R_SUM, RP_R_MEAN, RP_R_MAX, RP_R_MIN,
                              RP_R_ARGMAX, RP_R_ARGMIN };
    int r = reduce_op(g, ks[rn(&g->r, 6)], z, chance(&g->r, 50) ? 0 : -1,
                      chance(&g->r, 50));
    if (reads(g, 50))
      read_op(g, r, rand_read(g, r));
    break;
  }
  case 2:
    softmax_op(g, chance(&g->r, 40), z, chance(&g->r, 50) ? 0 : -1);
    break;
  case 3: {
    int n = 1 + (int)rn(&g->r, 2);
    rp_shape sh = { .ndim = (int8_t)n };
    reshape_op(g, z, sh, chance(&g->r, 30) ? 0 : -1);
    break;
  }
  case 4: unsqueeze_op(g, z, chance(&g->r, 50) ? 0 : -1); break;
  case 5: {
    int x = pick(g, PF_RANK1);
    if (x >= 0)
      expand_op(g, z, g->p->val[x].shape);
    break;
  }
  case 6: {
    int x = pick(g, PF_FLOAT);
    if (x >= 0)
      binary_op(g, (int)rn(&g->r, RP_B_MINIMUM + 1), x, z);
    break;
  }
  case 7:
    if (g->nstates) {
      int s = g->states[rn(&g->r, (uint32_t)g->nstates)];
      inplace_op(g, RP_I_ADD + (int)rn(&g->r, 4), s, z);
    }
    break;
  default: read_op(g, z, rand_read(g, z)); break;
  }
}

static void act_zero_d(gen *g)
{
  int a = pick(g, PF_FLOAT);
  if (a < 0)
    return;
  int z;
  const rp_shape *x = &g->p->val[a].shape;
  if (x->ndim == 1 && chance(&g->r, 70)) {
    static const int ks[] = { RP_R_SUM, RP_R_MEAN, RP_R_MAX, RP_R_MIN };
    z = reduce_op(g, ks[rn(&g->r, 4)], a, chance(&g->r, 50) ? 0 : -1, false);
  } else if (x->ndim == 2 && chance(&g->r, 40)) {
    int row = reduce_op(g, RP_R_SUM, a, (int)rn(&g->r, 2), false);
    z = reduce_op(g, RP_R_SUM, row, 0, false);
  } else {
    z = sum_all_op(g, a);
  }
  zero_d_uses(g, z);
  if (chance(&g->r, 40))
    zero_d_uses(g, z);
}

static void act_reduce(gen *g)
{
  int a = pick(g, (chance(&g->r, 95) ? PF_FLOAT : 0) |
                  (rp_avoid & RP_AVOID_ZEROD ? PF_RANK1 : 0));
  if (a < 0)
    return;
  int k = (int)rn(&g->r, RP_R__N);
  if (!is_float(g->p->val[a].dtype) && k == RP_R_MEAN && chance(&g->r, 80))
    k = RP_R_SUM;
  int r = reduce_op(g, k, a, rand_dim(g, g->p->val[a].shape.ndim),
                    chance(&g->r, 50));
  if (reads(g, 20))
    read_op(g, r, rand_read(g, r));
}

bool rp_indexing;

/* A gather or an index_select of a float value along a random dim. */
static void act_gather(gen *g)
{
  int a = pick(g, PF_FLOAT);
  if (a < 0 || g->p->val[a].shape.ndim == 0)
    return;
  const rp_shape *x = &g->p->val[a].shape;
  rp_step *s = emit(g, RP_GATHER);
  s->in[0] = (int16_t)a;
  s->k = (uint8_t)rn(&g->r, RP_G__N);
  s->dim = (int8_t)rand_dim(g, x->ndim);
  s->s1 = (double)(g->seeds++ % 1000003);
  result(g, s, *x, g->p->val[a].dtype);
}

static void act_composite(gen *g)
{
  int a = pick(g, PF_FLOAT | (rp_avoid & RP_AVOID_ZEROD ? PF_RANK1 : 0));
  if (a < 0)
    return;
  const rp_shape *x = &g->p->val[a].shape;
  if (x->ndim == 0 || chance(&g->r, 60) || (rp_avoid & RP_AVOID_MEAN)) {
    softmax_op(g, chance(&g->r, 40), a, rand_dim(g, x->ndim));
    return;
  }
  rp_shape last = { .ndim = 1, .d = { x->d[x->ndim - 1] } };
  int gb[2];
  for (int i = 0; i < 2; i++) {
    gb[i] = -1;
    if (chance(&g->r, 60)) {
      gb[i] = pick_compat(g, &last, true, PF_FLOAT);
      if (gb[i] < 0 || g->p->val[gb[i]].shape.ndim != 1)
        gb[i] = input(g, last, rand_float_dt(g), false);
    }
  }
  rp_step *s = emit(g, RP_LAYER_NORM);
  s->in[0] = (int16_t)a;
  s->in[1] = (int16_t)gb[0];
  s->in[2] = (int16_t)gb[1];
  static const double eps[] = { 1e-5, 1e-3, 0.0, 0.1 };
  s->s0 = eps[rn(&g->r, 4)];
  int dt = g->p->val[a].dtype;
  for (int i = 0; i < 2; i++)
    if (gb[i] >= 0)
      dt = promote(dt, g->p->val[gb[i]].dtype);
  result(g, s, *x, dt);
}

static void act_matmul(gen *g)
{
  int a = pick(g, PF_FLOAT | PF_MM);
  if (a < 0)
    return;
  rp_shape x = g->p->val[a].shape;
  int n = x.ndim, kv = x.d[n - 1];
  int b = -1, how = (int)rn(&g->r, 10);
  if (how < 3) {
    b = transpose_op(g, a, -1, -2);
  } else if (how < 6) {
    for (int v = g->p->nvals - 1; v >= 0 && b < 0; v--) {
      const rp_shape *y = &g->p->val[v].shape;
      if (fits(g, v, PF_FLOAT | PF_MM) && y->d[y->ndim - 2] == kv &&
          (n == 2 || y->ndim == 2 || y->d[0] == x.d[0] || y->d[0] == 0 ||
           x.d[0] == 0))
        b = v;
    }
  }
  if (b < 0) {
    int nv = chance(&g->r, 15) ? 0 : in_var(g);
    rp_shape sh = { .ndim = 2, .d = { (uint8_t)kv, (uint8_t)nv } };
    if (n == 3 && chance(&g->r, 40)) {
      sh = (rp_shape){ .ndim = 3,
                       .d = { chance(&g->r, 70) ? x.d[0] : 0, (uint8_t)kv,
                              (uint8_t)nv } };
    }
    b = input(g, sh, rand_float_dt(g), false);
  }
  const rp_shape *y = &g->p->val[b].shape;
  rp_shape r = { 0 };
  if (n == 3 || y->ndim == 3) {
    int ba = n == 3 ? x.d[0] : 0, bb = y->ndim == 3 ? y->d[0] : 0;
    r.d[r.ndim++] = (uint8_t)(ba ? ba : bb);
  }
  r.d[r.ndim++] = x.d[n - 2];
  r.d[r.ndim++] = y->d[y->ndim - 1];
  rp_step *s = emit(g, RP_MATMUL);
  s->in[0] = (int16_t)a;
  s->in[1] = (int16_t)b;
  int mm = result(g, s, r, promote(g->p->val[a].dtype, g->p->val[b].dtype));
  if (chance(&g->r, 40)) {   /* an epilogue */
    int bias = operand_for(g, &r, true);
    binary_op(g, RP_B_ADD, mm, bias);
  }
}

static void act_view(gen *g)
{
  int a = pick(g, 0);
  if (a < 0)
    return;
  rp_shape x = g->p->val[a].shape;
  int n = x.ndim;
  switch (rn(&g->r, 9)) {
  case 0:
    if (n >= 2) {
      int d0 = (int)rn(&g->r, (uint32_t)n), d1 = (int)rn(&g->r, (uint32_t)n);
      transpose_op(g, a, chance(&g->r, 30) ? d0 - n : d0, d1);
    }
    break;
  case 1:
    if (n >= 2) {
      rp_step *s = emit(g, RP_PERMUTE);
      s->in[0] = (int16_t)a;
      int perm[TC_MAX_DIMS];
      for (int i = 0; i < n; i++)
        perm[i] = i;
      for (int i = n - 1; i > 0; i--) {
        int j = (int)rn(&g->r, (uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
      }
      rp_shape sh = { .ndim = (int8_t)n };
      for (int i = 0; i < n; i++) {
        s->perm[i] = (int8_t)perm[i];
        sh.d[i] = x.d[perm[i]];
      }
      view_result(g, s, a, sh);
    }
    break;
  case 2:
  case 3:
    if (n >= 1) {
      static const int starts[] = { 0, 0, 1, 2 }, steps[] = { 1, 2, 2, 3 };
      slice_op(g, a, rand_dim(g, n), starts[rn(&g->r, 4)],
               chance(&g->r, 25) ? 1 : 0, steps[rn(&g->r, 4)]);
    }
    break;
  case 4: {   /* reshape: flatten, unflatten, reinterpret, 0-d <-> 1 */
    rp_shape sh = x;
    int r = (int)rn(&g->r, 4);
    if (n >= 2 && r == 0) {
      int i = (int)rn(&g->r, (uint32_t)n - 1);
      int pv = var_prod(g->p, x.d[i], x.d[i + 1]);
      if (pv < 0)
        break;
      sh.d[i] = (uint8_t)pv;
      memmove(sh.d + i + 1, sh.d + i + 2, (size_t)(n - i - 2));
      sh.ndim--;
    } else if (r == 1) {
      int i = -1;
      for (int d = 0; d < n; d++)
        if (g->p->var[x.d[d]].kind == SV_PROD)
          i = d;
      if (i < 0 || n == TC_MAX_DIMS)
        break;
      const rp_var *pv = &g->p->var[x.d[i]];
      memmove(sh.d + i + 2, sh.d + i + 1, (size_t)(n - i - 1));
      sh.d[i] = pv->a;
      sh.d[i + 1] = pv->b;
      sh.ndim++;
    } else if (r == 2 && n >= 2) {
      for (int i = n - 1; i > 0; i--) {
        int j = (int)rn(&g->r, (uint32_t)i + 1);
        uint8_t t = sh.d[i];
        sh.d[i] = sh.d[j];
        sh.d[j] = t;
      }
    } else if (numel_one(&x)) {
      sh.ndim = (int8_t)rn(&g->r, 3);
      memset(sh.d, 0, sizeof sh.d);
    } else if (n <= 2) {
      int d0 = n ? x.d[0] : 0, d1 = n == 2 ? x.d[1] : 0;
      int pv = var_prod(g->p, d0, d1);
      if (pv < 0)
        break;
      sh = (rp_shape){ .ndim = 1, .d = { (uint8_t)pv } };
    } else {
      break;
    }
    int infer = -1;
    for (int d = 0; d < sh.ndim && infer < 0; d++)
      if (sh.d[d] != 0 && chance(&g->r, 25))
        infer = d;
    reshape_op(g, a, sh, infer);
    break;
  }
  case 5: {   /* expand the 1s (and maybe a new leading dim) */
    rp_shape sh = x;
    bool any = false;
    for (int i = 0; i < n; i++)
      if (x.d[i] == 0 && chance(&g->r, 70)) {
        int o = pick(g, 0);
        const rp_shape *os = o >= 0 ? &g->p->val[o].shape : NULL;
        int j = os ? i - (n - os->ndim) : -1;
        sh.d[i] = (uint8_t)(os && j >= 0 && j < os->ndim && os->d[j]
                                ? os->d[j]
                                : in_var(g));
        any = true;
      }
    if ((!any || chance(&g->r, 30)) && n < 4) {
      memmove(sh.d + 1, sh.d, (size_t)n);
      sh.d[0] = (uint8_t)(chance(&g->r, 20) ? 0 : in_var(g));
      sh.ndim++;
    }
    expand_op(g, a, sh);
    break;
  }
  case 6:
    if (n < 4)
      unsqueeze_op(g, a, (int)rn(&g->r, (uint32_t)n + 1) -
                         (chance(&g->r, 30) ? n + 1 : 0));
    break;
  case 7: {
    int d = -1;
    for (int i = 0; i < n; i++)
      if (x.d[i] == 0 && (d < 0 || chance(&g->r, 50)))
        d = i;
    if (d >= 0) {
      rp_step *s = emit(g, RP_SQUEEZE);
      s->in[0] = (int16_t)a;
      s->dim = (int8_t)(chance(&g->r, 30) ? d - n : d);
      rp_shape sh = x;
      memmove(sh.d + d, sh.d + d + 1, (size_t)(n - d - 1));
      sh.ndim--;
      view_result(g, s, a, sh);
    }
    break;
  }
  default: {
    rp_step *s = emit(g, RP_CONTIGUOUS);
    s->in[0] = (int16_t)a;
    view_result(g, s, a, x);   /* aliases when a is contiguous already */
    break;
  }
  }
}

/* A destination through which state st is written: itself, an alive view
** of it, or a new view (transpose, strided slice, unsqueeze, flatten). */
static int state_dst(gen *g, int st)
{
  int r = (int)rn(&g->r, 10);
  if (r < 4)
    return st;
  if (r < 6) {
    for (int v = g->p->nvals - 1; v >= 0; v--)
      if (alive(g, v) && g->alias[v] == st && !g->expanded[v] &&
          g->p->step[g->p->val[v].step].op != RP_RESHAPE &&
          g->p->step[g->p->val[v].step].op != RP_CONTIGUOUS)
        return v;
  }
  const rp_shape *x = &g->p->val[st].shape;
  int n = x->ndim;
  if (n == 0)
    return st;
  switch (rn(&g->r, 4)) {
  case 0:
    if (n >= 2)
      return transpose_op(g, st, 0, n - 1);
    /* fall through */
  case 1: {
    static const int starts[] = { 0, 1, 1 }, steps[] = { 2, 1, 2 };
    int i = (int)rn(&g->r, 3);
    int v = slice_op(g, st, rand_dim(g, n), starts[i], 0, steps[i]);
    return v < 0 ? st : v;
  }
  case 2: return unsqueeze_op(g, st, (int)rn(&g->r, (uint32_t)n + 1));
  default: {
    if (n != 2)
      return st;
    int pv = var_prod(g->p, x->d[0], x->d[1]);
    if (pv < 0)
      return st;
    return reshape_op(g, st, (rp_shape){ .ndim = 1, .d = { (uint8_t)pv } },
                      -1);
  }
  }
}

static void act_inplace(gen *g)
{
  int dst;
  if (g->nstates && chance(&g->r, 80)) {
    dst = state_dst(g, g->states[rn(&g->r, (uint32_t)g->nstates)]);
  } else {
    dst = pick(g, PF_FLOAT | PF_NOSTATE);
    if (dst < 0 || (g->expanded[dst] && chance(&g->r, 80)))
      return;
    if ((rp_avoid & RP_AVOID_LAZYDST) && g->alias[dst] < 0 &&
        g->p->step[g->p->val[dst].step].op != RP_INPUT)
      return;
  }
  const rp_shape *ds = &g->p->val[dst].shape;
  int r = (int)rn(&g->r, 10);
  if (r < 3) {
    static const double xs[] = { 0.5, -1.25, 0.9, 2.0, 0.0, 1e-2 };
    int k = (int)rn(&g->r, RP_IS__N);
    inplace_s_op(g, k, dst, xs[rn(&g->r, 6)]);
  } else {
    int src;
    if (r < 5 && chance(&g->r, 50)) {
      /* the source reads the destination: x -= mean(x), x *= x^T, ... */
      if (ds->ndim && chance(&g->r, 60)) {
        src = reduce_op(g, chance(&g->r, 50) ? RP_R_MEAN : RP_R_MAX, dst,
                        rand_dim(g, ds->ndim), true);
      } else if (ds->ndim >= 1 && ds->d[0] != 0 && chance(&g->r, 50)) {
        /* a shifted slice of the same storage (overlapping) */
        int a = slice_op(g, dst, 0, 1, 0, 1), b = slice_op(g, dst, 0, 0, 1, 1);
        if (a < 0 || b < 0)
          return;
        binary_op(g, RP_B_ADD, a, b);
        inplace_op(g, RP_I_ADD + (int)rn(&g->r, 2), chance(&g->r, 50) ? a : b,
                   chance(&g->r, 50) ? b : a);
        return;
      } else {
        src = unary_op(g, RP_U_TANH, dst);
      }
    } else {
      src = operand_for(g, ds, true);
    }
    int k = (int)rn(&g->r, RP_I__N);
    if (k == RP_I_DIV && chance(&g->r, 70))
      src = scalar_op(g, RP_S_ADD, unary_op(g, RP_U_ABS, src), 1);
    inplace_op(g, k, dst, src);
  }
  if (reads(g, 25))
    read_op(g, dst, rand_read(g, dst));
}

/* Row statistics broadcast back, the way users write softmax, logsumexp,
** RMSNorm, variance, layer norm, cross-entropy and scaling. */
static void act_rowchain(gen *g)
{
  int x = pick(g, PF_FLOAT | PF_RANK1);
  if (x < 0)
    return;
  int n = g->p->val[x].shape.ndim;
  int d = chance(&g->r, 60) ? -1 : rand_dim(g, n);
  int y;
  switch (rn(&g->r, 8)) {
  case 0: {   /* softmax */
    int m = reduce_op(g, RP_R_MAX, x, d, true);
    int e = unary_op(g, RP_U_EXP, binary_op(g, RP_B_SUB, x, m));
    y = binary_op(g, RP_B_DIV, e, reduce_op(g, RP_R_SUM, e, d, true));
    break;
  }
  case 1: {   /* logsumexp */
    int m = reduce_op(g, RP_R_MAX, x, d, true);
    int e = unary_op(g, RP_U_EXP, binary_op(g, RP_B_SUB, x, m));
    int l = unary_op(g, RP_U_LOG, reduce_op(g, RP_R_SUM, e, d, true));
    y = binary_op(g, RP_B_ADD, m, l);
    if (chance(&g->r, 50))   /* log_softmax from it */
      y = binary_op(g, RP_B_SUB, x, y);
    break;
  }
  case 2: {   /* RMSNorm */
    int ms = reduce_op(g, RP_R_MEAN, binary_op(g, RP_B_MUL, x, x), -1, true);
    int r = unary_op(g, RP_U_RSQRT, scalar_op(g, RP_S_ADD, ms, 1e-6));
    y = binary_op(g, RP_B_MUL, x, r);
    if (chance(&g->r, 60)) {
      rp_shape w = { .ndim = 1, .d = { g->p->val[x].shape.d[n - 1] } };
      y = binary_op(g, RP_B_MUL, y, input(g, w, g->p->val[x].dtype, false));
    }
    break;
  }
  case 3: {   /* variance, then layer norm */
    int mu = reduce_op(g, RP_R_MEAN, x, d, true);
    int xc = binary_op(g, RP_B_SUB, x, mu);
    int var = reduce_op(g, RP_R_MEAN, binary_op(g, RP_B_MUL, xc, xc), d, true);
    if (chance(&g->r, 40)) {
      y = var;
      break;
    }
    int r = unary_op(g, RP_U_RSQRT, scalar_op(g, RP_S_ADD, var, 1e-5));
    y = binary_op(g, RP_B_MUL, xc, r);
    break;
  }
  case 4: {   /* divide by a positive sum */
    int s = reduce_op(g, RP_R_SUM,
                      scalar_op(g, RP_S_ADD, unary_op(g, RP_U_ABS, x), 1), d,
                      true);
    y = binary_op(g, RP_B_DIV, x, s);
    break;
  }
  case 5: {   /* centre, sometimes not keeping the dim */
    bool keep = chance(&g->r, 70);
    int mu = reduce_op(g, RP_R_MEAN, x, keep ? d : -1, keep);
    y = binary_op(g, RP_B_SUB, x, mu);
    break;
  }
  case 6: {   /* cross-entropy against the one-hot of the row max */
    int ls = softmax_op(g, true, x, -1);
    int hot = binary_op(g, RP_B_EQ, x, reduce_op(g, RP_R_MAX, x, -1, true));
    int p = binary_op(g, RP_B_MUL, ls,
                      cast_op(g, hot, g->p->val[x].dtype));
    y = reduce_op(g, RP_R_SUM, p, -1, false);
    if (g->p->val[y].shape.ndim)
      y = reduce_op(g, RP_R_MEAN, y, 0, false);
    y = unary_op(g, RP_U_NEG, y);
    break;
  }
  default: {  /* min-max scaling */
    int mn = reduce_op(g, RP_R_MIN, x, d, true);
    int mx = reduce_op(g, RP_R_MAX, x, d, true);
    int rg = scalar_op(g, RP_S_ADD, binary_op(g, RP_B_SUB, mx, mn), 1e-3);
    y = binary_op(g, RP_B_DIV, binary_op(g, RP_B_SUB, x, mn), rg);
    break;
  }
  }
  if (reads(g, 30))
    read_op(g, y, rand_read(g, y));
}

/* One optimizer step on the state group (p, m, v): SGD with momentum or
** Adam, from a gradient-like value of p's shape. */
static void act_optimizer(gen *g)
{
  if (g->group[0] < 0)
    return;
  int p = g->group[0], m = g->group[1], v = g->group[2];
  const rp_shape *ps = &g->p->val[p].shape;
  int x = operand_for(g, ps, true);
  int grad = binary_op(g, RP_B_MUL, unary_op(g, RP_U_TANH, p), x);
  if (chance(&g->r, 40)) {
    inplace_s_op(g, RP_IS_MUL, m, 0.9);
    inplace_op(g, RP_I_ADD, m, grad);
    inplace_op(g, RP_I_SUB, p, scalar_op(g, RP_S_MUL, m, 0.01));
  } else {
    inplace_s_op(g, RP_IS_MUL, m, 0.9);
    inplace_op(g, RP_I_ADD, m, scalar_op(g, RP_S_MUL, grad, 0.1));
    inplace_s_op(g, RP_IS_MUL, v, 0.999);
    inplace_op(g, RP_I_ADD, v,
               scalar_op(g, RP_S_MUL, binary_op(g, RP_B_MUL, grad, grad),
                         0.001));
    int den = scalar_op(g, RP_S_ADD, unary_op(g, RP_U_SQRT, v), 1e-8);
    int upd = scalar_op(g, RP_S_MUL, binary_op(g, RP_B_DIV, m, den), 1e-3);
    inplace_op(g, RP_I_SUB, p, upd);
  }
  if (reads(g, 40))
    read_op(g, p, rand_read(g, p));
}

/* x += a; y = f(view of x); x += b; read y: y must see the first write
** only. */
static void act_write_read(gen *g)
{
  if (!g->nstates)
    return;
  int x = g->states[rn(&g->r, (uint32_t)g->nstates)];
  const rp_shape *xs = &g->p->val[x].shape;
  if (chance(&g->r, 50))
    inplace_s_op(g, RP_IS_ADD, x, 0.66);
  else
    inplace_op(g, RP_I_ADD, x, operand_for(g, xs, true));
  int n = xs->ndim, v;
  switch (rn(&g->r, 4)) {
  case 0: v = unsqueeze_op(g, x, 0); break;
  case 1: v = n >= 2 ? transpose_op(g, x, 0, 1) : x; break;
  case 2: v = n ? slice_op(g, x, 0, 1, 0, 2) : x; break;
  default: v = n ? slice_op(g, x, -1, 0, 1, 1) : x; break;
  }
  if (v < 0)
    v = x;
  int y = chance(&g->r, 50) && bcast(xs, &g->p->val[v].shape, NULL) &&
                  !(rp_avoid & RP_AVOID_TWOVIEWS)
              ? binary_op(g, RP_B_MAXIMUM, x, v)
              : unary_op(g, RP_U_SIN, v);
  if (chance(&g->r, 50))
    inplace_s_op(g, RP_IS_ADD, x, 1.16);
  else
    inplace_op(g, RP_I_MUL, x, operand_for(g, xs, true));
  read_op(g, y, rand_read(g, y));
}

static void act_read(gen *g)
{
  if (!reads(g, 100))
    return;
  int v = pick(g, 0);
  if (v >= 0)
    read_op(g, v, rand_read(g, v));
}

static void scope_end(gen *g)
{
  int d = g->depth;
  for (int v = 0; v < g->p->nvals; v++)
    if (g->level[v] == d && chance(&g->r, 25)) {
      rp_step *s = emit(g, RP_KEEP);
      s->in[0] = (int16_t)v;
      g->level[v] = d - 1;
    }
  rp_step *s = emit(g, RP_SCOPE_END);
  int b = g->begin[d - 1];
  s->start = b;
  g->p->step[b].start = s - g->p->step;
  for (int v = 0; v < g->p->nvals; v++)
    if (g->level[v] == d)
      g->level[v] = -1;
  g->depth--;
}

static void act_scope(gen *g)
{
  if (g->depth < MAXDEPTH && (g->depth == 0 || chance(&g->r, 50))) {
    g->begin[g->depth++] = g->p->nsteps;
    emit(g, RP_SCOPE_BEGIN);
  } else if (g->depth > 0) {
    scope_end(g);
  }
}

static void act_release(gen *g)
{
  int v = pick(g, PF_NOSTATE);
  if (v >= 0 && g->level[v] == g->depth)
    release_op(g, v);
}

/* Error probes: bad calls must fail the same way in both modes. */
static void act_error(gen *g)
{
  int a = pick(g, 0);
  if (a < 0)
    return;
  const rp_shape *x = &g->p->val[a].shape;
  int v = -1;
  switch (rn(&g->r, 6)) {
  case 0: v = reduce_op(g, RP_R_SUM, a, x->ndim + 2, false); break;
  case 1: {
    rp_step *s = emit(g, RP_SLICE);
    s->in[0] = (int16_t)a;
    s->step = chance(&g->r, 50) ? 0 : -1;
    s->end = INT64_MAX;
    v = result(g, s, *x, g->p->val[a].dtype);
    break;
  }
  case 2: {
    int b = input(g, (rp_shape){ .ndim = 1, .d = { (uint8_t)in_var(g) } },
                  g->dt, false);
    v = binary_op(g, RP_B_ADD, a, b);   /* fails unless sizes happen to fit */
    break;
  }
  case 3: {
    int b = pick(g, PF_FLOAT | PF_MM);
    if (b >= 0 && g->p->val[a].shape.ndim >= 2) {
      rp_step *s = emit(g, RP_MATMUL);
      s->in[0] = (int16_t)a;
      s->in[1] = (int16_t)b;
      v = result(g, s, *x, g->p->val[a].dtype);
    }
    break;
  }
  case 4: {   /* float into an integer destination, or into a broadcast view */
    int dst = pick(g, 0);
    if (dst >= 0 && !(rp_avoid & RP_AVOID_LAZYDST))
      inplace_op(g, RP_I_ADD, dst, operand_for(g, &g->p->val[dst].shape,
                                              true));
    break;
  }
  default: {
    rp_step *s = emit(g, RP_MATMUL);   /* a NULL operand */
    s->in[0] = (int16_t)a;
    v = result(g, s, *x, g->p->val[a].dtype);
    s->in[1] = -2;
    break;
  }
  }
  if (v >= 0)
    g->level[v] = -1;   /* maybe NULL: never used again */
}

static void trim_alive(gen *g)
{
  int n = 0;
  for (int v = 0; v < g->p->nvals; v++)
    n += alive(g, v) && !g->p->val[v].state;
  for (int v = 0; v < g->p->nvals && n > ALIVE_SOFT; v++)
    if (alive(g, v) && !g->p->val[v].state && g->level[v] == g->depth &&
        chance(&g->r, 50)) {
      release_op(g, v);
      n--;
    }
}

/* -- Programs ------------------------------------------------------------ */

static rp_shape rand_shape(gen *g, int maxrank)
{
  int n = (int)rn(&g->r, (uint32_t)maxrank + 1);
  if (n == 0 && chance(&g->r, 60))
    n = 2;
  static const int pat2[][2] = { { 1, 2 }, { 1, 2 }, { 0, 2 }, { 1, 0 },
                                 { 2, 3 }, { 1, 1 }, { 4, 1 } };
  rp_shape s = { .ndim = (int8_t)n };
  if (n == 2) {
    int i = (int)rn(&g->r, 7);
    s.d[0] = (uint8_t)pat2[i][0];
    s.d[1] = (uint8_t)pat2[i][1];
  } else if (n == 3) {
    s.d[0] = 4;
    s.d[1] = 1;
    s.d[2] = (uint8_t)(chance(&g->r, 80) ? 2 : 0);
  } else {
    for (int i = 0; i < n; i++)
      s.d[i] = (uint8_t)in_var(g);
  }
  return s;
}

/* Sizes for one instance: mostly small, 1 often, sometimes one long dim
** (past a reduction chunk); at most 2^17 elements in R*C*K*B. */
static void draw_sizes(rng *r, int64_t *out)
{
  static const int64_t pool[] = { 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17,
                                  24, 31, 32, 33, 48, 64, 65, 100 };
  static const int64_t big[] = { 127, 255, 256, 257, 1000, 4095, 4097,
                                 8200 };
  for (;;) {
    for (int k = 0; k < RP_NIN; k++)
      out[k] = chance(r, 18) ? 1 : pool[rn(r, 20)];
    out[3] = chance(r, 25) ? 1 : 2 + rn(r, 4);   /* B: a batch */
    if (chance(r, 8))
      out[rn(r, 3)] = big[rn(r, 8)];
    int64_t n = 1;
    for (int k = 0; k < RP_NIN; k++)
      n *= out[k];
    if (n <= (1 << 17))
      return;
  }
}

/* Every value of the program at most 2^18 elements, every matmul at most
** 2^23 multiply-adds: programs stay quick at any size. */
static bool small_enough(const rp_prog *p, const int64_t *size)
{
  int64_t vsz[RP_MAXVARS];
  for (int v = 0; v < p->nvars; v++)
    vsz[v] = rp_var_eval(p, v, size);
  for (int v = 0; v < p->nvals; v++) {
    int64_t n = 1;
    for (int d = 0; d < p->val[v].shape.ndim; d++)
      n *= vsz[p->val[v].shape.d[d]];
    if (n > (1 << 18))
      return false;
  }
  for (int i = 0; i < p->nsteps; i++) {
    const rp_step *s = &p->step[i];
    if (s->op != RP_MATMUL || s->in[1] < 0 || s->out < 0)
      continue;
    const rp_shape *a = &p->val[s->in[0]].shape, *o = &p->val[s->out].shape;
    int64_t n = vsz[a->d[a->ndim - 1]];
    for (int d = 0; d < o->ndim; d++)
      n *= vsz[o->d[d]];
    if (n > (1 << 23))
      return false;
  }
  return true;
}

int rp_instances(uint64_t seed)
{
  rng r = { mix64(seed ^ 0x5eed157ull) };
  int u = (int)rn(&r, 100);
  return u < 12 ? 1 : u < 35 ? 2 + (int)rn(&r, 7)
                  : 12 + (int)rn(&r, RP_MAXINST - 11);
}

void rp_generate(rp_prog *p, uint64_t seed)
{
  memset(p, 0, sizeof *p);
  p->seed = seed;
  gen *g = calloc(1, sizeof *g);
  g->p = p;
  g->r.s = mix64(seed * 0x9E3779B97F4A7C15ull + 12345);
  g->seeds = seed * 7919 + 1;
  uint32_t pick_dt = rn(&g->r, 100);   /* f32 65%, f64 20%, f16, bf16 */
  g->dt = pick_dt < 65 ? TC_F32 : pick_dt < 85 ? TC_F64
          : pick_dt < 93 ? TC_F16 : TC_BF16;
  g->group[0] = g->group[1] = g->group[2] = -1;
  g->read_pct = chance(&g->r, 35) ? 10 : 100;
  p->var[0] = (rp_var){ .kind = SV_ONE };
  for (int k = 0; k < RP_NIN; k++)
    p->var[1 + k] = (rp_var){ .kind = SV_IN, .a = (uint8_t)k };
  p->nvars = 1 + RP_NIN;

  /* States (written in place), an optimizer's group, inputs. */
  int nst = 1 + (int)rn(&g->r, 3);
  for (int i = 0; i < nst; i++) {
    int v = input(g, rand_shape(g, 3), g->dt, true);
    g->states[g->nstates++] = v;
  }
  if (chance(&g->r, 35)) {
    rp_shape ps = rand_shape(g, 2);
    for (int i = 0; i < 3; i++) {
      int v = input(g, ps, g->dt, true);
      g->group[i] = v;
      if (i)
        g->p->step[g->p->val[v].step].k = 2;   /* m, v start as zeros */
      if (i)
        g->p->step[g->p->val[v].step].s0 = 0.0;
    }
    g->states[g->nstates++] = g->group[0];
  }
  int nin = 2 + (int)rn(&g->r, 3);
  for (int i = 0; i < nin; i++)
    input(g, rand_shape(g, 3), rand_float_dt(g), false);

  /* The body: 6 to 90 steps; about a third are 40 or more. */
  int u = (int)rn(&g->r, 100);
  int target = u < 30 ? 6 + (int)rn(&g->r, 10)
               : u < 65 ? 16 + (int)rn(&g->r, 24)
                        : 40 + (int)rn(&g->r, 50);
  struct { void (*fn)(gen *); int w; } acts[] = {
    { act_unary, 10 }, { act_binary, 12 }, { act_scalar, 6 },
    { act_select, 5 }, { act_cast, 3 }, { act_reduce, 8 },
    { act_zero_d, 5 }, { act_composite, 5 }, { act_matmul, 4 },
    { act_view, 12 }, { act_inplace, 10 }, { act_rowchain, 5 },
    { act_optimizer, 3 }, { act_write_read, 3 }, { act_read, 5 },
    { act_scope, 3 }, { act_release, 3 }, { act_error, 2 },
    { act_gather, 0 },   /* weight set below: 0 keeps the old programs */
  };
  acts[sizeof acts / sizeof acts[0] - 1].w = rp_indexing ? 4 : 0;
  int wsum = 0;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    wsum += acts[i].w;
  int body0 = p->nsteps;
  while (p->nsteps - body0 < target && room(g, 24)) {
    int w = (int)rn(&g->r, (uint32_t)wsum);
    size_t i = 0;
    while (w >= acts[i].w)
      w -= acts[i++].w;
    if (acts[i].fn == act_read && chance(&g->r, 30)) {
      emit(g, RP_SYNC);
      continue;
    }
    acts[i].fn(g);
    trim_alive(g);
  }
  while (g->depth > 0)
    scope_end(g);

  /* Read the states, the last few values made and some others, in a
  ** random order; the rest are released unread (so never computed). */
  int order[RP_MAXV], n = 0, last = 0;
  for (int v = p->nvals - 1; v >= 0; v--) {
    if (!alive(g, v))
      continue;
    if (p->val[v].state || (!p->val[v].state && last++ < 3) ||
        chance(&g->r, 15))
      order[n++] = v;
  }
  for (int i = n - 1; i > 0; i--) {
    int j = (int)rn(&g->r, (uint32_t)i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < n && p->nsteps < RP_MAXS; i++)
    read_op(g, order[i], chance(&g->r, 80) ? RP_RD_COPY : RP_RD_DATA);
  free(g);

  /* Instances: their sizes; one in five is one seen before (a loop that
  ** comes back to a shape: the guards must pick the right variant, and
  ** the scalars scaled by sc differ). */
  rng ri = { mix64(seed ^ 0xa11ce5ull) };
  p->ninst = rp_instances(seed);
  for (int j = 0; j < p->ninst; j++) {
    if (j > 0 && chance(&ri, 20)) {
      memcpy(p->size[j], p->size[rn(&ri, (uint32_t)j)], sizeof p->size[j]);
      continue;
    }
    int tries = 0;
    do
      draw_sizes(&ri, p->size[j]);
    while (!small_enough(p, p->size[j]) && ++tries < 64);
    if (tries == 64)
      for (int k = 0; k < RP_NIN; k++)
        p->size[j][k] = 2 + k;
  }
}

/* -- Effective steps ----------------------------------------------------- */

int rp_normalize(const rp_prog *p, uint8_t *on)
{
  /* Scope pairs go together. */
  for (int i = 0; i < p->nsteps; i++) {
    const rp_step *s = &p->step[i];
    if ((s->op == RP_SCOPE_BEGIN || s->op == RP_SCOPE_END) && on[i] &&
        !on[s->start])
      on[i] = 0;
  }
  int level[RP_MAXV];
  for (int v = 0; v < p->nvals; v++)
    level[v] = -1;
  int depth = 0, kept = 0;
  for (int i = 0; i < p->nsteps; i++) {
    if (!on[i])
      continue;
    const rp_step *s = &p->step[i];
    bool ok = true;
    for (int j = 0; j < 3; j++)
      if (s->in[j] >= 0 && level[s->in[j]] < 0)
        ok = false;
    if (s->op == RP_KEEP && ok && level[s->in[0]] != depth)
      ok = false;
    if (s->op == RP_RELEASE && ok && level[s->in[0]] != depth)
      ok = false;
    if (!ok) {
      on[i] = 0;
      continue;
    }
    kept++;
    switch (s->op) {
    case RP_SCOPE_BEGIN: depth++; break;
    case RP_SCOPE_END:
      for (int v = 0; v < p->nvals; v++)
        if (level[v] == depth)
          level[v] = -1;
      depth--;
      break;
    case RP_KEEP: level[s->in[0]] = depth - 1 < 0 ? 0 : depth - 1; break;
    case RP_RELEASE: level[s->in[0]] = -1; break;
    default:
      if (s->out >= 0)
        level[s->out] = depth;
    }
  }
  return kept;
}
