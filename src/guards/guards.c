/*
** guards.c -- build, hash, check and explain guard sets.
** The check is a flat compare of a few words per input: no allocation, no
** hashing, so a compiled region costs tens of nanoseconds per input to reuse.
*/
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "guards.h"

/* Fill g for t. In dynamic sets a size is kept only as "is it 1" and
** strides only as "is it 0", since those decide broadcasting. */
static void fill(guard_input *g, const tc_tensor *const *ins, int i,
                 bool dynamic)
{
  const tc_tensor *t = ins[i];
  memset(g, 0, sizeof *g);
  g->dtype = t->dtype;
  g->device = t->storage ? (uint8_t)t->storage->device : 0;
  g->ndim = t->ndim;
  g->alias = -1;
  for (int j = 0; j < i; j++)
    if (ins[j]->storage && ins[j]->storage == t->storage) {
      g->alias = j;
      break;
    }
  for (int d = 0; d < t->ndim; d++) {
    g->shape[d] = dynamic ? (t->shape[d] == 1) : t->shape[d];
    g->stride[d] = dynamic ? (t->stride[d] == 0) : t->stride[d];
  }
}

uint64_t guard_key_of(int n, const tc_tensor *const *ins, bool dynamic)
{
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &dynamic, sizeof dynamic);
  for (int i = 0; i < n; i++) {
    guard_input g;
    fill(&g, ins, i, dynamic);
    XXH3_64bits_update(&st, &g, sizeof g);
  }
  return XXH3_64bits_digest(&st);
}

guard_set *guard_build(int n, const tc_tensor *const *ins, bool dynamic)
{
  guard_set *g = malloc(sizeof *g + (size_t)n * sizeof(guard_input));
  if (!g)
    return NULL;
  g->n = n;
  g->dynamic = dynamic;
  for (int i = 0; i < n; i++)
    fill(&g->in[i], ins, i, dynamic);
  g->key = guard_key_of(n, ins, dynamic);
  return g;
}

void guard_free(guard_set *g) { free(g); }

/* The fast path: compare field by field, stop at the first difference. */
static bool input_ok(const guard_input *g, const tc_tensor *const *ins,
                     int i, bool dynamic)
{
  const tc_tensor *t = ins[i];
  if (g->dtype != t->dtype || g->ndim != t->ndim)
    return false;
  if (!dynamic) {
    for (int d = 0; d < t->ndim; d++)
      if (g->shape[d] != t->shape[d] || g->stride[d] != t->stride[d])
        return false;
  } else {
    for (int d = 0; d < t->ndim; d++)
      if (g->shape[d] != (t->shape[d] == 1) ||
          g->stride[d] != (t->stride[d] == 0))
        return false;
  }
  int alias = -1;
  if (g->alias >= 0 || i > 0)
    for (int j = 0; j < i; j++)
      if (ins[j]->storage && ins[j]->storage == t->storage) {
        alias = j;
        break;
      }
  return alias == g->alias;
}

bool guard_check(const guard_set *g, int n, const tc_tensor *const *ins)
{
  if (g->n != n)
    return false;
  for (int i = 0; i < n; i++)
    if (!input_ok(&g->in[i], ins, i, g->dynamic))
      return false;
  return true;
}

int guard_explain(const guard_set *g, int n, const tc_tensor *const *ins,
                  char *buf, size_t len)
{
  if (g->n != n) {
    snprintf(buf, len, "region has %d inputs, was compiled for %d", n, g->n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    const guard_input *e = &g->in[i];
    guard_input now;
    fill(&now, ins, i, g->dynamic);
    if (e->dtype != now.dtype) {
      snprintf(buf, len, "input %d: dtype is %s, was compiled for %s", i,
               tc_dtype_name((tc_dtype)now.dtype),
               tc_dtype_name((tc_dtype)e->dtype));
      return -1;
    }
    if (e->ndim != now.ndim) {
      snprintf(buf, len, "input %d: rank is %d, was compiled for %d", i,
               now.ndim, e->ndim);
      return -1;
    }
    for (int d = 0; d < now.ndim; d++) {
      if (e->shape[d] != now.shape[d]) {
        if (g->dynamic)
          snprintf(buf, len, "input %d: dim %d %s size 1 now (broadcast "
                   "pattern changed)", i, d, now.shape[d] ? "is" : "is not");
        else
          snprintf(buf, len, "input %d: size of dim %d is %lld, was "
                   "compiled for %lld", i, d, (long long)now.shape[d],
                   (long long)e->shape[d]);
        return -1;
      }
    }
    for (int d = 0; d < now.ndim; d++) {
      if (e->stride[d] != now.stride[d]) {
        if (g->dynamic)
          snprintf(buf, len, "input %d: dim %d broadcast (stride 0) pattern "
                   "changed", i, d);
        else
          snprintf(buf, len, "input %d: stride of dim %d is %lld, was "
                   "compiled for %lld", i, d, (long long)now.stride[d],
                   (long long)e->stride[d]);
        return -1;
      }
    }
    if (e->alias != now.alias) {
      snprintf(buf, len, "input %d: shares storage with input %d, was "
               "compiled with %d", i, now.alias, e->alias);
      return -1;
    }
  }
  snprintf(buf, len, "ok");
  return 0;
}

/* a -> b -> c steps by one amount twice (no overflow: sizes and strides
** are far below 2^62). */
static bool steps_alike(int64_t a, int64_t b, int64_t c)
{
  return b - a == c - b;
}

bool guard_sizes_march(const guard_set *older, const guard_set *newer,
                       int n, const tc_tensor *const *ins)
{
  if (older->dynamic || newer->dynamic || older->n != n || newer->n != n)
    return false;
  bool moved = false;
  for (int i = 0; i < n; i++) {
    const guard_input *a = &older->in[i], *b = &newer->in[i];
    guard_input c;
    fill(&c, ins, i, false);
    if (a->dtype != c.dtype || b->dtype != c.dtype || a->ndim != c.ndim ||
        b->ndim != c.ndim || a->device != c.device ||
        b->device != c.device || a->alias != c.alias || b->alias != c.alias)
      return false;
    for (int d = 0; d < c.ndim; d++) {
      if (!steps_alike(a->shape[d], b->shape[d], c.shape[d]) ||
          !steps_alike(a->stride[d], b->stride[d], c.stride[d]))
        return false;
      moved |= c.shape[d] != b->shape[d];
    }
  }
  return moved;
}

void guard_dump(const guard_set *g, FILE *out)
{
  for (int i = 0; i < g->n; i++) {
    const guard_input *e = &g->in[i];
    fprintf(out, "input %d: %s rank %d %s [", i,
            tc_dtype_name((tc_dtype)e->dtype), e->ndim,
            g->dynamic ? "size-1 dims" : "sizes");
    for (int d = 0; d < e->ndim; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    fprintf(out, "] %s [", g->dynamic ? "stride-0 dims" : "strides");
    for (int d = 0; d < e->ndim; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)e->stride[d]);
    fprintf(out, "]");
    if (e->alias >= 0)
      fprintf(out, " aliases input %d", e->alias);
    fputc('\n', out);
  }
}
