/*
** eager_cuda.h -- what the CUDA key (cuda.c) lends the layers above it:
** its kernel memo (one compiled function per kernel code), launches on tc's
** stream, device copies, and the device checks of a call. trace runs the
** plans of compiled CUDA regions with them, so a region's kernels and an
** eager op's kernels are one set, compiled once.
*/
#ifndef TC_EAGER_CUDA_H
#define TC_EAGER_CUDA_H

#include "eager.h"
#include "../fuse/kir.h"
#include "../jit_cuda/jit_cuda.h"

/* The device of call c: CUDA when any tensor of it is there (a 0-d CPU
** operand beside them included), else the CPU. Inline: trace asks it for
** every op it records. */
static inline int eager_call_device(const eager_call *c)
{
  for (int e = 0; e < c->nin; e++)
    if (c->in[e] && tensor_device_of(c->in[e]) == TC_DEV_CUDA)
      return TC_DEV_CUDA;
  return c->dst ? tensor_device_of(c->dst) : TC_DEV_CPU;
}

/* Check that c's tensors are on one device (0-d CPU operands aside: the
** error eager gives, naming c->fn) and make *dc: c with those 0-d operands
** copied to the device (new references in moved[], NULL elsewhere, for the
** caller to release). 0, or -1 with the error set and nothing to release. */
int eager_cuda_operands(const eager_call *c, eager_call *dc,
                        tc_tensor *moved[3]);

/* The compiled function of shape-dynamic kernel k: from the process's
** memo (by kir_code_hash, confirmed by kir_same_code), or rendered,
** compiled by NVRTC and loaded on a miss (ST_KERNELS_COMPILED counted).
** Kept for the process's life. NULL with the error set (naming fn). */
jcuda_function eager_cuda_kernel(const char *fn, const kir_kernel *k);

/* Launch f (compiled for k) over all of k's units on tc's stream, with
** bufs (device addresses), scalars and dims (kir_dyn_fill's layout);
** counts ST_KERNELS_LAUNCHED. 0, or -1 with the error set. */
int eager_cuda_launch(const char *fn, jcuda_function f, const kir_kernel *k,
                      char *const *bufs, const double *scal,
                      const int64_t *dims);

/* Copy src into dst (both on the device, same shape, any layouts),
** converting to dst's dtype; a write-back, so dst's version is not
** bumped. 0, or -1 with the error set. */
int eager_cuda_copy_into(tc_tensor *dst, tc_tensor *src);

#endif
