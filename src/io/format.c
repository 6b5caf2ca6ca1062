/*
** format.c -- tc_format / tc_print: a tensor as PyTorch prints it
** (torch/_tensor_str.py with the default print options: precision 4,
** threshold 1000, edge items 3, line width 80), character for character.
*/
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

/* PyTorch's default print options. */
#define PRECISION 4
#define THRESHOLD 1000
#define EDGE 3
#define LINEWIDTH 80
#define PREFIX "tensor("
#define SUFFIX_MAX 256   /* "size=(" and 8 dims of 20 digits fit */

/* -- Output: snprintf semantics ------------------------------------------- */

/* Writes what fits (always NUL-terminated when size > 0) and counts all. */
typedef struct {
  char *buf;
  size_t size;
  size_t len;
  size_t col;   /* characters since the last newline */
} out_buf;

static void put(out_buf *o, const char *s, size_t n)
{
  if (o->len < o->size) {
    size_t room = o->size - 1 - o->len;
    memcpy(o->buf + o->len, s, n < room ? n : room);
  }
  o->len += n;
  const char *nl = memrchr(s, '\n', n);
  o->col = nl ? (size_t)(s + n - nl - 1) : o->col + n;
}

static void puts_(out_buf *o, const char *s) { put(o, s, strlen(s)); }

static void spaces(out_buf *o, int n)
{
  for (int i = 0; i < n; i++)
    put(o, " ", 1);
}

/* -- Elements ---------------------------------------------------------------- */

typedef struct {
  const tc_tensor *t;
  bool floating;
  bool boolean;
  bool summarize;   /* numel > THRESHOLD: show EDGE items at each end */
  /* the formatter (PyTorch's _Formatter), from the elements shown */
  bool int_mode;    /* floats that are all integral print as "3." */
  bool sci;         /* "%.4e" */
  int width;        /* every element is right-aligned to this */
} fmt;

static const char *elem_ptr(const tc_tensor *t, int64_t off)
{
  return (const char *)t->storage->data
         + off * (int64_t)tensor_dtype_size[t->dtype];
}

static double elem_f(const fmt *f, int64_t off)
{
  double v;
  eager_convert(TC_F64, &v, 1, (tc_dtype)f->t->dtype, elem_ptr(f->t, off),
                1, 1);
  return v;
}

static long long elem_i(const fmt *f, int64_t off)
{
  int64_t v;
  eager_convert(TC_I64, &v, 1, (tc_dtype)f->t->dtype, elem_ptr(f->t, off),
                1, 1);
  return (long long)v;
}

/* Python's str() of a float under the formatter's mode; unpadded. */
static int float_text(const fmt *f, double v, char *s, size_t n)
{
  if (isnan(v))
    return snprintf(s, n, "nan");   /* C would say -nan for some */
  if (isinf(v))
    return snprintf(s, n, v < 0 ? "-inf" : "inf");
  if (f->sci)
    return snprintf(s, n, "%.*e", PRECISION, v);
  if (f->int_mode)
    return snprintf(s, n, "%.0f.", v);
  return snprintf(s, n, "%.*f", PRECISION, v);
}

static int elem_text(const fmt *f, int64_t off, char *s, size_t n)
{
  if (f->floating)
    return float_text(f, elem_f(f, off), s, n);
  if (f->boolean)
    return snprintf(s, n, "%s", elem_i(f, off) ? "True" : "False");
  return snprintf(s, n, "%lld", elem_i(f, off));
}

/* -- Walking the elements shown ---------------------------------------------- */

/* Calls fn on every element that will be printed, in order: all of them,
** or with summarize only EDGE at each end of every long dim (PyTorch's
** get_summarized_data). */
typedef void (*elem_fn)(fmt *f, int64_t off, void *ctx);

static bool cut(const fmt *f, int64_t n) { return f->summarize && n > 2 * EDGE; }

static void walk(fmt *f, int d, int64_t off, elem_fn fn, void *ctx)
{
  const tc_tensor *t = f->t;
  if (d == t->ndim) {
    fn(f, off, ctx);
    return;
  }
  int64_t n = t->shape[d];
  for (int64_t i = 0; i < n; i++) {
    if (cut(f, n) && i == EDGE)
      i = n - EDGE;
    walk(f, d + 1, off + i * t->stride[d], fn, ctx);
  }
}

typedef struct {
  bool any;          /* a finite non-zero value was seen */
  double lo, hi;     /* their smallest and largest magnitude */
  bool integral;
} float_stats;

static void gather(fmt *f, int64_t off, void *ctx)
{
  float_stats *s = ctx;
  double v = elem_f(f, off);
  if (!isfinite(v) || v == 0)
    return;
  double a = fabs(v);
  s->lo = s->any && s->lo < a ? s->lo : a;
  s->hi = s->any && s->hi > a ? s->hi : a;
  s->integral &= v == ceil(v);
  s->any = true;
}

/* Width of the text of every finite non-zero float (others do not count),
** or of every integer and bool. */
static void measure(fmt *f, int64_t off, void *ctx)
{
  (void)ctx;
  char s[64];
  if (f->floating) {
    double v = elem_f(f, off);
    if (!isfinite(v) || v == 0)
      return;
  }
  int w = elem_text(f, off, s, sizeof s);
  if (w > f->width)
    f->width = w;
}

/* PyTorch's _Formatter: the mode and width from the elements shown. */
static void formatter_init(fmt *f)
{
  f->int_mode = true;
  f->sci = false;
  f->width = 1;
  if (f->floating) {
    float_stats s = { .integral = true };
    walk(f, 0, f->t->offset, gather, &s);
    if (!s.any)
      return;
    f->int_mode = s.integral;
    f->sci = s.hi / s.lo > 1000.0 || s.hi > 1.0e8 ||
             (!s.integral && s.lo < 1.0e-4);
  }
  walk(f, 0, f->t->offset, measure, NULL);
}

/* -- Layout (PyTorch's _tensor_str_with_formatter) ----------------------- */

static void element(out_buf *o, const fmt *f, int64_t off)
{
  char s[400];   /* the longest is a %.4f double below 1e8 or %lld */
  int n = elem_text(f, off, s, sizeof s);
  spaces(o, f->width - n);
  puts_(o, s);
}

/* The last dim: elements joined by ", ", as many per line as fit. */
static void vector(out_buf *o, const fmt *f, int64_t off, int indent)
{
  const tc_tensor *t = f->t;
  int d = t->ndim - 1;
  int64_t n = t->shape[d];
  double fit = floor((double)(LINEWIDTH - indent) / (f->width + 2));
  int64_t per_line = fit > 1 ? (int64_t)fit : 1;
  int64_t item = 0;   /* position in the list of items ("..." is one) */
  put(o, "[", 1);
  for (int64_t i = 0; i < n; i++, item++) {
    if (item > 0) {
      put(o, ",", 1);
      if (item % per_line == 0) {
        put(o, "\n", 1);
        spaces(o, indent + 1);
      } else {
        put(o, " ", 1);
      }
    }
    if (cut(f, n) && i == EDGE) {
      puts_(o, " ...");
      i = n - EDGE - 1;
      continue;
    }
    element(o, f, off + i * t->stride[d]);
  }
  put(o, "]", 1);
}

static void nested(out_buf *o, const fmt *f, int d, int64_t off, int indent)
{
  const tc_tensor *t = f->t;
  if (d == t->ndim - 1) {
    vector(o, f, off, indent);
    return;
  }
  int64_t n = t->shape[d];
  int rank = t->ndim - d;   /* of the sub-tensor printed here */
  put(o, "[", 1);
  for (int64_t i = 0; i < n; i++) {
    if (i > 0) {
      put(o, ",", 1);
      for (int k = 0; k < rank - 1; k++)
        put(o, "\n", 1);
      spaces(o, indent + 1);
    }
    if (cut(f, n) && i == EDGE) {
      puts_(o, "...");
      i = n - EDGE - 1;
      continue;
    }
    nested(o, f, d + 1, off + i * t->stride[d], indent + 1);
  }
  put(o, "]", 1);
}

/* -- Suffixes (PyTorch's _str_intern and _add_suffixes) -------------------- */

static const char *torch_dtype(tc_dtype dt)
{
  static const char *const names[TC_DTYPE__MAX] = {
    [TC_BOOL] = "torch.bool", [TC_I32] = "torch.int32",
    [TC_I64] = "torch.int64", [TC_F32] = "torch.float32",
    [TC_F64] = "torch.float64", [TC_F16] = "torch.float16",
    [TC_BF16] = "torch.bfloat16",
  };
  return names[dt] ? names[dt] : tc_dtype_name(dt);
}

/* Appends ", suffix", or ",\n", the indent and the suffix when the line
** would pass the width. *line starts as PyTorch's own arithmetic makes it
** (len - rfind("\n") + 1: the last line's length plus 2), kept so that
** lines break exactly where PyTorch's do. */
static void suffix(out_buf *o, size_t *line, const char *s)
{
  size_t n = strlen(s);
  if (*line + n + 2 > LINEWIDTH) {
    put(o, ",\n", 2);
    spaces(o, (int)strlen(PREFIX));
    *line = strlen(PREFIX) + n;
  } else {
    put(o, ", ", 2);
    *line += n + 2;
  }
  puts_(o, s);
}

/* -- The whole text ---------------------------------------------------------- */

static void body(out_buf *o, fmt *f)
{
  const tc_tensor *t = f->t;
  formatter_init(f);
  if (t->ndim == 0)
    element(o, f, t->offset);
  else
    nested(o, f, 0, t->offset, (int)strlen(PREFIX));
}

/* PyTorch's suffixes, in its order: the device (when not the CPU); for an
** empty tensor its size (unless 1-D) and any dtype but f32; else the dtype
** when not a default one (f32, i64, bool). */
static int suffixes(const tc_tensor *t, bool cuda, char (*sufs)[SUFFIX_MAX])
{
  int ns = 0;
  tc_dtype dt = (tc_dtype)t->dtype;
  if (cuda)
    snprintf(sufs[ns++], SUFFIX_MAX, "device='cuda:0'");
  if (t->numel == 0) {
    if (t->ndim != 1) {
      int k = snprintf(sufs[ns], SUFFIX_MAX, "size=(");
      for (int i = 0; i < t->ndim && k < SUFFIX_MAX; i++)
        k += snprintf(sufs[ns] + k, SUFFIX_MAX - (size_t)k, "%s%lld", i ? ", " : "",
                      (long long)t->shape[i]);
      if (k < SUFFIX_MAX)
        snprintf(sufs[ns] + k, SUFFIX_MAX - (size_t)k, ")");
      ns++;
    }
    if (dt != TC_F32)
      snprintf(sufs[ns++], SUFFIX_MAX, "dtype=%s", torch_dtype(dt));
  } else if (dt != TC_F32 && dt != TC_I64 && dt != TC_BOOL) {
    snprintf(sufs[ns++], SUFFIX_MAX, "dtype=%s", torch_dtype(dt));
  }
  return ns;
}

/* t (on the host) as PyTorch prints it; cuda: it is a device tensor's
** copy. */
static void format_into(out_buf *o, tc_tensor *t, bool cuda)
{
  fmt f = { .t = t, .floating = tensor_dtype_is_float((tc_dtype)t->dtype),
            .boolean = t->dtype == TC_BOOL,
            .summarize = t->numel > THRESHOLD };
  puts_(o, PREFIX);
  if (t->numel == 0)
    puts_(o, "[]");
  else
    body(o, &f);
  char sufs[3][SUFFIX_MAX];
  int ns = suffixes(t, cuda, sufs);
  size_t line = o->col + 2;
  for (int i = 0; i < ns; i++)
    suffix(o, &line, sufs[i]);
  put(o, ")", 1);
}

static bool readable(const char *fn, tc_tensor *t)
{
  if (!tensor_arg_ok(fn, t) || tensor_make_readable(t) < 0)
    return false;
  if (!t->storage) {
    tc_seterr(TC_E_INTERNAL, "%s: tensor is not materialized", fn);
    return false;
  }
  return true;
}

int tc_format(tc_tensor *t, char *buf, size_t size)
{
  eager_init();
  if (!readable(__func__, t))
    return -1;
  if (!buf && size > 0)
    return tc_seterr_null(__func__), -1;
  /* a device tensor's values are read from a copy on the host */
  bool cuda = tensor_device_of(t) == TC_DEV_CUDA;
  tc_tensor *h = eager_on_host(t);
  if (!h)
    return -1;
  out_buf o = { .buf = buf, .size = size };
  format_into(&o, h, cuda);
  tensor_unref(h);
  if (size > 0)
    buf[o.len < size ? o.len : size - 1] = '\0';
  if (o.len > INT_MAX)
    return tc_seterr(TC_E_ARG, "tc_format: the text is longer than INT_MAX"),
           -1;
  return (int)o.len;
}

int tc_print(tc_tensor *t)
{
  int n = tc_format(t, NULL, 0);
  if (n < 0)
    return -1;
  char *s = malloc((size_t)n + 1);
  if (!s)
    return tc_seterr(TC_E_NOMEM, "tc_print: out of memory"), -1;
  tc_format(t, s, (size_t)n + 1);
  int rc = puts(s) < 0 ? -1 : 0;
  free(s);
  if (rc < 0)
    tc_seterr(TC_E_ARG, "tc_print: writing to stdout failed");
  return rc;
}
