/*
** nvrtc.c -- NVRTC, loaded with dlopen: CUDA C -> PTX or cubin, with the
** options that keep the device's arithmetic the CPU's (no contraction,
** IEEE division and square root, denormals kept). A failed compile hands
** back NVRTC's whole log: the caller logs it and falls back to eager.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_cuda.h"

typedef struct nvrtc_prog *nvrtc_prog;
typedef int (*create_fn)(nvrtc_prog *, const char *, const char *, int,
                         const char *const *, const char *const *);
typedef int (*destroy_fn)(nvrtc_prog *);
typedef int (*compile_fn)(nvrtc_prog, int, const char *const *);
typedef int (*size_fn)(nvrtc_prog, size_t *);
typedef int (*get_fn)(nvrtc_prog, char *);
typedef int (*version_fn)(int *, int *);
typedef const char *(*errstr_fn)(int);

static struct {
  create_fn create;
  destroy_fn destroy;
  compile_fn compile;
  size_fn log_size, ptx_size, cubin_size;
  get_fn log, ptx, cubin;
  errstr_fn errstr;
  char version[32];
} nv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char reason[256];

/* -fmad=false: no contraction (approx.h's fma_* are explicit fmaf/fma);
** -default-device: approx.h's plain `static inline` functions are device
** functions, so the file compiles unchanged for both targets. */
static const char *const options[] = {
  "-fmad=false", "-prec-div=true", "-prec-sqrt=true", "-ftz=false",
  "-default-device", "-std=c++17",
};
#define NOPTIONS (int)(sizeof options / sizeof options[0])
/* -minimal (NVRTC 12.4 on): without the CUDA runtime's declarations
** (textures, device-side launch, cudadevrt), which no kernel uses, NVRTC
** starts each compile with less to parse (a small kernel to PTX: 51 ->
** 39 ms). The PTX is the same. */
static bool minimal;

static void *open_nvrtc(void)
{
  static const char *const names[] = {
    "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
  };
  return jcuda_open_toolkit_lib(names, 3);
}

static void load(void)
{
  snprintf(nv.version, sizeof nv.version, "nvrtc none");
  void *h = open_nvrtc();
  if (!h) {
    snprintf(reason, sizeof reason, "NVRTC not found (libnvrtc.so.13: the "
             "CUDA toolkit is not installed)");
    return;
  }
#define SYM(field, name) (nv.field = (__typeof__(nv.field))dlsym(h, name))
  if (!SYM(create, "nvrtcCreateProgram") ||
      !SYM(destroy, "nvrtcDestroyProgram") ||
      !SYM(compile, "nvrtcCompileProgram") ||
      !SYM(log_size, "nvrtcGetProgramLogSize") ||
      !SYM(log, "nvrtcGetProgramLog") || !SYM(ptx_size, "nvrtcGetPTXSize") ||
      !SYM(ptx, "nvrtcGetPTX") || !SYM(cubin_size, "nvrtcGetCUBINSize") ||
      !SYM(cubin, "nvrtcGetCUBIN") ||
      !SYM(errstr, "nvrtcGetErrorString")) {
    snprintf(reason, sizeof reason, "NVRTC lacks an entry point (too old?)");
    return;
  }
  version_fn ver = (version_fn)dlsym(h, "nvrtcVersion");
#undef SYM
  int major = 0, minor = 0;
  if (ver && ver(&major, &minor) == 0)
    snprintf(nv.version, sizeof nv.version, "nvrtc %d.%d", major, minor);
  minimal = major > 12 || (major == 12 && minor >= 4);
  loaded = true;
}

bool jcuda_nvrtc_available(void)
{
  pthread_once(&load_once, load);
  return loaded;
}

const char *jcuda_nvrtc_reason(void)
{
  pthread_once(&load_once, load);
  return loaded ? NULL : reason;
}

const char *jcuda_nvrtc_version(void)
{
  pthread_once(&load_once, load);
  return nv.version;
}

/* The options every compile passes (out has room for NOPTIONS + 1), in
** order; their count. For the key's text and for the compile alike. */
static int compile_options(const char **out)
{
  pthread_once(&load_once, load);
  int n = 0;
  for (int i = 0; i < NOPTIONS; i++)
    out[n++] = options[i];
  if (minimal)
    out[n++] = "-minimal";
  return n;
}

static char options_text[256];

static void join_options(void)
{
  const char *opts[NOPTIONS + 1];
  int nopts = compile_options(opts);
  size_t n = 0;
  for (int i = 0; i < nopts; i++)
    n += (size_t)snprintf(options_text + n, sizeof options_text - n, "%s%s",
                          i ? " " : "", opts[i]);
}

const char *jcuda_nvrtc_options(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, join_options);
  return options_text;
}

const char *jcuda_key_text(const char *arch, char *buf, size_t len)
{
  snprintf(buf, len, "cuda %s %s render %d fma %d %s", jcuda_nvrtc_version(),
           arch, JCUDA_RENDER_VERSION, jcuda_render_fma(),
           jcuda_nvrtc_options());
  return buf;
}

static char *dup_text(const char *s)
{
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

/* NVRTC's log, malloc'd (NULL when empty or unavailable). */
static char *program_log(nvrtc_prog p)
{
  size_t n = 0;
  if (nv.log_size(p, &n) != 0 || n <= 1)
    return NULL;
  char *text = malloc(n);
  if (text && nv.log(p, text) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

int jcuda_nvrtc_compile(const char *src, const char *arch, jcuda_image kind,
                        char **image, size_t *len, char **log)
{
  *image = NULL;
  *len = 0;
  *log = NULL;
  if (!jcuda_nvrtc_available()) {
    *log = dup_text(reason);
    return -1;
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "-arch=%s", arch);
  const char *opts[NOPTIONS + 2];
  int nopts = compile_options(opts);
  opts[nopts++] = archopt;
  nvrtc_prog p = NULL;
  int rc = nv.create(&p, src, "tc_kernel.cu", 0, NULL, NULL);
  if (rc != 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "nvrtcCreateProgram: %s", nv.errstr(rc));
    *log = dup_text(msg);
    return -1;
  }
  rc = nv.compile(p, nopts, opts);
  *log = program_log(p);
  if (rc == 0) {
    size_fn size = kind == JCUDA_PTX ? nv.ptx_size : nv.cubin_size;
    get_fn get = kind == JCUDA_PTX ? nv.ptx : nv.cubin;
    size_t n = 0;
    rc = size(p, &n);
    char *img = rc == 0 ? malloc(n ? n : 1) : NULL;
    if (img && get(p, img) == 0) {
      *image = img;
      *len = n;
    } else {
      free(img);
      rc = rc ? rc : -1;
    }
  }
  if (rc != 0 && !*log) {
    char msg[160];
    snprintf(msg, sizeof msg, "nvrtcCompileProgram: %s",
             rc > 0 ? nv.errstr(rc) : "no image");
    *log = dup_text(msg);
  }
  nv.destroy(&p);
  return rc == 0 ? 0 : -1;
}
