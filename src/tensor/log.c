/*
** log.c -- TC_LOG: one-line events on stderr, by category
** (TC_LOG=regions,guards,recompiles,fusion,compile,cache,fallback or all).
*/
#include <stdarg.h>
#include <time.h>

#include "tensor.h"

tensor_trace_hooks tensor_hooks;

static bool overridden;       /* tensor_log_to was called (tests) */
static unsigned override_mask;
static FILE *sink;            /* NULL: stderr */

void tensor_log_to(FILE *f, unsigned cats)
{
  sink = f;
  override_mask = cats;
  overridden = true;
}

unsigned tensor_log_mask(void)
{
  return overridden ? override_mask : tensor_cfg()->log;
}

void tensor_log(tc_log_cat c, const char *fmt, ...)
{
  const char *name = tensor_log_cat_name((unsigned)c);
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  FILE *out = sink ? sink : stderr;
  fprintf(out, "tc[%s]: %s\n", name, line);
  fflush(out);
}

double tensor_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
