/*
** guards.h -- guard sets for a region's inputs: what must hold for a
** compiled region to be reused (principle 4). Build one from the inputs
** a region was compiled for; check it in tens of nanoseconds per input;
** hash it into the region key; explain in words which guard failed.
*/
#ifndef TC_GUARDS_H
#define TC_GUARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tensor/tensor.h"

/* What is guarded for one input. In a shape-dynamic set, sizes and strides
** are not compared; only rank, dtype, device and which dims are broadcast
** (size 1) or contiguous-innermost, since the kernel reads the rest. */
typedef struct {
  uint8_t dtype;
  uint8_t device;
  uint8_t ndim;
  int32_t alias;                   /* first earlier input on the same
                                      storage, or -1 (a region may have
                                      hundreds of inputs: not int8_t) */
  int64_t shape[TC_MAX_DIMS];
  int64_t stride[TC_MAX_DIMS];
} guard_input;

typedef struct {
  int n;
  bool dynamic;
  uint64_t key;                    /* hash of everything guarded */
  guard_input in[];                /* n entries */
} guard_set;

/* A guard set for these inputs; NULL on allocation failure. */
guard_set *guard_build(int n, const tc_tensor *const *ins, bool dynamic);
void guard_free(guard_set *g);
/* The key the inputs would have (same as guard_build(...)->key). */
uint64_t guard_key_of(int n, const tc_tensor *const *ins, bool dynamic);
/* Do the inputs satisfy every guard? */
bool guard_check(const guard_set *g, int n, const tc_tensor *const *ins);
/* Say which guard fails first, e.g. "input 0: size of dim 1 is 512, was
** compiled for 1024"; returns 0 and writes "ok" when all hold. */
int guard_explain(const guard_set *g, int n, const tc_tensor *const *ins,
                  char *buf, size_t len);
/* Do the inputs march on from `newer` as newer did from `older` (two
** static sets)? True when every size and stride steps by the amount it
** stepped last time, some size by a nonzero amount, with the same dtypes,
** ranks and sharing: a growing KV cache, say, whose next length will be
** new too. */
bool guard_sizes_march(const guard_set *older, const guard_set *newer,
                       int n, const tc_tensor *const *ins);
/* One line per input, for dumps and the cache metadata. */
void guard_dump(const guard_set *g, FILE *out);

#endif
