/*
** driver.c -- the CUDA Driver API, loaded with dlopen: is there a device,
** and the few calls tc makes on it: the primary context, one stream,
** memory, copies (host copies through a pinned staging buffer), modules
** and launches. DESIGN.md principle 8: without a driver or a device, CUDA
** requests get a clear error and everything else works. The toolkit's stub
** libcuda.so (for linking only) returns CUDA_ERROR_STUB_LIBRARY from cuInit.
** Every failed driver call becomes a tc error (TC_E_DEVICE) naming the
** call and carrying the driver's own error string.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_cuda.h"

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100,
       CUDA_ERROR_STUB_LIBRARY = 34 };
enum { ATTR_SM_COUNT = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

typedef unsigned long long cu_ptr;
typedef void *cu_handle;   /* CUcontext, CUstream, CUmodule, CUfunction */

/* The entry points, by their exported (_v2 where the API has one) names. */
static struct {
  int (*init)(unsigned);
  int (*device_count)(int *);
  int (*errstr)(int, const char **);
  int (*device_get)(int *, int);
  int (*attribute)(int *, int, int);
  int (*primary_retain)(cu_handle *, int);
  int (*ctx_set_current)(cu_handle);
  int (*stream_create)(cu_handle *, unsigned);
  int (*stream_sync)(cu_handle);
  int (*mem_alloc)(cu_ptr *, size_t);
  int (*mem_free)(cu_ptr);
  int (*host_alloc)(void **, size_t);
  int (*host_free)(void *);
  int (*htod)(cu_ptr, const void *, size_t, cu_handle);
  int (*dtoh)(void *, cu_ptr, size_t, cu_handle);
  int (*dtod)(cu_ptr, cu_ptr, size_t, cu_handle);
  int (*memset8)(cu_ptr, unsigned char, size_t, cu_handle);
  int (*module_load)(cu_handle *, const void *);
  int (*module_function)(cu_handle *, cu_handle, const char *);
  int (*launch)(cu_handle, unsigned, unsigned, unsigned, unsigned, unsigned,
                unsigned, unsigned, cu_handle, void **, void **);
} cu;

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool device_ok;
static char reason[256];

/* The device state, made by the probe when a device is there. */
static struct {
  int device;
  cu_handle ctx, stream;
  int cc_major, cc_minor, sm_count;
} dev;

static const char *err_text(int rc)
{
  const char *s = NULL;
  if (cu.errstr && cu.errstr(rc, &s) == CUDA_SUCCESS && s)
    return s;
  return "unknown error";
}

/* rc of driver call `what`: 0, or -1 with the tc error set. */
static int check(int rc, const char *what)
{
  if (rc == CUDA_SUCCESS)
    return 0;
  tc_seterr(TC_E_DEVICE, "%s failed: %s (CUDA error %d)", what, err_text(rc),
            rc);
  return -1;
}

static bool load_symbols(void *h)
{
#define SYM(field, name) (cu.field = (__typeof__(cu.field))dlsym(h, name))
  SYM(errstr, "cuGetErrorString");
  return SYM(init, "cuInit") && SYM(device_count, "cuDeviceGetCount") &&
         SYM(device_get, "cuDeviceGet") &&
         SYM(attribute, "cuDeviceGetAttribute") &&
         SYM(primary_retain, "cuDevicePrimaryCtxRetain") &&
         SYM(ctx_set_current, "cuCtxSetCurrent") &&
         SYM(stream_create, "cuStreamCreate") &&
         SYM(stream_sync, "cuStreamSynchronize") &&
         SYM(mem_alloc, "cuMemAlloc_v2") && SYM(mem_free, "cuMemFree_v2") &&
         SYM(host_alloc, "cuMemAllocHost_v2") &&
         SYM(host_free, "cuMemFreeHost") &&
         SYM(htod, "cuMemcpyHtoDAsync_v2") &&
         SYM(dtoh, "cuMemcpyDtoHAsync_v2") &&
         SYM(dtod, "cuMemcpyDtoDAsync_v2") &&
         SYM(memset8, "cuMemsetD8Async") &&
         SYM(module_load, "cuModuleLoadData") &&
         SYM(module_function, "cuModuleGetFunction") &&
         SYM(launch, "cuLaunchKernel");
#undef SYM
}

/* Device 0's primary context, its attributes and tc's one stream. */
static bool open_device(void)
{
  int rc;
  if ((rc = cu.device_get(&dev.device, 0)) != CUDA_SUCCESS ||
      (rc = cu.primary_retain(&dev.ctx, dev.device)) != CUDA_SUCCESS ||
      (rc = cu.ctx_set_current(dev.ctx)) != CUDA_SUCCESS ||
      (rc = cu.attribute(&dev.cc_major, ATTR_CC_MAJOR, dev.device)) ||
      (rc = cu.attribute(&dev.cc_minor, ATTR_CC_MINOR, dev.device)) ||
      (rc = cu.attribute(&dev.sm_count, ATTR_SM_COUNT, dev.device)) ||
      (rc = cu.stream_create(&dev.stream, 0)) != CUDA_SUCCESS) {
    snprintf(reason, sizeof reason, "opening CUDA device 0 failed: %s (%d)",
             err_text(rc), rc);
    return false;
  }
  if (dev.sm_count < 1)
    dev.sm_count = 1;
  return true;
}

void *jcuda_open_toolkit_lib(const char *const *sonames, int n)
{
  const char *dirs[] = { getenv("CUDA_HOME"), getenv("CUDA_PATH"),
                         "/usr/local/cuda" };
  for (int i = 0; i < n; i++) {
    void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (h)
      return h;
  }
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++)
    for (int i = 0; dirs[d] && dirs[d][0] && i < n; i++) {
      char path[4096];
      if (snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], sonames[i]) >=
          (int)sizeof path)
        continue;
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h)
        return h;
    }
  return NULL;
}

static void probe(void)
{
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(reason, sizeof reason, "no CUDA driver (%s)",
             e ? e : "libcuda.so.1 not found");
    return;
  }
  /* the handle stays open: cheap, and never reloaded */
  if (!load_symbols(h)) {
    snprintf(reason, sizeof reason, "the CUDA driver lacks an entry point "
             "tc uses (too old?)");
    return;
  }
  int rc = cu.init(0);
  if (rc == CUDA_ERROR_STUB_LIBRARY) {
    snprintf(reason, sizeof reason, "the CUDA driver is the toolkit's stub "
             "library (no NVIDIA driver installed)");
    return;
  }
  if (rc == CUDA_ERROR_NO_DEVICE) {
    snprintf(reason, sizeof reason, "no CUDA device");
    return;
  }
  if (rc != CUDA_SUCCESS) {
    snprintf(reason, sizeof reason, "cuInit failed: %s (%d)", err_text(rc),
             rc);
    return;
  }
  int n = 0;
  rc = cu.device_count(&n);
  if (rc != CUDA_SUCCESS || n <= 0) {
    snprintf(reason, sizeof reason, "no CUDA device");
    return;
  }
  device_ok = open_device();
}

bool jcuda_device_available(void)
{
  pthread_once(&probe_once, probe);
  return device_ok;
}

const char *jcuda_device_reason(void)
{
  pthread_once(&probe_once, probe);
  return device_ok ? NULL : reason;
}

/* -- Per-call setup ----------------------------------------------------------- */

/* The device is there and the calling thread has its context current (a
** context is per thread; setting it once per thread is enough). */
static int ready(const char *fn)
{
  static _Thread_local bool current;
  if (!jcuda_device_available()) {
    tc_seterr(TC_E_DEVICE, "%s: CUDA is not available: %s", fn, reason);
    return -1;
  }
  if (!current) {
    if (check(cu.ctx_set_current(dev.ctx), "cuCtxSetCurrent") < 0)
      return -1;
    current = true;
  }
  return 0;
}

int jcuda_arch(char *buf, size_t len)
{
  if (ready(__func__) < 0)
    return -1;
  snprintf(buf, len, "sm_%d%d", dev.cc_major, dev.cc_minor);
  return 0;
}

int jcuda_sm_count(void)
{
  return jcuda_device_available() ? dev.sm_count : 0;
}

void *jcuda_stream(void)
{
  return jcuda_device_available() && ready(__func__) == 0 ? dev.stream
                                                          : NULL;
}

int jcuda_sync(void)
{
  if (ready(__func__) < 0)
    return -1;
  return check(cu.stream_sync(dev.stream), "cuStreamSynchronize");
}

/* -- Memory ------------------------------------------------------------------- */

int jcuda_raw_alloc(jcuda_ptr *p, size_t nbytes)
{
  *p = 0;
  if (ready(__func__) < 0)
    return -1;
  cu_ptr d = 0;
  if (check(cu.mem_alloc(&d, nbytes ? nbytes : 1), "cuMemAlloc") < 0)
    return -1;
  *p = d;
  return 0;
}

int jcuda_raw_free(jcuda_ptr p)
{
  if (!p || ready(__func__) < 0)
    return -1;
  return check(cu.mem_free(p), "cuMemFree");
}

/* -- Copies ------------------------------------------------------------------- */

/* Host copies go through one pinned buffer (cuMemAllocHost): the device
** copies pinned memory asynchronously at full speed, and pageable memory
** through a hidden staging copy anyway. Copies to and from the host wait
** for the stream (the caller's buffer is read or filled on return). */
#define STAGING_BYTES ((size_t)8 << 20)

static pthread_mutex_t staging_lock = PTHREAD_MUTEX_INITIALIZER;
static void *staging;

static int staging_get(void)
{
  if (staging)
    return 0;
  return check(cu.host_alloc(&staging, STAGING_BYTES), "cuMemAllocHost");
}

int jcuda_copy_htod(jcuda_ptr dst, const void *src, size_t nbytes)
{
  if (ready(__func__) < 0)
    return -1;
  pthread_mutex_lock(&staging_lock);
  int rc = staging_get();
  for (size_t at = 0; rc == 0 && at < nbytes; at += STAGING_BYTES) {
    size_t n = nbytes - at < STAGING_BYTES ? nbytes - at : STAGING_BYTES;
    memcpy(staging, (const char *)src + at, n);
    rc = check(cu.htod(dst + at, staging, n, dev.stream), "cuMemcpyHtoDAsync");
    if (rc == 0)   /* the staging buffer is reused by the next piece */
      rc = check(cu.stream_sync(dev.stream), "cuStreamSynchronize");
  }
  pthread_mutex_unlock(&staging_lock);
  return rc;
}

int jcuda_copy_dtoh(void *dst, jcuda_ptr src, size_t nbytes)
{
  if (ready(__func__) < 0)
    return -1;
  pthread_mutex_lock(&staging_lock);
  int rc = staging_get();
  for (size_t at = 0; rc == 0 && at < nbytes; at += STAGING_BYTES) {
    size_t n = nbytes - at < STAGING_BYTES ? nbytes - at : STAGING_BYTES;
    rc = check(cu.dtoh(staging, src + at, n, dev.stream), "cuMemcpyDtoHAsync");
    if (rc == 0)
      rc = check(cu.stream_sync(dev.stream), "cuStreamSynchronize");
    if (rc == 0)
      memcpy((char *)dst + at, staging, n);
  }
  pthread_mutex_unlock(&staging_lock);
  return rc;
}

int jcuda_copy_dtod(jcuda_ptr dst, jcuda_ptr src, size_t nbytes)
{
  if (ready(__func__) < 0)
    return -1;
  if (!nbytes)
    return 0;
  return check(cu.dtod(dst, src, nbytes, dev.stream), "cuMemcpyDtoDAsync");
}

int jcuda_memset(jcuda_ptr dst, int byte, size_t nbytes)
{
  if (ready(__func__) < 0)
    return -1;
  if (!nbytes)
    return 0;
  return check(cu.memset8(dst, (unsigned char)byte, nbytes, dev.stream),
               "cuMemsetD8Async");
}

/* Free the staging buffer (at exit, with the allocator's cache). */
void jcuda_release_staging(void)
{
  pthread_mutex_lock(&staging_lock);
  if (staging && ready(__func__) == 0)
    cu.host_free(staging);
  staging = NULL;
  pthread_mutex_unlock(&staging_lock);
}

/* -- Modules and launches ------------------------------------------------------- */

int jcuda_module_load(const void *image, jcuda_function *fn)
{
  *fn = NULL;
  if (ready(__func__) < 0)
    return -1;
  cu_handle mod = NULL, f = NULL;
  if (check(cu.module_load(&mod, image), "cuModuleLoadData") < 0 ||
      check(cu.module_function(&f, mod, JCUDA_LAUNCH_ENTRY),
            "cuModuleGetFunction") < 0)
    return -1;
  *fn = f;   /* the module lives as long as the process (cached kernels) */
  return 0;
}

int jcuda_launch(jcuda_function fn, unsigned grid, unsigned block,
                 void *params)
{
  if (ready(__func__) < 0)
    return -1;
  void *args[] = { params };
  return check(cu.launch(fn, grid, 1, 1, block, 1, 1, 0, dev.stream, args,
                         NULL), "cuLaunchKernel");
}
