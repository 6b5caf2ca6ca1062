/*
** safetensors.c -- weights on disk in the safetensors format: an 8-byte
** little-endian header length, a JSON header (per tensor: dtype, shape,
** data_offsets into the data; an optional __metadata__ map of strings),
** then the data. tc_save writes one atomically; tc_load maps one and hands
** out tensors over the mapping without copying. A file is untrusted input
** (DESIGN.md principle 6): everything is checked before any tensor exists.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; tc_save/tc_load assume the host is"
#endif

#define HEADER_MAX 100000000u   /* the reference implementation's limit */
#define META "__metadata__"

/* -- Dtypes ------------------------------------------------------------------ */

/* Every safetensors dtype; tc's dtype where tc has it (a dtype tc gains
** is one edit here: its TC_ name). */
static const struct {
  const char *name;
  tc_dtype dt;   /* TC_DTYPE__MAX: tc has no such dtype */
} st_dtypes[] = {
  {"BOOL", TC_BOOL}, {"I32", TC_I32}, {"I64", TC_I64}, {"F32", TC_F32},
  {"F64", TC_F64},
  {"U8", TC_DTYPE__MAX}, {"I8", TC_DTYPE__MAX}, {"I16", TC_DTYPE__MAX},
  {"U16", TC_DTYPE__MAX}, {"U32", TC_DTYPE__MAX}, {"U64", TC_DTYPE__MAX},
  {"F16", TC_F16}, {"BF16", TC_BF16},
  {"F8_E4M3", TC_DTYPE__MAX}, {"F8_E5M2", TC_DTYPE__MAX},
  {"F8_E8M0", TC_DTYPE__MAX}, {"F6_E2M3", TC_DTYPE__MAX},
  {"F6_E3M2", TC_DTYPE__MAX}, {"F4", TC_DTYPE__MAX},
  {"C64", TC_DTYPE__MAX},
};
#define N_DTYPES (int)(sizeof st_dtypes / sizeof *st_dtypes)

static const char *st_name_of(tc_dtype dt)
{
  for (int i = 0; i < N_DTYPES; i++)
    if (st_dtypes[i].dt == dt)
      return st_dtypes[i].name;
  return NULL;
}

/* -- The mapping: refcounted, so tensors outlive tc_file_close ------------- */

typedef struct {
  atomic_int refs;
  void *base;
  size_t len;
} st_map;

static void map_release(void *data, void *ctx)
{
  (void)data;
  st_map *m = ctx;
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
    munmap(m->base, m->len);
    free(m);
  }
}

/* -- The file handle --------------------------------------------------------- */

typedef struct {
  char *name;                   /* owned */
  tc_dtype dt;
  int ndim;
  int64_t shape[TC_MAX_DIMS];
  uint64_t begin, end;          /* into the data, bytes */
} st_entry;

struct tc_file {
  st_map *map;                  /* owned reference */
  const char *data;             /* borrowed: the data, inside map */
  int n;
  st_entry *e;                  /* owned; in data order */
  st_entry **by_name;           /* owned; into e, sorted by name */
  json_value meta;              /* owned; the __metadata__ object or empty */
};

static void file_free(tc_file *f)
{
  if (!f)
    return;
  for (int i = 0; i < f->n; i++)
    free(f->e[i].name);
  free(f->e);
  free(f->by_name);
  io_json_free(&f->meta);
  if (f->map)
    map_release(NULL, f->map);
  free(f);
}

/* -- Loading: the header ----------------------------------------------------- */

/* Checks of one file, with its path for messages. */
typedef struct {
  const char *path;
  uint64_t data_len;
} loader;

#define LOAD_ERR(L, fmt, ...) \
  (tc_seterr(TC_E_ARG, "tc_load: %s: " fmt, (L)->path, ##__VA_ARGS__), -1)

static int parse_dtype(const loader *L, const char *name, const json_value *v,
                       tc_dtype *out)
{
  if (!v || v->kind != JSON_STRING)
    return LOAD_ERR(L, "tensor \"%s\": \"dtype\" must be a string",
                    name);
  for (int i = 0; i < N_DTYPES; i++)
    if (strcmp(v->str, st_dtypes[i].name) == 0) {
      if (st_dtypes[i].dt == TC_DTYPE__MAX)
        return LOAD_ERR(L, "tensor \"%s\": dtype %s is not supported by tc",
                        name, v->str);
      *out = st_dtypes[i].dt;
      return 0;
    }
  return LOAD_ERR(L, "tensor \"%s\": unknown dtype \"%.32s\"",
                  name, v->str);
}

static int parse_shape(const loader *L, st_entry *e, const json_value *v,
                       uint64_t *nbytes)
{
  if (!v || v->kind != JSON_ARRAY)
    return LOAD_ERR(L, "tensor \"%s\": \"shape\" must be an array",
                    e->name);
  if (v->n > TC_MAX_DIMS)
    return LOAD_ERR(L, "tensor \"%s\": %d dims, more than tc's %d",
                    e->name, v->n, TC_MAX_DIMS);
  uint64_t n = tensor_dtype_size[e->dt];
  for (int i = 0; i < v->n; i++) {
    const json_value *d = &v->items[i];
    if (d->kind != JSON_UINT)
      return LOAD_ERR(L, "tensor \"%s\": shape entries must be integers",
                      e->name);
    if (d->num > INT64_MAX || __builtin_mul_overflow(n, d->num, &n) ||
        n > INT64_MAX)
      return LOAD_ERR(L, "tensor \"%s\": shape overflows (its byte count "
                      "exceeds 2^63)", e->name);
    e->shape[i] = (int64_t)d->num;
  }
  e->ndim = v->n;
  *nbytes = n;
  return 0;
}

static int parse_offsets(const loader *L, st_entry *e, const json_value *v,
                         uint64_t nbytes)
{
  if (!v || v->kind != JSON_ARRAY || v->n != 2 ||
      v->items[0].kind != JSON_UINT || v->items[1].kind != JSON_UINT)
    return LOAD_ERR(L, "tensor \"%s\": \"data_offsets\" must be two "
                    "integers", e->name);
  e->begin = v->items[0].num;
  e->end = v->items[1].num;
  if (e->begin > e->end || e->end > L->data_len)
    return LOAD_ERR(L, "tensor \"%s\": data_offsets [%llu, %llu] are out of "
                    "range (the data has %llu bytes)", e->name,
                    (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)L->data_len);
  if (e->end - e->begin != nbytes)
    return LOAD_ERR(L, "tensor \"%s\": data_offsets span %llu bytes but "
                    "dtype and shape need %llu", e->name,
                    (unsigned long long)(e->end - e->begin),
                    (unsigned long long)nbytes);
  return 0;
}

/* One tensor's entry: exactly the fields dtype, shape and data_offsets. */
static int parse_entry(const loader *L, st_entry *e, const json_value *v)
{
  if (v->kind != JSON_OBJECT)
    return LOAD_ERR(L, "tensor \"%s\": its entry must be an object",
                    e->name);
  for (int i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") &&
        strcmp(v->keys[i], "data_offsets"))
      return LOAD_ERR(L, "tensor \"%s\": unknown field \"%.32s\"",
                      e->name, v->keys[i]);
  uint64_t nbytes;
  if (parse_dtype(L, e->name, io_json_get(v, "dtype"), &e->dt) < 0 ||
      parse_shape(L, e, io_json_get(v, "shape"), &nbytes) < 0 ||
      parse_offsets(L, e, io_json_get(v, "data_offsets"), nbytes) < 0)
    return -1;
  return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* The tensors tile the data exactly: no overlap, no hole, nothing after
** (as the reference implementation demands; a hole could hide another
** file's bytes in this one). */
static int check_tiling(const loader *L, tc_file *f)
{
  qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_offsets);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    const st_entry *e = &f->e[i];
    if (e->begin < at)
      return LOAD_ERR(L, "tensors \"%s\" and \"%s\" overlap",
                      f->e[i - 1].name, e->name);
    if (e->begin > at)
      return LOAD_ERR(L, "data bytes [%llu, %llu) belong to no tensor",
                      (unsigned long long)at,
                      (unsigned long long)e->begin);
    at = e->end;
  }
  if (at != L->data_len)
    return LOAD_ERR(L, "data bytes [%llu, %llu) belong to no tensor",
                      (unsigned long long)at,
                    (unsigned long long)L->data_len);
  return 0;
}

static int check_metadata(const loader *L, const json_value *v)
{
  if (v->kind != JSON_OBJECT)
    return LOAD_ERR(L, "\"" META "\" must be an object");
  for (int i = 0; i < v->n; i++)
    if (v->items[i].kind != JSON_STRING)
      return LOAD_ERR(L, "\"" META "\" value of \"%.32s\" must be a string",
                      v->keys[i]);
  return 0;
}

static int cmp_name(const void *a, const void *b)
{
  return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}

/* The header's entries into f (tensors checked one by one, then as a
** whole); hdr is consumed. */
static int take_header(const loader *L, tc_file *f, json_value *hdr)
{
  if (hdr->kind != JSON_OBJECT)
    return LOAD_ERR(L, "the header must be a JSON object");
  f->e = calloc((size_t)hdr->n + 1, sizeof *f->e);
  f->by_name = calloc((size_t)hdr->n + 1, sizeof *f->by_name);
  if (!f->e || !f->by_name)
    return tc_seterr(TC_E_NOMEM, "tc_load: out of memory"), -1;
  for (int i = 0; i < hdr->n; i++) {
    if (strcmp(hdr->keys[i], META) == 0) {
      if (check_metadata(L, &hdr->items[i]) < 0)
        return -1;
      f->meta = hdr->items[i];   /* moved */
      memset(&hdr->items[i], 0, sizeof hdr->items[i]);
      continue;
    }
    st_entry *e = &f->e[f->n];
    e->name = hdr->keys[i];      /* moved */
    hdr->keys[i] = NULL;
    f->n++;
    if (parse_entry(L, e, &hdr->items[i]) < 0)
      return -1;
  }
  if (check_tiling(L, f) < 0)
    return -1;
  for (int i = 0; i < f->n; i++)
    f->by_name[i] = &f->e[i];
  qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
  return 0;
}

/* -- Loading: the file ------------------------------------------------------- */

/* Maps path whole, copy-on-write: tensors may be written in place without
** touching the file. */
static st_map *map_file(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return tc_seterr(TC_E_ARG, "tc_load: %s: %s", path, strerror(errno)),
           NULL;
  struct stat st;
  st_map *m = NULL;
  if (fstat(fd, &st) < 0) {
    tc_seterr(TC_E_ARG, "tc_load: %s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    tc_seterr(TC_E_ARG, "tc_load: %s: not a regular file", path);
  } else if (st.st_size < 8) {
    tc_seterr(TC_E_ARG, "tc_load: %s: the file has %lld bytes, fewer than "
              "the 8 of the header length", path, (long long)st.st_size);
  } else if (!(m = malloc(sizeof *m))) {
    tc_seterr(TC_E_NOMEM, "tc_load: out of memory");
  } else {
    m->len = (size_t)st.st_size;
    m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m->base == MAP_FAILED) {
      tc_seterr(TC_E_ARG, "tc_load: %s: mmap: %s", path, strerror(errno));
      free(m);
      m = NULL;
    } else {
      atomic_init(&m->refs, 1);
    }
  }
  close(fd);
  return m;
}

static uint64_t le64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* The header length fits the file and the limit, and the header at least
** looks like an object. */
static int check_header_len(const loader *L, const char *base, uint64_t hlen,
                            uint64_t len)
{
  if (hlen > len - 8)
    return LOAD_ERR(L, "header length %llu exceeds the file (%llu bytes "
                    "after the length)", (unsigned long long)hlen,
                    (unsigned long long)(len - 8));
  if (hlen > HEADER_MAX)
    return LOAD_ERR(L, "header length %llu exceeds the limit of %u bytes",
                    (unsigned long long)hlen, HEADER_MAX);
  if (hlen < 2 || base[8] != '{')
    return LOAD_ERR(L, "the header does not start with '{'");
  return 0;
}

tc_file *tc_load(const char *path)
{
  eager_init();
  if (!path)
    return tc_seterr_null(__func__), NULL;
  tc_file *f = calloc(1, sizeof *f);
  if (!f)
    return tc_seterr(TC_E_NOMEM, "tc_load: out of memory"), NULL;
  f->map = map_file(path);
  if (!f->map)
    return file_free(f), NULL;
  const char *base = f->map->base;
  uint64_t hlen = le64((const unsigned char *)base), len = f->map->len;
  loader L = { .path = path };
  if (check_header_len(&L, base, hlen, len) < 0)
    return file_free(f), NULL;
  L.data_len = len - 8 - hlen;
  f->data = base + 8 + hlen;
  char err[200];
  json_value hdr;
  if (io_json_parse(base + 8, hlen, &hdr, err, sizeof err) < 0) {
    tc_seterr(TC_E_ARG, "tc_load: %s: malformed header: %s", path, err);
    return file_free(f), NULL;
  }
  int rc = take_header(&L, f, &hdr);
  io_json_free(&hdr);
  if (rc < 0)
    return file_free(f), NULL;
  return f;
}

/* -- The file's tensors ------------------------------------------------------ */

int tc_file_count(const tc_file *f)
{
  if (!f)
    return tc_seterr_null(__func__), -1;
  return f->n;
}

const char *tc_file_name(const tc_file *f, int i)
{
  if (!f)
    return tc_seterr_null(__func__), NULL;
  if (i < 0 || i >= f->n)
    return tc_seterr(TC_E_ARG, "%s: index %d is out of range [0, %d)",
                     __func__, i, f->n), NULL;
  return f->e[i].name;
}

const char *tc_file_metadata(const tc_file *f, const char *key)
{
  if (!f || !key)
    return tc_seterr_null(__func__), NULL;
  const json_value *v = io_json_get(&f->meta, key);
  return v ? v->str : NULL;
}

static const st_entry *find(const tc_file *f, const char *name)
{
  int lo = 0, hi = f->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(f->by_name[mid]->name, name);
    if (c == 0)
      return f->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

tc_tensor *tc_file_get(tc_file *f, const char *name)
{
  const char *fn = __func__;
  eager_init();
  if (!f || !name)
    return tc_seterr_null(fn), NULL;
  const st_entry *e = find(f, name);
  if (!e)
    return tc_seterr(TC_E_ARG, "%s: no tensor named \"%s\"", fn, name), NULL;
  const char *p = f->data + e->begin;
  size_t nbytes = (size_t)(e->end - e->begin);
  if (e->dt == TC_BOOL) {
    for (size_t i = 0; i < nbytes; i++)
      if ((unsigned char)p[i] > 1)
        return tc_seterr(TC_E_ARG, "%s: tensor \"%s\": bool element %zu is "
                         "%u, not 0 or 1", fn, name, i,
                         (unsigned char)p[i]), NULL;
  }
  /* Data the writer left misaligned for its dtype is copied (tc's own
  ** files and Python's are aligned: the header is padded to 8 bytes). */
  if ((uintptr_t)p % tensor_dtype_size[e->dt] != 0) {
    tc_tensor *t = tc_empty(e->dt, e->ndim, e->shape);
    if (t)
      memcpy(tensor_ptr(t), p, nbytes);   /* bytes: no typed loads */
    return t;
  }
  atomic_fetch_add_explicit(&f->map->refs, 1, memory_order_relaxed);
  tc_tensor *t = tc_from_blob(e->dt, e->ndim, e->shape, (void *)p,
                              map_release, f->map);
  if (!t)
    map_release(NULL, f->map);
  return t;
}

void tc_file_close(tc_file *f)
{
  file_free(f);
}

/* -- Saving ------------------------------------------------------------------ */

/* A growable text buffer; `oom` sticks once an append fails. */
typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} text;

static void add(text *b, const char *s, size_t n)
{
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->len + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

__attribute__((format(printf, 2, 3)))
static void addf(text *b, const char *fmt, ...)
{
  char s[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(s, sizeof s, fmt, ap);
  va_end(ap);
  add(b, s, (size_t)n);   /* only numbers and short names go through here */
}

/* s as a JSON string: quotes, backslashes and control characters escaped;
** other bytes (valid UTF-8, checked by the caller) as they are. */
static void add_json_string(text *b, const char *s)
{
  add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      add(b, "\\", 1), add(b, s, 1);
    else if (c < 0x20)
      addf(b, "\\u%04x", c);
    else
      add(b, s, 1);
  }
  add(b, "\"", 1);
}

typedef struct {
  const char *name;    /* borrowed */
  tc_tensor *t;        /* borrowed */
  int index;           /* in the caller's arrays */
  uint64_t begin, end;
} save_item;

/* Larger elements first, then the caller's order: every tensor then starts
** at a multiple of its element size (the data starts 8-aligned), with no
** padding between tensors (the format allows none). */
static int cmp_save(const void *a, const void *b)
{
  const save_item *x = a, *y = b;
  size_t sx = tensor_dtype_size[x->t->dtype], sy = tensor_dtype_size[y->t->dtype];
  if (sx != sy)
    return sx > sy ? -1 : 1;
  return x->index - y->index;
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first of n strings that appears twice, or NULL. */
static const char *duplicate(int n, const char *const *s)
{
  if (n < 2)
    return NULL;
  const char **c = malloc(sizeof *c * (size_t)n);
  if (!c)
    return NULL;   /* the header build will report the lack of memory */
  memcpy(c, s, sizeof *c * (size_t)n);
  qsort(c, (size_t)n, sizeof *c, cmp_str);
  const char *d = NULL;
  for (int i = 1; i < n && !d; i++)
    if (strcmp(c[i - 1], c[i]) == 0)
      d = c[i];
  free(c);
  return d;
}

static bool string_ok(const char *fn, const char *what, int i, const char *s)
{
  if (!s) {
    tc_seterr(TC_E_ARG, "%s: %s %d is NULL", fn, what, i);
    return false;
  }
  if (!io_utf8_valid(s, strlen(s))) {
    tc_seterr(TC_E_ARG, "%s: %s %d is not valid UTF-8", fn, what, i);
    return false;
  }
  return true;
}

/* Every argument checked and every tensor readable, before any file. */
static int save_check(const char *fn, int n, const char *const *names,
                      tc_tensor *const *tensors, int nmeta,
                      const char *const *keys, const char *const *values)
{
  if (n < 0 || nmeta < 0)
    return tc_seterr(TC_E_ARG, "%s: negative count", fn), -1;
  if ((n > 0 && (!names || !tensors)) || (nmeta > 0 && (!keys || !values)))
    return tc_seterr_null(fn), -1;
  for (int i = 0; i < n; i++) {
    if (!string_ok(fn, "name", i, names[i]))
      return -1;
    if (strcmp(names[i], META) == 0)
      return tc_seterr(TC_E_ARG, "%s: \"" META "\" is reserved, not a "
                       "tensor name", fn), -1;
    if (!tensor_arg_ok(fn, tensors[i]))
      return -1;
    if (!st_name_of((tc_dtype)tensors[i]->dtype))
      return tc_seterr(TC_E_DTYPE, "%s: tensor \"%s\": dtype %s has no "
                       "safetensors name", fn, names[i],
                       tc_dtype_name((tc_dtype)tensors[i]->dtype)), -1;
  }
  for (int i = 0; i < nmeta; i++)
    if (!string_ok(fn, "metadata key", i, keys[i]) ||
        !string_ok(fn, "metadata value", i, values[i]))
      return -1;
  const char *d = duplicate(n, names);
  if (d)
    return tc_seterr(TC_E_ARG, "%s: tensor name \"%s\" appears twice", fn,
                     d), -1;
  if ((d = duplicate(nmeta, keys)))
    return tc_seterr(TC_E_ARG, "%s: metadata key \"%s\" appears twice", fn,
                     d), -1;
  for (int i = 0; i < n; i++)
    if (tensor_make_readable(tensors[i]) < 0)
      return -1;
  return 0;
}

static void add_shape(text *b, const tc_tensor *t)
{
  add(b, "[", 1);
  for (int d = 0; d < t->ndim; d++)
    addf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
  add(b, "]", 1);
}

/* The header, padded with spaces so the data starts 8-aligned. */
static void build_header(text *b, int n, const save_item *it, int nmeta,
                         const char *const *keys, const char *const *values)
{
  add(b, "{", 1);
  if (nmeta > 0) {
    add(b, "\"" META "\":{", sizeof META + 3);
    for (int i = 0; i < nmeta; i++) {
      if (i)
        add(b, ",", 1);
      add_json_string(b, keys[i]);
      add(b, ":", 1);
      add_json_string(b, values[i]);
    }
    add(b, "}", 1);
  }
  for (int i = 0; i < n; i++) {
    if (i || nmeta > 0)
      add(b, ",", 1);
    add_json_string(b, it[i].name);
    addf(b, ":{\"dtype\":\"%s\",\"shape\":",
         st_name_of((tc_dtype)it[i].t->dtype));
    add_shape(b, it[i].t);
    addf(b, ",\"data_offsets\":[%llu,", (unsigned long long)it[i].begin);
    addf(b, "%llu]}", (unsigned long long)it[i].end);
  }
  add(b, "}", 1);
  while ((8 + b->len) % 8 != 0)
    add(b, " ", 1);
}

static int write_all(int fd, const void *p, size_t n)
{
  const char *c = p;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

/* One tensor's bytes in C order: straight from its storage when
** contiguous, else through a contiguous copy. */
/* t's bytes in C order; a device tensor's from a host copy. 0; -1 with
** errno set (a write failed); -2 with tc's error set (no host copy). */
static int write_tensor(int fd, tc_tensor *t)
{
  size_t nbytes = (size_t)t->numel * tensor_dtype_size[t->dtype];
  if (nbytes == 0)
    return 0;
  tc_tensor *h = eager_on_host(t);
  tc_tensor *c = !h || tensor_is_contiguous(h) ? h
                 : eager_contiguous_copy(h, (tc_dtype)h->dtype);
  if (c != h)
    tensor_unref(h);
  if (!c)
    return -2;
  int rc = write_all(fd, tensor_ptr(c), nbytes);
  tensor_unref(c);
  return rc;
}

/* A new file beside path (path.tmp-PID-N), created with mode 0666 less the
** umask, as fopen would. */
static int open_temp(const char *path, char *tmp, size_t size)
{
  static atomic_uint counter;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(tmp, size, "%s.tmp-%ld-%u", path, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

static int write_file(const char *fn, const char *path, const text *hdr,
                      int n, const save_item *it)
{
  size_t tlen = strlen(path) + 48;
  char *tmp = malloc(tlen);
  if (!tmp)
    return tc_seterr(TC_E_NOMEM, "%s: out of memory", fn), -1;
  int fd = open_temp(path, tmp, tlen);
  if (fd < 0) {
    tc_seterr(TC_E_ARG, "%s: %s: %s", fn, path, strerror(errno));
    return free(tmp), -1;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++)
    len8[i] = (unsigned char)((uint64_t)hdr->len >> (8 * i));
  int rc = write_all(fd, len8, 8) | write_all(fd, hdr->p, hdr->len);
  for (int i = 0; i < n && rc == 0; i++)
    rc = write_tensor(fd, it[i].t);
  int err = errno;
  if (close(fd) < 0 && rc == 0)
    rc = -1, err = errno;
  if (rc == 0 && rename(tmp, path) < 0)
    rc = -1, err = errno;
  if (rc < 0) {
    unlink(tmp);
    if (rc == -1)
      tc_seterr(TC_E_ARG, "%s: %s: %s", fn, path, strerror(err));
  }
  free(tmp);
  return rc < 0 ? -1 : 0;
}

int tc_save_meta(const char *path, int n, const char *const *names,
                 tc_tensor *const *tensors, int nmeta,
                 const char *const *keys, const char *const *values)
{
  const char *fn = __func__;
  eager_init();
  if (!path)
    return tc_seterr_null(fn), -1;
  if (save_check(fn, n, names, tensors, nmeta, keys, values) < 0)
    return -1;
  save_item *it = calloc((size_t)n + 1, sizeof *it);
  if (!it)
    return tc_seterr(TC_E_NOMEM, "%s: out of memory", fn), -1;
  for (int i = 0; i < n; i++)
    it[i] = (save_item){ .name = names[i], .t = tensors[i], .index = i };
  qsort(it, (size_t)n, sizeof *it, cmp_save);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    it[i].begin = at;
    at += (uint64_t)it[i].t->numel * tensor_dtype_size[it[i].t->dtype];
    it[i].end = at;
  }
  text hdr = {0};
  build_header(&hdr, n, it, nmeta, keys, values);
  int rc = -1;
  if (hdr.oom)
    tc_seterr(TC_E_NOMEM, "%s: out of memory", fn);
  else
    rc = write_file(fn, path, &hdr, n, it);
  free(hdr.p);
  free(it);
  return rc;
}

int tc_save(const char *path, int n, const char *const *names,
            tc_tensor *const *tensors)
{
  return tc_save_meta(path, n, names, tensors, 0, NULL, NULL);
}
