/*
** render.c -- kernel IR -> CUDA C. One local per IR instruction, each
** primitive with expr.h's exact semantics for its dtype, casts with
** eager_convert's rules, the transcendentals as calls into approx.h (whose
** text the source embeds: the one definition eager C and libgccjit follow
** too), and reductions in the canonical order.
**
** Shape of the generated code (static kernels bake sizes and strides in as
** constants; dynamic ones read them from `dims` at entry):
**   MAP   for p in [lo, hi), grid-stride: coordinates of p, one offset per
**         buffer, the instructions the passes need, the stores; where the
**         buffers allow, first a vector loop taking 4 points a thread
**         (aligned vector loads and stores, the same per-point math).
**   ROWS  for row r in [lo, hi), a block per row (grid-stride over rows);
**         passes in order, each ending in a barrier:
**         REDUCE  the canonical order, computed by the block: in rounds of
**                 blockDim/16 chunks, thread t folds lane t % 16 of chunk
**                 t / 16 (positions l, l + 16, ... of the chunk, in
**                 order); lanes combined by halving in shared memory; the
**                 round's chunk partials combined pairwise by levels (an
**                 odd last one carried up), which is the canonical tree's
**                 node for that aligned block of chunks; thread 0 combines
**                 round nodes on a binary-counter stack (as the CPU
**                 backend combines chunks) and broadcasts the row value.
**         STORE   positions strided by blockDim; STORE_ROW thread 0.
**   sequential ROWS (SCAN, SCATTER passes) for row r in [lo, hi), a thread
**         per row (grid-stride as MAP); each pass a loop over the row's
**         positions from 0, as the CPU's loop (a scatter's loads batched
**         ahead of its folds); a kernel of SCAN passes alone, with long
**         rows and few, a block per row instead (the segments of
**         tensor.h's scan order in parallel).
** No result depends on the grid or block size: the order of every
** combine is fixed by the chunk and lane structure alone.
*/
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_cuda.h"
#include "../tensor/approx.h"   /* APPROX_FMA: the host build's choice */
#include "../tensor/half.h"     /* constants rounded at render time */

/* approx.h's and half.h's text (embed.py, at build time). */
extern const char jcuda_approx_text[];
extern const char jcuda_half_text[];

/* The canonical reduction order (tensor.h, NUMERICS.md). */
#define CHUNK TENSOR_RED_CHUNK
#define LANES TENSOR_RED_LANES

/* The prelude: NVRTC gets CUDA's spellings and the libc names approx.h
** uses; a host build (tests/jit_cuda/shim.h) defines TCK_KERNEL first. */
static const char prelude[] =
  "#if defined(__CUDACC_RTC__)\n"
  "#pragma nv_diag_suppress 177 /* approx.h functions a kernel leaves unused */\n"
  "typedef signed char int8_t;\n"
  "typedef unsigned char uint8_t;\n"
  "typedef unsigned short uint16_t;\n"
  "typedef int int32_t;\n"
  "typedef unsigned int uint32_t;\n"
  "typedef long long int64_t;\n"
  "typedef unsigned long long uint64_t;\n"
  "#define INFINITY __int_as_float(0x7f800000)\n"
  "#define NAN __int_as_float(0x7fc00000)\n"
  "#define __builtin_fmaf fmaf\n"
  "#define __builtin_fma fma\n"
  "#define TCK_KERNEL static __device__ __forceinline__ void\n"
  "#define TCK_SHARED __shared__\n"
  "#define TCK_SYNC() __syncthreads()\n"
  "#define TCK_UNROLL _Pragma(\"unroll\")\n"
  "#define TCK_VEC(T, p) (*(T *)(p))\n"
  "#elif !defined(TCK_KERNEL)\n"
  "#error \"compile with NVRTC, or with a host shim that defines TCK_KERNEL\"\n"
  "#endif\n";

/* The C type of a value of each dtype; a storage dtype's (f16, bf16) is a
** float holding a value rounded to it, and its buffers hold the bits. */
static const char *const ctype[TC_DTYPE__MAX] = {
  [TC_F32] = "float", [TC_F64] = "double", [TC_I32] = "int32_t",
  [TC_I64] = "int64_t", [TC_BOOL] = "uint8_t", [TC_F16] = "float",
  [TC_BF16] = "float",
};

static bool is_half(int dt) { return dt == TC_F16 || dt == TC_BF16; }

static bool is_float(int dt)
{
  return dt == TC_F32 || dt == TC_F64 || is_half(dt);
}

static const char *stype(int dt) { return is_half(dt) ? "uint16_t" : ctype[dt]; }

/* half.h's conversions by dtype */
static const char *half_from(int dt)
{
  return dt == TC_F16 ? "half_f16_from_f32" : "half_bf16_from_f32";
}

static const char *half_to(int dt)
{
  return dt == TC_F16 ? "half_f32_from_f16" : "half_f32_from_bf16";
}

/* How the vector MAP loop (VEC points a thread) reaches each buffer. */
typedef enum {
  VM_POINT,    /* each point's own element: b<b>[o<b> + q * s<b>_<last>]
                  (GATHER buffers, and outside the vector loop) */
  VM_VECTOR,   /* the VEC points' elements, one aligned load or store of
                  x<b> (stride 1 along the last dim) */
  VM_BCAST,    /* one element for all VEC points (stride 0 along it) */
  VM_EITHER    /* a dynamic kernel's input: x<b>, filled by one vector
                  load or from one element as the stride says at run time */
} vec_mode;

typedef struct {
  FILE *f;
  const kir_kernel *k;
  const char *where;        /* offset expression context, see load_at */
  bool vec;                 /* a MAP kernel with the vector loop */
  uint8_t vmode[KIR_MAX_BUFS];   /* where "vec": vec_mode of each buffer */
  bool bad;
  char why[160];
} rd;

static void fail(rd *r, const char *fmt, int i, int dt)
{
  if (r->bad)
    return;
  r->bad = true;
  snprintf(r->why, sizeof r->why, fmt, i, tc_dtype_name((tc_dtype)dt));
}

/* -- Constants -------------------------------------------------------------- */

/* (T)(v) as a literal, saturating as the CPU backend's konst does. */
static void konst(rd *r, char *out, size_t n, int dt, double v)
{
  (void)r;
  if (is_half(dt)) {   /* the f32 value of the rounded constant */
    float x = (float)v;
    x = dt == TC_F16 ? half_f32_from_f16(half_f16_from_f32(x))
                     : half_f32_from_bf16(half_bf16_from_f32(x));
    konst(r, out, n, TC_F32, x);
    return;
  }
  switch (dt) {
  case TC_F32: {
    float x = (float)v;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isfinite(x))
      snprintf(out, n, "%af", (double)x);
    else
      snprintf(out, n, "approx_from_bits_f32(0x%08" PRIx32 "u)", u);
    return;
  }
  case TC_F64: {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    if (isfinite(v))
      snprintf(out, n, "%a", v);
    else
      snprintf(out, n, "approx_from_bits_f64(0x%016" PRIx64 "ull)", u);
    return;
  }
  case TC_BOOL:
    snprintf(out, n, "(uint8_t)%d", v != v ? 0 : v >= 0 && v < 256.0
                                     ? (int)(uint8_t)v : v != 0);
    return;
  case TC_I32: {
    int64_t x = v != v ? 0 : v <= INT32_MIN ? INT32_MIN
                : v >= INT32_MAX ? INT32_MAX : (int64_t)(int32_t)v;
    snprintf(out, n, "(int32_t)(%" PRId64 "ll)", x);
    return;
  }
  default: {
    int64_t x = v != v ? 0 : v <= (double)INT64_MIN ? INT64_MIN
                : v >= (double)INT64_MAX ? INT64_MAX : (int64_t)v;
    if (x == INT64_MIN)
      snprintf(out, n, "(int64_t)(-9223372036854775807ll - 1)");
    else
      snprintf(out, n, "(int64_t)(%" PRId64 "ll)", x);
    return;
  }
  }
}

/* The identity of reduction red in dtype dt. */
static void identity(rd *r, char *out, size_t n, int red, int dt)
{
  bool max = red == KIR_RED_MAX;
  if (red == KIR_RED_SUM)
    konst(r, out, n, dt, 0.0);
  else if (is_float(dt))
    konst(r, out, n, dt, max ? -(double)INFINITY : (double)INFINITY);
  else if (dt == TC_BOOL)
    konst(r, out, n, dt, max ? 0 : 1);
  else if (dt == TC_I32)
    konst(r, out, n, dt, max ? INT32_MIN : INT32_MAX);
  else
    snprintf(out, n, max ? "(int64_t)(-9223372036854775807ll - 1)"
                         : "(int64_t)9223372036854775807ll");
}

/* -- Primitives ---------------------------------------------------------------- */

/* Integer add/sub/mul wrap: computed on the unsigned type (expr.h TC_WRAP). */
static void wrap(rd *r, int dt, const char *op, const char *a, const char *b)
{
  if (dt == TC_I32)
    fprintf(r->f, "(int32_t)((uint32_t)%s %s (uint32_t)%s)", a, op, b);
  else if (dt == TC_I64)
    fprintf(r->f, "(int64_t)((uint64_t)%s %s (uint64_t)%s)", a, op, b);
  else
    fprintf(r->f, "(%s)(%s %s %s)", ctype[dt], a, op, b);
}

static void negate(rd *r, int dt, const char *a)
{
  if (dt == TC_I32)
    fprintf(r->f, "(int32_t)(0u - (uint32_t)%s)", a);
  else if (dt == TC_I64)
    fprintf(r->f, "(int64_t)(0ull - (uint64_t)%s)", a);
  else
    fprintf(r->f, "(%s)(-%s)", ctype[dt], a);
}

/* (x > y || x != x) ? x : y and its mirror: NaN propagates (expr.h). An
** integer is never NaN (and x != x draws a warning there). */
static void maxmin(rd *r, bool max, int dt, const char *x, const char *y)
{
  if (is_float(dt))
    fprintf(r->f, "((%s %s %s || %s != %s) ? %s : %s)", x, max ? ">" : "<",
            y, x, x, x, y);
  else
    fprintf(r->f, "((%s %s %s) ? %s : %s)", x, max ? ">" : "<", y, x, y);
}

static void combine(rd *r, int red, int dt, const char *x, const char *y)
{
  if (red == KIR_RED_SUM)
    wrap(r, dt, "+", x, y);
  else
    maxmin(r, red == KIR_RED_MAX, dt, x, y);
}

/* eager_convert's rules: float -> int saturates with NaN -> 0; anything ->
** bool is x != 0; int narrowing truncates; the rest are C conversions. */
static void convert(rd *r, const char *x, int from, int to)
{
  FILE *f = r->f;
  if (from != to && is_half(to)) {   /* through f32, rounded */
    fprintf(f, "%s(%s(", half_to(to), half_from(to));
    convert(r, x, is_half(from) ? TC_F32 : from, TC_F32);
    fputs("))", f);
    return;
  }
  if (is_half(from))
    from = TC_F32;
  if (from == to) {
    fputs(x, f);
  } else if (to == TC_BOOL) {
    fprintf(f, "(uint8_t)(%s != 0)", x);
  } else if (is_float(to) || !is_float(from)) {
    if (from == TC_I64 && to == TC_I32)
      fprintf(f, "(int32_t)(uint32_t)%s", x);
    else
      fprintf(f, "(%s)%s", ctype[to], x);
  } else {
    const char *ft = ctype[from], *it = ctype[to];
    const char *lo = to == TC_I32 ? "(-2147483647 - 1)"
                                  : "(-9223372036854775807ll - 1)";
    const char *hi = to == TC_I32 ? "2147483647" : "9223372036854775807ll";
    fprintf(f, "(%s != %s ? (%s)0 : %s <= (%s)%s ? (%s)%s : %s >= (%s)%s ? "
            "(%s)%s : (%s)%s)", x, x, it, x, ft, lo, it, lo, x, ft, hi, it,
            hi, it, x);
  }
}

/* -- Instructions ---------------------------------------------------------------- */

static void load_at(rd *r, int b);

static const char *const approx_name[KOP__MAX] = {
  [KOP_EXP] = "exp", [KOP_LOG] = "log", [KOP_TANH] = "tanh",
  [KOP_SIGMOID] = "sigmoid", [KOP_SIN] = "sin", [KOP_COS] = "cos",
  [KOP_POW] = "pow", [KOP_GELU] = "gelu", [KOP_EXPM1] = "expm1",
  [KOP_LOG1P] = "log1p", [KOP_ERF] = "erf",
};

/* The precision of approx.h's function that computes a transcendental of
** dtype dt (approx_<name>_f32 or _f64). */
static int approx_bits(int dt) { return dt == TC_F32 ? 32 : 64; }

/* approx.h's text without the precisions no instruction computes a
** transcendental in, and half.h's only where a value or buffer is 16-bit:
** NVRTC parses and optimizes all the text it is given, used or not (a small
** kernel took 70 ms to PTX with all of it, 51 without either). */
static void emit_math_text(FILE *f, const kir_kernel *k)
{
  bool f32 = false, f64 = false, half = false;
  for (int i = 0; i < k->ninstrs; i++) {
    const kir_instr *in = &k->ins[i];
    if (approx_name[in->op]) {
      f32 |= approx_bits(in->dtype) == 32;
      f64 |= approx_bits(in->dtype) == 64;
    }
    half |= is_half(in->dtype);
  }
  for (int b = 0; b < k->nbufs; b++)
    half |= is_half(k->buf[b].dtype);
  if (!f32)
    fputs("#define APPROX_OMIT_F32 1\n", f);
  if (!f64)
    fputs("#define APPROX_OMIT_F64 1\n", f);
  fputs(jcuda_approx_text, f);
  if (half)
    fputs(jcuda_half_text, f);
}

/* The expression of instruction i over its operands v<arg>. */
static void instr_expr(rd *r, int i)
{
  const kir_instr *in = &r->k->ins[i];
  int dt = in->dtype;
  FILE *f = r->f;
  char a[24] = "", b[24] = "", c[24] = "";
  int n = kir_arity[in->op];
  if (n > 0) snprintf(a, sizeof a, "v%d", in->arg[0]);
  if (n > 1) snprintf(b, sizeof b, "v%d", in->arg[1]);
  if (n > 2) snprintf(c, sizeof c, "v%d", in->arg[2]);
  int da = n > 0 ? r->k->ins[in->arg[0]].dtype : dt;
  const char *sfx = dt == TC_F32 ? "f" : "";
  switch (in->op) {
  case KOP_ADD: wrap(r, dt, "+", a, b); return;
  case KOP_SUB: wrap(r, dt, "-", a, b); return;
  case KOP_MUL: wrap(r, dt, "*", a, b); return;
  case KOP_DIV:
    if (!is_float(dt))
      fail(r, "%%%d: DIV of %s", i, dt);
    fprintf(f, "%s / %s", a, b);
    return;
  case KOP_NEG: negate(r, dt, a); return;
  case KOP_ABS:
    if (is_float(dt))
      fprintf(f, "fabs%s(%s)", sfx, a);
    else if (dt == TC_BOOL)
      fputs(a, f);
    else {
      fprintf(f, "(%s < 0 ? ", a);
      negate(r, dt, a);
      fprintf(f, " : %s)", a);
    }
    return;
  case KOP_EQ: case KOP_NE: case KOP_LT: case KOP_LE: case KOP_GT:
  case KOP_GE: {
    static const char *const op[] = { "==", "!=", "<", "<=", ">", ">=" };
    fprintf(f, "(%s)(%s %s %s)", ctype[dt], a, op[in->op - KOP_EQ], b);
    return;
  }
  case KOP_MAXIMUM: maxmin(r, true, dt, a, b); return;
  case KOP_MINIMUM: maxmin(r, false, dt, a, b); return;
  case KOP_SEL: fprintf(f, "(%s != 0 ? %s : %s)", a, b, c); return;
  case KOP_SQRT:
    if (!is_float(dt))
      fail(r, "%%%d: SQRT of %s", i, dt);
    fprintf(f, "sqrt%s(%s)", sfx, a);
    return;
  case KOP_FLOOR: case KOP_CEIL: case KOP_ROUND: case KOP_TRUNC: {
    /* exact operations: any correct implementation gives expr.h's bits */
    static const char *const fn[] = { "floor", "ceil", "nearbyint",
                                      "trunc" };
    if (is_float(dt))
      fprintf(f, "%s%s(%s)", fn[in->op - KOP_FLOOR], sfx, a);
    else
      fputs(a, f);   /* an integer is integral already */
    return;
  }
  case KOP_EXP: case KOP_LOG: case KOP_TANH: case KOP_SIGMOID:
  case KOP_SIN: case KOP_COS: case KOP_POW: case KOP_GELU:
  case KOP_EXPM1: case KOP_LOG1P: case KOP_ERF:
    if (!is_float(dt))
      fail(r, "%%%d: transcendental of %s", i, dt);
    fprintf(f, "approx_%s_f%d(%s%s%s)", approx_name[in->op],
            approx_bits(dt), a, n > 1 ? ", " : "", b);
    return;
  case KOP_CONST: {
    char lit[64];
    konst(r, lit, sizeof lit, dt, in->cval);
    fputs(lit, f);
    return;
  }
  case KOP_SCALAR: fprintf(f, "(%s)scalars[%d]", ctype[dt], in->ref); return;
  case KOP_LOAD:
    if (is_half(r->k->buf[in->ref].dtype))
      fprintf(f, "%s(", half_to(r->k->buf[in->ref].dtype));
    load_at(r, in->ref);
    if (is_half(r->k->buf[in->ref].dtype))
      fputs(")", f);
    return;
  case KOP_GATHER: {   /* the index clamped into the gathered axis */
    const kir_buf *bf = &r->k->buf[in->ref];
    bool h = is_half(bf->dtype);
    fprintf(f, "%s%s(&", h ? half_to(bf->dtype) : "", h ? "(" : "");
    load_at(r, in->ref);
    fprintf(f, ")[(%s < 0 ? (int64_t)0 : %s > %" PRId64 " ? (int64_t)%" PRId64
            " : (int64_t)%s) * %" PRId64 "]%s", a, a,
            bf->gsize > 0 ? bf->gsize - 1 : 0, bf->gsize > 0 ? bf->gsize - 1
                                                            : 0,
            a, bf->gstride, h ? ")" : "");
    return;
  }
  case KOP_ROWVAR: fprintf(f, "rv%d", in->ref); return;
  case KOP_CAST: convert(r, a, da, dt); return;
  }
  fail(r, "%%%d: opcode %s", i, TC_F32);
}

/* Element of buffer b at the current position: MAP "o<b>", point q of a
** vector group by the buffer's vec_mode, a row position
** "rb<b> + pos * s<b>_<rowax>", once per row "rb<b>". */
static void load_at(rd *r, int b)
{
  if (strcmp(r->where, "vec") == 0) {
    if (r->vmode[b] == VM_VECTOR || r->vmode[b] == VM_EITHER)
      fprintf(r->f, "x%d.v[q]", b);
    else if (r->vmode[b] == VM_BCAST)
      fprintf(r->f, "b%d[o%d]", b, b);
    else
      fprintf(r->f, "b%d[o%d + q * s%d_%d]", b, b, b, r->k->ndim - 1);
    return;
  }
  fprintf(r->f, "b%d[", b);
  if (strcmp(r->where, "map") == 0)
    fprintf(r->f, "o%d]", b);
  else if (strcmp(r->where, "pos") == 0)
    fprintf(r->f, "rb%d + pos * s%d_%d]", b, b, r->k->ndim);
  else
    fprintf(r->f, "rb%d]", b);
}

/* Mark the instructions value v needs. */
static void closure(const kir_kernel *k, int v, uint8_t *mark)
{
  mark[v] = 1;
  for (int i = v; i >= 0; i--)
    if (mark[i])
      for (int a = 0; a < kir_arity[k->ins[i].op]; a++)
        mark[k->ins[i].arg[a]] = 1;
}

/* Locals for every instruction the values vals[0..n) need, in index
** (operand-first) order. */
static void emit_values(rd *r, const int *vals, int n, const char *indent)
{
  uint8_t *mark = calloc((size_t)r->k->ninstrs, 1);
  if (!mark) {
    r->bad = true;
    snprintf(r->why, sizeof r->why, "out of memory");
    return;
  }
  for (int q = 0; q < n; q++)
    closure(r->k, vals[q], mark);
  for (int i = 0; i < r->k->ninstrs; i++) {
    if (!mark[i])
      continue;
    fprintf(r->f, "%sconst %s v%d = ", indent, ctype[r->k->ins[i].dtype], i);
    instr_expr(r, i);
    fputs(";\n", r->f);
  }
  free(mark);
}

/* buf[out] at the current position = local `name` (of dtype dt) converted
** to the buffer's dtype. */
static void emit_store_of(rd *r, int out, const char *name, int dt,
                          const char *indent)
{
  fprintf(r->f, "%s", indent);
  load_at(r, out);
  fputs(" = ", r->f);
  int bdt = r->k->buf[out].dtype;
  if (is_half(bdt))   /* the bits of a value already rounded to bdt */
    fprintf(r->f, "%s(", half_from(bdt));
  convert(r, name, dt, bdt);
  if (is_half(bdt))
    fputs(")", r->f);
  fputs(";\n", r->f);
}

/* buf[out] at the current position = instruction v's value. */
static void emit_store(rd *r, int out, int v, const char *indent)
{
  char name[24];
  snprintf(name, sizeof name, "v%d", v);
  emit_store_of(r, out, name, r->k->ins[v].dtype, indent);
}

/* -- The function -------------------------------------------------------------- */

/* Sizes, strides and typed bases at entry. */
static void emit_setup(rd *r)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  int rowax = k->ndim;
  for (int d = 0; d < k->ndim; d++)
    if (k->dynamic)
      fprintf(f, "  const int64_t n%d = dims[%d]; (void)n%d;\n", d, d, d);
    else   /* a size 0 leaves no units to run: 1 spares NVRTC's warning
              of a division by zero in the coordinates */
      fprintf(f, "  const int64_t n%d = %" PRId64 "; (void)n%d;\n", d,
              k->size[d] > 0 ? k->size[d] : 1, d);
  if (k->dynamic)
    fprintf(f, "  const int64_t rowlen = dims[%d];\n", rowax);
  else
    fprintf(f, "  const int64_t rowlen = %" PRId64 ";\n", k->row_len);
  for (int b = 0; b < k->nbufs; b++) {
    fprintf(f, "  %s *const b%d = (%s *)bufs[%d];\n", stype(k->buf[b].dtype),
            b, stype(k->buf[b].dtype), b);
    for (int d = 0; d <= rowax; d++)
      if (k->dynamic)
        fprintf(f, "  const int64_t s%d_%d = dims[%d]; (void)s%d_%d;\n", b,
                d, rowax + 1 + b * (rowax + 1) + d, b, d);
      else
        fprintf(f, "  const int64_t s%d_%d = %" PRId64 "; (void)s%d_%d;\n",
                b, d, k->buf[b].stride[d], b, d);
  }
  fputs("  (void)rowlen; (void)scalars; (void)dims;\n", f);
}

/* Coordinates of flat unit `u` over the outer dims, then each buffer's
** offset `<prefix><b>`. */
static void emit_offsets(rd *r, const char *u, const char *prefix)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  if (k->ndim > 0)
    fprintf(f, "    int64_t rem = %s;\n", u);
  for (int d = k->ndim - 1; d >= 0; d--) {
    if (d > 0)
      fprintf(f, "    const int64_t i%d = rem %% n%d; rem /= n%d;\n", d, d, d);
    else
      fprintf(f, "    const int64_t i0 = rem;\n");
  }
  for (int b = 0; b < k->nbufs; b++) {
    fprintf(f, "    const int64_t %s%d = 0", prefix, b);
    for (int d = 0; d < k->ndim; d++)
      fprintf(f, " + i%d * s%d_%d", d, b, d);
    fprintf(f, "; (void)%s%d;\n", prefix, b);
  }
}

/* A grid-stride loop of a thread per unit `var` in [from, hi), opened,
** with the units' buffer offsets (prefix<b>). */
static void emit_grid_stride(rd *r, const char *var, const char *from,
                             const char *prefix)
{
  fprintf(r->f, "  for (int64_t %s = %s + (int64_t)blockIdx.x * blockDim.x + "
          "threadIdx.x; %s < hi; %s += step) {\n", var, from, var, var);
  emit_offsets(r, var, prefix);
}

static void emit_step(rd *r)
{
  fputs("  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n", r->f);
}

/* The per-point body of a MAP kernel: every pass's value, then the stores. */
static void emit_map_point(rd *r, const char *indent)
{
  const kir_kernel *k = r->k;
  int vals[KIR_MAX_PASSES];
  for (int p = 0; p < k->npasses; p++)
    vals[p] = k->pass[p].value;
  emit_values(r, vals, k->npasses, indent);
  for (int p = 0; p < k->npasses; p++)
    emit_store(r, k->pass[p].out, k->pass[p].value, indent);
}

/* -- Vector MAP ---------------------------------------------------------------
** Points are row-major, so VEC consecutive points from a multiple of VEC
** share their outer coordinates when the last dim's size is a multiple of
** VEC: a buffer of stride 1 along it holds their elements side by side (one
** 4-to-16-byte load or store, where aligned), one of stride 0 holds one
** element for all. A thread then takes VEC points at a time, with each
** point's math exactly as the one-point loop writes it (emit_map_point),
** so the path taken changes no bit. It runs when, at run time, the range
** starts at a multiple of VEC and every vector buffer's elements are
** aligned (its base, and its outer strides multiples of VEC); the points
** it leaves, and every point when it cannot run, take the one-point loop. */
#define VEC 4

/* The bytes a group's vector of a buffer of dtype dt is aligned to: its
** size, at most 16 (one load instruction's). */
static int vec_align(int dt)
{
  int size = (int)tc_dtype_size((tc_dtype)dt) * VEC;
  return size < 16 ? size : 16;
}

/* The vec_mode of every buffer of MAP kernel k for its sizes and strides
** (a dynamic kernel's: this call's), and whether they let the vector loop
** take its points. */
static bool vec_fits(const kir_kernel *k, uint8_t *vmode)
{
  if (k->kind != KIR_MAP || k->ndim < 1)
    return false;
  int last = k->ndim - 1;
  if (k->size[last] % VEC != 0)
    return false;
  bool any = false;
  for (int b = 0; b < k->nbufs; b++) {
    const kir_buf *bf = &k->buf[b];
    if (bf->gather) {
      vmode[b] = VM_POINT;
      continue;
    }
    if (bf->stride[last] == 0 && bf->role == KIR_IN) {
      vmode[b] = VM_BCAST;
      continue;
    }
    if (bf->stride[last] != 1)
      return false;
    for (int d = 0; d < last; d++)
      if (bf->stride[d] % VEC != 0)
        return false;
    vmode[b] = VM_VECTOR;
    any = true;
  }
  return any;
}

/* The vec_mode of every buffer of MAP kernel k as rendered, and whether
** the vector loop is emitted at all. A static kernel's sizes and strides
** decide now (vec_fits); a dynamic one's at run time, so it has the loop
** whenever a buffer could take vector accesses. */
static bool vec_plan(const kir_kernel *k, uint8_t *vmode)
{
  if (!k->dynamic)
    return vec_fits(k, vmode);
  if (k->kind != KIR_MAP || k->ndim < 1)
    return false;
  bool any = false;
  for (int b = 0; b < k->nbufs; b++) {
    const kir_buf *bf = &k->buf[b];
    vmode[b] = bf->gather ? VM_POINT
             : bf->role == KIR_IN ? VM_EITHER : VM_VECTOR;
    any |= !bf->gather;
  }
  return any;
}

/* vec_fits implies vec_plan: a buffer it moves by vectors is one the
** rendered loop can move so. */
int jcuda_map_points_per_thread(const kir_kernel *k)
{
  uint8_t vmode[KIR_MAX_BUFS];
  return vec_fits(k, vmode) ? VEC : 1;
}

/* One type per storage type: VEC elements, aligned as vec_align says. */
static void emit_vec_types(rd *r)
{
  static const int dts[] = { TC_F32, TC_F64, TC_I32, TC_I64, TC_BOOL,
                             TC_F16 };
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
    fprintf(r->f, "typedef struct __attribute__((aligned(%d))) { %s v[%d]; }"
            " tck_vec_%s;\n", vec_align(dts[i]), stype(dts[i]), VEC,
            stype(dts[i]));
}

/* Can buffer b's elements be moved a vector at a time (c<b>)? */
static void emit_vec_can(rd *r, int b)
{
  const kir_kernel *k = r->k;
  int last = k->ndim - 1;
  fprintf(r->f, "  const int c%d = s%d_%d == 1", b, b, last);
  for (int d = 0; d < last; d++)
    fprintf(r->f, " && s%d_%d %% %d == 0", b, d, VEC);
  fprintf(r->f, " && (uint64_t)b%d %% %d == 0;\n", b,
          vec_align(k->buf[b].dtype));
}

/* vhi: the vector loop takes points [lo, vhi) (none when it cannot run). */
static void emit_vec_gate(rd *r)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  int last = k->ndim - 1;
  for (int b = 0; b < k->nbufs; b++)
    if (r->vmode[b] == VM_VECTOR || r->vmode[b] == VM_EITHER)
      emit_vec_can(r, b);
  fprintf(f, "  int64_t vhi = lo;\n  if (n%d %% %d == 0 && lo %% %d == 0",
          last, VEC, VEC);
  for (int b = 0; b < k->nbufs; b++)
    if (r->vmode[b] == VM_VECTOR)
      fprintf(f, " && c%d", b);
    else if (r->vmode[b] == VM_EITHER)
      fprintf(f, " && (c%d || s%d_%d == 0)", b, b, last);
  fprintf(f, ")\n    vhi = lo + (hi - lo) / %d * %d;\n", VEC, VEC);
}

/* Group g's vectors of loaded and stored buffers, loaded where needed. */
static void emit_vec_loads(rd *r, const uint8_t *loaded)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  for (int b = 0; b < k->nbufs; b++) {
    int m = r->vmode[b];
    if (m != VM_VECTOR && m != VM_EITHER)
      continue;
    const char *t = stype(k->buf[b].dtype);
    fprintf(f, "    tck_vec_%s x%d;\n", t, b);
    if (!loaded[b])
      continue;
    if (m == VM_VECTOR)
      fprintf(f, "    x%d = TCK_VEC(tck_vec_%s, &b%d[o%d]);\n", b, t, b, b);
    else
      fprintf(f, "    if (c%d)\n      x%d = TCK_VEC(tck_vec_%s, &b%d[o%d]);\n"
              "    else\n      for (int q = 0; q < %d; q++)\n"
              "        x%d.v[q] = b%d[o%d];\n", b, b, t, b, b, VEC, b, b, b);
  }
}

static void emit_vec_loop(rd *r)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  uint8_t loaded[KIR_MAX_BUFS] = { 0 };
  for (int i = 0; i < k->ninstrs; i++)
    if (k->ins[i].op == KOP_LOAD)
      loaded[k->ins[i].ref] = 1;
  emit_vec_gate(r);
  fprintf(f, "  for (int64_t g = lo / %d + (int64_t)blockIdx.x * blockDim.x "
          "+ threadIdx.x; g < vhi / %d; g += step) {\n", VEC, VEC);
  char first[32];
  snprintf(first, sizeof first, "g * %d", VEC);
  emit_offsets(r, first, "o");
  emit_vec_loads(r, loaded);
  r->where = "vec";
  fprintf(f, "    TCK_UNROLL\n    for (int q = 0; q < %d; q++) {\n", VEC);
  emit_map_point(r, "      ");
  fputs("    }\n", f);
  for (int b = 0; b < k->nbufs; b++)
    if (k->buf[b].role == KIR_OUT && r->vmode[b] == VM_VECTOR)
      fprintf(f, "    TCK_VEC(tck_vec_%s, &b%d[o%d]) = x%d;\n",
              stype(k->buf[b].dtype), b, b, b);
  fputs("  }\n", f);
}

static void emit_map(rd *r)
{
  FILE *f = r->f;
  emit_step(r);
  if (r->vec)
    emit_vec_loop(r);
  emit_grid_stride(r, "p", r->vec ? "vhi" : "lo", "o");
  r->where = "map";
  emit_map_point(r, "    ");
  fputs("  }\n", f);
}

/* The chunk partials of one round: chunks cb .. cb + cpb - 1 of the row,
** thread t folding lane t % LANES of chunk cb + t / LANES (positions l,
** l + LANES, ... in order, from the identity), the lanes combined by
** halving in shared memory `sm`. Afterwards sm[LANES * j] holds chunk
** cb + j's partial (for cb + j < nch), and c, l are this thread's. */
static void emit_chunk_partials(rd *r, int p)
{
  const kir_pass *ps = &r->k->pass[p];
  FILE *f = r->f;
  int dt = r->k->ins[ps->value].dtype;
  const char *T = ctype[dt];
  char id[64];
  identity(r, id, sizeof id, ps->red, dt);
  fprintf(f, "        const int64_t c = cb + tid / %d, l = tid %% %d;\n",
          LANES, LANES);
  fprintf(f, "        %s acc = %s;\n", T, id);
  fprintf(f, "        if (c < nch) {\n"
          "          const int64_t cs = c * %d;\n"
          "          const int64_t len = rowlen - cs < %d ? rowlen - cs : %d;\n"
          "          for (int64_t j = l; j < len; j += %d) {\n"
          "            const int64_t pos = cs + j;\n", CHUNK, CHUNK, CHUNK,
          LANES);
  r->where = "pos";
  emit_values(r, &ps->value, 1, "            ");
  if (ps->out >= 0)   /* a storing reduction keeps its values */
    emit_store(r, ps->out, ps->value, "            ");
  char v[24];
  snprintf(v, sizeof v, "v%d", ps->value);
  fputs("            acc = ", f);
  combine(r, ps->red, dt, "acc", v);
  fputs(";\n          }\n        }\n", f);
  fputs("        sm[tid] = acc;\n        TCK_SYNC();\n", f);
  fprintf(f, "        for (int w = %d; w >= 1; w /= 2) {\n"
          "          if (l < w) sm[tid] = ", LANES / 2);
  combine(r, ps->red, dt, "sm[tid]", "sm[tid + w]");
  fputs(";\n          TCK_SYNC();\n        }\n", f);
}

/* One REDUCE pass: rv<p> = the row's fold in the canonical order. */
static void emit_reduce(rd *r, int p)
{
  const kir_pass *ps = &r->k->pass[p];
  FILE *f = r->f;
  int dt = r->k->ins[ps->value].dtype;
  const char *T = ctype[dt];
  char id[64];
  identity(r, id, sizeof id, ps->red, dt);
  fprintf(f, "    %s rv%d;\n    {\n", T, p);
  fprintf(f, "      %s *const sm = (%s *)tck_smem;\n", T, T);
  fprintf(f, "      %s stk[64];\n      int sp = 0;\n", T);
  fprintf(f, "      for (int64_t cb = 0, rnd = 0; cb < nch; cb += cpb, "
          "rnd++) {\n");
  emit_chunk_partials(r, p);
  /* the round's chunk partials (slots 16 c) pairwise by levels */
  fprintf(f, "        int64_t m = nch - cb < cpb ? nch - cb : cpb;\n"
          "        while (m > 1) {\n"
          "          const int64_t half = m / 2;\n"
          "          const int64_t odd = m & 1;\n"
          "          %s x = %s;\n"
          "          if (tid < half) x = ", T, id);
  combine(r, ps->red, dt, "sm[2 * tid * 16]", "sm[(2 * tid + 1) * 16]");
  fputs(";\n"
        "          else if (tid == half && odd) x = sm[(m - 1) * 16];\n"
        "          TCK_SYNC();\n"
        "          if (tid < half || (tid == half && odd)) sm[tid * 16] = x;\n"
        "          TCK_SYNC();\n"
        "          m = half + odd;\n"
        "        }\n", f);
  /* thread 0: the round's node onto the binary-counter stack */
  fprintf(f, "        if (tid == 0) {\n"
          "          %s x = sm[0];\n"
          "          for (int64_t t = rnd; t & 1; t >>= 1) {\n"
          "            const %s top = stk[--sp];\n"
          "            x = ", T, T);
  combine(r, ps->red, dt, "top", "x");
  fputs(";\n          }\n          stk[sp++] = x;\n        }\n"
        "        TCK_SYNC();\n      }\n", f);
  fprintf(f, "      if (tid == 0) {\n"
          "        %s x = stk[sp - 1];\n"
          "        for (int q = sp - 2; q >= 0; q--) x = ", T);
  combine(r, ps->red, dt, "stk[q]", "x");
  fputs(";\n        sm[0] = x;\n      }\n      TCK_SYNC();\n", f);
  fprintf(f, "      rv%d = sm[0];\n      TCK_SYNC();\n    }\n", p);
}

/* A STORE_ROW pass: thread 0 writes the row's value. */
static void emit_store_row(rd *r, int p)
{
  r->where = "row";
  fputs("    if (tid == 0) {\n", r->f);
  emit_values(r, &r->k->pass[p].value, 1, "      ");
  emit_store(r, r->k->pass[p].out, r->k->pass[p].value, "      ");
  fputs("    }\n    TCK_SYNC();\n", r->f);
}

/* The block's index variables and the row's chunk count. */
static void emit_row_setup(rd *r)
{
  fprintf(r->f, "  const int64_t tid = threadIdx.x, nthr = blockDim.x;\n"
          "  const int64_t nch = rowlen > 0 ? (rowlen + %d) / %d : 1;\n"
          "  const int64_t cpb = nthr / %d;\n"
          "  (void)nch; (void)cpb;\n", CHUNK - 1, CHUNK, LANES);
}

static void emit_rows(rd *r)
{
  const kir_kernel *k = r->k;
  FILE *f = r->f;
  emit_row_setup(r);
  fputs("  for (int64_t row = lo + blockIdx.x; row < hi; row += gridDim.x) {\n",
        f);
  emit_offsets(r, "row", "rb");
  for (int p = 0; p < k->npasses;) {
    const kir_pass *ps = &k->pass[p];
    if (ps->kind == KIR_PASS_REDUCE) {
      emit_reduce(r, p);
      p++;
    } else if (ps->kind == KIR_PASS_STORE_ROW) {
      emit_store_row(r, p);
      p++;
    } else {   /* consecutive STORE passes share one loop */
      int q = p, vals[KIR_MAX_PASSES], n = 0;
      while (q < k->npasses && k->pass[q].kind == KIR_PASS_STORE)
        vals[n++] = k->pass[q++].value;
      r->where = "pos";
      fputs("    for (int64_t pos = tid; pos < rowlen; pos += nthr) {\n", f);
      emit_values(r, vals, n, "      ");
      for (int s = p; s < q; s++)
        emit_store(r, k->pass[s].out, k->pass[s].value, "      ");
      fputs("    }\n    TCK_SYNC();\n", f);
      p = q;
    }
  }
  fputs("  }\n", f);
}

/* -- Sequential rows ---------------------------------------------------------
** A kernel of SCAN and SCATTER passes (kir_sequential). SCATTER: a thread
** per row (grid-stride over rows, as MAP over points), positions in order,
** as the CPU's loop takes them. SCAN: tensor.h's canonical scan order, in
** one of two forms that give the same bits (jcuda_scan_parallel): a thread
** walking its row segment after segment, or, for rows of several segments
** that are not too many, a block per row whose threads fold a segment each,
** thread 0 then carrying the segment totals along in order, and each
** thread writing its segment with its carry in front. */

#define SEG TENSOR_SCAN_SEG

/* sv = carry (+) acc, stored at pos: the scan's value there. */
static void emit_scan_store(rd *r, const kir_pass *ps, const char *carry,
                            const char *indent)
{
  int dt = r->k->ins[ps->value].dtype;
  fprintf(r->f, "%s{\n%s  const %s sv = ", indent, indent, ctype[dt]);
  combine(r, ps->red, dt, carry, "acc");
  fputs(";\n", r->f);
  char in2[32];
  snprintf(in2, sizeof in2, "%s  ", indent);
  emit_store_of(r, ps->out, "sv", dt, in2);
  fprintf(r->f, "%s}\n", indent);
}

/* acc = acc (+) v. */
static void emit_scan_fold(rd *r, const kir_pass *ps, const char *v,
                           const char *indent)
{
  int dt = r->k->ins[ps->value].dtype;
  fprintf(r->f, "%sacc = ", indent);
  combine(r, ps->red, dt, "acc", v);
  fputs(";\n", r->f);
}

/* The scan's dtype, checked, and its identity in id. */
static int scan_dtype(rd *r, int p, char *id, size_t idlen)
{
  const kir_pass *ps = &r->k->pass[p];
  int dt = r->k->ins[ps->value].dtype;
  if (!kir_seq_dtype(dt))
    fail(r, "pass%d: a scan of %s", p, dt);
  identity(r, id, idlen, ps->red, dt);
  return dt;
}

/* Positions [from, e) of this thread's segment one by one: each folded
** into acc and, unless carry is NULL, carry (+) acc stored there. */
static void emit_segment_walk(rd *r, const kir_pass *ps, const char *from,
                              const char *carry)
{
  char v[24];
  snprintf(v, sizeof v, "v%d", ps->value);
  fprintf(r->f, "        for (int64_t pos = %s; pos < e; pos++) {\n", from);
  emit_values(r, &ps->value, 1, "          ");
  emit_scan_fold(r, ps, v, "          ");
  if (carry)
    emit_scan_store(r, ps, carry, "          ");
  fputs("        }\n", r->f);
}

/* A SCAN pass walked by one thread. The folds are one chain, so the
** thread's time goes to waiting on its loads: they are issued SCAN_BATCH
** positions at a time, ahead of that batch's folds and stores (safe as a
** scan stores into a fresh buffer: cuda_cumsum's), then the segment's
** last positions one by one. The same folds in the same order. */
#define SCAN_BATCH 16

static void emit_scan(rd *r, int p)
{
  const kir_pass *ps = &r->k->pass[p];
  FILE *f = r->f;
  char id[64], v[24];
  int dt = scan_dtype(r, p, id, sizeof id);
  const char *T = ctype[dt];
  snprintf(v, sizeof v, "v%d", ps->value);
  r->where = "pos";
  fprintf(f, "    {\n      %s carry = %s;\n"
          "      for (int64_t seg = 0; seg < rowlen; seg += %d) {\n"
          "        const int64_t e = rowlen - seg < %d ? rowlen : seg + %d;\n"
          "        %s acc = %s;\n        int64_t at = seg;\n"
          "        for (; at + %d <= e; at += %d) {\n"
          "          %s vb[%d];\n"
          "          TCK_UNROLL\n"
          "          for (int u = 0; u < %d; u++) {\n"
          "            const int64_t pos = at + u;\n", T, id, SEG, SEG, SEG,
          T, id, SCAN_BATCH, SCAN_BATCH, T, SCAN_BATCH, SCAN_BATCH);
  emit_values(r, &ps->value, 1, "            ");
  fprintf(f, "            vb[u] = %s;\n          }\n"
          "          TCK_UNROLL\n"
          "          for (int u = 0; u < %d; u++) {\n"
          "            const int64_t pos = at + u;\n", v, SCAN_BATCH);
  emit_scan_fold(r, ps, "vb[u]", "            ");
  emit_scan_store(r, ps, "carry", "            ");
  fputs("          }\n        }\n", f);
  emit_segment_walk(r, ps, "at", "carry");
  fputs("        carry = ", f);
  combine(r, ps->red, dt, "carry", "acc");
  fputs(";\n      }\n    }\n", f);
}


/* A SCAN pass by the block: rounds of nthr segments, thread t folding
** segment round + t; thread 0 replaces each total in shared memory by the
** carry before it (the totals folded in order, the carry kept across
** rounds); then each thread walks its segment again, storing. */
static void emit_scan_block(rd *r, int p)
{
  const kir_pass *ps = &r->k->pass[p];
  FILE *f = r->f;
  char id[64];
  int dt = scan_dtype(r, p, id, sizeof id);
  const char *T = ctype[dt];
  r->where = "pos";
  fprintf(f, "    {\n      %s *const sm = (%s *)tck_smem;\n"
          "      %s carry = %s;\n"
          "      const int64_t nseg = (rowlen + %d) / %d;\n"
          "      for (int64_t sb = 0; sb < nseg; sb += nthr) {\n"
          "        const int64_t seg = (sb + tid) * %d;\n"
          "        const int64_t e = rowlen - seg < %d ? rowlen : seg + %d;\n"
          "        %s acc = %s;\n", T, T, T, id, SEG - 1, SEG, SEG, SEG, SEG,
          T, id);
  emit_segment_walk(r, ps, "seg", NULL);
  fprintf(f, "        sm[tid] = acc;\n        TCK_SYNC();\n"
          "        if (tid == 0) {\n"
          "          const int64_t m = nseg - sb < nthr ? nseg - sb : nthr;\n"
          "          for (int64_t j = 0; j < m; j++) {\n"
          "            const %s t = sm[j];\n"
          "            sm[j] = carry;\n"
          "            carry = ", T);
  combine(r, ps->red, dt, "carry", "t");
  fprintf(f, ";\n          }\n        }\n        TCK_SYNC();\n"
          "        const %s carried = sm[tid];\n        acc = %s;\n", T, id);
  emit_segment_walk(r, ps, "seg", "carried");
  fputs("        TCK_SYNC();\n      }\n    }\n", f);
}

/* A SCATTER pass: each position's value folded into the element its index
** picks along the buffer's gathered axis (clamped as GATHER clamps), the
** positions in order. Each fold reads what the one before stored, so a
** position at a time would wait on two loads in turn (its index, then the
** element); instead SCATTER_BATCH positions' indices, values and elements
** are loaded together, folded in order in registers (a position whose
** element an earlier one of the batch folded into takes that fold's
** result: the element as the loop would read it) and stored in order, the
** last store to an element being its last fold. The same folds in the
** same order; the row's last positions go one by one. */
#define SCATTER_BATCH 16

/* `T *const at = ...`: the element position pos folds into. */
static void emit_scatter_place(rd *r, const kir_pass *ps, const char *indent)
{
  const kir_buf *bf = &r->k->buf[ps->out];
  int64_t top = bf->gsize > 0 ? bf->gsize - 1 : 0;
  emit_values(r, (const int[]){ ps->index, ps->value }, 2, indent);
  fprintf(r->f, "%sconst int64_t j = v%d < 0 ? (int64_t)0 : v%d > %" PRId64
          " ? (int64_t)%" PRId64 " : v%d;\n", indent, ps->index, ps->index,
          top, top, ps->index);
  fprintf(r->f, "%s%s *const at = &(&", indent, ctype[bf->dtype]);
  load_at(r, ps->out);
  fprintf(r->f, ")[j * %" PRId64 "];\n", bf->gstride);
}

/* Does value v read buffer b (a LOAD or GATHER of it)? */
static bool value_reads(const kir_kernel *k, int v, int b)
{
  uint8_t mark[KIR_MAX_INSTRS] = { 0 };
  closure(k, v, mark);
  for (int i = 0; i <= v; i++)
    if (mark[i] && (k->ins[i].op == KOP_LOAD || k->ins[i].op == KOP_GATHER) &&
        k->ins[i].ref == b)
      return true;
  return false;
}

/* Positions [sat, ...) in batches while a whole one fits: sat advanced. */
static void emit_scatter_batches(rd *r, const kir_pass *ps)
{
  FILE *f = r->f;
  int dt = r->k->buf[ps->out].dtype, B = SCATTER_BATCH;
  const char *T = ctype[dt];
  fprintf(f, "      for (; sat + %d <= rowlen; sat += %d) {\n"
          "        %s *pb[%d];\n        %s vb[%d], ob[%d];\n"
          "        TCK_UNROLL\n"
          "        for (int u = 0; u < %d; u++) {\n"
          "          const int64_t pos = sat + u;\n", B, B, T, B, T, B, B, B);
  emit_scatter_place(r, ps, "          ");
  fprintf(f, "          pb[u] = at;\n          vb[u] = v%d;\n        }\n"
          "        TCK_UNROLL\n"
          "        for (int u = 0; u < %d; u++)\n          ob[u] = *pb[u];\n"
          "        TCK_UNROLL\n"
          "        for (int u = 0; u < %d; u++) {\n"
          "          %s cur = ob[u];\n"
          "          TCK_UNROLL\n"
          "          for (int w = 0; w < u; w++)\n"
          "            cur = pb[w] == pb[u] ? ob[w] : cur;\n"
          "          ob[u] = ", ps->value, B, B, T);
  combine(r, ps->red, dt, "cur", "vb[u]");
  fprintf(f, ";\n        }\n"
          "        TCK_UNROLL\n"
          "        for (int u = 0; u < %d; u++)\n          *pb[u] = ob[u];\n"
          "      }\n", B);
}

static void emit_scatter(rd *r, int p)
{
  const kir_pass *ps = &r->k->pass[p];
  FILE *f = r->f;
  int dt = r->k->buf[ps->out].dtype;
  char v[24];
  if (!kir_seq_dtype(dt) || r->k->ins[ps->value].dtype != dt ||
      r->k->ins[ps->index].dtype != TC_I64)
    fail(r, "pass%d: a scatter into %s of another dtype or index", p, dt);
  snprintf(v, sizeof v, "v%d", ps->value);
  r->where = "pos";
  fputs("    {\n      int64_t sat = 0;\n", f);
  /* (a value reading the buffer it folds into goes one by one) */
  if (!value_reads(r->k, ps->value, ps->out) &&
      !value_reads(r->k, ps->index, ps->out))
    emit_scatter_batches(r, ps);
  fputs("      for (int64_t pos = sat; pos < rowlen; pos++) {\n", f);
  emit_scatter_place(r, ps, "        ");
  fputs("        *at = ", f);
  combine(r, ps->red, dt, "*at", v);
  fputs(";\n      }\n    }\n", f);
}

bool jcuda_scan_parallel(const kir_kernel *k)
{
  if (!kir_sequential(k))
    return false;
  for (int p = 0; p < k->npasses; p++)
    if (k->pass[p].kind != KIR_PASS_SCAN)
      return false;
  return true;
}

/* Every pass, each by one thread (block false) or by the block. */
static void emit_seq_passes(rd *r, bool block)
{
  const kir_kernel *k = r->k;
  for (int p = 0; p < k->npasses; p++)
    if (k->pass[p].kind == KIR_PASS_SCAN)
      block ? emit_scan_block(r, p) : emit_scan(r, p);
    else if (k->pass[p].kind == KIR_PASS_SCATTER)
      emit_scatter(r, p);
    else
      fail(r, "pass%d: not sequential, in a sequential kernel (a value of "
           "%s)", p, k->ins[k->pass[p].value].dtype);
}

static void emit_seq_rows(rd *r)
{
  FILE *f = r->f;
  emit_step(r);
  if (jcuda_scan_parallel(r->k)) {   /* the launch's test (launch.c) */
    emit_row_setup(r);
    fprintf(f, "  if (rowlen > %d && hi - lo <= %d) {\n"
            "  for (int64_t row = lo + blockIdx.x; row < hi; "
            "row += gridDim.x) {\n", SEG, JCUDA_SCAN_BLOCK_ROWS);
    emit_offsets(r, "row", "rb");
    emit_seq_passes(r, true);
    fputs("  }\n  return;\n  }\n", f);
  }
  emit_grid_stride(r, "row", "lo", "rb");
  emit_seq_passes(r, false);
  fputs("  }\n", f);
}

/* -- Split reductions ------------------------------------------------------ */

bool jcuda_splittable(const kir_kernel *k)
{
  if (k->kind != KIR_ROWS || k->npasses < 1 ||
      k->pass[0].kind != KIR_PASS_REDUCE)
    return false;
  for (int p = 1; p < k->npasses; p++)
    if (k->pass[p].kind != KIR_PASS_STORE_ROW)
      return false;
  return true;
}

static void emit_split_head(rd *r, const char *name)
{
  fprintf(r->f, "\nTCK_KERNEL %s(char *const *bufs, const double *scalars, "
          "const int64_t *dims, char *scratch, int64_t lo, int64_t hi)\n{\n",
          name);
  emit_setup(r);
  emit_row_setup(r);
}

/* Phase 1: blocks take rounds of cpb chunks (any row, any round: units
** row * nrnd + round, grid-stride) and write each chunk's partial to
** scratch[(row - lo) * nch + chunk]. No value depends on the block size:
** a chunk's partial is fixed by the chunk and lane structure alone. */
static void emit_split_partials(rd *r)
{
  FILE *f = r->f;
  const kir_pass *ps = &r->k->pass[0];
  const char *T = ctype[r->k->ins[ps->value].dtype];
  emit_split_head(r, JCUDA_SPLIT_PARTIALS);
  fputs("  const int64_t nrnd = (nch + cpb - 1) / cpb;\n"
        "  for (int64_t u = lo * nrnd + blockIdx.x; u < hi * nrnd; "
        "u += gridDim.x) {\n"
        "    const int64_t row = u / nrnd, cb = u % nrnd * cpb;\n", f);
  emit_offsets(r, "row", "rb");
  fprintf(f, "    {\n      %s *const sm = (%s *)tck_smem;\n", T, T);
  emit_chunk_partials(r, 0);
  fprintf(f, "        if (l == 0 && c < nch) ((%s *)scratch)[(row - lo) * "
          "nch + c] = sm[tid];\n        TCK_SYNC();\n    }\n  }\n}\n", T);
}

/* Phase 2: a block per row combines the row's nch chunk partials in the
** canonical pairwise order: thread t takes the aligned segment [t seg,
** (t + 1) seg) (seg the least power of two with seg * blockDim >= nch) and
** combines it pairwise by levels in place, which is the canonical tree's
** node for that segment; the segment nodes are then combined pairwise by
** levels in shared memory (the tree's upper levels). Then the STORE_ROW
** passes. */
static void emit_split_combine(rd *r)
{
  FILE *f = r->f;
  const kir_pass *ps = &r->k->pass[0];
  int dt = r->k->ins[ps->value].dtype;
  const char *T = ctype[dt];
  char id[64];
  identity(r, id, sizeof id, ps->red, dt);
  emit_split_head(r, JCUDA_SPLIT_COMBINE);
  fputs("  int64_t seg = 1;\n  while (seg * nthr < nch) seg *= 2;\n"
        "  for (int64_t row = lo + blockIdx.x; row < hi; row += gridDim.x) {\n",
        f);
  emit_offsets(r, "row", "rb");
  fprintf(f, "    %s rv0;\n    {\n"
          "      %s *const sm = (%s *)tck_smem;\n"
          "      int64_t m = nch - tid * seg < seg ? nch - tid * seg : seg;\n"
          "      %s x = %s;\n"
          "      if (m > 0) {\n"
          "        %s *const q = (%s *)scratch + (row - lo) * nch + tid * seg;\n"
          "        while (m > 1) {\n"
          "          const int64_t h = m / 2;\n"
          "          for (int64_t i = 0; i < h; i++) q[i] = ", T, T, T, T, id,
          T, T);
  combine(r, ps->red, dt, "q[2 * i]", "q[2 * i + 1]");
  fprintf(f, ";\n"
          "          if (m & 1) q[h] = q[m - 1];\n"
          "          m = h + (m & 1);\n"
          "        }\n"
          "        x = q[0];\n"
          "      }\n"
          "      sm[tid] = x;\n      TCK_SYNC();\n"
          "      int64_t mm = (nch + seg - 1) / seg;\n"
          "      while (mm > 1) {\n"
          "        const int64_t half = mm / 2, odd = mm & 1;\n"
          "        %s y = %s;\n"
          "        if (tid < half) y = ", T, id);
  combine(r, ps->red, dt, "sm[2 * tid]", "sm[2 * tid + 1]");
  fputs(";\n"
        "        else if (tid == half && odd) y = sm[mm - 1];\n"
        "        TCK_SYNC();\n"
        "        if (tid < half || (tid == half && odd)) sm[tid] = y;\n"
        "        TCK_SYNC();\n"
        "        mm = half + odd;\n"
        "      }\n"
        "      rv0 = sm[0];\n      TCK_SYNC();\n    }\n", f);
  for (int p = 1; p < r->k->npasses; p++)
    emit_store_row(r, p);
  fputs("  }\n}\n", f);
}

/* -- The launch entry ------------------------------------------------------ */

void jcuda_params_counts(const kir_kernel *k, int *nbufs, int *nscalars,
                         int *ndims)
{
  /* C++ has no zero-length arrays: every array holds at least one word */
  *nbufs = k->nbufs > 0 ? k->nbufs : 1;
  *nscalars = k->nscalars > 0 ? k->nscalars : 1;
  *ndims = k->dynamic && kir_dyn_len(k) > 0 ? kir_dyn_len(k) : 1;
}

size_t jcuda_params_size(const kir_kernel *k)
{
  int nb, ns, nd;
  jcuda_params_counts(k, &nb, &ns, &nd);
  return (size_t)(nb + ns + nd + 2 + (jcuda_splittable(k) ? 2 : 0)) * 8;
}

void jcuda_params_pack(const kir_kernel *k, void *out, char *const *bufs,
                       const double *scalars, const int64_t *dims,
                       int64_t lo, int64_t hi)
{
  int nb, ns, nd;
  jcuda_params_counts(k, &nb, &ns, &nd);
  char *w = out;
  memset(w, 0, jcuda_params_size(k));
  memcpy(w, bufs, sizeof(char *) * (size_t)k->nbufs);
  w += 8 * (size_t)nb;
  if (scalars)
    memcpy(w, scalars, sizeof(double) * (size_t)k->nscalars);
  w += 8 * (size_t)ns;
  if (k->dynamic && dims)
    memcpy(w, dims, sizeof(int64_t) * (size_t)kir_dyn_len(k));
  w += 8 * (size_t)nd;
  memcpy(w, &lo, 8);
  memcpy(w + 8, &hi, 8);
}

void jcuda_params_split(const kir_kernel *k, void *out, jcuda_ptr scratch,
                        int phase)
{
  int nb, ns, nd;
  jcuda_params_counts(k, &nb, &ns, &nd);
  char *w = (char *)out + (size_t)(nb + ns + nd + 2) * 8;
  int64_t ph = phase;
  memcpy(w, &scratch, 8);
  memcpy(w + 8, &ph, 8);
}

/* tck_params (the launch's one parameter, passed by value: a device launch
** cannot take host pointers to arrays) and tck_entry, which unpacks it. A
** host build gets a trampoline taking a pointer to the same struct, so a
** fake driver can run the text as a device would; its pointers go through
** the shim's TCK_HOST_PTR (the fake's device addresses are tagged so that
** the host cannot use them by mistake). Every member is 8 bytes wide: the
** layout is jcuda_params_pack's flat array of words. */
static void emit_entry(FILE *f, const kir_kernel *k)
{
  int nb, ns, nd;
  bool split = jcuda_splittable(k);
  jcuda_params_counts(k, &nb, &ns, &nd);
  fprintf(f, "\ntypedef struct {\n  char *bufs[%d];\n  double scalars[%d];\n"
          "  int64_t dims[%d];\n  int64_t lo, hi;\n%s} tck_params;\n", nb, ns,
          nd, split ? "  char *scratch;\n  int64_t phase;\n" : "");
  /* a split kernel's entry runs phase 1, 2 or (0) the block-per-row form */
  static const char *const call[2][2] = {
    { "  tck_main(p.bufs, p.scalars, p.dims, p.lo, p.hi);\n",
      "  tck_main(p->bufs, p->scalars, p->dims, p->lo, p->hi);\n" },
    { "  if (p.phase == 1)\n    " JCUDA_SPLIT_PARTIALS
      "(p.bufs, p.scalars, p.dims, p.scratch, p.lo, p.hi);\n"
      "  else if (p.phase == 2)\n    " JCUDA_SPLIT_COMBINE
      "(p.bufs, p.scalars, p.dims, p.scratch, p.lo, p.hi);\n"
      "  else\n    tck_main(p.bufs, p.scalars, p.dims, p.lo, p.hi);\n",
      "  if (p->phase == 1)\n    " JCUDA_SPLIT_PARTIALS
      "(p->bufs, p->scalars, p->dims, p->scratch, p->lo, p->hi);\n"
      "  else if (p->phase == 2)\n    " JCUDA_SPLIT_COMBINE
      "(p->bufs, p->scalars, p->dims, p->scratch, p->lo, p->hi);\n"
      "  else\n    tck_main(p->bufs, p->scalars, p->dims, p->lo, p->hi);\n" },
  };
  fprintf(f, "#if defined(__CUDACC_RTC__)\n"
          "extern \"C\" __global__ void " JCUDA_LAUNCH_ENTRY
          "(const __grid_constant__ tck_params p)\n{\n%s}\n"
          "#else\n"
          "void " JCUDA_LAUNCH_ENTRY "(const tck_params *dev)\n{\n"
          "  tck_params host = *dev, *p = &host;\n"
          "  for (int i = 0; i < %d; i++)\n"
          "    host.bufs[i] = TCK_HOST_PTR(host.bufs[i]);\n%s%s}\n"
          "#endif\n", call[split][0], nb,
          split ? "  host.scratch = TCK_HOST_PTR(host.scratch);\n" : "",
          call[split][1]);
}

int jcuda_render_fma(void) { return APPROX_FMA; }

char *jcuda_render(const kir_kernel *k, char *reason, size_t rlen)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) {
    if (reason)
      snprintf(reason, rlen, "out of memory");
    return NULL;
  }
  rd r = { .f = f, .k = k, .where = "map" };
  fprintf(f, "/* tc kernel: CUDA C rendered from the kernel IR "
          "(src/jit_cuda/render.c, version %d) */\n", JCUDA_RENDER_VERSION);
  fputs(prelude, f);
  /* the host build's choice, so multiply-adds fuse exactly where eager's
  ** do (approx.h) */
  fprintf(f, "#define APPROX_FMA %d\n", APPROX_FMA);
  emit_math_text(f, k);
  bool seq = kir_sequential(k);
  if (k->kind == KIR_ROWS && (!seq || jcuda_scan_parallel(k)))
    /* one block's scratch, shared by every phase */
    fprintf(f, "\nTCK_SHARED uint64_t tck_smem[%d];\n", JCUDA_MAX_THREADS);
  r.vec = vec_plan(k, r.vmode);
  if (r.vec)
    emit_vec_types(&r);
  fputs("\nTCK_KERNEL tck_main(char *const *bufs, const double *scalars, "
        "const int64_t *dims, int64_t lo, int64_t hi)\n{\n", f);
  emit_setup(&r);
  if (k->kind == KIR_MAP)
    emit_map(&r);
  else if (seq)
    emit_seq_rows(&r);
  else
    emit_rows(&r);
  fputs("}\n", f);
  if (jcuda_splittable(k)) {
    emit_split_partials(&r);
    emit_split_combine(&r);
  }
  emit_entry(f, k);
  if (fclose(f) != 0 || r.bad) {
    if (reason)
      snprintf(reason, rlen, "%s", r.bad ? r.why : "out of memory");
    free(text);
    return NULL;
  }
  return text;
}
