/*
** table.c -- the in-memory region table: an open hash of structures, each
** with a short list of guard variants (most recent first, since loops
** repeat the last shape). The table holds at most max_entries variants:
** past that, the least recently used one goes (a program that keeps making
** new regions must not grow without bound).
*/
#include <stdlib.h>

#include "cache.h"

static cache_struct *bucket[TUNE_REGION_BUCKETS];
static cache_config cfg = { .hot = 2, .recompile_limit = 8 };
static uint64_t use_clock;     /* ticks once per match or new variant */
static int nentries;
static uint64_t evicted;

void cache_configure(const cache_config *c) { cfg = *c; }

const cache_config *cache_cfg(void) { return &cfg; }

static int max_entries(void)
{
  return cfg.max_entries > 0 ? cfg.max_entries : tensor_cfg()->regions_max;
}

cache_struct *cache_struct_get(uint64_t hash)
{
  cache_struct **b = &bucket[hash % TUNE_REGION_BUCKETS];
  for (cache_struct *s = *b; s; s = s->next)
    if (s->hash == hash)
      return s;
  cache_struct *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->hash = hash;
  s->next = *b;
  *b = s;
  return s;
}

cache_entry *cache_variant_find(cache_struct *s, int n,
                                const tc_tensor *const *ins)
{
  /* Most recently used first: loops repeat their last shape, and a guard
  ** failure is explained against the variant that ran last. */
  for (cache_entry **p = &s->variants, *e; (e = *p); p = &e->next)
    if (e != s->dynamic && guard_check(e->guards, n, ins)) {
      *p = e->next;
      e->next = s->variants;
      s->variants = e;
      e->last_use = ++use_clock;
      return e;
    }
  if (s->dynamic && guard_check(s->dynamic->guards, n, ins)) {
    s->dynamic->last_use = ++use_clock;
    return s->dynamic;
  }
  return NULL;
}

static void entry_free(cache_entry *e)
{
  if (e->plan && e->plan_free)
    e->plan_free(e->plan);
  guard_free(e->guards);
  free(e->eager_nodes);
  free(e);
}

/* Drop the least recently used variant that no compile is using, and its
** structure when that is left empty (but never `keep`). */
static void evict_one(const cache_struct *keep)
{
  cache_entry *victim = NULL;
  for (int b = 0; b < TUNE_REGION_BUCKETS; b++)
    for (cache_struct *s = bucket[b]; s; s = s->next)
      for (cache_entry *e = s->variants; e; e = e->next)
        if (e->state != CACHE_COMPILING &&
            (!victim || e->last_use < victim->last_use))
          victim = e;
  if (!victim)
    return;
  cache_struct *s = victim->owner;
  for (cache_entry **p = &s->variants; *p; p = &(*p)->next)
    if (*p == victim) {
      *p = victim->next;
      break;
    }
  if (s->dynamic == victim)
    s->dynamic = NULL;
  for (int i = 0; i < 2; i++)
    if (s->recent[i] == victim)
      s->recent[i] = NULL;
  if (tensor_log_on(TC_LOG_REGIONS))
    tensor_log(TC_LOG_REGIONS, "region %016llx: a variant evicted (the "
               "table holds %d, TC_REGIONS_MAX)", (unsigned long long)s->hash,
               nentries);
  entry_free(victim);
  nentries--;
  evicted++;
  if (s->variants || s == keep)
    return;
  cache_struct **p = &bucket[s->hash % TUNE_REGION_BUCKETS];
  for (; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  free(s);
}

cache_entry *cache_variant_add(cache_struct *s, int n,
                               const tc_tensor *const *ins)
{
  while (nentries >= max_entries()) {
    int before = nentries;
    evict_one(s);
    if (nentries == before)
      break;   /* every variant is compiling: grow past the bound */
  }
  if (!s->want_dynamic && s->recent[0] && s->recent[1] &&
      guard_sizes_march(s->recent[1]->guards, s->recent[0]->guards, n, ins))
    s->want_dynamic = s->marched = true;
  bool dynamic = s->want_dynamic;
  cache_entry *e = calloc(1, sizeof *e);
  if (!e)
    return NULL;
  e->guards = guard_build(n, ins, dynamic);
  if (!e->guards) {
    free(e);
    return NULL;
  }
  e->owner = s;
  e->state = CACHE_COLD;
  e->last_use = ++use_clock;
  e->next = s->variants;
  s->variants = e;
  s->nvariants++;
  nentries++;
  if (dynamic) {
    s->dynamic = e;
  } else {
    s->recent[1] = s->recent[0];
    s->recent[0] = e;
    if (s->nvariants >= cfg.recompile_limit)
      s->want_dynamic = true;
  }
  return e;
}

bool cache_hit(cache_entry *e)
{
  e->hits++;
  return e->state == CACHE_COLD && e->hits == (uint64_t)cfg.hot;
}

void cache_clear(void)
{
  for (int b = 0; b < TUNE_REGION_BUCKETS; b++) {
    cache_struct *s = bucket[b];
    while (s) {
      cache_struct *next = s->next;
      cache_entry *e = s->variants;
      while (e) {
        cache_entry *en = e->next;
        entry_free(e);
        e = en;
      }
      free(s);
      s = next;
    }
    bucket[b] = NULL;
  }
  nentries = 0;
}

void cache_counts(int *structs, int *variants)
{
  int ns = 0, nv = 0;
  for (int b = 0; b < TUNE_REGION_BUCKETS; b++)
    for (cache_struct *s = bucket[b]; s; s = s->next) {
      ns++;
      for (cache_entry *e = s->variants; e; e = e->next)
        nv++;
    }
  *structs = ns;
  *variants = nv;
}

uint64_t cache_evictions(void) { return evicted; }
