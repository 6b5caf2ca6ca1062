/*
** error.c -- thread-local last error. Ops return NULL or -1 and leave a
** message here naming the public function (libgccjit's get_last_error).
*/
#include <stdarg.h>
#include <stdlib.h>

#include "tensor.h"

static _Thread_local struct {
  tc_status code;
  char msg[256];
} last;

tc_status tc_seterr(tc_status code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last.msg, sizeof last.msg, fmt, ap);
  va_end(ap);
  last.code = code;
  return code;
}

void tc_seterr_null(const char *fn)
{
  if (last.code == TC_OK)   /* keep the first error of a NULL chain */
    tc_seterr(TC_E_ARG, "%s: argument is NULL", fn);
}

tc_status tc_errcode(void) { return last.code; }

const char *tc_last_error(void) { return last.code ? last.msg : NULL; }

void tc_clear_error(void)
{
  last.code = TC_OK;
  last.msg[0] = '\0';
}

void tensor_assert_fail(const char *file, int line, const char *cond)
{
  fprintf(stderr, "tc: internal assertion failed at %s:%d: %s\n", file, line,
          cond);
  abort();
}
