/*
** json.c -- a small, strict JSON reader for safetensors headers, which are
** untrusted input: objects, arrays, strings and non-negative integers only
** (true, false, null, signs, fractions and exponents are errors), bounded
** depth, array length and value count, valid UTF-8, no NUL in strings, no duplicate keys. Every error
** names the byte where it was found.
*/
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

/* Bounds that keep a hostile header's memory small (about 50 bytes per
** value): a safetensors header holds short arrays (shape, data_offsets)
** and about 15 values per tensor. */
#define MAX_DEPTH 16
#define MAX_ARRAY 64
#define MAX_VALUES (1 << 20)

typedef struct {
  const char *s;
  size_t n, i;
  int depth;
  int values;   /* parsed so far, against MAX_VALUES */
  char *err;
  size_t errlen;
} parser;

__attribute__((format(printf, 2, 3)))
static int fail(parser *p, const char *fmt, ...)
{
  int k = snprintf(p->err, p->errlen, "at byte %zu: ", p->i);
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < p->errlen)
    vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

static void skip_ws(parser *p)
{
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                         p->s[p->i] == '\n' || p->s[p->i] == '\r'))
    p->i++;
}

static bool eat(parser *p, char c)
{
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == c) {
    p->i++;
    return true;
  }
  return false;
}

/* -- UTF-8 --------------------------------------------------------------- */

bool io_utf8_valid(const char *str, size_t n)
{
  const unsigned char *s = (const unsigned char *)str;
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
              : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || i + (size_t)len > n)
      return false;
    uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
    for (int k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80)
        return false;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += (size_t)len;
  }
  return true;
}

static size_t utf8_put(char *out, uint32_t cp)
{
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | cp >> 12);
    out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | cp >> 18);
  out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* -- Strings ----------------------------------------------------------------- */

static int hex4(parser *p, uint32_t *out)
{
  if (p->n - p->i < 4)
    return fail(p, "truncated \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->s[p->i++];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0)
      return p->i--, fail(p, "bad hex digit in \\u escape");
    v = v << 4 | (uint32_t)d;
  }
  *out = v;
  return 0;
}

/* One escape after the backslash, appended to out at *k. Errors name the
** backslash's byte. */
static int escape(parser *p, char *out, size_t *k)
{
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  size_t at = p->i - 1;
  char c = p->s[p->i++];
  const char *e = c ? strchr(from, c) : NULL;
  if (e) {
    out[(*k)++] = to[e - from];
    return 0;
  }
  if (c != 'u') {
    p->i = at;
    return fail(p, "bad escape '\\%c'", c > 0x20 && c < 0x7f ? c : '?');
  }
  uint32_t cp, lo = 0;
  if (hex4(p, &cp) < 0)
    return -1;
  bool pair = cp >= 0xd800 && cp <= 0xdbff;
  if (pair && p->n - p->i >= 2 && p->s[p->i] == '\\' &&
      p->s[p->i + 1] == 'u') {
    p->i += 2;
    if (hex4(p, &lo) < 0)
      return -1;
  }
  if ((pair && (lo < 0xdc00 || lo > 0xdfff)) ||
      (cp >= 0xdc00 && cp <= 0xdfff)) {
    p->i = at;
    return fail(p, "unpaired surrogate in \\u escape");
  }
  if (cp == 0) {
    p->i = at;
    return fail(p, "NUL (\\u0000) in a string");
  }
  if (pair)
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  *k += utf8_put(out + *k, cp);
  return 0;
}

/* A string at the current '"'; *out is malloc'd and NUL-terminated. */
static int string(parser *p, char **out)
{
  size_t start = ++p->i, end = start;
  while (end < p->n && p->s[end] != '"')   /* bound the decoded length */
    end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->n) {
    p->i = start - 1;   /* name the opening quote */
    return fail(p, "unterminated string");
  }
  char *s = malloc(end - start + 1);
  if (!s)
    return fail(p, "out of memory");
  size_t k = 0;
  while (p->s[p->i] != '"') {
    unsigned char c = (unsigned char)p->s[p->i];
    if (c < 0x20) {
      free(s);
      return fail(p, "control character 0x%02x in a string", c);
    }
    p->i++;
    if (c != '\\')
      s[k++] = (char)c;
    else if (escape(p, s, &k) < 0)
      return free(s), -1;
  }
  p->i++;
  s[k] = '\0';
  if (!io_utf8_valid(s, k)) {
    free(s);
    p->i = start;
    return fail(p, "string is not valid UTF-8");
  }
  *out = s;
  return 0;
}

/* -- Numbers ----------------------------------------------------------------- */

static int number(parser *p, uint64_t *out)
{
  const char *s = p->s;
  if (s[p->i] == '-')
    return fail(p, "negative number (only non-negative integers are "
                "expected)");
  if (s[p->i] == '0' && p->i + 1 < p->n && s[p->i + 1] >= '0' &&
      s[p->i + 1] <= '9')
    return fail(p, "number with a leading zero");
  uint64_t v = 0;
  size_t start = p->i;
  while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (uint64_t)(s[p->i] - '0'), &v)) {
      p->i = start;
      return fail(p, "number does not fit in 64 bits");
    }
    p->i++;
  }
  if (p->i < p->n && (s[p->i] == '.' || s[p->i] == 'e' || s[p->i] == 'E'))
    return fail(p, "fraction or exponent (only integers are expected)");
  *out = v;
  return 0;
}

/* -- Values ------------------------------------------------------------------ */

static int value(parser *p, json_value *v);

/* Appends an empty slot to v's items (and keys, for objects). */
static json_value *grow(parser *p, json_value *v, int *cap)
{
  if (v->kind == JSON_ARRAY && v->n == MAX_ARRAY)
    return fail(p, "array longer than %d elements", MAX_ARRAY), NULL;
  if (++p->values > MAX_VALUES)
    return fail(p, "more than %d values", MAX_VALUES), NULL;
  if (v->n == *cap) {
    int c = *cap ? *cap * 2 : 4;
    json_value *items = realloc(v->items, sizeof *items * (size_t)c);
    if (!items)
      return fail(p, "out of memory"), NULL;
    v->items = items;
    if (v->kind == JSON_OBJECT) {
      char **keys = realloc(v->keys, sizeof *keys * (size_t)c);
      if (!keys)
        return fail(p, "out of memory"), NULL;
      v->keys = keys;
    }
    *cap = c;
  }
  json_value *it = &v->items[v->n];
  memset(it, 0, sizeof *it);
  return it;
}

static int cmp_key(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keys are unique: sort a copy of the pointers and compare neighbours.
** The error names the object's opening brace, at byte start. */
static int unique_keys(parser *p, const json_value *o, size_t start)
{
  if (o->n < 2)
    return 0;
  char **k = malloc(sizeof *k * (size_t)o->n);
  if (!k)
    return fail(p, "out of memory");
  memcpy(k, o->keys, sizeof *k * (size_t)o->n);
  qsort(k, (size_t)o->n, sizeof *k, cmp_key);
  int rc = 0;
  for (int i = 1; i < o->n && rc == 0; i++)
    if (strcmp(k[i - 1], k[i]) == 0) {
      p->i = start;
      rc = fail(p, "object has the key \"%.64s\" twice", k[i]);
    }
  free(k);
  return rc;
}

/* Elements (or members) up to the closing bracket; the opener is eaten. */
static int members(parser *p, json_value *v, char close)
{
  size_t start = p->i - 1;
  int cap = 0;
  if (eat(p, close))
    return 0;
  do {
    json_value *it = grow(p, v, &cap);
    if (!it)
      return -1;
    if (v->kind == JSON_OBJECT) {
      skip_ws(p);
      if (p->i >= p->n || p->s[p->i] != '"')
        return fail(p, "expected a string key");
      if (string(p, &v->keys[v->n]) < 0)
        return -1;
      if (!eat(p, ':')) {
        free(v->keys[v->n]);
        return fail(p, "expected ':'");
      }
    }
    int rc = value(p, it);
    v->n++;   /* owned from here on, even half-built */
    if (rc < 0)
      return -1;
  } while (eat(p, ','));
  if (!eat(p, close))
    return fail(p, "expected ',' or '%c'", close);
  return v->kind == JSON_OBJECT ? unique_keys(p, v, start) : 0;
}

static int value(parser *p, json_value *v)
{
  skip_ws(p);
  if (p->i >= p->n)
    return fail(p, "unexpected end of the header");
  char c = p->s[p->i];
  if (c == '{' || c == '[') {
    if (++p->depth > MAX_DEPTH)
      return fail(p, "nested deeper than %d", MAX_DEPTH);
    p->i++;
    v->kind = c == '{' ? JSON_OBJECT : JSON_ARRAY;
    int rc = members(p, v, c == '{' ? '}' : ']');
    p->depth--;
    return rc;
  }
  if (c == '"') {
    v->kind = JSON_STRING;
    return string(p, &v->str);
  }
  if ((c >= '0' && c <= '9') || c == '-') {
    v->kind = JSON_UINT;
    return number(p, &v->num);
  }
  return fail(p, "unexpected character '%c' (only objects, arrays, strings "
              "and integers are expected)", c >= 0x20 && c < 0x7f ? c : '?');
}

/* -- Public to the module ---------------------------------------------------- */

int io_json_parse(const char *text, size_t len, json_value *out, char *err,
                  size_t errlen)
{
  parser p = { .s = text, .n = len, .err = err, .errlen = errlen };
  memset(out, 0, sizeof *out);
  if (value(&p, out) < 0) {
    io_json_free(out);
    return -1;
  }
  skip_ws(&p);
  if (p.i != p.n) {
    io_json_free(out);
    return fail(&p, "unexpected text after the header's object");
  }
  return 0;
}

void io_json_free(json_value *v)
{
  if (!v)
    return;
  for (int i = 0; i < v->n; i++) {
    io_json_free(&v->items[i]);
    if (v->keys)
      free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  memset(v, 0, sizeof *v);
}

const json_value *io_json_get(const json_value *o, const char *key)
{
  if (o->kind != JSON_OBJECT)
    return NULL;
  for (int i = 0; i < o->n; i++)
    if (strcmp(o->keys[i], key) == 0)
      return &o->items[i];
  return NULL;
}
