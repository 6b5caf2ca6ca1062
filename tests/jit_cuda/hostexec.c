/*
** hostexec.c -- run the CUDA C of kernels on the host, and compile it with
** NVRTC; see hostexec.h.
*/
#include <dlfcn.h>
#include <elf.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostexec.h"
#include "hostrun.h"
#include "../../include/tc.h"
#include "../../src/jit_cuda/jit_cuda.h"
#include "../../src/trace/trace.h"
#include "../fuse/kir_roundtrip.h"


/* -- Kernels, by source text ------------------------------------------------ */

typedef void (*hx_entry)(char *const *bufs, const double *scalars,
                         const int64_t *dims, int64_t lo, int64_t hi);

typedef void (*hx_split_fn)(char *const *bufs, const double *scalars,
                            const int64_t *dims, char *scratch, int64_t lo,
                            int64_t hi);

typedef struct hx_kernel {
  struct hx_kernel *next;
  uint64_t hash;
  char *src;
  hr_module *mod;            /* compiled by hostrun.c, on first run */
  hx_entry entry;
  hx_split_fn partials, combine;   /* split reductions' phases, or NULL */
  bool nvrtc_done;
  unsigned long launches;    /* host runs of this kernel (the hook's cap) */
} hx_kernel;

static hx_kernel *kernels;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long nfiles;

static int compile_kernel(hx_kernel *kx, char *why, size_t wlen)
{
  kx->mod = hr_compile(kx->src, why, wlen);
  if (!kx->mod)
    return -1;
  kx->entry = (hx_entry)hr_symbol(kx->mod, JCUDA_ENTRY);
  if (!kx->entry) {
    snprintf(why, wlen, "the object lacks %s", JCUDA_ENTRY);
    return -1;
  }
  kx->partials = (hx_split_fn)hr_symbol(kx->mod, JCUDA_SPLIT_PARTIALS);
  kx->combine = (hx_split_fn)hr_symbol(kx->mod, JCUDA_SPLIT_COMBINE);
  return 0;
}

/* The kernel for k (rendered, and compiled on first sight). */
static hx_kernel *kernel_for(const kir_kernel *k, bool compile, char *why,
                             size_t wlen)
{
  char *src = jcuda_render(k, why, wlen);
  if (!src)
    return NULL;
  uint64_t h = hr_hash(src);
  for (hx_kernel *kx = kernels; kx; kx = kx->next)
    if (kx->hash == h && strcmp(kx->src, src) == 0) {
      free(src);
      if (compile && !kx->entry && compile_kernel(kx, why, wlen) < 0)
        return NULL;
      return kx;
    }
  hx_kernel *kx = calloc(1, sizeof *kx);
  if (!kx) {
    free(src);
    snprintf(why, wlen, "out of memory");
    return NULL;
  }
  kx->hash = h;
  kx->src = src;
  kx->next = kernels;
  kernels = kx;
  if (compile && compile_kernel(kx, why, wlen) < 0)
    return NULL;
  return kx;
}

/* -- Running: tck_main itself, as each thread ------------------------------- */

typedef struct {
  hx_entry entry;
  char *const *bufs;
  const double *scalars;
  const int64_t *dims;
  int64_t lo, hi;
} main_args;

static void call_main(void *ctx)
{
  const main_args *a = ctx;
  a->entry(a->bufs, a->scalars, a->dims, a->lo, a->hi);
}

typedef struct {
  hx_split_fn fn;
  char *const *bufs;
  const double *scalars;
  const int64_t *dims;
  char *scratch;
  int64_t lo, hi;
} split_args;

static void call_split(void *ctx)
{
  const split_args *a = ctx;
  a->fn(a->bufs, a->scalars, a->dims, a->scratch, a->lo, a->hi);
}

/* The two phases of a split reduction, through a scratch buffer poisoned
** first (a partial never written would show). */
static int run_split(hx_kernel *kx, const kir_kernel *k, char *const *bufs,
                     const double *scalars, const int64_t *dims, int64_t lo,
                     int64_t hi, hx_config cfg, char *why, size_t wlen)
{
  if (!kx->partials || !kx->combine || !jcuda_splittable(k)) {
    snprintf(why, wlen, "a split launch of a kernel without split phases");
    return -1;
  }
  if (cfg.block2 < 1 || cfg.block2 > JCUDA_MAX_THREADS || cfg.grid2 < 1) {
    snprintf(why, wlen, "bad launch configuration (phase 2)");
    return -1;
  }
  size_t n = jcuda_split_scratch(k, hi - lo);
  char *scratch = malloc(n);
  if (!scratch) {
    snprintf(why, wlen, "out of memory");
    return -1;
  }
  memset(scratch, 0xa5, n);
  split_args a = { kx->partials, bufs, scalars, dims, scratch, lo, hi };
  int rc = hr_launch(kx->mod, cfg.grid, cfg.block, call_split, &a, why, wlen);
  if (rc == 0) {
    a.fn = kx->combine;
    rc = hr_launch(kx->mod, cfg.grid2, cfg.block2, call_split, &a, why,
                   wlen);
  }
  free(scratch);
  return rc;
}

int hx_run(const kir_kernel *k, char *const *bufs, const double *scalars,
           const int64_t *dims, int64_t lo, int64_t hi, hx_config cfg,
           char *why, size_t wlen)
{
  if (cfg.block < 1 || cfg.block > JCUDA_MAX_THREADS || cfg.grid < 1) {
    snprintf(why, wlen, "bad launch configuration");
    return -1;
  }
  pthread_mutex_lock(&lock);
  hx_kernel *kx = kernel_for(k, true, why, wlen);
  pthread_mutex_unlock(&lock);
  if (!kx)
    return -1;
  if (cfg.split)
    return run_split(kx, k, bufs, scalars, dims, lo, hi, cfg, why, wlen);
  main_args a = { kx->entry, bufs, scalars, dims, lo, hi };
  return hr_launch(kx->mod, cfg.grid, cfg.block, call_main, &a, why, wlen);
}

/* -- NVRTC ---------------------------------------------------------------------- */

static int nvrtc_one(const char *src, const char *arch, jcuda_image kind,
                     char **image, size_t *len, char *why, size_t wlen)
{
  char *log = NULL;
  if (jcuda_nvrtc_compile(src, arch, kind, image, len, &log) < 0) {
    fprintf(stderr, "hostexec: NVRTC (%s) failed; the log:\n%s\n", arch,
            log ? log : "(none)");
    snprintf(why, wlen, "NVRTC failed for %s", arch);
    free(log);
    return -1;
  }
  if (log && strstr(log, "warning"))
    fprintf(stderr, "hostexec: NVRTC (%s) warned:\n%s\n", arch, log);
  free(log);
  return 0;
}

/* Render k and give its text to check, unless a check of that kind
** (what) accepted the same text before in this test run. */
typedef int (*text_check)(const char *src, char *why, size_t wlen);

static int checked(const kir_kernel *k, const char *what, text_check check,
                   char *why, size_t wlen)
{
  char *src = jcuda_render(k, why, wlen);
  if (!src)
    return -1;
  char ok[64];
  int rc = 0;
  if (!hr_cache_accepted(src, what, ok, sizeof ok)) {
    rc = check(src, why, wlen);
    if (rc == 0)
      hr_cache_put(ok, src);
    else
      fprintf(stderr, "hostexec: the CUDA C that failed:\n%s\n", src);
  }
  free(src);
  return rc;
}

static int cubin_check(const char *src, char *why, size_t wlen)
{
  char *image = NULL;
  size_t len;
  int rc = nvrtc_one(src, "sm_90", JCUDA_CUBIN, &image, &len, why, wlen);
  free(image);
  return rc;
}

int hx_nvrtc(const kir_kernel *k, char *why, size_t wlen)
{
  if (!jcuda_nvrtc_available())
    return 1;
  return checked(k, "cubin", cubin_check, why, wlen);
}

/* -- Machine code: ptxas and NVRTC's own assembler agree ------------------- */

/* The toolkit's ptxas: $CUDA_HOME's (as jcuda_open_toolkit_lib looks
** there too), else the usual places. */
static const char *ptxas_path(void)
{
  static char home[4096];
  const char *h = getenv("CUDA_HOME");
  if (h && h[0] &&
      snprintf(home, sizeof home, "%s/bin/ptxas", h) < (int)sizeof home &&
      access(home, X_OK) == 0)
    return home;
  static const char *const where[] = { "/usr/local/cuda/bin/ptxas",
                                       "/usr/bin/ptxas" };
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
    if (access(where[i], X_OK) == 0)
      return where[i];
  return NULL;
}

/* ptxas on ptx for sm_90: the cubin's bytes (malloc'd; *len), or NULL with
** a reason. */
static char *ptxas(const char *ptx, size_t *len, char *why, size_t wlen)
{
  const char *bin = ptxas_path();
  const char *workdir = bin ? hr_workdir(why, wlen) : NULL;
  if (!workdir)
    return NULL;
  char in[300], out[300], cmd[1100];
  pthread_mutex_lock(&lock);
  unsigned long id = nfiles++;
  pthread_mutex_unlock(&lock);
  snprintf(in, sizeof in, "%s/p%lu.ptx", workdir, id);
  snprintf(out, sizeof out, "%s/p%lu.cubin", workdir, id);
  if (hr_write_file(in, ptx) < 0) {
    snprintf(why, wlen, "cannot write %s", in);
    return NULL;
  }
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 -o '%s' '%s'", bin, out, in);
  char *image = NULL;
  if (system(cmd) != 0)
    snprintf(why, wlen, "ptxas failed on %s", in);
  else if (!(image = hr_read_bytes(out, len)))
    snprintf(why, wlen, "cannot read %s", out);
  else
    unlink(in);
  unlink(out);
  return image;
}

/* The machine code of a cubin (ELF64): each .text.* section's name and
** bytes, in section order, written into out; false if it is not one. */
static bool machine_code(const char *img, size_t len, char *out, size_t olen,
                         size_t *used)
{
  Elf64_Ehdr eh;
  if (len < sizeof eh)
    return false;
  memcpy(&eh, img, sizeof eh);
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
      eh.e_shstrndx >= eh.e_shnum ||
      (len - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
    return false;
  Elf64_Shdr strs;
  memcpy(&strs, img + eh.e_shoff + eh.e_shstrndx * sizeof strs, sizeof strs);
  if (strs.sh_offset > len || strs.sh_size > len - strs.sh_offset)
    return false;
  *used = 0;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, img + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_name >= strs.sh_size)
      return false;
    const char *name = img + strs.sh_offset + sh.sh_name;
    size_t nlen = strnlen(name, strs.sh_size - sh.sh_name);
    if (nlen < 6 || strncmp(name, ".text.", 6) != 0)
      continue;
    if (sh.sh_offset > len || sh.sh_size > len - sh.sh_offset ||
        nlen + 1 + sh.sh_size > olen - *used)
      return false;
    memcpy(out + *used, name, nlen + 1);
    memcpy(out + *used + nlen + 1, img + sh.sh_offset, sh.sh_size);
    *used += nlen + 1 + sh.sh_size;
  }
  return *used > 0;
}

bool hx_same_machine_code(const char *a, size_t alen, const char *b,
                          size_t blen)
{
  size_t na = 0, nb = 0;
  char *ca = malloc(alen), *cb = malloc(blen);
  bool same = ca && cb && machine_code(a, alen, ca, alen, &na) &&
              machine_code(b, blen, cb, blen, &nb) && na == nb &&
              memcmp(ca, cb, na) == 0;
  free(ca);
  free(cb);
  return same;
}

static int ptxas_check(const char *src, char *why, size_t wlen)
{
  char *ptx = NULL, *ours = NULL, *theirs = NULL;
  size_t plen, olen = 0, tlen = 0;
  int rc = nvrtc_one(src, "compute_90", JCUDA_PTX, &ptx, &plen, why, wlen);
  if (rc == 0)
    rc = nvrtc_one(src, "sm_90", JCUDA_CUBIN, &ours, &olen, why, wlen);
  if (rc == 0 && !(theirs = ptxas(ptx, &tlen, why, wlen)))
    rc = -1;
  if (rc == 0 && !hx_same_machine_code(ours, olen, theirs, tlen)) {
    snprintf(why, wlen, "NVRTC's sm_90 cubin and ptxas's differ in machine "
             "code");
    rc = -1;
  }
  free(ptx);
  free(ours);
  free(theirs);
  return rc;
}

int hx_ptxas_agrees(const kir_kernel *k, char *why, size_t wlen)
{
  if (!jcuda_nvrtc_available() || !ptxas_path())
    return 1;
  return checked(k, "ptxas", ptxas_check, why, wlen);
}

/* -- The launch hook (TC_TEST_CUDA) --------------------------------------------- */

static struct {
  bool host, nvrtc;
  char dump[256];            /* dump=DIR: each distinct kernel's files */
  unsigned long host_cap;    /* host runs per distinct kernel; 0: all */
  unsigned long launches, distinct, nvrtc_ok, nvrtc_skipped,
                failures;
} hook;

static void report_failure(const kir_kernel *k, const char *what,
                           const char *why)
{
  hook.failures++;
  if (hook.failures > 5)
    return;
  char *ir = kir_text(k);
  fprintf(stderr, "hostexec: %s failed: %s\nthe kernel IR:\n%s\n", what, why,
          ir ? ir : "(no text)");
  free(ir);
}

/* Launch configurations alternate, so runs use several: results may not
** depend on them. A splittable reduction whose rows span several chunks
** runs split every other time. */
static hx_config config_for(const kir_kernel *k, unsigned long n)
{
#define B(g, b) { .grid = g, .block = b }
#define S(g, b, g2, b2) { .grid = g, .block = b, .split = true, .grid2 = g2, \
                          .block2 = b2 }
  static const hx_config map[] = { B(3, 32), B(2, 64), B(1, 16) };
  static const hx_config rows[] = { B(2, 32), B(1, 64), B(3, 16) };
  static const hx_config split[] = { S(3, 32, 2, 32), S(2, 64, 1, 64),
                                     S(5, 16, 3, 16) };
#undef B
#undef S
  if (k->kind == KIR_MAP)
    return map[n % 3];
  if (jcuda_splittable(k) && k->row_len > TENSOR_RED_CHUNK && n % 2 == 0)
    return split[n / 2 % 3];
  return rows[n % 3];
}

/* DIR/kernel-N.ir (the IR text) and kernel-N.cu (its CUDA C). */
static void dump_kernel(const kir_kernel *k, unsigned long n)
{
  char path[400], why[200];
  char *ir = kir_text(k), *src = jcuda_render(k, why, sizeof why);
  snprintf(path, sizeof path, "%s/kernel-%lu.ir", hook.dump, n);
  if (ir && hr_write_file(path, ir) < 0)
    fprintf(stderr, "hostexec: cannot write %s\n", path);
  snprintf(path, sizeof path, "%s/kernel-%lu.cu", hook.dump, n);
  if (src && hr_write_file(path, src) < 0)
    fprintf(stderr, "hostexec: cannot write %s\n", path);
  free(ir);
  free(src);
}

static void nvrtc_check(const kir_kernel *k)
{
  char why[200];
  pthread_mutex_lock(&lock);
  hx_kernel *kx = kernel_for(k, false, why, sizeof why);
  bool first = kx && !kx->nvrtc_done;
  if (kx)
    kx->nvrtc_done = true;
  unsigned long n = first ? hook.distinct++ : 0;
  pthread_mutex_unlock(&lock);
  if (!kx) {
    report_failure(k, "rendering", why);
    return;
  }
  if (first && hook.dump[0])
    dump_kernel(k, n);
  if (first && kir_rt_problem(k, why, sizeof why))   /* tc-dump's parser */
    report_failure(k, "kir_parse round trip", why);
  if (!first || !hook.nvrtc)
    return;
  int rc = hx_nvrtc(k, why, sizeof why);
  if (rc < 0)
    report_failure(k, "NVRTC", why);
  else if (rc == 0)
    hook.nvrtc_ok++;
  else
    hook.nvrtc_skipped++;
}

/* Count a host run of k; false once it has had host_cap of them. */
static bool below_cap(const kir_kernel *k)
{
  char why[200];
  pthread_mutex_lock(&lock);
  hx_kernel *kx = kernel_for(k, false, why, sizeof why);
  bool below = !kx || kx->launches++ < hook.host_cap;
  pthread_mutex_unlock(&lock);
  return below;
}

static int launch_hook(const kir_kernel *k, char *const *bufs,
                       const double *scalars, const int64_t *dims,
                       int64_t lo, int64_t hi)
{
  if (hook.nvrtc || hook.dump[0])
    nvrtc_check(k);
  if (!hook.host)
    return -1;   /* the CPU backend runs it */
  char why[200];
  if (hook.host_cap && !below_cap(k))
    return -1;   /* checked enough times: the CPU backend runs it */
  hx_config cfg = config_for(k, __atomic_fetch_add(&hook.launches, 1,
                                                   __ATOMIC_RELAXED));
  if (hx_run(k, bufs, scalars, dims, lo, hi, cfg, why, sizeof why) < 0) {
    report_failure(k, "host run", why);
    return -1;
  }
  return 0;
}

static void summary(void)
{
  fprintf(stderr, "hostexec: %lu host launches, %lu distinct kernels, NVRTC "
          "%s: %lu compiled to sm_90 cubins, %lu skipped; %lu failures\n",
          hook.launches, hook.distinct, jcuda_nvrtc_version(), hook.nvrtc_ok,
          hook.nvrtc_skipped, hook.failures);
  if (hook.nvrtc && !jcuda_nvrtc_available())
    fprintf(stderr, "hostexec: NVRTC checks skipped: %s\n",
            jcuda_nvrtc_reason());
  hr_cleanup();
  /* kernels were compiled, yet none ran here: the hook was bypassed */
  tc_stats st;
  tc_stats_get(&st);
  bool bypassed = hook.host && hook.launches == 0 && st.kernels_compiled > 0;
  if (hook.failures || bypassed) {
    if (!hook.failures)
      fprintf(stderr, "hostexec: no kernel ran through the CUDA host path\n");
    fflush(NULL);
    _exit(1);
  }
}

__attribute__((constructor)) static void hook_init(void)
{
  const char *v = getenv("TC_TEST_CUDA");
  if (!v || !*v)
    return;
  /* The CPU kernels of these programs, too, are the same in both suites
  ** of a run (tests/run-all.sh): shared through one kernel store, by the
  ** tests that ask for it (TC_TEST_STORE_SHARED=1; not those that count
  ** or inject compiles, which a stored kernel would skip). */
  const char *store = getenv("TC_TEST_STORE");
  const char *shared = getenv("TC_TEST_STORE_SHARED");
  if (store && *store && shared && strcmp(shared, "1") == 0) {
    setenv("TC_CACHE", "1", 1);
    setenv("TC_CACHE_DIR", store, 1);
  }
  const char *h = strstr(v, "host");
  hook.host = h != NULL;
  if (h && h[4] == ':')
    hook.host_cap = strtoul(h + 5, NULL, 10);
  const char *n = strstr(v, "nvrtc");
  hook.nvrtc = n != NULL;
  const char *d = strstr(v, "dump=");
  if (d)
    snprintf(hook.dump, sizeof hook.dump, "%.*s", (int)strcspn(d + 5, ","),
             d + 5);
  trace_launch_hook = launch_hook;
  atexit(summary);
}
