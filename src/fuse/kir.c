/*
** kir.c -- building kernels, printing their canonical text form and
** parsing it back.
*/
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
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
  if (k->compact) {   /* too small to hand out again */
    free(k);
    return;
  }
  pthread_mutex_lock(&spare.lock);
  bool kept = spare.n < KIR_SPARE_MAX;
  if (kept)
    spare.k[spare.n++] = k;
  pthread_mutex_unlock(&spare.lock);
  if (!kept)
    free(k);
}

void kir_copy(kir_kernel *dst, const kir_kernel *src)
{
  memcpy(dst, src, offsetof(kir_kernel, ins));
  memcpy(dst->ins, src->ins, sizeof src->ins[0] * (size_t)src->ninstrs);
  dst->compact = false;
}

kir_kernel *kir_compact_copy(const kir_kernel *c)
{
  kir_kernel *k = malloc(offsetof(kir_kernel, ins) +
                         sizeof c->ins[0] * (size_t)c->ninstrs);
  if (!k)
    return NULL;
  kir_copy(k, c);   /* writes no further than c's instructions */
  k->compact = true;
  return k;
}

int kir_emit(kir_kernel *k, kir_opcode op, tc_dtype dt, int a, int b, int c)
{
  TC_ASSERT(!k->compact, "emitting into a compact kernel");
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

bool kir_sequential(const kir_kernel *k)
{
  for (int p = 0; p < k->npasses; p++)
    if (k->pass[p].kind == KIR_PASS_SCAN || k->pass[p].kind == KIR_PASS_SCATTER)
      return true;
  return false;
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
    else if (ps->kind == KIR_PASS_SCAN)
      fprintf(out, "  pass%d scan %s %%%d, store buf%d\n", p,
              red_name[ps->red], ps->value, ps->out);
    else if (ps->kind == KIR_PASS_SCATTER)
      fprintf(out, "  pass%d scatter %s buf%d at %%%d = %%%d\n", p,
              red_name[ps->red], ps->out, ps->index, ps->value);
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
        a->pass[p].value != b->pass[p].value ||
        (a->pass[p].kind == KIR_PASS_SCATTER &&
         a->pass[p].index != b->pass[p].index))
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
    if (ps->kind == KIR_PASS_SCATTER)
      h = mix(h, (uint64_t)(uint32_t)ps->index);
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

/* -- Parsing the canonical text ----------------------------------------------
** A cursor over untrusted text: every expectation that fails records the
** first problem (with its line) and makes every later step a no-op, so the
** parser is a straight sequence of expectations with one check at the end. */

typedef struct {
  const char *p;
  int line;
  bool bad;
  char *why;
  size_t wlen;
} cursor;

static void fail(cursor *c, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
static void fail(cursor *c, const char *fmt, ...)
{
  if (c->bad)
    return;
  c->bad = true;
  int n = snprintf(c->why, c->wlen, "line %d: ", c->line);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < c->wlen)
    vsnprintf(c->why + n, c->wlen - (size_t)n, fmt, ap);
  va_end(ap);
}

/* Consume the literal s, or fail. */
static void expect(cursor *c, const char *s)
{
  size_t n = strlen(s);
  if (!c->bad && strncmp(c->p, s, n) == 0)
    c->p += n;
  else
    fail(c, "expected \"%s\"", s);
}

/* Consume the literal s if it is next. */
static bool accept(cursor *c, const char *s)
{
  size_t n = strlen(s);
  if (c->bad || strncmp(c->p, s, n) != 0)
    return false;
  c->p += n;
  return true;
}

/* A decimal integer in [lo, hi] (written as kir_print writes it: an
** optional '-', then digits). */
static int64_t number(cursor *c, int64_t lo, int64_t hi, const char *what)
{
  if (c->bad)
    return lo;
  const char *s = c->p + (*c->p == '-');
  if (*s < '0' || *s > '9') {
    fail(c, "expected %s", what);
    return lo;
  }
  errno = 0;
  char *end;
  long long v = strtoll(c->p, &end, 10);
  if (errno || v < lo || v > hi) {
    int n = (int)(end - c->p);
    fail(c, "%s %.*s out of range [%lld, %lld]", what, n < 24 ? n : 24, c->p,
         (long long)lo, (long long)hi);
    return lo;
  }
  c->p = end;
  return v;
}

/* The name (up to a space, comma or line end) among names[0..n), as its
** index. */
static int name_of(cursor *c, const char *const *names, int n,
                   const char *what)
{
  if (c->bad)
    return 0;
  size_t len = strcspn(c->p, " ,\n");
  for (int i = 0; i < n; i++)
    if (names[i] && strlen(names[i]) == len &&
        strncmp(c->p, names[i], len) == 0) {
      c->p += len;
      return i;
    }
  fail(c, "unknown %s \"%.*s\"", what, (int)(len < 24 ? len : 24), c->p);
  return 0;
}

static tc_dtype dtype_of(cursor *c)
{
  const char *names[TC_DTYPE__MAX];
  for (int d = 0; d < TC_DTYPE__MAX; d++)
    names[d] = tc_dtype_name((tc_dtype)d);
  return (tc_dtype)name_of(c, names, TC_DTYPE__MAX, "dtype");
}

static void end_line(cursor *c)
{
  if (c->bad)
    return;
  if (*c->p != '\n') {
    fail(c, "unexpected \"%.20s\" at the end of the line", c->p);
    return;
  }
  c->p++;
  c->line++;
}

/* "[a, b, ...]" of at most max numbers into v; returns the count. */
static int list_of(cursor *c, int64_t *v, int max, int64_t lo,
                   const char *what)
{
  int n = 0;
  expect(c, "[");
  while (!c->bad && *c->p != ']') {
    if (n > 0)
      expect(c, ", ");
    if (n == max) {
      fail(c, "more than %d %s", max, what);
      break;
    }
    v[n++] = number(c, lo, INT64_MAX, what);
  }
  expect(c, "]");
  return n;
}

static void parse_header(cursor *c, kir_kernel *k)
{
  expect(c, "kernel ");
  k->kind = accept(c, "map") ? KIR_MAP : KIR_ROWS;
  if (k->kind == KIR_ROWS)
    expect(c, "rows");
  k->dynamic = accept(c, " dynamic");
  k->inplace = accept(c, " inplace");
  expect(c, " ");
  k->ndim = list_of(c, k->size, TC_MAX_DIMS, 0, "size");
  if (k->kind == KIR_ROWS) {
    expect(c, " row ");
    k->row_len = number(c, 0, INT64_MAX, "row length");
  }
  expect(c, " scalars ");
  k->nscalars = (int)number(c, 0, KIR_MAX_SCALARS, "scalar count");
  end_line(c);
}

static void parse_buf(cursor *c, kir_kernel *k)
{
  if (k->nbufs == KIR_MAX_BUFS) {
    fail(c, "more than %d buffers", KIR_MAX_BUFS);
    return;
  }
  kir_buf *b = &k->buf[k->nbufs];
  expect(c, "  buf");
  number(c, k->nbufs, k->nbufs, "buffer number");
  b->role = accept(c, " in ") ? KIR_IN : KIR_OUT;
  if (b->role == KIR_OUT)
    expect(c, " out ");
  b->dtype = (uint8_t)dtype_of(c);
  expect(c, " strides ");
  int nstr = k->ndim + (k->kind == KIR_ROWS);
  if (list_of(c, b->stride, TC_MAX_DIMS + 1, INT64_MIN, "stride") != nstr)
    fail(c, "buffer %d has not %d strides", k->nbufs, nstr);
  b->gather = accept(c, " gather stride ");
  if (b->gather) {
    b->gstride = number(c, INT64_MIN, INT64_MAX, "gather stride");
    expect(c, " size ");
    b->gsize = number(c, 1, INT64_MAX, "gather size");
  }
  end_line(c);
  k->nbufs++;
}

/* "%N", an earlier instruction. */
static int32_t operand(cursor *c, int before)
{
  expect(c, "%");
  return (int32_t)number(c, 0, before - 1, "operand");
}

static int16_t buf_ref(cursor *c, const kir_kernel *k)
{
  expect(c, "buf");
  return (int16_t)number(c, 0, k->nbufs - 1, "buffer");
}

static void parse_operands(cursor *c, kir_kernel *k, kir_instr *in, int i)
{
  switch (in->op) {
  case KOP_CONST: {
    expect(c, " ");
    if (c->bad)
      return;
    char *end;
    in->cval = strtod(c->p, &end);   /* %a's hex, inf and nan */
    if (end == c->p)
      fail(c, "expected a constant");
    c->p = end;
    return;
  }
  case KOP_SCALAR:
    expect(c, " s");
    in->ref = (int16_t)number(c, 0, k->nscalars - 1, "scalar");
    return;
  case KOP_LOAD:
    expect(c, " ");
    in->ref = buf_ref(c, k);
    return;
  case KOP_ROWVAR:   /* checked against the passes once they are read */
    expect(c, " pass");
    in->ref = (int16_t)number(c, 0, KIR_MAX_PASSES - 1, "pass");
    return;
  case KOP_GATHER:
    expect(c, " ");
    in->ref = buf_ref(c, k);
    expect(c, ", ");
    in->arg[0] = operand(c, i);
    return;
  default:
    for (int a = 0; a < kir_arity[in->op]; a++) {
      expect(c, a ? ", " : " ");
      in->arg[a] = operand(c, i);
    }
  }
}

static void parse_instr(cursor *c, kir_kernel *k)
{
  int i = k->ninstrs;
  if (i == KIR_MAX_INSTRS) {
    fail(c, "more than %d instructions", KIR_MAX_INSTRS);
    return;
  }
  kir_instr *in = &k->ins[i];
  *in = (kir_instr){ .ref = -1, .arg = { -1, -1, -1 } };
  expect(c, "  %");
  number(c, i, i, "instruction number");
  expect(c, " = ");
  in->dtype = (uint8_t)dtype_of(c);
  expect(c, " ");
  in->op = (uint8_t)name_of(c, kir_opname, KOP__MAX, "opcode");
  parse_operands(c, k, in, i);
  end_line(c);
  k->ninstrs++;
}

static void parse_pass(cursor *c, kir_kernel *k)
{
  if (k->npasses == KIR_MAX_PASSES) {
    fail(c, "more than %d passes", KIR_MAX_PASSES);
    return;
  }
  kir_pass *ps = &k->pass[k->npasses];
  *ps = (kir_pass){ .out = -1, .index = -1 };
  expect(c, "  pass");
  number(c, k->npasses, k->npasses, "pass number");
  if (accept(c, " reduce ")) {
    ps->kind = KIR_PASS_REDUCE;
    ps->red = (uint8_t)name_of(c, red_name, 3, "reduction");
    expect(c, " ");
    ps->value = operand(c, k->ninstrs);
    if (accept(c, ", store "))
      ps->out = buf_ref(c, k);
  } else if (accept(c, " scan ")) {
    ps->kind = KIR_PASS_SCAN;
    ps->red = (uint8_t)name_of(c, red_name, 3, "reduction");
    expect(c, " ");
    ps->value = operand(c, k->ninstrs);
    expect(c, ", store ");
    ps->out = buf_ref(c, k);
  } else if (accept(c, " scatter ")) {
    ps->kind = KIR_PASS_SCATTER;
    ps->red = (uint8_t)name_of(c, red_name, 3, "reduction");
    expect(c, " ");
    ps->out = buf_ref(c, k);
    expect(c, " at ");
    ps->index = operand(c, k->ninstrs);
    expect(c, " = ");
    ps->value = operand(c, k->ninstrs);
  } else {
    ps->kind = accept(c, " store_row ") ? KIR_PASS_STORE_ROW
                                        : KIR_PASS_STORE;
    if (ps->kind == KIR_PASS_STORE)
      expect(c, " store ");
    ps->out = buf_ref(c, k);
    expect(c, " = ");
    ps->value = operand(c, k->ninstrs);
  }
  end_line(c);
  k->npasses++;
}

/* What the grammar cannot say: the types that kir_load, kir_rowvar and
** kir_gather give, rows and map-only features where they belong, passes'
** targets. */
static void check_kernel(cursor *c, const kir_kernel *k)
{
  if (!c->bad && k->npasses == 0)
    fail(c, "the kernel has no pass");
  for (int i = 0; i < k->ninstrs && !c->bad; i++) {
    const kir_instr *in = &k->ins[i];
    if (in->op == KOP_ROWVAR &&
        (in->ref >= k->npasses ||
         k->pass[in->ref].kind != KIR_PASS_REDUCE ||
         in->dtype != k->ins[k->pass[in->ref].value].dtype))
      fail(c, "%%%d reads pass%d, not a reduction of its dtype", i, in->ref);
    else if ((in->op == KOP_LOAD || in->op == KOP_GATHER) &&
             in->dtype != k->buf[in->ref].dtype)
      fail(c, "%%%d is not of buffer %d's dtype", i, in->ref);
    else if (in->op == KOP_GATHER && (!k->buf[in->ref].gather ||
                                      k->ins[in->arg[0]].dtype != TC_I64))
      fail(c, "%%%d gathers from buffer %d, not a gather buffer, or by "
           "a non-i64 index", i, in->ref);
  }
  bool seq = kir_sequential(k);
  for (int p = 0; p < k->npasses && !c->bad; p++) {
    const kir_pass *ps = &k->pass[p];
    bool scan = ps->kind == KIR_PASS_SCAN;
    bool scatter = ps->kind == KIR_PASS_SCATTER;
    if (k->kind == KIR_MAP && ps->kind != KIR_PASS_STORE)
      fail(c, "pass%d: a map kernel only stores", p);
    else if (ps->out >= 0 && k->buf[ps->out].role != KIR_OUT)
      fail(c, "pass%d stores to buffer %d, an input", p, ps->out);
    else if (seq && !scan && !scatter)
      fail(c, "pass%d: a kernel with sequential passes has only those", p);
    else if (scatter && (!k->buf[ps->out].gather ||
                         k->ins[ps->index].dtype != TC_I64 ||
                         k->ins[ps->value].dtype != k->buf[ps->out].dtype ||
                         !kir_seq_dtype(k->buf[ps->out].dtype)))
      fail(c, "pass%d scatters into buffer %d, not a gather buffer of f32, "
           "f64, i32 or i64, by a non-i64 index, or a value of another "
           "dtype", p, ps->out);
    else if (scan && (k->buf[ps->out].gather ||
                      !kir_seq_dtype(k->ins[ps->value].dtype)))
      fail(c, "pass%d scans a value not of f32, f64, i32 or i64, or into a "
           "gather buffer", p);
  }
}

kir_kernel *kir_parse(const char *text, char *why, size_t wlen)
{
  char dummy[8];
  cursor c = { text ? text : "", 1, false, why ? why : dummy,
               why ? wlen : sizeof dummy };
  kir_kernel *k = kir_new();
  if (!k) {
    fail(&c, "out of memory");
    return NULL;
  }
  parse_header(&c, k);
  while (!c.bad && strncmp(c.p, "  buf", 5) == 0)
    parse_buf(&c, k);
  while (!c.bad && strncmp(c.p, "  %", 3) == 0)
    parse_instr(&c, k);
  while (!c.bad && strncmp(c.p, "  pass", 6) == 0)
    parse_pass(&c, k);
  if (!c.bad && *c.p)
    fail(&c, "unexpected \"%.20s\"", c.p);
  check_kernel(&c, k);
  /* The text must be canonical (what kir_print writes), so equal kernels
  ** have equal text and a key made from it means one kernel. */
  char *again = c.bad ? NULL : kir_text(k);
  if (!c.bad && (!again || strcmp(again, text) != 0))
    fail(&c, again ? "not in canonical form (kir_print writes it otherwise)"
                   : "out of memory");
  free(again);
  if (c.bad) {
    kir_free(k);
    return NULL;
  }
  return k;
}
