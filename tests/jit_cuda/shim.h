/*
** shim.h -- CUDA's execution model on the host, for the CUDA C that
** src/jit_cuda/render.c generates: gcc compiles that text with this file
** included first (-include shim.h) into a shared object, and hostexec.c
** runs it. Each block's threads are fibers (hostrun.c) run one at a time;
** TCK_SYNC() parks the calling fiber until every thread of the block has
** reached the barrier, as __syncthreads does; TCK_VEC aborts on a vector
** access that is not aligned, as a device faults. The index variables are this
** object's globals, which hostexec.c sets before it resumes each fiber.
*/
#ifndef TC_CUDA_SHIM_H
#define TC_CUDA_SHIM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "devtag.h"   /* TCK_HOST_PTR: a kernel's host entry's pointers */

struct tck_dim3 { unsigned x, y, z; };
struct tck_dim3 threadIdx, blockIdx, blockDim, gridDim;
void (*tck_sync_hook)(void);

#define TCK_KERNEL void
#define TCK_SHARED static   /* one block runs at a time */
#define TCK_SYNC() tck_sync_hook()
#define TCK_UNROLL   /* gcc unrolls as it judges */

/* A vector load or store (render.c's vector MAP loop): a device faults on
** one that is not aligned to its type, and so does this. */
static inline void *tck_vec_aligned(const void *p, unsigned long align)
{
  if ((uintptr_t)p % align != 0) {   /* abort: the test dies, as cmocka
                                        would resume a trap mid-fiber */
    fprintf(stderr, "shim: a vector access at %p, not aligned to %lu\n", p,
            align);
    abort();
  }
  return (void *)p;
}
#define TCK_VEC(T, p) (*(T *)tck_vec_aligned((p), _Alignof(T)))

#endif
