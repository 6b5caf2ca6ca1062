/*
** fake_nvrtc.c -- a stand-in for libnvrtc.so.13 (tests only): "compiling"
** keeps the source; the image is fake.h's magic plus the source, which the
** fake driver compiles for the host when it loads it. The entry points tc
** calls (src/jit_cuda/nvrtc.c) and nothing more.
*/
#include <stdlib.h>
#include <string.h>

#include "fake.h"

typedef struct { char *image; size_t len; } program;

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
  free(*p);
  *p = NULL;
  return OK;
}

int nvrtcCompileProgram(program *p, int nopts, const char *const *opts)
{
  (void)nopts, (void)opts;
  return p ? OK : ERR_INVALID_PROGRAM;
}

int nvrtcGetProgramLogSize(program *p, size_t *n)
{
  (void)p;
  *n = 1;
  return OK;
}

int nvrtcGetProgramLog(program *p, char *log)
{
  (void)p;
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
