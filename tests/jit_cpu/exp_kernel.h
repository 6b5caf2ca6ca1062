/*
** exp_kernel.h -- a small kernel for tests of the compile path (the JIT
** worker, the kernel table): out = exp(x) * c + x over n f32, so each c
** is a kernel of its own. Allocated with calloc: free() it.
*/
#ifndef TC_TEST_EXP_KERNEL_H
#define TC_TEST_EXP_KERNEL_H

#include <stdlib.h>

#include "../../src/fuse/kir.h"

static kir_kernel *exp_kernel(int64_t n, double c)
{
  kir_kernel *k = calloc(1, sizeof *k);
  assert_non_null(k);
  k->kind = KIR_MAP;
  k->ndim = 1;
  k->size[0] = n;
  k->nbufs = 2;
  k->buf[0] = (kir_buf){ .role = KIR_IN, .dtype = TC_F32, .stride = { 1 } };
  k->buf[1] = (kir_buf){ .role = KIR_OUT, .dtype = TC_F32, .stride = { 1 } };
  int x = kir_load(k, 0);
  int e = kir_emit(k, KOP_EXP, TC_F32, x, -1, -1);
  int m = kir_emit(k, KOP_MUL, TC_F32, e, kir_const(k, TC_F32, c), -1);
  int a = kir_emit(k, KOP_ADD, TC_F32, m, x, -1);
  assert_true(a >= 0);
  k->npasses = 1;
  k->pass[0] = (kir_pass){ KIR_PASS_STORE, 0, 1, a, -1 };
  return k;
}

#endif
