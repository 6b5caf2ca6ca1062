/*
** fake_cuda.c -- a stand-in for libcuda.so.1 (tests only), so the whole
** device path of tc runs on a machine without a GPU: device memory is host
** memory (every address checked against the live blocks, freed blocks
** poisoned first), copies are memcpy, a module is the CUDA C in a fake
** NVRTC image compiled for the host with gcc and shim.h (hostrun.h), and a
** launch runs its grid of blocks of fiber threads, handing tck_entry's host
** trampoline the by-value parameter block the real driver would copy.
** One device: compute capability 9.0, 2 multiprocessors.
**   TC_FAKE_CUDA_MEM_LIMIT=N  cuMemAlloc fails (out of memory) past N bytes
*/
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"
#include "../hostrun.h"

typedef unsigned long long cu_ptr;

enum {
  OK = 0, ERR_INVALID_VALUE = 1, ERR_OUT_OF_MEMORY = 2,
  ERR_NOT_INITIALIZED = 3, ERR_INVALID_IMAGE = 200,
  ERR_INVALID_CONTEXT = 201, ERR_NOT_FOUND = 500,
  ERR_LAUNCH_OUT_OF_RESOURCES = 701, ERR_LAUNCH_FAILED = 719
};

static bool initialized;
static int dummy_ctx, dummy_stream;

/* -- Errors -------------------------------------------------------------------- */

int cuGetErrorString(int rc, const char **s)
{
  switch (rc) {
  case OK: *s = "no error"; return OK;
  case ERR_INVALID_VALUE: *s = "invalid argument"; return OK;
  case ERR_OUT_OF_MEMORY: *s = "out of memory"; return OK;
  case ERR_NOT_INITIALIZED: *s = "initialization error"; return OK;
  case ERR_INVALID_IMAGE: *s = "device kernel image is invalid"; return OK;
  case ERR_INVALID_CONTEXT: *s = "invalid device context"; return OK;
  case ERR_NOT_FOUND: *s = "named symbol not found"; return OK;
  case ERR_LAUNCH_OUT_OF_RESOURCES:
    *s = "too many resources requested for launch";
    return OK;
  case ERR_LAUNCH_FAILED: *s = "unspecified launch failure"; return OK;
  }
  *s = NULL;
  return ERR_INVALID_VALUE;
}

/* The real NVRTC loads libcuda.so.1 too (this one, when the fake NVRTC
** has it check kernels: TC_FAKE_NVRTC_CHECK) and asks for the driver's
** private tables: there are none here. */
int cuGetExportTable(const void **table, const void *id)
{
  (void)id;
  *table = NULL;
  return ERR_NOT_FOUND;
}

/* -- Device and context ---------------------------------------------------------- */

int cuInit(unsigned flags)
{
  initialized = flags == 0;
  return initialized ? OK : ERR_INVALID_VALUE;
}

int cuDeviceGetCount(int *n)
{
  *n = 1;
  return initialized ? OK : ERR_NOT_INITIALIZED;
}

int cuDeviceGet(int *d, int ordinal)
{
  *d = 0;
  return ordinal == 0 ? OK : ERR_INVALID_VALUE;
}

/* Compute capability: 9.0, or TC_FAKE_CUDA_CC ("8.6") to stand for
** another device (the kernel store keys cubins by arch). */
static int capability(int part)
{
  const char *cc = getenv("TC_FAKE_CUDA_CC");
  int major = 9, minor = 0;
  if (cc && sscanf(cc, "%d.%d", &major, &minor) != 2)
    major = 9, minor = 0;
  return part ? minor : major;
}

int cuDeviceGetAttribute(int *v, int attr, int d)
{
  (void)d;
  switch (attr) {
  case 16: *v = 2; return OK;    /* multiprocessors */
  case 75: *v = capability(0); return OK;
  case 76: *v = capability(1); return OK;
  }
  return ERR_INVALID_VALUE;
}

int cuDevicePrimaryCtxRetain(void **ctx, int d)
{
  (void)d;
  *ctx = &dummy_ctx;
  return OK;
}

/* A context is current per thread, as on a device: the calls below that
** need one fail on a thread that never made it current (tc's threads: the
** pool's workers, the background compiler). A pthread key, not
** _Thread_local: LeakSanitizer's exit-time scan crashed on this dlopen'd
** library's dynamic TLS. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_key_make(void) { pthread_key_create(&ctx_key, NULL); }

static bool ctx_current(void)
{
  pthread_once(&ctx_once, ctx_key_make);
  return pthread_getspecific(ctx_key) != NULL;
}

int cuCtxSetCurrent(void *ctx)
{
  if (ctx != &dummy_ctx)
    return ERR_INVALID_VALUE;
  pthread_once(&ctx_once, ctx_key_make);
  return pthread_setspecific(ctx_key, ctx) == 0 ? OK : ERR_INVALID_VALUE;
}

#define NEED_CONTEXT()                                                    \
  do {                                                                    \
    if (!ctx_current()) {                                                 \
      fprintf(stderr, "fake libcuda: %s: no context is current on this " \
              "thread\n", __func__);                                      \
      return ERR_INVALID_CONTEXT;                                         \
    }                                                                     \
  } while (0)

int cuStreamCreate(void **s, unsigned flags)
{
  NEED_CONTEXT();
  (void)flags;
  *s = &dummy_stream;
  return OK;
}

int cuStreamSynchronize(void *s)
{
  NEED_CONTEXT();
  return s == &dummy_stream ? OK : ERR_INVALID_VALUE;
}

/* -- Memory ---------------------------------------------------------------------- */

#define POISON 0xdb

typedef struct block {
  struct block *next;
  char *base;
  size_t size;
} block;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static block *live;
static size_t live_bytes;

/* Bytes the fake device holds (tests check the allocator gives back). */
size_t tc_fake_cuda_live_bytes(void)
{
  pthread_mutex_lock(&mem_lock);
  size_t n = live_bytes;
  pthread_mutex_unlock(&mem_lock);
  return n;
}

/* The device address of host byte p, and back (devtag.h). */
static cu_ptr dev_addr(const char *p)
{
  return (cu_ptr)(uintptr_t)p | TCK_DEVICE_TAG;
}

static void *dev(cu_ptr p) { return TCK_HOST_PTR(p); }

/* Is p a device address, with [p, p + n) in one live block? */
static bool in_live(cu_ptr p, size_t n)
{
  if (!(p & TCK_DEVICE_TAG))
    return false;
  const char *h = dev(p);
  pthread_mutex_lock(&mem_lock);
  bool ok = false;
  for (block *b = live; b && !ok; b = b->next)
    ok = h >= b->base && h + n <= b->base + b->size;
  pthread_mutex_unlock(&mem_lock);
  return ok;
}

int cuMemAlloc_v2(cu_ptr *p, size_t n)
{
  NEED_CONTEXT();
  const char *limit = getenv("TC_FAKE_CUDA_MEM_LIMIT");
  if (!n)
    return ERR_INVALID_VALUE;
  if (limit && live_bytes + n > strtoull(limit, NULL, 10))
    return ERR_OUT_OF_MEMORY;
  block *b = malloc(sizeof *b);
  char *base = malloc(n);
  if (!b || !base) {
    free(b);
    free(base);
    return ERR_OUT_OF_MEMORY;
  }
  memset(base, POISON, n);   /* device memory starts as garbage */
  pthread_mutex_lock(&mem_lock);
  *b = (block){ live, base, n };
  live = b;
  live_bytes += n;
  pthread_mutex_unlock(&mem_lock);
  *p = dev_addr(base);
  return OK;
}

int cuMemFree_v2(cu_ptr p)
{
  NEED_CONTEXT();
  pthread_mutex_lock(&mem_lock);
  block **at = &live;
  while (*at && dev_addr((*at)->base) != p)
    at = &(*at)->next;
  block *b = *at;
  if (b) {
    *at = b->next;
    live_bytes -= b->size;
  }
  pthread_mutex_unlock(&mem_lock);
  if (!b)
    return ERR_INVALID_VALUE;
  memset(b->base, POISON, b->size);   /* a use after free reads garbage */
  free(b->base);
  free(b);
  return OK;
}

int cuMemAllocHost_v2(void **p, size_t n)
{
  NEED_CONTEXT();
  *p = malloc(n);
  return *p ? OK : ERR_OUT_OF_MEMORY;
}

int cuMemFreeHost(void *p)
{
  NEED_CONTEXT();
  free(p);
  return OK;
}

int cuMemcpyHtoDAsync_v2(cu_ptr dst, const void *src, size_t n, void *s)
{
  NEED_CONTEXT();
  if (s != &dummy_stream || !in_live(dst, n))
    return ERR_INVALID_VALUE;
  memcpy(dev(dst), src, n);
  return OK;
}

int cuMemcpyDtoHAsync_v2(void *dst, cu_ptr src, size_t n, void *s)
{
  NEED_CONTEXT();
  if (s != &dummy_stream || !in_live(src, n))
    return ERR_INVALID_VALUE;
  memcpy(dst, dev(src), n);
  return OK;
}

int cuMemcpyDtoDAsync_v2(cu_ptr dst, cu_ptr src, size_t n, void *s)
{
  NEED_CONTEXT();
  if (s != &dummy_stream || !in_live(dst, n) || !in_live(src, n))
    return ERR_INVALID_VALUE;
  memmove(dev(dst), dev(src), n);
  return OK;
}

int cuMemsetD8Async(cu_ptr dst, unsigned char v, size_t n, void *s)
{
  NEED_CONTEXT();
  if (s != &dummy_stream || !in_live(dst, n))
    return ERR_INVALID_VALUE;
  memset(dev(dst), v, n);
  return OK;
}

/* -- Modules and launches ----------------------------------------------------------- */

typedef void (*entry_fn)(const void *params);

int cuModuleLoadData(void **mod, const void *image)
{
  NEED_CONTEXT();
  size_t m = strlen(FAKE_IMAGE_MAGIC);
  if (!image || strncmp(image, FAKE_IMAGE_MAGIC, m) != 0)
    return ERR_INVALID_IMAGE;
  char why[300];
  hr_module *hm = hr_compile((const char *)image + m, why, sizeof why);
  if (!hm) {
    fprintf(stderr, "fake libcuda: cuModuleLoadData: %s\n", why);
    return ERR_INVALID_IMAGE;
  }
  *mod = hm;
  return OK;
}

typedef struct { hr_module *mod; entry_fn entry; } function;

int cuModuleGetFunction(void **fn, void *mod, const char *name)
{
  NEED_CONTEXT();
  entry_fn e = (entry_fn)hr_symbol(mod, name);
  function *f = e ? malloc(sizeof *f) : NULL;   /* kept: like the module */
  if (!e)
    return ERR_NOT_FOUND;
  if (!f)
    return ERR_OUT_OF_MEMORY;
  *f = (function){ mod, e };
  *fn = f;
  return OK;
}

typedef struct { entry_fn entry; const void *params; } launch_args;

static void call_entry(void *ctx)
{
  const launch_args *a = ctx;
  a->entry(a->params);
}

/* A device refuses a block whose threads' registers do not fit a
** multiprocessor's 64K. The fake cannot know a kernel's register count, so
** it refuses what would not fit at NVRTC's ceiling of 255 a thread (256 as
** a warp's registers are allocated): more than 256 threads (jit_cuda.h:
** JCUDA_LAUNCH_THREADS). */
#define FAKE_BLOCK_MAX (65536 / 256)

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                   void *s, void **params, void **extra)
{
  NEED_CONTEXT();
  const function *f = fn;
  if (!f || gy != 1 || gz != 1 || by != 1 || bz != 1 || shmem || extra ||
      s != &dummy_stream || !params || !params[0])
    return ERR_INVALID_VALUE;
  if (bx > FAKE_BLOCK_MAX) {
    fprintf(stderr, "fake libcuda: cuLaunchKernel: a block of %u threads "
            "may need more registers than a multiprocessor has\n", bx);
    return ERR_LAUNCH_OUT_OF_RESOURCES;
  }
  launch_args a = { f->entry, params[0] };
  char why[300];
  if (hr_launch(f->mod, gx, bx, call_entry, &a, why, sizeof why) < 0) {
    fprintf(stderr, "fake libcuda: cuLaunchKernel: %s\n", why);
    return ERR_LAUNCH_FAILED;
  }
  return OK;
}
