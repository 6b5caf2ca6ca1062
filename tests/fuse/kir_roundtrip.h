/*
** kir_roundtrip.h -- the check that kir_parse inverts kir_print on a real
** kernel: print, parse, compare (code, sizes, strides) and print again.
** Used by test_kir.c and by hostexec (every distinct kernel a CUDA test
** builds).
*/
#ifndef TC_KIR_ROUNDTRIP_H
#define TC_KIR_ROUNDTRIP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/fuse/kir.h"

/* Do a and b have the sizes and (printed) strides? */
static inline bool kir_rt_same_layout(const kir_kernel *a,
                                      const kir_kernel *b)
{
  if (a->ndim != b->ndim || a->nbufs != b->nbufs ||
      (a->kind == KIR_ROWS && a->row_len != b->row_len))
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d])
      return false;
  int nstr = a->ndim + (a->kind == KIR_ROWS);
  for (int i = 0; i < a->nbufs; i++)
    for (int d = 0; d < nstr; d++)
      if (a->buf[i].stride[d] != b->buf[i].stride[d])
        return false;
  return true;
}

/* NULL when k survives the round trip; else what went wrong, in why. */
static inline const char *kir_rt_problem(const kir_kernel *k, char *why,
                                         size_t wlen)
{
  char *text = kir_text(k), *again = NULL;
  kir_kernel *back = text ? kir_parse(text, why, wlen) : NULL;
  if (!text)
    snprintf(why, wlen, "kir_text failed");
  else if (back && !kir_same_code(k, back))
    snprintf(why, wlen, "parsed kernel differs in code");
  else if (back && !kir_rt_same_layout(k, back))
    snprintf(why, wlen, "parsed kernel differs in sizes or strides");
  else if (back && (!(again = kir_text(back)) || strcmp(again, text) != 0))
    snprintf(why, wlen, "parsed kernel prints differently");
  bool ok = back && kir_same_code(k, back) && kir_rt_same_layout(k, back) &&
            again && strcmp(again, text) == 0;
  free(text);
  free(again);
  kir_free(back);
  return ok ? NULL : why;
}

#endif
