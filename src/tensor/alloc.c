/*
** alloc.c -- the caching CPU allocator (DESIGN.md, principle 11).
** A fresh 64 MiB buffer costs ~50x more in page faults than streaming through
** it, so freed blocks go to size-bucketed free lists and are reused. Large
** blocks are 2 MiB aligned and madvise(MADV_HUGEPAGE)d. The cache has a cap
** (TC_POOL_MAX_MB, default a quarter of RAM) and evicts oldest-first above it.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tensor.h"

#define ALIGN_SMALL 64
#define HUGE_PAGE (2u << 20)
#define LARGE_MIN (1u << 20)          /* from here on: mmap, 2 MiB granules */
#define NBUCKET 96                    /* small classes: 4 per power of two */
#define NLARGE_MAX 256                /* cached large blocks at most */

typedef struct free_block {
  struct free_block *next;            /* intrusive list inside the free block */
} free_block;

typedef struct {
  void *ptr;
  size_t size;
  uint64_t age;
} large_block;

static struct {
  pthread_mutex_t lock;
  free_block *bucket[NBUCKET];
  size_t bucket_bytes;
  large_block large[NLARGE_MAX];
  int nlarge;
  size_t cached;                      /* bytes held in free lists */
  size_t cap;
  uint64_t tick;
  uint64_t live, hits, misses;
  bool inited;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* -- Size classes -------------------------------------------------------- */

/* Round a small request to its class: 4 classes per power of two, >= 64. */
static size_t small_class(size_t n, int *idx)
{
  if (n <= ALIGN_SMALL) {
    *idx = 0;
    return ALIGN_SMALL;
  }
  /* 2^lg < n <= 2^(lg+1); classes are 5, 6, 7, 8 steps of 2^(lg-2). */
  int lg = 63 - __builtin_clzll((unsigned long long)(n - 1));
  size_t step = (size_t)1 << (lg - 2);
  size_t c = (n + step - 1) / step * step;
  *idx = (lg - 6) * 4 + (int)(c / step - 5) + 1;
  return c;
}

static size_t large_class(size_t n)
{
  return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
}

static void pool_init(void)
{
  int64_t mb = tensor_cfg()->pool_max_mb;
  if (mb >= 0) {
    pool.cap = (size_t)mb << 20;
  } else {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    pool.cap = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 4
                                    : (size_t)1 << 30;
  }
  pool.inited = true;
}

/* -- System blocks ------------------------------------------------------- */

static void *large_map(size_t size)
{
  /* Over-map by one huge page and trim, so the block is 2 MiB aligned. */
  size_t span = size + HUGE_PAGE;
  char *p = mmap(NULL, span, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
  size_t head = a - (uintptr_t)p, tail = span - head - size;
  if (head)
    munmap(p, head);
  if (tail)
    munmap((char *)a + size, tail);
#ifdef MADV_HUGEPAGE
  madvise((void *)a, size, MADV_HUGEPAGE);
#endif
  return (void *)a;
}

/* Evict cached blocks, oldest large ones first, until `need` more fit. */
static void evict_for(size_t need)
{
  while (pool.cached + need > pool.cap && pool.nlarge > 0) {
    int old = 0;
    for (int i = 1; i < pool.nlarge; i++)
      if (pool.large[i].age < pool.large[old].age)
        old = i;
    munmap(pool.large[old].ptr, pool.large[old].size);
    pool.cached -= pool.large[old].size;
    pool.large[old] = pool.large[--pool.nlarge];
  }
  for (int b = NBUCKET - 1; b >= 0 && pool.cached + need > pool.cap; b--) {
    while (pool.bucket[b] && pool.cached + need > pool.cap) {
      free_block *f = pool.bucket[b];
      pool.bucket[b] = f->next;
      size_t sz = ALIGN_SMALL;
      if (b > 0) {   /* invert small_class's index */
        int lg = (b - 1) / 4 + 6, q = (b - 1) % 4 + 5;
        sz = (size_t)q << (lg - 2);
      }
      pool.cached -= sz;
      free(f);
    }
  }
}

/* -- Public to the project ------------------------------------------------ */

void *tensor_alloc(size_t nbytes)
{
  if (nbytes == 0)
    nbytes = 1;
  void *p = NULL;
  pthread_mutex_lock(&pool.lock);
  if (!pool.inited)
    pool_init();
  if (nbytes >= LARGE_MIN) {
    size_t size = large_class(nbytes);
    int best = -1;
    for (int i = 0; i < pool.nlarge; i++)
      if (pool.large[i].size == size) {
        best = i;
        break;
      }
    if (best >= 0) {
      p = pool.large[best].ptr;
      pool.large[best] = pool.large[--pool.nlarge];
      pool.cached -= size;
      pool.hits++;
    } else {
      pthread_mutex_unlock(&pool.lock);
      p = large_map(size);
      pthread_mutex_lock(&pool.lock);
      pool.misses++;
    }
    if (p)
      pool.live += size;
  } else {
    int idx;
    size_t size = small_class(nbytes, &idx);
    if (pool.bucket[idx]) {
      p = pool.bucket[idx];
      pool.bucket[idx] = pool.bucket[idx]->next;
      pool.cached -= size;
      pool.hits++;
    } else {
      if (posix_memalign(&p, ALIGN_SMALL, size) != 0)
        p = NULL;
      pool.misses++;
    }
    if (p)
      pool.live += size;
  }
  pthread_mutex_unlock(&pool.lock);
  return p;
}

void tensor_free_block(void *p, size_t nbytes)
{
  if (!p)
    return;
  if (nbytes == 0)
    nbytes = 1;
  pthread_mutex_lock(&pool.lock);
  if (nbytes >= LARGE_MIN) {
    size_t size = large_class(nbytes);
    pool.live -= size;
    if (size > pool.cap) {
      pthread_mutex_unlock(&pool.lock);
      munmap(p, size);
      return;
    }
    evict_for(size);
    if (pool.nlarge == NLARGE_MAX)
      evict_for(pool.cap);   /* table full: drop everything cached */
    pool.large[pool.nlarge++] = (large_block){ p, size, ++pool.tick };
    pool.cached += size;
  } else {
    int idx;
    size_t size = small_class(nbytes, &idx);
    pool.live -= size;
    evict_for(size);
    free_block *f = p;
    f->next = pool.bucket[idx];
    pool.bucket[idx] = f;
    pool.cached += size;
  }
  pthread_mutex_unlock(&pool.lock);
}

void tensor_alloc_stats(uint64_t *live, uint64_t *hits, uint64_t *misses)
{
  pthread_mutex_lock(&pool.lock);
  *live = pool.live;
  *hits = pool.hits;
  *misses = pool.misses;
  pthread_mutex_unlock(&pool.lock);
}

void tensor_alloc_reset_stats(void)
{
  pthread_mutex_lock(&pool.lock);
  pool.hits = pool.misses = 0;
  pthread_mutex_unlock(&pool.lock);
}

void tensor_alloc_trim(void)
{
  pthread_mutex_lock(&pool.lock);
  size_t cap = pool.cap;
  pool.cap = 0;
  evict_for(0);
  pool.cap = cap;
  pthread_mutex_unlock(&pool.lock);
}

/* Free the cache at exit so leak checkers see only real leaks. */
__attribute__((destructor)) static void pool_fini(void)
{
  tensor_alloc_trim();
}

int tensor_grow(void **arr, int *cap, int need, size_t esz)
{
  if (need <= *cap)
    return 0;
  int c = *cap ? *cap * 2 : 16;
  while (c < need)
    c *= 2;
  void *p = realloc(*arr, (size_t)c * esz);
  if (!p)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}
