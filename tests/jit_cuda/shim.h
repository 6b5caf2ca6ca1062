/*
** shim.h -- CUDA's execution model on the host, for the CUDA C that
** src/jit_cuda/render.c generates: gcc compiles that text with this file
** included first (-include shim.h) into a shared object, and hostexec.c
** runs it. Each block's threads are fibers (ucontext) run one at a time;
** TCK_SYNC() parks the calling fiber until every thread of the block has
** reached the barrier, as __syncthreads does. The index variables are this
** object's globals, which hostexec.c sets before it resumes each fiber.
*/
#ifndef TC_CUDA_SHIM_H
#define TC_CUDA_SHIM_H

#include <stdint.h>

#include "devtag.h"   /* TCK_HOST_PTR: a kernel's host entry's pointers */

struct tck_dim3 { unsigned x, y, z; };
struct tck_dim3 threadIdx, blockIdx, blockDim, gridDim;
void (*tck_sync_hook)(void);

#define TCK_KERNEL void
#define TCK_SHARED static   /* one block runs at a time */
#define TCK_SYNC() tck_sync_hook()
#define TCK_UNROLL   /* gcc unrolls as it judges */

#endif
