/*
** gccjit_api.c -- libgccjit loaded with dlopen (gccjit_api.h).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gccjit_api.h"
#include "../tensor/tensor.h"

jcpu_gccjit_api jcpu_gccjit;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[512];   /* why it did not load; "" once loaded */

static void load(void)
{
  const char *name = tensor_cfg()->gccjit[0] ? tensor_cfg()->gccjit
                                             : "libgccjit.so.0";
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(failure, sizeof failure, "libgccjit not available (%s)",
             e ? e : name);
    return;
  }
  /* the handle stays open: compiled kernels' code lives in it */
#define JCPU_GCCJIT_RESOLVE(n)                                              \
  if (!(jcpu_gccjit.n = (__typeof__(jcpu_gccjit.n))dlsym(h, "gcc_jit_" #n))) \
  {                                                                         \
    snprintf(failure, sizeof failure, "libgccjit not available (%s lacks " \
             "gcc_jit_" #n ")", name);                                      \
    return;                                                                 \
  }
  JCPU_GCCJIT_FUNCS(JCPU_GCCJIT_RESOLVE)
#undef JCPU_GCCJIT_RESOLVE
#define JCPU_GCCJIT_RESOLVE_OPTIONAL(n) \
  jcpu_gccjit.n = (__typeof__(jcpu_gccjit.n))dlsym(h, "gcc_jit_" #n);
  JCPU_GCCJIT_OPTIONAL_FUNCS(JCPU_GCCJIT_RESOLVE_OPTIONAL)
#undef JCPU_GCCJIT_RESOLVE_OPTIONAL
}

int jcpu_gccjit_load(char *why, size_t len)
{
  pthread_once(&once, load);
  if (!failure[0])
    return 0;
  if (why && len)
    snprintf(why, len, "%s", failure);
  return -1;
}
