/*
** log.c -- TC_LOG: one-line events on stderr, by category
** (TC_LOG=regions,guards,recompiles,fusion,compile,cache,fallback or all).
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

tensor_trace_hooks tensor_hooks;

static const struct {
  const char *name;
  unsigned bit;
} cats[] = {
  { "regions", TC_LOG_REGIONS }, { "guards", TC_LOG_GUARDS },
  { "recompiles", TC_LOG_RECOMPILES }, { "fusion", TC_LOG_FUSION },
  { "compile", TC_LOG_COMPILE }, { "cache", TC_LOG_CACHE },
  { "fallback", TC_LOG_FALLBACK }, { "error", TC_LOG_ERROR },
};

static unsigned mask;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static FILE *sink;   /* NULL: stderr */

void tensor_log_to(FILE *f, unsigned cats)
{
  tensor_log_mask();
  sink = f;
  mask = cats;
}

static void parse(void)
{
  const char *v = getenv("TC_LOG");
  if (!v)
    return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok;
       tok = strtok_r(NULL, ", ", &save)) {
    if (strcmp(tok, "all") == 0 || strcmp(tok, "1") == 0)
      mask = ~0u;
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
      if (strcmp(tok, cats[i].name) == 0)
        mask |= cats[i].bit;
  }
}

unsigned tensor_log_mask(void)
{
  pthread_once(&once, parse);
  return mask;
}

void tensor_log(tc_log_cat c, const char *fmt, ...)
{
  const char *name = "log";
  for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
    if (cats[i].bit == (unsigned)c)
      name = cats[i].name;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  FILE *out = sink ? sink : stderr;
  fprintf(out, "tc[%s]: %s\n", name, line);
  fflush(out);
}
