/*
** kir.c -- building kernels and printing their canonical text form.
*/
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kir.h"

const char *const kir_opname[KOP__MAX] = {
#define X(n, a) [KOP_##n] = #n,
  KIR_PRIMS(X)
#undef X
  [KOP_CONST] = "CONST", [KOP_SCALAR] = "SCALAR", [KOP_LOAD] = "LOAD",
  [KOP_ROWVAR] = "ROWVAR", [KOP_CAST] = "CAST", [KOP_GATHER] = "GATHER",
};

const uint8_t kir_arity[KOP__MAX] = {
#define X(n, a) [KOP_##n] = a,
  KIR_PRIMS(X)
#undef X
  [KOP_CONST] = 0, [KOP_SCALAR] = 0, [KOP_LOAD] = 0, [KOP_ROWVAR] = 0,
  [KOP_CAST] = 1, [KOP_GATHER] = 1,
};

/* -- Building -------------------------------------------------------------- */

#define KIR_SPARE_MAX 64   /* kernels kept for reuse, 3.5 MB at most */

static struct {
  pthread_mutex_t lock;
  int n;
  kir_kernel *k[KIR_SPARE_MAX];
} spare = { .lock = PTHREAD_MUTEX_INITIALIZER };

kir_kernel *kir_new(void)
{
  kir_kernel *k = NULL;
  pthread_mutex_lock(&spare.lock);
  if (spare.n > 0)
    k = spare.k[--spare.n];
  pthread_mutex_unlock(&spare.lock);
  if (!k)
    return calloc(1, sizeof *k);
  memset(k, 0, offsetof(kir_kernel, ins));
  k->npasses = 0;
  return k;
}

void kir_free(kir_kernel *k)
{
  if (!k)
    return;
  pthread_mutex_lock(&spare.lock);
  bool kept = spare.n < KIR_SPARE_MAX;
  if (kept)
    spare.k[spare.n++] = k;
  pthread_mutex_unlock(&spare.lock);
  if (!kept)
    free(k);
}

int kir_emit(kir_kernel *k, kir_opcode op, tc_dtype dt, int a, int b, int c)
{
  if (k->ninstrs >= KIR_MAX_INSTRS || a < -1 || b < -1 || c < -1)
    return -1;
  int n = kir_arity[op];
  if ((n > 0 && a < 0) || (n > 1 && b < 0) || (n > 2 && c < 0))
    return -1;
  kir_instr *i = &k->ins[k->ninstrs];
  memset(i, 0, sizeof *i);
  i->op = (uint8_t)op;
  i->dtype = (uint8_t)dt;
  i->ref = -1;
  i->arg[0] = n > 0 ? a : -1;
  i->arg[1] = n > 1 ? b : -1;
  i->arg[2] = n > 2 ? c : -1;
  return k->ninstrs++;
}

int kir_const(kir_kernel *k, tc_dtype dt, double v)
{
  int i = kir_emit(k, KOP_CONST, dt, -1, -1, -1);
  if (i >= 0)
    k->ins[i].cval = v;
  return i;
}

static int leaf(kir_kernel *k, kir_opcode op, tc_dtype dt, int ref)
{
  int i = kir_emit(k, op, dt, -1, -1, -1);
  if (i >= 0)
    k->ins[i].ref = (int16_t)ref;
  return i;
}

int kir_scalar(kir_kernel *k, tc_dtype dt, int index)
{
  if (index >= k->nscalars)
    k->nscalars = index + 1;
  return leaf(k, KOP_SCALAR, dt, index);
}

int kir_load(kir_kernel *k, int buf)
{
  return leaf(k, KOP_LOAD, (tc_dtype)k->buf[buf].dtype, buf);
}

int kir_gather(kir_kernel *k, int buf, int index)
{
  int i = kir_emit(k, KOP_GATHER, (tc_dtype)k->buf[buf].dtype, index, -1, -1);
  if (i >= 0)
    k->ins[i].ref = (int16_t)buf;
  return i;
}

int kir_rowvar(kir_kernel *k, int pass)
{
  return leaf(k, KOP_ROWVAR, (tc_dtype)k->ins[k->pass[pass].value].dtype,
              pass);
}

int kir_cast(kir_kernel *k, tc_dtype dt, int a)
{
  if (a < 0 || k->ins[a].dtype == dt)
    return a;
  return kir_emit(k, KOP_CAST, dt, a, -1, -1);
}

/* -- Canonical text -------------------------------------------------------- */

static const char *const red_name[] = { "sum", "max", "min" };

void kir_print(const kir_kernel *k, FILE *out)
{
  fprintf(out, "kernel %s%s%s [", k->kind == KIR_MAP ? "map" : "rows",
          k->dynamic ? " dynamic" : "", k->inplace ? " inplace" : "");
  for (int d = 0; d < k->ndim; d++)
    fprintf(out, "%s%lld", d ? ", " : "", (long long)k->size[d]);
  fprintf(out, "]");
  if (k->kind == KIR_ROWS)
    fprintf(out, " row %lld", (long long)k->row_len);
  fprintf(out, " scalars %d\n", k->nscalars);
  int nstr = k->ndim + (k->kind == KIR_ROWS);
  for (int b = 0; b < k->nbufs; b++) {
    const kir_buf *bf = &k->buf[b];
    fprintf(out, "  buf%d %s %s strides [", b,
            bf->role == KIR_IN ? "in" : "out", tc_dtype_name(bf->dtype));
    for (int d = 0; d < nstr; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)bf->stride[d]);
    fprintf(out, "]");
    if (bf->gather)
      fprintf(out, " gather stride %lld size %lld", (long long)bf->gstride,
              (long long)bf->gsize);
    fputc('\n', out);
  }
  for (int i = 0; i < k->ninstrs; i++) {
    const kir_instr *in = &k->ins[i];
    fprintf(out, "  %%%d = %s %s", i, tc_dtype_name(in->dtype),
            kir_opname[in->op]);
    switch (in->op) {
    case KOP_CONST:
      fprintf(out, " %a", in->cval);   /* hex: exact and canonical */
      break;
    case KOP_SCALAR:
      fprintf(out, " s%d", in->ref);
      break;
    case KOP_LOAD:
      fprintf(out, " buf%d", in->ref);
      break;
    case KOP_ROWVAR:
      fprintf(out, " pass%d", in->ref);
      break;
    case KOP_GATHER:
      fprintf(out, " buf%d, %%%d", in->ref, in->arg[0]);
      break;
    default:
      for (int a = 0; a < kir_arity[in->op]; a++)
        fprintf(out, "%s%%%d", a ? ", " : " ", in->arg[a]);
    }
    fputc('\n', out);
  }
  for (int p = 0; p < k->npasses; p++) {
    const kir_pass *ps = &k->pass[p];
    if (ps->kind == KIR_PASS_REDUCE && ps->out >= 0)
      fprintf(out, "  pass%d reduce %s %%%d, store buf%d\n", p,
              red_name[ps->red], ps->value, ps->out);
    else if (ps->kind == KIR_PASS_REDUCE)
      fprintf(out, "  pass%d reduce %s %%%d\n", p, red_name[ps->red],
              ps->value);
    else
      fprintf(out, "  pass%d store%s buf%d = %%%d\n", p,
              ps->kind == KIR_PASS_STORE_ROW ? "_row" : "", ps->out,
              ps->value);
  }
}

char *kir_text(const kir_kernel *k)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  kir_print(k, f);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* -- Layout helpers -------------------------------------------------------- */

int kir_dyn_len(const kir_kernel *k)
{
  return k->ndim + 1 + k->nbufs * (k->ndim + 1);
}

void kir_dyn_fill(const kir_kernel *k, int64_t *dims)
{
  int n = 0;
  for (int d = 0; d < k->ndim; d++)
    dims[n++] = k->size[d];
  dims[n++] = k->row_len;
  for (int b = 0; b < k->nbufs; b++)
    for (int d = 0; d <= k->ndim; d++)
      dims[n++] = k->buf[b].stride[d];
}

bool kir_same_code(const kir_kernel *a, const kir_kernel *b)
{
  if (a->kind != b->kind || a->dynamic != b->dynamic ||
      a->inplace != b->inplace || a->ndim != b->ndim ||
      a->nbufs != b->nbufs || a->nscalars != b->nscalars ||
      a->ninstrs != b->ninstrs || a->npasses != b->npasses)
    return false;
  for (int i = 0; i < a->nbufs; i++)
    if (a->buf[i].role != b->buf[i].role || a->buf[i].dtype != b->buf[i].dtype
        || a->buf[i].gather != b->buf[i].gather ||
        a->buf[i].gstride != b->buf[i].gstride ||
        a->buf[i].gsize != b->buf[i].gsize)   /* baked even when dynamic */
      return false;
  for (int i = 0; i < a->ninstrs; i++) {
    const kir_instr *x = &a->ins[i], *y = &b->ins[i];
    if (x->op != y->op || x->dtype != y->dtype || x->ref != y->ref ||
        x->arg[0] != y->arg[0] || x->arg[1] != y->arg[1] ||
        x->arg[2] != y->arg[2] ||
        memcmp(&x->cval, &y->cval, sizeof x->cval) != 0)
      return false;
  }
  for (int p = 0; p < a->npasses; p++)
    if (a->pass[p].kind != b->pass[p].kind || a->pass[p].red != b->pass[p].red
        || a->pass[p].out != b->pass[p].out ||
        a->pass[p].value != b->pass[p].value)
      return false;
  return true;
}

/* FNV-1a over 64-bit words. */
static uint64_t mix(uint64_t h, uint64_t v)
{
  return (h ^ v) * 0x100000001b3ull;
}

uint64_t kir_code_hash(const kir_kernel *k)
{
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, (uint64_t)k->kind | (uint64_t)k->dynamic << 8 |
             (uint64_t)k->inplace << 9 | (uint64_t)k->ndim << 16);
  h = mix(h, (uint64_t)k->nbufs | (uint64_t)k->nscalars << 16 |
             (uint64_t)k->ninstrs << 32 | (uint64_t)k->npasses << 48);
  for (int i = 0; i < k->nbufs; i++) {
    const kir_buf *b = &k->buf[i];
    h = mix(h, (uint64_t)b->role | (uint64_t)b->dtype << 8 |
               (uint64_t)b->gather << 16);
    h = mix(mix(h, (uint64_t)b->gstride), (uint64_t)b->gsize);
  }
  for (int i = 0; i < k->ninstrs; i++) {
    const kir_instr *x = &k->ins[i];
    uint64_t bits;
    memcpy(&bits, &x->cval, sizeof bits);
    h = mix(h, (uint64_t)x->op | (uint64_t)x->dtype << 8 |
               (uint64_t)(uint16_t)x->ref << 16 |
               (uint64_t)(uint32_t)x->arg[0] << 32);
    h = mix(h, (uint64_t)(uint32_t)x->arg[1] |
               (uint64_t)(uint32_t)x->arg[2] << 32);
    h = mix(h, bits);
  }
  for (int p = 0; p < k->npasses; p++) {
    const kir_pass *ps = &k->pass[p];
    h = mix(h, (uint64_t)ps->kind | (uint64_t)ps->red << 8 |
               (uint64_t)(uint16_t)ps->out << 16 |
               (uint64_t)(uint32_t)ps->value << 32);
  }
  return h;
}

int64_t kir_units(const kir_kernel *k)
{
  int64_t n = 1;
  for (int d = 0; d < k->ndim; d++)
    n *= k->size[d];
  return n;
}

void kir_entry_name(int pass, char *buf, size_t len)
{
  if (pass < 0)
    snprintf(buf, len, "main");
  else
    snprintf(buf, len, "pass%d", pass);
}

void kir_collapse(kir_kernel *k, bool merge)
{
  int row = k->ndim;   /* the row axis stride sits after the outer dims */
  int nd = 0;
  for (int d = 0; d < k->ndim; d++) {
    if (k->size[d] == 1)
      continue;
    k->size[nd] = k->size[d];
    for (int b = 0; b < k->nbufs; b++)
      k->buf[b].stride[nd] = k->buf[b].stride[d];
    nd++;
  }
  if (merge) {
    int m = 0;
    for (int d = 1; d < nd; d++) {
      bool ok = true;
      for (int b = 0; b < k->nbufs && ok; b++)
        ok = k->buf[b].stride[m] == k->buf[b].stride[d] * k->size[d];
      if (ok) {
        k->size[m] *= k->size[d];
        for (int b = 0; b < k->nbufs; b++)
          k->buf[b].stride[m] = k->buf[b].stride[d];
      } else {
        m++;
        k->size[m] = k->size[d];
        for (int b = 0; b < k->nbufs; b++)
          k->buf[b].stride[m] = k->buf[b].stride[d];
      }
    }
    nd = nd ? m + 1 : 0;
  }
  if (k->kind == KIR_ROWS)
    for (int b = 0; b < k->nbufs; b++)
      k->buf[b].stride[nd] = k->buf[b].stride[row];
  if (k->kind == KIR_MAP && nd == 0) {   /* a single point: one dim of 1 */
    k->size[0] = 1;
    for (int b = 0; b < k->nbufs; b++)
      k->buf[b].stride[0] = 0;
    nd = 1;
  }
  k->ndim = nd;
}
