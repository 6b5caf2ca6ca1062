/*
** fake_nvrtc.c -- a stand-in for libnvrtc.so.13 (tests only): "compiling"
** keeps the source; the image is fake.h's magic plus the source, which the
** fake driver compiles for the host when it loads it. The entry points tc
** calls (src/jit_cuda/nvrtc.c) and nothing more.
**   TC_FAKE_NVRTC_CHECK=PATH  also compile the source with the real NVRTC
**                             at PATH (same options): a kernel it rejects
**                             fails here too, with its log; one it accepted
**                             before, in any process of a test run
**                             (TC_TEST_CUDA_CACHE), is not compiled again
*/
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"
#include "../hostrun.h"

typedef struct { char *image; size_t len; char *log; } program;

enum { OK = 0, ERR_INVALID_INPUT = 3, ERR_INVALID_PROGRAM = 5 };

int nvrtcVersion(int *major, int *minor)
{
  *major = 13;
  *minor = 0;
  return OK;
}

const char *nvrtcGetErrorString(int rc)
{
  return rc == OK ? "NVRTC_SUCCESS" : "NVRTC_ERROR (fake)";
}

int nvrtcCreateProgram(program **p, const char *src, const char *name,
                       int nheaders, const char *const *headers,
                       const char *const *include_names)
{
  (void)name, (void)nheaders, (void)headers, (void)include_names;
  if (!p || !src)
    return ERR_INVALID_INPUT;
  program *g = calloc(1, sizeof *g);
  size_t m = strlen(FAKE_IMAGE_MAGIC), n = strlen(src);
  char *img = malloc(m + n + 1);
  if (!g || !img) {
    free(g);
    free(img);
    return ERR_INVALID_INPUT;
  }
  memcpy(img, FAKE_IMAGE_MAGIC, m);
  memcpy(img + m, src, n + 1);
  g->image = img;
  g->len = m + n + 1;
  *p = g;
  return OK;
}

int nvrtcDestroyProgram(program **p)
{
  if (!p || !*p)
    return ERR_INVALID_PROGRAM;
  free((*p)->image);
  free((*p)->log);
  free(*p);
  *p = NULL;
  return OK;
}

/* -- The real NVRTC, when asked for ------------------------------------------ */

static struct {
  int (*create)(void **, const char *, const char *, int,
                const char *const *, const char *const *);
  int (*compile)(void *, int, const char *const *);
  int (*log_size)(void *, size_t *);
  int (*log)(void *, char *);
  int (*destroy)(void **);
} real;

static bool real_loaded(void)
{
  static void *h;
  const char *path = getenv("TC_FAKE_NVRTC_CHECK");
  if (!path || !*path)
    return false;
  if (!h && (h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != NULL) {
    real.create = (__typeof__(real.create))dlsym(h, "nvrtcCreateProgram");
    real.compile = (__typeof__(real.compile))dlsym(h, "nvrtcCompileProgram");
    real.log_size = (__typeof__(real.log_size))dlsym(h,
                                                     "nvrtcGetProgramLogSize");
    real.log = (__typeof__(real.log))dlsym(h, "nvrtcGetProgramLog");
    real.destroy = (__typeof__(real.destroy))dlsym(h, "nvrtcDestroyProgram");
  }
  if (!h || !real.create || !real.compile || !real.log_size || !real.log ||
      !real.destroy) {
    fprintf(stderr, "fake NVRTC: cannot use the real NVRTC at %s\n", path);
    return false;
  }
  return true;
}

/* Compile p's source with the real NVRTC; its log on failure. */
static int real_check(program *p, int nopts, const char *const *opts)
{
  void *rp = NULL;
  const char *src = p->image + strlen(FAKE_IMAGE_MAGIC);
  if (real.create(&rp, src, "tc_kernel.cu", 0, NULL, NULL) != 0)
    return ERR_INVALID_PROGRAM;
  int rc = real.compile(rp, nopts, opts);
  size_t n = 0;
  if (rc != 0 && real.log_size(rp, &n) == 0 && n > 1 &&
      (p->log = malloc(n)) != NULL && real.log(rp, p->log) != 0) {
    free(p->log);
    p->log = NULL;
  }
  real.destroy(&rp);
  return rc;
}

/* The options, a line each, then the source: what a verdict is kept by
** (malloc'd; NULL when out of memory). */
static char *verdict_text(const program *p, int nopts,
                          const char *const *opts)
{
  const char *src = p->image + strlen(FAKE_IMAGE_MAGIC);
  size_t n = strlen(src) + 1;
  for (int i = 0; i < nopts; i++)
    n += strlen(opts[i]) + 1;
  char *text = malloc(n), *at = text;
  if (!text)
    return NULL;
  for (int i = 0; i < nopts; i++)
    at += sprintf(at, "%s\n", opts[i]);
  strcpy(at, src);
  return text;
}

/* The real NVRTC's verdict: from the run's cache when it accepted these
** options and source before (the sanitized suite's tests run the release
** suite's kernels again), else compiled, and kept when accepted. */
static int real_verdict(program *p, int nopts, const char *const *opts)
{
  char *text = verdict_text(p, nopts, opts), name[64];
  if (text && hr_cache_accepted(text, "fake-nvrtc", name, sizeof name)) {
    free(text);
    return OK;
  }
  int rc = real_check(p, nopts, opts);
  if (rc == OK && text)
    hr_cache_put(name, text);
  free(text);
  return rc;
}

int nvrtcCompileProgram(program *p, int nopts, const char *const *opts)
{
  if (!p)
    return ERR_INVALID_PROGRAM;
  return real_loaded() ? real_verdict(p, nopts, opts) : OK;
}

int nvrtcGetProgramLogSize(program *p, size_t *n)
{
  *n = p->log ? strlen(p->log) + 1 : 1;
  return OK;
}

int nvrtcGetProgramLog(program *p, char *log)
{
  if (p->log)
    strcpy(log, p->log);
  else
    log[0] = 0;
  return OK;
}

static int image_size(program *p, size_t *n)
{
  if (!p)
    return ERR_INVALID_PROGRAM;
  *n = p->len;
  return OK;
}

static int image_get(program *p, char *out)
{
  if (!p)
    return ERR_INVALID_PROGRAM;
  memcpy(out, p->image, p->len);
  return OK;
}

int nvrtcGetPTXSize(program *p, size_t *n) { return image_size(p, n); }
int nvrtcGetPTX(program *p, char *out) { return image_get(p, out); }
int nvrtcGetCUBINSize(program *p, size_t *n) { return image_size(p, n); }
int nvrtcGetCUBIN(program *p, char *out) { return image_get(p, out); }
