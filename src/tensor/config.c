/*
** config.c -- the one place tc reads its environment. Every TC_* variable
** is read once, at first use, with one spelling for booleans (0, false,
** no, off / 1, true, yes, on, in any case) and numbers checked against
** their range; a value that is not understood gets one warning line on
** stderr and the default. An empty value is the same as an unset one.
** (TMPDIR, the system's, is read where temporary files are made: the
** compile worker points its own at a private folder.)
*/
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tensor.h"

static tensor_config cfg;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void warn(const char *name, const char *value, const char *why,
                 const char *dflt)
{
  fprintf(stderr, "tc[config]: %s=%s %s; using %s\n", name, value, why,
          dflt);
}

static const char *env(const char *name)
{
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static bool env_bool(const char *name, bool dflt)
{
  static const char *const no[] = { "0", "false", "no", "off" };
  static const char *const yes[] = { "1", "true", "yes", "on" };
  const char *v = env(name);
  if (!v)
    return dflt;
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, no[i]) == 0)
      return false;
    if (strcasecmp(v, yes[i]) == 0)
      return true;
  }
  warn(name, v, "is not a boolean (0/false/no/off or 1/true/yes/on)",
       dflt ? "1" : "0");
  return dflt;
}

/* An integer in [lo, hi]; anything else warns and gives dflt (named
** dname in the warning, or printed when dname is NULL). */
static int64_t env_int_named(const char *name, int64_t dflt,
                             const char *dname, int64_t lo, int64_t hi)
{
  const char *v = env(name);
  if (!v)
    return dflt;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  char d[32], why[96];
  snprintf(d, sizeof d, "%s", dname ? dname : "");
  if (!dname)
    snprintf(d, sizeof d, "%lld", (long long)dflt);
  if (errno || end == v || *end) {
    warn(name, v, "is not an integer", d);
    return dflt;
  }
  if (x < lo || x > hi) {
    snprintf(why, sizeof why, "is out of range [%lld, %lld]", (long long)lo,
             (long long)hi);
    warn(name, v, why, d);
    return dflt;
  }
  return x;
}

static int64_t env_int(const char *name, int64_t dflt, int64_t lo,
                       int64_t hi)
{
  return env_int_named(name, dflt, NULL, lo, hi);
}

static const struct {
  const char *name;
  unsigned bit;
} log_cats[] = {
  { "regions", TC_LOG_REGIONS }, { "guards", TC_LOG_GUARDS },
  { "recompiles", TC_LOG_RECOMPILES }, { "fusion", TC_LOG_FUSION },
  { "compile", TC_LOG_COMPILE }, { "cache", TC_LOG_CACHE },
  { "fallback", TC_LOG_FALLBACK },
};

const char *tensor_log_cat_name(unsigned bit)
{
  for (size_t i = 0; i < sizeof log_cats / sizeof log_cats[0]; i++)
    if (log_cats[i].bit == bit)
      return log_cats[i].name;
  return bit == TC_LOG_ERROR ? "error" : "log";
}

/* TC_LOG: a comma list of categories, or all (1). */
static unsigned env_log(void)
{
  const char *v = env("TC_LOG");
  if (!v)
    return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  unsigned mask = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok;
       tok = strtok_r(NULL, ", ", &save)) {
    bool known = false;
    if (strcasecmp(tok, "all") == 0 || strcmp(tok, "1") == 0) {
      mask = ~0u;
      known = true;
    }
    if (strcmp(tok, "0") == 0)
      known = true;
    for (size_t i = 0; i < sizeof log_cats / sizeof log_cats[0]; i++)
      if (strcasecmp(tok, log_cats[i].name) == 0) {
        mask |= log_cats[i].bit;
        known = true;
      }
    if (!known)
      warn("TC_LOG", tok, "is not a category (regions, guards, recompiles, "
           "fusion, compile, cache, fallback, all)", "the others");
  }
  return mask;
}

/* The disk store's root: TC_CACHE_DIR, else $XDG_CACHE_HOME/tc (an
** absolute path, per the XDG spec), else ~/.cache/tc. */
static void cache_dir(char *out, size_t len)
{
  const char *e;
  int n = 0;
  out[0] = '\0';
  if ((e = env("TC_CACHE_DIR")))
    n = snprintf(out, len, "%s", e);
  else if ((e = env("XDG_CACHE_HOME")) && *e == '/')
    n = snprintf(out, len, "%s/tc", e);
  else if ((e = env("HOME")))
    n = snprintf(out, len, "%s/.cache/tc", e);
  if (n < 0 || (size_t)n >= len) {
    warn("TC_CACHE_DIR", "...", "gives a path that is too long",
         "no disk store");
    out[0] = '\0';
  }
}

static void load(void)
{
  tensor_config c;
  memset(&c, 0, sizeof c);
  c.compile = env_bool("TC_COMPILE", false);
  c.hot = (int)env_int("TC_HOT", 2, 1, 1 << 30);
  c.recompile_limit = (int)env_int("TC_RECOMPILE_LIMIT", 8, 1, 1 << 20);
  c.node_limit = (int)env_int("TC_NODE_LIMIT", 2048, 16, 1 << 24);
  c.async = env_bool("TC_ASYNC", true);
  c.jit = env_bool("TC_JIT", true);
  c.jit_worker = env_bool("TC_JIT_WORKER", true);
  c.jit_opt = (int)env_int("TC_JIT_OPT", 3, 0, 3);
  c.compile_workers = (int)env_int_named("TC_COMPILE_WORKERS", 0,
                                         "a core each, up to 4", 1, 16);
  const char *isa = env("TC_JIT_ISA");
  if (isa && strcmp(isa, "x86-64") && strcmp(isa, "x86-64-v2") &&
      strcmp(isa, "x86-64-v3") && strcmp(isa, "x86-64-v4"))
    warn("TC_JIT_ISA", isa, "is not x86-64, x86-64-v2, x86-64-v3 or "
         "x86-64-v4", "the CPU's level");
  else if (isa)
    snprintf(c.jit_isa, sizeof c.jit_isa, "%s", isa);
  const char *gccjit = env("TC_GCCJIT");
  if (gccjit && strlen(gccjit) >= sizeof c.gccjit)
    warn("TC_GCCJIT", gccjit, "is too long", "libgccjit.so.0");
  else if (gccjit)
    snprintf(c.gccjit, sizeof c.gccjit, "%s", gccjit);
  c.threads = (int)env_int_named("TC_THREADS", 0, "all cores", 1, 1024);
  c.spin_us = (int)env_int("TC_SPIN_US", 50, 0, 1000000);
  c.cache = env_bool("TC_CACHE", true);
  cache_dir(c.cache_dir, sizeof c.cache_dir);
  c.cache_max_mb = (uint64_t)env_int("TC_CACHE_MAX_MB", 1024, 0,
                                     INT64_MAX >> 20);
  c.pool_max_mb = env_int_named("TC_POOL_MAX_MB", -1, "RAM / 4", 0,
                                INT64_MAX >> 20);
  c.regions_max = (int)env_int("TC_REGIONS_MAX", 4096, 1, 1 << 24);
  c.kernels_max = (int)env_int("TC_KERNELS_MAX", 1024, 1, 1 << 24);
  c.log = env_log();
  c.debug = env_bool("TC_DEBUG", false);
  c.check_layout = env_bool("TC_CHECK_LAYOUT", false);
  c.stats = env_bool("TC_STATS", false);
  cfg = c;
}

const tensor_config *tensor_cfg(void)
{
  pthread_once(&once, load);
  return &cfg;
}

void tensor_config_reload(void)
{
  pthread_once(&once, load);
  load();
}
