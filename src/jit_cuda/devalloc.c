/*
** devalloc.c -- the caching device allocator (jit_cuda.h): cuMemAlloc costs
** tens of microseconds and synchronizes, so freed device blocks are kept by
** size class and handed out again. tc uses one stream, so a freed block is
** reusable at once: any kernel still reading it was queued before the
** work of its next owner.
*/
#include <pthread.h>
#include <stdlib.h>

#include "jit_cuda.h"

#define SMALL_LIMIT ((size_t)1 << 20)   /* up to here: 512 B steps */
#define SMALL_STEP ((size_t)512)
#define LARGE_STEP ((size_t)2 << 20)

typedef struct cached_block {
  struct cached_block *next;
  jcuda_ptr ptr;
  size_t size;               /* its class size */
} cached_block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cached_block *cache;   /* most recently freed first */
static jcuda_alloc_stats stats;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

size_t jcuda_alloc_class(size_t nbytes)
{
  size_t step = nbytes <= SMALL_LIMIT ? SMALL_STEP : LARGE_STEP;
  return (nbytes + step - 1) / step * step;
}

static void release_at_exit(void)
{
  jcuda_alloc_release_cache();
  jcuda_release_staging();
}

static void register_exit(void) { atexit(release_at_exit); }

/* A cached block of class size `size`, unlinked, or NULL. */
static cached_block *take_cached(size_t size)
{
  for (cached_block **at = &cache; *at; at = &(*at)->next)
    if ((*at)->size == size) {
      cached_block *b = *at;
      *at = b->next;
      return b;
    }
  return NULL;
}

int jcuda_alloc(jcuda_ptr *p, size_t nbytes)
{
  *p = 0;
  if (nbytes == 0)
    return 0;
  size_t size = jcuda_alloc_class(nbytes);
  pthread_once(&exit_once, register_exit);
  pthread_mutex_lock(&lock);
  cached_block *b = take_cached(size);
  if (b) {
    stats.cache_hits++;
    stats.bytes_in_use += size;
  }
  pthread_mutex_unlock(&lock);
  if (b) {
    *p = b->ptr;
    free(b);
    return 0;
  }
  if (jcuda_raw_alloc(p, size) < 0) {   /* out of memory: drop the cache */
    jcuda_alloc_release_cache();
    if (jcuda_raw_alloc(p, size) < 0)
      return -1;
    tc_clear_error();
  }
  pthread_mutex_lock(&lock);
  stats.driver_allocs++;
  stats.bytes_in_use += size;
  stats.bytes_reserved += size;
  pthread_mutex_unlock(&lock);
  return 0;
}

void jcuda_free(jcuda_ptr p, size_t nbytes)
{
  if (!p)
    return;
  size_t size = jcuda_alloc_class(nbytes);
  cached_block *b = malloc(sizeof *b);
  pthread_mutex_lock(&lock);
  stats.bytes_in_use -= size;
  if (b) {
    *b = (cached_block){ cache, p, size };
    cache = b;
  } else {
    stats.bytes_reserved -= size;
  }
  pthread_mutex_unlock(&lock);
  if (!b)   /* no memory for the record: give the block back instead */
    jcuda_raw_free(p);
}

void jcuda_alloc_stats_get(jcuda_alloc_stats *out)
{
  pthread_mutex_lock(&lock);
  *out = stats;
  pthread_mutex_unlock(&lock);
}

void jcuda_alloc_release_cache(void)
{
  pthread_mutex_lock(&lock);
  cached_block *list = cache;
  cache = NULL;
  for (cached_block *b = list; b; b = b->next)
    stats.bytes_reserved -= b->size;
  pthread_mutex_unlock(&lock);
  while (list) {
    cached_block *next = list->next;
    jcuda_raw_free(list->ptr);
    free(list);
    list = next;
  }
}
