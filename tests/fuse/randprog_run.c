/*
** randprog_run.c -- run a random program through tc.h and record what it
** shows (randprog.h); compare two runs; print a program as C.
*/
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "randprog.h"

volatile rp_where rp_now;

/* -- Names --------------------------------------------------------------- */

static const char *const unary_fn[RP_U__N] = {
  "tc_neg", "tc_abs", "tc_exp", "tc_log", "tc_sqrt", "tc_rsqrt", "tc_sin",
  "tc_cos", "tc_tanh", "tc_sigmoid", "tc_relu", "tc_gelu", "tc_silu",
  "tc_expm1", "tc_log1p", "tc_erf", "tc_softplus", "tc_gelu_erf",
};
static const char *const binary_fn[RP_B__N] = {
  "tc_add", "tc_sub", "tc_mul", "tc_div", "tc_pow", "tc_maximum",
  "tc_minimum", "tc_eq", "tc_ne", "tc_lt", "tc_le", "tc_gt", "tc_ge",
};
static const char *const scalar_fn[RP_S__N] = {
  "tc_add_scalar", "tc_sub_scalar", "tc_mul_scalar", "tc_div_scalar",
  "tc_pow_scalar",
};
static const char *const reduce_fn[RP_R__N] = {
  "tc_sum", "tc_mean", "tc_max", "tc_min", "tc_argmax", "tc_argmin",
  "tc_var", "tc_std", "tc_cumsum",
};
static const char *const inplace_fn[RP_I__N] = {
  "tc_copy_", "tc_add_", "tc_sub_", "tc_mul_", "tc_div_",
};
static const char *const inplace_s_fn[RP_IS__N] = {
  "tc_add_scalar_", "tc_sub_scalar_", "tc_mul_scalar_", "tc_div_scalar_",
  "tc_fill_",
};
static const char *const dtype_c[] = { "TC_BOOL", "TC_I32", "TC_I64",
                                       "TC_F32", "TC_F64", "TC_F16",
                                       "TC_BF16" };

typedef tc_tensor *(*un_fn)(tc_tensor *);
typedef tc_tensor *(*bin_fn)(tc_tensor *, tc_tensor *);
typedef tc_tensor *(*sc_fn)(tc_tensor *, double);
typedef tc_tensor *(*red_fn)(tc_tensor *, int, bool);
typedef int (*ip_fn)(tc_tensor *, tc_tensor *);
typedef int (*ips_fn)(tc_tensor *, double);

static const un_fn unary_f[RP_U__N] = {
  tc_neg, tc_abs, tc_exp, tc_log, tc_sqrt, tc_rsqrt, tc_sin, tc_cos,
  tc_tanh, tc_sigmoid, tc_relu, tc_gelu, tc_silu, tc_expm1, tc_log1p,
  tc_erf, tc_softplus, tc_gelu_erf,
};
static const bin_fn binary_f[RP_B__N] = {
  tc_add, tc_sub, tc_mul, tc_div, tc_pow, tc_maximum, tc_minimum, tc_eq,
  tc_ne, tc_lt, tc_le, tc_gt, tc_ge,
};
static const sc_fn scalar_f[RP_S__N] = {
  tc_add_scalar, tc_sub_scalar, tc_mul_scalar, tc_div_scalar, tc_pow_scalar,
};
static tc_tensor *var1(tc_tensor *a, int dim, bool keep)
{
  return tc_var(a, dim, 1, keep);
}
static tc_tensor *std0(tc_tensor *a, int dim, bool keep)
{
  return tc_std(a, dim, 0, keep);
}
static tc_tensor *cumsum_(tc_tensor *a, int dim, bool keep)
{
  (void)keep;
  return tc_cumsum(a, dim);
}
static const red_fn reduce_f[RP_R__N] = {
  tc_sum, tc_mean, tc_max, tc_min, tc_argmax, tc_argmin, var1, std0, cumsum_,
};
static const ip_fn inplace_f[RP_I__N] = {
  tc_copy_, tc_add_, tc_sub_, tc_mul_, tc_div_,
};
static const ips_fn inplace_s_f[RP_IS__N] = {
  tc_add_scalar_, tc_sub_scalar_, tc_mul_scalar_, tc_div_scalar_, tc_fill_,
};

/* -- Running ------------------------------------------------------------- */

static void obs_value(rp_obs *o, tc_tensor *t)
{
  o->failed = t == NULL;
  if (!t) {
    const char *e = tc_last_error();
    snprintf(o->err, sizeof o->err, "%s", e ? e : "(no message)");
    return;
  }
  o->dtype = (uint8_t)tc_dtype_of(t);
  o->ndim = tc_ndim(t);
  for (int d = 0; d < o->ndim; d++)
    o->shape[d] = tc_size(t, d);
}

static void obs_status(rp_obs *o, int rc)
{
  o->failed = rc != 0;
  if (rc) {
    const char *e = tc_last_error();
    snprintf(o->err, sizeof o->err, "%s", e ? e : "(no message)");
  }
}

static void concrete(const rp_shape *s, const int64_t *vsz, int *n,
                     int64_t *out)
{
  *n = s->ndim;
  for (int i = 0; i < s->ndim; i++)
    out[i] = vsz[s->d[i]];
}

/* Scalars of a "vary" step scale with the instance, so a plan that baked
** a scalar in gives the old value. */
static double scal(const rp_step *s, double x, int inst)
{
  return s->vary ? x * (1.0 + 0.25 * inst) : x;
}

bool rp_data_as_copy;

tc_tensor *rp_index(tc_tensor *t, int dim, int kind, uint64_t seed)
{
  int nd = tc_ndim(t), d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    return NULL;
  int64_t sh[TC_MAX_DIMS], n = tc_size(t, d);
  for (int i = 0; i < nd; i++)
    sh[i] = tc_size(t, i);
  tc_tensor *u = kind != RP_G_INDEX_SELECT ? tc_rand(TC_F64, nd, sh, seed)
                                           : tc_rand(TC_F64, 1, &n, seed);
  tc_tensor *x = tc_mul_scalar(u, (double)n);
  tc_tensor *f = tc_floor(x);
  tc_tensor *i = tc_cast(f, TC_I64);
  tc_release(u);
  tc_release(x);
  tc_release(f);
  return i;
}

tc_tensor *rp_sorted(tc_tensor *t, int dim, bool largest)
{
  tc_tensor *v, *ix;
  if (tc_topk(t, dim < tc_ndim(t) && dim >= -tc_ndim(t) ? tc_size(t, dim) : 0,
              dim, largest, true, &v, &ix) != 0)
    return NULL;
  tc_tensor *at = tc_cast(ix, tc_dtype_of(v));
  tc_tensor *r = tc_add(v, at);
  tc_release(v);
  tc_release(ix);
  tc_release(at);
  return r;
}

static void do_read(rp_obs *o, tc_tensor *t, int how)
{
  if (how == RP_RD_DATA && rp_data_as_copy)
    how = RP_RD_COPY;
  size_t esz = t ? tc_dtype_size(tc_dtype_of(t)) : 0;
  size_t nb = t ? (size_t)tc_numel(t) * esz : 0;
  if (t) {
    o->dtype = (uint8_t)tc_dtype_of(t);
    o->ndim = tc_ndim(t);
    for (int d = 0; d < o->ndim; d++)
      o->shape[d] = tc_size(t, d);
  }
  switch (how) {
  case RP_RD_COPY: {
    o->bytes = malloc(nb + 1);
    int rc = tc_copy_to(t, o->bytes, nb);
    obs_status(o, rc);
    o->nbytes = rc ? 0 : nb;
    break;
  }
  case RP_RD_ITEM: {
    double x;
    int rc = tc_item(t, &x);
    obs_status(o, rc);
    if (!rc) {
      o->bytes = malloc(sizeof x);
      memcpy(o->bytes, &x, sizeof x);
      o->nbytes = sizeof x;
      o->dtype = TC_F64;
    }
    break;
  }
  case RP_RD_DATA: {
    void *p = tc_data(t);
    obs_status(o, p ? 0 : -1);
    if (p) {
      o->bytes = malloc(nb + 1);
      memcpy(o->bytes, p, nb);
      o->nbytes = nb;
    }
    break;
  }
  default:
    obs_status(o, tc_realize(t));
  }
}

void rp_run(const rp_prog *p, const uint8_t *on, int inst, rp_obs *obs)
{
  int64_t vsz[RP_MAXVARS];
  for (int v = 0; v < p->nvars; v++)
    vsz[v] = rp_var_eval(p, v, p->size[inst]);
  tc_tensor **val = calloc(RP_MAXV, sizeof *val);
  int level[RP_MAXV];
  size_t marks[8];
  int depth = 0;
  rp_now.inst = inst;
  for (int i = 0; i < p->nsteps; i++) {
    memset(&obs[i], 0, sizeof obs[i]);
    if (!on[i])
      continue;
    rp_now.step = i;
    const rp_step *s = &p->step[i];
    rp_obs *o = &obs[i];
    o->ran = true;
    tc_tensor *a = s->in[0] >= 0 ? val[s->in[0]] : NULL;
    tc_tensor *b = s->in[1] >= 0 ? val[s->in[1]] : NULL;
    tc_tensor *c = s->in[2] >= 0 ? val[s->in[2]] : NULL;
    tc_tensor *r = NULL;
    int n;
    int64_t sh[TC_MAX_DIMS];
    tc_clear_error();
    switch (s->op) {
    case RP_INPUT:
      concrete(&s->shape, vsz, &n, sh);
      r = s->k == 0 ? tc_randn((tc_dtype)s->dtype, n, sh, (uint64_t)s->s1)
          : s->k == 1 ? tc_rand((tc_dtype)s->dtype, n, sh, (uint64_t)s->s1)
                      : tc_full((tc_dtype)s->dtype, n, sh, s->s0);
      break;
    case RP_UNARY: r = unary_f[s->k](a); break;
    case RP_BINARY: r = binary_f[s->k](a, b); break;
    case RP_SCALAR: r = scalar_f[s->k](a, scal(s, s->s0, inst)); break;
    case RP_CLAMP:
      r = tc_clamp(a, scal(s, s->s0, inst), scal(s, s->s1, inst));
      break;
    case RP_WHERE: r = tc_where(a, b, c); break;
    case RP_CAST: r = tc_cast(a, (tc_dtype)s->dtype); break;
    case RP_REDUCE: r = reduce_f[s->k](a, s->dim, s->keepdim); break;
    case RP_SUM_ALL: r = tc_sum_all(a); break;
    case RP_GATHER: {
      if (s->k == RP_G_SORT) {
        r = rp_sorted(a, s->dim, (int64_t)s->s1 % 2 != 0);
        break;
      }
      tc_tensor *ix = rp_index(a, s->dim, s->k, (uint64_t)s->s1);
      r = s->k == RP_G_GATHER ? tc_gather(a, s->dim, ix)
          : s->k == RP_G_INDEX_SELECT ? tc_index_select(a, s->dim, ix)
          : tc_scatter_add(a, s->dim, ix, a);
      tc_release(ix);
      break;
    }
    case RP_SOFTMAX: r = tc_softmax(a, s->dim); break;
    case RP_LOG_SOFTMAX: r = tc_log_softmax(a, s->dim); break;
    case RP_LAYER_NORM: r = tc_layer_norm(a, b, c, s->s0); break;
    case RP_MATMUL: r = tc_matmul(a, b); break;
    case RP_RESHAPE:
      concrete(&s->shape, vsz, &n, sh);
      if (s->infer >= 0)
        sh[s->infer] = -1;
      r = tc_reshape(a, n, n ? sh : NULL);
      break;
    case RP_PERMUTE: {
      int perm[TC_MAX_DIMS];
      n = p->val[s->in[0]].shape.ndim;
      for (int d = 0; d < n; d++)
        perm[d] = s->perm[d];
      r = tc_permute(a, n, perm);
      break;
    }
    case RP_TRANSPOSE: r = tc_transpose(a, s->dim, s->dim2); break;
    case RP_SLICE: r = tc_slice(a, s->dim, s->start, s->end, s->step); break;
    case RP_EXPAND:
      concrete(&s->shape, vsz, &n, sh);
      r = tc_expand(a, n, n ? sh : NULL);
      break;
    case RP_UNSQUEEZE: r = tc_unsqueeze(a, s->dim); break;
    case RP_SQUEEZE: r = tc_squeeze(a, s->dim); break;
    case RP_CONTIGUOUS: r = tc_contiguous(a); break;
    case RP_INPLACE: obs_status(o, inplace_f[s->k](a, b)); break;
    case RP_INPLACE_S:
      obs_status(o, inplace_s_f[s->k](a, scal(s, s->s0, inst)));
      break;
    case RP_READ: do_read(o, a, s->k); break;
    case RP_SYNC: obs_status(o, tc_sync()); break;
    case RP_SCOPE_BEGIN: marks[depth++] = tc_scope_begin(); break;
    case RP_SCOPE_END:
      tc_scope_end(marks[--depth]);
      for (int v = 0; v < p->nvals; v++)
        if (val[v] && level[v] == depth + 1)
          val[v] = NULL;   /* released by the scope */
      break;
    case RP_KEEP:
      tc_keep(a);
      level[s->in[0]] = depth ? depth - 1 : 0;
      break;
    case RP_RELEASE:
      tc_release(a);
      val[s->in[0]] = NULL;
      break;
    }
    if (s->out >= 0) {
      obs_value(o, r);
      val[s->out] = r;
      level[s->out] = depth;
    }
  }
  rp_now.step = -1;
  for (int v = 0; v < p->nvals; v++)
    if (val[v])
      tc_release(val[v]);
  tc_sync();
  free(val);
}

void rp_obs_free(rp_obs *obs, int n)
{
  for (int i = 0; i < n; i++) {
    free(obs[i].bytes);
    obs[i].bytes = NULL;
  }
}

/* -- Comparing ----------------------------------------------------------- */

static double elem(const void *b, int dt, size_t i)
{
  switch (dt) {
  case TC_F32: return ((const float *)b)[i];
  case TC_F64: return ((const double *)b)[i];
  case TC_I64: return (double)((const int64_t *)b)[i];
  case TC_I32: return ((const int32_t *)b)[i];
  case TC_F16: {   /* only for reports and NaN tests: value, roughly */
    uint16_t h = ((const uint16_t *)b)[i];
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY)
               : e ? ldexp(1 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return h >> 15 ? -v : v;
  }
  case TC_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)b)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }
  default: return ((const uint8_t *)b)[i];
  }
}

static bool same_elem(const void *x, const void *y, int dt, size_t i)
{
  size_t es = tc_dtype_size((tc_dtype)dt);
  const char *a = (const char *)x + i * es, *b = (const char *)y + i * es;
  if (memcmp(a, b, es) == 0)
    return true;
  /* any NaN equals any NaN: payloads depend on operand order */
  return dt >= TC_F32 && isnan(elem(x, dt, i)) &&
         isnan(elem(y, dt, i));
}

static void shape_str(const rp_obs *o, char *buf, size_t len)
{
  int k = snprintf(buf, len, "[");
  for (int d = 0; d < o->ndim && k < (int)len; d++)
    k += snprintf(buf + k, len - (size_t)k, "%s%" PRId64, d ? "," : "",
                  o->shape[d]);
  if (k < (int)len)
    snprintf(buf + k, len - (size_t)k, "] %s",
             tc_dtype_name((tc_dtype)o->dtype));
}

int rp_compare(const rp_prog *p, const uint8_t *on, const rp_obs *e,
               const rp_obs *c, char *why, size_t len, char *kind)
{
  for (int i = 0; i < p->nsteps; i++) {
    if (!on[i])
      continue;
    const rp_obs *x = &e[i], *y = &c[i];
    if (x->failed != y->failed) {
      snprintf(why, len, "step %d: eager %s, compiled %s: %s", i,
               x->failed ? "fails" : "succeeds",
               y->failed ? "fails" : "succeeds",
               x->failed ? x->err : y->err);
      *kind = 'S';
      return i;
    }
    if (x->failed) {
      if (strcmp(x->err, y->err) != 0) {
        snprintf(why, len, "step %d: errors differ: eager \"%s\", compiled "
                 "\"%s\"", i, x->err, y->err);
        *kind = 'S';
        return i;
      }
      continue;
    }
    char se[96], sc[96];
    shape_str(x, se, sizeof se);
    shape_str(y, sc, sizeof sc);
    if (strcmp(se, sc) != 0 || x->nbytes != y->nbytes) {
      snprintf(why, len, "step %d: eager gives %s, compiled %s", i, se, sc);
      *kind = 'M';
      return i;
    }
    if (!x->nbytes)
      continue;
    size_t es = tc_dtype_size((tc_dtype)x->dtype), n = x->nbytes / es;
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < n; k++)
      if (!same_elem(x->bytes, y->bytes, x->dtype, k) && !bad++)
        first = k;
    if (bad) {
      double a = elem(x->bytes, x->dtype, first);
      double b = elem(y->bytes, y->dtype, first);
      snprintf(why, len, "step %d: %s: %zu of %zu elements differ; first at "
               "flat index %zu: eager %.9g (%a), compiled %.9g (%a)", i, se,
               bad, n, first, a, a, b, b);
      *kind = 'V';
      return i;
    }
  }
  return -1;
}

/* -- Printing ------------------------------------------------------------ */

static const char *const in_name[RP_NIN] = { "R", "C", "K", "B" };

static void var_print(const rp_prog *p, int v, FILE *out)
{
  const rp_var *x = &p->var[v];
  switch (x->kind) {
  case SV_ONE: fprintf(out, "1"); break;
  case SV_IN: fprintf(out, "%s", in_name[x->a]); break;
  case SV_SLICE:
    fprintf(out, "sl(");
    var_print(p, x->a, out);
    if (x->end)
      fprintf(out, ", %d, -%d, %d)", x->start, x->end, x->step);
    else
      fprintf(out, ", %d, INT64_MAX, %d)", x->start, x->step);
    break;
  default:
    var_print(p, x->a, out);
    fprintf(out, " * ");
    var_print(p, x->b, out);
  }
}

static void shape_c(const rp_prog *p, const rp_shape *s, int infer, FILE *out)
{
  if (s->ndim == 0) {
    fprintf(out, "0, NULL");
    return;
  }
  fprintf(out, "TC_SHAPE(");
  for (int i = 0; i < s->ndim; i++) {
    fprintf(out, "%s", i ? ", " : "");
    if (i == infer)
      fprintf(out, "-1");
    else
      var_print(p, s->d[i], out);
  }
  fprintf(out, ")");
}

static void shape_comment(const rp_prog *p, int v, FILE *out)
{
  const rp_val *x = &p->val[v];
  fprintf(out, "   /* [");
  for (int i = 0; i < x->shape.ndim; i++) {
    fprintf(out, "%s", i ? ", " : "");
    var_print(p, x->shape.d[i], out);
  }
  fprintf(out, "] %s%s */", tc_dtype_name((tc_dtype)x->dtype),
          x->state ? ", state" : "");
}

static void num(double x, bool vary, FILE *out)
{
  if (vary)
    fprintf(out, "%.17g * sc", x);
  else
    fprintf(out, "%.17g", x);
}

static void vname(int v, FILE *out)
{
  if (v == -2 || v == -1)
    fprintf(out, "NULL");
  else
    fprintf(out, "v%d", v);
}

void rp_print_step(const rp_prog *p, int i, FILE *out)
{
  const rp_step *s = &p->step[i];
  int a = s->in[0], b = s->in[1], c = s->in[2];
  if (s->out >= 0)
    fprintf(out, "tc_tensor *v%d = ", s->out);
  switch (s->op) {
  case RP_INPUT:
    if (s->k == 2) {
      fprintf(out, "tc_full(%s, ", dtype_c[s->dtype]);
      shape_c(p, &s->shape, -1, out);
      fprintf(out, ", %.17g)", s->s0);
    } else {
      fprintf(out, "%s(%s, ", s->k ? "tc_rand" : "tc_randn",
              dtype_c[s->dtype]);
      shape_c(p, &s->shape, -1, out);
      fprintf(out, ", %.0f)", s->s1);
    }
    break;
  case RP_UNARY: fprintf(out, "%s(v%d)", unary_fn[s->k], a); break;
  case RP_BINARY: fprintf(out, "%s(v%d, v%d)", binary_fn[s->k], a, b); break;
  case RP_SCALAR:
    fprintf(out, "%s(v%d, ", scalar_fn[s->k], a);
    num(s->s0, s->vary, out);
    fprintf(out, ")");
    break;
  case RP_CLAMP:
    fprintf(out, "tc_clamp(v%d, ", a);
    num(s->s0, s->vary, out);
    fprintf(out, ", ");
    num(s->s1, s->vary, out);
    fprintf(out, ")");
    break;
  case RP_WHERE: fprintf(out, "tc_where(v%d, v%d, v%d)", a, b, c); break;
  case RP_CAST: fprintf(out, "tc_cast(v%d, %s)", a, dtype_c[s->dtype]); break;
  case RP_REDUCE:
    if (s->k == RP_R_CUMSUM) {
      fprintf(out, "tc_cumsum(v%d, %d)", a, s->dim);
      break;
    }
    fprintf(out, "%s(v%d, %d, %s%s)", reduce_fn[s->k], a, s->dim,
            s->k == RP_R_VAR ? "1, " : s->k == RP_R_STD ? "0, " : "",
            s->keepdim ? "true" : "false");
    break;
  case RP_SUM_ALL: fprintf(out, "tc_sum_all(v%d)", a); break;
  case RP_GATHER:
    if (s->k == RP_G_SORT) {
      fprintf(out, "rp_sorted(v%d, %d, %s)", a, s->dim,
              (int64_t)s->s1 % 2 ? "true" : "false");
      break;
    }
    fprintf(out, "%s(v%d, %d, rp_index(v%d, %d, %d, %.0f)",
            s->k == RP_G_GATHER ? "tc_gather"
            : s->k == RP_G_INDEX_SELECT ? "tc_index_select" : "tc_scatter_add",
            a, s->dim, a, s->dim, s->k, s->s1);
    if (s->k == RP_G_SCATTER_ADD)   /* the table added into itself */
      fprintf(out, ", v%d", a);
    fputs(")", out);
    break;
  case RP_SOFTMAX: fprintf(out, "tc_softmax(v%d, %d)", a, s->dim); break;
  case RP_LOG_SOFTMAX:
    fprintf(out, "tc_log_softmax(v%d, %d)", a, s->dim);
    break;
  case RP_LAYER_NORM:
    fprintf(out, "tc_layer_norm(v%d, ", a);
    vname(b, out);
    fprintf(out, ", ");
    vname(c, out);
    fprintf(out, ", %g)", s->s0);
    break;
  case RP_MATMUL:
    fprintf(out, "tc_matmul(v%d, ", a);
    vname(b, out);
    fprintf(out, ")");
    break;
  case RP_RESHAPE:
    fprintf(out, "tc_reshape(v%d, ", a);
    shape_c(p, &s->shape, s->infer, out);
    fprintf(out, ")");
    break;
  case RP_PERMUTE: {
    int n = p->val[a].shape.ndim;
    fprintf(out, "tc_permute(v%d, %d, (const int[]){", a, n);
    for (int d = 0; d < n; d++)
      fprintf(out, "%s%d", d ? ", " : "", s->perm[d]);
    fprintf(out, "})");
    break;
  }
  case RP_TRANSPOSE:
    fprintf(out, "tc_transpose(v%d, %d, %d)", a, s->dim, s->dim2);
    break;
  case RP_SLICE:
    fprintf(out, "tc_slice(v%d, %d, %" PRId64 ", ", a, s->dim, s->start);
    if (s->end == INT64_MAX)
      fprintf(out, "INT64_MAX");
    else
      fprintf(out, "%" PRId64, s->end);
    fprintf(out, ", %" PRId64 ")", s->step);
    break;
  case RP_EXPAND:
    fprintf(out, "tc_expand(v%d, ", a);
    shape_c(p, &s->shape, -1, out);
    fprintf(out, ")");
    break;
  case RP_UNSQUEEZE: fprintf(out, "tc_unsqueeze(v%d, %d)", a, s->dim); break;
  case RP_SQUEEZE: fprintf(out, "tc_squeeze(v%d, %d)", a, s->dim); break;
  case RP_CONTIGUOUS: fprintf(out, "tc_contiguous(v%d)", a); break;
  case RP_INPLACE: fprintf(out, "%s(v%d, v%d)", inplace_fn[s->k], a, b); break;
  case RP_INPLACE_S:
    fprintf(out, "%s(v%d, ", inplace_s_fn[s->k], a);
    num(s->s0, s->vary, out);
    fprintf(out, ")");
    break;
  case RP_READ: {
    static const char *const how[] = { "show", "show_item", "show_data",
                                       "tc_realize" };
    fprintf(out, "%s(v%d)", how[s->k], a);
    break;
  }
  case RP_SYNC: fprintf(out, "tc_sync()"); break;
  case RP_SCOPE_BEGIN: fprintf(out, "size_t m%d = tc_scope_begin()", i); break;
  case RP_SCOPE_END:
    fprintf(out, "tc_scope_end(m%d)", (int)s->start);
    break;
  case RP_KEEP: fprintf(out, "tc_keep(v%d)", a); break;
  case RP_RELEASE: fprintf(out, "tc_release(v%d)", a); break;
  }
  fprintf(out, ";");
  if (s->out >= 0)
    shape_comment(p, s->out, out);
}

void rp_print_body(const rp_prog *p, const uint8_t *on, int mark, FILE *out)
{
  int depth = 1;
  for (int i = 0; i < p->nsteps; i++) {
    if (!on[i])
      continue;
    if (p->step[i].op == RP_SCOPE_END)
      depth--;
    fprintf(out, "%*s", 2 * depth, "");
    rp_print_step(p, i, out);
    if (i == mark)
      fprintf(out, "   /* <-- step %d */", i);
    fprintf(out, "\n");
    if (p->step[i].op == RP_SCOPE_BEGIN)
      depth++;
  }
}

void rp_print_sizes(const rp_prog *p, const int *insts, int n, FILE *out)
{
  for (int i = 0; i < n; i++) {
    const int64_t *z = p->size[insts[i]];
    fprintf(out, "  #%d: R=%" PRId64 " C=%" PRId64 " K=%" PRId64 " B=%" PRId64
            " sc=%g\n", insts[i], z[0], z[1], z[2], z[3],
            1.0 + 0.25 * insts[i]);
  }
}

void rp_print_c(const rp_prog *p, const uint8_t *on, const int *insts,
                int n, const char *note, FILE *out)
{
  fprintf(out,
"/* tc random program, seed %" PRIu64 ".\n"
"** %s\n"
"** cc -std=gnu11 repro.c $(pkg-config --cflags --libs tc) -lm -o repro\n"
"** ./repro > eager.txt\n"
"** TC_COMPILE=1 TC_HOT=1 TC_ASYNC=0 TC_CACHE=0 ./repro > compiled.txt\n"
"** diff eager.txt compiled.txt */\n"
"#include <inttypes.h>\n#include <stdio.h>\n#include <string.h>\n"
"#include <tc.h>\n\n"
"static inline int64_t sl(int64_t n, int64_t start, int64_t end,\n"
"                         int64_t step)\n"
"{\n"
"  if (start < 0) start = start < -n ? 0 : start + n;\n"
"  if (end < 0) end = end < -n ? 0 : end + n;\n"
"  if (start > n) start = n;\n"
"  if (end > n) end = n;\n"
"  return end > start ? (end - start + step - 1) / step : 0;\n"
"}\n\n"
"static void dump(const char *what, tc_tensor *t, const void *p)\n"
"{\n"
"  if (!p) { printf(\"%%s: error: %%s\\n\", what, tc_last_error()); return; }\n"
"  int64_t n = tc_numel(t);\n"
"  printf(\"%%s: %%s [\", what, tc_dtype_name(tc_dtype_of(t)));\n"
"  for (int d = 0; d < tc_ndim(t); d++)\n"
"    printf(\"%%s%%\" PRId64, d ? \",\" : \"\", tc_size(t, d));\n"
"  printf(\"]\");\n"
"  for (int64_t i = 0; i < n; i++) {\n"
"    double x;\n"
"    switch (tc_dtype_of(t)) {\n"
"    case TC_F32: x = ((const float *)p)[i]; break;\n"
"    case TC_F64: x = ((const double *)p)[i]; break;\n"
"    case TC_I64: x = (double)((const int64_t *)p)[i]; break;\n"
"    default: x = ((const unsigned char *)p)[i];\n"
"    }\n"
"    printf(\" %%a\", x);\n"
"  }\n"
"  printf(\"\\n\");\n"
"}\n\n"
"static char buf[1 << 23];\n"
"#define show(t) do { \\\n"
"    size_t nb = t ? tc_numel(t) * tc_dtype_size(tc_dtype_of(t)) : 0; \\\n"
"    dump(#t, t, tc_copy_to(t, buf, nb) == 0 ? buf : NULL); } while (0)\n"
"#define show_data(t) dump(#t, t, tc_data(t))\n"
"#define show_item(t) do { double x_; \\\n"
"    if (tc_item(t, &x_) == 0) printf(\"%%s: %%a\\n\", #t, x_); \\\n"
"    else printf(\"%%s: error: %%s\\n\", #t, tc_last_error()); } while (0)\n\n"
"/* GATHER's index (randprog_run.c: rp_index): uniform in [0, size) */\n"
"static tc_tensor *rp_index(tc_tensor *t, int dim, int kind, uint64_t seed)\n"
"{\n"
"  int nd = tc_ndim(t), d = dim < 0 ? dim + nd : dim;\n"
"  if (d < 0 || d >= nd) return NULL;\n"
"  int64_t sh[8], n = tc_size(t, d);\n"
"  for (int i = 0; i < nd; i++) sh[i] = tc_size(t, i);\n"
"  tc_tensor *u = kind != 1 ? tc_rand(TC_F64, nd, sh, seed)\n"
"                           : tc_rand(TC_F64, 1, &n, seed);\n"
"  return tc_cast(tc_floor(tc_mul_scalar(u, (double)n)), TC_I64);\n"
"}\n\n"
"/* SORT (randprog_run.c: rp_sorted): values plus indices */\n"
"static tc_tensor *rp_sorted(tc_tensor *t, int dim, bool largest)\n"
"{\n"
"  tc_tensor *v, *ix;\n"
"  int nd = tc_ndim(t);\n"
"  if (tc_topk(t, dim < nd && dim >= -nd ? tc_size(t, dim) : 0, dim,\n"
"              largest, true, &v, &ix) != 0) return NULL;\n"
"  return tc_add(v, tc_cast(ix, tc_dtype_of(v)));\n"
"}\n\n"
"static void prog(int64_t R, int64_t C, int64_t K, int64_t B, double sc)\n"
"{\n"
"  (void)R; (void)C; (void)K; (void)B; (void)sc;\n",
          p->seed, note ? note : "");
  rp_print_body(p, on, -1, out);
  /* what the interpreter releases at the end */
  uint8_t lv[RP_MAXV];
  memset(lv, 0, sizeof lv);
  int level[RP_MAXV], depth = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const rp_step *s = &p->step[i];
    if (!on[i])
      continue;
    if (s->op == RP_SCOPE_BEGIN)
      depth++;
    if (s->op == RP_SCOPE_END) {
      for (int v = 0; v < p->nvals; v++)
        if (lv[v] && level[v] == depth)
          lv[v] = 0;
      depth--;
    }
    if (s->op == RP_KEEP)
      level[s->in[0]] = depth ? depth - 1 : 0;
    if (s->op == RP_RELEASE)
      lv[s->in[0]] = 0;
    if (s->out >= 0) {
      lv[s->out] = 1;
      level[s->out] = depth;
    }
  }
  for (int v = 0; v < p->nvals; v++)
    if (lv[v])
      fprintf(out, "  tc_release(v%d);\n", v);
  fprintf(out, "  tc_sync();\n}\n\nint main(void)\n{\n"
               "  setvbuf(stdout, NULL, _IOLBF, 0);\n");
  for (int i = 0; i < n; i++) {
    const int64_t *z = p->size[insts[i]];
    fprintf(out, "  printf(\"-- R=%" PRId64 " C=%" PRId64 " K=%" PRId64
            " B=%" PRId64 "\\n\");\n", z[0], z[1], z[2], z[3]);
    fprintf(out, "  prog(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
            ", %g);\n", z[0], z[1], z[2], z[3], 1.0 + 0.25 * insts[i]);
  }
  fprintf(out, "  return 0;\n}\n");
}
