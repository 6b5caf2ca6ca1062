/*
** driver.c -- the CUDA Driver API, loaded with dlopen: is there a device?
** DESIGN.md principle 8: without a driver or a device, CUDA requests get a
** clear error and everything else works. The toolkit's stub libcuda.so
** (for linking only) returns CUDA_ERROR_STUB_LIBRARY from cuInit.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "jit_cuda.h"

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100,
       CUDA_ERROR_STUB_LIBRARY = 34 };

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_errstr_fn)(int err, const char **str);

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool device_ok;
static char reason[256];

static const char *err_text(cu_errstr_fn errstr, int rc)
{
  const char *s = NULL;
  if (errstr && errstr(rc, &s) == CUDA_SUCCESS && s)
    return s;
  return "unknown error";
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
  cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
  cu_errstr_fn errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
  if (!init || !count) {
    snprintf(reason, sizeof reason, "the CUDA driver lacks cuInit");
    return;   /* the handle stays open: cheap, and never reloaded */
  }
  int rc = init(0);
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
    snprintf(reason, sizeof reason, "cuInit failed: %s (%d)",
             err_text(errstr, rc), rc);
    return;
  }
  int n = 0;
  rc = count(&n);
  if (rc != CUDA_SUCCESS || n <= 0) {
    snprintf(reason, sizeof reason, "no CUDA device");
    return;
  }
  device_ok = true;
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
