/*
** hostrun.h -- CUDA C on the host: compile a rendered kernel's text with
** gcc and shim.h into a shared object (cached by text), and run one of its
** functions as every thread of a grid of blocks: blocks one after another,
** each block's threads as fibers that meet at every barrier (TCK_SYNC),
** launches alternating between forward and reverse order (a race shows as
** a result that differs; TC_FAKE_ORDER=forward or reverse fixes it).
** Shared by hostexec.c (the TC_TEST_CUDA launch hook) and the fake CUDA
** driver (fake/), so both run the text exactly as it is written.
*/
#ifndef TC_HOSTRUN_H
#define TC_HOSTRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_module hr_module;

/* The compiled object for CUDA C `src` (compiled on first sight, then
** kept for the process). NULL with a reason. Thread-safe. */
hr_module *hr_compile(const char *src, char *why, size_t wlen);
/* A function or variable of the object, or NULL. */
void *hr_symbol(hr_module *m, const char *name);

/* Run call(ctx) as each thread of `grid` blocks of `block` threads, with
** the module's index variables set (threadIdx and the rest). 0, or -1
** with a reason (a bad configuration, barrier divergence, no memory).
** Launches are serialized. */
int hr_launch(hr_module *m, unsigned grid, unsigned block,
              void (*call)(void *ctx), void *ctx, char *why, size_t wlen);

/* Remove the work directory of compiled objects (also done at exit). */
void hr_cleanup(void);

/* The work directory (made on first use, removed by hr_cleanup), for
** other files of the same run; NULL with a reason. Thread-safe. */
const char *hr_workdir(char *why, size_t wlen);
/* Write text to path; 0 or -1. */
int hr_write_file(const char *path, const char *text);
/* FNV-1a of a string: the key the caches of CUDA C text use. */
uint64_t hr_hash(const char *s);
/* A file's whole text (malloc'd), or NULL. hr_read_bytes: its bytes
** (NUL after them too) and their count. */
char *hr_read_file(const char *path);
char *hr_read_bytes(const char *path, size_t *len);

/* The cache shared by processes (TC_TEST_CUDA_CACHE=DIR, or NULL when
** unset): compiled objects, and the texts that NVRTC and ptxas accepted.
** hr_cache_has: does DIR/name hold exactly text? hr_cache_put: keep text
** as DIR/name (atomically; best effort). */
const char *hr_cache_dir(void);
bool hr_cache_has(const char *name, const char *text);
void hr_cache_put(const char *name, const char *text);
/* A verdict on text (NVRTC's, ptxas's): its entry's name "<hash>.<what>"
** into name, and whether the cache holds text there, i.e. whether the
** verdict was given before (hr_cache_put(name, text) keeps one). */
bool hr_cache_accepted(const char *text, const char *what, char *name,
                       size_t nlen);

#endif
