/*
** cache.h -- the region table (in memory): structure hash -> the guard
** variants seen for it, each with a hit counter, a state (cold, compiled,
** failed) and stats. A variant seen TC_HOT times is handed to the compile
** hook once; a failed compile is remembered and never retried. After
** TC_RECOMPILE_LIMIT variants of one structure, the structure asks for a
** shape-dynamic compile instead of specializing again; sooner when its
** sizes march (three variants in a row whose sizes step by the same
** amounts: a growing KV cache, whose every length is new and would be
** specialized once and never run again).
*/
#ifndef TC_CACHE_H
#define TC_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "../guards/guards.h"

typedef enum {
  CACHE_COLD,       /* runs eagerly, counting hits */
  CACHE_COMPILING,  /* a compile is in flight; runs eagerly meanwhile */
  CACHE_COMPILED,   /* plan ready: launched after the guard check */
  CACHE_FAILED      /* compile failed: eager for good, not retried */
} cache_state;

typedef struct cache_entry {
  struct cache_struct *owner;     /* borrowed */
  guard_set *guards;              /* owned */
  uint64_t hits;                  /* realizations that matched */
  uint64_t last_use;              /* the table's use clock at the last
                                     match (least recently used goes) */
  cache_state state;
  void *plan;                     /* owned through plan_free (trace's) */
  void (*plan_free)(void *plan);
  double compile_ms;
  uint64_t runs_compiled, runs_eager;
  bool *eager_nodes;              /* owned, or NULL: region nodes that run
                                     their eager kernel in the plan (their
                                     kernel failed to compile) */
  int fallback_rounds;            /* compiles redone for that so far */
  struct cache_entry *next;       /* next variant of the same structure */
} cache_entry;

typedef struct cache_struct {
  uint64_t hash;                  /* structure hash of the region */
  int nvariants;                  /* variants ever made (incl. freed) */
  bool want_dynamic;              /* recompile limit reached, or marched */
  bool marched;                   /* went shape-dynamic as its sizes marched */
  struct cache_entry *recent[2];  /* the last two static variants made,
                                     newest first (NULL: none, or evicted) */
  cache_entry *variants;          /* most recently used first; owned */
  cache_entry *dynamic;           /* the shape-dynamic variant, if any */
  struct cache_struct *next;      /* hash chain; owned by the table */
} cache_struct;

typedef struct {
  int hot;                        /* TC_HOT */
  int recompile_limit;            /* TC_RECOMPILE_LIMIT */
  int max_entries;                /* TC_REGIONS_MAX (0: that setting) */
} cache_config;

void cache_configure(const cache_config *c);
const cache_config *cache_cfg(void);

/* The structure entry for hash (created on first sight). NULL on OOM. */
cache_struct *cache_struct_get(uint64_t hash);
/* The variant whose guards the inputs satisfy (the dynamic one last), or
** NULL. */
cache_entry *cache_variant_find(cache_struct *s, int n,
                                const tc_tensor *const *ins);
/* A new variant for these inputs (dynamic when s->want_dynamic, or when
** the inputs' sizes march on from the last two static variants'). When the
** table holds max_entries variants, the least recently used one that is not
** being compiled goes first (its plan freed; a structure left with none is
** freed too, unless it is s). */
cache_entry *cache_variant_add(cache_struct *s, int n,
                               const tc_tensor *const *ins);
/* Count a hit; true exactly once, when the entry just became hot. */
bool cache_hit(cache_entry *e);

/* Drop everything (tests, and at exit). */
void cache_clear(void);
/* Number of structures and variants held. */
void cache_counts(int *structs, int *variants);
/* Variants evicted since the process started. */
uint64_t cache_evictions(void);

#endif
