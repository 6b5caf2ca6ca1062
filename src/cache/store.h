/*
** store.h -- the on-disk kernel store (DESIGN.md principles 6 and 7):
** compiled kernels survive the process, several processes share one
** directory, a person can inspect it with tc-dump.
**
** Layout under the root (TC_CACHE_DIR, else $XDG_CACHE_HOME/tc, else
** ~/.cache/tc), versioned so a future format never misreads this one:
**
**   <root>/v2/                       0700
**   <root>/v2/<kk>/<key>.meta        0600  the entry: metadata (below)
**   <root>/v2/<kk>/<key>-<sum>.so    0600  the artifact it names (a CPU
**                                          kernel's shared object), or
**   <root>/v2/<kk>/<key>-<sum>.cubin 0600  a CUDA kernel's (backend
**                                          "cuda"): the cubin NVRTC made,
**                                          then the key marker, below
**
** <key> is 32 hex digits (xxh3-128 of the canonical kernel IR, backend,
** target, codegen version and compiler version); <kk> its first two digits;
** <sum> 32 hex digits, xxh3-128 of the key's 32 digits followed by the
** artifact's bytes, so an artifact is bound to its key: copied or renamed
** under another key its checksum no longer matches. Artifacts are
** immutable and content-named; an entry is its .meta, which names one
** artifact. Every file is written to a temporary name in the same
** directory and renamed into place, so readers never see a partial file and
** N processes storing the same key all succeed, leaving one entry. (v1,
** before tc-kir-3, summed the bytes alone; its entries are never read.)
**
** The disk is untrusted input (README.md, "Trust model"). Before any code
** of an entry is loaded: every directory on the way is a real directory
** (not a link), owned by this user and not writable by group or others;
** the meta and the artifact are regular files (never a link, FIFO, device
** or directory: such names are judged by lstat and never opened) with the
** same ownership and modes; the meta parses (bounded lines and numbers,
** every field present) and its key is the key of its file name; the
** artifact has the recorded size and key-bound checksum and carries the
** key marker (below). A truncated, corrupted, mismatched or wrong-typed
** entry is removed (with one log line) and the caller compiles again; one
** owned by someone else or writable by others is left alone and not
** loaded.
**
** The key marker: from codegen tc-kir-3 on, every artifact embeds the
** NUL-terminated string STORE_KEY_MARKER followed by its 32-digit key (the
** JIT exports it as `const char tc_kernel_key[]` and checks it with dlsym
** after dlopen). The store checks it in the bytes it reads for the
** checksum: an artifact carrying the marker of any other key is refused
** always; one carrying no marker is refused once STORE_MARKER_REQUIRED is
** 1, which the change that makes the JIT embed the marker sets. A cubin
** has no symbol of ours to carry it, so a CUDA artifact (backend "cuda",
** named <key>-<sum>.cubin) is the cubin followed by a NUL and the marker
** (src/trace/cuda_kernels.c writes it, and loads a cubin only with the
** marker at its very end, which it strips).
**
** The .meta format: "name: value" lines up to a blank line, then sections
** "--- ir ---", "--- source ---", "--- guards ---" each running to the
** next section line or the end. Names (every one required, each once; a
** line at most STORE_LINE_MAX bytes, no control characters): key,
** artifact, checksum (hex), bytes, backend, target, compiler, codegen,
** kind, shape, regions, ops, instrs, compile_ms, created, last_used (unix
** seconds), hits. Unknown names (a newer writer's) are ignored.
*/
#ifndef TC_STORE_H
#define TC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define STORE_KEY_LEN 32          /* hex digits */
#define STORE_LAYOUT "v2"         /* the directory under the root */
/* The code generator's version, part of every key. From tc-kir-3 on an
** artifact must carry STORE_KEY_MARKER<key> (see above); tc-kir-4: loops
** vectorize behind any number of alias checks (jit_cpu/jit.c), so no
** kernel compiled scalar before is loaded again; tc-kir-5: column mode
** (jit_cpu/emit.c), so a column reduction compiled row by row is
** compiled again; tc-kir-6: a transposing MAP walks tiles (emit.c,
** map_tiled), so none compiled walking rows is loaded again. */
#define STORE_CODEGEN_VERSION "tc-kir-6"
/* The marker every artifact embeds, NUL-terminated, as
**   const char tc_kernel_key[] = STORE_KEY_MARKER "<32 hex digits>";
** The JIT and the store use this one spelling. */
#define STORE_KEY_MARKER "tc-kernel-key:"
/* 1: an artifact without any key marker is refused (0 accepted one; an
** artifact with another key's marker never is). The JIT embeds the marker
** in every artifact it writes (jit_cpu.h, JCPU_KEY_MARKER). */
#ifndef STORE_MARKER_REQUIRED
#define STORE_MARKER_REQUIRED 1
#endif
#define STORE_LINE_MAX 4096       /* longest meta header line, newline and
                                     all */
#define STORE_ARTIFACT_MAX (256u << 20)   /* a bigger artifact is not ours */

typedef struct {
  char key[STORE_KEY_LEN + 1];
  char artifact[128];             /* file name of the .so or .cubin, in
                                     the entry's directory */
  char checksum[STORE_KEY_LEN + 1];
  uint64_t bytes;                 /* artifact size */
  char backend[16];               /* "cpu" or "cuda" */
  char target[32];                /* "x86-64-v3", "sm_90" */
  char compiler[64];              /* "libgccjit 12.2.0", "nvrtc 13.0" */
  char codegen[32];               /* STORE_CODEGEN_VERSION */
  char kind[16];                  /* "map" / "rows" (+ " dynamic") */
  char shape[96];                 /* e.g. "[4096] row 4096" */
  char regions[256];              /* structure hashes (16 hex digits) of the
                                     regions it was compiled for, space
                                     separated; may be empty */
  char ops[512];                  /* the ops fused into it, in order, space
                                     separated: "MUL ADD EXP SUM"; may be
                                     empty */
  int instrs;
  double compile_ms;
  int64_t created, last_used;
  uint64_t hits;
  char *ir;                       /* owned, may be NULL */
  char *source;                   /* owned, may be NULL */
  char *guards;                   /* owned, may be NULL */
} store_meta;

void store_meta_free(store_meta *m);   /* frees the owned strings */

/* The key of a kernel: xxh3-128 of its parts, as hex. */
void store_key(const char *ir_text, const char *backend, const char *target,
               const char *compiler, char key[STORE_KEY_LEN + 1]);

/* Does the artifact (n bytes) embed STORE_KEY_MARKER<key> and its NUL?
** The JIT and tests build artifacts that do; the store checks every one. */
bool store_artifact_has_key(const void *bytes, size_t n, const char *key);

/* Override STORE_MARKER_REQUIRED for this process (tests); returns the
** previous setting. */
bool store_require_marker(bool on);

/* -- Opening the store ------------------------------------------------------ */

/* Open the store at root (NULL: from the environment: TC_CACHE=0 disables
** it, TC_CACHE_DIR, XDG_CACHE_HOME, HOME). Creates <root>/v2 with mode
** 0700. Returns 0, or -1 when the store cannot be used (disabled, not
** creatable, not a directory, not ours, unsafe permissions): the caller
** then keeps kernels in memory only; `why` says why in one line. */
int store_open(const char *root, char *why, size_t wlen);
/* The same, but creates nothing: -1 (why says so) when <root>/v2 does not
** exist. For tools that only inspect or maintain a store (tc-dump): only
** the compiling library creates one. */
int store_open_existing(const char *root, char *why, size_t wlen);
bool store_is_open(void);
const char *store_root(void);     /* "<root>/v2", or NULL */
void store_close(void);

/* -- Kernels ---------------------------------------------------------------- */

/* A fresh temporary path in key's directory for the backend to write the
** artifact to (then store_put renames it). 0 or -1. */
int store_tmp_path(const char *key, char *path, size_t len);

/* Look key up. On success returns 0, fills *m (caller frees with
** store_meta_free) and the verified artifact's full path, and records the
** hit (hits + 1, last_used = now). Returns -1 when absent, or when the
** entry was bad (then it has been removed and logged), or unsafe (left in
** place, logged, not loaded). Never blocks on a FIFO or follows a link. */
int store_get(const char *key, store_meta *m, char *so_path, size_t len);

/* store_get for an artifact the caller loads from memory (a cubin): the
** bytes it verified (malloc'd, *n of them; caller frees), so nothing is
** read twice. 0, or -1 as store_get. */
int store_get_bytes(const char *key, store_meta *m, void **bytes,
                    size_t *n);

/* Enter a compiled kernel: the artifact written at tmp_so is checked (a
** regular file; no other key's marker, and this key's once required),
** checksummed, renamed to its content name, and the meta (from *m: fill
** everything but key/artifact/checksum/bytes/created/last_used/hits)
** written atomically. Then the store is trimmed to TC_CACHE_MAX_MB if set.
** Returns 0, or -1 on a refused artifact or a write failure (disk full,
** read-only, no permission): tmp_so is gone either way and no temporary
** is left behind; the caller logs once and keeps the kernel in memory. */
int store_put(const char *key, const char *tmp_so, const store_meta *m);

/* -- Maintenance (tc-dump) --------------------------------------------------- */

/* Call fn for every entry (parsed meta) in the store; stops early when fn
** returns nonzero. Entries whose meta cannot be parsed are passed with
** m == NULL and their path. Returns the number visited, or -1. */
typedef int (*store_visit_fn)(void *ctx, const char *meta_path,
                              const store_meta *m);
int store_each(store_visit_fn fn, void *ctx);

/* Check every entry as store_get does (and remove unsafe ones too, since
** this is explicit); remove bad ones, names that are not regular files
** (unlinked, never opened), orphaned artifacts and stale temporaries.
** Reports one line per problem to `report` (may be NULL), saying whether
** it was removed. Returns the number of problems found, or -1 when the
** store cannot be read; *failed (may be NULL) counts those it could not
** remove (or left alone: a directory not ours). */
int store_verify(FILE *report, int *failed);

/* Evict least recently used entries until the store's files (metas,
** artifacts, temporaries: every byte, as store_size counts) take at most
** max_bytes; stale temporaries and orphaned artifacts go first. Returns
** bytes freed, or -1. */
int64_t store_prune(uint64_t max_bytes);

/* Remove every entry, artifact and temporary. Returns entries removed, or
** -1 when the store cannot be read; *failed (may be NULL) counts the
** names that could not be removed, each reported to `report` (may be
** NULL) with the reason. */
int store_clear(FILE *report, int *failed);

/* Totals: entries, artifact bytes, hits. */
void store_totals(uint64_t *entries, uint64_t *bytes, uint64_t *hits);

/* Every byte the store's files take (what TC_CACHE_MAX_MB caps), or -1. */
int64_t store_size(void);

#endif
