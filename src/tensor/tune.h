/*
** tune.h -- the numbers tc's own decisions use (table sizes, caches, retry
** counts, thresholds), in one place, each with why it is what it is.
** Settings a user may change are in the configuration (config.c, TC_*);
** a backend's code-shape constants (block sizes, lanes) stay with the code
** they shape.
*/
#ifndef TC_TUNE_H
#define TC_TUNE_H

/* Region table (cache/table.c): buckets of structure hashes. Regions of a
** program number in the tens to thousands; TC_REGIONS_MAX bounds them. */
#define TUNE_REGION_BUCKETS 1024

/* Kernel table (trace/kernels.c): buckets, by the key's first two hex
** digits (keys are uniform hashes). TC_KERNELS_MAX bounds the entries. */
#define TUNE_KERNEL_BUCKETS 256

/* Layouts a shape-dynamic plan keeps (trace/run.c): programs that vary a
** shape usually cycle through a few (batch sizes, sequence buckets). */
#define TUNE_DYNAMIC_LAYOUTS 4
/* ... and, apart, the layouts it had to plan again (their sizes related
** otherwise than the recipe's: a KV length equal to the head size). One
** costs about five derived ones, and such lengths recur with every new
** sequence a decoder starts. */
#define TUNE_BUILT_LAYOUTS 8

/* A realization also stores the values the program holds that are at most
** 1/TUNE_SMALL_OUTPUT_DIV of the largest value asked for (trace/region.c):
** per-row statistics are one per row, so a sixteenth covers rows of 16 and
** up while keeping full-size temporaries out. */
#define TUNE_SMALL_OUTPUT_DIV 16
/* ... and a held value up to this many elements whose recomputation would
** run a matmul again (decoding's residual stream): storing 64 KiB costs
** less than any matmul it saves (trace/region.c, add_survivors). */
#define TUNE_COSTLY_SURVIVOR_MAX 16384

/* Fusion attempts for a region of n nodes (fuse/plan.c): each retry stores
** or copies one operand, or splits a kernel that hit a limit (halving the
** expression that was too large), so a few per node always suffice. */
#define TUNE_FUSE_ATTEMPTS(n) (8 + 2 * (n))

/* Free lists of records (tensor/tensor.c, trace/record.c): enough for the
** handles and nodes of one iteration of a small loop to be reused. */
#define TUNE_HANDLE_CACHE 64
#define TUNE_NODE_CACHE 256

/* A thread's scope stack (tensor/scope.c) is kept between outermost scopes
** up to this many slots: a loop that opens a scope per iteration would
** otherwise allocate and free it every time; a bigger one goes back. */
#define TUNE_SCOPE_KEEP_SLOTS 4096

/* Op-level replay (trace/replay.c): the tapes kept (one per region
** structure, least recently made goes), the largest region taped, and the
** runs in a row that may leave a tape's replay before it is turned off
** (a program whose ops differ each time pays the failed tries no more). */
#define TUNE_REPLAY_TAPES 16
#define TUNE_REPLAY_MAX_OPS 512
#define TUNE_REPLAY_MAX_INPUTS 32
#define TUNE_REPLAY_MISSES 8

#endif
